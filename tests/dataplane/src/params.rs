//! Parameters of the data-plane model, with the pessimistic defaults of
//! `../shared/contracts/dataplane.md` (section 6.4 for the documented facts, section 7 for the
//! unknowns U1..U15). All times are seconds.

/// A closed interval `[min, max]` a value is drawn from uniformly (`min == max`: fixed).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Range {
    pub min: f64,
    pub max: f64,
}

impl Range {
    pub const fn fixed(v: f64) -> Self {
        Range { min: v, max: v }
    }
    pub const fn new(min: f64, max: f64) -> Self {
        Range { min, max }
    }
    /// `"V"` (fixed) or `"MIN,MAX"` with MIN <= MAX, in seconds.
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        let p: Vec<f64> = s
            .split(',')
            .map(|x| x.trim().parse::<f64>())
            .collect::<Result<_, _>>()
            .map_err(|e| anyhow::anyhow!("{s:?}: {e}"))?;
        match p.as_slice() {
            [v] => Ok(Range::fixed(*v)),
            [a, b] if a <= b => Ok(Range::new(*a, *b)),
            _ => anyhow::bail!("{s:?}: MIN,MAX with MIN <= MAX"),
        }
    }
    pub fn mean(&self) -> f64 {
        (self.min + self.max) / 2.0
    }
    pub fn draw(&self, rng: &mut impl rand::Rng) -> f64 {
        if self.max <= self.min {
            self.min
        } else {
            rng.gen_range(self.min..=self.max)
        }
    }
}

/// What happens to established flows of a member removed from a pool (U4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemovedMemberFlows {
    Keep,
    Blackhole,
    Reset,
}

/// Every unknown of the contract's section 7, each with the pessimistic default named there.
#[derive(Debug, Clone, PartialEq)]
pub struct Unknowns {
    /// U1: after the ARM operation of a `Down`/`None` write reports `Succeeded`, the data plane
    /// applies it after A ~ U[0, `admin_apply_lag_max`], drawn per mux (contract 1, "Model";
    /// 6.4 "admin apply lag A", default U[0, 5 s]).
    pub admin_apply_lag_max: f64,
    /// U1: whether the admin state can act before the operation's `Succeeded` (at the PUT's
    /// acceptance). Pessimistic default `false` (6.4 `apply_before_lro`).
    pub apply_before_lro: bool,
    /// U2: platform reaction to a probe-driven state change, R ~ U[0, `probe_reaction_max`] per
    /// mux; PRB-22's "5-10 s" for a 5 s probe gives the pessimistic default 5 s (2.6, 6.4).
    pub probe_reaction_max: f64,
    /// U3: flap hold-down: an Up within `flap_window` of a Down waits `flap_hold` more
    /// (defaults 60 s and 2I = 10 s, 2.6 "Model").
    pub flap_window: f64,
    /// U3: see `flap_window`.
    pub flap_hold: f64,
    /// U4: established flows of a member removed from its pool: pessimistic default
    /// blackhole (3 "Model", 6.4 `removed_member_flows`).
    pub removed_member_flows: RemovedMemberFlows,
    /// U5: retransmitted SYNs of a half-open flow stay pinned to the backend chosen for the
    /// first SYN even when it became ineligible (`pin_half_open`, default true: the client is not
    /// rescued by its own SYN retries). The kernel realisation always pins (conntrack).
    pub pin_half_open: bool,
    /// U6: with `AllProbedUp`, whether admin-`Down` entries take new flows when all are probed
    /// down. Default false (6.4 `all_probed_up_overrides_down`); only used when
    /// `no_healthy_all_probed_up` is set.
    pub all_probed_up_overrides_down: bool,
    /// The probe's `noHealthyBackendsBehavior`: false = `AllProbedDown` (the default, SYNs
    /// dropped when no entry is eligible).
    pub no_healthy_all_probed_up: bool,
    /// U7: `None` after `Down` waits for a probe Up reported after the `None` became effective
    /// (`none_requires_fresh_up`, default true).
    pub none_requires_fresh_up: bool,
    /// U8: a single-member pool all probed down kills its established flows
    /// (`single_member_all_down_kills`, default true).
    pub single_member_all_down_kills: bool,
    /// U9: idle timer counts client->LB packets only (default true: retransmits to a dead
    /// backend keep the flow alive, no idle RST rescues the client).
    pub idle_inbound_only: bool,
    /// U10: a non-SYN packet of an unknown flow gets a RST (true, with TCP reset on) or is
    /// dropped. Default true, as CPA enables TCP reset (3 "Facts").
    pub orphan_packet_reset: bool,
    /// U11: number of muxes, each applying every admin/probe change with its own lag draw
    /// (default 4, 6.3 rule 3).
    pub muxes: usize,
    /// U12: the SDK text "deny new connections and reset existing connections": `Down` resets
    /// established TCP flows. Default false (the docs; run a second pass with true).
    pub down_resets_established: bool,
    /// U13: admin `Down` affects outbound (SNAT) flows of the same pool. Default false
    /// (inferred: no effect). Not exercised: the model has no outbound flows.
    pub down_affects_outbound: bool,
    /// U14: a graceful VMSS delete resets local sockets of the node's pods (the client gets a RST
    /// instead of a hung flow). Default false: every departure here is silent.
    pub graceful_delete_resets: bool,
    /// U15: fraction of flows untracked by the muxes and re-hashed on a backend-set change
    /// (Ananta fallback), landing elsewhere and reset. Default 0 (sweep 0.01).
    pub untracked_fraction: f64,
}

impl Default for Unknowns {
    fn default() -> Self {
        Unknowns {
            admin_apply_lag_max: 5.0,
            apply_before_lro: false,
            probe_reaction_max: 5.0,
            flap_window: 60.0,
            flap_hold: 10.0,
            removed_member_flows: RemovedMemberFlows::Blackhole,
            pin_half_open: true,
            all_probed_up_overrides_down: false,
            no_healthy_all_probed_up: false,
            none_requires_fresh_up: true,
            single_member_all_down_kills: true,
            idle_inbound_only: true,
            orphan_packet_reset: true,
            muxes: 4,
            down_resets_established: false,
            down_affects_outbound: false,
            graceful_delete_resets: false,
            untracked_fraction: 0.0,
        }
    }
}

impl Unknowns {
    /// Set one unknown by its field name (`dataplane_bench --unknowns k=v,...`, the form the
    /// real-Azure kit prints).
    pub fn set(&mut self, key: &str, value: &str) -> anyhow::Result<()> {
        let b = || -> anyhow::Result<bool> { Ok(value.parse()?) };
        let f = || -> anyhow::Result<f64> { Ok(value.parse()?) };
        match key {
            "admin_apply_lag_max" => self.admin_apply_lag_max = f()?,
            "apply_before_lro" => self.apply_before_lro = b()?,
            "probe_reaction_max" => self.probe_reaction_max = f()?,
            "flap_window" => self.flap_window = f()?,
            "flap_hold" => self.flap_hold = f()?,
            "removed_member_flows" => {
                self.removed_member_flows = match value {
                    "keep" => RemovedMemberFlows::Keep,
                    "blackhole" => RemovedMemberFlows::Blackhole,
                    "reset" => RemovedMemberFlows::Reset,
                    o => anyhow::bail!("removed_member_flows: keep, blackhole or reset, not {o}"),
                }
            }
            "pin_half_open" => self.pin_half_open = b()?,
            "all_probed_up_overrides_down" => self.all_probed_up_overrides_down = b()?,
            "no_healthy_all_probed_up" => self.no_healthy_all_probed_up = b()?,
            "none_requires_fresh_up" => self.none_requires_fresh_up = b()?,
            "single_member_all_down_kills" => self.single_member_all_down_kills = b()?,
            "idle_inbound_only" => self.idle_inbound_only = b()?,
            "orphan_packet_reset" => self.orphan_packet_reset = b()?,
            "muxes" => self.muxes = value.parse()?,
            "down_resets_established" => self.down_resets_established = b()?,
            "down_affects_outbound" => self.down_affects_outbound = b()?,
            "graceful_delete_resets" => self.graceful_delete_resets = b()?,
            "untracked_fraction" => self.untracked_fraction = f()?,
            o => anyhow::bail!("unknown parameter {o}"),
        }
        Ok(())
    }
}

/// The documented probe and flow parameters (contract 2, 3, 6.4).
#[derive(Debug, Clone, PartialEq)]
pub struct LbParams {
    /// Probe interval I: 5 s (CPA default, portal).
    pub probe_interval: f64,
    /// Probe threshold T: 2 (CPA writes `probeThreshold`).
    pub probe_threshold: u32,
    /// HTTP probe timeout ceiling: a probe times out after min(I, 30 s).
    pub http_timeout_max: f64,
    /// Idle timeout: 4 min (CPA default).
    pub idle_timeout: f64,
    /// TCP reset on idle: true (CPA default).
    pub tcp_reset: bool,
}

impl Default for LbParams {
    fn default() -> Self {
        LbParams {
            probe_interval: 5.0,
            probe_threshold: 2,
            http_timeout_max: 30.0,
            idle_timeout: 240.0,
            tcp_reset: true,
        }
    }
}

impl LbParams {
    pub fn http_timeout(&self) -> f64 {
        self.probe_interval.min(self.http_timeout_max)
    }
}

/// An AKS upgrade's drain, cordon to reimage start, at most (contract 4.4 `upgrade`: "drain
/// <= 30 min", AKS's default drain timeout); the bench's default is 30 s
/// (`dataplane_bench --upgrade-drain-s`) to keep real-time runs short: with the probe-only and
/// cutover-default modes the failures come after the reimage whatever the drain lasts.
pub const AKS_DRAIN_TIMEOUT: f64 = 1800.0;

/// Departure timings (contract 4.4, 6.4) and cutover's own path to `Down`.
#[derive(Debug, Clone, PartialEq)]
pub struct Timings {
    /// Planned departure (cluster-autoscaler shape, 4.4 `ca`): the VM goes away this long after
    /// the first signal (drain 30 s, pod terminationGracePeriod default, + 5 s
    /// node-delete-delay-after-taint; VMSS delete latency taken as 0, the pessimistic end).
    pub planned_lead: Range,
    /// Local pods exit this long after they turn terminating (eTP Local; an app that exits at
    /// once on SIGTERM is the pessimistic end for new flows).
    pub local_pod_exit_after: Range,
    /// Eviction of the node's pods starts this long after the first signal of a planned
    /// departure (drain begins right after the taint).
    pub planned_evict_after: Range,
    /// Signal -> cutover's PUT accepted by ARM (signal-svc + actuator + PUT; the sandbox
    /// measures ~0.2 s).
    pub cutover_put_after: Range,
    /// ARM long-running operation of cutover's PUT: the contract's NRP cadence, 10-20 s
    /// (6.4 "ARM LRO for cutover's PUT"; arm-sim's default is 2 s).
    pub arm_operation: Range,
}

impl Default for Timings {
    fn default() -> Self {
        Timings {
            planned_lead: Range::fixed(35.0),
            local_pod_exit_after: Range::fixed(1.0),
            planned_evict_after: Range::new(0.0, 1.0),
            cutover_put_after: Range::fixed(0.2),
            arm_operation: Range::new(10.0, 20.0),
        }
    }
}

/// Client mix (contract 6.5 "Client mixes").
#[derive(Debug, Clone, PartialEq)]
pub struct ClientParams {
    /// Steady rate of new connections (one request each), per second.
    pub new_per_sec: f64,
    /// Keep-alive pool size (connections kept open, one request every `pool_request_every`).
    pub pool: usize,
    /// Keep-alive connection max age (60 s).
    pub pool_max_age: f64,
    pub pool_request_every: f64,
    /// Long-lived streams (10 min each).
    pub streams: usize,
    pub stream_max_age: f64,
    /// App-set connect timeout (3 s; the kernel's own is 127 s).
    pub connect_timeout: f64,
    /// App-set request timeout (10 s): a request unanswered this long is `hung`.
    pub request_timeout: f64,
}

impl Default for ClientParams {
    fn default() -> Self {
        ClientParams {
            new_per_sec: 100.0,
            pool: 40,
            pool_max_age: 60.0,
            pool_request_every: 0.2,
            streams: 20,
            stream_max_age: 600.0,
            connect_timeout: 3.0,
            request_timeout: 10.0,
        }
    }
}
