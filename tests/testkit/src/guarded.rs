//! Child processes that never outlive the test: each runs in its own process group under a
//! small shell watchdog that kills it once the test process is gone (a panic that aborts, a
//! SIGKILL of the test binary), and dropping the handle kills the whole group.

use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A running child; killed with its group on drop.
#[derive(Debug)]
pub struct Guarded {
    name: String,
    child: Child,
}

// `$1` is the test's pid, the rest the command. The watchdog polls once a second.
const WATCHDOG: &str = r#"parent=$1; shift
"$@" & child=$!
trap 'kill -TERM "$child" 2>/dev/null; exit 0' TERM INT
while kill -0 "$parent" 2>/dev/null && kill -0 "$child" 2>/dev/null; do sleep 1; done
kill -KILL "$child" 2>/dev/null
wait "$child""#;

impl Guarded {
    /// Starts `program args` with output appended to `log`.
    pub fn spawn(name: &str, program: &Path, args: &[String], log: &Path) -> std::io::Result<Self> {
        use std::os::unix::process::CommandExt;
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        let child = Command::new("sh")
            .arg("-c")
            .arg(WATCHDOG)
            .arg("sh")
            .arg(std::process::id().to_string())
            .arg(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0)
            .spawn()?;
        Ok(Guarded {
            name: name.to_owned(),
            child,
        })
    }

    /// `Some(status)` once the child (its watchdog) has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The process group id (= the watchdog's pid).
    pub fn pgid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal to the whole group (the binary and its watchdog).
    pub fn signal_group(&self, signal: &str) {
        let _ = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg("--")
            .arg(format!("-{}", self.pgid()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        self.signal_group("KILL");
        let _ = self.child.wait();
    }
}
