//! Loopback ports for child processes to listen on.

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
