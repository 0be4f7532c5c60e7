//! The container images: `deploy/images.sh` builds both archives (twice: the digests must be
//! equal), each image config says what `deploy/images.conf`, the manifests and the binaries
//! say (user, entrypoint, exposed ports, labels, creation time), the root filesystem holds
//! exactly the binary, its shared libraries, a CA bundle and the passwd/group entries (no
//! shell), and the whole system runs from the unpacked images (chrooted, as uid 65532, with
//! only the image's environment): one cut and one restore end exact.
//!
//! Needs buildah and umoci (tests/run.sh installs both); without them this test fails.

#![allow(clippy::unwrap_used)] // a test: a panic is the failure report

use cutover_e2e::images::{self, Bundle, Chroot, ImageSpec, Layout};
use cutover_e2e::manifests::repo;
use cutover_e2e::sandbox::Sandbox;
use cutover_e2e::scenarios::{Scenario, play};
use cutover_e2e::stack::StackOptions;
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

fn git(args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?} failed");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The digest `deploy/images.sh` printed for `image`.
fn printed_digest(printed: &str, image: &ImageSpec) -> String {
    printed
        .lines()
        .find_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some(&image.reference())).then(|| words.next().unwrap().to_string())
        })
        .unwrap_or_else(|| panic!("deploy/images.sh printed no line for {}", image.reference()))
}

/// The `--help` default of a listen flag, e.g. `0.0.0.0:9090` → 9090.
fn default_ports(rootfs: &Path, image: &ImageSpec) -> BTreeSet<i32> {
    let out = Command::new(images::on_path("chroot").unwrap())
        .arg(format!("--userspec={}", image.user))
        .arg(rootfs)
        .arg(format!("/usr/local/bin/{}", image.bin))
        .arg("--help")
        .env_clear()
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{} --help inside its image failed: {}",
        image.bin,
        String::from_utf8_lossy(&out.stderr)
    );
    let help = String::from_utf8(out.stdout).unwrap();
    // clap prints each flag's block; take the `[default: ADDR:PORT]` of every `-listen` flag.
    let mut ports = BTreeSet::new();
    let mut in_listen = false;
    for line in help.lines() {
        let t = line.trim_start();
        if t.starts_with("--") {
            in_listen = t.split_whitespace().next().unwrap().ends_with("-listen");
        }
        if in_listen && let Some(rest) = line.split("[default: ").nth(1) {
            let addr = rest.split(']').next().unwrap();
            ports.insert(addr.rsplit_once(':').unwrap().1.parse().unwrap());
        }
    }
    ports
}

fn check_config(layout: &Layout, image: &ImageSpec, epoch: i64) {
    let name = &image.image;
    let c = &layout.config;
    assert_eq!(c["os"], "linux", "{name}");
    assert_eq!(c["config"]["User"], image.user.as_str(), "{name}: User");
    assert_eq!(
        c["config"]["Entrypoint"],
        serde_json::json!([format!("/usr/local/bin/{}", image.bin)]),
        "{name}: Entrypoint"
    );
    assert!(
        c["config"]["Cmd"].as_array().is_none_or(Vec::is_empty),
        "{name}: no Cmd: the manifests' args are the only arguments"
    );
    let exposed: BTreeSet<String> = c["config"]["ExposedPorts"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(
        exposed,
        image.ports.iter().cloned().collect(),
        "{name}: ExposedPorts vs deploy/images.conf"
    );
    let labels = c["config"]["Labels"].as_object().unwrap();
    let label = |k: &str| {
        labels[&format!("org.opencontainers.image.{k}")]
            .as_str()
            .unwrap()
    };
    assert_eq!(label("version"), images::version(), "{name}: version label");
    assert_eq!(label("licenses"), env!("CARGO_PKG_LICENSE"), "{name}");
    assert!(
        label("revision").starts_with(&git(&["rev-parse", "HEAD"])),
        "{name}: revision label {}",
        label("revision")
    );
    assert!(!label("source").is_empty(), "{name}: source label");
    let created: jiff::Timestamp = c["created"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        created.as_second(),
        epoch,
        "{name}: created must be the commit time"
    );
    assert_eq!(
        layout.manifest["layers"].as_array().unwrap().len(),
        1,
        "{name}: one layer"
    );
}

/// The image's CycloneDX SBOM (deploy/sbom.py): the binary, the crates compiled into it with
/// purl, license and Cargo.lock's SHA-256, no dev-only crate, and a Debian package for each
/// library copied in.
fn check_sbom(rootfs: &Path, image: &ImageSpec, libraries: usize) {
    let path = rootfs.join(format!("usr/share/sbom/{}.cdx.json", image.bin));
    let bom: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(bom["bomFormat"], "CycloneDX");
    assert_eq!(bom["specVersion"], "1.5");
    assert_eq!(bom["metadata"]["component"]["name"], image.image);
    assert_eq!(
        bom["metadata"]["component"]["components"][0]["name"],
        image.bin
    );
    let components = bom["components"].as_array().unwrap();
    let named = |n: &str| components.iter().find(|c| c["name"] == n);
    let tokio = named("tokio").expect("tokio is compiled in");
    assert!(
        tokio["purl"]
            .as_str()
            .unwrap()
            .starts_with("pkg:cargo/tokio@")
    );
    assert_eq!(tokio["hashes"][0]["alg"], "SHA-256");
    assert!(tokio["licenses"][0]["expression"].is_string());
    for dev_only in ["kube-real", "kube-sim", "arm-sim", "proptest", "tempfile"] {
        assert!(named(dev_only).is_none(), "{dev_only} is not in the binary");
    }
    let debs = components
        .iter()
        .filter(|c| {
            c["purl"]
                .as_str()
                .is_some_and(|p| p.starts_with("pkg:deb/"))
        })
        .count();
    assert!(
        debs >= 2 && debs <= libraries + 1,
        "{}: {debs} Debian packages for {libraries} libraries and the CA bundle",
        image.image
    );
    assert!(named("ca-certificates").is_some());
}

/// The root filesystem holds exactly what the binary needs, owned by root, not writable by
/// the service's user, with no shell.
fn check_rootfs(bundle: &Bundle, image: &ImageSpec) {
    let rootfs = &bundle.rootfs;
    let binary = format!("usr/local/bin/{}", image.bin);
    let mut expected: BTreeSet<String> = [
        binary.clone(),
        "etc/passwd".into(),
        "etc/group".into(),
        "etc/ssl/certs/ca-certificates.crt".into(),
        format!("usr/share/sbom/{}.cdx.json", image.bin),
    ]
    .into();
    let libs = images::ldd(&rootfs.join(&binary)).unwrap();
    for lib in &libs {
        expected.insert(lib.trim_start_matches('/').to_string());
    }
    check_sbom(rootfs, image, libs.len());
    let tree = images::tree(rootfs).unwrap();
    let files: BTreeSet<String> = tree
        .iter()
        .filter(|(_, kind)| !kind.is_dir())
        .map(|(path, _)| path.clone())
        .collect();
    assert_eq!(files, expected, "{}: files in the image", image.image);
    for (path, kind) in &tree {
        assert!(kind.is_file() || kind.is_dir(), "{path}: not a plain file");
        let name = path.rsplit('/').next().unwrap();
        assert!(
            !["sh", "bash", "dash", "busybox", "ash"].contains(&name),
            "{}: shell {path}",
            image.image
        );
        let meta = std::fs::metadata(rootfs.join(path)).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (0, 0), "{path}: owned by root");
        assert_eq!(meta.mode() & 0o022, 0, "{path}: writable by others");
    }
    let mode = std::fs::metadata(rootfs.join(&binary))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755, "{binary}");
    let passwd = std::fs::read_to_string(rootfs.join("etc/passwd")).unwrap();
    assert_eq!(
        passwd
            .lines()
            .map(|l| l.split(':').nth(2).unwrap())
            .collect::<Vec<_>>(),
        vec![image.uid().to_string()],
        "{}: /etc/passwd holds only the service user",
        image.image
    );
    let group = std::fs::read_to_string(rootfs.join("etc/group")).unwrap();
    assert_eq!(
        group
            .lines()
            .map(|l| l.split(':').nth(2).unwrap())
            .collect::<Vec<_>>(),
        vec![image.gid().to_string()],
        "{}: /etc/group holds only the service group",
        image.image
    );
}

/// Each container of the rendered base and aks overlay runs what the built image declares.
fn check_manifests(built: &BTreeMap<String, (ImageSpec, Layout)>) {
    for overlay in ["base", "overlays/aks"] {
        let docs = cutover_e2e::manifests::render(overlay).unwrap();
        for (bin, (image, layout)) in built {
            let doc = docs
                .iter()
                .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == bin.as_str())
                .unwrap_or_else(|| panic!("{overlay}: no Deployment {bin}"));
            let pod = &doc["spec"]["template"]["spec"];
            let c = &pod["containers"][0];
            let reference = c["image"].as_str().unwrap();
            assert!(
                reference.ends_with(&image.reference()),
                "{overlay}: {bin} runs {reference}, the build makes {}",
                image.reference()
            );
            assert!(
                c["command"].is_null(),
                "{overlay}: {bin} keeps the entrypoint"
            );
            let config = &layout.config["config"];
            let user = config["User"].as_str().unwrap();
            let sc = &pod["securityContext"];
            assert_eq!(
                format!("{}:{}", sc["runAsUser"], sc["runAsGroup"]),
                user,
                "{overlay}: {bin} user"
            );
            let ports: BTreeSet<String> = c["ports"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| format!("{}/tcp", p["containerPort"]))
                .collect();
            let exposed: BTreeSet<String> = config["ExposedPorts"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect();
            assert_eq!(ports, exposed, "{overlay}: {bin} ports");
        }
    }
}

/// Processes whose root directory is `rootfs`, with their real uid and gid.
fn chrooted(rootfs: &Path) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let dir = entry.path();
        if std::fs::read_link(dir.join("root")).ok().as_deref() != Some(rootfs) {
            continue;
        }
        let meta = std::fs::metadata(&dir).unwrap();
        out.push((meta.uid(), meta.gid()));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn images_build_reproducibly_declare_what_they_run_and_run_the_system() {
    let specs = images::specs().unwrap();
    let target = cutover_e2e::bins::profile_dir()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let out = target.join("images");
    let work = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let first = images::build(&out).unwrap();
    println!("deploy/images.sh ({:?}):\n{first}", started.elapsed());
    let second = images::build(&work.path().join("again")).unwrap();
    let epoch: i64 = git(&["log", "-1", "--format=%ct"]).parse().unwrap();

    let mut built = BTreeMap::new();
    let mut launcher = Chroot::default();
    for image in &specs {
        let digest = printed_digest(&first, image);
        assert_eq!(
            digest,
            printed_digest(&second, image),
            "{}: two builds of one commit differ",
            image.image
        );
        let archive = out.join(format!("{}.oci.tar", image.bin));
        let layout = images::open(
            &archive,
            &work.path().join(format!("{}-layout", image.bin)),
            images::version(),
        )
        .unwrap();
        assert_eq!(layout.digest, digest, "{}: printed digest", image.image);
        check_config(&layout, image, epoch);

        let bundle = images::unpack(
            &layout,
            images::version(),
            &work.path().join(format!("{}-bundle", image.bin)),
        )
        .unwrap();
        check_rootfs(&bundle, image);
        assert_eq!(
            default_ports(&bundle.rootfs, image),
            image.port_numbers().into_iter().collect(),
            "{}: exposed ports vs the binary's default listen ports",
            image.image
        );
        launcher.bundles.insert(image.bin.clone(), bundle);
        built.insert(image.bin.clone(), (image.clone(), layout));
    }
    check_manifests(&built);
    println!("images built twice and checked: {:?}", started.elapsed());

    // The whole system with both services started from their unpacked images.
    let mut options = StackOptions::fast("aks", 8, work.path().join("run"));
    options.launcher = Arc::new(launcher.clone());
    let mut sb = Sandbox::start(options)
        .await
        .unwrap_or_else(|e| panic!("start the system from the images: {e:#}"));
    println!("system started from the images: {:?}", started.elapsed());
    for (bin, bundle) in &launcher.bundles {
        let procs = chrooted(&bundle.rootfs.canonicalize().unwrap());
        let (image, _) = &built[bin];
        let expected = if bin == "signal-svc" {
            sb.stack.signals.len()
        } else {
            sb.stack.actuators.len()
        };
        assert_eq!(
            procs,
            vec![(image.uid(), image.gid()); expected],
            "{bin}: processes chrooted into its image, as its user"
        );
    }
    let outcome = play(&mut sb, Scenario::OutOfService, 0).await;
    sb.stack.stop().await;
    assert!(
        outcome.passed(),
        "cut and restore from the images:\n  {}",
        outcome.problems.join("\n  ")
    );
    assert!(
        !outcome.cut_ms.is_empty() && !outcome.restore_ms.is_empty(),
        "one cut and one restore measured"
    );
    println!(
        "from the images: cut {:?} ms, restore {:?} ms; test took {:?}",
        outcome.cut_ms,
        outcome.restore_ms,
        started.elapsed()
    );
}
