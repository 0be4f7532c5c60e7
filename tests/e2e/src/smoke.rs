//! The CI smokes of the bench binaries: one run with `--smoke` and a temporary run directory,
//! which must exit 0; the caller reads the printed table.

use std::process::Command;

/// Runs `exe --smoke args... --run-dir=<temp>` and returns its stdout, or a message with both
/// outputs when it failed.
pub fn run(exe: &str, args: &[&str]) -> Result<String, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let out = Command::new(exe)
        .arg("--smoke")
        .args(args)
        .arg(format!("--run-dir={}", dir.path().display()))
        .output()
        .map_err(|e| format!("cannot run {exe}: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "{exe} --smoke failed ({}):\n{stdout}\n{stderr}",
            out.status
        ));
    }
    Ok(stdout)
}
