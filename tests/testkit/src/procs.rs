//! Child processes of the sandbox and the tests: started with their output in a log file,
//! optionally waiting for the `listening on http://ADDR` line the simulators print first, and
//! stopped with SIGTERM (graceful) or SIGKILL (a crash) on request or when dropped.

use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

/// A running child process.
#[derive(Debug)]
pub struct Proc {
    pub name: String,
    pub log: PathBuf,
    child: Child,
}

/// What to start.
#[derive(Debug, Clone)]
pub struct Spec {
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Start from an empty environment instead of this process's (as a container does).
    pub clear_env: bool,
}

impl Spec {
    pub fn new(name: &str, program: PathBuf) -> Self {
        Spec {
            name: name.to_string(),
            program,
            args: Vec::new(),
            env: Vec::new(),
            clear_env: false,
        }
    }

    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, args: I) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    pub fn env(mut self, key: &str, value: impl Into<String>) -> Self {
        self.env.push((key.to_string(), value.into()));
        self
    }
}

impl Proc {
    /// Starts `spec`, appending stdout and stderr to `<log_dir>/<name>.log`.
    pub async fn start(spec: &Spec, log_dir: &Path) -> anyhow::Result<Proc> {
        let (proc, _) = Self::spawn(spec, log_dir, false).await?;
        Ok(proc)
    }

    /// Starts `spec` and waits (up to 60 s) for its first stdout line
    /// `listening on http://ADDR`; returns the URL.
    pub async fn start_listening(spec: &Spec, log_dir: &Path) -> anyhow::Result<(Proc, String)> {
        let (proc, url) = Self::spawn(spec, log_dir, true).await?;
        Ok((proc, url.unwrap_or_default()))
    }

    async fn spawn(
        spec: &Spec,
        log_dir: &Path,
        want_url: bool,
    ) -> anyhow::Result<(Proc, Option<String>)> {
        let log = log_dir.join(format!("{}.log", spec.name));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .with_context(|| format!("open {}", log.display()))?;
        let stderr = file.try_clone()?;
        let mut cmd = Command::new(&spec.program);
        if spec.clear_env {
            cmd.env_clear();
        }
        cmd.args(&spec.args)
            .envs(spec.env.iter().cloned())
            .stdin(Stdio::null())
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true);
        if want_url {
            cmd.stdout(Stdio::piped());
        } else {
            cmd.stdout(Stdio::from(file.try_clone()?));
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("start {}", spec.program.display()))?;
        let mut url = None;
        if let Some(stdout) = child.stdout.take() {
            let mut lines = BufReader::new(stdout).lines();
            let first = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
                .await
                .with_context(|| format!("{} printed nothing within 60 s", spec.name))??;
            let Some(first) = first else {
                bail!(
                    "{} exited before it printed its address; see {}",
                    spec.name,
                    log.display()
                );
            };
            let Some(addr) = first.strip_prefix("listening on ") else {
                bail!(
                    "{} printed {first:?} instead of `listening on http://ADDR`",
                    spec.name
                );
            };
            url = Some(addr.trim().to_string());
            // Keep draining stdout into the log so the child never blocks on a full pipe.
            let mut sink = tokio::fs::File::from_std(file);
            tokio::spawn(async move {
                let _ = sink.write_all(format!("{first}\n").as_bytes()).await;
                while let Ok(Some(line)) = lines.next_line().await {
                    let _ = sink.write_all(format!("{line}\n").as_bytes()).await;
                }
            });
        }
        Ok((
            Proc {
                name: spec.name.clone(),
                log,
                child,
            },
            url,
        ))
    }

    /// True while the process runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// A crash: SIGKILL, no chance to clean up.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    /// Waits up to `timeout` for the process to exit on its own: its exit status, or `None` if
    /// it still runs (a drain that did not finish).
    pub async fn exit_within(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        tokio::time::timeout(timeout, self.child.wait())
            .await
            .ok()?
            .ok()
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Sends a signal by name (`STOP` freezes the process like a hung node, `CONT` wakes it).
    pub async fn signal(&self, name: &str) {
        if let Some(pid) = self.child.id() {
            signal_pid(pid, name).await;
        }
    }

    /// A graceful stop: SIGTERM, then SIGKILL if still running after `grace`.
    pub async fn terminate(&mut self, grace: Duration) {
        if let Some(pid) = self.child.id() {
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await;
            if tokio::time::timeout(grace, self.child.wait()).await.is_ok() {
                return;
            }
        }
        self.kill().await;
    }

    /// The last `lines` lines of the process's log, for error messages.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

/// Sends the signal `name` to `pid`.
pub async fn signal_pid(pid: u32, name: &str) {
    let _ = Command::new("kill")
        .args([format!("-{name}"), pid.to_string()])
        .status()
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_address_line_is_read_and_the_rest_logged() {
        let dir =
            std::env::temp_dir().join(format!("cutover-testkit-procs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let spec = Spec::new("child", "sh".into())
            .arg("-c")
            .arg("echo 'listening on http://127.0.0.1:9'; echo second; echo oops >&2; sleep 30");
        let (mut proc, url) = Proc::start_listening(&spec, &dir).await.unwrap();
        assert_eq!(url, "http://127.0.0.1:9");
        crate::wait::eventually("the second line in the log", || {
            let tail = proc.log_tail(5);
            async move { (tail.contains("second") && tail.contains("oops")).then_some(()) }
        })
        .await;
        assert!(proc.is_running());
        proc.terminate(Duration::from_secs(5)).await;
        assert!(!proc.is_running());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn an_exit_after_a_signal_is_seen_with_its_status() {
        let dir = std::env::temp_dir().join(format!("cutover-testkit-exit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let spec = Spec::new("drains", "sh".into())
            .arg("-c")
            .arg("trap 'exit 0' TERM; while :; do sleep 0.05; done");
        let mut proc = Proc::start(&spec, &dir).await.unwrap();
        assert!(proc.exit_within(Duration::from_millis(200)).await.is_none());
        proc.signal("TERM").await;
        let exit = proc.exit_within(Duration::from_secs(5)).await;
        assert!(exit.is_some_and(|s| s.success()), "{exit:?}");
        assert!(!proc.is_running());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
