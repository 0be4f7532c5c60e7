//! Seeing an operation end at once: read the load balancer's own `provisioningState` (an
//! ordinary read) instead of polling the operation URL, which ARM asks clients to poll no
//! faster than its `Retry-After` (NRP answers Standard LB writes with about 10 s). The read
//! that sees `Succeeded` is the base of the next write.
//!
//! Pacing ([`PollPace`], pure): with no history, reads follow the `base` interval from the
//! start. Once operations on this LB have been timed, reads before the shortest recent one
//! would end come only every `early` interval (an operation can still end sooner: NRP's
//! lengths vary several-fold, and one seen late holds up the LB's next write), reads follow
//! the short `fine` interval through a `window` around that moment (where the end is most
//! likely, so it is seen within about `fine` of happening), then fall back to `base`. When the
//! read budget runs low, every LB in flight slows down to an even share of the sustained read
//! rate, the fine window included.

use std::collections::VecDeque;
use std::time::Duration;

/// How often to read an LB while its operation runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PollPace {
    /// The interval outside the fine window (and always while durations are unknown).
    pub base: Duration,
    /// The interval around the expected end.
    pub fine: Duration,
    /// The interval before the expected end: with operations of 2-15 s, the shortest of the
    /// last few is often twice as long as the next one, which was seen up to 8 s late.
    pub early: Duration,
    /// How long past the expected end the fine interval lasts (ARM's operations vary; past
    /// this the end is not imminent any more).
    pub window: Duration,
    /// Share of the sustained read rate completion reads may use when the bucket runs low.
    pub share: f64,
}

impl Default for PollPace {
    fn default() -> Self {
        Self {
            base: Duration::from_millis(150),
            fine: Duration::from_millis(50),
            early: Duration::from_secs(1),
            window: Duration::from_millis(400),
            share: 0.5,
        }
    }
}

/// The two intervals in force for one read, after the budget had its say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Steps {
    pub base: Duration,
    pub fine: Duration,
    pub early: Duration,
}

impl PollPace {
    /// The intervals with `in_flight` LBs being watched, the read bucket `fill` (0..=1) and
    /// its sustained `rate` per second: as configured while the bucket is over half full,
    /// else no shorter than an even share of the rate.
    pub fn steps(&self, in_flight: usize, fill: f64, rate: f64) -> Steps {
        if fill > 0.5 || rate <= 0.0 {
            return Steps {
                base: self.base,
                fine: self.fine,
                early: self.early,
            };
        }
        let even = Duration::from_secs_f64(in_flight.max(1) as f64 / (rate * self.share));
        Steps {
            base: self.base.max(even),
            fine: self.fine.max(even),
            early: self.early.max(even),
        }
    }

    /// When to send the next read, as time since the PUT was accepted: `last` is when the
    /// previous read was sent (none yet: `None`), and the operation is `expected` to take that
    /// long (unknown for a foreign operation or a new LB). Intervals run send to send, so a
    /// slow read does not stretch the cadence (a read slower than the interval is followed
    /// by the next at once).
    pub fn next_send(
        &self,
        last: Option<Duration>,
        expected: Option<Duration>,
        steps: Steps,
    ) -> Duration {
        let Some(expected) = expected else {
            return last.unwrap_or_default() + steps.base;
        };
        let first = expected.saturating_sub(steps.fine);
        match last {
            Some(last) if last + steps.fine >= first => {
                if last < expected + self.window {
                    last + steps.fine
                } else {
                    last + steps.base
                }
            }
            Some(last) => (last + steps.early).min(first),
            None => steps.early.min(first),
        }
    }

    /// What to learn from an operation that was seen ended: the time (since acceptance) of
    /// the last read that still said `Updating` is a lower bound of its duration, so the next
    /// operation's fine window opens before its end. With no such read (the first read
    /// already saw the end) the true duration is unknown but shorter: step back by `base`.
    pub fn learned(&self, last_updating: Option<Duration>, ended_seen: Duration) -> Duration {
        last_updating.unwrap_or_else(|| ended_seen.saturating_sub(self.base))
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

    /// The send times (ms after acceptance) of the reads until the operation, ending at
    /// `end_ms`, is seen ended, each read taking `read_ms`; and what was learned.
    fn reads_until(
        p: &PollPace,
        expected: Option<u64>,
        end_ms: u64,
        read_ms: u64,
    ) -> (Vec<u64>, u64) {
        let steps = p.steps(1, 1.0, 6.0);
        let (mut now, mut last, mut updating) = (0u64, None, None);
        let mut reads = Vec::new();
        loop {
            let at = p
                .next_send(last.map(ms), expected.map(ms), steps)
                .as_millis() as u64;
            let sent = at.max(now);
            reads.push(sent);
            now = sent + read_ms;
            last = Some(sent);
            if sent >= end_ms {
                let learned = p.learned(updating.map(ms), ms(sent));
                return (reads, learned.as_millis() as u64);
            }
            updating = Some(sent);
        }
    }

    #[test]
    fn a_timed_operation_is_seen_ended_within_the_fine_interval() {
        let p = PollPace::default();
        // 2 s operations: one early read, then from 50 ms before the expected end every 50 ms.
        assert_eq!(reads_until(&p, Some(2000), 2000, 10).0, [1000, 1950, 2000]);
        // An operation a little longer than the shortest recent one: still seen in fine steps.
        let (r, _) = reads_until(&p, Some(2000), 2230, 10);
        assert_eq!(r[..2], [1000, 1950]);
        assert!(r.last().unwrap() - 2230 <= 50, "{r:?}");
        // Reads slower than the fine interval follow each other at once.
        let (r, _) = reads_until(&p, Some(2000), 2230, 80);
        assert_eq!(r[..4], [1000, 1950, 2030, 2110]);
        // Far past the window, back to the base interval.
        let (r, _) = reads_until(&p, Some(2000), 4000, 10);
        let gaps: Vec<u64> = r.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(gaps.last(), Some(&150), "{r:?}");
        assert!(r.len() < 25, "{} reads for a 4 s operation", r.len());
    }

    #[test]
    fn an_untimed_operation_is_read_at_the_base_interval() {
        let p = PollPace::default();
        let (r, _) = reads_until(&p, None, 1000, 10);
        assert_eq!(r[..3], [150, 300, 450]);
    }

    #[test]
    fn the_learned_duration_never_runs_past_the_end() {
        let p = PollPace::default();
        // Learned from the base pace: the last read that said Updating.
        let (_, learned) = reads_until(&p, None, 2000, 60);
        assert!((1850..2000).contains(&learned), "{learned}");
        // The fine window then sees the next one end within a fine step.
        let (r, learned2) = reads_until(&p, Some(learned), 2000, 60);
        assert!(*r.last().unwrap() <= 2000 + 60, "{r:?}");
        assert!(learned2 < 2000, "{learned2}");
        // Operations that got faster: the first read already sees the end, and the next
        // window opens earlier.
        let (r, learned3) = reads_until(&p, Some(2000), 1500, 10);
        assert_eq!(r, [1000, 1950]);
        assert_eq!(learned3, 1000);
    }

    #[test]
    fn an_operation_much_shorter_than_the_recent_ones_is_seen_within_the_early_interval() {
        let p = PollPace::default();
        // Recent operations took at least 8.2 s; this one ends at 2.7 s (NRP's 2-15 s).
        let (r, learned) = reads_until(&p, Some(8200), 2700, 60);
        assert_eq!(r, [1000, 2000, 3000], "seen at most 1 s late");
        assert_eq!(learned, 2000, "and the next window opens sooner");
        // Reads before the window stay few: a 15 s operation expected at 15 s.
        let (r, _) = reads_until(&p, Some(15_000), 15_000, 60);
        assert!(r.len() <= 16, "{} reads: {r:?}", r.len());
    }

    #[test]
    fn low_budget_slows_every_lb_evenly() {
        let p = PollPace::default();
        // Room in the bucket: configured pace whatever the number in flight.
        assert_eq!(
            p.steps(20, 0.9, 6.0),
            Steps {
                base: ms(150),
                fine: ms(50),
                early: ms(1000)
            }
        );
        // Bucket below half: 3 reads/s shared by 6 LBs = one read per LB every 2 s, fine
        // window included.
        assert_eq!(
            p.steps(6, 0.2, 6.0),
            Steps {
                base: ms(2000),
                fine: ms(2000),
                early: ms(2000)
            }
        );
        // A large rate: the floor is the configured pace.
        assert_eq!(
            p.steps(1, 0.2, 100.0),
            Steps {
                base: ms(150),
                fine: ms(50),
                early: ms(1000)
            }
        );
        assert_eq!(p.steps(3, 0.2, 100.0).fine, ms(60));
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
