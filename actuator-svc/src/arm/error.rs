//! ARM call errors, with what the writer needs to decide: retry or not, and after how long.

use std::time::Duration;

/// A failed ARM call or operation, naming what failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ArmError {
    #[error("{op} {resource}: HTTP {status} {code}: {message}")]
    Http {
        op: &'static str,
        resource: String,
        status: u16,
        code: String,
        message: String,
        /// `error.details[].code`.
        details: Vec<String>,
        retry_after: Option<Duration>,
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
        }
    }
}
