//! The simulator on a handed listener (`KubeSim::start_on`): no socket, the streams come from
//! a `Dialer` through in-memory pipes, as a simulated network hands them in. A real kube-rs
//! client over that dialer creates, reads and watches objects; with `Security`, TLS runs over
//! the handed streams and the serving certificate names the host of the given URL.

#![allow(clippy::unwrap_used)] // tests may unwrap (clippy.toml covers #[test] fns only)

use cutover_runtime::dial::{BoxStream, Dialer, Listener};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube::client::ConfigExt;
use kube_sim::{KubeSim, Options, Security, Seed};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tower::{BoxError, ServiceBuilder, ServiceExt};

const HOST: &str = "kube-sim.test";
const PORT: u16 = 6443;

fn local() -> SocketAddr {
    "10.96.0.1:6443".parse().unwrap()
}

/// A handed listener and a dialer that feeds it one in-memory pipe per connection (counted),
/// refusing any other host.
fn pipe() -> (Listener, Dialer, Arc<AtomicUsize>) {
    let (tx, listener) = Listener::handed(local());
    let dialed = Arc::new(AtomicUsize::new(0));
    let count = dialed.clone();
    let dialer = Dialer::new(move |host, port| {
        let tx = tx.clone();
        let n = count.fetch_add(1, Ordering::SeqCst);
        async move {
            if (host.as_str(), port) != (HOST, PORT) {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionRefused,
                    format!("{host}:{port}: no such host"),
                ));
            }
            let (client, server) = tokio::io::duplex(64 * 1024);
            let peer: SocketAddr = format!("10.244.0.{}:40000", n % 250 + 1).parse().unwrap();
            tx.send((BoxStream::new(server), peer))
                .await
                .map_err(|_| std::io::Error::other("listener gone"))?;
            Ok(BoxStream::new(client))
        }
    });
    (listener, dialer, dialed)
}

/// A kube client over `dialer` from `config`: kube's own TLS connector (plain HTTP passes
/// through it), base URI and auth layers, as `Client::try_from` stacks them.
fn client_over(config: &kube::Config, dialer: Dialer) -> kube::Client {
    let connector = config
        .rustls_https_connector_with_connector(dialer)
        .unwrap();
    let http = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, kube::client::Body>(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer().unwrap())
        .service(http.map_err(BoxError::from));
    kube::Client::new(service, config.default_namespace.clone())
}

fn lease(name: &str) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("cutover".into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("signal-0".into()),
            lease_duration_seconds: Some(15),
            ..LeaseSpec::default()
        }),
    }
}

async fn exercise(client: kube::Client, sim: &KubeSim) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "cutover");
    let created = leases
        .create(&PostParams::default(), &lease("signal-svc"))
        .await
        .unwrap();
    let got = leases.get("signal-svc").await.unwrap();
    assert_eq!(got.metadata.uid, created.metadata.uid);
    assert_eq!(
        got.spec.unwrap().holder_identity.as_deref(),
        Some("signal-0")
    );

    let nodes: Api<Node> = Api::all(client);
    let list = nodes.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 6);
    let rv = list.metadata.resource_version.unwrap();

    // A watch over the handed stream sees a write made after it started.
    let mut watch = nodes
        .watch(&WatchParams::default().timeout(10), &rv)
        .await
        .unwrap()
        .boxed();
    let name = list.items[0].metadata.name.clone().unwrap();
    let patch = serde_json::json!({"metadata": {"labels": {"handed": "yes"}}});
    nodes
        .patch(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await
        .unwrap();
    let event = tokio::time::timeout(Duration::from_secs(10), watch.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    match event {
        WatchEvent::Modified(n) => {
            assert_eq!(n.metadata.name.as_deref(), Some(name.as_str()));
            assert_eq!(n.metadata.labels.unwrap()["handed"], "yes");
        }
        other => panic!("expected MODIFIED, got {other:?}"),
    }
    assert!(
        sim.requests()
            .iter()
            .any(|r| r.method == "POST" && r.path.contains("/leases"))
    );
}

#[tokio::test]
async fn serves_kube_rs_over_a_handed_listener() {
    let (listener, dialer, dialed) = pipe();
    let url = format!("http://{HOST}:{PORT}");
    let sim = KubeSim::start_on(
        Options {
            seed: Seed::preset("aks", 6).unwrap(),
            ..Options::default()
        },
        listener,
        url.clone(),
    )
    .await
    .unwrap();
    assert_eq!(sim.url(), url);
    assert_eq!(sim.address(), local());

    let config = kube::Config::new(url.parse().unwrap());
    exercise(client_over(&config, dialer), &sim).await;
    assert!(dialed.load(Ordering::SeqCst) >= 1);
    sim.shutdown().await;
}

#[tokio::test]
async fn serves_https_with_tokens_over_a_handed_listener() {
    let (listener, dialer, _) = pipe();
    let url = format!("https://{HOST}:{PORT}");
    let sim = KubeSim::start_on(
        Options {
            seed: Seed::preset("aks", 6).unwrap(),
            security: Some(Security { tokens: Vec::new() }),
            ..Options::default()
        },
        listener,
        url.clone(),
    )
    .await
    .unwrap();
    assert_eq!(sim.url(), url);

    // The kubeconfig the simulator writes: its CA and the admin token, for the given URL.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&path).unwrap();
    let raw = kube::config::Kubeconfig::read_from(&path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(raw, &Default::default())
        .await
        .unwrap();
    assert_eq!(config.cluster_url.to_string(), format!("{url}/"));
    exercise(client_over(&config, dialer.clone()), &sim).await;
    let admin = sim.admin_token().unwrap();
    assert!(
        sim.requests()
            .iter()
            .all(|r| r.caller.as_deref() == Some(kube_sim::ADMIN_USER)),
        "every request authenticated as the admin (token {admin})"
    );

    // Without the token the caller is system:anonymous and refused: authentication and RBAC
    // ran over the handed TLS stream.
    let mut anonymous = config.clone();
    anonymous.auth_info = Default::default();
    let nodes: Api<Node> = Api::all(client_over(&anonymous, dialer));
    match nodes.list(&ListParams::default()).await.unwrap_err() {
        kube::Error::Api(s) => assert_eq!(s.code, 403, "{s:?}"),
        other => panic!("expected an API error, got {other:?}"),
    }
    sim.shutdown().await;
}
