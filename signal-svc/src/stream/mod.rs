//! The desired-state streams to actuator-svc: one task per endpoint, on the leader only.
//!
//! A stream opens only once the node list has synced (a partial list would assert a partial
//! desired state). Each (re)connect sends `Hello`, the full snapshot of every node in
//! chunks, `SnapshotEnd`, then deltas drained from the endpoint's dirty set whenever it is
//! woken. A periodic resync re-sends every node's state as deltas *on the same stream*, so
//! the replica keeps its load balancers (ending the stream would drop its assignment).
//! While the leader is suspended (renew deadline passed) the stream stays open and sends
//! nothing. Failures reconnect with capped, jittered backoff; a hello refused because the
//! actuator accepted a higher epoch reports that epoch, so the leader raises its own.

pub mod discovery;
pub mod fleet;
pub mod results;

use crate::config::TlsMaterial;
use crate::core::assign::{Outcome, StreamId};
use crate::core::backoff::Backoff;
use crate::shared::Shared;
use cutover_proto::v1::actuator_client::ActuatorClient;
use cutover_proto::v1::{
    Hello, SignalMessage, Snapshot, SnapshotEnd, actuator_message, signal_message::Kind,
};
use results::NodeEvent;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

/// Nodes per `Snapshot` message.
pub const SNAPSHOT_CHUNK: usize = 500;
const DELTA_BATCH: usize = 256;

/// Stream settings.
#[derive(Clone, Debug)]
pub struct StreamConfig {
    pub cluster_name: String,
    pub identity: String,
    pub tls: Option<TlsMaterial>,
    /// TLS name when `tls.server_name` is unset and the endpoint is an address.
    pub default_server_name: Option<String>,
    pub resync_interval: Duration,
    /// HTTP/2 keepalive interval and ack timeout.
    pub keepalive: Duration,
}

/// How long the actuator has to acknowledge the `Hello`.
const ACK_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("endpoint {endpoint}: {source}")]
    Transport {
        endpoint: String,
        source: tonic::transport::Error,
    },
    #[error("endpoint {endpoint}: {status}")]
    Status {
        endpoint: String,
        status: tonic::Status,
    },
    #[error("endpoint {endpoint}: stream closed by the actuator")]
    Closed { endpoint: String },
    #[error("endpoint {endpoint}: no HelloAck within {ACK_TIMEOUT:?}")]
    NoAck { endpoint: String },
}

enum Ended {
    Shutdown,
}

/// Trailing metadata key in which an actuator refusing a stale epoch names the epoch it has
/// accepted (the message says it too, for older actuators).
pub const ACCEPTED_EPOCH_KEY: &str = "cutover-accepted-epoch";

/// The epoch an actuator says it accepted, from a FAILED_PRECONDITION refusal of our hello
/// or of a superseded stream.
pub fn accepted_epoch(status: &tonic::Status) -> Option<u64> {
    if status.code() != tonic::Code::FailedPrecondition {
        return None;
    }
    if let Some(v) = status.metadata().get(ACCEPTED_EPOCH_KEY)
        && let Some(n) = v.to_str().ok().and_then(|v| v.parse().ok())
    {
        return Some(n);
    }
    let m = status.message();
    let tail = m
        .strip_prefix("hello.leader_epoch: ")
        .and_then(|r| r.split_once("accepted leader epoch ").map(|(_, t)| t))
        .or_else(|| {
            m.strip_prefix("leader epoch ")
                .and_then(|r| r.split_once("was superseded by ").map(|(_, t)| t))
        })?;
    tail.trim().parse().ok()
}

fn host_of(endpoint: &str) -> &str {
    endpoint
        .rsplit_once(':')
        .map_or(endpoint, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']')
}

async fn connect(
    endpoint: &str,
    cfg: &StreamConfig,
) -> Result<ActuatorClient<tonic::transport::Channel>, StreamError> {
    let terr = |source| StreamError::Transport {
        endpoint: endpoint.to_owned(),
        source,
    };
    let scheme = if cfg.tls.is_some() { "https" } else { "http" };
    let mut ep = tonic::transport::Endpoint::from_shared(format!("{scheme}://{endpoint}"))
        .map_err(terr)?
        .connect_timeout(Duration::from_secs(2))
        .http2_keep_alive_interval(cfg.keepalive)
        .keep_alive_timeout(cfg.keepalive)
        .keep_alive_while_idle(true)
        .tcp_nodelay(true);
    if let Some(tls) = &cfg.tls {
        let host = host_of(endpoint);
        let is_ip = host.parse::<std::net::IpAddr>().is_ok();
        let name = tls
            .server_name
            .clone()
            .or_else(|| {
                if is_ip {
                    cfg.default_server_name.clone()
                } else {
                    None
                }
            })
            .unwrap_or_else(|| host.to_owned());
        // The files as they are now: a rotated certificate or CA is used from the next connect.
        ep = ep
            .tls_config(tls.source.client_config(name))
            .map_err(terr)?;
    }
    let channel = ep.connect().await.map_err(terr)?;
    Ok(ActuatorClient::new(channel))
}

fn msg(kind: Kind) -> SignalMessage {
    SignalMessage { kind: Some(kind) }
}

/// Leaves the assignment when a live stream ends, however it ends (error, resync, shutdown,
/// or the future being dropped on a leadership change).
struct Membership {
    shared: Arc<Shared>,
    id: StreamId,
}

impl Drop for Membership {
    fn drop(&mut self) {
        let outcome = self
            .shared
            .assign
            .lock()
            .leave(self.id, tokio::time::Instant::now());
        publish_assignment(&self.shared, &outcome);
    }
}

/// After a plan change: metrics, and wake every stream so each sends its new assignment.
fn publish_assignment(shared: &Shared, outcome: &Outcome) {
    if !outcome.changed {
        return;
    }
    let (owners, counts) = {
        let a = shared.assign.lock();
        (a.owners(), a.counts())
    };
    shared.metrics.set_assignment(&owners, &counts);
    if outcome.failed_over > 0 {
        shared
            .metrics
            .assignment_failovers
            .inc_by(outcome.failed_over as u64);
        tracing::warn!(
            load_balancers = outcome.failed_over,
            "load balancers of a lost actuator stream handed over"
        );
    }
    tracing::info!(?owners, "load balancer assignment changed");
    shared.wake_all();
}

/// Sends the stream's assignment if one is due (new plan or heartbeat).
///
/// It echoes the newest `Renew` the actuator sent up (`renewed`): the actuator counts the
/// assignment's validity from when it sent that, which precedes this send, from which the
/// fence of this stream counts (see `Assignment` in the proto).
async fn send_assignment(
    shared: &Shared,
    id: StreamId,
    renewed: &AtomicU64,
    tx: &mpsc::Sender<SignalMessage>,
) -> Result<(), ()> {
    let now = tokio::time::Instant::now();
    let (released, outcome, due) = {
        let mut a = shared.assign.lock();
        // What the replica acknowledged may now go to its new owner.
        let released = a.acked(id, renewed.load(Ordering::Acquire), now);
        let outcome = a.tick(now);
        (released, outcome, a.due(id, now))
    };
    publish_assignment(shared, &released);
    publish_assignment(shared, &outcome);
    if let Some(mut m) = due {
        m.echo = renewed.load(Ordering::Acquire);
        tx.send(msg(Kind::Assignment(m.clone())))
            .await
            .map_err(|_| ())?;
        // Recorded once handed over: the fence of a dead stream counts from here.
        shared
            .assign
            .lock()
            .sent(id, &m, tokio::time::Instant::now());
    }
    Ok(())
}

/// When this stream must next look at its assignment: its heartbeat, or a fence lapsing.
fn next_assignment_check(shared: &Shared, id: StreamId) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    let a = shared.assign.lock();
    let due = a.next_due(id, now).unwrap_or(now + a.heartbeat());
    a.next_fence_expiry().map_or(due, |f| f.min(due)).max(now)
}

/// Waits until this process may write under `epoch` (suspended: until it resumes); false once
/// it leads no more under it. Hello, snapshot and the first assignment are writes too (N10).
async fn writable(shared: &Shared, epoch: u64) -> bool {
    let mut resumed = shared.resumed_rx();
    loop {
        if shared.leader_epoch() == Some(epoch) {
            return true;
        }
        if *shared.leader_rx().borrow() != Some(epoch) {
            return false;
        }
        tokio::select! {
            _ = resumed.changed() => {}
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
}

/// Why a stream ended, from its reader (waiting briefly for the actuator's status).
async fn end_of(
    endpoint: &str,
    reader_done: &mut tokio::sync::oneshot::Receiver<Result<(), tonic::Status>>,
) -> StreamError {
    match tokio::time::timeout(Duration::from_secs(1), reader_done).await {
        Ok(Ok(Err(status))) => StreamError::Status {
            endpoint: endpoint.to_owned(),
            status,
        },
        _ => StreamError::Closed {
            endpoint: endpoint.to_owned(),
        },
    }
}

/// One stream, from connect to its end.
async fn connection(
    endpoint: &str,
    epoch: u64,
    cfg: &StreamConfig,
    shared: &Arc<Shared>,
    events: &mpsc::Sender<NodeEvent>,
    backoff: &mut Backoff,
    shutdown: &CancellationToken,
) -> Result<Ended, StreamError> {
    let closed = || StreamError::Closed {
        endpoint: endpoint.to_owned(),
    };
    let notify = shared.notify_for(endpoint);
    let mut client = connect(endpoint, cfg).await?;
    if !writable(shared, epoch).await {
        return Err(closed());
    }
    let (tx, rx) = mpsc::channel::<SignalMessage>(64);
    let hello = Hello {
        cluster_name: cfg.cluster_name.clone(),
        sender_identity: cfg.identity.clone(),
        leader_epoch: epoch,
        incarnation: shared.incarnation(),
    };
    tx.send(msg(Kind::Hello(hello)))
        .await
        .map_err(|_| closed())?;
    let response = client
        .stream_desired_states(ReceiverStream::new(rx))
        .await
        .map_err(|status| StreamError::Status {
            endpoint: endpoint.to_owned(),
            status,
        })?;
    let mut inbound = response.into_inner();
    let (reader_tx, mut reader_done) = tokio::sync::oneshot::channel::<Result<(), tonic::Status>>();
    let (ack_tx, ack_rx) = tokio::sync::oneshot::channel::<Vec<String>>();
    // The replica's managed set when it changes after the HelloAck (the latest one wins).
    let (managed_tx, mut managed_rx) = tokio::sync::watch::channel(Vec::<String>::new());
    // The newest `Renew` the replica sent up, echoed in each assignment.
    let renewed = Arc::new(AtomicU64::new(0));
    let reader: JoinHandle<()> = {
        let renewed = renewed.clone();
        let ack_notify = notify.clone();
        let shared = shared.clone();
        let events = events.clone();
        let endpoint = endpoint.to_owned();
        let reply = tx.downgrade();
        tokio::spawn(async move {
            let mut ack_tx = Some(ack_tx);
            let end = loop {
                match inbound.message().await {
                    Ok(Some(m)) => match m.kind {
                        Some(actuator_message::Kind::Result(r)) => {
                            results::dispatch_result(&shared, &events, &r)
                        }
                        Some(actuator_message::Kind::HoldRequest(req)) => {
                            let leader = shared.clone();
                            crate::writers::hold::serve(
                                shared.holds.clone(),
                                shared.dry_run,
                                move || leader.leader_epoch() == Some(epoch),
                                req,
                                reply.clone(),
                            )
                        }
                        Some(actuator_message::Kind::Managed(m)) => {
                            tracing::info!(%endpoint, load_balancers = ?m.load_balancers, "actuator's managed load balancers changed");
                            managed_tx.send_replace(m.load_balancers);
                        }
                        Some(actuator_message::Kind::Renew(r)) => {
                            renewed.fetch_max(r.seq, Ordering::AcqRel);
                            // The stream task records the acknowledgement (see `Assigner::acked`).
                            ack_notify.notify_one();
                        }
                        Some(actuator_message::Kind::HelloAck(ack)) => {
                            tracing::info!(%endpoint, actuator = %ack.actuator_identity, load_balancers = ?ack.load_balancers, "actuator accepted the stream");
                            if let Some(t) = ack_tx.take() {
                                let _ = t.send(ack.load_balancers);
                            }
                        }
                        None => {}
                    },
                    Ok(None) => break Ok(()),
                    Err(s) => break Err(s),
                }
            };
            let _ = reader_tx.send(end);
        })
    };
    // Abort the reader whatever way this function ends.
    struct AbortOnDrop(JoinHandle<()>);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let _reader = AbortOnDrop(reader);

    if !writable(shared, epoch).await {
        return Err(closed());
    }
    let snapshot = shared.core.lock().dispatch.snapshot(endpoint);
    let count = snapshot.len() as u64;
    let mut sent = Ok(());
    for chunk in snapshot.chunks(SNAPSHOT_CHUNK) {
        sent = tx
            .send(msg(Kind::Snapshot(Snapshot {
                nodes: chunk.to_vec(),
            })))
            .await;
        if sent.is_err() {
            break;
        }
    }
    drop(snapshot);
    if sent.is_ok() {
        sent = tx
            .send(msg(Kind::SnapshotEnd(SnapshotEnd { node_count: count })))
            .await;
    }
    if sent.is_err() {
        // Refused (e.g. a stale epoch): the reader has the actuator's status.
        return Err(end_of(endpoint, &mut reader_done).await);
    }
    let _statuses = AbortOnDrop(crate::stream::fleet::forward(shared, tx.downgrade()));
    let load_balancers = tokio::select! {
        biased;
        end = &mut reader_done => {
            return match end {
                Ok(Err(status)) => Err(StreamError::Status { endpoint: endpoint.to_owned(), status }),
                _ => Err(closed()),
            };
        }
        ack = tokio::time::timeout(ACK_TIMEOUT, ack_rx) => match ack {
            Ok(Ok(lbs)) => lbs,
            Ok(Err(_)) => return Err(end_of(endpoint, &mut reader_done).await),
            Err(_) => return Err(StreamError::NoAck { endpoint: endpoint.to_owned() }),
        },
    };
    // Live: acknowledged and snapshot sent.
    let (id, outcome) =
        shared
            .assign
            .lock()
            .join(endpoint, &load_balancers, tokio::time::Instant::now());
    let _membership = Membership {
        shared: shared.clone(),
        id,
    };
    publish_assignment(shared, &outcome);
    // Suspended meanwhile: the loop sends the first assignment once writes resume.
    if shared.leader_epoch() == Some(epoch) {
        send_assignment(shared, id, &renewed, &tx)
            .await
            .map_err(|_| closed())?;
    }
    shared.set_stream_ready(endpoint, true);
    backoff.reset();
    tracing::info!(%endpoint, epoch, nodes = count, "snapshot sent; stream live");

    let mut managed_open = true;
    let mut resync = tokio::time::interval_at(
        tokio::time::Instant::now() + cfg.resync_interval,
        cfg.resync_interval,
    );
    loop {
        let check = if shared.leader_epoch() == Some(epoch) {
            next_assignment_check(shared, id)
        } else {
            // Suspended: look again shortly (resuming also wakes the stream).
            tokio::time::Instant::now() + Duration::from_millis(100)
        };
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => {
                // Close our side cleanly and give the actuator a moment to finish.
                drop(tx);
                let _ = tokio::time::timeout(Duration::from_secs(2), &mut reader_done).await;
                return Ok(Ended::Shutdown);
            }
            end = &mut reader_done => {
                return match end {
                    Ok(Err(status)) => Err(StreamError::Status { endpoint: endpoint.to_owned(), status }),
                    _ => Err(closed()),
                };
            }
            changed = managed_rx.changed(), if managed_open => {
                if changed.is_err() {
                    // The reader ended: `reader_done` says why.
                    managed_open = false;
                    continue;
                }
                let lbs = managed_rx.borrow_and_update().clone();
                let outcome = shared
                    .assign
                    .lock()
                    .manages(id, &lbs, tokio::time::Instant::now());
                // Wakes every stream: each sends its new assignment, this one included.
                publish_assignment(shared, &outcome);
            }
            _ = resync.tick() => {
                // Every node again, as deltas on this stream: nothing lapses meanwhile.
                shared.core.lock().dispatch.resync(endpoint);
                notify.notify_one();
            }
            _ = tokio::time::sleep_until(check) => {
                if shared.leader_epoch() == Some(epoch) {
                    send_assignment(shared, id, &renewed, &tx).await.map_err(|_| closed())?;
                }
            }
            _ = notify.notified() => {
                // Suspended (lease not renewed in time): write nothing; resuming wakes us.
                if shared.leader_epoch() != Some(epoch) {
                    continue;
                }
                // A new assignment goes before deltas: it decides who writes them.
                send_assignment(shared, id, &renewed, &tx).await.map_err(|_| closed())?;
                loop {
                    let batch = shared.core.lock().dispatch.next_deltas(endpoint, DELTA_BATCH);
                    if batch.is_empty() {
                        break;
                    }
                    for kind in batch {
                        // Blocks while the peer is slow; meanwhile changes coalesce in the
                        // dirty set instead of queueing here.
                        tx.send(msg(kind)).await.map_err(|_| closed())?;
                    }
                }
            }
        }
    }
}

/// The task of one endpoint: stream while leading, reconnect on failure, stop on shutdown.
async fn endpoint_task(
    endpoint: String,
    cfg: StreamConfig,
    shared: Arc<Shared>,
    events: mpsc::Sender<NodeEvent>,
    shutdown: CancellationToken,
) {
    let mut leader = shared.leader_rx();
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
    loop {
        let epoch = loop {
            if shutdown.is_cancelled() {
                return;
            }
            if let Some(e) = *leader.borrow_and_update() {
                break e;
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                r = leader.changed() => if r.is_err() { return },
            }
        };
        // Never stream a partial node list.
        tokio::select! {
            _ = shutdown.cancelled() => return,
            () = shared.nodes_synced() => {}
        }
        let result = {
            let conn = connection(
                &endpoint,
                epoch,
                &cfg,
                &shared,
                &events,
                &mut backoff,
                &shutdown,
            );
            tokio::select! {
                // A lost or changed leadership stops the stream at once (dropping it).
                _ = leadership_changed(&mut leader, epoch), if !shutdown.is_cancelled() => None,
                r = conn => Some(r),
            }
        };
        shared.set_stream_ready(&endpoint, false);
        match result {
            None => tracing::info!(%endpoint, "leadership changed; stream stopped"),
            Some(Ok(Ended::Shutdown)) => return,
            Some(Err(e)) => {
                if let StreamError::Status { status, .. } = &e
                    && let Some(accepted) = accepted_epoch(status)
                {
                    shared.report_accepted_epoch(accepted);
                }
                shared.metrics.stream_reconnects.inc();
                let delay = backoff.next_delay(rand::random::<f64>());
                tracing::warn!(error = %e, retry_in = ?delay, "actuator stream failed");
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(delay) => {}
                }
            }
        }
    }
}

async fn leadership_changed(rx: &mut watch::Receiver<Option<u64>>, epoch: u64) {
    loop {
        if *rx.borrow_and_update() != Some(epoch) {
            return;
        }
        if rx.changed().await.is_err() {
            // Sender gone: the instance is shutting down; let shutdown handling win.
            std::future::pending::<()>().await;
        }
    }
}

/// Follows the endpoint set: starts/stops endpoint tasks (every endpoint gets every node).
pub async fn manager(
    cfg: StreamConfig,
    shared: Arc<Shared>,
    mut endpoints: watch::Receiver<Vec<String>>,
    events: mpsc::Sender<NodeEvent>,
    shutdown: CancellationToken,
) {
    let mut tasks: HashMap<String, (JoinHandle<()>, CancellationToken)> = HashMap::new();
    loop {
        let eps = endpoints.borrow_and_update().clone();
        if shared.dry_run {
            tracing::info!(endpoints = ?eps, "dry-run: not connecting to actuators");
        } else {
            tasks.retain(|ep, (_, stop)| {
                let keep = eps.contains(ep);
                if !keep {
                    // Removed endpoint: stop at once.
                    stop.cancel();
                    shared.set_stream_ready(ep, false);
                }
                keep
            });
            for ep in &eps {
                // Register the wake-up handle before the outbox so no wake-up is lost.
                shared.notify_for(ep);
                if !tasks.contains_key(ep) {
                    let stop = shutdown.child_token();
                    let h = tokio::spawn(endpoint_task(
                        ep.clone(),
                        cfg.clone(),
                        shared.clone(),
                        events.clone(),
                        stop.clone(),
                    ));
                    tasks.insert(ep.clone(), (h, stop));
                }
            }
        }
        let touched = shared.core.lock().dispatch.set_endpoints(eps);
        shared.wake(&touched);
        tokio::select! {
            _ = shutdown.cancelled() => break,
            r = endpoints.changed() => if r.is_err() {
                // Discovery ended (it only does at shutdown).
                shutdown.cancelled().await;
                break;
            },
        }
    }
    for (_, (h, _)) in tasks {
        let _ = h.await;
    }
}

#[cfg(test)]
mod tests {
    use super::writable;
    use crate::core::dispatch::Dispatcher;
    use crate::core::index::NodeIndex;
    use crate::core::taints::TriggerSet;
    use crate::shared::{Core, Shared};
    use std::time::Duration;
    use tokio::sync::mpsc;
    use tokio::time::Instant;

    /// N10: a stream opened while the leader was suspended (past its renew deadline) sent its
    /// Hello, snapshot and first assignment anyway. It now waits for the resume, and gives up
    /// once the term is lost.
    #[tokio::test]
    async fn nothing_opens_a_stream_while_writes_are_paused() {
        let core = Core {
            index: NodeIndex::new(TriggerSet::default()),
            dispatch: Dispatcher::new(),
        };
        let s = std::sync::Arc::new(Shared::new(
            core,
            "me".into(),
            false,
            mpsc::unbounded_channel().0,
        ));
        s.lead_until(4, Some(Instant::now() + Duration::from_secs(30)));
        assert!(writable(&s, 4).await);
        s.suspend();
        let waiting = tokio::spawn({
            let s = s.clone();
            async move { writable(&s, 4).await }
        });
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(!waiting.is_finished(), "opened while suspended");
        s.lead_until(4, Some(Instant::now() + Duration::from_secs(30)));
        assert!(waiting.await.unwrap());
        s.suspend();
        let lost = tokio::spawn({
            let s = s.clone();
            async move { writable(&s, 4).await }
        });
        s.lose_leadership();
        assert!(!lost.await.unwrap(), "a lost term opens nothing");
    }
}
