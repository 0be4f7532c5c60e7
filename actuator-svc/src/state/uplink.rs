//! The way up to signal-svc for tool holds: the open desired-state streams of this replica,
//! the newest leader's taking each `HoldRequest`, and the `HoldAck` that answers it (see
//! `holds` for why holds go up at all). While a leader change leaves no stream, a request
//! waits for the next one within the caller's patience.

use cutover_proto::v1::{ActuatorMessage, HoldAck, HoldRequest, NodeRef, actuator_message};
use parking_lot::Mutex;
use std::collections::HashMap;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tonic::Status;

type Outbound = mpsc::Sender<Result<ActuatorMessage, Status>>;

struct Link {
    id: u64,
    epoch: u64,
    tx: Outbound,
}

#[derive(Default)]
struct Inner {
    links: Vec<Link>,
    /// Whether any stream was ever open: then this replica is not used alone, and a hold
    /// while the stream is away (a leader change) must be retried, not kept in memory.
    ever_linked: bool,
    /// Configured for use without signal-svc (`--standalone`): with no stream ever, a hold is
    /// kept in memory. Otherwise (a fleet) it waits for a stream or is retried, never kept in
    /// memory only (N5: a grace counted from start let a replica whose signal-svc was late
    /// keep holds only it saw, dropped without a word when the stream came).
    standalone: bool,
    next_link: u64,
    next_request: u64,
    /// Open requests: the link they went up, and who waits for the ack.
    pending: HashMap<String, (u64, oneshot::Sender<HoldAck>)>,
}

/// The open desired-state streams this replica can send hold requests up.
#[derive(Default)]
pub struct Uplink {
    inner: Mutex<Inner>,
    /// Woken when a stream registers: a Set waiting out a leader change goes up it at once.
    linked: tokio::sync::Notify,
}

impl std::fmt::Debug for Uplink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Uplink")
            .field("links", &self.inner.lock().links.len())
            .finish()
    }
}

/// Where a tool's hold goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Up a signal-svc stream, to the Node.
    Durable,
    /// A stream existed but is away (a signal-svc leader change): ask the tool to retry
    /// rather than keep a hold no other replica would see.
    Retry,
    /// This replica never had a stream (the actuator used alone): memory only.
    MemoryOnly,
}

/// Why a request could not be relayed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UplinkError {
    #[error("no signal-svc stream is connected")]
    NoStream,
    #[error("the signal-svc stream ended before it acknowledged the hold")]
    StreamLost,
    #[error("signal-svc did not acknowledge the hold in time")]
    Timeout,
}

impl Uplink {
    /// Whether this replica is used without signal-svc (see [`Inner::standalone`]).
    pub fn set_standalone(&self, standalone: bool) {
        self.inner.lock().standalone = standalone;
    }

    /// A stream of leader `epoch` opened; returns its handle for [`Uplink::unregister`], and
    /// whether it is the first stream this process ever had (memory-only holds end then).
    pub fn register(&self, epoch: u64, tx: Outbound) -> (u64, bool) {
        let mut inner = self.inner.lock();
        inner.next_link += 1;
        let id = inner.next_link;
        inner.links.push(Link { id, epoch, tx });
        let first = !std::mem::replace(&mut inner.ever_linked, true);
        drop(inner);
        self.linked.notify_waiters();
        (id, first)
    }

    /// The stream ended: requests that went up it fail at once.
    pub fn unregister(&self, id: u64) {
        let mut inner = self.inner.lock();
        inner.links.retain(|l| l.id != id);
        inner.pending.retain(|_, (link, _)| *link != id);
    }

    /// Where a tool's hold goes now.
    pub fn route(&self) -> Route {
        self.route_now()
    }

    /// Where a hold goes now.
    fn route_now(&self) -> Route {
        let inner = self.inner.lock();
        match (inner.links.is_empty(), inner.ever_linked, inner.standalone) {
            (false, _, _) => Route::Durable,
            (true, false, true) => Route::MemoryOnly,
            (true, _, _) => Route::Retry,
        }
    }

    /// Like [`Uplink::route`], but while the answer is `Retry` (a stream was lost: a leader
    /// change, a reconnect after this replica was frozen; or the first stream is still
    /// expected), waits up to `patience` for a stream to come, so a tool's Set is relayed
    /// instead of refused in the usual few seconds.
    pub async fn route_within(&self, patience: std::time::Duration) -> Route {
        let deadline = Instant::now() + patience;
        loop {
            let notified = self.linked.notified();
            tokio::pin!(notified);
            // Registered before the check, so a stream that registers in between wakes us.
            notified.as_mut().enable();
            let route = self.route_now();
            if route != Route::Retry {
                return route;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.route();
            }
        }
    }

    /// An ack arrived on some stream.
    pub fn ack(&self, ack: HoldAck) {
        if let Some((_, waiter)) = self.inner.lock().pending.remove(&ack.request_id) {
            let _ = waiter.send(ack);
        }
    }

    /// Sends a request up the newest leader's stream and waits for its ack until `deadline`.
    pub async fn request(
        &self,
        node: NodeRef,
        hold: bool,
        reason: String,
        requester: String,
        deadline: Instant,
    ) -> Result<HoldAck, UplinkError> {
        let (tx, request_id, rx) = {
            let mut inner = self.inner.lock();
            // The newest leader epoch; among its streams the latest (a resync overlaps two).
            let link = inner
                .links
                .iter()
                .max_by_key(|l| (l.epoch, l.id))
                .ok_or(UplinkError::NoStream)?;
            let (link_id, tx) = (link.id, link.tx.clone());
            inner.next_request += 1;
            let request_id = format!("h{}", inner.next_request);
            let (ack_tx, ack_rx) = oneshot::channel();
            inner.pending.insert(request_id.clone(), (link_id, ack_tx));
            (tx, request_id, ack_rx)
        };
        let msg = ActuatorMessage {
            kind: Some(actuator_message::Kind::HoldRequest(HoldRequest {
                request_id: request_id.clone(),
                node: Some(NodeRef {
                    name: node.name,
                    uid: node.uid,
                    ..NodeRef::default()
                }),
                hold,
                reason,
                requester,
            })),
        };
        let outcome = async {
            tx.send(Ok(msg))
                .await
                .map_err(|_| UplinkError::StreamLost)?;
            rx.await.map_err(|_| UplinkError::StreamLost)
        };
        let result = match tokio::time::timeout_at(deadline, outcome).await {
            Ok(r) => r,
            Err(_) => Err(UplinkError::Timeout),
        };
        self.inner.lock().pending.remove(&request_id);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn node() -> NodeRef {
        NodeRef {
            name: "n1".into(),
            ..NodeRef::default()
        }
    }

    #[tokio::test]
    async fn a_set_during_a_leader_change_waits_for_the_stream_to_come_back() {
        let up = std::sync::Arc::new(Uplink::default());
        let (tx, _rx) = mpsc::channel(8);
        let (first, was_first) = up.register(1, tx);
        assert!(was_first);
        up.unregister(first);
        // No stream comes back: refused after the patience, not kept in memory.
        assert_eq!(
            up.route_within(Duration::from_millis(50)).await,
            Route::Retry
        );
        // A stream comes back while the Set waits: it goes up that stream.
        let later = tokio::spawn({
            let up = up.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let (tx, rx) = mpsc::channel(8);
                assert!(!up.register(2, tx).1);
                rx
            }
        });
        let started = Instant::now();
        assert_eq!(
            up.route_within(Duration::from_secs(5)).await,
            Route::Durable
        );
        assert!(started.elapsed() < Duration::from_secs(1));
        drop(later.await);
    }

    /// N5: in a fleet, a replica whose signal-svc stream is late (signal-svc restarting, a
    /// slow API server) never keeps a hold in memory only, however long it waits; only a
    /// replica configured to run without signal-svc does.
    #[tokio::test]
    async fn only_a_standalone_replica_keeps_holds_in_memory() {
        let up = std::sync::Arc::new(Uplink::default());
        assert_eq!(up.route(), Route::Retry);
        assert_eq!(
            up.route_within(Duration::from_millis(300)).await,
            Route::Retry,
            "a fleet replica waits and retries"
        );
        // A stream that comes while the hold waits takes it.
        let later = tokio::spawn({
            let up = up.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let (tx, rx) = mpsc::channel(8);
                assert!(up.register(1, tx).1);
                rx
            }
        });
        assert_eq!(
            up.route_within(Duration::from_secs(5)).await,
            Route::Durable
        );
        drop(later.await);
        let alone = Uplink::default();
        alone.set_standalone(true);
        assert_eq!(alone.route(), Route::MemoryOnly);
    }

    #[tokio::test]
    async fn requests_go_up_the_newest_leader_stream_and_end_with_it() {
        let up = std::sync::Arc::new(Uplink::default());
        let deadline = Instant::now() + Duration::from_secs(5);
        assert_eq!(
            up.request(node(), true, "r".into(), "me".into(), deadline)
                .await,
            Err(UplinkError::NoStream)
        );
        assert_eq!(up.route(), Route::Retry);
        let (old_tx, mut old_rx) = mpsc::channel(8);
        let (new_tx, mut new_rx) = mpsc::channel(8);
        up.register(3, old_tx);
        let (newest, _) = up.register(4, new_tx);
        let waiting = tokio::spawn({
            let up = up.clone();
            async move {
                up.request(node(), true, "r".into(), "me".into(), deadline)
                    .await
            }
        });
        let Some(Ok(ActuatorMessage {
            kind: Some(actuator_message::Kind::HoldRequest(req)),
        })) = new_rx.recv().await
        else {
            panic!("no request on the epoch-4 stream");
        };
        assert!(old_rx.try_recv().is_err(), "nothing up the deposed stream");
        assert!(req.hold && req.requester == "me" && req.reason == "r");
        up.ack(HoldAck {
            request_id: req.request_id.clone(),
            ok: true,
            node_uid: "u1".into(),
            ..HoldAck::default()
        });
        assert_eq!(waiting.await.unwrap().unwrap().node_uid, "u1");

        // A stream that ends fails its open request at once.
        let waiting = tokio::spawn({
            let up = up.clone();
            async move {
                up.request(node(), false, String::new(), "me".into(), deadline)
                    .await
            }
        });
        new_rx.recv().await.unwrap().unwrap();
        up.unregister(newest);
        assert_eq!(waiting.await.unwrap(), Err(UplinkError::StreamLost));
        assert_eq!(
            up.route(),
            Route::Durable,
            "the epoch-3 stream is still open"
        );
        up.unregister(1);
        assert_eq!(
            up.route(),
            Route::Retry,
            "streams came and went: not used alone"
        );
    }
}
