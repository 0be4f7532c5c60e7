//! Azure RBAC as ARM enforces it on the calls cutover makes: role assignments per principal and
//! scope, deny assignments, linked access checks on load-balancer and pool PUTs, and the
//! `Microsoft.Authorization/permissions` API. Facts: `/work/shared/contracts/azure-production.md`
//! (sections 1, 2 and 6; tags [V] verified, [O] observed, [I] inferred are the contract's).
//!
//! **Permissive default.** With no role assignment configured the simulator grants every action
//! to every principal (the behaviour before this module existed, which the other tests rely on).
//! As soon as one role assignment is configured, every principal gets exactly what its
//! assignments grant. Deny assignments apply in both modes.
//!
//! Evaluation (contract 2.4, 2.5, 2.7):
//! - an assignment applies at its scope and every scope below it (scope strings compared
//!   case-insensitively, as a path prefix on `/` boundaries);
//! - a role grants an action when one of its `Actions` matches and none of *its own*
//!   `NotActions` does (NotActions are evaluated per role, never across roles [V: ARM-AUTH]);
//! - action patterns are case-insensitive globs where `*` matches any sequence, `/` included
//!   (`Microsoft.Network/*/read`) [V: RBAC role-definitions];
//! - a deny assignment whose scope covers the request, whose `actions` match and `notActions`
//!   do not, and which names the principal (or everyone) and does not exclude it, refuses the
//!   call even when a role grants it [V: RBAC overview].

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The action the permissions API itself needs (contract 2.6 [V]); without it the simulator
/// answers 403 `AuthorizationFailed` (what ARM answers is unknown: pessimistic, contract 2.6).
pub const PERMISSIONS_READ: &str = "Microsoft.Authorization/permissions/read";

/// The api-versions the simulator serves for the permissions API (contract 2.2 [V]).
pub const PERMISSIONS_API_VERSIONS: &[&str] = &["2015-07-01", "2022-04-01", "2022-05-01-preview"];

/// Linked-access join actions (contract 1.3): which action ARM checks on a resource an LB or
/// pool PUT body references.
pub const JOIN_PUBLIC_IP: &str = "Microsoft.Network/publicIPAddresses/join/action";
pub const JOIN_PUBLIC_IP_PREFIX: &str = "Microsoft.Network/publicIPPrefixes/join/action";
pub const JOIN_SUBNET: &str = "Microsoft.Network/virtualNetworks/subnets/join/action";
pub const JOIN_VNET_LB: &str = "Microsoft.Network/virtualNetworks/joinLoadBalancer/action";
pub const JOIN_SUBNET_LB: &str =
    "Microsoft.Network/virtualNetworks/subnets/joinLoadBalancer/action";
pub const JOIN_NAT_RULE: &str = "Microsoft.Network/loadBalancers/inboundNatRules/join/action";
pub const JOIN_GATEWAY_FRONTEND: &str =
    "Microsoft.Network/loadBalancers/frontendIPConfigurations/join/action";

/// Actions a custom role may name in the namespaces the simulator knows (`Microsoft.Network`,
/// `Microsoft.Authorization`), from the RBAC operations catalog (contract section 0, [RBAC-*]
/// `permissions/networking.md` and `resource-provider-operations`). ARM refuses a role
/// definition that names an action that does not exist ("does not match any of the actions
/// supported by the providers", contract 2.9 [O: DOCS16190]); the simulator refuses such a
/// definition in those two namespaces. Only the actions cutover's calls can touch are listed;
/// a definition naming another real action of these namespaces is refused too (extend the list
/// with its catalog entry).
pub const KNOWN_ACTIONS: &[&str] = &[
    "Microsoft.Network/loadBalancers/read",
    "Microsoft.Network/loadBalancers/write",
    "Microsoft.Network/loadBalancers/delete",
    "Microsoft.Network/loadBalancers/backendAddressPools/read",
    "Microsoft.Network/loadBalancers/backendAddressPools/write",
    "Microsoft.Network/loadBalancers/backendAddressPools/delete",
    "Microsoft.Network/loadBalancers/backendAddressPools/join/action",
    "Microsoft.Network/loadBalancers/frontendIPConfigurations/read",
    "Microsoft.Network/loadBalancers/frontendIPConfigurations/join/action",
    "Microsoft.Network/loadBalancers/inboundNatRules/read",
    "Microsoft.Network/loadBalancers/inboundNatRules/join/action",
    "Microsoft.Network/loadBalancers/probes/read",
    "Microsoft.Network/loadBalancers/probes/join/action",
    "Microsoft.Network/locations/operations/read",
    "Microsoft.Network/locations/operationResults/read",
    "Microsoft.Network/networkInterfaces/read",
    "Microsoft.Network/networkInterfaces/write",
    "Microsoft.Network/networkInterfaces/join/action",
    "Microsoft.Network/publicIPAddresses/read",
    "Microsoft.Network/publicIPAddresses/join/action",
    "Microsoft.Network/publicIPPrefixes/read",
    "Microsoft.Network/publicIPPrefixes/join/action",
    "Microsoft.Network/virtualNetworks/read",
    "Microsoft.Network/virtualNetworks/joinLoadBalancer/action",
    "Microsoft.Network/virtualNetworks/subnets/read",
    "Microsoft.Network/virtualNetworks/subnets/join/action",
    "Microsoft.Network/virtualNetworks/subnets/joinLoadBalancer/action",
    "Microsoft.Authorization/permissions/read",
    "Microsoft.Authorization/roleAssignments/read",
    "Microsoft.Authorization/roleDefinitions/read",
    "Microsoft.Authorization/denyAssignments/read",
];

/// A role definition in the file format of `az role definition create --role-definition`
/// (contract 6, [RBAC-*] custom-roles-cli): `Name`, `IsCustom`, `Description`, `Actions`,
/// `NotActions`, `DataActions`, `NotDataActions`, `AssignableScopes`. camelCase keys are accepted
/// too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RoleDefinition {
    #[serde(alias = "name", alias = "roleName")]
    pub name: String,
    #[serde(default, alias = "isCustom")]
    pub is_custom: bool,
    #[serde(default, alias = "description")]
    pub description: String,
    #[serde(default, alias = "actions")]
    pub actions: Vec<String>,
    #[serde(default, alias = "notActions")]
    pub not_actions: Vec<String>,
    #[serde(default, alias = "dataActions")]
    pub data_actions: Vec<String>,
    #[serde(default, alias = "notDataActions")]
    pub not_data_actions: Vec<String>,
    #[serde(default, alias = "assignableScopes")]
    pub assignable_scopes: Vec<String>,
}

impl RoleDefinition {
    fn builtin(name: &str, actions: &[&str], not_actions: &[&str]) -> Self {
        Self {
            name: name.to_owned(),
            is_custom: false,
            description: String::new(),
            actions: actions.iter().map(|s| (*s).to_owned()).collect(),
            not_actions: not_actions.iter().map(|s| (*s).to_owned()).collect(),
            data_actions: Vec::new(),
            not_data_actions: Vec::new(),
            assignable_scopes: vec!["/".into()],
        }
    }

    /// Whether this role alone grants `action` (an Actions match, no NotActions match).
    pub fn grants(&self, action: &str) -> bool {
        self.actions.iter().any(|p| action_matches(p, action))
            && !self.not_actions.iter().any(|p| action_matches(p, action))
    }

    /// Why ARM would refuse this definition: an action in a namespace the simulator knows that
    /// is not in its catalog ([`KNOWN_ACTIONS`]), or no assignable scope.
    pub fn validate(&self) -> Result<(), String> {
        if self.name.trim().is_empty() {
            return Err("a role definition needs a Name".into());
        }
        if self.is_custom && self.assignable_scopes.is_empty() {
            return Err(format!(
                "role '{}': AssignableScopes is required for a custom role",
                self.name
            ));
        }
        for a in self.actions.iter().chain(&self.not_actions) {
            let lower = a.to_ascii_lowercase();
            let known_ns = lower.starts_with("microsoft.network/")
                || lower.starts_with("microsoft.authorization/");
            if known_ns
                && !a.contains('*')
                && !KNOWN_ACTIONS.iter().any(|k| k.eq_ignore_ascii_case(a))
            {
                return Err(format!(
                    "role '{}': the action '{a}' does not match any of the actions supported by the providers",
                    self.name
                ));
            }
        }
        Ok(())
    }
}

/// The built-in roles the simulator knows (actions as Microsoft's built-in roles page lists
/// them; Network Contributor: `Microsoft.Network/*` and `Microsoft.Authorization/*/read`
/// [contract 6, V]).
pub fn builtin_roles() -> Vec<RoleDefinition> {
    vec![
        RoleDefinition::builtin("Owner", &["*"], &[]),
        RoleDefinition::builtin(
            "Contributor",
            &["*"],
            &[
                "Microsoft.Authorization/*/Delete",
                "Microsoft.Authorization/*/Write",
                "Microsoft.Authorization/elevateAccess/Action",
                "Microsoft.Blueprint/blueprintAssignments/write",
                "Microsoft.Blueprint/blueprintAssignments/delete",
                "Microsoft.Compute/galleries/share/action",
            ],
        ),
        RoleDefinition::builtin("Reader", &["*/read"], &[]),
        RoleDefinition::builtin(
            "Network Contributor",
            &[
                "Microsoft.Authorization/*/read",
                "Microsoft.Insights/alertRules/*",
                "Microsoft.Network/*",
                "Microsoft.ResourceHealth/availabilityStatuses/read",
                "Microsoft.Resources/deployments/*",
                "Microsoft.Resources/subscriptions/resourceGroups/read",
                "Microsoft.Support/*",
            ],
            &[],
        ),
    ]
}

/// A role assignment: `principalId` (the object id or the client/app id of the caller; a
/// token carries both, `oid` and `appid`) holds role `role` (a role name) at `scope`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RoleAssignment {
    pub principal_id: String,
    pub role: String,
    pub scope: String,
}

/// A deny assignment (contract 1.8, 1.9, 2.7): refuses `actions` (minus `notActions`) at
/// `scope` and below to `principals` (empty = everyone, ARM's `SystemDefined` "Everyone"
/// principal) except `excludePrincipals`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DenyAssignment {
    pub name: String,
    #[serde(default)]
    pub id: String,
    pub scope: String,
    pub actions: Vec<String>,
    #[serde(default)]
    pub not_actions: Vec<String>,
    #[serde(default)]
    pub principals: Vec<String>,
    #[serde(default)]
    pub exclude_principals: Vec<String>,
}

impl DenyAssignment {
    /// AKS's node resource group lockdown (`--nrg-lockdown-restriction-level ReadOnly`, default
    /// in AKS Automatic): resources in the node resource group "can be viewed but not modified"
    /// [V: AKS-NRG]. Modelled as a deny of every action but reads (`*`, NotActions `*/read`) for
    /// everyone at the group, except `exempt` (AKS's own identities). Whether a user identity can
    /// be exempted is not documented (contract 7.5: assume not). Name and id shaped like a
    /// recorded refusal in a locked `MC_` group (code index id 37715562196): "kubernetes.azure.com/
    /// <guid>/<guid>: node resource group deny assignment created by Azure Kubernetes Services for
    /// nrg-lockdown, see: https://aka.ms/aks/nrg_lockdown", scope with a lower-case
    /// `resourcegroups`.
    pub fn nrg_lockdown(sub: &str, rg: &str, exempt: Vec<String>) -> Self {
        let id = uuid::Uuid::new_v4();
        Self {
            name: format!(
                "kubernetes.azure.com/{}/{id}: node resource group deny assignment created by Azure Kubernetes Services for nrg-lockdown, see: https://aka.ms/aks/nrg_lockdown",
                uuid::Uuid::new_v4()
            ),
            id: id.simple().to_string(),
            scope: format!("/subscriptions/{sub}/resourcegroups/{rg}"),
            actions: vec!["*".into()],
            not_actions: vec!["*/read".into()],
            principals: Vec::new(),
            exclude_principals: exempt,
        }
    }

    fn applies(&self, ids: &[&str], action: &str, scope: &str) -> bool {
        scope_covers(&self.scope, scope)
            && self.actions.iter().any(|p| action_matches(p, action))
            && !self.not_actions.iter().any(|p| action_matches(p, action))
            && (self.principals.is_empty() || self.principals.iter().any(|p| named(p, ids)))
            && !self.exclude_principals.iter().any(|p| named(p, ids))
    }
}

fn named(p: &str, ids: &[&str]) -> bool {
    ids.iter().any(|i| i.eq_ignore_ascii_case(p))
}

fn yes() -> bool {
    true
}

/// The simulator's authorization configuration (`rbac` in a seed, `PUT /_sim/rbac`,
/// [`crate::ArmSim::set_rbac`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rbac {
    /// Custom role definitions (the built-in Owner, Contributor, Reader and Network Contributor
    /// are always known).
    #[serde(default)]
    pub role_definitions: Vec<RoleDefinition>,
    /// Empty = permissive: every principal may do everything (see the module doc).
    #[serde(default)]
    pub role_assignments: Vec<RoleAssignment>,
    #[serde(default)]
    pub deny_assignments: Vec<DenyAssignment>,
    /// Whether a backend-pool PUT is also linked-checked on the LB's frontends (public IPs,
    /// prefixes, subnets) and inbound NAT rules. Unverified (contract 1.5, 7.1: the one recorded
    /// pool refusal named only the pool's VNet); the default is the pessimistic `true`.
    #[serde(default = "yes")]
    pub pool_put_checks_frontends: bool,
}

impl Default for Rbac {
    fn default() -> Self {
        Self {
            role_definitions: Vec::new(),
            role_assignments: Vec::new(),
            deny_assignments: Vec::new(),
            pool_put_checks_frontends: true,
        }
    }
}

/// Why a call is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No role grants the action at the scope.
    NotGranted,
    /// A deny assignment refuses it.
    Denied(Box<DenyAssignment>),
}

impl Rbac {
    /// Whether role assignments are enforced (any configured); otherwise everything is granted.
    pub fn enforcing(&self) -> bool {
        !self.role_assignments.is_empty()
    }

    /// Refuses definitions ARM would refuse and assignments of unknown roles.
    pub fn validate(&self) -> Result<(), String> {
        for d in &self.role_definitions {
            d.validate()?;
        }
        for a in &self.role_assignments {
            if self.role(&a.role).is_none() {
                return Err(format!(
                    "role assignment of unknown role '{}' (define it in roleDefinitions)",
                    a.role
                ));
            }
            if !a.scope.starts_with('/') {
                return Err(format!(
                    "role assignment scope '{}' is not an ARM scope",
                    a.scope
                ));
            }
        }
        Ok(())
    }

    /// A role by name (custom first, then built-in), case-insensitively.
    pub fn role(&self, name: &str) -> Option<RoleDefinition> {
        self.role_definitions
            .iter()
            .find(|d| d.name.eq_ignore_ascii_case(name))
            .cloned()
            .or_else(|| {
                builtin_roles()
                    .into_iter()
                    .find(|d| d.name.eq_ignore_ascii_case(name))
            })
    }

    /// The roles assigned to the principal (any of `ids`) at `scope` or above.
    pub fn roles_at(&self, ids: &[&str], scope: &str) -> Vec<RoleDefinition> {
        self.role_assignments
            .iter()
            .filter(|a| named(&a.principal_id, ids) && scope_covers(&a.scope, scope))
            .filter_map(|a| self.role(&a.role))
            .collect()
    }

    /// Whether a role grants `action` at `scope` (always in permissive mode).
    pub fn grants(&self, ids: &[&str], action: &str, scope: &str) -> bool {
        !self.enforcing() || self.roles_at(ids, scope).iter().any(|r| r.grants(action))
    }

    /// The deny assignment refusing `action` at `scope`, if any.
    pub fn denial(&self, ids: &[&str], action: &str, scope: &str) -> Option<&DenyAssignment> {
        self.deny_assignments
            .iter()
            .find(|d| d.applies(ids, action, scope))
    }

    /// Whether ARM lets the principal perform `action` at `scope`.
    pub fn check(&self, ids: &[&str], action: &str, scope: &str) -> Result<(), Refusal> {
        if !self.grants(ids, action, scope) {
            return Err(Refusal::NotGranted);
        }
        match self.denial(ids, action, scope) {
            Some(d) => Err(Refusal::Denied(Box::new(d.clone()))),
            None => Ok(()),
        }
    }

    /// The permissions API's `value` for the principal at `scope` (contract 2.3, 2.4, 2.7):
    /// one entry per role assignment at the scope or above (not de-duplicated; whether ARM
    /// merges them is unknown), with the role's actions and notActions. Deny assignments are not
    /// reflected ([I], contract 2.7: no source says the API subtracts them), so this can say yes
    /// where the write gets 403. Permissive mode answers one `*` entry.
    pub fn permissions(&self, ids: &[&str], scope: &str) -> Vec<Value> {
        let entry = |r: &RoleDefinition| {
            json!({
                "actions": r.actions,
                "notActions": r.not_actions,
                "dataActions": r.data_actions,
                "notDataActions": r.not_data_actions,
            })
        };
        if !self.enforcing() {
            return vec![entry(&RoleDefinition::builtin("Owner", &["*"], &[]))];
        }
        self.roles_at(ids, scope).iter().map(entry).collect()
    }
}

/// Case-insensitive glob: `*` matches any sequence, `/` included (contract 2.5).
pub fn action_matches(pattern: &str, action: &str) -> bool {
    let p: Vec<u8> = pattern.bytes().map(|b| b.to_ascii_lowercase()).collect();
    let a: Vec<u8> = action.bytes().map(|b| b.to_ascii_lowercase()).collect();
    // Iterative wildcard match with backtracking to the last star.
    let (mut pi, mut ai) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ai < a.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ai));
            pi += 1;
        } else if pi < p.len() && p[pi] == a[ai] {
            pi += 1;
            ai += 1;
        } else if let Some((sp, sa)) = star {
            pi = sp + 1;
            ai = sa + 1;
            star = Some((sp, sa + 1));
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == b'*' {
        pi += 1;
    }
    pi == p.len()
}

/// Whether an assignment at `assigned` applies at `scope`: the same scope or one below it,
/// compared case-insensitively on `/` boundaries (`/` is the root).
pub fn scope_covers(assigned: &str, scope: &str) -> bool {
    let a = assigned.trim_end_matches('/').to_ascii_lowercase();
    let s = scope.trim_end_matches('/').to_ascii_lowercase();
    a.is_empty() || s == a || s.starts_with(&format!("{a}/"))
}

/// The resource-group scope of an ARM id (`/subscriptions/s/resourceGroups/rg`), if it has one.
pub fn resource_group_scope(id: &str) -> Option<String> {
    let segs: Vec<&str> = id.split('/').filter(|s| !s.is_empty()).collect();
    match segs.as_slice() {
        [s, sub, r, rg, ..]
            if s.eq_ignore_ascii_case("subscriptions")
                && r.eq_ignore_ascii_case("resourceGroups") =>
        {
            Some(format!("/subscriptions/{sub}/resourceGroups/{rg}"))
        }
        _ => None,
    }
}

/// One linked reference: the join action ARM checks on the referenced resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Linked {
    pub action: &'static str,
    pub scope: String,
}

fn id_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn push(out: &mut Vec<Linked>, action: &'static str, scope: Option<&str>) {
    if let Some(scope) = scope {
        let l = Linked {
            action,
            scope: scope.trim_end_matches('/').to_owned(),
        };
        if !out
            .iter()
            .any(|x| x.action == l.action && x.scope.eq_ignore_ascii_case(&l.scope))
        {
            out.push(l);
        }
    }
}

/// Linked references of a load balancer's frontends and inbound NAT rules (`props` is the LB's
/// `properties`; `lb_id` names the NAT rules), contract 1.3:
/// - frontend `publicIPAddress` → `publicIPAddresses/join/action` [O: AKS1945; V: CPA-PERM];
/// - frontend `publicIPPrefix` → `publicIPPrefixes/join/action` [V: AKS-ID];
/// - frontend `subnet` (internal LB) → `virtualNetworks/subnets/join/action` [O: AZ104, and a
///   recorded ILB refusal, code index id 15137565627];
/// - frontend `gatewayLoadBalancer` → `loadBalancers/frontendIPConfigurations/join/action`
///   [O: CLI28705];
/// - each inbound NAT rule → `loadBalancers/inboundNatRules/join/action` on the rule [V: PR7587].
///
/// References are re-checked on every PUT, changed or not (contract 1.4 [O]).
pub fn frontend_refs(props: &Value, lb_id: &str, out: &mut Vec<Linked>) {
    for f in props
        .get("frontendIPConfigurations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        push(
            out,
            JOIN_PUBLIC_IP,
            id_at(f, "/properties/publicIPAddress/id"),
        );
        push(
            out,
            JOIN_PUBLIC_IP_PREFIX,
            id_at(f, "/properties/publicIPPrefix/id"),
        );
        push(out, JOIN_SUBNET, id_at(f, "/properties/subnet/id"));
        push(
            out,
            JOIN_GATEWAY_FRONTEND,
            id_at(f, "/properties/gatewayLoadBalancer/id"),
        );
    }
    for r in props
        .get("inboundNatRules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let id = id_at(r, "/id").map(str::to_owned).or_else(|| {
            r.get("name")
                .and_then(Value::as_str)
                .map(|n| format!("{lb_id}/inboundNatRules/{n}"))
        });
        push(out, JOIN_NAT_RULE, id.as_deref());
    }
}

/// Linked references of one backend pool body (contract 1.3, 1.5): the pool's `virtualNetwork`
/// and entries' `virtualNetwork` → `virtualNetworks/joinLoadBalancer/action` [V: AKS-ID; O:
/// TF-POOL]; entries' `subnet` → `virtualNetworks/subnets/joinLoadBalancer/action` ([I], the
/// pessimistic reading of contract 1.3). NIC-based members are not checked (contract 1.6 [I]:
/// cloud-provider-azure's and AKS's role lists, which drive whole-LB PUTs on NIC-based pools,
/// name no NIC or pool join).
pub fn pool_refs(pool: &Value, out: &mut Vec<Linked>) {
    push(
        out,
        JOIN_VNET_LB,
        id_at(pool, "/properties/virtualNetwork/id"),
    );
    for e in pool
        .pointer("/properties/loadBalancerBackendAddresses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        push(out, JOIN_VNET_LB, id_at(e, "/properties/virtualNetwork/id"));
        push(out, JOIN_SUBNET_LB, id_at(e, "/properties/subnet/id"));
    }
}

/// Every linked reference of a whole-LB PUT body (computed from the request body, not a diff:
/// contract 1 "What this means" for arm-sim).
pub fn lb_body_refs(body: &Value, lb_id: &str) -> Vec<Linked> {
    let mut out = Vec::new();
    let props = body.get("properties").cloned().unwrap_or(Value::Null);
    frontend_refs(&props, lb_id, &mut out);
    for p in props
        .get("backendAddressPools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        pool_refs(p, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_are_case_insensitive_and_span_slashes() {
        assert!(action_matches("*", "Microsoft.Network/loadBalancers/write"));
        assert!(action_matches(
            "*/read",
            "Microsoft.Network/loadBalancers/read"
        ));
        assert!(action_matches(
            "Microsoft.Network/*/read",
            "microsoft.network/loadbalancers/backendaddresspools/READ"
        ));
        assert!(action_matches(
            "Microsoft.CostManagement/*/query/*",
            "Microsoft.CostManagement/a/b/query/c"
        ));
        assert!(!action_matches(
            "*/read",
            "Microsoft.Network/loadBalancers/write"
        ));
        assert!(!action_matches(
            "Microsoft.Network/loadBalancers/read",
            "Microsoft.Network/loadBalancers/readx"
        ));
        assert!(action_matches(
            "Microsoft.Authorization/*/Write",
            "microsoft.authorization/roleassignments/write"
        ));
    }

    #[test]
    fn scopes_cover_themselves_and_below_on_segment_boundaries() {
        let rg = "/subscriptions/s/resourceGroups/RG";
        assert!(scope_covers(
            rg,
            "/subscriptions/s/resourcegroups/rg/providers/x/y/z"
        ));
        assert!(scope_covers(rg, "/subscriptions/s/resourceGroups/rg/"));
        assert!(!scope_covers(rg, "/subscriptions/s/resourceGroups/rg2"));
        assert!(!scope_covers(rg, "/subscriptions/s"));
        assert!(scope_covers("/", rg));
    }

    #[test]
    fn not_actions_apply_per_role_and_deny_assignments_win() {
        let rbac = Rbac {
            role_assignments: vec![
                RoleAssignment {
                    principal_id: "p".into(),
                    role: "Contributor".into(),
                    scope: "/subscriptions/s".into(),
                },
                RoleAssignment {
                    principal_id: "p".into(),
                    role: "Reader".into(),
                    scope: "/subscriptions/s/resourceGroups/rg".into(),
                },
            ],
            deny_assignments: vec![DenyAssignment::nrg_lockdown(
                "s",
                "MC_rg",
                vec!["aks".into()],
            )],
            ..Rbac::default()
        };
        let ids = ["p", "p-oid"];
        assert!(rbac.grants(
            &ids,
            "Microsoft.Network/loadBalancers/write",
            "/subscriptions/s/resourceGroups/x"
        ));
        // Contributor's NotActions; no other role grants it.
        assert!(!rbac.grants(
            &ids,
            "Microsoft.Authorization/roleAssignments/write",
            "/subscriptions/s"
        ));
        assert!(!rbac.grants(
            &["other"],
            "Microsoft.Network/loadBalancers/read",
            "/subscriptions/s"
        ));
        let mc = "/subscriptions/s/resourceGroups/MC_rg/providers/Microsoft.Network/loadBalancers/kubernetes";
        assert!(matches!(
            rbac.check(&ids, "Microsoft.Network/loadBalancers/write", mc),
            Err(Refusal::Denied(_))
        ));
        assert!(
            rbac.check(&ids, "Microsoft.Network/loadBalancers/read", mc)
                .is_ok()
        );
        assert!(
            rbac.check(&["aks"], "Microsoft.Network/loadBalancers/write", mc)
                .is_err(),
            "aks has no role here"
        );
        assert_eq!(
            rbac.permissions(&ids, "/subscriptions/s/resourceGroups/rg")
                .len(),
            2
        );
        assert_eq!(rbac.permissions(&ids, "/subscriptions/s").len(), 1);
        // Permissive when nothing is assigned; deny assignments still apply.
        let open = Rbac {
            deny_assignments: rbac.deny_assignments.clone(),
            ..Rbac::default()
        };
        assert!(
            open.check(
                &["x"],
                "Microsoft.Network/loadBalancers/write",
                "/subscriptions/s/resourceGroups/rg"
            )
            .is_ok()
        );
        assert!(
            open.check(&["x"], "Microsoft.Network/loadBalancers/write", mc)
                .is_err()
        );
        assert!(
            open.check(&["aks"], "Microsoft.Network/loadBalancers/write", mc)
                .is_ok()
        );
    }

    #[test]
    fn role_definitions_naming_unknown_actions_are_refused() {
        let mut d = RoleDefinition::builtin("r", &["Microsoft.Network/loadBalancers/wirte"], &[]);
        d.is_custom = true;
        assert!(
            d.validate()
                .unwrap_err()
                .contains("does not match any of the actions")
        );
        d.actions = vec![
            "Microsoft.Network/*/read".into(),
            "Microsoft.Compute/anything".into(),
        ];
        assert!(d.validate().is_ok());
        d.assignable_scopes.clear();
        assert!(d.validate().is_err());
    }

    #[test]
    fn references_come_from_frontends_pools_entries_and_nat_rules() {
        let body = json!({"properties": {
            "frontendIPConfigurations": [
                {"name": "a", "properties": {"publicIPAddress": {"id": "/pip/a"}}},
                {"name": "b", "properties": {"publicIPPrefix": {"id": "/prefix/b"}}},
                {"name": "c", "properties": {"subnet": {"id": "/vnet/v/subnets/s"}}},
                {"name": "d", "properties": {"subnet": {"id": "/VNET/v/subnets/s"}}}
            ],
            "inboundNatRules": [{"name": "ssh"}],
            "backendAddressPools": [
                {"name": "p", "properties": {"virtualNetwork": {"id": "/vnet/v"},
                  "loadBalancerBackendAddresses": [
                    {"name": "e", "properties": {"ipAddress": "10.0.0.1", "subnet": {"id": "/vnet/v/subnets/s"}}},
                    {"name": "n", "properties": {"networkInterfaceIPConfiguration": {"id": "/nic/ipc"}}}
                  ]}}
            ]
        }});
        let refs = lb_body_refs(&body, "/lb");
        let got: Vec<(&str, &str)> = refs.iter().map(|l| (l.action, l.scope.as_str())).collect();
        assert_eq!(
            got,
            vec![
                (JOIN_PUBLIC_IP, "/pip/a"),
                (JOIN_PUBLIC_IP_PREFIX, "/prefix/b"),
                (JOIN_SUBNET, "/vnet/v/subnets/s"),
                (JOIN_NAT_RULE, "/lb/inboundNatRules/ssh"),
                (JOIN_VNET_LB, "/vnet/v"),
                (JOIN_SUBNET_LB, "/vnet/v/subnets/s"),
            ]
        );
    }
}
