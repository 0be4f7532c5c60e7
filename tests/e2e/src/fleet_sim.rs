//! A deterministic, seeded simulation of the fleet protocol: two signal-svc replicas electing
//! a leader on a Lease, three actuator replicas, and the messages between them, on a simulated
//! clock and network with faults drawn from the seed.
//!
//! What is real and what is modelled:
//! - real: the decisions of the product, called as the services call them: the Lease decision
//!   and observer (`domain::lease`), the term's timing (`domain::term`), the versions and
//!   outboxes (`domain::dispatch`), the one-writer assignment and its fences
//!   (`domain::assign`) on the leader; the ownership and renewal anchors (`ownership`) on the
//!   actuators.
//! - modelled: the I/O around them (a Lease that answers at once or not at all, streams that
//!   deliver in order with a delay, hold what a partition stops, break after two keepalive
//!   rounds of silence and then drop what was queued), and the election and stream loops that call the decisions (a few lines
//!   each, mirroring `leader.rs` and `stream.rs`). The whole services on a simulated network
//!   (turmoil-style) are not here yet.
//!
//! Faults: freezes and crash-restarts of either service, Lease outages (the standby frozen
//! through them), Lease blips and deletions, one-sided or two-sided partitions, slow streams.
//!
//! Invariants, checked at every tick:
//! - **one writer**: at most one actuator may write a load balancer at any instant (bound
//!   0 ms: the fences are exact in a simulation whose clocks run at one rate);
//! - **versions**: an actuator never receives a state of the epoch it follows with a version
//!   below one it already holds (a cut it would drop as stale: N1);
//! - **liveness**: once faults stop, within the settle time every load balancer has exactly
//!   one writer and every actuator holds every node's newest state.

use actuator_svc::state::ownership::{Grant, Ownership, Renewals};
use cutover_proto::v1::{Assignment, Version};
use signal_svc::core::assign::{Assigner, StreamId};
use signal_svc::core::dispatch::Dispatcher;
use signal_svc::core::index::{Change, Desired, DesiredState};
use signal_svc::core::lease::{Decision, Epochs, LeaseRecord, Observer, decide};
use signal_svc::core::node::NodeView;
use signal_svc::core::term::{Standing, Term, Timings};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;
use tokio::time::Instant;

const TICK: u64 = 20;
const SIGNALS: usize = 2;
const ACTUATORS: usize = 3;
const NODES: usize = 6;
const LBS: [&str; 4] = ["lb-a", "lb-b", "lb-c", "lb-d"];
/// Two HTTP/2 keepalive rounds of 1 s: how long a silent stream lives on.
const KEEPALIVE_DEAD_MS: u64 = 2000;
const VALID_FOR: Duration = Duration::from_secs(3);
/// Once faults stopped, a change reaches every actuator within this.
const DELIVERY_BOUND_MS: u64 = 5000;

fn timings() -> Timings {
    Timings {
        duration: Duration::from_secs(4),
        renew_deadline: Duration::from_secs(3),
        renew_interval: Duration::from_millis(500),
        retry_interval: Duration::from_millis(250),
    }
}

/// What one run does.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub seed: u64,
    /// Simulated time with faults.
    pub faults_ms: u64,
    /// Simulated time after the last fault, by the end of which everything must have settled.
    pub settle_ms: u64,
    /// Single-replica configuration: one signal-svc (the other never starts).
    pub single_signal: bool,
    /// Record what happened, step by step, in [`Report::trace`] (for replays).
    pub trace: bool,
}

impl Plan {
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            faults_ms: 30_000,
            settle_ms: 15_000,
            single_signal: seed.is_multiple_of(4),
            trace: false,
        }
    }
}

/// What one run saw.
#[derive(Debug, Default)]
pub struct Report {
    pub seed: u64,
    pub violations: Vec<String>,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u32>,
    /// Longest time two actuators could write one load balancer.
    pub max_overlap_ms: u64,
    pub epochs: u64,
    pub changes: u64,
    /// What happened, when [`Plan::trace`] asked for it.
    pub trace: Vec<String>,
}

/// splitmix64: small, seedable, the same on every platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
}

#[derive(Clone, Debug)]
enum Down {
    Hello { epoch: u64, incarnation: u64 },
    State { node: usize, version: Version },
    Assign(Assignment),
}

#[derive(Clone, Debug)]
enum Up {
    HelloAck,
    Renew(u64),
    /// The stream refused, naming the epoch the actuator accepted (0: none to raise above).
    Refused(u64),
}

/// One stream between signal replica `s` and actuator `a` (at most one at a time).
#[derive(Debug, Default)]
struct Link {
    open: bool,
    down: VecDeque<(u64, Down)>,
    up: VecDeque<(u64, Up)>,
    /// Since when nothing gets through (a cut, or a frozen end).
    silent_since: Option<u64>,
    /// Messages sent now wait this much longer (a slow consumer, a congested path).
    slow_until: u64,
    /// Messages are lost in these directions until then.
    cut_down_until: u64,
    cut_up_until: u64,
}

#[derive(Debug)]
struct SignalStream {
    epoch: u64,
    id: Option<StreamId>,
    renewed: u64,
}

struct Signal {
    name: String,
    /// Drawn at each start (`Hello.incarnation`).
    incarnation: u64,
    /// The highest epoch an actuator reported having accepted (`Epochs::floor`).
    floor: u64,
    up: bool,
    frozen_until: u64,
    observer: Observer,
    seen: u64,
    term: Option<Term>,
    last_epoch: Option<u64>,
    next_attempt: u64,
    leading: Option<u64>,
    dispatch: Dispatcher,
    assign: Assigner,
    streams: Vec<Option<SignalStream>>,
    /// The newest desired state of each node (the cluster's truth, as this replica sees it).
    desired: Vec<Desired>,
}

impl Signal {
    fn new(i: usize, up: bool, incarnation: u64) -> Self {
        let mut dispatch = Dispatcher::new();
        dispatch.set_endpoints((0..ACTUATORS).map(endpoint).collect());
        Self {
            name: format!("signal-{i}"),
            incarnation,
            floor: 0,
            up,
            frozen_until: 0,
            observer: Observer::default(),
            seen: 0,
            term: None,
            last_epoch: None,
            next_attempt: 0,
            leading: None,
            dispatch,
            assign: Assigner::new(VALID_FOR),
            streams: (0..ACTUATORS).map(|_| None).collect(),
            desired: vec![Desired::None; NODES],
        }
    }
}

struct Actuator {
    frozen_until: u64,
    max_epoch: u64,
    /// The incarnation that first sent `max_epoch` (mirrors the actuator's `Table`).
    epoch_owner: u64,
    ownership: Ownership,
    /// Per signal replica: the stream's epoch and renewals.
    streams: Vec<Option<(u64, Renewals)>>,
    /// Newest version held per node.
    held: Vec<Option<Version>>,
}

impl Actuator {
    fn new() -> Self {
        Self {
            frozen_until: 0,
            max_epoch: 0,
            epoch_owner: 0,
            ownership: Ownership::default(),
            streams: (0..SIGNALS).map(|_| None).collect(),
            held: vec![None; NODES],
        }
    }
}

fn endpoint(a: usize) -> String {
    format!("actuator-{a}:9443")
}

fn node_view(n: usize) -> NodeView {
    NodeView {
        name: format!("node-{n}"),
        uid: format!("uid-{n}"),
        created: None,
        provider_id: format!("azure:///node-{n}"),
        internal_ips: vec![format!("10.0.0.{n}")],
        zone: String::new(),
        taints: vec![],
        condition_notice: None,
        spot_notice_handled: false,
        hold: None,
        states: Default::default(),
    }
}

fn change(n: usize, desired: Desired) -> Change {
    Change::Set {
        state: DesiredState {
            node: node_view(n),
            desired,
            reasons: if desired == Desired::Down {
                vec!["karpenter.sh/disrupted".into()]
            } else {
                vec![]
            },
            observed_at: jiff::Timestamp::UNIX_EPOCH,
            deadline: None,
        },
        previous: None,
    }
}

fn newer(a: &Version, b: &Version) -> bool {
    (a.epoch, a.seq) > (b.epoch, b.seq)
}

struct Sim {
    plan: Plan,
    rng: Rng,
    base: Instant,
    now: u64,
    lease: Option<LeaseRecord>,
    lease_down_until: u64,
    signals: Vec<Signal>,
    actuators: Vec<Actuator>,
    links: Vec<Vec<Link>>,
    report: Report,
    overlap_since: BTreeMap<&'static str, u64>,
}

impl Sim {
    fn new(plan: Plan) -> Self {
        let mut rng = Rng(plan.seed);
        let signals = (0..SIGNALS)
            .map(|i| Signal::new(i, i == 0 || !plan.single_signal, rng.next() | 1))
            .collect();
        Self {
            plan,
            rng,
            base: Instant::now(),
            now: 0,
            lease: None,
            lease_down_until: 0,
            signals,
            actuators: (0..ACTUATORS).map(|_| Actuator::new()).collect(),
            links: (0..SIGNALS)
                .map(|_| (0..ACTUATORS).map(|_| Link::default()).collect())
                .collect(),
            report: Report {
                seed: plan.seed,
                ..Report::default()
            },
            overlap_since: BTreeMap::new(),
        }
    }

    fn at(&self, ms: u64) -> Instant {
        self.base + Duration::from_millis(ms)
    }

    fn fault(&mut self, kind: &'static str) {
        *self.report.faults.entry(kind).or_default() += 1;
        self.note(|| format!("FAULT {kind}"));
    }

    fn note(&mut self, what: impl FnOnce() -> String) {
        if self.plan.trace {
            let line = format!("t={} ms: {}", self.now, what());
            self.report.trace.push(line);
        }
    }

    fn violation(&mut self, what: String) {
        if self.report.violations.len() < 20 {
            self.report
                .violations
                .push(format!("t={} ms: {what}", self.now));
        }
    }

    fn delay(&mut self, s: usize, a: usize) -> u64 {
        let base = self.rng.between(1, 30);
        if self.links[s][a].slow_until > self.now {
            base + self.rng.between(500, 2500)
        } else {
            base
        }
    }

    fn send_down(&mut self, s: usize, a: usize, m: Down) {
        let at = self.now + self.delay(s, a);
        let link = &mut self.links[s][a];
        if link.open {
            link.down.push_back((at, m));
        }
    }

    fn send_up(&mut self, s: usize, a: usize, m: Up) {
        let at = self.now + self.delay(s, a);
        let link = &mut self.links[s][a];
        if link.open {
            link.up.push_back((at, m));
        }
    }

    // ---- faults ---------------------------------------------------------------------------

    fn inject(&mut self) {
        if self.now >= self.plan.faults_ms {
            return;
        }
        let r = &mut self.rng;
        let pick = r.below(1000);
        // About one fault per second of simulated time.
        if pick >= 20 {
            return;
        }
        match pick % 10 {
            0 => {
                let s = self.rng.below(SIGNALS as u64) as usize;
                let d = self.rng.between(500, 8000);
                self.signals[s].frozen_until = self.signals[s].frozen_until.max(self.now + d);
                self.fault("signal frozen");
                self.note(|| format!("  signal {s} for {d} ms"));
            }
            1 => {
                let a = self.rng.below(ACTUATORS as u64) as usize;
                let d = self.rng.between(500, 8000);
                self.actuators[a].frozen_until = self.actuators[a].frozen_until.max(self.now + d);
                self.fault("actuator frozen");
                self.note(|| format!("  actuator {a} for {d} ms"));
            }
            2 => {
                // A Lease-only outage; the standby is frozen through it (it cannot win).
                let d = self.rng.between(2000, 9000);
                self.lease_down_until = self.lease_down_until.max(self.now + d);
                let standby = self
                    .signals
                    .iter()
                    .position(|s| s.up && s.leading.is_none());
                if let Some(s) = standby {
                    let until = self.now + d + 1000;
                    self.signals[s].frozen_until = self.signals[s].frozen_until.max(until);
                }
                self.fault("lease outage, standby frozen");
                self.note(|| format!("  {d} ms, standby {standby:?}"));
            }
            3 | 4 => {
                let s = self.rng.below(SIGNALS as u64) as usize;
                let a = self.rng.below(ACTUATORS as u64) as usize;
                let d = self.rng.between(500, 6000);
                let until = self.now + d;
                let l = &mut self.links[s][a];
                match self.rng.below(3) {
                    0 => l.cut_down_until = l.cut_down_until.max(until),
                    1 => l.cut_up_until = l.cut_up_until.max(until),
                    _ => {
                        l.cut_down_until = l.cut_down_until.max(until);
                        l.cut_up_until = l.cut_up_until.max(until);
                    }
                }
                let (down, up) = (l.cut_down_until, l.cut_up_until);
                self.fault("partition (one-sided or both)");
                self.note(|| {
                    format!("  signal {s} / actuator {a}: down until {down}, up until {up}")
                });
            }
            5 => {
                let s = self.rng.below(SIGNALS as u64) as usize;
                let a = self.rng.below(ACTUATORS as u64) as usize;
                let until = self.now + self.rng.between(1000, 6000);
                self.links[s][a].slow_until = self.links[s][a].slow_until.max(until);
                self.fault("slow stream");
                self.note(|| format!("  signal {s} / actuator {a}"));
            }
            6 => {
                let s = self.rng.below(SIGNALS as u64) as usize;
                if self.signals[s].up {
                    self.crash_signal(s);
                    self.fault("signal crash and restart");
                    self.note(|| format!("  signal {s}"));
                }
            }
            7 => {
                let a = self.rng.below(ACTUATORS as u64) as usize;
                self.actuators[a] = Actuator::new();
                for s in 0..SIGNALS {
                    self.break_link(s, a);
                }
                self.fault("actuator crash and restart");
                self.note(|| format!("  actuator {a}"));
            }
            9 if self.rng.chance(300) => {
                self.lease = None;
                self.fault("Lease deleted");
            }
            _ => {
                // A short API blip on every call of the Lease.
                let until = self.now + self.rng.between(200, 1500);
                self.lease_down_until = self.lease_down_until.max(until);
                self.fault("lease blip");
            }
        }
    }

    fn crash_signal(&mut self, s: usize) {
        for a in 0..ACTUATORS {
            self.break_link(s, a);
        }
        let keep_desired = self.signals[s].desired.clone();
        let incarnation = self.rng.next() | 1;
        self.signals[s] = Signal::new(s, true, incarnation);
        // The cluster's truth survives the process (it is on the Nodes).
        self.signals[s].desired = keep_desired;
        for (n, d) in self.signals[s].desired.clone().into_iter().enumerate() {
            self.signals[s]
                .dispatch
                .apply(&change(n, d), jiff::Timestamp::UNIX_EPOCH);
        }
        self.signals[s].next_attempt = self.now + 1000;
    }

    fn break_link(&mut self, s: usize, a: usize) {
        let l = &mut self.links[s][a];
        l.open = false;
        l.down.clear();
        l.up.clear();
        l.silent_since = None;
    }

    // ---- signal-svc: election (mirrors leader.rs) -------------------------------------------

    fn elect(&mut self, s: usize) {
        let now = self.now;
        let t = timings();
        if self.signals[s].next_attempt > now {
            return;
        }
        let sent = self.at(now);
        if self.lease_down_until <= now {
            let me = self.signals[s].name.clone();
            let sig = &mut self.signals[s];
            let epochs = Epochs {
                mine: sig.term.map(|t| t.epoch).or(sig.last_epoch),
                floor: sig.floor,
                seen: sig.seen,
            };
            let decision = match &self.lease {
                // A deleted Lease: its holder re-creates it at once, a standby only after
                // the lease duration (`Observer::may_create`).
                None if epochs.mine.is_none() && !sig.observer.may_create(sent, t.duration) => {
                    Decision::Wait {
                        holder: String::new(),
                    }
                }
                None => Decision::Acquire {
                    transitions: epochs.create(),
                },
                Some(rec) => {
                    sig.seen = sig.seen.max(u64::try_from(rec.transitions).unwrap_or(0));
                    sig.observer.observe(rec, sent);
                    let expired = sig.observer.expired(sent, t.duration);
                    decide(rec, &me, &epochs, expired)
                }
            };
            // renewTime is the writer's wall clock (a MicroTime): a re-created Lease never
            // repeats a record seen before it was deleted.
            let renew = now;
            let leading = match decision {
                Decision::Wait { .. } => None,
                Decision::Renew => self.lease.as_mut().map(|r| {
                    r.renew_time = Some(renew.to_string());
                    r.transitions
                }),
                Decision::Acquire { transitions } => {
                    if self.plan.trace {
                        let line = format!(
                            "t={now} ms: signal {s} acquires the Lease, transitions {transitions}"
                        );
                        self.report.trace.push(line);
                    }
                    self.lease = Some(LeaseRecord {
                        holder: Some(me.clone()),
                        transitions,
                        duration_secs: Some(4),
                        duration_ms: Some(4000),
                        renew_time: Some(renew.to_string()),
                    });
                    Some(transitions)
                }
            };
            let sig = &mut self.signals[s];
            match leading {
                Some(e) => {
                    let e = u64::try_from(e).unwrap_or(0);
                    match &mut sig.term {
                        Some(term) if term.epoch == e => term.renewed(sent),
                        _ => sig.term = Some(Term::new(e, sent)),
                    }
                }
                None => {
                    sig.last_epoch = None;
                    if sig.term.take().is_some() {
                        self.lose(s);
                    }
                }
            }
        }
        let sig = &mut self.signals[s];
        sig.next_attempt = now
            + if sig.term.is_some() {
                t.renew_interval.as_millis() as u64
            } else {
                t.retry_interval.as_millis() as u64
            };
    }

    /// Where the term stands now (mirrors `Election::apply` and `Shared::lead_until`).
    fn apply_term(&mut self, s: usize) -> bool {
        let t = timings();
        let now_i = self.at(self.now);
        let Some(term) = self.signals[s].term else {
            return false;
        };
        match term.standing(now_i, &t) {
            Standing::Active => {
                let sig = &mut self.signals[s];
                if sig.leading != Some(term.epoch) {
                    sig.dispatch.set_epoch(term.epoch);
                    sig.assign.begin(term.epoch, now_i);
                    sig.leading = Some(term.epoch);
                    self.report.epochs += 1;
                    let e = term.epoch;
                    self.note(|| format!("signal {s} leads epoch {e}"));
                }
                true
            }
            Standing::Suspended => false,
            Standing::Lost => {
                self.signals[s].last_epoch = Some(term.epoch);
                self.signals[s].term = None;
                self.lose(s);
                false
            }
        }
    }

    fn lose(&mut self, s: usize) {
        self.note(|| format!("signal {s} stops leading"));
        self.signals[s].leading = None;
        for a in 0..ACTUATORS {
            self.close_signal_stream(s, a);
        }
    }

    fn close_signal_stream(&mut self, s: usize, a: usize) {
        let now_i = self.at(self.now);
        if let Some(st) = self.signals[s].streams[a].take()
            && let Some(id) = st.id
        {
            self.signals[s].assign.leave(id, now_i);
        }
        self.break_link(s, a);
    }

    // ---- signal-svc: streams (mirrors stream.rs) --------------------------------------------

    fn run_streams(&mut self, s: usize, active: bool) {
        let Some(epoch) = self.signals[s].leading else {
            return;
        };
        let now_i = self.at(self.now);
        for a in 0..ACTUATORS {
            // A stream that stayed silent for two keepalive rounds ends.
            if self.links[s][a].open
                && self.links[s][a]
                    .silent_since
                    .is_some_and(|at| self.now - at >= KEEPALIVE_DEAD_MS)
            {
                self.close_signal_stream(s, a);
            }
            // A stream of an older epoch ends (the real one reconnects with a new Hello), and
            // so does one the actuator side broke (a restart).
            if self.signals[s].streams[a]
                .as_ref()
                .is_some_and(|st| st.epoch != epoch || !self.links[s][a].open)
            {
                self.close_signal_stream(s, a);
            }
            if !active {
                continue;
            }
            if self.signals[s].streams[a].is_none() {
                self.links[s][a].open = true;
                self.signals[s].streams[a] = Some(SignalStream {
                    epoch,
                    id: None,
                    renewed: 0,
                });
                let incarnation = self.signals[s].incarnation;
                self.send_down(s, a, Down::Hello { epoch, incarnation });
                let snapshot = self.signals[s].dispatch.snapshot(&endpoint(a));
                for d in snapshot {
                    let node = node_index(&d);
                    if let (Some(node), Some(version)) = (node, d.version) {
                        self.send_down(s, a, Down::State { node, version });
                    }
                }
            }
            let Some(id) = self.signals[s].streams[a].as_ref().and_then(|st| st.id) else {
                continue;
            };
            let renewed = self.signals[s].streams[a]
                .as_ref()
                .map_or(0, |st| st.renewed);
            let sig = &mut self.signals[s];
            sig.assign.tick(now_i);
            if let Some(mut m) = sig.assign.due(id, now_i) {
                m.echo = renewed;
                sig.assign.sent(id, &m, now_i);
                self.send_down(s, a, Down::Assign(m));
            }
            for kind in self.signals[s].dispatch.next_deltas(&endpoint(a), 64) {
                if let cutover_proto::v1::signal_message::Kind::Delta(d) = kind
                    && let (Some(node), Some(version)) = (node_index(&d), d.version)
                {
                    self.send_down(s, a, Down::State { node, version });
                }
            }
        }
    }

    fn receive_signal(&mut self, s: usize) {
        let now_i = self.at(self.now);
        for a in 0..ACTUATORS {
            while let Some((at, _)) = self.links[s][a].up.front()
                && *at <= self.now
                && self.links[s][a].cut_up_until <= self.now
            {
                let Some((_, m)) = self.links[s][a].up.pop_front() else {
                    break;
                };
                let Some(st) = self.signals[s].streams[a].as_mut() else {
                    continue;
                };
                match m {
                    Up::HelloAck => {
                        if st.id.is_none() {
                            let lbs: Vec<String> = LBS.iter().map(|s| s.to_string()).collect();
                            let (id, _) = self.signals[s].assign.join(&endpoint(a), &lbs, now_i);
                            if let Some(st) = self.signals[s].streams[a].as_mut() {
                                st.id = Some(id);
                            }
                        }
                    }
                    Up::Renew(seq) => {
                        st.renewed = st.renewed.max(seq);
                        if let Some(id) = st.id {
                            self.signals[s].assign.acked(id, seq, now_i);
                        }
                    }
                    Up::Refused(accepted) => {
                        // Mirrors `Shared::report_accepted_epoch`: raise above it soon.
                        let sig = &mut self.signals[s];
                        sig.floor = sig.floor.max(accepted);
                        if sig.leading.is_some_and(|e| accepted >= e) {
                            sig.next_attempt = self.now;
                        }
                        self.close_signal_stream(s, a);
                    }
                }
            }
        }
    }

    fn workload(&mut self) {
        // The last change leaves the delivery bound before the end is judged.
        if self.now + DELIVERY_BOUND_MS >= self.plan.faults_ms + self.plan.settle_ms
            || !self.rng.chance(40)
        {
            return;
        }
        let n = self.rng.below(NODES as u64) as usize;
        let d = if self.rng.chance(500) {
            Desired::Down
        } else {
            Desired::None
        };
        self.report.changes += 1;
        // The truth is on the Nodes: every replica's watch sees it (the standby's too).
        for s in 0..SIGNALS {
            if self.signals[s].up && self.signals[s].desired[n] != d {
                self.signals[s].desired[n] = d;
                self.signals[s]
                    .dispatch
                    .apply(&change(n, d), jiff::Timestamp::UNIX_EPOCH);
            }
        }
    }

    // ---- actuators (mirror grpc/service.rs) ------------------------------------------------

    fn receive_actuator(&mut self, a: usize) {
        let now_i = self.at(self.now);
        for s in 0..SIGNALS {
            while let Some((at, _)) = self.links[s][a].down.front()
                && *at <= self.now
                && self.links[s][a].cut_down_until <= self.now
            {
                let Some((_, m)) = self.links[s][a].down.pop_front() else {
                    break;
                };
                let act = &mut self.actuators[a];
                match m {
                    Down::Hello { epoch, incarnation } => {
                        let taken = epoch == act.max_epoch
                            && act.epoch_owner != 0
                            && act.epoch_owner != incarnation;
                        if epoch < act.max_epoch || taken {
                            // The whole stream is refused: nothing it sends is applied.
                            act.streams[s] = None;
                            let accepted = act.max_epoch;
                            self.send_up(s, a, Up::Refused(accepted));
                            continue;
                        }
                        if epoch > act.max_epoch || act.epoch_owner == 0 {
                            act.epoch_owner = incarnation;
                        }
                        act.max_epoch = epoch;
                        act.ownership.retire_before(epoch, now_i);
                        act.streams[s] = Some((epoch, Renewals::new(now_i)));
                        self.send_up(s, a, Up::HelloAck);
                        self.note(|| {
                            format!("actuator {a} accepts Hello epoch {epoch} from signal {s}")
                        });
                    }
                    Down::State { node, version } => {
                        // Only an accepted stream's states are applied.
                        if act.streams[s].is_none() {
                            continue;
                        }
                        if version.epoch < act.max_epoch {
                            // A superseded stream ends, naming the newer epoch.
                            let accepted = act.max_epoch;
                            act.streams[s] = None;
                            self.send_up(s, a, Up::Refused(accepted));
                            continue;
                        }
                        if let Some(held) = &act.held[node]
                            && held.epoch == version.epoch
                            && newer(held, &version)
                        {
                            let what = format!(
                                "actuator {a} got node-{node} at {version:?} below the {held:?} it holds in the same epoch: dropped as stale (a silent loss)"
                            );
                            self.violation(what);
                            continue;
                        }
                        let act = &mut self.actuators[a];
                        if act.held[node].as_ref().is_none_or(|h| newer(&version, h)) {
                            act.held[node] = Some(version);
                        }
                    }
                    Down::Assign(m) => {
                        let Some((epoch, renewals)) = act.streams[s].as_mut() else {
                            continue;
                        };
                        if m.leader_epoch != *epoch {
                            continue;
                        }
                        let grant = Grant {
                            epoch: m.leader_epoch,
                            generation: m.generation,
                            lbs: m.load_balancers.iter().cloned().collect(),
                            valid_for: VALID_FOR,
                        };
                        let anchor = renewals.anchor(m.echo);
                        if act.ownership.accept(grant, anchor, now_i).is_err() {
                            act.streams[s] = None;
                            self.send_up(s, a, Up::Refused(0));
                            continue;
                        }
                        let seq = renewals.renew(now_i);
                        self.send_up(s, a, Up::Renew(seq));
                        let anchor_ms =
                            anchor.map(|t| t.saturating_duration_since(self.base).as_millis());
                        self.note(|| format!("actuator {a} holds e{} g{} {:?} from signal {s} (echo {}, anchor {anchor_ms:?} ms)", m.leader_epoch, m.generation, m.load_balancers, m.echo));
                    }
                }
            }
        }
    }

    // ---- the loop ------------------------------------------------------------------------------

    fn update_silence(&mut self) {
        for s in 0..SIGNALS {
            for a in 0..ACTUATORS {
                let silent = self.signals[s].frozen_until > self.now
                    || self.actuators[a].frozen_until > self.now
                    || self.links[s][a].cut_down_until > self.now
                    || self.links[s][a].cut_up_until > self.now;
                let l = &mut self.links[s][a];
                l.silent_since = match (silent, l.silent_since) {
                    (true, None) => Some(self.now),
                    (true, since) => since,
                    (false, _) => None,
                };
                // An actuator notices the end of a broken stream (its assignment stands).
                if !l.open {
                    self.actuators[a].streams[s] = None;
                }
            }
        }
    }

    fn step(&mut self) {
        self.inject();
        self.workload();
        self.update_silence();
        for s in 0..SIGNALS {
            if !self.signals[s].up || self.signals[s].frozen_until > self.now {
                continue;
            }
            self.receive_signal(s);
            self.elect(s);
            let active = self.apply_term(s);
            self.run_streams(s, active);
        }
        for a in 0..ACTUATORS {
            if self.actuators[a].frozen_until <= self.now {
                self.receive_actuator(a);
            }
        }
        self.check_one_writer();
        self.now += TICK;
    }

    fn writers(&self, lb: &str) -> Vec<usize> {
        let now_i = self.at(self.now);
        (0..ACTUATORS)
            .filter(|a| {
                let o = &self.actuators[*a].ownership;
                o.assigned() && o.owns(lb, now_i)
            })
            .collect()
    }

    fn check_one_writer(&mut self) {
        for lb in LBS {
            let w = self.writers(lb);
            if w.len() > 1 {
                let since = *self.overlap_since.entry(lb).or_insert(self.now);
                let length = self.now - since + TICK;
                self.report.max_overlap_ms = self.report.max_overlap_ms.max(length);
                if since == self.now {
                    self.violation(format!("{lb} writable by actuators {w:?} at once"));
                }
            } else {
                self.overlap_since.remove(lb);
            }
        }
    }

    fn check_settled(&mut self) {
        for lb in LBS {
            let w = self.writers(lb);
            if w.len() != 1 {
                self.violation(format!(
                    "settled: {lb} has writers {w:?} {} ms after the last fault",
                    self.plan.settle_ms
                ));
            }
        }
        let Some(leader) = self.signals.iter().position(|s| s.leading.is_some()) else {
            self.violation("settled: no leader".into());
            return;
        };
        for n in 0..NODES {
            let Some(want) = self.signals[leader]
                .dispatch
                .current(&format!("uid-{n}"))
                .and_then(|d| d.version)
            else {
                continue;
            };
            for a in 0..ACTUATORS {
                if self.actuators[a].held[n] != Some(want) {
                    let have = self.actuators[a].held[n];
                    self.violation(format!(
                        "settled: actuator {a} holds node-{n} at {have:?}, the leader's newest is {want:?}"
                    ));
                }
            }
        }
    }
}

fn node_index(d: &cutover_proto::v1::NodeDesiredState) -> Option<usize> {
    d.node
        .as_ref()
        .and_then(|n| n.name.strip_prefix("node-"))
        .and_then(|i| i.parse().ok())
}

/// Runs one seed.
pub fn run(plan: Plan) -> Report {
    let mut sim = Sim::new(plan);
    let end = plan.faults_ms + plan.settle_ms;
    while sim.now < end {
        sim.step();
    }
    sim.check_settled();
    sim.report
}

/// Runs `seeds` seeds from `first`; returns the reports that found something, and totals.
pub fn sweep(first: u64, seeds: u64) -> (Vec<Report>, BTreeMap<&'static str, u32>, u64) {
    let mut failed = Vec::new();
    let mut faults: BTreeMap<&'static str, u32> = BTreeMap::new();
    let mut max_overlap = 0;
    for seed in first..first + seeds {
        let r = run(Plan::new(seed));
        for (k, v) in &r.faults {
            *faults.entry(k).or_default() += v;
        }
        max_overlap = max_overlap.max(r.max_overlap_ms);
        if !r.violations.is_empty() {
            failed.push(r);
        }
    }
    (failed, faults, max_overlap)
}

/// The one command that replays a seed.
pub fn replay_command(seed: u64) -> String {
    format!("cargo run -p cutover-e2e --release --bin fleet_sim -- --seed {seed}")
}
