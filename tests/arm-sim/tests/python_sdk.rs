//! Second, independent client: the official Azure SDK for Python (azure-identity +
//! azure-mgmt-network with its default api-version, versions pinned in python/requirements.txt) drives the simulator over
//! TLS (azure-core refuses bearer tokens over http). `tests/run.sh` creates the venv and exports
//! `CUTOVER_PYTHON`; without it this test fails and says how to fix that.
#![allow(clippy::unwrap_used)] // tests may unwrap (helpers outside #[test] fns too)

mod common;

use arm_sim::{ArmSim, ArmSimOptions};
use common::RG;
use std::io::Write;

#[tokio::test]
async fn python_azure_sdk_drives_the_simulator() {
    let python = std::env::var("CUTOVER_PYTHON").unwrap_or_else(|_| {
        panic!(
            "CUTOVER_PYTHON is not set. Create the venv and export it, e.g.:\n  python3 -m venv target/pyenv && target/pyenv/bin/pip install -r tests/arm-sim/python/requirements.txt\n  export CUTOVER_PYTHON=$PWD/target/pyenv/bin/python\n(tests/run.sh does this)"
        )
    });
    let mut options = ArmSimOptions::preset("aks-ip").unwrap();
    options.tls = true;
    options.tuning.completion_delay_ms = 500;
    options.tuning.page_size = 2; // three pools: the list crosses a nextLink
    let sim = ArmSim::start(options).await.unwrap();
    assert!(sim.url().starts_with("https://"));
    let mut ca = tempfile::NamedTempFile::new().unwrap();
    ca.write_all(sim.ca_pem().unwrap().as_bytes()).unwrap();
    let c = sim.credentials();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/python/sim_check.py");
    let out = tokio::process::Command::new(&python)
        .arg(script)
        .env("SIM_URL", sim.url())
        .env("SIM_CA_FILE", ca.path())
        .env("REQUESTS_CA_BUNDLE", ca.path())
        .env("SIM_TENANT", &c.tenant_id)
        .env("SIM_CLIENT_ID", &c.client_id)
        .env("SIM_CLIENT_SECRET", &c.client_secret)
        .env("SIM_SUBSCRIPTION", &c.subscription_id)
        .env("SIM_RG", RG)
        .env("SIM_LB", "kubernetes")
        .env("SIM_POOL", "kubernetes")
        .env_remove("AZURE_AUTHORITY_HOST")
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot run CUTOVER_PYTHON={python}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "python SDK checks failed\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    assert!(stdout.contains("all python checks passed"), "{stdout}");
    // What the simulator saw: a token request, paged list, the LRO polls, the 412.
    let reqs = sim.requests();
    assert!(
        reqs.iter()
            .any(|r| r.path.contains("/oauth2/v2.0/token") && r.status == 200)
    );
    assert!(reqs.iter().any(|r| r.path.contains("skipToken")));
    assert!(
        reqs.iter()
            .any(|r| r.path.contains("/operations/") && r.status == 200)
    );
    assert!(reqs.iter().any(|r| r.method == "PUT" && r.status == 412));
    // The SDK's default api-version (azure-mgmt-network 33.1.0), on every ARM call it made.
    let arm: Vec<_> = reqs
        .iter()
        .filter(|r| r.path.starts_with("/subscriptions/"))
        .collect();
    assert!(!arm.is_empty());
    for r in arm {
        assert!(r.path.contains("api-version=2026-03-01"), "{}", r.path);
    }
    let log = sim.effective_log();
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0].value, arm_sim::model::AdminState::Down);
}
