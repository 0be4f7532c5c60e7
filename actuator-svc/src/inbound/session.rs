//! The desired-state stream's protocol as a pure state machine: `Hello`, then `Snapshot*` and
//! `SnapshotEnd`, then deltas, assignments and forgets; hold acks and fleet-wide statuses at
//! any time. Each message either moves the session on and says what to apply (a [`Step`]) or
//! refuses the stream (a [`Refusal`]). Nothing here touches the store, the clock or the
//! network: the loop in `stream` reads the messages and applies the steps.

use super::validate::{self, Desired};
use crate::state::ownership::Grant;
use cutover_proto::v1::{
    Assignment, Hello, HoldAck, NodeDesiredState, NodeRef, ResultPhase, SignalMessage, Version,
    signal_message,
};
use std::collections::HashSet;
use tonic::Status;

/// Why a stream is refused; it ends with the matching status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// INVALID_ARGUMENT: the message names the field.
    Invalid(String),
    /// FAILED_PRECONDITION.
    Precondition(String),
    /// FAILED_PRECONDITION for a stale leader epoch, naming the accepted one in the trailing
    /// metadata `cutover-accepted-epoch`: a leader whose Lease was recreated below it raises
    /// its epoch above this (see `Hello.leader_epoch`).
    StaleEpoch { message: String, accepted: u64 },
    /// UNAVAILABLE: this replica is draining.
    Draining,
}

impl From<Refusal> for Status {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::Invalid(m) => Status::invalid_argument(m),
            Refusal::Precondition(m) => Status::failed_precondition(m),
            Refusal::StaleEpoch { message, accepted } => {
                let mut status = Status::failed_precondition(message);
                if let Ok(v) = accepted.to_string().parse() {
                    status.metadata_mut().insert("cutover-accepted-epoch", v);
                }
                status
            }
            Refusal::Draining => {
                Status::unavailable("actuator is draining; reconnect to another replica")
            }
        }
    }
}

/// What the stream's loop does for one message.
#[derive(Debug)]
pub enum Step {
    /// Offer these validated desired states, in order (a snapshot batch or one delta).
    Apply(Vec<Desired>),
    /// The snapshot is complete: keep only the stream states of [`Session::mentioned`].
    SnapshotEnd,
    /// Take this assignment ([`Session::grant`] checks it) and answer with a `Renew`.
    Assign(Assignment),
    /// The answer to one of this replica's hold requests.
    HoldAck(HoldAck),
    /// A fleet-wide phase of a node's version.
    Fleet {
        node: NodeRef,
        version: Version,
        phase: ResultPhase,
    },
    /// Forget a node's stream state up to `version`.
    Forget {
        key: String,
        uid: String,
        version: Version,
    },
    /// Nothing to apply.
    Nothing,
}

/// The first message of a stream: a valid `Hello` for this cluster, or the refusal.
pub fn hello(first: SignalMessage, cluster_name: &str) -> Result<Hello, Refusal> {
    let Some(signal_message::Kind::Hello(hello)) = first.kind else {
        return Err(Refusal::Invalid(
            "hello: the first message must be hello".into(),
        ));
    };
    validate::hello(&hello).map_err(|e| Refusal::Invalid(e.to_string()))?;
    if hello.cluster_name != cluster_name {
        return Err(Refusal::Precondition(format!(
            "hello.cluster_name: this actuator manages cluster {cluster_name:?}, not {:?}",
            hello.cluster_name
        )));
    }
    Ok(hello)
}

/// The refusal of a `Hello` whose epoch the store did not accept (`newer` is the accepted one).
pub fn epoch_refused(epoch: u64, newer: u64) -> Refusal {
    let why = if newer == epoch {
        "is the accepted leader epoch of another signal-svc process; raise it above the accepted leader epoch"
    } else {
        "is older than the accepted leader epoch"
    };
    Refusal::StaleEpoch {
        message: format!("hello.leader_epoch: {epoch} {why} {newer}"),
        accepted: newer,
    }
}

/// One accepted stream, after its `Hello`.
#[derive(Debug)]
pub struct Session {
    epoch: u64,
    in_snapshot: bool,
    /// The nodes the snapshot named (by key): stream states of the others are dropped at its end.
    mentioned: HashSet<String>,
    /// Desired states received in the snapshot, checked against `SnapshotEnd.node_count`.
    received: u64,
}

impl Session {
    /// A session under the leader epoch its `Hello` carried, expecting the snapshot.
    pub fn new(epoch: u64) -> Self {
        Self {
            epoch,
            in_snapshot: true,
            mentioned: HashSet::new(),
            received: 0,
        }
    }

    /// The nodes the snapshot named.
    pub fn mentioned(&self) -> &HashSet<String> {
        &self.mentioned
    }

    /// How many desired states the snapshot carried.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Refuses the stream once a newer epoch than its own was accepted (`newest`).
    pub fn check_epoch(&self, newest: u64) -> Result<(), Refusal> {
        if newest > self.epoch {
            return Err(Refusal::StaleEpoch {
                message: format!("leader epoch {} was superseded by {newest}", self.epoch),
                accepted: newest,
            });
        }
        Ok(())
    }

    /// One message after the `Hello`.
    pub fn on(&mut self, kind: Option<signal_message::Kind>) -> Result<Step, Refusal> {
        use signal_message::Kind;
        let invalid = |m: &str| Err(Refusal::Invalid(m.to_string()));
        match kind {
            None => invalid("kind: required"),
            Some(Kind::Hello(_)) => invalid("hello: sent twice"),
            Some(Kind::Snapshot(s)) => self.snapshot(&s.nodes),
            Some(Kind::SnapshotEnd(end)) => self.snapshot_end(end.node_count),
            Some(Kind::Delta(d)) => {
                if self.in_snapshot {
                    return invalid("delta: before snapshot_end");
                }
                let d = validate::desired(&d, "delta").map_err(Refusal::Invalid)?;
                Ok(Step::Apply(vec![d]))
            }
            Some(Kind::Assignment(a)) => {
                if self.in_snapshot {
                    return invalid("assignment: before snapshot_end");
                }
                Ok(Step::Assign(a))
            }
            // Answers to this replica's hold requests, and fleet-wide phases: at any time.
            Some(Kind::HoldAck(a)) => Ok(Step::HoldAck(a)),
            Some(Kind::NodeStatus(s)) => {
                let m = SignalMessage {
                    kind: Some(Kind::NodeStatus(s)),
                };
                validate::signal_message(&m).map_err(|e| Refusal::Invalid(e.to_string()))?;
                if let Some(Kind::NodeStatus(s)) = m.kind
                    && let (Some(node), Some(version)) = (s.node, s.version)
                {
                    let phase = ResultPhase::try_from(s.phase).unwrap_or(ResultPhase::Unspecified);
                    return Ok(Step::Fleet {
                        node,
                        version,
                        phase,
                    });
                }
                Ok(Step::Nothing)
            }
            Some(Kind::Forget(f)) => {
                if self.in_snapshot {
                    return invalid("forget: before snapshot_end");
                }
                let (node, version) =
                    validate::forget(&f).map_err(|e| Refusal::Invalid(e.to_string()))?;
                Ok(Step::Forget {
                    key: validate::key_of(&node.uid, &node.name),
                    uid: node.uid,
                    version,
                })
            }
        }
    }

    /// A batch of the snapshot, validated whole before any of it is applied.
    fn snapshot(&mut self, nodes: &[NodeDesiredState]) -> Result<Step, Refusal> {
        if !self.in_snapshot {
            return Err(Refusal::Invalid(
                "snapshot: after snapshot_end; reconnect to send a new snapshot".into(),
            ));
        }
        let batch = nodes
            .iter()
            .enumerate()
            .map(|(i, d)| validate::desired(d, &format!("snapshot.nodes[{i}]")))
            .collect::<Result<Vec<_>, _>>()
            .map_err(Refusal::Invalid)?;
        self.received += batch.len() as u64;
        self.mentioned.extend(batch.iter().map(|d| d.key.clone()));
        Ok(Step::Apply(batch))
    }

    /// The end of the snapshot, which must count what it carried.
    fn snapshot_end(&mut self, node_count: u64) -> Result<Step, Refusal> {
        if !self.in_snapshot {
            return Err(Refusal::Invalid("snapshot_end: sent twice".into()));
        }
        if node_count != self.received {
            return Err(Refusal::Invalid(format!(
                "snapshot_end.node_count: {node_count} announced, {} received",
                self.received
            )));
        }
        self.in_snapshot = false;
        Ok(Step::SnapshotEnd)
    }

    /// The grant of an assignment to the `managed` load balancers, under this stream's epoch.
    pub fn grant(&self, a: &Assignment, managed: &[String]) -> Result<Grant, Refusal> {
        let grant = Grant::from_proto(a, managed).map_err(Refusal::Invalid)?;
        if grant.epoch != self.epoch {
            return Err(Refusal::Precondition(format!(
                "assignment.leader_epoch: {} is not this stream's epoch {}",
                grant.epoch, self.epoch
            )));
        }
        Ok(grant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cutover_proto::v1::{Forget, Snapshot, SnapshotEnd, signal_message::Kind};

    fn mk_hello(cluster: &str, epoch: u64) -> SignalMessage {
        SignalMessage {
            kind: Some(Kind::Hello(Hello {
                cluster_name: cluster.into(),
                leader_epoch: epoch,
                sender_identity: "signal-svc-0".into(),
                ..Hello::default()
            })),
        }
    }

    fn mk_state(name: &str) -> NodeDesiredState {
        NodeDesiredState {
            node: Some(NodeRef {
                name: name.into(),
                uid: format!("uid-{name}"),
                ..NodeRef::default()
            }),
            desired: cutover_proto::v1::AdminState::Down as i32,
            version: Some(Version { epoch: 1, seq: 1 }),
            ..NodeDesiredState::default()
        }
    }

    fn snapshot(names: &[&str]) -> Option<Kind> {
        Some(Kind::Snapshot(Snapshot {
            nodes: names.iter().map(|n| mk_state(n)).collect(),
        }))
    }

    fn end(count: u64) -> Option<Kind> {
        Some(Kind::SnapshotEnd(SnapshotEnd { node_count: count }))
    }

    fn refusal(r: Result<Step, Refusal>) -> String {
        match r {
            Err(Refusal::Invalid(m)) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn hello_must_come_first_and_name_this_cluster() {
        assert!(hello(mk_hello("kubernetes", 3), "kubernetes").is_ok());
        let other = hello(mk_hello("other", 3), "kubernetes").unwrap_err();
        assert!(matches!(other, Refusal::Precondition(m) if m.contains("\"other\"")));
        let first = SignalMessage {
            kind: snapshot(&["a"]),
        };
        assert_eq!(
            hello(first, "kubernetes").unwrap_err(),
            Refusal::Invalid("hello: the first message must be hello".into())
        );
    }

    #[test]
    fn snapshot_then_end_then_deltas() {
        let mut s = Session::new(7);
        assert!(matches!(s.on(snapshot(&["a", "b"])), Ok(Step::Apply(b)) if b.len() == 2));
        assert_eq!(
            refusal(s.on(Some(Kind::Delta(mk_state("c"))))),
            "delta: before snapshot_end"
        );
        assert!(refusal(s.on(end(3))).contains("3 announced, 2 received"));
        assert!(matches!(s.on(end(2)), Ok(Step::SnapshotEnd)));
        assert_eq!(s.mentioned().len(), 2);
        assert_eq!(s.received(), 2);
        assert!(
            matches!(s.on(Some(Kind::Delta(mk_state("c")))), Ok(Step::Apply(b)) if b.len() == 1)
        );
        assert_eq!(
            refusal(s.on(snapshot(&["d"]))),
            "snapshot: after snapshot_end; reconnect to send a new snapshot"
        );
        assert_eq!(refusal(s.on(end(2))), "snapshot_end: sent twice");
        assert_eq!(refusal(s.on(None)), "kind: required");
        assert_eq!(
            refusal(s.on(mk_hello("kubernetes", 7).kind)),
            "hello: sent twice"
        );
    }

    #[test]
    fn a_bad_entry_refuses_the_whole_batch() {
        let mut s = Session::new(1);
        let mut bad = mk_state("b");
        bad.node = None;
        let batch = Some(Kind::Snapshot(Snapshot {
            nodes: vec![mk_state("a"), bad],
        }));
        assert!(refusal(s.on(batch)).starts_with("snapshot.nodes[1]"));
        assert_eq!(s.received(), 0);
        assert!(s.mentioned().is_empty());
    }

    #[test]
    fn forget_and_assignment_wait_for_the_snapshot() {
        let mut s = Session::new(1);
        let forget = || {
            Some(Kind::Forget(Forget {
                node: mk_state("a").node,
                version: mk_state("a").version,
            }))
        };
        assert_eq!(refusal(s.on(forget())), "forget: before snapshot_end");
        let assignment = || Some(Kind::Assignment(Assignment::default()));
        assert_eq!(
            refusal(s.on(assignment())),
            "assignment: before snapshot_end"
        );
        s.on(end(0)).unwrap();
        assert!(matches!(s.on(forget()), Ok(Step::Forget { uid, .. }) if uid == "uid-a"));
        assert!(matches!(s.on(assignment()), Ok(Step::Assign(_))));
    }

    #[test]
    fn a_newer_epoch_refuses_the_stream_naming_it() {
        let s = Session::new(4);
        assert!(s.check_epoch(4).is_ok());
        let status = Status::from(s.check_epoch(5).unwrap_err());
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        assert_eq!(status.message(), "leader epoch 4 was superseded by 5");
        assert_eq!(
            status.metadata().get("cutover-accepted-epoch").unwrap(),
            "5"
        );
        let same = Status::from(epoch_refused(4, 4));
        assert!(same.message().contains("another signal-svc process"));
        let older = Status::from(epoch_refused(3, 4));
        assert!(
            older
                .message()
                .contains("is older than the accepted leader epoch 4")
        );
    }
}
