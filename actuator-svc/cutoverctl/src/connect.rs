//! Opens the gRPC channel to the actuator, with TLS and a client certificate when configured.

use crate::cli::ConnArgs;
use anyhow::{Context, bail};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// Connects to `args.endpoint`. An `https://` endpoint needs `--tls-ca`; client certificates
/// are sent when `--tls-cert`/`--tls-key` are given.
pub async fn channel(args: &ConnArgs) -> anyhow::Result<Channel> {
    let mut endpoint = Endpoint::from_shared(args.endpoint.clone())
        .with_context(|| format!("--endpoint {:?} is not a valid URL", args.endpoint))?
        .connect_timeout(args.timeout)
        .timeout(args.timeout);
    let https = args.endpoint.starts_with("https://");
    if let Some(tls) = tls_config(args, https)? {
        endpoint = endpoint.tls_config(tls).context("invalid TLS settings")?;
    }
    endpoint
        .connect()
        .await
        .with_context(|| format!("cannot connect to the actuator at {}", args.endpoint))
}

fn tls_config(args: &ConnArgs, https: bool) -> anyhow::Result<Option<ClientTlsConfig>> {
    if !https {
        if args.tls_ca.is_some() || args.tls_cert.is_some() {
            bail!(
                "--tls-ca/--tls-cert need an https:// --endpoint, got {}",
                args.endpoint
            );
        }
        return Ok(None);
    }
    let Some(ca_path) = &args.tls_ca else {
        bail!("--tls-ca is required for an https:// endpoint (the actuator's CA certificate)");
    };
    let ca = std::fs::read(ca_path)
        .with_context(|| format!("cannot read --tls-ca {}", ca_path.display()))?;
    let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
    if let (Some(cert_path), Some(key_path)) = (&args.tls_cert, &args.tls_key) {
        let cert = std::fs::read(cert_path)
            .with_context(|| format!("cannot read --tls-cert {}", cert_path.display()))?;
        let key = std::fs::read(key_path)
            .with_context(|| format!("cannot read --tls-key {}", key_path.display()))?;
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    if let Some(name) = &args.tls_server_name {
        tls = tls.domain_name(name.clone());
    }
    Ok(Some(tls))
}
