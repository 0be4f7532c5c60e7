//! Runtime tuning (latencies, completion delay, Retry-After, paging, token lifetime) and fault
//! injection (429 storms, 500s, dropped connections, supersede mode, failed operations). Both are
//! plain data changed through the library API or `/_sim/...` and read by the request handlers.

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// Per-kind time to answer in milliseconds, from the request's arrival (the simulator's own
/// handling runs within it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Latencies {
    pub get: u64,
    pub put: u64,
    pub delete: u64,
    pub list: u64,
    pub poll: u64,
    pub token: u64,
}

/// Which latency applies to a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Get,
    Put,
    Delete,
    List,
    Poll,
    Token,
}

/// Operation lengths drawn from [`Tuning::completion_delay_ms`] ..=
/// [`Tuning::completion_delay_max_ms`] by a fixed-seed generator (splitmix64), so a run is
/// repeatable.
#[derive(Debug, Clone)]
pub struct OpLengths {
    state: u64,
}

impl Default for OpLengths {
    fn default() -> Self {
        Self {
            state: 0x0A2E_5EED_0B5E_55ED,
        }
    }
}

impl OpLengths {
    /// The next operation's length under `t`.
    pub fn next_ms(&mut self, t: &Tuning) -> u64 {
        let lo = t.completion_delay_ms;
        let Some(hi) = t.completion_delay_max_ms.filter(|hi| *hi > lo) else {
            return lo;
        };
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        lo + z % (hi - lo + 1)
    }
}

impl Latencies {
    pub fn of(&self, kind: Kind) -> u64 {
        match kind {
            Kind::Get => self.get,
            Kind::Put => self.put,
            Kind::Delete => self.delete,
            Kind::List => self.list,
            Kind::Poll => self.poll,
            Kind::Token => self.token,
        }
    }
}

/// Knobs a test may change while the simulator runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Tuning {
    pub latency_ms: Latencies,
    /// How long a write operation stays `InProgress` (the shortest, with
    /// [`Tuning::completion_delay_max_ms`]).
    pub completion_delay_ms: u64,
    /// When set, each operation's length is drawn uniformly from `completion_delay_ms` to
    /// this, from a seeded sequence (the same for every run): NRP's operations vary, and users
    /// report Standard LB writes taking 5-20 s.
    pub completion_delay_max_ms: Option<u64>,
    /// `Retry-After` (integer seconds) on PUT/DELETE and on polls that are still running.
    pub retry_after_secs: u64,
    /// The retry hint of a lock conflict (429 RetryableErrorDueToAnotherOperation).
    pub lock_retry_after_secs: u64,
    /// Page size of LIST responses (`nextLink` when more).
    pub page_size: usize,
    /// Lifetime of issued tokens.
    pub token_lifetime_secs: u64,
    /// Refuse (400) a whole-LB PUT that would change anything but backend pool entries: a
    /// dropped, reordered or altered frontend, rule, probe, outbound rule, SKU or pool list
    /// (see [`crate::structure`]). Off by default: ARM itself applies such a PUT (replace
    /// semantics); the change is then only recorded in the structure log.
    pub strict_lb_structure: bool,
    /// Pessimistic NRP (contracts/arm.md section 9): refuse (400
    /// `ModificationOfNICIpConfigBackendPoolNotSupported`) a backend-pool PUT whose body carries
    /// entries of NIC-based members, even unchanged ones, as NRP did for Terraform and
    /// Microsoft's Bicep module. The whole-LB PUT still sets their admin state. Off by default:
    /// whether NRP refuses an admin-state-only change is not recorded anywhere.
    pub refuse_nic_pool_puts: bool,
}

impl Default for Tuning {
    /// [`Cadence::Fast`] hints, 1 s operations, pages of 100.
    fn default() -> Self {
        Self {
            latency_ms: Latencies::default(),
            completion_delay_ms: 1000,
            completion_delay_max_ms: None,
            retry_after_secs: Cadence::Fast.retry_after_secs(),
            lock_retry_after_secs: Cadence::Fast.lock_retry_after_secs(),
            page_size: 100,
            token_lifetime_secs: 3599,
            strict_lb_structure: false,
            refuse_nic_pool_puts: false,
        }
    }
}

/// How long the simulator tells clients to wait: the `Retry-After` of writes and running
/// operation polls, and the retry hint of a lock conflict (429
/// `RetryableErrorDueToAnotherOperation`, "The call can be retried in N seconds.").
///
/// - [`Cadence::Fast`] (the default): 1 s everywhere, so tests run quickly.
/// - [`Cadence::Azure`]: 10 s everywhere, like NRP (a Standard LB child write answered with a
///   ~10 s `Retry-After`, contracts/arm.md 1.5; lock conflicts "can be retried in 10 seconds"
///   or more, 3.3). Clients that honour the hints then see real-world cadence.
///
/// The cadence only sets the hints; how long an operation really runs is
/// [`Tuning::completion_delay_ms`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Cadence {
    #[default]
    Fast,
    Azure,
}

impl Cadence {
    pub const NAMES: &[&str] = &["fast", "azure"];

    /// `Retry-After` of writes and running polls, in seconds.
    pub fn retry_after_secs(self) -> u64 {
        match self {
            Self::Fast => 1,
            Self::Azure => 10,
        }
    }

    /// The retry hint (message and `Retry-After`) of a lock conflict, in seconds.
    pub fn lock_retry_after_secs(self) -> u64 {
        match self {
            Self::Fast => 1,
            Self::Azure => 10,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fast => "fast",
            Self::Azure => "azure",
        }
    }
}

/// An unknown cadence name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown cadence {0:?}; known: fast, azure")]
pub struct UnknownCadence(pub String);

impl std::str::FromStr for Cadence {
    type Err = UnknownCadence;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "fast" => Ok(Self::Fast),
            "azure" => Ok(Self::Azure),
            _ => Err(UnknownCadence(s.to_owned())),
        }
    }
}

impl Tuning {
    /// This tuning with the retry hints of `cadence` (other knobs unchanged).
    pub fn with_cadence(mut self, cadence: Cadence) -> Self {
        self.retry_after_secs = cadence.retry_after_secs();
        self.lock_retry_after_secs = cadence.lock_retry_after_secs();
        self
    }
}

/// Injected faults. Counters are consumed one request (or operation) at a time.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    pub throttle_requests: u32,
    pub throttle_until: Option<Instant>,
    pub server_errors: u32,
    pub outage_until: Option<Instant>,
    pub drop_connections: u32,
    pub supersede: bool,
    pub fail_operations: u32,
    /// RBAC actions the principals lack (lower-cased), e.g.
    /// `microsoft.network/loadbalancers/read`: such calls get ARM's 403 `AuthorizationFailed`.
    pub denied_actions: Vec<String>,
    /// Writes still to refuse with a lock held by an operation the LB's GET does not show.
    pub lock_conflicts: u32,
    /// Writes of one LB still to refuse with `ReferencedResourceNotProvisioned`.
    pub not_provisioned: Option<NotProvisioned>,
    /// Writes with `If-Match` still to be preceded by another writer's write.
    pub stale_writes: u32,
    /// An Azure Policy assignment (its name) that denies every write from now on.
    pub policy_deny: Option<String>,
    /// Resource groups (lower-cased names) under a `ReadOnly` management lock.
    pub read_only_locks: Vec<String>,
}

/// NRP refusing writes of one load balancer because a resource it references is not in
/// `Succeeded` state (contracts/arm.md 3.3, [I-TECT1460]): 429 `RetryableError` with detail
/// `ReferencedResourceNotProvisioned`. Only that LB is affected; NRP's message names the NIC
/// ipConfiguration and the LB.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct NotProvisioned {
    /// The load balancer's name.
    pub lb: String,
    /// How many writes of it are refused.
    pub writes: u32,
    /// The `Retry-After` (seconds) sent with each refusal.
    pub retry_after_secs: u64,
}

/// A fault request (library and `POST /_sim/faults`); absent fields leave the current value.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct FaultSpec {
    /// The next N ARM requests get 429 SubscriptionRequestsThrottled.
    pub throttle_requests: Option<u32>,
    /// Every ARM request for this many milliseconds gets 429.
    pub throttle_for_ms: Option<u64>,
    /// The next N ARM requests get 500 InternalServerError.
    pub server_errors: Option<u32>,
    /// An outage: every ARM request for this many milliseconds gets 500 InternalServerError
    /// (what clients saw in regional ARM/NRP incidents; operations already running go on and
    /// complete, as NRP's do behind a failing front door). 0 ends one early.
    pub outage_for_ms: Option<u64>,
    /// The next N ARM requests have their connection closed without a response.
    pub drop_connections: Option<u32>,
    /// A write on a busy LB cancels the running operation instead of getting 429.
    pub supersede: Option<bool>,
    /// The next N write operations end `Failed`.
    pub fail_operations: Option<u32>,
    /// RBAC actions every principal lacks from now on (replaces the list; empty grants all).
    /// Models a role assignment without them (e.g. a custom role missing
    /// `Microsoft.Network/networkInterfaces/read`): ARM refuses such calls with 403
    /// `AuthorizationFailed` before the resource provider sees them. Real ARM checks per
    /// principal and scope; the simulator denies for every principal and scope.
    pub deny_actions: Option<Vec<String>>,
    /// The next N writes (PUT or DELETE of a load balancer or pool) get NRP's 429
    /// `RetryableError` / `RetryableErrorDueToAnotherOperation` while the LB itself reads
    /// `Succeeded`: the lock is held by an operation on a resource the LB uses (a NIC, a public
    /// IP), which a GET of the LB does not show (contracts/arm.md 3.3: "Operation <Op> (<guid>)
    /// is updating resource <guid>"). Retry hint: `lockRetryAfterSecs`.
    pub lock_conflicts: Option<u32>,
    /// Writes of one LB refused with 429 `ReferencedResourceNotProvisioned` (replaces the
    /// previous spec; `writes: 0` ends it).
    pub not_provisioned: Option<NotProvisioned>,
    /// The next N writes carrying `If-Match` find the LB changed by another writer (a busy
    /// cloud-provider-azure) just before they arrive: a new etag, so they get 412.
    pub stale_writes: Option<u32>,
    /// An Azure Policy assignment of this name denies every write (PUT or DELETE of a load
    /// balancer or pool) from now on: 403 `RequestDisallowedByPolicy`, before the resource
    /// provider sees it (the deny effect, "returned as a 403 (Forbidden)", Microsoft Learn
    /// governance/policy/concepts/effect-deny). Reads go on. Empty ends it.
    pub policy_deny: Option<String>,
    /// Resource groups under a `ReadOnly` management lock (replaces the list; empty: none):
    /// every write of a load balancer or pool in them gets 409 `ScopeLocked` ("The scope '<id>'
    /// cannot perform write operation because following scope(s) are locked: '<group id>'.
    /// Please remove the lock and try again.", as recorded in Azure/azure-sdk-for-java#2560 and
    /// Azure/migAz#194). A `CanNotDelete` lock refuses no write, so it is not modelled.
    pub read_only_locks: Option<Vec<String>>,
}

/// What the fault layer decided for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Injected {
    None,
    Drop,
    ServerError,
    Throttle,
}

impl Faults {
    pub fn apply(&mut self, spec: &FaultSpec, now: Instant) {
        if let Some(n) = spec.throttle_requests {
            self.throttle_requests = n;
        }
        if let Some(ms) = spec.throttle_for_ms {
            self.throttle_until = Some(now + std::time::Duration::from_millis(ms));
        }
        if let Some(n) = spec.server_errors {
            self.server_errors = n;
        }
        if let Some(ms) = spec.outage_for_ms {
            self.outage_until = Some(now + std::time::Duration::from_millis(ms));
        }
        if let Some(n) = spec.drop_connections {
            self.drop_connections = n;
        }
        if let Some(b) = spec.supersede {
            self.supersede = b;
        }
        if let Some(n) = spec.fail_operations {
            self.fail_operations = n;
        }
        if let Some(list) = &spec.deny_actions {
            self.denied_actions = list.iter().map(|a| a.to_ascii_lowercase()).collect();
        }
        if let Some(n) = spec.lock_conflicts {
            self.lock_conflicts = n;
        }
        if let Some(np) = &spec.not_provisioned {
            self.not_provisioned = Some(np.clone()).filter(|np| np.writes > 0);
        }
        if let Some(n) = spec.stale_writes {
            self.stale_writes = n;
        }
        if let Some(name) = &spec.policy_deny {
            self.policy_deny = Some(name.trim().to_owned()).filter(|n| !n.is_empty());
        }
        if let Some(groups) = &spec.read_only_locks {
            self.read_only_locks = groups.iter().map(|g| g.to_ascii_lowercase()).collect();
        }
    }

    /// Whether resource group `rg` is under a `ReadOnly` lock.
    pub fn locked(&self, rg: &str) -> bool {
        self.read_only_locks
            .iter()
            .any(|g| g.eq_ignore_ascii_case(rg))
    }

    /// Whether this write of `lb` is refused with `ReferencedResourceNotProvisioned`
    /// (consumes one), and the `Retry-After` to send.
    pub fn take_not_provisioned(&mut self, lb: &str) -> Option<u64> {
        let np = self.not_provisioned.as_mut()?;
        if !np.lb.eq_ignore_ascii_case(lb) {
            return None;
        }
        np.writes -= 1;
        let secs = np.retry_after_secs;
        if np.writes == 0 {
            self.not_provisioned = None;
        }
        Some(secs)
    }

    /// Whether this write meets a lock it cannot see (consumes one).
    pub fn take_lock_conflict(&mut self) -> bool {
        let hit = self.lock_conflicts > 0;
        self.lock_conflicts = self.lock_conflicts.saturating_sub(1);
        hit
    }

    /// Whether another writer writes the LB just before this write (consumes one).
    pub fn take_stale_write(&mut self) -> bool {
        let hit = self.stale_writes > 0;
        self.stale_writes = self.stale_writes.saturating_sub(1);
        hit
    }

    /// Whether any action is denied.
    pub fn denies_any(&self) -> bool {
        !self.denied_actions.is_empty()
    }

    /// Whether `action` is denied (case-insensitively, as ARM compares actions).
    pub fn denies(&self, action: &str) -> bool {
        self.denied_actions
            .iter()
            .any(|a| a.eq_ignore_ascii_case(action))
    }

    /// Decides (and consumes) the fault for the next ARM request.
    pub fn next(&mut self, now: Instant) -> Injected {
        if self.drop_connections > 0 {
            self.drop_connections -= 1;
            return Injected::Drop;
        }
        if self.server_errors > 0 {
            self.server_errors -= 1;
            return Injected::ServerError;
        }
        if self.outage_until.is_some_and(|t| now < t) {
            return Injected::ServerError;
        }
        if self.throttle_requests > 0 {
            self.throttle_requests -= 1;
            return Injected::Throttle;
        }
        if self.throttle_until.is_some_and(|t| now < t) {
            return Injected::Throttle;
        }
        Injected::None
    }

    /// Whether the next started operation should fail (consumes one).
    pub fn take_failure(&mut self) -> bool {
        if self.fail_operations > 0 {
            self.fail_operations -= 1;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn operation_lengths_are_fixed_or_drawn_repeatably_from_the_range() {
        let mut t = Tuning {
            completion_delay_ms: 2000,
            ..Tuning::default()
        };
        let mut g = OpLengths::default();
        assert!((0..10).all(|_| g.next_ms(&t) == 2000));
        t.completion_delay_max_ms = Some(15_000);
        let mut g = OpLengths::default();
        let drawn: Vec<u64> = (0..2000).map(|_| g.next_ms(&t)).collect();
        assert!(drawn.iter().all(|d| (2000..=15_000).contains(d)));
        // Spread over the range, not stuck at one end.
        let mean = drawn.iter().sum::<u64>() as f64 / drawn.len() as f64;
        assert!((7500.0..9500.0).contains(&mean), "{mean}");
        assert!(drawn.iter().any(|d| *d < 3000) && drawn.iter().any(|d| *d > 14_000));
        // The same sequence every run.
        let mut again = OpLengths::default();
        assert!(drawn.iter().all(|d| *d == again.next_ms(&t)));
    }

    use super::*;

    #[test]
    fn counters_are_consumed_in_order() {
        let now = Instant::now();
        let mut f = Faults::default();
        f.apply(
            &FaultSpec {
                drop_connections: Some(1),
                server_errors: Some(1),
                throttle_requests: Some(1),
                ..Default::default()
            },
            now,
        );
        assert_eq!(f.next(now), Injected::Drop);
        assert_eq!(f.next(now), Injected::ServerError);
        assert_eq!(f.next(now), Injected::Throttle);
        assert_eq!(f.next(now), Injected::None);
        f.apply(
            &FaultSpec {
                throttle_for_ms: Some(1000),
                ..Default::default()
            },
            now,
        );
        assert_eq!(f.next(now), Injected::Throttle);
        assert_eq!(
            f.next(now + std::time::Duration::from_secs(2)),
            Injected::None
        );
    }

    #[test]
    fn an_outage_fails_every_request_until_it_ends() {
        let now = Instant::now();
        let mut f = Faults::default();
        f.apply(
            &FaultSpec {
                outage_for_ms: Some(5000),
                ..Default::default()
            },
            now,
        );
        for s in [0, 1, 4] {
            assert_eq!(
                f.next(now + std::time::Duration::from_secs(s)),
                Injected::ServerError
            );
        }
        assert_eq!(
            f.next(now + std::time::Duration::from_secs(5)),
            Injected::None
        );
        // Ended early.
        f.apply(
            &FaultSpec {
                outage_for_ms: Some(60_000),
                ..Default::default()
            },
            now,
        );
        f.apply(
            &FaultSpec {
                outage_for_ms: Some(0),
                ..Default::default()
            },
            now,
        );
        assert_eq!(f.next(now), Injected::None);
    }

    #[test]
    fn denied_actions_compare_case_insensitively_and_are_replaced() {
        let now = Instant::now();
        let mut f = Faults::default();
        let deny = |list: &[&str]| FaultSpec {
            deny_actions: Some(list.iter().map(|s| s.to_string()).collect()),
            ..Default::default()
        };
        f.apply(&deny(&["Microsoft.Network/loadBalancers/read"]), now);
        assert!(f.denies("microsoft.network/loadbalancers/READ"));
        assert!(!f.denies("Microsoft.Network/networkInterfaces/read"));
        f.apply(&FaultSpec::default(), now);
        assert!(f.denies("Microsoft.Network/loadBalancers/read"));
        f.apply(&deny(&[]), now);
        assert!(!f.denies("Microsoft.Network/loadBalancers/read"));
    }

    #[test]
    fn write_faults_are_consumed_and_not_provisioned_hits_only_its_lb() {
        let now = Instant::now();
        let mut f = Faults::default();
        f.apply(
            &FaultSpec {
                lock_conflicts: Some(1),
                stale_writes: Some(1),
                not_provisioned: Some(NotProvisioned {
                    lb: "Kubernetes".into(),
                    writes: 2,
                    retry_after_secs: 7,
                }),
                ..Default::default()
            },
            now,
        );
        assert!(f.take_lock_conflict());
        assert!(!f.take_lock_conflict());
        assert!(f.take_stale_write());
        assert!(!f.take_stale_write());
        assert_eq!(f.take_not_provisioned("kubernetes-internal"), None);
        assert_eq!(f.take_not_provisioned("kubernetes"), Some(7));
        assert_eq!(f.take_not_provisioned("kubernetes"), Some(7));
        assert_eq!(f.take_not_provisioned("kubernetes"), None);
    }

    #[test]
    fn policy_and_lock_switches_are_set_and_cleared() {
        let now = Instant::now();
        let mut f = Faults::default();
        f.apply(
            &FaultSpec {
                policy_deny: Some("deny-lb-writes".into()),
                read_only_locks: Some(vec!["MC_rg".into()]),
                ..Default::default()
            },
            now,
        );
        assert_eq!(f.policy_deny.as_deref(), Some("deny-lb-writes"));
        assert!(f.locked("mc_RG") && !f.locked("other"));
        // Absent fields keep them; empty values end them.
        f.apply(&FaultSpec::default(), now);
        assert!(f.policy_deny.is_some() && f.locked("mc_rg"));
        f.apply(
            &FaultSpec {
                policy_deny: Some(String::new()),
                read_only_locks: Some(vec![]),
                ..Default::default()
            },
            now,
        );
        assert!(f.policy_deny.is_none() && !f.locked("mc_rg"));
    }

    #[test]
    fn cadence_presets_set_the_retry_hints_only() {
        let azure = Tuning::default().with_cadence("Azure".parse().unwrap());
        assert_eq!(
            (azure.retry_after_secs, azure.lock_retry_after_secs),
            (10, 10)
        );
        assert_eq!(
            azure.completion_delay_ms,
            Tuning::default().completion_delay_ms
        );
        let fast = azure.with_cadence(Cadence::Fast);
        assert_eq!(fast, Tuning::default());
        assert!("slow".parse::<Cadence>().is_err());
    }
}
