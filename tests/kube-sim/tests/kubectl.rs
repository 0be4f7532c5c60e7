//! The real kubectl binary against the simulator. kubectl must be on PATH (tests/run.sh
//! installs it); these tests fail, not skip, when it is missing.

#![allow(clippy::unwrap_used)] // tests may unwrap (clippy.toml covers #[test] fns only)

mod common;

use common::sim;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Node, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use std::path::{Path, PathBuf};

const SPOT: &str = "aks-spotpool-34567890-vmss000000";

fn kubectl_path() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("kubectl"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("kubectl not found on PATH: tests/run.sh builds it into target/tools/bin (tests/tools/build.sh)")
        })
}

struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
    cache: PathBuf,
}

impl Kubectl {
    fn new(dir: &Path, sim: &kube_sim::KubeSim) -> Kubectl {
        let kubeconfig = dir.join("kubeconfig");
        sim.write_kubeconfig(&kubeconfig).unwrap();
        Kubectl {
            bin: kubectl_path(),
            kubeconfig,
            cache: dir.join("cache"),
        }
    }

    /// Runs kubectl; returns stdout, failing the test on a non-zero exit.
    async fn run(&self, args: &[&str]) -> String {
        let out = tokio::process::Command::new(&self.bin)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache)
            .args(args)
            .output()
            .await
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {stderr}\n{stdout}"
        );
        stdout
    }
}

#[tokio::test]
async fn kubectl_get_describe_taint_events_delete() {
    let sim = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let k = Kubectl::new(dir.path(), &sim);
    let nodes: Api<Node> = Api::all(common::client(&sim));

    let out = k.run(&["get", "nodes"]).await;
    assert_eq!(out.lines().count(), 13, "{out}");
    // Server-side printing: the columns of a real server's node table.
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]);
    let spot_row: Vec<&str> = out
        .lines()
        .find(|l| l.starts_with(SPOT))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        (spot_row[1], spot_row[2], spot_row[4]),
        ("Ready", "agent", "v1.32.4")
    );

    let yaml = k.run(&["get", "node", SPOT, "-o", "yaml"]).await;
    assert!(yaml.contains("kind: Node"), "{yaml}");
    assert!(yaml.contains("kubernetes.azure.com/scalesetpriority: spot"));
    assert!(yaml.contains("providerID: azure:///subscriptions/"));

    let json = k
        .run(&["get", "nodes", "-l", "agentpool=spotpool", "-o", "name"])
        .await;
    assert_eq!(json.lines().count(), 3, "{json}");

    let described = k.run(&["describe", "node", SPOT]).await;
    assert!(
        described.contains(&format!("Name:               {SPOT}")),
        "{described}"
    );
    assert!(described.contains("kubernetes.azure.com/scalesetpriority=spot:NoSchedule"));

    // Taint, then verify through the API; then remove it.
    k.run(&["taint", "nodes", SPOT, "cutover.io/test=yes:NoExecute"])
        .await;
    let taints = nodes.get(SPOT).await.unwrap().spec.unwrap().taints.unwrap();
    assert!(taints.iter().any(|t| t.key == "cutover.io/test"
        && t.value.as_deref() == Some("yes")
        && t.effect == "NoExecute"));
    assert_eq!(taints.len(), 2, "the spot taint is kept");
    k.run(&["taint", "nodes", SPOT, "cutover.io/test-"]).await;
    let taints = nodes.get(SPOT).await.unwrap().spec.unwrap().taints.unwrap();
    let keys: Vec<&str> = taints.iter().map(|t| t.key.as_str()).collect();
    assert_eq!(keys, ["kubernetes.azure.com/scalesetpriority"]);

    // Events from the API show up in `get events -A`, and in `describe` when they name the
    // node's uid (kubectl selects on involvedObject.uid, as against a real server).
    let uid = nodes.get(SPOT).await.unwrap().metadata.uid;
    let events: Api<CoreEvent> = Api::namespaced(common::client(&sim), "default");
    events
        .create(
            &PostParams::default(),
            &CoreEvent {
                metadata: ObjectMeta {
                    name: Some(format!("{SPOT}.abc")),
                    ..Default::default()
                },
                involved_object: ObjectReference {
                    kind: Some("Node".into()),
                    name: Some(SPOT.into()),
                    uid,
                    ..Default::default()
                },
                reason: Some("PreemptScheduled".into()),
                type_: Some("Warning".into()),
                message: Some("Scheduled: soon".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let out = k.run(&["get", "events", "-A", "-o", "wide"]).await;
    assert!(out.contains(&format!("{SPOT}.abc")), "{out}");
    let out = k.run(&["get", "events", "-A"]).await;
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAMESPACE",
            "LAST",
            "SEEN",
            "TYPE",
            "REASON",
            "OBJECT",
            "MESSAGE"
        ]
    );
    assert!(
        out.contains(&format!("node/{SPOT}")) && out.contains("PreemptScheduled"),
        "{out}"
    );
    let described = k.run(&["describe", "node", SPOT]).await;
    assert!(described.contains("PreemptScheduled"), "{described}");

    // Delete (kubectl waits for the deletion through a watch).
    let out = k
        .run(&["delete", "node", "aks-userpool-23456789-vmss000000"])
        .await;
    assert!(out.contains("deleted"), "{out}");
    assert!(nodes.get("aks-userpool-23456789-vmss000000").await.is_err());
    let out = k.run(&["get", "nodes", "-o", "name"]).await;
    assert_eq!(out.lines().count(), 11);
    sim.shutdown().await;
}
