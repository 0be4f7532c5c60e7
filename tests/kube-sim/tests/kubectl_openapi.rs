//! Real kubectl with no extra flags: `create -f`, `apply -f` (client-side, with the
//! last-applied annotation), `replace -f`, `edit` (through an EDITOR script) and `explain`,
//! all of which download the server's OpenAPI documents first.

#![allow(clippy::unwrap_used)] // tests may unwrap (clippy.toml covers #[test] fns only)

mod common;

use common::sim;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use std::path::{Path, PathBuf};

fn kubectl_path() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("kubectl"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("kubectl not found on PATH: tests/run.sh builds it into target/tools/bin (tests/tools/build.sh)")
        })
}

/// Runs kubectl with only `--kubeconfig` (and a private cache); returns (success, stdout, stderr).
async fn kubectl(dir: &Path, env: &[(&str, &Path)], args: &[&str]) -> (bool, String, String) {
    let mut cmd = tokio::process::Command::new(kubectl_path());
    cmd.env("KUBECONFIG", dir.join("kubeconfig"))
        .env("KUBECACHEDIR", dir.join("cache"))
        .env_remove("KUBECTL_EXTERNAL_DIFF")
        .args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().await.unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

async fn ok(dir: &Path, args: &[&str]) -> String {
    let (success, stdout, stderr) = kubectl(dir, &[], args).await;
    assert!(success, "kubectl {args:?} failed: {stderr}\n{stdout}");
    stdout
}

const NODE: &str = r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"aks-manual-0","labels":{"stage":"one"}},
 "spec":{"taints":[{"key":"dedicated","value":"infra","effect":"NoSchedule"}]}}"#;

#[tokio::test]
async fn create_apply_replace_edit_explain_without_flags() {
    let sim = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    sim.write_kubeconfig(&d.join("kubeconfig")).unwrap();
    let nodes: Api<Node> = Api::all(common::client(&sim));
    let file = d.join("node.json");

    std::fs::write(&file, NODE).unwrap();
    let out = ok(d, &["create", "-f", file.to_str().unwrap()]).await;
    assert_eq!(out.trim(), "node/aks-manual-0 created");

    // Client-side apply: the first apply adds the last-applied annotation, the second one
    // is a three-way strategic merge patch computed from it.
    ok(d, &["apply", "-f", file.to_str().unwrap()]).await;
    std::fs::write(&file, NODE.replace("\"one\"", "\"two\"")).unwrap();
    let out = ok(d, &["apply", "-f", file.to_str().unwrap()]).await;
    assert_eq!(out.trim(), "node/aks-manual-0 configured");
    let node = nodes.get("aks-manual-0").await.unwrap();
    let meta = &node.metadata;
    assert_eq!(meta.labels.as_ref().unwrap()["stage"], "two");
    let last =
        &meta.annotations.as_ref().unwrap()["kubectl.kubernetes.io/last-applied-configuration"];
    assert!(last.contains("\"stage\":\"two\""), "{last}");

    // Replace with a fetched copy that gains a label.
    let mut fetched: serde_json::Value =
        serde_json::from_str(&ok(d, &["get", "node", "aks-manual-0", "-o", "json"]).await).unwrap();
    fetched["metadata"]["labels"]["replaced"] = "yes".into();
    std::fs::write(&file, fetched.to_string()).unwrap();
    let out = ok(d, &["replace", "-f", file.to_str().unwrap()]).await;
    assert_eq!(out.trim(), "node/aks-manual-0 replaced");

    // Edit through an editor script that rewrites the taint's value.
    let editor = d.join("editor.sh");
    std::fs::write(
        &editor,
        "#!/bin/sh\nsed -i 's/value: infra$/value: edited/' \"$1\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let (success, stdout, stderr) = kubectl(
        d,
        &[
            ("EDITOR", editor.as_path()),
            ("KUBE_EDITOR", editor.as_path()),
        ],
        &["edit", "node", "aks-manual-0"],
    )
    .await;
    assert!(success, "kubectl edit failed: {stderr}\n{stdout}");
    assert_eq!(stdout.trim(), "node/aks-manual-0 edited");
    let node = nodes.get("aks-manual-0").await.unwrap();
    let taints = node.spec.unwrap().taints.unwrap();
    assert_eq!(taints.len(), 1);
    assert_eq!(taints[0].value.as_deref(), Some("edited"));
    assert_eq!(node.metadata.labels.unwrap()["replaced"], "yes");

    // Every write asked for strict server-side field validation: kubectl found the
    // `fieldValidation` parameter in the OpenAPI v3 document.
    let writes: Vec<String> = sim
        .requests()
        .into_iter()
        .filter(|r| r.method != "GET")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(writes.len(), 5, "{writes:#?}");
    assert!(
        writes.iter().all(|w| w.contains("fieldValidation=Strict")),
        "{writes:#?}"
    );

    let out = ok(d, &["explain", "node.spec.taints"]).await;
    assert!(out.contains("KIND:       Node"), "{out}");
    assert!(out.contains("FIELD: taints <[]Taint>"), "{out}");
    assert!(out.contains("effect\t<string> -required-"), "{out}");
    let out = ok(d, &["explain", "clusterrolebinding.roleRef"]).await;
    assert!(
        out.contains("GROUP:      rbac.authorization.k8s.io"),
        "{out}"
    );
}

#[tokio::test]
async fn openapi_v2_is_json_only() {
    let sim = sim().await;
    let json = common::raw_get(&sim, "/openapi/v2", &[("Accept", "application/json")]).await;
    assert_eq!(json.status, 200);
    let v2: serde_json::Value = serde_json::from_slice(&json.body).unwrap();
    assert_eq!(v2["swagger"], "2.0");
    let proto = common::raw_get(
        &sim,
        "/openapi/v2",
        &[(
            "Accept",
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
        )],
    )
    .await;
    assert_eq!(proto.status, 406);
}
