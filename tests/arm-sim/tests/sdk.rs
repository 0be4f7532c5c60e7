//! The real Rust clients against the simulator: azure_identity 1.x credentials (client secret,
//! workload identity, App Service managed identity) and azure_mgmt_network 0.21's generated
//! client, including the create_or_update long-running operation and token failures.
//!
//! Neither SDK brings an HTTP client here (the workspace builds them without reqwest), so the
//! tests give both the same small hyper + rustls transport, trusting the simulator's CA: the
//! authority host must be https for azure_identity 1.x.
#![allow(clippy::unwrap_used)] // tests may unwrap (helpers outside #[test] fns too)

mod common;

use azure_core::credentials::TokenCredential;
use azure_identity::{
    ClientAssertionCredentialOptions, ClientSecretCredential, ClientSecretCredentialOptions,
    ManagedIdentityCredential, ManagedIdentityCredentialOptions, UserAssignedId,
    WorkloadIdentityCredential, WorkloadIdentityCredentialOptions,
};
use azure_mgmt_network::package_2024_03::{Client, models};
use common::*;
use futures::StreamExt;
use std::sync::Arc;

/// One hyper client for both SDK generations.
#[derive(Debug, Clone)]
struct HyperHttp(
    hyper_util::client::legacy::Client<
        hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
        http_body_util::Full<bytes::Bytes>,
    >,
);

impl HyperHttp {
    fn trusting(ca_pem: &str) -> Self {
        use tokio_rustls::rustls;
        use tokio_rustls::rustls::pki_types::{CertificateDer, pem::PemObject};
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        Self(
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build(connector),
        )
    }

    async fn send(
        &self,
        method: &str,
        url: &str,
        headers: Vec<(String, String)>,
        body: bytes::Bytes,
    ) -> Result<(u16, Vec<(String, String)>, bytes::Bytes), String> {
        use http_body_util::BodyExt;
        let mut req = http::Request::builder().method(method).uri(url);
        for (k, v) in headers {
            req = req.header(k, v);
        }
        let rsp = self
            .0
            .request(req.body(http_body_util::Full::new(body)).unwrap())
            .await
            .map_err(|e| format!("{e:?}"))?;
        let status = rsp.status().as_u16();
        let headers = rsp
            .headers()
            .iter()
            .filter_map(|(k, v)| Some((k.to_string(), v.to_str().ok()?.to_owned())))
            .collect();
        let body = rsp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((status, headers, body))
    }
}

#[async_trait::async_trait]
impl azure_core::http::HttpClient for HyperHttp {
    async fn execute_request(
        &self,
        request: &azure_core::http::Request,
    ) -> azure_core::Result<azure_core::http::AsyncRawResponse> {
        use azure_core::http::headers::{HeaderName, HeaderValue, Headers};
        let azure_core::http::Body::Bytes(body) = request.body() else {
            panic!("streamed body");
        };
        let headers = request
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), v.as_str().to_owned()))
            .collect();
        let (status, rsp_headers, body) = self
            .send(
                request.method().as_str(),
                request.url().as_str(),
                headers,
                body.clone(),
            )
            .await
            .map_err(|e| azure_core::Error::with_message(azure_core::error::ErrorKind::Io, e))?;
        let mut h = Headers::new();
        for (k, v) in rsp_headers {
            h.insert(HeaderName::from(k), HeaderValue::from(v));
        }
        Ok(azure_core::http::AsyncRawResponse::from_bytes(
            azure_core::http::StatusCode::from(status),
            h,
            body,
        ))
    }
}

#[async_trait::async_trait]
impl azure_core_legacy::HttpClient for HyperHttp {
    async fn execute_request(
        &self,
        request: &azure_core_legacy::Request,
    ) -> azure_core_legacy::Result<azure_core_legacy::Response> {
        use azure_core_legacy::headers::{HeaderName, HeaderValue, Headers};
        let azure_core_legacy::Body::Bytes(body) = request.body() else {
            panic!("streamed body");
        };
        let headers = request
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), v.as_str().to_owned()))
            .collect();
        let (status, rsp_headers, body) = self
            .send(
                request.method().as_ref(),
                request.url().as_str(),
                headers,
                body.clone(),
            )
            .await
            .map_err(|e| {
                azure_core_legacy::Error::with_message(
                    azure_core_legacy::error::ErrorKind::Io,
                    || e,
                )
            })?;
        let mut h = Headers::new();
        for (k, v) in rsp_headers {
            h.insert(HeaderName::from(k), HeaderValue::from(v));
        }
        let stream = futures::stream::iter(vec![Ok(body)]);
        Ok(azure_core_legacy::Response::new(
            azure_core_legacy::StatusCode::try_from(status).unwrap(),
            h,
            Box::pin(stream),
        ))
    }
}

/// A 1.x credential as the 0.21 generated client wants it.
#[derive(Debug)]
struct Legacy(Arc<dyn TokenCredential>);

#[async_trait::async_trait]
impl azure_core_legacy::auth::TokenCredential for Legacy {
    async fn get_token(
        &self,
        scopes: &[&str],
    ) -> azure_core_legacy::Result<azure_core_legacy::auth::AccessToken> {
        let t = self.0.get_token(scopes, None).await.map_err(|e| {
            azure_core_legacy::Error::with_message(
                azure_core_legacy::error::ErrorKind::Credential,
                || e.to_string(),
            )
        })?;
        Ok(azure_core_legacy::auth::AccessToken::new(
            azure_core_legacy::auth::Secret::new(t.token.secret().to_owned()),
            t.expires_on,
        ))
    }

    async fn clear_cache(&self) -> azure_core_legacy::Result<()> {
        Ok(())
    }
}

fn http(sim: &arm_sim::ArmSim) -> HyperHttp {
    HyperHttp::trusting(sim.ca_pem().unwrap())
}

/// azure_identity options: the simulator as a custom cloud's authority, our transport.
fn client_options(sim: &arm_sim::ArmSim) -> azure_core::http::ClientOptions {
    let mut cloud = azure_core::cloud::CustomConfiguration::default();
    cloud.authority_host = sim.aad_authority();
    azure_core::http::ClientOptions {
        transport: Some(azure_core::http::Transport::new(Arc::new(http(sim)))),
        cloud: Some(Arc::new(cloud.into())),
        ..Default::default()
    }
}

fn mgmt_client(sim: &arm_sim::ArmSim, credential: Arc<dyn TokenCredential>) -> Client {
    let transport: Arc<dyn azure_core_legacy::HttpClient> = Arc::new(http(sim));
    Client::builder(Arc::new(Legacy(credential)))
        .endpoint(azure_core_legacy::Url::parse(sim.url()).unwrap())
        .scopes(&[SCOPE])
        .transport(azure_core_legacy::TransportOptions::new(transport))
        .build()
        .unwrap()
}

fn secret_credential(sim: &arm_sim::ArmSim, secret: &str) -> Arc<dyn TokenCredential> {
    let c = sim.credentials();
    ClientSecretCredential::new(
        &c.tenant_id,
        c.client_id,
        secret.to_owned().into(),
        Some(ClientSecretCredentialOptions {
            client_options: client_options(sim),
        }),
    )
    .unwrap()
}

#[tokio::test]
async fn sdk_lists_gets_and_updates_pools_through_the_lro() {
    let sim = start("aks-ip").await;
    let sub = sim.credentials().subscription_id;
    let client = mgmt_client(
        &sim,
        secret_credential(&sim, &sim.credentials().client_secret),
    );
    let pools = client.load_balancer_backend_address_pools_client();

    let mut names = Vec::new();
    let mut stream = pools.list(RG, "kubernetes", &sub).into_stream();
    while let Some(page) = stream.next().await {
        names.extend(page.unwrap().value.into_iter().filter_map(|p| p.name));
    }
    assert_eq!(
        names,
        ["kubernetes", "kubernetes-IPv6", "aksOutboundBackendPool"]
    );

    let mut pool = pools
        .get(RG, "kubernetes", "kubernetes", &sub)
        .await
        .unwrap();
    assert!(pool.etag.as_deref().unwrap().starts_with("W/\""));
    let props = pool.properties.as_mut().unwrap();
    assert!(
        props.virtual_network.is_some(),
        "IP-based pools carry the pool-level VNet"
    );
    let entry = &mut props.load_balancer_backend_addresses[0];
    let entry_name = entry.name.clone().unwrap();
    entry.properties.as_mut().unwrap().admin_state =
        Some(models::load_balancer_backend_address_properties_format::AdminState::Down);

    // `.await` = PUT + polling of Azure-AsyncOperation + final GET.
    let updated = pools
        .create_or_update(RG, "kubernetes", "kubernetes", pool, &sub)
        .await
        .unwrap();
    let props = updated.properties.unwrap();
    assert_eq!(
        props.provisioning_state,
        Some(models::ProvisioningState::Succeeded)
    );
    let e = props
        .load_balancer_backend_addresses
        .iter()
        .find(|a| a.name.as_deref() == Some(entry_name.as_str()))
        .unwrap();
    assert_eq!(
        e.properties.as_ref().unwrap().admin_state,
        Some(models::load_balancer_backend_address_properties_format::AdminState::Down)
    );
    let log = sim.effective_log();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].entry, entry_name);
    // The SDK polled the operation URL at least once.
    assert!(
        sim.requests()
            .iter()
            .any(|r| r.path.contains("/operations/"))
    );

    let lb = client
        .load_balancers_client()
        .get(RG, "kubernetes", &sub)
        .await
        .unwrap();
    assert_eq!(lb.resource.name.as_deref(), Some("kubernetes"));
    assert_eq!(lb.properties.unwrap().backend_address_pools.len(), 3);
}

#[tokio::test]
async fn sdk_reads_nic_based_pools_and_nic_lists() {
    let seed =
        arm_sim::seed::Seed::load(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/seed.yaml"))
            .unwrap();
    let sim = arm_sim::ArmSim::start(arm_sim::ArmSimOptions {
        seed,
        ..Default::default()
    })
    .await
    .unwrap();
    let sub = sim.credentials().subscription_id;
    let client = mgmt_client(
        &sim,
        secret_credential(&sim, &sim.credentials().client_secret),
    );
    let pool = client
        .load_balancer_backend_address_pools_client()
        .get("MC_demo-rg_demo_eastus", "kubernetes", "kubernetes", &sub)
        .await
        .unwrap();
    let props = pool.properties.unwrap();
    assert_eq!(props.backend_ip_configurations.len(), 3);
    assert_eq!(props.load_balancer_backend_addresses.len(), 3);
    let nic_ref = props.load_balancer_backend_addresses[0]
        .properties
        .as_ref()
        .unwrap()
        .network_interface_ip_configuration
        .as_ref();
    assert!(
        nic_ref.is_some(),
        "NIC-style entries reference the ipConfiguration"
    );

    let mut nics = Vec::new();
    let mut stream = client
        .network_interfaces_client()
        .list("MC_demo-rg_demo_eastus", &sub)
        .into_stream();
    while let Some(page) = stream.next().await {
        nics.extend(page.unwrap().value);
    }
    assert_eq!(nics.len(), 2);
    let vm = nics[0]
        .properties
        .as_ref()
        .unwrap()
        .virtual_machine
        .as_ref()
        .unwrap()
        .id
        .clone()
        .unwrap();
    assert!(vm.ends_with("/virtualMachines/as-vm-1"), "{vm}");
}

#[tokio::test]
async fn sdk_sees_token_failures() {
    let sim = start("aks-ip").await;
    let sub = sim.credentials().subscription_id;
    let bad = mgmt_client(&sim, secret_credential(&sim, "wrong-secret"));
    let err = bad
        .load_balancers_client()
        .get(RG, "kubernetes", &sub)
        .await
        .unwrap_err();
    let text = format!("{err:?}");
    assert!(
        text.contains("invalid_client") || text.contains("AADSTS7000215"),
        "{text}"
    );

    // A cached token that the server has expired: 401 InvalidAuthenticationToken.
    let good = mgmt_client(
        &sim,
        secret_credential(&sim, &sim.credentials().client_secret),
    );
    good.load_balancers_client()
        .get(RG, "kubernetes", &sub)
        .await
        .unwrap();
    sim.expire_tokens();
    let err = good
        .load_balancers_client()
        .get(RG, "kubernetes", &sub)
        .await
        .unwrap_err();
    match err.kind() {
        azure_core_legacy::error::ErrorKind::HttpResponse { status, error_code } => {
            assert_eq!(u16::from(*status), 401);
            assert_eq!(error_code.as_deref(), Some("InvalidAuthenticationToken"));
        }
        other => panic!("expected an HTTP error, got {other:?}"),
    }
}

#[tokio::test]
async fn workload_identity_credential_gets_tokens_from_the_sim() {
    let sim = start("aks-ip").await;
    let c = sim.credentials();
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("azure-identity-token");
    std::fs::write(&token_file, sim.federated_token()).unwrap();
    let wi = |path: std::path::PathBuf| {
        WorkloadIdentityCredential::new(Some(WorkloadIdentityCredentialOptions {
            credential_options: ClientAssertionCredentialOptions {
                client_options: client_options(&sim),
            },
            tenant_id: Some(c.tenant_id.clone()),
            client_id: Some(c.client_id.clone()),
            token_file_path: Some(path),
        }))
        .unwrap()
    };
    let client = mgmt_client(&sim, wi(token_file));
    let lb = client
        .load_balancers_client()
        .get(RG, "kubernetes", &c.subscription_id)
        .await
        .unwrap();
    assert_eq!(lb.resource.name.as_deref(), Some("kubernetes"));
    // The token request as azure_identity 1.x sends it reached the simulator's AAD.
    assert!(
        sim.requests()
            .iter()
            .any(|r| r.path.ends_with("/oauth2/v2.0/token") && r.status == 200)
    );

    let forged_file = dir.path().join("forged");
    std::fs::write(&forged_file, "forged").unwrap();
    assert!(wi(forged_file).get_token(&[SCOPE], None).await.is_err());
}

/// The App Service managed-identity credential reads `IDENTITY_ENDPOINT` / `IDENTITY_HEADER`
/// from the process environment, which this crate cannot set (unsafe in edition 2024 and the
/// workspace forbids unsafe), so the check runs in a child test process with that environment.
#[tokio::test]
async fn managed_identity_credential_gets_tokens_from_the_sim() {
    let sim = start("aks-ip").await;
    let exe = std::env::current_exe().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    sim.write_ca(&ca).unwrap();
    let out = tokio::process::Command::new(exe)
        .args([
            "managed_identity_child",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env("IDENTITY_ENDPOINT", sim.identity_endpoint())
        .env("IDENTITY_HEADER", sim.identity_header())
        .env("ARM_SIM_URL", sim.url())
        .env("ARM_SIM_CA", &ca)
        .env("ARM_SIM_MI_CLIENT_ID", sim.managed_identity_client_id())
        .env("ARM_SIM_SUBSCRIPTION", sim.credentials().subscription_id)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mi = sim.managed_identity_client_id().to_owned();
    assert!(
        sim.requests()
            .iter()
            .any(|r| r.path.starts_with("/msi/token"))
    );
    assert!(
        sim.requests()
            .iter()
            .any(|r| r.path.contains("/loadBalancers/")
                && r.principal.as_deref() == Some(mi.as_str())
                && r.status == 200)
    );
}

#[tokio::test]
#[ignore = "run by managed_identity_credential_gets_tokens_from_the_sim in a child process"]
async fn managed_identity_child() {
    let url = std::env::var("ARM_SIM_URL").expect("ARM_SIM_URL");
    let sub = std::env::var("ARM_SIM_SUBSCRIPTION").expect("ARM_SIM_SUBSCRIPTION");
    let ca = std::fs::read_to_string(std::env::var("ARM_SIM_CA").expect("ARM_SIM_CA")).unwrap();
    let client_id = std::env::var("ARM_SIM_MI_CLIENT_ID").expect("ARM_SIM_MI_CLIENT_ID");
    let mi = |id: Option<UserAssignedId>| {
        ManagedIdentityCredential::new(Some(ManagedIdentityCredentialOptions {
            user_assigned_id: id,
            client_options: azure_core::http::ClientOptions {
                transport: Some(azure_core::http::Transport::new(Arc::new(
                    HyperHttp::trusting(&ca),
                ))),
                ..Default::default()
            },
        }))
        .unwrap()
    };
    // System-assigned, and the user-assigned identity named by its client id.
    for id in [None, Some(UserAssignedId::ClientId(client_id))] {
        let transport: Arc<dyn azure_core_legacy::HttpClient> = Arc::new(HyperHttp::trusting(&ca));
        let client = Client::builder(Arc::new(Legacy(mi(id))))
            .endpoint(azure_core_legacy::Url::parse(&url).unwrap())
            .scopes(&[SCOPE])
            .transport(azure_core_legacy::TransportOptions::new(transport))
            .build()
            .unwrap();
        let lb = client
            .load_balancers_client()
            .get(RG, "kubernetes", &sub)
            .await
            .unwrap();
        assert_eq!(lb.resource.name.as_deref(), Some("kubernetes"));
    }
    // An identity the resource does not have: IMDS's 400, which azure_identity reports as
    // "not assigned".
    let err = mi(Some(UserAssignedId::ClientId("not-ours".into())))
        .get_token(&[SCOPE], None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("has not been assigned"), "{err}");
}
