//! Every example in `tests/vectors/` (copies of the project's ARM vectors) round-trips: the simulator is seeded with the
//! example's resources, the example request is sent, and the response must (a) carry every field
//! of the example response with the same JSON type and (b) deserialize with the
//! azure_mgmt_network 0.21 models.
//!
//! Not compared: `inboundNatRulesPortMapping` (NRP computes it from NAT rules, which the
//! simulator does not model) and values (ids use the same templates, etags and GUIDs differ).
#![allow(clippy::unwrap_used)] // tests may unwrap (helpers outside #[test] fns too)

mod common;

use arm_sim::seed::{Seed, SeedAddress, SeedLb, SeedPool, SeedResourceGroup, SeedSubscription};
use arm_sim::{ArmSim, ArmSimOptions};
use azure_mgmt_network::package_2024_03::models;
use common::Raw;
use serde_json::{Map, Value};
use std::path::PathBuf;

const IGNORED: &[&str] = &["inboundNatRulesPortMapping"];

/// Byte-exact copies of the shared vectors (see `tests/vectors/README.md` for sources and hashes).
fn vectors_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors"))
}

fn load(name: &str) -> Value {
    let path = vectors_dir().join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// Paths where `ours` lacks a field of `example` or has another JSON type.
fn shape_gaps(ours: &Value, example: &Value, at: &str, gaps: &mut Vec<String>) {
    match (ours, example) {
        (Value::Object(o), Value::Object(e)) => {
            for (k, ev) in e {
                if IGNORED.contains(&k.as_str()) {
                    continue;
                }
                match o.get(k) {
                    Some(ov) => shape_gaps(ov, ev, &format!("{at}.{k}"), gaps),
                    None => gaps.push(format!("{at}.{k} missing")),
                }
            }
        }
        (Value::Array(o), Value::Array(e)) => {
            if let Some(e0) = e.first() {
                match o.first() {
                    Some(o0) => shape_gaps(o0, e0, &format!("{at}[0]"), gaps),
                    None => gaps.push(format!("{at} empty")),
                }
            }
        }
        (Value::String(_), Value::String(_))
        | (Value::Number(_), Value::Number(_))
        | (Value::Bool(_), Value::Bool(_)) => {}
        (o, e) => gaps.push(format!("{at}: type differs ({o} vs {e})")),
    }
}

fn assert_shape(ours: &Value, example: &Value, what: &str) {
    let mut gaps = Vec::new();
    shape_gaps(ours, example, "$", &mut gaps);
    assert!(
        gaps.is_empty(),
        "{what}: response lacks fields of the example: {gaps:#?}\nours: {ours:#}"
    );
}

fn id(v: &Value) -> Option<String> {
    v.get("id").and_then(Value::as_str).map(str::to_owned)
}

/// A seed pool equivalent to an example pool body.
fn seed_pool(p: &Value) -> SeedPool {
    let props = p["properties"].as_object().cloned().unwrap_or_default();
    let nic: Vec<String> = props
        .get("backendIPConfigurations")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(id).collect())
        .unwrap_or_default();
    let addresses = props
        .get("loadBalancerBackendAddresses")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|e| SeedAddress {
                    name: e["name"].as_str().unwrap().to_owned(),
                    ip_address: e["properties"]["ipAddress"].as_str().map(str::to_owned),
                    virtual_network: id(&e["properties"]["virtualNetwork"]),
                    subnet: id(&e["properties"]["subnet"]),
                    admin_state: None,
                })
                .collect()
        })
        .unwrap_or_default();
    let extra: Map<String, Value> = props
        .into_iter()
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "provisioningState" | "backendIPConfigurations" | "loadBalancerBackendAddresses"
            )
        })
        .collect();
    SeedPool {
        name: p["name"].as_str().unwrap().to_owned(),
        virtual_network: None,
        nic_ip_configurations: nic,
        addresses,
        properties: Some(extra),
    }
}

fn seed_lb(name: &str, body: Option<&Value>, pools: Vec<SeedPool>) -> SeedLb {
    let props = body.and_then(|b| b["properties"].as_object()).map(|p| {
        p.iter()
            .filter(|(k, _)| {
                !matches!(
                    k.as_str(),
                    "provisioningState" | "resourceGuid" | "backendAddressPools"
                )
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<Map<String, Value>>()
    });
    SeedLb {
        name: name.to_owned(),
        location: body.and_then(|b| b["location"].as_str()).map(str::to_owned),
        sku: body.and_then(|b| b.get("sku").cloned()),
        tags: None,
        properties: props,
        backend_pools: pools,
    }
}

async fn sim_with(rg: &str, lb: SeedLb) -> ArmSim {
    let seed = Seed {
        subscriptions: vec![SeedSubscription {
            id: "subid".into(),
            resource_groups: vec![SeedResourceGroup {
                name: rg.to_owned(),
                location: "westus".into(),
                virtual_networks: vec![],
                network_interfaces: vec![],
                virtual_machine_scale_sets: vec![],
                load_balancers: vec![lb],
            }],
        }],
        ..Seed::default()
    };
    let mut options = ArmSimOptions {
        seed,
        ..Default::default()
    };
    options.tuning.completion_delay_ms = 100;
    ArmSim::start(options).await.unwrap()
}

fn url(p: &Value) -> String {
    let mut u = format!(
        "/subscriptions/{}/resourceGroups/{}/providers/Microsoft.Network/loadBalancers/{}",
        p["subscriptionId"].as_str().unwrap(),
        p["resourceGroupName"].as_str().unwrap(),
        p["loadBalancerName"].as_str().unwrap()
    );
    if let Some(pool) = p["backendAddressPoolName"].as_str() {
        u.push_str("/backendAddressPools/");
        u.push_str(pool);
    }
    u
}

#[tokio::test]
async fn pool_get_examples_round_trip() {
    for file in [
        "LoadBalancerBackendAddressPoolGet.json",
        "LBBackendAddressPoolWithBackendAddressesGet.json",
    ] {
        let ex = load(file);
        let expected = &ex["responses"]["200"]["body"];
        let sim = sim_with(
            ex["parameters"]["resourceGroupName"].as_str().unwrap(),
            seed_lb("lb", None, vec![seed_pool(expected)]),
        )
        .await;
        let raw = Raw::new(&sim);
        let tok = raw.token(&sim).await;
        let r = raw.get(&url(&ex["parameters"]), &tok).await;
        assert_eq!(r.status, 200, "{file}: {:?}", r.body);
        assert_shape(&r.body, expected, file);
        assert_eq!(r.body["id"], expected["id"], "{file}: same id template");
        let model: models::BackendAddressPool = serde_json::from_slice(&r.raw).unwrap();
        assert_eq!(model.name.as_deref(), Some("backend"));
        let text = std::fs::read_to_string(vectors_dir().join(file)).unwrap();
        let (want_top, want_props) = key_order(&text, "\"body\"");
        let (got_top, got_props) = key_order(&String::from_utf8_lossy(&r.raw), "");
        assert_eq!(got_top, want_top, "{file}: NRP's key order");
        // Newer api-versions also list a NIC-based pool's members as entries (contracts/arm.md
        // 1.3), which this older example lacks: the example's keys keep their order.
        let got_props: Vec<&String> = got_props
            .iter()
            .filter(|k| want_props.contains(k))
            .collect();
        let want_props: Vec<&String> = want_props.iter().collect();
        assert_eq!(got_props, want_props, "{file}: NRP's key order");
    }
}

#[tokio::test]
async fn pool_list_examples_round_trip() {
    for file in [
        "LoadBalancerBackendAddressPoolList.json",
        "LBBackendAddressPoolListWithBackendAddressesPoolType.json",
    ] {
        let ex = load(file);
        let expected = &ex["responses"]["200"]["body"];
        let pools = expected["value"]
            .as_array()
            .unwrap()
            .iter()
            .map(seed_pool)
            .collect();
        let sim = sim_with("testrg", seed_lb("lb", None, pools)).await;
        let raw = Raw::new(&sim);
        let tok = raw.token(&sim).await;
        let r = raw
            .get(
                &format!("{}/backendAddressPools", url(&ex["parameters"])),
                &tok,
            )
            .await;
        assert_eq!(r.status, 200, "{file}: {:?}", r.body);
        assert_shape(&r.body, expected, file);
        let model: models::LoadBalancerBackendAddressPoolListResult =
            serde_json::from_slice(&r.raw).unwrap();
        assert_eq!(model.value.len(), 1);
    }
}

#[tokio::test]
async fn load_balancer_get_examples_round_trip() {
    for file in [
        "LoadBalancerGet.json",
        "LoadBalancerGetInboundNatRulePortMapping.json",
    ] {
        let ex = load(file);
        let expected = &ex["responses"]["200"]["body"];
        let pools = expected["properties"]["backendAddressPools"]
            .as_array()
            .unwrap()
            .iter()
            .map(seed_pool)
            .collect();
        let sim = sim_with("rg1", seed_lb("lb", Some(expected), pools)).await;
        let raw = Raw::new(&sim);
        let tok = raw.token(&sim).await;
        let r = raw.get(&url(&ex["parameters"]), &tok).await;
        assert_eq!(r.status, 200, "{file}: {:?}", r.body);
        assert_shape(&r.body, expected, file);
        let model: models::LoadBalancer = serde_json::from_slice(&r.raw).unwrap();
        assert_eq!(model.properties.unwrap().backend_address_pools.len(), 1);
        // NRP's key order: top-level members and `properties` as in the example, so
        // `provisioningState` first (a client may stop reading a 16 MB LB there).
        // (The example's own order, read from its text: serde_json's map would sort it.)
        let text = std::fs::read_to_string(vectors_dir().join(file)).unwrap();
        let (want_top, want_props) = key_order(&text, "\"body\"");
        let (got_top, got_props) = key_order(&String::from_utf8_lossy(&r.raw), "");
        assert_eq!(got_top, want_top, "{file}");
        assert_eq!(got_props, want_props, "{file}");
    }
}

/// The member names, in order, of the first object after `after` in `text` and of its
/// `properties` object.
fn key_order(text: &str, after: &str) -> (Vec<String>, Vec<String>) {
    use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
    struct Keys<'a>(&'a mut Vec<String>, Option<&'a mut Vec<String>>);
    impl<'de> Visitor<'de> for Keys<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(mut self, mut m: A) -> Result<(), A::Error> {
            while let Some(k) = m.next_key::<String>()? {
                match (&mut self.1, k.as_str()) {
                    (Some(props), "properties") => {
                        m.next_value_seed(Seed(props))?;
                    }
                    _ => {
                        m.next_value::<IgnoredAny>()?;
                    }
                }
                self.0.push(k);
            }
            Ok(())
        }
    }
    struct Seed<'a>(&'a mut Vec<String>);
    impl<'de> serde::de::DeserializeSeed<'de> for Seed<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_map(Keys(self.0, None))
        }
    }
    let start = text.find(after).map_or(0, |i| i + after.len());
    let from = start + text[start..].find('{').unwrap();
    let (mut top, mut props) = (Vec::new(), Vec::new());
    let mut de = serde_json::Deserializer::from_str(&text[from..]);
    (&mut de)
        .deserialize_map(Keys(&mut top, Some(&mut props)))
        .unwrap();
    (top, props)
}

#[tokio::test]
async fn pool_put_example_round_trips_as_update_and_create() {
    let ex = load("LBBackendAddressPoolWithBackendAddressesPut.json");
    let params = &ex["parameters"];
    let request = &params["parameters"];
    // Update (200): the pool exists with its load-balancing rule.
    let existing = seed_pool(&ex["responses"]["200"]["body"]);
    let sim = sim_with(
        "testrg",
        seed_lb(
            "lb",
            None,
            vec![SeedPool {
                addresses: vec![],
                ..existing
            }],
        ),
    )
    .await;
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let path = url(params);
    let r = raw.put(&path, &tok, request, None).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert!(r.header("azure-asyncoperation").is_some());
    let model: models::BackendAddressPool = serde_json::from_slice(&r.raw).unwrap();
    assert_eq!(
        model
            .properties
            .unwrap()
            .load_balancer_backend_addresses
            .len(),
        2
    );
    let done = raw
        .wait_op(r.header("azure-asyncoperation").unwrap(), &tok)
        .await;
    assert_eq!(done["status"], "Succeeded");
    let final_get = raw.get(&path, &tok).await;
    assert_shape(&final_get.body, &ex["responses"]["200"]["body"], "PUT 200");

    // Create (201) on a load balancer without that pool. A new pool has no rules yet, so the
    // example's (synthetic) loadBalancingRules are not expected.
    let sim = sim_with("testrg", seed_lb("lb", None, vec![])).await;
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let r = raw.put(&path, &tok, request, None).await;
    assert_eq!(r.status, 201, "{:?}", r.body);
    let mut expected = ex["responses"]["201"]["body"].clone();
    expected["properties"]
        .as_object_mut()
        .unwrap()
        .remove("loadBalancingRules");
    raw.wait_op(r.header("azure-asyncoperation").unwrap(), &tok)
        .await;
    assert_shape(&raw.get(&path, &tok).await.body, &expected, "PUT 201");
}

#[tokio::test]
async fn pool_delete_example_round_trips() {
    let ex = load("LoadBalancerBackendAddressPoolDelete.json");
    let sim = sim_with(
        "testrg",
        seed_lb(
            "lb",
            None,
            vec![seed_pool(
                &serde_json::json!({"name": "backend", "properties": {}}),
            )],
        ),
    )
    .await;
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let auth = format!("Bearer {tok}");
    let r = raw
        .send(
            "DELETE",
            &format!("{}?{}", url(&ex["parameters"]), common::API),
            &[("authorization", &auth)],
            None,
        )
        .await;
    assert!(
        ex["responses"].get(r.status.to_string()).is_some(),
        "status {} is one of the example's",
        r.status
    );
    for h in ex["responses"]["202"]["headers"]
        .as_object()
        .unwrap()
        .keys()
    {
        assert!(r.header(h).is_some(), "header {h} missing");
    }
}

#[tokio::test]
async fn vmss_ip_configuration_ids_from_the_nat_rule_example_work_as_pool_members() {
    let ex = load("InboundNatRuleList.json");
    let text = ex.to_string();
    let ids: Vec<String> = text
        .split('"')
        .filter(|s| s.contains("/virtualMachineScaleSets/") && s.contains("/ipConfigurations/"))
        .map(str::to_owned)
        .collect();
    assert!(
        !ids.is_empty(),
        "example carries VMSS NIC ipConfiguration ids"
    );
    let pool = SeedPool {
        name: "backend".into(),
        virtual_network: None,
        nic_ip_configurations: ids.clone(),
        addresses: vec![],
        properties: None,
    };
    let sim = sim_with("testrg", seed_lb("lb", None, vec![pool])).await;
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let r = raw.get("/subscriptions/subid/resourceGroups/testrg/providers/Microsoft.Network/loadBalancers/lb/backendAddressPools/backend", &tok).await;
    assert_eq!(
        r.body["properties"]["backendIPConfigurations"][0]["id"],
        serde_json::json!(ids[0])
    );
    let entry = &r.body["properties"]["loadBalancerBackendAddresses"][0];
    assert_eq!(
        entry["properties"]["networkInterfaceIPConfiguration"]["id"],
        serde_json::json!(ids[0])
    );
    assert!(
        uuid::Uuid::parse_str(entry["name"].as_str().unwrap()).is_ok(),
        "GUID entry names like NRP"
    );
}
