//! ARM's token-bucket throttling (contracts/arm.md 3.1): one bucket per (subscription, principal,
//! class) and one global bucket per (subscription, class) holding 15x the per-principal limit.
//! Pure logic: time comes in as an argument (seconds since an arbitrary origin), so the refill
//! arithmetic is unit-tested without clocks.

use std::collections::HashMap;

/// Request class, from the HTTP method (GET/HEAD read, DELETE delete, everything else write).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    Read,
    Write,
    Delete,
}

impl Class {
    pub fn from_method(method: &http::Method) -> Self {
        match *method {
            http::Method::GET | http::Method::HEAD => Self::Read,
            http::Method::DELETE => Self::Delete,
            _ => Self::Write,
        }
    }

    /// The word used in header names and in the throttling message.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "reads",
            Self::Write => "writes",
            Self::Delete => "deletes",
        }
    }

    fn singular(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Delete => "delete",
        }
    }
}

/// Capacity and refill rate of one bucket.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Limit {
    pub capacity: f64,
    pub refill_per_sec: f64,
}

/// Limits per class; the global bucket is `global_factor` times each.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    pub reads: Limit,
    pub writes: Limit,
    pub deletes: Limit,
    pub global_factor: f64,
}

impl Default for Limits {
    /// ARM's 2024 defaults: reads 250 / 25 s⁻¹, writes and deletes 200 / 10 s⁻¹, global 15x.
    fn default() -> Self {
        Self {
            reads: Limit {
                capacity: 250.0,
                refill_per_sec: 25.0,
            },
            writes: Limit {
                capacity: 200.0,
                refill_per_sec: 10.0,
            },
            deletes: Limit {
                capacity: 200.0,
                refill_per_sec: 10.0,
            },
            global_factor: 15.0,
        }
    }
}

impl Limits {
    fn of(&self, class: Class) -> Limit {
        match class {
            Class::Read => self.reads,
            Class::Write => self.writes,
            Class::Delete => self.deletes,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    last: f64,
}

impl Bucket {
    fn full(limit: Limit, now: f64) -> Self {
        Self {
            tokens: limit.capacity,
            last: now,
        }
    }

    fn refill(&mut self, limit: Limit, now: f64) {
        let elapsed = (now - self.last).max(0.0);
        self.tokens = (self.tokens + elapsed * limit.refill_per_sec).min(limit.capacity);
        self.last = now;
    }

    /// Seconds until one token is available (at least 1, as ARM never says 0).
    fn wait_secs(&self, limit: Limit) -> u64 {
        if limit.refill_per_sec <= 0.0 {
            return 60;
        }
        let missing = (1.0 - self.tokens).max(0.0);
        ((missing / limit.refill_per_sec).ceil() as u64).max(1)
    }
}

/// What one request got.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Admitted; remaining tokens (principal bucket, global bucket) for the headers.
    Allowed {
        remaining: u64,
        global_remaining: u64,
    },
    /// Refused; retry after this many seconds.
    Throttled {
        retry_after: u64,
        remaining: u64,
        global_remaining: u64,
    },
}

/// All buckets of the simulator.
#[derive(Debug, Default)]
pub struct Throttle {
    limits: Limits,
    principal: HashMap<(String, String, Class), Bucket>,
    global: HashMap<(String, Class), Bucket>,
}

impl Throttle {
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Replaces the limits and refills every bucket (a reconfiguration starts fresh).
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
        self.principal.clear();
        self.global.clear();
    }

    /// Takes one token from both the principal and the global bucket, or neither.
    pub fn take(&mut self, sub: &str, principal: &str, class: Class, now: f64) -> Decision {
        let limit = self.limits.of(class);
        let global_limit = Limit {
            capacity: limit.capacity * self.limits.global_factor,
            refill_per_sec: limit.refill_per_sec * self.limits.global_factor,
        };
        let p = self
            .principal
            .entry((sub.to_owned(), principal.to_owned(), class))
            .or_insert_with(|| Bucket::full(limit, now));
        p.refill(limit, now);
        let g = self
            .global
            .entry((sub.to_owned(), class))
            .or_insert_with(|| Bucket::full(global_limit, now));
        g.refill(global_limit, now);
        if p.tokens >= 1.0 && g.tokens >= 1.0 {
            p.tokens -= 1.0;
            g.tokens -= 1.0;
            Decision::Allowed {
                remaining: p.tokens.floor() as u64,
                global_remaining: g.tokens.floor() as u64,
            }
        } else {
            let wait = if p.tokens < 1.0 {
                p.wait_secs(limit)
            } else {
                0
            };
            let gwait = if g.tokens < 1.0 {
                g.wait_secs(global_limit)
            } else {
                0
            };
            Decision::Throttled {
                retry_after: wait.max(gwait).max(1),
                remaining: p.tokens.floor() as u64,
                global_remaining: g.tokens.floor() as u64,
            }
        }
    }
}

/// The word ARM uses in the throttling message ("Number of 'read' requests ...").
pub fn message_word(class: Class) -> &'static str {
    class.singular()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Limits {
        Limits {
            reads: Limit {
                capacity: 3.0,
                refill_per_sec: 1.0,
            },
            writes: Limit {
                capacity: 2.0,
                refill_per_sec: 0.5,
            },
            deletes: Limit {
                capacity: 2.0,
                refill_per_sec: 0.5,
            },
            global_factor: 2.0,
        }
    }

    #[test]
    fn bucket_drains_then_refills_with_time() {
        let mut t = Throttle::new(small());
        for expected in [2, 1, 0] {
            assert_eq!(
                t.take("s", "p", Class::Read, 0.0),
                Decision::Allowed {
                    remaining: expected,
                    global_remaining: expected + 3
                }
            );
        }
        match t.take("s", "p", Class::Read, 0.0) {
            Decision::Throttled { retry_after, .. } => assert_eq!(retry_after, 1),
            other => panic!("expected throttle, got {other:?}"),
        }
        // One second later exactly one token is back.
        assert!(matches!(
            t.take("s", "p", Class::Read, 1.0),
            Decision::Allowed { remaining: 0, .. }
        ));
        assert!(matches!(
            t.take("s", "p", Class::Read, 1.0),
            Decision::Throttled { .. }
        ));
        // Refill never exceeds capacity.
        assert!(matches!(
            t.take("s", "p", Class::Read, 100.0),
            Decision::Allowed { remaining: 2, .. }
        ));
    }

    #[test]
    fn classes_and_principals_have_separate_buckets_but_share_global() {
        let mut t = Throttle::new(small());
        for _ in 0..2 {
            assert!(matches!(
                t.take("s", "a", Class::Write, 0.0),
                Decision::Allowed { .. }
            ));
        }
        assert!(matches!(
            t.take("s", "a", Class::Write, 0.0),
            Decision::Throttled { .. }
        ));
        // Deletes and another principal are unaffected by a's writes ...
        assert!(matches!(
            t.take("s", "a", Class::Delete, 0.0),
            Decision::Allowed { .. }
        ));
        assert!(matches!(
            t.take("s", "b", Class::Write, 0.0),
            Decision::Allowed { .. }
        ));
        assert!(matches!(
            t.take("s", "b", Class::Write, 0.0),
            Decision::Allowed {
                global_remaining: 0,
                ..
            }
        ));
        // ... but the global write bucket (2 x 2 = 4) is now empty for everybody.
        match t.take("s", "c", Class::Write, 0.0) {
            Decision::Throttled {
                retry_after,
                remaining,
                global_remaining,
            } => {
                assert_eq!((remaining, global_remaining), (2, 0));
                assert_eq!(retry_after, 1); // global refills 1 token per second
            }
            other => panic!("expected global throttle, got {other:?}"),
        }
        // Another subscription is independent.
        assert!(matches!(
            t.take("s2", "c", Class::Write, 0.0),
            Decision::Allowed { .. }
        ));
    }

    #[test]
    fn retry_after_reflects_slow_refill() {
        let mut t = Throttle::new(small());
        t.take("s", "p", Class::Delete, 0.0);
        t.take("s", "p", Class::Delete, 0.0);
        match t.take("s", "p", Class::Delete, 0.0) {
            Decision::Throttled { retry_after, .. } => assert_eq!(retry_after, 2),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn defaults_match_arm() {
        let l = Limits::default();
        assert_eq!((l.reads.capacity, l.reads.refill_per_sec), (250.0, 25.0));
        assert_eq!((l.writes.capacity, l.writes.refill_per_sec), (200.0, 10.0));
        assert_eq!(
            (l.deletes.capacity, l.deletes.refill_per_sec),
            (200.0, 10.0)
        );
        let mut t = Throttle::new(l);
        assert_eq!(
            t.take("s", "p", Class::Read, 0.0),
            Decision::Allowed {
                remaining: 249,
                global_remaining: 3749
            }
        );
    }
}
