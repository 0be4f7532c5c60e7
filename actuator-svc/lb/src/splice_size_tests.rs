use super::*;

const LIMIT: usize = MAX_REQUEST_BODY;

fn lb_doc(preset: &str, nodes: usize) -> Bytes {
    let store = arm_sim::seed::Seed::preset(preset, Some(nodes))
        .unwrap()
        .build()
        .unwrap();
    let key = store.find_lb("kubernetes").unwrap();
    let lb = store.lb(&key.sub, &key.rg, &key.lb).unwrap();
    Bytes::from(serde_json::to_vec(&lb.render(&key.sub, &key.rg)).unwrap())
}

/// One node Down in every pool (a cut): the first entry of each.
fn one_node_down(doc: &[u8]) -> BTreeMap<String, BTreeMap<String, Admin>> {
    let v: serde_json::Value = serde_json::from_slice(doc).unwrap();
    let mut changes = BTreeMap::new();
    for pool in v["properties"]["backendAddressPools"].as_array().unwrap() {
        let entry = &pool["properties"]["loadBalancerBackendAddresses"][0]["name"];
        if let (Some(p), Some(e)) = (pool["name"].as_str(), entry.as_str()) {
            changes.insert(p.to_owned(), BTreeMap::from([(e.to_owned(), Admin::Down)]));
        }
    }
    changes
}

#[test]
fn bodies_at_5000_nodes_dual_stack_stay_well_under_4_mb() {
    for nodes in [240, 2000, 5000] {
        for preset in ["aks", "aks-ip"] {
            let doc = lb_doc(preset, nodes);
            let changes = one_node_down(&doc);
            let whole = whole_lb(&doc, &changes).unwrap();
            assert_eq!(whole.count, changes.len());
            let body = whole.to_vec();
            // Still the LB, with the change.
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(
                v["properties"]["backendAddressPools"]
                    .as_array()
                    .map(Vec::len),
                Some(changes.len())
            );
            let mut largest_pool = 0;
            for (pool, c) in &changes {
                let one = one_pool(&doc, pool, c).unwrap().unwrap();
                largest_pool = largest_pool.max(one.len());
            }
            println!(
                "{preset:>6} {nodes:>5} nodes: LB as read {:>9} B, whole-LB PUT body {:>9} B ({:.1} %), largest pool PUT body {:>9} B",
                doc.len(),
                whole.len(),
                100.0 * whole.len() as f64 / doc.len() as f64,
                largest_pool
            );
            // "Well under": at most 3/4 of the limit, at the largest size AKS supports.
            assert!(
                whole.len() <= LIMIT * 3 / 4,
                "{preset} at {nodes} nodes: {} B",
                whole.len()
            );
            assert!(largest_pool <= whole.len());
        }
    }
}
