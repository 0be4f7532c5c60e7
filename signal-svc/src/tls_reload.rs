//! The mTLS material towards actuator-svc, read again whenever a connection is made: a mounted
//! Secret is updated in place (the kubelet swaps a `..data` symlink) and cert-manager renews
//! certificates long before a pod restarts. Established streams keep the session they
//! negotiated; every connect and reconnect uses the files as they are then.
//!
//! The reloading is `cutover_runtime::tls_reload`'s client shape ([`ClientTls`]: the files
//! checked as a whole before they replace the set in use; a half-written or mismatched set
//! logged and the previous one kept). What is signal-svc's own: tonic's `ClientTlsConfig` of
//! the material in use, and the log lines naming the actuators.

use cutover_runtime::tls_reload::{ClientMaterial, ClientTls, Refresh};
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

fn config(material: &ClientMaterial, domain: String) -> ClientTlsConfig {
    let mut t = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&material.ca_pem))
        .domain_name(domain);
    if let Some((cert, key)) = &material.identity {
        t = t.identity(Identity::from_pem(cert, key));
    }
    t
}

/// The TLS settings for a new connection to `domain`, from the files as they are now.
pub fn client_config(tls: &ClientTls, domain: String) -> ClientTlsConfig {
    match tls.refresh() {
        Refresh::Unchanged => {}
        Refresh::Reloaded => {
            tracing::info!(ca = %tls.files().ca.display(), "TLS material towards the actuators changed; new connections use it")
        }
        Refresh::Rejected(e) => {
            tracing::warn!(error = %e, "TLS material towards the actuators is not usable; keeping the previous one")
        }
    }
    config(&tls.current(), domain)
}
