//! The `arm-sim` binary: first stdout line, credentials, presets, start-up errors.
#![allow(clippy::unwrap_used)] // tests may unwrap (helpers outside #[test] fns too)

mod common;

use common::{API, RG, Raw, SCOPE};
use std::process::Stdio;
use tokio::io::{AsyncBufReadExt, BufReader};

/// Starts the binary; returns it, its URL and the `key value` lines after the first.
async fn spawn(
    args: &[&str],
) -> (
    tokio::process::Child,
    String,
    std::collections::HashMap<String, String>,
) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_arm-sim"))
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
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
    // Keep reading so the binary's remaining lines never hit a closed pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, url, info)
}

async fn token(raw: &Raw, info: &std::collections::HashMap<String, String>) -> String {
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
    tok.body["access_token"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn binary_prints_address_first_then_serves_the_preset() {
    let (mut child, url, info) = spawn(&["--preset", "aks-multi-slb", "--preset-nodes", "8"]).await;
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    assert_eq!(info["subscription"], aks_fixture::SUBSCRIPTION_ID);
    assert_eq!(info["tenant"], aks_fixture::TENANT_ID);
    let raw = Raw::with_base(&url);
    let tok = token(&raw, &info).await;
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
        (vec!["--preset", "aks", "--cadence", "slow"], "--cadence"),
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

#[tokio::test]
async fn binary_azure_cadence_gives_nrp_retry_hints() {
    let (mut child, url, info) = spawn(&[
        "--preset",
        "aks-ip",
        "--cadence",
        "azure",
        "--completion-delay-ms",
        "600000",
    ])
    .await;
    let raw = Raw::with_base(&url);
    let tok = token(&raw, &info).await;
    let pool = format!(
        "/subscriptions/{}/resourceGroups/{RG}/providers/Microsoft.Network/loadBalancers/kubernetes/backendAddressPools/kubernetes",
        info["subscription"]
    );
    let mut body = raw.get(&pool, &tok).await.body;
    body["properties"]["loadBalancerBackendAddresses"][0]["properties"]["adminState"] =
        serde_json::json!("Down");
    let put = raw.put(&pool, &tok, &body, None).await;
    assert_eq!(put.status, 200, "{:?}", put.body);
    assert_eq!(put.header("retry-after"), Some("10"));
    let poll = raw
        .get(put.header("azure-asyncoperation").unwrap(), &tok)
        .await;
    assert_eq!(poll.raw.as_ref(), br#"{"status":"InProgress"}"#);
    assert_eq!(poll.header("retry-after"), Some("10"));
    let busy = raw.put(&pool, &tok, &body, None).await;
    assert_eq!(
        (busy.status, busy.detail_code()),
        (429, "RetryableErrorDueToAnotherOperation")
    );
    assert_eq!(busy.header("retry-after"), Some("10"));
    let message = busy.body["error"]["details"][0]["message"]
        .as_str()
        .unwrap();
    assert!(
        message.ends_with("The call can be retried in 10 seconds."),
        "{message}"
    );
    child.kill().await.unwrap();
}
