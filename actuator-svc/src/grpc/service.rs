//! The `cutover.v1.Actuator` service. Every handler checks the caller's allow-list first, then
//! validates the whole request (INVALID_ARGUMENT naming the field) before touching any state.

use super::auth::{AllowLists, Role};
use crate::arm::ArmClient;
use crate::arm::budget::{ToolShare, Verdict};
use crate::inbound::holds;
use crate::inbound::tools::{Lookup, ToolLimiter, UnknownNodes, caller_identity};
use crate::inbound::validate::{self, Desired};
use crate::lb::index::{Admin, NodeSpec};
use crate::lb::index::{LbIndex, PoolIndex};
use crate::metrics::Metrics;
use crate::plan::cache::SharedCache;
use crate::plan::guard::Guard;
use crate::state::ownership::{Grant, Renewals};
use crate::state::{Offer, Source, Store, admin_to_proto, entry_ref};
use cutover_proto::v1::actuator_server::Actuator;
use cutover_proto::v1::{
    ActuatorMessage, AdminState, GetNodeAdminStateRequest, GetNodeAdminStateResponse, HeldNode,
    HelloAck, Hold, ListHeldEntriesRequest, ListHeldEntriesResponse, NodeRef, NodeResult, Renew,
    ResultPhase, SetNodeAdminStateRequest, SetNodeAdminStateResponse, SignalMessage, WaitFor,
    WatchResultsRequest, actuator_message, signal_message,
};
use parking_lot::Mutex;
use std::collections::HashSet;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

/// The service state.
#[derive(Clone)]
pub struct ActuatorService {
    pub store: Arc<Store>,
    pub cache: Arc<SharedCache>,
    pub arm: ArmClient,
    pub lists: AllowLists,
    pub identity: String,
    pub cluster_name: String,
    /// Turns true on drain: open streams end so the server can stop.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    /// The blast-radius guard (what it refuses shows in `GetNodeAdminState` notes).
    pub guard: Guard,
    /// Tool traffic protection (`tools`).
    pub limiter: Arc<ToolLimiter>,
    pub unknown: Arc<UnknownNodes>,
    pub tool_reads: Arc<Mutex<ToolShare>>,
    pub metrics: Arc<Metrics>,
}

type ResultStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

fn invalid(msg: String) -> Status {
    Status::invalid_argument(msg)
}

/// Runs one desired-state stream until the client ends it or it must be refused.
async fn serve_stream(
    svc: ActuatorService,
    mut inbound: Streaming<SignalMessage>,
    tx: mpsc::Sender<Result<ActuatorMessage, Status>>,
) {
    let refuse = |status: Status| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(Err(status)).await;
        }
    };
    let hello = match inbound.message().await {
        Ok(Some(SignalMessage {
            kind: Some(signal_message::Kind::Hello(h)),
        })) => h,
        Ok(Some(_)) => {
            return refuse(invalid("hello: the first message must be hello".into())).await;
        }
        Ok(None) => return,
        Err(e) => return refuse(e).await,
    };
    if let Err(e) = validate::hello(&hello) {
        return refuse(e.into()).await;
    }
    if hello.cluster_name != svc.cluster_name {
        return refuse(Status::failed_precondition(format!(
            "hello.cluster_name: this actuator manages cluster {:?}, not {:?}",
            svc.cluster_name, hello.cluster_name
        )))
        .await;
    }
    let epoch = hello.leader_epoch;
    if let Err(newer) = svc.store.accept_epoch(epoch, hello.incarnation) {
        let why = if newer == epoch {
            "is the accepted leader epoch of another signal-svc process; raise it above the accepted leader epoch"
        } else {
            "is older than the accepted leader epoch"
        };
        return refuse(stale_epoch(
            format!("hello.leader_epoch: {epoch} {why} {newer}"),
            newer,
        ))
        .await;
    }
    // This leader's predecessors have lost the Lease: their grants end here, not at lapse.
    svc.store.retire_grants_before(epoch);
    tracing::info!(sender = %hello.sender_identity, epoch, "desired-state stream opened");
    let mine: Arc<Mutex<HashSet<String>>> = Arc::default();
    // Subscribe before acknowledging, so no result of this stream's nodes is missed.
    let mut results = svc.store.subscribe();
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
        // Memory-only holds were taken because no signal-svc had ever connected; from now on
        // the leader's stream owns every node's desired state, and a hold kept only here
        // would make this replica write load balancers another replica owns.
        let dropped = svc.store.drop_all_tool_states();
        if dropped > 0 {
            tracing::warn!(
                dropped,
                "first signal-svc stream: memory-only tool holds dropped (set them again to make them durable)"
            );
        }
    }
    // Taken before the HelloAck goes out: assignments that echo no renewal count from here.
    let mut renewals = Renewals::new(tokio::time::Instant::now());
    if tx.send(Ok(ack)).await.is_err() {
        svc.store.uplink().unregister(link);
        return;
    }
    let forward = {
        let tx = tx.clone();
        let mine = mine.clone();
        tokio::spawn(async move {
            loop {
                match results.recv().await {
                    Ok(r) => {
                        let ours = r
                            .node
                            .as_ref()
                            .is_some_and(|n| mine.lock().contains(&n.uid));
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
        })
    };
    let outcome = stream_loop(&svc, &mut inbound, epoch, &mine, &mut renewals, &tx).await;
    svc.store.uplink().unregister(link);
    svc.store.stream_ended(epoch);
    if let Err(status) = outcome {
        tracing::warn!(error = %status.message(), "desired-state stream refused");
        let _ = tx.send(Err(status)).await;
    }
    forward.abort();
}

/// FAILED_PRECONDITION for a stale leader epoch, naming the accepted one in the trailing
/// metadata `cutover-accepted-epoch`: a leader whose Lease was recreated below it raises its
/// epoch above this (see `Hello.leader_epoch`).
fn stale_epoch(message: String, accepted: u64) -> Status {
    let mut status = Status::failed_precondition(message);
    if let Ok(v) = accepted.to_string().parse() {
        status.metadata_mut().insert("cutover-accepted-epoch", v);
    }
    status
}

async fn stream_loop(
    svc: &ActuatorService,
    inbound: &mut Streaming<SignalMessage>,
    epoch: u64,
    mine: &Mutex<HashSet<String>>,
    renewals: &mut Renewals,
    tx: &mpsc::Sender<Result<ActuatorMessage, Status>>,
) -> Result<(), Status> {
    let mut in_snapshot = true;
    let mut mentioned: HashSet<String> = HashSet::new();
    let mut received: u64 = 0;
    let apply = |d: Desired| {
        mine.lock().insert(d.node.uid.clone());
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
    };
    let mut shutdown = svc.shutdown.clone();
    loop {
        let msg = tokio::select! {
            m = inbound.message() => match m? {
                Some(m) => m,
                None => break,
            },
            _ = shutdown.wait_for(|s| *s) => {
                return Err(Status::unavailable("actuator is draining; reconnect to another replica"));
            }
        };
        let newest = svc.store.max_epoch();
        if newest > epoch {
            return Err(stale_epoch(
                format!("leader epoch {epoch} was superseded by {newest}"),
                newest,
            ));
        }
        match msg.kind {
            None => return Err(invalid("kind: required".into())),
            Some(signal_message::Kind::Hello(_)) => {
                return Err(invalid("hello: sent twice".into()));
            }
            Some(signal_message::Kind::Snapshot(s)) => {
                if !in_snapshot {
                    return Err(invalid(
                        "snapshot: after snapshot_end; reconnect to send a new snapshot".into(),
                    ));
                }
                // Validate the whole batch before applying any of it.
                let batch = s
                    .nodes
                    .iter()
                    .enumerate()
                    .map(|(i, d)| validate::desired(d, &format!("snapshot.nodes[{i}]")))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(invalid)?;
                received += batch.len() as u64;
                for d in batch {
                    mentioned.insert(d.key.clone());
                    apply(d);
                }
            }
            Some(signal_message::Kind::SnapshotEnd(end)) => {
                if !in_snapshot {
                    return Err(invalid("snapshot_end: sent twice".into()));
                }
                if end.node_count != received {
                    return Err(invalid(format!(
                        "snapshot_end.node_count: {} announced, {received} received",
                        end.node_count
                    )));
                }
                in_snapshot = false;
                let dropped = svc.store.retain_stream(&mentioned);
                tracing::info!(nodes = received, dropped, "snapshot applied");
            }
            Some(signal_message::Kind::Delta(d)) => {
                if in_snapshot {
                    return Err(invalid("delta: before snapshot_end".into()));
                }
                apply(validate::desired(&d, "delta").map_err(invalid)?);
            }
            Some(signal_message::Kind::Assignment(a)) => {
                if in_snapshot {
                    return Err(invalid("assignment: before snapshot_end".into()));
                }
                let grant = Grant::from_proto(&a, &svc.store.lbs()).map_err(invalid)?;
                if grant.epoch != epoch {
                    return Err(Status::failed_precondition(format!(
                        "assignment.leader_epoch: {} is not this stream's epoch {epoch}",
                        grant.epoch
                    )));
                }
                if let Err(e) = svc.store.assign(grant, renewals.anchor(a.echo)) {
                    return Err(Status::failed_precondition(format!("assignment: {e}")));
                }
                // The next assignment echoes this: its validity counts from here.
                let seq = renewals.renew(tokio::time::Instant::now());
                let renew = ActuatorMessage {
                    kind: Some(actuator_message::Kind::Renew(Renew { seq })),
                };
                if tx.send(Ok(renew)).await.is_err() {
                    break;
                }
            }
            // Answers to this replica's hold requests, and fleet-wide phases: at any time.
            Some(signal_message::Kind::HoldAck(a)) => svc.store.uplink().ack(a),
            Some(signal_message::Kind::NodeStatus(s)) => {
                let m = SignalMessage {
                    kind: Some(signal_message::Kind::NodeStatus(s)),
                };
                validate::signal_message(&m)?;
                if let Some(signal_message::Kind::NodeStatus(s)) = m.kind
                    && let (Some(node), Some(version)) = (s.node, s.version)
                {
                    let phase = ResultPhase::try_from(s.phase).unwrap_or(ResultPhase::Unspecified);
                    svc.store.note_fleet(&node, version, phase);
                }
            }
            Some(signal_message::Kind::Forget(f)) => {
                if in_snapshot {
                    return Err(invalid("forget: before snapshot_end".into()));
                }
                let (node, version) = validate::forget(&f)?;
                let key = validate::key_of(&node.uid, &node.name);
                svc.store.forget(&key, &node.uid, version);
            }
        }
    }
    Ok(())
}

/// The `GetNodeAdminState` note for a tool hold: who, since when, why, and how durable.
fn hold_note(h: &crate::state::Held) -> Option<String> {
    let x = h.hold.as_ref()?;
    let since = x.since.map(|t| t.to_string()).unwrap_or_else(|| "?".into());
    let how = match h.source {
        Source::Stream => "durable: stored on the Node, the same on every replica",
        Source::Tool => holds::MEMORY_ONLY,
    };
    Some(format!(
        "held down by {} since {since}: {:?} ({how})",
        x.requester, x.reason
    ))
}

fn reached(r: &NodeResult, wait: WaitFor) -> bool {
    let phase = ResultPhase::try_from(r.phase).unwrap_or(ResultPhase::Unspecified);
    match phase {
        ResultPhase::Superseded => true,
        ResultPhase::Failed => !r.will_retry,
        ResultPhase::Effective => true,
        ResultPhase::Accepted => wait == WaitFor::Accepted,
        ResultPhase::Unspecified => false,
    }
}

impl ActuatorService {
    /// A tool hold while a signal-svc stream is connected: relayed to the leader, stored on
    /// the Node, then waited for as every replica sees it (see `inbound::holds`).
    async fn set_durable(
        &self,
        mut w: holds::HoldWait,
    ) -> Result<Response<SetNodeAdminStateResponse>, Status> {
        let ack = self
            .store
            .uplink()
            .request(
                w.node.clone(),
                w.hold,
                w.reason.clone(),
                w.requester.clone(),
                w.deadline,
            )
            .await
            .map_err(|e| match e {
                holds::UplinkError::Timeout => Status::deadline_exceeded(format!("{e}; retry")),
                _ => Status::unavailable(format!("{e}; retry")),
            })?;
        if !ack.ok {
            return Err(holds::refused(&ack));
        }
        if w.node.uid.is_empty() {
            w.node.uid = ack.node_uid.clone();
        }
        // A hold kept in memory before the stream came is superseded by the durable one.
        let dropped = self.store.drop_tool_states(&w.node.name);
        tracing::info!(node = %w.node.name, hold = w.hold, requester = %w.requester, dropped_memory_holds = dropped, "durable tool hold acknowledged by signal-svc");
        if w.wait == WaitFor::Unspecified {
            let desired = if w.hold {
                AdminState::Down
            } else {
                AdminState::None
            };
            return Ok(Response::new(SetNodeAdminStateResponse {
                result: Some(NodeResult {
                    node: Some(w.node),
                    desired: desired as i32,
                    reason: "durable hold: stored on the Node".into(),
                    ..NodeResult::default()
                }),
                timed_out: false,
            }));
        }
        let mut shutdown = self.shutdown.clone();
        let (mut result, timed_out) = tokio::select! {
            r = holds::wait_for(&self.store, &w) => r,
            _ = shutdown.wait_for(|s| *s) => {
                return Err(Status::unavailable("actuator is draining; ask another replica"));
            }
        };
        // The node's entries as this replica's pool cache resolves them (from the stream's
        // node reference, which signal-svc fills in). Another replica may have written them:
        // once the fleet says EFFECTIVE, every one reads the desired state.
        let spec = self
            .store
            .find_stream(&w.node.uid, &w.node.name)
            .map_or_else(|| Arc::new(w.spec.clone()), |h| h.spec);
        let (index, _) = self.cache.index(None);
        let effective = result.phase == ResultPhase::Effective as i32;
        result.entries = index
            .resolve(&spec, None)
            .entries
            .iter()
            .map(|e| {
                let mut r = entry_ref(e);
                if effective {
                    r.admin_state = result.desired;
                }
                r
            })
            .collect();
        Ok(Response::new(SetNodeAdminStateResponse {
            result: Some(result),
            timed_out,
        }))
    }

    /// Reads every managed LB from ARM now (one GET each, in parallel), each read within the
    /// tool share of the read budget.
    async fn fresh_index(&self) -> Result<PoolIndex, Status> {
        let lbs = self.store.lbs();
        for _ in &lbs {
            self.tool_read_permit().await?;
        }
        let reads = lbs.into_iter().map(|lb| {
            let arm = self.arm.clone();
            async move { (lb.clone(), arm.get_lb(&lb).await) }
        });
        let mut lbs = Vec::new();
        for (lb, r) in futures::future::join_all(reads).await {
            match r {
                Ok(Some(body)) => {
                    let index = LbIndex::read(&lb, &self.arm.lb_id(&lb), &body).map_err(|e| {
                        Status::unavailable(format!("reading load balancer {lb}: {e}"))
                    })?;
                    lbs.push(Arc::new(index));
                }
                Ok(None) => {}
                Err(e) => {
                    return Err(Status::unavailable(format!(
                        "reading load balancer {lb}: {e}"
                    )));
                }
            }
        }
        let (cached, _) = self.cache.index(None);
        Ok(cached.with_lbs(lbs))
    }

    /// Waits for a tool read within `ToolShare` (the stream keeps priority); refuses when the
    /// wait would be long.
    async fn tool_read_permit(&self) -> Result<(), Status> {
        const MAX_WAIT: Duration = Duration::from_secs(5);
        let deadline = tokio::time::Instant::now() + MAX_WAIT;
        loop {
            let (fill, rate) = self.arm.read_headroom();
            let now = tokio::time::Instant::now();
            let verdict = self.tool_reads.lock().acquire(fill, rate, now);
            match verdict {
                Verdict::Go => return Ok(()),
                Verdict::Wait(d) if now + d <= deadline => {
                    tokio::time::sleep(d.max(Duration::from_millis(10))).await
                }
                Verdict::Wait(d) => {
                    return Err(Status::resource_exhausted(format!(
                        "the ARM read budget is kept for the cutover stream now; retry in {} ms or ask without fresh",
                        d.as_millis().max(1)
                    )));
                }
            }
        }
    }

    /// The per-identity tool rate limit.
    fn limit<T>(&self, request: &Request<T>, rpc: &str) -> Result<(), Status> {
        self.limiter
            .check(&caller_identity(request), rpc)
            .inspect_err(|_| self.metrics.tool_limited(rpc))
    }

    /// For a node without any backend entry in the cached pools and not held: the answer of
    /// the negative cache (`Some`, no ARM call between refreshes), or `None` when the node
    /// has entries after all (then `fresh` is the index that has them).
    async fn unknown_node(&self, node: &NodeRef, spec: &NodeSpec) -> Result<Unknown, Status> {
        if !self.cache.built(&self.store.lbs()) || self.store.find(&node.uid, &node.name).is_some()
        {
            return Ok(Unknown::No);
        }
        let (cached, _) = self.cache.index(None);
        if !cached.resolve(spec, None).entries.is_empty() {
            return Ok(Unknown::No);
        }
        let lookup = self
            .unknown
            .recheck(spec, || async {
                // Standalone NICs (VMSS Flex, availability sets) are in the NIC list, which its
                // refresher re-reads early at most every few seconds.
                self.cache.request_nic_refresh();
                self.fresh_index().await
            })
            .await?;
        Ok(match lookup {
            Lookup::Found(index) => {
                self.metrics.unknown_answer("found_on_refresh");
                Unknown::FoundIn(index)
            }
            Lookup::Unknown { age, refreshed } => {
                self.metrics.unknown_answer(if refreshed {
                    "refreshed"
                } else {
                    "negative_cache"
                });
                Unknown::Yes(format!(
                    "node has no backend entries (pools re-read {:.1} s ago; nodes without entries are answered from that read, which is repeated at most every {} s)",
                    age.as_secs_f64(),
                    self.unknown.interval().as_secs_f64()
                ))
            }
        })
    }
}

/// What the negative cache says about a tool request's node.
enum Unknown {
    /// Resolvable from the cached pools (or already held): the usual path.
    No,
    /// Found only in a fresh re-read.
    FoundIn(PoolIndex),
    /// No entries anywhere: the note to answer with.
    Yes(String),
}

#[tonic::async_trait]
impl Actuator for ActuatorService {
    type StreamDesiredStatesStream = ResultStream<ActuatorMessage>;
    type WatchResultsStream = ResultStream<NodeResult>;

    async fn stream_desired_states(
        &self,
        request: Request<Streaming<SignalMessage>>,
    ) -> Result<Response<Self::StreamDesiredStatesStream>, Status> {
        self.lists.check(&request, Role::Signal)?;
        let (tx, rx) = mpsc::channel(1024);
        tokio::spawn(serve_stream(self.clone(), request.into_inner(), tx));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn set_node_admin_state(
        &self,
        request: Request<SetNodeAdminStateRequest>,
    ) -> Result<Response<SetNodeAdminStateResponse>, Status> {
        self.lists.check(&request, Role::Tool)?;
        self.limit(&request, "SetNodeAdminState")?;
        let requester = caller_identity(&request);
        let req = request.into_inner();
        let validate::SetRequest {
            node,
            spec,
            desired,
            reasons,
            wait,
            timeout,
        } = validate::set_request(&req)?;
        if let Unknown::Yes(note) = self.unknown_node(&node, &spec).await? {
            // Nothing to write and nothing held: answered without waking the writers.
            let now = prost_types::Timestamp::from(std::time::SystemTime::now());
            return Ok(Response::new(SetNodeAdminStateResponse {
                result: Some(NodeResult {
                    node: Some(node),
                    version: Some(self.store.next_tool_version()),
                    desired: admin_to_proto(desired) as i32,
                    phase: ResultPhase::Effective as i32,
                    reason: note,
                    will_retry: false,
                    entries: Vec::new(),
                    at: Some(now),
                    received_at: Some(now),
                    load_balancers: self.store.lbs(),
                    ..NodeResult::default()
                }),
                timed_out: false,
            }));
        }
        // A stream lost to a leader change or a reconnect is back within seconds: wait for it
        // (within the caller's timeout) rather than make every tool retry.
        let patience = timeout.min(std::time::Duration::from_secs(15));
        let route = self.store.uplink().route_within(patience).await;
        if route == holds::Route::Retry {
            return Err(Status::unavailable(
                "no signal-svc stream (a leader change?); a hold set now would not be durable; retry in a few seconds",
            ));
        }
        if route == holds::Route::Durable {
            let w = holds::HoldWait {
                node,
                spec,
                hold: desired == Admin::Down,
                reason: req.reason.clone(),
                requester,
                wait,
                deadline: tokio::time::Instant::now() + timeout,
            };
            return self.set_durable(w).await;
        }
        // No signal-svc stream: the actuator is used alone, and the hold can only live here.
        let version = self.store.next_tool_version();
        let mut rx = self.store.subscribe();
        let name = node.name.clone();
        let hold = (desired == Admin::Down).then(|| Hold {
            reason: req.reason.clone(),
            requester,
            since: Some(prost_types::Timestamp::from(std::time::SystemTime::now())),
        });
        self.store.offer(
            validate::key_of(&node.uid, &node.name),
            node.clone(),
            spec,
            desired,
            version,
            Source::Tool,
            reasons,
            hold,
        );
        let memory_only = |mut r: NodeResult| {
            r.reason = if r.reason.is_empty() {
                holds::MEMORY_ONLY.to_string()
            } else {
                format!("{}; {}", r.reason, holds::MEMORY_ONLY)
            };
            Some(r)
        };
        let mut last = NodeResult {
            node: Some(node),
            version: Some(version),
            desired: admin_to_proto(desired) as i32,
            phase: ResultPhase::Unspecified as i32,
            ..Default::default()
        };
        if wait == WaitFor::Unspecified {
            return Ok(Response::new(SetNodeAdminStateResponse {
                result: memory_only(last),
                timed_out: false,
            }));
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let mut shutdown = self.shutdown.clone();
        loop {
            let next = tokio::select! {
                r = tokio::time::timeout_at(deadline, rx.recv()) => r,
                _ = shutdown.wait_for(|s| *s) => {
                    return Err(Status::unavailable("actuator is draining; ask another replica"));
                }
            };
            match next {
                Err(_) => {
                    return Ok(Response::new(SetNodeAdminStateResponse {
                        result: memory_only(last),
                        timed_out: true,
                    }));
                }
                Ok(Err(broadcast::error::RecvError::Lagged(_))) => continue,
                Ok(Err(broadcast::error::RecvError::Closed)) => {
                    return Err(Status::unavailable("shutting down"));
                }
                Ok(Ok(r)) => {
                    let ours = r.version == Some(version)
                        && r.node.as_ref().is_some_and(|n| n.name == name);
                    if !ours {
                        continue;
                    }
                    let done = reached(&r, wait);
                    last = r;
                    if done {
                        return Ok(Response::new(SetNodeAdminStateResponse {
                            result: memory_only(last),
                            timed_out: false,
                        }));
                    }
                }
            }
        }
    }

    async fn get_node_admin_state(
        &self,
        request: Request<GetNodeAdminStateRequest>,
    ) -> Result<Response<GetNodeAdminStateResponse>, Status> {
        self.lists.check(&request, Role::Tool)?;
        // Only a fresh read spends ARM budget; a cached answer costs nothing to limit.
        if request.get_ref().fresh {
            self.limit(&request, "GetNodeAdminState")?;
        }
        let req = request.into_inner();
        let (node, spec) = validate::get_request(&req)?;
        let mut notes = Vec::new();
        let (index, age) = if req.fresh {
            match self.unknown_node(&node, &spec).await? {
                Unknown::No => (self.fresh_index().await?, Duration::ZERO),
                Unknown::FoundIn(index) => (index, Duration::ZERO),
                Unknown::Yes(note) => {
                    notes.push(note);
                    self.cache.index(None)
                }
            }
        } else {
            if !self.cache.built(&self.store.lbs()) {
                return Err(Status::unavailable(
                    "pool cache not built yet; retry or ask with fresh = true",
                ));
            }
            self.cache.index(None)
        };
        let resolved = index.resolve(&spec, None);
        let held = self.store.find(&node.uid, &node.name);
        let desired = held
            .as_ref()
            .map(|h| admin_to_proto(h.desired))
            .unwrap_or(AdminState::Unspecified);
        if notes.is_empty() {
            notes = resolved.notes;
        }
        if let Some(h) = &held {
            for (lb, reason) in self.guard.refused(&h.key) {
                notes.push(format!("{reason} [load balancer {lb}]"));
            }
            if let Some(note) = hold_note(h) {
                notes.push(note);
            }
        }
        // Entries of an LB whose operation runs are pending, not in the state they read.
        let entries = crate::inbound::tools::answer::entries(&resolved.entries, &mut notes);
        Ok(Response::new(GetNodeAdminStateResponse {
            entries,
            age: prost_types::Duration::try_from(age).ok(),
            desired: desired as i32,
            notes,
        }))
    }

    async fn list_held_entries(
        &self,
        request: Request<ListHeldEntriesRequest>,
    ) -> Result<Response<ListHeldEntriesResponse>, Status> {
        // Answered from memory and the cached pools (no ARM call): not rate-limited.
        self.lists.check(&request, Role::Tool)?;
        let req = request.into_inner();
        let lb_filter = validate::list_request(&req)?;
        let (index, _) = self.cache.index(None);
        let mut nodes = Vec::new();
        for h in self.store.held() {
            if h.desired != crate::lb::index::Admin::Down {
                continue;
            }
            let mut entries: Vec<_> = index
                .resolve(&h.spec, lb_filter)
                .entries
                .iter()
                .map(entry_ref)
                .collect();
            if lb_filter.is_some() && entries.is_empty() {
                continue;
            }
            // Stream states: the fleet-wide phase (another replica may own the LBs); a
            // memory-only tool hold is written by this replica alone. The entries listed
            // never contradict `effective`: an entry whose copy here was read before the
            // fleet status arrived (a non-owner's copy, older than the owner's write) shows
            // the state the owners confirmed; one read since shows what it reads, and then
            // decides (an outside writer may have changed it after the status).
            let reached = match h.source {
                Source::Stream => match self.store.fleet_phase_since(&h.node.uid, h.version) {
                    Some((ResultPhase::Effective, at)) => {
                        for e in &mut entries {
                            let older = self
                                .cache
                                .age(&e.load_balancer)
                                .is_none_or(|age| age > at.elapsed());
                            if older {
                                e.admin_state = AdminState::Down as i32;
                            }
                        }
                        true
                    }
                    _ => false,
                },
                Source::Tool => h.effective(),
            };
            let effective = reached
                && entries
                    .iter()
                    .all(|e| e.admin_state == AdminState::Down as i32);
            // A hold shows its own reason text and the time it was set (which outlives any
            // replica), not the time this replica learnt of it.
            let (reasons, since) = match (&h.hold, h.source) {
                // The tool's reason first (as for a memory-only hold), then any taint keys.
                (Some(x), Source::Stream) => (
                    std::iter::once(x.reason.clone())
                        .chain(
                            h.reasons
                                .iter()
                                .filter(|r| r.as_str() != holds::HOLD_KEY)
                                .cloned(),
                        )
                        .collect(),
                    x.since
                        .unwrap_or_else(|| prost_types::Timestamp::from(h.since)),
                ),
                _ => (h.reasons.clone(), prost_types::Timestamp::from(h.since)),
            };
            nodes.push(HeldNode {
                requester: h
                    .hold
                    .as_ref()
                    .map(|x| x.requester.clone())
                    .unwrap_or_default(),
                node: Some(h.node.clone()),
                source: h.source.label(h.hold.is_some()).to_string(),
                reasons,
                version: Some(h.version),
                since: Some(since),
                entries,
                effective,
            });
        }
        Ok(Response::new(ListHeldEntriesResponse { nodes }))
    }

    async fn watch_results(
        &self,
        request: Request<WatchResultsRequest>,
    ) -> Result<Response<Self::WatchResultsStream>, Status> {
        self.lists.check(&request, Role::Tool)?;
        let req = request.into_inner();
        validate::watch_request(&req)?;
        let name = req.node_name;
        // This replica's own results (tool requests it writes, the LBs it owns) and the
        // fleet-wide phases signal-svc reports (every replica's writes, `fleet` set).
        let own = tokio_stream::wrappers::BroadcastStream::new(self.store.subscribe());
        let fleet = tokio_stream::wrappers::BroadcastStream::new(self.store.subscribe_fleet());
        let stream = own.merge(fleet).filter_map(move |r| match r {
            Ok(r) if name.is_empty() || r.node.as_ref().is_some_and(|n| n.name == name) => {
                Some(Ok(r))
            }
            _ => None,
        });
        let mut shutdown = self.shutdown.clone();
        let drained = async move {
            let _ = shutdown.wait_for(|s| *s).await;
        };
        Ok(Response::new(Box::pin(futures::StreamExt::take_until(
            stream, drained,
        ))))
    }
}
