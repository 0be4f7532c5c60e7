//! Seeing an operation end at once: read the load balancer's own `provisioningState` (an
//! ordinary read) instead of polling the operation URL, which ARM asks clients to poll no
//! faster than its `Retry-After` (NRP answers Standard LB writes with about 10 s). The read
//! that sees `Succeeded` is the base of the next write.
//!
//! Pacing ([`PollPace`], pure): reads start shortly before the operation is expected to end
//! (learned from the last operations on this LB), then every `base` interval. When the read
//! budget runs low, every LB in flight slows down to an even share of the sustained read rate.

use std::collections::VecDeque;
use std::time::Duration;

/// How often to read an LB while its operation runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PollPace {
    /// The interval while the read budget has room.
    pub base: Duration,
    /// Share of the sustained read rate completion reads may use when the bucket runs low.
    pub share: f64,
}

impl Default for PollPace {
    fn default() -> Self {
        Self {
            base: Duration::from_millis(150),
            share: 0.5,
        }
    }
}

impl PollPace {
    /// The interval between reads with `in_flight` LBs being watched, the read bucket
    /// `fill` (0..=1) and its sustained `rate` per second.
    pub fn step(&self, in_flight: usize, fill: f64, rate: f64) -> Duration {
        if fill > 0.5 || rate <= 0.0 {
            return self.base;
        }
        let even = Duration::from_secs_f64(in_flight.max(1) as f64 / (rate * self.share));
        self.base.max(even)
    }

    /// The wait before the next read, `elapsed` after the PUT was accepted: no read before
    /// 80 % of the shortest recent operation (it would only say `Updating`), then `step`.
    pub fn next(&self, elapsed: Duration, expected: Option<Duration>, step: Duration) -> Duration {
        if let Some(expected) = expected {
            let early = expected.mul_f64(0.8);
            if elapsed + step < early {
                return early - elapsed;
            }
        }
        step
    }
}

/// The durations of the last operations on one LB.
#[derive(Debug, Clone, Default)]
pub struct Durations(VecDeque<Duration>);

impl Durations {
    const KEEP: usize = 5;

    pub fn record(&mut self, d: Duration) {
        if self.0.len() == Self::KEEP {
            self.0.pop_front();
        }
        self.0.push_back(d);
    }

    /// The shortest recent operation: reads start before it would end.
    pub fn expected(&self) -> Option<Duration> {
        self.0.iter().min().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn reads_wait_for_the_expected_end_then_follow_the_base_interval() {
        let p = PollPace::default();
        let step = p.step(1, 1.0, 6.0);
        assert_eq!(step, ms(150));
        // Unknown duration: read at the base interval from the start.
        assert_eq!(p.next(ms(0), None, step), ms(150));
        // 2 s operations: first read at 1.6 s, then every 150 ms.
        assert_eq!(p.next(ms(0), Some(ms(2000)), step), ms(1600));
        assert_eq!(p.next(ms(1600), Some(ms(2000)), step), ms(150));
        assert_eq!(p.next(ms(2500), Some(ms(2000)), step), ms(150));
    }

    #[test]
    fn low_budget_slows_every_lb_evenly() {
        let p = PollPace::default();
        // Room in the bucket: base pace whatever the number in flight.
        assert_eq!(p.step(20, 0.9, 6.0), ms(150));
        // Bucket below half: 3 reads/s shared by 6 LBs = one read per LB every 2 s.
        assert_eq!(p.step(6, 0.2, 6.0), ms(2000));
        assert_eq!(p.step(1, 0.2, 100.0), ms(150));
    }

    #[test]
    fn expected_duration_is_the_shortest_recent() {
        let mut d = Durations::default();
        assert_eq!(d.expected(), None);
        for n in [3000, 2000, 2500, 4000, 5000, 6000] {
            d.record(ms(n));
        }
        // The oldest (3000) fell out; 2000 is still among the last five.
        assert_eq!(d.expected(), Some(ms(2000)));
    }
}
