//! The fleet-wide phase of each node's newest version, as signal-svc reports it
//! (`NodeStatus`), whichever replica wrote each load balancer.

use cutover_proto::VersionExt;
use cutover_proto::v1::{ResultPhase, Version};
use std::collections::HashMap;
use tokio::time::Instant;

/// Per node UID: the newest version signal-svc reported and the phase it reached.
#[derive(Debug, Default)]
pub(super) struct FleetPhases(HashMap<String, (Version, ResultPhase, Instant)>);

/// Order of phases within a version: FAILED, then ACCEPTED, then EFFECTIVE.
pub(super) fn rank(p: ResultPhase) -> u8 {
    match p {
        ResultPhase::Effective => 3,
        ResultPhase::Accepted => 2,
        ResultPhase::Failed => 1,
        _ => 0,
    }
}

impl FleetPhases {
    /// Newer versions replace older ones; within a version the phase only moves forward.
    /// Returns whether anything changed.
    pub(super) fn note(&mut self, uid: &str, version: Version, phase: ResultPhase) -> bool {
        match self.0.get(uid) {
            Some((v, _, _)) if version.is_newer_than(v) => {}
            Some((v, p, _)) if *v == version && rank(phase) > rank(*p) => {}
            Some(_) => return false,
            None => {}
        }
        self.0
            .insert(uid.to_owned(), (version, phase, Instant::now()));
        true
    }

    /// The fleet-wide phase of `version` of node `uid`, if reported.
    pub(super) fn phase(&self, uid: &str, version: Version) -> Option<ResultPhase> {
        self.phase_since(uid, version).map(|(p, _)| p)
    }

    /// The phase and when signal-svc reported it.
    pub(super) fn phase_since(
        &self,
        uid: &str,
        version: Version,
    ) -> Option<(ResultPhase, Instant)> {
        self.0
            .get(uid)
            .filter(|(v, _, _)| *v == version)
            .map(|(_, p, at)| (*p, *at))
    }

    /// Whether signal-svc reported that `version` of `uid` reached `phase` or later (or
    /// moved on to a newer version).
    pub(super) fn confirms(&self, uid: &str, version: Version, phase: ResultPhase) -> bool {
        match self.0.get(uid) {
            Some((v, p, _)) if *v == version => rank(*p) >= rank(phase),
            Some((v, _, _)) => v.is_newer_than(&version),
            None => false,
        }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    pub(super) fn remove(&mut self, uid: &str) {
        self.0.remove(uid);
    }

    /// Keeps the statuses of the nodes `keep` says (memory stays bounded).
    pub(super) fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.0.retain(|uid, _| keep(uid));
    }
}
