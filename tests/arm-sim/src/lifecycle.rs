//! Load balancers deleted and created again by someone else: cloud-provider-azure deletes a
//! cluster's internal LB when its last internal Service goes and creates it again for the next
//! one (and a multi-SLB configuration gains and loses LBs the same way). Pure state with the
//! time passed in, like [`crate::lro`].
//!
//! - **Removal** is refused with ARM's 429 `RetryableErrorDueToAnotherOperation` while an
//!   operation holds the LB (NRP serializes a DELETE behind a running PUT; the deleter
//!   retries), then the LB is gone at once (no `Deleting` phase, as for pools). Its last
//!   state is returned so the caller can create it again.
//! - **Re-creation** is the creator's PUT of the same structure and members by a writer that
//!   knows nothing of admin state: every `adminState` is absent, the etag and resource GUID are
//!   new, and each entry that was not `None` before is logged as an outside change to `None`.

use crate::errors::ArmError;
use crate::lro::{Operations, apply_effective};
use crate::model::{LoadBalancer, new_etag};
use crate::store::{LbKey, Store};

/// The outside writer's name in the effective log (as [`crate::lro::outside_write`]).
const CREATOR: &str = "outside-writer";

/// ARM's 429 while a running operation holds `lb` (NRP serialises writes behind it).
fn refuse_while_locked(
    lb: &LoadBalancer,
    ops: &Operations,
    lock_retry_secs: u64,
) -> Result<(), ArmError> {
    match &lb.lock {
        Some(lock) if ops.ops.get(&lock.op_id).is_some_and(|o| o.running()) => {
            Err(ArmError::another_operation(
                lock.op_name,
                &lock.op_id,
                &lb.resource_guid,
                lock_retry_secs,
            ))
        }
        _ => Ok(()),
    }
}

/// Deletes the load balancer `key` unless an operation holds it; returns its last state.
pub fn remove_lb(
    store: &mut Store,
    ops: &mut Operations,
    key: &LbKey,
    lock_retry_secs: u64,
) -> Result<LoadBalancer, ArmError> {
    refuse_while_locked(store.lb(&key.sub, &key.rg, &key.lb)?, ops, lock_retry_secs)?;
    let g = store.rg_mut(&key.sub, &key.rg)?;
    g.lbs
        .remove(&key.lb.to_ascii_lowercase())
        .ok_or_else(|| ArmError::lb_not_found(&key.rg, &key.lb))
}

/// A member leaves pool `pool` of `key` the way its owner takes it out: cloud-provider-azure's
/// pool PUT without the node's address (IP-based pools; a node excluded from load balancers or
/// deleted) or the VMSS instance's NIC going with the VM (NIC-based). Refused with ARM's 429
/// while an operation holds the LB, like any other write (the owner retries); then at once,
/// with a new etag. `target` is the entry's IP address or NIC ipConfiguration ID. Returns how
/// many entries went.
pub fn remove_member(
    store: &mut Store,
    ops: &Operations,
    key: &LbKey,
    pool: &str,
    target: &str,
    lock_retry_secs: u64,
) -> Result<usize, ArmError> {
    let lb = store.lb_mut(&key.sub, &key.rg, &key.lb)?;
    refuse_while_locked(lb, ops, lock_retry_secs)?;
    let p = lb
        .pool_mut(pool)
        .ok_or_else(|| ArmError::child_not_found(pool))?;
    let before = p.addresses.len();
    p.addresses.retain(|a| {
        a.ip_address() != Some(target)
            && !a
                .nic_ip_configuration()
                .is_some_and(|n| n.eq_ignore_ascii_case(target))
    });
    p.backend_ip_configurations
        .retain(|c| !c.eq_ignore_ascii_case(target));
    let removed = before - p.addresses.len();
    if removed == 0 {
        return Err(ArmError::child_not_found(target));
    }
    lb.etag = new_etag();
    Ok(removed)
}

/// Creates `lb` again in `key`'s group, every admin state cleared; refused (with the reason)
/// if an LB of that name exists or the group is gone.
pub fn recreate_lb(
    store: &mut Store,
    ops: &mut Operations,
    key: &LbKey,
    mut lb: LoadBalancer,
    now: jiff::Timestamp,
) -> Result<(), String> {
    let g = store
        .rg_mut(&key.sub, &key.rg)
        .map_err(|e| format!("{e:?}"))?;
    let slot = key.lb.to_ascii_lowercase();
    if g.lbs.contains_key(&slot) {
        return Err(format!("load balancer {} exists", key.lb));
    }
    lb.etag = new_etag();
    lb.resource_guid = uuid::Uuid::new_v4().to_string();
    lb.provisioning_state = "Succeeded".into();
    lb.lock = None;
    let name = lb.name.clone();
    for pool in lb.pools.iter_mut() {
        pool.provisioning_state = "Succeeded".into();
        for a in pool.addresses.iter_mut() {
            a.admin_state = None;
        }
        apply_effective(pool, &name, CREATOR, now, &mut ops.effective);
    }
    g.lbs.insert(slot, lb);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lro::{OpKind, OpSpec};
    use crate::model::AdminState;

    fn setup() -> (Store, Operations, LbKey) {
        let seed = crate::seed::Seed::preset("aks", None).unwrap();
        let store = seed.build().unwrap();
        let key = store.find_lb("kubernetes-internal").unwrap();
        (store, Operations::default(), key)
    }

    #[test]
    fn an_lb_is_not_removed_while_an_operation_holds_it_then_it_is_gone() {
        let (mut store, mut ops, key) = setup();
        let lb = store.lb_mut(&key.sub, &key.rg, &key.lb).unwrap();
        let spec = OpSpec {
            key: key.clone(),
            location: "eastus".into(),
            kind: OpKind::PutLb,
            op_id: "op1".into(),
            fail: false,
        };
        ops.start(lb, spec, jiff::Timestamp::now());
        let e = remove_lb(&mut store, &mut ops, &key, 3).unwrap_err();
        assert_eq!(e.status.as_u16(), 429);
        ops.complete("op1", &mut store, jiff::Timestamp::now());
        remove_lb(&mut store, &mut ops, &key, 3).unwrap();
        let gone = store.lb(&key.sub, &key.rg, &key.lb).unwrap_err();
        assert_eq!(gone.status.as_u16(), 404);
    }

    #[test]
    fn a_recreated_lb_has_its_members_without_admin_state_and_logs_the_resets() {
        let (mut store, mut ops, key) = setup();
        let lb = store.lb_mut(&key.sub, &key.rg, &key.lb).unwrap();
        let members: usize = lb.pools.iter().map(|p| p.addresses.len()).sum();
        assert!(members > 0);
        let a = &mut lb.pools[0].addresses[0];
        a.admin_state = Some(AdminState::Down);
        a.effective = AdminState::Down;
        let (etag, guid) = (lb.etag.clone(), lb.resource_guid.clone());
        let kept = remove_lb(&mut store, &mut ops, &key, 3).unwrap();
        let t = jiff::Timestamp::now();
        recreate_lb(&mut store, &mut ops, &key, kept.clone(), t).unwrap();
        let lb = store.lb(&key.sub, &key.rg, &key.lb).unwrap();
        assert_ne!(lb.etag, etag);
        assert_ne!(lb.resource_guid, guid);
        let after: usize = lb.pools.iter().map(|p| p.addresses.len()).sum();
        assert_eq!(after, members);
        assert!(
            lb.pools
                .iter()
                .flat_map(|p| &p.addresses)
                .all(|a| a.admin_state.is_none())
        );
        // The one entry that was Down is logged as reset by an outside writer, nothing else.
        assert_eq!(ops.effective.len(), 1);
        assert_eq!(ops.effective[0].value, AdminState::None);
        assert_eq!(ops.effective[0].op_id, CREATOR);
        // Creating it twice is refused.
        assert!(recreate_lb(&mut store, &mut ops, &key, kept, t).is_err());
    }

    #[test]
    fn a_member_leaves_its_pool_but_not_under_a_running_operation() {
        let seed = crate::seed::Seed::preset("aks-ip", None).unwrap();
        let mut store = seed.build().unwrap();
        let mut ops = Operations::default();
        let key = store.find_lb("kubernetes").unwrap();
        let lb = store.lb_mut(&key.sub, &key.rg, &key.lb).unwrap();
        let pool = lb.pools[0].name.clone();
        let target = lb.pools[0].addresses[0].ip_address().unwrap().to_string();
        let members = lb.pools[0].addresses.len();
        let spec = OpSpec {
            key: key.clone(),
            location: "eastus".into(),
            kind: OpKind::PutPool { pool: pool.clone() },
            op_id: "op1".into(),
            fail: false,
        };
        ops.start(lb, spec, jiff::Timestamp::now());
        let e = remove_member(&mut store, &ops, &key, &pool, &target, 3).unwrap_err();
        assert_eq!(e.status.as_u16(), 429);
        ops.complete("op1", &mut store, jiff::Timestamp::now());
        let etag = store.lb(&key.sub, &key.rg, &key.lb).unwrap().etag.clone();
        assert_eq!(
            remove_member(&mut store, &ops, &key, &pool, &target, 3).unwrap(),
            1
        );
        let lb = store.lb(&key.sub, &key.rg, &key.lb).unwrap();
        assert_eq!(lb.pools[0].addresses.len(), members - 1);
        assert!(
            lb.pools[0]
                .addresses
                .iter()
                .all(|a| a.ip_address() != Some(target.as_str()))
        );
        assert_ne!(lb.etag, etag);
        // Gone already: a second removal says what it did not find.
        let e = remove_member(&mut store, &ops, &key, &pool, &target, 3).unwrap_err();
        assert_eq!(e.status.as_u16(), 404);
    }
}
