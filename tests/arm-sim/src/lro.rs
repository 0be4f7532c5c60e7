//! Long-running operations and the write rules around them. Pure state with the current time
//! passed in, so every rule here is testable without a server.
//!
//! Concurrency rules modelled on NRP (contracts/arm.md 1.5, 1.6, 3.3): an LB and all its children
//! share one weak etag that changes on every write; `If-Match` is compared with it; a write while
//! an operation runs gets 429 `RetryableErrorDueToAnotherOperation` (or, in supersede mode,
//! cancels the running operation with `CanceledAndSupersededDueToAnotherOperation`); admin-state
//! changes become effective when the operation completes.

use crate::errors::ArmError;
use crate::model::{AdminState, LoadBalancer, Lock, Pool, new_etag};
use crate::store::{LbKey, Store};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::HashMap;

/// State of a long-running operation, as the async-operation URL reports it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status")]
pub enum OpStatus {
    InProgress,
    Succeeded,
    Failed { error: Value },
    Canceled { error: Value },
}

/// What an operation does when it completes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum OpKind {
    PutPool { pool: String },
    PutLb,
    DeletePool { pool: String },
}

impl OpKind {
    /// NRP's operation names (they appear in lock and supersede messages).
    pub fn op_name(&self) -> &'static str {
        match self {
            Self::PutPool { .. } => "PutLoadBalancerBackendAddressPoolOperation",
            Self::PutLb => "PutLoadBalancerOperation",
            Self::DeletePool { .. } => "DeleteLoadBalancerBackendAddressPoolOperation",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Operation {
    pub id: String,
    pub lb: LbKey,
    pub location: String,
    pub kind: OpKind,
    pub status: OpStatus,
    pub start: jiff::Timestamp,
    pub end: Option<jiff::Timestamp>,
    /// Injected outcome: finish as Failed instead of Succeeded.
    pub fail: bool,
}

impl Operation {
    /// The async-operation body exactly as recorded NRP traffic shows it: `{"status":"InProgress"}`
    /// and `{"status":"Succeeded"}` (22 bytes) with nothing else; `Failed` and `Canceled` add the
    /// `error` (contracts/arm.md 1.5). Times are in [`Operation::record`], not on the wire.
    pub fn body(&self) -> Value {
        match &self.status {
            OpStatus::InProgress => json!({ "status": "InProgress" }),
            OpStatus::Succeeded => json!({ "status": "Succeeded" }),
            OpStatus::Failed { error } => json!({ "status": "Failed", "error": error }),
            OpStatus::Canceled { error } => json!({ "status": "Canceled", "error": error }),
        }
    }

    /// What the simulator knows about the operation (control API / library, not ARM).
    pub fn record(&self) -> OperationRecord {
        OperationRecord {
            id: self.id.clone(),
            lb: self.lb.lb.clone(),
            name: self.kind.op_name().to_owned(),
            status: self.body(),
            start_time: self.start,
            end_time: self.end,
        }
    }

    pub fn running(&self) -> bool {
        self.status == OpStatus::InProgress
    }
}

/// An operation as the control API reports it: the wire body plus when it started and ended
/// (`endTime` is the instant the LB's `provisioningState` left `Updating` and the admin states
/// became effective; the effective log carries the same instant).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OperationRecord {
    pub id: String,
    pub lb: String,
    /// NRP's operation name, e.g. `PutLoadBalancerBackendAddressPoolOperation`.
    pub name: String,
    /// The async-operation body ([`Operation::body`]).
    pub status: Value,
    pub start_time: jiff::Timestamp,
    pub end_time: Option<jiff::Timestamp>,
}

/// One admin-state change that became effective.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EffectiveEvent {
    pub time: jiff::Timestamp,
    pub lb: String,
    pub pool: String,
    pub entry: String,
    /// The entry's IP address (IP-based) or NIC ipConfiguration ID (NIC-based).
    pub target: Option<String>,
    pub value: AdminState,
    pub op_id: String,
}

/// The operations table plus the effective log.
#[derive(Debug, Default)]
pub struct Operations {
    pub ops: HashMap<String, Operation>,
    pub effective: Vec<EffectiveEvent>,
}

/// What a new operation is.
#[derive(Debug, Clone)]
pub struct OpSpec {
    pub key: LbKey,
    pub location: String,
    pub kind: OpKind,
    pub op_id: String,
    /// Injected: end `Failed`.
    pub fail: bool,
}

/// Outcome of the lock check before a write.
#[derive(Debug, PartialEq)]
pub enum LockCheck {
    Free,
    /// A running op was canceled (supersede mode); its id.
    Superseded(String),
}

impl Operations {
    /// Checks `If-Match` against the LB etag (`*` matches any existing LB).
    pub fn check_if_match(
        lb: &LoadBalancer,
        lb_id: &str,
        if_match: Option<&str>,
    ) -> Result<(), ArmError> {
        match if_match {
            None | Some("*") => Ok(()),
            Some(v) if v == lb.etag => Ok(()),
            Some(v) => Err(ArmError::etag_mismatch(v, &lb.etag, lb_id)),
        }
    }

    /// Refuses a write while an operation holds the LB, or cancels that operation when
    /// `supersede` is set.
    pub fn check_lock(
        &mut self,
        lb: &mut LoadBalancer,
        new_kind: &OpKind,
        new_op_id: &str,
        supersede: bool,
        retry_secs: u64,
        now: jiff::Timestamp,
    ) -> Result<LockCheck, ArmError> {
        let Some(lock) = lb.lock.clone() else {
            return Ok(LockCheck::Free);
        };
        let running = self.ops.get(&lock.op_id).is_some_and(Operation::running);
        if !running {
            lb.lock = None;
            return Ok(LockCheck::Free);
        }
        if !supersede {
            return Err(ArmError::another_operation(
                lock.op_name,
                &lock.op_id,
                &lb.resource_guid,
                retry_secs,
            ));
        }
        if let Some(op) = self.ops.get_mut(&lock.op_id) {
            op.status = OpStatus::Canceled {
                error: json!({
                    "code": "Canceled",
                    "message": "Operation was canceled.",
                    "details": [{
                        "code": "CanceledAndSupersededDueToAnotherOperation",
                        "message": format!("Operation {} ({}) was canceled and superseded by operation {} ({}).",
                            lock.op_name, lock.op_id, new_kind.op_name(), new_op_id),
                    }],
                }),
            };
            op.end = Some(now);
        }
        lb.lock = None;
        Ok(LockCheck::Superseded(lock.op_id))
    }

    /// Registers a running operation and locks the LB. The LB gets a new etag and goes `Updating`.
    pub fn start(&mut self, lb: &mut LoadBalancer, spec: OpSpec, now: jiff::Timestamp) {
        let OpSpec {
            key,
            location,
            kind,
            op_id,
            fail,
        } = spec;
        lb.etag = new_etag();
        lb.provisioning_state = "Updating".into();
        lb.lock = Some(Lock {
            op_id: op_id.clone(),
            op_name: kind.op_name(),
        });
        self.ops.insert(
            op_id.clone(),
            Operation {
                id: op_id,
                lb: key,
                location,
                kind,
                status: OpStatus::InProgress,
                start: now,
                end: None,
                fail,
            },
        );
    }

    /// Registers an operation that is already done (a PUT that changed nothing).
    pub fn finished(
        &mut self,
        key: LbKey,
        location: &str,
        kind: OpKind,
        op_id: String,
        now: jiff::Timestamp,
    ) {
        self.ops.insert(
            op_id.clone(),
            Operation {
                id: op_id,
                lb: key,
                location: location.to_owned(),
                kind,
                status: OpStatus::Succeeded,
                start: now,
                end: Some(now),
                fail: false,
            },
        );
    }

    /// Completes a running operation: Succeeded applies every pending admin state of the LB and
    /// logs it; Failed marks the LB and pools `Failed`. Either way the LB gets a new etag.
    /// Returns false if it was not running.
    pub fn complete(&mut self, op_id: &str, store: &mut Store, now: jiff::Timestamp) -> bool {
        let Some(op) = self.ops.get_mut(op_id) else {
            return false;
        };
        if !op.running() {
            return false;
        }
        op.end = Some(now);
        let fail = op.fail;
        op.status = if fail {
            OpStatus::Failed {
                error: json!({"code": "InternalServerError", "message": "An error occurred.", "details": []}),
            }
        } else {
            OpStatus::Succeeded
        };
        let key = op.lb.clone();
        let Ok(lb) = store.lb_mut(&key.sub, &key.rg, &key.lb) else {
            return true;
        };
        if lb.lock.as_ref().is_some_and(|l| l.op_id == op_id) {
            lb.lock = None;
        }
        let state = if fail { "Failed" } else { "Succeeded" };
        lb.provisioning_state = state.into();
        // The etag changes again when the operation ends: in recorded Standard-LB traffic the
        // PUT's answer carried one new etag and the read after `Succeeded` another
        // (contracts/arm.md section 9, [CLI-REC]). A client whose next `If-Match` comes from
        // the PUT's answer gets 412, as on ARM.
        lb.etag = new_etag();
        for pool in lb.pools.iter_mut() {
            pool.provisioning_state = state.into();
            if fail {
                continue;
            }
            apply_effective(pool, &lb.name, op_id, now, &mut self.effective);
        }
        true
    }
}

/// Completes every running operation; returns how many.
pub fn complete_running(ops: &mut Operations, store: &mut Store, now: jiff::Timestamp) -> usize {
    let running: Vec<String> = ops
        .ops
        .values()
        .filter(|o| o.running())
        .map(|o| o.id.clone())
        .collect();
    running
        .iter()
        .filter(|id| ops.complete(id, store, now))
        .count()
}

pub(crate) fn apply_effective(
    pool: &mut Pool,
    lb: &str,
    op_id: &str,
    now: jiff::Timestamp,
    log: &mut Vec<EffectiveEvent>,
) {
    for a in pool.addresses.iter_mut() {
        let want = a.requested();
        if a.effective != want {
            a.effective = want;
            log.push(EffectiveEvent {
                time: now,
                lb: lb.to_owned(),
                pool: pool.name.clone(),
                entry: a.name.clone(),
                target: a
                    .ip_address()
                    .or(a.nic_ip_configuration())
                    .map(str::to_owned),
                value: want,
                op_id: op_id.to_owned(),
            });
        }
    }
}

/// The "outside writer": sets an entry's admin state directly, effective at once (like
/// cloud-provider-azure's blind PUT of a cached pool). Changes the LB etag.
pub fn outside_write(
    store: &mut Store,
    ops: &mut Operations,
    key: &LbKey,
    pool: &str,
    entry: &str,
    value: Option<AdminState>,
    now: jiff::Timestamp,
) -> Result<(), ArmError> {
    let lb = store.lb_mut(&key.sub, &key.rg, &key.lb)?;
    let lb_name = lb.name.clone();
    let p = lb.pool_mut(pool).ok_or_else(|| {
        ArmError::child_not_found(&format!("{}/backendAddressPools/{pool}", key.lb))
    })?;
    let a = p
        .addresses
        .iter_mut()
        .find(|a| {
            a.name.eq_ignore_ascii_case(entry)
                || a.ip_address() == Some(entry)
                || a.nic_ip_configuration()
                    .is_some_and(|n| n.eq_ignore_ascii_case(entry))
        })
        .ok_or_else(|| ArmError::child_not_found(entry))?;
    a.admin_state = value;
    apply_effective(p, &lb_name, "outside-writer", now, &mut ops.effective);
    lb.etag = new_etag();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Address;

    fn setup() -> (Store, Operations, LbKey) {
        let seed = crate::seed::Seed::preset("aks-ip", None).unwrap();
        let store = seed.build().unwrap();
        let key = store.find_lb("kubernetes").unwrap();
        (store, Operations::default(), key)
    }

    fn now() -> jiff::Timestamp {
        jiff::Timestamp::now()
    }

    #[test]
    fn write_locks_until_completion_and_then_applies_admin_state() {
        let (mut store, mut ops, key) = setup();
        let lb = store.lb_mut(&key.sub, &key.rg, &key.lb).unwrap();
        let etag_before = lb.etag.clone();
        let first: &mut Address = &mut lb.pools[0].addresses[0];
        first.admin_state = Some(AdminState::Down);
        let entry = first.name.clone();
        let kind = OpKind::PutPool {
            pool: "kubernetes".into(),
        };
        assert_eq!(
            ops.check_lock(lb, &kind, "op1", false, 3, now()).unwrap(),
            LockCheck::Free
        );
        ops.start(
            lb,
            OpSpec {
                key: key.clone(),
                location: "eastus".into(),
                kind: kind.clone(),
                op_id: "op1".into(),
                fail: false,
            },
            now(),
        );
        assert_ne!(lb.etag, etag_before);
        let err = ops
            .check_lock(lb, &kind, "op2", false, 3, now())
            .unwrap_err();
        assert_eq!(
            (err.status.as_u16(), err.code.as_str()),
            (429, "RetryableError")
        );
        assert_eq!(
            err.body()["error"]["details"][0]["code"],
            "RetryableErrorDueToAnotherOperation"
        );
        assert!(ops.effective.is_empty());
        assert!(ops.complete("op1", &mut store, now()));
        assert!(!ops.complete("op1", &mut store, now()));
        assert_eq!(ops.effective.len(), 1);
        assert_eq!(
            (ops.effective[0].entry.as_str(), ops.effective[0].value),
            (entry.as_str(), AdminState::Down)
        );
        let lb = store.lb_mut(&key.sub, &key.rg, &key.lb).unwrap();
        assert!(lb.lock.is_none());
        assert_eq!(
            ops.check_lock(lb, &kind, "op3", false, 3, now()).unwrap(),
            LockCheck::Free
        );
    }

    #[test]
    fn supersede_cancels_running_operation() {
        let (mut store, mut ops, key) = setup();
        let lb = store.lb_mut(&key.sub, &key.rg, &key.lb).unwrap();
        let kind = OpKind::PutPool {
            pool: "kubernetes".into(),
        };
        ops.start(
            lb,
            OpSpec {
                key: key.clone(),
                location: "eastus".into(),
                kind,
                op_id: "op1".into(),
                fail: false,
            },
            now(),
        );
        let r = ops
            .check_lock(lb, &OpKind::PutLb, "op2", true, 3, now())
            .unwrap();
        assert_eq!(r, LockCheck::Superseded("op1".into()));
        let body = ops.ops["op1"].body();
        assert_eq!(body["status"], "Canceled");
        assert_eq!(
            body["error"]["details"][0]["code"],
            "CanceledAndSupersededDueToAnotherOperation"
        );
        assert!(!ops.complete("op1", &mut store, now()));
    }

    #[test]
    fn failed_operation_applies_nothing() {
        let (mut store, mut ops, key) = setup();
        let lb = store.lb_mut(&key.sub, &key.rg, &key.lb).unwrap();
        lb.pools[0].addresses[0].admin_state = Some(AdminState::Down);
        ops.start(
            lb,
            OpSpec {
                key: key.clone(),
                location: "eastus".into(),
                kind: OpKind::PutLb,
                op_id: "op1".into(),
                fail: true,
            },
            now(),
        );
        ops.complete("op1", &mut store, now());
        assert_eq!(ops.ops["op1"].body()["status"], "Failed");
        assert!(ops.effective.is_empty());
        assert_eq!(
            store
                .lb(&key.sub, &key.rg, &key.lb)
                .unwrap()
                .provisioning_state,
            "Failed"
        );
    }

    #[test]
    fn if_match_compares_with_lb_etag() {
        let (store, _, key) = setup();
        let lb = store.lb(&key.sub, &key.rg, &key.lb).unwrap();
        assert!(Operations::check_if_match(lb, "id", Some(&lb.etag)).is_ok());
        assert!(Operations::check_if_match(lb, "id", Some("*")).is_ok());
        let e = Operations::check_if_match(lb, "id", Some("invalid")).unwrap_err();
        assert_eq!(e.status.as_u16(), 412);
        assert!(
            e.body()["error"]["details"][0]["message"]
                .as_str()
                .unwrap()
                .contains("W/\"invalid\"")
        );
    }

    #[test]
    fn outside_writer_is_effective_at_once() {
        let (mut store, mut ops, key) = setup();
        let name = store.lb(&key.sub, &key.rg, &key.lb).unwrap().pools[0].addresses[0]
            .name
            .clone();
        store.lb_mut(&key.sub, &key.rg, &key.lb).unwrap().pools[0].addresses[0].admin_state =
            Some(AdminState::Down);
        store.lb_mut(&key.sub, &key.rg, &key.lb).unwrap().pools[0].addresses[0].effective =
            AdminState::Down;
        outside_write(
            &mut store,
            &mut ops,
            &key,
            "kubernetes",
            &name,
            Some(AdminState::None),
            now(),
        )
        .unwrap();
        assert_eq!(ops.effective.len(), 1);
        assert_eq!(ops.effective[0].op_id, "outside-writer");
        assert!(
            outside_write(
                &mut store,
                &mut ops,
                &key,
                "kubernetes",
                "nope",
                None,
                now()
            )
            .is_err()
        );
    }
}
