//! URL paths to routes (pure). Kubernetes paths follow
//! `/api/v1[/namespaces/NS]/PLURAL[/NAME[/SUBRESOURCE]]` and
//! `/apis/GROUP/VERSION[/namespaces/NS]/PLURAL[/NAME[/SUBRESOURCE]]`.

use crate::resource::View;

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `/version`, `/api`, `/apis`, ... served by `discovery`.
    Discovery(String),
    /// `/openapi/v2`, `/openapi/v3[/...]`, served by `openapi`.
    OpenApi(String),
    /// `/_sim/...` control endpoints (the part after `/_sim/`).
    Control(String),
    /// A served resource.
    Resource(Target),
    /// A resource kubectl reads but this simulator does not store (e.g. pods for
    /// `kubectl describe node`): collections read as empty lists, names as 404.
    Empty(EmptyTarget),
    NotFound,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub view: View,
    /// None for cluster-scoped kinds and for all-namespaces collections.
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmptyTarget {
    pub list_kind: &'static str,
    pub group: &'static str,
    pub plural: &'static str,
    pub name: Option<String>,
}

/// Read-only, always-empty resources that kubectl's describers query.
const EMPTY: &[(&str, &str, &str)] =
    &[("", "pods", "PodList"), ("", "namespaces", "NamespaceList")];

/// Resolves a request path.
pub fn route(path: &str) -> Route {
    if let Some(rest) = path.strip_prefix("/_sim/") {
        return Route::Control(rest.trim_end_matches('/').to_string());
    }
    let trimmed = path.trim_end_matches('/');
    if trimmed == "/openapi/v2" || trimmed == "/openapi/v3" || trimmed.starts_with("/openapi/v3/") {
        return Route::OpenApi(trimmed.to_string());
    }
    let parts: Vec<&str> = trimmed.split('/').skip(1).collect();
    match parts.as_slice() {
        ["version"] | ["api"] | ["apis"] | ["api", "v1"] | ["apis", _] | ["apis", _, _] => {
            return Route::Discovery(trimmed.to_string());
        }
        _ => {}
    }
    let (group, rest) = match parts.as_slice() {
        ["api", "v1", rest @ ..] => ("", rest),
        ["apis", group, "v1", rest @ ..] => (*group, rest),
        _ => return Route::NotFound,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, plural, rest @ ..] => (Some(ns.to_string()), prepend(plural, rest)),
        _ => (None, rest.to_vec()),
    };
    let (plural, name, sub) = match rest.as_slice() {
        [plural] => (*plural, None, None),
        [plural, name] => (*plural, Some(name.to_string()), None),
        [plural, name, sub] => (*plural, Some(name.to_string()), Some(sub.to_string())),
        _ => return Route::NotFound,
    };
    if let Some(view) = View::from_path(group, plural) {
        let namespaced = view.kind().namespaced();
        // Cluster-scoped kinds have no namespaced path; namespaced kinds can only be
        // addressed by name inside a namespace.
        if (!namespaced && namespace.is_some())
            || (namespaced && namespace.is_none() && name.is_some())
        {
            return Route::NotFound;
        }
        return Route::Resource(Target {
            view,
            namespace,
            name,
            subresource: sub,
        });
    }
    // `namespaces/NS` itself (GET of a namespace).
    if group.is_empty() && plural == "namespaces" && sub.is_none() {
        return Route::Empty(EmptyTarget {
            list_kind: "NamespaceList",
            group: "",
            plural: "namespaces",
            name,
        });
    }
    match EMPTY.iter().find(|(g, p, _)| *g == group && *p == plural) {
        Some((g, p, list_kind)) if sub.is_none() => Route::Empty(EmptyTarget {
            list_kind,
            group: g,
            plural: p,
            name,
        }),
        _ => Route::NotFound,
    }
}

fn prepend<'a>(first: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![first];
    v.extend_from_slice(rest);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(view: View, ns: Option<&str>, name: Option<&str>, sub: Option<&str>) -> Route {
        Route::Resource(Target {
            view,
            namespace: ns.map(String::from),
            name: name.map(String::from),
            subresource: sub.map(String::from),
        })
    }

    #[test]
    fn resource_paths() {
        assert_eq!(route("/api/v1/nodes"), target(View::Node, None, None, None));
        assert_eq!(
            route("/api/v1/nodes/n1/status"),
            target(View::Node, None, Some("n1"), Some("status"))
        );
        assert_eq!(
            route("/api/v1/events"),
            target(View::CoreEvent, None, None, None)
        );
        assert_eq!(
            route("/api/v1/namespaces/default/events/e1"),
            target(View::CoreEvent, Some("default"), Some("e1"), None)
        );
        assert_eq!(
            route("/apis/events.k8s.io/v1/namespaces/default/events"),
            target(View::EventsV1, Some("default"), None, None)
        );
        assert_eq!(
            route("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l"),
            target(View::Lease, Some("kube-system"), Some("l"), None)
        );
        assert_eq!(route("/api/v1/namespaces/x/nodes"), Route::NotFound);
        assert_eq!(route("/api/v1/events/e1"), Route::NotFound);
        assert_eq!(route("/api/v2/nodes"), Route::NotFound);
        assert_eq!(route("/apis/apps/v1/deployments"), Route::NotFound);
        assert!(matches!(route("/api/v1/pods"), Route::Empty(_)));
        assert!(matches!(
            route("/api/v1/namespaces/default"),
            Route::Empty(_)
        ));
        assert_eq!(
            route("/apis/events.k8s.io/v1"),
            Route::Discovery("/apis/events.k8s.io/v1".into())
        );
        assert_eq!(route("/_sim/compact"), Route::Control("compact".into()));
        assert_eq!(route(""), Route::NotFound);
    }
}
