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
    ServiceAccount,
    ClusterRole,
    ClusterRoleBinding,
    Role,
    RoleBinding,
}

impl Kind {
    /// Cluster-scoped kinds have no namespace.
    pub fn namespaced(self) -> bool {
        !matches!(
            self,
            Kind::Node | Kind::ClusterRole | Kind::ClusterRoleBinding
        )
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
    ServiceAccount,
    ClusterRole,
    ClusterRoleBinding,
    Role,
    RoleBinding,
}

/// What URLs, discovery and OpenAPI say about a view: `(kind, group, plural, short names)`.
struct Names {
    kind: Kind,
    group: &'static str,
    kind_name: &'static str,
    plural: &'static str,
    short: &'static [&'static str],
}

pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

impl View {
    pub const ALL: [View; 9] = [
        View::Node,
        View::CoreEvent,
        View::EventsV1,
        View::Lease,
        View::ServiceAccount,
        View::ClusterRole,
        View::ClusterRoleBinding,
        View::Role,
        View::RoleBinding,
    ];

    fn names(self) -> Names {
        let n = |kind, group, kind_name, plural, short| Names {
            kind,
            group,
            kind_name,
            plural,
            short,
        };
        match self {
            View::Node => n(Kind::Node, "", "Node", "nodes", &["no"]),
            View::CoreEvent => n(Kind::Event, "", "Event", "events", &["ev"]),
            View::EventsV1 => n(Kind::Event, "events.k8s.io", "Event", "events", &["ev"]),
            View::Lease => n(Kind::Lease, "coordination.k8s.io", "Lease", "leases", &[]),
            View::ServiceAccount => n(
                Kind::ServiceAccount,
                "",
                "ServiceAccount",
                "serviceaccounts",
                &["sa"],
            ),
            View::ClusterRole => n(
                Kind::ClusterRole,
                RBAC_GROUP,
                "ClusterRole",
                "clusterroles",
                &[],
            ),
            View::ClusterRoleBinding => n(
                Kind::ClusterRoleBinding,
                RBAC_GROUP,
                "ClusterRoleBinding",
                "clusterrolebindings",
                &[],
            ),
            View::Role => n(Kind::Role, RBAC_GROUP, "Role", "roles", &[]),
            View::RoleBinding => n(
                Kind::RoleBinding,
                RBAC_GROUP,
                "RoleBinding",
                "rolebindings",
                &[],
            ),
        }
    }

    pub fn kind(self) -> Kind {
        self.names().kind
    }

    pub fn group(self) -> &'static str {
        self.names().group
    }

    /// `v1` or `group/v1`.
    pub fn api_version(self) -> &'static str {
        match self.group() {
            "" => "v1",
            "events.k8s.io" => "events.k8s.io/v1",
            "coordination.k8s.io" => "coordination.k8s.io/v1",
            _ => "rbac.authorization.k8s.io/v1",
        }
    }

    pub fn kind_name(self) -> &'static str {
        self.names().kind_name
    }

    pub fn list_kind(self) -> &'static str {
        match self.kind_name() {
            "Node" => "NodeList",
            "Event" => "EventList",
            "Lease" => "LeaseList",
            "ServiceAccount" => "ServiceAccountList",
            "ClusterRole" => "ClusterRoleList",
            "ClusterRoleBinding" => "ClusterRoleBindingList",
            "Role" => "RoleList",
            _ => "RoleBindingList",
        }
    }

    pub fn plural(self) -> &'static str {
        self.names().plural
    }

    /// The lower-case singular (`node`, `clusterrolebinding`), as discovery names it.
    pub fn singular(self) -> String {
        self.kind_name().to_ascii_lowercase()
    }

    pub fn short_names(self) -> &'static [&'static str] {
        self.names().short
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

    /// The view for a `(apiVersion, kind)` pair, as found in a manifest.
    pub fn from_type(api_version: &str, kind: &str) -> Option<View> {
        View::ALL
            .into_iter()
            .find(|v| v.api_version() == api_version && v.kind_name() == kind)
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
