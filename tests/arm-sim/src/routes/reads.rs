//! ARM read handlers: GET pool / LB, paged LISTs of pools and NICs, async-operation and
//! operationResults URLs. Rendering is in [`crate::model`].

use super::{Resp, empty, json, query_param, set_header};
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
        json(StatusCode::OK, &l.render_pool(p, scope)),
        &l.etag,
    ))
}

pub(super) fn get_lb(shared: &Shared, sub: &str, rg: &str, lb: &str) -> Result<Resp, ArmError> {
    let st = shared.state.lock();
    let key = st.store.lb_key(sub, rg, lb)?;
    let l = st.store.lb(sub, rg, lb)?;
    Ok(with_etag(
        json(StatusCode::OK, &l.render(&key.sub, &key.rg)),
        &l.etag,
    ))
}

/// A page of `items` starting at `$skipToken`, with `nextLink` when more remain.
fn page(shared: &Shared, parts: &Parts, items: Vec<Value>) -> Value {
    let size = shared.state.lock().tuning.page_size.max(1);
    let start = query_param(&parts.uri, "$skipToken")
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(0);
    let end = (start + size).min(items.len());
    let value: Vec<Value> = items
        .get(start.min(items.len())..end)
        .unwrap_or_default()
        .to_vec();
    let mut body = j!({ "value": value });
    if end < items.len() {
        let api = api_version(parts);
        body["nextLink"] = j!(format!(
            "{}{}?api-version={api}&$skipToken={end}",
            shared.base_url,
            parts.uri.path()
        ));
    }
    body
}

pub(super) fn list_pools(
    shared: &Shared,
    parts: &Parts,
    sub: &str,
    rg: &str,
    lb: &str,
) -> Result<Resp, ArmError> {
    let items = {
        let st = shared.state.lock();
        let key = st.store.lb_key(sub, rg, lb)?;
        let l = st.store.lb(sub, rg, lb)?;
        let scope = Scope {
            sub: &key.sub,
            rg: &key.rg,
            lb: &key.lb,
        };
        l.pools
            .iter()
            .map(|p| l.render_pool(p, scope))
            .collect::<Vec<_>>()
    };
    Ok(json(StatusCode::OK, &page(shared, parts, items)))
}

pub(super) fn list_nics(
    shared: &Shared,
    parts: &Parts,
    sub: &str,
    rg: &str,
) -> Result<Resp, ArmError> {
    let items = {
        let st = shared.state.lock();
        let s = st.store.sub(sub)?;
        let g = st.store.rg(sub, rg)?;
        g.nics
            .values()
            .map(|n| n.render(&s.id, &g.name))
            .collect::<Vec<_>>()
    };
    Ok(json(StatusCode::OK, &page(shared, parts, items)))
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
