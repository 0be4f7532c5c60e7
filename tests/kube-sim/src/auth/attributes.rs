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
            // Like kube-apiserver's RequestInfoFactory, a path shaped like a resource is
            // authorized as that resource whether or not it is served here, so an unserved
            // resource is 403 for a caller without the grant (404 only for one with it).
            _ => {
                unserved_resource(method, path, watch).unwrap_or_else(|| Attributes::NonResource {
                    verb: match method {
                        "GET" | "HEAD" => "get",
                        "POST" => "post",
                        "PUT" => "put",
                        "PATCH" => "patch",
                        "DELETE" => "delete",
                        _ => "",
                    },
                    path: path.to_string(),
                })
            }
        }
    }
}

/// `/api/v1/[namespaces/<ns>/]<resource>[/<name>[/<sub>]]` or the same under
/// `/apis/<group>/<version>/`, as resource attributes.
fn unserved_resource(method: &str, path: &str, watch: bool) -> Option<Attributes> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", "v1", rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (*ns, rest),
        other => ("", other),
    };
    let (resource, name, subresource) = match rest {
        [resource] => (*resource, "", ""),
        [resource, name] => (*resource, *name, ""),
        [resource, name, sub] => (*resource, *name, *sub),
        _ => return None,
    };
    Some(Attributes::Resource {
        verb: verb(method, !name.is_empty(), watch),
        group: group.to_string(),
        resource: resource.to_string(),
        subresource: subresource.to_string(),
        namespace: namespace.to_string(),
        name: name.to_string(),
    })
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
