//! Finds the binaries of the workspace (simulators, services, cutoverctl) next to the running
//! executable, building them first so a sandbox never runs stale code.
//!
//! That nested `cargo build` reuses what the invocation that built the running executable
//! compiled: every member depends on `cutover-workspace-hack`, so any selection of packages
//! resolves the same features for every dependency, and this crate depends on the services'
//! libraries, so `cargo run --bin sandbox` has already compiled everything but their `main.rs`.
//! On a fresh clone the nested build compiles and links only those; later it is a no-op.

use anyhow::{Context, bail};
use std::path::PathBuf;

/// The packages whose binaries the sandbox starts, as `(package, binary)`.
pub const BINARIES: &[(&str, &str)] = &[
    ("kube-sim", "kube-sim"),
    ("arm-sim", "arm-sim"),
    ("signal-svc", "signal-svc"),
    ("actuator-svc", "actuator-svc"),
    ("cutoverctl", "cutoverctl"),
];

/// `target/<profile>` of the running executable (`target/<profile>/deps` for test binaries).
pub fn profile_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locate the running executable")?;
    let mut dir = exe
        .parent()
        .context("executable has no parent directory")?
        .to_path_buf();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    Ok(dir)
}

/// Builds every binary in [`BINARIES`] with the profile of the running executable. Cargo makes
/// this a no-op when they are fresh.
pub fn build_all() -> anyhow::Result<()> {
    let names: Vec<&str> = BINARIES.iter().map(|(_, bin)| *bin).collect();
    build(&names)
}

/// Builds the named binaries of [`BINARIES`] with the profile of the running executable.
pub fn build(names: &[&str]) -> anyhow::Result<()> {
    let dir = profile_dir()?;
    let release = dir.file_name().is_some_and(|n| n == "release");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut cmd = std::process::Command::new(cargo);
    without_cargo_run_env(&mut cmd);
    cmd.arg("build").arg("--quiet");
    if release {
        cmd.arg("--release");
    }
    for (package, bin) in BINARIES.iter().filter(|(_, b)| names.contains(b)) {
        cmd.args(["-p", package, "--bin", bin]);
    }
    let status = cmd.status().context("run cargo build")?;
    if !status.success() {
        bail!("cargo build of the sandbox binaries failed ({status})");
    }
    Ok(())
}

/// Removes from `cmd`'s environment what `cargo run` and `cargo test` set for the program they
/// start (see the module comment), keeping the user's own cargo settings (`CARGO_HOME`,
/// `CARGO_TARGET_DIR`, `CARGO_INCREMENTAL`, `CARGO_PROFILE_*`, ...).
pub fn without_cargo_run_env(cmd: &mut std::process::Command) {
    const EXACT: &[&str] = &[
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_MANIFEST_LINKS",
        "CARGO_CRATE_NAME",
        "CARGO_BIN_NAME",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
        "CARGO_RUSTC_CURRENT_DIR",
        "OUT_DIR",
    ];
    for (key, _) in std::env::vars_os() {
        let Some(name) = key.to_str() else { continue };
        if EXACT.contains(&name)
            || name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_BIN_EXE_")
        {
            cmd.env_remove(&key);
        }
    }
}

/// The path of a built binary.
pub fn path(bin: &str) -> anyhow::Result<PathBuf> {
    let path = profile_dir()?.join(bin);
    if !path.exists() {
        bail!(
            "{} is missing: build it with `cargo build -p {bin}`",
            path.display()
        );
    }
    Ok(path)
}
