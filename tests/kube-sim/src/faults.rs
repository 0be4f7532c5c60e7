//! Fault injection and the request log, shared by the library API and the `/_sim/...`
//! control endpoints. Pure state; the server consults it on every Kubernetes request.

use crate::status::ApiError;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Fail the next `count` matching requests with `status` (429, 500, 503, 504, ...). On a
/// named object, 404 and 409 get the real `NotFound` / `Conflict` bodies for that object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FailRule {
    pub status: u16,
    pub count: u32,
    /// Only requests whose path starts with this (e.g. `/api/v1/nodes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_prefix: Option<String>,
    /// Only this HTTP method (`GET`, `PATCH`, ...), or `WATCH` / `LIST` for GETs with and
    /// without `watch=true` on a collection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verb: Option<String>,
    /// `Retry-After` seconds for 429/503 (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<u32>,
}

impl FailRule {
    /// Fails the next `count` requests of any kind with `status`.
    pub fn new(status: u16, count: u32) -> Self {
        FailRule {
            status,
            count,
            path_prefix: None,
            verb: None,
            retry_after_seconds: None,
        }
    }

    pub fn path_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.path_prefix = Some(prefix.into());
        self
    }

    pub fn verb(mut self, verb: impl Into<String>) -> Self {
        self.verb = Some(verb.into());
        self
    }

    fn matches(&self, req: &RequestInfo<'_>) -> bool {
        if self.count == 0 {
            return false;
        }
        if let Some(p) = &self.path_prefix
            && !req.path.starts_with(p.as_str())
        {
            return false;
        }
        match self.verb.as_deref().map(str::to_ascii_uppercase).as_deref() {
            None => true,
            Some("WATCH") => req.watch,
            Some("LIST") => req.method == "GET" && req.collection && !req.watch,
            Some(m) => m == req.method,
        }
    }
}

/// One served Kubernetes request (control requests are not logged).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRecord {
    pub method: String,
    /// Path and query exactly as received, e.g. `/api/v1/nodes?&limit=500`.
    pub path: String,
    pub status: u16,
    /// The request's Content-Type, if any (e.g. which patch flavour a client sent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// The bearer token the caller sent (the simulator authenticates nobody; this only tells
    /// callers apart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
    /// The credential that authenticated it (see `User::credential_id`), with security on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_id: Option<String>,
    /// When it was answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<jiff::Timestamp>,
}

/// What fault matching needs to know about a request.
#[derive(Debug, Clone, Copy)]
pub struct RequestInfo<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub watch: bool,
    pub collection: bool,
}

/// Latency, pending failures and the request log.
#[derive(Debug, Default)]
pub struct Faults {
    latency: Duration,
    rules: Vec<FailRule>,
    log: Vec<RequestRecord>,
}

/// The log keeps at most this many records (oldest dropped first).
const LOG_LIMIT: usize = 100_000;

impl Faults {
    pub fn set_latency(&mut self, latency: Duration) {
        self.latency = latency;
    }

    pub fn latency(&self) -> Duration {
        self.latency
    }

    pub fn add_rule(&mut self, rule: FailRule) {
        self.rules.push(rule);
    }

    pub fn clear_rules(&mut self) {
        self.rules.clear();
    }

    /// The injected error for this request, if a rule still has failures left.
    pub fn take_failure(&mut self, req: &RequestInfo<'_>) -> Option<ApiError> {
        let rule = self.rules.iter_mut().find(|r| r.matches(req))?;
        rule.count -= 1;
        let err = ApiError::injected(rule.status, rule.retry_after_seconds);
        self.rules.retain(|r| r.count > 0);
        Some(err)
    }

    pub fn record(&mut self, record: RequestRecord) {
        if self.log.len() >= LOG_LIMIT {
            self.log.drain(..LOG_LIMIT / 10);
        }
        self.log.push(record);
    }

    pub fn requests(&self) -> Vec<RequestRecord> {
        self.log.clone()
    }

    /// The requests logged from index `from` on, and the index to read from next.
    pub fn requests_since(&self, from: usize) -> (Vec<RequestRecord>, usize) {
        let from = from.min(self.log.len());
        (self.log[from..].to_vec(), self.log.len())
    }

    pub fn clear_requests(&mut self) {
        self.log.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(method: &'a str, path: &'a str, watch: bool) -> RequestInfo<'a> {
        RequestInfo {
            method,
            path,
            watch,
            collection: true,
        }
    }

    #[test]
    fn rules_fire_count_times_for_matching_requests() {
        let mut f = Faults::default();
        f.add_rule(
            FailRule::new(503, 2)
                .path_prefix("/api/v1/nodes")
                .verb("watch"),
        );
        assert!(
            f.take_failure(&req("GET", "/api/v1/nodes", false))
                .is_none()
        );
        assert!(
            f.take_failure(&req("GET", "/api/v1/events", true))
                .is_none()
        );
        let e = f.take_failure(&req("GET", "/api/v1/nodes", true)).unwrap();
        assert_eq!((e.code, e.retry_after), (503, Some(1)));
        assert!(f.take_failure(&req("GET", "/api/v1/nodes", true)).is_some());
        assert!(f.take_failure(&req("GET", "/api/v1/nodes", true)).is_none());
        f.add_rule(FailRule::new(500, 1).verb("PATCH"));
        assert!(f.take_failure(&req("GET", "/x", false)).is_none());
        assert_eq!(
            f.take_failure(&req("PATCH", "/x", false)).unwrap().reason,
            "InternalError"
        );
    }
}
