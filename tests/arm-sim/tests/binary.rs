//! The `arm-sim` binary: first stdout line, credentials, presets, start-up errors.
#![allow(clippy::unwrap_used)] // tests may unwrap (helpers outside #[test] fns too)

mod common;

use common::{API, RG, Raw, SCOPE};
use std::process::Stdio;
use tokio::io::{AsyncBufReadExt, BufReader};

#[tokio::test]
async fn binary_prints_address_first_then_serves_the_preset() {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_arm-sim"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--preset",
            "aks-multi-slb",
            "--preset-nodes",
            "8",
        ])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(std::time::Duration::from_secs(30), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let url = first
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("first line was {first:?}"))
        .to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let mut info = std::collections::HashMap::new();
    for _ in 0..4 {
        let line = lines.next_line().await.unwrap().unwrap();
        let (k, v) = line.split_once(' ').unwrap();
        info.insert(k.to_owned(), v.to_owned());
    }
    assert_eq!(info["subscription"], aks_fixture::SUBSCRIPTION_ID);
    assert_eq!(info["tenant"], aks_fixture::TENANT_ID);
    let raw = Raw::with_base(&url);
    let form = format!(
        "grant_type=client_credentials&scope={SCOPE}&client_id={}&client_secret={}",
        info["client-id"], info["client-secret"]
    );
    let tok = raw
        .send(
            "POST",
            &format!("/{}/oauth2/v2.0/token", info["tenant"]),
            &[],
            Some(form.into_bytes()),
        )
        .await;
    let tok = tok.body["access_token"].as_str().unwrap().to_owned();
    let cluster = aks_fixture::preset_sized("aks-multi-slb", 8).unwrap();
    for lb in &cluster.load_balancers {
        let path = format!(
            "/subscriptions/{}/resourceGroups/{RG}/providers/Microsoft.Network/loadBalancers/{}?{API}",
            info["subscription"], lb.name
        );
        let r = raw
            .send(
                "GET",
                &path,
                &[("authorization", &format!("Bearer {tok}"))],
                None,
            )
            .await;
        assert_eq!(r.status, 200, "{}: {:?}", lb.name, r.body);
        assert_eq!(
            r.body["properties"]["backendAddressPools"]
                .as_array()
                .unwrap()
                .len(),
            lb.pools.len()
        );
    }
    child.kill().await.unwrap();
}

#[tokio::test]
async fn binary_refuses_bad_configuration_naming_the_flag() {
    for (args, needle) in [
        (vec!["--preset", "nope"], "--preset"),
        (vec!["--seed", "/nonexistent/seed.yaml"], "--seed"),
        (vec!["--preset", "aks", "--page-size", "0"], "--page-size"),
    ] {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_arm-sim"))
            .args(&args)
            .output()
            .await
            .unwrap();
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
