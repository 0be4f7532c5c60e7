//! No secret reaches a log: a whole system (both simulators, actuator-svc and signal-svc as
//! processes, mTLS, RBAC-scoped kube tokens) runs a scenario, an Azure AD token expiry and a
//! restart, with every crate logging at debug level; then every line of every service log is
//! searched for the client secret, bearer tokens (arm-sim's and kube-sim's), and private keys.

#![allow(clippy::unwrap_used)] // a test: a panic is the failure report

use cutover_e2e::sandbox::Sandbox;
use cutover_e2e::scenarios::{Scenario, play};
use cutover_e2e::stack::{Stack, StackOptions};
use std::path::Path;
use std::time::Duration;

/// What must never be logged, with a label for the failure message.
struct Secrets(Vec<(String, String)>);

impl Secrets {
    fn add(&mut self, label: &str, value: &str) {
        let value = value.trim();
        // Short values would match by accident; every real secret here is long.
        assert!(value.len() >= 12, "{label} is too short to search for");
        self.0.push((label.to_string(), value.to_string()));
    }

    /// The base64 lines of a PEM private key: a key logged without its armour still shows.
    fn add_key_file(&mut self, label: &str, path: &Path) {
        let pem = std::fs::read_to_string(path).unwrap();
        for line in pem
            .lines()
            .filter(|l| !l.starts_with("-----") && l.len() >= 32)
        {
            self.add(label, line);
        }
    }

    /// Every problem in one log line.
    fn find(&self, line: &str) -> Vec<String> {
        let mut found: Vec<String> = self
            .0
            .iter()
            .filter(|(_, v)| line.contains(v.as_str()))
            .map(|(l, _)| l.clone())
            .collect();
        if line.contains("PRIVATE KEY") {
            found.push("a PEM private key block".into());
        }
        // arm-sim's access tokens: `armsim.` and two 32-hex-digit halves. Any issued one.
        for (i, _) in line.match_indices("armsim.") {
            let rest = &line[i + "armsim.".len()..];
            if rest.len() >= 32 && rest[..32].bytes().all(|b| b.is_ascii_hexdigit()) {
                found.push("an arm-sim bearer token".into());
            }
        }
        found
    }
}

/// Restarts `service` with debug logging for every crate (the stack starts them at info).
async fn restart_at_debug(service: &mut cutover_e2e::stack::Service, log_dir: &Path) {
    if let Some(p) = service.proc.as_mut() {
        p.terminate(Duration::from_secs(15)).await;
    }
    service.spec.env.retain(|(k, _)| k != "RUST_LOG");
    service.spec.env.push(("RUST_LOG".into(), "debug".into()));
    Stack::restart(service, log_dir).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_token_or_private_key_in_any_log_line() {
    let dir = std::env::temp_dir().join(format!("cutover-e2e-logscan-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut options = StackOptions::fast("aks", 8, dir.clone());
    options.actuators = 1;
    options.signals = 1;
    let t0 = std::time::Instant::now();
    let mut sb = Sandbox::start(options).await.unwrap();
    eprintln!("log scan: system started in {:?}", t0.elapsed());
    for s in sb
        .stack
        .actuators
        .iter_mut()
        .chain(sb.stack.signals.iter_mut())
    {
        restart_at_debug(s, &dir).await;
    }
    sb.stack.wait_ready(Duration::from_secs(60)).await.unwrap();
    eprintln!("log scan: restarted at debug level at {:?}", t0.elapsed());

    let outcome = play(&mut sb, Scenario::OutOfService, 2).await;
    // Every token expires: the actuator's next ARM call gets 401, drops its cached token and
    // fetches a new one (the path most likely to log one).
    sb.stack.arm.expire_tokens();
    eprintln!("log scan: first scenario done at {:?}", t0.elapsed());
    let spot = play(&mut sb, Scenario::SpotNotice, 1).await;
    eprintln!("log scan: second scenario done at {:?}", t0.elapsed());
    sb.stack.stop().await;
    eprintln!("log scan: stopped at {:?}", t0.elapsed());
    assert!(
        outcome.passed() && spot.passed(),
        "{:?} {:?}",
        outcome.problems,
        spot.problems
    );

    let mut secrets = Secrets(Vec::new());
    secrets.add(
        "the client secret",
        &sb.stack.arm.credentials().client_secret,
    );
    secrets.add("the federated token", sb.stack.arm.federated_token());
    // The tokens signal-svc's replicas authenticate with, as their kubeconfigs hold them.
    for (path, _) in &sb.stack.signal_credentials {
        let kubeconfig: serde_json::Value =
            serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let sa = kubeconfig["users"][0]["user"]["token"]
            .as_str()
            .unwrap()
            .to_owned();
        secrets.add("signal-svc's ServiceAccount token", &sa);
    }
    let pki = &sb.stack.pki;
    for (label, files) in [
        ("the actuator's private key", &pki.actuator),
        ("signal-svc's private key", &pki.signal),
        ("the tool's private key", &pki.tool),
    ] {
        secrets.add_key_file(label, &files.key);
    }

    let mut problems = Vec::new();
    let mut lines = 0usize;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("log") {
            continue;
        }
        let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
        for (n, line) in text.lines().enumerate() {
            lines += 1;
            for what in secrets.find(line) {
                problems.push(format!("{}:{}: {what}", path.display(), n + 1));
            }
        }
    }
    // The scan saw real traffic: the services logged at debug level for the whole run.
    assert!(lines > 200, "only {lines} log lines");
    assert!(
        problems.is_empty(),
        "secrets in logs:\n{}",
        problems.join("\n")
    );
    let _ = std::fs::remove_dir_all(&dir);
}
