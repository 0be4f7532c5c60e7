//! The service's own access check (issue 27 item 3): while actuator-svc runs, the preflight's
//! permissions check ([`permissions::check`], read-only, through the service's ARM client and
//! budget) runs in the background shortly after start ([`FIRST_AFTER`]), then every
//! `--access-check-interval` (30 min), and for a load balancer whose write ARM just refused for
//! access ([`AccessRecheck`]). Start-up never waits for it and never fails on it: ARM may be
//! slow or refuse the reads.
//!
//! Each action a write of a load balancer needs that no role grants at its scope is logged at
//! warn, naming the action, the scope, what needs it and the `az role assignment create` that
//! fixes it, and set in `cutover_actuator_missing_permission{load_balancer,action,scope}`;
//! `cutover_actuator_missing_permissions{load_balancer}` counts them (0: all granted).
//!
//! There is no Node event from this check: the actuator has no Kubernetes client, and a missing
//! permission concerns no node until a write is refused; that refusal is a FAILED result
//! naming the action, which signal-svc records as the `LoadBalancerAdminStateUpdateFailed`
//! event on each node concerned.
//!
//! Unlike the preflight, a permissions API refused at the load balancer's own scope (which the
//! identity could just read) is taken to mean that the identity's roles lack
//! `Microsoft.Authorization/permissions/read` (both cutover roles have it; docs/azure-access.md
//! allows removing it): every scope it was refused at is then reported as not checked, not as
//! missing.

use super::permissions::{self, Access, Need, ScopeRead, Verdict};
use crate::arm::ArmClient;
use crate::metrics::Metrics;
use crate::writer::{AccessRecheck, Strategy};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// The default interval between two checks of every managed load balancer.
pub const EVERY: Duration = Duration::from_secs(30 * 60);
/// The first check comes this long after start (or after the interval, if shorter): the
/// start-up reads readiness waits for (the token, every LB and the NICs) go first on the
/// shared read budget.
pub const FIRST_AFTER: Duration = Duration::from_secs(10);
/// After a check that could not read some load balancer, the next comes after this, doubling
/// up to the interval.
const RETRY_FIRST: Duration = Duration::from_secs(60);

/// What the check found for one load balancer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LbVerdict {
    pub lb: String,
    /// Needed, granted by no role.
    pub missing: Vec<Need>,
    /// Needed, not checked (why).
    pub unchecked: Vec<(Need, String)>,
    /// Why the document's references could not be listed (its joins are not checked).
    pub unreadable: Option<String>,
}

fn key(scope: &str) -> String {
    scope.trim_end_matches('/').to_ascii_lowercase()
}

/// Each checked load balancer's verdicts (pure).
pub fn verdicts(access: &Access) -> Vec<LbVerdict> {
    access
        .lbs
        .iter()
        .map(|la| {
            // The LB was just read: a permissions API refused at its scope (that of its read)
            // means the roles lack permissions/read, not that no role applies.
            let no_api = la
                .needs
                .iter()
                .filter(|n| n.action == permissions::LB_READ)
                .any(|n| matches!(access.reads.get(&key(&n.scope)), Some(ScopeRead::Refused(_))));
            let mut v = LbVerdict {
                lb: la.lb.clone(),
                missing: Vec::new(),
                unchecked: Vec::new(),
                unreadable: None,
            };
            for need in &la.needs {
                match permissions::evaluate(need, access.reads.get(&key(&need.scope))) {
                    Verdict::Granted => {}
                    Verdict::MissingUnreadable if no_api => v.unchecked.push((
                        need.clone(),
                        "the permissions API is refused (the identity's roles lack Microsoft.Authorization/permissions/read, which both cutover roles grant)".into(),
                    )),
                    Verdict::Missing | Verdict::MissingUnreadable => v.missing.push(need.clone()),
                    Verdict::Unknown(e) => v.unchecked.push((need.clone(), e)),
                }
            }
            v.unreadable = la.unreadable.clone();
            v
        })
        .collect()
}

/// The warning logged for one missing action.
pub fn missing_line(lb: &str, need: &Need) -> String {
    format!(
        "access check: a write of load balancer {lb} needs {} on {} ({}), which no role of the identity grants; fix: {}",
        need.action,
        need.scope,
        need.why,
        permissions::fix_command(need)
    )
}

/// The background check.
pub struct Watch {
    pub arm: ArmClient,
    pub lbs: Vec<String>,
    pub strategy: Strategy,
    pub metrics: Arc<Metrics>,
    pub recheck: Arc<AccessRecheck>,
    /// Between two checks of every load balancer.
    pub every: Duration,
}

impl Watch {
    /// Runs until shutdown: [`FIRST_AFTER`] after start, then every `every`, and for each
    /// refused write's LB.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let mut reported: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        let mut next = Instant::now() + FIRST_AFTER.min(self.every);
        let mut retry = RETRY_FIRST;
        loop {
            let (lbs, full) = tokio::select! {
                _ = tokio::time::sleep_until(next) => (self.lbs.clone(), true),
                lbs = self.recheck.next() => (lbs, false),
                _ = shutdown.wait_for(|s| *s) => return,
            };
            let lbs: Vec<String> = lbs.into_iter().filter(|lb| self.lbs.contains(lb)).collect();
            let all_read = self.check(&lbs, &mut reported, full).await;
            if full {
                next = Instant::now()
                    + if all_read {
                        retry = RETRY_FIRST;
                        self.every
                    } else {
                        let wait = retry.min(self.every);
                        retry = (retry * 2).min(self.every);
                        wait
                    };
            }
        }
    }

    /// One check of `lbs`; false when some could not be read.
    async fn check(
        &self,
        lbs: &[String],
        reported: &mut BTreeMap<String, Vec<(String, String)>>,
        full: bool,
    ) -> bool {
        let why = if full {
            "scheduled"
        } else {
            "a write was refused for access"
        };
        let access = permissions::check(&self.arm, lbs, self.strategy, false).await;
        for (lb, e) in &access.unchecked {
            tracing::info!(load_balancer = %lb, reason = %e, "access check: load balancer not checked");
        }
        for v in verdicts(&access) {
            for need in &v.missing {
                tracing::warn!(
                    load_balancer = %v.lb,
                    action = need.action,
                    scope = %need.scope,
                    fix = %permissions::fix_command(need),
                    "{}",
                    missing_line(&v.lb, need)
                );
            }
            for (need, e) in &v.unchecked {
                tracing::warn!(load_balancer = %v.lb, action = need.action, scope = %need.scope, reason = %e, "access check: could not check an action a write needs");
            }
            if let Some(e) = &v.unreadable {
                tracing::warn!(load_balancer = %v.lb, reason = %e, "access check: the load balancer's references could not be listed; their joins are not checked");
            }
            if v.missing.is_empty() && v.unchecked.is_empty() && v.unreadable.is_none() {
                tracing::info!(load_balancer = %v.lb, checked = why, "access check: every action a write needs is granted by a role (deny assignments, Azure Policy and locks are not shown by the permissions API)");
            }
            let now: Vec<(String, String)> = v
                .missing
                .iter()
                .map(|n| (n.action.to_string(), n.scope.clone()))
                .collect();
            let before = reported.remove(&v.lb).unwrap_or_default();
            self.metrics.missing_permissions(&v.lb, &before, &now);
            reported.insert(v.lb, now);
        }
        access.unchecked.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arm::permissions::Permission;
    use crate::preflight::permissions::{LbAccess, Scopes};

    const LB_ID: &str =
        "/subscriptions/s/resourceGroups/mc/providers/Microsoft.Network/loadBalancers/k";
    const SUBNET: &str = "/subscriptions/s/resourceGroups/net/providers/Microsoft.Network/virtualNetworks/v/subnets/a";

    fn access(lb_read: ScopeRead, subnet_read: ScopeRead) -> Access {
        let rg = "/subscriptions/s/resourceGroups/mc";
        let needs = permissions::needs(
            "k",
            LB_ID,
            &Scopes {
                lb_resource_group: rg.into(),
                node_resource_group: rg.into(),
            },
            Strategy::WholeLb,
            &[(
                SUBNET.into(),
                permissions::JOIN_SUBNET,
                "subnet of frontend f".into(),
            )],
            false,
        );
        let mut reads = BTreeMap::new();
        reads.insert(key(LB_ID), lb_read);
        reads.insert(
            key(rg),
            ScopeRead::Read(vec![Permission {
                actions: vec!["Microsoft.Network/*".into()],
                not_actions: vec![],
            }]),
        );
        reads.insert(key(SUBNET), subnet_read);
        Access {
            lbs: vec![LbAccess {
                lb: "k".into(),
                needs,
                unreadable: None,
                probe: None,
            }],
            reads,
            probed: false,
            unchecked: Vec::new(),
        }
    }

    fn writer() -> ScopeRead {
        ScopeRead::Read(vec![Permission {
            actions: vec!["Microsoft.Network/loadBalancers/*".into()],
            not_actions: vec![],
        }])
    }

    #[test]
    fn a_join_refused_at_its_scope_is_missing_and_its_line_names_action_scope_and_fix() {
        let a = access(writer(), ScopeRead::Refused("403".into()));
        let v = verdicts(&a);
        assert_eq!(v.len(), 1);
        assert!(v[0].unchecked.is_empty(), "{v:?}");
        assert_eq!(v[0].missing.len(), 1);
        assert_eq!(v[0].missing[0].action, permissions::JOIN_SUBNET);
        let line = missing_line("k", &v[0].missing[0]);
        assert!(line.contains(permissions::JOIN_SUBNET), "{line}");
        assert!(line.contains(SUBNET), "{line}");
        assert!(
            line.contains(&format!(
                "az role assignment create --assignee-object-id \"$OID\" --assignee-principal-type ServicePrincipal --role \"Cutover Network Joiner\" --scope \"{SUBNET}\""
            )),
            "{line}"
        );
        // Read and not granted: missing too.
        let a = access(writer(), ScopeRead::Read(vec![]));
        assert_eq!(verdicts(&a)[0].missing.len(), 1);
        // Granted everywhere: nothing.
        let a = access(writer(), writer_and_joins());
        let v = verdicts(&a);
        assert!(
            v[0].missing.is_empty() && v[0].unchecked.is_empty(),
            "{v:?}"
        );
    }

    fn writer_and_joins() -> ScopeRead {
        ScopeRead::Read(vec![Permission {
            actions: vec!["Microsoft.Network/*/join/action".into()],
            not_actions: vec![],
        }])
    }

    #[test]
    fn without_permissions_read_refusals_are_unchecked_not_missing() {
        let a = access(
            ScopeRead::Refused("403".into()),
            ScopeRead::Refused("403".into()),
        );
        let v = verdicts(&a);
        assert!(v[0].missing.is_empty(), "{v:?}");
        // The LB's own read and write and the join: not checked.
        assert_eq!(v[0].unchecked.len(), 3, "{v:?}");
        assert!(v[0].unchecked[0].1.contains("permissions/read"));
        // A failed read (not a refusal) is unchecked too.
        let a = access(writer(), ScopeRead::Failed("500".into()));
        let v = verdicts(&a);
        assert_eq!((v[0].missing.len(), v[0].unchecked.len()), (0, 1));
    }
}
