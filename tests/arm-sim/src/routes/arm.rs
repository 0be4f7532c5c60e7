//! ARM routes. Order of checks follows ARM's front door: authentication, injected faults,
//! api-version, path, throttling, then the resource provider (etag, lock, validation).

use super::path::{ArmPath, PathError};
use super::{Outcome, Resp, arm_error, delay, empty, json, query_param, set_header};
use crate::Shared;
use crate::body::{lb_from_body, pool_from_body};
use crate::errors::ArmError;
use crate::faults::{Injected, Kind};
use crate::model::Scope;
use crate::store::{LockCheck, OpKind, OpSpec, OpStatus, Operations};
use crate::throttle::{Class, Decision};
use http::{Method, StatusCode, request::Parts};
use serde_json::{Value, json as j};
use std::sync::Arc;

const API_VERSION: &str = "2024-03-01";

fn latency_kind(method: &Method, path: &Result<ArmPath, PathError>) -> Kind {
    match (method, path) {
        (&Method::PUT, _) | (&Method::POST, _) | (&Method::PATCH, _) => Kind::Put,
        (&Method::DELETE, _) => Kind::Delete,
        (_, Ok(ArmPath::PoolList { .. } | ArmPath::NicList { .. })) => Kind::List,
        (_, Ok(ArmPath::OpStatus { .. } | ArmPath::OpResult { .. })) => Kind::Poll,
        _ => Kind::Get,
    }
}

pub(crate) async fn handle(shared: &Arc<Shared>, parts: &Parts, body: &[u8]) -> Outcome {
    let route = super::path::parse(parts.uri.path());
    let kind = latency_kind(&parts.method, &route);
    let latency = shared.state.lock().tuning.latency_ms.of(kind);
    delay(latency).await;

    let now = jiff::Timestamp::now();
    let mut out = Outcome {
        resp: None,
        principal: None,
        throttled: false,
        lock_hit: false,
    };
    let auth = parts
        .headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let principal = match shared.state.lock().tokens.verify(auth, now) {
        Ok(p) => p,
        Err(e) => {
            out.resp = Some(arm_error(&e));
            return out;
        }
    };
    out.principal = Some(principal.clone());

    let injected = shared.state.lock().faults.next(tokio::time::Instant::now());
    let class = Class::from_method(&parts.method);
    let sub_for_msg = route
        .as_ref()
        .map(|r| r.sub().to_owned())
        .unwrap_or_default();
    match injected {
        Injected::Drop => return out,
        Injected::ServerError => {
            out.resp = Some(arm_error(&ArmError::internal()));
            return out;
        }
        Injected::Throttle => {
            out.throttled = true;
            out.resp = Some(arm_error(&ArmError::throttled(
                crate::throttle::message_word(class),
                &sub_for_msg,
                &principal,
                1,
            )));
            return out;
        }
        Injected::None => {}
    }

    let api_version = query_param(&parts.uri, "api-version");
    let result = match (&route, api_version) {
        (_, None) => Err(ArmError::missing_api_version()),
        (Err(PathError::NotFound), _) => Err(ArmError::path_not_found(parts.uri.path())),
        (Err(PathError::UnknownType { rtype, .. }), Some(v)) => Err(ArmError::no_provider(
            &location_of(shared, &sub_for_msg),
            &v,
            rtype,
            &shared.api_versions,
        )),
        (Ok(r), Some(v))
            if !shared
                .api_versions
                .iter()
                .any(|a| a.eq_ignore_ascii_case(&v)) =>
        {
            let rtype = match r {
                ArmPath::Lb { .. } => "loadBalancers",
                ArmPath::PoolList { .. } | ArmPath::Pool { .. } => {
                    "loadBalancers/backendAddressPools"
                }
                ArmPath::NicList { .. } => "networkInterfaces",
                ArmPath::OpStatus { .. } | ArmPath::OpResult { .. } => "locations/operations",
            };
            Err(ArmError::no_provider(
                &location_of(shared, r.sub()),
                &v,
                rtype,
                &shared.api_versions,
            ))
        }
        (Ok(r), Some(_)) => Ok(r.clone()),
    };
    let route = match result {
        Ok(r) => r,
        Err(e) => {
            out.resp = Some(arm_error(&e));
            return out;
        }
    };

    let decision =
        shared
            .state
            .lock()
            .throttle
            .take(route.sub(), &principal, class, shared.now_secs());
    let (remaining, global) = match decision {
        Decision::Allowed {
            remaining,
            global_remaining,
        } => (remaining, global_remaining),
        Decision::Throttled {
            retry_after,
            remaining,
            global_remaining,
        } => {
            out.throttled = true;
            let mut resp = arm_error(&ArmError::throttled(
                crate::throttle::message_word(class),
                route.sub(),
                &principal,
                retry_after,
            ));
            rate_headers(&mut resp, class, remaining, global_remaining);
            out.resp = Some(resp);
            return out;
        }
    };

    let mut resp = match dispatch(shared, parts, body, &route) {
        Ok(r) => r,
        Err(e) => {
            out.lock_hit = e
                .details
                .as_ref()
                .and_then(|d| d.first())
                .and_then(|d| d.get("code"))
                .and_then(Value::as_str)
                == Some("RetryableErrorDueToAnotherOperation");
            arm_error(&e)
        }
    };
    rate_headers(&mut resp, class, remaining, global);
    let rid = uuid::Uuid::new_v4().to_string();
    set_header(&mut resp, "x-ms-request-id", &rid);
    set_header(&mut resp, "x-ms-correlation-request-id", &rid);
    out.resp = Some(resp);
    out
}

fn location_of(shared: &Shared, sub: &str) -> String {
    let st = shared.state.lock();
    st.store
        .sub(sub)
        .ok()
        .and_then(|s| s.rgs.values().next().map(|g| g.location.clone()))
        .unwrap_or_else(|| "eastus".into())
}

fn rate_headers(resp: &mut Resp, class: Class, remaining: u64, global: u64) {
    let c = class.as_str();
    for (name, value) in [
        (
            format!("x-ms-ratelimit-remaining-subscription-{c}"),
            remaining,
        ),
        (
            format!("x-ms-ratelimit-remaining-subscription-global-{c}"),
            global,
        ),
    ] {
        if let (Ok(name), Ok(v)) = (
            http::HeaderName::from_bytes(name.as_bytes()),
            http::HeaderValue::from_str(&value.to_string()),
        ) {
            resp.headers_mut().insert(name, v);
        }
    }
}

fn parse_json(body: &[u8]) -> Result<Value, ArmError> {
    if body.is_empty() {
        return Err(ArmError::invalid_content("the request body is empty"));
    }
    serde_json::from_slice(body).map_err(|e| ArmError::invalid_content(&e.to_string()))
}

fn if_match(parts: &Parts) -> Option<String> {
    parts
        .headers
        .get(http::header::IF_MATCH)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

fn dispatch(
    shared: &Arc<Shared>,
    parts: &Parts,
    body: &[u8],
    route: &ArmPath,
) -> Result<Resp, ArmError> {
    match (route, &parts.method) {
        (ArmPath::Pool { sub, rg, lb, pool }, &Method::GET) => get_pool(shared, sub, rg, lb, pool),
        (ArmPath::Pool { sub, rg, lb, pool }, &Method::PUT) => {
            put_pool(shared, parts, body, sub, rg, lb, pool)
        }
        (ArmPath::Pool { sub, rg, lb, pool }, &Method::DELETE) => {
            delete_pool(shared, parts, sub, rg, lb, pool)
        }
        (ArmPath::PoolList { sub, rg, lb }, &Method::GET) => list_pools(shared, parts, sub, rg, lb),
        (ArmPath::Lb { sub, rg, lb }, &Method::GET) => get_lb(shared, sub, rg, lb),
        (ArmPath::Lb { sub, rg, lb }, &Method::PUT) => put_lb(shared, parts, body, sub, rg, lb),
        (ArmPath::NicList { sub, rg }, &Method::GET) => list_nics(shared, parts, sub, rg),
        (ArmPath::OpStatus { id, .. }, &Method::GET) => op_status(shared, id),
        (ArmPath::OpResult { id, .. }, &Method::GET) => op_result(shared, id),
        (_, m) => Err(ArmError::method_not_allowed(m.as_str())),
    }
}

fn with_etag(mut resp: Resp, etag: &str) -> Resp {
    set_header(&mut resp, "etag", etag);
    resp
}

fn get_pool(shared: &Shared, sub: &str, rg: &str, lb: &str, pool: &str) -> Result<Resp, ArmError> {
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
        json(StatusCode::OK, &p.render(scope, &l.etag)),
        &l.etag,
    ))
}

fn get_lb(shared: &Shared, sub: &str, rg: &str, lb: &str) -> Result<Resp, ArmError> {
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
        let api = query_param(&parts.uri, "api-version").unwrap_or_else(|| API_VERSION.into());
        body["nextLink"] = j!(format!(
            "{}{}?api-version={api}&$skipToken={end}",
            shared.base_url,
            parts.uri.path()
        ));
    }
    body
}

fn list_pools(
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
            .map(|p| p.render(scope, &l.etag))
            .collect::<Vec<_>>()
    };
    Ok(json(StatusCode::OK, &page(shared, parts, items)))
}

fn list_nics(shared: &Shared, parts: &Parts, sub: &str, rg: &str) -> Result<Resp, ArmError> {
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

fn async_url(shared: &Shared, sub: &str, location: &str, op_id: &str, what: &str) -> String {
    format!(
        "{}/subscriptions/{sub}/providers/Microsoft.Network/locations/{location}/{what}/{op_id}?api-version={API_VERSION}",
        shared.base_url
    )
}

/// Adds the LRO headers of a write response.
fn lro_headers(
    shared: &Shared,
    resp: &mut Resp,
    sub: &str,
    location: &str,
    op_id: &str,
    retry: u64,
) {
    set_header(
        resp,
        "azure-asyncoperation",
        &async_url(shared, sub, location, op_id, "operations"),
    );
    set_header(resp, "azure-asyncnotification", "Enabled");
    set_header(resp, "retry-after", &retry.to_string());
}

/// Schedules completion of an operation after the completion delay.
fn schedule(shared: &Arc<Shared>, op_id: String, delay_ms: u64) {
    let shared = shared.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(delay_ms)).await;
        let mut st = shared.state.lock();
        let st = &mut *st;
        st.ops
            .complete(&op_id, &mut st.store, jiff::Timestamp::now());
    });
}

fn put_pool(
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
        let mut resp = json(StatusCode::OK, &new_pool.render(scope, &l.etag));
        lro_headers(shared, &mut resp, &key.sub, &location, &op_id, retry);
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
        None => l.pools.push(new_pool),
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
        .map(|p| p.render(scope, &l.etag))
        .unwrap_or(Value::Null);
    let etag = l.etag.clone();
    let delay_ms = st.tuning.completion_delay_ms;
    drop(guard);
    schedule(shared, op_id.clone(), delay_ms);
    let mut resp = json(status, &p);
    lro_headers(shared, &mut resp, &key.sub, &location, &op_id, retry);
    Ok(with_etag(resp, &etag))
}

fn delete_pool(
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
    l.pools.retain(|p| !p.name.eq_ignore_ascii_case(pool));
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
    let delay_ms = st.tuning.completion_delay_ms;
    drop(guard);
    schedule(shared, op_id.clone(), delay_ms);
    let mut resp = empty(StatusCode::ACCEPTED);
    lro_headers(shared, &mut resp, &key.sub, &location, &op_id, retry);
    set_header(
        &mut resp,
        "location",
        &async_url(shared, &key.sub, &location, &op_id, "operationResults"),
    );
    Ok(resp)
}

fn put_lb(
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
    let op_id = uuid::Uuid::new_v4().to_string();
    let supersede = st.faults.supersede;
    let lock_retry = st.tuning.lock_retry_after_secs;
    let g = st.store.rg_mut(sub, rg)?;
    if let Some(stored) = g.lbs.get_mut(&lb_name.to_ascii_lowercase()) {
        st.ops
            .check_lock(stored, &OpKind::PutLb, &op_id, supersede, lock_retry, now)?;
        new_lb.lock = None;
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
    let rendered = slot.render(&sub_id, &rg_name);
    let etag = slot.etag.clone();
    let retry = st.tuning.retry_after_secs;
    let delay_ms = st.tuning.completion_delay_ms;
    drop(guard);
    schedule(shared, op_id.clone(), delay_ms);
    let mut resp = json(status, &rendered);
    lro_headers(shared, &mut resp, &sub_id, &location, &op_id, retry);
    Ok(with_etag(resp, &etag))
}

fn op_status(shared: &Shared, id: &str) -> Result<Resp, ArmError> {
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

fn op_result(shared: &Shared, id: &str) -> Result<Resp, ArmError> {
    let st = shared.state.lock();
    let op = st
        .ops
        .ops
        .get(id)
        .ok_or_else(|| ArmError::operation_not_found(id))?;
    Ok(match &op.status {
        OpStatus::InProgress => {
            let mut resp = empty(StatusCode::ACCEPTED);
            let url = async_url(shared, &op.lb.sub, &op.location, id, "operationResults");
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
