//! ARM write handlers: pool PUT / DELETE and whole-LB PUT. Each checks `If-Match` against the
//! LB etag, validates the body, takes the LB lock (or supersedes), stores the new state with
//! `provisioningState: Updating`, starts an operation and schedules its completion.

use super::{Resp, empty, json_bytes, set_header};
use crate::Shared;
use crate::body::{lb_from_body, pool_from_body};
use crate::errors::ArmError;
use crate::lro::{LockCheck, OpKind, OpSpec, Operations};
use crate::model::Scope;
use crate::structure::StructureChange;
use http::{StatusCode, request::Parts};
use serde_json::Value;
use std::sync::Arc;

use super::arm::{api_version, if_match, parse_json};
use super::reads::with_etag;

pub(super) fn async_url(
    shared: &Shared,
    sub: &str,
    location: &str,
    op_id: &str,
    what: &str,
    api: &str,
) -> String {
    format!(
        "{}/subscriptions/{sub}/providers/Microsoft.Network/locations/{location}/{what}/{op_id}?api-version={api}",
        shared.base_url
    )
}

/// Adds the LRO headers of a write response.
fn lro_headers(
    shared: &Shared,
    parts: &Parts,
    resp: &mut Resp,
    op: (&str, &str, &str),
    retry: u64,
) {
    let (sub, location, op_id) = op;
    set_header(
        resp,
        "azure-asyncoperation",
        &async_url(
            shared,
            sub,
            location,
            op_id,
            "operations",
            &api_version(parts),
        ),
    );
    set_header(resp, "azure-asyncnotification", "Enabled");
    set_header(resp, "retry-after", &retry.to_string());
}

/// Schedules completion of an operation the completion delay after the write is answered.
fn schedule(shared: &Arc<Shared>, op_id: String, delay_ms: u64) {
    let shared = shared.clone();
    let due = super::arm::answer_at() + std::time::Duration::from_millis(delay_ms);
    tokio::spawn(async move {
        // A zero delay skips the timer (1 ms granularity) so benchmarks see the HTTP cost only.
        if delay_ms > 0 {
            tokio::time::sleep_until(due).await;
        }
        let mut st = shared.state.lock();
        let st = &mut *st;
        st.ops
            .complete(&op_id, &mut st.store, jiff::Timestamp::now());
    });
}

/// Whether a pool PUT body lists any backend address (of a NIC-based pool, every listed entry is
/// a NIC-based member: IP addresses cannot be added to it).
fn carries_entries(doc: &Value) -> bool {
    doc.pointer("/properties/loadBalancerBackendAddresses")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
}

pub(super) fn put_pool(
    shared: &Arc<Shared>,
    parts: &Parts,
    body: &[u8],
    sub: &str,
    rg: &str,
    lb: &str,
    pool: &str,
) -> Result<Resp, ArmError> {
    let doc = parse_json(body)?;
    let now = jiff::Timestamp::now();
    let mut guard = shared.state.lock();
    let st = &mut *guard;
    let key = st.store.lb_key(sub, rg, lb)?;
    let scope = Scope {
        sub: &key.sub,
        rg: &key.rg,
        lb: &key.lb,
    };
    let location = st.store.lb(sub, rg, lb)?.location.clone();
    let l = st.store.lb_mut(sub, rg, lb)?;
    Operations::check_if_match(l, &scope.lb_id(), if_match(parts).as_deref())?;
    let existing = l.pool(pool).cloned();
    if st.tuning.refuse_nic_pool_puts
        && existing.as_ref().is_some_and(|p| p.nic_based)
        && carries_entries(&doc)
    {
        return Err(ArmError::nic_pool_put_refused(&scope.pool_id(pool)));
    }
    let mut new_pool = pool_from_body(
        existing.as_ref().map(|p| p.name.as_str()).unwrap_or(pool),
        &doc,
        existing.as_ref(),
    )?;
    let op_id = uuid::Uuid::new_v4().to_string();
    let kind = OpKind::PutPool {
        pool: new_pool.name.clone(),
    };
    let superseded = st.ops.check_lock(
        l,
        &kind,
        &op_id,
        st.faults.supersede,
        st.tuning.lock_retry_after_secs,
        now,
    )?;
    let retry = st.tuning.retry_after_secs;
    let unchanged = existing.as_ref().is_some_and(|e| {
        new_pool.provisioning_state = e.provisioning_state.clone();
        *e == new_pool && e.provisioning_state == "Succeeded"
    });
    if unchanged && superseded == LockCheck::Free {
        // Nothing to do: 200 with `Succeeded`, and an operation that is already done.
        st.ops
            .finished(key.clone(), &location, kind, op_id.clone(), now);
        let l = st.store.lb(sub, rg, lb)?;
        let mut resp = json_bytes(StatusCode::OK, l.pool_bytes(&new_pool, scope).into());
        lro_headers(
            shared,
            parts,
            &mut resp,
            (&key.sub, &location, &op_id),
            retry,
        );
        return Ok(resp);
    }
    new_pool.provisioning_state = "Updating".into();
    let status = if existing.is_some() {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    match l.pool_mut(&new_pool.name) {
        Some(slot) => *slot = new_pool,
        None => {
            // A new pool changes the LB's pool list, so its structure fingerprint.
            let before = l.fingerprint();
            let name = new_pool.name.clone();
            l.pools.push(new_pool);
            st.structure_log.push(StructureChange {
                time: now,
                lb: l.name.clone(),
                op_id: op_id.clone(),
                operation: kind.op_name().to_owned(),
                before,
                after: l.fingerprint(),
                changes: vec![format!("backendAddressPools: added '{name}'")],
            });
        }
    }
    let fail = st.faults.take_failure();
    st.ops.start(
        l,
        OpSpec {
            key: key.clone(),
            location: location.clone(),
            kind,
            op_id: op_id.clone(),
            fail,
        },
        now,
    );
    let p = l
        .pool(pool)
        .map(|p| l.pool_bytes(p, scope))
        .unwrap_or_else(|| b"null".to_vec());
    let etag = l.etag.clone();
    let delay_ms = st.op_lengths.next_ms(&st.tuning);
    drop(guard);
    schedule(shared, op_id.clone(), delay_ms);
    let mut resp = json_bytes(status, p.into());
    lro_headers(
        shared,
        parts,
        &mut resp,
        (&key.sub, &location, &op_id),
        retry,
    );
    Ok(with_etag(resp, &etag))
}

pub(super) fn delete_pool(
    shared: &Arc<Shared>,
    parts: &Parts,
    sub: &str,
    rg: &str,
    lb: &str,
    pool: &str,
) -> Result<Resp, ArmError> {
    let now = jiff::Timestamp::now();
    let mut guard = shared.state.lock();
    let st = &mut *guard;
    let key = st.store.lb_key(sub, rg, lb)?;
    let scope = Scope {
        sub: &key.sub,
        rg: &key.rg,
        lb: &key.lb,
    };
    let l = st.store.lb_mut(sub, rg, lb)?;
    let location = l.location.clone();
    Operations::check_if_match(l, &scope.lb_id(), if_match(parts).as_deref())?;
    if l.pool(pool).is_none() {
        return Ok(empty(StatusCode::NO_CONTENT));
    }
    let op_id = uuid::Uuid::new_v4().to_string();
    let kind = OpKind::DeletePool {
        pool: pool.to_owned(),
    };
    st.ops.check_lock(
        l,
        &kind,
        &op_id,
        st.faults.supersede,
        st.tuning.lock_retry_after_secs,
        now,
    )?;
    let before = l.fingerprint();
    l.pools.retain(|p| !p.name.eq_ignore_ascii_case(pool));
    st.structure_log.push(StructureChange {
        time: now,
        lb: l.name.clone(),
        op_id: op_id.clone(),
        operation: kind.op_name().to_owned(),
        before,
        after: l.fingerprint(),
        changes: vec![format!("backendAddressPools: removed '{pool}'")],
    });
    let fail = st.faults.take_failure();
    st.ops.start(
        l,
        OpSpec {
            key: key.clone(),
            location: location.clone(),
            kind,
            op_id: op_id.clone(),
            fail,
        },
        now,
    );
    let retry = st.tuning.retry_after_secs;
    let delay_ms = st.op_lengths.next_ms(&st.tuning);
    drop(guard);
    schedule(shared, op_id.clone(), delay_ms);
    let mut resp = empty(StatusCode::ACCEPTED);
    lro_headers(
        shared,
        parts,
        &mut resp,
        (&key.sub, &location, &op_id),
        retry,
    );
    set_header(
        &mut resp,
        "location",
        &async_url(
            shared,
            &key.sub,
            &location,
            &op_id,
            "operationResults",
            &api_version(parts),
        ),
    );
    Ok(resp)
}

pub(super) fn put_lb(
    shared: &Arc<Shared>,
    parts: &Parts,
    body: &[u8],
    sub: &str,
    rg: &str,
    lb: &str,
) -> Result<Resp, ArmError> {
    let doc = parse_json(body)?;
    let now = jiff::Timestamp::now();
    let mut guard = shared.state.lock();
    let st = &mut *guard;
    let sub_id = st.store.sub(sub)?.id.clone();
    let (rg_name, rg_location) = {
        let g = st.store.rg(sub, rg)?;
        (g.name.clone(), g.location.clone())
    };
    let existing = st.store.lb(sub, rg, lb).ok().cloned();
    let im = if_match(parts);
    let lb_name = existing
        .as_ref()
        .map(|l| l.name.clone())
        .unwrap_or_else(|| lb.to_owned());
    let scope = Scope {
        sub: &sub_id,
        rg: &rg_name,
        lb: &lb_name,
    };
    match (&existing, im.as_deref()) {
        (Some(l), m) => Operations::check_if_match(l, &scope.lb_id(), m)?,
        (None, Some(m)) => return Err(ArmError::etag_mismatch(m, "", &scope.lb_id())),
        (None, None) => {}
    }
    let mut new_lb = lb_from_body(&lb_name, &doc, existing.as_ref(), &rg_location)?;
    // A whole-LB PUT replaces everything; one that moves more than pool entries is logged, or
    // refused in strict mode (before the lock, like any validation failure).
    let changes = existing
        .as_ref()
        .map(|old| old.structure_changes(&new_lb))
        .unwrap_or_default();
    if !changes.is_empty() && st.tuning.strict_lb_structure {
        return Err(ArmError::structure_changed(&scope.lb_id(), &changes));
    }
    let op_id = uuid::Uuid::new_v4().to_string();
    let supersede = st.faults.supersede;
    let lock_retry = st.tuning.lock_retry_after_secs;
    let g = st.store.rg_mut(sub, rg)?;
    if let Some(stored) = g.lbs.get_mut(&lb_name.to_ascii_lowercase()) {
        st.ops
            .check_lock(stored, &OpKind::PutLb, &op_id, supersede, lock_retry, now)?;
        new_lb.lock = None;
    }
    if let (Some(old), false) = (&existing, changes.is_empty()) {
        st.structure_log.push(StructureChange {
            time: now,
            lb: lb_name.clone(),
            op_id: op_id.clone(),
            operation: OpKind::PutLb.op_name().to_owned(),
            before: old.fingerprint(),
            after: new_lb.fingerprint(),
            changes,
        });
    }
    for p in new_lb.pools.iter_mut() {
        p.provisioning_state = "Updating".into();
    }
    let status = if existing.is_some() {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    let key = crate::store::LbKey {
        sub: sub_id.clone(),
        rg: rg_name.clone(),
        lb: lb_name.clone(),
    };
    let location = new_lb.location.clone();
    let slot = g
        .lbs
        .entry(lb_name.to_ascii_lowercase())
        .or_insert_with(|| new_lb.clone());
    *slot = new_lb;
    let fail = st.faults.take_failure();
    st.ops.start(
        slot,
        OpSpec {
            key,
            location: location.clone(),
            kind: OpKind::PutLb,
            op_id: op_id.clone(),
            fail,
        },
        now,
    );
    // The answer is the document a GET reads until the operation ends: rendered once, and
    // kept for those GETs.
    let (rendered, etag) = st.store.lb_body(&sub_id, &rg_name, &lb_name)?;
    let retry = st.tuning.retry_after_secs;
    let delay_ms = st.op_lengths.next_ms(&st.tuning);
    drop(guard);
    schedule(shared, op_id.clone(), delay_ms);
    let mut resp = json_bytes(status, rendered);
    lro_headers(
        shared,
        parts,
        &mut resp,
        (&sub_id, &location, &op_id),
        retry,
    );
    Ok(with_etag(resp, &etag))
}
