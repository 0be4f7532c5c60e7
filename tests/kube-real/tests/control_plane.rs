//! The harness itself: a real API server starts, holds the AKS-like cluster, issues
//! ServiceAccount tokens, and enforces deploy/base's RBAC with real 403s.
#![allow(clippy::unwrap_used)]

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, ListParams};
use kube_real::RealApiServer;
use std::time::Duration;

#[tokio::test]
async fn seeds_the_fixture_and_enforces_rbac_with_a_service_account_token() {
    let server = RealApiServer::start().await.unwrap();
    let admin = server.admin_client().unwrap();
    let seed = kube_sim::Seed::preset("aks", 6).unwrap();
    kube_real::seed::nodes(&admin, &seed).await.unwrap();

    let nodes: Api<Node> = Api::all(admin.clone());
    let listed = nodes.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(listed.len(), 6);
    let first = &listed[0];
    let status = first.status.as_ref().unwrap();
    assert!(
        status
            .addresses
            .as_ref()
            .unwrap()
            .iter()
            .any(|a| a.type_ == "InternalIP"),
        "node status carries the addresses the node controller would write"
    );
    assert!(
        first
            .spec
            .as_ref()
            .unwrap()
            .provider_id
            .as_deref()
            .unwrap()
            .starts_with("azure://")
    );

    let rbac = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/base/signal-svc/rbac.yaml"
    ))
    .unwrap();
    let ns = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/base/namespace.yaml"
    ))
    .unwrap();
    let objects = kube_real::manifests::parse(&format!("{ns}\n---\n{rbac}")).unwrap();
    kube_real::manifests::apply(&admin, &objects, "cutover")
        .await
        .unwrap();

    let token = server
        .service_account_token("cutover", "signal-svc", Duration::from_secs(3600))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_token_kubeconfig(&kubeconfig, &token).unwrap();
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let as_signal = kube::Client::try_from(config).unwrap();
    let nodes_as_signal: Api<Node> = Api::all(as_signal);
    assert_eq!(
        nodes_as_signal
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        6
    );
    let name = first.metadata.name.clone().unwrap();
    match nodes_as_signal
        .delete(&name, &DeleteParams::default())
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403);
            assert!(
                s.message
                    .contains("system:serviceaccount:cutover:signal-svc"),
                "the 403 names the caller: {}",
                s.message
            );
        }
        other => panic!("delete must be forbidden to signal-svc, got {other:?}"),
    }
}
