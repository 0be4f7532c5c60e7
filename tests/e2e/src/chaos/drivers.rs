//! The soak's fault drivers: each scheduled fault turned into I/O against the simulators'
//! fault switches (kube-sim: latency, failed requests, watch drops, compaction; arm-sim: 429
//! storms, outages, failed operations, the outside writer), the Kubernetes API (the Lease
//! deleted) and the service processes (signals, restarts). Every fault is recorded with the
//! times it really started and ended, which is what the judge reads.

use super::schedule::{Fault, FaultKind, Rng};
use super::workload::Desired;
use crate::judge::State;
use crate::judge::chaos::Active;
use crate::stack::{Service, Stack};
use arm_sim::faults::FaultSpec;
use k8s_openapi::api::coordination::v1::Lease;
use kube_sim::FailRule;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

/// The Lease signal-svc elects its leader on (deploy/'s default name and namespace).
const LEASE: &str = "cutover-signal-svc";

/// What the leadership sampler saw: which signal-svc replica leads now.
#[derive(Debug, Clone, Default)]
pub struct Leadership {
    pub leader: Arc<Mutex<Option<usize>>>,
    /// New epochs in the order seen: `(when, epoch)`.
    pub epochs: Arc<Mutex<Vec<(jiff::Timestamp, u64)>>>,
}

fn metric(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}

impl Leadership {
    /// Samples every signal-svc replica's `/metrics` every 250 ms (a stopped replica's
    /// sample times out after a second; the others go on).
    pub fn follow(stack: &Stack) -> Leadership {
        let me = Leadership::default();
        for (i, s) in stack.signals.iter().enumerate() {
            let url = format!("{}/metrics", s.admin_url());
            let me = me.clone();
            tokio::spawn(async move {
                loop {
                    let text =
                        tokio::time::timeout(Duration::from_secs(1), crate::http::get_text(&url))
                            .await
                            .ok()
                            .flatten();
                    if let Some(text) = text
                        && metric(&text, "cutover_signal_leader") == Some(1)
                        && let Some(epoch) = metric(&text, "cutover_signal_leader_epoch")
                    {
                        *me.leader.lock() = Some(i);
                        let mut epochs = me.epochs.lock();
                        if epochs.last().is_none_or(|(_, e)| epoch > *e) {
                            epochs.push((jiff::Timestamp::now(), epoch));
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            });
        }
        me
    }
}

/// One fault in progress: what to undo when its length is over.
#[derive(Debug)]
pub struct Running {
    pub fault: Fault,
    pub record: usize,
    /// The process a process fault acts on: (signal-svc?, index).
    pub process: Option<(bool, usize)>,
    /// The load balancer a removal took away.
    pub lb: Option<String>,
}

/// Injects faults into a running stack and records them.
pub struct Drivers {
    pub active: Vec<Active>,
    pub rng: Rng,
    kube: kube::Client,
}

impl Drivers {
    pub fn new(kube: kube::Client, seed: u64) -> Drivers {
        Drivers {
            active: Vec::new(),
            rng: Rng::new(seed ^ 0xD1B5_4A32_D192_ED03),
            kube,
        }
    }

    fn record(&mut self, kind: FaultKind, param: u64) -> usize {
        let now = jiff::Timestamp::now();
        self.active.push(Active {
            kind,
            start: now,
            end: now,
            param,
            lb: None,
        });
        self.active.len() - 1
    }

    /// Starts `fault`; returns what to finish later (faults with a length or a restart).
    pub async fn start(
        &mut self,
        stack: &mut Stack,
        lead: &Leadership,
        desired: &Desired,
        fault: &Fault,
    ) -> Option<Running> {
        let record = self.record(fault.kind, fault.param);
        let mut process = None;
        let mut lb = None;
        let ms = fault.length.as_millis() as u64;
        match fault.kind {
            FaultKind::KubeLatency => stack
                .kube
                .sim()
                .set_latency(Duration::from_millis(fault.param)),
            FaultKind::KubeFailures => {
                let paths = [
                    "/api/v1/nodes",
                    "/api/v1/events",
                    "/apis/coordination.k8s.io/v1/namespaces/cutover/leases",
                ];
                let statuses = [500, 503, 504, 429];
                let path = paths[fault.target % paths.len()];
                let status = statuses[(fault.target / paths.len()) % statuses.len()];
                stack
                    .kube
                    .sim()
                    .fail_next(FailRule::new(status, fault.param as u32).path_prefix(path));
            }
            FaultKind::LeaseOutage => {
                stack.kube.sim().fail_next(
                    FailRule::new(503, u32::MAX).path_prefix("/apis/coordination.k8s.io"),
                );
                // The standby stopped through the outage (with one replica, nobody).
                let n = stack.signals.len();
                if n > 1 {
                    let leader = lead.leader.lock().unwrap_or(0);
                    let i = (leader + 1) % n;
                    signal(&mut stack.signals[i], FaultKind::SignalStop).await;
                    process = Some((true, i));
                }
            }
            FaultKind::WatchDrop => stack.kube.sim().close_watches(),
            FaultKind::WatchExpired => {
                stack.kube.sim().compact();
                stack.kube.sim().close_watches();
            }
            FaultKind::LeaseDeleted => {
                let leases: kube::Api<Lease> =
                    kube::Api::namespaced(self.kube.clone(), crate::stack::SIGNAL_NAMESPACE);
                if let Err(e) = leases.delete(LEASE, &Default::default()).await {
                    eprintln!("chaos: deleting the Lease failed: {e}");
                }
            }
            FaultKind::SignalKill | FaultKind::SignalTerm | FaultKind::SignalStop => {
                let leader = lead.leader.lock().unwrap_or(0);
                let n = stack.signals.len();
                let i = if fault.target == 0 {
                    leader
                } else {
                    (leader + 1) % n
                };
                signal(&mut stack.signals[i], fault.kind).await;
                process = Some((true, i));
            }
            FaultKind::ActuatorKill | FaultKind::ActuatorStop | FaultKind::ActuatorRestart => {
                let i = fault.target % stack.actuators.len();
                signal(&mut stack.actuators[i], fault.kind).await;
                process = Some((false, i));
            }
            FaultKind::ArmThrottle => stack.arm.faults(FaultSpec {
                throttle_for_ms: Some(ms),
                ..Default::default()
            }),
            FaultKind::ArmOutage => stack.arm.faults(FaultSpec {
                outage_for_ms: Some(ms),
                ..Default::default()
            }),
            FaultKind::ArmFailedOps => stack.arm.faults(FaultSpec {
                fail_operations: Some(fault.param as u32),
                ..Default::default()
            }),
            FaultKind::OutsideDown | FaultKind::OutsideNone => {
                let want = if fault.kind == FaultKind::OutsideDown {
                    State::None
                } else {
                    State::Down
                };
                let nodes = desired.nodes_in(want);
                let all: Vec<String> = stack.cluster.nodes.iter().map(|n| n.name.clone()).collect();
                let pick = self
                    .rng
                    .pick(if nodes.is_empty() { &all } else { &nodes })
                    .cloned();
                let entries = pick
                    .map(|n| crate::judge::node_entries(&stack.cluster, &n))
                    .unwrap_or_default();
                if let Some((lb, pool, target)) = self.rng.pick(&entries).cloned() {
                    let value = (fault.kind == FaultKind::OutsideDown)
                        .then_some(arm_sim::model::AdminState::Down);
                    if let Err(e) = stack.arm.outside_write(&lb, &pool, &target, value) {
                        eprintln!("chaos: outside write failed: {e:?}");
                    }
                }
            }
            FaultKind::LbRemoved => {
                let internal: Vec<&str> = stack
                    .cluster
                    .load_balancers
                    .iter()
                    .filter(|l| l.internal)
                    .map(|l| l.name.as_str())
                    .collect();
                if let Some(name) = internal.get(fault.target % internal.len().max(1)) {
                    lb = remove_lb(&stack.arm, name).await;
                    // The fault starts when the LB is really gone.
                    if let Some(a) = self.active.get_mut(record) {
                        a.start = jiff::Timestamp::now();
                        a.end = a.start;
                        a.lb = lb.clone();
                    }
                }
            }
        }
        let ends = !fault.length.is_zero()
            || matches!(
                fault.kind,
                FaultKind::ActuatorRestart | FaultKind::SignalKill | FaultKind::SignalTerm
            );
        ends.then(|| Running {
            fault: fault.clone(),
            record,
            process,
            lb,
        })
    }

    /// Ends a fault started by [`Drivers::start`]: latency back to zero, a stopped process
    /// woken, a killed or terminated one started again. ARM storms and outages end by
    /// themselves at their length.
    pub async fn finish(&mut self, stack: &mut Stack, running: Running) {
        let run_dir = stack.options.run_dir.clone();
        match (running.fault.kind, running.process) {
            (FaultKind::KubeLatency, _) => stack.kube.sim().set_latency(Duration::ZERO),
            (FaultKind::LeaseOutage, process) => {
                stack.kube.sim().clear_failures();
                if let Some((sig, i)) = process
                    && let Some(p) = service(stack, sig, i).proc.as_ref()
                {
                    p.signal("CONT").await;
                }
            }
            (FaultKind::SignalStop | FaultKind::ActuatorStop, Some((sig, i))) => {
                let service = service(stack, sig, i);
                if let Some(p) = service.proc.as_ref() {
                    p.signal("CONT").await;
                }
            }
            (
                FaultKind::SignalKill
                | FaultKind::SignalTerm
                | FaultKind::ActuatorKill
                | FaultKind::ActuatorRestart,
                Some((sig, i)),
            ) => {
                let service = service(stack, sig, i);
                if let Some(p) = service.proc.as_mut() {
                    // A terminated process gets its grace period, then its pod is gone anyway.
                    p.terminate(Duration::from_secs(10)).await;
                }
                if let Err(e) = Stack::restart(service, &run_dir).await {
                    eprintln!("chaos: {e:#}");
                }
            }
            (FaultKind::LbRemoved, _) => {
                if let Some(lb) = &running.lb
                    && let Err(e) = stack.arm.recreate_lb(lb)
                {
                    eprintln!("chaos: re-creating {lb} failed: {e}");
                }
            }
            _ => {}
        }
        if let Some(a) = self.active.get_mut(running.record) {
            a.end = jiff::Timestamp::now();
        }
    }
}

/// Deletes `name` as its owner would: retried while an operation holds it (NRP serializes
/// the DELETE behind it), for up to 30 s.
async fn remove_lb(arm: &arm_sim::ArmSim, name: &str) -> Option<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match arm.remove_lb(name) {
            Ok(()) => return Some(name.to_string()),
            Err(e) if e.status.as_u16() == 429 && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => {
                eprintln!("chaos: removing {name} failed: {e:?}");
                return None;
            }
        }
    }
}

fn service(stack: &mut Stack, signal: bool, i: usize) -> &mut Service {
    if signal {
        &mut stack.signals[i]
    } else {
        &mut stack.actuators[i]
    }
}

/// Sends the process fault's signal.
async fn signal(service: &mut Service, kind: FaultKind) {
    let Some(p) = service.proc.as_mut() else {
        return;
    };
    match kind {
        FaultKind::SignalKill | FaultKind::ActuatorKill => p.kill().await,
        FaultKind::SignalTerm | FaultKind::ActuatorRestart => p.signal("TERM").await,
        FaultKind::SignalStop | FaultKind::ActuatorStop => p.signal("STOP").await,
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_read_by_exact_name() {
        let text = "# HELP x\ncutover_signal_leader_epoch 7\ncutover_signal_leader 1\n";
        assert_eq!(metric(text, "cutover_signal_leader"), Some(1));
        assert_eq!(metric(text, "cutover_signal_leader_epoch"), Some(7));
        assert_eq!(metric(text, "cutover_signal_lead"), None);
    }
}
