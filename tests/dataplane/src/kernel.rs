//! The kernel-true realisation of one cell: namespaces made by the run ([`crate::netns`]), an LB
//! namespace that DNATs the VIP with nftables (`jhash` over the 4-tuple picks one of the
//! `muxes` chains, each hashing over the entries *it* sees eligible; conntrack pins every
//! established flow and every half-open one, U5), members serving TCP in their namespaces, a
//! dead VM = an nftables drop-all in its namespace (SYN timeouts, hung flows). Probes are real
//! (a prober in the LB namespace); their outcomes go through the model's probe state machine
//! and per-mux reaction draws; admin state follows the drawn timeline (per-mux apply lag).
//!
//! The user-space realisation ([`crate::userspace`]) runs the same controller with an
//! in-process proxy instead of the LB namespace.

use crate::helper::{ClientEvent, ProbeLine, ProbeTarget, outcome_parse};
use crate::model::{
    Admin, NodeTimeline, Policy, ProbeKind, ProbeOutcome, ProbeState, eligible, probe_eval_time,
    probe_kind,
};
use crate::netns::{self, HCNP_PORT, HEALTHZ_PORT, Lab, SERVICE_PORT, VIP, member_ip};
use crate::params::Range;
use crate::report::{Cause, CellResult};
use crate::sim::Scenario;
use anyhow::Context as _;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

/// Client warm-up before the first signal (pools and streams connect).
const WARMUP: f64 = 3.0;

/// The data path the controller drives: which entries each mux sees eligible, a member's death
/// and its local pods' exit, the per-member new-flow counters.
pub trait DataPath: Send {
    /// Set mux `mux`'s eligible entries (sorted).
    fn set_eligible(&mut self, mux: usize, members: &[usize]) -> anyhow::Result<()>;
    /// The VM is gone: drop every packet to and from it.
    fn kill(&mut self, member: usize) -> anyhow::Result<()>;
    /// eTP Local: kube-proxy drops new flows to the Service (no local endpoints).
    fn local_drop(&mut self, member: usize) -> anyhow::Result<()>;
    /// New flows assigned to `member` so far.
    fn new_flows(&mut self, member: usize) -> anyhow::Result<u64>;
    /// Where member `member`'s Service port listens (user-space proxy only).
    fn set_member_addr(&mut self, _member: usize, _addr: std::net::SocketAddr) {}
}

/// The nftables data path in the LB namespace.
pub struct NftPath {
    lb: String,
    members: Vec<String>,
    orphan_reset: bool,
}

impl NftPath {
    pub fn new(
        lab: &Lab,
        muxes: usize,
        orphan_reset: bool,
        idle_timeout: f64,
        syn_sent_timeout: f64,
    ) -> anyhow::Result<Self> {
        let lb = lab.lb_ns();
        lab.sysctl(&lb, "net.ipv4.ip_forward=1")?;
        // Mid-stream packets of unknown flows are INVALID (no loose pick-up), U10 below.
        lab.sysctl(&lb, "net.netfilter.nf_conntrack_tcp_loose=0")?;
        lab.sysctl(
            &lb,
            &format!(
                "net.netfilter.nf_conntrack_tcp_timeout_established={}",
                idle_timeout.round() as u64
            ),
        )?;
        // A half-open flow stays pinned while its client still retransmits (U5), not for
        // conntrack's 120 s: our one client reuses the source port of a failed connect, which
        // would otherwise send later new connections to the dead member (clients on Azure are
        // many addresses; each new connection is a new 5-tuple).
        lab.sysctl(
            &lb,
            &format!(
                "net.netfilter.nf_conntrack_tcp_timeout_syn_sent={}",
                syn_sent_timeout.ceil() as u64
            ),
        )?;
        let mut s = String::from("table ip cdp {\n");
        let mux_map: Vec<String> = (0..muxes).map(|m| format!("{m} : jump mux{m}")).collect();
        s += &format!(
            "  chain pre {{ type nat hook prerouting priority dstnat; policy accept;\n    ip daddr {VIP} tcp dport {SERVICE_PORT} jhash ip saddr . tcp sport . ip daddr . tcp dport mod {muxes} seed 0x1 vmap {{ {} }}\n  }}\n",
            mux_map.join(", ")
        );
        for m in 0..muxes {
            s += &format!("  chain mux{m} {{\n  }}\n");
        }
        for i in 0..lab.members {
            s += &format!(
                "  chain be{i} {{\n    counter dnat to {}\n  }}\n",
                member_ip(i)
            );
        }
        let orphan = if orphan_reset {
            "reject with tcp reset"
        } else {
            "drop"
        };
        s += &format!(
            "  chain filt {{\n    type filter hook forward priority filter; policy accept;\n    ct state invalid ip protocol tcp {orphan}\n    ip daddr {VIP} drop\n  }}\n}}\n"
        );
        netns::nft(&lb, &s)?;
        Ok(NftPath {
            lb,
            members: (0..lab.members).map(|i| lab.member_ns(i)).collect(),
            orphan_reset,
        })
    }
}

impl DataPath for NftPath {
    fn set_eligible(&mut self, mux: usize, members: &[usize]) -> anyhow::Result<()> {
        let rule = if members.is_empty() {
            // AllProbedDown: the frontend does not answer SYNs.
            "drop".to_string()
        } else {
            let map: Vec<String> = members
                .iter()
                .enumerate()
                .map(|(k, m)| format!("{k} : jump be{m}"))
                .collect();
            format!(
                "jhash ip saddr . tcp sport . ip daddr . tcp dport mod {} seed 0x2 vmap {{ {} }}",
                members.len(),
                map.join(", ")
            )
        };
        netns::nft(
            &self.lb,
            &format!("flush chain ip cdp mux{mux}\nadd rule ip cdp mux{mux} {rule}\n"),
        )
    }

    fn kill(&mut self, member: usize) -> anyhow::Result<()> {
        netns::nft(
            &self.members[member],
            "table inet dead {\n  chain in {\n    type filter hook input priority -300; policy drop;\n  }\n  chain out {\n    type filter hook output priority -300; policy drop;\n  }\n}\n",
        )
    }

    fn local_drop(&mut self, member: usize) -> anyhow::Result<()> {
        netns::nft(
            &self.members[member],
            &format!(
                "table inet kp {{\n  chain in {{ type filter hook input priority 0; policy accept;\n    tcp dport {SERVICE_PORT} ct state new drop\n  }}\n}}\n"
            ),
        )
    }

    fn new_flows(&mut self, member: usize) -> anyhow::Result<u64> {
        let _ = self.orphan_reset;
        let v = netns::nft_json(
            &self.lb,
            &["list", "chain", "ip", "cdp", &format!("be{member}")],
        )?;
        let items = v["nftables"].as_array().context("nft -j")?;
        for it in items {
            if let Some(exprs) = it["rule"]["expr"].as_array() {
                for e in exprs {
                    if let Some(p) = e["counter"]["packets"].as_u64() {
                        return Ok(p);
                    }
                }
            }
        }
        Ok(0)
    }
}

/// How to start a helper process (inside a namespace or not).
#[derive(Debug, Clone)]
pub struct Spawner {
    pub exe: std::path::PathBuf,
}

impl Spawner {
    pub fn spawn(&self, ns: Option<&str>, args: &[String]) -> anyhow::Result<Child> {
        let mut cmd = match ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&self.exe);
                c
            }
            None => Command::new(&self.exe),
        };
        cmd.args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        cmd.spawn()
            .with_context(|| format!("spawning {:?} {args:?}", self.exe))
    }
}

/// Addresses of a realisation: what the prober probes and the client connects to.
#[derive(Debug, Clone)]
pub struct Addrs {
    pub client_ns: Option<String>,
    pub lb_ns: Option<String>,
    pub member_ns: Vec<Option<String>>,
    pub vip: std::net::SocketAddr,
    /// (bind address, service, healthz, hcnp ports) per member.
    pub member_bind: Vec<(String, u16, u16, u16)>,
}

impl Addrs {
    pub fn kernel(lab: &Lab) -> Self {
        Addrs {
            client_ns: Some(lab.client_ns()),
            lb_ns: Some(lab.lb_ns()),
            member_ns: (0..lab.members).map(|i| Some(lab.member_ns(i))).collect(),
            vip: format!("{VIP}:{SERVICE_PORT}")
                .parse()
                .expect("static address"),
            member_bind: (0..lab.members)
                .map(|i| (member_ip(i), SERVICE_PORT, HEALTHZ_PORT, HCNP_PORT))
                .collect(),
        }
    }
}

/// Events of the cell's timeline, relative to the first signal.
#[derive(Debug, Clone, PartialEq)]
enum Ev {
    Kep503,
    LocalTerminating,
    LocalExit,
    Dead,
    AdminDown { mux: usize },
    Probe { mux: usize, member: usize, up: bool },
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
) -> anyhow::Result<CellResult> {
    let mut rng = StdRng::seed_from_u64(seed);
    let n = sc.members;
    let muxes = sc.unknowns.muxes.max(1);
    let node = NodeTimeline::draw(sc.departure, sc.policy, sc.mode, &sc.timings, &mut rng);
    let horizon = sc.horizon(&node);
    let kind = probe_kind(sc.policy, sc.mode);
    let react = Range::new(0.0, sc.unknowns.probe_reaction_max);

    // Members.
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
    for m in 0..muxes {
        path.set_eligible(m, &(0..n).collect::<Vec<_>>())?;
    }
    // Prober in the LB's place.
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
    let phases: Vec<f64> = (0..n)
        .map(|_| rng.gen_range(0.0..sc.lb.probe_interval))
        .collect();
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
    let (ptx, mut probe_rx) = tokio::sync::mpsc::unbounded_channel::<ProbeLine>();
    let mut prober: Option<Child> = None;
    if !synthetic_probes {
        let mut p = spawner.spawn(addrs.lb_ns.as_deref(), &pargs)?;
        let mut lines = BufReader::new(p.stdout.take().context("prober stdout")?).lines();
        let ptx = ptx.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(l) = serde_json::from_str::<ProbeLine>(&line)
                    && ptx.send(l).is_err()
                {
                    break;
                }
            }
        });
        prober = Some(p);
    }

    // Client.
    let c = &sc.clients;
    let duration = WARMUP + horizon + c.request_timeout + 1.0;
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
    let client_task = tokio::spawn(async move {
        let mut events = Vec::new();
        let mut l = BufReader::new(client_out).lines();
        while let Ok(Some(line)) = l.next_line().await {
            if let Ok(e) = serde_json::from_str::<ClientEvent>(&line) {
                events.push(e);
            }
        }
        events
    });

    let t0 = crate::helper::now() + WARMUP;
    let rel = |abs: f64| abs - t0;
    let start = tokio::time::Instant::now() + Duration::from_secs_f64(WARMUP);
    let at = |t: f64| instant_at(start, t);
    if synthetic_probes {
        // Probes sent at phase + k I; outcomes from the node's state; delivered when known.
        let mut items: Vec<(f64, usize, f64, ProbeOutcome)> = Vec::new();
        for (i, phase) in phases.iter().enumerate() {
            let mut s = phase - WARMUP;
            while s <= horizon + sc.lb.probe_interval {
                let o = if i == 0 {
                    node.probe_outcome(kind, s)
                } else {
                    ProbeOutcome::Ok
                };
                items.push((probe_eval_time(kind, o, s, &sc.lb), i, s, o));
                s += sc.lb.probe_interval;
            }
        }
        items.sort_by(|a, b| a.0.total_cmp(&b.0));
        let ptx = ptx.clone();
        tokio::spawn(async move {
            for (eval, member, sent, o) in items {
                tokio::time::sleep_until(instant_at(start, eval)).await;
                let line = ProbeLine {
                    member,
                    sent: t0 + sent,
                    outcome: crate::helper::outcome_name(o).to_string(),
                };
                if ptx.send(line).is_err() {
                    break;
                }
            }
        });
    }
    drop(ptx);

    // The timeline known in advance.
    let mut evs: Vec<(f64, Ev)> = Vec::new();
    if kind == ProbeKind::HttpShared
        && let Some(k) = node.kep_unhealthy
    {
        evs.push((k, Ev::Kep503));
    }
    if sc.policy == Policy::Local {
        if let Some(k) = node.local_terminating {
            evs.push((k, Ev::LocalTerminating));
        }
        if let Some(k) = node.local_exit {
            evs.push((k, Ev::LocalExit));
        }
    }
    evs.push((node.dead, Ev::Dead));
    if sc.mode.is_cutover() {
        for mux in 0..muxes {
            if let Some(d) = node.admin_down_for_mux(&sc.unknowns, &mut rng) {
                evs.push((d, Ev::AdminDown { mux }));
            }
        }
    }

    let mut probe_state: Vec<ProbeState> = vec![ProbeState::default(); n];
    let mut view_probe = vec![vec![true; n]; muxes];
    let mut view_admin = vec![vec![Admin::None; n]; muxes];
    let mut res = CellResult::default();
    let mut last_count = path.new_flows(0)?;
    let mut sample = tokio::time::interval(Duration::from_millis(200));
    let end = at(horizon);
    let mut member0_stdin = members[0].stdin.take().context("member stdin")?;
    loop {
        evs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let next_at = evs.first().map(|(t, _)| at(*t)).unwrap_or(end).min(end);
        tokio::select! {
            _ = tokio::time::sleep_until(next_at) => {
                let now = tokio::time::Instant::now();
                let mut changed = std::collections::BTreeSet::new();
                while evs.first().is_some_and(|(t, _)| at(*t) <= now) {
                    let (_, ev) = evs.remove(0);
                    match ev {
                        Ev::Kep503 => member0_stdin.write_all(b"kep503\n").await?,
                        Ev::LocalTerminating => member0_stdin.write_all(b"local-terminating\n").await?,
                        Ev::LocalExit => {
                            path.local_drop(0)?;
                            member0_stdin.write_all(b"local-exit\n").await?;
                        }
                        Ev::Dead => path.kill(0)?,
                        Ev::AdminDown { mux } => {
                            view_admin[mux][0] = Admin::Down;
                            changed.insert(mux);
                        }
                        Ev::Probe { mux, member, up } => {
                            view_probe[mux][member] = up;
                            changed.insert(mux);
                        }
                    }
                }
                for m in changed {
                    let el: Vec<usize> = (0..n)
                        .filter(|&i| eligible(true, view_admin[m][i], view_probe[m][i], true))
                        .collect();
                    path.set_eligible(m, &el)?;
                }
                if now >= end {
                    break;
                }
            }
            p = probe_rx.recv() => {
                let Some(p) = p else { anyhow::bail!("prober ended") };
                let o = outcome_parse(&p.outcome);
                let t = rel(probe_eval_time(kind, o, p.sent, &sc.lb));
                if let Some(chg) = probe_state[p.member].observe(kind, o, t, &sc.lb, &sc.unknowns) {
                    for mux in 0..muxes {
                        evs.push((chg.at + react.draw(&mut rng), Ev::Probe { mux, member: p.member, up: chg.up }));
                    }
                }
            }
            _ = sample.tick() => {
                let now = rel(crate::helper::now());
                let c = path.new_flows(0)?;
                if c > last_count && now >= 0.0 {
                    res.last_new_on_node = Some(now);
                }
                last_count = c;
            }
        }
    }
    // The client ends by itself (its duration covers the horizon and the request timeout).
    let events = tokio::time::timeout(Duration::from_secs_f64(duration + 10.0), client_task)
        .await
        .context("client did not end")??;
    drop(prober);
    drop(members);
    if let Ok(dir) = std::env::var("CDP_DUMP_DIR") {
        // Debugging aid: the client's raw events, times relative to the first signal.
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
    classify(&mut res, &events, t0, &node, sc.policy);
    res.runs = 1;
    Ok(res)
}

fn instant_at(start: tokio::time::Instant, t: f64) -> tokio::time::Instant {
    if t >= 0.0 {
        start + Duration::from_secs_f64(t)
    } else {
        start
            .checked_sub(Duration::from_secs_f64(-t))
            .unwrap_or(start)
    }
}

/// Turn the client's events into the cell's counts, each with a cause from the timeline.
pub fn classify(
    res: &mut CellResult,
    events: &[ClientEvent],
    t0: f64,
    node: &NodeTimeline,
    policy: Policy,
) {
    let cause_at = |t: f64| -> Cause {
        if t >= node.dead - 0.05 {
            Cause::VmDead
        } else if policy == Policy::Local && node.local_exit.is_some_and(|e| t >= e - 0.3) {
            Cause::PodGone
        } else {
            Cause::Other
        }
    };
    for e in events {
        let t = e.t - t0;
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

/// Run one cell on the kernel path: make the namespaces, run, remove them.
pub async fn run_kernel_cell(
    sc: &Scenario,
    seed: u64,
    exe: &Path,
    cell: &str,
) -> anyhow::Result<CellResult> {
    let lab = Lab::create(cell, sc.members)?;
    let mut path = NftPath::new(
        &lab,
        sc.unknowns.muxes.max(1),
        sc.unknowns.orphan_packet_reset,
        sc.lb.idle_timeout,
        sc.clients.connect_timeout + 1.0,
    )?;
    let addrs = Addrs::kernel(&lab);
    let spawner = Spawner {
        exe: exe.to_path_buf(),
    };
    let r = run_cell(sc, seed, &spawner, &addrs, &mut path, false).await;
    drop(lab);
    r
}
