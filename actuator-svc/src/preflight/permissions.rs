//! The preflight's access check: does the identity hold every action docs/azure-access.md
//! lists, at the scope ARM checks it, for every load balancer cutover manages, including the
//! joins on every resource the LB document references (its linked scopes)?
//!
//! Data flow: GET each managed LB (raw body) → [`linked_refs`] (pure: frontends' public IPs,
//! prefixes, subnets and gateway frontends; IP-based pools' and entries' VNets and subnets; NAT
//! rules) → [`needs`] (pure: the (action, scope) pairs a write of that LB needs) → one call of
//! the permissions API per distinct scope (`GET {scope}/providers/Microsoft.Authorization/
//! permissions?api-version=2022-04-01`) → [`evaluate`] (pure: ARM's documented rule, per entry,
//! case-insensitive globs, azure-production.md 2.4, 2.5) → findings with the `az role
//! assignment create` that fixes each missing pair.
//!
//! The permissions API does not show deny assignments (2.7), so AKS's node resource group
//! lockdown is invisible to it. `--preflight-write-probe` proves a write instead: it PUTs each LB
//! back exactly as read with an `If-Match` no etag has; ARM checks roles, deny assignments and
//! linked access before the resource provider sees the request, which then refuses it with
//! 412. A refusal names the lockdown (`DenyAssignmentAuthorizationFailed` with AKS's
//! `nrg-lockdown` deny assignment), the missing join, an Azure Policy that denies the write
//! (`RequestDisallowedByPolicy`) or a `ReadOnly` lock (`ScopeLocked`).

use super::classify::{Finding, Report, Severity};
use crate::arm::access::{AccessKind, AccessRefusal};
use crate::arm::permissions::{PERMISSIONS_API_VERSION, Permission, Probe};
use crate::arm::{ArmClient, ArmError};
use crate::writer::Strategy;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

pub const LB_READ: &str = "Microsoft.Network/loadBalancers/read";
pub const LB_WRITE: &str = "Microsoft.Network/loadBalancers/write";
pub const POOL_WRITE: &str = "Microsoft.Network/loadBalancers/backendAddressPools/write";
pub const OPERATIONS_READ: &str = "Microsoft.Network/locations/operations/read";
pub const NICS_READ: &str = "Microsoft.Network/networkInterfaces/read";
pub const JOIN_NAT_RULE: &str = "Microsoft.Network/loadBalancers/inboundNatRules/join/action";
pub const JOIN_PUBLIC_IP: &str = "Microsoft.Network/publicIPAddresses/join/action";
pub const JOIN_PUBLIC_IP_PREFIX: &str = "Microsoft.Network/publicIPPrefixes/join/action";
pub const JOIN_SUBNET: &str = "Microsoft.Network/virtualNetworks/subnets/join/action";
pub const JOIN_VNET_LB: &str = "Microsoft.Network/virtualNetworks/joinLoadBalancer/action";
pub const JOIN_SUBNET_LB: &str =
    "Microsoft.Network/virtualNetworks/subnets/joinLoadBalancer/action";
pub const JOIN_GATEWAY_FRONTEND: &str =
    "Microsoft.Network/loadBalancers/frontendIPConfigurations/join/action";

pub const WRITER_ROLE: &str = "Cutover Load Balancer Writer";
pub const JOINER_ROLE: &str = "Cutover Network Joiner";

/// Case-insensitive glob: `*` matches any run of characters, `/` included (2.5).
pub fn action_matches(pattern: &str, action: &str) -> bool {
    let p = pattern.to_ascii_lowercase();
    let a = action.to_ascii_lowercase();
    let parts: Vec<&str> = p.split('*').collect();
    if parts.len() == 1 {
        return p == a;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !a.starts_with(first) || a.len() < first.len() + last.len() || !a.ends_with(last) {
        return false;
    }
    let mut rest = &a[first.len()..a.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

/// ARM's rule: allowed if some entry's `actions` match and that same entry's `notActions` do
/// not (2.4).
pub fn allowed(perms: &[Permission], action: &str) -> bool {
    perms.iter().any(|p| {
        p.actions.iter().any(|a| action_matches(a, action))
            && !p.not_actions.iter().any(|n| action_matches(n, action))
    })
}

/// One action a write needs at one scope, and why.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Need {
    pub scope: String,
    pub action: &'static str,
    /// What makes it needed ("frontend subnet of kubernetes-internal", ...).
    pub why: String,
}

impl Need {
    fn new(scope: &str, action: &'static str, why: impl Into<String>) -> Self {
        Need {
            scope: scope.to_owned(),
            action,
            why: why.into(),
        }
    }

    /// The role of docs/azure-access.md that grants it, if one does.
    pub fn role(&self) -> Option<&'static str> {
        match self.action {
            JOIN_GATEWAY_FRONTEND => None,
            JOIN_PUBLIC_IP
            | JOIN_PUBLIC_IP_PREFIX
            | JOIN_SUBNET
            | JOIN_VNET_LB
            | JOIN_SUBNET_LB => Some(JOINER_ROLE),
            _ => Some(WRITER_ROLE),
        }
    }
}

#[derive(Deserialize, Default)]
struct Id {
    #[serde(default)]
    id: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct FrontendProps {
    #[serde(rename = "publicIPAddress")]
    public_ip_address: Option<Id>,
    #[serde(rename = "publicIPPrefix")]
    public_ip_prefix: Option<Id>,
    subnet: Option<Id>,
    gateway_load_balancer: Option<Id>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct EntryProps {
    virtual_network: Option<Id>,
    subnet: Option<Id>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct PoolProps {
    virtual_network: Option<Id>,
    #[serde(default)]
    load_balancer_backend_addresses: Vec<Named<EntryProps>>,
}

#[derive(Deserialize, Default)]
struct Named<P> {
    #[serde(default)]
    name: String,
    properties: Option<P>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct LbProps {
    #[serde(default, rename = "frontendIPConfigurations")]
    frontend_ip_configurations: Vec<Named<FrontendProps>>,
    #[serde(default)]
    backend_address_pools: Vec<Named<PoolProps>>,
    #[serde(default)]
    inbound_nat_rules: Vec<serde::de::IgnoredAny>,
}

#[derive(Deserialize, Default)]
struct LbShell {
    properties: Option<LbProps>,
}

/// A referenced resource: its id, the join ARM checks on it, and what references it.
pub type LinkedRef = (String, &'static str, String);

/// The resources a whole-LB PUT of `body` references, each with the join ARM checks on it
/// (azure-production.md 1.3; every reference, changed or not, 1.4), and whether the LB has
/// inbound NAT rules (their join is checked on the LB itself).
pub fn linked_refs(body: &[u8]) -> Result<(Vec<LinkedRef>, bool), String> {
    let shell: LbShell = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let props = shell.properties.unwrap_or_default();
    let mut out = Vec::new();
    let mut add = |id: &Option<Id>, action: &'static str, why: String| {
        if let Some(id) = id.as_ref().filter(|i| !i.id.is_empty()) {
            out.push((id.id.clone(), action, why));
        }
    };
    for f in &props.frontend_ip_configurations {
        let Some(p) = &f.properties else { continue };
        let n = &f.name;
        add(
            &p.public_ip_address,
            JOIN_PUBLIC_IP,
            format!("public IP of frontend {n}"),
        );
        add(
            &p.public_ip_prefix,
            JOIN_PUBLIC_IP_PREFIX,
            format!("public IP prefix of frontend {n}"),
        );
        add(&p.subnet, JOIN_SUBNET, format!("subnet of frontend {n}"));
        add(
            &p.gateway_load_balancer,
            JOIN_GATEWAY_FRONTEND,
            format!("gateway load balancer chained to frontend {n}"),
        );
    }
    for pool in &props.backend_address_pools {
        let Some(p) = &pool.properties else { continue };
        let n = &pool.name;
        add(
            &p.virtual_network,
            JOIN_VNET_LB,
            format!("VNet of IP-based pool {n}"),
        );
        for e in &p.load_balancer_backend_addresses {
            let Some(ep) = &e.properties else { continue };
            add(
                &ep.virtual_network,
                JOIN_VNET_LB,
                format!("VNet of pool {n}'s entries"),
            );
            add(
                &ep.subnet,
                JOIN_SUBNET_LB,
                format!("subnet of pool {n}'s entries"),
            );
        }
    }
    out.sort();
    out.dedup_by(|a, b| a.0.eq_ignore_ascii_case(&b.0) && a.1 == b.1);
    Ok((out, !props.inbound_nat_rules.is_empty()))
}

/// Where the managed resources are (ARM ids).
#[derive(Debug, Clone)]
pub struct Scopes {
    pub lb_resource_group: String,
    pub node_resource_group: String,
}

/// Every (action, scope) a write of the LB `lb_id` needs (docs/azure-access.md): its own
/// read and write, polling at its resource group, the NIC list at the node resource group, the
/// NAT join on itself when it has NAT rules, and each join on a linked resource (a per-pool
/// write is checked on the frontends too: unverified, assumed, azure-production.md 1.5).
pub fn needs(
    lb: &str,
    lb_id: &str,
    scopes: &Scopes,
    strategy: Strategy,
    linked: &[LinkedRef],
    nat_rules: bool,
) -> Vec<Need> {
    let mut out = vec![
        Need::new(lb_id, LB_READ, format!("read {lb}")),
        match strategy {
            Strategy::WholeLb => Need::new(lb_id, LB_WRITE, format!("write {lb}")),
            Strategy::PerPool => Need::new(lb_id, POOL_WRITE, format!("write {lb}'s pools")),
        },
        Need::new(
            &scopes.lb_resource_group,
            OPERATIONS_READ,
            format!("track {lb}'s operations (resource group scope)"),
        ),
        Need::new(
            &scopes.node_resource_group,
            NICS_READ,
            "list the node resource group's NICs",
        ),
    ];
    if nat_rules {
        out.push(Need::new(
            lb_id,
            JOIN_NAT_RULE,
            format!("{lb} has inbound NAT rules"),
        ));
    }
    for (scope, action, why) in linked {
        out.push(Need::new(scope, action, why.clone()));
    }
    out
}

/// What the permissions API said at one scope.
#[derive(Debug, Clone)]
pub enum ScopeRead {
    Read(Vec<Permission>),
    /// 403 on the API itself: no role of the identity at or above this scope grants even
    /// `Microsoft.Authorization/permissions/read` (both cutover roles do).
    Refused(String),
    Failed(String),
}

/// The verdict for one need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Granted by a role (not proven: deny assignments, conditions, policies are invisible).
    Granted,
    Missing,
    /// The permissions API was refused there: assumed missing.
    MissingUnreadable,
    Unknown(String),
}

pub fn evaluate(need: &Need, read: Option<&ScopeRead>) -> Verdict {
    match read {
        Some(ScopeRead::Read(perms)) if allowed(perms, need.action) => Verdict::Granted,
        Some(ScopeRead::Read(_)) => Verdict::Missing,
        Some(ScopeRead::Refused(_)) => Verdict::MissingUnreadable,
        Some(ScopeRead::Failed(e)) => Verdict::Unknown(e.clone()),
        None => Verdict::Unknown("not read".into()),
    }
}

/// The command that grants `need` (the object id of the identity is `$OID`).
pub fn fix_command(need: &Need) -> String {
    match need.role() {
        Some(role) => format!(
            "az role assignment create --assignee-object-id \"$OID\" --assignee-principal-type ServicePrincipal --role \"{role}\" --scope \"{}\"",
            need.scope
        ),
        None => format!(
            "a custom role with {} assigned on {} (not in cutover's roles: only gateway-chained load balancers need it)",
            need.action, need.scope
        ),
    }
}

/// What the access check found, per load balancer.
#[derive(Debug, Clone, Default)]
pub struct Access {
    pub lbs: Vec<LbAccess>,
    pub reads: BTreeMap<String, ScopeRead>,
    /// Whether `--preflight-write-probe` ran.
    pub probed: bool,
    /// The load balancers not checked: not found, or their GET failed (why).
    pub unchecked: Vec<(String, String)>,
}

#[derive(Debug, Clone)]
pub struct LbAccess {
    pub lb: String,
    pub needs: Vec<Need>,
    /// Why the LB's references could not be listed.
    pub unreadable: Option<String>,
    pub probe: Option<Probe>,
}

fn scope_key(s: &str) -> String {
    s.trim_end_matches('/').to_ascii_lowercase()
}

/// Runs the check for the LBs `lbs` that exist (GETs them again for their raw documents).
pub async fn check(arm: &ArmClient, lbs: &[String], strategy: Strategy, probe: bool) -> Access {
    let s = arm.scope();
    let rg = |g: &str| format!("/subscriptions/{}/resourceGroups/{g}", s.subscription_id);
    let scopes = Scopes {
        lb_resource_group: rg(&s.lb_resource_group),
        node_resource_group: rg(&s.node_resource_group),
    };
    let mut access = Access {
        probed: probe,
        ..Access::default()
    };
    for lb in lbs {
        let body = match arm.get_lb(lb).await {
            Ok(Some(b)) => b,
            // Absent, or unreadable: the read findings say so already.
            Ok(None) => {
                access.unchecked.push((lb.clone(), "not found".into()));
                continue;
            }
            Err(e) => {
                access.unchecked.push((lb.clone(), e.reason()));
                continue;
            }
        };
        let mut la = LbAccess {
            lb: lb.clone(),
            needs: Vec::new(),
            unreadable: None,
            probe: None,
        };
        match linked_refs(&body) {
            Ok((linked, nat)) => {
                la.needs = needs(lb, &arm.lb_id(lb), &scopes, strategy, &linked, nat);
            }
            Err(e) => la.unreadable = Some(e),
        }
        for need in &la.needs {
            let key = scope_key(&need.scope);
            if access.reads.contains_key(&key) {
                continue;
            }
            let read = match arm.list_permissions(&need.scope).await {
                Ok(p) => ScopeRead::Read(p),
                Err(
                    e @ ArmError::Http {
                        status: 401 | 403, ..
                    },
                ) => ScopeRead::Refused(e.reason()),
                Err(e) => ScopeRead::Failed(e.reason()),
            };
            access.reads.insert(key, read);
        }
        if probe {
            la.probe = Some(arm.probe_write_lb(lb, body).await);
        }
        access.lbs.push(la);
    }
    access
}

fn finding(severity: Severity, code: &'static str, message: String) -> Finding {
    Finding {
        severity,
        code,
        message,
    }
}

/// The findings of the check.
pub fn findings(access: &Access) -> Vec<Finding> {
    let mut out = Vec::new();
    for la in &access.lbs {
        if let Some(e) = &la.unreadable {
            out.push(finding(
                Severity::Warning,
                "access-unchecked",
                format!(
                    "load balancer {}: its references could not be listed: {e}",
                    la.lb
                ),
            ));
        }
        for need in &la.needs {
            match evaluate(need, access.reads.get(&scope_key(&need.scope))) {
                Verdict::Granted => {}
                Verdict::Missing => out.push(finding(
                    Severity::Blocking,
                    "access-missing",
                    format!(
                        "load balancer {}: missing {} on {} ({}); fix: {}",
                        la.lb,
                        need.action,
                        need.scope,
                        need.why,
                        fix_command(need)
                    ),
                )),
                Verdict::MissingUnreadable => out.push(finding(
                    Severity::Blocking,
                    "access-missing",
                    format!(
                        "load balancer {}: missing {} on {} ({}): no role of the identity applies there (even the permissions API is refused); fix: {}",
                        la.lb,
                        need.action,
                        need.scope,
                        need.why,
                        fix_command(need)
                    ),
                )),
                Verdict::Unknown(e) => out.push(finding(
                    Severity::Warning,
                    "access-unknown",
                    format!(
                        "load balancer {}: could not check {} on {}: {e}",
                        la.lb, need.action, need.scope
                    ),
                )),
            }
        }
        if let Some(p) = &la.probe {
            out.extend(probe_finding(&la.lb, p));
        }
    }
    if !access.probed && !access.lbs.is_empty() {
        out.push(finding(
            Severity::Info,
            "lockdown-not-checked",
            "deny assignments (AKS's node resource group lockdown, default in AKS Automatic) are invisible to the permissions API: --preflight-write-probe proves a write without changing anything, or check `az aks show -g <rg> -n <cluster> --query nodeResourceGroupProfile.restrictionLevel` (ReadOnly = locked)".into(),
        ));
    }
    out
}

fn probe_finding(lb: &str, p: &Probe) -> Option<Finding> {
    Some(match p {
        Probe::Authorized => finding(
            Severity::Info,
            "write-probe-authorized",
            format!(
                "load balancer {lb}: ARM authorized a write (roles, deny assignments, linked access) and the resource provider refused the probe's etag (412): nothing changed"
            ),
        ),
        Probe::Accepted => finding(
            Severity::Warning,
            "write-probe-accepted",
            format!(
                "load balancer {lb}: the probe's PUT with an etag that cannot match was accepted (the document was written back unchanged): writes are authorized, but If-Match was not honoured"
            ),
        ),
        Probe::Refused(e) => match AccessRefusal::of(e) {
            Some(r) if r.kind == AccessKind::DenyAssignment && r.lockdown() => finding(
                Severity::Blocking,
                "nrg-lockdown",
                format!("load balancer {lb}: {}", r.summary()),
            ),
            Some(r) if r.kind == AccessKind::DenyAssignment => finding(
                Severity::Blocking,
                "deny-assignment",
                format!("load balancer {lb}: {}", r.summary()),
            ),
            Some(r) if r.kind == AccessKind::Policy => finding(
                Severity::Blocking,
                "policy-denied",
                format!("load balancer {lb}: {}", r.summary()),
            ),
            Some(r) if r.kind == AccessKind::Locked => finding(
                Severity::Blocking,
                "scope-locked",
                format!("load balancer {lb}: {}", r.summary()),
            ),
            Some(r) => finding(
                Severity::Blocking,
                "write-refused",
                format!(
                    "load balancer {lb}: the write probe was refused: {}",
                    r.summary()
                ),
            ),
            None => finding(
                Severity::Warning,
                "write-probe-inconclusive",
                format!("load balancer {lb}: the write probe ended {}", e.reason()),
            ),
        },
    })
}

/// The per-scope section of the report.
pub fn render(access: &Access) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\naccess (permissions API {PERMISSIONS_API_VERSION}; granted = by a role, deny assignments not shown):"
    );
    for la in &access.lbs {
        let _ = writeln!(t, "  load balancer {}:", la.lb);
        for need in &la.needs {
            let verdict = match evaluate(need, access.reads.get(&scope_key(&need.scope))) {
                Verdict::Granted => "granted".to_string(),
                Verdict::Missing => "MISSING".to_string(),
                Verdict::MissingUnreadable => {
                    "MISSING (permissions API refused at this scope)".to_string()
                }
                Verdict::Unknown(e) => format!("unknown ({e})"),
            };
            let _ = writeln!(t, "    {}: {verdict}", need.action);
            let _ = writeln!(t, "      on {} ({})", need.scope, need.why);
            if !matches!(
                evaluate(need, access.reads.get(&scope_key(&need.scope))),
                Verdict::Granted
            ) {
                let _ = writeln!(t, "      fix: {}", fix_command(need));
            }
        }
        match &la.probe {
            None => {}
            Some(Probe::Authorized) => {
                let _ = writeln!(
                    t,
                    "    write probe: authorized (412 on the etag, nothing changed)"
                );
            }
            Some(Probe::Accepted) => {
                let _ = writeln!(t, "    write probe: accepted (If-Match not honoured)");
            }
            Some(Probe::Refused(e)) => {
                let _ = writeln!(t, "    write probe: refused: {}", e.reason());
            }
        }
    }
    if access.lbs.iter().any(|la| {
        la.needs.iter().any(|n| {
            !matches!(
                evaluate(n, access.reads.get(&scope_key(&n.scope))),
                Verdict::Granted
            )
        })
    }) {
        let _ = writeln!(
            t,
            "  ($OID: the principal id of the identity, e.g. OID=$(az identity show -g <IDENTITY_RG> -n <IDENTITY_NAME> --query principalId -o tsv); role definitions: deploy/azure/)"
        );
    }
    t
}

/// Adds the check's findings and section to the read report, before its result line.
pub fn merge(report: &mut Report, access: &Access) {
    let new = findings(access);
    let cut = report.text.rfind("\nresult: ").unwrap_or(report.text.len());
    report.text.truncate(cut);
    if report.text.ends_with("no findings") && !new.is_empty() {
        let at = report.text.len() - "no findings".len();
        report.text.truncate(at);
    }
    for f in &new {
        let _ = writeln!(
            report.text,
            "{:8} {}: {}",
            f.severity.label(),
            f.code,
            f.message
        );
    }
    report.findings.extend(new);
    report.text.push_str(&render(access));
    let _ = writeln!(
        report.text,
        "\nresult: {}",
        if report.blocking() {
            "BLOCKED (cutover cannot cut until the blocking findings are fixed)"
        } else {
            "ok"
        }
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn perm(actions: &[&str], not: &[&str]) -> Permission {
        Permission {
            actions: actions.iter().map(|s| s.to_string()).collect(),
            not_actions: not.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn globs_span_slashes_and_ignore_case() {
        assert!(action_matches("*", LB_WRITE));
        assert!(action_matches("Microsoft.Network/*", JOIN_SUBNET));
        assert!(action_matches("microsoft.network/*/read", LB_READ));
        assert!(action_matches("*/read", OPERATIONS_READ));
        assert!(!action_matches("*/read", LB_WRITE));
        assert!(action_matches(
            "Microsoft.Network/*/join/action",
            JOIN_PUBLIC_IP
        ));
        assert!(!action_matches(
            "Microsoft.Network/*/join/action",
            JOIN_VNET_LB
        ));
        assert!(action_matches(LB_WRITE, &LB_WRITE.to_uppercase()));
        assert!(!action_matches(
            "Microsoft.Network/loadBalancers/*",
            JOIN_SUBNET
        ));
    }

    #[test]
    fn not_actions_apply_within_their_own_entry_only() {
        let contributor = perm(&["*"], &["Microsoft.Authorization/*/Write"]);
        let no_network = perm(&["*"], &["Microsoft.Network/*"]);
        assert!(allowed(std::slice::from_ref(&contributor), LB_WRITE));
        assert!(!allowed(std::slice::from_ref(&no_network), LB_WRITE));
        // another entry grants it: allowed (a NotActions entry is not a deny)
        assert!(allowed(&[no_network, perm(&[LB_WRITE], &[])], LB_WRITE));
        assert!(!allowed(&[perm(&["*/read"], &[])], JOIN_SUBNET));
        assert!(!allowed(&[], LB_READ));
    }

    #[test]
    fn linked_references_of_every_kind() {
        let body = json!({"properties": {
            "frontendIPConfigurations": [
                {"name": "pub", "properties": {"publicIPAddress": {"id": "/x/pip"}}},
                {"name": "pre", "properties": {"publicIPPrefix": {"id": "/x/prefix"}}},
                {"name": "int", "properties": {"subnet": {"id": "/net/vnet/subnets/a"}}},
                {"name": "gw", "properties": {"gatewayLoadBalancer": {"id": "/gw/fe"}}}
            ],
            "backendAddressPools": [
                {"name": "ip", "properties": {"virtualNetwork": {"id": "/net/vnet"},
                 "loadBalancerBackendAddresses": [
                    {"name": "e1", "properties": {"ipAddress": "10.0.0.4", "virtualNetwork": {"id": "/net/vnet"}}},
                    {"name": "e2", "properties": {"ipAddress": "10.0.0.5", "subnet": {"id": "/net/vnet/subnets/a"}}}]}},
                {"name": "nic", "properties": {"loadBalancerBackendAddresses": [
                    {"name": "n", "properties": {"networkInterfaceIPConfiguration": {"id": "/nic/ipc"}}}]}}
            ],
            "inboundNatRules": [{"name": "ssh"}]
        }})
        .to_string();
        let (refs, nat) = linked_refs(body.as_bytes()).unwrap();
        assert!(nat);
        let pairs: Vec<(&str, &str)> = refs.iter().map(|(s, a, _)| (s.as_str(), *a)).collect();
        assert_eq!(
            pairs,
            vec![
                ("/gw/fe", JOIN_GATEWAY_FRONTEND),
                ("/net/vnet", JOIN_VNET_LB),
                ("/net/vnet/subnets/a", JOIN_SUBNET),
                ("/net/vnet/subnets/a", JOIN_SUBNET_LB),
                ("/x/pip", JOIN_PUBLIC_IP),
                ("/x/prefix", JOIN_PUBLIC_IP_PREFIX),
            ]
        );
        let (none, nat) = linked_refs(b"{\"properties\":{}}").unwrap();
        assert!(none.is_empty() && !nat);
    }

    #[test]
    fn a_missing_join_is_blocking_and_names_its_fix() {
        let scopes = Scopes {
            lb_resource_group: "/subscriptions/s/resourceGroups/mc".into(),
            node_resource_group: "/subscriptions/s/resourceGroups/mc".into(),
        };
        let subnet = "/subscriptions/s/resourceGroups/net/providers/Microsoft.Network/virtualNetworks/v/subnets/a";
        let lb_id =
            "/subscriptions/s/resourceGroups/mc/providers/Microsoft.Network/loadBalancers/k";
        let needs = needs(
            "k",
            lb_id,
            &scopes,
            Strategy::WholeLb,
            &[(subnet.into(), JOIN_SUBNET, "subnet of frontend f".into())],
            false,
        );
        let writer = perm(
            &[
                LB_READ,
                LB_WRITE,
                OPERATIONS_READ,
                NICS_READ,
                "Microsoft.Authorization/permissions/read",
            ],
            &[],
        );
        let mut reads = BTreeMap::new();
        reads.insert(scope_key(lb_id), ScopeRead::Read(vec![writer.clone()]));
        reads.insert(
            scope_key(&scopes.lb_resource_group),
            ScopeRead::Read(vec![writer]),
        );
        reads.insert(scope_key(subnet), ScopeRead::Refused("403".into()));
        let access = Access {
            lbs: vec![LbAccess {
                lb: "k".into(),
                needs,
                unreadable: None,
                probe: None,
            }],
            reads,
            probed: false,
            unchecked: Vec::new(),
        };
        let f = findings(&access);
        let missing: Vec<&Finding> = f.iter().filter(|f| f.code == "access-missing").collect();
        assert_eq!(missing.len(), 1, "{f:?}");
        assert!(missing[0].message.contains(JOIN_SUBNET));
        assert!(
            missing[0]
                .message
                .contains(&format!("--role \"{JOINER_ROLE}\" --scope \"{subnet}\""))
        );
        assert!(f.iter().any(|f| f.code == "lockdown-not-checked"));
        let text = render(&access);
        assert!(
            text.contains("MISSING (permissions API refused at this scope)"),
            "{text}"
        );
    }
}
