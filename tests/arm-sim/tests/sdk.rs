//! The real Rust clients against the simulator: azure_mgmt_network 0.21 with azure_identity
//! credentials (client secret, workload identity, App Service managed identity), including the
//! create_or_update long-running operation and token failures.
#![allow(clippy::unwrap_used)] // tests may unwrap (helpers outside #[test] fns too)

mod common;

use azure_core::auth::TokenCredential;
use azure_identity::{ClientSecretCredential, WorkloadIdentityCredential};
use azure_mgmt_network::package_2024_03::{Client, models};
use common::*;
use futures::StreamExt;
use std::sync::Arc;

fn mgmt_client(sim: &arm_sim::ArmSim, credential: Arc<dyn TokenCredential>) -> Client {
    Client::builder(credential)
        .endpoint(azure_core::Url::parse(sim.url()).unwrap())
        .scopes(&[SCOPE])
        .build()
        .unwrap()
}

fn secret_credential(sim: &arm_sim::ArmSim, secret: &str) -> Arc<dyn TokenCredential> {
    let c = sim.credentials();
    Arc::new(ClientSecretCredential::new(
        azure_core::new_http_client(),
        azure_core::Url::parse(sim.url()).unwrap(),
        c.tenant_id,
        c.client_id,
        secret.to_owned(),
    ))
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
        azure_core::error::ErrorKind::HttpResponse { status, error_code } => {
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
    let authority = azure_core::Url::parse(sim.url()).unwrap();
    let cred: Arc<dyn TokenCredential> = Arc::new(WorkloadIdentityCredential::new(
        azure_core::new_http_client(),
        authority.clone(),
        c.tenant_id.clone(),
        c.client_id.clone(),
        sim.federated_token().to_owned(),
    ));
    let client = mgmt_client(&sim, cred);
    let lb = client
        .load_balancers_client()
        .get(RG, "kubernetes", &c.subscription_id)
        .await
        .unwrap();
    assert_eq!(lb.resource.name.as_deref(), Some("kubernetes"));

    let forged = WorkloadIdentityCredential::new(
        azure_core::new_http_client(),
        authority,
        c.tenant_id,
        c.client_id,
        "forged".to_owned(),
    );
    assert!(forged.get_token(&[SCOPE]).await.is_err());
}

/// The App Service managed-identity credential reads `IDENTITY_ENDPOINT` / `IDENTITY_HEADER`
/// from the process environment, which this crate cannot set (unsafe in edition 2024 and the
/// workspace forbids unsafe), so the check runs in a child test process with that environment.
#[tokio::test]
async fn managed_identity_credential_gets_tokens_from_the_sim() {
    let sim = start("aks-ip").await;
    let exe = std::env::current_exe().unwrap();
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
    let cred = azure_identity::AppServiceManagedIdentityCredential::create(
        azure_identity::TokenCredentialOptions::default(),
    )
    .unwrap();
    let client = Client::builder(Arc::new(cred))
        .endpoint(azure_core::Url::parse(&url).unwrap())
        .scopes(&[SCOPE])
        .build()
        .unwrap();
    let lb = client
        .load_balancers_client()
        .get(RG, "kubernetes", &sub)
        .await
        .unwrap();
    assert_eq!(lb.resource.name.as_deref(), Some("kubernetes"));
}
