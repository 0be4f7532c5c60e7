//! The parts of a core/v1 `PreemptScheduled` Event we use.
//!
//! Events are read from raw JSON rather than the typed k8s-openapi struct: a typed list fails
//! as a whole on one malformed item (e.g. an event without `involvedObject`), which would keep
//! the watcher from ever finishing its initial list.

use jiff::Timestamp;
use serde_json::Value;

/// One event, leniently extracted.
#[derive(Clone, Debug, PartialEq)]
pub struct EventView {
    /// `metadata.name` (for logs).
    pub name: String,
    /// `metadata.uid`, or the name when absent (for de-duplication).
    pub uid: String,
    pub reason: String,
    /// `involvedObject.kind`, if any.
    pub kind: Option<String>,
    /// `involvedObject.name`, if any. Never `involvedObject.uid`: emitters put the node name
    /// there, or nothing.
    pub node_name: Option<String>,
    pub message: String,
    /// The newest of lastTimestamp, firstTimestamp, eventTime, series.lastObservedTime and
    /// metadata.creationTimestamp.
    pub time: Option<Timestamp>,
}

impl EventView {
    /// Extracts the view from an Event object (core/v1 field names).
    pub fn from_json(obj: &Value) -> Self {
        let s = |v: &Value| v.as_str().map(str::to_owned);
        let meta = &obj["metadata"];
        let name = s(&meta["name"]).unwrap_or_default();
        let involved = obj.get("involvedObject").filter(|v| v.is_object());
        let time = [
            &obj["lastTimestamp"],
            &obj["firstTimestamp"],
            &obj["eventTime"],
            &obj["series"]["lastObservedTime"],
            &meta["creationTimestamp"],
        ]
        .into_iter()
        .filter_map(|v| v.as_str().and_then(|t| t.parse::<Timestamp>().ok()))
        .max();
        Self {
            uid: s(&meta["uid"])
                .filter(|u| !u.is_empty())
                .unwrap_or_else(|| name.clone()),
            name,
            reason: s(&obj["reason"]).unwrap_or_default(),
            kind: involved.and_then(|i| s(&i["kind"])),
            node_name: involved
                .and_then(|i| s(&i["name"]))
                .filter(|n| !n.is_empty()),
            message: s(&obj["message"]).unwrap_or_default(),
            time,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn npd_event_shapes() {
        let ev = json!({
            "metadata": {"name": "aks-spot-1.18a", "namespace": "default", "uid": "e1",
                         "creationTimestamp": "2026-08-01T05:39:00Z"},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": "aks-spot-1", "uid": "aks-spot-1"},
            "reason": "PreemptScheduled", "type": "Warning",
            "message": "Scheduled: Sat, 01 Aug 2026 05:41:02 GMT. DurationInSeconds: -1.",
            "firstTimestamp": "2026-08-01T05:39:00Z", "lastTimestamp": "2026-08-01T05:39:20Z", "count": 5
        });
        let v = EventView::from_json(&ev);
        assert_eq!(v.node_name.as_deref(), Some("aks-spot-1"));
        assert_eq!(v.kind.as_deref(), Some("Node"));
        assert_eq!(v.time, Some("2026-08-01T05:39:20Z".parse().unwrap()));
        assert_eq!(v.uid, "e1");

        let bare =
            EventView::from_json(&json!({"metadata": {"name": "x"}, "reason": "PreemptScheduled"}));
        assert_eq!(bare.node_name, None);
        assert_eq!(bare.time, None);
        assert_eq!(bare.uid, "x");
        let garbage = EventView::from_json(
            &json!({"metadata": 5, "involvedObject": "nope", "lastTimestamp": 7}),
        );
        assert_eq!(garbage.node_name, None);
    }

    /// Whatever JSON shape an event has, extraction answers; the node name is never empty.
    #[test]
    fn any_json_shape_is_read_leniently() {
        fn prop(name: Option<String>, node: Option<String>, ts: String, nested: bool) -> bool {
            let involved = if nested {
                json!({"kind": "Node", "name": node})
            } else {
                json!(node)
            };
            let obj = json!({"metadata": {"name": name, "uid": null}, "involvedObject": involved,
                             "lastTimestamp": ts, "series": {"lastObservedTime": ts}, "message": name});
            let v = EventView::from_json(&obj);
            v.node_name.as_deref() != Some("") && (nested || v.node_name.is_none())
        }
        quickcheck::QuickCheck::new()
            .tests(300)
            .quickcheck(prop as fn(Option<String>, Option<String>, String, bool) -> bool);
    }
}
