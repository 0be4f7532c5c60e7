//! Object handling shared by every write: decoding a body for a view, the type checks a
//! real server's decoder would fail on (400), the validation it would reject (422), and the
//! system fields the server owns (uid, creationTimestamp, resourceVersion).

use crate::events;
use crate::resource::View;
use crate::status::{ApiError, FieldError};
use serde_json::{Map, Value};

/// Media types accepted for POST and PUT bodies.
pub const BODY_MEDIA_TYPES: &[&str] = &["application/json", "application/yaml"];

/// Decodes a POST/PUT body: JSON (or YAML) object whose `kind`/`apiVersion`, when present,
/// are the view's. Returns it in the stored shape (events converted to core).
pub fn decode(view: View, body: &[u8], content_type: &str) -> Result<Value, ApiError> {
    let media = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let value: Value = match media.as_str() {
        "application/json" | "" => serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
        })?,
        "application/yaml" => serde_yaml::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("couldn't get version/kind; yaml parse error: {e}"))
        })?,
        other => return Err(ApiError::unsupported_media_type(other, BODY_MEDIA_TYPES)),
    };
    if !value.is_object() {
        return Err(ApiError::bad_request(format!(
            "couldn't get version/kind; json parse error: expected an object, got {}",
            json_type(&value)
        )));
    }
    let api_version = value
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or("");
    if !api_version.is_empty() && api_version != view.api_version() {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({})",
            view.api_version()
        )));
    }
    if !kind.is_empty() && kind != view.kind_name() {
        return Err(ApiError::bad_request(format!(
            "{kind} in version {:?} cannot be handled as a {}: the kind does not match",
            view.api_version(),
            view.kind_name()
        )));
    }
    let stored = to_stored(view, &value);
    check_shape(view, &stored)?;
    Ok(stored)
}

/// A view's object in the stored shape, without type meta.
pub fn to_stored(view: View, value: &Value) -> Value {
    let mut v = if view == View::EventsV1 {
        events::from_v1(value)
    } else {
        value.clone()
    };
    if let Some(m) = v.as_object_mut() {
        m.remove("kind");
        m.remove("apiVersion");
    }
    v
}

/// A stored object as the view shows it, with `kind` and `apiVersion`.
pub fn to_view(view: View, stored: &Value) -> Value {
    let mut v = if view == View::EventsV1 {
        events::to_v1(stored)
    } else {
        stored.clone()
    };
    if let Some(m) = v.as_object_mut() {
        m.insert("kind".into(), Value::String(view.kind_name().into()));
        m.insert(
            "apiVersion".into(),
            Value::String(view.api_version().into()),
        );
    }
    v
}

/// A stored object as a list item: the view's shape without type meta.
pub fn to_list_item(view: View, stored: &Value) -> Value {
    if view == View::EventsV1 {
        events::to_v1(stored)
    } else {
        stored.clone()
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Expected JSON types of the fields clients of this simulator use; a mismatch is the
/// decoder error a real server answers with 400.
#[derive(Clone, Copy)]
enum Ty {
    Str,
    Int,
    Bool,
    Obj,
    StrMap,
    List,
}

fn check(errs: &mut Vec<String>, v: &Value, path: &str, ty: Ty) {
    if v.is_null() {
        return;
    }
    let ok = match ty {
        Ty::Str => v.is_string(),
        Ty::Int => v.is_i64() || v.is_u64(),
        Ty::Bool => v.is_boolean(),
        Ty::Obj => v.is_object(),
        Ty::List => v.is_array(),
        Ty::StrMap => v
            .as_object()
            .is_some_and(|m| m.values().all(|x| x.is_string() || x.is_null())),
    };
    if !ok {
        errs.push(format!(
            "json: cannot unmarshal {} into Go struct field {path}",
            json_type(v)
        ));
    }
}

fn check_shape(view: View, v: &Value) -> Result<(), ApiError> {
    let mut errs = Vec::new();
    let m = &v["metadata"];
    check(&mut errs, m, "metadata", Ty::Obj);
    for f in [
        "name",
        "namespace",
        "generateName",
        "resourceVersion",
        "uid",
    ] {
        check(&mut errs, &m[f], &format!("metadata.{f}"), Ty::Str);
    }
    check(&mut errs, &m["labels"], "metadata.labels", Ty::StrMap);
    check(
        &mut errs,
        &m["annotations"],
        "metadata.annotations",
        Ty::StrMap,
    );
    check(&mut errs, &m["finalizers"], "metadata.finalizers", Ty::List);
    match view {
        View::Node => {
            check(&mut errs, &v["spec"], "spec", Ty::Obj);
            check(
                &mut errs,
                &v["spec"]["unschedulable"],
                "spec.unschedulable",
                Ty::Bool,
            );
            check(
                &mut errs,
                &v["spec"]["providerID"],
                "spec.providerID",
                Ty::Str,
            );
            check(&mut errs, &v["spec"]["taints"], "spec.taints", Ty::List);
            for (i, t) in v["spec"]["taints"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                check(&mut errs, t, &format!("spec.taints[{i}]"), Ty::Obj);
                for f in ["key", "value", "effect", "timeAdded"] {
                    check(&mut errs, &t[f], &format!("spec.taints.{f}"), Ty::Str);
                }
            }
            check(&mut errs, &v["status"], "status", Ty::Obj);
            for f in ["addresses", "conditions"] {
                check(&mut errs, &v["status"][f], &format!("status.{f}"), Ty::List);
                for item in v["status"][f].as_array().into_iter().flatten() {
                    check(&mut errs, item, &format!("status.{f}"), Ty::Obj);
                }
            }
        }
        View::Lease => {
            let s = &v["spec"];
            check(&mut errs, s, "spec", Ty::Obj);
            for f in [
                "holderIdentity",
                "acquireTime",
                "renewTime",
                "preferredHolder",
                "strategy",
            ] {
                check(&mut errs, &s[f], &format!("spec.{f}"), Ty::Str);
            }
            for f in ["leaseDurationSeconds", "leaseTransitions"] {
                check(&mut errs, &s[f], &format!("spec.{f}"), Ty::Int);
            }
        }
        View::CoreEvent | View::EventsV1 => {
            for f in ["involvedObject", "source", "series", "related"] {
                check(&mut errs, &v[f], f, Ty::Obj);
            }
            for f in [
                "reason",
                "message",
                "type",
                "action",
                "reportingComponent",
                "reportingInstance",
                "eventTime",
                "firstTimestamp",
                "lastTimestamp",
            ] {
                check(&mut errs, &v[f], f, Ty::Str);
            }
            check(&mut errs, &v["count"], "count", Ty::Int);
            check(&mut errs, &v["series"]["count"], "series.count", Ty::Int);
        }
        View::ServiceAccount => check(&mut errs, &v["secrets"], "secrets", Ty::List),
        View::ClusterRole | View::Role => check_rules(&mut errs, v),
        View::ClusterRoleBinding | View::RoleBinding => {
            check(&mut errs, &v["roleRef"], "roleRef", Ty::Obj);
            for f in ["apiGroup", "kind", "name"] {
                check(
                    &mut errs,
                    &v["roleRef"][f],
                    &format!("roleRef.{f}"),
                    Ty::Str,
                );
            }
            check(&mut errs, &v["subjects"], "subjects", Ty::List);
            for s in v["subjects"].as_array().into_iter().flatten() {
                check(&mut errs, s, "subjects", Ty::Obj);
                for f in ["apiGroup", "kind", "name", "namespace"] {
                    check(&mut errs, &s[f], &format!("subjects.{f}"), Ty::Str);
                }
            }
        }
    }
    match errs.first() {
        None => Ok(()),
        Some(e) => Err(ApiError::bad_request(format!(
            "{} in version {:?} cannot be handled as a {}: {e}",
            view.kind_name(),
            view.api_version(),
            view.kind_name()
        ))),
    }
}

/// `rules[]` of a (Cluster)Role: lists of strings.
fn check_rules(errs: &mut Vec<String>, v: &Value) {
    check(errs, &v["rules"], "rules", Ty::List);
    for r in v["rules"].as_array().into_iter().flatten() {
        check(errs, r, "rules", Ty::Obj);
        for f in [
            "apiGroups",
            "resources",
            "verbs",
            "resourceNames",
            "nonResourceURLs",
        ] {
            check(errs, &r[f], &format!("rules.{f}"), Ty::List);
            for item in r[f].as_array().into_iter().flatten() {
                check(errs, item, &format!("rules.{f}"), Ty::Str);
            }
        }
    }
}

fn rbac_kind(view: View) -> bool {
    matches!(
        view,
        View::ClusterRole | View::ClusterRoleBinding | View::Role | View::RoleBinding
    )
}

/// RFC 1123 subdomain, the rule for object names.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// Field validation of the view's object (`metadata.name` included). Event rules differ
/// between create and update, so events are validated by the caller via [`events`].
pub fn validate(view: View, v: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let name = v["metadata"]["name"].as_str().unwrap_or("");
    if name.is_empty() {
        errs.push(FieldError::required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else if rbac_kind(view) {
        // RBAC objects only need to be valid path segments (`system:discovery` is fine).
        if name == "." || name == ".." || name.contains('/') || name.contains('%') {
            errs.push(FieldError::invalid(
                "metadata.name",
                &Value::String(name.into()),
                "may not contain '/' or '%' and may not be '.' or '..'",
            ));
        }
    } else if !is_dns_subdomain(name) {
        errs.push(FieldError::invalid(
            "metadata.name",
            &Value::String(name.into()),
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
        ));
    }
    match view {
        View::Node => validate_taints(v, &mut errs),
        View::Lease => {
            let s = &v["spec"];
            if let Some(d) = s["leaseDurationSeconds"].as_i64()
                && d <= 0
            {
                errs.push(FieldError::invalid(
                    "spec.leaseDurationSeconds",
                    &s["leaseDurationSeconds"],
                    "must be greater than 0",
                ));
            }
            if let Some(t) = s["leaseTransitions"].as_i64()
                && t < 0
            {
                errs.push(FieldError::invalid(
                    "spec.leaseTransitions",
                    &s["leaseTransitions"],
                    "must be greater than or equal to 0",
                ));
            }
        }
        View::CoreEvent | View::EventsV1 | View::ServiceAccount => {}
        View::ClusterRole | View::Role => {
            for (i, r) in v["rules"].as_array().into_iter().flatten().enumerate() {
                if r["verbs"].as_array().is_none_or(|a| a.is_empty()) {
                    errs.push(FieldError::required(
                        format!("rules[{i}].verbs"),
                        "verbs must contain at least one value",
                    ));
                }
            }
        }
        View::ClusterRoleBinding | View::RoleBinding => {
            let r = &v["roleRef"];
            if r["name"].as_str().unwrap_or("").is_empty() {
                errs.push(FieldError::required("roleRef.name", ""));
            }
            let kind = r["kind"].as_str().unwrap_or("");
            let allowed: &[&str] = if view == View::RoleBinding {
                &["Role", "ClusterRole"]
            } else {
                &["ClusterRole"]
            };
            if !allowed.contains(&kind) {
                errs.push(FieldError::not_supported(
                    "roleRef.kind",
                    &r["kind"],
                    allowed,
                ));
            }
            if r["apiGroup"].as_str() != Some(crate::resource::RBAC_GROUP) {
                errs.push(FieldError::not_supported(
                    "roleRef.apiGroup",
                    &r["apiGroup"],
                    &[crate::resource::RBAC_GROUP],
                ));
            }
        }
    }
    errs
}

const EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];

fn validate_taints(v: &Value, errs: &mut Vec<FieldError>) {
    let mut seen: Vec<(String, String)> = Vec::new();
    for (i, t) in v["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let key = t["key"].as_str().unwrap_or("");
        let effect = t["effect"].as_str().unwrap_or("");
        if key.is_empty() {
            errs.push(FieldError::required(format!("spec.taints[{i}].key"), ""));
        }
        if effect.is_empty() {
            errs.push(FieldError::required(format!("spec.taints[{i}].effect"), ""));
        } else if !EFFECTS.contains(&effect) {
            errs.push(FieldError::not_supported(
                format!("spec.taints[{i}].effect"),
                &t["effect"],
                EFFECTS,
            ));
        }
        let pair = (key.to_string(), effect.to_string());
        if seen.contains(&pair) {
            errs.push(FieldError {
                kind: "FieldValueDuplicate",
                field: format!("spec.taints[{i}]"),
                body: format!(
                    "Duplicate value: {:?}: taints must be unique by key and effect pair",
                    format!("{key}:{effect}")
                ),
            });
        }
        seen.push(pair);
    }
}

/// Stamps server-owned fields on a new object: uid, creationTimestamp, namespace; drops
/// fields clients may not set on create.
pub fn stamp_create(v: &mut Value, namespace: Option<&str>, uid: String, now: &str) {
    let meta = meta_mut(v);
    meta.insert("uid".into(), Value::String(uid));
    meta.insert("creationTimestamp".into(), Value::String(now.to_string()));
    meta.remove("resourceVersion");
    meta.remove("deletionTimestamp");
    meta.remove("deletionGracePeriodSeconds");
    match namespace {
        Some(ns) => {
            meta.insert("namespace".into(), Value::String(ns.to_string()));
        }
        None => {
            meta.remove("namespace");
        }
    }
}

/// Keeps server-owned fields of `old` on an update.
pub fn keep_system_fields(new: &mut Value, old: &Value) {
    let old_meta = &old["metadata"];
    let meta = meta_mut(new);
    for f in ["uid", "creationTimestamp", "namespace", "deletionTimestamp"] {
        match old_meta.get(f) {
            Some(x) => meta.insert(f.into(), x.clone()),
            None => meta.remove(f),
        };
    }
}

/// The object's metadata map, created if missing.
pub fn meta_mut(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    let obj = v.as_object_mut().expect("just made an object");
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    meta.as_object_mut().expect("just made an object")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decode_checks_type_meta_and_shapes() {
        let ok = decode(
            View::Node,
            br#"{"kind":"Node","apiVersion":"v1","metadata":{"name":"a"}}"#,
            "application/json",
        )
        .unwrap();
        assert!(ok.get("kind").is_none());
        for body in [
            &br#"{"kind":"Lease","metadata":{"name":"a"}}"#[..],
            br#"{"apiVersion":"v2","metadata":{"name":"a"}}"#,
            br#"{"metadata":{"name":"a"},"spec":{"taints":"x"}}"#,
            br#"{"metadata":{"name":"a","labels":{"a":1}}}"#,
            br#"[]"#,
            br#"{"#,
        ] {
            assert_eq!(
                decode(View::Node, body, "application/json")
                    .unwrap_err()
                    .code,
                400
            );
        }
        assert_eq!(
            decode(View::Node, b"{}", "text/plain").unwrap_err().code,
            415
        );
        let y = decode(View::Lease, b"metadata:\n  name: l\n", "application/yaml").unwrap();
        assert_eq!(y["metadata"]["name"], "l");
    }

    #[test]
    fn taint_validation() {
        let n = json!({"metadata": {"name": "n"}, "spec": {"taints": [
            {"key": "a", "effect": "NoSchedule"}, {"key": "a", "effect": "NoSchedule"},
            {"key": "", "effect": "Sometimes"}]}});
        let errs = validate(View::Node, &n);
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.taints[1]",
                "spec.taints[2].key",
                "spec.taints[2].effect"
            ]
        );
        assert!(validate(View::Node, &json!({"metadata": {"name": "Bad_Name"}})).len() == 1);
    }
}
