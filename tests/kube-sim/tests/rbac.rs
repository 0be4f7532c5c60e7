//! TLS, tokens and RBAC: the simulator with `Security` over HTTPS with its own CA, through
//! kube-rs and real kubectl, allowing what the stored roles grant and refusing the rest
//! with kube-apiserver's exact Status bodies.

#![allow(clippy::unwrap_used)] // tests may unwrap (clippy.toml covers #[test] fns only)

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, Config};
use kube_sim::{KubeSim, Options, Security, Seed, TokenEntry};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

const NODE: &str = "aks-nodepool1-12345678-vmss000000";
const SA: &str = "system:serviceaccount:cutover:watcher";

fn manifests() -> Vec<Value> {
    vec![
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": "watcher", "namespace": "cutover"}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": "node-reader"},
               "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "watcher-reads-nodes"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "node-reader"},
               "subjects": [{"kind": "ServiceAccount", "name": "watcher", "namespace": "cutover"}]}),
    ]
}

async fn secure_sim() -> KubeSim {
    let mut seed = Seed::preset("aks", 6).unwrap();
    seed.objects = manifests();
    KubeSim::start(Options {
        seed,
        security: Some(Security {
            tokens: vec![TokenEntry::new("dev-token", "dev", &["developers"])],
        }),
        ..Options::default()
    })
    .await
    .unwrap()
}

async fn client_for(sim: &KubeSim, token: &str, dir: &Path) -> Client {
    let path = dir.join(format!("kubeconfig-{token}"));
    sim.write_kubeconfig_as(&path, token).unwrap();
    let raw = kube::config::Kubeconfig::read_from(&path).unwrap();
    let config = Config::from_custom_kubeconfig(raw, &Default::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

fn status_of(e: kube::Error) -> Value {
    match e {
        kube::Error::Api(s) => serde_json::to_value(*s).unwrap(),
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn taint_patch() -> Patch<Value> {
    Patch::Strategic(json!({"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}))
}

#[tokio::test]
async fn service_account_token_is_allowed_what_its_role_grants_and_refused_the_rest() {
    let sim = secure_sim().await;
    assert!(sim.url().starts_with("https://"));
    let dir = tempfile::tempdir().unwrap();
    let token = sim.service_account_token("cutover", "watcher").unwrap();
    let nodes: Api<Node> = Api::all(client_for(&sim, &token, dir.path()).await);

    assert_eq!(
        nodes
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        6
    );
    nodes.get(NODE).await.unwrap();

    let e = nodes
        .patch(NODE, &PatchParams::default(), &taint_patch())
        .await
        .unwrap_err();
    assert_eq!(
        status_of(e),
        json!({"status": "Failure", "code": 403, "reason": "Forbidden",
               "message": format!("nodes \"{NODE}\" is forbidden: User \"{SA}\" cannot patch resource \"nodes\" in API group \"\" at the cluster scope"),
               "details": {"name": NODE, "kind": "nodes"}, "metadata": {}})
    );
    let status: Api<Node> = Api::all(client_for(&sim, &token, dir.path()).await);
    let e = status
        .patch_status(NODE, &PatchParams::default(), &taint_patch())
        .await
        .unwrap_err();
    assert!(
        status_of(e)["message"].as_str().unwrap().contains(
            "cannot patch resource \"nodes/status\" in API group \"\" at the cluster scope"
        )
    );
    let roles: Api<ClusterRole> = Api::all(client_for(&sim, &token, dir.path()).await);
    let e = roles.list(&ListParams::default()).await.unwrap_err();
    assert_eq!(
        status_of(e)["message"],
        format!(
            "clusterroles.rbac.authorization.k8s.io is forbidden: User \"{SA}\" cannot list resource \"clusterroles\" in API group \"rbac.authorization.k8s.io\" at the cluster scope"
        )
    );
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client_for(&sim, &token, dir.path()).await, "cutover");
    let e = leases.get("l").await.unwrap_err();
    assert_eq!(
        status_of(e),
        json!({"status": "Failure", "code": 403, "reason": "Forbidden",
               "message": format!("leases.coordination.k8s.io \"l\" is forbidden: User \"{SA}\" cannot get resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"cutover\""),
               "details": {"name": "l", "group": "coordination.k8s.io", "kind": "leases"}, "metadata": {}})
    );

    // The refusals are in the request log under the authenticated name.
    let refused: Vec<_> = sim
        .requests()
        .into_iter()
        .filter(|r| r.status == 403)
        .collect();
    assert_eq!(refused.len(), 4);
    assert!(refused.iter().all(|r| r.caller.as_deref() == Some(SA)));

    // Granting the verb through the API takes effect on the next request.
    let admin = client_for(&sim, &sim.admin_token().unwrap(), dir.path()).await;
    Api::<ClusterRole>::all(admin)
        .patch(
            "node-reader",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(
                    json!([{"op": "add", "path": "/rules/0/verbs/-", "value": "patch"}]),
                )
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    nodes
        .patch(NODE, &PatchParams::default(), &taint_patch())
        .await
        .unwrap();
}

#[tokio::test]
async fn unknown_tokens_get_401_and_static_tokens_authenticate() {
    let sim = secure_sim().await;
    let dir = tempfile::tempdir().unwrap();
    let nodes: Api<Node> = Api::all(client_for(&sim, "forged", dir.path()).await);
    let e = nodes.list(&ListParams::default()).await.unwrap_err();
    assert_eq!(
        status_of(e),
        json!({"status": "Failure", "code": 401, "reason": "Unauthorized",
               "message": "Unauthorized", "metadata": {}})
    );
    // "dev" from the token file is authenticated but bound to nothing.
    let nodes: Api<Node> = Api::all(client_for(&sim, "dev-token", dir.path()).await);
    let e = nodes.get(NODE).await.unwrap_err();
    assert_eq!(
        status_of(e)["message"],
        format!(
            "nodes \"{NODE}\" is forbidden: User \"dev\" cannot get resource \"nodes\" in API group \"\" at the cluster scope"
        )
    );
    assert!(sim.service_account_token("cutover", "nobody").is_err());

    // Without a token the caller is anonymous: `/version` is public, nodes are not.
    let path = dir.path().join("anonymous");
    sim.write_kubeconfig_as(&path, "unused").unwrap();
    let raw = kube::config::Kubeconfig::read_from(&path).unwrap();
    let mut config = Config::from_custom_kubeconfig(raw, &Default::default())
        .await
        .unwrap();
    config.auth_info = Default::default();
    let anonymous = Client::try_from(config).unwrap();
    anonymous.apiserver_version().await.unwrap();
    let e = Api::<Node>::all(anonymous).get(NODE).await.unwrap_err();
    assert_eq!(
        status_of(e)["message"],
        format!(
            "nodes \"{NODE}\" is forbidden: User \"system:anonymous\" cannot get resource \"nodes\" in API group \"\" at the cluster scope"
        )
    );
}

fn kubectl_path() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("kubectl"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("kubectl not found on PATH: tests/run.sh builds it into target/tools/bin (tests/tools/build.sh)")
        })
}

async fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new(kubectl_path())
        .env("KUBECONFIG", kubeconfig)
        .env("KUBECACHEDIR", kubeconfig.with_extension("cache"))
        .args(args)
        .output()
        .await
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[tokio::test]
async fn kubectl_over_https_as_admin_and_as_a_service_account() {
    let sim = secure_sim().await;
    let dir = tempfile::tempdir().unwrap();
    let admin = dir.path().join("admin");
    sim.write_kubeconfig(&admin).unwrap();
    let sa = dir.path().join("sa");
    let token = sim.service_account_token("cutover", "watcher").unwrap();
    sim.write_kubeconfig_as(&sa, &token).unwrap();

    let (ok, out, err) = kubectl(&sa, &["get", "nodes", "-o", "name"]).await;
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 6);
    let patch = r#"{"spec":{"unschedulable":true}}"#;
    let (ok, _, err) = kubectl(&sa, &["patch", "node", NODE, "-p", patch]).await;
    assert!(!ok);
    assert_eq!(
        err.trim(),
        format!(
            "Error from server (Forbidden): nodes \"{NODE}\" is forbidden: User \"{SA}\" cannot patch resource \"nodes\" in API group \"\" at the cluster scope"
        )
    );

    // The admin manages RBAC objects like any other kind, and the grant applies at once.
    // (`kubectl create clusterrole` sends protobuf, which the simulator does not decode.)
    let grant = dir.path().join("grant.yaml");
    std::fs::write(
        &grant,
        "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: node-patcher}
rules:
- {apiGroups: [\"\"], resources: [nodes], verbs: [patch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: watcher-patches}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: node-patcher}
subjects:
- {kind: ServiceAccount, name: watcher, namespace: cutover}
",
    )
    .unwrap();
    let (ok, out, err) = kubectl(&admin, &["apply", "-f", grant.to_str().unwrap()]).await;
    assert!(ok, "{err}");
    assert_eq!(
        out.trim(),
        "clusterrole.rbac.authorization.k8s.io/node-patcher created\nclusterrolebinding.rbac.authorization.k8s.io/watcher-patches created"
    );
    let (ok, out, err) = kubectl(&admin, &["get", "clusterrolebindings"]).await;
    assert!(ok, "{err}");
    assert!(out.contains("ClusterRole/node-patcher"), "{out}");
    let (ok, _, err) = kubectl(&sa, &["patch", "node", NODE, "-p", patch]).await;
    assert!(ok, "{err}");
}

/// Two pods of one ServiceAccount hold two tokens: the request log names the same user for
/// both and tells their credentials apart (the audit log's credential-id), never the token.
#[tokio::test]
async fn the_request_log_tells_two_tokens_of_one_service_account_apart() {
    let sim = secure_sim().await;
    let dir = tempfile::tempdir().unwrap();
    let first = sim.service_account_token("cutover", "watcher").unwrap();
    let second = sim.service_account_token("cutover", "watcher").unwrap();
    for token in [&first, &second] {
        let nodes: Api<Node> = Api::all(client_for(&sim, token, dir.path()).await);
        nodes.get(NODE).await.unwrap();
    }
    let gets: Vec<_> = sim
        .requests()
        .into_iter()
        .filter(|r| r.path.starts_with(&format!("/api/v1/nodes/{NODE}")))
        .collect();
    assert_eq!(gets.len(), 2);
    assert!(gets.iter().all(|r| r.caller.as_deref() == Some(SA)));
    let ids: Vec<&str> = gets
        .iter()
        .map(|r| r.credential_id.as_deref().unwrap())
        .collect();
    assert!(ids.iter().all(|id| id.starts_with("JTI=")), "{ids:?}");
    assert_ne!(ids[0], ids[1]);
    assert_eq!(sim.credential_id(&first).as_deref(), Some(ids[0]));
    assert_eq!(sim.credential_id(&second).as_deref(), Some(ids[1]));
    for r in &gets {
        let line = serde_json::to_string(r).unwrap();
        assert!(!line.contains(&first) && !line.contains(&second), "{line}");
        assert!(r.at.is_some());
    }
}
