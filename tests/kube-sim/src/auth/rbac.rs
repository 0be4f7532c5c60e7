//! The RBAC authorizer: a request is allowed when a rule of a role bound to the caller
//! covers it. Bindings and roles are read from the store on every request, so a change
//! through the API (or a role missing a verb) takes effect at once, as in a cluster.
//!
//! Rule matching follows kubernetes' `rbac/v1` helpers: `*` matches any verb, group or
//! resource; a request for a subresource needs `resource/subresource` (or `*/subresource`);
//! `resourceNames` restricts to named requests; ClusterRoleBindings grant everywhere,
//! RoleBindings only inside their namespace (to a Role there or to a ClusterRole). Members
//! of `system:masters` are allowed everything without a rule, as kube-apiserver does.

use super::attributes::Attributes;
use super::tokens::{MASTERS, User};
use crate::resource::{Key, Kind, RBAC_GROUP};
use crate::status::ApiError;
use crate::store::Store;
use serde_json::{Value, json};

/// The outcome: allowed, or denied with the authorizer's reason (may be empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny { reason: String },
}

fn strings(v: &Value) -> impl Iterator<Item = &str> {
    v.as_array().into_iter().flatten().filter_map(Value::as_str)
}

fn has(list: &Value, want: &str) -> bool {
    strings(list).any(|s| s == "*" || s == want)
}

fn rule_allows(rule: &Value, attrs: &Attributes) -> bool {
    match attrs {
        Attributes::Resource {
            verb,
            group,
            resource,
            subresource,
            name,
            ..
        } => {
            let combined = if subresource.is_empty() {
                resource.clone()
            } else {
                format!("{resource}/{subresource}")
            };
            let resource_ok = strings(&rule["resources"]).any(|r| {
                r == "*"
                    || r == combined
                    || (!subresource.is_empty() && r == format!("*/{subresource}"))
            });
            let names: Vec<&str> = strings(&rule["resourceNames"]).collect();
            has(&rule["verbs"], verb)
                && has(&rule["apiGroups"], group)
                && resource_ok
                && (names.is_empty() || (!name.is_empty() && names.contains(&name.as_str())))
        }
        Attributes::NonResource { verb, path } => {
            has(&rule["verbs"], verb)
                && strings(&rule["nonResourceURLs"]).any(|u| {
                    u == "*"
                        || u == path
                        || u.strip_suffix('*').is_some_and(|p| path.starts_with(p))
                })
        }
    }
}

fn subject_matches(subject: &Value, user: &User, binding_namespace: &str) -> bool {
    let name = subject["name"].as_str().unwrap_or("");
    match subject["kind"].as_str().unwrap_or("") {
        "User" => name == user.name,
        "Group" => user.in_group(name),
        "ServiceAccount" => {
            let ns = subject["namespace"]
                .as_str()
                .filter(|n| !n.is_empty())
                .unwrap_or(binding_namespace);
            user.name == format!("system:serviceaccount:{ns}:{name}")
        }
        _ => false,
    }
}

/// The rules of the role a binding refers to, or the error kube-apiserver reports.
fn role_rules<'a>(store: &'a Store, binding: &Value, namespace: &str) -> Result<&'a Value, String> {
    let name = binding["roleRef"]["name"].as_str().unwrap_or("");
    let (kind, ns, shown) = match binding["roleRef"]["kind"].as_str() {
        Some("Role") => (Kind::Role, namespace, "roles"),
        _ => (Kind::ClusterRole, "", "clusterroles"),
    };
    store
        .get(&Key::new(kind, ns, name))
        .map(|role| &role["rules"])
        .ok_or_else(|| format!("{shown}.{RBAC_GROUP} {name:?} not found"))
}

/// Decides `attrs` for `user` from the bindings and roles in `store`.
pub fn authorize(store: &Store, user: &User, attrs: &Attributes) -> Decision {
    if user.in_group(MASTERS) {
        return Decision::Allow;
    }
    let request_ns = match attrs {
        Attributes::Resource { namespace, .. } => namespace.as_str(),
        Attributes::NonResource { .. } => "",
    };
    let mut errors = Vec::new();
    let mut bindings: Vec<(std::sync::Arc<Value>, String)> = store
        .list(Kind::ClusterRoleBinding, None)
        .into_iter()
        .map(|(_, b)| (b, String::new()))
        .collect();
    if !request_ns.is_empty() {
        bindings.extend(
            store
                .list(Kind::RoleBinding, Some(request_ns))
                .into_iter()
                .map(|(_, b)| (b, request_ns.to_string())),
        );
    }
    for (binding, ns) in &bindings {
        if !strings_of_objects(&binding["subjects"]).any(|s| subject_matches(s, user, ns)) {
            continue;
        }
        match role_rules(store, binding, ns) {
            Ok(rules) => {
                if rules
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|r| rule_allows(r, attrs))
                {
                    return Decision::Allow;
                }
            }
            Err(e) => errors.push(e),
        }
    }
    let reason = if errors.is_empty() {
        String::new()
    } else {
        format!("RBAC: [{}]", errors.join(", "))
    };
    Decision::Deny { reason }
}

fn strings_of_objects(v: &Value) -> impl Iterator<Item = &Value> {
    v.as_array().into_iter().flatten()
}

/// The 403 kube-apiserver answers (`responsewriters.Forbidden` + `NewForbidden`).
pub fn forbidden(user: &User, attrs: &Attributes, reason: &str) -> ApiError {
    let suffix = if reason.is_empty() {
        String::new()
    } else {
        format!(": {reason}")
    };
    match attrs {
        Attributes::NonResource { verb, path } => ApiError::forbidden(
            format!(
                "forbidden: User {:?} cannot {verb} path {path:?}{suffix}",
                user.name
            ),
            json!({}),
        ),
        Attributes::Resource {
            verb,
            group,
            resource,
            subresource,
            namespace,
            name,
        } => {
            let shown = if subresource.is_empty() {
                resource.clone()
            } else {
                format!("{resource}/{subresource}")
            };
            let scope = if namespace.is_empty() {
                "at the cluster scope".to_string()
            } else {
                format!("in the namespace {namespace:?}")
            };
            let detail = format!(
                "User {:?} cannot {verb} resource {shown:?} in API group {group:?} {scope}{suffix}",
                user.name
            );
            let qualified = if group.is_empty() {
                resource.clone()
            } else {
                format!("{resource}.{group}")
            };
            let message = if name.is_empty() {
                format!("{qualified} is forbidden: {detail}")
            } else {
                format!("{qualified} {name:?} is forbidden: {detail}")
            };
            let mut details = serde_json::Map::new();
            if !name.is_empty() {
                details.insert("name".into(), json!(name));
            }
            if !group.is_empty() {
                details.insert("group".into(), json!(group));
            }
            details.insert("kind".into(), json!(resource));
            ApiError::forbidden(message, Value::Object(details))
        }
    }
}

/// The default policy a fresh cluster has: `cluster-admin` for `system:masters`, discovery
/// and OpenAPI for every authenticated user, `/version` and health for everyone.
pub fn bootstrap_policy() -> Vec<Value> {
    let meta = |name: &str| {
        json!({"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
               "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}})
    };
    let role = |name: &str, rules: Value| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": meta(name), "rules": rules})
    };
    let binding = |name: &str, groups: &[&str]| {
        let subjects: Vec<Value> = groups
            .iter()
            .map(|g| json!({"apiGroup": RBAC_GROUP, "kind": "Group", "name": g}))
            .collect();
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": meta(name),
               "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name},
               "subjects": subjects})
    };
    let health = ["/healthz", "/livez", "/readyz", "/version", "/version/"];
    let mut discovery = vec![
        "/api",
        "/api/*",
        "/apis",
        "/apis/*",
        "/openapi",
        "/openapi/*",
    ];
    discovery.extend(health);
    vec![
        role(
            "cluster-admin",
            json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                   {"nonResourceURLs": ["*"], "verbs": ["*"]}]),
        ),
        binding("cluster-admin", &[MASTERS]),
        role(
            "system:discovery",
            json!([{"nonResourceURLs": discovery, "verbs": ["get"]}]),
        ),
        binding("system:discovery", &["system:authenticated"]),
        role(
            "system:public-info-viewer",
            json!([{"nonResourceURLs": health, "verbs": ["get"]}]),
        ),
        binding(
            "system:public-info-viewer",
            &["system:authenticated", "system:unauthenticated"],
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store_with(objects: &[(Kind, &str, Value)]) -> Store {
        let mut s = Store::new(100);
        for (kind, ns, obj) in objects {
            let name = obj["metadata"]["name"].as_str().unwrap();
            s.create(Key::new(*kind, ns, name), obj.clone()).unwrap();
        }
        s
    }

    fn res(
        verb: &'static str,
        group: &str,
        resource: &str,
        sub: &str,
        ns: &str,
        name: &str,
    ) -> Attributes {
        Attributes::Resource {
            verb,
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: ns.into(),
            name: name.into(),
        }
    }

    fn sa() -> User {
        let mut u = User::service_account("cutover", "signal-svc", "u1");
        u.groups.push("system:authenticated".into());
        u
    }

    fn policy() -> Store {
        let sa_subject =
            json!([{"kind": "ServiceAccount", "name": "signal-svc", "namespace": "cutover"}]);
        store_with(&[
            (
                Kind::ClusterRole,
                "",
                json!({"metadata": {"name": "nodes"}, "rules": [
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]},
                {"apiGroups": [""], "resources": ["*/status"], "verbs": ["get"]}]}),
            ),
            (
                Kind::ClusterRoleBinding,
                "",
                json!({"metadata": {"name": "nodes"},
                "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": "nodes"},
                "subjects": sa_subject}),
            ),
            (
                Kind::Role,
                "cutover",
                json!({"metadata": {"name": "lease", "namespace": "cutover"}, "rules": [
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["mine"], "verbs": ["get", "update"]}]}),
            ),
            (
                Kind::RoleBinding,
                "cutover",
                json!({"metadata": {"name": "lease", "namespace": "cutover"},
                "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": "lease"},
                "subjects": [{"kind": "ServiceAccount", "name": "signal-svc"}]}),
            ),
            (
                Kind::RoleBinding,
                "other",
                json!({"metadata": {"name": "dangling", "namespace": "other"},
                "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": "missing"},
                "subjects": sa_subject}),
            ),
        ])
    }

    #[test]
    fn rules_verbs_subresources_names_and_scopes() {
        let s = policy();
        let u = sa();
        let allow = |a: Attributes| authorize(&s, &u, &a) == Decision::Allow;
        assert!(allow(res("patch", "", "nodes", "", "", "n1")));
        assert!(!allow(res("delete", "", "nodes", "", "", "n1")));
        assert!(!allow(res("patch", "", "nodes", "status", "", "n1")));
        assert!(allow(res("get", "", "nodes", "status", "", "n1")));
        assert!(!allow(res("get", "apps", "nodes", "", "", "n1")));
        assert!(allow(res(
            "create",
            "coordination.k8s.io",
            "leases",
            "",
            "cutover",
            ""
        )));
        assert!(allow(res(
            "update",
            "coordination.k8s.io",
            "leases",
            "",
            "cutover",
            "mine"
        )));
        assert!(!allow(res(
            "update",
            "coordination.k8s.io",
            "leases",
            "",
            "cutover",
            "theirs"
        )));
        assert!(!allow(res(
            "list",
            "coordination.k8s.io",
            "leases",
            "",
            "cutover",
            ""
        )));
        // The RoleBinding grants only in its own namespace.
        assert!(!allow(res(
            "create",
            "coordination.k8s.io",
            "leases",
            "",
            "default",
            ""
        )));
        // A binding to a missing role is reported in the reason.
        assert_eq!(
            authorize(&s, &u, &res("get", "", "pods", "", "other", "p")),
            Decision::Deny {
                reason: format!("RBAC: [clusterroles.{RBAC_GROUP} \"missing\" not found]")
            }
        );
        let mut admin = User::anonymous();
        admin.groups = vec![MASTERS.into()];
        assert_eq!(
            authorize(&s, &admin, &res("delete", "x", "y", "", "", "z")),
            Decision::Allow
        );
    }

    #[test]
    fn bootstrap_policy_grants_discovery_to_authenticated_users_only() {
        let mut s = Store::new(100);
        for o in bootstrap_policy() {
            let kind = if o["kind"] == "ClusterRole" {
                Kind::ClusterRole
            } else {
                Kind::ClusterRoleBinding
            };
            s.create(
                Key::new(kind, "", o["metadata"]["name"].as_str().unwrap()),
                o,
            )
            .unwrap();
        }
        let path = |p: &str| Attributes::NonResource {
            verb: "get",
            path: p.into(),
        };
        assert_eq!(
            authorize(&s, &sa(), &path("/openapi/v3/api/v1")),
            Decision::Allow
        );
        assert_eq!(
            authorize(&s, &User::anonymous(), &path("/version")),
            Decision::Allow
        );
        assert!(matches!(
            authorize(&s, &User::anonymous(), &path("/api")),
            Decision::Deny { .. }
        ));
    }

    #[test]
    fn forbidden_bodies() {
        let e = forbidden(&sa(), &res("patch", "", "nodes", "", "", "aks-1"), "");
        assert_eq!(
            e.to_status(),
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "nodes \"aks-1\" is forbidden: User \"system:serviceaccount:cutover:signal-svc\" cannot patch resource \"nodes\" in API group \"\" at the cluster scope",
                "reason": "Forbidden", "details": {"name": "aks-1", "kind": "nodes"}, "code": 403})
        );
        let e = forbidden(
            &sa(),
            &res("list", "coordination.k8s.io", "leases", "", "cutover", ""),
            "",
        );
        assert_eq!(
            e.message,
            "leases.coordination.k8s.io is forbidden: User \"system:serviceaccount:cutover:signal-svc\" cannot list resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"cutover\""
        );
        let e = forbidden(
            &User::anonymous(),
            &Attributes::NonResource {
                verb: "get",
                path: "/api".into(),
            },
            "",
        );
        assert_eq!(
            e.message,
            "forbidden: User \"system:anonymous\" cannot get path \"/api\""
        );
    }
}
