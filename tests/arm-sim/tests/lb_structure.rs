//! AKS-shaped load balancers: frontends, rules, probes and outbound rules with the
//! back-references ARM returns; whole-LB PUT round trips keep them byte for byte; a PUT that
//! drops, reorders or alters them is detected (fingerprint + structure log) and, in strict
//! mode, refused.
#![allow(clippy::unwrap_used)] // tests may unwrap (helpers outside #[test] fns too)

mod common;

use common::*;
use serde_json::{Value, json};

const KINDS: &[&str] = &[
    "frontendIPConfigurations",
    "loadBalancingRules",
    "probes",
    "inboundNatRules",
    "inboundNatPools",
    "outboundRules",
];

fn named<'a>(lb: &'a Value, kind: &str, name: &str) -> &'a Value {
    lb["properties"][kind]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn ids(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|x| {
                    x["id"]
                        .as_str()
                        .unwrap()
                        .rsplit('/')
                        .next()
                        .unwrap()
                        .to_owned()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Every child's etag replaced by `etag` (a write changes the LB-wide etag, as on ARM).
fn with_etag(mut lb: Value, etag: &Value) -> Value {
    for kind in KINDS {
        if let Some(items) = lb["properties"][*kind].as_array_mut() {
            for item in items {
                item["etag"] = etag.clone();
            }
        }
    }
    lb
}

/// PUTs a whole LB and waits for its operation; returns the PUT reply.
async fn put_lb(raw: &Raw, tok: &str, path: &str, body: &Value) -> Reply {
    let put = raw.put(path, tok, body, None).await;
    if put.status == 200 {
        raw.wait_op(put.header("azure-asyncoperation").unwrap(), tok)
            .await;
    }
    put
}

#[tokio::test]
async fn preset_lbs_are_aks_shaped_with_back_references() {
    let sim = start("aks").await;
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let lb = raw.get(&lb_path(&sim, "kubernetes"), &tok).await.body;
    let cluster = aks_fixture::preset("aks").unwrap();
    let shape = &cluster.load_balancers[0].structure;
    let fes = lb["properties"]["frontendIPConfigurations"]
        .as_array()
        .unwrap();
    assert_eq!(fes.len(), shape.frontends.len());
    assert!(
        fes.iter()
            .all(|f| f["properties"]["publicIPAddress"]["id"].is_string())
    );
    assert!(fes.iter().all(|f| f["etag"] == lb["etag"]));
    // A service frontend lists its rules; the outbound frontend its outbound rule.
    let web = &shape.rules[0];
    let fe = named(&lb, "frontendIPConfigurations", &web.frontend);
    assert!(ids(&fe["properties"]["loadBalancingRules"]).contains(&web.name));
    let out_fe = &shape.outbound_rules[0].frontends[0];
    assert_eq!(
        ids(&named(&lb, "frontendIPConfigurations", out_fe)["properties"]["outboundRules"]),
        ["aksOutboundRule"]
    );
    // Rules carry probes (but one), probes list their rules.
    let rules = lb["properties"]["loadBalancingRules"].as_array().unwrap();
    assert_eq!(rules.len(), shape.rules.len());
    let unprobed: Vec<_> = rules
        .iter()
        .filter(|r| r["properties"]["probe"].is_null())
        .collect();
    assert_eq!(unprobed.len(), 1);
    assert_eq!(unprobed[0]["properties"]["protocol"], "Udp");
    let probe = named(&lb, "probes", web.probe.as_deref().unwrap());
    assert_eq!(
        ids(&probe["properties"]["loadBalancingRules"]),
        vec![web.name.as_str()]
    );
    assert!(
        rules
            .iter()
            .any(|r| r["name"].as_str().unwrap().contains("-IPv6-"))
    );
    // Pools list the rules that use them.
    let pool = |name: &str| {
        lb["properties"]["backendAddressPools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap()
            .clone()
    };
    let v4 = pool("kubernetes");
    let v4_rules = ids(&v4["properties"]["loadBalancingRules"]);
    assert!(v4_rules.contains(&web.name));
    assert!(v4_rules.contains(&unprobed[0]["name"].as_str().unwrap().to_owned()));
    assert!(
        !v4["properties"]["loadBalancerBackendAddresses"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let outbound = pool("aksOutboundBackendPool");
    assert_eq!(
        ids(&outbound["properties"]["outboundRules"]),
        ["aksOutboundRule"]
    );
    assert_eq!(
        outbound["properties"]["outboundRule"]["id"],
        json!(format!(
            "{}/outboundRules/aksOutboundRule",
            lb["id"].as_str().unwrap()
        ))
    );
    // The pool GET shows the same back-references.
    let got = raw
        .get(&pool_path(&sim, "kubernetes", "kubernetes"), &tok)
        .await
        .body;
    assert_eq!(
        got["properties"]["loadBalancingRules"],
        v4["properties"]["loadBalancingRules"]
    );
    // The internal LB has private v4 and v6 frontends in the node subnet.
    let internal = raw
        .get(&lb_path(&sim, "kubernetes-internal"), &tok)
        .await
        .body;
    let fes = internal["properties"]["frontendIPConfigurations"]
        .as_array()
        .unwrap();
    let versions: Vec<_> = fes
        .iter()
        .map(|f| f["properties"]["privateIPAddressVersion"].as_str().unwrap())
        .collect();
    assert_eq!(versions, ["IPv4", "IPv6"]);
    assert!(fes.iter().all(|f| {
        f["properties"]["subnet"]["id"]
            .as_str()
            .unwrap()
            .ends_with("/subnets/aks-subnet")
    }));
}

#[tokio::test]
async fn whole_lb_round_trip_keeps_every_rule_probe_and_frontend_byte_for_byte() {
    for preset in ["aks", "aks-ip", "aks-multi-slb"] {
        let sim = start(preset).await;
        let raw = Raw::new(&sim);
        let tok = raw.token(&sim).await;
        let path = lb_path(&sim, "kubernetes");
        let fingerprint = sim.lb_fingerprint("kubernetes").unwrap();
        let before = raw.get(&path, &tok).await.body;
        let mut body = before.clone();
        let pools = body["properties"]["backendAddressPools"]
            .as_array_mut()
            .unwrap();
        let entry = pools
            .iter_mut()
            .find(|p| !p["properties"]["loadBalancerBackendAddresses"][0].is_null())
            .unwrap();
        entry["properties"]["loadBalancerBackendAddresses"][0]["properties"]["adminState"] =
            json!("Down");
        let put = put_lb(&raw, &tok, &path, &body).await;
        assert_eq!(put.status, 200, "{preset}: {:?}", put.body);
        let after = raw.get(&path, &tok).await.body;
        assert_ne!(after["etag"], before["etag"]);
        let expected = with_etag(before.clone(), &after["etag"]);
        for kind in KINDS {
            assert_eq!(
                serde_json::to_string(&after["properties"][*kind]).unwrap(),
                serde_json::to_string(&expected["properties"][*kind]).unwrap(),
                "{preset}: {kind}"
            );
        }
        for (b, a) in before["properties"]["backendAddressPools"]
            .as_array()
            .unwrap()
            .iter()
            .zip(
                after["properties"]["backendAddressPools"]
                    .as_array()
                    .unwrap(),
            )
        {
            for k in ["loadBalancingRules", "outboundRules", "outboundRule"] {
                assert_eq!(a["properties"][k], b["properties"][k], "{preset} {k}");
            }
        }
        assert_eq!(sim.lb_fingerprint("kubernetes").unwrap(), fingerprint);
        assert!(sim.structure_log().is_empty(), "{:?}", sim.structure_log());
        assert_eq!(sim.effective_log().len(), 1, "{preset}");
    }
}

#[tokio::test]
async fn a_put_that_drops_reorders_or_alters_structure_is_detected_and_refused_in_strict_mode() {
    let sim = start("aks-ip").await;
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let path = lb_path(&sim, "kubernetes");
    let fingerprint = sim.lb_fingerprint("kubernetes").unwrap();
    let original = raw.get(&path, &tok).await.body;

    // Strict mode: drop, reorder, alter are all refused with a CloudError naming the change.
    sim.set_strict_lb_structure(true);
    let mut dropped = original.clone();
    let gone = dropped["properties"]["loadBalancingRules"]
        .as_array_mut()
        .unwrap()
        .remove(0);
    let gone = gone["name"].as_str().unwrap().to_owned();
    let mut reordered = original.clone();
    reordered["properties"]["probes"]
        .as_array_mut()
        .unwrap()
        .reverse();
    let mut altered = original.clone();
    altered["properties"]["frontendIPConfigurations"][0]["properties"]["publicIPAddress"]["id"] = json!(
        "/subscriptions/x/resourceGroups/y/providers/Microsoft.Network/publicIPAddresses/other"
    );
    for (body, needle) in [
        (&dropped, format!("loadBalancingRules: removed '{gone}'")),
        (&reordered, "probes: reordered".to_owned()),
        (&altered, "frontendIPConfigurations: changed".to_owned()),
    ] {
        let r = raw.put(&path, &tok, body, None).await;
        assert_eq!(
            (r.status, r.code(), r.detail_code()),
            (400, "InvalidRequestFormat", "LoadBalancerStructureChanged"),
            "{needle}"
        );
        let message = r.body["error"]["message"].as_str().unwrap();
        assert!(message.contains(&needle), "{message}");
        assert!(message.starts_with("arm-sim strict mode"), "{message}");
    }
    assert_eq!(sim.lb_fingerprint("kubernetes").unwrap(), fingerprint);
    assert!(sim.structure_log().is_empty());
    // An admin-state-only PUT still passes in strict mode.
    let mut fine = original.clone();
    fine["properties"]["backendAddressPools"][0]["properties"]["loadBalancerBackendAddresses"][0]
        ["properties"]["adminState"] = json!("Down");
    assert_eq!(put_lb(&raw, &tok, &path, &fine).await.status, 200);

    // Default (ARM) mode: the PUT applies, and the change is logged with both fingerprints.
    sim.set_strict_lb_structure(false);
    let put = put_lb(&raw, &tok, &path, &dropped).await;
    assert_eq!(put.status, 200, "{:?}", put.body);
    let after = raw.get(&path, &tok).await.body;
    assert!(
        after["properties"]["loadBalancingRules"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["name"] != gone.as_str())
    );
    let log = sim.structure_log();
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0].before, fingerprint);
    assert_eq!(log[0].after, sim.lb_fingerprint("kubernetes").unwrap());
    assert_ne!(log[0].after, fingerprint);
    assert_eq!(log[0].operation, "PutLoadBalancerOperation");
    assert!(
        log[0].changes.iter().any(|c| c.contains("removed")),
        "{log:?}"
    );
    // The probe of the dropped rule no longer lists it.
    let probe = named(&after, "probes", &gone);
    assert!(
        probe["properties"]["loadBalancingRules"].is_null(),
        "{probe}"
    );

    // The control API reports the same fingerprint and entries.
    let ctl = raw
        .send("GET", "/_sim/structure/kubernetes", &[], None)
        .await;
    assert_eq!(ctl.body["fingerprint"], json!(log[0].after));
    assert_eq!(ctl.body["changes"].as_array().unwrap().len(), 1);
    let strict = raw
        .send(
            "PUT",
            "/_sim/strict",
            &[],
            Some(br#"{"strictLbStructure":true}"#.to_vec()),
        )
        .await;
    assert_eq!(strict.body["strictLbStructure"], true);
    assert!(sim.tuning().strict_lb_structure);
}
