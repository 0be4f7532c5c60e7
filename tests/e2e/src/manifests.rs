//! Renders `deploy/` overlays with the real `kubectl kustomize` and reads RBAC out of them.

use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `kubectl` on PATH; tests/run.sh installs it on a fresh machine.
pub fn kubectl() -> anyhow::Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("kubectl"))
        .find(|p| p.exists())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "kubectl not found on PATH: tests/run.sh builds it into target/tools/bin (tests/tools/build.sh)"
            )
        })
}

/// The registry the tests render `deploy/base` and the chart's defaults with (`example.com`
/// is reserved: it resolves to nobody's registry).
pub const TEST_REGISTRY: &str = "registry.example.com";

/// Every document of `kubectl kustomize deploy/<dir>`. `base` is a kustomize Component that
/// refuses to render without a registry ([`render_alone`] shows it): it is rendered as an
/// overlay with nothing but the registry [`TEST_REGISTRY`] would render it ([`render_base`]).
pub fn render(dir: &str) -> anyhow::Result<Vec<Value>> {
    if dir == "base" {
        return render_base(TEST_REGISTRY);
    }
    render_alone(dir)
}

/// `deploy/base` included by a kustomization that names only the registry, in the ConfigMap
/// `cutover-image-registry` as the overlays do.
pub fn render_base(registry: &str) -> anyhow::Result<Vec<Value>> {
    let dir = tempfile::tempdir()?;
    // kustomize takes only relative paths to components: up to `/`, then down to deploy/base.
    let here = dir.path().canonicalize()?;
    let base = repo().join("deploy/base").canonicalize()?;
    let up = "../".repeat(here.components().count() - 1);
    let down = base.strip_prefix("/")?.display().to_string();
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
             resources: [image-registry.yaml]\ncomponents: [{up}{down}]\n"
        ),
    )?;
    std::fs::write(
        dir.path().join("image-registry.yaml"),
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cutover-image-registry\n  \
             annotations: {{config.kubernetes.io/local-config: \"true\"}}\n\
             data: {{registry: \"{registry}\"}}\n"
        ),
    )?;
    kustomize(dir.path(), "deploy/base with a registry")
}

/// Every document of `kubectl kustomize deploy/<dir>`, exactly as a user would run it.
pub fn render_alone(dir: &str) -> anyhow::Result<Vec<Value>> {
    kustomize(&repo().join("deploy").join(dir), &format!("deploy/{dir}"))
}

fn kustomize(path: &Path, what: &str) -> anyhow::Result<Vec<Value>> {
    let out = Command::new(kubectl()?)
        .arg("kustomize")
        .arg(path)
        .output()?;
    if !out.status.success() {
        anyhow::bail!(
            "kubectl kustomize {what} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8(out.stdout)?;
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v = Value::deserialize(doc)?;
        if !v.is_null() {
            docs.push(v);
        }
    }
    Ok(docs)
}

/// Every key path of `original` that did not survive a typed round trip (`typed`); appended
/// to `lost`.
pub fn lost_fields(original: &Value, typed: &Value, path: &str, lost: &mut Vec<String>) {
    match (original, typed) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                let p = format!("{path}.{k}");
                match b.get(k) {
                    Some(t) => lost_fields(v, t, &p, lost),
                    None if v.is_null() => {}
                    None => lost.push(p),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                lost_fields(x, y, &format!("{path}[{i}]"), lost);
            }
        }
        _ => {}
    }
}

/// `doc` as the typed Kubernetes object `T`; a field the type does not know is an error, not a
/// silent drop.
pub fn typed<T: serde::de::DeserializeOwned + serde::Serialize>(doc: &Value) -> anyhow::Result<T> {
    let what = format!("{} {}", doc["kind"], doc["metadata"]["name"]);
    let obj: T = serde_json::from_value(doc.clone()).map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
    let mut lost = Vec::new();
    lost_fields(doc, &serde_json::to_value(&obj)?, "", &mut lost);
    if !lost.is_empty() {
        anyhow::bail!("{what} has fields its type does not know: {lost:?}");
    }
    Ok(obj)
}

/// The identity and authorization objects of rendered manifests (ServiceAccounts, Roles,
/// ClusterRoles and their bindings), as a cluster would hold them after `kubectl apply`.
pub fn rbac_objects(docs: &[Value]) -> Vec<Value> {
    const KINDS: &[&str] = &[
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    ];
    docs.iter()
        .filter(|d| d["kind"].as_str().is_some_and(|k| KINDS.contains(&k)))
        .cloned()
        .collect()
}

/// One permission: `(apiGroup, resource, verb, resourceName or "")`.
pub type Permission = (String, String, String, String);

/// The permissions the (Cluster)Roles bound to `service_account` grant.
pub fn permissions(docs: &[Value], service_account: &str) -> BTreeSet<Permission> {
    let bound: BTreeSet<(String, String)> = docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRoleBinding" || d["kind"] == "RoleBinding")
        .filter(|d| {
            d["subjects"]
                .as_array()
                .is_some_and(|s| s.iter().any(|s| s["name"] == service_account))
        })
        .map(|d| {
            (
                d["roleRef"]["kind"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                d["roleRef"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    let mut out = BTreeSet::new();
    for role in docs.iter().filter(|d| {
        bound.contains(&(
            d["kind"].as_str().unwrap_or_default().to_string(),
            d["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        ))
    }) {
        for rule in role["rules"].as_array().into_iter().flatten() {
            let strings = |key: &str| -> Vec<String> {
                rule[key]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default()
            };
            let names = strings("resourceNames");
            for group in strings("apiGroups") {
                for resource in strings("resources") {
                    for verb in strings("verbs") {
                        if names.is_empty() {
                            out.insert((
                                group.clone(),
                                resource.clone(),
                                verb.clone(),
                                String::new(),
                            ));
                        }
                        for name in &names {
                            out.insert((
                                group.clone(),
                                resource.clone(),
                                verb.clone(),
                                name.clone(),
                            ));
                        }
                    }
                }
            }
        }
    }
    out
}

/// The permission a Kubernetes API request needs, from its method and path (`None` for
/// non-resource paths such as discovery).
pub fn needed(method: &str, path_and_query: &str) -> Option<Permission> {
    let (path, query) = path_and_query
        .split_once('?')
        .unwrap_or((path_and_query, ""));
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", "v1", rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return None,
    };
    let rest = match rest {
        ["namespaces", _ns, rest @ ..] if !rest.is_empty() => rest,
        other => other,
    };
    // A subresource is its own RBAC resource (`nodes/status`).
    let (resource, name) = match rest {
        [resource] => ((*resource).to_string(), ""),
        [resource, name] => ((*resource).to_string(), *name),
        [resource, name, sub, ..] => (format!("{resource}/{sub}"), *name),
        _ => return None,
    };
    let watch = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    let verb = match (method, name.is_empty(), watch) {
        ("GET", _, true) => "watch",
        ("GET", true, false) => "list",
        ("GET", false, false) => "get",
        ("POST", _, _) => "create",
        ("PUT", _, _) => "update",
        ("PATCH", _, _) => "patch",
        ("DELETE", true, _) => "deletecollection",
        ("DELETE", false, _) => "delete",
        _ => return None,
    };
    Some((
        group.to_string(),
        resource,
        verb.to_string(),
        name.to_string(),
    ))
}

/// Whether `granted` allows `need` (a rule without resourceNames allows every name).
pub fn allows(granted: &BTreeSet<Permission>, need: &Permission) -> bool {
    let (g, r, v, n) = need;
    granted.contains(&(g.clone(), r.clone(), v.clone(), String::new()))
        || (!n.is_empty() && granted.contains(need))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(g: &str, r: &str, v: &str, n: &str) -> Permission {
        (g.into(), r.into(), v.into(), n.into())
    }

    #[test]
    fn requests_map_to_verbs() {
        assert_eq!(
            needed("GET", "/api/v1/nodes?&limit=500"),
            Some(p("", "nodes", "list", ""))
        );
        assert_eq!(
            needed("GET", "/api/v1/nodes?&watch=true&resourceVersion=5"),
            Some(p("", "nodes", "watch", ""))
        );
        assert_eq!(
            needed("PATCH", "/api/v1/nodes/a?"),
            Some(p("", "nodes", "patch", "a"))
        );
        assert_eq!(
            needed("PATCH", "/api/v1/nodes/a/status?&fieldManager=m"),
            Some(p("", "nodes/status", "patch", "a"))
        );
        assert_eq!(
            needed(
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/cutover/leases/l?"
            ),
            Some(p("coordination.k8s.io", "leases", "update", "l"))
        );
        assert_eq!(
            needed("POST", "/apis/events.k8s.io/v1/namespaces/default/events?"),
            Some(p("events.k8s.io", "events", "create", ""))
        );
        assert_eq!(needed("GET", "/version"), None);
    }

    #[test]
    fn resource_names_restrict_only_named_rules() {
        let granted: BTreeSet<Permission> =
            [p("", "nodes", "get", ""), p("x", "leases", "get", "mine")].into();
        assert!(allows(&granted, &p("", "nodes", "get", "any")));
        assert!(allows(&granted, &p("x", "leases", "get", "mine")));
        assert!(!allows(&granted, &p("x", "leases", "get", "other")));
        assert!(!allows(&granted, &p("", "nodes", "patch", "a")));
    }
}
