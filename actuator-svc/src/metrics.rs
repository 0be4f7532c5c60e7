//! Prometheus metrics, one registry with the `cutover_actuator_` prefix, served on `/metrics`.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

type Labels = Vec<(String, String)>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Every metric of the process.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    arm_requests: Family<Labels, Counter>,
    arm_response_bytes: Family<Labels, Counter>,
    arm_throttled: Family<Labels, Counter>,
    arm_rate_limited: Family<Labels, Counter>,
    arm_remaining: Family<Labels, Gauge<f64, AtomicU64>>,
    arm_access_refused: Family<Labels, Counter>,
    missing_permissions: Family<Labels, Gauge>,
    missing_permission: Family<Labels, Gauge>,
    write_rounds: Family<Labels, Counter>,
    entries_per_write: Histogram,
    to_accepted: Histogram,
    to_effective: Histogram,
    drift_repaired: Counter,
    restored: Family<Labels, Counter>,
    results_resent: Counter,
    operations_failed: Family<Labels, Counter>,
    bodies_too_large: Family<Labels, Counter>,
    per_pool_fallbacks: Family<Labels, Counter>,
    queue_depth: Family<Labels, Gauge>,
    results: Family<Labels, Counter>,
    owned: Family<Labels, Gauge>,
    completion_poll: Gauge<f64, AtomicU64>,
    completion_lag: Histogram,
    unprobed_entries: Family<Labels, Gauge>,
    pool_not_written: Family<Labels, Gauge>,
    unmatched_entries: Family<Labels, Gauge>,
    guard_refused: Family<Labels, Gauge>,
    tool_limited: Family<Labels, Counter>,
    unknown_answers: Family<Labels, Counter>,
    insecure_plaintext: Gauge,
    auth_refused: Family<Labels, Counter>,
    nics_unreadable: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let mut root = Registry::default();
        let registry = root.sub_registry_with_prefix("cutover_actuator");
        let arm_requests = Family::<Labels, Counter>::default();
        registry.register(
            "arm_requests",
            "ARM requests by operation and HTTP status",
            arm_requests.clone(),
        );
        let arm_response_bytes = Family::<Labels, Counter>::default();
        registry.register(
            "arm_response_bytes",
            "Bytes of ARM response bodies read, by operation (a completion probe stops at the LB's provisioningState)",
            arm_response_bytes.clone(),
        );
        let arm_throttled = Family::<Labels, Counter>::default();
        registry.register(
            "arm_throttled",
            "ARM 429 answers by class",
            arm_throttled.clone(),
        );
        let arm_rate_limited = Family::<Labels, Counter>::default();
        registry.register(
            "arm_rate_limited",
            "ARM requests delayed by the client-side budget, by class",
            arm_rate_limited.clone(),
        );
        let arm_remaining = Family::<Labels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "arm_remaining_quota",
            "Last x-ms-ratelimit-remaining-subscription-* value, by class",
            arm_remaining.clone(),
        );
        let arm_access_refused = Family::<Labels, Counter>::default();
        registry.register(
            "arm_access_refused",
            "Writes ARM refused for access (403 AuthorizationFailed, LinkedAuthorizationFailed, DenyAssignmentAuthorizationFailed, RequestDisallowedByPolicy; 409 ScopeLocked), by load balancer, code (the reason) and the first action it names (- when none); retried slowly",
            arm_access_refused.clone(),
        );
        let missing_permissions = Family::<Labels, Gauge>::default();
        registry.register(
            "missing_permissions",
            "Actions a write of the load balancer needs that no role of the identity grants at their scope, at the last access check (the permissions API, at start, every --access-check-interval and after a write refused for access), by load balancer; 0: every action granted by a role",
            missing_permissions.clone(),
        );
        let missing_permission = Family::<Labels, Gauge>::default();
        registry.register(
            "missing_permission",
            "1 for each action and scope a write of the load balancer needs that no role grants, at the last access check (each is logged at warn with the az role assignment create that fixes it), by load balancer, action and scope",
            missing_permission.clone(),
        );
        let write_rounds = Family::<Labels, Counter>::default();
        registry.register(
            "write_rounds",
            "ARM write rounds by load balancer",
            write_rounds.clone(),
        );
        let entries_per_write = Histogram::new(exponential_buckets(1.0, 2.0, 12));
        registry.register(
            "entries_per_write",
            "Backend entries changed per ARM write",
            entries_per_write.clone(),
        );
        let to_accepted = Histogram::new(exponential_buckets(0.01, 2.0, 14));
        registry.register(
            "receipt_to_accepted_seconds",
            "Time from receiving a desired state to ARM accepting every write",
            to_accepted.clone(),
        );
        let to_effective = Histogram::new(exponential_buckets(0.01, 2.0, 14));
        registry.register(
            "receipt_to_effective_seconds",
            "Time from receiving a desired state to every entry reading it back",
            to_effective.clone(),
        );
        let restored = Family::<Labels, Counter>::default();
        registry.register(
            "restored",
            "Nodes whose entries were found Down although their desired state is None, and set back to None (level-triggered restore), by load balancer",
            restored.clone(),
        );
        let results_resent = Counter::default();
        registry.register(
            "results_resent",
            "Results sent again because signal-svc had not confirmed them",
            results_resent.clone(),
        );
        let operations_failed = Family::<Labels, Counter>::default();
        registry.register(
            "operations_failed",
            "Write operations that ended Failed or Canceled, or stayed Updating past the bound, by load balancer and status",
            operations_failed.clone(),
        );
        let bodies_too_large = Family::<Labels, Counter>::default();
        registry.register(
            "bodies_too_large",
            "Writes refused before sending because even the minimal body exceeds ARM's 4 MB request limit, by load balancer and operation",
            bodies_too_large.clone(),
        );
        let per_pool_fallbacks = Family::<Labels, Counter>::default();
        registry.register(
            "per_pool_fallbacks",
            "Whole-LB writes sent as per-pool PUTs instead because the whole-LB body exceeds ARM's 4 MB request limit, by load balancer",
            per_pool_fallbacks.clone(),
        );
        let drift_repaired = Counter::default();
        registry.register(
            "drift_repaired",
            "Entries found in another admin state than desired by the self-heal loop and rewritten",
            drift_repaired.clone(),
        );
        let queue_depth = Family::<Labels, Gauge>::default();
        registry.register(
            "queue_depth",
            "Nodes waiting for a write, by load balancer",
            queue_depth.clone(),
        );
        let results = Family::<Labels, Counter>::default();
        registry.register("results", "Node results by phase", results.clone());
        let owned = Family::<Labels, Gauge>::default();
        registry.register(
            "load_balancer_owned",
            "1 when this replica writes the load balancer (its assignment), else 0",
            owned.clone(),
        );
        let completion_poll = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "completion_poll_interval_seconds",
            "Interval between provisioningState reads of a load balancer with an operation in flight; grows above the base when many LBs are in flight, to stay inside the read budget",
            completion_poll.clone(),
        );
        let completion_lag = Histogram::new(exponential_buckets(0.01, 2.0, 12));
        registry.register(
            "operation_seconds",
            "Time from a PUT being accepted to the load balancer reading Succeeded again",
            completion_lag.clone(),
        );
        let pool_not_written = Family::<Labels, Gauge>::default();
        registry.register(
            "pool_not_written_entries",
            "Backend entries of pools cutover never writes (not node pools, or admin state cannot act there), by load balancer, pool and reason",
            pool_not_written.clone(),
        );
        let unmatched_entries = Family::<Labels, Gauge>::default();
        registry.register(
            "unmatched_entries",
            "Backend entries of written pools that match no known node (VMs outside the cluster, pod IPs, leftovers): never written, by load balancer",
            unmatched_entries.clone(),
        );
        let unprobed_entries = Family::<Labels, Gauge>::default();
        registry.register(
            "unprobed_entries",
            "Backend entries in pools that no load-balancing rule with a health probe uses: admin state has no effect on them, by load balancer",
            unprobed_entries.clone(),
        );
        let guard_refused = Family::<Labels, Gauge>::default();
        registry.register(
            "guard_refused_nodes",
            "Nodes the blast-radius guard keeps from going Down (over --max-down-share of a pool), by load balancer",
            guard_refused.clone(),
        );
        let tool_limited = Family::<Labels, Counter>::default();
        registry.register(
            "tool_rate_limited",
            "Tool RPCs refused with RESOURCE_EXHAUSTED by the per-identity rate limit, by RPC",
            tool_limited.clone(),
        );
        let unknown_answers = Family::<Labels, Counter>::default();
        registry.register(
            "unknown_node_answers",
            "Tool RPCs for nodes with no backend entry, by how they were answered (negative cache or one pool refresh)",
            unknown_answers.clone(),
        );
        let insecure_plaintext = Gauge::default();
        registry.register(
            "insecure_plaintext",
            "1 when gRPC is served in plaintext without client authentication (--insecure-plaintext), else 0",
            insecure_plaintext.clone(),
        );
        let auth_refused = Family::<Labels, Counter>::default();
        registry.register(
            "auth_refused",
            "gRPC callers refused by the client-certificate allow-lists, by group (signal, tool) and reason (no_certificate, no_san, not_allowed)",
            auth_refused.clone(),
        );
        let nics_unreadable = Counter::default();
        registry.register(
            "nics_unreadable",
            "NICs of the node resource group's listing that could not be read (a field cutover reads has another type, or an ID does not parse), counted at every listing; each is logged with its ID and the reason",
            nics_unreadable.clone(),
        );
        Self {
            registry: root,
            arm_requests,
            arm_response_bytes,
            arm_throttled,
            arm_rate_limited,
            arm_remaining,
            arm_access_refused,
            missing_permissions,
            missing_permission,
            write_rounds,
            entries_per_write,
            to_accepted,
            to_effective,
            drift_repaired,
            restored,
            results_resent,
            operations_failed,
            bodies_too_large,
            per_pool_fallbacks,
            queue_depth,
            results,
            owned,
            completion_poll,
            completion_lag,
            unprobed_entries,
            pool_not_written,
            unmatched_entries,
            guard_refused,
            tool_limited,
            unknown_answers,
            insecure_plaintext,
            auth_refused,
            nics_unreadable,
        }
    }

    /// Whether gRPC is served in plaintext (`--insecure-plaintext`).
    pub fn set_insecure_plaintext(&self, on: bool) {
        self.insecure_plaintext.set(i64::from(on));
    }
    /// A caller refused by an allow-list.
    pub fn auth_refused(&self, group: &str, reason: &str) {
        self.auth_refused
            .get_or_create(&labels(&[("group", group), ("reason", reason)]))
            .inc();
    }

    /// NICs of one listing that could not be read.
    pub fn nics_unreadable(&self, nics: usize) {
        self.nics_unreadable.inc_by(nics as u64);
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }

    pub fn arm_request(&self, operation: &str, status: u16) {
        let status = if status == 0 {
            "error".to_string()
        } else {
            status.to_string()
        };
        self.arm_requests
            .get_or_create(&labels(&[("operation", operation), ("status", &status)]))
            .inc();
    }
    /// A write refused for access (`code`: ARM's; `action`: the first it names, or `-`).
    pub fn access_refused(&self, lb: &str, code: &str, action: &str) {
        self.arm_access_refused
            .get_or_create(&labels(&[
                ("load_balancer", lb),
                ("code", code),
                ("action", action),
            ]))
            .inc();
    }
    /// The access check of `lb`: the (action, scope) pairs missing now; those of `before`
    /// that are no longer missing are dropped.
    pub fn missing_permissions(
        &self,
        lb: &str,
        before: &[(String, String)],
        now: &[(String, String)],
    ) {
        let key = |(action, scope): &(String, String)| {
            labels(&[("load_balancer", lb), ("action", action), ("scope", scope)])
        };
        for pair in before.iter().filter(|p| !now.contains(p)) {
            self.missing_permission.remove(&key(pair));
        }
        for pair in now {
            self.missing_permission.get_or_create(&key(pair)).set(1);
        }
        self.missing_permissions
            .get_or_create(&labels(&[("load_balancer", lb)]))
            .set(now.len() as i64);
    }
    pub fn arm_response_bytes(&self, operation: &str, bytes: usize) {
        self.arm_response_bytes
            .get_or_create(&labels(&[("operation", operation)]))
            .inc_by(bytes as u64);
    }
    pub fn throttled(&self, class: &str) {
        self.arm_throttled
            .get_or_create(&labels(&[("class", class)]))
            .inc();
    }
    pub fn rate_limited(&self, class: &str) {
        self.arm_rate_limited
            .get_or_create(&labels(&[("class", class)]))
            .inc();
    }
    pub fn remaining(&self, class: &str, value: u64) {
        self.arm_remaining
            .get_or_create(&labels(&[("class", class)]))
            .set(value as f64);
    }
    pub fn write_round(&self, lb: &str, entries: usize) {
        self.write_rounds
            .get_or_create(&labels(&[("load_balancer", lb)]))
            .inc();
        self.entries_per_write.observe(entries as f64);
    }
    pub fn accepted_after(&self, seconds: f64) {
        self.to_accepted.observe(seconds);
    }
    pub fn effective_after(&self, seconds: f64) {
        self.to_effective.observe(seconds);
    }
    /// A repaired `None` became effective on `lbs`.
    pub fn restored(&self, lbs: &[String]) {
        for lb in lbs {
            self.restored
                .get_or_create(&labels(&[("load_balancer", lb)]))
                .inc();
        }
    }
    pub fn result_resent(&self) {
        self.results_resent.inc();
    }
    /// `status`: `Failed`, `Canceled` or `Stuck` (still Updating past the bound).
    pub fn operation_failed(&self, lb: &str, status: &str) {
        self.operations_failed
            .get_or_create(&labels(&[("load_balancer", lb), ("status", status)]))
            .inc();
    }
    /// A write whose minimal body exceeds ARM's request limit (`op`: `put_lb` or `put_pool`).
    pub fn body_too_large(&self, lb: &str, op: &str) {
        self.bodies_too_large
            .get_or_create(&labels(&[("load_balancer", lb), ("op", op)]))
            .inc();
    }
    /// A whole-LB write sent pool by pool because the whole body is over ARM's request limit.
    pub fn per_pool_fallback(&self, lb: &str) {
        self.per_pool_fallbacks
            .get_or_create(&labels(&[("load_balancer", lb)]))
            .inc();
    }
    pub fn drift(&self, entries: usize) {
        self.drift_repaired.inc_by(entries as u64);
    }
    pub fn queue(&self, lb: &str, depth: usize) {
        self.queue_depth
            .get_or_create(&labels(&[("load_balancer", lb)]))
            .set(depth as i64);
    }
    pub fn result(&self, phase: &str) {
        self.results
            .get_or_create(&labels(&[("phase", phase)]))
            .inc();
    }
    pub fn owned(&self, managed: &[String], owned: &[String]) {
        for lb in managed {
            self.owned
                .get_or_create(&labels(&[("load_balancer", lb)]))
                .set(i64::from(owned.contains(lb)));
        }
    }
    pub fn completion_poll_interval(&self, seconds: f64) {
        self.completion_poll.set(seconds);
    }
    pub fn operation_took(&self, seconds: f64) {
        self.completion_lag.observe(seconds);
    }
    pub fn unprobed(&self, lb: &str, entries: usize) {
        self.unprobed_entries
            .get_or_create(&labels(&[("load_balancer", lb)]))
            .set(entries as i64);
    }
    /// Sets the pools of `lb` never written to `now`, dropping those of `before` that left.
    pub fn pools_not_written(
        &self,
        lb: &str,
        before: &[crate::lb::index::SkippedPool],
        now: &[crate::lb::index::SkippedPool],
    ) {
        let key = |p: &crate::lb::index::SkippedPool| {
            labels(&[
                ("load_balancer", lb),
                ("pool", &p.name),
                ("reason", p.why.label()),
            ])
        };
        for p in before.iter().filter(|p| !now.contains(p)) {
            self.pool_not_written.remove(&key(p));
        }
        for p in now {
            self.pool_not_written
                .get_or_create(&key(p))
                .set(p.entries as i64);
        }
    }
    pub fn unmatched(&self, lb: &str, entries: usize) {
        self.unmatched_entries
            .get_or_create(&labels(&[("load_balancer", lb)]))
            .set(entries as i64);
    }
    pub fn guard_refused(&self, lb: &str, nodes: usize) {
        self.guard_refused
            .get_or_create(&labels(&[("load_balancer", lb)]))
            .set(nodes as i64);
    }
    pub fn tool_limited(&self, rpc: &str) {
        self.tool_limited
            .get_or_create(&labels(&[("rpc", rpc)]))
            .inc();
    }
    pub fn unknown_answer(&self, how: &str) {
        self.unknown_answers
            .get_or_create(&labels(&[("answer", how)]))
            .inc();
    }
}
