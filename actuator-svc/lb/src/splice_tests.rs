use super::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::value::RawValue;
use serde_json::{Value, json};

/// A JSON value with keys in a chosen order (serde_json's maps sort them).
#[derive(Debug, Clone)]
enum J {
    Obj(Vec<(String, J)>),
    Arr(Vec<J>),
    Lit(String),
}

fn s(v: &str) -> J {
    J::Lit(serde_json::to_string(v).unwrap())
}

fn ws(rng: &mut StdRng) -> &'static str {
    ["", "", " ", "\n  ", "\t"][rng.gen_range(0..5)]
}

fn write(j: &J, rng: &mut StdRng, out: &mut String) {
    match j {
        J::Lit(t) => out.push_str(t),
        J::Arr(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(ws(rng));
                write(v, rng, out);
                out.push_str(ws(rng));
            }
            out.push(']');
        }
        J::Obj(members) => {
            out.push('{');
            for (i, (k, v)) in members.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(ws(rng));
                out.push_str(&serde_json::to_string(k).unwrap());
                out.push_str(ws(rng));
                out.push(':');
                out.push_str(ws(rng));
                write(v, rng, out);
                out.push_str(ws(rng));
            }
            out.push('}');
        }
    }
}

fn shuffled(mut m: Vec<(String, J)>, rng: &mut StdRng) -> J {
    for i in (1..m.len()).rev() {
        let j = rng.gen_range(0..=i);
        m.swap(i, j);
    }
    J::Obj(m)
}

fn junk(rng: &mut StdRng, depth: usize) -> J {
    match rng.gen_range(0..if depth > 2 { 3 } else { 5 }) {
        0 => J::Lit(rng.gen_range(-5..500).to_string()),
        1 => s(["x", "é\"q", "provisioningState", "adminState"][rng.gen_range(0..4)]),
        2 => J::Lit(["true", "null", "1.5e3"][rng.gen_range(0..3)].into()),
        3 => J::Arr(
            (0..rng.gen_range(0..3))
                .map(|_| junk(rng, depth + 1))
                .collect(),
        ),
        _ => {
            let m = (0..rng.gen_range(0..3))
                .map(|i| (format!("k{i}"), junk(rng, depth + 1)))
                .collect();
            shuffled(m, rng)
        }
    }
}

fn admin_lit(rng: &mut StdRng) -> J {
    s(["Down", "None", "Up", "Drain"][rng.gen_range(0..4)])
}

fn entry(rng: &mut StdRng, name: String) -> J {
    let mut m = vec![("name".to_string(), s(&name))];
    if rng.gen_bool(0.5) {
        m.push(("id".into(), s(&format!("/x/{name}"))));
        m.push(("etag".into(), s("W/\"1\"")));
    }
    if rng.gen_bool(0.3) {
        m.push(("type".into(), s("Microsoft.Network/x")));
    }
    match rng.gen_range(0..4) {
        0 => {}
        1 => m.push(("properties".into(), J::Lit("null".into()))),
        2 => m.push(("properties".into(), J::Obj(vec![]))),
        _ => {
            let mut p = vec![("ipAddress".to_string(), s("10.0.0.1"))];
            if rng.gen_bool(0.5) {
                p.push(("adminState".into(), admin_lit(rng)));
            }
            if rng.gen_bool(0.5) {
                p.push(("provisioningState".into(), s("Succeeded")));
            }
            if rng.gen_bool(0.3) {
                p.push(("extra".into(), junk(rng, 3)));
            }
            if rng.gen_bool(0.3) {
                let nic = J::Obj(vec![("id".into(), s("/nic/ipConfigurations/c"))]);
                p.push(("networkInterfaceIPConfiguration".into(), nic));
            }
            if rng.gen_bool(0.2) {
                p.push(("inboundNatRulesPortMapping".into(), junk(rng, 3)));
            }
            // Sometimes nothing but read-only members.
            if rng.gen_bool(0.15) {
                p.retain(|(k, _)| k != "ipAddress" && k != "extra" && k != "adminState");
            }
            m.push(("properties".into(), shuffled(p, rng)));
        }
    }
    shuffled(m, rng)
}

fn lb_doc(rng: &mut StdRng) -> J {
    let pools = (0..rng.gen_range(0..4))
        .map(|p| {
            let entries = (0..rng.gen_range(0..6))
                .map(|e| entry(rng, format!("e{e}")))
                .collect();
            let mut props = vec![("loadBalancerBackendAddresses".to_string(), J::Arr(entries))];
            if rng.gen_bool(0.7) {
                props.push((
                    "provisioningState".into(),
                    s(["Succeeded", "Updating"][rng.gen_range(0..2)]),
                ));
            }
            props.push(("loadBalancingRules".into(), junk(rng, 1)));
            if rng.gen_bool(0.3) {
                let ids = vec![J::Obj(vec![("id".into(), s("/nic/ipConfigurations/c"))])];
                props.push(("backendIPConfigurations".into(), J::Arr(ids)));
            }
            let mut m = vec![("properties".to_string(), shuffled(props, rng))];
            if rng.gen_bool(0.5) {
                m.push(("etag".into(), s("W/\"9\"")));
                m.push((
                    "type".into(),
                    s("Microsoft.Network/loadBalancers/backendAddressPools"),
                ));
            }
            if rng.gen_bool(0.9) {
                m.push(("name".into(), s(&format!("p{p}"))));
            }
            m.push(("id".into(), s(&format!("/lb/backendAddressPools/p{p}"))));
            shuffled(m, rng)
        })
        .collect();
    let mut props = vec![
        ("backendAddressPools".to_string(), J::Arr(pools)),
        ("loadBalancingRules".into(), junk(rng, 0)),
        ("probes".into(), junk(rng, 0)),
        ("frontendIPConfigurations".into(), junk(rng, 0)),
    ];
    if rng.gen_bool(0.8) {
        props.push(("provisioningState".into(), s("Succeeded")));
    }
    if rng.gen_bool(0.5) {
        props.push((
            "resourceGuid".into(),
            s("00000000-0000-0000-0000-000000000000"),
        ));
    }
    let mut top = vec![
        ("name".to_string(), s("kubernetes")),
        ("etag".into(), s("W/\"9\"")),
        ("location".into(), s("eastus")),
        ("properties".into(), shuffled(props, rng)),
    ];
    if rng.gen_bool(0.5) {
        top.push(("type".into(), s("Microsoft.Network/loadBalancers")));
    }
    shuffled(top, rng)
}

/// What the body must mean: the edits applied to the parsed original.
fn expected(
    original: &[u8],
    changes: &BTreeMap<String, BTreeMap<String, Admin>>,
) -> (Value, usize) {
    let mut v: Value = serde_json::from_slice(original).unwrap();
    strip_read_only(&mut v);
    let mut count = 0;
    let props = v["properties"].as_object_mut().unwrap();
    for pool in props["backendAddressPools"].as_array_mut().unwrap() {
        let name = pool.get("name").and_then(Value::as_str).map(str::to_owned);
        let pp = pool["properties"].as_object_mut().unwrap();
        let Some(c) = name.and_then(|n| changes.get(&n)) else {
            continue;
        };
        for e in pp["loadBalancerBackendAddresses"].as_array_mut().unwrap() {
            let Some(a) = e["name"].as_str().and_then(|n| c.get(n)) else {
                continue;
            };
            count += 1;
            if !e.get("properties").is_some_and(Value::is_object) {
                e["properties"] = json!({});
            }
            e["properties"]["adminState"] = json!(a.as_arm());
        }
    }
    (v, count)
}

/// The read-only members of the spec, removed from a parsed document (a second,
/// tree-based statement of what [`read_only`] matches).
fn strip_read_only(v: &mut Value) {
    let Some(top) = v.as_object_mut() else {
        return;
    };
    top.remove("etag");
    top.remove("type");
    let Some(Value::Object(props)) = top.get_mut("properties") else {
        return;
    };
    props.remove("provisioningState");
    props.remove("resourceGuid");
    let refs: &[(&str, &[&str])] = &[
        (
            "frontendIPConfigurations",
            &[
                "loadBalancingRules",
                "outboundRules",
                "inboundNatRules",
                "inboundNatPools",
            ],
        ),
        (
            "backendAddressPools",
            &[
                "loadBalancingRules",
                "outboundRules",
                "outboundRule",
                "inboundNatRules",
                "backendIPConfigurations",
            ],
        ),
        ("loadBalancingRules", &[]),
        ("probes", &["loadBalancingRules"]),
        ("inboundNatRules", &["backendIPConfiguration"]),
        ("inboundNatPools", &[]),
        ("outboundRules", &[]),
    ];
    for (kind, back) in refs {
        let Some(Value::Array(items)) = props.get_mut(*kind) else {
            continue;
        };
        for item in items.iter_mut().filter_map(Value::as_object_mut) {
            item.remove("etag");
            item.remove("type");
            let Some(Value::Object(p)) = item.get_mut("properties") else {
                continue;
            };
            p.remove("provisioningState");
            for r in *back {
                p.remove(*r);
            }
            if *kind != "backendAddressPools" {
                continue;
            }
            let Some(Value::Array(entries)) = p.get_mut("loadBalancerBackendAddresses") else {
                continue;
            };
            for e in entries.iter_mut().filter_map(Value::as_object_mut) {
                e.remove("id");
                e.remove("etag");
                e.remove("type");
                if let Some(Value::Object(ep)) = e.get_mut("properties") {
                    ep.remove("provisioningState");
                    ep.remove("networkInterfaceIPConfiguration");
                    ep.remove("inboundNatRulesPortMapping");
                }
            }
        }
    }
}

fn raw_members(doc: &[u8]) -> BTreeMap<String, String> {
    let top: BTreeMap<String, Box<RawValue>> = serde_json::from_slice(doc).unwrap();
    let props: BTreeMap<String, Box<RawValue>> =
        serde_json::from_str(top["properties"].get()).unwrap();
    top.iter()
        .filter(|(k, _)| *k != "properties")
        .chain(props.iter())
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "backendAddressPools" | "provisioningState" | "resourceGuid" | "etag" | "type"
            )
        })
        .map(|(k, v)| (k.clone(), v.get().to_string()))
        .collect()
}

#[test]
fn random_documents_and_edits_change_only_the_edited_values() {
    let admins = [Admin::Down, Admin::None, Admin::Up];
    for seed in 0..400u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut text = String::new();
        write(&lb_doc(&mut rng), &mut rng, &mut text);
        let original = Bytes::from(text.clone());
        let mut changes: BTreeMap<String, BTreeMap<String, Admin>> = BTreeMap::new();
        for _ in 0..rng.gen_range(0..6) {
            changes
                .entry(format!("p{}", rng.gen_range(0..5)))
                .or_default()
                .insert(
                    format!("e{}", rng.gen_range(0..7)),
                    admins[rng.gen_range(0..3)],
                );
        }
        let spliced = whole_lb(&original, &changes).unwrap();
        let body = spliced.to_vec();
        assert_eq!(body.len(), spliced.len());
        let got: Value = serde_json::from_slice(&body).unwrap_or_else(|e| {
            panic!(
                "seed {seed}: {e}\n{text}\n{}",
                String::from_utf8_lossy(&body)
            )
        });
        let (want, count) = expected(original.as_ref(), &changes);
        assert_eq!(got, want, "seed {seed}\n{text}");
        assert_eq!(spliced.count, count, "seed {seed}");
        // Rules, probes, frontends and top-level fields: byte for byte.
        assert_eq!(raw_members(&body), raw_members(&original), "seed {seed}");
        // The compact form (a kept base) splices to the same bodies as the original.
        let small = compact(&original).unwrap();
        assert!(small.len() <= original.len(), "seed {seed}");
        // Compacting in the index's scan (what a read does) gives the same base.
        let mut alongside = Compactor::new();
        super::super::index::LbIndex::read_also("lb", "/lb", &original, &mut alongside).unwrap();
        assert_eq!(alongside.finish(&original), small, "seed {seed}");
        assert_eq!(
            whole_lb(&small, &changes).unwrap().to_vec(),
            body,
            "seed {seed}"
        );
        for (pool, c) in &changes {
            assert_eq!(
                one_pool(&small, pool, c).unwrap().map(|b| b.to_vec()),
                one_pool(&original, pool, c).unwrap().map(|b| b.to_vec()),
                "seed {seed}"
            );
        }
        // Per pool: the same body as cut out of the whole-LB one.
        for (pool, c) in &changes {
            if let Some(one) = one_pool(&original, pool, c).unwrap() {
                let v: Value = serde_json::from_slice(&one.to_vec()).unwrap();
                let from_whole = got["properties"]["backendAddressPools"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|p| p["name"] == pool.as_str())
                    .unwrap();
                assert_eq!(&v, from_whole, "seed {seed}");
            }
        }
    }
}

#[test]
fn untouched_bytes_are_the_original_slices() {
    let text = r#"{ "etag" : "W/\"1\"",
  "properties": {"provisioningState": "Succeeded", "probes": [ {"name":"p"} ],
   "backendAddressPools": [{"name":"k","properties":{"loadBalancerBackendAddresses":[
 {"name":"a","properties":{"ipAddress":"10.0.0.1","adminState":"None"}},
 {"name":"b","properties":{"ipAddress":"10.0.0.2"}},
 {"name":"c"}, {"name":"d","properties":{}} ],"provisioningState":"Updating"}}]}}"#;
    let changes = BTreeMap::from([(
        "k".to_string(),
        BTreeMap::from([
            ("a".to_string(), Admin::Down),
            ("b".to_string(), Admin::Down),
            ("c".to_string(), Admin::Down),
            ("d".to_string(), Admin::None),
        ]),
    )]);
    let spliced = whole_lb(&Bytes::from(text), &changes).unwrap();
    assert_eq!(spliced.count, 4);
    // The read-only etag and provisioning states go; everything else is as it was.
    let want = r#"{ 
  "properties": { "probes": [ {"name":"p"} ],
   "backendAddressPools": [{"name":"k","properties":{"loadBalancerBackendAddresses":[
 {"name":"a","properties":{"ipAddress":"10.0.0.1","adminState":"Down"}},
 {"name":"b","properties":{"ipAddress":"10.0.0.2","adminState":"Down"}},
 {"name":"c","properties":{"adminState":"Down"}}, {"name":"d","properties":{"adminState":"None"}} ]}}]}}"#;
    assert_eq!(String::from_utf8(spliced.to_vec()).unwrap(), want);
    // The big unchanged stretches are slices of the read, not copies.
    assert!(spliced.chunks().len() <= 2 * 6 + 1);
}

#[test]
fn escaped_names_match_and_missing_pools_are_none() {
    let text = Bytes::from(
        r#"{"properties":{"backendAddressPools":[{"name":"p\u0031","properties":{"loadBalancerBackendAddresses":[{"name":"e\u0031"}]}}]}}"#,
    );
    let c = BTreeMap::from([("e1".to_string(), Admin::Down)]);
    let one = one_pool(&text, "p1", &c).unwrap().unwrap();
    assert_eq!(one.count, 1);
    let v: Value = serde_json::from_slice(&one.to_vec()).unwrap();
    assert_eq!(
        v["properties"]["loadBalancerBackendAddresses"][0]["properties"]["adminState"],
        "Down"
    );
    assert!(one_pool(&text, "nope", &c).unwrap().is_none());
    for bad in [&b"not json"[..], b"", b"{\"properties\": 3"] {
        assert!(whole_lb(&Bytes::from_static(bad), &BTreeMap::new()).is_err());
    }
    // A document of another shape is sent back as it was.
    let other = Bytes::from_static(b"[1, {\"properties\": 3}]");
    assert_eq!(
        whole_lb(&other, &BTreeMap::new()).unwrap().to_vec(),
        &other[..]
    );
}
