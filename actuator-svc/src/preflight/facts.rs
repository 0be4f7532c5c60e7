//! What the preflight read, as plain data, and how a load balancer document becomes it. Pure.
//!
//! The entries come through the same streaming reader the pool index uses (`lb::doc`), so a
//! 5,000-node document is never held as a JSON tree; the LB's own facts (SKU, rules, NAT and
//! outbound references) come from a small typed view that skips the entries.

use crate::lb::doc::{self, EntryRef, EntrySink};
use crate::lb::ids::{self, IpConfigOwner, VmRef};
use crate::lb::index::NicMap;
use serde::Deserialize;
use std::net::IpAddr;

/// One load balancer the preflight looked at.
#[derive(Debug, Clone, PartialEq)]
pub struct LbFacts {
    pub name: String,
    /// Named by the configuration (cluster name, `loadBalancerName`, multi-SLB entries).
    pub managed: bool,
    pub read: LbRead,
}

/// The outcome of reading one resource.
#[derive(Debug, Clone, PartialEq)]
pub enum LbRead {
    Found(LbDoc),
    NotFound,
    /// 401/403: the credential lacks a permission.
    Refused(Refusal),
    /// Any other failure (throttled, 5xx, unreadable answer).
    Failed {
        code: String,
        message: String,
    },
}

/// A refused read: what was asked and what ARM said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The RBAC action the call needs (`Microsoft.Network/loadBalancers/read`).
    pub action: String,
    pub status: u16,
    /// ARM's error code (`AuthorizationFailed`, `InvalidAuthenticationToken`, ...).
    pub code: String,
    pub message: String,
}

/// A load balancer document, summarised.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LbDoc {
    /// `sku.name` (`Standard`, `Basic`, `Gateway`, `Service`); empty when absent.
    pub sku: String,
    /// Load-balancing rules without a health probe, with the pools they send to.
    pub unprobed_rules: Vec<(String, Vec<String>)>,
    pub pools: Vec<PoolFacts>,
}

/// One backend pool.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PoolFacts {
    pub name: String,
    /// Load-balancing rules using it, and how many of them have a probe.
    pub lb_rules: usize,
    pub probed_rules: usize,
    pub outbound_rules: usize,
    pub nat_rules: usize,
    pub entries: Vec<EntryFacts>,
}

/// One backend entry and whom it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryFacts {
    pub name: String,
    pub owner: Owner,
}

/// Whom an entry belongs to, as far as ARM alone can tell (no Kubernetes access).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Owner {
    /// A VMSS Uniform instance (`scale set`, `instance id`).
    ScaleSetVm(String, String),
    /// A standalone VM, through its NIC (`vm name`).
    Vm(String),
    /// A standalone NIC that no VM in the node resource group holds (lower-cased NIC ID).
    DetachedNic(String),
    /// An IP-based entry.
    Ip(IpAddr),
    /// Neither an ipConfiguration ID we can parse nor an IP address.
    Unknown,
}

impl Owner {
    /// NIC-based (the entry points at a NIC ipConfiguration).
    pub fn nic_based(&self) -> bool {
        matches!(
            self,
            Owner::ScaleSetVm(..) | Owner::Vm(_) | Owner::DetachedNic(_)
        )
    }
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Owner::ScaleSetVm(set, i) => write!(f, "vmss {set} instance {i}"),
            Owner::Vm(name) => write!(f, "vm {name}"),
            Owner::DetachedNic(nic) => write!(f, "nic {} (no VM)", last_segment(nic)),
            Owner::Ip(ip) => write!(f, "ip {ip}"),
            Owner::Unknown => f.write_str("unknown owner"),
        }
    }
}

fn last_segment(id: &str) -> &str {
    id.trim_end_matches('/').rsplit('/').next().unwrap_or(id)
}

/// The LB's own facts; entries are not declared, so serde skips them without keeping them.
#[derive(Deserialize, Default)]
struct Shell {
    #[serde(default)]
    sku: Option<Sku>,
    #[serde(default)]
    properties: Option<ShellProps>,
}

#[derive(Deserialize, Default)]
struct Sku {
    #[serde(default)]
    name: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ShellProps {
    #[serde(default)]
    backend_address_pools: Vec<ShellPool>,
    #[serde(default)]
    load_balancing_rules: Vec<ShellRule>,
}

/// Pools are matched to the streamed ones by position (both in document order).
#[derive(Deserialize, Default)]
struct ShellPool {
    #[serde(default)]
    properties: Option<ShellPoolProps>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ShellPoolProps {
    #[serde(default)]
    load_balancing_rules: Vec<SubResource>,
    #[serde(default)]
    outbound_rules: Vec<SubResource>,
    #[serde(default)]
    outbound_rule: Option<SubResource>,
    #[serde(default)]
    inbound_nat_rules: Vec<SubResource>,
}

#[derive(Deserialize, Default)]
struct ShellRule {
    #[serde(default)]
    name: String,
    #[serde(default)]
    properties: Option<ShellRuleProps>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ShellRuleProps {
    #[serde(default)]
    probe: Option<SubResource>,
    #[serde(default)]
    backend_address_pool: Option<SubResource>,
    #[serde(default)]
    backend_address_pools: Vec<SubResource>,
}

#[derive(Deserialize, Default, Clone)]
struct SubResource {
    #[serde(default)]
    id: String,
}

/// Collects entries per document pool number.
struct Entries<'a> {
    nics: &'a NicMap,
    pools: Vec<Vec<EntryFacts>>,
}

impl EntrySink for Entries<'_> {
    fn entry(&mut self, pool: usize, e: EntryRef<'_>) {
        if self.pools.len() <= pool {
            self.pools.resize_with(pool + 1, Vec::new);
        }
        let owner = owner_of(&e, self.nics);
        self.pools[pool].push(EntryFacts {
            name: e.name.to_owned(),
            owner,
        });
    }
}

/// Whom an entry belongs to: the index's ID rules (`lb::ids`), the NIC list for standalone NICs.
fn owner_of(e: &EntryRef<'_>, nics: &NicMap) -> Owner {
    if let Some(ipc) = e.ip_configuration_id.filter(|s| !s.is_empty()) {
        return match ids::parse_ip_configuration_id(ipc) {
            Some(IpConfigOwner::ScaleSetVm(VmRef::ScaleSetVm {
                scale_set,
                instance,
                ..
            })) => Owner::ScaleSetVm(scale_set, instance),
            Some(IpConfigOwner::Nic(nic)) => match nics.vm_of(&nic) {
                Some(VmRef::Vm { name, .. }) => Owner::Vm(name.clone()),
                Some(VmRef::ScaleSetVm {
                    scale_set,
                    instance,
                    ..
                }) => Owner::ScaleSetVm(scale_set.clone(), instance.clone()),
                None => Owner::DetachedNic(nic),
            },
            _ => Owner::Unknown,
        };
    }
    match e.ip_address.and_then(|s| s.parse().ok()) {
        Some(ip) => Owner::Ip(ip),
        None => Owner::Unknown,
    }
}

fn last_lower(id: &str) -> String {
    last_segment(id).to_ascii_lowercase()
}

/// Summarises a load balancer document (the body of a GET of the LB).
pub fn read_lb_doc(body: &[u8], nics: &NicMap) -> Result<LbDoc, doc::DocError> {
    let mut entries = Entries {
        nics,
        pools: Vec::new(),
    };
    let head = doc::read_lb(body, &mut entries)?;
    let shell: Shell =
        serde_json::from_slice(body).map_err(|e| doc::DocError::new(e.to_string()))?;
    let props = shell.properties.unwrap_or_default();
    // Pool (lower-cased name) -> (rules, probed rules), from the LB's own rules: NRP's
    // back-references on the pool do not say whether a rule has a probe.
    let mut unprobed_rules = Vec::new();
    let mut use_by_pool: std::collections::HashMap<String, (usize, usize)> = Default::default();
    for rule in &props.load_balancing_rules {
        let p = rule.properties.as_ref();
        let probed = p.is_some_and(|p| p.probe.as_ref().is_some_and(|s| !s.id.is_empty()));
        let mut pools: Vec<String> = p
            .map(|p| {
                p.backend_address_pool
                    .iter()
                    .chain(&p.backend_address_pools)
                    .map(|s| last_lower(&s.id))
                    .collect()
            })
            .unwrap_or_default();
        pools.sort();
        pools.dedup();
        for pool in &pools {
            let slot = use_by_pool.entry(pool.clone()).or_default();
            slot.0 += 1;
            slot.1 += usize::from(probed);
        }
        if !probed {
            unprobed_rules.push((rule.name.clone(), pools));
        }
    }
    let mut pools = Vec::with_capacity(head.pools.len());
    for (no, ph) in head.pools.iter().enumerate() {
        let sp = props.backend_address_pools.get(no);
        let pp = sp.and_then(|p| p.properties.as_ref());
        let (lb_rules, probed_rules) = use_by_pool
            .get(&ph.name.to_ascii_lowercase())
            .copied()
            // No rules in the document: trust the pool's own back-references.
            .unwrap_or_else(|| (pp.map_or(0, |p| p.load_balancing_rules.len()), 0));
        let outbound_rules = pp.map_or(0, |p| {
            p.outbound_rules
                .len()
                .max(usize::from(p.outbound_rule.is_some()))
        });
        pools.push(PoolFacts {
            name: ph.name.clone(),
            lb_rules,
            probed_rules,
            outbound_rules,
            nat_rules: pp.map_or(0, |p| p.inbound_nat_rules.len()),
            entries: std::mem::take(entries.pools.get_mut(no).unwrap_or(&mut Vec::new())),
        });
    }
    Ok(LbDoc {
        sku: shell.sku.and_then(|s| s.name).unwrap_or_default(),
        unprobed_rules,
        pools,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SUB: &str =
        "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/loadBalancers/lb";

    fn mk_lb(sku: &str) -> serde_json::Value {
        json!({
            "name": "lb",
            "sku": {"name": sku},
            "properties": {
                "backendAddressPools": [
                    {"name": "nic", "id": format!("{SUB}/backendAddressPools/nic"),
                     "properties": {"loadBalancerBackendAddresses": [
                        {"name": "g1", "properties": {"networkInterfaceIPConfiguration": {"id":
                            "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/ss/virtualMachines/3/networkInterfaces/n/ipConfigurations/ipconfig1"}}}],
                        "loadBalancingRules": [{"id": format!("{SUB}/loadBalancingRules/r1")}]}},
                    {"name": "ip", "id": format!("{SUB}/backendAddressPools/ip"),
                     "properties": {"loadBalancerBackendAddresses": [
                        {"name": "node-a", "properties": {"ipAddress": "10.0.0.4"}}],
                        "inboundNatRules": [{"id": format!("{SUB}/inboundNatRules/n1")}]}}
                ],
                "loadBalancingRules": [
                    {"name": "r1", "properties": {"probe": {"id": format!("{SUB}/probes/p")},
                     "backendAddressPool": {"id": format!("{SUB}/backendAddressPools/nic")}}},
                    {"name": "r2", "properties": {
                     "backendAddressPool": {"id": format!("{SUB}/backendAddressPools/NIC")}}}
                ]
            }
        })
    }

    #[test]
    fn a_document_gives_sku_rules_pools_and_owners() {
        let body = mk_lb("Standard").to_string();
        let d = read_lb_doc(body.as_bytes(), &NicMap::new()).unwrap();
        assert_eq!(d.sku, "Standard");
        assert_eq!(
            d.unprobed_rules,
            vec![("r2".to_string(), vec!["nic".to_string()])]
        );
        assert_eq!(d.pools.len(), 2);
        let nic = &d.pools[0];
        assert_eq!((nic.lb_rules, nic.probed_rules), (2, 1));
        assert_eq!(
            nic.entries[0].owner,
            Owner::ScaleSetVm("ss".into(), "3".into())
        );
        let ip = &d.pools[1];
        assert_eq!((ip.lb_rules, ip.nat_rules), (0, 1));
        assert_eq!(ip.entries[0].owner, Owner::Ip("10.0.0.4".parse().unwrap()));
    }

    #[test]
    fn standalone_nics_map_to_their_vm_or_to_none() {
        let nic_id = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/vm1-nic";
        let body = json!({"properties": {"backendAddressPools": [{"name": "p", "properties": {
            "loadBalancerBackendAddresses": [
                {"name": "a", "properties": {"networkInterfaceIPConfiguration": {"id": format!("{nic_id}/ipConfigurations/c")}}},
                {"name": "b", "properties": {"networkInterfaceIPConfiguration": {"id":
                    "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/gone/ipConfigurations/c"}}}
            ]}}]}})
        .to_string();
        let nics = crate::lb::index::nic_map(&[
            json!({"id": nic_id, "properties": {"virtualMachine": {"id":
            "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm1"}}}),
        ]);
        let d = read_lb_doc(body.as_bytes(), &nics).unwrap();
        let owners: Vec<_> = d.pools[0].entries.iter().map(|e| e.owner.clone()).collect();
        assert_eq!(owners[0], Owner::Vm("vm1".into()));
        assert!(matches!(&owners[1], Owner::DetachedNic(n) if n.ends_with("/gone")));
        assert!(read_lb_doc(b"{", &nics).is_err());
    }
}
