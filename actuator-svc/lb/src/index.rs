//! The pool index: which backend entries of which pools belong to a node. Pure.
//!
//! Built per load balancer from what ARM sends (a GET of the LB, or pool LIST pages, streamed
//! by `lb::doc` entry by entry straight into the compact form, never kept as JSON), plus the
//! NIC list of the node resource group for VMs whose NICs are standalone resources (VMSS
//! Flex, availability sets). Matching rules (`design.md` section 5):
//! - NIC-based entries: the ipConfiguration ID's VM equals the node's VM (providerID);
//! - IP-based entries: the entry's `ipAddress` is one of the node's internal IPs (v4 or v6);
//! - all IDs compare case-insensitively.
//!
//! Memory: an entry is a few compact fields; the long ipConfiguration IDs share their
//! scale-set prefix (interned), and lookups go through hash maps by VM, NIC, IP and name, so
//! resolving a node costs a few map probes, not a scan of every entry.
//!
//! Pools that are not node pools, or where admin state cannot act, are never indexed, so no
//! write can touch them ([`NotWritten`]): pools only outbound rules use (AKS's
//! `aksOutboundBackendPool`) or only inbound NAT rules use (admin state acts through
//! load-balancing rules only, so a write would cost an ARM operation and change nothing), and
//! every pool of a load balancer whose SKU is not Standard (Basic has no admin state; a
//! ServiceGateway LB, SKU `Service`, holds pod IPs, not nodes). They are listed in
//! [`LbIndex::skipped`] so they can be reported. Pools whose rules have no probe are indexed
//! but flagged, so answers can say that `Down` has no effect there.

use super::doc::{self, PoolUse, Provisioning, SkuClass};
use super::ids::{self, IpConfigOwner, VmRef};
use super::nic;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

pub use super::doc::Admin;

/// The node as the actuator knows it (from the proto's `NodeRef`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeSpec {
    pub name: String,
    pub uid: String,
    pub provider_id: String,
    pub internal_ips: Vec<IpAddr>,
}

/// One backend entry, located (the answer form; the index keeps a compact one).
///
/// Every text field is shared with the [`LbIndex`] it came from: resolving a node each write
/// round costs reference-count bumps, not owned strings per entry. The ipConfiguration ID and
/// the IP address are rendered only for answers ([`IndexedEntry::ip_configuration_id`],
/// [`IndexedEntry::ip_address`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedEntry {
    pub lb: Arc<str>,
    pub lb_id: Arc<str>,
    pub pool: Arc<str>,
    pub entry: Arc<str>,
    /// The entry's ipConfiguration ID as its shared prefix and the rest.
    pub ipc: Option<(Arc<str>, Arc<str>)>,
    /// The entry's IP address (IP-based pools).
    pub ip: Option<IpAddr>,
    pub admin: Admin,
    /// False while the pool's last operation is running or failed (`provisioningState` other
    /// than `Succeeded`): what the entry says is then a goal, not a fact, and a failed goal
    /// must be written again.
    pub settled: bool,
    /// False when no load-balancing rule with a health probe uses the pool: admin state has
    /// no effect on traffic there (Azure admin-state overview).
    pub probed: bool,
}

impl IndexedEntry {
    /// The ipConfiguration ID as ARM wrote it (empty for IP-based entries).
    pub fn ip_configuration_id(&self) -> String {
        self.ipc
            .as_ref()
            .map(|(prefix, rest)| format!("{prefix}{rest}"))
            .unwrap_or_default()
    }

    /// The IP address (empty for NIC-based entries).
    pub fn ip_address(&self) -> String {
        self.ip.map(|ip| ip.to_string()).unwrap_or_default()
    }
}

/// The pools of one load balancer as ARM lists them (tests and benches build indexes from
/// JSON with this).
#[derive(Debug, Clone)]
pub struct LbPools {
    pub name: String,
    pub id: String,
    pub pools: Vec<Value>,
}

/// Standalone NICs: NIC ID (lower-cased) -> its VM, and back; plus the NICs of the listing
/// that could not be read, for whoever listed them to report.
#[derive(Debug, Clone, Default)]
pub struct NicMap {
    vm_of: HashMap<Box<str>, VmRef>,
    nics_of: HashMap<VmRef, Vec<Box<str>>>,
    unreadable: Vec<nic::Unreadable>,
}

impl NicMap {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that the NIC `nic_id` (any casing) is attached to `vm`.
    pub fn insert(&mut self, nic_id: &str, vm: VmRef) {
        let nic: Box<str> = nic_id.trim_end_matches('/').to_ascii_lowercase().into();
        if let Some(old) = self.vm_of.insert(nic.clone(), vm.clone())
            && let Some(list) = self.nics_of.get_mut(&old)
        {
            list.retain(|n| *n != nic);
        }
        self.nics_of.entry(vm).or_default().push(nic);
    }

    /// The VM a NIC is attached to.
    pub fn vm_of(&self, nic_id: &str) -> Option<&VmRef> {
        self.vm_of.get(nic_id)
    }

    fn nics_of(&self, vm: &VmRef) -> &[Box<str>] {
        self.nics_of.get(vm).map_or(&[], Vec::as_slice)
    }

    /// The NICs attached to a VM.
    pub fn len(&self) -> usize {
        self.vm_of.len()
    }

    /// The NICs added that could not be read ([`nic::read`]): they map to no VM, so entries on
    /// them match no node.
    pub fn unreadable(&self) -> &[nic::Unreadable] {
        &self.unreadable
    }

    pub fn is_empty(&self) -> bool {
        self.vm_of.is_empty()
    }
}

/// The compact form of an entry.
#[derive(Debug)]
struct Entry {
    pool: u16,
    /// Shared with the answers that name the entry (`Arc`, not `Box`: 16 bytes more per
    /// entry, against an owned copy per node and round).
    name: Arc<str>,
    /// The ipConfiguration ID as `prefix + rest`, the prefix shared by every entry of the
    /// same scale set or resource group.
    ipc: Option<(Arc<str>, Arc<str>)>,
    ip: Option<IpAddr>,
    /// The entry's VMSS resource group (lower-cased, interned), to check VM matches.
    vmss_rg: Option<Arc<str>>,
    admin: Admin,
}

/// Why a pool is never written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NotWritten {
    /// Only outbound rules use it.
    OutboundOnly,
    /// Only inbound NAT rules use it.
    NatOnly,
    /// Its LB is in cloud-provider-azure's ServiceGateway mode (SKU `Service`): pod IPs.
    ServiceGateway,
    /// Its LB's SKU has no admin state (Basic) or is not a node load balancer (Gateway).
    Sku,
}

impl NotWritten {
    /// Low-cardinality metric label.
    pub fn label(self) -> &'static str {
        match self {
            NotWritten::OutboundOnly => "outbound_only",
            NotWritten::NatOnly => "nat_only",
            NotWritten::ServiceGateway => "service_gateway",
            NotWritten::Sku => "sku",
        }
    }

    /// What to tell a user.
    pub fn reason(self) -> &'static str {
        match self {
            NotWritten::OutboundOnly => "only outbound rules use it",
            NotWritten::NatOnly => {
                "only inbound NAT rules use it (admin state does not act on NAT rules)"
            }
            NotWritten::ServiceGateway => {
                "its load balancer is in ServiceGateway mode (SKU Service): pod IPs, not nodes"
            }
            NotWritten::Sku => "its load balancer's SKU has no backend admin state (not Standard)",
        }
    }

    /// Whether a user should hear of it (an outbound-only pool is every AKS cluster's normal).
    pub fn notable(self) -> bool {
        self != NotWritten::OutboundOnly
    }
}

/// A pool of the document that the index left out, and why.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SkippedPool {
    pub name: Arc<str>,
    pub why: NotWritten,
    pub entries: usize,
}

/// Entries of a load balancer's indexed pools that no known node claims.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unmatched {
    pub count: usize,
    /// A few of their names (`pool/entry`), for the log.
    pub sample: Vec<String>,
}

#[derive(Debug)]
struct PoolMeta {
    name: Arc<str>,
    settled: bool,
    probed: bool,
}

/// One load balancer's entries, with lookups.
#[derive(Debug, Default)]
pub struct LbIndex {
    pub name: Arc<str>,
    pub id: Arc<str>,
    pub etag: Option<String>,
    pub provisioning: Provisioning,
    pools: Vec<PoolMeta>,
    /// Pools of the document left out (never written).
    skipped: Vec<SkippedPool>,
    entries: Vec<Entry>,
    /// Scale set -> instance -> entries (nested so a lookup borrows the query's strings).
    by_vmss: HashMap<Arc<str>, HashMap<Box<str>, Vec<u32>>>,
    by_nic: HashMap<Box<str>, Vec<u32>>,
    by_ip: HashMap<IpAddr, Vec<u32>>,
    /// Entries without a NIC owner, by lower-cased name (the name-only fallback).
    by_name: HashMap<Box<str>, Vec<u32>>,
}

/// Shares equal strings (scale-set names, ID prefixes) between entries.
#[derive(Default)]
struct Interner(HashSet<Arc<str>>);

impl Interner {
    fn get(&mut self, s: &str) -> Arc<str> {
        if let Some(a) = self.0.get(s) {
            return a.clone();
        }
        let a: Arc<str> = s.into();
        self.0.insert(a.clone());
        a
    }
}

/// Splits an ipConfiguration ID after its VM or NIC container, so the long shared part is
/// stored once.
fn split_ipc(id: &str) -> (&str, &str) {
    let lower = id.to_ascii_lowercase();
    let at = lower
        .rfind("/virtualmachines/")
        .map(|i| i + "/virtualmachines/".len())
        .or_else(|| {
            lower
                .rfind("/networkinterfaces/")
                .map(|i| i + "/networkinterfaces/".len())
        })
        .unwrap_or(0);
    id.split_at(at)
}

/// Where an entry is looked up (kept aside until its pool's use is known).
enum Key {
    Vmss(Arc<str>, Box<str>),
    Nic(Box<str>),
    /// By lower-cased name, and by IP when it has one.
    Name(Box<str>, Option<IpAddr>),
}

/// Builds an [`LbIndex`] from the entries the document reader passes, one at a time: the
/// read never holds more than the body and the compact entries.
struct Builder {
    entries: Vec<Entry>,
    keys: Vec<Key>,
    interner: Interner,
}

impl doc::EntrySink for Builder {
    fn entry(&mut self, pool: usize, e: doc::EntryRef<'_>) {
        let Ok(pool) = u16::try_from(pool) else {
            return;
        };
        let mut entry = Entry {
            pool,
            name: e.name.into(),
            ipc: None,
            ip: None,
            vmss_rg: None,
            admin: e.admin,
        };
        let name_key = || Key::Name(e.name.to_ascii_lowercase().into(), None);
        let key = match e.ip_configuration_id.filter(|s| !s.is_empty()) {
            Some(ipc) => {
                let key = match ids::parse_ip_configuration_id(ipc) {
                    Some(IpConfigOwner::ScaleSetVm(VmRef::ScaleSetVm {
                        resource_group,
                        scale_set,
                        instance,
                    })) => {
                        entry.vmss_rg = Some(self.interner.get(&resource_group));
                        Key::Vmss(self.interner.get(&scale_set), instance.into())
                    }
                    Some(IpConfigOwner::Nic(nic)) => Key::Nic(nic.into()),
                    _ => name_key(),
                };
                let (prefix, rest) = split_ipc(ipc);
                entry.ipc = Some((self.interner.get(prefix), rest.into()));
                key
            }
            None => {
                entry.ip = e.ip_address.and_then(|s| s.parse().ok());
                Key::Name(e.name.to_ascii_lowercase().into(), entry.ip)
            }
        };
        self.entries.push(entry);
        self.keys.push(key);
    }
}

impl Builder {
    fn new() -> Self {
        Self {
            entries: Vec::new(),
            keys: Vec::new(),
            interner: Interner::default(),
        }
    }

    /// The index, once the document's pools are known: entries of pools that are never
    /// written are dropped ([`NotWritten`]), the others numbered and put in the lookup maps.
    fn finish(self, name: &str, id: &str, head: doc::DocHead) -> LbIndex {
        let mut idx = LbIndex {
            name: name.into(),
            id: id.into(),
            etag: head.etag,
            provisioning: head.provisioning,
            ..Default::default()
        };
        let mut per_pool = vec![0usize; head.pools.len()];
        for e in &self.entries {
            if let Some(n) = per_pool.get_mut(usize::from(e.pool)) {
                *n += 1;
            }
        }
        let sku = SkuClass::of(head.sku.as_deref());
        // Document pool number -> index pool number.
        let mut kept: Vec<Option<u16>> = Vec::with_capacity(head.pools.len());
        for (pool, entries) in head.pools.into_iter().zip(per_pool) {
            let why = match (sku, pool.usage) {
                (SkuClass::Service, _) => Some(NotWritten::ServiceGateway),
                (SkuClass::Basic | SkuClass::Other, _) => Some(NotWritten::Sku),
                (SkuClass::Standard, PoolUse::OutboundOnly) => Some(NotWritten::OutboundOnly),
                (SkuClass::Standard, PoolUse::NatOnly) => Some(NotWritten::NatOnly),
                (SkuClass::Standard, _) => None,
            };
            if let Some(why) = why {
                idx.skipped.push(SkippedPool {
                    name: pool.name.into(),
                    why,
                    entries,
                });
                kept.push(None);
                continue;
            }
            let no = u16::try_from(idx.pools.len()).ok();
            if no.is_some() {
                idx.pools.push(PoolMeta {
                    name: pool.name.into(),
                    // An operation on the LB (a whole-LB PUT, or a pool's) makes every entry
                    // state a goal until the LB reads `Succeeded` again, whatever the pool says.
                    settled: pool.settled && idx.provisioning == Provisioning::Succeeded,
                    probed: pool.usage != PoolUse::Unprobed,
                });
            }
            kept.push(no);
        }
        let count = self
            .entries
            .iter()
            .filter(|e| kept.get(usize::from(e.pool)).copied().flatten().is_some())
            .count();
        idx.entries.reserve_exact(count);
        for (mut entry, key) in self.entries.into_iter().zip(self.keys) {
            let Some(pool) = kept.get(usize::from(entry.pool)).copied().flatten() else {
                continue;
            };
            let Ok(no) = u32::try_from(idx.entries.len()) else {
                break;
            };
            entry.pool = pool;
            match key {
                Key::Vmss(scale_set, instance) => idx
                    .by_vmss
                    .entry(scale_set)
                    .or_default()
                    .entry(instance)
                    .or_default()
                    .push(no),
                Key::Nic(nic) => idx.by_nic.entry(nic).or_default().push(no),
                Key::Name(name, ip) => {
                    if let Some(ip) = ip {
                        idx.by_ip.entry(ip).or_default().push(no);
                    }
                    idx.by_name.entry(name).or_default().push(no);
                }
            }
            idx.entries.push(entry);
        }
        idx
    }
}

impl LbIndex {
    /// Indexes a load balancer document (GET of the LB, or a PUT answer), streaming it.
    pub fn read(name: &str, id: &str, body: &[u8]) -> Result<Self, doc::DocError> {
        Self::read_also(name, id, body, &mut ())
    }

    /// [`LbIndex::read`], feeding `also` from the same scan of the document.
    pub fn read_also(
        name: &str,
        id: &str,
        body: &[u8],
        also: &mut impl super::scan::Sink,
    ) -> Result<Self, doc::DocError> {
        let mut b = Builder::new();
        let head = doc::read_lb_also(body, &mut b, also)?;
        Ok(b.finish(name, id, head))
    }

    /// Indexes pools given as JSON (tests, benches, pool LIST pages already parsed).
    pub fn from_pools(name: &str, id: &str, pools: &[Value]) -> Self {
        let page = serde_json::json!({ "value": pools }).to_string();
        let mut b = Builder::new();
        match doc::read_pool_page(page.as_bytes(), &mut b) {
            Ok(head) => b.finish(name, id, head),
            Err(_) => Builder::new().finish(name, id, doc::DocHead::default()),
        }
    }

    /// Number of indexed entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries in pools no probed load-balancing rule uses (admin state has no effect there).
    pub fn unprobed_len(&self) -> usize {
        self.entries
            .iter()
            .filter(|e| {
                self.pools
                    .get(usize::from(e.pool))
                    .is_some_and(|p| !p.probed)
            })
            .count()
    }

    /// The document's pools that are never written, and why.
    pub fn skipped(&self) -> &[SkippedPool] {
        &self.skipped
    }

    /// One note per reason for the notable pools of this LB that are never written.
    fn skipped_notes(&self, notes: &mut Vec<String>) {
        let mut by_why: BTreeMap<NotWritten, Vec<&str>> = BTreeMap::new();
        for p in self.skipped.iter().filter(|p| p.why.notable()) {
            by_why.entry(p.why).or_default().push(&p.name);
        }
        for (why, pools) in by_why {
            let more = pools.len().saturating_sub(3);
            let mut names = pools.iter().take(3).copied().collect::<Vec<_>>().join(", ");
            if more > 0 {
                names.push_str(&format!(" and {more} more"));
            }
            notes.push(format!(
                "load balancer {}: pool(s) {names} never written: {}",
                self.name,
                why.reason()
            ));
        }
    }

    /// The indexed entries that none of `nodes` claims: VMs that are not cluster nodes, pod
    /// IPs, leftovers. They are never written (only a node's entries are); this says how many.
    pub fn unmatched<'n>(
        &self,
        nodes: impl IntoIterator<Item = &'n NodeSpec>,
        nics: &NicMap,
    ) -> Unmatched {
        let mut claimed = vec![false; self.entries.len()];
        let mut found = Vec::new();
        let mut ignored = Vec::new();
        for node in nodes {
            found.clear();
            self.candidates(&Query::of(node, &mut ignored), nics, &mut found);
            ignored.clear();
            for &no in &found {
                if let Some(c) = claimed.get_mut(no as usize) {
                    *c = true;
                }
            }
        }
        let mut out = Unmatched::default();
        for (e, _) in self.entries.iter().zip(&claimed).filter(|(_, c)| !**c) {
            out.count += 1;
            if out.sample.len() < 5 {
                let pool = self.pools.get(usize::from(e.pool)).map_or("", |p| &p.name);
                out.sample.push(format!("{pool}/{}", e.name));
            }
        }
        out
    }

    fn materialize(&self, no: u32) -> Option<IndexedEntry> {
        let e = self.entries.get(no as usize)?;
        let pool = self.pools.get(usize::from(e.pool))?;
        Some(IndexedEntry {
            lb: self.name.clone(),
            lb_id: self.id.clone(),
            pool: pool.name.clone(),
            entry: e.name.clone(),
            ipc: e.ipc.clone(),
            ip: e.ip,
            admin: e.admin,
            settled: pool.settled,
            probed: pool.probed,
        })
    }

    /// Pushes the entry numbers that match `q` onto `out` (unsorted, possibly repeated).
    fn candidates(&self, q: &Query<'_>, nics: &NicMap, out: &mut Vec<u32>) {
        if let Some(VmRef::ScaleSetVm {
            resource_group,
            scale_set,
            instance,
        }) = q.vm.as_ref()
        {
            let found = self
                .by_vmss
                .get(scale_set.as_str())
                .and_then(|m| m.get(instance.as_str()));
            for &no in found.into_iter().flatten() {
                let rg = self.entries[no as usize].vmss_rg.as_deref().unwrap_or("");
                if rg == resource_group || rg.is_empty() || resource_group.is_empty() {
                    out.push(no);
                }
            }
        }
        if let Some(vm) = q.vm.as_ref() {
            for nic in nics.nics_of(vm) {
                out.extend(self.by_nic.get(nic).into_iter().flatten());
            }
        }
        for ip in q.ips {
            out.extend(self.by_ip.get(ip).into_iter().flatten());
        }
        if q.by_name {
            out.extend(
                self.by_name
                    .get(q.name_lower.as_str())
                    .into_iter()
                    .flatten(),
            );
        }
    }
}

/// A node, prepared for lookups.
struct Query<'a> {
    vm: Option<VmRef>,
    ips: &'a [IpAddr],
    by_name: bool,
    name_lower: String,
}

impl<'a> Query<'a> {
    /// How `node` is looked up; what is odd about it goes to `notes`.
    fn of(node: &'a NodeSpec, notes: &mut Vec<String>) -> Self {
        let mut vm = if node.provider_id.is_empty() {
            None
        } else {
            let parsed = ids::parse_provider_id(&node.provider_id);
            if parsed.is_none() {
                notes.push(format!(
                    "providerID {:?} is not an Azure VM ID",
                    node.provider_id
                ));
            }
            parsed
        };
        let by_name = vm.is_none() && node.internal_ips.is_empty();
        if vm.is_none()
            && let Some((scale_set, instance)) = ids::scale_set_vm_from_node_name(&node.name)
        {
            vm = Some(VmRef::ScaleSetVm {
                resource_group: String::new(),
                scale_set,
                instance,
            });
        }
        if by_name {
            notes.push("resolved by name only (no providerID, no internal IPs)".into());
        }
        Query {
            vm,
            ips: &node.internal_ips,
            by_name,
            name_lower: node.name.to_ascii_lowercase(),
        }
    }
}

/// Every managed LB's index plus the NIC map: cheap to clone, never rebuilt per question.
#[derive(Debug, Clone, Default)]
pub struct PoolIndex {
    lbs: Vec<Arc<LbIndex>>,
    nics: Arc<NicMap>,
}

/// The entries of one node and how they were found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolved {
    pub entries: Vec<IndexedEntry>,
    pub notes: Vec<String>,
}

impl PoolIndex {
    /// An index over already-built LB indexes.
    pub fn new(lbs: Vec<Arc<LbIndex>>, nics: Arc<NicMap>) -> Self {
        Self { lbs, nics }
    }

    /// The same NIC map over other LB indexes (a fresh read of every LB).
    pub fn with_lbs(&self, lbs: Vec<Arc<LbIndex>>) -> Self {
        Self {
            lbs,
            nics: self.nics.clone(),
        }
    }

    /// Entries of `lb` that none of `nodes` claims (see [`LbIndex::unmatched`]).
    pub fn unmatched<'n>(
        &self,
        lb: &str,
        nodes: impl IntoIterator<Item = &'n NodeSpec>,
    ) -> Unmatched {
        self.lbs
            .iter()
            .find(|l| l.name.eq_ignore_ascii_case(lb))
            .map(|l| l.unmatched(nodes, &self.nics))
            .unwrap_or_default()
    }

    /// Indexes the pools of `lbs` given as JSON.
    pub fn build(lbs: &[LbPools], nics: NicMap) -> Self {
        Self {
            lbs: lbs
                .iter()
                .map(|l| Arc::new(LbIndex::from_pools(&l.name, &l.id, &l.pools)))
                .collect(),
            nics: Arc::new(nics),
        }
    }

    /// Number of indexed entries.
    pub fn len(&self) -> usize {
        self.lbs.iter().map(|l| l.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Per pool of `lb`: how many entries it has, and how many of them read `Down` while
    /// `claimed(pool, entry)` says no node of this round asserts them (for the blast-radius
    /// guard, `guard.rs`). Counted by pool number: no string is built per entry.
    pub fn pool_counts(
        &self,
        lb: &str,
        claimed: impl Fn(&str, &str) -> bool,
    ) -> BTreeMap<Arc<str>, (usize, usize)> {
        let mut out: BTreeMap<Arc<str>, (usize, usize)> = BTreeMap::new();
        for idx in self.lbs.iter().filter(|l| l.name.eq_ignore_ascii_case(lb)) {
            let mut counts = vec![(0usize, 0usize); idx.pools.len()];
            for e in &idx.entries {
                let Some(slot) = counts.get_mut(usize::from(e.pool)) else {
                    continue;
                };
                slot.0 += 1;
                if e.admin == Admin::Down && !claimed(&idx.pools[usize::from(e.pool)].name, &e.name)
                {
                    slot.1 += 1;
                }
            }
            for (pool, (total, down)) in idx.pools.iter().zip(counts) {
                let slot = out.entry(pool.name.clone()).or_default();
                slot.0 += total;
                slot.1 += down;
            }
        }
        out
    }

    /// Whether any entry of `lb` reads `Down` (self-heal looks further only then).
    pub fn any_down(&self, lb: &str) -> bool {
        self.lbs
            .iter()
            .filter(|l| l.name.eq_ignore_ascii_case(lb))
            .any(|l| l.entries.iter().any(|e| e.admin == Admin::Down))
    }

    /// False when an entry of `lb` named in `changes` (pool -> entry -> state) reads another
    /// state: a write that ended did not land (canceled, or overwritten since).
    pub fn reads_all(&self, lb: &str, changes: &BTreeMap<String, BTreeMap<String, Admin>>) -> bool {
        self.lbs
            .iter()
            .filter(|l| l.name.eq_ignore_ascii_case(lb))
            .all(|l| {
                l.entries.iter().all(|e| {
                    let pool = l.pools.get(usize::from(e.pool)).map(|p| &*p.name);
                    pool.and_then(|p| changes.get(p))
                        .and_then(|m| m.get(&*e.name))
                        .is_none_or(|want| *want == e.admin)
                })
            })
    }

    /// The entries of `node`, on the load balancer `lb` only when given.
    pub fn resolve(&self, node: &NodeSpec, lb: Option<&str>) -> Resolved {
        let mut notes = Vec::new();
        let q = Query::of(node, &mut notes);
        let mut entries = Vec::new();
        let mut found = Vec::new();
        for idx in self
            .lbs
            .iter()
            .filter(|l| lb.is_none_or(|want| l.name.eq_ignore_ascii_case(want)))
        {
            found.clear();
            idx.candidates(&q, &self.nics, &mut found);
            // In entry order, each once (as the ordered set did before).
            found.sort_unstable();
            found.dedup();
            entries.extend(found.iter().filter_map(|&no| idx.materialize(no)));
        }
        if entries.is_empty() {
            notes.push("node has no backend entries".into());
        }
        let unprobed: BTreeSet<String> = entries
            .iter()
            .filter(|e| !e.probed)
            .map(|e| format!("{}/{}", e.lb, e.pool))
            .collect();
        for p in unprobed {
            notes.push(format!(
                "pool {p}: no load-balancing rule with a health probe uses it, so admin state has no effect on its traffic"
            ));
        }
        for idx in self
            .lbs
            .iter()
            .filter(|l| lb.is_none_or(|want| l.name.eq_ignore_ascii_case(want)))
        {
            idx.skipped_notes(&mut notes);
        }
        Resolved { entries, notes }
    }
}

/// Builds the NIC map from raw NIC objects (LIST of `Microsoft.Network/networkInterfaces`).
pub fn nic_map(nics: &[Value]) -> NicMap {
    let mut map = NicMap::new();
    for raw in nics {
        add_nic(&mut map, raw);
    }
    map
}

/// Adds one raw NIC object of the NIC LIST to the map, read through [`nic::read`]: a NIC
/// attached to a VM is mapped, a detached one skipped, an unreadable one kept in
/// [`NicMap::unreadable`].
pub fn add_nic(map: &mut NicMap, raw: &Value) {
    match nic::read(raw) {
        Ok(nic::Nic { id, vm: Some(vm) }) => map.insert(&id, vm),
        Ok(nic::Nic { vm: None, .. }) => {}
        Err(unreadable) => map.unreadable.push(unreadable),
    }
}

#[cfg(test)]
#[path = "index_tests.rs"]
mod tests;
