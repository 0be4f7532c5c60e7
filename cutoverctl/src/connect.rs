//! Opens the gRPC channel to the actuator: mutual TLS (the actuator's CA and a client
//! certificate, all three files required), or plaintext only with `--insecure-plaintext` and an
//! `http://` endpoint.

use crate::cli::ConnArgs;
use anyhow::{Context, bail};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// Connects to `args.endpoint`.
pub async fn channel(args: &ConnArgs) -> anyhow::Result<Channel> {
    let tls = tls_config(args)?;
    let mut endpoint = Endpoint::from_shared(args.endpoint.clone())
        .with_context(|| format!("--endpoint {:?} is not a valid URL", args.endpoint))?
        .connect_timeout(args.timeout)
        .timeout(args.timeout);
    match tls {
        Some(tls) => endpoint = endpoint.tls_config(tls).context("invalid TLS settings")?,
        None => eprintln!(
            "cutoverctl: warning: --insecure-plaintext: no TLS and no client certificate to {}",
            args.endpoint
        ),
    }
    endpoint
        .connect()
        .await
        .with_context(|| format!("cannot connect to the actuator at {}", args.endpoint))
}

/// The TLS settings the flags ask for; `None` only for an explicit plaintext connection.
fn tls_config(args: &ConnArgs) -> anyhow::Result<Option<ClientTlsConfig>> {
    let https = args.endpoint.starts_with("https://");
    if args.insecure_plaintext {
        if https {
            bail!(
                "--insecure-plaintext needs an http:// --endpoint, got {}",
                args.endpoint
            );
        }
        return Ok(None);
    }
    if !https {
        bail!(
            "--endpoint {} is plaintext: the actuator serves mutual TLS (use https:// with --tls-ca, \
             --tls-cert and --tls-key); --insecure-plaintext talks to an actuator started with \
             --insecure-plaintext (tests only)",
            args.endpoint
        );
    }
    let missing: Vec<&str> = [
        ("--tls-ca", args.tls_ca.is_none()),
        ("--tls-cert", args.tls_cert.is_none()),
        ("--tls-key", args.tls_key.is_none()),
    ]
    .iter()
    .filter(|(_, m)| *m)
    .map(|(f, _)| *f)
    .collect();
    let (Some(ca_path), Some(cert_path), Some(key_path)) =
        (&args.tls_ca, &args.tls_cert, &args.tls_key)
    else {
        bail!(
            "the actuator needs mutual TLS: {} required (the actuator's CA, and a client certificate \
             whose SAN is on its --tool-clients; CUTOVER_TLS_CA, CUTOVER_TLS_CERT, CUTOVER_TLS_KEY)",
            missing.join(", ")
        );
    };
    let ca = std::fs::read(ca_path)
        .with_context(|| format!("cannot read --tls-ca {}", ca_path.display()))?;
    let cert = std::fs::read(cert_path)
        .with_context(|| format!("cannot read --tls-cert {}", cert_path.display()))?;
    let key = std::fs::read(key_path)
        .with_context(|| format!("cannot read --tls-key {}", key_path.display()))?;
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        .identity(Identity::from_pem(cert, key));
    if let Some(name) = &args.tls_server_name {
        tls = tls.domain_name(name.clone());
    }
    Ok(Some(tls))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Cli;
    use clap::Parser;

    fn conn(args: &[&str]) -> ConnArgs {
        let mut v = vec!["cutoverctl", "list"];
        v.extend_from_slice(args);
        Cli::try_parse_from(v).unwrap().conn
    }

    #[test]
    fn plaintext_only_when_asked_and_tls_needs_all_three_files() {
        let e = tls_config(&conn(&["--endpoint", "http://127.0.0.1:9443"])).unwrap_err();
        assert!(e.to_string().contains("--insecure-plaintext"), "{e}");
        assert!(
            tls_config(&conn(&[
                "--endpoint",
                "http://127.0.0.1:9443",
                "--insecure-plaintext"
            ]))
            .unwrap()
            .is_none()
        );
        let e = tls_config(&conn(&[
            "--endpoint",
            "https://a:1",
            "--insecure-plaintext",
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("http://"), "{e}");
        let e = tls_config(&conn(&["--endpoint", "https://a:1", "--tls-ca", "ca.crt"]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--tls-cert, --tls-key required") && !e.contains("--tls-ca,"),
            "{e}"
        );
        // The default endpoint is TLS.
        let e = tls_config(&conn(&[])).unwrap_err().to_string();
        assert!(
            e.contains("--tls-ca, --tls-cert, --tls-key required"),
            "{e}"
        );
    }
}
