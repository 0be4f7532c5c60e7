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

/// A port on 127.0.0.1 for a child to listen on. Picked below Linux's ephemeral range
/// (32768-60999): a port the OS hands out for `:0` is released before the child binds it, and
/// meanwhile any outbound connection on the machine (this test's own clients, a test run next
/// door) may take it as its source port. Below the range only another listener can, and the
/// bind check here sees that; the remaining race is with listeners alone (see
/// [`lost_its_port`]).
pub fn free_port() -> std::io::Result<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    // Spread processes by id, walk by a counter: concurrent runs rarely even try the same.
    let start = std::process::id().wrapping_mul(7919);
    for _ in 0..200 {
        let n = start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed).wrapping_mul(97));
        let port = 20_000 + (n % 12_000) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Whether a child's log says it could not bind its port (someone took it after
/// [`free_port`] checked): worth one more start on other ports, unlike any other failure.
pub fn lost_its_port(log_tail: &str) -> bool {
    log_tail.contains("address already in use")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_come_from_below_the_ephemeral_range_and_are_free() {
        for _ in 0..20 {
            let port = free_port().unwrap();
            assert!((20_000..32_000).contains(&port), "{port}");
            std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
        }
    }

    #[test]
    fn only_a_taken_port_is_worth_another_start() {
        let etcd = "listen tcp 127.0.0.1:34547: bind: address already in use";
        assert!(lost_its_port(etcd));
        assert!(!lost_its_port(
            "open /tmp/x/serving.crt: no such file or directory"
        ));
    }
}
