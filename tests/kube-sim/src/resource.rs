//! The served resources and their API views. Events are one stored kind seen through two
//! views (core/v1 and events.k8s.io/v1), so the store keys objects by [`Kind`] while HTTP
//! paths resolve to a [`View`].

use crate::status::Resource;

/// A stored kind. Objects of one kind share one keyspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Node,
    Event,
    Lease,
}

impl Kind {
    /// Cluster-scoped kinds have no namespace.
    pub fn namespaced(self) -> bool {
        !matches!(self, Kind::Node)
    }

    /// Resources served from the watch cache in a real API server. Events are served
    /// straight from etcd (their watch-cache size is 0), which changes the 410 wording.
    pub fn cached(self) -> bool {
        !matches!(self, Kind::Event)
    }
}

/// One API view of a stored kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum View {
    Node,
    CoreEvent,
    EventsV1,
    Lease,
}

impl View {
    pub const ALL: [View; 4] = [View::Node, View::CoreEvent, View::EventsV1, View::Lease];

    pub fn kind(self) -> Kind {
        match self {
            View::Node => Kind::Node,
            View::CoreEvent | View::EventsV1 => Kind::Event,
            View::Lease => Kind::Lease,
        }
    }

    pub fn group(self) -> &'static str {
        match self {
            View::Node | View::CoreEvent => "",
            View::EventsV1 => "events.k8s.io",
            View::Lease => "coordination.k8s.io",
        }
    }

    /// `v1` or `group/v1`.
    pub fn api_version(self) -> &'static str {
        match self {
            View::Node | View::CoreEvent => "v1",
            View::EventsV1 => "events.k8s.io/v1",
            View::Lease => "coordination.k8s.io/v1",
        }
    }

    pub fn kind_name(self) -> &'static str {
        match self {
            View::Node => "Node",
            View::CoreEvent | View::EventsV1 => "Event",
            View::Lease => "Lease",
        }
    }

    pub fn list_kind(self) -> &'static str {
        match self {
            View::Node => "NodeList",
            View::CoreEvent | View::EventsV1 => "EventList",
            View::Lease => "LeaseList",
        }
    }

    pub fn plural(self) -> &'static str {
        match self {
            View::Node => "nodes",
            View::CoreEvent | View::EventsV1 => "events",
            View::Lease => "leases",
        }
    }

    pub fn resource(self) -> Resource {
        Resource {
            group: self.group(),
            plural: self.plural(),
        }
    }

    /// The view for `(group, plural)` as found in a URL.
    pub fn from_path(group: &str, plural: &str) -> Option<View> {
        View::ALL
            .into_iter()
            .find(|v| v.group() == group && v.plural() == plural)
    }
}

/// Where an object lives: kind, namespace (empty for cluster-scoped), name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
}

impl Key {
    pub fn new(kind: Kind, namespace: &str, name: &str) -> Self {
        Key {
            kind,
            namespace: if kind.namespaced() {
                namespace.to_string()
            } else {
                String::new()
            },
            name: name.to_string(),
        }
    }
}
