//! Watches: `GET <collection>?watch=true`, a chunked stream of newline-terminated JSON
//! events, flushed one per event (contracts/kube.md 1.5, 2.4, 2.5).
//!
//! - resourceVersion unset or `"0"`: synthetic ADDED for the current state, then changes;
//!   `N`: changes after N replayed from history, then live ones; N older than the history
//!   floor: HTTP 200, one ERROR event (410 `Expired`), end of stream.
//! - `sendInitialEvents=true`: ADDED for the current state, then a BOOKMARK annotated
//!   `k8s.io/initial-events-end: "true"`, then changes.
//! - `allowWatchBookmarks=true`: a BOOKMARK every bookmark interval and 2 s before the
//!   deadline; `timeoutSeconds` ends the stream cleanly.
//! - selectors: a change that makes an object stop (start) matching is sent as DELETED
//!   (ADDED), as the real watch cache does.

use crate::objects;
use crate::params::{self, ListOptions};
use crate::resource::View;
use crate::router::Target;
use crate::server::{Body, Req, Shared};
use crate::status::{self, ApiError};
use crate::store::{Change, ChangeType, StoreError};
use bytes::Bytes;
use http::{HeaderValue, Response, header};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// How the watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// Synthetic ADDED for the current state first; `end_marker` adds the
    /// initial-events-end bookmark (sendInitialEvents).
    State { end_marker: bool },
    /// Replay changes after this RV.
    After(u64),
}

/// The watch event type for a change seen through selectors: None if not visible.
pub fn visible_event(change: &Change, opts: &ListOptions) -> Option<&'static str> {
    let now = change.change != ChangeType::Deleted && opts.matches(&change.object);
    let before = change.prev.as_ref().is_some_and(|p| opts.matches(p));
    match (change.change, before, now) {
        (ChangeType::Deleted, true, _) => Some("DELETED"),
        (ChangeType::Deleted, false, _) => None,
        (_, false, true) => Some("ADDED"),
        (ChangeType::Modified, true, true) => Some("MODIFIED"),
        (ChangeType::Modified, true, false) => Some("DELETED"),
        _ => None,
    }
}

/// One watch line.
pub fn event_line(kind: &str, object: &Value) -> Bytes {
    let mut line = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}

/// A BOOKMARK object: only kind, apiVersion and the RV (plus the end marker).
pub fn bookmark(view: View, rv: u64, initial_events_end: bool) -> Bytes {
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if initial_events_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    event_line(
        "BOOKMARK",
        &json!({"kind": view.kind_name(), "apiVersion": view.api_version(), "metadata": meta}),
    )
}

/// Validates the request and starts the streaming task.
pub fn start(shared: Arc<Shared>, t: &Target, req: &Req) -> Result<Response<Body>, ApiError> {
    let opts = params::parse(t.view, req)?;
    let rv = opts
        .resource_version
        .as_deref()
        .and_then(|r| r.parse::<u64>().ok());
    // A watch from a future RV: the watch cache answers 504 "Too large resource version"
    // (after a short wait, which is not simulated).
    let current = shared.state.lock().store.current_rv();
    if let Some(n) = rv
        && n > current
    {
        return Err(ApiError::too_large_resource_version(n, current));
    }
    let start = match (opts.send_initial_events, rv) {
        (Some(true), _) => Start::State { end_marker: true },
        // An explicit sendInitialEvents=false skips the synthetic state (KEP-3157).
        (Some(false), None) | (Some(false), Some(0)) => Start::After(current),
        (_, None) | (_, Some(0)) => Start::State { end_marker: false },
        (_, Some(n)) => Start::After(n),
    };
    // Capped at a day so the deadline arithmetic cannot overflow.
    let timeout = match opts.timeout_seconds {
        Some(s) if s > 0 => Duration::from_secs(s.min(86_400)),
        _ => shared.tunables.default_watch_timeout,
    };
    let (tx, rx) = mpsc::channel::<Bytes>(128);
    let watcher = Watcher {
        shared: shared.clone(),
        view: t.view,
        namespace: t.namespace.clone(),
        opts,
        table: crate::table::wants_table(&req.accept)
            .then(|| req.param("includeObject").map(String::from)),
        tx,
    };
    tokio::spawn(watcher.run(start, timeout));
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, std::convert::Infallible>(Frame::data(b)), rx))
    });
    let mut resp = Response::new(StreamBody::new(stream).boxed());
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(resp)
}

struct Watcher {
    shared: Arc<Shared>,
    view: View,
    namespace: Option<String>,
    opts: ListOptions,
    /// Send each object as a one-row Table (kubectl get -w), with this includeObject.
    table: Option<Option<String>>,
    tx: mpsc::Sender<Bytes>,
}

/// The watcher stops: the client went away, or the stream ended on purpose.
struct Closed;

impl Watcher {
    async fn send(&self, line: Bytes) -> Result<(), Closed> {
        self.tx.send(line).await.map_err(|_| Closed)
    }

    /// The event object for a stored object: the view's object, or a one-row Table.
    fn render(&self, stored: &Value) -> Value {
        let object = objects::to_view(self.view, stored);
        match &self.table {
            None => object,
            Some(include) => {
                let row = crate::table::row_object(include.as_deref(), object);
                let meta = json!({"resourceVersion": stored["metadata"]["resourceVersion"]});
                crate::table::table(self.view, vec![(stored.clone(), row)], meta)
            }
        }
    }

    fn in_namespace(&self, change: &Change) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| ns == change.key.namespace)
    }

    async fn run(self, start: Start, timeout: Duration) {
        let _ = self.stream(start, timeout).await;
    }

    async fn stream(&self, start: Start, timeout: Duration) -> Result<(), Closed> {
        let mut rv_rx = self.shared.rv.subscribe();
        let mut close_rx = self.shared.close_watches.subscribe();
        close_rx.borrow_and_update();
        rv_rx.borrow_and_update();
        let deadline = Instant::now() + timeout;
        let interval = self.shared.tunables.bookmark_interval;
        let mut next_bookmark = Instant::now() + interval;
        // The last bookmark goes out 2 s before the deadline (or at once for short watches).
        let mut final_bookmark = Some(
            deadline
                .checked_sub(Duration::from_secs(2))
                .unwrap_or(deadline),
        );
        let kind = self.view.kind();
        let mut bookmark_due = false;

        let mut cursor = match start {
            Start::State { end_marker } => {
                let (items, rv) = {
                    let state = self.shared.state.lock();
                    (
                        state.store.list(kind, self.namespace.as_deref()),
                        state.store.current_rv(),
                    )
                };
                for (_, obj) in items.iter().filter(|(_, o)| self.opts.matches(o)) {
                    self.send(event_line("ADDED", &self.render(obj))).await?;
                }
                if end_marker {
                    self.send(bookmark(self.view, rv, true)).await?;
                }
                rv
            }
            Start::After(n) => n,
        };

        loop {
            // Mark the RV seen before reading, so a write after the read wakes us.
            rv_rx.borrow_and_update();
            let (changes, current) = {
                let state = self.shared.state.lock();
                (
                    state.store.changes_since(kind, cursor),
                    state.store.current_rv(),
                )
            };
            match changes {
                Ok(changes) => {
                    for change in changes {
                        if !self.in_namespace(&change) {
                            continue;
                        }
                        if let Some(t) = visible_event(&change, &self.opts) {
                            self.send(event_line(t, &self.render(&change.object)))
                                .await?;
                        }
                    }
                    // Everything of this kind up to `current` has been sent.
                    cursor = cursor.max(current);
                }
                Err(StoreError::TooOld { requested, oldest }) => {
                    let e = status::watch_too_old(kind.cached(), requested, oldest);
                    self.send(event_line("ERROR", &e.to_status())).await?;
                    return Ok(());
                }
                Err(_) => return Ok(()),
            }
            if bookmark_due {
                bookmark_due = false;
                // Sent after draining, so its RV covers every change delivered before it.
                self.send(bookmark(self.view, cursor, false)).await?;
            }
            let bookmark_at = final_bookmark.map_or(next_bookmark, |f| f.min(next_bookmark));
            tokio::select! {
                changed = rv_rx.changed() => {
                    if changed.is_err() {
                        return Ok(());
                    }
                }
                _ = close_rx.changed() => return Ok(()),
                _ = tokio::time::sleep_until(deadline) => return Ok(()),
                _ = self.tx.closed() => return Err(Closed),
                _ = tokio::time::sleep_until(bookmark_at) => {
                    if final_bookmark.is_some_and(|f| f <= Instant::now()) {
                        final_bookmark = None;
                    } else {
                        next_bookmark += interval;
                    }
                    bookmark_due = self.opts.allow_bookmarks;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::{Key, Kind};
    use crate::selectors::LabelSelector;

    fn change(kind: ChangeType, prev: Option<&str>, now: &str) -> Change {
        let obj = |l: &str| json!({"metadata": {"name": "n", "labels": {"pool": l}}});
        Change {
            rv: 5,
            key: Key::new(Kind::Node, "", "n"),
            change: kind,
            object: Arc::new(obj(now)),
            prev: prev.map(|p| Arc::new(obj(p))),
        }
    }

    #[test]
    fn selector_transitions() {
        let opts = ListOptions {
            label: LabelSelector::parse("pool=spot").unwrap(),
            ..Default::default()
        };
        let v = |c: &Change| visible_event(c, &opts);
        assert_eq!(v(&change(ChangeType::Added, None, "spot")), Some("ADDED"));
        assert_eq!(v(&change(ChangeType::Added, None, "user")), None);
        assert_eq!(
            v(&change(ChangeType::Modified, Some("spot"), "spot")),
            Some("MODIFIED")
        );
        assert_eq!(
            v(&change(ChangeType::Modified, Some("user"), "spot")),
            Some("ADDED")
        );
        assert_eq!(
            v(&change(ChangeType::Modified, Some("spot"), "user")),
            Some("DELETED")
        );
        assert_eq!(v(&change(ChangeType::Modified, Some("user"), "user")), None);
        assert_eq!(
            v(&change(ChangeType::Deleted, Some("spot"), "spot")),
            Some("DELETED")
        );
        assert_eq!(v(&change(ChangeType::Deleted, Some("user"), "user")), None);
    }

    #[test]
    fn bookmark_shape() {
        let b = bookmark(View::Node, 12, true);
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(
            v,
            json!({"type": "BOOKMARK", "object": {"kind": "Node", "apiVersion": "v1",
                "metadata": {"resourceVersion": "12", "annotations": {"k8s.io/initial-events-end": "true"}}}})
        );
        assert!(b.ends_with(b"\n"));
    }
}
