//! No lock-order inversion in `Shared`: every pair of lock-taking paths runs concurrently on
//! two threads under a timeout. A path that takes two of `Shared`'s locks in an order another
//! path reverses deadlocks here within the time limit instead of in production.

#![allow(clippy::unwrap_used)]

use cutover_proto::v1::{NodeRef, NodeResult, ResultPhase, Version};
use signal_svc::core::dispatch::Dispatcher;
use signal_svc::core::index::NodeIndex;
use signal_svc::core::taints::TriggerSet;
use signal_svc::shared::{Core, Shared};
use std::sync::Arc;
use std::time::Duration;

type Path = (&'static str, fn(&Shared));

fn paths() -> Vec<Path> {
    vec![
        ("fleet_statuses", |s| {
            let _ = s.fleet_statuses();
        }),
        ("prune_reported", |s| s.prune_reported()),
        ("become_leader", |s| s.become_leader(5)),
        ("lead", |s| s.lead(5)),
        ("suspend", |s| s.suspend()),
        ("lose_leadership", |s| s.lose_leadership()),
        ("is_ready", |s| {
            let _ = s.is_ready();
        }),
        ("wake_all", |s| s.wake_all()),
        ("notify_for", |s| {
            let _ = s.notify_for("a:1");
        }),
        ("set_stream_ready", |s| s.set_stream_ready("a:1", true)),
        ("absorb", |s| {
            s.absorb(Default::default(), jiff::Timestamp::now());
        }),
        ("results::handle", |s| {
            let r = NodeResult {
                node: Some(NodeRef {
                    name: "n".into(),
                    uid: "u".into(),
                    ..NodeRef::default()
                }),
                version: Some(Version { epoch: 5, seq: 1 }),
                phase: ResultPhase::Effective as i32,
                ..NodeResult::default()
            };
            let _ = signal_svc::stream::results::handle(s, &r, jiff::Timestamp::now());
        }),
        ("assign", |s| {
            let _ = s.assignment_owners();
        }),
        ("report_accepted_epoch", |s| s.report_accepted_epoch(3)),
    ]
}

#[test]
fn every_pair_of_lock_taking_paths_runs_concurrently_without_deadlock() {
    let all = paths();
    for (i, (name_a, a)) in all.iter().enumerate() {
        for (name_b, b) in &all[i..] {
            let (tx, core) = tokio::sync::mpsc::unbounded_channel();
            let shared = Arc::new(Shared::new(
                Core {
                    index: NodeIndex::new(TriggerSet::default()),
                    dispatch: Dispatcher::new(),
                },
                "t".into(),
                false,
                tx,
            ));
            let _keep = core;
            let (done_tx, done_rx) = std::sync::mpsc::channel();
            for f in [*a, *b] {
                let s = shared.clone();
                let done = done_tx.clone();
                std::thread::spawn(move || {
                    for _ in 0..2_000 {
                        f(&s);
                    }
                    let _ = done.send(());
                });
            }
            for _ in 0..2 {
                done_rx
                    .recv_timeout(Duration::from_secs(10))
                    .unwrap_or_else(|_| panic!("deadlock between {name_a} and {name_b}"));
            }
        }
    }
}
