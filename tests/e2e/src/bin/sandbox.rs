//! `sandbox`: the whole of cutover on this machine, in minutes.
//!
//! `sandbox` (or `sandbox run`) starts the Kubernetes and ARM simulators with an AKS-like
//! cluster, starts two actuator-svc and two signal-svc processes against them, plays the user
//! scenarios and prints what happened and a summary table; it exits non-zero if any scenario
//! ends wrong. `sandbox serve` keeps everything up for `kubectl` and `cutoverctl`.

use clap::{Parser, Subcommand};
use cutover_e2e::report;
use cutover_e2e::sandbox::Sandbox;
use cutover_e2e::scenarios::{Scenario, play};
use cutover_e2e::stack::{KubeKind, StackOptions};
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "sandbox",
    about = "Run cutover against simulated Kubernetes and Azure"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Nodes in the simulated cluster.
    #[arg(long, default_value_t = 240, global = true)]
    nodes: usize,
    /// Where logs, certificates, kubeconfig and azure.json go (default: target/sandbox/<time>).
    #[arg(long, global = true)]
    run_dir: Option<PathBuf>,
    /// ARM's answer cadence: `azure` (operation polls and lock conflicts say Retry-After 10,
    /// as NRP does for Standard LB writes) or `fast` (1 s).
    #[arg(long, default_value = "azure", value_parser = ["azure", "fast"], global = true)]
    cadence: String,
    /// actuator-svc replicas.
    #[arg(long, default_value_t = 3, global = true)]
    actuators: usize,
    /// The Kubernetes API server: `real` (kube-apiserver and etcd from target/tools/bin, built
    /// by `bash tests/tools/build.sh`) or `sim` (the embedded kube-sim, with its `/_sim` fault
    /// endpoints). Default: the real one when its binaries are there, else kube-sim.
    #[arg(long, value_enum, global = true)]
    kube: Option<KubeKind>,
}

/// The stack the sandbox runs for `preset`.
fn stack_options(cli: &Cli, preset: &str, nodes: usize, dir: PathBuf) -> StackOptions {
    let mut o = StackOptions::realistic(preset, nodes, dir);
    let cadence = if cli.cadence == "fast" {
        arm_sim::faults::Cadence::Fast
    } else {
        arm_sim::faults::Cadence::Azure
    };
    o.arm_tuning = o.arm_tuning.with_cadence(cadence);
    o.actuators = cli.actuators.max(1);
    o.kube = cli.kube.unwrap_or_else(KubeKind::best_available);
    o
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Play every scenario and print the results (the default).
    Run {
        /// Nodes in the upgrade wave (under half the cluster: the blast-radius guard holds any
        /// pool at most half Down by default).
        #[arg(long, default_value_t = 100)]
        wave: usize,
        /// Presets to play: the first gets every scenario, the others a short round.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "aks,aks-ip,aks-multi-slb"
        )]
        presets: Vec<String>,
        /// Play only these scenarios on the first preset (e.g.
        /// `karpenter-termination,autoscaler-scale-down,aborted-scale-down,drain-gate`).
        #[arg(long, value_enum, value_delimiter = ',')]
        only: Vec<Scenario>,
    },
    /// Start everything and keep it up until Ctrl-C.
    Serve {
        #[arg(long, default_value = "aks")]
        preset: String,
    },
}

fn run_dir(cli: &Cli) -> PathBuf {
    cli.run_dir.clone().unwrap_or_else(|| {
        PathBuf::from("target/sandbox").join(
            jiff::Timestamp::now()
                .strftime("%Y%m%dT%H%M%SZ")
                .to_string(),
        )
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let dir = run_dir(&cli);
    let result = match &cli.command {
        None => {
            run(
                &cli,
                &dir,
                100,
                &["aks".into(), "aks-ip".into(), "aks-multi-slb".into()],
                &[],
            )
            .await
        }
        Some(Command::Run {
            wave,
            presets,
            only,
        }) => run(&cli, &dir, *wave, presets, only).await,
        Some(Command::Serve { preset }) => serve(&cli, &dir, preset).await,
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("sandbox: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn run(
    cli: &Cli,
    dir: &std::path::Path,
    wave: usize,
    presets: &[String],
    only: &[Scenario],
) -> anyhow::Result<bool> {
    let nodes = cli.nodes;
    let mut all_ok = true;
    let mut summaries = Vec::new();
    for (i, preset) in presets.iter().enumerate() {
        let scenarios: Vec<Scenario> = if i == 0 && !only.is_empty() {
            // In the sandbox's order, whatever order they were named in.
            Scenario::ALL
                .into_iter()
                .filter(|s| only.contains(s))
                .collect()
        } else if i == 0 {
            Scenario::ALL.to_vec()
        } else {
            vec![
                Scenario::OutOfService,
                Scenario::SpotNotice,
                Scenario::OutsideWriter,
            ]
        };
        let size = if i == 0 { nodes } else { 24 };
        println!(
            "== {preset}: {size} nodes, 2 signal-svc, {} actuator-svc, ARM cadence {}; logs in {}",
            cli.actuators,
            cli.cadence,
            dir.join(preset).display()
        );
        if i == 0 {
            println!(
                "   building the simulators and services (release; the first run takes minutes)"
            );
        }
        let started = std::time::Instant::now();
        let mut sb = Sandbox::start(stack_options(cli, preset, size, dir.join(preset))).await?;
        println!(
            "   up and ready in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        let mut outcomes = Vec::new();
        for (n, scenario) in scenarios.iter().enumerate() {
            print!("[{}/{}] {} ... ", n + 1, scenarios.len(), scenario.name());
            let _ = std::io::stdout().flush();
            let outcome = play(&mut sb, *scenario, wave).await;
            println!(
                "{} ({:.1} s)",
                if outcome.passed() { "ok" } else { "FAILED" },
                outcome.duration.as_secs_f64()
            );
            for line in &outcome.lines {
                println!("{line}");
            }
            for problem in &outcome.problems {
                println!("  PROBLEM: {problem}");
            }
            outcomes.push(outcome);
        }
        sb.stack.stop().await;
        let text = report::summary(preset, &outcomes);
        all_ok &= outcomes.iter().all(|o| o.passed());
        summaries.push(text);
    }
    println!();
    for s in summaries {
        println!("{s}");
    }
    Ok(all_ok)
}

async fn serve(cli: &Cli, dir: &std::path::Path, preset: &str) -> anyhow::Result<bool> {
    let nodes = cli.nodes;
    let mut sb = Sandbox::start(stack_options(cli, preset, nodes, dir.to_path_buf())).await?;
    let stack = &sb.stack;
    let abs = |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let endpoints = json!({
        "kubeApi": stack.kube.url(),
        "kubeServer": stack.kube.kind_name(),
        "kubeconfig": abs(&stack.kubeconfig),
        "armEndpoint": stack.arm.url(),
        "aadAuthority": stack.arm.aad_authority(),
        "azureJson": abs(&stack.azure_json),
        "actuators": stack.actuators.iter().map(|a| json!({
            "name": a.name,
            "grpc": format!("https://127.0.0.1:{}", a.grpc_port.unwrap_or_default()),
            "admin": a.admin_url(),
        })).collect::<Vec<_>>(),
        "signals": stack.signals.iter().map(|s| json!({"name": s.name, "admin": s.admin_url()})).collect::<Vec<_>>(),
        "tls": {
            "ca": abs(&stack.pki.ca),
            "toolCert": abs(&stack.pki.tool.cert),
            "toolKey": abs(&stack.pki.tool.key),
            "serverName": cutover_e2e::certs::ACTUATOR_NAME,
        },
        "logs": abs(dir),
    });
    let file = dir.join("endpoints.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&endpoints)?)?;
    let first = stack
        .cluster
        .nodes
        .iter()
        .find(|n| n.pool == "userpool")
        .map(|n| n.name.clone())
        .unwrap_or_default();
    let grpc = stack
        .actuators
        .first()
        .and_then(|a| a.grpc_port)
        .unwrap_or_default();
    println!(
        "cutover sandbox is up ({preset}, {nodes} nodes, {}). Endpoints: {}",
        stack.kube.kind_name(),
        abs(&file).display()
    );
    println!();
    println!("  export KUBECONFIG={}", abs(&stack.kubeconfig).display());
    println!("  kubectl get nodes");
    println!("  kubectl taint nodes {first} node.kubernetes.io/out-of-service=:NoExecute");
    println!();
    println!(
        "  export CUTOVER_ENDPOINT=https://127.0.0.1:{grpc} CUTOVER_TLS_CA={} \\",
        abs(&stack.pki.ca).display()
    );
    println!(
        "         CUTOVER_TLS_CERT={} CUTOVER_TLS_KEY={} \\",
        abs(&stack.pki.tool.cert).display(),
        abs(&stack.pki.tool.key).display()
    );
    println!(
        "         CUTOVER_TLS_SERVER_NAME={}",
        cutover_e2e::certs::ACTUATOR_NAME
    );
    println!("  cargo run -q --release --bin cutoverctl -- get {first} --fresh");
    println!("  cargo run -q --release --bin cutoverctl -- watch");
    println!();
    println!("  kubectl taint nodes {first} node.kubernetes.io/out-of-service-");
    println!();
    println!("Ctrl-C stops everything.");
    tokio::signal::ctrl_c().await?;
    sb.stack.stop().await;
    Ok(true)
}
