//! The ARM wire protocol over raw HTTP: etags and If-Match, the LRO and LB lock, supersede,
//! failed operations, throttling, faults, paging, NIC lists, the outside writer, bad input.
#![allow(clippy::unwrap_used)] // tests may unwrap (helpers outside #[test] fns too)

mod common;

use arm_sim::faults::FaultSpec;
use arm_sim::model::AdminState;
use arm_sim::throttle::{Limit, Limits};
use common::*;
use cutover_testkit::eventually;
use serde_json::{Value, json};

/// The pool body with the first entry's adminState set.
fn with_first_admin_state(mut pool: Value, state: &str) -> Value {
    pool["properties"]["loadBalancerBackendAddresses"][0]["properties"]["adminState"] =
        json!(state);
    pool
}

#[tokio::test]
async fn put_runs_an_operation_that_locks_the_lb_and_applies_admin_state_on_completion() {
    let sim = start("aks-ip").await;
    // Operations complete only when the test says so (no timing assumptions).
    let mut tuning = sim.tuning();
    tuning.completion_delay_ms = 3_600_000;
    sim.set_tuning(tuning);
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let path = pool_path(&sim, "kubernetes", "kubernetes");

    let got = raw.get(&path, &tok).await;
    assert_eq!(got.status, 200);
    let etag = got.body["etag"].as_str().unwrap().to_owned();
    assert!(etag.starts_with("W/\""), "{etag}");
    assert_eq!(got.header("etag"), Some(etag.as_str()));
    let lb = raw.get(&lb_path(&sim, "kubernetes"), &tok).await;
    assert_eq!(lb.body["etag"], json!(etag), "children share the LB etag");
    let entry = got.body["properties"]["loadBalancerBackendAddresses"][0]["name"]
        .as_str()
        .unwrap()
        .to_owned();

    // Stale If-Match: 412 with NRP's body.
    let body = with_first_admin_state(got.body.clone(), "Down");
    let stale = raw.put(&path, &tok, &body, Some("W/\"stale\"")).await;
    assert_eq!(
        (stale.status, stale.code(), stale.detail_code()),
        (412, "PreconditionFailed", "PreconditionFailedEtagMismatch")
    );

    let put = raw.put(&path, &tok, &body, Some(&etag)).await;
    assert_eq!(put.status, 200, "{:?}", put.body);
    assert_eq!(put.body["properties"]["provisioningState"], "Updating");
    assert_ne!(put.body["etag"], json!(etag), "a write changes the etag");
    assert_eq!(put.header("azure-asyncnotification"), Some("Enabled"));
    assert_eq!(put.header("retry-after"), Some("1"));
    assert!(put.header("location").is_none(), "no Location on PUT");
    assert!(
        put.header("x-ms-ratelimit-remaining-subscription-writes")
            .is_some()
    );
    assert!(
        put.header("x-ms-ratelimit-remaining-subscription-global-writes")
            .is_some()
    );
    let op_url = put.header("azure-asyncoperation").unwrap().to_owned();
    assert!(op_url.starts_with(sim.url()), "{op_url}");

    // While the operation runs: InProgress, LB locked, nothing effective yet.
    let poll = raw.get(&op_url, &tok).await;
    assert_eq!(poll.body["status"], "InProgress");
    assert_eq!(poll.header("retry-after"), Some("1"));
    assert!(
        poll.header("x-ms-ratelimit-remaining-subscription-reads")
            .is_some()
    );
    let second = raw
        .put(
            &path,
            &tok,
            &with_first_admin_state(put.body.clone(), "Up"),
            None,
        )
        .await;
    assert_eq!(
        (second.status, second.code(), second.detail_code()),
        (429, "RetryableError", "RetryableErrorDueToAnotherOperation")
    );
    assert!(second.header("retry-after").is_some());
    assert!(sim.requests().iter().any(|r| r.lock_hit && r.status == 429));
    assert!(sim.effective_log().is_empty());
    assert_eq!(
        sim.pool("kubernetes", "kubernetes").unwrap().entries[0].effective,
        AdminState::None
    );

    assert_eq!(sim.complete_operations(), 1);
    let done = raw.wait_op(&op_url, &tok).await;
    assert_eq!(done["status"], "Succeeded");
    let log = sim.effective_log();
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(
        (log[0].entry.as_str(), log[0].value, log[0].pool.as_str()),
        (entry.as_str(), AdminState::Down, "kubernetes")
    );
    let snap = sim.pool("kubernetes", "kubernetes").unwrap();
    assert_eq!(snap.entries[0].effective, AdminState::Down);
    assert!(snap.locked_by.is_none());
    // The operation URL stays valid after completion.
    assert_eq!(raw.get(&op_url, &tok).await.body["status"], "Succeeded");
    let after = raw.get(&path, &tok).await;
    assert_eq!(after.body["properties"]["provisioningState"], "Succeeded");
    assert_eq!(
        after.body["properties"]["loadBalancerBackendAddresses"][0]["properties"]["adminState"],
        "Down"
    );
}

#[tokio::test]
async fn create_is_201_unchanged_put_is_200_succeeded_and_delete_is_202() {
    let sim = start("aks-ip").await;
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let path = pool_path(&sim, "kubernetes", "extra");
    let body = json!({"properties": {"loadBalancerBackendAddresses": [
        {"name": "n1", "properties": {"ipAddress": "10.224.0.99", "adminState": "Down"}}]}});
    let created = raw.put(&path, &tok, &body, None).await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    raw.wait_op(created.header("azure-asyncoperation").unwrap(), &tok)
        .await;
    let same = raw.put(&path, &tok, &body, None).await;
    assert_eq!(same.status, 200);
    assert_eq!(same.body["properties"]["provisioningState"], "Succeeded");
    assert_eq!(
        raw.wait_op(same.header("azure-asyncoperation").unwrap(), &tok)
            .await["status"],
        "Succeeded"
    );

    let auth = format!("Bearer {tok}");
    let del = raw
        .send(
            "DELETE",
            &format!("{path}?{API}"),
            &[("authorization", &auth)],
            None,
        )
        .await;
    assert_eq!(del.status, 202);
    assert!(
        del.header("x-ms-ratelimit-remaining-subscription-deletes")
            .is_some()
    );
    let loc = del.header("location").unwrap().to_owned();
    assert!(loc.contains("/operationResults/"), "{loc}");
    eventually("the delete operation to answer 204", || async {
        (raw.get(&loc, &tok).await.status == 204).then_some(())
    })
    .await;
    let gone = raw.get(&path, &tok).await;
    assert_eq!((gone.status, gone.code()), (404, "NotFound"));
    let again = raw
        .send(
            "DELETE",
            &format!("{path}?{API}"),
            &[("authorization", &auth)],
            None,
        )
        .await;
    assert_eq!(again.status, 204);
}

#[tokio::test]
async fn supersede_mode_cancels_the_running_operation() {
    let sim = start("aks-ip").await;
    let mut tuning = sim.tuning();
    tuning.completion_delay_ms = 3_600_000;
    sim.set_tuning(tuning);
    sim.faults(FaultSpec {
        supersede: Some(true),
        ..Default::default()
    });
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let path = pool_path(&sim, "kubernetes", "kubernetes");
    let pool = raw.get(&path, &tok).await.body;
    let first = raw
        .put(&path, &tok, &with_first_admin_state(pool, "Down"), None)
        .await;
    assert_eq!(first.status, 200);
    let first_op = first.header("azure-asyncoperation").unwrap().to_owned();

    let lb = raw.get(&lb_path(&sim, "kubernetes"), &tok).await.body;
    let second = raw.put(&lb_path(&sim, "kubernetes"), &tok, &lb, None).await;
    assert_eq!(second.status, 200, "{:?}", second.body);
    let canceled = raw.get(&first_op, &tok).await.body;
    assert_eq!(canceled["status"], "Canceled");
    assert_eq!(canceled["error"]["code"], "Canceled");
    assert_eq!(
        canceled["error"]["details"][0]["code"],
        "CanceledAndSupersededDueToAnotherOperation"
    );
    let msg = canceled["error"]["details"][0]["message"].as_str().unwrap();
    assert!(
        msg.contains("PutLoadBalancerBackendAddressPoolOperation")
            && msg.contains("PutLoadBalancerOperation"),
        "{msg}"
    );
    let r = raw
        .send("POST", "/_sim/complete-operations", &[], None)
        .await;
    assert_eq!(
        r.body["completed"], 1,
        "only the superseding operation was still running"
    );
    assert_eq!(
        raw.wait_op(second.header("azure-asyncoperation").unwrap(), &tok)
            .await["status"],
        "Succeeded"
    );
}

#[tokio::test]
async fn whole_lb_put_applies_every_pool_at_completion() {
    let sim = start("aks").await;
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let lb_url = lb_path(&sim, "kubernetes");
    let mut lb = raw.get(&lb_url, &tok).await.body;
    let pools = lb["properties"]["backendAddressPools"]
        .as_array_mut()
        .unwrap();
    assert_eq!(pools.len(), 3);
    for p in pools.iter_mut().take(2) {
        p["properties"]["loadBalancerBackendAddresses"][0]["properties"]["adminState"] =
            json!("Down");
    }
    let etag = lb["etag"].as_str().unwrap().to_owned();
    let put = raw.put(&lb_url, &tok, &lb, Some(&etag)).await;
    assert_eq!(put.status, 200, "{:?}", put.body);
    assert_eq!(put.body["properties"]["provisioningState"], "Updating");
    raw.wait_op(put.header("azure-asyncoperation").unwrap(), &tok)
        .await;
    let log = sim.effective_log();
    let pools: Vec<&str> = log.iter().map(|e| e.pool.as_str()).collect();
    assert_eq!(pools, ["kubernetes", "kubernetes-IPv6"], "{log:?}");
    assert!(
        log.iter()
            .all(|e| e.op_id == log[0].op_id && e.value == AdminState::Down)
    );
    // NIC membership survived the whole-LB write.
    let p = raw
        .get(&pool_path(&sim, "kubernetes", "kubernetes"), &tok)
        .await
        .body;
    assert_eq!(
        p["properties"]["backendIPConfigurations"]
            .as_array()
            .unwrap()
            .len(),
        12
    );
}

#[tokio::test]
async fn failed_operations_report_failed_and_apply_nothing() {
    let sim = start("aks-ip").await;
    sim.faults(FaultSpec {
        fail_operations: Some(1),
        ..Default::default()
    });
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let path = pool_path(&sim, "kubernetes", "kubernetes");
    let pool = raw.get(&path, &tok).await.body;
    let put = raw
        .put(&path, &tok, &with_first_admin_state(pool, "Down"), None)
        .await;
    let done = raw
        .wait_op(put.header("azure-asyncoperation").unwrap(), &tok)
        .await;
    assert_eq!(done["status"], "Failed");
    assert_eq!(done["error"]["code"], "InternalServerError");
    assert!(sim.effective_log().is_empty());
    assert_eq!(
        raw.get(&path, &tok).await.body["properties"]["provisioningState"],
        "Failed"
    );
}

#[tokio::test]
async fn token_buckets_throttle_per_principal_with_headers() {
    let sim = start("aks-ip").await;
    sim.set_limits(Limits {
        reads: Limit {
            capacity: 3.0,
            refill_per_sec: 0.01,
        },
        writes: Limit {
            capacity: 200.0,
            refill_per_sec: 10.0,
        },
        deletes: Limit {
            capacity: 200.0,
            refill_per_sec: 10.0,
        },
        global_factor: 15.0,
    });
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let path = pool_path(&sim, "kubernetes", "kubernetes");
    let mut remaining = Vec::new();
    for _ in 0..3 {
        let r = raw.get(&path, &tok).await;
        assert_eq!(r.status, 200);
        remaining.push(
            r.header("x-ms-ratelimit-remaining-subscription-reads")
                .unwrap()
                .to_owned(),
        );
        assert!(
            r.header("x-ms-ratelimit-remaining-subscription-global-reads")
                .is_some()
        );
    }
    assert_eq!(remaining, ["2", "1", "0"]);
    let throttled = raw.get(&path, &tok).await;
    assert_eq!(
        (throttled.status, throttled.code()),
        (429, "SubscriptionRequestsThrottled")
    );
    let secs: u64 = throttled.header("retry-after").unwrap().parse().unwrap();
    assert!(secs >= 1);
    let msg = throttled.body["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("'read'") && msg.contains(&sim.credentials().client_id),
        "{msg}"
    );
    assert!(
        sim.requests()
            .iter()
            .any(|r| r.throttled && r.status == 429)
    );
    // Writes are a separate class, and another principal has its own read bucket.
    let body = json!({"properties": {"loadBalancerBackendAddresses": [{"name": "n", "properties": {"ipAddress": "10.224.0.99"}}]}});
    let w = raw
        .put(&pool_path(&sim, "kubernetes", "extra"), &tok, &body, None)
        .await;
    assert_eq!(w.status, 201, "{:?}", w.body);
    assert_eq!(
        w.header("x-ms-ratelimit-remaining-subscription-writes"),
        Some("199")
    );
    let mi = raw
        .send(
            "GET",
            "/msi/token?api-version=2019-08-01&resource=https://management.azure.com",
            &[("x-identity-header", sim.identity_header())],
            None,
        )
        .await;
    let mi_tok = mi.body["access_token"].as_str().unwrap().to_owned();
    let other = raw.get(&path, &mi_tok).await;
    assert_eq!(other.status, 200);
    assert_eq!(
        other.header("x-ms-ratelimit-remaining-subscription-reads"),
        Some("2")
    );
}

#[tokio::test]
async fn injected_storms_errors_and_dropped_connections() {
    let sim = start("aks-ip").await;
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let path = pool_path(&sim, "kubernetes", "kubernetes");
    sim.faults(FaultSpec {
        throttle_requests: Some(2),
        ..Default::default()
    });
    for _ in 0..2 {
        let r = raw.get(&path, &tok).await;
        assert_eq!((r.status, r.code()), (429, "SubscriptionRequestsThrottled"));
        assert!(r.header("retry-after").is_some());
        assert_eq!(
            r.header("x-ms-ratelimit-remaining-subscription-reads"),
            Some("0")
        );
    }
    assert_eq!(raw.get(&path, &tok).await.status, 200);
    sim.faults(FaultSpec {
        server_errors: Some(1),
        ..Default::default()
    });
    let r = raw.get(&path, &tok).await;
    assert_eq!((r.status, r.code()), (500, "InternalServerError"));
    sim.faults(FaultSpec {
        drop_connections: Some(1),
        ..Default::default()
    });
    let auth = format!("Bearer {tok}");
    let dropped = raw
        .try_send(
            "GET",
            &format!("{path}?{API}"),
            &[("authorization", &auth)],
            None,
        )
        .await;
    assert!(dropped.is_err(), "connection should have been dropped");
    assert!(sim.requests().iter().any(|r| r.dropped));
    assert_eq!(raw.get(&path, &tok).await.status, 200);
    // Storm by duration, via the control endpoint.
    let r = raw
        .send(
            "POST",
            "/_sim/faults",
            &[],
            Some(br#"{"throttleForMs": 60000}"#.to_vec()),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(raw.get(&path, &tok).await.status, 429);
    assert_eq!(raw.get(&path, &tok).await.status, 429);
    // An outage by duration, via the control endpoint: 500s until it is ended.
    let r = raw
        .send(
            "POST",
            "/_sim/faults",
            &[],
            Some(br#"{"throttleForMs": 0, "outageForMs": 60000}"#.to_vec()),
        )
        .await;
    assert_eq!(r.status, 200);
    for _ in 0..3 {
        let r = raw.get(&path, &tok).await;
        assert_eq!((r.status, r.code()), (500, "InternalServerError"));
    }
    sim.faults(FaultSpec {
        outage_for_ms: Some(0),
        ..Default::default()
    });
    assert_eq!(raw.get(&path, &tok).await.status, 200);
}

#[tokio::test]
async fn lists_are_paged_with_next_link() {
    let sim = start("aks-multi-slb").await;
    let mut tuning = sim.tuning();
    tuning.page_size = 2;
    sim.set_tuning(tuning);
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let expected = sim_pool_count(&sim, &raw, &tok).await;
    let mut url = format!("{}/backendAddressPools?{API}", lb_path(&sim, "kubernetes"));
    let mut names = Vec::new();
    let mut pages = 0;
    loop {
        let page = raw.get(&url, &tok).await;
        assert_eq!(page.status, 200, "{:?}", page.body);
        pages += 1;
        let value = page.body["value"].as_array().unwrap();
        assert!(value.len() <= 2);
        names.extend(value.iter().map(|p| p["name"].as_str().unwrap().to_owned()));
        match page.body["nextLink"].as_str() {
            Some(next) => url = next.to_owned(),
            None => break,
        }
    }
    assert_eq!(names.len(), expected);
    assert!(pages >= 2);
}

async fn sim_pool_count(sim: &arm_sim::ArmSim, raw: &Raw, tok: &str) -> usize {
    let lb = raw.get(&lb_path(sim, "kubernetes"), tok).await;
    lb.body["properties"]["backendAddressPools"]
        .as_array()
        .unwrap()
        .len()
}

#[tokio::test]
async fn nic_list_serves_standalone_nics_with_their_vm() {
    let seed =
        arm_sim::seed::Seed::load(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/seed.yaml"))
            .unwrap();
    let sim = arm_sim::ArmSim::start(arm_sim::ArmSimOptions {
        seed,
        ..Default::default()
    })
    .await
    .unwrap();
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let sub = sim.credentials().subscription_id;
    let url = format!(
        "/subscriptions/{sub}/resourceGroups/mc_demo-rg_demo_eastus/providers/Microsoft.Network/networkInterfaces"
    );
    let r = raw.get(&url, &tok).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    let nics = r.body["value"].as_array().unwrap();
    assert_eq!(nics.len(), 2);
    assert!(
        nics[0]["properties"]["virtualMachine"]["id"]
            .as_str()
            .unwrap()
            .ends_with("/virtualMachines/as-vm-1")
    );
    let pools = &nics[0]["properties"]["ipConfigurations"][0]["properties"]["loadBalancerBackendAddressPools"];
    assert!(
        pools[0]["id"]
            .as_str()
            .unwrap()
            .ends_with("/backendAddressPools/kubernetes"),
        "{pools}"
    );
    // The NIC-based pool lists the standalone NICs and the VMSS instance.
    let lb = format!(
        "/subscriptions/{sub}/resourceGroups/MC_demo-rg_demo_eastus/providers/Microsoft.Network/loadBalancers/kubernetes/backendAddressPools/kubernetes"
    );
    let pool = raw.get(&lb, &tok).await;
    assert_eq!(
        pool.body["properties"]["backendIPConfigurations"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
}

#[tokio::test]
async fn outside_writer_resets_an_entry_immediately() {
    let sim = start("aks-ip").await;
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let path = pool_path(&sim, "kubernetes", "kubernetes");
    let before = raw.get(&path, &tok).await.body;
    let entry = before["properties"]["loadBalancerBackendAddresses"][0]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let cmd =
        json!({"lb": "kubernetes", "pool": "kubernetes", "entry": entry, "adminState": "Down"});
    let r = raw
        .send(
            "POST",
            "/_sim/outside-write",
            &[],
            Some(serde_json::to_vec(&cmd).unwrap()),
        )
        .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    let after = raw.get(&path, &tok).await.body;
    assert_eq!(
        after["properties"]["loadBalancerBackendAddresses"][0]["properties"]["adminState"],
        "Down"
    );
    assert_ne!(after["etag"], before["etag"]);
    let log: Value = raw.send("GET", "/_sim/effective", &[], None).await.body;
    assert_eq!(log[0]["op_id"], "outside-writer");
    sim.outside_write("kubernetes", "kubernetes", &entry, None)
        .unwrap();
    assert_eq!(
        sim.pool("kubernetes", "kubernetes").unwrap().entries[0].effective,
        AdminState::None
    );
    let bad = raw
        .send("POST", "/_sim/outside-write", &[], Some(b"{".to_vec()))
        .await;
    assert_eq!(bad.status, 400);
}

/// cloud-provider-azure deletes an LB when its last Service goes and creates it again for the
/// next one: in between ARM answers 404, and the new LB carries its members without any admin
/// state (a Down set by cutover is gone and must be written again).
#[tokio::test]
async fn an_lb_removed_and_created_again_answers_404_then_comes_back_without_admin_state() {
    let sim = start("aks-ip").await;
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let path = lb_path(&sim, "kubernetes");
    let before = raw.get(&path, &tok).await.body;
    let entry = before["properties"]["backendAddressPools"][0]["properties"]
        ["loadBalancerBackendAddresses"][0]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    sim.outside_write("kubernetes", "kubernetes", &entry, Some(AdminState::Down))
        .unwrap();
    let ctl = |path: &'static str| {
        let raw = &raw;
        async move {
            raw.send("POST", path, &[], Some(br#"{"lb":"kubernetes"}"#.to_vec()))
                .await
        }
    };
    assert_eq!(ctl("/_sim/lb-remove").await.status, 200);
    let gone = raw.get(&path, &tok).await;
    assert_eq!((gone.status, gone.code()), (404, "ResourceNotFound"));
    assert_eq!(ctl("/_sim/lb-remove").await.status, 404, "already removed");
    assert_eq!(ctl("/_sim/lb-recreate").await.status, 200);
    let after = raw.get(&path, &tok).await;
    assert_eq!(after.status, 200);
    assert_ne!(after.body["etag"], before["etag"]);
    let pools = after.body["properties"]["backendAddressPools"]
        .as_array()
        .unwrap();
    assert_eq!(
        pools.len(),
        before["properties"]["backendAddressPools"]
            .as_array()
            .unwrap()
            .len()
    );
    assert!(pools.iter().all(|p| {
        p["properties"]["loadBalancerBackendAddresses"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["properties"].get("adminState").is_none())
    }));
    assert_eq!(
        sim.pool("kubernetes", "kubernetes").unwrap().entries[0].effective,
        AdminState::None
    );
    assert_eq!(
        ctl("/_sim/lb-recreate").await.status,
        400,
        "nothing to recreate"
    );
}

#[tokio::test]
async fn authentication_failures_have_arm_bodies() {
    let sim = start("aks-ip").await;
    let raw = Raw::new(&sim);
    let path = format!("{}?{API}", pool_path(&sim, "kubernetes", "kubernetes"));
    let none = raw.send("GET", &path, &[], None).await;
    assert_eq!((none.status, none.code()), (401, "AuthenticationFailed"));
    let bogus = raw
        .send(
            "GET",
            &path,
            &[("authorization", "Bearer not-issued")],
            None,
        )
        .await;
    assert_eq!(
        (bogus.status, bogus.code()),
        (401, "InvalidAuthenticationToken")
    );
    let tok = raw.token(&sim).await;
    assert_eq!(raw.get(&path, &tok).await.status, 200);
    sim.expire_tokens();
    let expired = raw.get(&path, &tok).await;
    assert_eq!(
        (expired.status, expired.code()),
        (401, "InvalidAuthenticationToken")
    );
    assert!(
        expired.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("ExpiredAuthenticationToken")
    );
    // Short token lifetimes expire by themselves.
    let mut tuning = sim.tuning();
    tuning.token_lifetime_secs = 1;
    sim.set_tuning(tuning);
    let short = raw.token(&sim).await;
    eventually("the short token to expire (401)", || async {
        (raw.get(&path, &short).await.status == 401).then_some(())
    })
    .await;
}

#[tokio::test]
async fn bad_input_gets_arm_errors_not_panics() {
    let sim = start("aks-ip").await;
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let auth = format!("Bearer {tok}");
    let h = [
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
    ];
    let pool = pool_path(&sim, "kubernetes", "kubernetes");
    let sub = sim.credentials().subscription_id;

    let r = raw.send("GET", &pool, &h, None).await;
    assert_eq!((r.status, r.code()), (400, "MissingApiVersionParameter"));
    let r = raw
        .send("GET", &format!("{pool}?api-version=2099-01-01"), &h, None)
        .await;
    assert_eq!((r.status, r.code()), (400, "NoRegisteredProviderFound"));
    let r = raw
        .send(
            "GET",
            &format!(
                "/subscriptions/{sub}/resourceGroups/{RG}/providers/Microsoft.Nope/things/x?{API}"
            ),
            &h,
            None,
        )
        .await;
    assert_eq!((r.status, r.code()), (400, "NoRegisteredProviderFound"));
    let r = raw
        .send(
            "PUT",
            &format!("{pool}?{API}"),
            &h,
            Some(b"{not json".to_vec()),
        )
        .await;
    assert_eq!((r.status, r.code()), (400, "InvalidRequestContent"));
    let r = raw
        .send("PUT", &format!("{pool}?{API}"), &h, Some(b"[1,2]".to_vec()))
        .await;
    assert_eq!((r.status, r.code()), (400, "InvalidRequestContent"));
    let drain = json!({"properties": {"loadBalancerBackendAddresses": [{"name": "a", "properties": {"ipAddress": "10.0.0.1", "adminState": "Drain"}}]}});
    let r = raw.put(&pool, &tok, &drain, None).await;
    assert_eq!((r.status, r.code()), (400, "InvalidRequestFormat"));
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("None, Up, Down")
    );
    let r = raw
        .get(&pool_path(&sim, "kubernetes", "missing"), &tok)
        .await;
    assert_eq!((r.status, r.code()), (404, "NotFound"));
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("/backendAddressPools/missing")
    );
    let r = raw.get(&lb_path(&sim, "nope"), &tok).await;
    assert_eq!((r.status, r.code()), (404, "ResourceNotFound"));
    let r = raw.get(&format!("/subscriptions/{sub}/resourceGroups/nope/providers/Microsoft.Network/loadBalancers/x"), &tok).await;
    assert_eq!((r.status, r.code()), (404, "ResourceGroupNotFound"));
    let r = raw
        .get(&format!("/subscriptions/{sub}/weird/path"), &tok)
        .await;
    assert_eq!(r.status, 404);
    assert!(!r.code().is_empty());
    let r = raw.send("POST", &format!("{pool}?{API}"), &h, None).await;
    assert_eq!(r.status, 405);
    let r = raw.send("GET", "/no/such/thing", &[], None).await;
    assert_eq!(r.status, 404);
    assert!(!r.code().is_empty());
    // NIC-based pools refuse foreign members and IP entries.
    let nic_sim = start("aks").await;
    let nraw = Raw::new(&nic_sim);
    let ntok = nraw.token(&nic_sim).await;
    let npool = pool_path(&nic_sim, "kubernetes", "kubernetes");
    let ip = json!({"properties": {"loadBalancerBackendAddresses": [{"name": "a", "properties": {"ipAddress": "10.0.0.1"}}]}});
    let r = nraw.put(&npool, &ntok, &ip, None).await;
    assert_eq!((r.status, r.code()), (400, "InvalidRequestFormat"));
    // The simulator still serves after all of that.
    assert_eq!(raw.get(&pool, &tok).await.status, 200);
}

#[tokio::test]
async fn identity_endpoints_answer_like_aad_and_msi() {
    let sim = start("aks-ip").await;
    let raw = Raw::new(&sim);
    let c = sim.credentials();
    let form = |secret: &str| {
        format!(
            "grant_type=client_credentials&scope={SCOPE}&client_id={}&client_secret={secret}",
            c.client_id
        )
        .into_bytes()
    };
    let url = format!("/{}/oauth2/v2.0/token", c.tenant_id);
    let ok = raw
        .send("POST", &url, &[], Some(form(&c.client_secret)))
        .await;
    assert_eq!(ok.status, 200);
    assert!(
        ok.header("content-type")
            .unwrap()
            .starts_with("application/json")
    );
    assert!(ok.body["expires_in"].is_u64() && ok.body["ext_expires_in"].is_u64());
    assert_eq!(ok.body["token_type"], "Bearer");
    let bad = raw.send("POST", &url, &[], Some(form("wrong"))).await;
    assert_eq!(bad.status, 401);
    assert_eq!(bad.body["error"], "invalid_client");
    assert!(
        bad.body["error_description"]
            .as_str()
            .unwrap()
            .starts_with("AADSTS7000215")
    );
    assert_eq!(bad.body["error_codes"][0], 7000215);
    let tenant = raw
        .send(
            "POST",
            "/other-tenant/oauth2/v2.0/token",
            &[],
            Some(form(&c.client_secret)),
        )
        .await;
    assert_eq!(
        (tenant.status, tenant.body["error"].as_str()),
        (400, Some("invalid_request"))
    );
    let scope = raw
        .send(
            "POST",
            &url,
            &[],
            Some(
                format!(
                    "grant_type=client_credentials&scope=https://x&client_id={}&client_secret={}",
                    c.client_id, c.client_secret
                )
                .into_bytes(),
            ),
        )
        .await;
    assert_eq!(scope.body["error"], "invalid_scope");
    let fed = |a: &str| {
        format!("client_id={}&scope={SCOPE}&client_assertion_type=urn%3Aietf%3Aparams%3Aoauth%3Aclient-assertion-type%3Ajwt-bearer&client_assertion={a}&grant_type=client_credentials", c.client_id).into_bytes()
    };
    assert_eq!(
        raw.send("POST", &url, &[], Some(fed(sim.federated_token())))
            .await
            .status,
        200
    );
    let r = raw.send("POST", &url, &[], Some(fed("forged"))).await;
    assert_eq!(
        (r.status, r.body["error"].as_str()),
        (400, Some("invalid_client"))
    );

    let q = "?api-version=2019-08-01&resource=https://management.azure.com";
    let r = raw.send("GET", &format!("/msi/token{q}"), &[], None).await;
    assert_eq!(r.status, 401);
    let r = raw
        .send(
            "GET",
            &format!("/msi/token{q}"),
            &[("x-identity-header", sim.identity_header())],
            None,
        )
        .await;
    assert_eq!(r.status, 200);
    assert!(
        r.body["expires_on"].is_string(),
        "MSI expires_on is a string"
    );
    assert_eq!(r.body["resource"], "https://management.azure.com");
    let r = raw
        .send(
            "GET",
            &format!("/metadata/identity/oauth2/token{q}"),
            &[],
            None,
        )
        .await;
    assert_eq!(r.status, 400);
    let r = raw
        .send(
            "GET",
            &format!("/metadata/identity/oauth2/token{q}"),
            &[("metadata", "true")],
            None,
        )
        .await;
    assert_eq!(r.status, 200);
    // The MI token works on ARM and is its own throttling principal.
    let tok = r.body["access_token"].as_str().unwrap().to_owned();
    assert_eq!(
        raw.get(&pool_path(&sim, "kubernetes", "kubernetes"), &tok)
            .await
            .status,
        200
    );
    let last = sim.requests().into_iter().last().unwrap();
    assert_eq!(
        last.principal.as_deref(),
        Some(sim.managed_identity_client_id())
    );
    let r = raw
        .send(
            "GET",
            &format!("/metadata/identity/oauth2/token{q}&client_id=someone-else"),
            &[("metadata", "true")],
            None,
        )
        .await;
    assert_eq!(r.status, 400);
    // OIDC discovery for MSAL.
    let oidc = raw
        .send(
            "GET",
            &format!("/{}/v2.0/.well-known/openid-configuration", c.tenant_id),
            &[],
            None,
        )
        .await;
    assert_eq!(
        oidc.body["token_endpoint"],
        json!(format!("{}{url}", sim.url()))
    );
}

fn op_id_of(url: &str) -> String {
    let path = url.split('?').next().unwrap();
    path.rsplit('/').next().unwrap().to_owned()
}

#[tokio::test]
async fn lb_and_written_pool_read_updating_until_the_exact_end_of_the_operation() {
    let sim = start("aks-ip").await;
    let mut tuning = sim.tuning();
    tuning.completion_delay_ms = 3_600_000;
    sim.set_tuning(tuning.clone());
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let lb = lb_path(&sim, "kubernetes");
    let path = pool_path(&sim, "kubernetes", "kubernetes");
    let pool_state = |lb_body: &Value, name: &str| {
        lb_body["properties"]["backendAddressPools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap()["properties"]["provisioningState"]
            .clone()
    };

    let body = with_first_admin_state(raw.get(&path, &tok).await.body, "Down");
    let put = raw.put(&path, &tok, &body, None).await;
    let op_url = put.header("azure-asyncoperation").unwrap().to_owned();
    let running = raw.get(&lb, &tok).await.body;
    assert_eq!(running["properties"]["provisioningState"], "Updating");
    assert_eq!(pool_state(&running, "kubernetes"), "Updating");
    assert_eq!(
        raw.get(&path, &tok).await.body["properties"]["provisioningState"],
        "Updating"
    );
    let poll = raw.get(&op_url, &tok).await;
    assert_eq!(poll.raw.as_ref(), br#"{"status":"InProgress"}"#);

    assert_eq!(sim.complete_operations(), 1);
    // No poll needed: the very next read of the LB shows the end.
    let done = raw.get(&lb, &tok).await.body;
    assert_eq!(done["properties"]["provisioningState"], "Succeeded");
    assert_eq!(pool_state(&done, "kubernetes"), "Succeeded");
    let poll = raw.get(&op_url, &tok).await;
    assert_eq!(
        poll.raw.as_ref(),
        br#"{"status":"Succeeded"}"#,
        "recorded NRP body"
    );
    let record = sim.operation_record(&op_id_of(&op_url)).unwrap();
    let log = sim.effective_log();
    assert_eq!(log.len(), 1);
    assert_eq!(Some(log[0].time), record.end_time, "effective at the end");

    // Timer-driven completion: polling the LB (every 50 ms), the first `Succeeded` read comes
    // right after the recorded end, never before it.
    tuning.completion_delay_ms = 300;
    sim.set_tuning(tuning);
    let body = with_first_admin_state(raw.get(&path, &tok).await.body, "None");
    let put = raw.put(&path, &tok, &body, None).await;
    assert_eq!(put.status, 200, "{:?}", put.body);
    let op_id = op_id_of(put.header("azure-asyncoperation").unwrap());
    let seen = eventually("the LB to read Succeeded", || async {
        let state = raw.get(&lb, &tok).await.body["properties"]["provisioningState"].clone();
        (state == "Succeeded").then(jiff::Timestamp::now)
    })
    .await;
    let record = sim.operation_record(&op_id).unwrap();
    let end = record.end_time.unwrap();
    assert_eq!(record.status, json!({"status": "Succeeded"}));
    assert!(end <= seen, "read Succeeded at {seen} before the end {end}");
    assert!(
        end.duration_since(record.start_time).as_millis() >= 300,
        "{record:?}"
    );
    let log = sim.effective_log();
    assert_eq!((log.len(), log[1].time), (2, end));
}

#[tokio::test]
async fn every_api_version_since_2022_serves_the_same_shapes_and_others_are_refused_like_arm() {
    let sim = start("aks-ip").await;
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let lb = lb_path(&sim, "kubernetes");
    let pool = pool_path(&sim, "kubernetes", "kubernetes");
    let strip = |mut v: Value| {
        v["etag"] = Value::Null;
        v
    };
    let reference = strip(raw.get(&format!("{lb}?{API}"), &tok).await.body);
    assert_eq!(arm_sim::API_VERSIONS.first(), Some(&"2022-01-01"));
    assert_eq!(arm_sim::API_VERSIONS.last(), Some(&"2026-03-01"));
    for v in arm_sim::API_VERSIONS {
        let got = raw.get(&format!("{lb}?api-version={v}"), &tok).await;
        assert_eq!(got.status, 200, "{v}: {:?}", got.body);
        assert_eq!(strip(got.body), reference, "{v}");
    }
    // A write under the newest version: its operation URL carries that version.
    let body = raw
        .get(&format!("{pool}?api-version=2026-03-01"), &tok)
        .await
        .body;
    let auth = format!("Bearer {tok}");
    let put = raw
        .send(
            "PUT",
            &format!("{pool}?api-version=2026-03-01"),
            &[
                ("authorization", &auth),
                ("content-type", "application/json"),
            ],
            Some(serde_json::to_vec(&with_first_admin_state(body, "Down")).unwrap()),
        )
        .await;
    assert_eq!(put.status, 200, "{:?}", put.body);
    let op = put.header("azure-asyncoperation").unwrap();
    assert!(op.ends_with("?api-version=2026-03-01"), "{op}");
    assert_eq!(raw.wait_op(op, &tok).await, json!({"status": "Succeeded"}));

    for v in [
        "2021-08-01",
        "2024-03-01-preview",
        "2026-05-01",
        "2099-01-01",
    ] {
        let r = raw.get(&format!("{pool}?api-version={v}"), &tok).await;
        assert_eq!(
            (r.status, r.code()),
            (400, "NoRegisteredProviderFound"),
            "{v}"
        );
        let message = r.body["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!(
                "No registered resource provider found for location 'eastus' and API version '{v}' for type 'loadBalancers/backendAddressPools'. The supported api-versions are '2026-03-01, 2026-01-01, 2025-09-01,"
            )),
            "{message}"
        );
        assert!(
            message.ends_with("2022-01-01'. The supported locations are 'eastus'."),
            "{message}"
        );
    }
}

/// The configured latency is the time to answer (the simulator's own handling of a large
/// document runs inside it, not on top), and an operation runs its full completion delay
/// after the PUT is answered.
#[tokio::test]
async fn latency_is_the_time_to_answer_and_operations_run_from_the_answer() {
    let sim = start("aks-ip").await;
    let mut tuning = sim.tuning();
    tuning.latency_ms.put = 200;
    tuning.latency_ms.get = 100;
    tuning.completion_delay_ms = 300;
    sim.set_tuning(tuning);
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let lb = lb_path(&sim, "kubernetes");
    let path = pool_path(&sim, "kubernetes", "kubernetes");
    let sent = std::time::Instant::now();
    let got = raw.get(&lb, &tok).await;
    let took = sent.elapsed().as_millis();
    assert_eq!(got.status, 200);
    assert!((100..180).contains(&took), "GET answered in {took} ms");
    let body = with_first_admin_state(raw.get(&path, &tok).await.body, "Down");
    let sent = std::time::Instant::now();
    let put = raw.put(&path, &tok, &body, None).await;
    let answered = jiff::Timestamp::now();
    let took = sent.elapsed().as_millis();
    assert_eq!(put.status, 200, "{:?}", put.body);
    assert!((200..280).contains(&took), "PUT answered in {took} ms");
    let op_id = op_id_of(put.header("azure-asyncoperation").unwrap());
    let end = eventually("the operation to end", || async {
        sim.operation_record(&op_id).unwrap().end_time
    })
    .await;
    let ran = end.duration_since(answered).as_millis();
    assert!(
        (290..400).contains(&ran),
        "operation ended {ran} ms after the answer"
    );
}

#[tokio::test]
async fn an_unchanged_lb_is_rendered_once_and_every_change_shows_in_the_next_read() {
    let sim = start("aks-ip").await;
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let lb = lb_path(&sim, "kubernetes");
    let first = raw.get(&lb, &tok).await;
    let renders = sim.lb_renders();
    for _ in 0..5 {
        let again = raw.get(&lb, &tok).await;
        assert_eq!(again.raw, first.raw, "an unchanged LB reads the same bytes");
    }
    assert_eq!(
        sim.lb_renders(),
        renders,
        "reads of an unchanged LB rendered it again"
    );

    // An outside write changes what the next read says (and only the next read renders).
    let entry = first.body["properties"]["backendAddressPools"][0]["properties"]
        ["loadBalancerBackendAddresses"][0]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let pool = first.body["properties"]["backendAddressPools"][0]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    sim.outside_write("kubernetes", &pool, &entry, Some(AdminState::Down))
        .unwrap();
    let after = raw.get(&lb, &tok).await;
    assert_ne!(after.body["etag"], first.body["etag"]);
    assert_eq!(
        after.body["properties"]["backendAddressPools"][0]["properties"]["loadBalancerBackendAddresses"]
            [0]["properties"]["adminState"],
        "Down"
    );
    assert_eq!(sim.lb_renders(), renders + 1);
    // A PUT through ARM, then its operation's end: each shows at once.
    let mut body = after.body.clone();
    body["properties"]["backendAddressPools"][0]["properties"]["loadBalancerBackendAddresses"][0]
        ["properties"]["adminState"] = json!("None");
    let mut tuning = sim.tuning();
    tuning.completion_delay_ms = 3_600_000;
    sim.set_tuning(tuning);
    let put = raw.put(&lb, &tok, &body, None).await;
    assert!(put.status == 200 || put.status == 201, "{:?}", put.body);
    let renders = sim.lb_renders();
    let running_raw = raw.get(&lb, &tok).await;
    // The PUT answers with the document a GET reads while the operation runs, rendered once.
    assert_eq!(
        running_raw.raw, put.raw,
        "PUT answer and GET during the operation"
    );
    assert_eq!(
        sim.lb_renders(),
        renders,
        "the GET re-rendered the PUT's answer"
    );
    let running = running_raw.body;
    assert_eq!(running["properties"]["provisioningState"], "Updating");
    assert_eq!(sim.complete_operations(), 1);
    let done = raw.get(&lb, &tok).await.body;
    assert_eq!(done["properties"]["provisioningState"], "Succeeded");
    assert_ne!(done["etag"], running["etag"]);
}
