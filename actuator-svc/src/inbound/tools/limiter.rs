//! Per-identity rate limit of the tool RPCs. The identity is the client certificate's first
//! SAN (DNS name or URI) as `identity` reads it (a certificate without one never gets here:
//! `grpc::auth` refuses it); callers without a certificate (`--insecure-plaintext`) share one
//! bucket.

use crate::arm::budget::Bucket;
use crate::identity::identities;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;
use tonic::{Request, Status};

/// The identity of callers without a client certificate.
pub const ANONYMOUS: &str = "(no client certificate)";

/// More identities than this and idle (full) buckets are dropped: identities come from
/// certificates our CA signed, so this only bounds memory against a surprise.
const MAX_TRACKED: usize = 1024;

/// The caller's identity for rate limiting.
pub fn caller_identity<T>(req: &Request<T>) -> String {
    req.peer_certs()
        .and_then(|certs| certs.first().map(|leaf| identities(leaf.as_ref())))
        .and_then(|ids| ids.into_iter().next())
        .unwrap_or_else(|| ANONYMOUS.to_string())
}

/// Token buckets by identity.
#[derive(Debug)]
pub struct ToolLimiter {
    rate: f64,
    burst: u32,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl ToolLimiter {
    /// `rate` calls per second with bursts of `burst`, per identity.
    pub fn new(rate: f64, burst: u32) -> Self {
        Self {
            rate,
            burst,
            buckets: Mutex::default(),
        }
    }

    /// Takes one call for `identity` at `now`, or says how long until one is allowed.
    pub fn take(&self, identity: &str, now: Instant) -> Result<(), Duration> {
        let mut map = self.buckets.lock();
        if map.len() >= MAX_TRACKED && !map.contains_key(identity) {
            map.retain(|_, b| b.fill(now) < 1.0);
        }
        map.entry(identity.to_string())
            .or_insert_with(|| Bucket::new(self.burst, self.rate, now))
            .take(now)
    }

    /// Checks a call of `rpc`; RESOURCE_EXHAUSTED with the limit and when to retry.
    pub fn check(&self, identity: &str, rpc: &str) -> Result<(), Status> {
        self.take(identity, Instant::now()).map_err(|wait| {
            let shown: String = identity
                .chars()
                .take(64)
                .flat_map(char::escape_default)
                .collect();
            Status::resource_exhausted(format!(
                "{rpc}: tool rate limit for client \"{shown}\" is {} calls/s (burst {}); retry in {} ms",
                self.rate,
                self.burst,
                wait.as_millis().max(1)
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_identity_gets_its_own_burst_then_the_rate() {
        let t0 = Instant::now();
        let l = ToolLimiter::new(10.0, 20);
        for _ in 0..20 {
            assert!(l.take("a", t0).is_ok());
        }
        let wait = l.take("a", t0).unwrap_err();
        assert_eq!(wait, Duration::from_millis(100));
        // Another identity is not affected.
        assert!(l.take("b", t0).is_ok());
        assert!(l.take("a", t0 + Duration::from_millis(100)).is_ok());
    }

    #[test]
    fn refusals_say_the_limit_and_escape_the_identity() {
        let l = ToolLimiter::new(1.0, 1);
        assert!(l.check("tool\u{1b}[2J", "SetNodeAdminState").is_ok());
        let e = l.check("tool\u{1b}[2J", "SetNodeAdminState").unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert!(
            e.message().contains("1 calls/s (burst 1)"),
            "{}",
            e.message()
        );
        assert!(!e.message().contains('\u{1b}'), "{}", e.message());
    }

    #[test]
    fn idle_identities_are_dropped_when_many() {
        let t0 = Instant::now();
        let l = ToolLimiter::new(10.0, 2);
        for i in 0..MAX_TRACKED {
            l.take(&format!("id{i}"), t0).unwrap();
        }
        // A second later every bucket is full again: the next newcomer clears them.
        l.take("new", t0 + Duration::from_secs(1)).unwrap();
        assert_eq!(l.buckets.lock().len(), 1);
    }

    #[test]
    fn callers_without_certificates_share_one_identity() {
        assert_eq!(caller_identity(&Request::new(())), ANONYMOUS);
    }
}
