//! The reader of one stream: what the actuator sends up (results, hold requests, its managed
//! set, assignment renewals, the `HelloAck`), handed to whoever acts on each.

use super::AbortOnDrop;
use super::results;
use crate::shared::Shared;
use crate::writers::events::NodeEvent;
use crate::writers::hold::HoldWriter;
use cutover_proto::v1::{ActuatorMessage, SignalMessage, actuator_message::Kind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::{Notify, mpsc, oneshot, watch};

/// How the reader ended: the actuator's status, or a clean end of its stream.
pub(super) type ReaderEnd = Result<(), tonic::Status>;

/// What the stream task keeps of its reader; dropping it aborts the reader.
pub(super) struct Reader {
    _task: AbortOnDrop,
    /// Resolves once the reader ended.
    pub(super) done: oneshot::Receiver<ReaderEnd>,
    /// The replica's managed set when it changes after the `HelloAck` (the latest one wins).
    pub(super) managed: watch::Receiver<Vec<String>>,
    /// The newest `Renew` the replica sent up, echoed in each assignment.
    pub(super) renewed: Arc<AtomicU64>,
}

/// What the reader needs to act on what it reads.
pub(super) struct Context {
    pub(super) shared: Arc<Shared>,
    pub(super) events: mpsc::Sender<NodeEvent>,
    pub(super) endpoint: String,
    pub(super) epoch: u64,
    /// Answers to hold requests go down the stream; weak, so the stream can close.
    pub(super) reply: mpsc::WeakSender<SignalMessage>,
    /// The stream task's wake-up handle (a renewal is recorded there).
    pub(super) notify: Arc<Notify>,
    /// Writes tool holds on Nodes (absent in tests that do not talk to Kubernetes).
    pub(super) holds: Option<HoldWriter>,
}

/// Starts the reader; also returns where the `HelloAck`'s load balancers arrive.
pub(super) fn spawn(
    mut inbound: tonic::Streaming<ActuatorMessage>,
    cx: Context,
) -> (Reader, oneshot::Receiver<Vec<String>>) {
    let (done_tx, done) = oneshot::channel::<ReaderEnd>();
    let (ack_tx, ack_rx) = oneshot::channel::<Vec<String>>();
    let (managed_tx, managed) = watch::channel(Vec::<String>::new());
    let renewed = Arc::new(AtomicU64::new(0));
    let task = {
        let renewed = renewed.clone();
        tokio::spawn(async move {
            let mut ack_tx = Some(ack_tx);
            let end = loop {
                match inbound.message().await {
                    Ok(Some(m)) => cx.on_message(m.kind, &mut ack_tx, &managed_tx, &renewed),
                    Ok(None) => break Ok(()),
                    Err(s) => break Err(s),
                }
            };
            let _ = done_tx.send(end);
        })
    };
    let reader = Reader {
        _task: AbortOnDrop(task),
        done,
        managed,
        renewed,
    };
    (reader, ack_rx)
}

impl Context {
    /// Hands one message to whoever acts on it.
    fn on_message(
        &self,
        kind: Option<Kind>,
        ack_tx: &mut Option<oneshot::Sender<Vec<String>>>,
        managed_tx: &watch::Sender<Vec<String>>,
        renewed: &AtomicU64,
    ) {
        let endpoint = &self.endpoint;
        match kind {
            Some(Kind::Result(r)) => results::dispatch_result(&self.shared, &self.events, &r),
            Some(Kind::HoldRequest(req)) => {
                let (leader, epoch) = (self.shared.clone(), self.epoch);
                crate::writers::hold::serve(
                    self.holds.clone(),
                    self.shared.dry_run(),
                    move || leader.leader_epoch() == Some(epoch),
                    req,
                    self.reply.clone(),
                )
            }
            Some(Kind::Managed(m)) => {
                tracing::info!(%endpoint, load_balancers = ?m.load_balancers, "actuator's managed load balancers changed");
                managed_tx.send_replace(m.load_balancers);
            }
            Some(Kind::Renew(r)) => {
                renewed.fetch_max(r.seq, Ordering::AcqRel);
                // The stream task records the acknowledgement (see `Assigner::acked`).
                self.notify.notify_one();
            }
            Some(Kind::HelloAck(ack)) => {
                tracing::info!(%endpoint, actuator = %ack.actuator_identity, load_balancers = ?ack.load_balancers, "actuator accepted the stream");
                if let Some(t) = ack_tx.take() {
                    let _ = t.send(ack.load_balancers);
                }
            }
            None => {}
        }
    }
}
