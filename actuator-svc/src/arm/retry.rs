//! Which ARM failures are worth retrying, and how long to wait: `Retry-After`, else the capped
//! exponential backoff with jitter (`cutover_runtime::backoff`). Pure.

use std::time::Duration;

/// The backoff between attempts (moved to `cutover_runtime`; named here for the writer).
pub use cutover_runtime::backoff::Backoff;

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

/// True for a 429 about one resource rather than the subscription's request budget: NRP's
/// `RetryableError` family (contracts/arm.md 3.3), whose details say another operation holds
/// the resource's lock (`RetryableErrorDueToAnotherOperation`, or `AnotherOperationInProgress`)
/// or a resource it references is not provisioned (`ReferencedResourceNotProvisioned`). Its
/// `Retry-After` binds writes of that resource only. ARM's subscription throttle is
/// `SubscriptionRequestsThrottled` (or another code) and binds every request of its class.
pub fn is_resource_scoped(code: &str, details: &[String]) -> bool {
    let scoped = |c: &str| {
        c.eq_ignore_ascii_case("RetryableError")
            || c.eq_ignore_ascii_case("RetryableErrorDueToAnotherOperation")
            || c.eq_ignore_ascii_case("AnotherOperationInProgress")
            || c.eq_ignore_ascii_case("ReferencedResourceNotProvisioned")
    };
    scoped(code) || details.iter().any(|d| scoped(d))
}

/// Lock conflicts one logical write meets before its nodes are told FAILED (will retry) and
/// the writer backs off: each waits out ARM's `Retry-After`, so with NRP's ~10 s hints this
/// is about a minute of a lock the LB's own state does not show.
pub const MAX_LOCK_CONFLICTS: u32 = 5;
/// 412s in a row one logical write meets before the same: another writer changing the LB
/// between each of our reads and writes is a fight, not a race.
pub const MAX_STALE: u32 = 5;

/// What a logical write does after a refusal it may retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Read again and write again.
    Again,
    /// Report FAILED (will retry) and back off.
    GiveUp,
}

/// Counts the refusals of one logical write (one writer round) that are retried at once:
/// lock conflicts and stale etags. Without a bound, each was a GET+PUT loop with no end.
#[derive(Debug, Clone, Default)]
pub struct Attempts {
    lock: u32,
    stale: u32,
}

impl Attempts {
    /// A lock conflict (429 `RetryableErrorDueToAnotherOperation`).
    pub fn lock_conflict(&mut self) -> Next {
        self.lock += 1;
        if self.lock >= MAX_LOCK_CONFLICTS {
            Next::GiveUp
        } else {
            Next::Again
        }
    }

    /// A 412: our etag is stale.
    pub fn stale(&mut self) -> Next {
        self.stale += 1;
        if self.stale >= MAX_STALE {
            Next::GiveUp
        } else {
            Next::Again
        }
    }

    /// A write went through: a later refusal starts a new count.
    pub fn reset(&mut self) {
        *self = Self::default();
    }
}

/// The longest `Retry-After` honoured. ARM's throttling windows are at most an hour; a larger
/// value (or a date years ahead) is a broken proxy, and an unbounded one would overflow the
/// instant the budget blocks until.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// Parses the retry hints of an answer: `retry-after-ms` or `x-ms-retry-after-ms` (first that
/// parses), else `Retry-After` as seconds or as an HTTP date relative to `now`. Capped at
/// [`MAX_RETRY_AFTER`]; `None` when nothing parses.
pub fn parse_retry_after(
    millis: &[Option<&str>],
    retry_after: Option<&str>,
    now: time::OffsetDateTime,
) -> Option<Duration> {
    let capped = |d: Duration| d.min(MAX_RETRY_AFTER);
    if let Some(ms) = millis
        .iter()
        .flatten()
        .find_map(|v| v.trim().parse::<u64>().ok())
    {
        return Some(capped(Duration::from_millis(ms)));
    }
    let v = retry_after?.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(capped(Duration::from_secs(secs)));
    }
    let when =
        time::OffsetDateTime::parse(v, &time::format_description::well_known::Rfc2822).ok()?;
    let ahead = (when - now).clamp(
        time::Duration::ZERO,
        time::Duration::try_from(MAX_RETRY_AFTER).ok()?,
    );
    Duration::try_from(ahead).ok()
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
    fn resource_scoped_refusals_are_told_from_subscription_throttles() {
        let d = |c: &str| vec![c.to_string()];
        assert!(is_resource_scoped(
            "RetryableError",
            &d("ReferencedResourceNotProvisioned")
        ));
        assert!(is_resource_scoped(
            "RetryableError",
            &d("RetryableErrorDueToAnotherOperation")
        ));
        assert!(is_resource_scoped("AnotherOperationInProgress", &[]));
        assert!(!is_resource_scoped("SubscriptionRequestsThrottled", &[]));
        assert!(!is_resource_scoped("", &[]));
    }

    #[test]
    fn lock_conflicts_and_stale_etags_are_bounded_per_logical_write() {
        let mut a = Attempts::default();
        for _ in 1..MAX_LOCK_CONFLICTS {
            assert_eq!(a.lock_conflict(), Next::Again);
        }
        assert_eq!(a.lock_conflict(), Next::GiveUp);
        for _ in 1..MAX_STALE {
            assert_eq!(a.stale(), Next::Again);
        }
        assert_eq!(a.stale(), Next::GiveUp);
        a.reset();
        assert_eq!(a.lock_conflict(), Next::Again);
        assert_eq!(a.stale(), Next::Again);
    }

    fn at(s: &str) -> time::OffsetDateTime {
        time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).unwrap()
    }

    #[test]
    fn retry_after_seconds_milliseconds_and_http_dates() {
        let now = at("1994-11-06T08:49:00Z");
        assert_eq!(
            parse_retry_after(&[], Some(" 7 "), now),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            parse_retry_after(&[None, Some("250")], Some("7"), now),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            parse_retry_after(&[Some("x")], Some("7"), now),
            Some(Duration::from_secs(7))
        );
        // RFC 9110 IMF-fixdate, and a date in the past (retry now).
        assert_eq!(
            parse_retry_after(&[], Some("Sun, 06 Nov 1994 08:49:37 GMT"), now),
            Some(Duration::from_secs(37))
        );
        assert_eq!(
            parse_retry_after(&[], Some("Sun, 06 Nov 1994 08:48:00 GMT"), now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after(&[], Some("soon"), now), None);
        assert_eq!(parse_retry_after(&[], Some("-1"), now), None);
        assert_eq!(parse_retry_after(&[], None, now), None);
    }

    /// Huge values are capped: the budget adds them to an instant, which must not overflow.
    #[test]
    fn retry_after_is_capped() {
        let now = at("2026-01-01T00:00:00Z");
        for (ms, v) in [
            (None, Some("18446744073709551615")),
            (Some("18446744073709551615"), None),
            (None, Some("Fri, 31 Dec 9999 23:59:59 GMT")),
        ] {
            assert_eq!(
                parse_retry_after(&[ms], v, now),
                Some(MAX_RETRY_AFTER),
                "{ms:?} {v:?}"
            );
        }
    }

    /// Any header text: `None` or a delay within the cap, never a panic.
    #[test]
    fn any_header_text_gives_a_bounded_delay() {
        fn prop(ms: Option<String>, v: Option<String>, secs: i64) -> bool {
            let now = time::OffsetDateTime::from_unix_timestamp(secs.rem_euclid(253_402_300_799))
                .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
            let date = v
                .as_deref()
                .map(|v| format!("Sun, 06 Nov 1994 08:49:37 {v}"));
            [v.as_deref(), date.as_deref()].iter().all(|v| {
                parse_retry_after(&[ms.as_deref()], *v, now).is_none_or(|d| d <= MAX_RETRY_AFTER)
            })
        }
        quickcheck::QuickCheck::new()
            .tests(300)
            .quickcheck(prop as fn(Option<String>, Option<String>, i64) -> bool);
    }
}
