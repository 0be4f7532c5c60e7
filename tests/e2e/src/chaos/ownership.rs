//! Which load balancers each actuator says it writes, for the one-writer rule
//! (`judge::writer`): its `cutover_actuator_load_balancer_owned` gauge, read from `/metrics`
//! every [`EVERY`]. The gauge follows grants as they come and lapse (actuator-svc
//! `spawn_ownership_gauge`). A replica that does not answer within [`TIMEOUT`] (stopped,
//! restarting or frozen) is recorded as owning nothing: such a process sends nothing, and a
//! write it sent before is the rule's in-flight allowance.

use crate::judge::leader::Ms;
use crate::stack::Stack;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// How often each actuator is read.
pub const EVERY: Duration = Duration::from_millis(100);
/// A read not answered in this long counts as a replica that owns nothing.
const TIMEOUT: Duration = Duration::from_millis(400);

const GAUGE: &str = "cutover_actuator_load_balancer_owned{load_balancer=\"";

/// One change seen: (ms since `origin`, actuator, load balancer lower-cased, owns), as
/// `judge::writer::one_writer` takes it.
pub type Owned = (Ms, String, String, bool);

/// Every change seen.
#[derive(Debug, Clone, Default)]
pub struct Ownership {
    pub log: Arc<Mutex<Vec<Owned>>>,
}

/// The owned gauge's load balancers and values in a `/metrics` text.
pub fn owned(text: &str) -> BTreeMap<String, bool> {
    text.lines()
        .filter_map(|l| l.strip_prefix(GAUGE))
        .filter_map(|rest| {
            let (lb, value) = rest.split_once("\"} ")?;
            let value: f64 = value.trim().parse().ok()?;
            Some((lb.to_ascii_lowercase(), value >= 1.0))
        })
        .collect()
}

/// Milliseconds from `origin` to now (0 before it).
pub fn since(origin: jiff::Timestamp, at: jiff::Timestamp) -> Ms {
    at.duration_since(origin).as_millis().max(0) as Ms
}

impl Ownership {
    /// Records each change of `seen` against `last`: a start of ownership at `began` (the
    /// previous read, the earliest it can have started), an end at `ended` (this read).
    fn record(
        &self,
        name: &str,
        last: &mut BTreeMap<String, bool>,
        seen: BTreeMap<String, bool>,
        began: Ms,
        ended: Ms,
    ) {
        let mut log = self.log.lock();
        for (lb, owns) in seen {
            if last.get(&lb) != Some(&owns) {
                let at = if owns { began } else { ended };
                log.push((at, name.to_owned(), lb.clone(), owns));
                last.insert(lb, owns);
            }
        }
    }

    /// Starts one sampler per actuator; they run until the runtime ends.
    pub fn follow(stack: &Stack, origin: jiff::Timestamp) -> Ownership {
        let me = Ownership::default();
        for a in &stack.actuators {
            let url = format!("{}/metrics", a.admin_url());
            let (name, me) = (a.name.clone(), me.clone());
            tokio::spawn(async move {
                let mut last: BTreeMap<String, bool> = BTreeMap::new();
                // When the previous read was sent: a grant seen now may have come just after.
                let mut previous = since(origin, jiff::Timestamp::now());
                loop {
                    let sent = since(origin, jiff::Timestamp::now());
                    let text = tokio::time::timeout(TIMEOUT, crate::http::get_text(&url))
                        .await
                        .ok()
                        .flatten();
                    let answered = since(origin, jiff::Timestamp::now());
                    let seen = match text {
                        Some(t) => owned(&t),
                        // Owns nothing: every LB it was seen owning ends here.
                        None => last.keys().map(|lb| (lb.clone(), false)).collect(),
                    };
                    me.record(&name, &mut last, seen, previous, answered);
                    previous = sent;
                    tokio::time::sleep(EVERY).await;
                }
            });
        }
        me
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gauge_is_read_per_load_balancer() {
        let text = "# HELP cutover_actuator_load_balancer_owned x\n\
            cutover_actuator_load_balancer_owned{load_balancer=\"Kubernetes\"} 1\n\
            cutover_actuator_load_balancer_owned{load_balancer=\"kubernetes-internal\"} 0\n\
            cutover_actuator_load_balancer_owned_total{load_balancer=\"x\"} 1\n";
        let got = owned(text);
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got["kubernetes"]);
        assert!(!got["kubernetes-internal"]);
    }
}
