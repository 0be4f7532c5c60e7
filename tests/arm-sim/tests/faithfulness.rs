//! What arm-sim enforces because ARM / NRP enforce it (contracts/arm.md section 9): the 4 MB
//! request limit, read-only fields in a PUT ignored, the etag changing again when an operation
//! ends, and the pessimistic NIC-pool mode.
#![allow(clippy::unwrap_used)] // tests may unwrap (helpers outside #[test] fns too)

mod common;

use common::{Raw, lb_path, pool_path, start};
use serde_json::{Value, json};

/// Operations end only when the test says so.
fn manual_completion(sim: &arm_sim::ArmSim) {
    let mut tuning = sim.tuning();
    tuning.completion_delay_ms = 3_600_000;
    sim.set_tuning(tuning);
}

fn put_request(raw_body: Vec<u8>, token: &str) -> (Vec<(String, String)>, Vec<u8>) {
    (
        vec![
            ("authorization".into(), format!("Bearer {token}")),
            ("content-type".into(), "application/json".into()),
        ],
        raw_body,
    )
}

/// A pool body of exactly `len` bytes: the pool as read, padded with an unknown top-level member
/// (NRP reads only `name` and `properties` of a pool body).
fn padded(pool: &Value, len: usize) -> Vec<u8> {
    let mut v = pool.clone();
    v["pad"] = json!("");
    let base = serde_json::to_vec(&v).unwrap().len();
    assert!(base <= len);
    v["pad"] = json!("x".repeat(len - base));
    let out = serde_json::to_vec(&v).unwrap();
    assert_eq!(out.len(), len);
    out
}

#[tokio::test]
async fn request_bodies_over_4_mb_are_refused_with_arms_413() {
    let sim = start("aks-ip").await;
    manual_completion(&sim);
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let path = pool_path(&sim, "kubernetes", "kubernetes");
    let pool = raw.get(&path, &tok).await.body;
    let etag_before = pool["etag"].clone();

    let (headers, body) = put_request(padded(&pool, arm_sim::MAX_REQUEST_BODY + 1), &tok);
    let h: Vec<(&str, &str)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let target = format!("{path}?{}", common::API);
    let refused = raw.send("PUT", &target, &h, Some(body)).await;
    assert_eq!(refused.status, 413, "{:?}", refused.body);
    assert_eq!(
        refused.body,
        json!({"error": {"code": "RequestContentTooLarge",
            "message": "The request content size exceeds the maximum size of 4 MB."}})
    );
    assert_eq!(
        refused.header("content-type"),
        Some("application/json; charset=utf-8")
    );
    // Nothing happened: no operation, same etag; the refusal is in the request log.
    let after = raw.get(&path, &tok).await.body;
    assert_eq!(after["etag"], etag_before);
    assert!(
        sim.requests()
            .iter()
            .any(|r| r.method == "PUT" && r.status == 413)
    );

    // At the limit the size is fine (the PUT changes nothing, so it is answered `Succeeded`).
    let (_, body) = put_request(padded(&pool, arm_sim::MAX_REQUEST_BODY), &tok);
    let ok = raw.send("PUT", &target, &h, Some(body)).await;
    assert_eq!(ok.status, 200, "{:?}", ok.body);
    sim.shutdown().await;
}

/// Sets every read-only field NRP computes to a wrong value, everywhere in an LB document.
fn scramble_read_only(lb: &mut Value) {
    lb["etag"] = json!("W/\"scrambled\"");
    lb["type"] = json!("Microsoft.Network/somethingElse");
    let props = lb["properties"].as_object_mut().unwrap();
    props.insert("provisioningState".into(), json!("Failed"));
    props.insert(
        "resourceGuid".into(),
        json!("00000000-dead-beef-0000-000000000000"),
    );
    for kind in [
        "frontendIPConfigurations",
        "loadBalancingRules",
        "probes",
        "outboundRules",
        "backendAddressPools",
    ] {
        for child in props[kind].as_array_mut().unwrap() {
            child["etag"] = json!("W/\"scrambled\"");
            child["type"] = json!("Microsoft.Network/x");
            child["properties"]["provisioningState"] = json!("Failed");
        }
    }
    for pool in props["backendAddressPools"].as_array_mut().unwrap() {
        pool["properties"]["loadBalancingRules"] = json!([]);
        pool["properties"]["outboundRules"] = json!([{"id": "/nope"}]);
        let Some(entries) = pool["properties"]["loadBalancerBackendAddresses"].as_array_mut()
        else {
            continue;
        };
        for e in entries {
            e["id"] = json!("/scrambled");
            e["etag"] = json!("W/\"scrambled\"");
            e["type"] = json!("Microsoft.Network/x");
            e["properties"]["provisioningState"] = json!("Failed");
            e["properties"]["inboundNatRulesPortMapping"] = json!([{"frontendPort": 1}]);
        }
    }
}

/// Removes every read-only field (what a minimal writer sends).
fn strip_read_only(lb: &mut Value) {
    let top = lb.as_object_mut().unwrap();
    top.remove("etag");
    top.remove("type");
    let props = lb["properties"].as_object_mut().unwrap();
    props.remove("provisioningState");
    props.remove("resourceGuid");
    for (kind, refs) in [
        (
            "frontendIPConfigurations",
            &["loadBalancingRules", "outboundRules", "inboundNatRules"][..],
        ),
        ("loadBalancingRules", &[][..]),
        ("probes", &["loadBalancingRules"][..]),
        ("outboundRules", &[][..]),
        (
            "backendAddressPools",
            &[
                "loadBalancingRules",
                "outboundRules",
                "outboundRule",
                "inboundNatRules",
                "backendIPConfigurations",
            ][..],
        ),
    ] {
        for child in props[kind].as_array_mut().unwrap() {
            let c = child.as_object_mut().unwrap();
            c.remove("etag");
            c.remove("type");
            let p = c["properties"].as_object_mut().unwrap();
            p.remove("provisioningState");
            for r in refs {
                p.remove(*r);
            }
            let Some(Value::Array(entries)) = p.get_mut("loadBalancerBackendAddresses") else {
                continue;
            };
            for e in entries {
                let e = e.as_object_mut().unwrap();
                e.remove("id");
                e.remove("etag");
                e.remove("type");
                if let Some(Value::Object(ep)) = e.get_mut("properties") {
                    ep.remove("provisioningState");
                    ep.remove("inboundNatRulesPortMapping");
                    ep.remove("networkInterfaceIPConfiguration");
                }
            }
        }
    }
}

fn without_etags(mut v: Value) -> Value {
    fn walk(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.remove("etag");
                m.values_mut().for_each(walk);
            }
            Value::Array(a) => a.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut v);
    v
}

#[tokio::test]
async fn read_only_fields_in_a_put_are_ignored_and_not_needed() {
    for preset in ["aks-ip", "aks"] {
        let sim = start(preset).await;
        manual_completion(&sim);
        let raw = Raw::new(&sim);
        let tok = raw.token(&sim).await;
        let url = lb_path(&sim, "kubernetes");
        let original = raw.get(&url, &tok).await.body;
        let fingerprint = sim.lb_fingerprint("kubernetes");

        // Echoed with wrong values: ignored.
        let mut scrambled = original.clone();
        scramble_read_only(&mut scrambled);
        let etag = original["etag"].as_str().unwrap().to_owned();
        let put = raw.put(&url, &tok, &scrambled, Some(&etag)).await;
        assert_eq!(put.status, 200, "{preset}: {:?}", put.body);
        assert_eq!(sim.complete_operations(), 1);
        let after = raw.get(&url, &tok).await.body;
        assert_eq!(
            without_etags(after.clone()),
            without_etags(original.clone()),
            "{preset}: read-only values in a PUT changed the LB"
        );
        assert_eq!(sim.lb_fingerprint("kubernetes"), fingerprint);
        assert!(sim.structure_log().is_empty(), "{preset}");

        // Left out entirely: the same LB (NRP needs none of them).
        let mut minimal = after.clone();
        strip_read_only(&mut minimal);
        let etag = after["etag"].as_str().unwrap().to_owned();
        let put = raw.put(&url, &tok, &minimal, Some(&etag)).await;
        assert_eq!(put.status, 200, "{preset}: {:?}", put.body);
        sim.complete_operations();
        let again = raw.get(&url, &tok).await.body;
        assert_eq!(
            without_etags(again),
            without_etags(original),
            "{preset}: a PUT without read-only fields changed the LB"
        );
        assert!(sim.structure_log().is_empty(), "{preset}");
        sim.shutdown().await;
    }
}

#[tokio::test]
async fn the_etag_changes_again_when_the_operation_ends() {
    let sim = start("aks-ip").await;
    manual_completion(&sim);
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let path = pool_path(&sim, "kubernetes", "kubernetes");
    let mut pool = raw.get(&path, &tok).await.body;
    let e0 = pool["etag"].as_str().unwrap().to_owned();
    pool["properties"]["loadBalancerBackendAddresses"][0]["properties"]["adminState"] =
        json!("Down");

    let put = raw.put(&path, &tok, &pool, Some(&e0)).await;
    assert_eq!(put.status, 200, "{:?}", put.body);
    let e1 = put.body["etag"].as_str().unwrap().to_owned();
    assert_ne!(e1, e0, "the PUT's answer carries a new etag");
    assert_eq!(put.header("etag"), Some(e1.as_str()));
    // While it runs, reads show the answer's etag.
    assert_eq!(raw.get(&path, &tok).await.body["etag"], json!(e1));

    assert_eq!(sim.complete_operations(), 1);
    let read = raw.get(&path, &tok).await;
    let e2 = read.body["etag"].as_str().unwrap().to_owned();
    assert_ne!(e2, e1, "the operation's end changes the etag again");
    assert_eq!(read.header("etag"), Some(e2.as_str()));
    assert_eq!(
        raw.get(&lb_path(&sim, "kubernetes"), &tok).await.body["etag"],
        json!(e2),
        "the LB and its children share it"
    );

    // The next write's If-Match must come from a read after the end, not from the answer.
    pool["properties"]["loadBalancerBackendAddresses"][0]["properties"]["adminState"] =
        json!("None");
    let stale = raw.put(&path, &tok, &pool, Some(&e1)).await;
    assert_eq!(
        (stale.status, stale.code(), stale.detail_code()),
        (412, "PreconditionFailed", "PreconditionFailedEtagMismatch")
    );
    let fresh = raw.put(&path, &tok, &pool, Some(&e2)).await;
    assert_eq!(fresh.status, 200, "{:?}", fresh.body);

    // A failed operation ends with a new etag too.
    sim.complete_operations();
    let e3 = raw.get(&path, &tok).await.body["etag"].clone();
    sim.faults(arm_sim::faults::FaultSpec {
        fail_operations: Some(1),
        ..Default::default()
    });
    pool["properties"]["loadBalancerBackendAddresses"][0]["properties"]["adminState"] =
        json!("Down");
    let put = raw
        .put(&path, &tok, &pool, Some(e3.as_str().unwrap()))
        .await;
    assert_eq!(put.status, 200, "{:?}", put.body);
    let answered = put.body["etag"].clone();
    sim.complete_operations();
    let failed = raw.get(&path, &tok).await.body;
    assert_eq!(failed["properties"]["provisioningState"], "Failed");
    assert_ne!(failed["etag"], answered);
    sim.shutdown().await;
}

#[tokio::test]
async fn pessimistic_mode_refuses_pool_puts_that_carry_nic_members() {
    let sim = start("aks").await;
    manual_completion(&sim);
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let path = pool_path(&sim, "kubernetes", "kubernetes");
    let pool = raw.get(&path, &tok).await.body;
    assert!(
        pool["properties"]["backendIPConfigurations"]
            .as_array()
            .is_some_and(|a| !a.is_empty()),
        "the aks preset's pools are NIC-based: {pool}"
    );
    let etag = pool["etag"].as_str().unwrap().to_owned();

    sim.set_refuse_nic_pool_puts(true);
    // Even unchanged (as Microsoft's Bicep module saw on a redeploy).
    let refused = raw.put(&path, &tok, &pool, Some(&etag)).await;
    assert_eq!(
        (refused.status, refused.code()),
        (400, "ModificationOfNICIpConfigBackendPoolNotSupported"),
        "{:?}",
        refused.body
    );
    assert_eq!(refused.body["error"]["details"], json!([]));
    assert_eq!(raw.get(&path, &tok).await.body["etag"], json!(etag));

    // The LB PUT still sets a NIC member's admin state.
    let url = lb_path(&sim, "kubernetes");
    let mut lb = raw.get(&url, &tok).await.body;
    let entry = &mut lb["properties"]["backendAddressPools"][0]["properties"]["loadBalancerBackendAddresses"]
        [0];
    let name = entry["name"].as_str().unwrap().to_owned();
    entry["properties"]["adminState"] = json!("Down");
    let put = raw.put(&url, &tok, &lb, Some(&etag)).await;
    assert_eq!(put.status, 200, "{:?}", put.body);
    sim.complete_operations();
    assert!(
        sim.effective_log()
            .iter()
            .any(|e| e.entry == name && e.value == arm_sim::model::AdminState::Down),
        "{:?}",
        sim.effective_log()
    );

    // Off (the default): the same pool PUT is accepted.
    sim.set_refuse_nic_pool_puts(false);
    let pool = raw.get(&path, &tok).await.body;
    let etag = pool["etag"].as_str().unwrap().to_owned();
    let ok = raw.put(&path, &tok, &pool, Some(&etag)).await;
    assert_eq!(ok.status, 200, "{:?}", ok.body);
    sim.shutdown().await;
}
