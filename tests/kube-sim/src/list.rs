//! List paging: `limit` cuts a consistent snapshot into pages, `continue` tokens name the
//! rest of that snapshot, and every page reports the snapshot's resourceVersion (kube-runtime
//! takes the last page's RV as the watch start, contracts/kube.md 2.3).
//!
//! A snapshot is kept once per paged list (shared by all its pages, bounded in number); a
//! token whose snapshot is older than the compaction floor, or was evicted, is expired
//! (410), as after an etcd compaction.

use crate::status::ApiError;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One page: items (stored objects), the snapshot RV, the next token and how many items
/// remain after it. Stored objects are immutable and shared (`Arc`), so a snapshot of
/// thousands of nodes costs one pointer per node.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    pub items: Vec<Arc<Value>>,
    pub rv: u64,
    pub continue_token: Option<String>,
    pub remaining: Option<usize>,
}

#[derive(Debug)]
struct Snapshot {
    rv: u64,
    items: Arc<Vec<Arc<Value>>>,
    /// Whether the list was filtered (then remainingItemCount is not reported).
    filtered: bool,
}

/// Remembered snapshots, keyed by token id.
#[derive(Debug)]
pub struct Pager {
    snapshots: BTreeMap<u64, Snapshot>,
    next_id: u64,
    max: usize,
}

const EXPIRED: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.";

impl Pager {
    pub fn new(max: usize) -> Self {
        Pager {
            snapshots: BTreeMap::new(),
            next_id: 1,
            max: max.max(1),
        }
    }

    /// The first page of `items` (the whole list at `rv`, already filtered).
    pub fn first(
        &mut self,
        items: Vec<Arc<Value>>,
        rv: u64,
        limit: Option<usize>,
        filtered: bool,
    ) -> Page {
        let limit = limit.filter(|l| *l > 0);
        if limit.is_none_or(|l| items.len() <= l) {
            return Page {
                items,
                rv,
                continue_token: None,
                remaining: None,
            };
        }
        let id = self.next_id;
        self.next_id += 1;
        let items = Arc::new(items);
        self.snapshots.insert(
            id,
            Snapshot {
                rv,
                items: items.clone(),
                filtered,
            },
        );
        while self.snapshots.len() > self.max {
            self.snapshots.pop_first();
        }
        cut(&items, id, 0, rv, limit, filtered)
    }

    /// The next page for `token`. `floor` is the oldest RV still retained.
    pub fn next(
        &mut self,
        token: &str,
        limit: Option<usize>,
        floor: u64,
    ) -> Result<Page, ApiError> {
        let (rv, id, offset) = parse_token(token)?;
        let Some(snapshot) = self.snapshots.get(&id) else {
            return Err(ApiError::expired(EXPIRED));
        };
        if snapshot.rv != rv || rv < floor || offset > snapshot.items.len() {
            return Err(ApiError::expired(EXPIRED));
        }
        // The snapshot stays (a client may fetch a page again) until evicted or compacted.
        Ok(cut(
            &snapshot.items,
            id,
            offset,
            rv,
            limit.filter(|l| *l > 0),
            snapshot.filtered,
        ))
    }

    /// Forgets snapshots older than `floor` (after a compaction).
    pub fn compact(&mut self, floor: u64) {
        self.snapshots.retain(|_, s| s.rv >= floor);
    }
}

/// The page of `items` starting at `offset`.
fn cut(
    items: &[Arc<Value>],
    id: u64,
    offset: usize,
    rv: u64,
    limit: Option<usize>,
    filtered: bool,
) -> Page {
    let rest = &items[offset..];
    match limit {
        Some(l) if rest.len() > l => Page {
            items: rest[..l].to_vec(),
            rv,
            continue_token: Some(make_token(rv, id, offset + l)),
            remaining: (!filtered).then_some(rest.len() - l),
        },
        _ => Page {
            items: rest.to_vec(),
            rv,
            continue_token: None,
            remaining: None,
        },
    }
}

/// Tokens are opaque to clients; here `<rv>.<snapshot id>.<offset>` in hex.
fn make_token(rv: u64, id: u64, offset: usize) -> String {
    format!("{rv:x}.{id:x}.{offset:x}")
}

fn parse_token(token: &str) -> Result<(u64, u64, usize), ApiError> {
    let bad = || ApiError::bad_request(format!("continue key is not valid: {token:?}"));
    let mut parts = token.split('.');
    let mut next = || {
        parts
            .next()
            .and_then(|p| u64::from_str_radix(p, 16).ok())
            .ok_or_else(bad)
    };
    let (rv, id, offset) = (next()?, next()?, next()?);
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok((rv, id, usize::try_from(offset).map_err(|_| bad())?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn items(n: usize) -> Vec<Arc<Value>> {
        (0..n).map(|i| Arc::new(json!({"i": i}))).collect()
    }

    #[test]
    fn pages_walk_one_snapshot() {
        let mut p = Pager::new(10);
        let first = p.first(items(5), 42, Some(2), false);
        assert_eq!(first.items.len(), 2);
        assert_eq!(first.remaining, Some(3));
        let t = first.continue_token.unwrap();
        let second = p.next(&t, Some(2), 1).unwrap();
        assert_eq!(second.items, items(4)[2..].to_vec());
        assert_eq!(second.rv, 42);
        let third = p.next(&second.continue_token.unwrap(), Some(2), 1).unwrap();
        assert_eq!(third.items.len(), 1);
        assert!(third.continue_token.is_none());
        assert!(
            p.first(items(2), 1, Some(2), false)
                .continue_token
                .is_none()
        );
        assert_eq!(p.first(items(3), 1, None, false).items.len(), 3);
    }

    #[test]
    fn compacted_or_bogus_tokens() {
        let mut p = Pager::new(10);
        let t = p.first(items(3), 5, Some(1), true).continue_token.unwrap();
        assert_eq!(p.next(&t, Some(1), 6).unwrap_err().code, 410);
        let t = p.first(items(3), 7, Some(1), true).continue_token.unwrap();
        p.compact(8);
        assert_eq!(p.next(&t, Some(1), 8).unwrap_err().code, 410);
        assert_eq!(p.next("garbage", None, 0).unwrap_err().code, 400);
        assert_eq!(p.next("5.99.0", None, 0).unwrap_err().code, 410);
        assert_eq!(p.next("5.1", None, 0).unwrap_err().code, 400);
    }
}
