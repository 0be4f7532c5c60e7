//! What the preflight's reads mean for cutover: which pools it would manage, which it cannot,
//! and whether anything blocks a cut. Pure: facts in, a [`Report`] out.

use super::facts::{LbDoc, LbFacts, LbRead, Owner, PoolFacts, Refusal};
use crate::lb::doc::SkuClass;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Everything the preflight read.
#[derive(Debug, Clone, PartialEq)]
pub struct Survey {
    pub subscription: String,
    pub lb_resource_group: String,
    /// The api-version every call used, and whether ARM served it (None: no call got that far).
    pub api_version: String,
    pub api_version_served: Option<bool>,
    pub lbs: Vec<LbFacts>,
    /// The NIC LIST of the node resource group (standalone VMs): count read, or refused.
    pub nics: Result<usize, NicsRead>,
    /// NICs of that list that could not be read (`lb::nic`).
    pub nics_unreadable: Vec<crate::lb::nic::Unreadable>,
}

/// Why the NIC LIST gave nothing.
#[derive(Debug, Clone, PartialEq)]
pub enum NicsRead {
    Refused(Refusal),
    Failed { code: String, message: String },
}

impl Default for Survey {
    fn default() -> Self {
        Self {
            subscription: String::new(),
            lb_resource_group: String::new(),
            api_version: String::new(),
            api_version_served: None,
            lbs: Vec::new(),
            nics: Ok(0),
            nics_unreadable: Vec::new(),
        }
    }
}

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Cutover cannot cut (the exit code is non-zero).
    Blocking,
    /// Cutover runs, but some entries or rules will not behave as a cut expects.
    Warning,
    /// Worth knowing; nothing to fix.
    Info,
}

impl Severity {
    pub fn label(self) -> &'static str {
        match self {
            Severity::Blocking => "BLOCKING",
            Severity::Warning => "WARNING",
            Severity::Info => "info",
        }
    }
}

/// One thing the preflight found.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Finding {
    pub severity: Severity,
    /// A short stable code (tests and scripts match on it).
    pub code: &'static str,
    pub message: String,
}

/// How cutover treats a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolVerdict {
    /// Admin state is written here and acts through at least one probed rule.
    Managed,
    /// Written, but no probed rule uses it: `Down` changes nothing (yet).
    ManagedNoEffect,
    /// Never written: only outbound rules use it.
    OutboundOnly,
    /// Never written: only inbound NAT rules use it (admin state does not act there).
    NatOnly,
    /// Never written: a pod-IP pool of a ServiceGateway load balancer (SKU `Service`).
    PodIp,
    /// Never written: the LB's SKU has no admin state (Basic) or is not one cutover manages.
    Unsupported,
}

impl PoolVerdict {
    pub fn label(self) -> &'static str {
        match self {
            PoolVerdict::Managed => "managed",
            PoolVerdict::ManagedNoEffect => "managed, no probed rule (Down has no effect)",
            PoolVerdict::OutboundOnly => "not written: outbound rules only",
            PoolVerdict::NatOnly => "not written: inbound NAT rules only",
            PoolVerdict::PodIp => "not a node pool: ServiceGateway pod IPs",
            PoolVerdict::Unsupported => "not written: SKU without admin state",
        }
    }

    /// Whether a cut acts on the pool's entries.
    pub fn written(self) -> bool {
        matches!(self, PoolVerdict::Managed | PoolVerdict::ManagedNoEffect)
    }
}

/// How a pool's entries are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolKind {
    NicBased,
    IpBased,
    Mixed,
    Empty,
}

impl PoolKind {
    pub fn of(pool: &PoolFacts) -> Self {
        let nic = pool.entries.iter().filter(|e| e.owner.nic_based()).count();
        match (nic, pool.entries.len()) {
            (_, 0) => PoolKind::Empty,
            (n, t) if n == t => PoolKind::NicBased,
            (0, _) => PoolKind::IpBased,
            _ => PoolKind::Mixed,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            PoolKind::NicBased => "NIC-based",
            PoolKind::IpBased => "IP-based",
            PoolKind::Mixed => "mixed NIC/IP",
            PoolKind::Empty => "empty",
        }
    }
}

/// The verdict for one pool of an LB with SKU `sku`.
pub fn pool_verdict(sku: &str, pool: &PoolFacts) -> PoolVerdict {
    match SkuClass::of(Some(sku)) {
        SkuClass::Service => return PoolVerdict::PodIp,
        SkuClass::Basic | SkuClass::Other => return PoolVerdict::Unsupported,
        SkuClass::Standard => {}
    }
    if pool.lb_rules == 0 && pool.outbound_rules > 0 && pool.nat_rules == 0 {
        PoolVerdict::OutboundOnly
    } else if pool.lb_rules == 0 && pool.nat_rules > 0 {
        PoolVerdict::NatOnly
    } else if pool.probed_rules == 0 {
        PoolVerdict::ManagedNoEffect
    } else {
        PoolVerdict::Managed
    }
}

/// The preflight's conclusions.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Report {
    pub findings: Vec<Finding>,
    /// Rendered text (what `--preflight` prints).
    pub text: String,
}

impl Report {
    /// True when something blocks a cut (the exit code is non-zero).
    pub fn blocking(&self) -> bool {
        self.findings
            .iter()
            .any(|f| f.severity == Severity::Blocking)
    }

    pub fn has(&self, code: &str) -> bool {
        self.findings.iter().any(|f| f.code == code)
    }
}

fn refusal_message(what: &str, r: &Refusal) -> String {
    format!(
        "{what}: ARM refused the read (HTTP {} {}): missing permission {}",
        r.status, r.code, r.action
    )
}

fn finding(severity: Severity, code: &'static str, message: String) -> Finding {
    Finding {
        severity,
        code,
        message,
    }
}

/// Findings about one LB that was read: its SKU, then (Standard only) its rules and pools.
fn lb_findings(name: &str, doc: &LbDoc, out: &mut Vec<Finding>) {
    out.extend(sku_finding(name, doc));
    if SkuClass::of(Some(&doc.sku)) != SkuClass::Standard {
        return;
    }
    for (rule, pools) in &doc.unprobed_rules {
        out.push(finding(
            Severity::Warning,
            "rule-without-probe",
            format!(
                "rule {name}/{rule} has no health probe: admin state does not act on its traffic (pools: {})",
                pools.join(", ")
            ),
        ));
    }
    for pool in &doc.pools {
        pool_findings(name, &doc.sku, pool, out);
    }
}

/// What an LB's SKU means for cutover, unless it is Standard.
fn sku_finding(name: &str, doc: &LbDoc) -> Option<Finding> {
    Some(match SkuClass::of(Some(&doc.sku)) {
        SkuClass::Basic => finding(
            Severity::Blocking,
            "basic-sku",
            format!(
                "load balancer {name} is Basic SKU: admin state exists on Standard only (Basic is retired since 30 Sep 2025); migrate it to Standard"
            ),
        ),
        SkuClass::Service => finding(
            Severity::Warning,
            "service-gateway",
            format!(
                "load balancer {name} has SKU Service (cloud-provider-azure ServiceGateway mode): its pools hold pod IPs, node admin state does not apply there"
            ),
        ),
        SkuClass::Other => finding(
            Severity::Warning,
            "unsupported-sku",
            format!("load balancer {name} has SKU {}: not managed", doc.sku),
        ),
        SkuClass::Standard => return None,
    })
}

/// Findings about one pool of a Standard LB: never written, Down without effect, NAT
/// traffic, entries no node can claim.
fn pool_findings(name: &str, sku: &str, pool: &PoolFacts, out: &mut Vec<Finding>) {
    let id = format!("{name}/{}", pool.name);
    match pool_verdict(sku, pool) {
        PoolVerdict::OutboundOnly => out.push(finding(
            Severity::Info,
            "outbound-only-pool",
            format!("pool {id} is used by outbound rules only: never written"),
        )),
        PoolVerdict::NatOnly => out.push(finding(
            Severity::Warning,
            "nat-only-pool",
            format!(
                "pool {id} is used by inbound NAT rules only: admin state is not supported with NAT rules, so it is never written"
            ),
        )),
        PoolVerdict::ManagedNoEffect if pool.lb_rules > 0 => out.push(finding(
            Severity::Warning,
            "pool-without-probed-rule",
            format!(
                "pool {id}: none of its {} rules has a probe, so Down has no effect",
                pool.lb_rules
            ),
        )),
        _ => {}
    }
    if pool.nat_rules > 0 && pool.lb_rules > 0 {
        out.push(finding(
            Severity::Warning,
            "pool-with-nat-rules",
            format!(
                "pool {id} is also used by {} inbound NAT rule(s): admin state does not act on NAT traffic",
                pool.nat_rules
            ),
        ));
    }
    let unmatched: Vec<&str> = pool
        .entries
        .iter()
        .filter(|e| matches!(e.owner, Owner::DetachedNic(_) | Owner::Unknown))
        .map(|e| e.name.as_str())
        .collect();
    if !unmatched.is_empty() {
        out.push(finding(
            Severity::Warning,
            "entries-without-vm",
            format!(
                "pool {id}: {} entr{} match no VM (NIC without a VM, or no address): no node can claim them ({})",
                unmatched.len(),
                if unmatched.len() == 1 { "y" } else { "ies" },
                unmatched
                    .iter()
                    .take(5)
                    .copied()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
}

/// Classifies what was read.
pub fn classify(s: &Survey) -> Report {
    let mut findings = Vec::new();
    let usable = lb_read_findings(s, &mut findings);
    no_managed_lb_finding(s, usable, &mut findings);
    nic_findings(s, &mut findings);
    api_version_finding(s, &mut findings);
    findings.sort();
    findings.dedup();
    let text = render(s, &findings);
    Report { findings, text }
}

/// Findings about every load balancer, by how its read went; returns how many of them are
/// managed Standard load balancers that were read.
fn lb_read_findings(s: &Survey, out: &mut Vec<Finding>) -> usize {
    let mut usable = 0;
    for lb in &s.lbs {
        match &lb.read {
            LbRead::Found(doc) => {
                if lb.managed && SkuClass::of(Some(&doc.sku)) == SkuClass::Standard {
                    usable += 1;
                }
                lb_findings(&lb.name, doc, out);
            }
            LbRead::NotFound => out.push(Finding {
                severity: Severity::Info,
                code: "lb-not-found",
                message: format!(
                    "load balancer {} not found in resource group {}",
                    lb.name, s.lb_resource_group
                ),
            }),
            LbRead::Refused(r) => out.push(Finding {
                severity: Severity::Blocking,
                code: "refused-read",
                message: refusal_message(&format!("load balancer {}", lb.name), r),
            }),
            LbRead::Failed { code, message } => out.push(Finding {
                severity: Severity::Blocking,
                code: "failed-read",
                message: format!("load balancer {}: read failed: {code}: {message}", lb.name),
            }),
        }
    }
    usable
}

/// Blocking when no managed Standard load balancer was read and no read was refused (a
/// refusal is its own finding).
fn no_managed_lb_finding(s: &Survey, usable: usize, out: &mut Vec<Finding>) {
    let refused_any = s.lbs.iter().any(|l| matches!(l.read, LbRead::Refused(_)));
    if usable == 0 && !refused_any {
        let names: Vec<&str> = s
            .lbs
            .iter()
            .filter(|l| l.managed)
            .map(|l| l.name.as_str())
            .collect();
        out.push(Finding {
            severity: Severity::Blocking,
            code: "no-managed-lb",
            message: format!(
                "no Standard load balancer cutover manages was found (looked for {} in resource group {})",
                names.join(", "),
                s.lb_resource_group
            ),
        });
    }
}

/// Findings about the node resource group's NIC listing: NICs not read, and the listing
/// refused or failed.
fn nic_findings(s: &Survey, out: &mut Vec<Finding>) {
    for u in &s.nics_unreadable {
        out.push(Finding {
            severity: Severity::Warning,
            code: "nic-unreadable",
            message: format!(
                "network interface {}: not read ({}); backend entries on it match no node",
                u.nic, u.reason
            ),
        });
    }
    match &s.nics {
        Ok(_) => {}
        Err(NicsRead::Refused(r)) => out.push(Finding {
            severity: Severity::Blocking,
            code: "refused-read",
            message: refusal_message("network interfaces of the node resource group", r),
        }),
        Err(NicsRead::Failed { code, message }) => out.push(Finding {
            severity: Severity::Blocking,
            code: "failed-read",
            message: format!("network interfaces: read failed: {code}: {message}"),
        }),
    }
}

/// Blocking when ARM does not serve the api-version the calls used.
fn api_version_finding(s: &Survey, out: &mut Vec<Finding>) {
    if s.api_version_served == Some(false) {
        out.push(Finding {
            severity: Severity::Blocking,
            code: "api-version-not-served",
            message: format!(
                "ARM does not serve api-version {} for Microsoft.Network here",
                s.api_version
            ),
        });
    }
}

/// The printed report: LBs and pools, entries per VM / per IP, then the findings.
fn render(s: &Survey, findings: &[Finding]) -> String {
    let mut t = String::new();
    render_header(&mut t, s);
    for lb in &s.lbs {
        render_lb(&mut t, lb);
    }
    render_owners(&mut t, s);
    render_findings(&mut t, findings);
    t
}

/// Subscription, resource group, api-version and the NIC read.
fn render_header(t: &mut String, s: &Survey) {
    let served = match s.api_version_served {
        Some(true) => "served",
        Some(false) => "NOT served",
        None => "not checked (no call answered)",
    };
    let _ = writeln!(
        t,
        "cutover preflight: subscription {}, load balancer resource group {}",
        s.subscription, s.lb_resource_group
    );
    let _ = writeln!(t, "api-version {}: {served}", s.api_version);
    match &s.nics {
        Ok(n) => {
            let _ = write!(t, "network interfaces (standalone VMs): {n} read");
            if !s.nics_unreadable.is_empty() {
                let _ = write!(t, ", {} unreadable", s.nics_unreadable.len());
            }
            let _ = writeln!(t);
        }
        Err(_) => {
            let _ = writeln!(t, "network interfaces (standalone VMs): not read");
        }
    }
    let _ = writeln!(t);
}

/// One load balancer and its pools, or why it could not be read.
fn render_lb(t: &mut String, lb: &LbFacts) {
    let role = if lb.managed { "configured" } else { "found" };
    match &lb.read {
        LbRead::Found(doc) => {
            let sku = if doc.sku.is_empty() {
                "(none)"
            } else {
                &doc.sku
            };
            let _ = writeln!(t, "load balancer {} ({role}, SKU {sku})", lb.name);
            for pool in &doc.pools {
                let _ = writeln!(
                    t,
                    "  pool {}: {}, {} entries, {} rules ({} probed), {} outbound, {} NAT: {}",
                    pool.name,
                    PoolKind::of(pool).label(),
                    pool.entries.len(),
                    pool.lb_rules,
                    pool.probed_rules,
                    pool.outbound_rules,
                    pool.nat_rules,
                    pool_verdict(&doc.sku, pool).label()
                );
            }
        }
        LbRead::NotFound => {
            let _ = writeln!(t, "load balancer {} ({role}): not found", lb.name);
        }
        LbRead::Refused(r) => {
            let _ = writeln!(
                t,
                "load balancer {} ({role}): refused ({} {})",
                lb.name, r.status, r.code
            );
        }
        LbRead::Failed { code, .. } => {
            let _ = writeln!(
                t,
                "load balancer {} ({role}): read failed ({code})",
                lb.name
            );
        }
    }
}

/// Entries per VM (NIC-based) or per IP (IP-based): without Kubernetes access the preflight
/// cannot name nodes; the service matches VMs by providerID and IPs by the Node's addresses.
fn render_owners(t: &mut String, s: &Survey) {
    let mut per_owner: BTreeMap<&Owner, Vec<String>> = BTreeMap::new();
    for lb in &s.lbs {
        let LbRead::Found(doc) = &lb.read else {
            continue;
        };
        for pool in &doc.pools {
            if !pool_verdict(&doc.sku, pool).written() {
                continue;
            }
            for e in &pool.entries {
                per_owner
                    .entry(&e.owner)
                    .or_default()
                    .push(format!("{}/{}", lb.name, pool.name));
            }
        }
    }
    let _ = writeln!(
        t,
        "\nentries a cut acts on, per VM or IP (no Kubernetes access: the service matches VMs by providerID and IPs by the Node's internal addresses):"
    );
    if per_owner.is_empty() {
        let _ = writeln!(t, "  (none)");
    }
    for (owner, pools) in &per_owner {
        let _ = writeln!(
            t,
            "  {owner}: {} entries ({})",
            pools.len(),
            pools.join(", ")
        );
    }
    let _ = writeln!(t);
}

/// The findings and the verdict.
fn render_findings(t: &mut String, findings: &[Finding]) {
    if findings.is_empty() {
        let _ = writeln!(t, "no findings");
    }
    for f in findings {
        let _ = writeln!(t, "{:8} {}: {}", f.severity.label(), f.code, f.message);
    }
    let blocking = findings.iter().any(|f| f.severity == Severity::Blocking);
    let _ = writeln!(
        t,
        "\nresult: {}",
        if blocking {
            "BLOCKED (cutover cannot cut until the blocking findings are fixed)"
        } else {
            "ok"
        }
    );
}

#[cfg(test)]
mod tests {
    use super::super::facts::EntryFacts;
    use super::*;

    fn mk_entry(name: &str, owner: Owner) -> EntryFacts {
        EntryFacts {
            name: name.into(),
            owner,
        }
    }

    fn mk_pool(name: &str, rules: usize, probed: usize, out: usize, nat: usize) -> PoolFacts {
        PoolFacts {
            name: name.into(),
            lb_rules: rules,
            probed_rules: probed,
            outbound_rules: out,
            nat_rules: nat,
            entries: vec![mk_entry("e0", Owner::ScaleSetVm("ss".into(), "0".into()))],
        }
    }

    fn mk_survey(sku: &str, pools: Vec<PoolFacts>) -> Survey {
        Survey {
            subscription: "sub".into(),
            lb_resource_group: "rg".into(),
            api_version: "2024-03-01".into(),
            api_version_served: Some(true),
            lbs: vec![
                LbFacts {
                    name: "kubernetes".into(),
                    managed: true,
                    read: LbRead::Found(LbDoc {
                        sku: sku.into(),
                        unprobed_rules: vec![],
                        pools,
                    }),
                },
                LbFacts {
                    name: "kubernetes-internal".into(),
                    managed: true,
                    read: LbRead::NotFound,
                },
            ],
            nics: Ok(0),
            nics_unreadable: vec![],
        }
    }

    fn codes(r: &Report) -> Vec<&'static str> {
        r.findings.iter().map(|f| f.code).collect()
    }

    #[test]
    fn a_standard_lb_with_probed_pools_is_ok() {
        let r = classify(&mk_survey(
            "Standard",
            vec![mk_pool("kubernetes", 2, 2, 0, 0)],
        ));
        assert!(!r.blocking(), "{}", r.text);
        assert_eq!(codes(&r), vec!["lb-not-found"]);
        assert!(
            r.text
                .contains("vmss ss instance 0: 1 entries (kubernetes/kubernetes)")
        );
        assert!(r.text.contains("result: ok"));
    }

    #[test]
    fn an_unreadable_nic_is_a_warning_naming_it() {
        let mut s = mk_survey("Standard", vec![mk_pool("kubernetes", 2, 2, 0, 0)]);
        s.nics = Ok(3);
        s.nics_unreadable = vec![crate::lb::nic::Unreadable {
            nic:
                "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/n"
                    .into(),
            reason: "`properties.virtualMachine` has no `id`".into(),
        }];
        let r = classify(&s);
        assert!(!r.blocking(), "{}", r.text);
        assert_eq!(codes(&r), vec!["nic-unreadable", "lb-not-found"]);
        assert!(
            r.text
                .contains("network interfaces (standalone VMs): 3 read, 1 unreadable"),
            "{}",
            r.text
        );
        assert!(
            r.text.contains(
                "networkInterfaces/n: not read (`properties.virtualMachine` has no `id`)"
            ),
            "{}",
            r.text
        );
    }

    #[test]
    fn pool_verdicts_follow_rules_and_sku() {
        let t = |sku, p: PoolFacts| pool_verdict(sku, &p);
        assert_eq!(
            t("Standard", mk_pool("p", 1, 1, 1, 0)),
            PoolVerdict::Managed
        );
        assert_eq!(
            t("standard", mk_pool("p", 1, 0, 0, 0)),
            PoolVerdict::ManagedNoEffect
        );
        assert_eq!(
            t("", mk_pool("p", 0, 0, 0, 0)),
            PoolVerdict::ManagedNoEffect
        );
        assert_eq!(
            t("Standard", mk_pool("p", 0, 0, 1, 0)),
            PoolVerdict::OutboundOnly
        );
        assert_eq!(
            t("Standard", mk_pool("p", 0, 0, 0, 2)),
            PoolVerdict::NatOnly
        );
        assert_eq!(
            t("Standard", mk_pool("p", 0, 0, 1, 1)),
            PoolVerdict::NatOnly
        );
        assert_eq!(t("Service", mk_pool("p", 1, 1, 0, 0)), PoolVerdict::PodIp);
        assert_eq!(
            t("Basic", mk_pool("p", 1, 1, 0, 0)),
            PoolVerdict::Unsupported
        );
        assert_eq!(
            t("Gateway", mk_pool("p", 1, 1, 0, 0)),
            PoolVerdict::Unsupported
        );
    }

    #[test]
    fn each_problem_has_its_finding_and_severity() {
        struct Case {
            sku: &'static str,
            pools: Vec<PoolFacts>,
            code: &'static str,
            blocking: bool,
        }
        let cases = [
            Case {
                sku: "Basic",
                pools: vec![mk_pool("p", 1, 1, 0, 0)],
                code: "basic-sku",
                blocking: true,
            },
            Case {
                sku: "Service",
                pools: vec![mk_pool("p", 1, 0, 0, 0)],
                code: "service-gateway",
                // The only configured LB is not a node LB: nothing to manage.
                blocking: true,
            },
            Case {
                sku: "Standard",
                pools: vec![mk_pool("p", 1, 1, 0, 0), mk_pool("nat", 0, 0, 0, 1)],
                code: "nat-only-pool",
                blocking: false,
            },
            Case {
                sku: "Standard",
                pools: vec![mk_pool("p", 1, 1, 0, 0), mk_pool("out", 0, 0, 1, 0)],
                code: "outbound-only-pool",
                blocking: false,
            },
            Case {
                sku: "Standard",
                pools: vec![mk_pool("p", 2, 0, 0, 0)],
                code: "pool-without-probed-rule",
                blocking: false,
            },
        ];
        for c in cases {
            let r = classify(&mk_survey(c.sku, c.pools));
            assert!(r.has(c.code), "{}: {}", c.code, r.text);
            assert_eq!(r.blocking(), c.blocking, "{}: {}", c.code, r.text);
        }
    }

    #[test]
    fn unprobed_rules_and_entries_without_vm_are_named() {
        let mut s = mk_survey("Standard", vec![mk_pool("p", 2, 1, 0, 0)]);
        if let LbRead::Found(doc) = &mut s.lbs[0].read {
            doc.unprobed_rules.push(("r-udp".into(), vec!["p".into()]));
            doc.pools[0].entries.push(mk_entry(
                "orphan",
                Owner::DetachedNic("/x/networkinterfaces/n".into()),
            ));
        }
        let r = classify(&s);
        assert!(!r.blocking());
        assert!(
            r.has("rule-without-probe") && r.has("entries-without-vm"),
            "{}",
            r.text
        );
        assert!(r.text.contains("kubernetes/r-udp") && r.text.contains("orphan"));
    }

    #[test]
    fn refused_and_missing_reads_block() {
        let refusal = Refusal {
            action: "Microsoft.Network/loadBalancers/read".into(),
            status: 403,
            code: "AuthorizationFailed".into(),
            message: "no".into(),
        };
        let mut s = mk_survey("Standard", vec![]);
        s.lbs[0].read = LbRead::Refused(refusal.clone());
        let r = classify(&s);
        assert!(r.blocking());
        assert_eq!(codes(&r), vec!["refused-read", "lb-not-found"]);
        assert!(
            r.text
                .contains("missing permission Microsoft.Network/loadBalancers/read")
        );

        let mut s = mk_survey("Standard", vec![mk_pool("p", 1, 1, 0, 0)]);
        s.nics = Err(NicsRead::Refused(Refusal {
            action: "Microsoft.Network/networkInterfaces/read".into(),
            ..refusal
        }));
        assert!(classify(&s).blocking());

        let mut s = mk_survey("Standard", vec![]);
        s.lbs[0].read = LbRead::NotFound;
        let r = classify(&s);
        assert!(r.blocking() && r.has("no-managed-lb"), "{}", r.text);

        let mut s = mk_survey("Standard", vec![mk_pool("p", 1, 1, 0, 0)]);
        s.api_version_served = Some(false);
        assert!(classify(&s).has("api-version-not-served"));
    }
}
