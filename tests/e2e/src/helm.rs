//! Renders and lints the Helm chart `deploy/helm/cutover` with the real `helm` (built by
//! tests/tools/build.sh into target/tools/bin), and turns its rendered Deployments into the
//! processes a kubelet would start: their arguments, environment and mounted Secret files.

use crate::manifests::repo;
use anyhow::{Context, bail};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The namespace the chart is installed into (the one deploy/base uses).
pub const NAMESPACE: &str = "cutover";
/// The release name the tests use.
pub const RELEASE: &str = "cutover";

/// `deploy/helm/cutover`.
pub fn chart() -> PathBuf {
    repo().join("deploy/helm/cutover")
}

/// `helm` on PATH, else in target/tools/bin (tests/run.sh builds it there).
pub fn helm() -> anyhow::Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([repo().join("target/tools/bin")])
        .map(|d| d.join("helm"))
        .find(|p| p.is_file())
        .context("helm not found on PATH or in target/tools/bin: run `bash tests/tools/build.sh`")
}

/// The documented variants: `(name, values file)` for every `ci/<name>-values.yaml`, after
/// the defaults (`("default", None)`).
pub fn variants() -> anyhow::Result<Vec<(String, Option<PathBuf>)>> {
    let mut out = vec![("default".to_string(), None)];
    let mut files: Vec<PathBuf> = std::fs::read_dir(chart().join("ci"))?
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.to_string_lossy().ends_with("-values.yaml"))
        .collect();
    files.sort();
    for f in files {
        let name = f
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix("-values.yaml"))
            .context("values file name")?
            .to_string();
        out.push((name, Some(f)));
    }
    Ok(out)
}

fn run(args: &[String]) -> anyhow::Result<String> {
    let out = Command::new(helm()?).args(args).output()?;
    if !out.status.success() {
        bail!(
            "helm {} failed:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

fn values_args(values: &[&Path], set: &[&str]) -> Vec<String> {
    let mut args = Vec::new();
    for v in values {
        args.push("--values".to_string());
        args.push(v.display().to_string());
    }
    for s in set {
        args.push("--set".to_string());
        args.push(s.to_string());
    }
    args
}

/// `helm lint --strict` with these values files and `--set` pairs.
pub fn lint(values: &[&Path], set: &[&str]) -> anyhow::Result<String> {
    let mut args = vec![
        "lint".to_string(),
        "--strict".to_string(),
        "--namespace".to_string(),
        NAMESPACE.to_string(),
        chart().display().to_string(),
    ];
    args.extend(values_args(values, set));
    run(&args)
}

/// Every document of `helm template` into [`NAMESPACE`].
pub fn template(values: &[&Path], set: &[&str]) -> anyhow::Result<Vec<Value>> {
    template_chart(&chart(), values, set)
}

/// Every document of `helm template` of the chart at `chart_dir` (e.g. a chart that has this
/// one as a subchart) into [`NAMESPACE`].
pub fn template_chart(
    chart_dir: &Path,
    values: &[&Path],
    set: &[&str],
) -> anyhow::Result<Vec<Value>> {
    let mut args = vec![
        "template".to_string(),
        RELEASE.to_string(),
        chart_dir.display().to_string(),
        "--namespace".to_string(),
        NAMESPACE.to_string(),
    ];
    args.extend(values_args(values, set));
    let text = run(&args)?;
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v = Value::deserialize(doc)?;
        if !v.is_null() {
            docs.push(v);
        }
    }
    Ok(docs)
}

/// `helm install --dry-run=server` against the API server of `kubeconfig`: what an install
/// prints (the manifests and the rendered `NOTES.txt`), creating nothing.
pub fn install_dry_run(
    kubeconfig: &Path,
    values: &[&Path],
    set: &[&str],
) -> anyhow::Result<String> {
    let mut args = vec![
        "install".to_string(),
        RELEASE.to_string(),
        chart().display().to_string(),
        "--namespace".to_string(),
        NAMESPACE.to_string(),
        "--dry-run=server".to_string(),
        "--kubeconfig".to_string(),
        kubeconfig.display().to_string(),
    ];
    args.extend(values_args(values, set));
    run(&args)
}

/// One container of a rendered Deployment as a kubelet would run it in pod `pod`: its
/// arguments, its environment (downward-API fields resolved for that pod) and, per mount path,
/// the files of the Secret volume mounted there.
#[derive(Debug, Clone)]
pub struct PodProcess {
    pub pod: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// `(mountPath, volume name, Secret name, items as (key, path); empty = every key)`.
    pub secret_mounts: Vec<SecretMount>,
    pub pod_labels: BTreeMap<String, String>,
    pub service_account: String,
}

/// A Secret volume mounted into the container.
#[derive(Debug, Clone)]
pub struct SecretMount {
    pub mount_path: String,
    pub secret: String,
    pub items: Vec<(String, String)>,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The single container of `deployment` as it runs in pod `pod` of namespace `namespace`.
/// Fails on anything a kubelet would supply that this harness does not emulate, so a new
/// field in the chart cannot be silently skipped.
pub fn pod_process(deployment: &Value, pod: &str, namespace: &str) -> anyhow::Result<PodProcess> {
    let spec = &deployment["spec"]["template"]["spec"];
    let containers = spec["containers"].as_array().context("containers")?;
    if containers.len() != 1 {
        bail!("one container per pod expected");
    }
    let c = &containers[0];
    let mut env = Vec::new();
    for e in c["env"].as_array().into_iter().flatten() {
        let name = e["name"].as_str().context("env name")?.to_string();
        if let Some(v) = e["value"].as_str() {
            env.push((name, v.to_string()));
        } else {
            let field = e["valueFrom"]["fieldRef"]["fieldPath"].as_str();
            let value = match field {
                Some("metadata.name") => pod.to_string(),
                Some("metadata.namespace") => namespace.to_string(),
                other => bail!("env {name}: valueFrom {other:?} is not emulated"),
            };
            env.push((name, value));
        }
    }
    let volumes: BTreeMap<String, &Value> = spec["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| Some((v["name"].as_str()?.to_string(), v)))
        .collect();
    let mut secret_mounts = Vec::new();
    for m in c["volumeMounts"].as_array().into_iter().flatten() {
        let name = m["name"].as_str().context("mount name")?;
        let volume = volumes
            .get(name)
            .with_context(|| format!("mount {name} has no volume"))?;
        let secret = volume["secret"]["secretName"]
            .as_str()
            .with_context(|| format!("volume {name}: only Secret volumes are emulated"))?;
        let items = volume["secret"]["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| Some((i["key"].as_str()?.into(), i["path"].as_str()?.into())))
            .collect();
        secret_mounts.push(SecretMount {
            mount_path: m["mountPath"].as_str().context("mountPath")?.to_string(),
            secret: secret.to_string(),
            items,
        });
    }
    let pod_labels =
        serde_json::from_value(deployment["spec"]["template"]["metadata"]["labels"].clone())
            .unwrap_or_default();
    Ok(PodProcess {
        pod: pod.to_string(),
        args: strings(&c["args"]),
        env,
        secret_mounts,
        pod_labels,
        service_account: spec["serviceAccountName"]
            .as_str()
            .unwrap_or("default")
            .to_string(),
    })
}

impl PodProcess {
    /// Writes the mounted Secrets' files under `root` (one folder per mount) and returns the
    /// arguments with every path under a mount rewritten to the local copy.
    pub fn materialize(
        &self,
        root: &Path,
        secrets: &BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    ) -> anyhow::Result<Vec<String>> {
        let mut mapping = Vec::new();
        for (i, m) in self.secret_mounts.iter().enumerate() {
            let dir = root.join(format!("{}-mount{i}", self.pod));
            std::fs::create_dir_all(&dir)?;
            let data = secrets
                .get(&m.secret)
                .with_context(|| format!("{}: Secret {} does not exist", self.pod, m.secret))?;
            let items: Vec<(String, String)> = if m.items.is_empty() {
                data.keys().map(|k| (k.clone(), k.clone())).collect()
            } else {
                m.items.clone()
            };
            for (key, path) in items {
                let bytes = data
                    .get(&key)
                    .with_context(|| format!("Secret {} has no key {key}", m.secret))?;
                std::fs::write(dir.join(&path), bytes)?;
            }
            mapping.push((m.mount_path.trim_end_matches('/').to_string(), dir));
        }
        Ok(self
            .args
            .iter()
            .map(|a| {
                let Some((flag, value)) = a.split_once('=') else {
                    return a.clone();
                };
                for (mount, dir) in &mapping {
                    if let Some(rest) = value.strip_prefix(&format!("{mount}/")) {
                        return format!("{flag}={}", dir.join(rest).display());
                    }
                }
                a.clone()
            })
            .collect())
    }
}
