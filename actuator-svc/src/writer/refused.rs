//! A write ARM refused for access: 403 `AuthorizationFailed`, `LinkedAuthorizationFailed` or
//! `DenyAssignmentAuthorizationFailed`, or outside RBAC 403 `RequestDisallowedByPolicy` (Azure
//! Policy) and 409 `ScopeLocked` (a `ReadOnly` management lock) (`arm::access`). Only a role
//! assignment fixes the first two (and assignments take up to 10 minutes to apply,
//! azure-production.md 2.9), and nothing the identity holds fixes a deny assignment such as
//! AKS's node resource group lockdown, a policy or a lock: their owners must. So
//! the refusal is reported as what it is (a warning naming the missing action and scope and the
//! role to assign, `cutover_actuator_arm_access_refused_total{load_balancer,code,action}`, and
//! FAILED results with the same text, which signal-svc turns into the
//! `LoadBalancerAdminStateUpdateFailed` Node event), and the LB is written again only after a
//! pause: 30 s, doubling to 5 min while the refusals go on, whatever desired states arrive
//! meanwhile. A write that goes through ends the pause. Each refusal a role can fix also asks
//! the service's access check to run again for that load balancer ([`AccessRecheck`]): its
//! gauges then name every action the write lacks, not only the first one ARM's message names
//! (the permissions API shows neither deny assignments nor policies nor locks).

use super::Writer;
use crate::arm::ArmError;
use crate::arm::access::AccessRefusal;
use crate::plan::TargetPlan;
use crate::state::TargetView;
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// The load balancers whose writes were refused for access since the access check last
/// looked: writers add, the check takes them all.
#[derive(Debug, Default)]
pub struct AccessRecheck {
    lbs: Mutex<BTreeSet<String>>,
    notify: Notify,
}

impl AccessRecheck {
    /// A write of `lb` was refused for access.
    pub fn ask(&self, lb: &str) {
        self.lbs.lock().insert(lb.to_owned());
        self.notify.notify_one();
    }

    /// Waits until some load balancer was asked for, and takes every one asked so far.
    pub async fn next(&self) -> Vec<String> {
        loop {
            let lbs: Vec<String> = std::mem::take(&mut *self.lbs.lock()).into_iter().collect();
            if !lbs.is_empty() {
                return lbs;
            }
            self.notify.notified().await;
        }
    }
}

/// The first pause after a refusal.
pub(super) const FIRST_PAUSE: Duration = Duration::from_secs(30);
/// The longest pause.
pub(super) const MAX_PAUSE: Duration = Duration::from_secs(300);

/// The pause of one writer after access refusals.
#[derive(Debug, Default)]
pub(super) struct AccessPause {
    /// The next pause (zero: no refusal since the last write that went through).
    next: Duration,
    until: Option<Instant>,
    reason: String,
}

impl AccessPause {
    /// A refusal at `now`: the pause it starts.
    pub(super) fn refused(&mut self, reason: String, now: Instant) -> Duration {
        let pause = if self.next.is_zero() {
            FIRST_PAUSE
        } else {
            self.next
        };
        self.next = (pause * 2).min(MAX_PAUSE);
        self.until = Some(now + pause);
        self.reason = reason;
        pause
    }

    /// While a pause runs: what is left of it and the refusal's reason.
    pub(super) fn waiting(&self, now: Instant) -> Option<(Duration, &str)> {
        let until = self.until?;
        (until > now).then(|| (until - now, self.reason.as_str()))
    }

    /// A write went through. True when it ends refusals.
    pub(super) fn cleared(&mut self) -> bool {
        let was = !self.next.is_zero();
        *self = Self::default();
        was
    }
}

impl Writer {
    /// A write refused for access: log, metric, FAILED (will retry) for its nodes; returns the
    /// pause before this LB is written again.
    pub(super) fn on_access_refused(
        &mut self,
        refusal: &AccessRefusal,
        e: &ArmError,
        changed: &[(&TargetPlan, &TargetView)],
    ) -> Duration {
        let trace = e.trace().map(|t| t.to_string()).unwrap_or_default();
        let reason = format!("{} [{trace}]", refusal.summary());
        let pause = self.access.refused(reason.clone(), Instant::now());
        let code = refusal.kind.code();
        self.metrics
            .access_refused(&self.lb, code, refusal.first_action());
        let missing: Vec<String> = refusal
            .missing
            .iter()
            .map(|(a, s)| format!("{a} on {s}"))
            .collect();
        tracing::warn!(
            code,
            missing = %missing.join("; "),
            lockdown = refusal.lockdown(),
            retry_in_s = pause.as_secs(),
            error = %e,
            "write refused for access: {}",
            refusal.summary()
        );
        for (tp, tv) in changed {
            self.store.fail(&tp.key, tv.version, reason.clone(), true);
        }
        if refusal.kind.rbac() {
            self.cfg.access_recheck.ask(&self.lb);
        }
        pause
    }

    /// While an access refusal's pause runs: its nodes are told FAILED (will retry) with the
    /// refusal, and the time left is returned; no write goes out.
    pub(super) fn access_wait(&self, changed: &[(&TargetPlan, &TargetView)]) -> Option<Duration> {
        let (left, reason) = self.access.waiting(Instant::now())?;
        for (tp, tv) in changed {
            self.store
                .fail(&tp.key, tv.version, reason.to_owned(), true);
        }
        tracing::debug!(
            left_ms = left.as_millis() as u64,
            "not writing: access refused, pausing"
        );
        Some(left)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_to_their_bound_and_a_write_ends_them() {
        let mut p = AccessPause::default();
        let now = Instant::now();
        assert!(p.waiting(now).is_none());
        assert_eq!(p.refused("r".into(), now), FIRST_PAUSE);
        assert_eq!(p.waiting(now).map(|(_, r)| r), Some("r"));
        assert!(p.waiting(now + FIRST_PAUSE).is_none());
        let mut last = FIRST_PAUSE;
        for _ in 0..6 {
            last = p.refused("r".into(), now);
        }
        assert_eq!(last, MAX_PAUSE);
        assert!(p.cleared());
        assert!(!p.cleared());
        assert_eq!(p.refused("r".into(), now), FIRST_PAUSE);
    }

    #[tokio::test]
    async fn rechecks_collect_every_load_balancer_asked_for() {
        let r = std::sync::Arc::new(AccessRecheck::default());
        r.ask("b");
        r.ask("a");
        r.ask("b");
        assert_eq!(r.next().await, vec!["a", "b"]);
        let waiting = tokio::spawn({
            let r = r.clone();
            async move { r.next().await }
        });
        tokio::task::yield_now().await;
        r.ask("c");
        assert_eq!(waiting.await.unwrap(), vec!["c"]);
    }
}
