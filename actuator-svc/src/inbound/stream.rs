//! One desired-state stream from signal-svc, as named steps: [`open`] (the `Hello`, its
//! cluster and epoch), register the way up for tool holds and acknowledge, forward this
//! stream's results, then [`run`] the session (`session`, the pure protocol) until the client
//! ends it or it must be refused; a refusal is the stream's last message.

use super::Inbound;
use super::session::{self, Refusal, Session, Step};
use super::validate::Desired;
use crate::state::Offer;
use crate::state::Source;
use crate::state::ownership::Renewals;
use cutover_proto::v1::{
    ActuatorMessage, Assignment, Hello, HelloAck, NodeResult, Renew, SignalMessage,
    actuator_message,
};
use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::Arc;
use tokio::sync::{broadcast, mpsc};
use tonic::{Status, Streaming};

/// Where a stream's messages go (results, renewals, hold requests, its final status).
pub type Outbox = mpsc::Sender<Result<ActuatorMessage, Status>>;

/// The UIDs of the nodes this stream asserts: its client gets their results. A node leaves
/// it with its Forget (a long-lived leader stream sees every node the cluster ever had).
#[derive(Debug, Default)]
struct Mine(Mutex<HashSet<String>>);

impl Mine {
    fn assert(&self, uid: &str) {
        let mut set = self.0.lock();
        if !set.contains(uid) {
            set.insert(uid.to_owned());
        }
    }

    fn forget(&self, uid: &str) {
        self.0.lock().remove(uid);
    }

    fn contains(&self, uid: &str) -> bool {
        self.0.lock().contains(uid)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().len()
    }
}

/// Runs one desired-state stream until the client ends it or it must be refused.
pub async fn serve(svc: Inbound, mut inbound: Streaming<SignalMessage>, tx: Outbox) {
    let Some(hello) = open(&svc, &mut inbound, &tx).await else {
        return;
    };
    let epoch = hello.leader_epoch;
    // This leader's predecessors have lost the Lease: their grants end here, not at lapse.
    svc.store.retire_grants_before(epoch);
    tracing::info!(sender = %hello.sender_identity, epoch, "desired-state stream opened");
    let mine: Arc<Mine> = Arc::default();
    // Subscribe before acknowledging, so no result of this stream's nodes is missed.
    let results = svc.store.subscribe();
    let ack = ActuatorMessage {
        kind: Some(actuator_message::Kind::HelloAck(HelloAck {
            actuator_identity: svc.identity.clone(),
            load_balancers: svc.store.lbs(),
        })),
    };
    // Hold requests from tools may go up this stream from now on (registered before the
    // HelloAck, so a client that saw the ack can count on it).
    let (link, first) = svc.store.uplink().register(epoch, tx.clone());
    if first {
        drop_memory_holds(&svc);
    }
    let stream = svc.store.open_stream();
    // Taken before the HelloAck goes out: assignments that echo no renewal count from here.
    let mut renewals = Renewals::new(tokio::time::Instant::now());
    if tx.send(Ok(ack)).await.is_err() {
        svc.store.uplink().unregister(link);
        svc.store.close_stream(stream);
        return;
    }
    let forward = tokio::spawn(forward_results(results, mine.clone(), tx.clone()));
    let outcome = run(
        &svc,
        &mut inbound,
        Session::new(epoch),
        Ids {
            stream,
            mine: &mine,
        },
        &mut renewals,
        &tx,
    )
    .await;
    svc.store.uplink().unregister(link);
    svc.store.close_stream(stream);
    svc.store.stream_ended(epoch);
    if let Err(status) = outcome {
        tracing::warn!(error = %status.message(), "desired-state stream refused");
        let _ = tx.send(Err(status)).await;
    }
    forward.abort();
}

/// The first message: a `Hello` for this cluster under an epoch the store accepts. `None`:
/// the stream ended, or was refused (the refusal already sent).
async fn open(svc: &Inbound, inbound: &mut Streaming<SignalMessage>, tx: &Outbox) -> Option<Hello> {
    let refused = match inbound.message().await {
        Ok(Some(first)) => match session::hello(first, &svc.cluster_name) {
            Ok(hello) => match svc
                .store
                .accept_epoch(hello.leader_epoch, hello.incarnation)
            {
                Ok(()) => return Some(hello),
                Err(newer) => session::epoch_refused(hello.leader_epoch, newer).into(),
            },
            Err(refusal) => refusal.into(),
        },
        Ok(None) => return None,
        Err(e) => e,
    };
    let _ = tx.send(Err(refused)).await;
    None
}

/// The first signal-svc stream of this process: from now on the leader's stream owns every
/// node's desired state.
fn drop_memory_holds(svc: &Inbound) {
    // Memory-only holds were taken because no signal-svc had ever connected; a hold kept only
    // here would make this replica write load balancers another replica owns.
    let dropped = svc.store.drop_all_tool_states();
    if dropped > 0 {
        tracing::warn!(
            dropped,
            "first signal-svc stream: memory-only tool holds dropped (set them again to make them durable)"
        );
    }
}

/// Sends the client the results of the nodes it asserted, until it goes away.
async fn forward_results(
    mut results: broadcast::Receiver<NodeResult>,
    mine: Arc<Mine>,
    tx: Outbox,
) {
    loop {
        match results.recv().await {
            Ok(r) => {
                let ours = r.node.as_ref().is_some_and(|n| mine.contains(&n.uid));
                if ours
                    && tx
                        .send(Ok(ActuatorMessage {
                            kind: Some(actuator_message::Kind::Result(r)),
                        }))
                        .await
                        .is_err()
                {
                    return;
                }
            }
            // A slow client skips results; later ones (and the next snapshot) carry the state.
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!(skipped = n, "stream client lags; results skipped")
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// Who a stream is to the store (its id) and the nodes it asserts.
struct Ids<'a> {
    stream: u64,
    mine: &'a Mine,
}

/// The session after the `Hello`: each message checked against a newer epoch, stepped through
/// the protocol, and its step applied. `Err`: the status that ends the stream.
async fn run(
    svc: &Inbound,
    inbound: &mut Streaming<SignalMessage>,
    mut session: Session,
    ids: Ids<'_>,
    renewals: &mut Renewals,
    tx: &Outbox,
) -> Result<(), Status> {
    let Ids { stream, mine } = ids;
    let mut shutdown = svc.shutdown.clone();
    loop {
        let msg = tokio::select! {
            m = inbound.message() => match m? {
                Some(m) => m,
                None => break,
            },
            _ = shutdown.wait_for(|s| *s) => return Err(Refusal::Draining.into()),
        };
        session.check_epoch(svc.store.max_epoch())?;
        match session.on(msg.kind)? {
            Step::Apply(batch) => {
                for d in batch {
                    apply(svc, mine, d);
                }
            }
            Step::SnapshotEnd => {
                let dropped = svc.store.retain_stream(session.mentioned(), stream);
                tracing::info!(nodes = session.received(), dropped, "snapshot applied");
            }
            Step::Assign(a) => {
                if !assign(svc, &session, &a, renewals, tx).await? {
                    break;
                }
            }
            Step::HoldAck(a) => svc.store.uplink().ack(a),
            Step::Fleet {
                node,
                version,
                phase,
            } => {
                svc.store.note_fleet(&node, version, phase);
            }
            Step::Forget { key, uid, version } => {
                if svc.store.forget(&key, &uid, version, stream) == Offer::Applied {
                    mine.forget(&uid);
                }
            }
            Step::Nothing => {}
        }
    }
    Ok(())
}

/// Offers one validated desired state to the store, as this stream's.
fn apply(svc: &Inbound, mine: &Mine, d: Desired) {
    mine.assert(&d.node.uid);
    if svc.store.offer(
        d.key,
        d.node,
        d.spec,
        d.desired,
        d.version,
        Source::Stream,
        d.reasons,
        d.hold,
    ) == Offer::Stale
    {
        tracing::debug!("stale desired state dropped");
    }
}

/// Takes an assignment and answers with the `Renew` the next one echoes (its validity counts
/// from here). `Ok(false)`: the client is gone.
async fn assign(
    svc: &Inbound,
    session: &Session,
    a: &Assignment,
    renewals: &mut Renewals,
    tx: &Outbox,
) -> Result<bool, Status> {
    let grant = session.grant(a, &svc.store.lbs())?;
    if let Err(e) = svc.store.assign(grant, renewals.anchor(a.echo)) {
        return Err(Refusal::Precondition(format!("assignment: {e}")).into());
    }
    let seq = renewals.renew(tokio::time::Instant::now());
    let renew = ActuatorMessage {
        kind: Some(actuator_message::Kind::Renew(Renew { seq })),
    };
    Ok(tx.send(Ok(renew)).await.is_ok())
}

#[cfg(test)]
mod tests {
    use super::Mine;

    /// N11: a stream's set of asserted nodes follows the cluster: 10,000 nodes created and
    /// deleted leave it at its floor (the nodes still there).
    #[test]
    fn mine_returns_to_its_floor_under_node_churn() {
        let mine = Mine::default();
        mine.assert("stays");
        for i in 0..10_000 {
            let uid = format!("u{i}");
            mine.assert(&uid);
            mine.assert(&uid);
            assert!(mine.contains(&uid));
            mine.forget(&uid);
        }
        assert_eq!(mine.len(), 1);
        assert!(mine.contains("stays"));
    }
}
