use super::*;
use aks_fixture::{Cluster, IpFamily, PoolType};
use serde_json::json;

/// Renders a fixture cluster's pools the way ARM lists them.
pub(crate) fn mk_lbs(c: &Cluster) -> Vec<LbPools> {
    c.load_balancers
        .iter()
        .map(|lb| LbPools {
            name: lb.name.clone(),
            id: c.lb_id(&lb.name),
            pools: lb
                .pools
                .iter()
                .map(|p| {
                    let entries: Vec<Value> = p
                        .members
                        .iter()
                        .enumerate()
                        .map(|(i, m)| {
                            let node = c.node(m).unwrap();
                            match c.backend_pool_type {
                                PoolType::NodeIp => json!({"name": node.name,
                                    "properties": {"ipAddress": node.ip(p.family)}}),
                                PoolType::NodeIpConfiguration => json!({
                                    "name": format!("{:08x}-0000-0000-0000-{:012x}", i, i),
                                    "id": format!("{}/loadBalancerBackendAddresses/x{i}", c.pool_id(&lb.name, &p.name)),
                                    "properties": {"networkInterfaceIPConfiguration": {"id":
                                        node.ip_configuration_id(&c.subscription_id, &c.resource_group, p.family)}}}),
                            }
                        })
                        .collect();
                    let rules = if p.outbound_only {
                        json!({"outboundRules": [{"id": "x/outboundRules/aksOutboundRule"}]})
                    } else {
                        json!({"loadBalancingRules": [{"id": "x/loadBalancingRules/r1"}]})
                    };
                    let mut pool = json!({"name": p.name, "id": c.pool_id(&lb.name, &p.name),
                        "etag": "W/\"1\"", "properties": {"loadBalancerBackendAddresses": entries}});
                    for (k, v) in rules.as_object().unwrap() {
                        pool["properties"][k] = v.clone();
                    }
                    pool
                })
                .collect(),
        })
        .collect()
}

pub(crate) fn spec_of(n: &aks_fixture::Node) -> NodeSpec {
    NodeSpec {
        name: n.name.clone(),
        uid: n.uid.clone(),
        provider_id: n.provider_id.clone(),
        internal_ips: vec![IpAddr::V4(n.ipv4), IpAddr::V6(n.ipv6)],
    }
}

fn pools_of(r: &Resolved) -> Vec<(String, String)> {
    let mut v: Vec<_> = r
        .entries
        .iter()
        .map(|e| (e.lb.to_string(), e.pool.to_string()))
        .collect();
    v.sort();
    v
}

#[test]
fn nic_based_dual_stack_resolves_four_pools_and_skips_outbound_only() {
    let c = aks_fixture::preset("aks").unwrap();
    let idx = PoolIndex::build(&mk_lbs(&c), NicMap::new());
    for node in &c.nodes {
        let r = idx.resolve(&spec_of(node), None);
        assert_eq!(
            pools_of(&r),
            vec![
                ("kubernetes".into(), "kubernetes".into()),
                ("kubernetes".into(), "kubernetes-IPv6".into()),
                ("kubernetes-internal".into(), "kubernetes".into()),
                ("kubernetes-internal".into(), "kubernetes-IPv6".into()),
            ],
            "{}",
            node.name
        );
        // Each entry is this node's own ipConfiguration (IDs compared case-insensitively:
        // the providerID has the resource group lower-cased, the ipConfiguration ID does not).
        for e in &r.entries {
            assert!(
                e.ip_configuration_id()
                    .contains(&format!("/virtualMachines/{}/", node.instance_id))
            );
            assert!(e.ip_configuration_id().contains(&node.vmss_name));
        }
    }
}

#[test]
fn ip_based_matches_v4_and_v6_addresses() {
    let c = aks_fixture::preset("aks-ip").unwrap();
    let idx = PoolIndex::build(&mk_lbs(&c), NicMap::new());
    let node = &c.nodes[4];
    let r = idx.resolve(&spec_of(node), None);
    assert_eq!(r.entries.len(), 4);
    let v6: Vec<_> = r
        .entries
        .iter()
        .filter(|e| e.pool.ends_with("IPv6"))
        .collect();
    assert!(v6.iter().all(|e| e.ip_address() == node.ipv6.to_string()));
    // Only the IPv4 address known: only the IPv4 pools.
    let mut only_v4 = spec_of(node);
    only_v4.internal_ips.truncate(1);
    assert_eq!(idx.resolve(&only_v4, None).entries.len(), 2);
}

#[test]
fn multi_slb_includes_every_lb_and_per_service_pools() {
    let c = aks_fixture::preset("aks-multi-slb").unwrap();
    let idx = PoolIndex::build(&mk_lbs(&c), NicMap::new());
    for node in &c.nodes {
        let expected: Vec<(String, String)> = {
            let mut v: Vec<_> = c
                .pools_of(&node.name)
                .filter(|(_, p)| !p.outbound_only)
                .map(|(lb, p)| (lb.name.clone(), p.name.clone()))
                .collect();
            v.sort();
            v
        };
        assert_eq!(
            pools_of(&idx.resolve(&spec_of(node), None)),
            expected,
            "{}",
            node.name
        );
    }
    let user = c.nodes.iter().rfind(|n| n.pool == "userpool").unwrap();
    let r = idx.resolve(&spec_of(user), Some("kubernetes-2"));
    let pools: Vec<_> = r.entries.iter().map(|e| &*e.pool).collect();
    assert_eq!(pools, vec!["shop-checkout", "shop-checkout-ipv6"]);
}

#[test]
fn name_only_requests_fall_back_to_conventions_and_say_so() {
    for preset in ["aks", "aks-ip"] {
        let c = aks_fixture::preset(preset).unwrap();
        let idx = PoolIndex::build(&mk_lbs(&c), NicMap::new());
        let node = &c.nodes[7];
        let r = idx.resolve(
            &NodeSpec {
                name: node.name.clone(),
                ..Default::default()
            },
            None,
        );
        assert_eq!(r.entries.len(), 4, "{preset}");
        assert!(r.notes.iter().any(|n| n.contains("name only")));
    }
}

#[test]
fn unknown_node_has_no_entries() {
    let c = aks_fixture::preset("aks").unwrap();
    let idx = PoolIndex::build(&mk_lbs(&c), NicMap::new());
    let r = idx.resolve(
        &NodeSpec {
            name: "ghost".into(),
            provider_id: "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/other/virtualMachines/0".into(),
            ..Default::default()
        },
        None,
    );
    assert!(r.entries.is_empty());
    assert!(r.notes.iter().any(|n| n.contains("no backend entries")));
}

#[test]
fn standalone_nics_resolve_through_the_nic_list_with_mixed_case() {
    let nic_id = "/subscriptions/S/resourceGroups/MC_RG/providers/Microsoft.Network/networkInterfaces/flex-vm1-nic";
    let nics = vec![json!({
        "id": nic_id, "name": "flex-vm1-nic",
        "properties": {"virtualMachine": {"id": "/subscriptions/S/resourceGroups/MC_RG/providers/Microsoft.Compute/virtualMachines/Flex-VM1"},
                       "ipConfigurations": []}
    })];
    let lbs = vec![LbPools {
        name: "kubernetes".into(),
        id: "lb".into(),
        pools: vec![json!({"name": "kubernetes", "properties": {
        "loadBalancingRules": [{"id": "r"}],
        "loadBalancerBackendAddresses": [
            {"name": "mc_rg_flex-vm1-nicipconfig1", "properties": {"adminState": "Down",
              "networkInterfaceIPConfiguration": {"id": format!("{}/ipConfigurations/ipconfig1", nic_id.to_uppercase())}}},
            {"name": "other", "properties": {"networkInterfaceIPConfiguration": {"id": "/subscriptions/S/resourceGroups/MC_RG/providers/Microsoft.Network/networkInterfaces/other/ipConfigurations/ipconfig1"}}}
        ]}})],
    }];
    let idx = PoolIndex::build(&lbs, nic_map(&nics));
    let node = NodeSpec {
        name: "flex-vm1".into(),
        provider_id: "azure:///subscriptions/S/resourceGroups/mc_rg/providers/Microsoft.Compute/virtualMachines/flex-vm1".into(),
        ..Default::default()
    };
    let r = idx.resolve(&node, None);
    assert_eq!(r.entries.len(), 1);
    assert_eq!(r.entries[0].admin, Admin::Down);
    assert_eq!(&*r.entries[0].entry, "mc_rg_flex-vm1-nicipconfig1");
}

#[test]
fn admin_states_are_read_including_unknown_values() {
    let lbs = vec![LbPools {
        name: "lb".into(),
        id: "lb".into(),
        pools: vec![
            json!({"name": "p", "properties": {"loadBalancerBackendAddresses": [
            {"name": "a", "properties": {"ipAddress": "10.0.0.1", "adminState": "Up"}},
            {"name": "b", "properties": {"ipAddress": "10.0.0.2", "adminState": "Drain"}},
            {"name": "c", "properties": {"ipAddress": "10.0.0.3"}}]}}),
        ],
    }];
    let idx = PoolIndex::build(&lbs, NicMap::new());
    let get = |ip: &str| {
        idx.resolve(
            &NodeSpec {
                name: "n".into(),
                internal_ips: vec![ip.parse().unwrap()],
                ..Default::default()
            },
            None,
        )
        .entries[0]
            .admin
    };
    assert_eq!(
        (get("10.0.0.1"), get("10.0.0.2"), get("10.0.0.3")),
        (Admin::Up, Admin::Other, Admin::None)
    );
    let _ = IpFamily::V4;
}

/// Every entry of `lbs` (as ARM lists them) in the answer form, rendered as text: what
/// `resolve` returned before its fields were shared with the index.
fn rendered(e: &IndexedEntry) -> [String; 6] {
    [
        e.lb.to_string(),
        e.lb_id.to_string(),
        e.pool.to_string(),
        e.entry.to_string(),
        e.ip_configuration_id(),
        e.ip_address(),
    ]
}

#[test]
fn resolved_entries_render_exactly_what_arm_listed() {
    for preset in ["aks", "aks-ip", "aks-multi-slb"] {
        let c = aks_fixture::preset(preset).unwrap();
        let lbs = mk_lbs(&c);
        let idx = PoolIndex::build(&lbs, NicMap::new());
        for node in &c.nodes {
            let spec = spec_of(node);
            // Brute force over the JSON: the entries naming this node's VM or IPs.
            let mut want = Vec::new();
            for lb in &lbs {
                for pool in &lb.pools {
                    if pool["properties"]["outboundRules"].is_array() {
                        continue;
                    }
                    for e in pool["properties"]["loadBalancerBackendAddresses"]
                        .as_array()
                        .unwrap()
                    {
                        let ipc = e["properties"]["networkInterfaceIPConfiguration"]["id"]
                            .as_str()
                            .unwrap_or("");
                        let ip = e["properties"]["ipAddress"].as_str().unwrap_or("");
                        let mine = if ipc.is_empty() {
                            spec.internal_ips.iter().any(|a| a.to_string() == ip)
                        } else {
                            let lower = ipc.to_ascii_lowercase();
                            lower.contains(&format!(
                                "/virtualmachinescalesets/{}/virtualmachines/{}/",
                                node.vmss_name.to_ascii_lowercase(),
                                node.instance_id
                            ))
                        };
                        if mine {
                            want.push([
                                lb.name.clone(),
                                lb.id.clone(),
                                pool["name"].as_str().unwrap().to_string(),
                                e["name"].as_str().unwrap().to_string(),
                                ipc.to_string(),
                                ip.to_string(),
                            ]);
                        }
                    }
                }
            }
            let mut got: Vec<_> = idx
                .resolve(&spec, None)
                .entries
                .iter()
                .map(rendered)
                .collect();
            got.sort();
            want.sort();
            assert!(!want.is_empty(), "{preset} {}", node.name);
            assert_eq!(got, want, "{preset} {}", node.name);
        }
    }
}

#[test]
fn resolving_shares_the_index_strings_instead_of_copying_them() {
    let c = aks_fixture::preset("aks").unwrap();
    let idx = PoolIndex::build(&mk_lbs(&c), NicMap::new());
    let spec = spec_of(&c.nodes[0]);
    let (a, b) = (idx.resolve(&spec, None), idx.resolve(&spec, None));
    assert!(!a.entries.is_empty());
    for (x, y) in a.entries.iter().zip(&b.entries) {
        assert!(Arc::ptr_eq(&x.entry, &y.entry) && Arc::ptr_eq(&x.pool, &y.pool));
        assert!(Arc::ptr_eq(&x.lb_id, &y.lb_id));
        let (xp, xr) = x.ipc.as_ref().unwrap();
        let (yp, yr) = y.ipc.as_ref().unwrap();
        assert!(Arc::ptr_eq(xp, yp) && Arc::ptr_eq(xr, yr));
    }
}

/// An LB document with `sku`, one pool per `(name, properties)` and the given entries in each.
fn mk_lb_doc(sku: Option<&str>, pools: &[(&str, Value)], entries: &[Value]) -> Vec<u8> {
    let pools: Vec<Value> = pools
        .iter()
        .map(|(name, props)| {
            let mut props = props.clone();
            props["loadBalancerBackendAddresses"] = json!(entries);
            json!({"name": name, "id": format!("/lb/backendAddressPools/{name}"), "properties": props})
        })
        .collect();
    let mut doc =
        json!({"name": "lb", "etag": "W/\"1\"", "properties": {"backendAddressPools": pools}});
    if let Some(sku) = sku {
        doc["sku"] = json!({"name": sku, "tier": "Regional"});
    }
    serde_json::to_vec(&doc).unwrap()
}

fn ip_entry(name: &str, ip: &str) -> Value {
    json!({"name": name, "properties": {"ipAddress": ip, "adminState": "Down"}})
}

fn ip_node(name: &str, ip: &str) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        uid: format!("uid-{name}"),
        provider_id: String::new(),
        internal_ips: vec![ip.parse().unwrap()],
    }
}

fn skipped_of(idx: &LbIndex) -> Vec<(String, NotWritten, usize)> {
    idx.skipped()
        .iter()
        .map(|p| (p.name.to_string(), p.why, p.entries))
        .collect()
}

#[test]
fn pools_of_lbs_without_node_admin_state_are_never_indexed_and_say_why() {
    let rules = json!({"loadBalancingRules": [{"id": "r"}]});
    let entries = [ip_entry("n1", "10.0.0.1"), ip_entry("pod", "10.244.0.9")];
    let node = ip_node("n1", "10.0.0.1");
    // ServiceGateway (SKU Service), Basic and Gateway: nothing of the LB can be written.
    for (sku, why) in [
        ("Service", NotWritten::ServiceGateway),
        ("service", NotWritten::ServiceGateway),
        ("Basic", NotWritten::Sku),
        ("Gateway", NotWritten::Sku),
    ] {
        let body = mk_lb_doc(Some(sku), &[("p", rules.clone())], &entries);
        let idx = LbIndex::read("lb", "/lb", &body).unwrap();
        assert_eq!(idx.len(), 0, "{sku}: no entry may be writable");
        assert_eq!(skipped_of(&idx), vec![("p".into(), why, 2)], "{sku}");
        let r = PoolIndex::new(vec![Arc::new(idx)], Arc::default()).resolve(&node, None);
        assert!(r.entries.is_empty(), "{sku}");
        assert!(
            r.notes
                .iter()
                .any(|n| n.contains("load balancer lb") && n.contains(why.reason())),
            "{sku}: {:?}",
            r.notes
        );
    }
    // Standard, or no SKU at all (cloud-provider-azure's default), is written.
    for sku in [Some("Standard"), None] {
        let body = mk_lb_doc(sku, &[("p", rules.clone())], &entries);
        let idx = LbIndex::read("lb", "/lb", &body).unwrap();
        assert_eq!(idx.len(), 2, "{sku:?}");
        assert!(idx.skipped().is_empty(), "{sku:?}");
    }
}

#[test]
fn nat_only_and_outbound_only_pools_are_skipped_but_only_nat_is_worth_a_note() {
    let pools = [
        (
            "lbpool",
            json!({"loadBalancingRules": [{"id": "r"}], "inboundNatRules": [{"id": "n"}]}),
        ),
        ("natpool", json!({"inboundNatRules": [{"id": "n"}]})),
        ("outpool", json!({"outboundRules": [{"id": "o"}]})),
        ("unused", json!({})),
    ];
    let body = mk_lb_doc(Some("Standard"), &pools, &[ip_entry("n1", "10.0.0.1")]);
    let idx = LbIndex::read("lb", "/lb", &body).unwrap();
    assert_eq!(
        skipped_of(&idx),
        vec![
            ("natpool".into(), NotWritten::NatOnly, 1),
            ("outpool".into(), NotWritten::OutboundOnly, 1),
        ]
    );
    let r = PoolIndex::new(vec![Arc::new(idx)], Arc::default())
        .resolve(&ip_node("n1", "10.0.0.1"), None);
    // A pool that load-balancing rules use is written even when NAT rules use it too; an
    // unused pool is kept for when a rule arrives.
    assert_eq!(
        pools_of(&r),
        vec![
            ("lb".into(), "lbpool".into()),
            ("lb".into(), "unused".into())
        ]
    );
    assert!(
        r.notes.iter().any(|n| n.contains("natpool")),
        "{:?}",
        r.notes
    );
    assert!(
        !r.notes.iter().any(|n| n.contains("outpool")),
        "{:?}",
        r.notes
    );
}

#[test]
fn entries_no_known_node_claims_are_counted_per_lb() {
    let rules = json!({"loadBalancingRules": [{"id": "r"}]});
    let entries = [
        ip_entry("n1", "10.0.0.1"),
        ip_entry("n2", "10.0.0.2"),
        ip_entry("pod-a", "10.244.0.9"),
        ip_entry("vm-outside", "10.0.9.9"),
    ];
    let body = mk_lb_doc(None, &[("p", rules)], &entries);
    let idx = PoolIndex::new(
        vec![Arc::new(LbIndex::read("lb", "/lb", &body).unwrap())],
        Arc::default(),
    );
    let nodes = [ip_node("n1", "10.0.0.1"), ip_node("n2", "10.0.0.2")];
    let u = idx.unmatched("lb", nodes.iter());
    assert_eq!(u.count, 2);
    assert_eq!(u.sample, vec!["p/pod-a".to_string(), "p/vm-outside".into()]);
    // One node fewer known: its entry is unclaimed too.
    assert_eq!(idx.unmatched("lb", nodes[..1].iter()).count, 3);
    // A fixture cluster: every entry belongs to a node.
    let c = aks_fixture::preset("aks").unwrap();
    let idx = PoolIndex::build(&mk_lbs(&c), NicMap::new());
    let specs: Vec<NodeSpec> = c.nodes.iter().map(spec_of).collect();
    for lb in &c.load_balancers {
        assert_eq!(
            idx.unmatched(&lb.name, specs.iter()).count,
            0,
            "{}",
            lb.name
        );
    }
}
