//! The `kube-sim` binary: first stdout line, kubeconfig, presets and seeds, and the HTTP
//! control endpoints other processes use for fault injection.

#![allow(clippy::unwrap_used)] // tests may unwrap (clippy.toml covers #[test] fns only)

mod common;

use cutover_testkit::procs::{Proc, Spec};
use serde_json::{Value, json};
use std::path::Path;
use tokio::process::Command;

/// Starts the binary, its output in `dir/kube-sim.log`, and returns it with its URL (read
/// from the first stdout line).
async fn start(dir: &Path, args: &[&str]) -> (Proc, String) {
    let spec = Spec::new("kube-sim", env!("CARGO_BIN_EXE_kube-sim").into())
        .args(["--listen", "127.0.0.1:0"])
        .args(args.iter().copied());
    let (child, url) = Proc::start_listening(&spec, dir).await.unwrap();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    (child, url)
}

async fn kube_client(kubeconfig: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// A minimal HTTP call to the binary (control endpoints).
async fn call(url: &str, method: &str, path: &str, body: &str) -> (u16, Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = url.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let r = common::parse_response(&buf);
    let v = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    (r.status, v)
}

#[tokio::test]
async fn preset_with_kubeconfig_and_control_endpoints() {
    use k8s_openapi::api::core::v1::Node;
    use kube::api::{Api, ListParams};
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    let (mut child, url) = start(
        dir.path(),
        &[
            "--preset",
            "aks-multi-slb",
            "--preset-nodes",
            "8",
            "--kubeconfig",
            kc.to_str().unwrap(),
        ],
    )
    .await;
    let text = std::fs::read_to_string(&kc).unwrap();
    assert!(text.contains(&format!("server: {url}")), "{text}");

    let nodes: Api<Node> = Api::all(kube_client(&kc).await);
    let list = nodes.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 8);
    let spot = list
        .items
        .iter()
        .find(|n| n.spec.as_ref().unwrap().taints.is_some())
        .unwrap();
    let taint = &spot.spec.as_ref().unwrap().taints.as_ref().unwrap()[0];
    assert_eq!(
        (taint.key.as_str(), taint.effect.as_str()),
        ("kubernetes.azure.com/scalesetpriority", "NoSchedule")
    );
    let ready = spot.status.as_ref().unwrap().conditions.as_ref().unwrap();
    assert!(
        ready
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    );
    assert!(spot.status.as_ref().unwrap().node_info.is_some());

    // Fault injection over HTTP: fail the next node GET with 500 (not retried by kube).
    let (code, _) = call(
        &url,
        "POST",
        "/_sim/fail",
        &json!({"status": 500, "count": 1, "pathPrefix": "/api/v1/nodes", "verb": "GET"})
            .to_string(),
    )
    .await;
    assert_eq!(code, 200);
    let err = nodes
        .get(spot.metadata.name.as_deref().unwrap())
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 500),
        "{err:?}"
    );
    nodes
        .get(spot.metadata.name.as_deref().unwrap())
        .await
        .unwrap();

    let (_, log) = call(&url, "GET", "/_sim/requests", "").await;
    let statuses: Vec<u64> = log
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_u64().unwrap())
        .collect();
    assert_eq!(statuses, [200, 500, 200]);
    assert_eq!(log[0]["path"], "/api/v1/nodes?");
    let (_, rv) = call(&url, "GET", "/_sim/rv", "").await;
    assert_eq!(
        rv["resourceVersion"],
        list.metadata.resource_version.unwrap()
    );
    assert_eq!(call(&url, "POST", "/_sim/compact", "").await.0, 200);
    assert_eq!(call(&url, "POST", "/_sim/watches/close", "").await.0, 200);
    assert_eq!(
        call(&url, "PUT", "/_sim/latency", r#"{"ms": 1}"#).await.0,
        200
    );
    assert_eq!(call(&url, "POST", "/_sim/fail", "{}").await.0, 400);
    assert_eq!(call(&url, "GET", "/_sim/nothing", "").await.0, 404);
    child.kill().await;
}

#[tokio::test]
async fn seed_file_and_bad_arguments() {
    use k8s_openapi::api::core::v1::{Event, Node};
    use kube::api::{Api, ListParams};
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    let seed = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/seed.yaml");
    let args = ["--seed", seed, "--kubeconfig", kc.to_str().unwrap()];
    let (mut child, _url) = start(dir.path(), &args).await;
    let client = kube_client(&kc).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes
        .get("aks-nodepool1-12345678-vmss000000")
        .await
        .unwrap();
    assert_eq!(
        node.metadata.uid.as_deref(),
        Some("3f1c2a4e-8b7d-4c1a-9e2f-0a1b2c3d4e5f")
    );
    assert_eq!(
        node.metadata.creation_timestamp.unwrap().0.to_string(),
        "2026-01-01T00:00:00Z"
    );
    assert_eq!(
        node.metadata.labels.unwrap()["topology.kubernetes.io/zone"],
        "eastus-1"
    );
    let events: Api<Event> = Api::namespaced(client, "default");
    let list = events
        .list(&ListParams::default().fields("reason=PreemptScheduled"))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    child.kill().await;

    // Broken input stops start-up with a message naming the problem.
    for (args, needle) in [
        (vec!["--preset", "gke"], "unknown preset"),
        (
            vec!["--seed", "/nonexistent/seed.yaml"],
            "/nonexistent/seed.yaml",
        ),
        (vec!["--preset", "aks", "--preset-nodes", "2"], "at least 6"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_kube-sim"))
            .args(&args)
            .output()
            .await
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(
            out.stdout.is_empty(),
            "nothing on stdout when start-up fails"
        );
    }
}
