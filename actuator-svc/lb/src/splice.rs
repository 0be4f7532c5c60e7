//! PUT bodies by splicing: the load balancer document as read, with small replacements at the
//! byte ranges of the values to change. Pure.
//!
//! One scanning pass ([`super::scan`]) finds, for the entries named in the changes, where
//! their `adminState` value is (or where to insert one), and every read-only member NRP
//! computes and ignores in a PUT ([`read_only`]): dropped, so a body carries what NRP needs
//! and nothing else (ARM refuses request bodies over 4 MB, contracts/arm.md section 9; NRP's
//! per-entry `id`/`etag`/`type`/`provisioningState` echoes alone triple a pool's size). The
//! body is then the original bytes cut at those offsets with a few short strings between
//! them: no tree and no second copy of a 16 MB document, and every other byte (rules,
//! probes, frontends, key order, whitespace) exactly as ARM sent it.

use super::doc::{Admin, DocError};
use super::scan::{self, Frame, Sink, path_is};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Range;

/// ARM's request-body limit: 4 MB (contracts/arm.md section 9), counted as 4 MiB. A larger
/// body is refused with 413 `RequestContentTooLarge`, so the writer never sends one.
pub const MAX_REQUEST_BODY: usize = 4 * 1024 * 1024;

/// One part of a spliced body.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    /// A range of the original bytes.
    Keep(Range<usize>),
    /// A replacement.
    Text(&'static str),
}

/// A body made of the original document and replacements.
#[derive(Debug, Clone)]
pub struct Spliced {
    original: Bytes,
    parts: Vec<Part>,
    /// How many entries the changes matched.
    pub count: usize,
}

impl Spliced {
    /// The body's length in bytes (its Content-Length).
    pub fn len(&self) -> usize {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Keep(r) => r.len(),
                Part::Text(t) => t.len(),
            })
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The body as chunks: slices of the original (no copy) and the replacements.
    pub fn chunks(&self) -> Vec<Bytes> {
        self.parts
            .iter()
            .filter_map(|p| {
                let b = match p {
                    Part::Keep(r) => self.original.slice(r.clone()),
                    Part::Text(t) => Bytes::from_static(t.as_bytes()),
                };
                (!b.is_empty()).then_some(b)
            })
            .collect()
    }

    /// The body in one buffer (tests, small bodies).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len());
        for c in self.chunks() {
            out.extend_from_slice(&c);
        }
        out
    }
}

/// An entry of a pool, as far as an edit needs it.
#[derive(Debug, Default)]
struct Entry {
    name: Option<String>,
    close_at: usize,
    members: usize,
    /// The `properties` object: `(open, close, members)`.
    props: Option<(usize, usize, usize)>,
    /// `properties` when it is not an object (`null`): its span.
    props_scalar: Option<Range<usize>>,
    /// The `adminState` value's span.
    admin: Option<Range<usize>>,
}

#[derive(Debug, Default)]
struct Pool {
    name: Option<String>,
    open_at: usize,
    close_at: usize,
    entries: Vec<Entry>,
}

const POOLS: &[Option<&str>] = &[Some("properties"), Some("backendAddressPools"), None];
const POOL_NAME: &[Option<&str>] = &[
    Some("properties"),
    Some("backendAddressPools"),
    None,
    Some("name"),
];
const ENTRIES: &[Option<&str>] = &[
    Some("properties"),
    Some("backendAddressPools"),
    None,
    Some("properties"),
    Some("loadBalancerBackendAddresses"),
    None,
];

/// Child kinds of an LB whose items NRP stamps with `etag`, `type` and `provisioningState`.
const CHILD_KINDS: &[&[u8]] = &[
    b"frontendIPConfigurations",
    b"backendAddressPools",
    b"loadBalancingRules",
    b"probes",
    b"inboundNatRules",
    b"inboundNatPools",
    b"outboundRules",
];

/// Whether the member of `kind`'s `properties` named `key` is read-only (loadBalancer.json,
/// 2024-03-01: provisioning states and the back-references NRP derives from the rules, and
/// a pool's NIC-owned `backendIPConfigurations`).
fn child_read_only(kind: &[u8], key: &[u8]) -> bool {
    key == b"provisioningState"
        || match kind {
            b"frontendIPConfigurations" => matches!(
                key,
                b"loadBalancingRules" | b"outboundRules" | b"inboundNatRules" | b"inboundNatPools"
            ),
            b"probes" => key == b"loadBalancingRules",
            b"inboundNatRules" => key == b"backendIPConfiguration",
            b"backendAddressPools" => matches!(
                key,
                b"loadBalancingRules"
                    | b"outboundRules"
                    | b"outboundRule"
                    | b"inboundNatRules"
                    | b"backendIPConfigurations"
            ),
            _ => false,
        }
}

/// Whether the value whose enclosing containers are `path` is a read-only member that NRP
/// ignores in a PUT (contracts/arm.md 1.2, section 9; the spec marks them `readOnly`): the
/// LB's `etag`, `type`, `provisioningState` and `resourceGuid`; every child's `etag`, `type`,
/// `provisioningState` and back-references; every pool entry's `id`, `etag`, `type` (NRP
/// echoes, not in the spec's entry schema), `provisioningState`,
/// `networkInterfaceIPConfiguration` and `inboundNatRulesPortMapping`. Names, ids of
/// children, references and every writable property stay. Called for every value of the
/// document, so it only compares a few keys.
fn read_only(path: &[Frame]) -> bool {
    let key = |i: usize| -> &[u8] {
        match path.get(i) {
            Some(f) if f.object => &f.key,
            _ => b"",
        }
    };
    let is_array = |i: usize| path.get(i).is_some_and(|f| !f.object);
    match path.len() {
        1 => matches!(key(0), b"etag" | b"type"),
        2 => key(0) == b"properties" && matches!(key(1), b"provisioningState" | b"resourceGuid"),
        4 => {
            key(0) == b"properties"
                && is_array(2)
                && CHILD_KINDS.contains(&key(1))
                && matches!(key(3), b"etag" | b"type")
        }
        5 => {
            key(0) == b"properties"
                && is_array(2)
                && key(3) == b"properties"
                && CHILD_KINDS.contains(&key(1))
                && child_read_only(key(1), key(4))
        }
        7 | 8 => {
            key(0) == b"properties"
                && key(1) == b"backendAddressPools"
                && is_array(2)
                && key(3) == b"properties"
                && key(4) == b"loadBalancerBackendAddresses"
                && is_array(5)
                && if path.len() == 7 {
                    matches!(key(6), b"id" | b"etag" | b"type")
                } else {
                    key(6) == b"properties"
                        && matches!(
                            key(7),
                            b"provisioningState"
                                | b"networkInterfaceIPConfiguration"
                                | b"inboundNatRulesPortMapping"
                        )
                }
        }
        _ => false,
    }
}

/// A read-only member to drop: the object it is in (its opening bracket), its key's opening
/// quote and the end of its value.
#[derive(Debug, Clone, Copy)]
struct Drop {
    obj: usize,
    key_at: usize,
    end: usize,
}

/// Collects the pools and the entries whose names appear in the changes.
struct Finder<'a> {
    names: &'a BTreeSet<&'a str>,
    /// Read-only members, in document order.
    drops: Vec<Drop>,
    /// How many members of each object (by opening bracket) are dropped.
    dropped_in: HashMap<usize, usize>,
    pools: Vec<Pool>,
    pool: Option<Pool>,
    entry: Option<Entry>,
}

fn under(path: &[Frame], prefix: &[Option<&str>], last: Option<&str>) -> bool {
    path.len() == prefix.len() + 1
        && path_is(&path[..prefix.len()], prefix)
        && path_is(&path[prefix.len()..], &[last])
}

impl<'a> Finder<'a> {
    fn new(names: &'a BTreeSet<&'a str>) -> Self {
        Finder {
            names,
            drops: Vec::new(),
            dropped_in: HashMap::new(),
            pools: Vec::new(),
            pool: None,
            entry: None,
        }
    }

    /// Records the value ending at `end` as a member to drop when it is read-only.
    fn note_read_only(&mut self, path: &[Frame], end: usize) -> bool {
        let Some(obj) = path.last().filter(|f| f.object) else {
            return false;
        };
        if !read_only(path) {
            return false;
        }
        self.drops.push(Drop {
            obj: obj.open_at,
            key_at: obj.key_at,
            end,
        });
        *self.dropped_in.entry(obj.open_at).or_default() += 1;
        true
    }
}

impl Sink for Finder<'_> {
    fn open(&mut self, path: &[Frame], at: usize) {
        if path_is(path, POOLS) {
            self.pool = Some(Pool {
                open_at: at,
                ..Pool::default()
            });
        } else if path_is(path, ENTRIES) {
            self.entry = Some(Entry::default());
        }
    }

    fn close(&mut self, path: &[Frame], frame: &Frame, at: usize) {
        self.note_read_only(path, at + 1);
        if path_is(path, POOLS) && frame.object {
            if let Some(mut p) = self.pool.take() {
                p.close_at = at;
                self.pools.push(p);
            }
        } else if path_is(path, ENTRIES) && frame.object {
            if let Some(mut e) = self.entry.take() {
                e.close_at = at;
                e.members = frame.members;
                let wanted = e.name.as_deref().is_some_and(|n| self.names.contains(n));
                if let (true, Some(pool)) = (wanted, self.pool.as_mut()) {
                    pool.entries.push(e);
                }
            }
        } else if under(path, ENTRIES, Some("properties"))
            && frame.object
            && let Some(e) = self.entry.as_mut()
        {
            e.props = Some((frame.open_at, at, frame.members));
        }
    }

    fn wants_text(&self, path: &[Frame]) -> bool {
        path_is(path, POOL_NAME) || under(path, ENTRIES, Some("name"))
    }

    fn scalar(&mut self, path: &[Frame], start: usize, end: usize, text: Option<&[u8]>) {
        if self.note_read_only(path, end) {
            return;
        }
        if path_is(path, POOL_NAME) {
            if let Some(p) = self.pool.as_mut() {
                p.name = text.and_then(scan::unescape);
            }
        } else if under(path, ENTRIES, Some("name")) {
            if let Some(e) = self.entry.as_mut() {
                e.name = text.and_then(scan::unescape);
            }
        } else if under(path, ENTRIES, Some("properties")) {
            if let Some(e) = self.entry.as_mut() {
                e.props_scalar = Some(start..end);
            }
        } else if path.len() == ENTRIES.len() + 2
            && path_is(&path[..ENTRIES.len()], ENTRIES)
            && path_is(
                &path[ENTRIES.len()..],
                &[Some("properties"), Some("adminState")],
            )
            && let Some(e) = self.entry.as_mut()
        {
            e.admin = Some(start..end);
        }
    }
}

/// One replacement: bytes `at` are replaced by `text`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Edit {
    at: Range<usize>,
    text: &'static str,
}

fn quoted(a: Admin) -> &'static str {
    match a.as_arm() {
        "Down" => "\"Down\"",
        "Up" => "\"Up\"",
        _ => "\"None\"",
    }
}

/// The edit that sets `entry`'s admin state to `a`. `dropped`: how many members of each
/// object the body drops (an entry's `properties` may have none left).
fn set_admin(e: &Entry, a: Admin, dropped: &HashMap<usize, usize>) -> Edit {
    if let Some(r) = &e.admin {
        return Edit {
            at: r.clone(),
            text: quoted(a),
        };
    }
    if let Some((open, close, members)) = e.props {
        let kept = members - dropped.get(&open).copied().unwrap_or(0).min(members);
        let text = match (kept > 0, a.as_arm()) {
            (true, "Down") => ",\"adminState\":\"Down\"",
            (true, "Up") => ",\"adminState\":\"Up\"",
            (true, _) => ",\"adminState\":\"None\"",
            (false, "Down") => "\"adminState\":\"Down\"",
            (false, "Up") => "\"adminState\":\"Up\"",
            (false, _) => "\"adminState\":\"None\"",
        };
        return Edit {
            at: close..close,
            text,
        };
    }
    if let Some(r) = &e.props_scalar {
        let text = match a.as_arm() {
            "Down" => "{\"adminState\":\"Down\"}",
            "Up" => "{\"adminState\":\"Up\"}",
            _ => "{\"adminState\":\"None\"}",
        };
        return Edit {
            at: r.clone(),
            text,
        };
    }
    let text = match (e.members > 0, a.as_arm()) {
        (true, "Down") => ",\"properties\":{\"adminState\":\"Down\"}",
        (true, "Up") => ",\"properties\":{\"adminState\":\"Up\"}",
        (true, _) => ",\"properties\":{\"adminState\":\"None\"}",
        (false, "Down") => "\"properties\":{\"adminState\":\"Down\"}",
        (false, "Up") => "\"properties\":{\"adminState\":\"Up\"}",
        (false, _) => "\"properties\":{\"adminState\":\"None\"}",
    };
    Edit {
        at: e.close_at..e.close_at,
        text,
    }
}

fn next_solid(doc: &[u8], from: usize) -> Option<usize> {
    doc[from..]
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .map(|i| from + i)
}

fn prev_solid(doc: &[u8], before: usize) -> Option<usize> {
    doc[..before].iter().rposition(|b| !b.is_ascii_whitespace())
}

/// The edits that remove `drops` (one object's, in order) with their commas, so that what
/// stays is valid JSON: a member followed by a comma goes with that comma; the run of
/// dropped members that ends the object goes with the comma before it (or, when nothing is
/// left before it, the object is emptied).
fn object_drops(doc: &[u8], drops: &[Drop], edits: &mut Vec<Edit>) {
    let Some(last) = drops.last() else {
        return;
    };
    let closes = next_solid(doc, last.end).is_some_and(|i| doc[i] == b'}');
    // The trailing run: dropped members with nothing kept between them and the end.
    let mut run = drops.len();
    if closes {
        run -= 1;
        while run > 0 {
            let (a, b) = (drops[run - 1], drops[run]);
            let comma = next_solid(doc, a.end);
            let adjacent =
                comma.is_some_and(|c| doc[c] == b',' && next_solid(doc, c + 1) == Some(b.key_at));
            if !adjacent {
                break;
            }
            run -= 1;
        }
    }
    for d in &drops[..run] {
        // A member not at the end is followed by its comma (the scan checked the syntax).
        if let Some(comma) = next_solid(doc, d.end).filter(|&i| doc[i] == b',') {
            edits.push(Edit {
                at: d.key_at..comma + 1,
                text: "",
            });
        }
    }
    if closes {
        let first = drops[run];
        let start = match prev_solid(doc, first.key_at).filter(|&i| doc[i] == b',') {
            Some(comma) => comma,
            None => first.key_at,
        };
        edits.push(Edit {
            at: start..last.end,
            text: "",
        });
    }
}

/// The edits that drop every read-only member found.
fn drop_edits(doc: &[u8], drops: &[Drop]) -> Vec<Edit> {
    // Grouped by object, each group in document order (one sort, no map of 100,000 groups).
    let mut sorted = drops.to_vec();
    sorted.sort_unstable_by_key(|d| (d.obj, d.key_at));
    let mut edits = Vec::with_capacity(sorted.len());
    for group in sorted.chunk_by(|a, b| a.obj == b.obj) {
        object_drops(doc, group, &mut edits);
    }
    edits
}

fn scan_doc<'a>(doc: &[u8], names: &'a BTreeSet<&'a str>) -> Result<Finder<'a>, DocError> {
    let mut f = Finder::new(names);
    scan::scan(doc, &mut f).map_err(|e| DocError::new(e.to_string()))?;
    Ok(f)
}

/// The edits of one pool's entries' admin states.
fn pool_edits(
    pool: &Pool,
    changes: &BTreeMap<String, Admin>,
    dropped: &HashMap<usize, usize>,
) -> (Vec<Edit>, usize) {
    let mut edits = Vec::new();
    let mut count = 0;
    for e in &pool.entries {
        if let Some(a) = e.name.as_ref().and_then(|n| changes.get(n)) {
            edits.push(set_admin(e, *a, dropped));
            count += 1;
        }
    }
    (edits, count)
}

fn assemble(original: Bytes, range: Range<usize>, mut edits: Vec<Edit>, count: usize) -> Spliced {
    edits.sort_by_key(|e| (e.at.start, e.at.end));
    let mut parts = Vec::with_capacity(edits.len() * 2 + 1);
    let mut at = range.start;
    for e in edits {
        if e.at.start < at {
            // Overlapping edits cannot come out of one scan; keep the first.
            continue;
        }
        parts.push(Part::Keep(at..e.at.start));
        if !e.text.is_empty() {
            parts.push(Part::Text(e.text));
        }
        at = e.at.end;
    }
    parts.push(Part::Keep(at..range.end));
    Spliced {
        original,
        parts,
        count,
    }
}

/// The body of a whole-LB PUT: the document as read, with the admin states of `changes`
/// (pool name -> entry name -> state) set and every read-only member dropped.
pub fn whole_lb(
    lb: &Bytes,
    changes: &BTreeMap<String, BTreeMap<String, Admin>>,
) -> Result<Spliced, DocError> {
    let names: BTreeSet<&str> = changes
        .values()
        .flat_map(|m| m.keys().map(String::as_str))
        .collect();
    let f = scan_doc(lb, &names)?;
    let mut edits = drop_edits(lb, &f.drops);
    let none = BTreeMap::new();
    let mut count = 0;
    for p in &f.pools {
        let c = p
            .name
            .as_ref()
            .and_then(|n| changes.get(n))
            .unwrap_or(&none);
        let (e, n) = pool_edits(p, c, &f.dropped_in);
        edits.extend(e);
        count += n;
    }
    Ok(assemble(lb.clone(), 0..lb.len(), edits, count))
}

/// The document as a writer needs it: every read-only member dropped, nothing else changed.
/// Kept as the base of the next write, a 5,000-node dual-stack LB is about 1 MB instead of
/// the 16 MB ARM sent, so it fits the base cache and a signal's first PUT needs no GET;
/// splicing it again gives the same bodies as splicing the original.
pub fn compact(lb: &Bytes) -> Result<Bytes, DocError> {
    let mut c = Compactor::new();
    scan::scan(lb, &mut c).map_err(|e| DocError::new(e.to_string()))?;
    Ok(c.finish(lb))
}

/// No entry is edited by [`compact`].
static NO_NAMES: BTreeSet<&str> = BTreeSet::new();

/// [`compact`] as a sink, so the document can be read for something else in the same scan
/// (`doc::read_lb_also`).
pub struct Compactor(Finder<'static>);

impl Default for Compactor {
    fn default() -> Self {
        Self::new()
    }
}

impl Compactor {
    pub fn new() -> Self {
        Self(Finder::new(&NO_NAMES))
    }

    /// The compact document, once `doc` was scanned whole through this sink.
    pub fn finish(self, doc: &Bytes) -> Bytes {
        let edits = drop_edits(doc, &self.0.drops);
        Bytes::from(assemble(doc.clone(), 0..doc.len(), edits, 0).to_vec())
    }
}

impl Sink for Compactor {
    fn open(&mut self, path: &[Frame], at: usize) {
        self.0.open(path, at);
    }

    fn close(&mut self, path: &[Frame], frame: &Frame, at: usize) {
        self.0.close(path, frame, at);
    }

    fn wants_text(&self, path: &[Frame]) -> bool {
        self.0.wants_text(path)
    }

    fn scalar(&mut self, path: &[Frame], start: usize, end: usize, text: Option<&[u8]>) {
        self.0.scalar(path, start, end, text);
    }
}

/// The body of a per-pool PUT: pool `pool` cut out of the LB document, edited like
/// [`whole_lb`]. `None` when the LB has no such pool.
pub fn one_pool(
    lb: &Bytes,
    pool: &str,
    changes: &BTreeMap<String, Admin>,
) -> Result<Option<Spliced>, DocError> {
    let names: BTreeSet<&str> = changes.keys().map(String::as_str).collect();
    let f = scan_doc(lb, &names)?;
    let Some(p) = f.pools.iter().find(|p| p.name.as_deref() == Some(pool)) else {
        return Ok(None);
    };
    let range = p.open_at..p.close_at + 1;
    let (mut edits, count) = pool_edits(p, changes, &f.dropped_in);
    edits.extend(
        drop_edits(lb, &f.drops)
            .into_iter()
            .filter(|e| range.start <= e.at.start && e.at.end <= range.end),
    );
    Ok(Some(assemble(lb.clone(), range, edits, count)))
}

#[cfg(test)]
#[path = "splice_tests.rs"]
mod tests;

/// Body sizes at AKS's cluster sizes: the documents arm-sim renders for the aks-fixture
/// presets (dual-stack; `aks` NIC-based, `aks-ip` IP-based), as read and as sent.
#[cfg(test)]
#[path = "splice_size_tests.rs"]
mod size_tests;
