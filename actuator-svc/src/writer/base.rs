//! The writer's read side: GET the LB whole (the base of the next write, kept compact) or
//! only scan it for the end of an operation, and keep a `Succeeded` base between rounds in
//! the shared base cache.

use super::Writer;
use crate::arm::ArmError;
use crate::lb::doc::Provisioning;
use crate::lb::index::LbIndex;
use crate::lb::scan;
use crate::lb::splice;
use crate::plan::cache::KeptBase;
use bytes::Bytes;
use tokio::time::Instant;

/// The last read of the LB, the base of the next write.
pub(super) struct Base {
    /// Empty when the read was only scanned (an operation was still running).
    pub(super) body: Bytes,
    /// Room in the ARM client's body budget, given back when the base is dropped or kept.
    pub(super) _room: Option<tokio::sync::OwnedSemaphorePermit>,
    pub(super) etag: Option<String>,
    pub(super) provisioning: Provisioning,
    pub(super) read_at: Instant,
}

impl Writer {
    /// Between rounds the base goes to the shared base cache, which keeps it while the LB is
    /// owned and the budget has room; a base of an LB another replica owns goes stale with
    /// that replica's writes (a takeover reads first), and a base read mid-operation is no
    /// base at all.
    pub(super) fn release_base(&mut self) {
        let base = self.base.take();
        // A base kept while this replica owned the LB (or before its first assignment) goes
        // stale with the new owner's writes: a later takeover must read first.
        if !self.store.owns(&self.lb) {
            self.cfg.bases.forget(&self.lb);
            return;
        }
        let Some(base) = base else {
            return;
        };
        if base.provisioning != Provisioning::Succeeded || base.body.is_empty() {
            self.cfg.bases.forget(&self.lb);
            return;
        }
        self.cfg.bases.keep(
            &self.lb,
            KeptBase {
                body: base.body,
                etag: base.etag,
                read_at: base.read_at,
                written_at: self.written_at.unwrap_or(base.read_at),
            },
        );
    }

    /// The base kept between rounds, if any.
    pub(super) fn restore_base(&mut self) {
        if self.base.is_none() {
            self.base = self.cfg.bases.take(&self.lb).map(|k| Base {
                body: k.body,
                _room: None,
                etag: k.etag,
                provisioning: Provisioning::Succeeded,
                read_at: k.read_at,
            });
        }
    }

    /// GETs the LB whole. A document whose operation still runs is only scanned (its
    /// entries state a goal, not a fact, and it is no base); else it updates the shared
    /// index and becomes the next base.
    pub(super) async fn read(&mut self) -> Result<(), ArmError> {
        let fetched = Instant::now();
        // Give the old base's room back first: two reads of one LB never wait on each other.
        self.base = None;
        let Some(body) = self.arm.get_lb_body(&self.lb).await? else {
            self.cache.put(&self.lb, None, fetched);
            return Ok(());
        };
        let (body, room) = body.into_parts();
        self.body_len = body.len();
        let resource = self.lb.clone();
        let decode = |message: String| ArmError::Decode {
            op: "get_lb",
            resource: resource.clone(),
            message,
        };
        let state = scan::lb_state(&body).map_err(|e| decode(e.to_string()))?;
        let provisioning = Provisioning::parse(state.provisioning_state.as_deref());
        if provisioning == Provisioning::Updating && self.cache.lb(&self.lb).is_some() {
            self.base = Some(Base {
                body: Bytes::new(),
                _room: None,
                etag: state.etag,
                provisioning,
                read_at: fetched,
            });
            return Ok(());
        }
        // One scan indexes the entries and finds the read-only members to drop: the base
        // keeps only what a PUT carries, a sixteenth of the document at 5,000 nodes, so it
        // stays in the base cache between rounds and the next signal's PUT needs no GET first.
        let mut compactor = splice::Compactor::new();
        let index = LbIndex::read_also(&self.lb, &self.arm.lb_id(&self.lb), &body, &mut compactor)
            .map_err(|e| decode(e.to_string()))?;
        self.metrics.unprobed(&self.lb, index.unprobed_len());
        self.report_skipped(&index);
        self.cache.put(&self.lb, Some(index), fetched);
        let body = compactor.finish(&body);
        // The read's room in the body budget goes back.
        drop(room);
        self.base = Some(Base {
            body,
            _room: None,
            etag: state.etag,
            provisioning,
            read_at: fetched,
        });
        Ok(())
    }

    /// Reads only the LB's `provisioningState` (the body streams through a scanner); when
    /// the operation ended, reads the LB whole.
    pub(super) async fn probe(&mut self) -> Result<(), ArmError> {
        let fetched = Instant::now();
        match self.arm.get_lb_state(&self.lb).await? {
            Some(state)
                if Provisioning::parse(state.provisioning_state.as_deref())
                    == Provisioning::Updating =>
            {
                self.base = Some(Base {
                    body: Bytes::new(),
                    _room: None,
                    etag: state.etag,
                    provisioning: Provisioning::Updating,
                    read_at: fetched,
                });
                Ok(())
            }
            _ => self.read().await,
        }
    }
}
