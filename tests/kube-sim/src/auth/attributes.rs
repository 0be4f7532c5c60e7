//! What a request asks to do, in RBAC terms (kube-apiserver's `RequestInfo`): the verb from
//! the method (GET of a collection is `list`, `watch=true` makes it `watch`, PUT is
//! `update`, ...), and the group, resource, subresource, namespace and name from the path.
//! Paths that are no resource (discovery, OpenAPI, `/version`) are checked as URLs.

use crate::router::Route;

/// A request's authorization attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attributes {
    Resource {
        verb: &'static str,
        group: String,
        resource: String,
        subresource: String,
        namespace: String,
        name: String,
    },
    NonResource {
        verb: &'static str,
        path: String,
    },
}

fn verb(method: &str, named: bool, watch: bool) -> &'static str {
    match (method, named, watch) {
        ("GET" | "HEAD", _, true) => "watch",
        ("GET" | "HEAD", true, false) => "get",
        ("GET" | "HEAD", false, false) => "list",
        ("POST", _, _) => "create",
        ("PUT", _, _) => "update",
        ("PATCH", _, _) => "patch",
        ("DELETE", true, _) => "delete",
        ("DELETE", false, _) => "deletecollection",
        _ => "",
    }
}

impl Attributes {
    /// The attributes of a request to `route`.
    pub fn of(route: &Route, method: &str, path: &str, watch: bool) -> Attributes {
        match route {
            Route::Resource(t) => Attributes::Resource {
                verb: verb(method, t.name.is_some(), watch),
                group: t.view.group().to_string(),
                resource: t.view.plural().to_string(),
                subresource: t.subresource.clone().unwrap_or_default(),
                namespace: t.namespace.clone().unwrap_or_default(),
                name: t.name.clone().unwrap_or_default(),
            },
            Route::Empty(t) => Attributes::Resource {
                verb: verb(method, t.name.is_some(), watch),
                group: t.group.to_string(),
                resource: t.plural.to_string(),
                subresource: String::new(),
                namespace: String::new(),
                name: t.name.clone().unwrap_or_default(),
            },
            _ => Attributes::NonResource {
                verb: match method {
                    "GET" | "HEAD" => "get",
                    "POST" => "post",
                    "PUT" => "put",
                    "PATCH" => "patch",
                    "DELETE" => "delete",
                    _ => "",
                },
                path: path.to_string(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router::route;

    fn of(method: &str, path: &str, watch: bool) -> Attributes {
        Attributes::of(&route(path), method, path, watch)
    }

    #[test]
    fn verbs_and_scopes() {
        let Attributes::Resource {
            verb,
            resource,
            subresource,
            ..
        } = of("PATCH", "/api/v1/nodes/n1/status", false)
        else {
            panic!("resource request")
        };
        assert_eq!(
            (verb, resource.as_str(), subresource.as_str()),
            ("patch", "nodes", "status")
        );
        let Attributes::Resource {
            verb,
            namespace,
            group,
            ..
        } = of(
            "GET",
            "/apis/coordination.k8s.io/v1/namespaces/cutover/leases",
            true,
        )
        else {
            panic!("resource request")
        };
        assert_eq!(
            (verb, namespace.as_str(), group.as_str()),
            ("watch", "cutover", "coordination.k8s.io")
        );
        assert!(matches!(
            of("GET", "/api/v1/nodes", false),
            Attributes::Resource { verb: "list", .. }
        ));
        assert!(matches!(
            of("PUT", "/api/v1/nodes/x", false),
            Attributes::Resource { verb: "update", .. }
        ));
        assert_eq!(
            of("GET", "/openapi/v3", false),
            Attributes::NonResource {
                verb: "get",
                path: "/openapi/v3".into()
            }
        );
    }
}
