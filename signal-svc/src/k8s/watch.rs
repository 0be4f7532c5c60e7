//! The two kube watches feeding the index: Nodes and `PreemptScheduled` core/v1 Events.
//!
//! Both use kube-runtime's `watcher` with `default_backoff()`: errors (closed watches, 410
//! Expired, API errors) are stream items, logged and polled past; the watcher relists or
//! re-watches on its own. Nodes are read as [`SlimNode`]: only the fields the index uses are
//! materialised (no managedFields, images or most of status), and a malformed object is
//! logged once and skipped instead of failing a whole list page. No reflector store: the
//! index keeps its own compact state.

use crate::core::event::EventView;
use crate::core::index::Change;
use crate::k8s::slim_node::SlimNode;
use crate::shared::Shared;
use crate::writers::gate::GateHandle;
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Node};
use kube::Resource;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use std::collections::HashSet;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Field selector of the event watch.
pub const EVENT_SELECTOR: &str = "involvedObject.kind=Node,reason=PreemptScheduled";

fn to_node(obj: SlimNode, warned: &mut HashSet<String>) -> Option<Node> {
    let key = kube::ResourceExt::uid(&obj)
        .or_else(|| obj.meta().name.clone())
        .unwrap_or_default();
    let name = obj.meta().name.clone();
    match obj.into_node() {
        Ok(n) => Some(n),
        Err(e) => {
            if warned.insert(key) {
                tracing::warn!(node = ?name, error = %e, "malformed Node skipped");
            }
            None
        }
    }
}

/// Runs the Node watch until shutdown; every Node seen is also reported to the drain gate.
pub async fn nodes(
    client: kube::Client,
    shared: Arc<Shared>,
    gate: Arc<GateHandle>,
    shutdown: CancellationToken,
) {
    let api: Api<SlimNode> = Api::all(client);
    let start = || {
        watcher::watcher(api.clone(), watcher::Config::default())
            .default_backoff()
            .boxed()
    };
    let mut stream = start();
    let mut warned = HashSet::new();
    let mut listed = 0usize;
    loop {
        let item = tokio::select! {
            _ = shutdown.cancelled() => return,
            () = shared.relist_requested() => {
                // A new watcher: a new connection's full list, whatever the old one hung on.
                tracing::info!("new leadership: listing every node again before streaming");
                stream = start();
                continue;
            }
            item = stream.next() => item,
        };
        let Some(item) = item else { return };
        let now = Timestamp::now();
        match item {
            // A relist streams through the index node by node: no list is buffered.
            Ok(Event::Init) => {
                listed = 0;
                shared.begin_relist();
            }
            Ok(Event::InitApply(obj)) => {
                if let Some(node) = to_node(obj, &mut warned) {
                    listed += 1;
                    let changed = shared.apply_node(&node, now);
                    gate.node_applied(&node, changed);
                }
            }
            Ok(Event::InitDone) => {
                let out = shared.finish_relist();
                for change in &out.changes {
                    if let Change::Removed { node, .. } = change {
                        gate.node_deleted(&node.uid);
                    }
                }
                tracing::debug!(
                    nodes = listed,
                    removed = out.changes.len(),
                    "node list synced"
                );
                shared.absorb(out, now);
                shared.set_nodes_synced();
            }
            Ok(Event::Apply(obj)) => {
                if let Some(node) = to_node(obj, &mut warned) {
                    let changed = shared.apply_node(&node, now);
                    gate.node_applied(&node, changed);
                }
            }
            Ok(Event::Delete(obj)) => {
                if let Some(node) = to_node(obj, &mut warned) {
                    shared.delete_node(&node, now);
                    if let Some(uid) = node.metadata.uid.as_deref() {
                        gate.node_deleted(uid);
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "node watch error; the watcher recovers on its own")
            }
        }
    }
}

/// Where `PreemptScheduled` Events are recorded: node-problem-detector records them through
/// client-go's recorder about a cluster-scoped Node, whose event namespace `""` becomes
/// `default` (contracts/kube.md 4.5). Watching only there lets RBAC grant list/watch on events
/// in one namespace instead of the whole cluster.
pub const EVENTS_NAMESPACE: &str = "default";

/// Runs the `PreemptScheduled` event watch until shutdown.
pub async fn events(client: kube::Client, shared: Arc<Shared>, shutdown: CancellationToken) {
    let api: Api<DynamicObject> = Api::namespaced_with(
        client,
        EVENTS_NAMESPACE,
        &ApiResource::erase::<CoreEvent>(&()),
    );
    let cfg = watcher::Config::default().fields(EVENT_SELECTOR);
    let mut stream = watcher::watcher(api, cfg).default_backoff().boxed();
    loop {
        let item = tokio::select! {
            _ = shutdown.cancelled() => return,
            item = stream.next() => item,
        };
        let Some(item) = item else { return };
        let now = Timestamp::now();
        let obj = match item {
            Ok(Event::InitApply(obj) | Event::Apply(obj)) => obj,
            Ok(Event::InitDone) => {
                shared.set_events_synced();
                continue;
            }
            // Notices never un-happen: deletions (TTL) and relists change nothing.
            Ok(Event::Init | Event::Delete(_)) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "event watch error; the watcher recovers on its own");
                continue;
            }
        };
        let view = match serde_json::to_value(&obj) {
            Ok(v) => EventView::from_json(&v),
            Err(_) => continue,
        };
        shared.apply_event(&view, now);
    }
}
