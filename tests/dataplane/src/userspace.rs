//! The user-space fallback: the same controller ([`crate::kernel::run_cell`]) with an
//! in-process TCP proxy on loopback as the load balancer, for machines without network
//! namespaces or nftables, or with `--userspace`. The proxy applies the same rules: a flow's mux
//! and entry by a 5-tuple hash over the entries that mux sees eligible, the flow pinned to its
//! entry for life, and a dead VM emulated (contract 6.1 "Fidelity note"): the proxy completes the
//! client's handshake itself, so a SYN to a dead VM becomes a connection held open with no
//! answer (the client's request hangs: counted as a failed new connection) and an established
//! flow to it is blackholed (never forwarded, never closed). Probe outcomes come from the
//! node's state (a proxy cannot make a TCP connect time out), through the same probe state
//! machine and reaction draws.

use crate::controller::{Feed, run_cell};
use crate::kernel::{Addrs, DataPath, Spawner};
use crate::model::{select, tuple_hash};
use crate::params::RemovedMemberFlows;
use crate::report::CellResult;
use crate::sim::Scenario;
use parking_lot::Mutex;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

#[derive(Debug)]
struct State {
    eligible: Vec<Vec<usize>>,
    member_addr: Vec<Option<SocketAddr>>,
    local_dropped: Vec<bool>,
    counters: Vec<u64>,
}

/// The proxy as a [`DataPath`].
pub struct ProxyPath {
    state: Arc<Mutex<State>>,
    dead: Vec<watch::Sender<bool>>,
    pub vip: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ProxyPath {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ProxyPath {
    pub async fn start(members: usize, muxes: usize) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let vip = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State {
            eligible: vec![(0..members).collect(); muxes],
            member_addr: vec![None; members],
            local_dropped: vec![false; members],
            counters: vec![0; members],
        }));
        let dead: Vec<watch::Sender<bool>> =
            (0..members).map(|_| watch::channel(false).0).collect();
        let dead_rx: Vec<watch::Receiver<bool>> = dead.iter().map(|d| d.subscribe()).collect();
        let st = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, peer)) = listener.accept().await {
                let h = tuple_hash(peer, vip);
                let (member, addr, dropped) = {
                    let mut s = st.lock();
                    let mux = (h % s.eligible.len() as u64) as usize;
                    match select(h.rotate_right(17), &s.eligible[mux]) {
                        None => (None, None, true),
                        Some(m) => {
                            s.counters[m] += 1;
                            (Some(m), s.member_addr[m], s.local_dropped[m])
                        }
                    }
                };
                let is_dead = member.is_some_and(|m| *dead_rx[m].borrow());
                match (member, addr) {
                    (Some(m), Some(addr)) if !dropped && !is_dead => {
                        tokio::spawn(pipe(client, addr, dead_rx[m].clone()));
                    }
                    // No eligible entry, a dead VM, or kube-proxy's DROP: the SYN is never
                    // answered; here the handshake is done, so nothing is ever answered.
                    _ => {
                        tokio::spawn(hold(client));
                    }
                }
            }
        });
        Ok(ProxyPath {
            state,
            dead,
            vip,
            task,
        })
    }
}

async fn hold(mut s: TcpStream) {
    let mut buf = [0u8; 4096];
    while let Ok(n) = s.read(&mut buf).await {
        if n == 0 {
            break;
        }
    }
}

async fn pipe(client: TcpStream, addr: SocketAddr, mut dead: watch::Receiver<bool>) {
    let Ok(server) = TcpStream::connect(addr).await else {
        // The member refused: the client's flow is closed.
        drop(client);
        return;
    };
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let blackholed = {
        let c2s = async {
            let _ = tokio::io::copy(&mut cr, &mut sw).await;
            let _ = sw.shutdown().await;
        };
        let s2c = async {
            let _ = tokio::io::copy(&mut sr, &mut cw).await;
            let _ = cw.shutdown().await;
        };
        tokio::select! {
            _ = async { tokio::join!(c2s, s2c) } => false,
            _ = dead.wait_for(|d| *d) => true,
        }
    };
    if blackholed {
        // The VM is gone: nothing more is forwarded and nothing closes the client's flow.
        drop((sr, sw));
        let mut buf = [0u8; 4096];
        while let Ok(n) = cr.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
        drop(cw);
    }
}

impl DataPath for ProxyPath {
    fn set_eligible(&mut self, mux: usize, members: &[usize]) -> anyhow::Result<()> {
        let mut s = self.state.lock();
        s.eligible[mux] = members.to_vec();
        Ok(())
    }
    fn kill(&mut self, member: usize) -> anyhow::Result<()> {
        let _ = self.dead[member].send(true);
        Ok(())
    }
    fn revive(&mut self, member: usize) -> anyhow::Result<()> {
        let _ = self.dead[member].send(false);
        Ok(())
    }
    fn remove(&mut self, member: usize, flows: RemovedMemberFlows) -> anyhow::Result<()> {
        // A proxy cannot send the client a RST mid-flow without closing; `reset` and `blackhole`
        // both stop forwarding here (the output names the realisation).
        if flows != RemovedMemberFlows::Keep {
            let _ = self.dead[member].send(true);
        }
        Ok(())
    }
    fn local_drop(&mut self, member: usize) -> anyhow::Result<()> {
        let mut s = self.state.lock();
        s.local_dropped[member] = true;
        Ok(())
    }
    fn new_flows(&mut self, member: usize) -> anyhow::Result<u64> {
        let s = self.state.lock();
        Ok(s.counters[member])
    }
    fn set_member_addr(&mut self, member: usize, addr: SocketAddr) {
        self.state.lock().member_addr[member] = Some(addr);
    }
}

/// Run one cell on the user-space path (loopback only: the proxy, members on ephemeral ports).
pub async fn run_userspace_cell(
    sc: &Scenario,
    seed: u64,
    exe: &Path,
    feed: Feed,
) -> anyhow::Result<CellResult> {
    let mut path = ProxyPath::start(sc.members, sc.unknowns.muxes.max(1)).await?;
    let addrs = Addrs {
        client_ns: None,
        lb_ns: None,
        member_ns: vec![None; sc.members],
        vip: path.vip,
        member_bind: vec![("127.0.0.1".to_string(), 0, 0, 0); sc.members],
    };
    let spawner = Spawner {
        exe: exe.to_path_buf(),
    };
    run_cell(sc, seed, &spawner, &addrs, &mut path, true, feed).await
}
