//! The software of each simulated host: kube-sim, arm-sim, signal-svc and actuator-svc started
//! through their library entry points with only the transport swapped ([`crate::net`]), and
//! the workload client. A host's software is a function turmoil calls again when the host is
//! bounced: a restart with fresh process state, as a pod's.

use crate::net;
use crate::schedule::{ARM, KUBE, Ms, Plan, Work};
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
    /// An actuator's ownership of an LB by a leader's grant began or ended, as its own state
    /// says: (when, host, LB lower-cased, owns).
    pub ownership: Mutex<Vec<(Ms, String, String, bool)>>,
    /// An actuator that never received a grant writes every LB (a tool-only deployment):
    /// (when, host, in that mode).
    pub ungranted: Mutex<Vec<(Ms, String, bool)>>,
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
    loop {
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

/// The workload: each step of the plan through the Kubernetes API at its time (retried until
/// the API server answers), recorded when it answered.
pub async fn workload(setup: Arc<Setup>) -> HostResult {
    let client = net::kube_client(&format!("http://{KUBE}:{KUBE_PORT}"), "workload")?;
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client);
    let names: Vec<String> = setup.cluster.nodes.iter().map(|n| n.name.clone()).collect();
    for (at, work) in setup.plan.work.clone() {
        let wait = at.saturating_sub(now_ms());
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let name = &names[work.node()];
        loop {
            match apply(&nodes, name, &work).await {
                Ok(()) => break,
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
        let down = matches!(work, Work::Taint { .. } | Work::Exclude { .. });
        setup
            .slots
            .intents
            .lock()
            .push((now_ms(), work.node(), down));
    }
    let end = setup.plan.shape.end_ms();
    tokio::time::sleep(Duration::from_millis(end.saturating_sub(now_ms()))).await;
    Ok(())
}

/// One workload step as a read-modify-replace (a conflict is retried by the caller).
async fn apply(
    nodes: &kube::Api<k8s_openapi::api::core::v1::Node>,
    name: &str,
    work: &Work,
) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Taint;
    let mut node = nodes.get(name).await?;
    match work {
        Work::Taint { .. } | Work::Untaint { .. } => {
            let spec = node.spec.get_or_insert_with(Default::default);
            let taints = spec.taints.get_or_insert_with(Vec::new);
            taints.retain(|t| t.key != TAINT);
            if matches!(work, Work::Taint { .. }) {
                taints.push(Taint {
                    key: TAINT.into(),
                    value: Some("1700000000".into()),
                    effect: "NoSchedule".into(),
                    time_added: None,
                });
            }
        }
        Work::Exclude { .. } | Work::Include { .. } => {
            let labels = node.metadata.labels.get_or_insert_with(Default::default);
            labels.remove(EXCLUDE_LABEL);
            if matches!(work, Work::Exclude { .. }) {
                labels.insert(EXCLUDE_LABEL.into(), "true".into());
            }
        }
    }
    nodes
        .replace(name, &kube::api::PostParams::default(), &node)
        .await?;
    Ok(())
}
