//! The object store: every object of every kind, one global resourceVersion (like etcd's
//! revision, shared by all kinds), and a bounded history of changes that watches replay from.
//!
//! Pure and synchronous; the server wraps it in a lock and wakes watchers after each write.
//! Objects are stored without `kind`/`apiVersion` (views add them on the way out); events are
//! stored in their core/v1 shape. Objects are shared (`Arc`) between the current state and the
//! history, so a change costs one copy of the object, not three.

use crate::conditions::ConditionLog;
use crate::resource::{Key, Kind};
use serde_json::Value;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeType {
    Added,
    Modified,
    Deleted,
}

/// One write, as the watch history keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub rv: u64,
    pub key: Key,
    pub change: ChangeType,
    /// The new state; for a deletion the last state, stamped with the deletion's RV.
    pub object: Arc<Value>,
    /// The state before the write (None for a creation). Selector-filtered watches need it
    /// to turn "stopped matching" into DELETED, as the real watch cache does.
    pub prev: Option<Arc<Value>>,
}

/// Store failures; the HTTP layer maps them onto `Status` bodies.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("object already exists")]
    AlreadyExists,
    #[error("object not found")]
    NotFound,
    /// The requested RV is older than the retained history.
    #[error("resource version {requested} is older than the oldest retained {oldest}")]
    TooOld { requested: u64, oldest: u64 },
}

/// All objects plus the change history.
#[derive(Debug)]
pub struct Store {
    rv: u64,
    objects: BTreeMap<Key, Arc<Value>>,
    history: VecDeque<Arc<Change>>,
    history_limit: usize,
    /// The oldest RV a watch or exact list may start from.
    floor: u64,
    /// Every change of a Node condition, stamped when committed (never compacted with the
    /// history: it is for judges, not for watches).
    conditions: ConditionLog,
}

impl Store {
    /// An empty store keeping at most `history_limit` changes for watch replay.
    pub fn new(history_limit: usize) -> Self {
        Store {
            rv: 1,
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            history_limit: history_limit.max(1),
            floor: 1,
            conditions: ConditionLog::default(),
        }
    }

    /// The latest resourceVersion.
    pub fn current_rv(&self) -> u64 {
        self.rv
    }

    /// The oldest resourceVersion still served from history.
    pub fn oldest_rv(&self) -> u64 {
        self.floor
    }

    pub fn get(&self, key: &Key) -> Option<&Value> {
        self.objects.get(key).map(|v| v.as_ref())
    }

    /// Objects of `kind`, in key order (namespace, then name), optionally in one namespace.
    pub fn list(&self, kind: Kind, namespace: Option<&str>) -> Vec<(Key, Arc<Value>)> {
        // Keys sort by kind, then namespace: one range instead of a scan of every object
        // (RBAC checks list bindings on every request, next to thousands of nodes).
        let start = Key {
            kind,
            namespace: namespace.unwrap_or("").to_string(),
            name: String::new(),
        };
        self.objects
            .range(start..)
            .take_while(|(k, _)| k.kind == kind && namespace.is_none_or(|ns| k.namespace == ns))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// The objects of `kind` as they were at `rv`, rebuilt by undoing later changes.
    pub fn list_at(
        &self,
        kind: Kind,
        namespace: Option<&str>,
        rv: u64,
    ) -> Result<Vec<(Key, Arc<Value>)>, StoreError> {
        if rv < self.floor {
            return Err(StoreError::TooOld {
                requested: rv,
                oldest: self.floor,
            });
        }
        let mut state: BTreeMap<Key, Arc<Value>> = self.list(kind, namespace).into_iter().collect();
        for change in self.history.iter().rev().take_while(|c| c.rv > rv) {
            if change.key.kind != kind || namespace.is_some_and(|ns| ns != change.key.namespace) {
                continue;
            }
            match &change.prev {
                Some(prev) => state.insert(change.key.clone(), prev.clone()),
                None => state.remove(&change.key),
            };
        }
        Ok(state.into_iter().collect())
    }

    /// Stores a new object; returns it with its resourceVersion.
    pub fn create(&mut self, key: Key, mut object: Value) -> Result<Arc<Value>, StoreError> {
        if self.objects.contains_key(&key) {
            return Err(StoreError::AlreadyExists);
        }
        let rv = self.bump();
        set_rv(&mut object, rv);
        let object = Arc::new(object);
        self.objects.insert(key.clone(), object.clone());
        self.record(rv, key, ChangeType::Added, object.clone(), None);
        Ok(object)
    }

    /// Replaces an existing object; returns it with its new resourceVersion.
    pub fn update(&mut self, key: Key, mut object: Value) -> Result<Arc<Value>, StoreError> {
        let Some(prev) = self.objects.get(&key).cloned() else {
            return Err(StoreError::NotFound);
        };
        let rv = self.bump();
        set_rv(&mut object, rv);
        let object = Arc::new(object);
        self.objects.insert(key.clone(), object.clone());
        self.record(rv, key, ChangeType::Modified, object.clone(), Some(prev));
        Ok(object)
    }

    /// Removes an object; returns its last state stamped with the deletion's RV.
    pub fn delete(&mut self, key: &Key) -> Result<Arc<Value>, StoreError> {
        let Some(prev) = self.objects.remove(key) else {
            return Err(StoreError::NotFound);
        };
        let rv = self.bump();
        let mut last = prev.as_ref().clone();
        set_rv(&mut last, rv);
        let last = Arc::new(last);
        self.record(
            rv,
            key.clone(),
            ChangeType::Deleted,
            last.clone(),
            Some(prev),
        );
        Ok(last)
    }

    /// Changes of `kind` with an RV above `after`, or `TooOld` when history no longer
    /// reaches back that far.
    pub fn changes_since(&self, kind: Kind, after: u64) -> Result<Vec<Arc<Change>>, StoreError> {
        if after < self.floor {
            return Err(StoreError::TooOld {
                requested: after,
                oldest: self.floor,
            });
        }
        // History is ordered by RV; skip the prefix at or below `after`.
        let start = self.history.partition_point(|c| c.rv <= after);
        Ok(self
            .history
            .range(start..)
            .filter(|c| c.key.kind == kind)
            .cloned()
            .collect())
    }

    /// Forgets all history: any RV older than the current one becomes too old (410).
    pub fn compact(&mut self) {
        self.history.clear();
        self.floor = self.rv;
    }

    fn bump(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    /// The Node condition log (see [`ConditionLog`]).
    pub fn conditions(&self) -> &ConditionLog {
        &self.conditions
    }

    fn record(
        &mut self,
        rv: u64,
        key: Key,
        change: ChangeType,
        object: Arc<Value>,
        prev: Option<Arc<Value>>,
    ) {
        if key.kind == Kind::Node {
            let next = (change != ChangeType::Deleted).then_some(object.as_ref());
            self.conditions.observe(&key.name, prev.as_deref(), next);
        }
        self.history.push_back(Arc::new(Change {
            rv,
            key,
            change,
            object,
            prev,
        }));
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                self.floor = old.rv;
            }
        }
    }
}

/// Writes `metadata.resourceVersion` (as a string, the wire form).
pub fn set_rv(object: &mut Value, rv: u64) {
    if let Some(obj) = object.as_object_mut() {
        let meta = obj
            .entry("metadata")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(m) = meta.as_object_mut() {
            m.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, label: &str) -> (Key, Value) {
        (
            Key::new(Kind::Node, "", name),
            json!({"metadata": {"name": name, "labels": {"l": label}}}),
        )
    }

    #[test]
    fn every_write_bumps_one_global_rv() {
        let mut s = Store::new(100);
        let (k, v) = node("a", "1");
        let a = s.create(k.clone(), v).unwrap();
        let l = s
            .create(
                Key::new(Kind::Lease, "ns", "l"),
                json!({"metadata": {"name": "l"}}),
            )
            .unwrap();
        assert_eq!(a["metadata"]["resourceVersion"], "2");
        assert_eq!(l["metadata"]["resourceVersion"], "3");
        let d = s.delete(&k).unwrap();
        assert_eq!(d["metadata"]["resourceVersion"], "4");
        assert_eq!(s.current_rv(), 4);
        assert_eq!(
            s.create(k.clone(), json!({})).unwrap()["metadata"]["resourceVersion"],
            "5"
        );
        assert_eq!(s.create(k, json!({})), Err(StoreError::AlreadyExists));
    }

    #[test]
    fn changes_since_replays_only_newer_changes_of_the_kind() {
        let mut s = Store::new(100);
        let (k, v) = node("a", "1");
        s.create(k.clone(), v).unwrap();
        s.create(Key::new(Kind::Lease, "ns", "l"), json!({}))
            .unwrap();
        s.update(k.clone(), json!({"metadata": {"name": "a"}}))
            .unwrap();
        let changes = s.changes_since(Kind::Node, 2).unwrap();
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].change, ChangeType::Modified);
        assert_eq!(changes[0].rv, 4);
        assert_eq!(
            changes[0].prev.as_ref().unwrap()["metadata"]["labels"]["l"],
            "1"
        );
    }

    #[test]
    fn compaction_and_ring_overflow_make_old_rvs_too_old() {
        let mut s = Store::new(2);
        for i in 0..4 {
            let (k, v) = node(&format!("n{i}"), "x");
            s.create(k, v).unwrap();
        }
        // RVs 2..=5; the ring keeps 4 and 5, so resuming from 3 still works.
        assert!(s.changes_since(Kind::Node, 3).is_ok());
        assert_eq!(
            s.changes_since(Kind::Node, 2),
            Err(StoreError::TooOld {
                requested: 2,
                oldest: 3
            })
        );
        s.compact();
        assert!(s.changes_since(Kind::Node, 5).unwrap().is_empty());
        assert!(s.changes_since(Kind::Node, 4).is_err());
    }

    #[test]
    fn list_at_rebuilds_a_past_state() {
        let mut s = Store::new(100);
        let (k, v) = node("a", "1");
        s.create(k.clone(), v).unwrap();
        let at = s.current_rv();
        s.update(
            k.clone(),
            json!({"metadata": {"name": "a", "labels": {"l": "2"}}}),
        )
        .unwrap();
        let (k2, v2) = node("b", "1");
        s.create(k2, v2).unwrap();
        let past = s.list_at(Kind::Node, None, at).unwrap();
        assert_eq!(past.len(), 1);
        assert_eq!(past[0].1["metadata"]["labels"]["l"], "1");
        assert_eq!(past[0].1["metadata"]["resourceVersion"], at.to_string());
    }
}
