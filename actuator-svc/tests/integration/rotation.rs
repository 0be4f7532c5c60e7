//! Certificates and secrets rotated on disk while the actuator runs, laid out as the kubelet
//! mounts a Secret (files are symlinks through `..data`, swapped in one rename).

use crate::common::*;
use actuator_svc::arm::transport::Transport;
use actuator_svc::config::azure_json::{self, CredentialChoice, EnvOverrides};
use actuator_svc::credentials::{self, CloudConfigFile, Sources};
use arm_sim::{ArmSim, ArmSimOptions};
use cutover_proto::v1::actuator_client::ActuatorClient;
use cutover_proto::v1::*;
use cutover_testkit::TestCa;
use cutover_testkit::certs::Usage;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

/// One CA with a server certificate for `localhost` and a signal-svc client certificate.
struct Pki {
    ca_pem: String,
    server: (String, String),
    client: (String, String),
}

fn pki(ca_name: &str) -> Pki {
    let ca = TestCa::new(ca_name).unwrap();
    // Each leaf named by its DNS SAN and CN.
    let leaf = |name: &str, usage| {
        let l = ca.issue(&[name], Some(name), None, usage).unwrap();
        (l.cert_pem, l.key_pem)
    };
    Pki {
        ca_pem: ca.pem(),
        server: leaf("localhost", Usage::ServerAuth),
        client: leaf("signal-svc.cutover.svc", Usage::ClientAuth),
    }
}

/// A directory written the way the kubelet updates a mounted Secret: each version in its own
/// directory, `..data` pointing at the current one (replaced by a rename), and every file a
/// symlink through `..data`.
struct SecretDir {
    root: PathBuf,
    generation: u32,
}

impl SecretDir {
    fn new(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
            generation: 0,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    fn write(&mut self, files: &[(&str, &str)]) {
        self.generation += 1;
        let version = format!("..v{}", self.generation);
        std::fs::create_dir(self.root.join(&version)).unwrap();
        for (name, content) in files {
            std::fs::write(self.root.join(&version).join(name), content).unwrap();
        }
        let tmp = self.root.join("..data_tmp");
        std::os::unix::fs::symlink(&version, &tmp).unwrap();
        std::fs::rename(&tmp, self.root.join("..data")).unwrap();
        for (name, _) in files {
            let link = self.root.join(name);
            if link.symlink_metadata().is_err() {
                std::os::unix::fs::symlink(Path::new("..data").join(name), link).unwrap();
            }
        }
    }

    fn write_pki(&mut self, p: &Pki) {
        self.write(&[
            ("tls.crt", &p.server.0),
            ("tls.key", &p.server.1),
            ("ca.crt", &p.ca_pem),
        ]);
    }
}

/// A connection that trusts `trust`'s CA and presents `me`'s client certificate, checked with
/// a unary call (with TLS 1.3 a refused client certificate shows only at the first read).
async fn connect(
    addr: std::net::SocketAddr,
    trust: &Pki,
    me: &Pki,
) -> Result<ActuatorClient<Channel>, String> {
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&trust.ca_pem))
        .identity(Identity::from_pem(&me.client.0, &me.client.1))
        .domain_name("localhost");
    let ch = Channel::from_shared(format!("https://localhost:{}", addr.port()))
        .unwrap()
        .tls_config(tls)
        .map_err(|e| e.to_string())?
        .connect()
        .await
        .map_err(|e| format!("{e:?}"))?;
    let mut c = ActuatorClient::new(ch);
    c.list_held_entries(ListHeldEntriesRequest::default())
        .await
        .map_err(|e| e.to_string())?;
    Ok(c)
}

fn msg(kind: signal_message::Kind) -> SignalMessage {
    SignalMessage { kind: Some(kind) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_server_cert_and_ca_reach_new_connections_while_a_stream_keeps_flowing() {
    let (sim, cluster) = start_sim("aks").await;
    let dir = tempfile::tempdir().unwrap();
    let mut secret = SecretDir::new(dir.path());
    let (old, new) = (pki("old CA"), pki("new CA"));
    secret.write_pki(&old);
    let a = start_actuator(
        &sim,
        &cluster,
        &[
            "--tls-cert",
            secret.path("tls.crt").to_str().unwrap(),
            "--tls-key",
            secret.path("tls.key").to_str().unwrap(),
            "--tls-client-ca",
            secret.path("ca.crt").to_str().unwrap(),
            "--signal-clients",
            "signal-svc.cutover.svc",
            // The probe call below is a tool RPC (an empty list admits nobody).
            "--tool-clients",
            "signal-svc.cutover.svc",
        ],
    )
    .await;
    let addr = a.running.grpc_addr;

    // A stream opened with the old material.
    let mut client = connect(addr, &old, &old).await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tx.send(msg(signal_message::Kind::Hello(Hello {
        cluster_name: "kubernetes".into(),
        sender_identity: "signal-0".into(),
        leader_epoch: 1,
        // One fake signal-svc process throughout.
        incarnation: 1,
    })))
    .await
    .unwrap();
    tx.send(msg(signal_message::Kind::SnapshotEnd(SnapshotEnd {
        node_count: 0,
    })))
    .await
    .unwrap();
    let mut inbound = client
        .stream_desired_states(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let first = inbound.message().await.unwrap().unwrap();
    assert!(matches!(
        first.kind,
        Some(actuator_message::Kind::HelloAck(_))
    ));

    // Rotate certificate, key and client CA at once, as a Secret update does.
    secret.write_pki(&new);
    wait_until("a new connection gets the new certificate", || {
        let new = &new;
        async move { connect(addr, new, new).await.is_ok() }
    })
    .await;
    // The old server certificate is no longer presented, and the old CA no longer admits.
    let e = connect(addr, &old, &old).await.unwrap_err();
    assert!(
        e.contains("certificate") || e.contains("Certificate"),
        "{e}"
    );
    assert!(connect(addr, &new, &old).await.is_err());

    // The stream opened before the rotation still carries desired states and results.
    let node = &cluster.nodes[2];
    tx.send(msg(signal_message::Kind::Delta(desired(
        node,
        AdminState::Down,
        1,
        1,
    ))))
    .await
    .unwrap();
    let effective = tokio::time::timeout(WAIT, async {
        loop {
            let m = inbound.message().await.unwrap().expect("stream still open");
            if let Some(actuator_message::Kind::Result(r)) = m.kind
                && phase(&r) == ResultPhase::Effective
            {
                return r;
            }
        }
    })
    .await
    .expect("the old stream delivered a result after the rotation");
    assert_eq!(effective.node.unwrap().name, node.name);
    assert!(all_are(&sim, &cluster, node, "Down"));
}

/// The azure.json of `cluster` with `secret` as `aadClientSecret`.
fn azure_json_with_secret(cluster: &aks_fixture::Cluster, secret: &str) -> String {
    let mut v = cluster.azure_json();
    v["aadClientSecret"] = serde_json::Value::String(secret.to_string());
    v.to_string()
}

async fn sim_with_token_lifetime(secs: u64) -> (ArmSim, aks_fixture::Cluster) {
    let mut opts = ArmSimOptions::preset("aks").unwrap();
    opts.tuning = fast_tuning();
    opts.tuning.token_lifetime_secs = secs;
    (
        ArmSim::start(opts).await.unwrap(),
        aks_fixture::preset("aks").unwrap(),
    )
}

const SCOPE: &str = "https://management.azure.com/.default";

/// The actuator's HTTPS client, trusting the simulator's CA.
fn sim_transport(sim: &ArmSim) -> Transport {
    let pem = sim.ca_pem().unwrap().as_bytes();
    let roots = rustls::pki_types::CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    Transport::new(&roots).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_client_secret_is_used_for_the_next_token_request() {
    let (sim, cluster) = start_sim("aks").await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("azure.json");
    let good = sim.credentials().client_secret;
    std::fs::write(&path, azure_json_with_secret(&cluster, "revoked-secret")).unwrap();
    let env = EnvOverrides::default();
    let cfg =
        azure_json::parse(&std::fs::read_to_string(&path).unwrap(), "kubernetes", &env).unwrap();
    let cred = credentials::build(
        &cfg.credential,
        &cfg.tenant_id,
        &url::Url::parse(&sim.aad_authority()).unwrap(),
        sim_transport(&sim),
        Sources {
            reread_every: Duration::ZERO,
            cloud_config: Some(CloudConfigFile {
                path: path.clone(),
                cluster_name: "kubernetes".into(),
                env,
            }),
        },
    )
    .unwrap();
    assert!(cred.token(SCOPE).await.is_err(), "a wrong secret");

    std::fs::write(&path, azure_json_with_secret(&cluster, &good)).unwrap();
    let token = cred.token(SCOPE).await.expect("the rotated secret");
    // A half-written file keeps the secret in use (and the cached token).
    std::fs::write(&path, "{\"cloud\": \"AzurePublic").unwrap();
    let again = cred.token(SCOPE).await.unwrap();
    assert_eq!(again.token.secret(), token.token.secret());
    // A new secret takes effect at the next request, even while a token is cached: here
    // it is one AAD refuses, which shows it was the one sent.
    std::fs::write(&path, azure_json_with_secret(&cluster, "another-secret")).unwrap();
    assert!(cred.token(SCOPE).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_federated_token_file_is_used_for_the_next_token_request() {
    let (sim, _cluster) = start_sim("aks").await;
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("azure-identity-token");
    std::fs::write(&token_file, "expired.projected.token").unwrap();
    let choice = CredentialChoice::WorkloadIdentity {
        client_id: sim.credentials().client_id,
        token_file: token_file.to_str().unwrap().to_string(),
    };
    let cred = credentials::build(
        &choice,
        sim.tenant_id(),
        &url::Url::parse(&sim.aad_authority()).unwrap(),
        sim_transport(&sim),
        Sources {
            reread_every: Duration::ZERO,
            cloud_config: None,
        },
    )
    .unwrap();
    assert!(cred.token(SCOPE).await.is_err(), "a stale assertion");
    std::fs::write(&token_file, format!("{}\n", sim.federated_token())).unwrap();
    assert!(cred.token(SCOPE).await.is_ok(), "the rotated assertion");
    // The kubelet truncates before writing: an empty file keeps the last assertion.
    std::fs::write(&token_file, "").unwrap();
    cred.invalidate();
    assert!(cred.token(SCOPE).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_refreshed_before_they_expire() {
    // 302 s tokens: azure_identity fetches a new one when less than 300 s remain.
    let (sim, cluster) = sim_with_token_lifetime(302).await;
    let cfg = azure_json::parse(
        &cluster.azure_json().to_string(),
        "kubernetes",
        &EnvOverrides::default(),
    )
    .unwrap();
    let cred = credentials::build(
        &cfg.credential,
        &cfg.tenant_id,
        &url::Url::parse(&sim.aad_authority()).unwrap(),
        sim_transport(&sim),
        Sources {
            reread_every: Duration::ZERO,
            cloud_config: None,
        },
    )
    .unwrap();
    let first = cred.token(SCOPE).await.unwrap();
    assert_eq!(
        cred.token(SCOPE).await.unwrap().token.secret(),
        first.token.secret(),
        "cached while fresh"
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let second = cred.token(SCOPE).await.unwrap();
    assert_ne!(second.token.secret(), first.token.secret());
    assert!(
        first.expires_on > time::OffsetDateTime::now_utc() + time::Duration::seconds(295),
        "the first token was still valid when replaced"
    );
}
