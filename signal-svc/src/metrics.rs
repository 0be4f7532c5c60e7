//! Prometheus metrics, one registry with prefix `cutover_signal`.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

/// Every metric of the service.
pub struct Metrics {
    registry: Registry,
    signals: Family<Labels, Counter>,
    pub taints_added: Counter,
    desired_changes: Family<Labels, Counter>,
    results: Family<Labels, Counter>,
    pub signal_to_accepted: Histogram,
    pub signal_to_effective: Histogram,
    pub notice_window_remaining: Histogram,
    pub stream_reconnects: Counter,
    lease_failures: Family<Labels, Counter>,
    pub leader: Gauge,
    pub epoch: Gauge,
    pub asserted_nodes: Gauge,
    assignment_lbs: Family<Labels, Gauge>,
    lb_owner: Family<Labels, Gauge>,
    pub assignment_failovers: Counter,
    pub assignment_changes: Counter,
    condition_writes: Family<Labels, Counter>,
    /// 1 when streaming to the actuators in plaintext (`--insecure-plaintext`).
    pub insecure_plaintext: Gauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("cutover_signal");
        let m = Self {
            signals: Family::default(),
            taints_added: Counter::default(),
            desired_changes: Family::default(),
            results: Family::default(),
            // 5 ms .. ~80 s
            signal_to_accepted: Histogram::new(exponential_buckets(0.005, 2.0, 15)),
            signal_to_effective: Histogram::new(exponential_buckets(0.005, 2.0, 15)),
            notice_window_remaining: Histogram::new([
                -30.0, -10.0, 0.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 45.0, 60.0, 120.0, 300.0,
            ]),
            stream_reconnects: Counter::default(),
            lease_failures: Family::default(),
            leader: Gauge::default(),
            epoch: Gauge::default(),
            asserted_nodes: Gauge::default(),
            assignment_lbs: Family::default(),
            lb_owner: Family::default(),
            assignment_failovers: Counter::default(),
            assignment_changes: Counter::default(),
            condition_writes: Family::default(),
            insecure_plaintext: Gauge::default(),
            registry: Registry::default(),
        };
        registry.register("signals", "Signals seen, by kind (taint, label, hold, deleting, cordon, drain_condition, preempt_event, preempt_condition, preempt_event_ignored, preempt_advisory, preempt_unknown_form)", m.signals.clone());
        registry.register(
            "taints_added",
            "Spot-eviction taints added by this process",
            m.taints_added.clone(),
        );
        registry.register(
            "desired_state_changes",
            "Desired-state changes, by new state",
            m.desired_changes.clone(),
        );
        registry.register(
            "results",
            "Actuator results for current versions, by phase",
            m.results.clone(),
        );
        registry.register(
            "signal_to_accepted_seconds",
            "Time from signal observed to ACCEPTED",
            m.signal_to_accepted.clone(),
        );
        registry.register(
            "signal_to_effective_seconds",
            "Time from signal observed to EFFECTIVE",
            m.signal_to_effective.clone(),
        );
        registry.register(
            "notice_window_remaining_seconds",
            "Seconds left before the Spot NotBefore deadline when Down became EFFECTIVE",
            m.notice_window_remaining.clone(),
        );
        registry.register(
            "stream_reconnects",
            "Actuator stream (re)connect attempts after a failure",
            m.stream_reconnects.clone(),
        );
        registry.register(
            "lease_failures",
            "Lease calls that failed and were retried, by kind (api, conflict, timeout)",
            m.lease_failures.clone(),
        );
        registry.register("leader", "1 while this replica leads", m.leader.clone());
        registry.register(
            "leader_epoch",
            "Leadership epoch (Lease leaseTransitions) of this replica",
            m.epoch.clone(),
        );
        registry.register(
            "asserted_nodes",
            "Nodes asserted on the streams (Down or tombstoned None)",
            m.asserted_nodes.clone(),
        );
        registry.register(
            "assignment_load_balancers",
            "Load balancers assigned to each live actuator endpoint (leader only)",
            m.assignment_lbs.clone(),
        );
        registry.register(
            "load_balancer_owner",
            "1 for the actuator endpoint that writes a load balancer; a load balancer without a series has no owner (fenced or no live stream)",
            m.lb_owner.clone(),
        );
        registry.register(
            "assignment_failovers",
            "Load balancers handed over from a lost actuator stream after its assignment lapsed",
            m.assignment_failovers.clone(),
        );
        registry.register(
            "assignment_changes",
            "Changes of the load balancer assignment (generations sent)",
            m.assignment_changes.clone(),
        );
        registry.register(
            "condition_writes",
            "Writes of the LoadBalancerAdminStateDown Node condition, by status and outcome (ok, error)",
            m.condition_writes.clone(),
        );
        registry.register(
            "insecure_plaintext",
            "1 when the streams to the actuators are plaintext without a client certificate (--insecure-plaintext), else 0",
            m.insecure_plaintext.clone(),
        );
        Self { registry, ..m }
    }

    pub fn signal(&self, kind: &str) {
        self.signals
            .get_or_create(&vec![("kind", kind.to_owned())])
            .inc();
    }

    pub fn desired_change(&self, state: &str) {
        self.desired_changes
            .get_or_create(&vec![("state", state.to_owned())])
            .inc();
    }

    pub fn lease_failure(&self, kind: &str) {
        self.lease_failures
            .get_or_create(&vec![("kind", kind.to_owned())])
            .inc();
    }

    pub fn result(&self, phase: &str) {
        self.results
            .get_or_create(&vec![("phase", phase.to_owned())])
            .inc();
    }

    pub fn condition_write(&self, status: &str, outcome: &str) {
        self.condition_writes
            .get_or_create(&vec![
                ("status", status.to_owned()),
                ("outcome", outcome.to_owned()),
            ])
            .inc();
    }

    /// The current assignment: owner per load balancer, count per endpoint.
    pub fn set_assignment(&self, owners: &[(String, Option<String>)], counts: &[(String, usize)]) {
        self.assignment_changes.inc();
        self.lb_owner.clear();
        for (lb, owner) in owners {
            if let Some(ep) = owner {
                self.lb_owner
                    .get_or_create(&vec![
                        ("load_balancer", lb.clone()),
                        ("endpoint", ep.clone()),
                    ])
                    .set(1);
            }
        }
        self.assignment_lbs.clear();
        for (ep, n) in counts {
            self.assignment_lbs
                .get_or_create(&vec![("endpoint", ep.clone())])
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
    }

    /// Text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}
