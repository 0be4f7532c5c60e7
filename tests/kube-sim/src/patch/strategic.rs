//! Strategic merge patch, for the fields our kinds declare with a patch strategy
//! (apimachinery `strategicpatch`). Maps merge like a JSON merge patch; a list merges only
//! where the Go type declares `patchStrategy:"merge"`:
//! - `status.addresses` and `status.conditions` of a Node merge by `type`;
//! - `metadata.ownerReferences` merges by `uid`, `metadata.finalizers` and `spec.podCIDRs`
//!   are merged primitive lists (set union);
//! - every other list, `spec.taints` included (`+listType=atomic`), is replaced wholesale.
//!
//! Directives: `$patch: replace|delete|merge` on maps and list elements, `$retainKeys`,
//! `$deleteFromPrimitiveList/<field>`, and `$setElementOrder/<field>` (used to order the
//! merged list, as the server does).

use serde_json::{Map, Value};

/// A malformed patch (wrong directive value or shape): 400 on the wire.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct StrategicError(pub String);

enum ListStrategy {
    Replace,
    MergeByKey(&'static str),
    MergePrimitive,
}

fn strategy(path: &str) -> ListStrategy {
    match path {
        "status.addresses" | "status.conditions" => ListStrategy::MergeByKey("type"),
        "metadata.ownerReferences" => ListStrategy::MergeByKey("uid"),
        "metadata.finalizers" | "spec.podCIDRs" => ListStrategy::MergePrimitive,
        _ => ListStrategy::Replace,
    }
}

/// Applies a strategic merge patch to `target` in place.
pub fn apply(target: &mut Value, patch: &Value) -> Result<(), StrategicError> {
    if !patch.is_object() {
        return Err(StrategicError(
            "strategic merge patch body must be a JSON object".into(),
        ));
    }
    merge_map(target, patch, "")
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn merge_map(target: &mut Value, patch: &Value, path: &str) -> Result<(), StrategicError> {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    match patch_map.get("$patch").map(|v| v.as_str()) {
        None | Some(Some("merge")) => {}
        Some(Some("replace")) => {
            let mut replaced = patch_map.clone();
            replaced.remove("$patch");
            *target = Value::Object(strip_directives(replaced));
            return Ok(());
        }
        Some(Some("delete")) => {
            *target = Value::Object(Map::new());
            return Ok(());
        }
        Some(other) => {
            return Err(StrategicError(format!(
                "Unknown patch type: {}",
                other.unwrap_or("<non-string>")
            )));
        }
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(target_map) = target else {
        return Ok(());
    };
    let mut orders: Vec<(String, &Value)> = Vec::new();
    for (key, value) in patch_map {
        if key == "$patch" {
            continue;
        }
        if key == "$retainKeys" {
            continue; // applied after the merge, below
        }
        if let Some(field) = key.strip_prefix("$setElementOrder/") {
            orders.push((field.to_string(), value));
            continue;
        }
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            let Value::Array(remove) = value else {
                return Err(StrategicError(format!("{key} must be a list")));
            };
            if let Some(Value::Array(list)) = target_map.get_mut(field) {
                list.retain(|v| !remove.contains(v));
            }
            continue;
        }
        if key.starts_with('$') {
            return Err(StrategicError(format!("unknown directive {key}")));
        }
        let sub = join(path, key);
        if value.is_null() {
            target_map.remove(key);
            continue;
        }
        match value {
            Value::Object(_) => {
                let slot = target_map.entry(key.clone()).or_insert(Value::Null);
                if slot.is_null() || slot.is_object() {
                    merge_map(slot, value, &sub)?;
                } else {
                    *slot = Value::Object(strip_directives(
                        value.as_object().cloned().unwrap_or_default(),
                    ));
                }
            }
            Value::Array(items) => {
                let slot = target_map.entry(key.clone()).or_insert(Value::Null);
                merge_list(slot, items, &sub)?;
            }
            other => {
                target_map.insert(key.clone(), other.clone());
            }
        }
    }
    for (field, order) in orders {
        if let (Some(Value::Array(list)), Value::Array(order)) = (target_map.get_mut(&field), order)
        {
            reorder(list, order, &join(path, &field));
        }
    }
    if let Some(retain) = patch_map.get("$retainKeys") {
        let Value::Array(keys) = retain else {
            return Err(StrategicError("$retainKeys must be a list".into()));
        };
        target_map.retain(|k, _| keys.iter().any(|r| r.as_str() == Some(k)));
    }
    Ok(())
}

fn merge_list(target: &mut Value, items: &[Value], path: &str) -> Result<(), StrategicError> {
    // A `{"$patch": "replace"}` element replaces the whole list with the other elements.
    let replace_all = items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"));
    let strategy = if replace_all {
        ListStrategy::Replace
    } else {
        strategy(path)
    };
    match strategy {
        ListStrategy::Replace => {
            let kept: Vec<Value> = items
                .iter()
                .filter(|i| i.get("$patch").is_none())
                .map(|i| match i {
                    Value::Object(m) => Value::Object(strip_directives(m.clone())),
                    other => other.clone(),
                })
                .collect();
            *target = Value::Array(kept);
        }
        ListStrategy::MergePrimitive => {
            let mut list = target.as_array().cloned().unwrap_or_default();
            for item in items {
                if !list.contains(item) {
                    list.push(item.clone());
                }
            }
            *target = Value::Array(list);
        }
        ListStrategy::MergeByKey(merge_key) => {
            let mut list = target.as_array().cloned().unwrap_or_default();
            for item in items {
                let Some(key_value) = item.get(merge_key) else {
                    return Err(StrategicError(format!(
                        "map: {item} does not contain declared merge key: {merge_key}"
                    )));
                };
                let pos = list
                    .iter()
                    .position(|e| e.get(merge_key) == Some(key_value));
                let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
                match (pos, delete) {
                    (Some(i), true) => {
                        list.remove(i);
                    }
                    (None, true) => {}
                    (Some(i), false) => merge_map(&mut list[i], item, path)?,
                    (None, false) => {
                        let mut fresh = Value::Object(Map::new());
                        merge_map(&mut fresh, item, path)?;
                        list.push(fresh);
                    }
                }
            }
            *target = Value::Array(list);
        }
    }
    Ok(())
}

/// Orders `list` as `$setElementOrder` says; elements it does not name keep their place at
/// the end, in their current order.
fn reorder(list: &mut Vec<Value>, order: &[Value], path: &str) {
    let key_of = |v: &Value| -> Value {
        match strategy(path) {
            ListStrategy::MergeByKey(k) => v.get(k).cloned().unwrap_or(Value::Null),
            _ => v.clone(),
        }
    };
    let mut rest = std::mem::take(list);
    for wanted in order {
        let wanted = key_of(wanted);
        if let Some(i) = rest.iter().position(|v| key_of(v) == wanted) {
            list.push(rest.remove(i));
        }
    }
    list.append(&mut rest);
}

fn strip_directives(mut map: Map<String, Value>) -> Map<String, Value> {
    map.retain(|k, _| !k.starts_with('$'));
    map
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node() -> Value {
        json!({
            "metadata": {"name": "n", "finalizers": ["a"], "labels": {"x": "1"}},
            "spec": {"taints": [{"key": "k1", "effect": "NoSchedule"}, {"key": "k2", "effect": "NoExecute"}]},
            "status": {
                "addresses": [{"type": "InternalIP", "address": "10.0.0.4"}, {"type": "Hostname", "address": "n"}],
                "conditions": [{"type": "Ready", "status": "True"}]
            }
        })
    }

    #[test]
    fn taints_are_atomic() {
        let mut n = node();
        apply(
            &mut n,
            &json!({"spec": {"taints": [{"key": "k3", "effect": "NoSchedule"}]}}),
        )
        .unwrap();
        assert_eq!(
            n["spec"]["taints"],
            json!([{"key": "k3", "effect": "NoSchedule"}])
        );
        apply(&mut n, &json!({"spec": {"taints": null}})).unwrap();
        assert!(n["spec"].get("taints").is_none());
    }

    #[test]
    fn conditions_and_addresses_merge_by_type() {
        let mut n = node();
        apply(
            &mut n,
            &json!({"status": {
                "conditions": [{"type": "Ready", "status": "False"}, {"type": "VMEventScheduled", "status": "True"}],
                "addresses": [{"type": "Hostname", "$patch": "delete"}]
            }}),
        )
        .unwrap();
        assert_eq!(
            n["status"]["conditions"],
            json!([{"type": "Ready", "status": "False"}, {"type": "VMEventScheduled", "status": "True"}])
        );
        assert_eq!(
            n["status"]["addresses"],
            json!([{"type": "InternalIP", "address": "10.0.0.4"}])
        );
    }

    #[test]
    fn directives() {
        let mut n = node();
        apply(
            &mut n,
            &json!({"metadata": {"finalizers": ["b"], "labels": {"$patch": "replace", "y": "2"}},
                    "$setElementOrder/spec": [], "status": {"$retainKeys": ["conditions"]}}),
        )
        .unwrap();
        assert_eq!(n["metadata"]["finalizers"], json!(["a", "b"]));
        assert_eq!(n["metadata"]["labels"], json!({"y": "2"}));
        assert!(n["status"].get("addresses").is_none());
        apply(
            &mut n,
            &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
        )
        .unwrap();
        assert_eq!(n["metadata"]["finalizers"], json!(["b"]));
        let mut n = node();
        apply(
            &mut n,
            &json!({"status": {"$setElementOrder/addresses": [{"type": "Hostname"}, {"type": "InternalIP"}]}}),
        )
        .unwrap();
        assert_eq!(n["status"]["addresses"][0]["type"], "Hostname");
        assert!(apply(&mut node(), &json!({"$patch": "bogus"})).is_err());
        assert!(apply(&mut node(), &json!([1])).is_err());
        assert!(
            apply(
                &mut node(),
                &json!({"status": {"conditions": [{"status": "x"}]}})
            )
            .is_err()
        );
    }
}
