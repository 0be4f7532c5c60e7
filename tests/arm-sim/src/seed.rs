//! Seed files (JSON or YAML) and `aks-fixture` presets, turned into the initial [`Store`].
//!
//! Format (camelCase; see `examples/seed.yaml`):
//!
//! ```yaml
//! tenantId: ...            # optional, default aks_fixture::TENANT_ID
//! clientId: ...            # optional service principal (default aks_fixture::CLIENT_ID/SECRET)
//! clientSecret: ...
//! objectId: ...            # optional, the service principal's object id
//! rbac: {...}              # optional role definitions, role and deny assignments (rbac.rs)
//! subscriptions:
//!   - id: 00000000-...
//!     resourceGroups:
//!       - name: my-rg
//!         location: eastus
//!         virtualNetworks: [{name, addressPrefixes: [..], subnets: [{name, addressPrefix}]}]
//!         networkInterfaces:            # standalone NICs (availability sets, VMSS Flex)
//!           - {name, virtualMachineId, subnetId, ipConfigurations: [{name, privateIpAddress, primary}]}
//!         virtualMachineScaleSets:      # VMSS Uniform; their NICs are not in the RG NIC list
//!           - {name, instances: [{instanceId, nicName, ipConfigurations: [...]}]}
//!         loadBalancers:
//!           - name: kubernetes
//!             sku: {name: Standard}      # optional
//!             properties: {...}          # optional, kept verbatim (frontends, rules, probes)
//!             backendPools:
//!               - name: kubernetes
//!                 nicIpConfigurations: [<ipConfiguration id>, ...]   # NIC-based pool
//!               - name: kubernetes-ip
//!                 virtualNetwork: <vnet id>                          # IP-based pool
//!                 addresses: [{name, ipAddress, adminState}]
//! ```

use crate::model::{
    Address, AdminState, LoadBalancer, Nic, NicIpConfiguration, Pool, Scope, new_etag,
};
use crate::store::{ResourceGroup, Store, Subscription, Vmss};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// Linked-access fixtures (`examples/linked/*.yaml`, also `--preset NAME`): a node resource
/// group `MC_cutover-rg_cutover_eastus` with one two-instance scale set and a load balancer
/// that references resources in another resource group (azure-production.md 1.3):
/// - `byo-vnet`: internal LB `kubernetes-internal` whose frontend is in subnet
///   `customer-vnet/aks-subnet` of `customer-net-rg` (`virtualNetworks/subnets/join/action`);
/// - `foreign-public-ip`: public LB `kubernetes` whose outbound frontends use public IP
///   `egress-ip` and prefix `egress-prefix` of `customer-ip-rg` (`publicIPAddresses/join/action`,
///   `publicIPPrefixes/join/action`; the service frontend's IP is in the node group);
/// - `ip-pool-vnet`: public LB `kubernetes` with an IP-based pool on VNet `customer-vnet` of
///   `customer-net-rg` (`virtualNetworks/joinLoadBalancer/action`).
pub const LINKED_FIXTURES: &[(&str, &str)] = &[
    ("byo-vnet", include_str!("../examples/linked/byo-vnet.yaml")),
    (
        "foreign-public-ip",
        include_str!("../examples/linked/foreign-public-ip.yaml"),
    ),
    (
        "ip-pool-vnet",
        include_str!("../examples/linked/ip-pool-vnet.yaml"),
    ),
];

#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    #[error("cannot read seed file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("seed file {path} is not valid JSON/YAML: {message}")]
    Parse { path: String, message: String },
    #[error("seed: {0}")]
    Invalid(String),
    #[error(transparent)]
    Preset(#[from] aks_fixture::UnknownPreset),
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Seed {
    pub tenant_id: Option<String>,
    pub client_id: Option<String>,
    pub client_secret: Option<String>,
    /// The service principal's object id (default [`crate::DEFAULT_SP_OBJECT_ID`]).
    pub object_id: Option<String>,
    #[serde(default)]
    pub subscriptions: Vec<SeedSubscription>,
    /// Role definitions, role and deny assignments ([`crate::rbac::Rbac`]); absent = permissive.
    pub rbac: Option<crate::rbac::Rbac>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SeedSubscription {
    pub id: String,
    #[serde(default)]
    pub resource_groups: Vec<SeedResourceGroup>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SeedResourceGroup {
    pub name: String,
    #[serde(default = "default_location")]
    pub location: String,
    #[serde(default)]
    pub virtual_networks: Vec<SeedVnet>,
    #[serde(default)]
    pub network_interfaces: Vec<SeedNic>,
    #[serde(default)]
    pub virtual_machine_scale_sets: Vec<Vmss>,
    #[serde(default)]
    pub load_balancers: Vec<SeedLb>,
}

fn default_location() -> String {
    "eastus".into()
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SeedVnet {
    pub name: String,
    #[serde(default)]
    pub address_prefixes: Vec<String>,
    #[serde(default)]
    pub subnets: Vec<SeedSubnet>,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SeedSubnet {
    pub name: String,
    pub address_prefix: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SeedNic {
    pub name: String,
    pub virtual_machine_id: Option<String>,
    pub subnet_id: Option<String>,
    #[serde(default)]
    pub ip_configurations: Vec<NicIpConfiguration>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SeedLb {
    pub name: String,
    pub location: Option<String>,
    pub sku: Option<Value>,
    pub tags: Option<Value>,
    pub properties: Option<Map<String, Value>>,
    #[serde(default)]
    pub backend_pools: Vec<SeedPool>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SeedPool {
    pub name: String,
    pub virtual_network: Option<String>,
    #[serde(default)]
    pub nic_ip_configurations: Vec<String>,
    #[serde(default)]
    pub addresses: Vec<SeedAddress>,
    /// Extra pool properties kept verbatim (loadBalancingRules, outboundRules, ...).
    pub properties: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SeedAddress {
    pub name: String,
    pub ip_address: Option<String>,
    pub virtual_network: Option<String>,
    pub subnet: Option<String>,
    pub admin_state: Option<AdminState>,
}

impl Seed {
    /// Parses JSON or YAML (YAML is a superset, but JSON errors read better when it looks like JSON).
    pub fn parse(path: &str, text: &str) -> Result<Self, SeedError> {
        let parsed = if text.trim_start().starts_with('{') {
            serde_json::from_str(text).map_err(|e| e.to_string())
        } else {
            serde_yaml::from_str(text).map_err(|e| e.to_string())
        };
        parsed.map_err(|message| SeedError::Parse {
            path: path.to_owned(),
            message,
        })
    }

    pub fn load(path: &str) -> Result<Self, SeedError> {
        let text = std::fs::read_to_string(path).map_err(|source| SeedError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(path, &text)
    }

    /// The seed of an `aks-fixture` preset, or of a linked-access fixture ([`LINKED_FIXTURES`];
    /// `nodes` does not apply to those).
    pub fn preset(name: &str, nodes: Option<usize>) -> Result<Self, SeedError> {
        if let Some((_, text)) = LINKED_FIXTURES
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
        {
            return Self::parse(name, text);
        }
        let cluster = match nodes {
            Some(n) => aks_fixture::preset_sized(name, n)?,
            None => aks_fixture::preset(name)?,
        };
        Ok(from_cluster(&cluster))
    }

    /// Builds the store.
    pub fn build(&self) -> Result<Store, SeedError> {
        let mut store = Store::default();
        for s in &self.subscriptions {
            let mut sub = Subscription {
                id: s.id.clone(),
                rgs: BTreeMap::new(),
            };
            for g in &s.resource_groups {
                let rg = build_rg(g)?;
                if sub.rgs.insert(g.name.to_ascii_lowercase(), rg).is_some() {
                    return Err(SeedError::Invalid(format!(
                        "resource group {} appears twice",
                        g.name
                    )));
                }
            }
            store.subs.insert(s.id.to_ascii_lowercase(), sub);
        }
        link_nics_to_pools(&mut store);
        Ok(store)
    }
}

fn build_rg(g: &SeedResourceGroup) -> Result<ResourceGroup, SeedError> {
    let mut rg = ResourceGroup {
        name: g.name.clone(),
        location: g.location.clone(),
        lbs: BTreeMap::new(),
        nics: BTreeMap::new(),
        vnets: g.virtual_networks.clone(),
        vmss: g.virtual_machine_scale_sets.clone(),
    };
    for n in &g.network_interfaces {
        let nic = Nic {
            name: n.name.clone(),
            location: g.location.clone(),
            virtual_machine_id: n.virtual_machine_id.clone(),
            subnet_id: n.subnet_id.clone(),
            ip_configurations: n.ip_configurations.clone(),
            etag: new_etag(),
        };
        rg.nics.insert(n.name.to_ascii_lowercase(), nic);
    }
    for l in &g.load_balancers {
        let mut lb = LoadBalancer::new(&l.name, l.location.as_deref().unwrap_or(&g.location));
        if let Some(sku) = &l.sku {
            lb.sku = sku.clone();
        }
        lb.tags = l.tags.clone();
        lb.props = l.properties.clone().unwrap_or_default();
        crate::structure::normalize(&mut lb.props);
        for p in &l.backend_pools {
            lb.pools.push(build_pool(&l.name, p)?);
        }
        rg.lbs.insert(l.name.to_ascii_lowercase(), lb);
    }
    Ok(rg)
}

fn build_pool(lb: &str, p: &SeedPool) -> Result<Pool, SeedError> {
    if !p.nic_ip_configurations.is_empty() && !p.addresses.is_empty() {
        return Err(SeedError::Invalid(format!(
            "pool {lb}/{} mixes nicIpConfigurations and addresses",
            p.name
        )));
    }
    let mut pool = if p.nic_ip_configurations.is_empty() {
        let mut pool = Pool::new_ip_based(&p.name);
        for a in &p.addresses {
            let mut props = Map::new();
            if let Some(ip) = &a.ip_address {
                if ip.parse::<std::net::IpAddr>().is_err() {
                    return Err(SeedError::Invalid(format!(
                        "pool {}: bad ipAddress {ip}",
                        p.name
                    )));
                }
                props.insert("ipAddress".into(), json!(ip));
            }
            if let Some(v) = &a.virtual_network {
                props.insert("virtualNetwork".into(), json!({ "id": v }));
            }
            if let Some(s) = &a.subnet {
                props.insert("subnet".into(), json!({ "id": s }));
            }
            let state = a.admin_state;
            pool.addresses.push(Address {
                name: a.name.clone(),
                props,
                admin_state: state,
                effective: state.unwrap_or(AdminState::None),
            });
        }
        pool
    } else {
        Pool::new_nic_based(&p.name, &p.nic_ip_configurations)
    };
    if let Some(extra) = &p.properties {
        pool.props.extend(extra.clone());
    }
    if let Some(v) = &p.virtual_network {
        pool.props
            .insert("virtualNetwork".into(), json!({ "id": v }));
    }
    Ok(pool)
}

/// Standalone NIC ipConfigurations list the pools that name them (as NRP shows both sides).
fn link_nics_to_pools(store: &mut Store) {
    let mut links: Vec<(String, String)> = Vec::new(); // (ipconfig id lower, pool id)
    for sub in store.subs.values() {
        for rg in sub.rgs.values() {
            for lb in rg.lbs.values() {
                let scope = Scope {
                    sub: &sub.id,
                    rg: &rg.name,
                    lb: &lb.name,
                };
                for p in &lb.pools {
                    for m in &p.backend_ip_configurations {
                        links.push((m.to_ascii_lowercase(), scope.pool_id(&p.name)));
                    }
                }
            }
        }
    }
    for sub in store.subs.values_mut() {
        let sub_id = sub.id.clone();
        for rg in sub.rgs.values_mut() {
            let rg_name = rg.name.clone();
            for nic in rg.nics.values_mut() {
                let nic_id = nic.id(&sub_id, &rg_name);
                for c in nic.ip_configurations.iter_mut() {
                    let cid = format!("{nic_id}/ipConfigurations/{}", c.name).to_ascii_lowercase();
                    for (m, pool_id) in &links {
                        if *m == cid && !c.load_balancer_backend_address_pools.contains(pool_id) {
                            c.load_balancer_backend_address_pools.push(pool_id.clone());
                        }
                    }
                }
            }
        }
    }
}

/// The seed describing an `aks-fixture` cluster: VMSS Uniform node pools, the VNet, and the
/// cluster's load balancers (NIC-based or IP-based pools per the preset).
pub fn from_cluster(c: &aks_fixture::Cluster) -> Seed {
    use aks_fixture::{IpFamily, PoolType};
    let sub = &c.subscription_id;
    let rg = &c.resource_group;
    let vmss: Vec<Vmss> = c
        .node_pools
        .iter()
        .map(|np| Vmss {
            name: np.vmss_name.clone(),
            instances: c
                .nodes
                .iter()
                .filter(|n| n.vmss_name == np.vmss_name)
                .map(|n| crate::store::VmssInstance {
                    instance_id: n.instance_id,
                    computer_name: n.name.clone(),
                    nic_name: n.nic_name(),
                    ip_configurations: [IpFamily::V4, IpFamily::V6]
                        .into_iter()
                        .map(|f| NicIpConfiguration {
                            name: aks_fixture::Node::ip_configuration_name(f).to_owned(),
                            private_ip_address: n.ip(f),
                            primary: f == IpFamily::V4,
                            load_balancer_backend_address_pools: Vec::new(),
                        })
                        .collect(),
                })
                .collect(),
        })
        .collect();
    let by_name: std::collections::HashMap<&str, &aks_fixture::Node> =
        c.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let lbs = c
        .load_balancers
        .iter()
        .map(|lb| {
            let lb_id = c.lb_id(&lb.name);
            let backend_pools = lb
                .pools
                .iter()
                .map(|p| {
                    let members = p.members.iter().filter_map(|m| by_name.get(m.as_str()));
                    // Back-references (loadBalancingRules, outboundRules) are derived from the
                    // LB's rules when rendered.
                    let extra = Map::new();
                    match c.backend_pool_type {
                        PoolType::NodeIpConfiguration => SeedPool {
                            name: p.name.clone(),
                            virtual_network: None,
                            nic_ip_configurations: members
                                .map(|n| n.ip_configuration_id(sub, rg, p.family))
                                .collect(),
                            addresses: Vec::new(),
                            properties: Some(extra),
                        },
                        PoolType::NodeIp => SeedPool {
                            name: p.name.clone(),
                            virtual_network: Some(c.vnet.id(sub)),
                            nic_ip_configurations: Vec::new(),
                            addresses: members
                                .map(|n| SeedAddress {
                                    name: n.name.clone(),
                                    ip_address: Some(n.ip(p.family)),
                                    virtual_network: None,
                                    subnet: None,
                                    admin_state: None,
                                })
                                .collect(),
                            properties: Some(extra),
                        },
                    }
                })
                .collect();
            SeedLb {
                name: lb.name.clone(),
                location: Some(c.location.clone()),
                sku: Some(json!({ "name": "Standard", "tier": "Regional" })),
                tags: None,
                properties: Some(structure_props(c, &lb_id, &lb.structure)),
                backend_pools,
            }
        })
        .collect();
    let node_rg = SeedResourceGroup {
        name: rg.clone(),
        location: c.location.clone(),
        virtual_networks: Vec::new(),
        network_interfaces: Vec::new(),
        virtual_machine_scale_sets: vmss,
        load_balancers: lbs,
    };
    let vnet = SeedVnet {
        name: c.vnet.name.clone(),
        address_prefixes: vec![c.vnet.ipv4_prefix.clone(), c.vnet.ipv6_prefix.clone()],
        subnets: vec![SeedSubnet {
            name: c.vnet.subnet.clone(),
            address_prefix: Some(c.vnet.ipv4_prefix.clone()),
        }],
    };
    let mut rgs = vec![node_rg];
    if c.vnet.resource_group.eq_ignore_ascii_case(rg) {
        rgs[0].virtual_networks.push(vnet);
    } else {
        rgs.push(SeedResourceGroup {
            name: c.vnet.resource_group.clone(),
            location: c.location.clone(),
            virtual_networks: vec![vnet],
            network_interfaces: Vec::new(),
            virtual_machine_scale_sets: Vec::new(),
            load_balancers: Vec::new(),
        });
    }
    Seed {
        tenant_id: Some(c.tenant_id.clone()),
        client_id: Some(aks_fixture::CLIENT_ID.to_owned()),
        client_secret: Some(aks_fixture::CLIENT_SECRET.to_owned()),
        object_id: None,
        subscriptions: vec![SeedSubscription {
            id: sub.clone(),
            resource_groups: rgs,
        }],
        rbac: None,
    }
}

/// An `aks-fixture` LB structure as the writable LB properties cloud-provider-azure PUTs
/// (frontends, rules, probes, outbound rules; NAT rules and pools empty).
fn structure_props(
    c: &aks_fixture::Cluster,
    lb_id: &str,
    s: &aks_fixture::LbStructure,
) -> Map<String, Value> {
    use aks_fixture::{FrontendAddress, IpFamily};
    let sub = |kind: &str, name: &str| json!({ "id": format!("{lb_id}/{kind}/{name}") });
    let frontends: Vec<Value> = s
        .frontends
        .iter()
        .map(|f| {
            let version = match f.family {
                IpFamily::V4 => "IPv4",
                IpFamily::V6 => "IPv6",
            };
            let props = match &f.address {
                FrontendAddress::Public { public_ip_name } => json!({
                    "privateIPAllocationMethod": "Dynamic",
                    "publicIPAddress": { "id": format!(
                        "/subscriptions/{}/resourceGroups/{}/providers/Microsoft.Network/publicIPAddresses/{public_ip_name}",
                        c.subscription_id, c.resource_group
                    ) },
                }),
                FrontendAddress::Private { ip } => json!({
                    "privateIPAddress": ip,
                    "privateIPAllocationMethod": "Dynamic",
                    "privateIPAddressVersion": version,
                    "subnet": { "id": c.vnet.subnet_id(&c.subscription_id) },
                }),
            };
            json!({ "name": f.name, "properties": props })
        })
        .collect();
    let rules: Vec<Value> = s
        .rules
        .iter()
        .map(|r| {
            let mut props = json!({
                "frontendIPConfiguration": sub("frontendIPConfigurations", &r.frontend),
                "backendAddressPool": sub("backendAddressPools", &r.pool),
                "backendAddressPools": [sub("backendAddressPools", &r.pool)],
                "protocol": r.protocol,
                "loadDistribution": "Default",
                "frontendPort": r.frontend_port,
                "backendPort": r.backend_port,
                "idleTimeoutInMinutes": 4,
                "enableFloatingIP": true,
                "enableTcpReset": r.protocol == "Tcp",
                "disableOutboundSnat": true,
            });
            if let Some(probe) = &r.probe {
                props["probe"] = sub("probes", probe);
            }
            json!({ "name": r.name, "properties": props })
        })
        .collect();
    let probes: Vec<Value> = s
        .probes
        .iter()
        .map(|p| {
            let mut props = json!({
                "protocol": p.protocol,
                "port": p.port,
                "intervalInSeconds": 5,
                "numberOfProbes": 2,
                "probeThreshold": 1,
            });
            if let Some(path) = &p.request_path {
                props["requestPath"] = json!(path);
            }
            json!({ "name": p.name, "properties": props })
        })
        .collect();
    let outbound: Vec<Value> = s
        .outbound_rules
        .iter()
        .map(|o| {
            json!({ "name": o.name, "properties": {
                "allocatedOutboundPorts": 0,
                "protocol": "All",
                "enableTcpReset": true,
                "idleTimeoutInMinutes": 30,
                "backendAddressPool": sub("backendAddressPools", &o.pool),
                "frontendIPConfigurations": o.frontends.iter().map(|f| sub("frontendIPConfigurations", f)).collect::<Vec<_>>(),
            }})
        })
        .collect();
    let mut props = Map::new();
    props.insert("frontendIPConfigurations".into(), Value::Array(frontends));
    props.insert("loadBalancingRules".into(), Value::Array(rules));
    props.insert("probes".into(), Value::Array(probes));
    props.insert("inboundNatRules".into(), json!([]));
    props.insert("inboundNatPools".into(), json!([]));
    props.insert("outboundRules".into(), Value::Array(outbound));
    props
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_builds_with_the_fixture_pools() {
        for name in aks_fixture::PRESETS {
            let cluster = aks_fixture::preset(name).unwrap();
            let store = Seed::preset(name, None).unwrap().build().unwrap();
            for lb in &cluster.load_balancers {
                let stored = store
                    .lb(&cluster.subscription_id, &cluster.resource_group, &lb.name)
                    .unwrap();
                for p in &lb.pools {
                    let sp = stored.pool(&p.name).unwrap();
                    assert_eq!(
                        sp.addresses.len(),
                        p.members.len(),
                        "{name} {} {}",
                        lb.name,
                        p.name
                    );
                    assert_eq!(
                        sp.nic_based,
                        cluster.backend_pool_type == aks_fixture::PoolType::NodeIpConfiguration
                    );
                }
            }
        }
        assert!(Seed::preset("nope", None).is_err());
        for (name, _) in LINKED_FIXTURES {
            let store = Seed::preset(name, None).unwrap().build().unwrap();
            assert!(
                store
                    .find_lb("kubernetes")
                    .or(store.find_lb("kubernetes-internal"))
                    .is_some(),
                "{name}"
            );
        }
    }

    #[test]
    fn yaml_seed_with_standalone_nics_links_pools() {
        let text = r#"
subscriptions:
  - id: sub1
    resourceGroups:
      - name: rg1
        networkInterfaces:
          - name: vm1-nic
            virtualMachineId: /subscriptions/sub1/resourceGroups/rg1/providers/Microsoft.Compute/virtualMachines/vm1
            ipConfigurations: [{name: ipconfig1, privateIpAddress: 10.0.0.9, primary: true}]
        loadBalancers:
          - name: lb
            backendPools:
              - name: nicpool
                nicIpConfigurations: [/subscriptions/sub1/resourceGroups/rg1/providers/Microsoft.Network/networkInterfaces/vm1-nic/ipConfigurations/ipconfig1]
              - name: ippool
                addresses: [{name: a, ipAddress: 10.0.0.9, adminState: Down}]
"#;
        let store = Seed::parse("inline", text).unwrap().build().unwrap();
        let rg = store.rg("sub1", "RG1").unwrap();
        let nic = rg.nics.get("vm1-nic").unwrap();
        assert_eq!(
            nic.ip_configurations[0]
                .load_balancer_backend_address_pools
                .len(),
            1
        );
        let lb = store.lb("sub1", "rg1", "lb").unwrap();
        assert_eq!(
            lb.pool("ippool").unwrap().addresses[0].effective,
            AdminState::Down
        );
        assert!(Seed::parse("bad", "subscriptions: 3").is_err());
        assert!(Seed::parse("bad", "{\"nope\": 1}").is_err());
    }
}
