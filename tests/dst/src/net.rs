//! The simulated network under the services' own transports: turmoil's TCP behind
//! `cutover_runtime::dial`'s [`Dialer`] and [`Listener`]. Everything above the byte stream
//! (HTTP/1.1, HTTP/2, gRPC, TLS to ARM) is the production code.

use cutover_runtime::dial::{BoxStream, Dialer, Listener};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// Connects over the simulated network (names resolve through turmoil's DNS).
pub fn dialer() -> Dialer {
    Dialer::new(|host, port| async move {
        let s = turmoil::net::TcpStream::connect((host.as_str(), port)).await?;
        Ok(BoxStream::new(s))
    })
}

/// Binds `port` on the current simulated host and hands every accepted stream to the
/// returned listener. Call from inside the host's software (the accept task runs there and
/// dies with it).
pub async fn listen(port: u16) -> std::io::Result<Listener> {
    let bound = turmoil::net::TcpListener::bind((IpAddr::V4(Ipv4Addr::UNSPECIFIED), port)).await?;
    let local = bound
        .local_addr()
        .unwrap_or(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port));
    let (tx, listener) = Listener::handed(local);
    tokio::task::spawn_local(async move {
        while let Ok((s, peer)) = bound.accept().await {
            if tx.send((BoxStream::new(s), peer)).await.is_err() {
                break;
            }
        }
    });
    Ok(listener)
}

/// A Kubernetes client to `url` (plain http on the simulated network) presenting `token`:
/// kube-sim tells callers apart by their token. The layering is kube's own (base URI, auth).
pub fn kube_client(url: &str, token: &str) -> anyhow::Result<kube::Client> {
    use kube::client::ConfigExt;
    let mut cfg = kube::Config::new(url.parse()?);
    cfg.auth_info.token = Some(token.to_owned().into());
    cfg.default_namespace = "default".into();
    let http = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build(dialer());
    let service = tower::ServiceBuilder::new()
        .layer(cfg.base_uri_layer())
        .option_layer(cfg.auth_layer()?)
        .map_err(tower::BoxError::from)
        .service(http);
    Ok(kube::Client::new(service, cfg.default_namespace))
}
