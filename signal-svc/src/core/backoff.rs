//! Capped exponential backoff with full jitter, time-free (the caller sleeps).

use std::time::Duration;

/// Backoff state for one reconnecting loop.
#[derive(Clone, Debug)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    attempt: u32,
}

impl Backoff {
    pub fn new(base: Duration, cap: Duration) -> Self {
        Self {
            base,
            cap,
            attempt: 0,
        }
    }

    /// The next delay, given a uniform random number in `[0, 1)`: half fixed, half jittered,
    /// so reconnects after a shared outage spread out but never hot-loop.
    pub fn next_delay(&mut self, unit_random: f64) -> Duration {
        let exp = self
            .base
            .saturating_mul(1u32.checked_shl(self.attempt.min(20)).unwrap_or(u32::MAX));
        let ceiling = exp.min(self.cap);
        self.attempt = self.attempt.saturating_add(1);
        ceiling / 2 + ceiling.mul_f64(unit_random.clamp(0.0, 1.0) / 2.0)
    }

    /// Back to the first delay (after a connection that worked).
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
