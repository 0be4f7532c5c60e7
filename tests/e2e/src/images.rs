//! The container images of `deploy/images.sh`: the list they are built from
//! (`deploy/images.conf`), reading a built OCI archive (manifest digest, image config, layers),
//! unpacking it with umoci, and a [`Launcher`] that starts the services from the unpacked root
//! filesystems the way a container runtime would: chrooted, as the image's user, with only the
//! image's environment.

use crate::manifests::repo;
use crate::stack::Launcher;
use anyhow::{Context, bail};
use cutover_testkit::procs::Spec;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One line of `deploy/images.conf`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSpec {
    /// Repository name without registry or tag, e.g. `cutover/signal-svc`.
    pub image: String,
    /// The workspace binary the image runs.
    pub bin: String,
    /// `uid:gid`.
    pub user: String,
    /// Exposed ports as OCI writes them, e.g. `9090/tcp`.
    pub ports: Vec<String>,
}

impl ImageSpec {
    pub fn uid(&self) -> u32 {
        self.user_part(0)
    }

    pub fn gid(&self) -> u32 {
        self.user_part(1)
    }

    fn user_part(&self, i: usize) -> u32 {
        self.user
            .split(':')
            .nth(i)
            .and_then(|s| s.parse().ok())
            .unwrap_or(u32::MAX)
    }

    /// The port numbers of [`ImageSpec::ports`].
    pub fn port_numbers(&self) -> Vec<i32> {
        self.ports
            .iter()
            .filter_map(|p| p.split('/').next()?.parse().ok())
            .collect()
    }

    /// `image:tag` as the kustomize base names it (the tag is the workspace version).
    pub fn reference(&self) -> String {
        format!("{}:{}", self.image, version())
    }
}

/// The workspace version: every image's tag and `org.opencontainers.image.version`.
pub fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// The images `deploy/images.conf` lists.
pub fn specs() -> anyhow::Result<Vec<ImageSpec>> {
    let path = repo().join("deploy/images.conf");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [image, bin, user, ports] = fields[..] else {
            bail!("deploy/images.conf: expected `image binary user ports`, got {line:?}");
        };
        out.push(ImageSpec {
            image: image.to_string(),
            bin: bin.to_string(),
            user: user.to_string(),
            ports: ports.split(',').map(str::to_string).collect(),
        });
    }
    Ok(out)
}

/// Runs `deploy/images.sh --out <out>` and returns what it printed.
pub fn build(out: &Path) -> anyhow::Result<String> {
    let mut cmd = Command::new(repo().join("deploy/images.sh"));
    // Its release build must share the artifacts of a later `cargo run` (see `bins`).
    crate::bins::without_cargo_run_env(&mut cmd);
    let output = cmd
        .arg("--out")
        .arg(out)
        .output()
        .context("run deploy/images.sh")?;
    if !output.status.success() {
        bail!(
            "deploy/images.sh failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// An OCI archive extracted into an image layout directory.
#[derive(Debug, Clone)]
pub struct Layout {
    pub dir: PathBuf,
    /// The manifest digest (`sha256:…`): the image's identity in a registry.
    pub digest: String,
    pub manifest: Value,
    /// The image configuration (`config.User`, `config.Entrypoint`, `created`, …).
    pub config: Value,
}

fn blob(dir: &Path, digest: &str) -> anyhow::Result<Value> {
    let hex = digest
        .strip_prefix("sha256:")
        .with_context(|| format!("unexpected digest {digest}"))?;
    let path = dir.join("blobs/sha256").join(hex);
    let bytes = std::fs::read(&path).with_context(|| format!("read {}", path.display()))?;
    Ok(serde_json::from_slice(&bytes)?)
}

/// Extracts `archive` into `dir` and reads the manifest tagged `tag`.
pub fn open(archive: &Path, dir: &Path, tag: &str) -> anyhow::Result<Layout> {
    std::fs::create_dir_all(dir)?;
    run(Command::new("tar")
        .arg("-xf")
        .arg(archive)
        .arg("-C")
        .arg(dir))?;
    let index: Value = serde_json::from_slice(&std::fs::read(dir.join("index.json"))?)?;
    let manifests = index["manifests"].as_array().cloned().unwrap_or_default();
    let Some(entry) = manifests
        .iter()
        .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == tag)
    else {
        bail!(
            "{} has no manifest tagged {tag}: {index}",
            archive.display()
        );
    };
    let digest = entry["digest"].as_str().unwrap_or_default().to_string();
    let manifest = blob(dir, &digest)?;
    let config = blob(
        dir,
        manifest["config"]["digest"].as_str().unwrap_or_default(),
    )?;
    Ok(Layout {
        dir: dir.to_path_buf(),
        digest,
        manifest,
        config,
    })
}

/// `program` on this process's PATH.
pub fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.exists())
}

/// `umoci` on PATH; tests/run.sh installs it (Debian umoci).
pub fn umoci() -> anyhow::Result<PathBuf> {
    on_path("umoci").context("umoci not found on PATH: tests/run.sh installs it (Debian umoci)")
}

/// An unpacked image: the runtime bundle umoci writes (`config.json` plus `rootfs/`).
#[derive(Debug, Clone)]
pub struct Bundle {
    pub rootfs: PathBuf,
    /// The OCI runtime configuration umoci derived from the image config: `process.args`,
    /// `process.user`, `process.env`, `process.cwd`.
    pub runtime: Value,
}

/// Unpacks the image tagged `tag` of `layout` into `bundle_dir` (which must not exist).
pub fn unpack(layout: &Layout, tag: &str, bundle_dir: &Path) -> anyhow::Result<Bundle> {
    run(Command::new(umoci()?)
        .arg("unpack")
        .arg("--image")
        .arg(format!("{}:{tag}", layout.dir.display()))
        .arg(bundle_dir))?;
    let runtime = serde_json::from_slice(&std::fs::read(bundle_dir.join("config.json"))?)?;
    Ok(Bundle {
        rootfs: bundle_dir.join("rootfs"),
        runtime,
    })
}

fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let out = cmd.output().with_context(|| format!("run {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Every path under `root` (relative, `/`-separated) with its file type, sorted.
pub fn tree(root: &Path) -> anyhow::Result<BTreeMap<String, std::fs::FileType>> {
    fn walk(
        root: &Path,
        dir: &Path,
        out: &mut BTreeMap<String, std::fs::FileType>,
    ) -> anyhow::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            let path = entry.path();
            let rel = path.strip_prefix(root)?.display().to_string();
            out.insert(rel, kind);
            if kind.is_dir() {
                walk(root, &path, out)?;
            }
        }
        Ok(())
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out)?;
    Ok(out)
}

/// The absolute paths of the shared libraries and the loader `ldd` names for `binary`.
pub fn ldd(binary: &Path) -> anyhow::Result<Vec<String>> {
    let out = Command::new("ldd")
        .arg(binary)
        .output()
        .context("run ldd")?;
    if !out.status.success() {
        bail!("ldd {} failed", binary.display());
    }
    let mut libs: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                [_, "=>", path, ..] if path.starts_with('/') => Some(path.to_string()),
                [path, ..] if path.starts_with('/') => Some(path.to_string()),
                _ => None,
            }
        })
        .collect();
    libs.sort();
    libs.dedup();
    Ok(libs)
}

/// Where [`Chroot`] puts the files a service reads, inside its root filesystem: the analogue
/// of the Secret volumes the manifests mount.
pub const FILES_DIR: &str = "etc/cutover/run";

/// Starts each service from its unpacked image: `chroot --userspec=UID:GID ROOTFS ENTRYPOINT…`
/// with an empty environment plus the image's, as the image's runtime configuration says.
#[derive(Debug, Clone, Default)]
pub struct Chroot {
    /// Binary name (`signal-svc`) to its unpacked image.
    pub bundles: BTreeMap<String, Bundle>,
}

impl Chroot {
    fn bundle(&self, bin: &str) -> anyhow::Result<&Bundle> {
        self.bundles
            .get(bin)
            .with_context(|| format!("no unpacked image for {bin}"))
    }
}

impl Launcher for Chroot {
    fn spec(&self, name: &str, bin: &str) -> anyhow::Result<Spec> {
        let bundle = self.bundle(bin)?;
        let process = &bundle.runtime["process"];
        let uid = process["user"]["uid"]
            .as_u64()
            .context("process.user.uid")?;
        let gid = process["user"]["gid"]
            .as_u64()
            .context("process.user.gid")?;
        let args: Vec<String> = process["args"]
            .as_array()
            .context("process.args")?
            .iter()
            .filter_map(|a| a.as_str().map(str::to_string))
            .collect();
        // Resolved here: the child's environment is the image's, not ours.
        let chroot = on_path("chroot").context("chroot not found on PATH (coreutils)")?;
        let mut spec = Spec::new(name, chroot)
            .arg(format!("--userspec={uid}:{gid}"))
            .arg(bundle.rootfs.display().to_string())
            .args(args);
        spec.clear_env = true;
        for kv in process["env"].as_array().into_iter().flatten() {
            if let Some((k, v)) = kv.as_str().and_then(|s| s.split_once('=')) {
                spec = spec.env(k, v);
            }
        }
        Ok(spec)
    }

    fn file(&self, bin: &str, file: &Path) -> anyhow::Result<String> {
        let bundle = self.bundle(bin)?;
        let name = file
            .file_name()
            .with_context(|| format!("{} has no file name", file.display()))?;
        let dir = bundle.rootfs.join(FILES_DIR);
        std::fs::create_dir_all(&dir)?;
        let inside = dir.join(name);
        std::fs::copy(file, &inside)
            .with_context(|| format!("copy {} into {}", file.display(), inside.display()))?;
        // As a Secret volume presents it (the manifests set no defaultMode or fsGroup): owned
        // by root, readable by the service's user, not writable.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&inside, std::fs::Permissions::from_mode(0o644))?;
        Ok(format!("/{FILES_DIR}/{}", name.to_string_lossy()))
    }
}
