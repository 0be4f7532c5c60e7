//! Resource verbs: get, list (paged), create, replace, patch, delete, with the write rules of
//! contracts/kube.md 2.7 (RV preconditions, Lease RV requirement, Node status kept apart from
//! the main resource, no-op writes that do not bump the RV).

use crate::events;
use crate::objects;
use crate::params;
use crate::patch::{self, PATCH_MEDIA_TYPES, PatchType};
use crate::resource::{Key, View};
use crate::router::{EmptyTarget, Target};
use crate::server::{Body, Req, Shared, State, json_response, raw_json_response};
use crate::status::{self, ApiError, FieldError, Resource};
use crate::store::StoreError;
use crate::table;
use bytes::Bytes;
use http::{Method, Response};
use serde_json::{Map, Value, json};
use std::sync::Arc;

type Reply = Result<Response<Body>, ApiError>;

/// Entry point for everything but watches.
pub fn resource(shared: &Arc<Shared>, t: &Target, req: &Req) -> Reply {
    if let Some(sub) = &t.subresource
        && !(sub == "status" && t.view == View::Node)
    {
        return Err(ApiError::path_not_found());
    }
    if t.subresource.is_some() && ![Method::GET, Method::PUT, Method::PATCH].contains(&req.method) {
        return Err(ApiError::method_not_supported(
            t.view.resource(),
            req.method.as_str(),
        ));
    }
    match (&req.method, &t.name) {
        (&Method::GET, None) => list(shared, t, req),
        (&Method::GET, Some(name)) => get(shared, t, name, req),
        (&Method::POST, None) => create(shared, t, req),
        (&Method::PUT, Some(name)) => replace(shared, t, name, req),
        (&Method::PATCH, Some(name)) => patch_object(shared, t, name, req),
        (&Method::DELETE, Some(name)) => delete(shared, t, name, req),
        (m, _) => Err(ApiError::method_not_supported(
            t.view.resource(),
            m.as_str(),
        )),
    }
}

fn key(t: &Target, name: &str) -> Key {
    Key::new(t.view.kind(), t.namespace.as_deref().unwrap_or(""), name)
}

fn get(shared: &Arc<Shared>, t: &Target, name: &str, req: &Req) -> Reply {
    let state = shared.state.lock();
    let Some(obj) = state.store.get(&key(t, name)) else {
        return Err(ApiError::not_found(t.view.resource(), name));
    };
    if table::wants_table(&req.accept) {
        let object = table::row_object(req.param("includeObject"), objects::to_view(t.view, obj));
        let meta = json!({"resourceVersion": state.store.current_rv().to_string()});
        return Ok(json_response(
            200,
            &table::table(t.view, vec![(obj.clone(), object)], meta),
        ));
    }
    Ok(json_response(200, &objects::to_view(t.view, obj)))
}

fn list(shared: &Arc<Shared>, t: &Target, req: &Req) -> Reply {
    let opts = params::parse(t.view, req)?;
    let mut state = shared.state.lock();
    let page = if let Some(token) = &opts.continue_token {
        let floor = state.store.oldest_rv();
        state.pager.next(token, opts.limit, floor)?
    } else {
        let current = state.store.current_rv();
        let ns = t.namespace.as_deref();
        let requested = opts
            .resource_version
            .as_deref()
            .and_then(|rv| rv.parse::<u64>().ok())
            .filter(|rv| *rv != 0);
        let (objects, rv) = match (requested, opts.rv_match.as_deref()) {
            (Some(rv), _) if rv > current => {
                return Err(ApiError::too_large_resource_version(rv, current));
            }
            (Some(rv), Some("Exact")) => {
                let items = state.store.list_at(t.view.kind(), ns, rv).map_err(|_| {
                    ApiError::expired("The resourceVersion for the provided list is too old.")
                })?;
                (items, rv)
            }
            _ => (state.store.list(t.view.kind(), ns), current),
        };
        let items: Vec<Arc<Value>> = objects
            .into_iter()
            .filter(|(_, o)| opts.matches(o))
            .map(|(_, o)| o)
            .collect();
        state.pager.first(items, rv, opts.limit, opts.filtered())
    };
    drop(state);
    let mut meta = Map::new();
    meta.insert("resourceVersion".into(), json!(page.rv.to_string()));
    if let Some(c) = page.continue_token {
        meta.insert("continue".into(), json!(c));
    }
    if let Some(r) = page.remaining {
        meta.insert("remainingItemCount".into(), json!(r));
    }
    if table::wants_table(&req.accept) {
        let include = req.param("includeObject");
        let rows = page
            .items
            .iter()
            .map(|stored| {
                let object = table::row_object(include, objects::to_view(t.view, stored));
                (stored.as_ref().clone(), object)
            })
            .collect();
        return Ok(json_response(
            200,
            &table::table(t.view, rows, Value::Object(meta)),
        ));
    }
    // Assembled item by item, so the page is encoded once without building a list Value.
    let head =
        json!({"kind": t.view.list_kind(), "apiVersion": t.view.api_version(), "metadata": meta});
    let head = serde_json::to_vec(&head).unwrap_or_default();
    let mut body = Vec::with_capacity(head.len() + page.items.len() * 4096);
    // `head` ends with `}`: reopen it to append `"items":[...]`.
    body.extend_from_slice(&head[..head.len().saturating_sub(1)]);
    body.extend_from_slice(b",\"items\":[");
    for (n, item) in page.items.iter().enumerate() {
        if n > 0 {
            body.push(b',');
        }
        body.extend_from_slice(&list_item_bytes(t.view, item));
    }
    body.extend_from_slice(b"]}");
    Ok(raw_json_response(200, body))
}

/// A list item as the view shows it (no type meta), serialized.
fn list_item_bytes(view: View, stored: &Value) -> Bytes {
    let bytes = if view == View::EventsV1 {
        serde_json::to_vec(&objects::to_list_item(view, stored))
    } else {
        serde_json::to_vec(stored)
    };
    Bytes::from(bytes.unwrap_or_default())
}

fn dry_run(req: &Req) -> Result<bool, ApiError> {
    match req.param("dryRun") {
        None | Some("") => Ok(false),
        Some("All") => Ok(true),
        Some(other) => Err(ApiError::invalid(
            "meta.k8s.io",
            "CreateOptions",
            "",
            &[FieldError::not_supported(
                "dryRun",
                &json!([other]),
                &["All"],
            )],
        )),
    }
}

fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Field validation for the view, including the create/update rules of events.
fn check_valid(t: &Target, obj: &Value, old: Option<&Value>) -> Result<(), ApiError> {
    let mut errs = objects::validate(t.view, obj);
    if t.view.kind() == crate::resource::Kind::Event {
        let ns = t.namespace.as_deref().unwrap_or("");
        let strict = t.view == View::EventsV1;
        errs.extend(match old {
            None => events::validate_create(obj, ns, strict),
            Some(old) => events::validate_update(obj, old, ns, strict),
        });
    }
    if errs.is_empty() {
        return Ok(());
    }
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    Err(ApiError::invalid(
        t.view.group(),
        t.view.kind_name(),
        name,
        &errs,
    ))
}

fn check_namespace(t: &Target, obj: &Value) -> Result<(), ApiError> {
    let body_ns = obj["metadata"]["namespace"].as_str().unwrap_or("");
    if let Some(ns) = &t.namespace
        && !body_ns.is_empty()
        && body_ns != ns
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    Ok(())
}

fn create(shared: &Arc<Shared>, t: &Target, req: &Req) -> Reply {
    if t.view.kind().namespaced() && t.namespace.is_none() {
        return Err(ApiError::method_not_supported(t.view.resource(), "create"));
    }
    let dry = dry_run(req)?;
    let mut obj = objects::decode(t.view, &req.body, &req.content_type)?;
    check_namespace(t, &obj)?;
    let meta = objects::meta_mut(&mut obj);
    let has_name = meta
        .get("name")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    if !has_name
        && let Some(prefix) = meta.get("generateName").and_then(Value::as_str)
        && !prefix.is_empty()
    {
        let suffix: String = uuid::Uuid::new_v4().simple().to_string()[..5].to_string();
        let name = format!("{prefix}{suffix}");
        meta.insert("name".into(), Value::String(name));
    }
    check_valid(t, &obj, None)?;
    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
    objects::stamp_create(
        &mut obj,
        t.namespace.as_deref(),
        uuid::Uuid::new_v4().to_string(),
        &now(),
    );
    let k = key(t, &name);
    let stored = {
        let mut state = shared.state.lock();
        if dry {
            if state.store.get(&k).is_some() {
                return Err(ApiError::already_exists(t.view.resource(), &name));
            }
            Arc::new(obj)
        } else {
            state
                .store
                .create(k, obj)
                .map_err(|_| ApiError::already_exists(t.view.resource(), &name))?
        }
    };
    shared.notify();
    Ok(json_response(201, &objects::to_view(t.view, &stored)))
}

fn rv_of(obj: &Value) -> &str {
    obj["metadata"]["resourceVersion"].as_str().unwrap_or("")
}

/// RV and uid preconditions carried by a PUT body or a patched object.
fn check_preconditions(
    res: Resource,
    name: &str,
    new: &Value,
    old: &Value,
) -> Result<(), ApiError> {
    let rv = rv_of(new);
    if !rv.is_empty() && rv != rv_of(old) {
        return Err(ApiError::conflict(res, name));
    }
    let uid = new["metadata"]["uid"].as_str().unwrap_or("");
    if !uid.is_empty() && Some(uid) != old["metadata"]["uid"].as_str() {
        return Err(ApiError::precondition_failed(
            res,
            name,
            &format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                old["metadata"]["uid"].as_str().unwrap_or("")
            ),
        ));
    }
    Ok(())
}

/// Completes an update of `old` to `new` and stores it (unless a no-op or dry run).
fn finish_update(
    state: &mut State,
    t: &Target,
    name: &str,
    mut new: Value,
    old: &Value,
    dry: bool,
) -> Result<Arc<Value>, ApiError> {
    if t.view == View::Node {
        // The main resource cannot change status, the status subresource cannot change spec.
        let keep = if t.subresource.is_some() {
            "spec"
        } else {
            "status"
        };
        match (new.as_object_mut(), old.get(keep)) {
            (Some(m), Some(v)) => {
                m.insert(keep.into(), v.clone());
            }
            (Some(m), None) => {
                m.remove(keep);
            }
            _ => {}
        }
    }
    objects::keep_system_fields(&mut new, old);
    objects::meta_mut(&mut new).insert("name".into(), Value::String(name.to_string()));
    check_valid(t, &new, Some(old))?;
    // Writes that change nothing keep the RV and emit no watch event, as in the real server.
    let mut probe = new.clone();
    crate::store::set_rv(&mut probe, rv_of(old).parse().unwrap_or(0));
    if probe == *old || dry {
        return Ok(Arc::new(if dry { probe } else { old.clone() }));
    }
    state
        .store
        .update(key(t, name), new)
        .map_err(|_| ApiError::not_found(t.view.resource(), name))
}

fn check_body_name(obj: &Value, name: &str) -> Result<(), ApiError> {
    let body_name = obj["metadata"]["name"].as_str().unwrap_or("");
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    Ok(())
}

fn replace(shared: &Arc<Shared>, t: &Target, name: &str, req: &Req) -> Reply {
    let dry = dry_run(req)?;
    let mut obj = objects::decode(t.view, &req.body, &req.content_type)?;
    check_body_name(&obj, name)?;
    check_namespace(t, &obj)?;
    objects::meta_mut(&mut obj).insert("name".into(), Value::String(name.to_string()));
    let res = t.view.resource();
    // One lock from read to write: the precondition check and the write are atomic.
    let mut state = shared.state.lock();
    let old = state.store.get(&key(t, name)).cloned();
    let Some(old) = old else {
        if t.view == View::Lease && t.subresource.is_none() {
            // Leases allow create-on-update.
            let reply = create_from(&mut state, t, obj, dry);
            drop(state);
            shared.notify();
            return reply;
        }
        return Err(ApiError::not_found(res, name));
    };
    if rv_of(&obj).is_empty() && t.view == View::Lease {
        return Err(ApiError::invalid(
            t.view.group(),
            t.view.kind_name(),
            name,
            &[FieldError::invalid(
                "metadata.resourceVersion",
                &json!(0),
                "must be specified for an update",
            )],
        ));
    }
    check_preconditions(res, name, &obj, &old)?;
    let stored = finish_update(&mut state, t, name, obj, &old, dry);
    drop(state);
    shared.notify();
    Ok(json_response(200, &objects::to_view(t.view, &*stored?)))
}

fn create_from(state: &mut State, t: &Target, mut obj: Value, dry: bool) -> Reply {
    check_valid(t, &obj, None)?;
    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
    objects::stamp_create(
        &mut obj,
        t.namespace.as_deref(),
        uuid::Uuid::new_v4().to_string(),
        &now(),
    );
    if dry {
        return Ok(json_response(201, &objects::to_view(t.view, &obj)));
    }
    let stored = state
        .store
        .create(key(t, &name), obj)
        .map_err(|_| ApiError::conflict(t.view.resource(), &name))?;
    Ok(json_response(201, &objects::to_view(t.view, &stored)))
}

fn patch_options_error(field: FieldError) -> ApiError {
    ApiError::invalid("meta.k8s.io", "PatchOptions", "", &[field])
}

fn patch_object(shared: &Arc<Shared>, t: &Target, name: &str, req: &Req) -> Reply {
    let Some(patch_type) = PatchType::from_content_type(&req.content_type) else {
        return Err(ApiError::unsupported_media_type(
            &req.content_type,
            PATCH_MEDIA_TYPES,
        ));
    };
    let dry = dry_run(req)?;
    let force = req.param("force").is_some_and(|f| f == "true");
    let manager = req.param("fieldManager").unwrap_or("");
    if patch_type == PatchType::Apply && manager.is_empty() {
        return Err(patch_options_error(FieldError::required(
            "fieldManager",
            "is required for apply patch",
        )));
    }
    if patch_type != PatchType::Apply && force {
        return Err(patch_options_error(FieldError::forbidden(
            "force",
            "may not be specified for non-apply patch",
        )));
    }
    let res = t.view.resource();
    let mut state = shared.state.lock();
    let old = state.store.get(&key(t, name)).cloned();
    let base = match &old {
        Some(o) => objects::to_view(t.view, o),
        None if patch_type == PatchType::Apply && t.subresource.is_none() => {
            // Apply creates a missing object.
            let mut meta = json!({"name": name});
            if let Some(ns) = &t.namespace {
                meta["namespace"] = json!(ns);
            }
            json!({"kind": t.view.kind_name(), "apiVersion": t.view.api_version(), "metadata": meta})
        }
        None => return Err(ApiError::not_found(res, name)),
    };
    let patched = patch::apply(&base, &req.body, patch_type)?;
    let patched_bytes = serde_json::to_vec(&patched).unwrap_or_default();
    let new = objects::decode(t.view, &patched_bytes, "application/json")?;
    check_body_name(&new, name)?;
    let reply = match old {
        Some(old) => {
            check_preconditions(res, name, &new, &old)?;
            finish_update(&mut state, t, name, new, &old, dry)
                .map(|stored| json_response(200, &objects::to_view(t.view, &stored)))
        }
        None => create_from(&mut state, t, new, dry),
    };
    drop(state);
    shared.notify();
    reply
}

fn delete(shared: &Arc<Shared>, t: &Target, name: &str, req: &Req) -> Reply {
    let res = t.view.resource();
    let options: Value = if req.body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&req.body)
            .map_err(|e| ApiError::bad_request(format!("error decoding DeleteOptions: {e}")))?
    };
    let dry = dry_run(req)? || options["dryRun"].as_array().is_some_and(|d| !d.is_empty());
    let k = key(t, name);
    let mut state = shared.state.lock();
    let Some(current) = state.store.get(&k) else {
        return Err(ApiError::not_found(res, name));
    };
    let uid = current["metadata"]["uid"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let pre = &options["preconditions"];
    if let Some(want) = pre["uid"].as_str()
        && want != uid
    {
        return Err(ApiError::precondition_failed(
            res,
            name,
            &format!("Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"),
        ));
    }
    if let Some(want) = pre["resourceVersion"].as_str()
        && want != rv_of(current)
    {
        return Err(ApiError::precondition_failed(
            res,
            name,
            &format!(
                "Precondition failed: ResourceVersion in precondition: {want}, ResourceVersion in object meta: {}",
                rv_of(current)
            ),
        ));
    }
    if !dry {
        match state.store.delete(&k) {
            Ok(_) | Err(StoreError::NotFound) => {}
            Err(_) => return Err(ApiError::not_found(res, name)),
        }
    }
    drop(state);
    shared.notify();
    Ok(json_response(200, &status::delete_success(res, name, &uid)))
}

/// Read-only, always-empty resources (pods, namespaces) that kubectl describers read.
pub fn empty(t: &EmptyTarget, req: &Req) -> Reply {
    let res = Resource {
        group: t.group,
        plural: t.plural,
    };
    if req.method != Method::GET {
        return Err(ApiError::method_not_supported(res, req.method.as_str()));
    }
    let namespace = |name: &str| {
        json!({"metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z"},
               "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})
    };
    match (&t.name, t.plural) {
        (Some(ns), "namespaces") => {
            let mut n = namespace(ns);
            n["kind"] = json!("Namespace");
            n["apiVersion"] = json!("v1");
            Ok(json_response(200, &n))
        }
        (Some(name), _) => Err(ApiError::not_found(res, name)),
        (None, plural) => {
            // Namespaces are implicit: every name exists; the usual four are listed.
            let items: Vec<Value> = if plural == "namespaces" {
                ["default", "kube-node-lease", "kube-public", "kube-system"]
                    .into_iter()
                    .map(namespace)
                    .collect()
            } else {
                Vec::new()
            };
            Ok(json_response(
                200,
                &json!({"kind": t.list_kind, "apiVersion": "v1",
                        "metadata": {"resourceVersion": "1"}, "items": items}),
            ))
        }
    }
}
