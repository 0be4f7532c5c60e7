//! Renders every kustomize overlay in `deploy/` with the real `kubectl kustomize`, parses each
//! document into typed Kubernetes objects (a field the type does not know fails the test), and
//! checks that the manifests agree with the binaries: every flag exists, ports and probes match
//! the listen flags, TLS and config paths are mounted, RBAC is exactly what signal-svc calls,
//! the pods are non-root and read-only, and only signal-svc and tool clients reach the gRPC port;
//! and that each container runs the image `deploy/images.sh` builds (deploy/images.conf) as the
//! image declares it: name and tag, entrypoint, user, exposed ports.

#![allow(clippy::unwrap_used)] // a test: a panic is the failure report

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, PodSpec, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

const OVERLAYS: [&str; 4] = [
    "base",
    "overlays/aks",
    "overlays/single-replica",
    "overlays/monitoring",
];

fn render(dir: &str) -> Vec<Value> {
    cutover_e2e::manifests::render(dir).unwrap()
}

fn typed<T: serde::de::DeserializeOwned + serde::Serialize>(doc: &Value) -> T {
    cutover_e2e::manifests::typed(doc).unwrap_or_else(|e| panic!("{e}"))
}

/// Parses every document of a known kind; unknown kinds must be the CRDs we expect.
fn check_types(docs: &[Value]) {
    for doc in docs {
        match doc["kind"].as_str().unwrap_or_default() {
            "Deployment" => drop(typed::<Deployment>(doc)),
            "Service" => drop(typed::<Service>(doc)),
            "ServiceAccount" => drop(typed::<k8s_openapi::api::core::v1::ServiceAccount>(doc)),
            "Namespace" => drop(typed::<k8s_openapi::api::core::v1::Namespace>(doc)),
            "ConfigMap" => drop(typed::<k8s_openapi::api::core::v1::ConfigMap>(doc)),
            "ClusterRole" => drop(typed::<ClusterRole>(doc)),
            "Role" => drop(typed::<Role>(doc)),
            "ClusterRoleBinding" => {
                drop(typed::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>(doc))
            }
            "RoleBinding" => drop(typed::<k8s_openapi::api::rbac::v1::RoleBinding>(doc)),
            "PodDisruptionBudget" => drop(
                typed::<k8s_openapi::api::policy::v1::PodDisruptionBudget>(doc),
            ),
            "NetworkPolicy" => drop(typed::<NetworkPolicy>(doc)),
            "ValidatingAdmissionPolicy" => drop(typed::<
                k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy,
            >(doc)),
            "ValidatingAdmissionPolicyBinding" => drop(typed::<
                k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding,
            >(doc)),
            "ServiceMonitor" => assert_eq!(doc["apiVersion"], "monitoring.coreos.com/v1"),
            other => panic!("unexpected kind {other} in deploy/"),
        }
    }
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
}

fn deployment(docs: &[Value], name: &str) -> Deployment {
    typed(find(docs, "Deployment", name).unwrap_or_else(|| panic!("no Deployment {name}")))
}

fn pod(d: &Deployment) -> PodSpec {
    d.spec.template.spec.clone().unwrap()
}

/// `--flag=value` arguments as a map.
fn flags(c: &Container) -> BTreeMap<String, String> {
    c.args
        .clone()
        .unwrap_or_default()
        .iter()
        .map(|a| {
            let a = a
                .strip_prefix("--")
                .unwrap_or_else(|| panic!("{a}: not a --flag"));
            let (k, v) = a.split_once('=').unwrap_or((a, ""));
            (k.to_string(), v.to_string())
        })
        .collect()
}

/// Issue 29 item 2: the actuator's rendered arguments pass its own start-up check as mutual
/// TLS (not plaintext), with allow-lists that are exact SAN identities: the client identities
/// the Secrets' certificates must carry as SANs (deploy/README.md section 4).
fn actuator_serves_mutual_tls(c: &Container, overlay: &str) {
    use actuator_svc::config::cli::{Args, Serving};
    use actuator_svc::identity::Allowed;
    let mut argv = vec!["actuator-svc".to_string()];
    argv.extend(c.args.clone().unwrap_or_default());
    let args = <Args as clap::Parser>::try_parse_from(argv)
        .unwrap_or_else(|e| panic!("{overlay}: actuator-svc refuses its arguments: {e}"));
    match args.serving() {
        Ok(Serving::Mtls { signal, tool, .. }) => {
            assert_eq!(
                signal,
                vec![Allowed::Dns("signal-svc.cutover.svc".into())],
                "{overlay}"
            );
            assert_eq!(
                tool,
                vec![Allowed::Dns("cutoverctl.cutover.svc".into())],
                "{overlay}"
            );
        }
        other => panic!("{overlay}: the actuator does not serve mutual TLS: {other:?}"),
    }
}

fn port_of(addr: &str) -> i32 {
    addr.rsplit_once(':').unwrap().1.parse().unwrap()
}

fn container_port(c: &Container, name: &str) -> i32 {
    c.ports
        .clone()
        .unwrap_or_default()
        .into_iter()
        .find(|p| p.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("container {} has no port {name}", c.name))
        .container_port
}

fn binary_help(bin: &str) -> String {
    cutover_e2e::bins::build(&[bin]).unwrap();
    let out = Command::new(cutover_e2e::bins::path(bin).unwrap())
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "{bin} --help failed");
    String::from_utf8(out.stdout).unwrap()
}

/// The container runs the image `deploy/images.sh` builds for `bin`, as that image declares
/// it (deploy/images.conf; the image test checks the built configs against the same file):
/// `cutover/<bin>:<workspace version>` under any registry, the image's entrypoint with flags
/// only, its user, and exactly its exposed ports.
fn check_image(spec: &PodSpec, c: &Container, bin: &str) {
    let images = cutover_e2e::images::specs().unwrap();
    let image = images
        .iter()
        .find(|i| i.bin == bin)
        .unwrap_or_else(|| panic!("deploy/images.conf builds no image for {bin}"));
    assert!(
        spec.containers.len() == 1 && spec.init_containers.is_none(),
        "{bin}: one container, no image besides {}",
        image.image
    );
    let reference = c.image.clone().unwrap();
    let expected = image.reference();
    assert!(
        reference.ends_with(&format!("/{expected}")),
        "{bin}: image {reference}, but deploy/images.sh builds {expected} (under a registry)"
    );
    // Never a bare name (Docker Hub's `cutover` namespace): the first part is a registry host.
    let host = reference.split('/').next().unwrap();
    assert!(
        host.contains('.') || host.contains(':') || host == "localhost",
        "{bin}: image {reference} has no registry"
    );
    assert!(
        c.command.is_none(),
        "{bin}: `command` would replace the image's entrypoint"
    );
    let sc = spec.security_context.clone().unwrap();
    let csc = c.security_context.clone().unwrap_or_default();
    let uid = csc.run_as_user.or(sc.run_as_user);
    let gid = csc.run_as_group.or(sc.run_as_group);
    assert_eq!(
        (uid, gid),
        (Some(i64::from(image.uid())), Some(i64::from(image.gid()))),
        "{bin}: runAsUser/runAsGroup vs the image's USER {}",
        image.user
    );
    let mut ports: Vec<i32> = c
        .ports
        .clone()
        .unwrap_or_default()
        .iter()
        .map(|p| {
            assert!(
                p.protocol.as_deref().is_none_or(|p| p == "TCP"),
                "{bin}: TCP ports only"
            );
            p.container_port
        })
        .collect();
    let mut exposed = image.port_numbers();
    ports.sort_unstable();
    exposed.sort_unstable();
    assert_eq!(
        ports, exposed,
        "{bin}: container ports vs the image's exposed ports"
    );
}

fn check_container(spec: &PodSpec, bin: &str, help: &str) -> BTreeMap<String, String> {
    let c = &spec.containers[0];
    check_image(spec, c, bin);
    let f = flags(c);
    for flag in f.keys() {
        assert!(
            help.contains(&format!("--{flag}")),
            "{bin}: deploy passes --{flag}, which `{bin} --help` does not list"
        );
    }
    // Admin port, probes.
    let admin = container_port(c, "admin");
    assert_eq!(
        port_of(&f["admin-listen"]),
        admin,
        "{bin}: --admin-listen vs port admin"
    );
    for (probe, path) in [(&c.liveness_probe, "/live"), (&c.readiness_probe, "/ready")] {
        let http = probe.clone().unwrap().http_get.unwrap();
        assert_eq!(http.path.as_deref(), Some(path), "{bin} probe path");
        let port = match http.port {
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => s,
            other => panic!("{bin}: probe port should be named, got {other:?}"),
        };
        assert_eq!(port, "admin", "{bin}: probes must use the admin port");
    }
    // Non-root, read-only, no privileges.
    let pod_sc = spec.security_context.clone().unwrap();
    assert_eq!(pod_sc.run_as_non_root, Some(true), "{bin}: runAsNonRoot");
    let sc = c.security_context.clone().unwrap();
    assert_eq!(
        sc.read_only_root_filesystem,
        Some(true),
        "{bin}: readOnlyRootFilesystem"
    );
    assert_eq!(
        sc.allow_privilege_escalation,
        Some(false),
        "{bin}: allowPrivilegeEscalation"
    );
    assert_eq!(
        sc.capabilities.unwrap().drop,
        Some(vec!["ALL".to_string()]),
        "{bin}: drop ALL capabilities"
    );
    // Every file flag points into a mounted volume.
    let mounts: Vec<String> = c
        .volume_mounts
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|m| m.mount_path)
        .collect();
    for (flag, value) in &f {
        if value.starts_with('/') {
            assert!(
                mounts.iter().any(|m| value.starts_with(m.as_str())),
                "{bin}: --{flag}={value} is not under a mounted volume ({mounts:?})"
            );
        }
    }
    let requests = c.resources.clone().unwrap().requests.unwrap();
    assert!(
        requests.contains_key("cpu") && requests.contains_key("memory"),
        "{bin}: requests"
    );
    f
}

fn rules(rules: &Option<Vec<PolicyRule>>) -> BTreeSet<(String, String, String, String)> {
    let mut out = BTreeSet::new();
    for r in rules.clone().unwrap_or_default() {
        for g in r.api_groups.clone().unwrap_or_default() {
            for res in r.resources.clone().unwrap_or_default() {
                for v in &r.verbs {
                    let names = r.resource_names.clone().unwrap_or_default().join(",");
                    out.insert((g.clone(), res.clone(), v.clone(), names));
                }
            }
        }
    }
    out
}

fn set(items: &[(&str, &str, &str, &str)]) -> BTreeSet<(String, String, String, String)> {
    items
        .iter()
        .map(|(a, b, c, d)| (a.to_string(), b.to_string(), c.to_string(), d.to_string()))
        .collect()
}

/// What signal-svc calls (see signal-svc's watch, taint, gate, leader and results modules; the
/// whole-system test `rbac_matches_calls` checks the same set against the request log).
/// Every event it reads or writes is in namespace `default` ([`SIGNAL_EVENT_RULES`], a Role
/// there): PreemptScheduled is watched there only (watch.rs `EVENTS_NAMESPACE`).
pub const SIGNAL_CLUSTER_RULES: [(&str, &str, &str, &str); 5] = [
    ("", "nodes", "get", ""),
    ("", "nodes", "list", ""),
    ("", "nodes", "watch", ""),
    ("", "nodes", "patch", ""),
    ("", "nodes/status", "patch", ""),
];

/// The Role `cutover-signal-svc-events` in namespace `default`, where a Node's events go.
pub const SIGNAL_EVENT_RULES: [(&str, &str, &str, &str); 4] = [
    ("events.k8s.io", "events", "create", ""),
    ("events.k8s.io", "events", "patch", ""),
    ("", "events", "list", ""),
    ("", "events", "watch", ""),
];

/// deploy/base refuses to render without a registry (a bare `cutover/...` would come from
/// Docker Hub), and an overlay's `cutover-image-registry` goes in front of every image.
#[test]
fn base_renders_only_with_a_registry() {
    let err = cutover_e2e::manifests::render_alone("base")
        .expect_err("deploy/base must not render without a registry")
        .to_string();
    assert!(
        err.contains("cutover-image-registry") && err.contains("data.registry"),
        "{err}"
    );
    let docs = cutover_e2e::manifests::render_base("registry.example.net:5000/team").unwrap();
    for bin in ["signal-svc", "actuator-svc"] {
        let c = &pod(&deployment(&docs, bin)).containers[0];
        assert_eq!(
            c.image.as_deref(),
            Some(
                format!(
                    "registry.example.net:5000/team/cutover/{bin}:{}",
                    cutover_e2e::images::version()
                )
                .as_str()
            )
        );
    }
    assert!(
        !docs
            .iter()
            .any(|d| d["metadata"]["name"] == "cutover-image-registry"),
        "the registry ConfigMap is local-config, never applied"
    );
    for overlay in ["overlays/aks", "overlays/single-replica"] {
        let docs = render(overlay);
        let c = &pod(&deployment(&docs, "signal-svc")).containers[0];
        assert_eq!(
            c.image.as_deref(),
            Some(
                format!(
                    "myregistry.azurecr.io/cutover/signal-svc:{}",
                    cutover_e2e::images::version()
                )
                .as_str()
            ),
            "{overlay}"
        );
    }
}

#[test]
fn every_overlay_renders_into_typed_objects_that_agree_with_the_binaries() {
    let signal_help = binary_help("signal-svc");
    let actuator_help = binary_help("actuator-svc");
    for overlay in OVERLAYS {
        let docs = render(overlay);
        check_types(&docs);

        let signal = deployment(&docs, "signal-svc");
        let actuator = deployment(&docs, "actuator-svc");
        let sf = check_container(&pod(&signal), "signal-svc", &signal_help);
        let af = check_container(&pod(&actuator), "actuator-svc", &actuator_help);

        // gRPC: the actuator listens where its container port and Service say, and
        // signal-svc dials that Service port.
        let ac = &pod(&actuator).containers[0];
        assert_eq!(
            port_of(&af["grpc-listen"]),
            container_port(ac, "grpc"),
            "{overlay}"
        );
        let svc: Service = typed(find(&docs, "Service", "actuator-svc").unwrap());
        let svc_spec = svc.spec.unwrap();
        assert_eq!(
            svc_spec.cluster_ip.as_deref(),
            Some("None"),
            "{overlay}: headless"
        );
        let svc_port = svc_spec.ports.unwrap()[0].port;
        assert_eq!(port_of(&sf["actuator-service"]), svc_port, "{overlay}");
        assert!(
            sf.contains_key("tls-cert") && af.contains_key("tls-client-ca"),
            "{overlay}: mTLS"
        );
        assert!(af.contains_key("signal-clients") && af.contains_key("tool-clients"));
        actuator_serves_mutual_tls(&pod(&actuator).containers[0], overlay);
        for c in [&pod(&signal).containers[0], &pod(&actuator).containers[0]] {
            assert!(
                !flags(c).contains_key("insecure-plaintext"),
                "{overlay}: plaintext in a deployment"
            );
        }

        // Replicas: a leader and a standby; several actuators in production.
        let replicas = |d: &Deployment| d.spec.replicas.unwrap_or(1);
        if overlay == "overlays/single-replica" {
            assert_eq!((replicas(&signal), replicas(&actuator)), (1, 1));
            assert!(!docs.iter().any(|d| d["kind"] == "PodDisruptionBudget"));
        } else {
            assert_eq!(replicas(&signal), 2, "{overlay}: signal-svc replicas");
            assert!(replicas(&actuator) >= 2, "{overlay}: actuator-svc replicas");
        }

        // RBAC: exactly the calls signal-svc makes, leases only in its namespace and by name.
        let cr: ClusterRole = typed(find(&docs, "ClusterRole", "cutover-signal-svc").unwrap());
        assert_eq!(
            rules(&cr.rules),
            set(&SIGNAL_CLUSTER_RULES),
            "{overlay}: ClusterRole"
        );
        let events: Role = typed(find(&docs, "Role", "cutover-signal-svc-events").unwrap());
        assert_eq!(events.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(
            rules(&events.rules),
            set(&SIGNAL_EVENT_RULES),
            "{overlay}: events Role"
        );
        let binding = find(&docs, "RoleBinding", "cutover-signal-svc-events").unwrap();
        assert_eq!(binding["metadata"]["namespace"], "default");
        assert_eq!(
            binding["subjects"],
            serde_json::json!([{"kind": "ServiceAccount", "name": "signal-svc", "namespace": "cutover"}])
        );
        // signal-svc's Node writes narrowed to its own fields (tests/kube-real node_policy.rs).
        let policy = find(
            &docs,
            "ValidatingAdmissionPolicy",
            "cutover-signal-svc-node-writes",
        )
        .expect("the node-write policy");
        assert!(
            policy["spec"]["matchConditions"][0]["expression"]
                .as_str()
                .unwrap()
                .contains("'system:serviceaccount:cutover:signal-svc'")
        );
        assert_eq!(
            find(
                &docs,
                "ValidatingAdmissionPolicyBinding",
                "cutover-signal-svc-node-writes"
            )
            .expect("its binding")["spec"]["validationActions"],
            serde_json::json!(["Deny"])
        );
        let role: Role = typed(find(&docs, "Role", "cutover-signal-svc-lease").unwrap());
        assert_eq!(role.metadata.namespace.as_deref(), Some("cutover"));
        assert_eq!(
            rules(&role.rules),
            set(&[
                ("coordination.k8s.io", "leases", "create", ""),
                ("coordination.k8s.io", "leases", "get", "cutover-signal-svc"),
                (
                    "coordination.k8s.io",
                    "leases",
                    "update",
                    "cutover-signal-svc"
                ),
            ]),
            "{overlay}: Role"
        );
        assert_eq!(
            sf.get("lease-name")
                .map(String::as_str)
                .unwrap_or("cutover-signal-svc"),
            "cutover-signal-svc"
        );
        assert!(
            !docs
                .iter()
                .any(|d| d["kind"] == "ClusterRoleBinding"
                    && d["subjects"][0]["name"] == "actuator-svc"),
            "actuator-svc needs no Kubernetes API access"
        );

        // Only signal-svc and labelled tool clients reach the gRPC port.
        let np: NetworkPolicy = typed(find(&docs, "NetworkPolicy", "actuator-svc").unwrap());
        let ingress = np.spec.unwrap().ingress.unwrap();
        let grpc_rule = ingress
            .iter()
            .find(|r| {
                r.ports.clone().unwrap_or_default().iter().any(|p| {
                    p.port
                        == Some(
                            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(
                                svc_port,
                            ),
                        )
                })
            })
            .expect("a rule for the gRPC port");
        let from = grpc_rule
            .from
            .clone()
            .expect("gRPC ingress must name its peers");
        let labels: Vec<_> = from
            .iter()
            .filter_map(|p| p.pod_selector.clone()?.match_labels)
            .collect();
        assert_eq!(
            labels.len(),
            from.len(),
            "every gRPC peer is selected by pod labels"
        );
        let template_labels = signal
            .spec
            .template
            .metadata
            .clone()
            .unwrap()
            .labels
            .unwrap();
        assert!(
            labels
                .iter()
                .any(|l| l.iter().all(|(k, v)| template_labels.get(k) == Some(v))),
            "{overlay}: signal-svc pods must match a gRPC ingress peer"
        );
    }
}
