//! The software of each simulated host: kube-sim, arm-sim, signal-svc and actuator-svc started
//! through their library entry points with only the transport swapped ([`crate::net`]), and
//! the workload client. A host's software is a function turmoil calls again when the host is
//! bounced: a restart with fresh process state, as a pod's.

use crate::net;
use crate::schedule::{ACTUATORS, ARM, KUBE, Leave, Ms, Plan, Work};
use cutover_e2e::kube_ops::SPOT_EVICTION;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub const KUBE_PORT: u16 = 6443;
pub const ARM_PORT: u16 = 443;
pub const GRPC_PORT: u16 = 50051;
pub const ADMIN_PORT: u16 = 9090;
/// The taint the workload sets (the cluster autoscaler's scale-down).
pub const TAINT: &str = "ToBeDeletedByClusterAutoscaler";
pub const EXCLUDE_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

/// The simulators, once their hosts have started them (the harness reads and faults them
/// directly, as the soak does through their control endpoints).
#[derive(Default)]
pub struct Slots {
    pub kube: Mutex<Option<Arc<kube_sim::KubeSim>>>,
    pub arm: Mutex<Option<Arc<arm_sim::ArmSim>>>,
    /// A node's desired state changed: (when the API server answered, node index, Down).
    pub intents: Mutex<Vec<(Ms, usize, bool)>>,
    /// A service process ended or failed to start: (when, host, why).
    pub exits: Mutex<Vec<(Ms, String, String)>>,
    /// A workload step nobody would take within [`STEP_PATIENCE_MS`]: (when it began, what,
    /// the last error). A tool or an operator would have given up on cutover there.
    pub stuck: Mutex<Vec<(Ms, String, String)>>,
    /// The tool's `GetNodeAdminState` answers ([`crate::tool`]).
    pub tool_reads: Mutex<Vec<crate::tool::ToolRead>>,
    /// An actuator's ownership of an LB by a leader's grant began or ended, as its own state
    /// says: (when, host, LB lower-cased, owns).
    pub ownership: Mutex<Vec<(Ms, String, String, bool)>>,
    /// An actuator that never received a grant writes every LB (a tool-only deployment):
    /// (when, host, in that mode).
    pub ungranted: Mutex<Vec<(Ms, String, bool)>>,
    /// What an actuator process accepted, as its store says, each time it changed.
    pub accepted: Mutex<Vec<crate::judge::Accepted>>,
}

impl Slots {
    /// Every LB `host` owned ends now (its process is gone).
    pub fn disown_all(&self, now: Ms, host: &str) {
        let mut owned: BTreeMap<String, bool> = BTreeMap::new();
        let mut log = self.ownership.lock();
        for (_, h, lb, owns) in log.iter() {
            if h == host {
                owned.insert(lb.clone(), *owns);
            }
        }
        for (lb, owns) in owned {
            if owns {
                log.push((now, host.to_owned(), lb, false));
            }
        }
        drop(log);
        self.ungranted.lock().push((now, host.to_owned(), false));
    }
}

/// Simulated milliseconds since the run began.
pub fn now_ms() -> Ms {
    turmoil::sim_elapsed().map_or(0, |d| d.as_millis() as Ms)
}

/// What every host needs to start.
pub struct Setup {
    pub plan: Plan,
    pub cluster: aks_fixture::Cluster,
    pub dir: PathBuf,
    pub slots: Arc<Slots>,
}

type HostResult = turmoil::Result;

pub async fn kube(setup: Arc<Setup>) -> HostResult {
    let options = kube_sim::Options {
        seed: kube_sim::Seed::preset("aks", setup.plan.nodes)?,
        ..kube_sim::Options::default()
    };
    let listener = net::listen(KUBE_PORT).await?;
    let sim = kube_sim::KubeSim::start_on(options, listener, format!("http://{KUBE}:{KUBE_PORT}"))
        .await?;
    *setup.slots.kube.lock() = Some(Arc::new(sim));
    std::future::pending::<()>().await;
    Ok(())
}

pub async fn arm(setup: Arc<Setup>) -> HostResult {
    let mut options = arm_sim::ArmSimOptions {
        seed: arm_sim::seed::Seed::preset("aks", Some(setup.plan.nodes))?,
        ..Default::default()
    };
    options.tuning.completion_delay_ms = 300;
    let listener = net::listen(ARM_PORT).await?;
    let sim = arm_sim::ArmSim::start_on(options, listener, &format!("{ARM}:{ARM_PORT}")).await?;
    sim.write_ca(&setup.dir.join("arm-ca.pem"))?;
    *setup.slots.arm.lock() = Some(Arc::new(sim));
    std::future::pending::<()>().await;
    Ok(())
}

/// Runs a service as its pod would run: started again after it exits (with a short pause, as
/// the kubelet's restart), each exit recorded.
async fn supervised<F, Fut>(setup: &Setup, host: &str, mut run: F) -> HostResult
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    loop {
        let why = match run().await {
            Ok(()) => "exited".to_owned(),
            Err(e) => format!("{e:#}"),
        };
        setup
            .slots
            .exits
            .lock()
            .push((now_ms(), host.to_owned(), why));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

pub async fn signal(setup: Arc<Setup>, host: &'static str) -> HostResult {
    let s = setup.clone();
    supervised(&setup, host, move || run_signal(s.clone(), host)).await
}

async fn run_signal(setup: Arc<Setup>, host: &'static str) -> anyhow::Result<()> {
    let endpoints: Vec<String> = crate::schedule::ACTUATORS
        .iter()
        .map(|a| format!("http://{a}:{GRPC_PORT}"))
        .collect();
    let kubeconfig = setup.dir.join("kubeconfig");
    let argv = vec![
        "signal-svc".to_owned(),
        format!("--cluster-name={}", setup.cluster.name),
        format!("--identity={host}"),
        format!("--kubeconfig={}", kubeconfig.display()),
        "--namespace=cutover".into(),
        format!("--admin-listen=0.0.0.0:{ADMIN_PORT}"),
        format!("--actuator-endpoints={}", endpoints.join(",")),
        "--insecure-plaintext".into(),
    ];
    let config = <signal_svc::config::Args as clap::Parser>::try_parse_from(argv)?
        .validate()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    // kube-sim names a caller by its token: each replica's writes are told apart.
    let kcfg = {
        let mut c = kube::Config::new(format!("http://{KUBE}:{KUBE_PORT}").parse()?);
        c.auth_info.token = Some(host.to_owned().into());
        c
    };
    let (client, lease_client) = signal_svc::k8s::client::over(&kcfg, net::dialer())?;
    let parts = signal_svc::runtime::Parts {
        client,
        lease_client,
        admin: net::listen(ADMIN_PORT).await?,
        dialer: Some(net::dialer()),
    };
    let service = signal_svc::runtime::Service::from_parts(config, parts)?;
    service
        .run(tokio_util::sync::CancellationToken::new())
        .await?;
    Ok(())
}

pub async fn actuator(setup: Arc<Setup>, host: &'static str) -> HostResult {
    let s = setup.clone();
    supervised(&setup, host, move || run_actuator(s.clone(), host)).await
}

async fn run_actuator(setup: Arc<Setup>, host: &'static str) -> anyhow::Result<()> {
    // arm-sim writes its CA when it starts; a pod would wait for its secret the same way.
    let ca = setup.dir.join("arm-ca.pem");
    while setup.slots.arm.lock().is_none() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let argv: Vec<String> = vec![
        "actuator-svc".into(),
        format!("--cloud-config={}", setup.dir.join("azure.json").display()),
        format!("--cluster-name={}", setup.cluster.name),
        format!("--arm-endpoint=https://{ARM}:{ARM_PORT}"),
        format!("--aad-authority=https://{ARM}:{ARM_PORT}"),
        format!("--azure-ca-file={}", ca.display()),
        format!("--grpc-listen=0.0.0.0:{GRPC_PORT}"),
        format!("--admin-listen=0.0.0.0:{ADMIN_PORT}"),
        format!("--identity={host}"),
        "--self-heal-interval=10s".into(),
        "--insecure-plaintext".into(),
    ];
    let args = <actuator_svc::config::cli::Args as clap::Parser>::try_parse_from(argv)?;
    let transports = actuator_svc::runtime::Transports {
        grpc: net::listen(GRPC_PORT).await?,
        admin: net::listen(ADMIN_PORT).await?,
        dialer: Some(net::dialer()),
    };
    let env = actuator_svc::config::azure_json::EnvOverrides::default();
    let running = actuator_svc::runtime::start_with(args, env, transports).await?;
    sample_ownership(&setup.slots, host, &running.store).await;
    drop(running);
    Ok(())
}

/// Records every change of which LBs this actuator owns, as its store says, each tick
/// (the store reads tokio's clock, which is the host's simulated one only in here).
async fn sample_ownership(slots: &Slots, host: &str, store: &actuator_svc::state::Store) {
    let lbs = store.lbs();
    let mut last: BTreeMap<String, bool> = BTreeMap::new();
    let mut was_ungranted = None;
    // This process's life: a restarted actuator starts with nothing accepted.
    let life = format!("{host} (started {} ms)", now_ms());
    let mut accepted: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut states = store.changes();
    states.mark_changed();
    loop {
        sample_accepted(slots, &life, store, &mut states, &mut accepted);
        // No grant yet: `owns` answers true for every LB (see actuator-svc state::ownership).
        let ungranted = store.ownership_expires_at().is_none();
        if was_ungranted != Some(ungranted) {
            was_ungranted = Some(ungranted);
            slots
                .ungranted
                .lock()
                .push((now_ms(), host.to_owned(), ungranted));
        }
        for lb in &lbs {
            let owns = !ungranted && store.owns(lb);
            let key = lb.to_ascii_lowercase();
            if last.get(&key) != Some(&owns) {
                last.insert(key.clone(), owns);
                slots
                    .ownership
                    .lock()
                    .push((now_ms(), host.to_owned(), key, owns));
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Records what the store accepted, when it changed: the assignment's (epoch, generation)
/// each tick, and every stream state's (epoch, seq) by node UID when the store says its
/// states changed (copying every held state each tick slowed the simulation down).
fn sample_accepted(
    slots: &Slots,
    life: &str,
    store: &actuator_svc::state::Store,
    states_changed: &mut tokio::sync::watch::Receiver<u64>,
    last: &mut BTreeMap<String, (u64, u64)>,
) {
    let grant = store.grant_version().map(|v| ("assignment".to_owned(), v));
    let held = if states_changed.has_changed().unwrap_or(false) {
        states_changed.borrow_and_update();
        store.held()
    } else {
        Vec::new()
    };
    let states = held
        .into_iter()
        .filter(|h| h.source == actuator_svc::state::Source::Stream)
        .map(|h| {
            (
                format!("node {}", h.node.uid),
                (h.version.epoch, h.version.seq),
            )
        });
    for (what, version) in grant.into_iter().chain(states) {
        if last.get(&what) != Some(&version) {
            last.insert(what.clone(), version);
            slots.accepted.lock().push(crate::judge::Accepted {
                at: now_ms(),
                life: life.to_owned(),
                what,
                version,
            });
        }
    }
}

/// The workload: each step of the plan at its time, through the Kubernetes API (or the tool
/// API for holds), retried until it is answered, and recorded as an intent.
pub async fn workload(setup: Arc<Setup>) -> HostResult {
    let client = net::kube_client(&format!("http://{KUBE}:{KUBE_PORT}"), "workload")?;
    let ops = Ops {
        nodes: kube::Api::all(client.clone()),
        cluster: cutover_e2e::kube_ops::Cluster::new(client),
        registrations: kube_sim::Seed::preset("aks", setup.plan.nodes)?.nodes,
    };
    let names: Vec<String> = setup.cluster.nodes.iter().map(|n| n.name.clone()).collect();
    let mut tool = 0usize;
    for (at, work) in setup.plan.work.clone() {
        let wait = at.saturating_sub(now_ms());
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let name = &names[work.node()];
        let first_try = now_ms();
        tracing::debug!(node = %name, ?work, "workload step");
        let taken = loop {
            let done = match &work {
                Work::Leave {
                    how: Leave::Hold, ..
                } => ops.hold(&mut tool, name, true).await,
                Work::Return {
                    how: Leave::Hold, ..
                } => ops.hold(&mut tool, name, false).await,
                _ => ops.apply(name, &work).await,
            };
            match done {
                Ok(()) => break true,
                Err(e) if now_ms() - first_try > STEP_PATIENCE_MS => {
                    setup.slots.stuck.lock().push((
                        first_try,
                        format!("{name} {work:?}"),
                        format!("{e:#}"),
                    ));
                    break false;
                }
                Err(e) => {
                    tracing::debug!(node = %name, ?work, error = %format!("{e:#}"), "workload step failed; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
        tracing::debug!(node = %name, ?work, taken, "workload step done");
        if !taken {
            continue;
        }
        // A hold goes through an actuator, which has signal-svc write it: it may land any
        // time after the first request went out (an answer lost on the way back included).
        let at = match work {
            Work::Leave {
                how: Leave::Hold, ..
            }
            | Work::Return {
                how: Leave::Hold, ..
            } => first_try,
            _ => now_ms(),
        };
        setup
            .slots
            .intents
            .lock()
            .push((at, work.node(), work.leaves()));
    }
    let end = setup.plan.shape.end_ms();
    tokio::time::sleep(Duration::from_millis(end.saturating_sub(now_ms()))).await;
    Ok(())
}

/// How long a workload step is retried before it counts as refused (longer than any fault,
/// which ends by the quiet tail, plus a fail-over).
pub const STEP_PATIENCE_MS: Ms = 30_000;

/// The workload's clients.
struct Ops {
    nodes: kube::Api<k8s_openapi::api::core::v1::Node>,
    cluster: cutover_e2e::kube_ops::Cluster,
    /// Each Node as its kubelet registers it (the simulator's seed).
    registrations: Vec<kube_sim::seed::NodeSeed>,
}

impl Ops {
    /// One step through the Kubernetes API (a conflict or failure is retried by the caller).
    async fn apply(&self, name: &str, work: &Work) -> anyhow::Result<()> {
        match work {
            Work::Leave {
                how: Leave::Taint, ..
            } => self.mark(name, Mark::Taint, true).await,
            Work::Return {
                how: Leave::Taint, ..
            } => self.mark(name, Mark::Taint, false).await,
            Work::Leave {
                how: Leave::Exclude,
                ..
            } => self.mark(name, Mark::Exclude, true).await,
            Work::Return {
                how: Leave::Exclude,
                ..
            } => self.mark(name, Mark::Exclude, false).await,
            Work::Leave {
                how: Leave::Notice, ..
            } => self.cluster.preempt_event(name, 30).await.map(drop),
            // The operator takes the node back: the taint signal-svc added goes, once it is
            // there (removing it before would leave the node tainted for good).
            Work::Return {
                how: Leave::Notice, ..
            } => {
                let node = self.nodes.get(name).await?;
                let tainted = node
                    .spec
                    .and_then(|s| s.taints)
                    .is_some_and(|t| t.iter().any(|t| t.key == SPOT_EVICTION));
                anyhow::ensure!(tainted, "the spot-eviction taint is not there yet");
                self.cluster.untaint(name, SPOT_EVICTION).await
            }
            Work::Recreate { .. } => self.recreate(name).await,
            Work::Leave {
                how: Leave::Hold, ..
            }
            | Work::Return {
                how: Leave::Hold, ..
            } => {
                anyhow::bail!("holds go through the tool API")
            }
        }
    }

    /// Sets or clears the workload's taint or the exclude label as a read-modify-replace.
    async fn mark(&self, name: &str, mark: Mark, on: bool) -> anyhow::Result<()> {
        use k8s_openapi::api::core::v1::Taint;
        let mut node = self.nodes.get(name).await?;
        match mark {
            Mark::Taint => {
                let spec = node.spec.get_or_insert_with(Default::default);
                let taints = spec.taints.get_or_insert_with(Vec::new);
                taints.retain(|t| t.key != TAINT);
                if on {
                    taints.push(Taint {
                        key: TAINT.into(),
                        value: Some("1700000000".into()),
                        effect: "NoSchedule".into(),
                        time_added: None,
                    });
                }
            }
            Mark::Exclude => {
                let labels = node.metadata.labels.get_or_insert_with(Default::default);
                labels.remove(EXCLUDE_LABEL);
                if on {
                    labels.insert(EXCLUDE_LABEL.into(), "true".into());
                }
            }
        }
        self.nodes
            .replace(name, &kube::api::PostParams::default(), &node)
            .await?;
        Ok(())
    }

    /// Deletes the Node (if still there) and registers it again as a kubelet on a new VM
    /// does: the object the cluster's seed describes (its pool's labels, taints and address),
    /// a new UID, no annotation, label, taint or condition of a departure.
    async fn recreate(&self, name: &str) -> anyhow::Result<()> {
        if self.nodes.get_opt(name).await?.is_some() {
            self.nodes
                .delete(name, &kube::api::DeleteParams::default())
                .await?;
        }
        let mut seed = self
            .registrations
            .iter()
            .find(|n| n.name == name)
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("{name} is not in the cluster's seed"))?;
        seed.uid = None;
        seed.creation_timestamp = None;
        let now = jiff::Timestamp::now().to_string();
        let node: k8s_openapi::api::core::v1::Node =
            serde_json::from_value(kube_sim::seed::node_object(&seed, &now))?;
        self.nodes
            .create(&kube::api::PostParams::default(), &node)
            .await?;
        Ok(())
    }

    /// `SetNodeAdminState` through the next actuator replica (a tool tries each in turn).
    async fn hold(&self, next: &mut usize, name: &str, on: bool) -> anyhow::Result<()> {
        use cutover_proto::v1::actuator_client::ActuatorClient;
        use cutover_proto::v1::{AdminState, NodeRef, SetNodeAdminStateRequest, WaitFor};
        let host = ACTUATORS[*next % ACTUATORS.len()];
        *next += 1;
        let channel =
            tonic::transport::Endpoint::from_shared(format!("http://{host}:{GRPC_PORT}"))?
                .connect_timeout(Duration::from_secs(2))
                .timeout(Duration::from_secs(15))
                .connect_with_connector(net::dialer())
                .await?;
        let state = if on {
            AdminState::Down
        } else {
            AdminState::None
        };
        ActuatorClient::new(channel)
            .set_node_admin_state(SetNodeAdminStateRequest {
                node: Some(NodeRef {
                    name: name.to_owned(),
                    ..NodeRef::default()
                }),
                admin_state: state as i32,
                reason: "dst: maintenance".into(),
                wait: WaitFor::Unspecified as i32,
                wait_timeout: None,
            })
            .await?;
        Ok(())
    }
}

#[derive(Clone, Copy)]
enum Mark {
    Taint,
    Exclude,
}
