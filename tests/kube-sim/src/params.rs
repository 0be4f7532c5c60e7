//! List/watch query parameters and their validation (apimachinery
//! `pkg/apis/meta/internalversion/validation`), answered with 400 or 422 `ListOptions` errors.

use crate::resource::View;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::server::Req;
use crate::status::{ApiError, FieldError};
use serde_json::Value;

/// Parsed list/watch options.
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    pub watch: bool,
    pub field: FieldSelector,
    pub label: LabelSelector,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
    pub resource_version: Option<String>,
    pub rv_match: Option<String>,
    pub send_initial_events: Option<bool>,
    pub allow_bookmarks: bool,
    pub timeout_seconds: Option<u64>,
}

impl ListOptions {
    /// True when selectors narrow the result (remainingItemCount is then not reported).
    pub fn filtered(&self) -> bool {
        !self.field.is_empty() || !self.label.is_empty()
    }

    /// Whether a stored object passes both selectors.
    pub fn matches(&self, stored: &Value) -> bool {
        self.field.matches(stored) && self.label.matches(stored)
    }
}

fn parse_bool(name: &str, v: &str) -> Result<bool, ApiError> {
    match v {
        "true" | "1" | "True" | "TRUE" | "t" | "T" => Ok(true),
        "false" | "0" | "False" | "FALSE" | "f" | "F" | "" => Ok(false),
        _ => Err(ApiError::bad_request(format!(
            "failed to parse {name}: strconv.ParseBool: parsing {v:?}: invalid syntax"
        ))),
    }
}

fn parse_int(name: &str, v: &str) -> Result<u64, ApiError> {
    v.parse::<i64>().map(|n| n.max(0) as u64).map_err(|_| {
        ApiError::bad_request(format!(
            "failed to parse {name}: strconv.ParseInt: parsing {v:?}: invalid syntax"
        ))
    })
}

/// Parses and validates the query of a list or watch on `view`.
pub fn parse(view: View, req: &Req) -> Result<ListOptions, ApiError> {
    let mut o = ListOptions::default();
    if let Some(w) = req.param("watch") {
        o.watch = parse_bool("watch", w)?;
    }
    if let Some(f) = req.param("fieldSelector") {
        o.field =
            FieldSelector::parse(view, f).map_err(|e| ApiError::bad_request(e.to_string()))?;
    }
    if let Some(l) = req.param("labelSelector") {
        o.label = LabelSelector::parse(l).map_err(|e| ApiError::bad_request(e.to_string()))?;
    }
    if let Some(l) = req.param("limit") {
        o.limit = Some(parse_int("limit", l)? as usize);
    }
    o.continue_token = req
        .param("continue")
        .filter(|c| !c.is_empty())
        .map(String::from);
    o.resource_version = req
        .param("resourceVersion")
        .filter(|c| !c.is_empty())
        .map(String::from);
    o.rv_match = req
        .param("resourceVersionMatch")
        .filter(|c| !c.is_empty())
        .map(String::from);
    if let Some(s) = req.param("sendInitialEvents") {
        o.send_initial_events = Some(parse_bool("sendInitialEvents", s)?);
    }
    if let Some(b) = req.param("allowWatchBookmarks") {
        o.allow_bookmarks = parse_bool("allowWatchBookmarks", b)?;
    }
    if let Some(t) = req.param("timeoutSeconds") {
        o.timeout_seconds = Some(parse_int("timeoutSeconds", t)?);
    }
    if let Some(rv) = &o.resource_version
        && rv.parse::<u64>().is_err()
    {
        return Err(ApiError::bad_request(format!(
            "Invalid value: {rv:?}: resourceVersion must be a number"
        )));
    }
    let errs = validate(&o);
    if !errs.is_empty() {
        return Err(ApiError::invalid("meta.k8s.io", "ListOptions", "", &errs));
    }
    Ok(o)
}

fn validate(o: &ListOptions) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let m = o.rv_match.as_deref();
    if o.watch {
        if o.send_initial_events.is_some() && m != Some("NotOlderThan") {
            errs.push(FieldError::forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if let Some(m) = m {
            if o.send_initial_events.is_none() {
                errs.push(FieldError::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                ));
            }
            if m != "NotOlderThan" {
                errs.push(FieldError::not_supported(
                    "resourceVersionMatch",
                    &Value::String(m.to_string()),
                    &["NotOlderThan"],
                ));
            }
            if o.continue_token.is_some() {
                errs.push(FieldError::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
        }
        return errs;
    }
    if let Some(m) = m {
        if o.resource_version.is_none() {
            errs.push(FieldError::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        if o.continue_token.is_some() {
            errs.push(FieldError::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden when continue is provided",
            ));
        }
        if m != "Exact" && m != "NotOlderThan" {
            errs.push(FieldError::not_supported(
                "resourceVersionMatch",
                &Value::String(m.to_string()),
                &["Exact", "NotOlderThan", ""],
            ));
        }
        if m == "Exact" && o.resource_version.as_deref() == Some("0") {
            errs.push(FieldError::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            ));
        }
    }
    if o.send_initial_events.is_some() {
        errs.push(FieldError::forbidden(
            "sendInitialEvents",
            "sendInitialEvents is forbidden for list",
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http::Method;

    fn req(q: &str) -> Req {
        Req {
            method: Method::GET,
            path: "/api/v1/nodes".into(),
            query: url::form_urlencoded::parse(q.as_bytes())
                .filter(|(k, _)| !k.is_empty())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
            content_type: String::new(),
            accept: String::new(),
            body: Bytes::new(),
        }
    }

    #[test]
    fn kube_watch_queries_parse() {
        let o = parse(View::Node, &req("&watch=true&timeoutSeconds=290&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0")).unwrap();
        assert!(o.watch && o.allow_bookmarks);
        assert_eq!(o.send_initial_events, Some(true));
        assert_eq!(o.timeout_seconds, Some(290));
        let o = parse(View::Node, &req("&labelSelector=a+in+%28b%2Cc%29&limit=2")).unwrap();
        assert_eq!(o.limit, Some(2));
    }

    #[test]
    fn invalid_combinations_are_422() {
        for q in [
            "watch=true&sendInitialEvents=true",
            "watch=true&resourceVersionMatch=NotOlderThan",
            "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0",
            "resourceVersionMatch=Exact",
            "resourceVersionMatch=Exact&resourceVersion=0",
            "resourceVersionMatch=Sometimes&resourceVersion=1",
        ] {
            let e = parse(View::Node, &req(q)).unwrap_err();
            assert_eq!(e.code, 422, "{q}");
            assert!(
                e.message
                    .starts_with("ListOptions.meta.k8s.io \"\" is invalid: "),
                "{}",
                e.message
            );
        }
        for q in [
            "limit=x",
            "watch=maybe",
            "resourceVersion=abc",
            "fieldSelector=spec.x=1",
            "labelSelector=a+in+b",
        ] {
            assert_eq!(parse(View::Node, &req(q)).unwrap_err().code, 400, "{q}");
        }
    }
}
