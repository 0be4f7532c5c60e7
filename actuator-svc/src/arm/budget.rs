//! The ARM request budget: one token bucket for reads and one for writes per subscription,
//! a class-wide gate set by `Retry-After`, and an early brake from the
//! `x-ms-ratelimit-remaining-*` headers. Pure state machine: time is passed in.
//!
//! One [`Budget`] is shared by every ARM call of the process (never cloned per client: cloned
//! limiter state would silently multiply the limit).

use std::time::Duration;
use tokio::time::Instant;

/// The ARM throttling class of a request (`GET`/`HEAD` read, everything else write).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    Read,
    Write,
}

impl Class {
    /// Metric label.
    pub fn label(self) -> &'static str {
        match self {
            Class::Read => "read",
            Class::Write => "write",
        }
    }
}

/// A classic token bucket.
#[derive(Debug, Clone)]
pub struct Bucket {
    capacity: f64,
    refill_per_sec: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    /// A full bucket.
    pub fn new(capacity: u32, refill_per_sec: f64, now: Instant) -> Self {
        let capacity = f64::from(capacity.max(1));
        Self {
            capacity,
            refill_per_sec: refill_per_sec.max(0.001),
            tokens: capacity,
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + dt * self.refill_per_sec).min(self.capacity);
        self.last = now;
    }

    /// The share of the bucket that is full now (0..=1).
    pub fn fill(&mut self, now: Instant) -> f64 {
        self.refill(now);
        self.tokens / self.capacity
    }

    /// Sustained rate.
    pub fn rate(&self) -> f64 {
        self.refill_per_sec
    }

    /// Takes a token, or says how long until one is available.
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                (1.0 - self.tokens) / self.refill_per_sec,
            ))
        }
    }
}

/// Limits for one class.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub bucket: u32,
    pub qps: f64,
}

#[derive(Debug, Clone)]
struct ClassState {
    bucket: Bucket,
    blocked_until: Option<Instant>,
    /// ARM's own refill rate for this class, to turn a remaining-quota deficit into a pause.
    arm_refill: f64,
    low_watermark: u64,
}

impl ClassState {
    fn block_until(&mut self, until: Instant) {
        if self.blocked_until.is_none_or(|b| b < until) {
            self.blocked_until = Some(until);
        }
    }
}

/// What the budget decided for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Go,
    /// Wait this long, then ask again.
    Wait(Duration),
}

/// The shared read and write budgets of one subscription.
#[derive(Debug, Clone)]
pub struct Budget {
    read: ClassState,
    write: ClassState,
}

/// Default limits when `azure.json` configures none: about a quarter of ARM's per-principal
/// buckets (reads 250 refilled 25/s, writes 200 refilled 10/s), leaving room for
/// cloud-provider-azure and other controllers that share the subscription.
pub const DEFAULT_READ: Limits = Limits {
    bucket: 60,
    qps: 6.0,
};
/// See [`DEFAULT_READ`].
pub const DEFAULT_WRITE: Limits = Limits {
    bucket: 50,
    qps: 2.5,
};

impl Budget {
    /// A budget with full buckets.
    pub fn new(read: Limits, write: Limits, now: Instant) -> Self {
        Self {
            read: ClassState {
                bucket: Bucket::new(read.bucket, read.qps, now),
                blocked_until: None,
                arm_refill: 25.0,
                low_watermark: 50,
            },
            write: ClassState {
                bucket: Bucket::new(write.bucket, write.qps, now),
                blocked_until: None,
                arm_refill: 10.0,
                low_watermark: 20,
            },
        }
    }

    fn class(&mut self, class: Class) -> &mut ClassState {
        match class {
            Class::Read => &mut self.read,
            Class::Write => &mut self.write,
        }
    }

    /// Asks for one request of `class` at `now`.
    pub fn acquire(&mut self, class: Class, now: Instant) -> Verdict {
        let state = self.class(class);
        if let Some(until) = state.blocked_until {
            if until > now {
                return Verdict::Wait(until - now);
            }
            state.blocked_until = None;
        }
        match state.bucket.take(now) {
            Ok(()) => Verdict::Go,
            Err(wait) => Verdict::Wait(wait),
        }
    }

    /// How full the bucket of `class` is (0..=1) and its sustained rate, for callers that
    /// pace optional requests (completion reads) to the budget.
    pub fn headroom(&mut self, class: Class, now: Instant) -> (f64, f64) {
        let state = self.class(class);
        (state.bucket.fill(now), state.bucket.rate())
    }

    /// ARM answered 429 with `Retry-After`: nothing of this class goes out before it passes.
    pub fn on_throttled(&mut self, class: Class, retry_after: Duration, now: Instant) {
        self.class(class).block_until(now + retry_after);
    }

    /// A `x-ms-ratelimit-remaining-*` value: below the low watermark, pause the class long
    /// enough for ARM to refill the deficit, so we slow down before ARM throttles us.
    pub fn on_remaining(&mut self, class: Class, remaining: u64, now: Instant) -> bool {
        let state = self.class(class);
        if remaining >= state.low_watermark {
            return false;
        }
        let deficit = (state.low_watermark - remaining) as f64;
        let pause = Duration::from_secs_f64(deficit / state.arm_refill);
        state.block_until(now + pause);
        true
    }
}

/// The share of the read budget that tool-initiated reads (fresh `GetNodeAdminState`, the
/// negative cache's pool refresh) may use, so the cutover stream keeps priority: a tool read
/// needs a token of its own, smaller bucket (a fifth of the shared rate and burst) *and* the
/// shared read bucket at least half full. Tools therefore never spend the half of the burst
/// the writers rely on for a mass cutover, and when the writers drain the bucket, tool reads
/// wait (or are refused) while stream reads keep going. Chosen over a priority queue inside
/// the client because it needs no change to how the writers call ARM, and stays pure.
#[derive(Debug, Clone)]
pub struct ToolShare {
    own: Bucket,
    shared_capacity: f64,
    reserve: f64,
}

impl ToolShare {
    /// Below this fill of the shared read bucket, tool reads wait.
    pub const RESERVE: f64 = 0.5;

    /// The tool share of the shared read limits `read`.
    pub fn new(read: Limits, now: Instant) -> Self {
        Self {
            own: Bucket::new((read.bucket / 5).max(1), read.qps / 5.0, now),
            shared_capacity: f64::from(read.bucket.max(1)),
            reserve: Self::RESERVE,
        }
    }

    /// Asks for one tool read, given the shared read bucket's `fill` (0..=1) and sustained
    /// `rate`. The token of the shared bucket itself is taken by the request as usual.
    pub fn acquire(&mut self, fill: f64, rate: f64, now: Instant) -> Verdict {
        if fill < self.reserve {
            let missing = (self.reserve - fill) * self.shared_capacity;
            return Verdict::Wait(Duration::from_secs_f64(missing / rate.max(0.001)));
        }
        match self.own.take(now) {
            Ok(()) => Verdict::Go,
            Err(wait) => Verdict::Wait(wait),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mk(now: Instant) -> Budget {
        Budget::new(
            Limits {
                bucket: 2,
                qps: 1.0,
            },
            Limits {
                bucket: 1,
                qps: 0.5,
            },
            now,
        )
    }

    #[test]
    fn bucket_grants_burst_then_paces() {
        let t0 = Instant::now();
        let mut b = mk(t0);
        assert_eq!(b.acquire(Class::Read, t0), Verdict::Go);
        assert_eq!(b.acquire(Class::Read, t0), Verdict::Go);
        assert_eq!(
            b.acquire(Class::Read, t0),
            Verdict::Wait(Duration::from_secs(1))
        );
        assert_eq!(
            b.acquire(Class::Read, t0 + Duration::from_secs(1)),
            Verdict::Go
        );
        // Writes have their own bucket.
        assert_eq!(b.acquire(Class::Write, t0), Verdict::Go);
        assert_eq!(
            b.acquire(Class::Write, t0),
            Verdict::Wait(Duration::from_secs(2))
        );
    }

    #[test]
    fn retry_after_blocks_the_whole_class_only() {
        let t0 = Instant::now();
        let mut b = mk(t0);
        b.on_throttled(Class::Write, Duration::from_secs(7), t0);
        assert_eq!(
            b.acquire(Class::Write, t0 + Duration::from_secs(2)),
            Verdict::Wait(Duration::from_secs(5))
        );
        assert_eq!(b.acquire(Class::Read, t0), Verdict::Go);
        // A shorter Retry-After never shortens a longer block.
        b.on_throttled(Class::Write, Duration::from_secs(1), t0);
        assert_eq!(
            b.acquire(Class::Write, t0 + Duration::from_secs(6)),
            Verdict::Wait(Duration::from_secs(1))
        );
        assert_eq!(
            b.acquire(Class::Write, t0 + Duration::from_secs(7)),
            Verdict::Go
        );
    }

    #[test]
    fn low_remaining_quota_slows_down_before_arm_throttles() {
        let t0 = Instant::now();
        let mut b = mk(t0);
        assert!(!b.on_remaining(Class::Write, 150, t0));
        assert_eq!(b.acquire(Class::Write, t0), Verdict::Go);
        assert!(b.on_remaining(Class::Write, 10, t0));
        // 10 tokens short of the watermark at ARM's 10/s refill: one second.
        assert_eq!(
            b.acquire(Class::Write, t0),
            Verdict::Wait(Duration::from_secs(1))
        );
    }

    #[test]
    fn tool_reads_get_a_fifth_and_never_the_reserved_half() {
        let t0 = Instant::now();
        let read = Limits {
            bucket: 60,
            qps: 6.0,
        };
        let mut share = ToolShare::new(read, t0);
        // A full shared bucket: 12 tool reads at once, then 1.2/s.
        for _ in 0..12 {
            assert_eq!(share.acquire(1.0, 6.0, t0), Verdict::Go);
        }
        assert!(matches!(share.acquire(1.0, 6.0, t0), Verdict::Wait(_)));
        let later = t0 + Duration::from_secs(1);
        assert_eq!(share.acquire(0.9, 6.0, later), Verdict::Go);
        // The writers drained the shared bucket to 20 %: tool reads wait until it is half
        // full again, 18 tokens at 6/s = 3 s, whatever their own bucket holds.
        let much_later = t0 + Duration::from_secs(60);
        let Verdict::Wait(wait) = share.acquire(0.2, 6.0, much_later) else {
            panic!("a tool read went out below the reserve");
        };
        assert!((wait.as_secs_f64() - 3.0).abs() < 0.01, "{wait:?}");
    }
}
