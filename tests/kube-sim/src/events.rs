//! Events: one stored object (core/v1 shape), two API views (contracts/kube.md 2.9), and the
//! create/update validation of each view (kubernetes `pkg/apis/core/validation/events.go`).
//! Field paths in validation errors use the core names even for events.k8s.io requests, as
//! the real server validates the internal (core-shaped) object.

use crate::status::FieldError;
use serde_json::{Map, Value};

/// (core/v1 name, events.k8s.io/v1 name) for renamed fields.
const RENAMES: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    ("reportingComponent", "reportingController"),
];

fn rename(object: &Value, from_core: bool) -> Value {
    let Value::Object(map) = object else {
        return object.clone();
    };
    let mut out = Map::new();
    for (k, v) in map {
        let renamed = RENAMES.iter().find_map(|(core, v1)| {
            let (from, to) = if from_core { (core, v1) } else { (v1, core) };
            (k == from).then(|| to.to_string())
        });
        match renamed {
            Some(name) => {
                out.insert(name, v.clone());
            }
            None => {
                // A field that exists only in the other view is dropped (e.g. `note` posted
                // to core/v1 is an unknown field there).
                let foreign = RENAMES
                    .iter()
                    .any(|(core, v1)| if from_core { k == v1 } else { k == core });
                if !foreign {
                    out.insert(k.clone(), v.clone());
                }
            }
        }
    }
    Value::Object(out)
}

/// The stored (core) event as events.k8s.io/v1 shows it.
pub fn to_v1(stored: &Value) -> Value {
    let mut v = rename(stored, true);
    // The real conversion omits a zero deprecatedCount.
    if let Some(m) = v.as_object_mut()
        && m.get("deprecatedCount").and_then(Value::as_i64) == Some(0)
    {
        m.remove("deprecatedCount");
    }
    v
}

/// An events.k8s.io/v1 body in the stored (core) shape.
pub fn from_v1(v1: &Value) -> Value {
    rename(v1, false)
}

fn str_field<'a>(event: &'a Value, field: &str) -> &'a str {
    event.get(field).and_then(Value::as_str).unwrap_or("")
}

fn is_set(event: &Value, field: &str) -> bool {
    match event.get(field) {
        None | Some(Value::Null) => false,
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Number(n)) => n.as_i64() != Some(0),
        Some(Value::Object(m)) => m.values().any(|v| !v.is_null() && v != ""),
        Some(_) => true,
    }
}

/// `legacyValidateEvent`: the rules every event passes, whatever the view.
fn legacy(event: &Value, namespace: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let involved_ns = event["involvedObject"]["namespace"].as_str().unwrap_or("");
    let ns_mismatch = |errs: &mut Vec<FieldError>| {
        errs.push(FieldError::invalid(
            "involvedObject.namespace",
            &Value::String(involved_ns.to_string()),
            "does not match event.namespace",
        ));
    };
    if !is_set(event, "eventTime") {
        if involved_ns.is_empty() {
            if !namespace.is_empty() && namespace != "default" {
                ns_mismatch(&mut errs);
            }
        } else if namespace != involved_ns {
            ns_mismatch(&mut errs);
        }
    } else {
        if involved_ns.is_empty() && namespace != "default" && namespace != "kube-system" {
            ns_mismatch(&mut errs);
        }
        let controller = str_field(event, "reportingComponent");
        if controller.is_empty() {
            errs.push(FieldError::required("reportingController", ""));
        } else if !is_qualified_name(controller) {
            errs.push(FieldError::invalid(
                "reportingController",
                &Value::String(controller.to_string()),
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            ));
        }
        let limited = |errs: &mut Vec<FieldError>, field: &str, shown: &str, max: usize| {
            let value = str_field(event, field);
            if value.len() > max {
                errs.push(FieldError::invalid(
                    shown,
                    &Value::String(String::new()),
                    &format!("can have at most {max} characters"),
                ));
            }
            value.is_empty()
        };
        if limited(&mut errs, "reportingInstance", "reportingInstance", 128) {
            errs.push(FieldError::required("reportingInstance", ""));
        }
        if limited(&mut errs, "action", "action", 128) {
            errs.push(FieldError::required("action", ""));
        }
        if limited(&mut errs, "reason", "reason", 128) {
            errs.push(FieldError::required("reason", ""));
        }
        limited(&mut errs, "message", "message", 1024);
    }
    errs
}

fn series_errors(event: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(series) = event.get("series").filter(|s| !s.is_null()) {
        if series["count"].as_i64().unwrap_or(0) < 2 {
            errs.push(FieldError::invalid(
                "series.count",
                &Value::String(String::new()),
                "should be at least 2",
            ));
        }
        if !is_set(series, "lastObservedTime") {
            errs.push(FieldError::required("series.lastObservedTime", ""));
        }
    }
    errs
}

/// Validates a create. `strict` is true for events.k8s.io/v1 requests.
pub fn validate_create(event: &Value, namespace: &str, strict: bool) -> Vec<FieldError> {
    let mut errs = legacy(event, namespace);
    if !strict {
        return errs;
    }
    errs.extend(series_errors(event));
    if !is_set(event, "eventTime") {
        errs.push(FieldError::required("eventTime", ""));
    }
    let t = str_field(event, "type");
    if t != "Normal" && t != "Warning" {
        errs.push(FieldError::invalid(
            "type",
            &Value::String(String::new()),
            &format!("has invalid value: {t}"),
        ));
    }
    for field in ["firstTimestamp", "lastTimestamp", "count", "source"] {
        if is_set(event, field) {
            errs.push(FieldError::invalid(
                field,
                &Value::String(String::new()),
                "needs to be unset",
            ));
        }
    }
    errs
}

/// Validates an update. Through events.k8s.io only `series` and metadata may change.
pub fn validate_update(new: &Value, old: &Value, namespace: &str, strict: bool) -> Vec<FieldError> {
    let mut errs = legacy(new, namespace);
    if !strict {
        return errs;
    }
    if new.get("series") != old.get("series") {
        errs.extend(series_errors(new));
    }
    for field in [
        "involvedObject",
        "reason",
        "message",
        "source",
        "firstTimestamp",
        "lastTimestamp",
        "count",
        "type",
        "eventTime",
        "action",
        "related",
        "reportingComponent",
        "reportingInstance",
    ] {
        let norm = |v: Option<&Value>| v.filter(|v| !v.is_null()).cloned();
        if norm(new.get(field)) != norm(old.get(field)) {
            errs.push(FieldError::invalid(
                field,
                new.get(field).unwrap_or(&Value::Null),
                "field is immutable",
            ));
        }
    }
    errs
}

/// A Kubernetes qualified name (`[prefix/]name`), as `reportingController` must be.
fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    name_ok && prefix.is_none_or(crate::objects::is_dns_subdomain)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn npd_event() -> Value {
        json!({
            "metadata": {"name": "n1.1", "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": "n1"},
            "reason": "PreemptScheduled", "type": "Warning", "message": "Scheduled: x",
            "source": {"component": "npd", "host": "n1"}, "count": 1,
            "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z"
        })
    }

    #[test]
    fn views_round_trip() {
        let core = npd_event();
        let v1 = to_v1(&core);
        assert_eq!(v1["regarding"]["name"], "n1");
        assert_eq!(v1["note"], "Scheduled: x");
        assert_eq!(v1["deprecatedSource"]["component"], "npd");
        assert_eq!(v1["deprecatedCount"], 1);
        assert!(v1.get("involvedObject").is_none());
        assert_eq!(from_v1(&v1), core);
    }

    #[test]
    fn core_create_uses_legacy_rules_only() {
        assert!(validate_create(&npd_event(), "default", false).is_empty());
        let errs = validate_create(&npd_event(), "kube-system", false);
        assert_eq!(errs[0].field, "involvedObject.namespace");
    }

    #[test]
    fn events_v1_create_is_strict() {
        // The NPD-style event is not acceptable through events.k8s.io.
        let errs = validate_create(&npd_event(), "default", true);
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "eventTime",
                "firstTimestamp",
                "lastTimestamp",
                "count",
                "source"
            ]
        );
        let good = from_v1(&json!({
            "metadata": {"name": "n1.2"}, "eventTime": "2026-01-01T00:00:00.000000Z",
            "regarding": {"kind": "Node", "name": "n1"}, "reportingController": "cutover.io/signal",
            "reportingInstance": "pod-1", "action": "Cutover", "reason": "LoadBalancerAdminStateDown",
            "type": "Normal", "note": "x", "series": {"count": 1, "lastObservedTime": "2026-01-01T00:00:00.000000Z"}
        }));
        let errs = validate_create(&good, "default", true);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "series.count");
        let errs = validate_create(&good, "other", true);
        assert!(errs.iter().any(|e| e.field == "involvedObject.namespace"));
    }

    #[test]
    fn events_v1_update_only_changes_series() {
        let old = from_v1(&json!({"reason": "A", "series": null, "eventTime": "t"}));
        let mut new = old.clone();
        new["reason"] = json!("B");
        let errs = validate_update(&new, &old, "default", true);
        assert!(errs.iter().any(|e| e.field == "reason"));
        // core/v1 updates are not bound by the events.k8s.io immutability rules.
        assert!(
            !validate_update(&new, &old, "default", false)
                .iter()
                .any(|e| e.field == "reason")
        );
    }
}
