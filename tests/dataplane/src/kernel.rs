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

use crate::controller::{Feed, run_cell};
use crate::netns::{self, HCNP_PORT, HEALTHZ_PORT, Lab, SERVICE_PORT, VIP, member_ip};
use crate::params::RemovedMemberFlows;
use crate::report::CellResult;
use crate::sim::Scenario;
use anyhow::Context as _;
use std::path::Path;
use std::process::Stdio;
use tokio::process::{Child, Command};

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
    /// The VM forwards again (reimaged or rebooted).
    fn revive(&mut self, member: usize) -> anyhow::Result<()>;
    /// The entry left the pool: its established flows follow U4.
    fn remove(&mut self, member: usize, flows: RemovedMemberFlows) -> anyhow::Result<()>;
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

    fn revive(&mut self, member: usize) -> anyhow::Result<()> {
        netns::nft(&self.members[member], "delete table inet dead\n")
    }

    fn remove(&mut self, member: usize, flows: RemovedMemberFlows) -> anyhow::Result<()> {
        let ip = member_ip(member);
        let rule = match flows {
            RemovedMemberFlows::Keep => return Ok(()),
            // Nothing forwarded either way, nothing closed.
            RemovedMemberFlows::Blackhole => {
                format!(
                    "insert rule ip cdp filt ip daddr {ip} drop\ninsert rule ip cdp filt ip saddr {ip} drop\n"
                )
            }
            // The client's next packet is answered with a RST.
            RemovedMemberFlows::Reset => format!(
                "insert rule ip cdp filt ip saddr {ip} drop\ninsert rule ip cdp filt ip daddr {ip} ip protocol tcp reject with tcp reset\n"
            ),
        };
        netns::nft(&self.lb, &rule)
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

/// Run one cell on the kernel path: make the namespaces, run, remove them.
pub async fn run_kernel_cell(
    sc: &Scenario,
    seed: u64,
    exe: &Path,
    cell: &str,
    feed: Feed,
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
    let r = run_cell(sc, seed, &spawner, &addrs, &mut path, false, feed).await;
    drop(lab);
    r
}
