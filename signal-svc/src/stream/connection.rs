//! One stream, from connect to its end, as named steps: [`Connection::open`] (connect, Hello,
//! reader), [`Connection::send_snapshot`], [`Connection::await_ack`], [`Connection::go_live`]
//! (join the assignment, first assignment, ready) and [`Live::serve`] (deltas, heartbeats,
//! resyncs, managed-set changes until the stream or the process ends).

use super::reader::{self, Reader, ReaderEnd};
use super::{
    ACK_TIMEOUT, AbortOnDrop, DELTA_BATCH, Ended, SNAPSHOT_CHUNK, StreamConfig, StreamError, msg,
};
use crate::core::assign::StreamId;
use crate::shared::Shared;
use crate::writers::events::NodeEvent;
use cutover_proto::v1::actuator_client::ActuatorClient;
use cutover_proto::v1::signal_message::Kind;
use cutover_proto::v1::{Hello, SignalMessage, Snapshot, SnapshotEnd};
use cutover_runtime::backoff::Backoff;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

/// One stream, from connect to its end.
pub(super) async fn run(
    endpoint: &str,
    epoch: u64,
    cfg: &StreamConfig,
    shared: &Arc<Shared>,
    events: &mpsc::Sender<NodeEvent>,
    backoff: &mut Backoff,
    shutdown: &CancellationToken,
) -> Result<Ended, StreamError> {
    let notify = shared.notify_for(endpoint);
    let (mut conn, ack) = Connection::open(endpoint, epoch, cfg, shared, events, &notify).await?;
    let count = conn.send_snapshot().await?;
    let statuses = AbortOnDrop(super::fleet::forward(shared, conn.tx.downgrade()));
    let load_balancers = conn.await_ack(ack).await?;
    let live = conn.go_live(&load_balancers, statuses).await?;
    backoff.reset();
    tracing::info!(%endpoint, epoch, nodes = count, "snapshot sent; stream live");
    live.serve(&notify, cfg.resync_interval, shutdown).await
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
            .tls_config(crate::tls_reload::client_config(&tls.source, name))
            .map_err(terr)?;
    }
    let channel = match &cfg.dialer {
        // The same endpoint (timeouts, keepalives, TLS) over the caller's transport.
        Some(dialer) => ep.connect_with_connector(dialer.clone()).await,
        None => ep.connect().await,
    }
    .map_err(terr)?;
    Ok(ActuatorClient::new(channel))
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

fn closed(endpoint: &str) -> StreamError {
    StreamError::Closed {
        endpoint: endpoint.to_owned(),
    }
}

/// Why a stream ended, from what its reader reported (if it could).
fn ended(endpoint: &str, end: Result<ReaderEnd, oneshot::error::RecvError>) -> StreamError {
    match end {
        Ok(Err(status)) => StreamError::Status {
            endpoint: endpoint.to_owned(),
            status,
        },
        _ => closed(endpoint),
    }
}

/// Why a stream ended, from its reader (waiting briefly for the actuator's status).
async fn end_of(endpoint: &str, reader_done: &mut oneshot::Receiver<ReaderEnd>) -> StreamError {
    match tokio::time::timeout(Duration::from_secs(1), reader_done).await {
        Ok(end) => ended(endpoint, end),
        Err(_) => closed(endpoint),
    }
}

/// Leaves the assignment when a live stream ends, however it ends (error, resync, shutdown,
/// or the future being dropped on a leadership change).
struct Membership {
    shared: Arc<Shared>,
    id: StreamId,
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.shared.leave_assignment(self.id);
    }
}

/// An open stream before it is live: the Hello went out and its reader runs.
///
/// Field order is drop order: the reader is aborted before the sending side closes.
struct Connection<'a> {
    reader: Reader,
    tx: mpsc::Sender<SignalMessage>,
    endpoint: &'a str,
    epoch: u64,
    shared: &'a Arc<Shared>,
}

impl<'a> Connection<'a> {
    /// Connects, waits until writes are allowed, sends the Hello, opens the stream and starts
    /// its reader. Also returns where the `HelloAck` arrives.
    async fn open(
        endpoint: &'a str,
        epoch: u64,
        cfg: &StreamConfig,
        shared: &'a Arc<Shared>,
        events: &mpsc::Sender<NodeEvent>,
        notify: &Arc<Notify>,
    ) -> Result<(Self, oneshot::Receiver<Vec<String>>), StreamError> {
        let mut client = connect(endpoint, cfg).await?;
        if !writable(shared, epoch).await {
            return Err(closed(endpoint));
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
            .map_err(|_| closed(endpoint))?;
        let response = client
            .stream_desired_states(ReceiverStream::new(rx))
            .await
            .map_err(|status| StreamError::Status {
                endpoint: endpoint.to_owned(),
                status,
            })?;
        let (reader, ack) = reader::spawn(
            response.into_inner(),
            reader::Context {
                shared: shared.clone(),
                events: events.clone(),
                endpoint: endpoint.to_owned(),
                epoch,
                reply: tx.downgrade(),
                notify: notify.clone(),
                holds: cfg.holds.clone(),
            },
        );
        let conn = Self {
            reader,
            tx,
            endpoint,
            epoch,
            shared,
        };
        Ok((conn, ack))
    }

    /// Once writes are allowed: the endpoint's full snapshot in chunks, then `SnapshotEnd`.
    /// Returns the node count.
    async fn send_snapshot(&mut self) -> Result<u64, StreamError> {
        if !writable(self.shared, self.epoch).await {
            return Err(closed(self.endpoint));
        }
        let snapshot = self.shared.snapshot(self.endpoint);
        let count = snapshot.len() as u64;
        let mut sent = Ok(());
        for chunk in snapshot.chunks(SNAPSHOT_CHUNK) {
            sent = self
                .tx
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
            sent = self
                .tx
                .send(msg(Kind::SnapshotEnd(SnapshotEnd { node_count: count })))
                .await;
        }
        if sent.is_err() {
            // Refused (e.g. a stale epoch): the reader has the actuator's status.
            return Err(end_of(self.endpoint, &mut self.reader.done).await);
        }
        Ok(count)
    }

    /// The load balancers the actuator reports in its `HelloAck`, within [`ACK_TIMEOUT`].
    async fn await_ack(
        &mut self,
        ack: oneshot::Receiver<Vec<String>>,
    ) -> Result<Vec<String>, StreamError> {
        let endpoint = self.endpoint;
        tokio::select! {
            biased;
            end = &mut self.reader.done => Err(ended(endpoint, end)),
            ack = tokio::time::timeout(ACK_TIMEOUT, ack) => match ack {
                Ok(Ok(lbs)) => Ok(lbs),
                Ok(Err(_)) => Err(end_of(endpoint, &mut self.reader.done).await),
                Err(_) => Err(StreamError::NoAck { endpoint: endpoint.to_owned() }),
            },
        }
    }

    /// Acknowledged and snapshot sent: joins the assignment, sends the first one (unless
    /// suspended meanwhile: the live loop sends it once writes resume), marks the stream
    /// ready.
    async fn go_live(
        self,
        load_balancers: &[String],
        statuses: AbortOnDrop,
    ) -> Result<Live<'a>, StreamError> {
        let shared = self.shared;
        let id = shared.join_assignment(self.endpoint, load_balancers);
        let live = Live {
            _membership: Membership {
                shared: shared.clone(),
                id,
            },
            _statuses: statuses,
            conn: self,
            id,
        };
        if shared.leader_epoch() == Some(live.conn.epoch) {
            live.send_assignment().await?;
        }
        shared.set_stream_ready(live.conn.endpoint, true);
        Ok(live)
    }
}

/// A live stream. Field order is drop order: it leaves the assignment first, then stops
/// forwarding fleet statuses, then the reader, then closes the sending side.
struct Live<'a> {
    _membership: Membership,
    _statuses: AbortOnDrop,
    conn: Connection<'a>,
    id: StreamId,
}

impl Live<'_> {
    /// Until the stream or the process ends: deltas when woken, assignment heartbeats and
    /// fence checks, periodic resyncs, the actuator's managed-set changes.
    async fn serve(
        mut self,
        notify: &Notify,
        resync_interval: Duration,
        shutdown: &CancellationToken,
    ) -> Result<Ended, StreamError> {
        let mut managed_open = true;
        let mut resync = tokio::time::interval_at(
            tokio::time::Instant::now() + resync_interval,
            resync_interval,
        );
        loop {
            let check = self.next_check();
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return Ok(self.close().await),
                end = &mut self.conn.reader.done => return Err(ended(self.conn.endpoint, end)),
                changed = self.conn.reader.managed.changed(), if managed_open => {
                    if changed.is_err() {
                        // The reader ended: `reader.done` says why.
                        managed_open = false;
                        continue;
                    }
                    self.managed_changed();
                }
                _ = resync.tick() => {
                    // Every node again, as deltas on this stream: nothing lapses meanwhile.
                    self.conn.shared.resync(self.conn.endpoint);
                    notify.notify_one();
                }
                _ = tokio::time::sleep_until(check) => {
                    if self.leading() {
                        self.send_assignment().await?;
                    }
                }
                _ = notify.notified() => self.send_pending().await?,
            }
        }
    }

    fn leading(&self) -> bool {
        self.conn.shared.leader_epoch() == Some(self.conn.epoch)
    }

    /// When to look at the assignment next.
    fn next_check(&self) -> tokio::time::Instant {
        if self.leading() {
            self.conn.shared.next_assignment_check(self.id)
        } else {
            // Suspended: look again shortly (resuming also wakes the stream).
            tokio::time::Instant::now() + Duration::from_millis(100)
        }
    }

    /// Shutdown: close our side cleanly and give the actuator a moment to finish.
    async fn close(mut self) -> Ended {
        drop(self.conn.tx);
        let _ = tokio::time::timeout(Duration::from_secs(2), &mut self.conn.reader.done).await;
        Ended::Shutdown
    }

    /// The actuator's managed set changed: every stream sends its new assignment, this one
    /// included.
    fn managed_changed(&mut self) {
        let lbs = self.conn.reader.managed.borrow_and_update().clone();
        self.conn.shared.set_managed(self.id, &lbs);
    }

    /// Sends the stream's assignment if one is due (new plan or heartbeat).
    ///
    /// It echoes the newest `Renew` the actuator sent up: the actuator counts the assignment's
    /// validity from when it sent that, which precedes this send, from which the fence of this
    /// stream counts (see `Assignment` in the proto).
    async fn send_assignment(&self) -> Result<(), StreamError> {
        let c = &self.conn;
        let renewed = &c.reader.renewed;
        let Some(mut m) = c
            .shared
            .assignment_due(self.id, renewed.load(Ordering::Acquire))
        else {
            return Ok(());
        };
        m.echo = renewed.load(Ordering::Acquire);
        c.tx.send(msg(Kind::Assignment(m.clone())))
            .await
            .map_err(|_| closed(c.endpoint))?;
        // Recorded once handed over: the fence of a dead stream counts from here.
        c.shared.assignment_sent(self.id, &m);
        Ok(())
    }

    /// Woken: a new assignment if due, then the endpoint's dirty nodes as deltas.
    async fn send_pending(&self) -> Result<(), StreamError> {
        // Suspended (lease not renewed in time): write nothing; resuming wakes us.
        if !self.leading() {
            return Ok(());
        }
        // A new assignment goes before deltas: it decides who writes them.
        self.send_assignment().await?;
        let c = &self.conn;
        loop {
            let batch = c.shared.next_deltas(c.endpoint, DELTA_BATCH);
            if batch.is_empty() {
                return Ok(());
            }
            for kind in batch {
                // Blocks while the peer is slow; meanwhile changes coalesce in the dirty set
                // instead of queueing here.
                c.tx.send(msg(kind)).await.map_err(|_| closed(c.endpoint))?;
            }
        }
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
