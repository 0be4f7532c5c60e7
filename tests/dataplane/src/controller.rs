//! The real-time controller shared by the kernel and user-space realisations: it starts the
//! members, the prober and the client, applies the leaving node's changes (drawn from the
//! scenario, or live from the full stack, [`crate::live`]) to each mux's view, rewrites the
//! data path's eligible sets, and turns the client's events into the cell's counts.
//!
//! Per mux and entry the view holds: admin state (U1: applied A after it became effective),
//! probe state (U2: R after the probe engine's change), membership, and "waiting for a fresh
//! successful probe" (U7: `None` after a `Down` re-enters only after one).

use crate::helper::{ClientEvent, ProbeLine, ProbeTarget, outcome_parse};
use crate::kernel::{Addrs, DataPath, Spawner};
use crate::live::{LiveFeed, NodeChange, Recorded};
use crate::model::{
    Admin, NodeTimeline, Policy, ProbeKind, ProbeOutcome, ProbeState, eligible, probe_eval_time,
    probe_kind,
};
use crate::params::Range;
use crate::report::CellResult;
use crate::sim::Scenario;
use anyhow::Context as _;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::time::Instant;

/// Client warm-up before the first signal (pools and streams connect).
pub const WARMUP: f64 = 3.0;

/// Where the leaving node's changes come from.
#[derive(Debug)]
pub enum Feed {
    /// Drawn from the scenario's parameters ([`NodeTimeline::draw`]).
    Drawn,
    /// From a running system ([`crate::live`]).
    Live(LiveFeed),
}

/// Events of the cell, in seconds after the first signal.
#[derive(Debug, Clone, PartialEq)]
enum Ev {
    Change(NodeChange),
    AdminSet {
        mux: usize,
        admin: Admin,
    },
    RemovedFrom {
        mux: usize,
    },
    FreshUp {
        mux: usize,
    },
    Probe {
        mux: usize,
        member: usize,
        up: bool,
    },
    /// Synthetic probes (user-space): probe `member` now, from the node's current state.
    ProbeSend {
        member: usize,
    },
}

/// What each mux believes about each entry.
struct Views {
    admin: Vec<Vec<Admin>>,
    probe: Vec<Vec<bool>>,
    removed: Vec<Vec<bool>>,
    /// `Some(t)`: `None` applied at t after a `Down`, waiting for a fresh successful probe;
    /// `Some(inf)`: one came, its reaction is scheduled.
    fresh_pending: Vec<Vec<Option<f64>>>,
}

impl Views {
    fn new(muxes: usize, n: usize) -> Self {
        Views {
            admin: vec![vec![Admin::None; n]; muxes],
            probe: vec![vec![true; n]; muxes],
            removed: vec![vec![false; n]; muxes],
            fresh_pending: vec![vec![None; n]; muxes],
        }
    }

    fn eligible(&self, mux: usize) -> Vec<usize> {
        (0..self.admin[mux].len())
            .filter(|&i| {
                self.fresh_pending[mux][i].is_none()
                    && eligible(
                        !self.removed[mux][i],
                        self.admin[mux][i],
                        self.probe[mux][i],
                        true,
                    )
            })
            .collect()
    }
}

/// The leaving node as a probe sees it now (synthetic probes).
struct NodeNow {
    alive: bool,
    kep_bad: bool,
    local_bad: bool,
}

impl NodeNow {
    fn outcome(&self, kind: ProbeKind) -> ProbeOutcome {
        let bad = match kind {
            ProbeKind::Tcp => false,
            ProbeKind::HttpShared => self.kep_bad,
            ProbeKind::HttpHcnp => self.local_bad,
        };
        match (self.alive, bad) {
            (false, _) => ProbeOutcome::Timeout,
            (true, false) => ProbeOutcome::Ok,
            (true, true) => ProbeOutcome::HttpNon200,
        }
    }
}

/// Run one cell in real time through `path`. Member 0 leaves.
/// `synthetic_probes`: probe outcomes come from the node's state instead of a real prober (the
/// user-space realisation, where a proxy cannot make a TCP connect time out).
pub async fn run_cell(
    sc: &Scenario,
    seed: u64,
    spawner: &Spawner,
    addrs: &Addrs,
    path: &mut dyn DataPath,
    synthetic_probes: bool,
    feed: Feed,
) -> anyhow::Result<CellResult> {
    let mut rng = StdRng::seed_from_u64(seed);
    let n = sc.members;
    let muxes = sc.unknowns.muxes.max(1);
    let kind = probe_kind(sc.policy, sc.mode);
    // The drawn timeline, or the live feed and its longest run.
    let (mut evs, length, mut live) = match feed {
        Feed::Drawn => {
            let node = NodeTimeline::draw(sc.departure, sc.policy, sc.mode, &sc.timings, &mut rng);
            let horizon = sc.horizon(&node);
            (drawn_events(sc, &node, muxes, &mut rng), horizon, None)
        }
        Feed::Live(f) => (Vec::new(), f.length + tail(sc), Some(f)),
    };

    let (mut members, member_bind) = spawn_members(spawner, addrs, path).await?;
    for m in 0..muxes {
        path.set_eligible(m, &(0..n).collect::<Vec<_>>())?;
    }
    let phases: Vec<f64> = (0..n)
        .map(|_| rng.gen_range(0.0..sc.lb.probe_interval))
        .collect();
    let (ptx, mut probe_rx) = tokio::sync::mpsc::unbounded_channel::<ProbeLine>();
    let _prober = if synthetic_probes {
        for (member, phase) in phases.iter().enumerate() {
            evs.push((phase - WARMUP, Ev::ProbeSend { member }));
        }
        None
    } else {
        Some(spawn_prober(
            sc,
            spawner,
            addrs,
            &member_bind,
            &phases,
            kind,
            ptx.clone(),
        )?)
    };

    let c = &sc.clients;
    let duration = WARMUP + length + c.request_timeout + 1.0;
    let (mut client, client_task) = spawn_client(sc, spawner, addrs, duration)?;

    let t0 = crate::helper::now() + WARMUP;
    let rel = |abs: f64| abs - t0;
    let start = Instant::now() + Duration::from_secs_f64(WARMUP);
    let at = |t: f64| instant_at(start, t);
    let mut live_events = match live.take() {
        Some(f) => {
            // The script may begin: t = 0 is when the client has warmed up.
            let _ = f.start.send(t0);
            Some(f.events)
        }
        None => None,
    };

    let mut views = Views::new(muxes, n);
    let mut node = NodeNow {
        alive: true,
        kep_bad: false,
        local_bad: false,
    };
    let mut recorded = Recorded::default();
    let mut probe_state: Vec<ProbeState> = vec![ProbeState::default(); n];
    let mut res = CellResult::default();
    let mut last_count = path.new_flows(0)?;
    let mut sample = tokio::time::interval(Duration::from_millis(200));
    let mut end = length;
    let mut member0 = members[0].stdin.take().context("member stdin")?;
    let react = Range::new(0.0, sc.unknowns.probe_reaction_max);
    let lag = Range::new(0.0, sc.unknowns.admin_apply_lag_max);
    drop(ptx);
    loop {
        evs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let next_at = evs.first().map_or(end, |(t, _)| *t).min(end);
        tokio::select! {
            _ = tokio::time::sleep_until(at(next_at)) => {
                let now = Instant::now();
                let mut changed = std::collections::BTreeSet::new();
                while evs.first().is_some_and(|(t, _)| at(*t) <= now) {
                    let (t, ev) = evs.remove(0);
                    match ev {
                        Ev::Change(ch) => {
                            apply_change(sc, ch, t, path, &mut member0, &mut node, &mut recorded, &mut end).await?;
                        }
                        Ev::AdminSet { mux, admin } => {
                            let was = views.admin[mux][0];
                            views.admin[mux][0] = admin;
                            views.fresh_pending[mux][0] = (admin == Admin::None
                                && was == Admin::Down
                                && sc.unknowns.none_requires_fresh_up)
                                .then_some(t);
                            changed.insert(mux);
                        }
                        Ev::RemovedFrom { mux } => {
                            if recorded.removed.is_none() {
                                path.remove(0, sc.unknowns.removed_member_flows)?;
                                recorded.removed = Some(t);
                            }
                            views.removed[mux][0] = true;
                            changed.insert(mux);
                        }
                        Ev::FreshUp { mux } => {
                            views.fresh_pending[mux][0] = None;
                            changed.insert(mux);
                        }
                        Ev::Probe { mux, member, up } => {
                            views.probe[mux][member] = up;
                            changed.insert(mux);
                        }
                        Ev::ProbeSend { member } => {
                            let o = if member == 0 { node.outcome(kind) } else { ProbeOutcome::Ok };
                            let eval = probe_eval_time(kind, o, t, &sc.lb);
                            on_probe(sc, kind, member, o, eval, &mut probe_state, &mut views, &mut evs, &mut rng, muxes, react);
                            evs.push((t + sc.lb.probe_interval, Ev::ProbeSend { member }));
                        }
                    }
                }
                for m in changed {
                    path.set_eligible(m, &views.eligible(m))?;
                }
                if now >= at(end) {
                    break;
                }
            }
            p = probe_rx.recv(), if !synthetic_probes => {
                let Some(p) = p else { anyhow::bail!("prober ended") };
                let o = outcome_parse(&p.outcome);
                let eval = rel(probe_eval_time(kind, o, p.sent, &sc.lb));
                on_probe(sc, kind, p.member, o, eval, &mut probe_state, &mut views, &mut evs, &mut rng, muxes, react);
            }
            e = recv_live(&mut live_events) => {
                match e {
                    Some(e) => {
                        let t = rel(e.at);
                        match e.change {
                            // cutover's writes reach the data plane only in cutover's modes.
                            NodeChange::Admin(admin) if sc.mode.is_cutover() => {
                                for mux in 0..muxes {
                                    evs.push((t + lag.draw(&mut rng), Ev::AdminSet { mux, admin }));
                                }
                            }
                            NodeChange::Admin(_) => {}
                            NodeChange::Removed => {
                                for mux in 0..muxes {
                                    evs.push((t + lag.draw(&mut rng), Ev::RemovedFrom { mux }));
                                }
                            }
                            ch => evs.push((t, Ev::Change(ch))),
                        }
                    }
                    None => live_events = None,
                }
            }
            _ = sample.tick() => {
                let now = rel(crate::helper::now());
                let count = path.new_flows(0)?;
                if count > last_count && now >= 0.0 {
                    match recorded.returned {
                        Some(r) if now >= r => {
                            if res.return_runs == 0 {
                                res.return_to_first_new_sum = now - r;
                                res.return_runs = 1;
                            }
                        }
                        _ => res.last_new_on_node = Some(now),
                    }
                }
                last_count = count;
            }
        }
    }
    if recorded.returned.is_some() && res.return_runs == 0 {
        res.return_without_new = 1;
    }
    // The client ends by itself (its duration covers the run and the request timeout); a live
    // script that ended early is not waited for beyond its consequences.
    let grace = Duration::from_secs_f64(c.request_timeout + 2.0);
    if tokio::time::timeout(grace, client.wait()).await.is_err() {
        let _ = client.start_kill();
    }
    let events = tokio::time::timeout(Duration::from_secs(10), client_task)
        .await
        .context("client did not end")??;
    drop(members);
    dump_events(sc, seed, t0, &events);
    classify(&mut res, &events, t0, &recorded, sc.policy);
    res.runs = 1;
    Ok(res)
}

/// How long after the last change its consequences can still show: the probe window, the
/// reaction, a connect timeout.
fn tail(sc: &Scenario) -> f64 {
    (f64::from(sc.lb.probe_threshold) + 1.0) * sc.lb.probe_interval
        + sc.unknowns.probe_reaction_max
        + sc.unknowns.admin_apply_lag_max
        + sc.clients.connect_timeout
        + 1.0
}

/// The drawn timeline as events.
fn drawn_events(
    sc: &Scenario,
    node: &NodeTimeline,
    muxes: usize,
    rng: &mut StdRng,
) -> Vec<(f64, Ev)> {
    let mut evs: Vec<(f64, Ev)> = Vec::new();
    if let Some(k) = node.kep_unhealthy {
        evs.push((k, Ev::Change(NodeChange::Kep503)));
    }
    if let Some(k) = node.local_terminating {
        evs.push((k, Ev::Change(NodeChange::LocalTerminating)));
    }
    if let Some(k) = node.local_exit {
        evs.push((k, Ev::Change(NodeChange::LocalExit)));
    }
    evs.push((node.dead, Ev::Change(NodeChange::Dead)));
    if sc.mode.is_cutover() {
        for mux in 0..muxes {
            if let Some(d) = node.admin_down_for_mux(&sc.unknowns, rng) {
                evs.push((
                    d,
                    Ev::AdminSet {
                        mux,
                        admin: Admin::Down,
                    },
                ));
            }
        }
    }
    evs
}

/// One change to the leaving node, applied to the data path and the member at `t`.
#[allow(clippy::too_many_arguments)]
async fn apply_change(
    sc: &Scenario,
    ch: NodeChange,
    t: f64,
    path: &mut dyn DataPath,
    member0: &mut ChildStdin,
    node: &mut NodeNow,
    recorded: &mut Recorded,
    end: &mut f64,
) -> anyhow::Result<()> {
    // eTP Cluster: the node's kube-proxy forwards to pods on other nodes; its own pods leaving
    // change nothing for the load balancer.
    let local = sc.policy == Policy::Local;
    match ch {
        NodeChange::Kep503 => {
            node.kep_bad = true;
            member0.write_all(b"kep503\n").await?;
        }
        NodeChange::LocalTerminating if local => {
            node.local_bad = true;
            member0.write_all(b"local-terminating\n").await?;
        }
        NodeChange::LocalExit if local => {
            node.local_bad = true;
            path.local_drop(0)?;
            member0.write_all(b"local-exit\n").await?;
            recorded.local_exit.get_or_insert(t);
        }
        NodeChange::LocalTerminating | NodeChange::LocalExit => {}
        NodeChange::Dead => {
            node.alive = false;
            path.kill(0)?;
            recorded.die(t);
        }
        NodeChange::Revive => {
            node.alive = true;
            path.revive(0)?;
            recorded.revive(t);
        }
        NodeChange::Returned => recorded.returned = Some(t),
        NodeChange::End => *end = end.min(t + tail(sc)),
        // Turned into per-mux events on arrival.
        NodeChange::Admin(_) | NodeChange::Removed => {}
    }
    Ok(())
}

/// A probe result evaluated at `eval`: through the probe state machine, each change reaching
/// every mux after its own reaction draw; a success also ends a mux's wait for a fresh one.
#[allow(clippy::too_many_arguments)]
fn on_probe(
    sc: &Scenario,
    kind: ProbeKind,
    member: usize,
    o: ProbeOutcome,
    eval: f64,
    probe_state: &mut [ProbeState],
    views: &mut Views,
    evs: &mut Vec<(f64, Ev)>,
    rng: &mut StdRng,
    muxes: usize,
    react: Range,
) {
    if let Some(chg) = probe_state[member].observe(kind, o, eval, &sc.lb, &sc.unknowns) {
        for mux in 0..muxes {
            evs.push((
                chg.at + react.draw(rng),
                Ev::Probe {
                    mux,
                    member,
                    up: chg.up,
                },
            ));
        }
    }
    if o == ProbeOutcome::Ok && probe_state[member].up {
        for mux in 0..muxes {
            if views.fresh_pending[mux][member].is_some_and(|since| eval >= since) {
                views.fresh_pending[mux][member] = Some(f64::INFINITY);
                evs.push((eval + react.draw(rng), Ev::FreshUp { mux }));
            }
        }
    }
}

async fn recv_live(
    rx: &mut Option<tokio::sync::mpsc::UnboundedReceiver<crate::live::LiveEvent>>,
) -> Option<crate::live::LiveEvent> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Starts every member; returns them and where each listens.
async fn spawn_members(
    spawner: &Spawner,
    addrs: &Addrs,
    path: &mut dyn DataPath,
) -> anyhow::Result<(Vec<Child>, Vec<(String, u16, u16, u16)>)> {
    let mut members: Vec<Child> = Vec::new();
    let mut member_bind = addrs.member_bind.clone();
    for (i, (bind, s, h, c)) in addrs.member_bind.iter().enumerate() {
        let args: Vec<String> = vec![
            "helper-member".into(),
            "--id".into(),
            i.to_string(),
            "--bind".into(),
            bind.clone(),
            "--service".into(),
            s.to_string(),
            "--healthz".into(),
            h.to_string(),
            "--hcnp".into(),
            c.to_string(),
        ];
        let mut ch = spawner.spawn(addrs.member_ns[i].as_deref(), &args)?;
        let out = ch.stdout.take().context("member stdout")?;
        let mut l = BufReader::new(out).lines();
        let ready = tokio::time::timeout(Duration::from_secs(10), l.next_line())
            .await
            .context("member did not start")??
            .context("member ended")?;
        let ready: serde_json::Value = serde_json::from_str(&ready)?;
        let port = |k: usize| {
            ready["ports"][k]
                .as_u64()
                .map(|p| p as u16)
                .context("ports")
        };
        member_bind[i] = (bind.clone(), port(0)?, port(1)?, port(2)?);
        path.set_member_addr(i, format!("{bind}:{}", port(0)?).parse()?);
        members.push(ch);
    }
    Ok((members, member_bind))
}

/// The prober in the LB's place, its lines forwarded to `ptx`.
fn spawn_prober(
    sc: &Scenario,
    spawner: &Spawner,
    addrs: &Addrs,
    member_bind: &[(String, u16, u16, u16)],
    phases: &[f64],
    kind: ProbeKind,
    ptx: tokio::sync::mpsc::UnboundedSender<ProbeLine>,
) -> anyhow::Result<Child> {
    let port_of = |i: usize| match kind {
        ProbeKind::Tcp => member_bind[i].1,
        ProbeKind::HttpShared => member_bind[i].2,
        ProbeKind::HttpHcnp => member_bind[i].3,
    };
    let mut pargs: Vec<String> = vec![
        "helper-prober".into(),
        "--interval".into(),
        sc.lb.probe_interval.to_string(),
        "--http-timeout".into(),
        sc.lb.http_timeout().to_string(),
    ];
    for (i, phase) in phases.iter().enumerate() {
        let t = ProbeTarget {
            member: i,
            addr: format!("{}:{}", member_bind[i].0, port_of(i)).parse()?,
            http: kind.is_http(),
            phase: *phase,
        };
        pargs.push("--target".into());
        pargs.push(t.to_string());
    }
    let mut p = spawner.spawn(addrs.lb_ns.as_deref(), &pargs)?;
    let mut lines = BufReader::new(p.stdout.take().context("prober stdout")?).lines();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Ok(l) = serde_json::from_str::<ProbeLine>(&line)
                && ptx.send(l).is_err()
            {
                break;
            }
        }
    });
    Ok(p)
}

type ClientTask = tokio::task::JoinHandle<Vec<ClientEvent>>;

/// The load generator, its events collected by a task.
fn spawn_client(
    sc: &Scenario,
    spawner: &Spawner,
    addrs: &Addrs,
    duration: f64,
) -> anyhow::Result<(Child, ClientTask)> {
    let c = &sc.clients;
    let cargs: Vec<String> = vec![
        "helper-client".into(),
        "--target".into(),
        addrs.vip.to_string(),
        "--rate".into(),
        c.new_per_sec.to_string(),
        "--pool".into(),
        c.pool.to_string(),
        "--pool-max-age".into(),
        c.pool_max_age.to_string(),
        "--pool-every".into(),
        c.pool_request_every.to_string(),
        "--streams".into(),
        c.streams.to_string(),
        "--connect-timeout".into(),
        c.connect_timeout.to_string(),
        "--request-timeout".into(),
        c.request_timeout.to_string(),
        "--duration".into(),
        duration.to_string(),
    ];
    let mut client = spawner.spawn(addrs.client_ns.as_deref(), &cargs)?;
    let client_out = client.stdout.take().context("client stdout")?;
    let task = tokio::spawn(async move {
        let mut events = Vec::new();
        let mut l = BufReader::new(client_out).lines();
        while let Ok(Some(line)) = l.next_line().await {
            if let Ok(e) = serde_json::from_str::<ClientEvent>(&line) {
                events.push(e);
            }
        }
        events
    });
    Ok((client, task))
}

/// Debugging aid (`CDP_DUMP_DIR`): the client's raw events, times relative to the first signal.
fn dump_events(sc: &Scenario, seed: u64, t0: f64, events: &[ClientEvent]) {
    let Ok(dir) = std::env::var("CDP_DUMP_DIR") else {
        return;
    };
    let name = format!(
        "{dir}/{}-{}-{}-{seed}.jsonl",
        sc.departure, sc.policy, sc.mode
    )
    .replace(' ', "_");
    let lines: Vec<String> = events
        .iter()
        .map(|e| format!("{:.3} {} {} {:?}", e.t - t0, e.kind, e.outcome, e.member))
        .collect();
    let _ = std::fs::write(name, lines.join("\n"));
}

fn instant_at(start: Instant, t: f64) -> Instant {
    if t >= 0.0 {
        start + Duration::from_secs_f64(t)
    } else {
        start
            .checked_sub(Duration::from_secs_f64(-t))
            .unwrap_or(start)
    }
}

/// Turn the client's events into the cell's counts, each with a cause from what was applied.
pub fn classify(
    res: &mut CellResult,
    events: &[ClientEvent],
    t0: f64,
    recorded: &Recorded,
    policy: Policy,
) {
    use crate::report::Cause;
    for e in events {
        let t = e.t - t0;
        let cause_at = |t: f64| recorded.cause_at(policy, t);
        match (e.kind.as_str(), e.outcome.as_str()) {
            ("new", "ok") if t >= 0.0 => res.new_attempts += 1,
            ("new", _) if t >= 0.0 => {
                res.new_attempts += 1;
                res.add_failed_new(cause_at(t));
            }
            ("reconnect", _) if t >= 0.0 => res.add_failed_reconnect(cause_at(t)),
            (k @ ("pool" | "stream"), _) if t >= -1.0 => {
                // A stream's event carries the time of its last byte; the next was due 200 ms later.
                let t = if k == "stream" { t + 0.25 } else { t };
                let cause = match (e.member, cause_at(t)) {
                    (Some(0), Cause::PodGone) => Cause::PodExit,
                    (Some(0), c) => c,
                    (_, _) => Cause::Other,
                };
                if cause == Cause::VmDead {
                    res.pinned_at_death += 1;
                }
                res.add_broken(cause, k == "stream");
            }
            _ => {}
        }
    }
}
