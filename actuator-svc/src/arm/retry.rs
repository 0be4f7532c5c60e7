//! Which ARM failures are worth retrying, and the capped exponential backoff with jitter used
//! between attempts. Pure.

use std::time::Duration;

/// True for failures that a later identical request can fix: throttling (429, including NRP's
/// `RetryableErrorDueToAnotherOperation` lock), timeouts (408), server errors (5xx) and
/// operations canceled because another write superseded them.
pub fn is_retryable(status: u16, code: &str, details: &[String]) -> bool {
    let code_says = |c: &str| {
        let c = c.to_ascii_lowercase();
        c.contains("retryable")
            || c == "canceled"
            || c.contains("canceledandsupersededduetoanotheroperation")
            || c == "referencedresourcenotprovisioned"
    };
    matches!(status, 408 | 429)
        || (500..=599).contains(&status)
        || code_says(code)
        || details.iter().any(|d| code_says(d))
}

/// Capped exponential backoff with jitter. Time-free: the caller sleeps.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    attempt: u32,
}

impl Backoff {
    /// Starts at `base`, doubles per attempt, never above `cap`.
    pub fn new(base: Duration, cap: Duration) -> Self {
        Self {
            base,
            cap,
            attempt: 0,
        }
    }

    /// The next delay; `jitter` in `[0, 1]` picks a point in the upper half of the step, so
    /// replicas that failed together do not retry together.
    pub fn next_delay(&mut self, jitter: f64) -> Duration {
        let factor = 2f64.powi(self.attempt.min(30) as i32);
        self.attempt = self.attempt.saturating_add(1);
        let step = (self.base.as_secs_f64() * factor).min(self.cap.as_secs_f64());
        Duration::from_secs_f64(step * (0.5 + 0.5 * jitter.clamp(0.0, 1.0)))
    }

    /// Attempts made since the last reset.
    pub fn attempts(&self) -> u32 {
        self.attempt
    }

    /// Back to the first step after a success.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification() {
        assert!(is_retryable(
            429,
            "RetryableError",
            &["RetryableErrorDueToAnotherOperation".into()]
        ));
        assert!(is_retryable(429, "SubscriptionRequestsThrottled", &[]));
        assert!(is_retryable(503, "", &[]));
        assert!(is_retryable(408, "", &[]));
        assert!(is_retryable(
            200,
            "Canceled",
            &["CanceledAndSupersededDueToAnotherOperation".into()]
        ));
        assert!(!is_retryable(400, "InvalidRequestFormat", &[]));
        assert!(!is_retryable(403, "AuthorizationFailed", &[]));
        assert!(!is_retryable(404, "NotFound", &[]));
        assert!(!is_retryable(412, "PreconditionFailed", &[]));
    }

    #[test]
    fn backoff_doubles_to_the_cap_with_jitter_in_the_upper_half() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        assert_eq!(b.next_delay(1.0), Duration::from_millis(100));
        assert_eq!(b.next_delay(1.0), Duration::from_millis(200));
        assert_eq!(b.next_delay(0.0), Duration::from_millis(200));
        for _ in 0..40 {
            let d = b.next_delay(1.0);
            assert!(d <= Duration::from_secs(1));
        }
        assert_eq!(b.next_delay(0.0), Duration::from_millis(500));
        b.reset();
        assert_eq!(b.next_delay(1.0), Duration::from_millis(100));
    }
}
