//! Capped exponential backoff with jitter, time-free (the caller sleeps).
//!
//! Moved from signal-svc (`core::backoff`, its stream reconnects) and actuator-svc
//! (`arm::retry::Backoff`, ARM retries and the token probe). The two computed the same delays
//! (the step doubles from `base` to `cap`; the delay is the upper half of the step, placed by
//! the jitter), one in `Duration` arithmetic, one in `f64` seconds; this is the `Duration`
//! one, with the actuator's 30 doublings before the step stops growing (signal-svc's 20 never
//! mattered: its caps are reached after 6) and its `attempts`.

use std::time::Duration;

/// Backoff state for one retrying or reconnecting loop.
#[derive(Clone, Debug)]
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

    /// The next delay, given a uniform random number in `[0, 1]`: half fixed, half jittered,
    /// so loops that failed together (replicas, reconnects after a shared outage) spread out
    /// but never hot-loop.
    pub fn next_delay(&mut self, unit_random: f64) -> Duration {
        let exp = self
            .base
            .saturating_mul(1u32.checked_shl(self.attempt.min(30)).unwrap_or(u32::MAX));
        let ceiling = exp.min(self.cap);
        self.attempt = self.attempt.saturating_add(1);
        ceiling / 2 + ceiling.mul_f64(unit_random.clamp(0.0, 1.0) / 2.0)
    }

    /// Attempts made since the last reset.
    pub fn attempts(&self) -> u32 {
        self.attempt
    }

    /// Back to the first delay (after a success, a connection that worked).
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // signal-svc's test, moved.
    #[test]
    fn grows_to_cap_with_jitter_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        assert_eq!(b.next_delay(0.0), Duration::from_millis(50));
        assert_eq!(b.next_delay(0.999_999).as_millis(), 199);
        for _ in 0..30 {
            let d = b.next_delay(1.0);
            assert!(d <= Duration::from_secs(5));
        }
        assert_eq!(b.next_delay(0.0), Duration::from_millis(2500));
        b.reset();
        assert_eq!(b.next_delay(0.0), Duration::from_millis(50));
    }

    // actuator-svc's test, moved.
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
        assert_eq!(b.attempts(), 43);
        assert_eq!(b.next_delay(0.0), Duration::from_millis(500));
        b.reset();
        assert_eq!(b.next_delay(1.0), Duration::from_millis(100));
    }

    /// The two services' formulas, side by side: the same delay to within a microsecond for
    /// every step and jitter the services use.
    #[test]
    fn same_delays_as_the_f64_copy() {
        fn f64_copy(base: Duration, cap: Duration, attempt: u32, jitter: f64) -> Duration {
            let factor = 2f64.powi(attempt.min(30) as i32);
            let step = (base.as_secs_f64() * factor).min(cap.as_secs_f64());
            Duration::from_secs_f64(step * (0.5 + 0.5 * jitter.clamp(0.0, 1.0)))
        }
        let caps = [(200, 10_000), (200, 30_000), (100, 5_000), (100, 1_000)];
        for (base_ms, cap_ms) in caps {
            let (base, cap) = (
                Duration::from_millis(base_ms),
                Duration::from_millis(cap_ms),
            );
            for jitter in [0.0, 0.1, 0.25, 0.5, 0.731, 0.999_999, 1.0] {
                let mut b = Backoff::new(base, cap);
                for attempt in 0..40 {
                    let ours = b.next_delay(jitter);
                    let theirs = f64_copy(base, cap, attempt, jitter);
                    let gap = ours.abs_diff(theirs);
                    assert!(
                        gap < Duration::from_micros(1),
                        "{attempt} {jitter}: {gap:?}"
                    );
                }
            }
        }
    }
}
