//! Field and label selectors (apimachinery `fields` and `labels` grammars) and the selectable
//! fields of each view (contracts/kube.md 2.8).

use crate::resource::View;
use serde_json::Value;
use std::collections::BTreeMap;

/// A selector that does not parse or names a field the view does not support.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("field label not supported: {0}")]
    UnsupportedField(String),
    #[error("invalid selector: '{0}'; can't understand '{1}'")]
    BadField(String, String),
    #[error("unable to parse requirement: {0}")]
    BadLabel(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FieldOp {
    Eq,
    NotEq,
}

/// `a=b,c!=d`: every term must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    /// Terms with field names already mapped onto the stored (core) shape.
    terms: Vec<(String, FieldOp, String)>,
}

impl FieldSelector {
    /// Parses a field selector for `view`, rejecting fields it does not support.
    pub fn parse(view: View, input: &str) -> Result<FieldSelector, SelectorError> {
        let mut terms = Vec::new();
        for raw in split_unescaped(input, ',') {
            if raw.trim().is_empty() {
                continue;
            }
            let (field, op, value) = split_field_term(&raw)
                .ok_or_else(|| SelectorError::BadField(input.to_string(), raw.clone()))?;
            let stored = stored_field(view, field.trim())
                .ok_or_else(|| SelectorError::UnsupportedField(field.trim().to_string()))?;
            terms.push((stored, op, unescape(value)));
        }
        Ok(FieldSelector { terms })
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Whether the stored object matches. Missing fields read as "".
    pub fn matches(&self, object: &Value) -> bool {
        self.terms.iter().all(|(field, op, want)| {
            let have = stored_field_value(object, field);
            match op {
                FieldOp::Eq => have == *want,
                FieldOp::NotEq => have != *want,
            }
        })
    }
}

/// Splits on `sep` unless escaped with a backslash (escapes are kept for [`unescape`]).
fn split_unescaped(input: &str, sep: char) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut escaped = false;
    for c in input.chars() {
        if escaped {
            cur.push('\\');
            cur.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            out.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    if escaped {
        cur.push('\\');
    }
    out.push(cur);
    out
}

fn unescape(value: &str) -> String {
    let mut out = String::new();
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn split_field_term(term: &str) -> Option<(&str, FieldOp, &str)> {
    // `!=` before `==` before `=`, as the apimachinery lexer does.
    if let Some(i) = term.find("!=") {
        return Some((&term[..i], FieldOp::NotEq, &term[i + 2..]));
    }
    if let Some(i) = term.find("==") {
        return Some((&term[..i], FieldOp::Eq, &term[i + 2..]));
    }
    let i = term.find('=')?;
    Some((&term[..i], FieldOp::Eq, &term[i + 1..]))
}

/// Maps a selectable field of `view` onto the stored field path, or None if unsupported.
fn stored_field(view: View, field: &str) -> Option<String> {
    const EVENT_FIELDS: &[&str] = &[
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
        "metadata.name",
        "metadata.namespace",
    ];
    match view {
        View::Node => ["metadata.name", "metadata.namespace", "spec.unschedulable"]
            .contains(&field)
            .then(|| field.to_string()),
        View::Lease
        | View::ServiceAccount
        | View::ClusterRole
        | View::ClusterRoleBinding
        | View::Role
        | View::RoleBinding => ["metadata.name", "metadata.namespace"]
            .contains(&field)
            .then(|| field.to_string()),
        View::CoreEvent => EVENT_FIELDS.contains(&field).then(|| field.to_string()),
        View::EventsV1 => {
            let mapped = if let Some(rest) = field.strip_prefix("regarding.") {
                format!("involvedObject.{rest}")
            } else if field == "reportingController" {
                "reportingComponent".to_string()
            } else if field.starts_with("involvedObject.") || field == "reportingComponent" {
                // The old names are not selectable through the new view.
                return None;
            } else {
                field.to_string()
            };
            EVENT_FIELDS.contains(&mapped.as_str()).then_some(mapped)
        }
    }
}

/// The value of a stored field as the real field set renders it.
fn stored_field_value(object: &Value, field: &str) -> String {
    match field {
        "spec.unschedulable" => object["spec"]["unschedulable"]
            .as_bool()
            .unwrap_or(false)
            .to_string(),
        // The core registry selects on the source component.
        "source" => object["source"]["component"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        _ => {
            let mut cur = object;
            for part in field.split('.') {
                cur = &cur[part];
            }
            match cur {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelOp {
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
    Gt(i64),
    Lt(i64),
}

/// A label selector: comma-separated requirements, all of which must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    reqs: Vec<(String, LabelOp)>,
}

impl LabelSelector {
    pub fn parse(input: &str) -> Result<LabelSelector, SelectorError> {
        let mut reqs = Vec::new();
        for raw in split_top_level(input) {
            let term = raw.trim();
            if term.is_empty() {
                continue;
            }
            reqs.push(parse_requirement(term)?);
        }
        Ok(LabelSelector { reqs })
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    pub fn matches(&self, object: &Value) -> bool {
        let labels: BTreeMap<&str, &str> = object["metadata"]["labels"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.as_str(), v)))
                    .collect()
            })
            .unwrap_or_default();
        self.reqs.iter().all(|(key, op)| {
            let have = labels.get(key.as_str()).copied();
            match op {
                LabelOp::Eq(v) => have == Some(v.as_str()),
                LabelOp::NotEq(v) => have != Some(v.as_str()),
                LabelOp::In(vs) => have.is_some_and(|h| vs.iter().any(|v| v == h)),
                LabelOp::NotIn(vs) => !have.is_some_and(|h| vs.iter().any(|v| v == h)),
                LabelOp::Exists => have.is_some(),
                LabelOp::NotExists => have.is_none(),
                LabelOp::Gt(n) => have
                    .and_then(|h| h.parse::<i64>().ok())
                    .is_some_and(|h| h > *n),
                LabelOp::Lt(n) => have
                    .and_then(|h| h.parse::<i64>().ok())
                    .is_some_and(|h| h < *n),
            }
        })
    }
}

/// Splits on commas outside parentheses.
fn split_top_level(input: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut depth = 0i32;
    for c in input.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out
}

fn parse_requirement(term: &str) -> Result<(String, LabelOp), SelectorError> {
    let bad = |detail: &str| SelectorError::BadLabel(format!("{term:?}: {detail}"));
    if let Some(key) = term.strip_prefix('!') {
        let key = check_key(key.trim()).map_err(|e| bad(&e))?;
        return Ok((key, LabelOp::NotExists));
    }
    // Set-based: `key in (a,b)` / `key notin (a,b)`.
    let words: Vec<&str> = term.splitn(2, char::is_whitespace).collect();
    if words.len() == 2 {
        let rest = words[1].trim_start();
        for (kw, is_in) in [("notin", false), ("in", true)] {
            if let Some(set) = rest.strip_prefix(kw) {
                let set = set.trim();
                if !set.starts_with('(') || !set.ends_with(')') {
                    return Err(bad("expected a parenthesised set of values"));
                }
                let values: Vec<String> = set[1..set.len() - 1]
                    .split(',')
                    .map(|v| v.trim().to_string())
                    .collect();
                for v in &values {
                    check_value(v).map_err(|e| bad(&e))?;
                }
                let key = check_key(words[0]).map_err(|e| bad(&e))?;
                let op = if is_in {
                    LabelOp::In(values)
                } else {
                    LabelOp::NotIn(values)
                };
                return Ok((key, op));
            }
        }
    }
    for (sym, kind) in [("!=", 0), ("==", 1), ("=", 1), (">", 2), ("<", 3)] {
        if let Some(i) = term.find(sym) {
            let key = check_key(term[..i].trim()).map_err(|e| bad(&e))?;
            let value = term[i + sym.len()..].trim().to_string();
            let op =
                match kind {
                    0 => LabelOp::NotEq(check_value(&value).map_err(|e| bad(&e))?),
                    1 => LabelOp::Eq(check_value(&value).map_err(|e| bad(&e))?),
                    2 => LabelOp::Gt(value.parse().map_err(|_| {
                        bad("for 'gt', 'lt' operators, the value must be an integer")
                    })?),
                    _ => LabelOp::Lt(value.parse().map_err(|_| {
                        bad("for 'gt', 'lt' operators, the value must be an integer")
                    })?),
                };
            return Ok((key, op));
        }
    }
    let key = check_key(term).map_err(|e| bad(&e))?;
    Ok((key, LabelOp::Exists))
}

fn check_key(key: &str) -> Result<String, String> {
    let name = key.rsplit('/').next().unwrap_or("");
    let ok = !name.is_empty()
        && name.len() <= 63
        && key.len() <= 316
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(key.to_string())
    } else {
        Err(format!(
            "invalid label key {key:?}: name part must consist of alphanumeric characters, '-', '_' or '.'"
        ))
    }
}

fn check_value(value: &str) -> Result<String, String> {
    let ok = value.is_empty()
        || (value.len() <= 63
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && value.starts_with(|c: char| c.is_ascii_alphanumeric())
            && value.ends_with(|c: char| c.is_ascii_alphanumeric()));
    if ok {
        Ok(value.to_string())
    } else {
        Err(format!(
            "invalid label value: {value:?}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.'"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node() -> Value {
        json!({"metadata": {"name": "n1", "labels": {"agentpool": "spot", "zone": "1", "tier": "3"}},
               "spec": {}})
    }

    #[test]
    fn node_field_selectors() {
        let n = node();
        assert!(
            FieldSelector::parse(View::Node, "metadata.name=n1")
                .unwrap()
                .matches(&n)
        );
        assert!(
            FieldSelector::parse(View::Node, "metadata.name==n1,spec.unschedulable=false")
                .unwrap()
                .matches(&n)
        );
        assert!(
            !FieldSelector::parse(View::Node, "metadata.name!=n1")
                .unwrap()
                .matches(&n)
        );
        assert_eq!(
            FieldSelector::parse(View::Node, "status.phase=x"),
            Err(SelectorError::UnsupportedField("status.phase".into()))
        );
        assert!(matches!(
            FieldSelector::parse(View::Node, "metadata.name"),
            Err(SelectorError::BadField(..))
        ));
    }

    #[test]
    fn events_v1_fields_map_onto_core_fields() {
        let ev = json!({"metadata": {"name": "e", "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": "n1"}, "reason": "PreemptScheduled",
            "reportingComponent": "npd", "source": {"component": "npd-src"}});
        let s = FieldSelector::parse(
            View::EventsV1,
            "regarding.kind=Node,reportingController=npd",
        )
        .unwrap();
        assert!(s.matches(&ev));
        let s = FieldSelector::parse(
            View::CoreEvent,
            "involvedObject.name=n1,reason=PreemptScheduled,source=npd-src",
        )
        .unwrap();
        assert!(s.matches(&ev));
        assert!(
            FieldSelector::parse(View::CoreEvent, "involvedObject.apiVersion=v1")
                .unwrap()
                .matches(&ev)
                .eq(&false)
        );
        assert!(FieldSelector::parse(View::EventsV1, "involvedObject.kind=Node").is_err());
        assert!(FieldSelector::parse(View::CoreEvent, "note=x").is_err());
    }

    #[test]
    fn label_selector_operators() {
        let n = node();
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(&n);
        assert!(m("agentpool=spot"));
        assert!(m("agentpool==spot"));
        assert!(m("agentpool!=user"));
        assert!(m("missing!=x"));
        assert!(m("agentpool in (spot, user)"));
        assert!(!m("agentpool notin (spot,user)"));
        assert!(m("missing notin (a)"));
        assert!(m("zone"));
        assert!(m("!missing"));
        assert!(!m("!zone"));
        assert!(m("tier>2,tier<4,agentpool in (spot),zone"));
        assert!(m(""));
        assert!(LabelSelector::parse("a in b").is_err());
        assert!(LabelSelector::parse("a=b c").is_err());
        assert!(LabelSelector::parse("=x").is_err());
        assert!(LabelSelector::parse("a>x").is_err());
    }
}
