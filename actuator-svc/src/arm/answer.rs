//! How the ARM client reads an answer: whole documents within a byte budget shared by every
//! call ([`LbBody`]), through a scanner that stops as soon as it has what it needs, or not at
//! all (a PUT's echo).

use crate::lb::scan::{LbState, Scanner};
use http::HeaderMap;
use http_body_util::BodyExt;
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The default of [`BodyBudget`]: room for one 5,000-node LB document (~16 MB) at a time
/// plus small ones.
pub const DEFAULT_BODY_BUDGET: usize = 24 << 20;

/// Bounds the bytes of whole load balancer documents being read or held for a write at
/// once: with many LBs in flight, reads wait for room instead of growing the heap.
#[derive(Debug, Clone)]
pub(super) struct BodyBudget {
    sem: Arc<Semaphore>,
    total: usize,
}

impl BodyBudget {
    pub(super) fn new(total: usize) -> Self {
        let total = total.clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
        Self {
            sem: Arc::new(Semaphore::new(total)),
            total,
        }
    }

    /// Room for `bytes` (a document larger than the whole budget waits for all of it).
    pub(super) async fn take(&self, bytes: usize) -> Option<OwnedSemaphorePermit> {
        let n = bytes.clamp(1, self.total) as u32;
        self.sem.clone().acquire_many_owned(n).await.ok()
    }
}

/// A whole load balancer document, counted against the body budget while it lives.
#[derive(Debug)]
pub struct LbBody {
    pub bytes: bytes::Bytes,
    pub(super) _room: Option<OwnedSemaphorePermit>,
}

impl LbBody {
    /// Gives the budget's room back, keeping the bytes (for a cache with its own budget).
    pub fn into_bytes(self) -> bytes::Bytes {
        self.bytes
    }

    /// The bytes and the room they take in the budget (given back when dropped).
    pub fn into_parts(self) -> (bytes::Bytes, Option<OwnedSemaphorePermit>) {
        (self.bytes, self._room)
    }
}

/// How the body of a successful answer is read.
pub(super) enum ReadAs<'a> {
    /// Into one buffer sized from Content-Length.
    Collect,
    /// Likewise, after taking room for it from the body budget.
    Budgeted,
    /// Through a scanner, keeping nothing.
    Scan(&'a mut LbState),
    /// Not wanted (a PUT's answer echoes the whole LB: 16 MB at 5,000 nodes): a short body is
    /// drained so the connection is reused, a long one is dropped after one read.
    Discard,
}

/// A response: status, headers, the body as read, and its room in the body budget.
pub(super) struct Answer {
    pub(super) status: u16,
    pub(super) headers: HeaderMap,
    pub(super) body: bytes::Bytes,
    pub(super) room: Option<OwnedSemaphorePermit>,
}

/// Reads a response body into one buffer sized from its Content-Length (no doubling), or
/// through `scan` without keeping it, stopping as soon as the scan has what it needs (the rest
/// of a 16 MB document is never transferred: the connection is dropped instead of drained,
/// which costs a new connection for the next request and nothing that grows with the LB).
/// Returns the body and how many bytes were read.
pub(super) async fn read_body(
    mut stream: hyper::body::Incoming,
    len: Option<usize>,
    scan: Option<&mut LbState>,
) -> Result<(bytes::Bytes, usize), hyper::Error> {
    if let Some(state) = scan {
        let mut scanner = Scanner::new();
        let mut read = 0;
        while let Some(chunk) = next_data(&mut stream).await {
            let chunk = chunk?;
            read += chunk.len();
            if scanner.feed(&chunk, state).is_err() {
                // Unreadable: say nothing rather than half of it.
                *state = LbState::default();
                return Ok((bytes::Bytes::new(), read));
            }
            if state.complete() {
                return Ok((bytes::Bytes::new(), read));
            }
        }
        if scanner.finish(state).is_err() {
            *state = LbState::default();
        }
        return Ok((bytes::Bytes::new(), read));
    }
    // A bogus length is only a hint: never reserve more than 256 MiB up front.
    let mut buf = Vec::with_capacity(len.unwrap_or(0).min(256 << 20));
    while let Some(chunk) = next_data(&mut stream).await {
        buf.extend_from_slice(&chunk?);
    }
    let read = buf.len();
    Ok((buf.into(), read))
}

/// Reads and drops a body: up to one read buffer, then the connection is given up rather than
/// drained (what is left of a 16 MB echo is never transferred).
pub(super) async fn discard_body(
    mut stream: hyper::body::Incoming,
) -> Result<(bytes::Bytes, usize), hyper::Error> {
    let mut read = 0;
    while let Some(chunk) = next_data(&mut stream).await {
        read += chunk?.len();
        if read >= super::transport::PROBE_READ_MAX {
            break;
        }
    }
    Ok((bytes::Bytes::new(), read))
}

/// The next data frame of a body (trailers are skipped).
async fn next_data(body: &mut hyper::body::Incoming) -> Option<Result<bytes::Bytes, hyper::Error>> {
    loop {
        match body.frame().await? {
            Ok(frame) => match frame.into_data() {
                Ok(data) => return Some(Ok(data)),
                Err(_) => continue,
            },
            Err(e) => return Some(Err(e)),
        }
    }
}

pub(super) fn header(headers: &HeaderMap, name: &'static str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}
