//! The Helm chart `deploy/helm/cutover`, with the real `helm` (target/tools/bin):
//!
//! - `helm lint --strict` and `helm template` for the defaults and every `ci/*-values.yaml`
//!   variant, each document parsed into its typed Kubernetes object (an unknown field fails),
//!   and the values schema refusing what it must;
//! - one source of truth: the default rendering and the aks, monitoring and single-replica
//!   variants render exactly what `kubectl kustomize` renders for deploy/base and the overlays
//!   of the same names, object by object (everything but Helm's own metadata labels; the
//!   defaults and deploy/base with the same test registry: neither renders without one);
//! - the timings signal-svc validates are values, refused at render time exactly when
//!   signal-svc's own validation refuses them, naming the values; every variant's signal-svc
//!   arguments pass that validation;
//! - what each variant's values say ends up where it must (dry-run, cert-manager, leases...);
//! - every metric the Grafana dashboard and the alerts name is registered by a service;
//! - every variant applies to a real kube-apiserver with strict server-side field validation;
//! - an install that runs: the default rendering applied to a real API server, both services
//!   started as the kubelet would start the rendered Deployments (args, env, Secret files,
//!   the ServiceAccount's token, the workload-identity webhook's variables), against arm-sim,
//!   and a taint cuts the node's entries to Down.

#![allow(clippy::unwrap_used)] // a test: a panic is the failure report

use cutover_e2e::helm::{self, NAMESPACE};
use cutover_e2e::manifests;
use k8s_openapi::api::apps::v1::Deployment;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn variant_file(name: &str) -> Option<PathBuf> {
    helm::variants()
        .unwrap()
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no variant {name}"))
        .1
}

/// The registry every rendering here names (`image.registry` has no default).
fn registry_set() -> String {
    format!("image.registry={}", manifests::TEST_REGISTRY)
}

/// The `--set` pairs a variant is rendered with: the chart's defaults need a registry (the `ci/`
/// variants name their own).
fn variant_set(variant: &str) -> Vec<String> {
    if variant == "default" {
        vec![registry_set()]
    } else {
        vec![]
    }
}

fn render(variant: &str, set: &[&str]) -> Vec<Value> {
    let file = variant_file(variant);
    let files: Vec<&Path> = file.iter().map(PathBuf::as_path).collect();
    let mut all = variant_set(variant);
    all.extend(set.iter().map(|s| s.to_string()));
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    helm::template(&files, &all).unwrap_or_else(|e| panic!("{variant}: {e}"))
}

/// The chart's defaults with a registry and `set`.
fn render_defaults(set: &[&str]) -> anyhow::Result<Vec<Value>> {
    let registry = registry_set();
    let mut all = vec![registry.as_str()];
    all.extend_from_slice(set);
    helm::template(&[], &all)
}

fn key(doc: &Value) -> (String, String) {
    (
        doc["kind"].as_str().unwrap_or_default().to_string(),
        doc["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn container<'a>(docs: &'a [Value], deployment: &str) -> &'a Value {
    &find(docs, "Deployment", deployment)["spec"]["template"]["spec"]["containers"][0]
}

fn args(docs: &[Value], deployment: &str) -> Vec<String> {
    serde_json::from_value(container(docs, deployment)["args"].clone()).unwrap()
}

/// The value of `--flag=value` in a container's arguments.
fn flag(docs: &[Value], deployment: &str, flag: &str) -> Option<String> {
    args(docs, deployment)
        .iter()
        .find_map(|a| a.strip_prefix(&format!("--{flag}=")).map(str::to_string))
}

/// Kinds whose CRDs (Prometheus Operator, cert-manager) a plain cluster does not serve.
const CRD_KINDS: [(&str, &str); 4] = [
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
    ("cert-manager.io/v1", "Certificate"),
    ("cert-manager.io/v1", "Issuer"),
];

fn is_crd_kind(doc: &Value) -> bool {
    CRD_KINDS
        .iter()
        .any(|(api, kind)| doc["apiVersion"] == *api && doc["kind"] == *kind)
}

/// Kinds the chart renders without a namespace.
fn is_cluster_scoped(doc: &Value) -> bool {
    [
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    .contains(&key(doc).0.as_str())
}

fn check_typed(doc: &Value) {
    use k8s_openapi::api::rbac::v1 as rbac;
    use k8s_openapi::api::{core::v1 as core, networking::v1 as net, policy::v1 as policy};
    let r = match doc["kind"].as_str().unwrap_or_default() {
        "Deployment" => manifests::typed::<Deployment>(doc).map(drop),
        "Service" => manifests::typed::<core::Service>(doc).map(drop),
        "ServiceAccount" => manifests::typed::<core::ServiceAccount>(doc).map(drop),
        "Secret" => manifests::typed::<core::Secret>(doc).map(drop),
        "ConfigMap" => manifests::typed::<core::ConfigMap>(doc).map(drop),
        "ClusterRole" => manifests::typed::<rbac::ClusterRole>(doc).map(drop),
        "ClusterRoleBinding" => manifests::typed::<rbac::ClusterRoleBinding>(doc).map(drop),
        "Role" => manifests::typed::<rbac::Role>(doc).map(drop),
        "RoleBinding" => manifests::typed::<rbac::RoleBinding>(doc).map(drop),
        "PodDisruptionBudget" => manifests::typed::<policy::PodDisruptionBudget>(doc).map(drop),
        "NetworkPolicy" => manifests::typed::<net::NetworkPolicy>(doc).map(drop),
        "ValidatingAdmissionPolicy" => manifests::typed::<
            k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy,
        >(doc)
        .map(drop),
        "ValidatingAdmissionPolicyBinding" => manifests::typed::<
            k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding,
        >(doc)
        .map(drop),
        _ if is_crd_kind(doc) => Ok(()),
        other => panic!("unexpected kind {other} in the chart"),
    };
    r.unwrap();
}

#[test]
fn chart_lints_and_every_variant_renders_typed_objects() {
    let variants = helm::variants().unwrap();
    let names: Vec<&str> = variants.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "default",
            "aks",
            "cert-manager",
            "dry-run",
            "monitoring",
            "single-replica"
        ],
        "the variants the chart's README documents"
    );
    for (name, file) in &variants {
        let files: Vec<&Path> = file.iter().map(PathBuf::as_path).collect();
        let set = variant_set(name);
        let set: Vec<&str> = set.iter().map(String::as_str).collect();
        helm::lint(&files, &set).unwrap_or_else(|e| panic!("{name}: {e}"));
        let docs = helm::template(&files, &set).unwrap();
        assert!(docs.len() >= 11, "{name}: {} objects", docs.len());
        signal_svc_accepts(&docs).unwrap_or_else(|e| panic!("{name}: signal-svc refuses: {e}"));
        actuator_serves_mutual_tls(&docs).unwrap_or_else(|e| panic!("{name}: {e}"));
        for doc in &docs {
            check_typed(doc);
            let labels = &doc["metadata"]["labels"];
            assert_eq!(
                labels["app.kubernetes.io/part-of"],
                "cutover",
                "{name}: {:?}",
                key(doc)
            );
            assert_eq!(labels["app.kubernetes.io/managed-by"], "Helm");
            let cluster_scoped = is_cluster_scoped(doc);
            // Node events are recorded in `default` (a Node has no namespace).
            let events = key(doc).1 == "cutover-signal-svc-events";
            assert_eq!(
                doc["metadata"]["namespace"].as_str(),
                (!cluster_scoped).then_some(if events { "default" } else { NAMESPACE }),
                "{name}: {:?} namespace",
                key(doc)
            );
        }
    }

    // The schema and the templates refuse what would deploy something broken.
    let refused = |set: &[&str], needle: &str| {
        let err = render_defaults(set).expect_err(&format!("{set:?} must be refused"));
        assert!(err.to_string().contains(needle), "{set:?}: {err}");
    };
    refused(&["signal.replicas=2"], "additional properties 'replicas'");
    refused(&["logFormat=xml"], "logFormat");
    refused(&["actuator.shutdownGrace=20"], "shutdownGrace");
    refused(&["signal.extraArgs={dry-run}"], "extraArgs");
    refused(&["image.digest=latest"], "digest");
    refused(&["tls.source=vault"], "tls/source");
    refused(
        &[
            "tls.source=certManager",
            "tls.certManager.issuerRef.kind=ClusterIssuer",
        ],
        "issuerRef.name",
    );
    refused(&["tls.toolSecretName="], "toolSecretName");
    refused(&["azureJson.create=true"], "azureJson.config");
    refused(
        &["actuator.podDisruptionBudget.minAvailable=1"],
        "set minAvailable or maxUnavailable",
    );
}

/// The chart variant that renders what each kustomize directory renders.
const SAME_AS_KUSTOMIZE: [(&str, &str); 4] = [
    ("default", "base"),
    ("aks", "overlays/aks"),
    ("monitoring", "overlays/monitoring"),
    ("single-replica", "overlays/single-replica"),
];

#[test]
fn default_and_overlay_variants_render_what_kustomize_renders() {
    for (variant, dir) in SAME_AS_KUSTOMIZE {
        let chart: BTreeMap<_, _> = render(variant, &[])
            .into_iter()
            .map(|d| (key(&d), d))
            .collect();
        let kustomize: BTreeMap<_, _> = manifests::render(dir)
            .unwrap()
            .into_iter()
            .map(|d| (key(&d), d))
            .collect();
        // Helm installs into an existing namespace; the chart has alerts no overlay has.
        let only_kustomize: Vec<_> = kustomize
            .keys()
            .filter(|k| !chart.contains_key(*k))
            .collect();
        assert_eq!(
            only_kustomize,
            [&("Namespace".to_string(), NAMESPACE.to_string())],
            "{variant} vs {dir}"
        );
        let only_chart: Vec<_> = chart
            .keys()
            .filter(|k| !kustomize.contains_key(*k))
            .collect();
        let expected: Vec<(String, String)> = if variant == "monitoring" {
            vec![("PrometheusRule".into(), "cutover".into())]
        } else {
            vec![]
        };
        assert_eq!(
            only_chart,
            expected.iter().collect::<Vec<_>>(),
            "{variant} vs {dir}"
        );

        for (k, c) in &chart {
            let Some(kz) = kustomize.get(k) else { continue };
            let (mut c, mut kz) = (c.clone(), kz.clone());
            let cm = c.as_object_mut().unwrap().remove("metadata").unwrap();
            let km = kz.as_object_mut().unwrap().remove("metadata").unwrap();
            // Everything but metadata (spec, rules, subjects, data...) is identical.
            assert_eq!(
                c,
                kz,
                "{variant} vs {dir}: {k:?} differs:\nchart:     {}\nkustomize: {}",
                serde_json::to_string(&c).unwrap(),
                serde_json::to_string(&kz).unwrap()
            );
            // kustomize's schema predates ValidatingAdmissionPolicy, so it gives the policy and
            // its binding the base's namespace; the API server drops it (cluster-scoped).
            if !k.0.starts_with("ValidatingAdmissionPolicy") {
                assert_eq!(
                    cm["namespace"], km["namespace"],
                    "{variant}: {k:?} namespace"
                );
            }
            assert_eq!(
                cm["annotations"], km["annotations"],
                "{variant}: {k:?} annotations"
            );
            for (label, value) in km["labels"].as_object().into_iter().flatten() {
                assert_eq!(
                    &cm["labels"][label], value,
                    "{variant}: {k:?} label {label}"
                );
            }
        }
    }
}

/// signal-svc's own start-up validation of the rendered arguments (the TLS files and the pod
/// name, which only exist in the pod, left out: every TLS flag must be rendered, and
/// `--insecure-plaintext` stands in for them).
fn signal_svc_accepts(docs: &[Value]) -> Result<(), String> {
    let rendered = args(docs, "signal-svc");
    for tls in [
        "--tls-ca=",
        "--tls-cert=",
        "--tls-key=",
        "--tls-server-name=",
    ] {
        if !rendered.iter().any(|a| a.starts_with(tls)) {
            return Err(format!("{tls} is not rendered: signal-svc would not start"));
        }
    }
    if rendered
        .iter()
        .any(|a| a.starts_with("--insecure-plaintext"))
    {
        return Err("--insecure-plaintext is rendered".into());
    }
    let mut argv = vec![
        "signal-svc".to_string(),
        "--identity=signal-svc-0".to_string(),
        "--insecure-plaintext".to_string(),
    ];
    argv.extend(rendered.into_iter().filter(|a| !a.starts_with("--tls-")));
    <signal_svc::config::Args as clap::Parser>::try_parse_from(argv)
        .map_err(|e| e.to_string())?
        .validate()
        .map(drop)
        .map_err(|e| e.to_string())
}

/// actuator-svc's own start-up check of the rendered transport flags: mutual TLS with
/// allow-lists of exact SAN identities, never plaintext (issue 29 item 2).
fn actuator_serves_mutual_tls(docs: &[Value]) -> Result<(), String> {
    use actuator_svc::config::cli::{Args, Serving};
    let mut argv = vec!["actuator-svc".to_string()];
    argv.extend(args(docs, "actuator-svc"));
    let parsed = <Args as clap::Parser>::try_parse_from(argv).map_err(|e| e.to_string())?;
    match parsed.serving()? {
        Serving::Mtls { signal, tool, .. } if !signal.is_empty() && !tool.is_empty() => Ok(()),
        other => Err(format!("actuator-svc would serve {other:?}")),
    }
}

/// The chart value of each timing flag signal-svc validates.
const TIMING_VALUES: [(&str, &str); 6] = [
    ("lease-duration", "signal.leaderElection.leaseDuration"),
    (
        "lease-renew-deadline",
        "signal.leaderElection.renewDeadline",
    ),
    (
        "lease-renew-interval",
        "signal.leaderElection.renewInterval",
    ),
    (
        "lease-retry-interval",
        "signal.leaderElection.retryInterval",
    ),
    ("assignment-valid-for", "signal.assignmentValidFor"),
    ("actuator-keepalive", "signal.actuatorKeepalive"),
];

/// Renders the chart with these timings (empty: unset) and asks signal-svc's own validation
/// about the same flags: `(chart's error, signal-svc's error)`.
fn timings_verdicts(timings: [&str; 6]) -> (Option<String>, Option<String>) {
    let mut set = Vec::new();
    let mut argv = vec![
        "signal-svc".to_string(),
        "--cluster-name=kubernetes".to_string(),
        "--identity=signal-svc-0".to_string(),
        "--actuator-endpoints=a:1".to_string(),
        "--insecure-plaintext".to_string(),
    ];
    for ((flag, value), t) in TIMING_VALUES.iter().zip(timings) {
        if !t.is_empty() {
            set.push(format!("{value}={t}"));
            argv.push(format!("--{flag}={t}"));
        }
    }
    let set: Vec<&str> = set.iter().map(String::as_str).collect();
    let chart = render_defaults(&set).err().map(|e| e.to_string());
    let binary = <signal_svc::config::Args as clap::Parser>::try_parse_from(argv)
        .map_err(|e| e.to_string())
        .and_then(|a| a.validate().map_err(|e| e.to_string()))
        .err();
    (chart, binary)
}

/// The chart refuses at render time exactly the timings signal-svc refuses at start, and names
/// the value of every flag signal-svc's message names: each relation at and past its edge, then
/// a deterministic sample of combinations.
#[test]
fn chart_refuses_the_timings_signal_svc_refuses_naming_the_values() {
    let mut cases: Vec<[&str; 6]> = vec![
        ["", "", "", "", "", ""],
        // The renew deadline at least 200ms below the lease duration.
        ["3s", "", "", "", "", ""],
        ["3s", "2800ms", "", "", "", ""],
        ["3s", "2801ms", "", "", "", ""],
        ["3s", "0s", "", "", "", ""],
        // The lease duration at least 1s.
        ["999ms", "500ms", "200ms", "", "", ""],
        // The renew interval at most half of the renew deadline.
        ["", "", "1500ms", "", "", ""],
        ["", "", "1501ms", "", "", ""],
        ["", "2s", "1.1s", "", "", ""],
        // The retry interval at most the lease duration.
        ["", "", "", "4s", "", ""],
        ["", "", "", "4.001s", "", ""],
        // The assignment validity within 300ms..60s.
        ["", "", "", "", "60s", ""],
        ["", "", "", "", "61s", ""],
        ["", "", "", "", "1m", ""],
        ["", "", "", "", "299ms", "100ms"],
        // Two keepalive rounds within one grant.
        ["", "", "", "", "", "1499ms"],
        ["", "", "", "", "", "1.5s"],
        ["", "", "", "", "2s", "1s"],
        ["", "", "", "", "10s", "99ms"],
    ];
    let pick: [&[&str]; 6] = [
        &["", "900ms", "1s", "3s", "4s", "10s"],
        &["", "800ms", "2s", "2800ms", "3s", "9s"],
        &["", "250ms", "400ms", "1s", "1.5s"],
        &["", "250ms", "1s", "3.5s", "5s"],
        &["", "300ms", "2s", "3s", "30s", "61s"],
        &["", "100ms", "500ms", "1s", "1.5s", "10s"],
    ];
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for _ in 0..40 {
        let mut c = [""; 6];
        for (i, options) in pick.iter().enumerate() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            c[i] = options[(x % options.len() as u64) as usize];
        }
        cases.push(c);
    }
    let (mut accepted, mut refused) = (0, 0);
    for c in &cases {
        let (chart, binary) = timings_verdicts(*c);
        match (&chart, &binary) {
            (None, None) => accepted += 1,
            (Some(chart), Some(binary)) => {
                refused += 1;
                // Every flag signal-svc names, the chart names as its value.
                let mut named = 0;
                for (flag, value) in TIMING_VALUES {
                    if binary.contains(&format!("--{flag}")) {
                        named += 1;
                        assert!(
                            chart.contains(value),
                            "{c:?}: signal-svc names --{flag} ({binary}), the chart not {value}: {chart}"
                        );
                    }
                }
                assert!(named > 0, "{c:?}: {binary}");
            }
            _ => panic!("{c:?}: the chart says {chart:?}, signal-svc says {binary:?}"),
        }
    }
    assert!(
        accepted >= 5 && refused >= 15,
        "{accepted} accepted, {refused} refused"
    );
    // Each relation's message names both values (and the default of an empty one).
    let refusal = |set: &[&str]| render_defaults(set).unwrap_err().to_string();
    for (set, names) in [
        (
            &["signal.leaderElection.leaseDuration=3s"][..],
            &[
                "signal.leaderElection.renewDeadline (empty: signal-svc's 3s)",
                "signal.leaderElection.leaseDuration (3s)",
            ][..],
        ),
        (
            &["signal.leaderElection.renewInterval=2s"],
            &[
                "signal.leaderElection.renewInterval (2s)",
                "signal.leaderElection.renewDeadline",
            ],
        ),
        (
            &["signal.leaderElection.retryInterval=5s"],
            &[
                "signal.leaderElection.retryInterval (5s)",
                "signal.leaderElection.leaseDuration",
            ],
        ),
        (
            &[
                "signal.assignmentValidFor=2s",
                "signal.actuatorKeepalive=1s",
            ],
            &[
                "signal.actuatorKeepalive (1s)",
                "signal.assignmentValidFor (2s)",
            ],
        ),
        (
            &["signal.assignmentValidFor=90s"],
            &["signal.assignmentValidFor (90s)", "actuator-svc"],
        ),
    ] {
        let err = refusal(set);
        for n in names {
            assert!(err.contains(n), "{set:?}: {err} does not name {n}");
        }
    }
}

/// No default registry: the chart's defaults refuse to render, naming `image.registry`.
#[test]
fn chart_refuses_to_render_without_a_registry() {
    let err = helm::template(&[], &[]).unwrap_err().to_string();
    assert!(
        err.contains("image.registry is required") && err.contains("Docker Hub"),
        "{err}"
    );
    let docs = render_defaults(&["image.registry=registry.example.net:5000/team/"]).unwrap();
    assert_eq!(
        container(&docs, "signal-svc")["image"],
        format!(
            "registry.example.net:5000/team/cutover/signal-svc:{}",
            cutover_e2e::images::version()
        )
    );
}

/// Each new value ends up where it says, and the chart works as a subchart (`global`).
#[test]
fn extra_values_render_where_they_say() {
    // Defaults: none of them adds anything.
    let docs = render("default", &[]);
    for d in ["signal-svc", "actuator-svc"] {
        let env = container(&docs, d)["env"].to_string();
        assert!(!env.contains("RUST_LOG"), "{d}: {env}");
    }
    assert_eq!(
        flag(&docs, "signal-svc", "actuator-service").as_deref(),
        Some("actuator-svc.cutover.svc.cluster.local:9443")
    );
    for f in [
        "lease-renew-deadline",
        "assignment-valid-for",
        "actuator-keepalive",
    ] {
        assert_eq!(flag(&docs, "signal-svc", f), None, "{f}");
    }

    let values = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        values.path(),
        serde_json::to_vec(&serde_json::json!({
            "logLevel": "debug,hyper=info",
            "clusterDomain": "corp.example",
            "signal": {
                "leaderElection": {"leaseDuration": "6s", "renewDeadline": "5s",
                    "renewInterval": "2s", "retryInterval": "1s"},
                "assignmentValidFor": "5s",
                "actuatorKeepalive": "2s",
                "podLabels": {"team": "net"},
                "serviceAccount": {"name": "cutover-signal",
                    "annotations": {"example.com/owner": "net"}},
                "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
                "extraVolumes": [{"name": "scratch", "emptyDir": {}}],
                "extraVolumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                "extraArgs": ["--lease-name=override", "--resync-interval=2m"],
            },
            "actuator": {
                "podLabels": {"team": "net"},
                "serviceAccount": {"name": "cutover-actuator",
                    "annotations": {"example.com/owner": "net"}},
                "extraEnv": [{"name": "SSL_CERT_DIR", "value": "/etc/extra-ca"}],
                "extraVolumes": [{"name": "extra-ca", "configMap": {"name": "corp-ca"}}],
                "extraVolumeMounts": [{"name": "extra-ca", "mountPath": "/etc/extra-ca",
                    "readOnly": true}],
                "extraArgs": ["--azure-ca-file=/etc/extra-ca/ca.pem"],
            },
        }))
        .unwrap(),
    )
    .unwrap();
    let docs = helm::template(&[values.path()], &[&registry_set()]).unwrap();
    for doc in &docs {
        check_typed(doc);
    }
    // The timings, as flags signal-svc accepts.
    for (f, v) in [
        ("lease-duration", "6s"),
        ("lease-renew-deadline", "5s"),
        ("lease-renew-interval", "2s"),
        ("lease-retry-interval", "1s"),
        ("assignment-valid-for", "5s"),
        ("actuator-keepalive", "2s"),
    ] {
        assert_eq!(flag(&docs, "signal-svc", f).as_deref(), Some(v), "{f}");
    }
    signal_svc_accepts(&docs).unwrap();
    // extraArgs come last, and a repeated flag's last value is the one signal-svc takes.
    let a = args(&docs, "signal-svc");
    assert_eq!(a.last().map(String::as_str), Some("--resync-interval=2m"));
    assert!(a.contains(&"--lease-name=cutover-signal-svc".to_string()));
    let parsed = <signal_svc::config::Args as clap::Parser>::try_parse_from(
        std::iter::once("signal-svc".to_string()).chain(a),
    )
    .unwrap();
    assert_eq!(parsed.lease.lease_name, "override");
    // logLevel: RUST_LOG on both; clusterDomain in the actuators' Service name.
    for d in ["signal-svc", "actuator-svc"] {
        let env = container(&docs, d)["env"].as_array().unwrap().clone();
        assert!(
            env.contains(&serde_json::json!({"name": "RUST_LOG", "value": "debug,hyper=info"})),
            "{d}: {env:?}"
        );
        let pod = &find(&docs, "Deployment", d)["spec"]["template"];
        assert_eq!(pod["metadata"]["labels"]["team"], "net", "{d}");
        assert_eq!(
            pod["metadata"]["labels"]["app.kubernetes.io/name"], d,
            "{d}: the selector's label stays"
        );
    }
    assert_eq!(
        flag(&docs, "signal-svc", "actuator-service").as_deref(),
        Some("actuator-svc.cutover.svc.corp.example:9443")
    );
    // extraEnv, extraVolumes, extraVolumeMounts, after the chart's own.
    let env = container(&docs, "signal-svc")["env"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(
        env.last().unwrap(),
        &serde_json::json!({"name": "HTTPS_PROXY", "value": "http://proxy:3128"})
    );
    let mounts = container(&docs, "actuator-svc")["volumeMounts"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(mounts.len(), 3);
    assert_eq!(mounts[2]["mountPath"], "/etc/extra-ca");
    let volumes = pod_spec(&docs, "actuator-svc")["volumes"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(volumes.last().unwrap()["configMap"]["name"], "corp-ca");
    assert_eq!(
        pod_spec(&docs, "signal-svc")["volumes"].as_array().unwrap()[1]["name"],
        "scratch"
    );
    // ServiceAccounts: names and annotations; the pods and the RBAC bindings follow the name;
    // workload identity's annotation stays.
    for (d, sa) in [
        ("signal-svc", "cutover-signal"),
        ("actuator-svc", "cutover-actuator"),
    ] {
        assert_eq!(pod_spec(&docs, d)["serviceAccountName"], sa);
        let account = find(&docs, "ServiceAccount", sa);
        assert_eq!(
            account["metadata"]["annotations"]["example.com/owner"],
            "net"
        );
    }
    assert_eq!(
        find(&docs, "ServiceAccount", "cutover-actuator")["metadata"]["annotations"]["azure.workload.identity/client-id"],
        "00000000-0000-0000-0000-000000000000"
    );
    assert!(
        !docs
            .iter()
            .any(|d| d["kind"] == "ServiceAccount" && d["metadata"]["name"] == "signal-svc")
    );
    for (kind, name) in [
        ("ClusterRoleBinding", "cutover-signal-svc"),
        ("RoleBinding", "cutover-signal-svc-lease"),
        ("RoleBinding", "cutover-signal-svc-events"),
    ] {
        assert_eq!(
            find(&docs, kind, name)["subjects"],
            serde_json::json!([{"kind": "ServiceAccount", "name": "cutover-signal",
                "namespace": NAMESPACE}]),
            "{kind}"
        );
    }
    // The node-write policy matches the renamed ServiceAccount.
    assert_eq!(
        find(
            &docs,
            "ValidatingAdmissionPolicy",
            "cutover-signal-svc-node-writes"
        )["spec"]["matchConditions"][0]["expression"],
        format!("request.userInfo.username == 'system:serviceaccount:{NAMESPACE}:cutover-signal'")
    );

    // As a subchart: the parent's `global` values reach it (the schema must accept them).
    let parent = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(parent.path().join("charts")).unwrap();
    let status = std::process::Command::new("cp")
        .arg("-r")
        .arg(helm::chart())
        .arg(parent.path().join("charts/cutover"))
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::write(
        parent.path().join("Chart.yaml"),
        "apiVersion: v2
name: platform
version: 1.0.0
",
    )
    .unwrap();
    std::fs::write(
        parent.path().join("values.yaml"),
        format!(
            "global:
  environment: prod
cutover:
  image:
    registry: {}
",
            manifests::TEST_REGISTRY
        ),
    )
    .unwrap();
    let docs = helm::template_chart(parent.path(), &[], &[]).unwrap();
    assert!(
        container(&docs, "signal-svc")["image"]
            .as_str()
            .unwrap()
            .starts_with(manifests::TEST_REGISTRY)
    );
}

fn pod_spec<'a>(docs: &'a [Value], deployment: &str) -> &'a Value {
    &find(docs, "Deployment", deployment)["spec"]["template"]["spec"]
}

#[test]
fn variants_do_what_their_values_say() {
    // Defaults: signal-svc off Spot pools, spread over zones and hosts, not tolerating Spot.
    let docs = render("default", &[]);
    let signal = pod_spec(&docs, "signal-svc");
    let terms = &signal["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"];
    assert_eq!(terms.as_array().unwrap().len(), 1);
    assert_eq!(
        terms[0]["matchExpressions"],
        serde_json::json!([{"key": "kubernetes.azure.com/scalesetpriority", "operator": "NotIn", "values": ["spot"]}])
    );
    let spread: BTreeSet<&str> = signal["topologySpreadConstraints"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["topologyKey"].as_str())
        .collect();
    assert!(spread.contains("topology.kubernetes.io/zone"), "{spread:?}");
    assert!(
        !signal["tolerations"]
            .to_string()
            .contains("scalesetpriority")
    );
    assert_eq!(
        flag(&docs, "signal-svc", "lease-name").as_deref(),
        Some("cutover-signal-svc")
    );
    assert!(!args(&docs, "signal-svc").contains(&"--dry-run".to_string()));
    let rule = find(&render("monitoring", &[]), "PrometheusRule", "cutover").clone();
    let alerts: BTreeSet<String> = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["alert"].as_str().unwrap().to_string())
        .collect();
    assert!(alerts.contains("CutoverNoLeader"));

    // dry-run: both services change nothing; no leader alert (no Lease is taken).
    let docs = render("dry-run", &[]);
    for d in ["signal-svc", "actuator-svc"] {
        assert!(args(&docs, d).contains(&"--dry-run".to_string()), "{d}");
        assert_eq!(flag(&docs, d, "log-format").as_deref(), Some("plain"));
    }
    assert!(!docs.iter().any(|d| d["kind"] == "NetworkPolicy"));
    let rule = find(&docs, "PrometheusRule", "cutover");
    assert!(!rule.to_string().contains("CutoverNoLeader"));

    // cert-manager: Certificates write the Secrets the pods mount, for the identities the
    // services check; the chart's azure.json Secret is the one mounted; leader election tuned.
    let docs = render("cert-manager", &[]);
    let tls_secret = |d: &str| {
        pod_spec(&docs, d)["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "tls")
            .unwrap()["secret"]["secretName"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let cert = |secret: &str| {
        docs.iter()
            .find(|d| d["kind"] == "Certificate" && d["spec"]["secretName"] == secret)
            .unwrap_or_else(|| panic!("no Certificate writes {secret}"))
            .clone()
    };
    let actuator_cert = cert(&tls_secret("actuator-svc"));
    let signal_cert = cert(&tls_secret("signal-svc"));
    // The serving name signal-svc verifies is a DNS SAN; the client identities the actuator
    // admits are URI SANs; no CN anywhere.
    assert_eq!(
        actuator_cert["spec"]["dnsNames"],
        serde_json::json!([flag(&docs, "signal-svc", "tls-server-name").unwrap()])
    );
    assert_eq!(
        actuator_cert["spec"]["uris"],
        serde_json::json!(["spiffe://cluster.local/ns/cutover/sa/actuator-svc"])
    );
    assert_eq!(
        signal_cert["spec"]["uris"],
        serde_json::json!([flag(&docs, "actuator-svc", "signal-clients").unwrap()])
    );
    assert_eq!(
        flag(&docs, "actuator-svc", "signal-clients").as_deref(),
        Some("spiffe://cluster.local/ns/cutover/sa/signal-svc")
    );
    assert!(signal_cert["spec"]["dnsNames"].is_null());
    assert!(
        actuator_cert["spec"]["usages"]
            .to_string()
            .contains("server auth")
    );
    assert!(
        signal_cert["spec"]["usages"]
            .to_string()
            .contains("client auth")
    );
    for c in [&actuator_cert, &signal_cert] {
        assert!(c["spec"]["commonName"].is_null(), "{c}");
        assert_eq!(c["spec"]["issuerRef"]["name"], "cutover-ca");
        assert_eq!(c["spec"]["issuerRef"]["kind"], "Issuer");
    }
    let azure_volume = pod_spec(&docs, "actuator-svc")["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "azure-json")
        .unwrap()
        .clone();
    let secret = find(
        &docs,
        "Secret",
        azure_volume["secret"]["secretName"].as_str().unwrap(),
    );
    let config: Value = {
        use base64::Engine;
        let b = base64::engine::general_purpose::STANDARD
            .decode(secret["data"]["azure.json"].as_str().unwrap())
            .unwrap();
        serde_json::from_slice(&b).unwrap()
    };
    assert_eq!(config["resourceGroup"], "MC_rg_cluster_westeurope");
    let role = find(&docs, "Role", "cutover-signal-svc-lease");
    assert_eq!(
        role["rules"][1]["resourceNames"],
        serde_json::json!(["cutover-leader"])
    );
    assert_eq!(
        flag(&docs, "signal-svc", "lease-name").as_deref(),
        Some("cutover-leader")
    );
    assert_eq!(
        flag(&docs, "signal-svc", "lease-duration").as_deref(),
        Some("3s")
    );
    assert_eq!(
        flag(&docs, "signal-svc", "lease-renew-deadline").as_deref(),
        Some("2s")
    );
    assert_eq!(
        flag(&docs, "signal-svc", "lease-renew-interval").as_deref(),
        Some("1s")
    );
    assert_eq!(
        flag(&docs, "signal-svc", "assignment-valid-for").as_deref(),
        Some("4500ms")
    );
    assert_eq!(
        flag(&docs, "signal-svc", "actuator-keepalive").as_deref(),
        Some("2s")
    );
    assert_eq!(
        flag(&docs, "signal-svc", "lease-retry-interval").as_deref(),
        Some("500ms")
    );
    assert_eq!(
        flag(&docs, "signal-svc", "extra-taint-keys").as_deref(),
        Some("karpenter.sh/disrupted,ToBeDeletedByClusterAutoscaler")
    );
    assert_eq!(
        flag(&docs, "actuator-svc", "tool-clients").as_deref(),
        Some(
            "spiffe://cluster.local/ns/cutover/sa/cutoverctl,spiffe://cluster.local/ns/cutover/sa/oncall"
        )
    );
    assert_eq!(
        flag(&docs, "actuator-svc", "max-down-share").as_deref(),
        Some("0.5")
    );
    assert_eq!(
        container(&docs, "actuator-svc")["image"],
        "myregistry.azurecr.io/cutover/actuator-svc@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    );
    let actuator_pod = &find(&docs, "Deployment", "actuator-svc")["spec"]["template"];
    assert!(actuator_pod["metadata"]["labels"]["azure.workload.identity/use"].is_null());
    assert!(find(&docs, "ServiceAccount", "actuator-svc")["metadata"]["annotations"].is_null());
    assert_eq!(
        pod_spec(&docs, "signal-svc")["nodeSelector"]["kubernetes.io/os"],
        "linux"
    );
    let pdb = find(&docs, "PodDisruptionBudget", "actuator-svc");
    assert_eq!(
        pdb["spec"],
        serde_json::json!({"minAvailable": 1, "selector": {"matchLabels": {"app.kubernetes.io/name": "actuator-svc"}}})
    );
}

/// The cert-manager objects of a rendering: (kind, name) -> document.
fn cert_manager_objects(docs: &[Value]) -> BTreeMap<(String, String), Value> {
    docs.iter()
        .filter(|d| {
            d["apiVersion"]
                .as_str()
                .is_some_and(|a| a.starts_with("cert-manager.io/"))
        })
        .map(|d| (key(d), d.clone()))
        .collect()
}

/// Issue 29 item 2: cert-manager mode mints identities only from a CA of the release's own
/// namespace unless an issuer is named (a ClusterIssuer only then), issues URI SAN identities
/// that are exactly what the services admit, and a cutoverctl client certificate.
#[test]
fn cert_manager_mode_creates_a_namespaced_ca_and_the_identities_the_services_admit() {
    let owned = |k: &str, n: &str| (k.to_string(), n.to_string());
    // Defaults of the mode: the chart's own CA, namespaced; never a ClusterIssuer.
    let docs = render_defaults(&["tls.source=certManager"]).unwrap();
    let cm = cert_manager_objects(&docs);
    assert_eq!(
        cm.keys().cloned().collect::<Vec<_>>(),
        vec![
            owned("Certificate", "actuator-svc"),
            owned("Certificate", "cutover-ca"),
            owned("Certificate", "cutoverctl"),
            owned("Certificate", "signal-svc"),
            owned("Issuer", "cutover-ca"),
            owned("Issuer", "cutover-selfsigned"),
        ]
    );
    for d in cm.values() {
        assert_eq!(d["metadata"]["namespace"], NAMESPACE, "{d}");
    }
    assert_eq!(
        cm[&owned("Issuer", "cutover-selfsigned")]["spec"],
        serde_json::json!({"selfSigned": {}})
    );
    let ca = &cm[&owned("Certificate", "cutover-ca")]["spec"];
    assert_eq!(ca["isCA"], true);
    assert_eq!(ca["issuerRef"]["name"], "cutover-selfsigned");
    assert_eq!(ca["issuerRef"]["kind"], "Issuer");
    assert_eq!(
        ca["privateKey"]["rotationPolicy"], "Never",
        "trust survives a renewal"
    );
    assert_eq!(
        cm[&owned("Issuer", "cutover-ca")]["spec"]["ca"]["secretName"],
        ca["secretName"]
    );
    let leaf = |n: &str| cm[&owned("Certificate", n)]["spec"].clone();
    for n in ["actuator-svc", "signal-svc", "cutoverctl"] {
        let spec = leaf(n);
        assert_eq!(
            spec["issuerRef"],
            serde_json::json!({"name": "cutover-ca", "kind": "Issuer", "group": "cert-manager.io"}),
            "{n}"
        );
        assert!(
            spec["commonName"].is_null(),
            "{n}: no CN, identities are SANs"
        );
        assert_eq!(spec["isCA"], Value::Null, "{n}");
    }
    // The identities are the ServiceAccounts' SPIFFE-style URIs, and the allow-lists name
    // exactly them; the serving certificate also carries the DNS name signal-svc verifies.
    let uri = |sa: &str| format!("spiffe://cluster.local/ns/{NAMESPACE}/sa/{sa}");
    assert_eq!(
        leaf("signal-svc")["uris"],
        serde_json::json!([uri("signal-svc")])
    );
    assert_eq!(
        leaf("cutoverctl")["uris"],
        serde_json::json!([uri("cutoverctl")])
    );
    assert_eq!(
        leaf("actuator-svc")["uris"],
        serde_json::json!([uri("actuator-svc")])
    );
    assert_eq!(
        flag(&docs, "actuator-svc", "signal-clients"),
        Some(uri("signal-svc"))
    );
    assert_eq!(
        flag(&docs, "actuator-svc", "tool-clients"),
        Some(uri("cutoverctl"))
    );
    assert_eq!(
        leaf("actuator-svc")["dnsNames"],
        serde_json::json!([flag(&docs, "signal-svc", "tls-server-name").unwrap()])
    );
    assert!(
        leaf("actuator-svc")["usages"]
            .to_string()
            .contains("server auth")
    );
    for n in ["signal-svc", "cutoverctl"] {
        assert!(leaf(n)["usages"].to_string().contains("client auth"), "{n}");
        assert!(leaf(n)["dnsNames"].is_null(), "{n}");
    }
    // Each Secret is the one its consumer mounts (cutoverctl's is for the operator).
    for (d, secret) in [
        ("actuator-svc", "actuator-svc-tls"),
        ("signal-svc", "signal-svc-tls"),
    ] {
        assert_eq!(leaf(d)["secretName"], secret);
        let volumes = pod_spec(&docs, d)["volumes"].to_string();
        assert!(volumes.contains(secret), "{d}: {volumes}");
    }
    assert_eq!(leaf("cutoverctl")["secretName"], "cutoverctl-tls");

    // The cluster domain and the ServiceAccount names are in the identities.
    let docs = render_defaults(&[
        "tls.source=certManager",
        "clusterDomain=corp.example",
        "signal.serviceAccount.name=cutover-signal",
        "tls.toolSecretName=ops-cutoverctl",
    ])
    .unwrap();
    let cm = cert_manager_objects(&docs);
    let spiffe = "spiffe://corp.example/ns/cutover/sa";
    assert_eq!(
        cm[&owned("Certificate", "signal-svc")]["spec"]["uris"],
        serde_json::json!([format!("{spiffe}/cutover-signal")])
    );
    assert_eq!(
        flag(&docs, "actuator-svc", "signal-clients"),
        Some(format!("{spiffe}/cutover-signal"))
    );
    assert_eq!(
        cm[&owned("Certificate", "cutoverctl")]["spec"]["secretName"],
        "ops-cutoverctl"
    );

    // A named ClusterIssuer: used for every certificate, and no CA of the chart's own.
    let docs = render_defaults(&[
        "tls.source=certManager",
        "tls.certManager.issuerRef.name=corp-ca",
        "tls.certManager.issuerRef.kind=ClusterIssuer",
    ])
    .unwrap();
    let cm = cert_manager_objects(&docs);
    assert_eq!(
        cm.keys().cloned().collect::<Vec<_>>(),
        vec![
            owned("Certificate", "actuator-svc"),
            owned("Certificate", "cutoverctl"),
            owned("Certificate", "signal-svc"),
        ]
    );
    for d in cm.values() {
        assert_eq!(d["spec"]["issuerRef"]["name"], "corp-ca");
        assert_eq!(d["spec"]["issuerRef"]["kind"], "ClusterIssuer");
    }
    // A named Issuer of the namespace; no cutoverctl certificate when not wanted; the
    // allow-lists replaced by values.
    let docs = render_defaults(&[
        "tls.source=certManager",
        "tls.certManager.issuerRef.name=team-ca",
        "tls.certManager.toolCertificate=false",
        "actuator.signalClients={spiffe://cluster.local/ns/cutover/sa/signal-svc,signal-svc.cutover.svc}",
    ])
    .unwrap();
    let cm = cert_manager_objects(&docs);
    assert!(!cm.contains_key(&owned("Certificate", "cutoverctl")));
    assert!(!cm.contains_key(&owned("Issuer", "cutover-ca")));
    assert_eq!(
        cm[&owned("Certificate", "signal-svc")]["spec"]["issuerRef"]["kind"],
        "Issuer"
    );
    assert_eq!(
        flag(&docs, "actuator-svc", "signal-clients").as_deref(),
        Some("spiffe://cluster.local/ns/cutover/sa/signal-svc,signal-svc.cutover.svc")
    );
    // A ClusterIssuer is never assumed: the kind without a name is refused.
    let err = render_defaults(&[
        "tls.source=certManager",
        "tls.certManager.issuerRef.kind=ClusterIssuer",
    ])
    .unwrap_err()
    .to_string();
    assert!(err.contains("tls.certManager.issuerRef.name"), "{err}");
    // existingSecrets (the default) renders no cert-manager object and DNS identities, as
    // deploy/base.
    let docs = render_defaults(&[]).unwrap();
    assert!(cert_manager_objects(&docs).is_empty());
    assert_eq!(
        flag(&docs, "actuator-svc", "signal-clients").as_deref(),
        Some("signal-svc.cutover.svc")
    );
    assert_eq!(
        flag(&docs, "actuator-svc", "tool-clients").as_deref(),
        Some("cutoverctl.cutover.svc")
    );
}

/// The series names a registry's text exposition can produce (`# TYPE` lines: counters get
/// `_total`, histograms `_bucket`, `_sum` and `_count`).
fn series_names(exposition: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in exposition.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut parts = rest.split_whitespace();
        let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
            continue;
        };
        match kind {
            "counter" => {
                out.insert(format!("{name}_total"));
            }
            "histogram" => {
                for s in ["_bucket", "_sum", "_count"] {
                    out.insert(format!("{name}{s}"));
                }
            }
            _ => {
                out.insert(name.to_string());
            }
        }
    }
    out
}

/// Every `cutover_*` metric name in a PromQL expression.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = expr;
    while let Some(i) = rest.find("cutover_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

/// The metric names the rendered dashboard and alerts use: `(where, name)`.
fn observed_names(docs: &[Value]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let dashboard: Value = serde_json::from_str(
        find(docs, "ConfigMap", "cutover-grafana-dashboard")["data"]["cutover.json"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    for panel in dashboard["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().into_iter().flatten() {
            for n in metric_names(t["expr"].as_str().unwrap_or_default()) {
                out.push((format!("panel {:?}", panel["title"]), n));
            }
        }
    }
    let rule = find(docs, "PrometheusRule", "cutover");
    for r in rule["spec"]["groups"][0]["rules"].as_array().unwrap() {
        let names = metric_names(r["expr"].as_str().unwrap());
        assert!(
            !names.is_empty(),
            "alert {} names no cutover metric",
            r["alert"]
        );
        for n in names {
            out.push((format!("alert {}", r["alert"]), n));
        }
    }
    out
}

/// Every series name the two services' registries can expose. A labelled family appears in
/// the exposition only once it has a series, so each is given one through the service's own
/// recording method first (a new family the dashboard or an alert uses needs a line here).
fn registered_names() -> BTreeSet<String> {
    let signal = signal_svc::metrics::Metrics::new();
    signal.signal("taint");
    signal.desired_change("down");
    signal.result("effective");
    signal.condition_write("True", "ok");
    signal.set_assignment(
        &[("lb".to_string(), Some("ep".to_string()))],
        &[("ep".to_string(), 1)],
    );
    let actuator = actuator_svc::metrics::Metrics::new();
    actuator.arm_request("get", 200);
    actuator.arm_response_bytes("get_lb", 1);
    actuator.throttled("read");
    actuator.rate_limited("write");
    actuator.remaining("read", 1);
    actuator.write_round("lb", 1);
    actuator.queue("lb", 1);
    actuator.result("effective");
    actuator.owned(&["lb".to_string()], &[]);
    actuator.unprobed("lb", 1);
    actuator.pools_not_written(
        "lb",
        &[],
        &[actuator_svc::lb::index::SkippedPool {
            name: "p".into(),
            why: actuator_svc::lb::index::NotWritten::NatOnly,
            entries: 1,
        }],
    );
    actuator.unmatched("lb", 1);
    actuator.guard_refused("lb", 1);
    actuator.tool_limited("set");
    actuator.unknown_answer("negative");
    actuator.restored(&["lb".to_string()]);
    actuator.auth_refused("tool", "no_san");
    actuator.access_refused("lb", "ScopeLocked", "-");
    actuator.missing_permissions("lb", &[], &[("a".to_string(), "s".to_string())]);
    let mut names = series_names(&signal.encode());
    names.extend(series_names(&actuator.encode()));
    names
}

#[test]
fn every_metric_the_dashboard_and_alerts_name_is_registered() {
    let registered = registered_names();
    assert!(
        registered.contains("cutover_signal_leader")
            && registered.contains("cutover_actuator_arm_throttled_total"),
        "{registered:?}"
    );
    let docs = render("monitoring", &[]);
    let used = observed_names(&docs);
    assert!(used.len() > 20, "{used:?}");
    let missing: Vec<_> = used
        .iter()
        .filter(|(_, n)| !registered.contains(n))
        .collect();
    assert!(
        missing.is_empty(),
        "named but not registered by either service: {missing:?}"
    );
    // The alerts the issue asks for, each on its metric.
    let by_alert = |alert: &str| -> BTreeSet<String> {
        used.iter()
            .filter(|(w, _)| w == &format!("alert \"{alert}\""))
            .map(|(_, n)| n.clone())
            .collect()
    };
    let expect = |alert: &str, metric: &str| {
        assert!(
            by_alert(alert).contains(metric),
            "{alert} must use {metric}"
        );
    };
    expect("CutoverDownNotEffective", "cutover_actuator_queue_depth");
    expect(
        "CutoverDownSlow",
        "cutover_signal_signal_to_effective_seconds_bucket",
    );
    expect(
        "CutoverArmThrottled",
        "cutover_actuator_arm_throttled_total",
    );
    expect("CutoverLeaderFlapping", "cutover_signal_leader_epoch");
    expect(
        "CutoverGuardRefusing",
        "cutover_actuator_guard_refused_nodes",
    );
    expect(
        "CutoverUnexplainedDownRepaired",
        "cutover_actuator_restored_total",
    );
    expect(
        "CutoverInsecurePlaintext",
        "cutover_actuator_insecure_plaintext",
    );
    expect(
        "CutoverInsecurePlaintext",
        "cutover_signal_insecure_plaintext",
    );
    expect(
        "CutoverClientsRefused",
        "cutover_actuator_auth_refused_total",
    );
}

#[tokio::test]
async fn every_variant_applies_to_a_real_api_server() {
    let server = kube_real::RealApiServer::start().await.unwrap();
    let admin = server.admin_client().unwrap();
    let ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": NAMESPACE, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}});
    kube_real::manifests::apply(&admin, &[ns], NAMESPACE)
        .await
        .unwrap();
    // No Prometheus Operator or cert-manager here: their kinds are checked by the render tests
    // and skipped, and only they.
    let served = kube::discovery::Discovery::new(admin.clone())
        .run()
        .await
        .unwrap();
    for group in ["monitoring.coreos.com", "cert-manager.io"] {
        assert!(
            !served.has_group(group),
            "{group} is served: apply it instead of skipping"
        );
    }
    // `helm install` itself (server dry run, before anything the chart renders exists: helm
    // refuses to take over objects it did not create): the schema, the templates and NOTES.txt.
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_admin_kubeconfig(&kubeconfig).unwrap();
    let out = helm::install_dry_run(&kubeconfig, &[], &[&registry_set()]).unwrap();
    let notes = out
        .split("NOTES:")
        .nth(1)
        .expect("helm install prints NOTES");
    for needle in [
        format!("{}/cutover/signal-svc:", manifests::TEST_REGISTRY),
        "system:serviceaccount:cutover:actuator-svc".to_string(),
        "rollout status deploy/signal-svc".to_string(),
        "actuator-svc-tls".to_string(),
    ] {
        assert!(notes.contains(&needle), "NOTES lack {needle}:\n{notes}");
    }
    let err = helm::install_dry_run(&kubeconfig, &[], &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("image.registry is required"), "{err}");
    let mut skipped = BTreeSet::new();
    for (name, file) in helm::variants().unwrap() {
        let files: Vec<&Path> = file.iter().map(PathBuf::as_path).collect();
        let set = variant_set(&name);
        let set: Vec<&str> = set.iter().map(String::as_str).collect();
        let docs = helm::template(&files, &set).unwrap();
        let (crd, plain): (Vec<Value>, Vec<Value>) = docs.into_iter().partition(is_crd_kind);
        skipped.extend(crd.iter().map(key).map(|k| k.0));
        let applied = kube_real::manifests::apply(&admin, &plain, NAMESPACE)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(applied.len(), plain.len(), "{name}");
    }
    assert_eq!(
        skipped,
        ["Certificate", "Issuer", "PrometheusRule", "ServiceMonitor"]
            .map(String::from)
            .into(),
    );
    // The last variant's Deployment is what the server holds, admitted as rendered.
    let deployments: kube::Api<Deployment> = kube::Api::namespaced(admin, NAMESPACE);
    let d = deployments.get("signal-svc").await.unwrap();
    assert_eq!(d.spec.replicas, Some(1), "single-replica applied last");
}

/// Replaces `--flag=…` in `args` (it must be there).
fn replace_flag(args: &mut [String], flag: &str, value: &str) {
    let prefix = format!("--{flag}=");
    let a = args
        .iter_mut()
        .find(|a| a.starts_with(&prefix))
        .unwrap_or_else(|| panic!("--{flag} is not in the rendered args"));
    *a = format!("{prefix}{value}");
}

#[tokio::test]
async fn chart_install_runs_both_services_and_a_taint_cuts_the_node() {
    use cutover_e2e::{bins, certs, judge, kube_ops, observe};
    use cutover_testkit::procs;
    bins::build(&["signal-svc", "actuator-svc"]).unwrap();
    let run = tempfile::tempdir().unwrap();
    let nodes = 6;
    let cluster = aks_fixture::preset_sized("aks", nodes).unwrap();
    let server = kube_real::RealApiServer::start().await.unwrap();
    let admin = server.admin_client().unwrap();
    let seed = kube_sim::Seed::preset("aks", nodes).unwrap();
    kube_real::seed::nodes(&admin, &seed).await.unwrap();
    let mut arm_options = arm_sim::ArmSimOptions {
        seed: arm_sim::seed::Seed::preset("aks", Some(nodes)).unwrap(),
        ..Default::default()
    };
    arm_options.tuning.completion_delay_ms = 300;
    let arm = arm_sim::ArmSim::start(arm_options).await.unwrap();
    let arm_ca = run.path().join("arm-sim-ca.pem");
    arm.write_ca(&arm_ca).unwrap();

    // The install: azure.json as the chart's Secret (no credentials in it: workload identity),
    // the TLS Secrets as a user creates them, the managed identity's client id.
    let mut azure_json = cluster.azure_json();
    for k in [
        "aadClientId",
        "aadClientSecret",
        "useManagedIdentityExtension",
        "userAssignedIdentityID",
    ] {
        azure_json.as_object_mut().unwrap().remove(k);
    }
    let values = run.path().join("values.json");
    std::fs::write(
        &values,
        serde_json::to_vec(&serde_json::json!({
            "clusterName": cluster.name,
            "image": {"registry": manifests::TEST_REGISTRY},
            "logFormat": "plain",
            "azureJson": {"create": true, "config": azure_json},
            "actuator": {"workloadIdentity": {"clientId": aks_fixture::CLIENT_ID}},
        }))
        .unwrap(),
    )
    .unwrap();
    let docs = helm::template(&[values.as_path()], &[]).unwrap();
    let ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}});
    kube_real::manifests::apply(&admin, &[ns], NAMESPACE)
        .await
        .unwrap();
    let pki = certs::generate(&run.path().join("pki")).unwrap();
    let tls_secret = |name: &str, files: &certs::CertFiles| {
        use base64::Engine;
        let b64 =
            |p: &Path| base64::engine::general_purpose::STANDARD.encode(std::fs::read(p).unwrap());
        serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
            "data": {"tls.crt": b64(&files.cert), "tls.key": b64(&files.key), "ca.crt": b64(&pki.ca)}})
    };
    let user_secrets = [
        tls_secret("actuator-svc-tls", &pki.actuator),
        tls_secret("signal-svc-tls", &pki.signal),
    ];
    kube_real::manifests::apply(&admin, &user_secrets, NAMESPACE)
        .await
        .unwrap();
    kube_real::manifests::apply(&admin, &docs, NAMESPACE)
        .await
        .unwrap();

    // What the kubelet mounts: the Secrets as the API server holds them now.
    let secrets_api: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(admin.clone(), NAMESPACE);
    let mut secrets = BTreeMap::new();
    for s in secrets_api.list(&Default::default()).await.unwrap() {
        let data = s
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
        secrets.insert(s.metadata.name.unwrap(), data);
    }

    // "Pods": each replica of each rendered Deployment as a process.
    let replicas = |d: &str| {
        find(&docs, "Deployment", d)["spec"]["replicas"]
            .as_u64()
            .unwrap()
    };
    let mut actuator_grpc = Vec::new();
    let mut specs = Vec::new();
    for i in 0..replicas("actuator-svc") {
        let pod = helm::pod_process(
            find(&docs, "Deployment", "actuator-svc"),
            &format!("actuator-svc-{i}"),
            NAMESPACE,
        )
        .unwrap();
        let mut args = pod.materialize(run.path(), &secrets).unwrap();
        let (grpc, admin_port) = (
            cutover_testkit::free_port().unwrap(),
            cutover_testkit::free_port().unwrap(),
        );
        replace_flag(&mut args, "grpc-listen", &format!("127.0.0.1:{grpc}"));
        replace_flag(
            &mut args,
            "admin-listen",
            &format!("127.0.0.1:{admin_port}"),
        );
        // Azure's endpoints are arm-sim here. The authority too: azure.json's `cloud`
        // (AzurePublicCloud) beats the webhook's AZURE_AUTHORITY_HOST, as in cloud-provider-azure.
        args.push(format!("--arm-endpoint={}", arm.url()));
        args.push(format!("--aad-authority={}", arm.aad_authority()));
        let mut spec = procs::Spec::new(&pod.pod, bins::path("actuator-svc").unwrap()).args(args);
        for (k, v) in &pod.env {
            spec = spec.env(k, v.clone());
        }
        // The workload-identity webhook, for pods labelled for it: the client id from the
        // ServiceAccount's annotation, the tenant, the authority and a federated token file.
        assert_eq!(
            pod.pod_labels
                .get("azure.workload.identity/use")
                .map(String::as_str),
            Some("true")
        );
        let sa = find(&docs, "ServiceAccount", &pod.service_account);
        let client_id = sa["metadata"]["annotations"]["azure.workload.identity/client-id"]
            .as_str()
            .unwrap();
        let token_file = run.path().join(format!("{}-azure-token", pod.pod));
        std::fs::write(&token_file, arm.federated_token()).unwrap();
        spec = spec
            .env("AZURE_CLIENT_ID", client_id)
            .env("AZURE_TENANT_ID", aks_fixture::TENANT_ID)
            .env("AZURE_AUTHORITY_HOST", arm.aad_authority())
            // The simulator's CA, as the node's trust store would hold a private cloud's.
            .env("SSL_CERT_FILE", arm_ca.display().to_string())
            .env(
                "AZURE_FEDERATED_TOKEN_FILE",
                token_file.display().to_string(),
            )
            .env("RUST_LOG", "info");
        actuator_grpc.push(format!("https://127.0.0.1:{grpc}"));
        specs.push((spec, admin_port));
    }
    for i in 0..replicas("signal-svc") {
        let pod = helm::pod_process(
            find(&docs, "Deployment", "signal-svc"),
            &format!("signal-svc-{i}"),
            NAMESPACE,
        )
        .unwrap();
        let mut args = pod.materialize(run.path(), &secrets).unwrap();
        let admin_port = cutover_testkit::free_port().unwrap();
        replace_flag(
            &mut args,
            "admin-listen",
            &format!("127.0.0.1:{admin_port}"),
        );
        // No cluster DNS here: the headless Service's addresses are the actuators' ports.
        let service = flag(&docs, "signal-svc", "actuator-service").unwrap();
        assert!(service.starts_with("actuator-svc.cutover.svc"), "{service}");
        args.retain(|a| !a.starts_with("--actuator-service="));
        args.push(format!("--actuator-endpoints={}", actuator_grpc.join(",")));
        // The in-cluster config: a token of the pod's ServiceAccount, so the chart's RBAC is
        // what the real API server enforces.
        let token = server
            .service_account_token(NAMESPACE, &pod.service_account, Duration::from_secs(3600))
            .await
            .unwrap();
        let kubeconfig = run.path().join(format!("{}-kubeconfig", pod.pod));
        server.write_token_kubeconfig(&kubeconfig, &token).unwrap();
        args.push(format!("--kubeconfig={}", kubeconfig.display()));
        let mut spec = procs::Spec::new(&pod.pod, bins::path("signal-svc").unwrap()).args(args);
        for (k, v) in &pod.env {
            spec = spec.env(k, v.clone());
        }
        specs.push((spec.env("RUST_LOG", "info"), admin_port));
    }
    let mut running = Vec::new();
    for (spec, admin_port) in &specs {
        running.push((
            procs::Proc::start(spec, run.path()).await.unwrap(),
            *admin_port,
        ));
    }
    let deadline = Instant::now() + Duration::from_secs(90);
    for (proc, port) in &mut running {
        while cutover_e2e::http::get_status(&format!("http://127.0.0.1:{port}/ready")).await
            != Some(200)
        {
            assert!(
                proc.is_running(),
                "{} exited:\n{}",
                proc.name,
                proc.log_tail(30)
            );
            assert!(
                Instant::now() < deadline,
                "{} not ready:\n{}",
                proc.name,
                proc.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    // A cut: taint one node; every entry of it reads Down in ARM.
    let node = seed.nodes[0].name.clone();
    let ops = kube_ops::Cluster::new(admin.clone());
    let tainted = Instant::now();
    ops.taint(
        &node,
        kube_ops::OUT_OF_SERVICE,
        Some("nodeshutdown"),
        "NoExecute",
    )
    .await
    .unwrap();
    let wanted: BTreeSet<judge::EntryKey> =
        judge::node_entries(&cluster, &node).into_iter().collect();
    assert!(!wanted.is_empty());
    loop {
        let down: BTreeSet<judge::EntryKey> = observe::entries(&arm, &cluster)
            .into_iter()
            .filter(|e| e.state == judge::State::Down)
            .map(|e| (e.lb.clone(), e.pool.clone(), e.target.to_ascii_lowercase()))
            .collect();
        if down == wanted {
            break;
        }
        assert!(
            tainted.elapsed() < Duration::from_secs(30),
            "entries Down {down:?}, want {wanted:?}; logs:\n{}",
            running
                .iter()
                .map(|(p, _)| format!("{}:\n{}", p.name, p.log_tail(15)))
                .collect::<Vec<_>>()
                .join("\n")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // What the running services serve is what the registries read in
    // `every_metric_the_dashboard_and_alerts_name_is_registered` hold (labelled families show
    // once they have a series, so served is a subset, and after a cut most of it).
    let registered = registered_names();
    let mut served = BTreeSet::new();
    for (_, port) in &running {
        let text = cutover_e2e::http::get_text(&format!("http://127.0.0.1:{port}/metrics"))
            .await
            .unwrap();
        served.extend(series_names(&text));
    }
    let unknown: Vec<_> = served.difference(&registered).collect();
    assert!(
        unknown.is_empty(),
        "served but not in the registries read: {unknown:?}"
    );
    let monitoring = render("monitoring", &[]);
    let used: BTreeSet<String> = observed_names(&monitoring)
        .into_iter()
        .map(|(_, n)| n)
        .collect();
    for name in [
        "cutover_signal_signal_to_effective_seconds_bucket",
        "cutover_signal_signals_total",
        "cutover_actuator_arm_requests_total",
        "cutover_actuator_write_rounds_total",
        "cutover_actuator_results_total",
    ] {
        assert!(used.contains(name) && served.contains(name), "{name}");
    }
    for (proc, _) in &mut running {
        proc.terminate(Duration::from_secs(10)).await;
    }
}

/// The NetworkPolicies' values: admin ports only from `networkPolicy.metricsFrom` (none when
/// empty: an empty `from` would mean everyone), egress to DNS, the API server and the actuators
/// (signal-svc) or Azure over HTTPS (actuator-svc); the instance metadata endpoint only when
/// asked for, and required by a managed identity through IMDS. The node-write policy can be
/// left out.
#[test]
fn network_policies_and_the_node_write_policy_follow_their_values() {
    use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyPeer};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let policy = |docs: &[Value], name: &str| -> NetworkPolicy {
        manifests::typed(find(docs, "NetworkPolicy", name)).unwrap()
    };
    let port_peers = |np: &NetworkPolicy, port: i32| -> Option<Vec<NetworkPolicyPeer>> {
        let spec = np.spec.clone().unwrap();
        spec.ingress.unwrap_or_default().into_iter().find_map(|r| {
            r.ports
                .unwrap_or_default()
                .iter()
                .any(|p| p.port == Some(IntOrString::Int(port)))
                .then(|| r.from.unwrap_or_default())
        })
    };
    let egress =
        |np: &NetworkPolicy| serde_json::to_value(np.spec.clone().unwrap().egress).unwrap();

    // Defaults: ingress and egress both restricted; admin ports from the monitoring namespace.
    let docs = render("default", &[]);
    for (name, admin) in [("signal-svc", 9090), ("actuator-svc", 9091)] {
        let np = policy(&docs, name);
        let spec = np.spec.clone().unwrap();
        assert_eq!(
            spec.policy_types,
            Some(vec!["Ingress".to_string(), "Egress".to_string()]),
            "{name}"
        );
        let peers = port_peers(&np, admin).expect("an admin-port rule");
        assert_eq!(
            serde_json::to_value(&peers).unwrap(),
            serde_json::json!([{"namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": "monitoring"}}}]),
            "{name}: admin port peers"
        );
        let out = egress(&np).to_string();
        assert!(
            out.contains("kube-dns") && out.contains("53"),
            "{name}: {out}"
        );
    }
    let actuator_out = egress(&policy(&docs, "actuator-svc"));
    assert!(actuator_out.to_string().contains("\"169.254.169.254/32\""));
    assert_eq!(
        actuator_out[1]["to"][0]["ipBlock"],
        serde_json::json!({"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]}),
        "ARM and Entra over HTTPS, never the instance metadata endpoint"
    );
    assert!(!actuator_out.to_string().contains("\"port\":80"));
    let signal_out = egress(&policy(&docs, "signal-svc"));
    assert_eq!(
        signal_out[1],
        serde_json::json!({"ports": [{"port": 443, "protocol": "TCP"}]})
    );
    assert_eq!(
        signal_out[2]["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/name"],
        "actuator-svc"
    );
    assert_eq!(signal_out[2]["ports"][0]["port"], 9443);

    // Narrowed by value; no admin-port rule at all when nobody may scrape.
    let values = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        values.path(),
        "networkPolicy:\n  metricsFrom: []\n  apiServer: {cidrs: [20.1.2.3/32], ports: [443, 6443]}\n  \
         azure: {cidrs: [20.0.0.0/8], instanceMetadata: true}\n",
    )
    .unwrap();
    let docs = helm::template(&[values.path()], &[&registry_set()]).unwrap();
    for (name, admin) in [("signal-svc", 9090), ("actuator-svc", 9091)] {
        assert!(port_peers(&policy(&docs, name), admin).is_none(), "{name}");
    }
    assert_eq!(
        egress(&policy(&docs, "signal-svc"))[1],
        serde_json::json!({"to": [{"ipBlock": {"cidr": "20.1.2.3/32"}}],
            "ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]})
    );
    let actuator_out = egress(&policy(&docs, "actuator-svc"));
    assert_eq!(
        actuator_out[1]["to"],
        serde_json::json!([{"ipBlock": {"cidr": "20.0.0.0/8"}}])
    );
    assert_eq!(
        actuator_out[2],
        serde_json::json!({"to": [{"ipBlock": {"cidr": "169.254.169.254/32"}}],
            "ports": [{"port": 80, "protocol": "TCP"}]})
    );

    // A managed identity through IMDS without the metadata endpoint would fail at run time.
    let err = render_defaults(&[
        "actuator.workloadIdentity.enabled=false",
        "azureJson.create=true",
        "azureJson.config.useManagedIdentityExtension=true",
    ])
    .expect_err("IMDS blocked by the chart's own policy must be refused");
    assert!(
        err.to_string()
            .contains("networkPolicy.azure.instanceMetadata=true"),
        "{err}"
    );
    render_defaults(&[
        "actuator.workloadIdentity.enabled=false",
        "azureJson.create=true",
        "azureJson.config.useManagedIdentityExtension=true",
        "networkPolicy.azure.instanceMetadata=true",
    ])
    .unwrap();

    // The node-write policy: on by default, off by value.
    let docs = render("default", &[]);
    assert!(
        docs.iter()
            .any(|d| d["kind"] == "ValidatingAdmissionPolicyBinding")
    );
    let docs = render("default", &["signal.nodeWritePolicy.enabled=false"]);
    assert!(
        !docs
            .iter()
            .any(|d| key(d).0.starts_with("ValidatingAdmissionPolicy"))
    );
}

/// `promtool` on PATH (.ci/run installs Debian's `prometheus` package, which ships it).
fn promtool() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("promtool"))
        .find(|p| p.is_file())
}

fn run_promtool(promtool: &Path, dir: &Path, args: &[&str]) {
    let out = std::process::Command::new(promtool)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool {args:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The chart's alerts are valid rules (`promtool check rules`) and fire when they must
/// (`promtool test rules` with tests/alerts/cutover.promtest.yaml): `CutoverNoLeader` also
/// when every signal-svc is gone, the absence alerts when a whole service is gone, the replica
/// warnings when some are. CI installs promtool; elsewhere, without it, the test says so and
/// passes (the metric names are checked by `every_metric_the_dashboard_and_alerts_name_is_registered`).
#[test]
fn alerts_fire_when_a_whole_component_is_gone() {
    let Some(promtool) = promtool() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "promtool is not on PATH: .ci/run installs it (Debian's prometheus package)"
        );
        eprintln!(
            "note: promtool is not on PATH (apt-get install prometheus); alert rules not run"
        );
        return;
    };
    let docs = render("monitoring", &[]);
    let rule = find(&docs, "PrometheusRule", "cutover");
    let dir = tempfile::tempdir().unwrap();
    let mut groups = rule["spec"]["groups"].clone();
    std::fs::write(
        dir.path().join("rules-full.yaml"),
        serde_yaml::to_string(&serde_json::json!({ "groups": groups })).unwrap(),
    )
    .unwrap();
    run_promtool(
        &promtool,
        dir.path(),
        &["check", "rules", "rules-full.yaml"],
    );
    for group in groups.as_array_mut().unwrap() {
        for r in group["rules"].as_array_mut().unwrap() {
            r.as_object_mut().unwrap().remove("annotations");
        }
    }
    std::fs::write(
        dir.path().join("rules.yaml"),
        serde_yaml::to_string(&serde_json::json!({ "groups": groups })).unwrap(),
    )
    .unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/alerts/cutover.promtest.yaml"),
        dir.path().join("cutover.promtest.yaml"),
    )
    .unwrap();
    run_promtool(
        &promtool,
        dir.path(),
        &["test", "rules", "cutover.promtest.yaml"],
    );

    // Each availability alert is there, and CutoverNoLeader survives a dry-run only as the
    // absence alert (no Lease is taken there).
    let names: BTreeSet<&str> = groups[0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["alert"].as_str())
        .collect();
    for a in [
        "CutoverNoLeader",
        "CutoverSignalAbsent",
        "CutoverActuatorsAbsent",
        "CutoverSignalReplicasMissing",
        "CutoverActuatorReplicasMissing",
    ] {
        assert!(names.contains(a), "{a} missing: {names:?}");
    }
    let single = find(
        &render("single-replica", &["prometheusRule.enabled=true"]),
        "PrometheusRule",
        "cutover",
    )
    .to_string();
    assert!(
        !single.contains("ReplicasMissing"),
        "one replica: absence alerts only"
    );
    assert!(single.contains("CutoverSignalAbsent"));
}

/// `signal.triggers` (issue 28 item 5): the defaults render no trigger flag (signal-svc's own
/// defaults: deletion on, the cordon-based triggers off); each value renders the flag
/// signal-svc takes; a value that is not a boolean is refused at render time.
#[test]
fn trigger_values_render_the_flags_signal_svc_takes() {
    let docs = render("default", &[]);
    for f in [
        "trigger-node-deleting",
        "trigger-drain-conditions",
        "trigger-cordon",
    ] {
        assert_eq!(flag(&docs, "signal-svc", f), None, "{f}");
    }
    let docs = render_defaults(&[
        "signal.triggers.nodeDeleting=false",
        "signal.triggers.drainConditions=true",
        "signal.triggers.cordon=true",
    ])
    .unwrap();
    for (f, v) in [
        ("trigger-node-deleting", "false"),
        ("trigger-drain-conditions", "true"),
        ("trigger-cordon", "true"),
    ] {
        assert_eq!(flag(&docs, "signal-svc", f).as_deref(), Some(v), "{f}");
    }
    signal_svc_accepts(&docs).unwrap();
    let err = render_defaults(&["signal.triggers.cordon=yes"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("cordon"), "{err}");
}
