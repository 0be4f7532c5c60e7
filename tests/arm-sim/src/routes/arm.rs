//! ARM front door and dispatch. Order of checks follows ARM's front door: authentication, injected faults,
//! api-version, path, throttling, then the resource provider (etag, lock, validation).

use super::path::{ArmPath, PathError};
use super::reads::{get_lb, get_pool, list_nics, list_pools, op_result, op_status};
use super::writes::{delete_pool, put_lb, put_pool};
use super::{Outcome, Resp, arm_error, query_param};
use crate::Shared;
use crate::errors::ArmError;
use crate::faults::{Injected, Kind};
use crate::throttle::{Class, Decision};
use http::{Method, request::Parts};
use serde_json::Value;
use std::sync::Arc;

/// The api-version used when a request carries none (only for URLs the simulator builds).
pub(super) const API_VERSION: &str = "2024-03-01";

/// The request's api-version (validated by the front door), echoed in the URLs ARM builds for
/// it (`Azure-AsyncOperation`, `Location`, `nextLink`), as NRP does.
pub(super) fn api_version(parts: &Parts) -> String {
    query_param(&parts.uri, "api-version").unwrap_or_else(|| API_VERSION.into())
}

fn latency_kind(method: &Method, path: &Result<ArmPath, PathError>) -> Kind {
    match (method, path) {
        (&Method::PUT, _) | (&Method::POST, _) | (&Method::PATCH, _) => Kind::Put,
        (&Method::DELETE, _) => Kind::Delete,
        (_, Ok(ArmPath::PoolList { .. } | ArmPath::NicList { .. })) => Kind::List,
        (_, Ok(ArmPath::OpStatus { .. } | ArmPath::OpResult { .. })) => Kind::Poll,
        _ => Kind::Get,
    }
}

/// Handles one ARM request and answers once its configured latency has passed since it
/// arrived. The latency is the whole time to answer, as measured against Azure: the
/// simulator's own handling (parsing and rendering a 1 MB document takes tens of ms on a busy
/// machine) runs within it instead of being added on top. A write's operation is timed from
/// the answer, as before.
pub(crate) async fn handle(shared: &Arc<Shared>, parts: &Parts, body: &[u8]) -> Outcome {
    let route = super::path::parse(parts.uri.path());
    let kind = latency_kind(&parts.method, &route);
    let latency = shared.state.lock().tuning.latency_ms.of(kind);
    let answer_at = tokio::time::Instant::now() + std::time::Duration::from_millis(latency);
    let out = ANSWER_AT
        .scope(answer_at, handle_now(shared, parts, body, route))
        .await;
    tokio::time::sleep_until(answer_at).await;
    out
}

tokio::task_local! {
    /// When the request being handled will be answered (operations start their clock there).
    static ANSWER_AT: tokio::time::Instant;
}

/// When the request being handled will be answered; now outside a request.
pub(super) fn answer_at() -> tokio::time::Instant {
    ANSWER_AT
        .try_with(|t| *t)
        .unwrap_or_else(|_| tokio::time::Instant::now())
}

async fn handle_now(
    shared: &Arc<Shared>,
    parts: &Parts,
    body: &[u8],
    route: Result<ArmPath, PathError>,
) -> Outcome {
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
            let mut resp = arm_error(&ArmError::throttled(
                crate::throttle::message_word(class),
                &sub_for_msg,
                &principal,
                1,
            ));
            // A storm looks like empty buckets.
            rate_headers(&mut resp, class, 0, 0);
            out.resp = Some(resp);
            return out;
        }
        Injected::None => {}
    }

    let api_version = query_param(&parts.uri, "api-version");
    let result = match (&route, api_version) {
        (_, None) => Err(ArmError::missing_api_version()),
        (Ok(r @ ArmPath::Permissions { .. }), Some(v)) => {
            let served = crate::rbac::PERMISSIONS_API_VERSIONS;
            if served.iter().any(|a| a.eq_ignore_ascii_case(&v)) {
                Ok(r.clone())
            } else {
                let supported: Vec<String> = served.iter().map(|s| (*s).to_owned()).collect();
                Err(ArmError::no_provider(
                    &location_of(shared, r.sub()),
                    &v,
                    "permissions",
                    &supported,
                ))
            }
        }
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
                ArmPath::Permissions { .. } => "permissions",
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

    if let Err(e) = authorize(shared, &route, &parts.method, parts.uri.path(), &principal) {
        out.resp = Some(arm_error(&e));
        return out;
    }

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

    let answer = match linked_access(shared, parts, body, &route, &principal)
        .err()
        .or_else(|| governance(shared, parts, &route))
        .or_else(|| write_fault(shared, parts, &route))
    {
        Some(e) => Err(e),
        None => dispatch(shared, parts, body, &route, &principal),
    };
    let mut resp = match answer {
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
    out.resp = Some(resp);
    out
}

/// Azure Policy and management locks on a write (the `policyDeny` and `readOnlyLocks`
/// faults): ARM refuses it after the RBAC and linked access checks, before the resource
/// provider sees it (no etag change, no operation).
fn governance(shared: &Shared, parts: &Parts, route: &ArmPath) -> Option<ArmError> {
    if !matches!(parts.method, Method::PUT | Method::DELETE) {
        return None;
    }
    let (ArmPath::Lb { sub, rg, lb } | ArmPath::Pool { sub, rg, lb, .. }) = route else {
        return None;
    };
    let st = shared.state.lock();
    if let Some(assignment) = &st.faults.policy_deny {
        return Some(ArmError::policy_disallowed(sub, lb, assignment));
    }
    if st.faults.locked(rg) {
        let here = parts.uri.path().trim_end_matches('/');
        return Some(ArmError::scope_locked(
            here,
            &format!("/subscriptions/{sub}/resourceGroups/{rg}"),
        ));
    }
    None
}

/// Injected resource-provider refusals of a write (`Faults::lock_conflicts`,
/// `Faults::not_provisioned`), and the other writer of `Faults::stale_writes`, whose write
/// changes the LB's etag just before this one is checked against it.
fn write_fault(shared: &Shared, parts: &Parts, route: &ArmPath) -> Option<ArmError> {
    if !matches!(parts.method, Method::PUT | Method::DELETE) {
        return None;
    }
    let (ArmPath::Lb { sub, rg, lb } | ArmPath::Pool { sub, rg, lb, .. }) = route else {
        return None;
    };
    let mut st = shared.state.lock();
    let st = &mut *st;
    let lb_id = crate::model::Scope { sub, rg, lb }.lb_id();
    if let Some(secs) = st.faults.take_not_provisioned(lb) {
        let nic = format!(
            "/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Network/networkInterfaces/{lb}-nic-0/ipConfigurations/ipconfig1"
        );
        return Some(ArmError::referenced_not_provisioned(&nic, &lb_id, secs));
    }
    if st.faults.take_lock_conflict() {
        let op = uuid::Uuid::new_v4().to_string();
        let resource = uuid::Uuid::new_v4().to_string();
        return Some(ArmError::another_operation(
            "PutNetworkInterfaceOperation",
            &op,
            &resource,
            st.tuning.lock_retry_after_secs,
        ));
    }
    if if_match(parts).is_some()
        && st.faults.take_stale_write()
        && let Ok(l) = st.store.lb_mut(sub, rg, lb)
    {
        l.etag = crate::model::new_etag();
    }
    None
}

/// The RBAC action ARM checks for a call (`Microsoft.Network` operations list) and the scope
/// it checks it at.
///
/// Operation polls (`.../providers/Microsoft.Network/locations/{region}/operations/{id}`): the
/// status URL "isn't scoped to the resource", so tracking needs permission "at the resource
/// group level" [V: azure-production.md 6, ASYNC-PERM]. Which action ARM checks is unknown
/// (contract 7.3); the simulator requires, pessimistically, `Microsoft.Network/locations/
/// operations/read` (`.../operationResults/read` for `Location` polls) at the resource group of
/// the operation's load balancer, so a grant on the LB resource alone cannot poll.
fn rbac_action(
    shared: &Shared,
    route: &ArmPath,
    method: &Method,
    path: &str,
) -> Option<(&'static str, String)> {
    let read = matches!(*method, Method::GET | Method::HEAD);
    let here = path.trim_end_matches('/').to_owned();
    let op_scope = |sub: &str, id: &str| {
        let st = shared.state.lock();
        st.ops
            .ops
            .get(id)
            .map(|o| format!("/subscriptions/{}/resourceGroups/{}", o.lb.sub, o.lb.rg))
            .unwrap_or_else(|| format!("/subscriptions/{sub}"))
    };
    Some(match (route, read, method) {
        (ArmPath::Lb { .. }, true, _) => ("Microsoft.Network/loadBalancers/read", here),
        (ArmPath::Lb { .. }, false, _) => ("Microsoft.Network/loadBalancers/write", here),
        (ArmPath::PoolList { .. } | ArmPath::Pool { .. }, true, _) => (
            "Microsoft.Network/loadBalancers/backendAddressPools/read",
            here,
        ),
        (ArmPath::Pool { .. }, false, &Method::DELETE) => (
            "Microsoft.Network/loadBalancers/backendAddressPools/delete",
            here,
        ),
        (ArmPath::Pool { .. }, false, _) => (
            "Microsoft.Network/loadBalancers/backendAddressPools/write",
            here,
        ),
        (ArmPath::NicList { .. }, true, _) => ("Microsoft.Network/networkInterfaces/read", here),
        (ArmPath::OpStatus { sub, id, .. }, true, _) => (
            "Microsoft.Network/locations/operations/read",
            op_scope(sub, id),
        ),
        (ArmPath::OpResult { sub, id, .. }, true, _) => (
            "Microsoft.Network/locations/operationResults/read",
            op_scope(sub, id),
        ),
        (ArmPath::Permissions { scope, .. }, true, _) => (
            crate::rbac::PERMISSIONS_READ,
            scope.trim_end_matches('/').to_owned(),
        ),
        _ => return None,
    })
}

/// ARM's authorization of the call itself (azure-production.md 1.8, 2.7): the `denyActions`
/// fault, then the role assignments (403 `AuthorizationFailed`), then deny assignments (403
/// `DenyAssignmentAuthorizationFailed`, whose message says the client "has permission").
fn authorize(
    shared: &Shared,
    route: &ArmPath,
    method: &Method,
    path: &str,
    principal: &str,
) -> Result<(), ArmError> {
    let Some((action, scope)) = rbac_action(shared, route, method, path) else {
        return Ok(());
    };
    let oid = shared.object_id_of(principal);
    let st = shared.state.lock();
    if st.faults.denies(action) {
        return Err(ArmError::authorization_failed_for(
            principal, &oid, action, &scope,
        ));
    }
    match st.rbac.check(&[principal, &oid], action, &scope) {
        Ok(()) => Ok(()),
        Err(crate::rbac::Refusal::NotGranted) => Err(ArmError::authorization_failed_for(
            principal, &oid, action, &scope,
        )),
        Err(crate::rbac::Refusal::Denied(d)) => Err(ArmError::deny_assignment_failed(
            principal, &oid, action, &scope, &d,
        )),
    }
}

/// ARM's linked access check on a load-balancer or backend-pool PUT (azure-production.md 1):
/// every resource the request body references needs its join action at that resource
/// (re-checked whether or not the reference changed, 1.4), else 403
/// `LinkedAuthorizationFailed` naming every missing pair, before anything changes (no etag
/// change, no operation, 1.1). A pool PUT is checked on the pool's references and,
/// pessimistically unless `poolPutChecksFrontends` is off, on the LB's frontends and NAT rules
/// too (1.5, 7.1). A body that does not parse is left to the handler's 400.
fn linked_access(
    shared: &Shared,
    parts: &Parts,
    body: &[u8],
    route: &ArmPath,
    principal: &str,
) -> Result<(), ArmError> {
    if parts.method != Method::PUT {
        return Ok(());
    }
    {
        // Nothing can be refused: skip parsing the body (a whole LB at 5,000 nodes is ~1 MB).
        let st = shared.state.lock();
        if !st.rbac.enforcing() && st.rbac.deny_assignments.is_empty() && !st.faults.denies_any() {
            return Ok(());
        }
    }
    let Ok(doc) = serde_json::from_slice::<Value>(body) else {
        return Ok(());
    };
    let here = parts.uri.path().trim_end_matches('/').to_owned();
    let st = shared.state.lock();
    let (action, refs) = match route {
        ArmPath::Lb { .. } => (
            "Microsoft.Network/loadBalancers/write",
            crate::rbac::lb_body_refs(&doc, &here),
        ),
        ArmPath::Pool { sub, rg, lb, .. } => {
            let mut refs = Vec::new();
            crate::rbac::pool_refs(&doc, &mut refs);
            if st.rbac.pool_put_checks_frontends
                && let Ok(l) = st.store.lb(sub, rg, lb)
            {
                let lb_id = crate::model::Scope { sub, rg, lb }.lb_id();
                crate::rbac::frontend_refs(&Value::Object(l.props.clone()), &lb_id, &mut refs);
            }
            (
                "Microsoft.Network/loadBalancers/backendAddressPools/write",
                refs,
            )
        }
        _ => return Ok(()),
    };
    let oid = shared.object_id_of(principal);
    let ids = [principal, oid.as_str()];
    let missing: Vec<(String, String)> = refs
        .into_iter()
        .filter(|l| st.faults.denies(l.action) || st.rbac.check(&ids, l.action, &l.scope).is_err())
        .map(|l| (l.action.to_owned(), l.scope))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(ArmError::linked_authorization_failed(
        principal, &oid, action, &here, &missing,
    ))
}

/// The permissions API (azure-production.md 2.3): `{"value":[{actions, notActions,
/// dataActions, notDataActions}, ...]}` for the caller at the scope, one entry per role
/// assignment at the scope or above; no `nextLink` (one page). Deny assignments are not
/// reflected (2.7 [I]).
fn permissions(shared: &Shared, principal: &str, scope: &str) -> Result<Resp, ArmError> {
    let oid = shared.object_id_of(principal);
    let value = shared
        .state
        .lock()
        .rbac
        .permissions(&[principal, &oid], scope);
    Ok(super::json(
        http::StatusCode::OK,
        &serde_json::json!({ "value": value }),
    ))
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

pub(super) fn parse_json(body: &[u8]) -> Result<Value, ArmError> {
    if body.is_empty() {
        return Err(ArmError::invalid_content("the request body is empty"));
    }
    serde_json::from_slice(body).map_err(|e| ArmError::invalid_content(&e.to_string()))
}

pub(super) fn if_match(parts: &Parts) -> Option<String> {
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
    principal: &str,
) -> Result<Resp, ArmError> {
    match (route, &parts.method) {
        (ArmPath::Permissions { scope, .. }, &Method::GET) => permissions(shared, principal, scope),
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
        (ArmPath::OpResult { id, .. }, &Method::GET) => op_result(shared, parts, id),
        (_, m) => Err(ArmError::method_not_allowed(m.as_str())),
    }
}
