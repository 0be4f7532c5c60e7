//! ARM call errors, with what the writer needs to decide: retry or not, and after how long.

use serde_json::Value;
use std::time::Duration;

/// The ids Azure support traces a call by (azure-production.md 5): ours
/// (`x-ms-client-request-id`) and ARM's, from its answer (`x-ms-request-id`,
/// `x-ms-correlation-request-id`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trace {
    pub client_request_id: String,
    pub request_id: Option<String>,
    pub correlation_id: Option<String>,
}

/// Longest id kept from an answer (ARM's are GUIDs; anything longer is not one of them).
const MAX_ID: usize = 64;

impl Trace {
    /// The ids of an answer to the call `client_request_id`.
    pub fn of(client_request_id: &str, headers: &http::HeaderMap) -> Self {
        let id = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(|v| cut(v.trim(), MAX_ID))
                .filter(|v| !v.is_empty())
        };
        Self {
            client_request_id: client_request_id.to_string(),
            request_id: id("x-ms-request-id"),
            correlation_id: id("x-ms-correlation-request-id"),
        }
    }
}

impl std::fmt::Display for Trace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let none = "-";
        write!(
            f,
            "x-ms-request-id {}, x-ms-correlation-request-id {}, x-ms-client-request-id {}",
            self.request_id.as_deref().unwrap_or(none),
            self.correlation_id.as_deref().unwrap_or(none),
            if self.client_request_id.is_empty() {
                none
            } else {
                &self.client_request_id
            }
        )
    }
}

/// A failed ARM call or operation, naming what failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ArmError {
    #[error("{op} {resource}: HTTP {status} {code}: {message} ({trace})")]
    Http {
        op: &'static str,
        resource: String,
        status: u16,
        code: String,
        message: String,
        /// `error.details[].code`.
        details: Vec<String>,
        retry_after: Option<Duration>,
        /// Our request id and ARM's, for a support case.
        trace: Trace,
    },
    /// Refused locally: the bearer token goes only to the configured ARM endpoint, over
    /// https (plain http only when that endpoint is on loopback: a simulator or a local
    /// sidecar). A URL from an answer (`Azure-AsyncOperation`, `Location`, `nextLink`)
    /// naming another scheme, host or port is never sent a request.
    #[error("{op}: refused to send the ARM token to {url}: {why}")]
    UntrustedUrl {
        op: &'static str,
        /// Scheme, host, port and path only (a query may carry signatures).
        url: String,
        why: String,
    },
    #[error("{op} {resource}: {message}")]
    Transport {
        op: &'static str,
        resource: String,
        message: String,
    },
    #[error("{op} {resource}: no answer within {timeout:?}")]
    Timeout {
        op: &'static str,
        resource: String,
        timeout: Duration,
    },
    #[error("cannot get an Azure AD token: {0}")]
    Token(String),
    #[error("{op} {resource}: unexpected response: {message}")]
    Decode {
        op: &'static str,
        resource: String,
        message: String,
    },
    /// Refused locally: even without read-only fields the body exceeds ARM's request limit,
    /// which ARM would answer with 413 `RequestContentTooLarge` (contracts/arm.md section 9).
    #[error(
        "{op} {resource}: the request body is {size} bytes even without read-only fields, over ARM's 4 MB request limit ({limit} bytes); not sent (split the load balancer's pools over several load balancers)"
    )]
    TooLarge {
        op: &'static str,
        resource: String,
        size: usize,
        limit: usize,
    },
    #[error("operation on {resource} ended {status}: {code}: {message}")]
    Operation {
        resource: String,
        status: String,
        code: String,
        message: String,
        details: Vec<String>,
    },
}

impl ArmError {
    /// True when the same request may succeed later.
    pub fn retryable(&self) -> bool {
        match self {
            ArmError::Http {
                status,
                code,
                details,
                ..
            } => super::retry::is_retryable(*status, code, details),
            ArmError::Transport { .. } | ArmError::Timeout { .. } | ArmError::Token(_) => true,
            ArmError::Decode { .. } => false,
            // The same URL is as untrusted next time.
            ArmError::UntrustedUrl { .. } => false,
            // The same body is as large next time.
            ArmError::TooLarge { .. } => false,
            // A failed or canceled operation changed nothing and the desired state still
            // stands, so the write is repeated (with backoff).
            ArmError::Operation { .. } => true,
        }
    }

    /// The server's `Retry-After`, if it sent one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ArmError::Http { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// HTTP status, 0 when there was none.
    pub fn status(&self) -> u16 {
        match self {
            ArmError::Http { status, .. } => *status,
            _ => 0,
        }
    }

    /// True for `412 Precondition Failed` (our etag is stale).
    pub fn is_precondition_failed(&self) -> bool {
        self.status() == 412
    }

    /// True when another operation holds the load balancer's lock (NRP answers 429
    /// `RetryableErrorDueToAnotherOperation`; some paths answer 409
    /// `AnotherOperationInProgress`). Its end is seen by reading the LB, not by waiting out
    /// `Retry-After`.
    pub fn is_lock_conflict(&self) -> bool {
        let ArmError::Http {
            status,
            code,
            details,
            ..
        } = self
        else {
            return false;
        };
        let lock = |c: &str| {
            c.eq_ignore_ascii_case("RetryableErrorDueToAnotherOperation")
                || c.eq_ignore_ascii_case("AnotherOperationInProgress")
        };
        matches!(status, 409 | 429) && (lock(code) || details.iter().any(|d| lock(d)))
    }

    /// True for 404.
    pub fn is_not_found(&self) -> bool {
        self.status() == 404
    }

    /// The ARM error code (for results and logs).
    pub fn code(&self) -> &str {
        match self {
            ArmError::Http { code, .. } | ArmError::Operation { code, .. } => code,
            ArmError::Transport { .. } => "Transport",
            ArmError::Timeout { .. } => "Timeout",
            ArmError::Token(_) => "Token",
            ArmError::Decode { .. } => "Decode",
            ArmError::TooLarge { .. } => "RequestContentTooLarge",
            ArmError::UntrustedUrl { .. } => "UntrustedUrl",
        }
    }

    /// ARM's ids of the answer, when there was one.
    pub fn trace(&self) -> Option<&Trace> {
        match self {
            ArmError::Http { trace, .. } => Some(trace),
            _ => None,
        }
    }

    /// A short reason for a FAILED result (and the Node event built from it): what failed,
    /// ARM's code, the start of its message and the ids support needs. The full error goes
    /// to the log.
    pub fn reason(&self) -> String {
        match self {
            ArmError::Http {
                op,
                resource,
                status,
                code,
                message,
                details,
                trace,
                ..
            } => {
                // NRP's top-level code is generic (`RetryableError`); the first detail says why.
                let code = match details.first() {
                    Some(d) => format!("{code}/{d}"),
                    None => code.clone(),
                };
                format!(
                    "{op} {}: HTTP {status} {code}: {} ({trace})",
                    short_resource(resource),
                    cut(message, MAX_REASON_MESSAGE)
                )
            }
            other => cut(&other.to_string(), 2 * MAX_REASON_MESSAGE),
        }
    }
}

/// Longest ARM message kept in a FAILED reason.
const MAX_REASON_MESSAGE: usize = 200;

/// `.../loadBalancers/{lb}[/...]` as `{lb}[/...]`; other paths unchanged.
fn short_resource(resource: &str) -> &str {
    let lower = resource.to_ascii_lowercase();
    match lower.find("/loadbalancers/") {
        Some(i) => &resource[i + "/loadbalancers/".len()..],
        None => resource,
    }
}

/// Longest ARM error message kept (in results, logs and Node events); ARM's own are a few
/// hundred bytes, a proxy's HTML error page is not.
pub const MAX_ERROR_MESSAGE: usize = 1024;
/// Longest error code kept.
pub const MAX_ERROR_CODE: usize = 128;
/// Detail codes kept.
pub const MAX_ERROR_DETAILS: usize = 16;

/// The `error` of an ARM error body or of a failed operation body, bounded. Bodies that are
/// not JSON, or not shaped like an ARM error, give empty fields: the HTTP status still says
/// what happened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CloudError {
    pub code: String,
    /// The message, with the first detail's message in parentheses when there is one.
    pub message: String,
    /// `error.details[].code`.
    pub details: Vec<String>,
}

/// `text` cut to at most `max` bytes on a character boundary, marked when cut.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

impl CloudError {
    /// Parses an error body (`{"error": {...}}`, or the bare error object).
    pub fn parse(body: &[u8]) -> Self {
        let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        Self::from_value(&v)
    }

    fn from_value(v: &Value) -> Self {
        let err = v.get("error").filter(|e| e.is_object()).unwrap_or(v);
        let s =
            |k: &str, max: usize| cut(err.get(k).and_then(Value::as_str).unwrap_or_default(), max);
        let details = err
            .get("details")
            .and_then(Value::as_array)
            .map(|d| {
                d.iter()
                    .filter_map(|x| x.get("code").and_then(Value::as_str))
                    .take(MAX_ERROR_DETAILS)
                    .map(|c| cut(c, MAX_ERROR_CODE))
                    .collect()
            })
            .unwrap_or_default();
        let mut message = s("message", MAX_ERROR_MESSAGE);
        if let Some(first) = err.pointer("/details/0/message").and_then(Value::as_str) {
            message = format!("{message} ({})", cut(first, MAX_ERROR_MESSAGE));
        }
        Self {
            code: s("code", MAX_ERROR_CODE),
            message,
            details,
        }
    }
}

/// Where an `Azure-AsyncOperation` body says the operation is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperationStatus {
    /// `InProgress`, or any status we do not know (keep polling; the deadline bounds it).
    InProgress,
    Succeeded,
    /// `Failed` or `Canceled`, with the status as sent and the error.
    Ended {
        status: String,
        error: CloudError,
    },
}

/// Parses an `Azure-AsyncOperation` body; a body that is not JSON is an error.
pub fn parse_operation(body: &[u8]) -> Result<OperationStatus, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let status = v.get("status").and_then(Value::as_str).unwrap_or_default();
    Ok(match status.to_ascii_lowercase().as_str() {
        "succeeded" => OperationStatus::Succeeded,
        "failed" | "canceled" | "cancelled" => OperationStatus::Ended {
            status: cut(status, MAX_ERROR_CODE),
            error: CloudError::from_value(&v),
        },
        _ => OperationStatus::InProgress,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::QuickCheck;

    #[test]
    fn operation_bodies() {
        assert_eq!(
            parse_operation(br#"{"status":"InProgress"}"#),
            Ok(OperationStatus::InProgress)
        );
        assert_eq!(
            parse_operation(br#"{"status":"Succeeded"}"#),
            Ok(OperationStatus::Succeeded)
        );
        let failed = br#"{"status":"Canceled","error":{"code":"Canceled","message":"m","details":[{"code":"CanceledAndSupersededDueToAnotherOperation","message":"by op 2"}]}}"#;
        let Ok(OperationStatus::Ended { status, error }) = parse_operation(failed) else {
            panic!()
        };
        assert_eq!(status, "Canceled");
        assert_eq!(
            error.details,
            vec!["CanceledAndSupersededDueToAnotherOperation"]
        );
        assert_eq!(error.message, "m (by op 2)");
        assert!(parse_operation(b"<html>").is_err());
        assert_eq!(parse_operation(b"[]"), Ok(OperationStatus::InProgress));
    }

    #[test]
    fn huge_error_bodies_are_bounded() {
        let body = serde_json::json!({"error": {
            "code": "c".repeat(10_000),
            "message": "é".repeat(100_000),
            "details": vec![serde_json::json!({"code": "d", "message": "x".repeat(50_000)}); 1000],
        }});
        let e = CloudError::parse(body.to_string().as_bytes());
        assert!(e.code.len() <= MAX_ERROR_CODE + 3);
        assert!(e.message.len() <= 2 * MAX_ERROR_MESSAGE + 10);
        assert_eq!(e.details.len(), MAX_ERROR_DETAILS);
    }

    /// Any bytes: a bounded error, never a panic.
    #[test]
    fn any_body_parses_to_a_bounded_error() {
        fn prop(body: Vec<u8>, text: String) -> bool {
            let wrapped = serde_json::json!({"status": "Failed", "error": {"code": text, "message": text, "details": [{"code": text, "message": text}]}});
            let a = CloudError::parse(&body);
            let _ = parse_operation(&body);
            let b = CloudError::parse(wrapped.to_string().as_bytes());
            let ok = |e: &CloudError| {
                e.code.len() <= MAX_ERROR_CODE + 3 && e.message.len() <= 2 * MAX_ERROR_MESSAGE + 10
            };
            ok(&a)
                && ok(&b)
                && matches!(
                    parse_operation(wrapped.to_string().as_bytes()),
                    Ok(OperationStatus::Ended { .. })
                )
        }
        QuickCheck::new()
            .tests(300)
            .quickcheck(prop as fn(Vec<u8>, String) -> bool);
    }
}
