//! Start-up steps 1 and 2, shared by the service (`runtime`) and `--preflight`: the config
//! files and flags loaded and validated, the credential and the ARM client with its one shared
//! budget, and the load balancers cutover manages.

use crate::arm::ArmClient;
use crate::arm::budget::{Budget, DEFAULT_READ, DEFAULT_WRITE, Limits};
use crate::arm::client::Scope;
use crate::arm::transport::{self, Transport};
use crate::config::azure_json::{self, AzureConfig, EnvOverrides};
use crate::config::cli::{Args, Serving};
use crate::config::cloud;
use crate::credentials;
use crate::grpc::auth::AllowLists;
use crate::metrics::Metrics;
use anyhow::Context;
use cutover_runtime::dial::Dialer;
use cutover_runtime::tls_reload::{ServerTlsFiles, TlsReloader};
use parking_lot::Mutex;
use std::sync::Arc;

/// The load balancers cutover manages: the cluster's (or `loadBalancerName`'s) public LB, or
/// every multi-SLB configuration, each with its `-internal` twin.
pub fn managed_lbs(cfg: &AzureConfig, cluster_name: &str) -> Vec<String> {
    let bases: Vec<String> = if cfg.multi_slb.is_empty() {
        vec![
            cfg.load_balancer_name
                .clone()
                .unwrap_or_else(|| cluster_name.to_string()),
        ]
    } else {
        cfg.multi_slb.clone()
    };
    bases
        .iter()
        .flat_map(|b| [b.clone(), format!("{b}-internal")])
        .collect()
}

/// What the config files and flags say, validated.
pub(crate) struct Loaded {
    pub(crate) cfg: AzureConfig,
    /// ARM endpoint, authority and token scope (azure.json's `cloud` or a custom cloud's
    /// metadata, the flags).
    cloud: cloud::Cloud,
    /// The HTTPS client of every Azure call (tokens and ARM).
    http: Transport,
}

/// Step 1: `azure.json` and the AAD authority. Every Azure call (tokens and ARM, and the
/// metadata document of a custom cloud) goes over TCP (through the environment's proxy
/// settings), or over `dialer` when there is one.
pub(crate) async fn load(
    args: &Args,
    env: &EnvOverrides,
    dialer: Option<Dialer>,
) -> anyhow::Result<Loaded> {
    let config = || format!("--cloud-config {}", args.cloud_config.display());
    let text = std::fs::read_to_string(&args.cloud_config).with_context(config)?;
    let cfg = azure_json::parse(&text, &args.cluster_name, env).with_context(config)?;
    let extra_roots = match &args.azure_ca_file {
        Some(path) => transport::read_ca_file(path).context("--azure-ca-file")?,
        None => Vec::new(),
    };
    let http = match dialer {
        None => Transport::new(&extra_roots),
        Some(dialer) => Transport::with_dialer(&extra_roots, dialer),
    }
    .context("HTTPS client")?
    .for_replica(&args.identity);
    let overrides = cloud::Overrides {
        arm_endpoint: args.arm_endpoint.clone(),
        authority: args.aad_authority.clone(),
        token_scope: args.arm_token_scope.clone(),
    };
    // A custom cloud: its ARM's metadata document names the endpoints.
    let metadata = match cloud::resource_manager_field(&text)
        .map_err(anyhow::Error::msg)
        .with_context(config)?
    {
        Some(endpoint) => Some(
            custom_cloud(&http, &text, &endpoint, args.arm_timeout)
                .await
                .map_err(anyhow::Error::msg)
                .with_context(config)?,
        ),
        None => None,
    };
    let cloud = cloud::from_process(&text, &overrides, metadata.as_ref())
        .map_err(anyhow::Error::msg)
        .with_context(config)?;
    tracing::info!(cloud = %cloud.name, arm_endpoint = %cloud.arm_endpoint, authority = %cloud.authority, token_scope = %cloud.token_scope, "Azure cloud");
    tracing::info!(credential = ?cfg.credential, subscription = %cfg.subscription_id, "configuration loaded");
    Ok(Loaded { cfg, cloud, http })
}

/// How many times the metadata document is asked for before start-up fails.
const METADATA_ATTEMPTS: u32 = 3;
/// The largest metadata document read (Azure's lists every cloud in a few KiB).
const METADATA_MAX: usize = 1024 * 1024;

/// azure.json's `resourceManagerEndpoint`: GETs its metadata document (no token: the
/// document is public) and reads the cloud's endpoints from it. https only (plain http on
/// loopback): the answer decides where the bearer token goes.
async fn custom_cloud(
    http: &Transport,
    azure_json: &str,
    endpoint: &url::Url,
    timeout: std::time::Duration,
) -> Result<cloud::Metadata, String> {
    crate::arm::client::endpoint_allowed(endpoint)
        .map_err(|e| format!("resourceManagerEndpoint {endpoint}: {e}"))?;
    let url = cloud::metadata_url(endpoint);
    let mut last = String::new();
    for attempt in 1..=METADATA_ATTEMPTS {
        match tokio::time::timeout(timeout, get_text(http, &url)).await {
            Ok(Ok(text)) => {
                let m = cloud::parse_metadata(
                    &text,
                    cloud::cloud_field(azure_json).as_deref(),
                    endpoint,
                )?;
                tracing::info!(%url, name = %m.name, resource_manager = %m.resource_manager, authority = %m.authority, audience = %m.audience, "custom cloud: metadata read");
                return Ok(m);
            }
            Ok(Err(e)) => last = e,
            Err(_) => last = format!("no answer within {timeout:?}"),
        }
        tracing::warn!(%url, attempt, error = %last, "custom cloud: metadata not read");
        if attempt < METADATA_ATTEMPTS {
            tokio::time::sleep(std::time::Duration::from_secs(u64::from(attempt))).await;
        }
    }
    Err(format!(
        "resourceManagerEndpoint {endpoint}: the metadata document {url} could not be read ({METADATA_ATTEMPTS} attempts): {last}"
    ))
}

/// One GET of `url`: the body of a 200, or why not.
async fn get_text(http: &Transport, url: &url::Url) -> Result<String, String> {
    use http_body_util::BodyExt;
    let req = http::Request::builder()
        .method(http::Method::GET)
        .uri(url.as_str())
        .header("accept", "application/json")
        .body(crate::arm::body::ChunkBody::empty())
        .map_err(|e| e.to_string())?;
    let resp = http.send(req).await.map_err(|e| e.to_string())?;
    let status = resp.status();
    let body = http_body_util::Limited::new(resp.into_body(), METADATA_MAX)
        .collect()
        .await
        .map_err(|e| format!("HTTP {status}: reading the body: {e}"))?
        .to_bytes();
    if !status.is_success() {
        let start = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
        return Err(format!("HTTP {status}: {start}"));
    }
    String::from_utf8(body.to_vec()).map_err(|e| format!("HTTP {status}: {e}"))
}

/// The service's step 1b (not the preflight's, which serves nothing): how gRPC is served. Mutual
/// TLS with the material read and checked, and the allow-lists; or plaintext, only with
/// `--insecure-plaintext`, said in a warning and in `cutover_actuator_insecure_plaintext`.
pub(crate) fn grpc_security(
    args: &Args,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<(Option<Arc<TlsReloader>>, AllowLists)> {
    match args.serving().map_err(anyhow::Error::msg)? {
        Serving::InsecurePlaintext => {
            tracing::warn!(
                "--insecure-plaintext: gRPC is served WITHOUT TLS and WITHOUT client authentication; \
                 any caller that reaches the port may drive every node's admin state (tests only)"
            );
            metrics.set_insecure_plaintext(true);
            Ok((None, AllowLists::default()))
        }
        Serving::Mtls {
            cert,
            key,
            client_ca,
            signal,
            tool,
        } => {
            let tls = TlsReloader::load(ServerTlsFiles {
                cert,
                key,
                client_ca: Some(client_ca),
            })?;
            let shown = |l: &[crate::identity::Allowed]| -> Vec<String> {
                l.iter().map(ToString::to_string).collect()
            };
            tracing::info!(signal_clients = ?shown(&signal), tool_clients = ?shown(&tool), "gRPC served with mutual TLS; identities are certificate SANs, matched exactly");
            if tool.is_empty() {
                tracing::info!("--tool-clients is empty: every tool RPC is refused");
            }
            metrics.set_insecure_plaintext(false);
            Ok((
                Some(Arc::new(tls)),
                AllowLists {
                    client_auth: true,
                    signal,
                    tool,
                    metrics: Some(metrics.clone()),
                },
            ))
        }
    }
}

/// Step 2: the credential and the ARM client with its one shared budget; returns the read
/// limits too (the tools' share of reads is cut from them).
pub(crate) fn arm_client(
    args: &Args,
    env: &EnvOverrides,
    loaded: &Loaded,
    metrics: Arc<Metrics>,
) -> anyhow::Result<(ArmClient, Limits)> {
    let (cfg, authority) = (&loaded.cfg, &loaded.cloud.authority);
    let endpoint = &loaded.cloud.arm_endpoint;
    // The bearer token goes over https only (plain http on loopback): refused at start-up.
    crate::arm::client::endpoint_allowed(endpoint)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("--arm-endpoint {endpoint}"))?;
    let http = loaded.http.clone();
    let credential = credentials::build(
        &cfg.credential,
        &cfg.tenant_id,
        authority,
        http.clone(),
        credentials::Sources {
            reread_every: credentials::REREAD_EVERY,
            cloud_config: Some(credentials::CloudConfigFile {
                path: args.cloud_config.clone(),
                cluster_name: args.cluster_name.clone(),
                env: env.clone(),
            }),
        },
    )?;
    let (read, write) = match cfg.rate_limit {
        Some(r) => (
            Limits {
                bucket: r.read_bucket,
                qps: r.read_qps,
            },
            Limits {
                bucket: r.write_bucket,
                qps: r.write_qps,
            },
        ),
        None => (DEFAULT_READ, DEFAULT_WRITE),
    };
    let budget = Arc::new(Mutex::new(Budget::new(
        read,
        write,
        tokio::time::Instant::now(),
    )));
    let arm = ArmClient::new(
        http,
        credential,
        Scope {
            endpoint: endpoint.clone(),
            subscription_id: cfg.subscription_id.clone(),
            lb_resource_group: cfg.load_balancer_resource_group.clone(),
            node_resource_group: cfg.resource_group.clone(),
        },
        budget,
        metrics,
        args.arm_timeout,
    )
    .with_body_budget(args.lb_read_budget)
    .with_token_scope(&loaded.cloud.token_scope);
    Ok((arm, read))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn managed_lbs_cover_internal_twins_and_multi_slb() {
        let c = aks_fixture::preset("aks-multi-slb").unwrap();
        let cfg = azure_json::parse(
            &c.azure_json().to_string(),
            "kubernetes",
            &EnvOverrides::default(),
        )
        .unwrap();
        assert_eq!(
            managed_lbs(&cfg, "kubernetes"),
            vec![
                "kubernetes",
                "kubernetes-internal",
                "kubernetes-2",
                "kubernetes-2-internal"
            ]
        );
        let c = aks_fixture::preset("aks").unwrap();
        let cfg = azure_json::parse(
            &c.azure_json().to_string(),
            "kubernetes",
            &EnvOverrides::default(),
        )
        .unwrap();
        assert_eq!(
            managed_lbs(&cfg, "kubernetes"),
            vec!["kubernetes", "kubernetes-internal"]
        );
    }
}
