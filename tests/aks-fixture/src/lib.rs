//! One AKS-like cluster, described once, so that the Kubernetes simulator (`kube-sim`) and the
//! ARM simulator (`arm-sim`) agree on every machine: node names, provider IDs, zones, IPv4 and
//! IPv6 addresses, NIC ipConfiguration IDs, load balancers and backend pools.
//!
//! Pure data, no I/O. Names and ID shapes follow what cloud-provider-azure and AKS produce
//! (`shared/contracts/kube.md` section 4, `shared/contracts/peers.md` C.5-C.6):
//! - nodes `aks-<pool>-<8 digits>-vmss<6 base-36 digits>` on VMSS Uniform scale sets, providerID
//!   with the resource group lower-cased, ARM IDs with AKS's `MC_` casing (so consumers must
//!   compare IDs case-insensitively, as they must against real Azure);
//! - dual-stack: every node has one IPv4 and one IPv6 InternalIP, and ipConfigurations
//!   `ipconfig1` (IPv4) and `ipconfigv6` (IPv6);
//! - load balancers `<cluster>` (public) and `<cluster>-internal`, pools `<cluster>` and
//!   `<cluster>-IPv6`; in multi-SLB mode more LBs and per-service pools `<namespace>-<service>`;
//! - on each LB the structure AKS builds for its Services ([`LbStructure`]): IPv4 and IPv6
//!   frontends, a rule and probe per service port, `aksOutboundRule` on `aksOutboundBackendPool`,
//!   and one rule without a probe (`kube-system/dns-udp`) on a pool holding every node.

mod services;

pub use services::{Frontend, FrontendAddress, LbRule, LbStructure, OutboundRule, Probe};

use serde_json::{Value, json};
use services::ServiceSpec;
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};

/// The presets both simulators accept as `--preset NAME`.
pub const PRESETS: &[&str] = &["aks", "aks-ip", "aks-multi-slb"];
/// The Azure AD tenant of every preset.
pub const TENANT_ID: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
/// The subscription of every preset.
pub const SUBSCRIPTION_ID: &str = "5a2e4b2c-1f7d-4c4e-9a55-0b0c8d7e6f31";
/// A service principal that the ARM simulator's token endpoint accepts.
pub const CLIENT_ID: &str = "8d3c2f7e-5b1a-4e6d-9c0b-2a4f6e8d1c3b";
/// The secret of [`CLIENT_ID`]. A simulator credential, not a real one.
pub const CLIENT_SECRET: &str = "cutover-sim-secret";

/// Node count of [`preset`].
pub const DEFAULT_NODES: usize = 12;
/// The smallest cluster [`preset_sized`] builds: three system and three spot nodes.
pub const MIN_NODES: usize = 6;

/// A preset name that is not one of [`PRESETS`], or a size below [`MIN_NODES`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UnknownPreset {
    #[error("unknown preset {0:?}; known presets: aks, aks-ip, aks-multi-slb")]
    Name(String),
    #[error("a preset needs at least {MIN_NODES} nodes, {0} asked")]
    TooSmall(usize),
}

/// How backend pools reference nodes (`loadBalancerBackendPoolConfigurationType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolType {
    /// `nodeIPConfiguration`: NIC-based pools, membership by NIC ipConfiguration ID.
    NodeIpConfiguration,
    /// `nodeIP`: IP-based pools, entries named after nodes with their IP address.
    NodeIp,
}

impl PoolType {
    /// The value in `azure.json`.
    pub fn config_value(self) -> &'static str {
        match self {
            PoolType::NodeIpConfiguration => "nodeIPConfiguration",
            PoolType::NodeIp => "nodeIP",
        }
    }
}

/// The IP family of a pool or ipConfiguration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpFamily {
    V4,
    V6,
}

/// A taint as it appears on the Node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    pub key: String,
    pub value: Option<String>,
    pub effect: String,
}

/// The cluster's virtual network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vnet {
    pub resource_group: String,
    pub name: String,
    pub subnet: String,
    pub ipv4_prefix: String,
    pub ipv6_prefix: String,
}

impl Vnet {
    /// The VNet's ARM ID.
    pub fn id(&self, subscription_id: &str) -> String {
        format!(
            "/subscriptions/{subscription_id}/resourceGroups/{}/providers/Microsoft.Network/virtualNetworks/{}",
            self.resource_group, self.name
        )
    }

    /// The node subnet's ARM ID.
    pub fn subnet_id(&self, subscription_id: &str) -> String {
        format!("{}/subnets/{}", self.id(subscription_id), self.subnet)
    }
}

/// An AKS node pool backed by one VMSS Uniform scale set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePool {
    pub name: String,
    pub vmss_name: String,
    /// `system` or `user`.
    pub mode: String,
    pub spot: bool,
    pub zones: Vec<u8>,
    pub vm_size: String,
}

/// One node, as both the Kubernetes API and ARM see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    /// Deterministic, so repeated runs describe the same node.
    pub uid: String,
    pub pool: String,
    pub vmss_name: String,
    pub instance_id: u32,
    /// `<region>-<zone>`, e.g. `eastus-1`.
    pub zone: String,
    pub ipv4: Ipv4Addr,
    pub ipv6: Ipv6Addr,
    pub spot: bool,
    pub provider_id: String,
    pub vm_size: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
}

impl Node {
    /// The NIC name. VMSS Uniform NICs are named after the scale set.
    pub fn nic_name(&self) -> String {
        self.vmss_name.clone()
    }

    /// The ipConfiguration name of a family.
    pub fn ip_configuration_name(family: IpFamily) -> &'static str {
        match family {
            IpFamily::V4 => "ipconfig1",
            IpFamily::V6 => "ipconfigv6",
        }
    }

    /// The VMSS VM NIC ipConfiguration ID, as NIC-based pools reference it.
    pub fn ip_configuration_id(
        &self,
        subscription_id: &str,
        resource_group: &str,
        family: IpFamily,
    ) -> String {
        format!(
            "/subscriptions/{subscription_id}/resourceGroups/{resource_group}/providers/Microsoft.Compute/virtualMachineScaleSets/{}/virtualMachines/{}/networkInterfaces/{}/ipConfigurations/{}",
            self.vmss_name,
            self.instance_id,
            self.nic_name(),
            Self::ip_configuration_name(family)
        )
    }

    /// The VMSS VM's ARM ID.
    pub fn vm_id(&self, subscription_id: &str, resource_group: &str) -> String {
        format!(
            "/subscriptions/{subscription_id}/resourceGroups/{resource_group}/providers/Microsoft.Compute/virtualMachineScaleSets/{}/virtualMachines/{}",
            self.vmss_name, self.instance_id
        )
    }

    /// The node's address of one family.
    pub fn ip(&self, family: IpFamily) -> String {
        match family {
            IpFamily::V4 => self.ipv4.to_string(),
            IpFamily::V6 => self.ipv6.to_string(),
        }
    }
}

/// A backend pool and the nodes in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendPool {
    pub name: String,
    pub family: IpFamily,
    /// Node names, in cluster order.
    pub members: Vec<String>,
    /// Referenced only by an outbound rule (no load-balancing rule), like AKS's
    /// `aksOutboundBackendPool`.
    pub outbound_only: bool,
}

/// A standard load balancer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadBalancer {
    pub name: String,
    pub internal: bool,
    pub pools: Vec<BackendPool>,
    /// Frontends, load-balancing rules, probes and outbound rules (AKS-shaped).
    pub structure: LbStructure,
}

/// A multi-SLB configuration entry (`multipleStandardLoadBalancerConfigurations`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiSlbConfig {
    pub name: String,
    pub primary_vm_set: String,
}

/// The whole cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    pub preset: String,
    /// The cloud provider's cluster name; the load balancers are named after it.
    pub name: String,
    pub location: String,
    pub tenant_id: String,
    pub subscription_id: String,
    /// The node resource group, with AKS's casing.
    pub resource_group: String,
    pub vnet: Vnet,
    pub backend_pool_type: PoolType,
    pub node_pools: Vec<NodePool>,
    pub nodes: Vec<Node>,
    pub load_balancers: Vec<LoadBalancer>,
    /// Non-empty only for multi-SLB presets.
    pub multi_slb: Vec<MultiSlbConfig>,
}

/// The preset with [`DEFAULT_NODES`] nodes.
pub fn preset(name: &str) -> Result<Cluster, UnknownPreset> {
    preset_sized(name, DEFAULT_NODES)
}

/// The preset with `nodes` nodes: three system nodes, a quarter (at least three) spot nodes,
/// the rest in the user pool, all spread over three zones.
pub fn preset_sized(name: &str, nodes: usize) -> Result<Cluster, UnknownPreset> {
    let (pool_type, multi) = match name {
        "aks" => (PoolType::NodeIpConfiguration, false),
        "aks-ip" => (PoolType::NodeIp, false),
        "aks-multi-slb" => (PoolType::NodeIp, true),
        other => return Err(UnknownPreset::Name(other.to_string())),
    };
    if nodes < MIN_NODES {
        return Err(UnknownPreset::TooSmall(nodes));
    }
    let mut cluster = base_cluster(name, pool_type, nodes);
    if multi {
        add_multi_slb(&mut cluster);
    } else {
        add_single_slb(&mut cluster);
    }
    Ok(cluster)
}

const CLUSTER_NAME: &str = "kubernetes";
const LOCATION: &str = "eastus";
const RESOURCE_GROUP: &str = "MC_cutover-rg_cutover_eastus";

fn node_pools() -> Vec<NodePool> {
    let pool = |name: &str, digits: &str, mode: &str, spot: bool| NodePool {
        name: name.to_string(),
        vmss_name: format!("aks-{name}-{digits}-vmss"),
        mode: mode.to_string(),
        spot,
        zones: vec![1, 2, 3],
        vm_size: "Standard_D4s_v5".to_string(),
    };
    vec![
        pool("nodepool1", "12345678", "system", false),
        pool("userpool", "23456789", "user", false),
        pool("spotpool", "34567890", "user", true),
    ]
}

fn base_cluster(preset: &str, backend_pool_type: PoolType, total: usize) -> Cluster {
    let pools = node_pools();
    let spot = (total / 4).max(3);
    let system = 3;
    let user = total - system - spot;
    let mut nodes = Vec::with_capacity(total);
    for (pool, count) in pools.iter().zip([system, user, spot]) {
        for instance in 0..count {
            let index = nodes.len();
            nodes.push(make_node(pool, instance as u32, index));
        }
    }
    Cluster {
        preset: preset.to_string(),
        name: CLUSTER_NAME.to_string(),
        location: LOCATION.to_string(),
        tenant_id: TENANT_ID.to_string(),
        subscription_id: SUBSCRIPTION_ID.to_string(),
        resource_group: RESOURCE_GROUP.to_string(),
        vnet: Vnet {
            resource_group: RESOURCE_GROUP.to_string(),
            name: "aks-vnet-12345678".to_string(),
            subnet: "aks-subnet".to_string(),
            ipv4_prefix: "10.224.0.0/12".to_string(),
            ipv6_prefix: "fd00:10:224::/64".to_string(),
        },
        backend_pool_type,
        node_pools: pools,
        nodes,
        load_balancers: Vec::new(),
        multi_slb: Vec::new(),
    }
}

fn make_node(pool: &NodePool, instance_id: u32, index: usize) -> Node {
    let name = format!("{}{}", pool.vmss_name, base36_suffix(instance_id));
    let zone_number = pool.zones[instance_id as usize % pool.zones.len()];
    let zone = format!("{LOCATION}-{zone_number}");
    // Addresses from .4 on, as Azure reserves the first four of a subnet.
    let host = index as u32 + 4;
    let ipv4 = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 224, 0, 0)) + host);
    let ipv6 = Ipv6Addr::new(
        0xfd00,
        0x10,
        0x224,
        0,
        0,
        0,
        (host >> 16) as u16,
        host as u16,
    );
    let provider_id = format!(
        "azure:///subscriptions/{SUBSCRIPTION_ID}/resourceGroups/{}/providers/Microsoft.Compute/virtualMachineScaleSets/{}/virtualMachines/{instance_id}",
        RESOURCE_GROUP.to_lowercase(),
        pool.vmss_name
    );
    let mut labels = BTreeMap::new();
    let mut label = |k: &str, v: &str| {
        labels.insert(k.to_string(), v.to_string());
    };
    label("agentpool", &pool.name);
    label("kubernetes.azure.com/agentpool", &pool.name);
    label("kubernetes.azure.com/mode", &pool.mode);
    label("kubernetes.azure.com/role", "agent");
    label("kubernetes.io/role", "agent");
    label("node-role.kubernetes.io/agent", "");
    label("kubernetes.azure.com/cluster", RESOURCE_GROUP);
    label(
        "kubernetes.azure.com/node-image-version",
        "AKSUbuntu-2204gen2containerd-202509.23.0",
    );
    label("kubernetes.azure.com/os-sku", "Ubuntu");
    label(
        "kubernetes.azure.com/nodepool-type",
        "VirtualMachineScaleSets",
    );
    label("kubernetes.io/os", "linux");
    label("kubernetes.io/arch", "amd64");
    label("kubernetes.io/hostname", &name);
    label("node.kubernetes.io/instance-type", &pool.vm_size);
    label("topology.kubernetes.io/region", LOCATION);
    label("topology.kubernetes.io/zone", &zone);
    label("failure-domain.beta.kubernetes.io/zone", &zone);
    let mut taints = Vec::new();
    if pool.spot {
        labels.insert(
            "kubernetes.azure.com/scalesetpriority".to_string(),
            "spot".to_string(),
        );
        taints.push(Taint {
            key: "kubernetes.azure.com/scalesetpriority".to_string(),
            value: Some("spot".to_string()),
            effect: "NoSchedule".to_string(),
        });
    }
    Node {
        uid: stable_uuid(&name),
        name,
        pool: pool.name.clone(),
        vmss_name: pool.vmss_name.clone(),
        instance_id,
        zone,
        ipv4,
        ipv6,
        spot: pool.spot,
        provider_id,
        vm_size: pool.vm_size.clone(),
        labels,
        taints,
    }
}

/// AKS VMSS computer names end in the instance id as six base-36 digits.
fn base36_suffix(mut n: u32) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = [b'0'; 6];
    for slot in out.iter_mut().rev() {
        *slot = DIGITS[(n % 36) as usize];
        n /= 36;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A UUID-shaped ID derived from a name (FNV-1a, two seeds), stable across runs.
pub(crate) fn stable_uuid(name: &str) -> String {
    let hash = |seed: u64| {
        name.bytes().fold(seed, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    let hi = hash(0xcbf2_9ce4_8422_2325);
    let lo = hash(0x8422_2325_cbf2_9ce4);
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        hi >> 32,
        (hi >> 16) & 0xffff,
        hi & 0x0fff,
        ((lo >> 48) & 0x3fff) | 0x8000,
        lo & 0xffff_ffff_ffff
    )
}

fn cluster_pools(name: &str, members: &[String]) -> Vec<BackendPool> {
    vec![
        BackendPool {
            name: name.to_string(),
            family: IpFamily::V4,
            members: members.to_vec(),
            outbound_only: false,
        },
        BackendPool {
            name: format!("{name}-IPv6"),
            family: IpFamily::V6,
            members: members.to_vec(),
            outbound_only: false,
        },
    ]
}

const OUTBOUND_POOL: &str = "aksOutboundBackendPool";

/// The UDP DNS service whose rule has no probe (`port_53_no_probe_rule`), on `pool`.
fn dns_udp(pool: &str) -> ServiceSpec<'_> {
    ServiceSpec {
        key: "kube-system/dns-udp",
        ports: &[("Udp", 53, 30053)],
        dual_stack: false,
        local: false,
        no_probe: true,
        pools: (pool, pool),
    }
}

/// The internal service `key` on the cluster pools (`v4`, `v6`).
fn internal_service<'a>(
    key: &'a str,
    port: &'a [(&'a str, u16, u16)],
    v4: &'a str,
    v6: &'a str,
) -> ServiceSpec<'a> {
    ServiceSpec {
        key,
        ports: port,
        dual_stack: true,
        local: false,
        no_probe: false,
        pools: (v4, v6),
    }
}

fn add_single_slb(cluster: &mut Cluster) {
    let all: Vec<String> = cluster.nodes.iter().map(|n| n.name.clone()).collect();
    let mut public = cluster_pools(&cluster.name, &all);
    public.push(BackendPool {
        name: OUTBOUND_POOL.to_string(),
        family: IpFamily::V4,
        members: all.clone(),
        outbound_only: true,
    });
    let (v4, v6) = (cluster.name.clone(), format!("{}-IPv6", cluster.name));
    let mut public_structure = LbStructure::default();
    public_structure.add_outbound(OUTBOUND_POOL);
    for svc in [
        ServiceSpec {
            key: "default/web",
            ports: &[("Tcp", 80, 30080), ("Tcp", 443, 30443)],
            dual_stack: true,
            local: false,
            no_probe: false,
            pools: (&v4, &v6),
        },
        ServiceSpec {
            key: "shop/checkout",
            ports: &[("Tcp", 8080, 31080)],
            dual_stack: true,
            local: false,
            no_probe: false,
            pools: (&v4, &v6),
        },
        dns_udp(&v4),
    ] {
        public_structure.add_service(&svc, false);
    }
    let mut internal_structure = LbStructure::default();
    internal_structure.add_service(
        &internal_service("default/api-internal", &[("Tcp", 443, 32443)], &v4, &v6),
        true,
    );
    cluster.load_balancers = vec![
        LoadBalancer {
            name: cluster.name.clone(),
            internal: false,
            pools: public,
            structure: public_structure,
        },
        LoadBalancer {
            name: format!("{}-internal", cluster.name),
            internal: true,
            pools: cluster_pools(&cluster.name, &all),
            structure: internal_structure,
        },
    ];
}

fn service_pools(service: &str, members: Vec<String>) -> [BackendPool; 2] {
    [
        BackendPool {
            name: service.to_string(),
            family: IpFamily::V4,
            members: members.clone(),
            outbound_only: false,
        },
        BackendPool {
            name: format!("{service}-ipv6"),
            family: IpFamily::V6,
            members,
            outbound_only: false,
        },
    ]
}

/// Two standard LBs: `<cluster>` for the system and user pools, `<cluster>-2` for the spot
/// pool, each with an internal twin; ETP=Local services own per-service pools that hold the
/// nodes running their endpoints, whichever LB those nodes are placed on.
fn add_multi_slb(cluster: &mut Cluster) {
    let second = format!("{}-2", cluster.name);
    let names_in = |pools: &[&str]| -> Vec<String> {
        cluster
            .nodes
            .iter()
            .filter(|n| pools.contains(&n.pool.as_str()))
            .map(|n| n.name.clone())
            .collect()
    };
    let primary_nodes = names_in(&["nodepool1", "userpool"]);
    let spot_nodes = names_in(&["spotpool"]);
    let user_nodes = names_in(&["userpool"]);
    let web: Vec<String> = user_nodes
        .iter()
        .take(user_nodes.len().div_ceil(2))
        .cloned()
        .collect();
    let mut checkout: Vec<String> = user_nodes.iter().rev().take(2).cloned().collect();
    checkout.extend(spot_nodes.iter().cloned());

    let mut first_public = cluster_pools(&cluster.name, &primary_nodes);
    first_public.push(BackendPool {
        name: OUTBOUND_POOL.to_string(),
        family: IpFamily::V4,
        members: primary_nodes.clone(),
        outbound_only: true,
    });
    first_public.extend(service_pools("default-web", web));
    let mut second_public = cluster_pools(&cluster.name, &spot_nodes);
    second_public.extend(service_pools("shop-checkout", checkout));
    let (v4, v6) = (cluster.name.clone(), format!("{}-IPv6", cluster.name));
    let service = |key: &'static str,
                   ports: &'static [(&'static str, u16, u16)],
                   pool: &'static str,
                   pool_v6: &'static str| ServiceSpec {
        key,
        ports,
        dual_stack: true,
        local: true,
        no_probe: false,
        pools: (pool, pool_v6),
    };
    let mut first = LbStructure::default();
    first.add_outbound(OUTBOUND_POOL);
    first.add_service(
        &service(
            "default/web",
            &[("Tcp", 80, 30080), ("Tcp", 443, 30443)],
            "default-web",
            "default-web-ipv6",
        ),
        false,
    );
    first.add_service(&dns_udp(&v4), false);
    let mut first_internal = LbStructure::default();
    first_internal.add_service(
        &internal_service("default/api-internal", &[("Tcp", 443, 32443)], &v4, &v6),
        true,
    );
    let mut second_structure = LbStructure::default();
    second_structure.add_service(
        &service(
            "shop/checkout",
            &[("Tcp", 8080, 31080)],
            "shop-checkout",
            "shop-checkout-ipv6",
        ),
        false,
    );
    let mut second_internal = LbStructure::default();
    second_internal.add_service(
        &internal_service("batch/queue-internal", &[("Tcp", 9000, 32000)], &v4, &v6),
        true,
    );
    cluster.load_balancers = vec![
        LoadBalancer {
            name: cluster.name.clone(),
            internal: false,
            pools: first_public,
            structure: first,
        },
        LoadBalancer {
            name: format!("{}-internal", cluster.name),
            internal: true,
            pools: cluster_pools(&cluster.name, &primary_nodes),
            structure: first_internal,
        },
        LoadBalancer {
            name: second.clone(),
            internal: false,
            pools: second_public,
            structure: second_structure,
        },
        LoadBalancer {
            name: format!("{second}-internal"),
            internal: true,
            pools: cluster_pools(&cluster.name, &spot_nodes),
            structure: second_internal,
        },
    ];
    let vmss_of = |pool: &str| {
        cluster
            .node_pools
            .iter()
            .find(|p| p.name == pool)
            .map(|p| p.vmss_name.clone())
            .unwrap_or_default()
    };
    cluster.multi_slb = vec![
        MultiSlbConfig {
            name: cluster.name.clone(),
            primary_vm_set: vmss_of("nodepool1"),
        },
        MultiSlbConfig {
            name: second,
            primary_vm_set: vmss_of("spotpool"),
        },
    ];
}

impl Cluster {
    /// The node named `name`.
    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// A load balancer's ARM ID.
    pub fn lb_id(&self, lb: &str) -> String {
        format!(
            "/subscriptions/{}/resourceGroups/{}/providers/Microsoft.Network/loadBalancers/{lb}",
            self.subscription_id, self.resource_group
        )
    }

    /// A backend pool's ARM ID.
    pub fn pool_id(&self, lb: &str, pool: &str) -> String {
        format!("{}/backendAddressPools/{pool}", self.lb_id(lb))
    }

    /// Every (load balancer, pool) that has `node` as a member.
    pub fn pools_of<'a>(
        &'a self,
        node: &'a str,
    ) -> impl Iterator<Item = (&'a LoadBalancer, &'a BackendPool)> + 'a {
        self.load_balancers.iter().flat_map(move |lb| {
            lb.pools
                .iter()
                .filter(move |p| p.members.iter().any(|m| m == node))
                .map(move |p| (lb, p))
        })
    }

    /// The cloud-provider-azure `azure.json` for this cluster, with the simulator's service
    /// principal as credentials.
    pub fn azure_json(&self) -> Value {
        let system_vmss = self
            .node_pools
            .first()
            .map(|p| p.vmss_name.clone())
            .unwrap_or_default();
        let mut config = json!({
            "cloud": "AzurePublicCloud",
            "tenantId": self.tenant_id,
            "subscriptionId": self.subscription_id,
            "aadClientId": CLIENT_ID,
            "aadClientSecret": CLIENT_SECRET,
            "resourceGroup": self.resource_group,
            "location": self.location,
            "vmType": "vmss",
            "subnetName": self.vnet.subnet,
            "securityGroupName": "aks-agentpool-12345678-nsg",
            "vnetName": self.vnet.name,
            "vnetResourceGroup": "",
            "routeTableName": "aks-agentpool-12345678-routetable",
            "primaryAvailabilitySetName": "",
            "primaryScaleSetName": system_vmss,
            "cloudProviderBackoffMode": "v2",
            "cloudProviderBackoff": true,
            "cloudProviderBackoffRetries": 6,
            "cloudProviderBackoffDuration": 5,
            "cloudProviderRateLimit": true,
            "cloudProviderRateLimitQPS": 10,
            "cloudProviderRateLimitBucket": 100,
            "cloudProviderRateLimitQPSWrite": 10,
            "cloudProviderRateLimitBucketWrite": 100,
            "useManagedIdentityExtension": false,
            "userAssignedIdentityID": "",
            "useInstanceMetadata": true,
            "loadBalancerSku": "Standard",
            "disableOutboundSNAT": false,
            "excludeMasterFromStandardLB": true,
            "maximumLoadBalancerRuleCount": 250,
            "loadBalancerBackendPoolConfigurationType": self.backend_pool_type.config_value(),
        });
        if !self.multi_slb.is_empty() {
            config["multipleStandardLoadBalancerConfigurations"] = self
                .multi_slb
                .iter()
                .map(|m| json!({"name": m.name, "primaryVMSet": m.primary_vm_set}))
                .collect();
        }
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn default_preset_has_three_pools_over_three_zones() {
        let c = preset("aks").unwrap();
        assert_eq!(c.nodes.len(), DEFAULT_NODES);
        let zones: HashSet<_> = c.nodes.iter().map(|n| n.zone.as_str()).collect();
        assert_eq!(zones.len(), 3);
        assert_eq!(c.nodes.iter().filter(|n| n.spot).count(), 3);
        assert!(
            c.nodes
                .iter()
                .filter(|n| n.spot)
                .all(|n| !n.taints.is_empty())
        );
    }

    #[test]
    fn names_and_ids_follow_aks_conventions() {
        let c = preset("aks").unwrap();
        let n = &c.nodes[0];
        assert_eq!(n.name, "aks-nodepool1-12345678-vmss000000");
        assert!(
            n.provider_id
                .contains("/resourceGroups/mc_cutover-rg_cutover_eastus/")
        );
        assert!(
            n.provider_id.ends_with(
                "/virtualMachineScaleSets/aks-nodepool1-12345678-vmss/virtualMachines/0"
            )
        );
        assert_eq!(base36_suffix(10), "00000a");
        assert_eq!(base36_suffix(36), "000010");
        let id = n.ip_configuration_id(&c.subscription_id, &c.resource_group, IpFamily::V6);
        assert!(id.ends_with("/virtualMachines/0/networkInterfaces/aks-nodepool1-12345678-vmss/ipConfigurations/ipconfigv6"));
    }

    #[test]
    fn addresses_and_uids_are_unique_and_stable() {
        let c = preset_sized("aks", 600).unwrap();
        let v4: HashSet<_> = c.nodes.iter().map(|n| n.ipv4).collect();
        let v6: HashSet<_> = c.nodes.iter().map(|n| n.ipv6).collect();
        let uids: HashSet<_> = c.nodes.iter().map(|n| n.uid.clone()).collect();
        assert_eq!((v4.len(), v6.len(), uids.len()), (600, 600, 600));
        assert_eq!(preset_sized("aks", 600).unwrap(), c);
    }

    #[test]
    fn single_slb_presets_put_every_node_in_four_cluster_pools() {
        for name in ["aks", "aks-ip"] {
            let c = preset(name).unwrap();
            for node in &c.nodes {
                let pools: Vec<_> = c
                    .pools_of(&node.name)
                    .filter(|(_, p)| !p.outbound_only)
                    .collect();
                assert_eq!(pools.len(), 4, "{name} {}", node.name);
            }
        }
        assert_eq!(
            preset("aks").unwrap().backend_pool_type,
            PoolType::NodeIpConfiguration
        );
        assert_eq!(
            preset("aks-ip").unwrap().backend_pool_type,
            PoolType::NodeIp
        );
    }

    #[test]
    fn multi_slb_spreads_nodes_and_adds_service_pools() {
        let c = preset("aks-multi-slb").unwrap();
        assert_eq!(c.load_balancers.len(), 4);
        let spot = c.nodes.iter().find(|n| n.spot).unwrap();
        let lbs: HashSet<_> = c
            .pools_of(&spot.name)
            .map(|(lb, _)| lb.name.as_str())
            .collect();
        assert!(lbs.contains("kubernetes-2") && !lbs.contains("kubernetes"));
        // The last user node serves shop-checkout on the second LB and sits on the first.
        let user = c.nodes.iter().rfind(|n| n.pool == "userpool").unwrap();
        let lbs: HashSet<_> = c
            .pools_of(&user.name)
            .map(|(lb, _)| lb.name.as_str())
            .collect();
        assert!(lbs.contains("kubernetes") && lbs.contains("kubernetes-2"));
        let cfg = c.azure_json();
        assert_eq!(
            cfg["multipleStandardLoadBalancerConfigurations"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
        assert_eq!(cfg["loadBalancerBackendPoolConfigurationType"], "nodeIP");
    }

    #[test]
    fn every_lb_is_aks_shaped_and_consistent() {
        for name in PRESETS {
            let c = preset(name).unwrap();
            let mut unprobed = 0;
            for lb in &c.load_balancers {
                let s = &lb.structure;
                let families: HashSet<_> = s.frontends.iter().map(|f| f.family).collect();
                assert_eq!(
                    families.len(),
                    2,
                    "{name} {} has v4 and v6 frontends",
                    lb.name
                );
                assert!(s.frontends.iter().all(|f| matches!(
                    (&f.address, lb.internal),
                    (FrontendAddress::Private { .. }, true)
                        | (FrontendAddress::Public { .. }, false)
                )));
                assert!(!s.rules.is_empty(), "{name} {}", lb.name);
                for r in &s.rules {
                    assert!(
                        s.frontends.iter().any(|f| f.name == r.frontend),
                        "{}",
                        r.name
                    );
                    let pool = lb.pools.iter().find(|p| p.name == r.pool).unwrap();
                    if let Some(p) = &r.probe {
                        assert!(s.probes.iter().any(|x| &x.name == p), "{}", r.name);
                    } else {
                        unprobed += 1;
                        assert!(
                            !pool.members.is_empty(),
                            "{name}: no-probe rule on an empty pool"
                        );
                    }
                }
                for o in &s.outbound_rules {
                    assert_eq!(o.pool, "aksOutboundBackendPool");
                    assert!(lb.pools.iter().any(|p| p.name == o.pool && p.outbound_only));
                }
            }
            assert_eq!(unprobed, 1, "{name}: exactly one rule without a probe");
            assert_eq!(
                c.load_balancers[0].structure.outbound_rules.len(),
                1,
                "{name}: the public LB has aksOutboundRule"
            );
            assert_eq!(
                c.load_balancers[0]
                    .structure
                    .rules_without_probe()
                    .next()
                    .unwrap()
                    .protocol,
                "Udp"
            );
        }
    }

    #[test]
    fn bad_names_and_sizes_are_refused() {
        assert_eq!(preset("eks"), Err(UnknownPreset::Name("eks".into())));
        assert_eq!(preset_sized("aks", 5), Err(UnknownPreset::TooSmall(5)));
    }
}
