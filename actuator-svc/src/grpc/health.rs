//! `grpc.health.v1` that tells the truth: the server ("") and `cutover.v1.Actuator` answer
//! NOT_SERVING until the actuator is ready (the same readiness as the admin `/ready`: an Azure
//! AD token and the pool index), SERVING while ready, and NOT_SERVING again from the start of a
//! drain. A client that trusts health then never gets UNAVAILABLE from a replica it was told
//! is serving.

use cutover_proto::v1::actuator_server::ActuatorServer;
use cutover_runtime::admin::ReadyFn;
use std::time::Duration;
use tokio::sync::watch;
use tonic::server::NamedService;
use tonic_health::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::server::HealthReporter;

/// How often readiness is re-evaluated. Readiness changes rarely (start-up, drain); a change
/// reaches health watchers within this delay.
pub const POLL: Duration = Duration::from_millis(200);

/// The services whose status follows readiness: the whole server and the actuator service.
pub const FOLLOWED: [&str; 2] = [
    "",
    <ActuatorServer<super::service::ActuatorService> as NamedService>::NAME,
];

/// A reporter and its service, with every followed service NOT_SERVING until [`follow`] says
/// otherwise (tonic's default reports the server SERVING from the first instant).
pub async fn reporter() -> (HealthReporter, HealthServer<impl Health>) {
    let (reporter, service) = tonic_health::server::health_reporter();
    set(&reporter, ServingStatus::NotServing).await;
    (reporter, service)
}

async fn set(reporter: &HealthReporter, status: ServingStatus) {
    for name in FOLLOWED {
        reporter.set_service_status(name, status).await;
    }
}

/// Keeps the followed statuses equal to `ready()` until `shutdown` turns true (or its sender
/// goes away); then reports NOT_SERVING for good and returns.
pub async fn follow(reporter: HealthReporter, ready: ReadyFn, mut shutdown: watch::Receiver<bool>) {
    let mut current = None;
    loop {
        if *shutdown.borrow() {
            break;
        }
        let now = if ready().is_ok() {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        if current != Some(now) {
            tracing::info!(status = ?now, "gRPC health");
            set(&reporter, now).await;
            current = Some(now);
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            changed = shutdown.changed() => if changed.is_err() { break },
        }
    }
    set(&reporter, ServingStatus::NotServing).await;
    tracing::info!("gRPC health: NOT_SERVING (draining)");
}
