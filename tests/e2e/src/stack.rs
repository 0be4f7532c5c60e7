//! The whole system on loopback: both simulators in this process, seeded with one
//! `aks-fixture` cluster, and the two services as real child processes pointed at them with
//! mutual TLS between them, exactly as the deploy manifests wire them.

use crate::bins;
use crate::certs::{self, Pki};
pub use crate::kube_side::{KubeKind, KubeSide};
use anyhow::{Context, bail};
use cutover_testkit::procs::{Proc, Spec};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The arm-sim CA certificate, written in the run directory for the actuators.
const ARM_CA_FILE: &str = "arm-sim-ca.pem";

/// `NO_PROXY` for the services: whatever the environment says, plus loopback, where every server
/// of the stack listens. With HTTPS_PROXY set (a machine behind a proxy, or AKS's HTTP proxy
/// feature copied into a shell), both services would otherwise send their Kubernetes and ARM
/// requests to a proxy that cannot reach this machine's loopback.
pub fn loopback_no_proxy() -> String {
    let own = ["NO_PROXY", "no_proxy"]
        .iter()
        .find_map(|n| std::env::var(n).ok().filter(|v| !v.trim().is_empty()));
    let loopback = "localhost,127.0.0.1,::1";
    match own {
        Some(own) => format!("{own},{loopback}"),
        None => loopback.to_string(),
    }
}

/// The user signal-svc authenticates as to kube-sim (its ServiceAccount, as in a cluster).
/// The variable both services' allocator (jemalloc, prefixed build) reads its settings from.
pub const JEMALLOC_CONF_VAR: &str = "_RJEM_MALLOC_CONF";
/// Its value in deploy/ (see the actuator's deployment.yaml for why).
pub const JEMALLOC_CONF: &str =
    "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0,narenas:2";

/// The allocator settings a service runs with: deploy/'s, unless this process sets the
/// variable itself (a bench comparing settings).
fn jemalloc_conf() -> String {
    std::env::var(JEMALLOC_CONF_VAR).unwrap_or_else(|_| JEMALLOC_CONF.into())
}

pub const SIGNAL_CALLER: &str = "system:serviceaccount:cutover:signal-svc";
pub const SIGNAL_NAMESPACE: &str = "cutover";
pub const SIGNAL_SERVICE_ACCOUNT: &str = "signal-svc";

/// How a service process is started: which program runs it with what environment, and where it
/// finds the files it reads (certificates, kubeconfig, azure.json). The default runs the binaries
/// in `target/`; the image test runs them from the unpacked container images instead.
pub trait Launcher: std::fmt::Debug + Send + Sync {
    /// The process that runs the binary `bin` (e.g. `signal-svc`) as `name`; the service's own
    /// flags are appended to its arguments.
    fn spec(&self, name: &str, bin: &str) -> anyhow::Result<Spec>;
    /// Makes `file` readable by `bin`'s process and returns the path to pass in its flags.
    fn file(&self, bin: &str, file: &Path) -> anyhow::Result<String>;
}

/// The binaries in `target/`, reading the files where the stack wrote them.
#[derive(Debug, Clone, Copy, Default)]
pub struct FromTarget;

impl Launcher for FromTarget {
    fn spec(&self, name: &str, bin: &str) -> anyhow::Result<Spec> {
        Ok(Spec::new(name, bins::path(bin)?))
    }

    fn file(&self, _bin: &str, file: &Path) -> anyhow::Result<String> {
        Ok(file.display().to_string())
    }
}

/// What to start.
#[derive(Debug, Clone)]
pub struct StackOptions {
    /// `aks`, `aks-ip` or `aks-multi-slb`.
    pub preset: String,
    pub nodes: usize,
    pub actuators: usize,
    pub signals: usize,
    /// ARM latencies and operation completion time.
    pub arm_tuning: arm_sim::faults::Tuning,
    /// Where logs, certificates, the kubeconfig and azure.json go.
    pub run_dir: PathBuf,
    /// ServiceAccounts and RBAC objects loaded into kube-sim; `None` loads deploy/base's
    /// (rendered with `kubectl kustomize`), so signal-svc runs with exactly its deployed role.
    pub kube_objects: Option<Vec<serde_json::Value>>,
    /// Extra actuator-svc flags (e.g. `--max-down-share=1.0` where a bench measures speed,
    /// not the blast-radius guard).
    pub actuator_args: Vec<String>,
    /// Extra signal-svc flags (e.g. `--trigger-cordon=true`).
    pub signal_args: Vec<String>,
    /// How the services are started ([`FromTarget`] unless a test says otherwise).
    pub launcher: Arc<dyn Launcher>,
    /// The Kubernetes API server: real, or kube-sim where faults are injected.
    pub kube: KubeKind,
}

impl StackOptions {
    /// Realistic ARM timings: PUT ~200 ms, operation completion ~2 s, and NRP's cadence:
    /// operation polls and lock conflicts answered with `Retry-After: 10`. Three actuator
    /// replicas, as deploy/'s AKS overlay runs.
    pub fn realistic(preset: &str, nodes: usize, run_dir: PathBuf) -> Self {
        let mut tuning = arm_sim::faults::Tuning::default();
        tuning.latency_ms.get = 60;
        tuning.latency_ms.list = 120;
        tuning.latency_ms.put = 200;
        tuning.latency_ms.poll = 40;
        tuning.latency_ms.token = 50;
        tuning.completion_delay_ms = 2000;
        let tuning = tuning.with_cadence(arm_sim::faults::Cadence::Azure);
        StackOptions {
            preset: preset.to_string(),
            nodes,
            actuators: 3,
            signals: 2,
            arm_tuning: tuning,
            run_dir,
            kube_objects: None,
            actuator_args: Vec::new(),
            signal_args: Vec::new(),
            launcher: Arc::new(FromTarget),
            kube: KubeKind::best_available(),
        }
    }

    /// Fast timings for tests.
    pub fn fast(preset: &str, nodes: usize, run_dir: PathBuf) -> Self {
        let mut options = Self::realistic(preset, nodes, run_dir);
        // Two replicas keep the test suite's process count (and CI time) down; the sandbox and
        // wave_bench run three.
        options.actuators = 2;
        // The tests hold the product to the real API server (tests/run.sh builds it).
        options.kube = KubeKind::Real;
        options.arm_tuning = arm_sim::faults::Tuning {
            completion_delay_ms: 300,
            ..arm_sim::faults::Tuning::default()
        };
        options
    }
}

/// One service process and how to restart it.
#[derive(Debug)]
pub struct Service {
    pub name: String,
    pub spec: Spec,
    pub proc: Option<Proc>,
    pub admin_port: u16,
    pub grpc_port: Option<u16>,
}

impl Service {
    pub fn admin_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.admin_port)
    }
}

/// The running system.
pub struct Stack {
    pub options: StackOptions,
    pub cluster: aks_fixture::Cluster,
    pub kube: KubeSide,
    pub arm: arm_sim::ArmSim,
    pub kubeconfig: PathBuf,
    /// signal-svc's own kubeconfig (a token of its ServiceAccount and the cluster CA): its
    /// requests carry [`SIGNAL_CALLER`] (in kube-sim's log, or the real server's audit).
    /// The first replica's; each further replica has a token of its own.
    pub signal_kubeconfig: PathBuf,
    /// Per signal-svc replica: its kubeconfig, and the credential id kube-sim logs for its
    /// requests (which tells the replicas apart).
    pub signal_credentials: Vec<(PathBuf, Option<String>)>,
    pub azure_json: PathBuf,
    pub pki: Pki,
    pub actuators: Vec<Service>,
    pub signals: Vec<Service>,
}

impl Stack {
    /// Starts everything and waits until every service reports ready.
    pub async fn start(options: StackOptions) -> anyhow::Result<Stack> {
        std::fs::create_dir_all(&options.run_dir)?;
        bins::build_all()?;
        let cluster = aks_fixture::preset_sized(&options.preset, options.nodes)?;

        // The API server as a cluster: HTTPS with its own CA, tokens, RBAC from deploy/base.
        let seed = kube_sim::Seed::preset(&options.preset, options.nodes)?;
        let rbac = match &options.kube_objects {
            Some(objects) => objects.clone(),
            None => crate::manifests::rbac_objects(&crate::manifests::render("base")?),
        };
        // kubectl and the tests act as a cluster admin (system:masters); signal-svc holds a
        // token of its ServiceAccount, as its pod would.
        let kubeconfig = options.run_dir.join("kubeconfig");
        let signal_kubeconfig = options.run_dir.join("kubeconfig-signal-svc");
        let (kube, first_credential) =
            KubeSide::start(options.kube, seed, rbac, &kubeconfig, &signal_kubeconfig).await?;

        let mut arm_options = arm_sim::ArmSimOptions {
            seed: arm_sim::seed::Seed::preset(&options.preset, Some(options.nodes))?,
            ..Default::default()
        };
        arm_options.tuning = options.arm_tuning.clone();
        let arm = arm_sim::ArmSim::start(arm_options).await?;
        arm.write_ca(&options.run_dir.join(ARM_CA_FILE))?;
        let azure_json = options.run_dir.join("azure.json");
        std::fs::write(
            &azure_json,
            serde_json::to_vec_pretty(&cluster.azure_json())?,
        )?;
        let pki = certs::generate(&options.run_dir.join("pki"))?;

        let mut stack = Stack {
            cluster,
            kube,
            arm,
            kubeconfig,
            signal_kubeconfig: signal_kubeconfig.clone(),
            signal_credentials: Vec::new(),
            azure_json,
            pki,
            actuators: Vec::new(),
            signals: Vec::new(),
            options,
        };
        for i in 0..stack.options.actuators {
            let service = stack.actuator_service(i)?;
            stack.actuators.push(service);
        }
        let endpoints: Vec<String> = stack
            .actuators
            .iter()
            .filter_map(|a| a.grpc_port)
            .map(|p| format!("https://127.0.0.1:{p}"))
            .collect();
        for i in 0..stack.options.signals {
            let path = if i == 0 {
                signal_kubeconfig.clone()
            } else {
                stack
                    .options
                    .run_dir
                    .join(format!("kubeconfig-signal-svc-{i}"))
            };
            let credential = match i {
                0 => first_credential.clone(),
                _ => stack.kube.another_signal_kubeconfig(&path).await?,
            };
            stack.signal_credentials.push((path, credential));
            let service = stack.signal_service(i, &endpoints)?;
            stack.signals.push(service);
        }
        let log_dir = stack.options.run_dir.clone();
        for service in stack.actuators.iter_mut().chain(stack.signals.iter_mut()) {
            service.proc = Some(Proc::start(&service.spec, &log_dir).await?);
        }
        stack.wait_ready(Duration::from_secs(90)).await?;
        Ok(stack)
    }

    fn actuator_service(&self, i: usize) -> anyhow::Result<Service> {
        let grpc = cutover_testkit::free_port()?;
        let admin = cutover_testkit::free_port()?;
        let name = format!("actuator-{i}");
        let p = &self.pki;
        let launcher = &self.options.launcher;
        let bin = "actuator-svc";
        let file = |path: &Path| launcher.file(bin, path);
        let spec = launcher
            .spec(&name, bin)?
            .arg(format!("--cloud-config={}", file(&self.azure_json)?))
            .arg(format!("--cluster-name={}", self.cluster.name))
            .arg(format!("--arm-endpoint={}", self.arm.url()))
            // azure_identity takes only an https authority: the simulator's TLS side, trusted
            // through its CA.
            .arg(format!("--aad-authority={}", self.arm.aad_authority()))
            .arg(format!(
                "--azure-ca-file={}",
                file(&self.options.run_dir.join(ARM_CA_FILE))?
            ))
            .arg(format!("--grpc-listen=127.0.0.1:{grpc}"))
            .arg(format!("--admin-listen=127.0.0.1:{admin}"))
            .arg(format!("--identity={name}"))
            .arg(format!("--tls-cert={}", file(&p.actuator.cert)?))
            .arg(format!("--tls-key={}", file(&p.actuator.key)?))
            .arg(format!("--tls-client-ca={}", file(&p.ca)?))
            // The URI identities (the chart's cert-manager ones); deploy/base's DNS names are
            // in the same certificates (tests/e2e/tests/helm.rs runs those).
            .arg(format!("--signal-clients={}", certs::SIGNAL_URI))
            .arg(format!("--tool-clients={}", certs::TOOL_URI))
            .args(self.options.actuator_args.clone())
            .env("RUST_LOG", "info")
            .env("NO_PROXY", loopback_no_proxy())
            .env("no_proxy", loopback_no_proxy())
            // As deploy/ runs it.
            .env(JEMALLOC_CONF_VAR, jemalloc_conf());
        Ok(Service {
            name,
            spec,
            proc: None,
            admin_port: admin,
            grpc_port: Some(grpc),
        })
    }

    fn signal_service(&self, i: usize, endpoints: &[String]) -> anyhow::Result<Service> {
        let admin = cutover_testkit::free_port()?;
        let name = format!("signal-{i}");
        let p = &self.pki;
        let launcher = &self.options.launcher;
        let bin = "signal-svc";
        let file = |path: &Path| launcher.file(bin, path);
        let spec = launcher
            .spec(&name, bin)?
            .arg(format!(
                "--kubeconfig={}",
                file(&self.signal_credentials[i].0)?
            ))
            .arg(format!("--cluster-name={}", self.cluster.name))
            .arg("--namespace=cutover")
            .arg(format!("--identity={name}"))
            .arg(format!("--actuator-endpoints={}", endpoints.join(",")))
            .arg(format!("--tls-ca={}", file(&p.ca)?))
            .arg(format!("--tls-cert={}", file(&p.signal.cert)?))
            .arg(format!("--tls-key={}", file(&p.signal.key)?))
            .arg(format!("--tls-server-name={}", certs::ACTUATOR_NAME))
            .arg(format!("--admin-listen=127.0.0.1:{admin}"))
            .args(self.options.signal_args.clone())
            .env("RUST_LOG", "info")
            .env("NO_PROXY", loopback_no_proxy())
            .env("no_proxy", loopback_no_proxy())
            .env(JEMALLOC_CONF_VAR, jemalloc_conf());
        Ok(Service {
            name,
            spec,
            proc: None,
            admin_port: admin,
            grpc_port: None,
        })
    }

    /// Waits until every running service answers `/ready` with 200.
    pub async fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        for service in self.actuators.iter_mut().chain(self.signals.iter_mut()) {
            let ready_url = format!("{}/ready", service.admin_url());
            let Some(proc) = service.proc.as_mut() else {
                continue;
            };
            loop {
                if !proc.is_running() {
                    bail!(
                        "{} exited during start-up:\n{}",
                        service.name,
                        proc.log_tail(30)
                    );
                }
                if crate::http::get_status(&ready_url).await == Some(200) {
                    break;
                }
                if Instant::now() > deadline {
                    bail!(
                        "{} not ready after {timeout:?}:\n{}",
                        service.name,
                        proc.log_tail(30)
                    );
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }

    /// Waits until every load balancer of the cluster has a writer: some actuator reports
    /// `cutover_actuator_load_balancer_owned` 1 for it. A new leadership gives no load
    /// balancer to anyone for its first `--assignment-valid-for` (a previous leader's grants
    /// may still live), so a change made before this waits out that quiet period.
    pub async fn wait_assigned(&self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let mut owned = std::collections::BTreeSet::new();
            for a in &self.actuators {
                let Some(text) = crate::http::get_text(&format!("{}/metrics", a.admin_url())).await
                else {
                    continue;
                };
                owned.extend(text.lines().filter_map(owned_lb));
            }
            let missing: Vec<&str> = self
                .cluster
                .load_balancers
                .iter()
                .map(|lb| lb.name.as_str())
                .filter(|lb| !owned.contains(*lb))
                .collect();
            if missing.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("no actuator writes {missing:?} after {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Restarts a stopped service (same flags, same ports).
    pub async fn restart(service: &mut Service, log_dir: &Path) -> anyhow::Result<()> {
        service.proc = Some(
            Proc::start(&service.spec, log_dir)
                .await
                .with_context(|| format!("restart {}", service.name))?,
        );
        Ok(())
    }

    /// Stops every service gracefully.
    pub async fn stop(&mut self) {
        for service in self.signals.iter_mut().chain(self.actuators.iter_mut()) {
            if let Some(proc) = service.proc.as_mut() {
                proc.terminate(Duration::from_secs(15)).await;
            }
        }
    }
}

/// The load balancer of a `cutover_actuator_load_balancer_owned{load_balancer="x"} 1` line.
fn owned_lb(line: &str) -> Option<String> {
    let rest = line.strip_prefix("cutover_actuator_load_balancer_owned{")?;
    let (labels, value) = rest.split_once('}')?;
    if value.trim() != "1" {
        return None;
    }
    let name = labels.split_once("load_balancer=\"")?.1.split_once('"')?.0;
    Some(name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::owned_lb;

    #[test]
    fn only_owned_load_balancers_are_read_from_the_metrics() {
        let text = "# HELP x\n\
            cutover_actuator_load_balancer_owned{load_balancer=\"kubernetes\"} 1\n\
            cutover_actuator_load_balancer_owned{load_balancer=\"kubernetes-internal\"} 0\n\
            cutover_actuator_queue_depth{load_balancer=\"other\"} 1\n";
        let got: Vec<String> = text.lines().filter_map(owned_lb).collect();
        assert_eq!(got, vec!["kubernetes".to_string()]);
    }
}
