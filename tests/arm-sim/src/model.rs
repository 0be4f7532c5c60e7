//! The simulated Microsoft.Network resources (load balancers, backend pools and their entries,
//! NICs) and their JSON rendering in the shape NRP returns for api-version 2024-03-01.
//!
//! Frontend IP configurations, rules and probes are kept as JSON in the form their writer sent
//! (see [`crate::structure`] for what is computed on the way out), so that whatever a seed or a
//! whole-LB PUT carried comes back on GET.

use serde_json::{Map, Value, json};

pub const POOL_TYPE: &str = "Microsoft.Network/loadBalancers/backendAddressPools";
pub const ADDRESS_TYPE: &str =
    "Microsoft.Network/loadBalancers/backendAddressPools/loadBalancerBackendAddresses";
pub const LB_TYPE: &str = "Microsoft.Network/loadBalancers";

/// `adminState` of a backend entry (2024-03-01 enum; `Drain` was removed from the API).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum AdminState {
    None,
    Up,
    Down,
}

impl AdminState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "None",
            Self::Up => "Up",
            Self::Down => "Down",
        }
    }

    /// Parses the wire value. NRP treats enum strings case-insensitively.
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Some(Self::None),
            "up" => Some(Self::Up),
            "down" => Some(Self::Down),
            _ => None,
        }
    }
}

/// One `loadBalancerBackendAddresses[]` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Address {
    pub name: String,
    /// Every property except `adminState` and `provisioningState`.
    pub props: Map<String, Value>,
    /// The requested admin state (`None` when the property is absent).
    pub admin_state: Option<AdminState>,
    /// The state the data path applies: updated when the operation that set it completes.
    pub effective: AdminState,
}

impl Address {
    pub fn requested(&self) -> AdminState {
        self.admin_state.unwrap_or(AdminState::None)
    }

    pub fn ip_address(&self) -> Option<&str> {
        self.props.get("ipAddress").and_then(Value::as_str)
    }

    pub fn nic_ip_configuration(&self) -> Option<&str> {
        self.props
            .get("networkInterfaceIPConfiguration")
            .and_then(|v| v.get("id"))
            .and_then(Value::as_str)
    }

    /// A NIC-style entry (GUID name) for a NIC ipConfiguration member.
    pub fn for_nic(ip_configuration_id: &str) -> Self {
        let mut props = Map::new();
        props.insert(
            "networkInterfaceIPConfiguration".into(),
            json!({ "id": ip_configuration_id }),
        );
        Self {
            name: nic_entry_name(ip_configuration_id),
            props,
            admin_state: None,
            effective: AdminState::None,
        }
    }
}

/// NRP names NIC-style entries `<rg>_<nic><ipconfig>` for standalone NICs and with a GUID for
/// VMSS instances (contracts/arm.md 1.3).
fn nic_entry_name(ip_configuration_id: &str) -> String {
    let segs: Vec<&str> = ip_configuration_id
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let after = |key: &str| {
        segs.iter()
            .position(|s| s.eq_ignore_ascii_case(key))
            .and_then(|i| segs.get(i + 1))
            .copied()
    };
    let is_vmss = segs
        .iter()
        .any(|s| s.eq_ignore_ascii_case("virtualMachineScaleSets"));
    match (
        is_vmss,
        after("resourceGroups"),
        after("networkInterfaces"),
        after("ipConfigurations"),
    ) {
        (false, Some(rg), Some(nic), Some(ipc)) => format!("{rg}_{nic}{ipc}"),
        _ => uuid::Uuid::new_v4().to_string(),
    }
}

/// A backend address pool.
#[derive(Debug, Clone, PartialEq)]
pub struct Pool {
    pub name: String,
    /// Membership owned by NICs (`backendIPConfigurations`); otherwise IP-based.
    pub nic_based: bool,
    pub backend_ip_configurations: Vec<String>,
    pub addresses: Vec<Address>,
    /// Other properties (virtualNetwork, loadBalancingRules, outboundRules, location, ...).
    pub props: Map<String, Value>,
    pub provisioning_state: String,
}

/// An identifier triple used to build resource IDs.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    pub sub: &'a str,
    pub rg: &'a str,
    pub lb: &'a str,
}

impl Scope<'_> {
    pub fn lb_id(&self) -> String {
        format!(
            "/subscriptions/{}/resourceGroups/{}/providers/Microsoft.Network/loadBalancers/{}",
            self.sub, self.rg, self.lb
        )
    }

    pub fn pool_id(&self, pool: &str) -> String {
        format!("{}/backendAddressPools/{pool}", self.lb_id())
    }
}

impl Pool {
    pub fn new_ip_based(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            nic_based: false,
            backend_ip_configurations: Vec::new(),
            addresses: Vec::new(),
            props: Map::new(),
            provisioning_state: "Succeeded".into(),
        }
    }

    /// A NIC-based pool whose members are these NIC ipConfiguration IDs.
    pub fn new_nic_based(name: &str, members: &[String]) -> Self {
        Self {
            name: name.to_owned(),
            nic_based: true,
            backend_ip_configurations: members.to_vec(),
            addresses: members.iter().map(|m| Address::for_nic(m)).collect(),
            props: Map::new(),
            provisioning_state: "Succeeded".into(),
        }
    }

    pub fn address(&self, name: &str) -> Option<&Address> {
        self.addresses.iter().find(|a| a.name == name)
    }
}

/// An in-flight operation holding a load balancer.
#[derive(Debug, Clone, PartialEq)]
pub struct Lock {
    pub op_id: String,
    pub op_name: &'static str,
}

/// A load balancer with its pools.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadBalancer {
    pub name: String,
    pub location: String,
    pub sku: Value,
    pub tags: Option<Value>,
    /// Properties other than pools, provisioningState and resourceGuid.
    pub props: Map<String, Value>,
    pub pools: Vec<Pool>,
    pub etag: String,
    pub resource_guid: String,
    pub provisioning_state: String,
    pub lock: Option<Lock>,
}

pub fn new_etag() -> String {
    format!("W/\"{}\"", uuid::Uuid::new_v4())
}

impl LoadBalancer {
    pub fn new(name: &str, location: &str) -> Self {
        Self {
            name: name.to_owned(),
            location: location.to_owned(),
            sku: json!({ "name": "Standard", "tier": "Regional" }),
            tags: None,
            props: Map::new(),
            pools: Vec::new(),
            etag: new_etag(),
            resource_guid: uuid::Uuid::new_v4().to_string(),
            provisioning_state: "Succeeded".into(),
            lock: None,
        }
    }

    pub fn pool(&self, name: &str) -> Option<&Pool> {
        self.pools
            .iter()
            .find(|p| p.name.eq_ignore_ascii_case(name))
    }

    pub fn pool_mut(&mut self, name: &str) -> Option<&mut Pool> {
        self.pools
            .iter_mut()
            .find(|p| p.name.eq_ignore_ascii_case(name))
    }

    /// A pool of this LB as NRP renders it ([`crate::render::pool`]).
    pub fn pool_bytes(&self, pool: &Pool, scope: Scope<'_>) -> Vec<u8> {
        let mut out = Vec::with_capacity(1024 + pool.addresses.len() * 640);
        crate::render::pool(&mut out, self, pool, scope);
        out
    }

    /// [`LoadBalancer::pool_bytes`] as a JSON value (tests, small answers).
    pub fn render_pool(&self, pool: &Pool, scope: Scope<'_>) -> Value {
        serde_json::from_slice(&self.pool_bytes(pool, scope)).unwrap_or(Value::Null)
    }

    /// The fingerprint of everything but pool membership ([`crate::structure::fingerprint`]).
    pub fn fingerprint(&self) -> String {
        let names: Vec<&str> = self.pools.iter().map(|p| p.name.as_str()).collect();
        crate::structure::fingerprint(&self.props, &self.sku, &names)
    }

    /// What differs structurally between `self` and `after` ([`crate::structure::changes`]).
    pub fn structure_changes(&self, after: &LoadBalancer) -> Vec<String> {
        let before: Vec<&str> = self.pools.iter().map(|p| p.name.as_str()).collect();
        let now: Vec<&str> = after.pools.iter().map(|p| p.name.as_str()).collect();
        crate::structure::changes(
            (&self.props, &self.sku, &before),
            (&after.props, &after.sku, &now),
        )
    }

    /// [`LoadBalancer::render_bytes`] as a JSON value (tests, small answers).
    pub fn render(&self, sub: &str, rg: &str) -> Value {
        serde_json::from_slice(&self.render_bytes(sub, rg)).unwrap_or(Value::Null)
    }

    /// The load balancer as GET and PUT answer it, in NRP's key order
    /// ([`crate::render::load_balancer`]): a client can learn the LB's state from the first
    /// few hundred bytes of a 16 MB document.
    pub fn render_bytes(&self, sub: &str, rg: &str) -> Vec<u8> {
        let entries: usize = self.pools.iter().map(|p| p.addresses.len()).sum();
        let mut out = Vec::with_capacity(16 * 1024 + entries * 640);
        crate::render::load_balancer(&mut out, self, sub, rg);
        out
    }
}

/// One ipConfiguration of a NIC.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NicIpConfiguration {
    pub name: String,
    pub private_ip_address: String,
    #[serde(default)]
    pub primary: bool,
    /// Backend pool IDs this ipConfiguration belongs to.
    #[serde(default)]
    pub load_balancer_backend_address_pools: Vec<String>,
}

/// A standalone NIC (availability-set VM or VMSS Flex instance).
#[derive(Debug, Clone, PartialEq)]
pub struct Nic {
    pub name: String,
    pub location: String,
    pub virtual_machine_id: Option<String>,
    pub subnet_id: Option<String>,
    pub ip_configurations: Vec<NicIpConfiguration>,
    pub etag: String,
}

impl Nic {
    pub fn id(&self, sub: &str, rg: &str) -> String {
        format!(
            "/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Network/networkInterfaces/{}",
            self.name
        )
    }

    pub fn render(&self, sub: &str, rg: &str) -> Value {
        let id = self.id(sub, rg);
        let ipcs: Vec<Value> = self
            .ip_configurations
            .iter()
            .map(|c| {
                let version = if c.private_ip_address.contains(':') { "IPv6" } else { "IPv4" };
                let mut props = json!({
                    "provisioningState": "Succeeded",
                    "privateIPAddress": c.private_ip_address,
                    "privateIPAllocationMethod": "Dynamic",
                    "privateIPAddressVersion": version,
                    "primary": c.primary,
                    "loadBalancerBackendAddressPools": c.load_balancer_backend_address_pools.iter().map(|p| json!({"id": p})).collect::<Vec<_>>(),
                });
                if let Some(subnet) = &self.subnet_id {
                    props["subnet"] = json!({ "id": subnet });
                }
                json!({
                    "name": c.name,
                    "id": format!("{id}/ipConfigurations/{}", c.name),
                    "etag": self.etag,
                    "type": "Microsoft.Network/networkInterfaces/ipConfigurations",
                    "properties": props,
                })
            })
            .collect();
        let mut props = json!({
            "provisioningState": "Succeeded",
            "resourceGuid": uuid::Uuid::nil().to_string(),
            "ipConfigurations": ipcs,
            "enableAcceleratedNetworking": false,
            "enableIPForwarding": false,
            "nicType": "Standard",
        });
        if let Some(vm) = &self.virtual_machine_id {
            props["virtualMachine"] = json!({ "id": vm });
        }
        json!({
            "name": self.name,
            "id": id,
            "etag": self.etag,
            "type": "Microsoft.Network/networkInterfaces",
            "location": self.location,
            "properties": props,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nic_entry_names_follow_nrp() {
        let standalone = "/subscriptions/s/resourceGroups/rg1/providers/Microsoft.Network/networkInterfaces/vm1-nic/ipConfigurations/ipconfig1";
        assert_eq!(nic_entry_name(standalone), "rg1_vm1-nicipconfig1");
        let vmss = "/subscriptions/s/resourceGroups/rg1/providers/Microsoft.Compute/virtualMachineScaleSets/v/virtualMachines/0/networkInterfaces/v/ipConfigurations/ipconfig1";
        assert!(uuid::Uuid::parse_str(&nic_entry_name(vmss)).is_ok());
    }
}
