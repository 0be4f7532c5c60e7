//! The **only the leader writes Nodes** rule, shared by the whole-service simulation and the
//! chaos soak: every Node write by a signal-svc replica comes from the replica whose Lease
//! write succeeded last, or from one that lost the Lease at most `bound` before (a request
//! sent while it held it, delayed on the way). Replicas are told apart by their credential
//! (each pod's own ServiceAccount token).

use super::chaos::{Rule, Violation};

/// Milliseconds since the run began.
pub type Ms = u64;

/// One Kubernetes write by a signal-svc replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeWrite {
    pub at: Ms,
    /// Which replica (its host or process name).
    pub caller: String,
    pub method: String,
    pub path: String,
    pub status: u16,
}

/// The **only the leader writes Nodes** rule: (latest write after losing the Lease,
/// violations). The holder is the caller of the latest successful Lease write.
pub fn leader_only(writes: &[KubeWrite], bound: Ms) -> (Ms, Vec<Violation>) {
    let mut holder: Option<(&str, Ms)> = None;
    let mut lost_at: std::collections::BTreeMap<&str, Ms> = Default::default();
    let mut latest = 0;
    let mut out = Vec::new();
    for w in writes {
        let ok = (200..300).contains(&w.status);
        if w.path.contains("/leases/") || w.path.ends_with("/leases") {
            if ok {
                if let Some((h, _)) = holder
                    && h != w.caller
                {
                    lost_at.insert(h, w.at);
                }
                holder = Some((w.caller.as_str(), w.at));
            }
            continue;
        }
        if !ok || !w.path.starts_with("/api/v1/nodes") {
            continue;
        }
        if holder.is_some_and(|(h, _)| h == w.caller) {
            continue;
        }
        let late = lost_at.get(w.caller.as_str()).map(|t| w.at - t);
        let late_ms = late.unwrap_or(Ms::MAX);
        if late_ms <= bound {
            latest = latest.max(late_ms);
            continue;
        }
        out.push(Violation {
            rule: Rule::LeaderOnly,
            text: format!(
                "leader only: {} {} {} by {} at {} ms while {} held the Lease{}",
                w.method,
                w.path,
                w.status,
                w.caller,
                w.at,
                holder.map_or("nobody", |(h, _)| h),
                late.map_or(String::new(), |l| format!(" ({l} ms after it lost it)"))
            ),
        });
    }
    (latest, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kube(at: Ms, caller: &str, path: &str) -> KubeWrite {
        KubeWrite {
            at,
            caller: caller.into(),
            method: "PATCH".into(),
            path: path.into(),
            status: 200,
        }
    }

    const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/cutover/leases/cutover-signal-svc";
    const NODE: &str = "/api/v1/nodes/n1/status";

    #[test]
    fn node_writes_by_the_holder_pass_and_by_a_deposed_leader_fail() {
        let w = [
            kube(0, "signal-1", LEASE),
            kube(100, "signal-1", NODE),
            kube(5_000, "signal-2", LEASE),
            kube(5_500, "signal-1", NODE),
            kube(9_000, "signal-1", NODE),
            kube(9_100, "signal-2", NODE),
        ];
        let (latest, v) = leader_only(&w, 1_000);
        assert_eq!(latest, 500);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].text.contains("9000 ms"), "{v:?}");
    }

    #[test]
    fn a_write_by_a_replica_that_never_led_fails() {
        let w = [kube(0, "signal-1", LEASE), kube(10, "signal-2", NODE)];
        assert_eq!(leader_only(&w, 1_000).1.len(), 1);
        // A failed Lease write does not make a holder.
        let mut lease = kube(20, "signal-2", LEASE);
        lease.status = 409;
        let w = [
            kube(0, "signal-1", LEASE),
            lease,
            kube(30, "signal-2", NODE),
        ];
        assert_eq!(leader_only(&w, 1_000).1.len(), 1);
    }
}
