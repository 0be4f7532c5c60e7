//! Network namespaces and veth pairs made by the run itself, and removed by it: every name
//! starts with `cdp-<pid>-`, a [`Lab`] deletes its namespaces on drop, and [`remove_stale`]
//! deletes those left by runs whose process is gone. Addresses live only inside these
//! namespaces (10.77.0.0/16); nothing is configured in the caller's namespace.

use anyhow::{Context as _, bail};
use std::process::{Command, Stdio};

/// The frontend IP of the simulated load balancer (inside the LB namespace only).
pub const VIP: &str = "10.77.100.1";
pub const SERVICE_PORT: u16 = 80;
pub const HEALTHZ_PORT: u16 = 10256;
pub const HCNP_PORT: u16 = 10257;

pub fn member_ip(i: usize) -> String {
    format!("10.77.{}.2", i + 1)
}

fn run(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {args:?}"))?;
    if !out.status.success() {
        bail!("{args:?}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Run `nft -f -` with `script` inside namespace `ns`.
pub fn nft(ns: &str, script: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("spawning nft")?;
    child
        .stdin
        .take()
        .context("nft stdin")?
        .write_all(script.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "nft in {ns}: {}\n{script}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

pub fn nft_json(ns: &str, args: &[&str]) -> anyhow::Result<serde_json::Value> {
    let mut a = vec!["ip", "netns", "exec", ns, "nft", "-j"];
    a.extend_from_slice(args);
    Ok(serde_json::from_str(&run(&a)?)?)
}

/// Whether this machine lets us build the kernel realisation (root, `ip netns`, `nft`).
/// Tries it: creates and deletes one namespace with one nftables table.
pub fn kernel_available() -> Result<(), String> {
    let probe = format!("cdp-{}-check", std::process::id());
    let r = (|| -> anyhow::Result<()> {
        run(&["ip", "netns", "add", &probe])?;
        nft(
            &probe,
            "table ip t {\n  chain c { type nat hook prerouting priority dstnat; policy accept; }\n}\n",
        )?;
        run(&[
            "ip",
            "netns",
            "exec",
            &probe,
            "sysctl",
            "-qw",
            "net.ipv4.ip_forward=1",
        ])?;
        Ok(())
    })();
    let _ = run(&["ip", "netns", "del", &probe]);
    r.map_err(|e| format!("{e:#}"))
}

/// Delete `cdp-<pid>-*` namespaces whose pid is no longer running (left by a killed run).
pub fn remove_stale() {
    let Ok(list) = run(&["ip", "netns", "list"]) else {
        return;
    };
    for line in list.lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix("cdp-") else {
            continue;
        };
        let pid = rest.split('-').next().unwrap_or("");
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        if pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = run(&["ip", "netns", "del", name]);
        }
    }
}

/// One cell's namespaces: a client, the load balancer, and one per member (node).
#[derive(Debug)]
pub struct Lab {
    pub prefix: String,
    pub members: usize,
    created: Vec<String>,
}

impl Lab {
    pub fn client_ns(&self) -> String {
        format!("{}-c", self.prefix)
    }
    pub fn lb_ns(&self) -> String {
        format!("{}-lb", self.prefix)
    }
    pub fn member_ns(&self, i: usize) -> String {
        format!("{}-m{i}", self.prefix)
    }

    /// Create the namespaces and links: client 10.77.0.2 -> LB 10.77.0.1; LB 10.77.(i+1).1 ->
    /// member i 10.77.(i+1).2; the VIP is DNATed in the LB namespace.
    pub fn create(cell: &str, members: usize) -> anyhow::Result<Lab> {
        let prefix = format!("cdp-{}-{cell}", std::process::id());
        let mut lab = Lab {
            prefix,
            members,
            created: Vec::new(),
        };
        let lb = lab.lb_ns();
        let mut names = vec![lab.client_ns(), lb.clone()];
        names.extend((0..members).map(|i| lab.member_ns(i)));
        for n in &names {
            run(&["ip", "netns", "add", n])?;
            lab.created.push(n.clone());
            run(&["ip", "-n", n, "link", "set", "lo", "up"])?;
        }
        let c = lab.client_ns();
        lab.link(&c, "eth0", "10.77.0.2/24", &lb, "c0", "10.77.0.1/24")?;
        run(&[
            "ip",
            "-n",
            &c,
            "route",
            "add",
            "default",
            "via",
            "10.77.0.1",
        ])?;
        for i in 0..members {
            let m = lab.member_ns(i);
            lab.link(
                &m,
                "eth0",
                &format!("{}/24", member_ip(i)),
                &lb,
                &format!("m{i}"),
                &format!("10.77.{}.1/24", i + 1),
            )?;
            run(&[
                "ip",
                "-n",
                &m,
                "route",
                "add",
                "default",
                "via",
                &format!("10.77.{}.1", i + 1),
            ])?;
        }
        Ok(lab)
    }

    fn link(
        &self,
        a: &str,
        an: &str,
        aip: &str,
        b: &str,
        bn: &str,
        bip: &str,
    ) -> anyhow::Result<()> {
        run(&[
            "ip", "link", "add", "name", an, "netns", a, "type", "veth", "peer", "name", bn,
            "netns", b,
        ])?;
        run(&["ip", "-n", a, "addr", "add", aip, "dev", an])?;
        run(&["ip", "-n", b, "addr", "add", bip, "dev", bn])?;
        run(&["ip", "-n", a, "link", "set", an, "up"])?;
        run(&["ip", "-n", b, "link", "set", bn, "up"])?;
        Ok(())
    }

    pub fn sysctl(&self, ns: &str, kv: &str) -> anyhow::Result<()> {
        run(&["ip", "netns", "exec", ns, "sysctl", "-qw", kv]).map(|_| ())
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        // Deleting a namespace deletes its veth ends (and so the peers).
        for n in self.created.iter().rev() {
            let _ = run(&["ip", "netns", "del", n]);
        }
    }
}
