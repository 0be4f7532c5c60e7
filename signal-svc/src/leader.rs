//! Leader election on a coordination.k8s.io/v1 Lease, client-go style: GET, POST on 404,
//! PUT with the resourceVersion from the GET (409 = another candidate won). kube 5 has no
//! leader election of its own.
//!
//! The epoch is the Lease's `leaseTransitions` after this process acquired it; acquiring
//! always bumps it, even when the Lease still names us (a restarted pod), so `(epoch, seq)`
//! versions keep growing across restarts and leader changes.
//!
//! Short lease (default 1.5 s, renewed every 0.5 s, standbys look every 0.25 s): a leader that
//! dies without releasing costs about the duration plus one standby look. Safe because the
//! leader steps down at 2/3 of the duration counted from when it *sent* its last successful
//! renewal (before any standby can see the lease expire), actuators refuse older epochs, and
//! taints are RV-checked and annotated (never doubled). The leader renews with a PUT based on
//! its previous PUT's answer (no GET), so the cost is 2 PUT/s for the leader and 4 GET/s per
//! standby.

use crate::domain::lease::{
    CREATE_TRANSITIONS, DURATION_MS_ANNOTATION, Decision, LeaseRecord, Observer, decide,
};
use crate::state::Shared;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Lease settings.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub duration: Duration,
    pub renew_interval: Duration,
    /// How often a standby looks at the Lease.
    pub retry_interval: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("lease {name}: {source}")]
    Api { name: String, source: kube::Error },
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

struct Elector {
    api: Api<Lease>,
    cfg: LeaseConfig,
    observer: Observer,
    leading: Option<u64>,
    /// When the last successful renewal was *sent* (the step-down clock starts there).
    last_renew: Instant,
    /// The Lease as our last write returned it: the next renewal PUTs on top of it.
    ours: Option<Lease>,
}

enum Step {
    Leading(u64),
    NotLeading,
}

impl Elector {
    fn spec(&self, transitions: i32, acquire: Option<MicroTime>) -> LeaseSpec {
        let now = MicroTime(jiff::Timestamp::now());
        LeaseSpec {
            holder_identity: Some(self.cfg.identity.clone()),
            // Whole seconds for other readers, rounded up (never shorter than ours).
            lease_duration_seconds: Some(
                i32::try_from(self.cfg.duration.as_millis().div_ceil(1000))
                    .unwrap_or(i32::MAX)
                    .max(1),
            ),
            acquire_time: Some(acquire.unwrap_or_else(|| now.clone())),
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    fn annotate(&self, meta: &mut ObjectMeta) {
        meta.annotations.get_or_insert_default().insert(
            DURATION_MS_ANNOTATION.to_owned(),
            self.cfg.duration.as_millis().to_string(),
        );
    }

    /// Renews on top of our last write, without a GET. `None`: nothing cached, or someone
    /// else wrote the Lease in between (409): fall back to GET + decide.
    async fn renew_cached(&mut self) -> Result<Option<Step>, LeaseError> {
        let (Some(epoch), Some(mut next)) = (self.leading, self.ours.take()) else {
            return Ok(None);
        };
        let transitions = next
            .spec
            .as_ref()
            .and_then(|s| s.lease_transitions)
            .unwrap_or(0);
        let acquire = next.spec.as_ref().and_then(|s| s.acquire_time.clone());
        next.spec = Some(self.spec(transitions, acquire));
        self.annotate(&mut next.metadata);
        match self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &next)
            .await
        {
            Ok(l) => {
                self.ours = Some(l);
                Ok(Some(Step::Leading(epoch)))
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(None),
            Err(e) => Err(LeaseError::Api {
                name: self.cfg.name.clone(),
                source: e,
            }),
        }
    }

    async fn try_once(&mut self) -> Result<Step, LeaseError> {
        if let Some(step) = self.renew_cached().await? {
            return Ok(step);
        }
        let err = |source| LeaseError::Api {
            name: self.cfg.name.clone(),
            source,
        };
        let current = self.api.get_opt(&self.cfg.name).await.map_err(err)?;
        let Some(lease) = current else {
            let mut lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.cfg.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(CREATE_TRANSITIONS, None)),
            };
            self.annotate(&mut lease.metadata);
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(l) => {
                    self.ours = Some(l);
                    Ok(Step::Leading(CREATE_TRANSITIONS as u64))
                }
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Step::NotLeading),
                Err(e) => Err(err(e)),
            };
        };
        let rec = record(&lease);
        let now = Instant::now();
        self.observer.observe(&rec, now);
        let expired = self.observer.expired(now, self.cfg.duration);
        let (transitions, acquire) =
            match decide(&rec, &self.cfg.identity, self.leading.is_some(), expired) {
                Decision::Wait { holder } => {
                    tracing::trace!(%holder, "lease held by another replica");
                    return Ok(Step::NotLeading);
                }
                Decision::Renew => (
                    rec.transitions,
                    lease.spec.as_ref().and_then(|s| s.acquire_time.clone()),
                ),
                Decision::Acquire { transitions } => (transitions, None),
            };
        let mut next = lease.clone();
        next.spec = Some(self.spec(transitions, acquire));
        self.annotate(&mut next.metadata);
        // `metadata.resourceVersion` from the GET makes the PUT conditional.
        match self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &next)
            .await
        {
            Ok(l) => {
                self.ours = Some(l);
                Ok(Step::Leading(u64::try_from(transitions).unwrap_or(0)))
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Step::NotLeading),
            Err(e) => Err(err(e)),
        }
    }

    /// Gives the Lease up so a standby takes over at once.
    async fn release(&mut self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.cfg.name).await else {
            return;
        };
        if lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            != Some(self.cfg.identity.as_str())
        {
            return;
        }
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
        }
        match self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => tracing::info!("released the lease"),
            Err(e) => {
                tracing::warn!(error = %e, "releasing the lease failed; the standby waits for expiry")
            }
        }
    }
}

/// Runs the election until shutdown; on shutdown stops leading first, then releases.
pub async fn run(
    client: kube::Client,
    cfg: LeaseConfig,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
) {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    // Step down if renewals keep failing for this long: well before the Lease expires for
    // the others, so two leaders never stream at the same time.
    let renew_deadline = cfg.duration.mul_f64(2.0 / 3.0);
    let mut el = Elector {
        api,
        cfg,
        observer: Observer::default(),
        leading: None,
        last_renew: Instant::now(),
        ours: None,
    };
    loop {
        let sent_at = Instant::now();
        // A leader must hear back before its step-down deadline; a standby before its next look.
        let limit = match el.leading {
            Some(_) => (el.last_renew + renew_deadline).saturating_duration_since(sent_at),
            None => el.cfg.renew_interval.max(Duration::from_secs(1)) * 2,
        };
        let step = tokio::select! {
            _ = shutdown.cancelled() => break,
            r = tokio::time::timeout(limit, el.try_once()) => r,
        };
        match step {
            Ok(Ok(Step::Leading(epoch))) => {
                el.last_renew = sent_at;
                if el.leading != Some(epoch) {
                    tracing::info!(epoch, identity = %el.cfg.identity, "acquired the lease; leading");
                    el.leading = Some(epoch);
                    shared.become_leader(epoch);
                }
            }
            Ok(Ok(Step::NotLeading)) => {
                el.ours = None;
                if el.leading.take().is_some() {
                    tracing::warn!("lost the lease; stopping at once");
                    shared.lose_leadership();
                }
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "lease call failed"),
            Err(_) => tracing::warn!("lease call timed out"),
        }
        if el.leading.is_some() && el.last_renew.elapsed() >= renew_deadline {
            tracing::warn!("could not renew the lease in time; stepping down");
            el.leading = None;
            el.ours = None;
            shared.lose_leadership();
        }
        let pause = if el.leading.is_some() {
            el.cfg.renew_interval
        } else {
            el.cfg.retry_interval
        };
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep_until(sent_at + pause) => {}
        }
    }
    if el.leading.take().is_some() {
        shared.lose_leadership();
        el.release().await;
    }
}
