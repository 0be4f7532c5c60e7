//! Azure Policy and management locks on writes (the `policyDeny` and `readOnlyLocks` faults):
//! ARM's 403 `RequestDisallowedByPolicy` and 409 `ScopeLocked` before anything changes; reads
//! go on; clearing the switch lets the same write through.
#![allow(clippy::unwrap_used)] // tests may unwrap

mod common;

use arm_sim::faults::FaultSpec;
use common::*;

#[tokio::test]
async fn a_policy_deny_and_a_read_only_lock_refuse_writes_and_change_nothing() {
    let sim = start("aks").await;
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let path = lb_path(&sim, "kubernetes");
    let lb = raw.get(&path, &tok).await;
    assert_eq!(lb.status, 200);
    let etag = lb.body["etag"].as_str().unwrap().to_owned();
    let sub = sim.credentials().subscription_id;

    sim.faults(FaultSpec {
        policy_deny: Some("deny-lb-writes".into()),
        ..Default::default()
    });
    let put = raw.put(&path, &tok, &lb.body, Some(&etag)).await;
    assert_eq!((put.status, put.code()), (403, "RequestDisallowedByPolicy"));
    let message = put.body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("Resource 'kubernetes' was disallowed by policy. Policy identifiers: '[{\"policyAssignment\":{\"id\":\"/subscriptions/")
            && message.contains("\"name\":\"deny-lb-writes\""),
        "{message}"
    );
    let pool = raw
        .put(
            &pool_path(&sim, "kubernetes", "kubernetes"),
            &tok,
            &serde_json::json!({"properties": {}}),
            None,
        )
        .await;
    assert_eq!(pool.code(), "RequestDisallowedByPolicy");
    assert_eq!(raw.get(&path, &tok).await.status, 200, "reads go on");
    sim.faults(FaultSpec {
        policy_deny: Some(String::new()),
        read_only_locks: Some(vec![RG.to_lowercase()]),
        ..Default::default()
    });
    let put = raw.put(&path, &tok, &lb.body, Some(&etag)).await;
    assert_eq!((put.status, put.code()), (409, "ScopeLocked"));
    assert_eq!(
        put.body["error"]["message"],
        format!(
            "The scope '{path}' cannot perform write operation because following scope(s) are locked: '/subscriptions/{sub}/resourceGroups/{RG}'. Please remove the lock and try again."
        )
    );
    // Nothing changed: same etag, and the write goes through once the lock is gone.
    assert_eq!(raw.get(&path, &tok).await.body["etag"], etag.as_str());
    sim.faults(FaultSpec {
        read_only_locks: Some(vec![]),
        ..Default::default()
    });
    let put = raw.put(&path, &tok, &lb.body, Some(&etag)).await;
    assert_eq!(put.status, 200, "{:?}", put.body);
}
