//! ARM read handlers: GET pool / LB, paged LISTs of pools and NICs, async-operation and
//! operationResults URLs. Rendering is in [`crate::model`].

use super::{Resp, empty, json, json_bytes, query_param, set_header};
use crate::Shared;
use crate::errors::ArmError;
use crate::lro::OpStatus;
use crate::model::Scope;
use http::{StatusCode, request::Parts};
use serde_json::{Value, json as j};

use super::arm::api_version;
use super::writes::async_url;

pub(super) fn with_etag(mut resp: Resp, etag: &str) -> Resp {
    set_header(&mut resp, "etag", etag);
    resp
}

pub(super) fn get_pool(
    shared: &Shared,
    sub: &str,
    rg: &str,
    lb: &str,
    pool: &str,
) -> Result<Resp, ArmError> {
    let st = shared.state.lock();
    let key = st.store.lb_key(sub, rg, lb)?;
    let l = st.store.lb(sub, rg, lb)?;
    let scope = Scope {
        sub: &key.sub,
        rg: &key.rg,
        lb: &key.lb,
    };
    let p = l
        .pool(pool)
        .ok_or_else(|| ArmError::child_not_found(&scope.pool_id(pool)))?;
    Ok(with_etag(
        json_bytes(StatusCode::OK, l.pool_bytes(p, scope).into()),
        &l.etag,
    ))
}

pub(super) fn get_lb(shared: &Shared, sub: &str, rg: &str, lb: &str) -> Result<Resp, ArmError> {
    let (body, etag) = shared.state.lock().store.lb_body(sub, rg, lb)?;
    Ok(with_etag(json_bytes(StatusCode::OK, body), &etag))
}

/// The range of `total` items the request's `$skipToken` and the page size select, and where
/// the next page starts (if any).
fn page_range(parts: &Parts, size: usize, total: usize) -> (std::ops::Range<usize>, Option<usize>) {
    let start = query_param(&parts.uri, "$skipToken")
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(0)
        .min(total);
    let end = (start + size.max(1)).min(total);
    (start..end, (end < total).then_some(end))
}

/// A page's `nextLink`, if there is a next page.
fn next_link(shared: &Shared, parts: &Parts, next: Option<usize>) -> Option<String> {
    next.map(|next| {
        let api = api_version(parts);
        format!(
            "{}{}?api-version={api}&$skipToken={next}",
            shared.base_url,
            parts.uri.path()
        )
    })
}

/// A page body `{"value": [...], "nextLink"?: ...}`.
fn page_body(shared: &Shared, parts: &Parts, value: Vec<Value>, next: Option<usize>) -> Value {
    let mut body = j!({ "value": value });
    if let Some(link) = next_link(shared, parts, next) {
        body["nextLink"] = j!(link);
    }
    body
}

/// [`page_body`] of items already rendered as bytes (pools of 5,000 entries are megabytes).
fn page_bytes(shared: &Shared, parts: &Parts, items: Vec<Vec<u8>>, next: Option<usize>) -> Vec<u8> {
    let mut out = Vec::with_capacity(items.iter().map(Vec::len).sum::<usize>() + 256);
    out.extend_from_slice(b"{\"value\":[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(item);
    }
    out.push(b']');
    if let Some(link) = next_link(shared, parts, next) {
        out.extend_from_slice(b",\"nextLink\":");
        out.extend_from_slice(&serde_json::to_vec(&link).unwrap_or_default());
    }
    out.push(b'}');
    out
}

pub(super) fn list_pools(
    shared: &Shared,
    parts: &Parts,
    sub: &str,
    rg: &str,
    lb: &str,
) -> Result<Resp, ArmError> {
    let (items, next) = {
        let st = shared.state.lock();
        let key = st.store.lb_key(sub, rg, lb)?;
        let l = st.store.lb(sub, rg, lb)?;
        let scope = Scope {
            sub: &key.sub,
            rg: &key.rg,
            lb: &key.lb,
        };
        // Only the requested page is rendered (pools of 5,000 entries are megabytes each).
        let (range, next) = page_range(parts, st.tuning.page_size, l.pools.len());
        let items: Vec<Vec<u8>> = l.pools[range]
            .iter()
            .map(|p| l.pool_bytes(p, scope))
            .collect();
        (items, next)
    };
    let body = page_bytes(shared, parts, items, next);
    Ok(json_bytes(StatusCode::OK, body.into()))
}

pub(super) fn list_nics(
    shared: &Shared,
    parts: &Parts,
    sub: &str,
    rg: &str,
) -> Result<Resp, ArmError> {
    let (items, next) = {
        let st = shared.state.lock();
        let s = st.store.sub(sub)?;
        let g = st.store.rg(sub, rg)?;
        let (range, next) = page_range(parts, st.tuning.page_size, g.nics.len());
        let items: Vec<Value> = g
            .nics
            .values()
            .skip(range.start)
            .take(range.len())
            .map(|n| n.render(&s.id, &g.name))
            .collect();
        (items, next)
    };
    Ok(json(StatusCode::OK, &page_body(shared, parts, items, next)))
}

pub(super) fn op_status(shared: &Shared, id: &str) -> Result<Resp, ArmError> {
    let st = shared.state.lock();
    let op = st
        .ops
        .ops
        .get(id)
        .ok_or_else(|| ArmError::operation_not_found(id))?;
    let mut resp = json(StatusCode::OK, &op.body());
    if op.running() {
        set_header(
            &mut resp,
            "retry-after",
            &st.tuning.retry_after_secs.to_string(),
        );
    }
    Ok(resp)
}

pub(super) fn op_result(shared: &Shared, parts: &Parts, id: &str) -> Result<Resp, ArmError> {
    let st = shared.state.lock();
    let op = st
        .ops
        .ops
        .get(id)
        .ok_or_else(|| ArmError::operation_not_found(id))?;
    Ok(match &op.status {
        OpStatus::InProgress => {
            let mut resp = empty(StatusCode::ACCEPTED);
            let url = async_url(
                shared,
                &op.lb.sub,
                &op.location,
                id,
                "operationResults",
                &api_version(parts),
            );
            set_header(&mut resp, "location", &url);
            set_header(
                &mut resp,
                "retry-after",
                &st.tuning.retry_after_secs.to_string(),
            );
            resp
        }
        OpStatus::Succeeded => empty(StatusCode::NO_CONTENT),
        OpStatus::Failed { error } | OpStatus::Canceled { error } => {
            json(StatusCode::OK, &j!({ "error": error }))
        }
    })
}
