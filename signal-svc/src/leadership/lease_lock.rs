//! The Lease as a lock, client-go `LeaseLock` style: GET, POST on 404, PUT with the
//! resourceVersion from the GET (409 = another candidate wrote in between). kube 5 has no
//! leader election of its own. One call of [`LeaseLock::try_once`] is one attempt; the
//! caller ([`crate::leadership::election`]) decides what a success or a failure means for its term.
//!
//! The leader renews with a PUT on top of its previous write's answer (no GET), so a healthy
//! leader costs one request per renewal; after a failure or a conflict it GETs first.

use crate::core::lease::{DURATION_MS_ANNOTATION, Decision, Epochs, LeaseRecord, Observer, decide};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use std::time::Duration;
use tokio::time::Instant;

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("lease {name}: {source}")]
    Api { name: String, source: kube::Error },
    #[error("lease {name}: written by someone else in between (409)")]
    Conflict { name: String },
}

impl LeaseError {
    /// A low-cardinality label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            LeaseError::Api { .. } => "api",
            LeaseError::Conflict { .. } => "conflict",
        }
    }
}

/// The outcome of one attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// We hold the Lease with this epoch (`leaseTransitions`).
    Leading(u64),
    /// Someone else holds a live Lease.
    NotLeading,
}

fn record(lease: &Lease) -> LeaseRecord {
    let spec = lease.spec.clone().unwrap_or_default();
    LeaseRecord {
        holder: spec.holder_identity,
        transitions: spec.lease_transitions.unwrap_or(0),
        duration_secs: spec.lease_duration_seconds,
        duration_ms: lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(DURATION_MS_ANNOTATION))
            .and_then(|v| v.parse().ok()),
        renew_time: spec.renew_time.map(|t| t.0.to_string()),
    }
}

fn transitions_of(lease: &Lease) -> i32 {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.lease_transitions)
        .unwrap_or(0)
}

/// One candidate's view of the Lease.
pub struct LeaseLock {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
    observer: Observer,
    /// The Lease as our last write returned it: the next renewal PUTs on top of it.
    ours: Option<Lease>,
    /// The highest `leaseTransitions` seen on any version of the Lease.
    seen: u64,
}

impl LeaseLock {
    pub fn new(api: Api<Lease>, name: String, identity: String, duration: Duration) -> Self {
        Self {
            api,
            name,
            identity,
            duration,
            observer: Observer::default(),
            ours: None,
            seen: 0,
        }
    }

    fn api_err(&self, source: kube::Error) -> LeaseError {
        match source {
            kube::Error::Api(s) if s.code == 409 => LeaseError::Conflict {
                name: self.name.clone(),
            },
            source => LeaseError::Api {
                name: self.name.clone(),
                source,
            },
        }
    }

    /// Our spec with `transitions`, renewed now; `acquire` kept from the Lease when renewing.
    fn spec(&self, transitions: i32, acquire: Option<MicroTime>) -> LeaseSpec {
        let now = MicroTime(jiff::Timestamp::now());
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            // Whole seconds for other readers, rounded up (never shorter than ours).
            lease_duration_seconds: Some(
                i32::try_from(self.duration.as_millis().div_ceil(1000))
                    .unwrap_or(i32::MAX)
                    .max(1),
            ),
            acquire_time: Some(acquire.unwrap_or_else(|| now.clone())),
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// PUTs `base` (its resourceVersion is the precondition) as held by us with `transitions`.
    async fn put(
        &mut self,
        mut base: Lease,
        transitions: i32,
        renew: bool,
    ) -> Result<u64, LeaseError> {
        let acquire = if renew {
            base.spec.as_ref().and_then(|s| s.acquire_time.clone())
        } else {
            None
        };
        base.spec = Some(self.spec(transitions, acquire));
        base.metadata.annotations.get_or_insert_default().insert(
            DURATION_MS_ANNOTATION.to_owned(),
            self.duration.as_millis().to_string(),
        );
        let written = self
            .api
            .replace(&self.name, &PostParams::default(), &base)
            .await
            .map_err(|e| self.api_err(e))?;
        self.ours = Some(written);
        Ok(u64::try_from(transitions).unwrap_or(0))
    }

    /// One attempt to acquire or renew. `epochs.mine` is the epoch this process leads with.
    pub async fn try_once(&mut self, mut epochs: Epochs) -> Result<Step, LeaseError> {
        epochs.seen = epochs.seen.max(self.seen);
        // Fast path: renew on top of our last write, unless the epoch must be raised. The
        // cached write stays after a transient failure (a 5xx, a 429, a timeout), so the retry
        // is one request again, not a GET and a PUT: at high API latency that second round
        // trip is what cost the term.
        if let (Some(mine), Some(cached)) = (epochs.mine, self.ours.clone())
            && mine > epochs.floor
            && u64::try_from(transitions_of(&cached)).ok() == Some(mine)
        {
            match self.put(cached, transitions_of_u64(mine), true).await {
                Ok(e) => return Ok(Step::Leading(e)),
                // Someone wrote in between, or the Lease is gone: look before deciding.
                Err(LeaseError::Conflict { .. }) => self.ours = None,
                Err(LeaseError::Api {
                    source: kube::Error::Api(s),
                    ..
                }) if s.code == 404 => self.ours = None,
                Err(e) => return Err(e),
            }
        }
        let current = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| self.api_err(e))?;
        let Some(lease) = current else {
            // A standby waits out a deleted Lease's possible holder (see `may_create`); the
            // holder itself re-creates it at once under its epoch.
            if epochs.mine.is_none() && !self.observer.may_create(Instant::now(), self.duration) {
                return Ok(Step::NotLeading);
            }
            return self.create(&epochs).await;
        };
        let rec = record(&lease);
        self.seen = self.seen.max(u64::try_from(rec.transitions).unwrap_or(0));
        let now = Instant::now();
        self.observer.observe(&rec, now);
        let expired = self.observer.expired(now, self.duration);
        match decide(&rec, &self.identity, &epochs, expired) {
            Decision::Wait { holder } => {
                tracing::trace!(%holder, "lease held by another replica");
                Ok(Step::NotLeading)
            }
            Decision::Renew => Ok(Step::Leading(self.put(lease, rec.transitions, true).await?)),
            Decision::Acquire { transitions } => {
                Ok(Step::Leading(self.put(lease, transitions, false).await?))
            }
        }
    }

    /// The Lease is absent (never created, or deleted): create it. Another candidate
    /// creating it first is a 409 (`AlreadyExists`): not leading.
    async fn create(&mut self, epochs: &Epochs) -> Result<Step, LeaseError> {
        let transitions = epochs.create();
        let mut lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                annotations: Some(
                    [(
                        DURATION_MS_ANNOTATION.to_owned(),
                        self.duration.as_millis().to_string(),
                    )]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            spec: None,
        };
        lease.spec = Some(self.spec(transitions, None));
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(l) => {
                self.ours = Some(l);
                Ok(Step::Leading(u64::try_from(transitions).unwrap_or(0)))
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Step::NotLeading),
            Err(e) => Err(self.api_err(e)),
        }
    }

    /// Forgets the cached write (after losing the term: the next attempt GETs).
    pub fn forget(&mut self) {
        self.ours = None;
    }

    /// Gives the Lease up so a standby takes over at once. Keeps `leaseTransitions` (the
    /// next leader's epoch grows from it). Uses our last write when we have it (one request),
    /// and GETs once more if that was stale.
    pub async fn release(&mut self) {
        let cached = self.ours.take();
        let first = match cached {
            Some(l) => self.release_from(l).await,
            None => Err(LeaseError::Conflict {
                name: self.name.clone(),
            }),
        };
        let outcome = match first {
            Err(LeaseError::Conflict { .. }) => match self.api.get_opt(&self.name).await {
                Ok(Some(l)) => self.release_from(l).await,
                Ok(None) => Ok(false),
                Err(e) => Err(self.api_err(e)),
            },
            other => other,
        };
        match outcome {
            Ok(true) => tracing::info!("released the lease"),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(error = %e, "releasing the lease failed; the standby waits for expiry")
            }
        }
    }

    /// `Ok(false)`: not ours to release.
    async fn release_from(&self, mut lease: Lease) -> Result<bool, LeaseError> {
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(false);
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(false);
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
            .map_err(|e| self.api_err(e))?;
        Ok(true)
    }
}

fn transitions_of_u64(e: u64) -> i32 {
    i32::try_from(e).unwrap_or(i32::MAX)
}
