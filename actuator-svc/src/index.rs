//! The pool index: which backend entries of which pools belong to a node. Pure.
//!
//! Built from the pools of every managed load balancer as ARM lists them (one LIST or GET per
//! LB, never per node), typed through `azure_mgmt_network`'s models, plus the NIC list of the
//! node resource group for VMs whose NICs are standalone resources (VMSS Flex, availability
//! sets). Matching rules (`design.md` section 5):
//! - NIC-based entries: the ipConfiguration ID's VM equals the node's VM (providerID);
//! - IP-based entries: the entry's `ipAddress` is one of the node's internal IPs (v4 or v6);
//! - all IDs compare case-insensitively.
//!
//! Pools referenced only by outbound rules (AKS's `aksOutboundBackendPool`) are skipped: admin
//! state only acts through load-balancing rules with a health probe, so writing it there would
//! cost an ARM operation and change nothing.

use crate::arm::ids::{self, IpConfigOwner, VmRef};
use azure_mgmt_network::package_2024_03::models::{
    BackendAddressPool, load_balancer_backend_address_properties_format::AdminState as ArmAdmin,
};
use serde_json::Value;
use std::collections::HashMap;
use std::net::IpAddr;

/// An admin state as read from or written to ARM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Admin {
    /// `None`, or the field absent.
    None,
    Down,
    Up,
    /// A value this version does not know (the enum is modelAsString).
    Other,
}

impl Admin {
    /// The ARM string.
    pub fn as_arm(self) -> &'static str {
        match self {
            Admin::None | Admin::Other => "None",
            Admin::Down => "Down",
            Admin::Up => "Up",
        }
    }
}

/// The node as the actuator knows it (from the proto's `NodeRef`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeSpec {
    pub name: String,
    pub uid: String,
    pub provider_id: String,
    pub internal_ips: Vec<IpAddr>,
}

/// What identifies an entry's owner.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Owner {
    Vm(VmRef),
    /// A standalone NIC (lower-cased ID) whose VM comes from the NIC list.
    Nic(String),
    Ip(IpAddr),
    Unknown,
}

/// One backend entry, located.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedEntry {
    pub lb: String,
    pub lb_id: String,
    pub pool: String,
    pub entry: String,
    pub ip_configuration_id: String,
    pub ip_address: String,
    pub admin: Admin,
    /// False while the pool's last operation is running or failed (`provisioningState` other
    /// than `Succeeded`): what the entry says is then a goal, not a fact, and a failed goal
    /// must be written again.
    pub settled: bool,
    owner: Owner,
}

/// The pools of one load balancer as last read.
#[derive(Debug, Clone)]
pub struct LbPools {
    pub name: String,
    pub id: String,
    /// Raw pool objects, kept raw so a write sends back every field, including those the
    /// 2024-03 models do not know (entry `id`/`etag`/`type`, newer properties).
    pub pools: Vec<Value>,
}

/// NIC ID (lower-cased) -> the VM it is attached to.
pub type NicMap = HashMap<String, VmRef>;

/// Parses one raw pool into the SDK model; `None` when it does not fit the model at all.
fn typed(pool: &Value) -> Option<BackendAddressPool> {
    serde_json::from_value(pool.clone()).ok()
}

/// True when only outbound rules use the pool.
pub fn is_outbound_only(pool: &BackendAddressPool) -> bool {
    let Some(p) = &pool.properties else {
        return false;
    };
    p.load_balancing_rules.is_empty() && (!p.outbound_rules.is_empty() || p.outbound_rule.is_some())
}

fn admin_of(state: &Option<ArmAdmin>) -> Admin {
    match state {
        None | Some(ArmAdmin::None) => Admin::None,
        Some(ArmAdmin::Down) => Admin::Down,
        Some(ArmAdmin::Up) => Admin::Up,
        Some(ArmAdmin::UnknownValue(_)) => Admin::Other,
    }
}

/// Every entry of every managed pool.
#[derive(Debug, Clone, Default)]
pub struct PoolIndex {
    entries: Vec<IndexedEntry>,
    nics: NicMap,
}

/// The entries of one node and how they were found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolved {
    pub entries: Vec<IndexedEntry>,
    pub notes: Vec<String>,
}

impl PoolIndex {
    /// Indexes the pools of `lbs`.
    pub fn build(lbs: &[LbPools], nics: NicMap) -> Self {
        let mut entries = Vec::new();
        for lb in lbs {
            for raw in &lb.pools {
                let Some(pool) = typed(raw) else { continue };
                if is_outbound_only(&pool) {
                    continue;
                }
                let pool_name = pool.name.clone().unwrap_or_default();
                let Some(props) = &pool.properties else {
                    continue;
                };
                let settled = raw
                    .pointer("/properties/provisioningState")
                    .and_then(Value::as_str)
                    .is_none_or(|s| s.eq_ignore_ascii_case("Succeeded"));
                for addr in &props.load_balancer_backend_addresses {
                    let Some(p) = &addr.properties else { continue };
                    let ipc = p
                        .network_interface_ip_configuration
                        .as_ref()
                        .and_then(|s| s.id.clone())
                        .unwrap_or_default();
                    let ip = p.ip_address.clone().unwrap_or_default();
                    let owner = if !ipc.is_empty() {
                        match ids::parse_ip_configuration_id(&ipc) {
                            Some(IpConfigOwner::ScaleSetVm(vm)) => Owner::Vm(vm),
                            Some(IpConfigOwner::Nic(nic)) => Owner::Nic(nic),
                            None => Owner::Unknown,
                        }
                    } else {
                        ip.parse().map(Owner::Ip).unwrap_or(Owner::Unknown)
                    };
                    entries.push(IndexedEntry {
                        lb: lb.name.clone(),
                        lb_id: lb.id.clone(),
                        pool: pool_name.clone(),
                        entry: addr.name.clone().unwrap_or_default(),
                        ip_configuration_id: ipc,
                        ip_address: ip,
                        admin: admin_of(&p.admin_state),
                        settled,
                        owner,
                    });
                }
            }
        }
        Self { entries, nics }
    }

    /// Number of indexed entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no entry is indexed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries of `node`, on the load balancer `lb` only when given.
    pub fn resolve(&self, node: &NodeSpec, lb: Option<&str>) -> Resolved {
        let mut notes = Vec::new();
        let mut vm = if node.provider_id.is_empty() {
            None
        } else {
            let parsed = ids::parse_provider_id(&node.provider_id);
            if parsed.is_none() {
                notes.push(format!(
                    "providerID {:?} is not an Azure VM ID",
                    node.provider_id
                ));
            }
            parsed
        };
        let by_name = vm.is_none() && node.internal_ips.is_empty();
        if vm.is_none()
            && let Some((scale_set, instance)) = ids::scale_set_vm_from_node_name(&node.name)
        {
            vm = Some(VmRef::ScaleSetVm {
                resource_group: String::new(),
                scale_set,
                instance,
            });
        }
        if by_name {
            notes.push("resolved by name only (no providerID, no internal IPs)".into());
        }
        let entries = self
            .entries
            .iter()
            .filter(|e| lb.is_none_or(|l| e.lb.eq_ignore_ascii_case(l)))
            .filter(|e| self.matches(e, node, vm.as_ref(), by_name))
            .cloned()
            .collect::<Vec<_>>();
        if entries.is_empty() {
            notes.push("node has no backend entries".into());
        }
        Resolved { entries, notes }
    }

    fn matches(
        &self,
        e: &IndexedEntry,
        node: &NodeSpec,
        vm: Option<&VmRef>,
        by_name: bool,
    ) -> bool {
        match &e.owner {
            Owner::Vm(owner) => vm.is_some_and(|vm| same_vm(owner, vm)),
            Owner::Nic(nic) => match (self.nics.get(nic), vm) {
                (Some(owner), Some(vm)) => same_vm(owner, vm),
                _ => false,
            },
            Owner::Ip(ip) => {
                node.internal_ips.contains(ip)
                    || (by_name && e.entry.eq_ignore_ascii_case(&node.name))
            }
            Owner::Unknown => by_name && e.entry.eq_ignore_ascii_case(&node.name),
        }
    }
}

/// Same VM; an empty resource group (from the node-name fallback) matches any.
fn same_vm(a: &VmRef, b: &VmRef) -> bool {
    match (a, b) {
        (
            VmRef::ScaleSetVm {
                resource_group: ra,
                scale_set: sa,
                instance: ia,
            },
            VmRef::ScaleSetVm {
                resource_group: rb,
                scale_set: sb,
                instance: ib,
            },
        ) => sa == sb && ia == ib && (ra == rb || ra.is_empty() || rb.is_empty()),
        (
            VmRef::Vm {
                resource_group: ra,
                name: na,
            },
            VmRef::Vm {
                resource_group: rb,
                name: nb,
            },
        ) => na == nb && ra == rb,
        _ => false,
    }
}

/// Builds the NIC map from raw NIC objects (LIST of `Microsoft.Network/networkInterfaces`).
pub fn nic_map(nics: &[Value]) -> NicMap {
    use azure_mgmt_network::package_2024_03::models::NetworkInterface;
    let mut map = NicMap::new();
    for raw in nics {
        let Ok(nic) = serde_json::from_value::<NetworkInterface>(raw.clone()) else {
            continue;
        };
        let (Some(id), Some(vm)) = (
            nic.resource.id.as_deref(),
            nic.properties
                .as_ref()
                .and_then(|p| p.virtual_machine.as_ref())
                .and_then(|s| s.id.as_deref()),
        ) else {
            continue;
        };
        if let Some(vm) = ids::parse_vm_id(vm) {
            map.insert(id.trim_end_matches('/').to_ascii_lowercase(), vm);
        }
    }
    map
}

#[cfg(test)]
#[path = "index_tests.rs"]
mod tests;
