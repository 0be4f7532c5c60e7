//! One writer per load balancer: which live actuator stream writes which load balancer.
//!
//! The leader knows the managed load balancers from the streams' `HelloAck`s (their union) and
//! which streams are live (acknowledged, snapshot sent, not failed). Each load balancer goes to
//! one live stream by rendezvous hashing of its name over the live endpoints
//! ([`super::route::pick`]), so a replica joining or leaving moves only the load balancers it
//! wins or held.
//!
//! Handover without overlap: an actuator's assignment lapses `valid_for` after the last one it
//! received. When a stream ends, the load balancers it was told it holds are *fenced*: nobody
//! *else* gets them until `valid_for` has passed since the last assignment sent on that
//! stream, by which time the old holder has stopped writing on its own (frozen or not). The
//! same replica (same endpoint) reconnecting gets its fenced load balancers back at once:
//! a reconnect of a live replica never leaves its load balancers without a writer. A joining
//! replica takes its share at once; the old holder is told in the same round (etags keep that
//! brief overlap correct: both hold the same versioned states).
//!
//! The managed set follows the live streams: a load balancer goes only to a stream whose
//! replica manages it (its `HelloAck`, then any `ManagedLoadBalancers` it sends up the same
//! stream, see [`Assigner::manages`]), and one no live stream reports (removed from the
//! configuration) leaves the plan once its fence has lapsed.
//!
//! Pure: time is an argument; the stream tasks send what [`Assigner::due`] returns and report
//! it with [`Assigner::sent`].

use super::route;
use cutover_proto::v1::Assignment;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tokio::time::Instant;

/// Identifies one live stream (an endpoint can reconnect: the old stream's late `leave` must
/// not remove the new one).
pub type StreamId = u64;

#[derive(Debug)]
struct Slot {
    endpoint: String,
    /// The load balancers this stream's replica manages (its `HelloAck`).
    manages: BTreeSet<String>,
    /// The current plan for this stream.
    planned: BTreeSet<String>,
    planned_generation: u64,
    /// What the stream was last told, and when.
    told: BTreeSet<String>,
    told_generation: Option<u64>,
    told_at: Option<Instant>,
    /// Every assignment sent on the stream that the replica may still act on: numbered from 1
    /// in sending order, with its load balancers and when it was sent. An entry goes once
    /// the replica acknowledged a later one (its `Renew` number `k` says it took the k-th
    /// assignment, and dropped what earlier ones gave), or once its `valid_for` has passed
    /// since it was sent (the replica's right under it has ended by then).
    unacked: Vec<(u64, BTreeSet<String>, Instant)>,
    sends: u64,
}

impl Slot {
    /// The load balancers the replica may still act on, each with when its right ends at
    /// the latest.
    fn holding(&self, valid_for: Duration, now: Instant) -> BTreeMap<String, Instant> {
        let mut out: BTreeMap<String, Instant> = BTreeMap::new();
        for (_, lbs, at) in &self.unacked {
            let until = *at + valid_for;
            if until <= now {
                continue;
            }
            for lb in lbs {
                let e = out.entry(lb.clone()).or_insert(until);
                *e = (*e).max(until);
            }
        }
        out
    }
}

/// What changed in one call, for logs and metrics.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The plan changed: every live stream has a new assignment due.
    pub changed: bool,
    /// Load balancers handed over from a dead stream once its assignment lapsed.
    pub failed_over: usize,
}

/// Assignment state of one leadership.
#[derive(Debug)]
pub struct Assigner {
    epoch: u64,
    generation: u64,
    valid_for: Duration,
    next_id: StreamId,
    managed: BTreeSet<String>,
    slots: BTreeMap<StreamId, Slot>,
    /// Load balancer -> when the assignment of its last (dead) holder has lapsed, and that
    /// holder's endpoint (which may take it back at once).
    fenced: BTreeMap<String, (Instant, String)>,
    /// A new epoch's quiet period (see [`Assigner::begin`]).
    quiet_until: Option<Instant>,
}

impl Assigner {
    pub fn new(valid_for: Duration) -> Self {
        Self {
            epoch: 0,
            generation: 0,
            valid_for,
            next_id: 0,
            managed: BTreeSet::new(),
            slots: BTreeMap::new(),
            fenced: BTreeMap::new(),
            quiet_until: None,
        }
    }

    pub fn valid_for(&self) -> Duration {
        self.valid_for
    }

    /// How often a live stream's assignment is repeated.
    pub fn heartbeat(&self) -> Duration {
        self.valid_for / 3
    }

    /// Leadership under `epoch` (re)starts at `now`.
    ///
    /// - The same epoch again (this process re-took its own Lease record after its streams
    ///   closed): the generation goes on and the fences of its ended streams stay. Restarting
    ///   the generation made every actuator refuse the new assignments as stale (N1).
    /// - A new epoch: nothing is known about the streams of the previous leader, whose
    ///   grants may live up to `valid_for` after its last assignment (an actuator that never
    ///   hears our `Hello` does not retire them). Nobody is given a load balancer before
    ///   `now + valid_for` ([`Assigner::quiet_until`]). This holds for epoch 1 too: a Lease
    ///   created from nothing may follow a deleted one whose holder (this very process before
    ///   a restart) gave grants under epoch 1, and an actuator frozen since then cannot say
    ///   so (the fleet simulation, seeds 8838 and 9830: up to 520 ms of two writers when the
    ///   first epoch started at once).
    pub fn begin(&mut self, epoch: u64, now: Instant) {
        if epoch == self.epoch && epoch != 0 {
            return;
        }
        self.epoch = epoch;
        self.generation = 0;
        self.managed.clear();
        self.slots.clear();
        self.fenced.clear();
        self.quiet_until = Some(now + self.valid_for);
    }

    /// Before this instant a new leadership gives no load balancer to anyone (see
    /// [`Assigner::begin`]).
    pub fn quiet_until(&self) -> Option<Instant> {
        self.quiet_until
    }

    /// The epoch the assignments are made under.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The newest generation made under the epoch.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Every load balancer a live stream reports, or a dead one held and is still fenced.
    pub fn managed(&self) -> &BTreeSet<String> {
        &self.managed
    }

    /// A stream became live (acknowledged, snapshot sent) managing `load_balancers`.
    pub fn join(
        &mut self,
        endpoint: &str,
        load_balancers: &[String],
        now: Instant,
    ) -> (StreamId, Outcome) {
        self.next_id += 1;
        let id = self.next_id;
        self.slots.insert(
            id,
            Slot {
                endpoint: endpoint.to_owned(),
                manages: load_balancers.iter().cloned().collect(),
                planned: BTreeSet::new(),
                planned_generation: 0,
                told: BTreeSet::new(),
                told_generation: None,
                told_at: None,
                unacked: Vec::new(),
                sends: 0,
            },
        );
        (id, self.replan(now, true))
    }

    /// A stream ended (failed, closed, or stopped). What it was told it holds stays fenced
    /// until that assignment has lapsed at the actuator.
    pub fn leave(&mut self, id: StreamId, now: Instant) -> Outcome {
        let Some(slot) = self.slots.remove(&id) else {
            return Outcome::default();
        };
        for (lb, until) in slot.holding(self.valid_for, now) {
            let f = self
                .fenced
                .entry(lb)
                .or_insert((until, slot.endpoint.clone()));
            if until >= f.0 {
                *f = (until, slot.endpoint.clone());
            }
        }
        self.replan(now, true)
    }

    /// The replica of stream `id` manages `load_balancers` now (`ManagedLoadBalancers` on its
    /// stream): an added load balancer gets an owner, one that no live stream manages any more
    /// leaves the plan. The stream stays: what it keeps stays its own.
    pub fn manages(&mut self, id: StreamId, load_balancers: &[String], now: Instant) -> Outcome {
        let Some(slot) = self.slots.get_mut(&id) else {
            return Outcome::default();
        };
        let manages: BTreeSet<String> = load_balancers.iter().cloned().collect();
        if slot.manages == manages {
            return Outcome::default();
        }
        slot.manages = manages;
        self.replan(now, false)
    }

    /// Time passed: fences may have lapsed.
    pub fn tick(&mut self, now: Instant) -> Outcome {
        self.replan(now, false)
    }

    /// The next instant at which [`Assigner::tick`] can change something, if any.
    pub fn next_fence_expiry(&self) -> Option<Instant> {
        // A released load balancer that its old holder has not acknowledged yet waits for
        // the lapse of the grants that gave it.
        let held = self.slots.values().flat_map(|s| {
            s.unacked
                .iter()
                .filter(|(_, lbs, _)| lbs.iter().any(|lb| !s.planned.contains(lb)))
                .map(|(_, _, at)| *at + self.valid_for)
        });
        self.fenced
            .values()
            .map(|(at, _)| *at)
            .chain(self.quiet_until)
            .chain(held)
            .min()
    }

    /// The assignment to send on a stream now: a new plan, or a heartbeat when the last one
    /// is `valid_for / 3` old.
    pub fn due(&self, id: StreamId, now: Instant) -> Option<Assignment> {
        let slot = self.slots.get(&id)?;
        let fresh = slot.told_generation != Some(slot.planned_generation);
        let stale = slot
            .told_at
            .is_none_or(|at| now.duration_since(at) >= self.heartbeat());
        (fresh || stale).then(|| Assignment {
            leader_epoch: self.epoch,
            generation: slot.planned_generation,
            load_balancers: slot.planned.iter().cloned().collect(),
            valid_for: prost_types::Duration::try_from(self.valid_for).ok(),
            // Filled in by the stream, which reads the actuator's renewals.
            echo: 0,
        })
    }

    /// When the stream's next assignment is due (`now` if one is due already).
    pub fn next_due(&self, id: StreamId, now: Instant) -> Option<Instant> {
        let slot = self.slots.get(&id)?;
        Some(match slot.told_at {
            Some(at) if slot.told_generation == Some(slot.planned_generation) => {
                (at + self.heartbeat()).max(now)
            }
            _ => now,
        })
    }

    /// `sent` was handed to the stream at `now`.
    pub fn sent(&mut self, id: StreamId, sent: &Assignment, now: Instant) {
        let valid_for = self.valid_for;
        if let Some(slot) = self.slots.get_mut(&id) {
            slot.told = sent.load_balancers.iter().cloned().collect();
            slot.told_generation = Some(sent.generation);
            slot.told_at = Some(now);
            slot.sends += 1;
            slot.unacked.retain(|(_, _, at)| *at + valid_for > now);
            slot.unacked.push((slot.sends, slot.told.clone(), now));
        }
    }

    /// The replica of stream `id` sent its `Renew` number `seq`: it took the `seq`-th
    /// assignment of the stream, so what only earlier ones gave it is released, and may go
    /// to its new owner now rather than at the old grant's lapse.
    pub fn acked(&mut self, id: StreamId, seq: u64, now: Instant) -> Outcome {
        let Some(slot) = self.slots.get_mut(&id) else {
            return Outcome::default();
        };
        let before = slot.unacked.len();
        slot.unacked.retain(|(n, _, _)| *n >= seq);
        if slot.unacked.len() == before {
            return Outcome::default();
        }
        self.replan(now, false)
    }

    /// The planned owner of every managed load balancer (`None`: fenced or no live stream).
    pub fn owners(&self) -> Vec<(String, Option<String>)> {
        self.managed
            .iter()
            .map(|lb| {
                let owner = self
                    .slots
                    .values()
                    .find(|s| s.planned.contains(lb))
                    .map(|s| s.endpoint.clone());
                (lb.clone(), owner)
            })
            .collect()
    }

    /// Load balancers planned per live endpoint.
    pub fn counts(&self) -> Vec<(String, usize)> {
        self.slots
            .values()
            .map(|s| (s.endpoint.clone(), s.planned.len()))
            .collect()
    }

    /// Recomputes the plan. `live_set_changed`: every live stream gets a new generation even
    /// if its share is the same (a reconnected stream must not be ordered behind what its
    /// previous stream was told).
    fn replan(&mut self, now: Instant, live_set_changed: bool) -> Outcome {
        let lapsed = self.lapse_fences(now);
        if self.quiet_until.is_some_and(|until| until <= now) {
            self.quiet_until = None;
        }
        let quiet = self.quiet_until.is_some();
        self.managed = self
            .slots
            .values()
            .flat_map(|s| s.manages.iter().cloned())
            .chain(self.fenced.keys().cloned())
            .collect();
        let plan = self.plan(now, quiet);
        let changed = live_set_changed || plan.iter().any(|(id, p)| self.slots[id].planned != *p);
        let mut outcome = Outcome::default();
        if changed {
            self.generation += 1;
            for (id, p) in plan {
                if let Some(slot) = self.slots.get_mut(&id) {
                    slot.planned = p;
                    slot.planned_generation = self.generation;
                }
            }
            outcome.changed = true;
            outcome.failed_over = lapsed
                .iter()
                .filter(|lb| self.slots.values().any(|s| s.planned.contains(*lb)))
                .count();
        }
        outcome
    }

    /// Drops the fences that lapsed by `now`; returns their load balancers.
    fn lapse_fences(&mut self, now: Instant) -> Vec<String> {
        let lapsed: Vec<String> = self
            .fenced
            .iter()
            .filter(|(_, (until, _))| *until <= now)
            .map(|(lb, _)| lb.clone())
            .collect();
        for lb in &lapsed {
            self.fenced.remove(lb);
        }
        lapsed
    }

    /// Which live stream should write which managed load balancer now (`quiet`: none yet).
    fn plan(&self, now: Instant, quiet: bool) -> BTreeMap<StreamId, BTreeSet<String>> {
        // Rendezvous over endpoints; with two streams to one endpoint (a reconnect racing
        // the old stream's end) the newer stream wins.
        let mut by_endpoint: BTreeMap<&str, StreamId> = BTreeMap::new();
        for (id, s) in &self.slots {
            by_endpoint.insert(&s.endpoint, *id);
        }
        let mut plan: BTreeMap<StreamId, BTreeSet<String>> =
            self.slots.keys().map(|id| (*id, BTreeSet::new())).collect();
        for lb in &self.managed {
            // Only replicas that manage this load balancer can write it.
            let able: Vec<String> = by_endpoint
                .iter()
                .filter(|(_, id)| self.slots[*id].manages.contains(lb))
                .map(|(e, _)| (*e).to_owned())
                .collect();
            let Some(ep) = route::pick(lb, &able) else {
                continue;
            };
            if quiet {
                continue;
            }
            let id = by_endpoint[ep.as_str()];
            if !self.may_take(lb, id, now) {
                continue;
            }
            if let Some(p) = plan.get_mut(&id) {
                p.insert(lb.clone());
            }
        }
        plan
    }

    /// Whether stream `id`, which rendezvous picked, may be planned to write `lb` now.
    fn may_take(&self, lb: &str, id: StreamId, now: Instant) -> bool {
        let slot = &self.slots[&id];
        // A fenced load balancer goes to nobody else; the stream that has it keeps it,
        // and its own replica reconnecting takes it back (taking it away adds a gap).
        if let Some((_, holder)) = self.fenced.get(lb)
            && !slot.told.contains(lb)
            && *holder != slot.endpoint
        {
            return false;
        }
        // Handed over between live replicas only once the old one released it (its
        // acknowledgement of an assignment without it, or that grant's lapse): until
        // then it goes to nobody, so two replicas never write it at once.
        let held_elsewhere = self.slots.iter().any(|(other, s)| {
            *other != id
                && s.endpoint != slot.endpoint
                && s.holding(self.valid_for, now).iter().any(|(l, _)| l == lb)
        });
        !held_elsewhere
    }
}

#[cfg(test)]
#[path = "assign_tests.rs"]
mod tests;
