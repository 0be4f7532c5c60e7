//! Load balancer documents as ARM sends them, read and edited without holding them. Pure.
//!
//! A real AKS load balancer with 5,000 nodes is a ~16-18 MB JSON document (two entries per
//! node and pool, each with its NIC reference). Parsing it into `serde_json::Value` costs
//! several times that, and even a typed summary with every entry's name and ID as owned
//! `String`s is ~10 MB more while the index interns them. So:
//! - [`read_lb`] and [`read_pool_page`] stream the bytes through the scanner (`lb::scan`) and
//!   hand each backend entry, as borrowed text, to an [`EntrySink`] (the pool index, which
//!   keeps a compact form); only pool-level facts are returned as owned values;
//! - PUT bodies are spliced from the raw bytes (`lb::splice`), so a whole-LB PUT sends back
//!   every rule, probe and frontend byte for byte.

use super::scan::{self, Frame, Sink};
use std::borrow::Cow;
use std::collections::HashSet;

/// An admin state as read from or written to ARM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Admin {
    /// `None`, or the field absent.
    #[default]
    None,
    Down,
    Up,
    /// A value this version does not know (the enum is modelAsString).
    Other,
}

impl Admin {
    /// The ARM string.
    pub fn as_arm(self) -> &'static str {
        match self {
            Admin::None | Admin::Other => "None",
            Admin::Down => "Down",
            Admin::Up => "Up",
        }
    }

    /// Parses ARM's value (absent reads as `None`, case-insensitively).
    pub fn from_arm(s: Option<&str>) -> Self {
        match s {
            None => Admin::None,
            Some(s) if s.eq_ignore_ascii_case("none") => Admin::None,
            Some(s) if s.eq_ignore_ascii_case("down") => Admin::Down,
            Some(s) if s.eq_ignore_ascii_case("up") => Admin::Up,
            Some(_) => Admin::Other,
        }
    }
}

/// How the load-balancing rules use a pool (admin state acts only through probed rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolUse {
    /// At least one load-balancing rule with a health probe sends traffic to it.
    Probed,
    /// Load-balancing rules use it, none of them with a probe: admin state has no effect.
    Unprobed,
    /// Only outbound rules use it (AKS's `aksOutboundBackendPool`): never written.
    OutboundOnly,
    /// Only inbound NAT rules use it: admin state does not act on NAT rules, so never written.
    NatOnly,
    /// Nothing references it (yet); admin state is kept for when a rule does.
    Unused,
}

/// What a load balancer's SKU (`sku.name`, compared case-insensitively) means for cutover.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkuClass {
    /// Standard (or no SKU given: cloud-provider-azure's default): admin state applies.
    Standard,
    /// Basic: no admin state.
    Basic,
    /// cloud-provider-azure's ServiceGateway mode (SKU `Service`): one LB per Service with pod
    /// IPs as backends; node admin state does not apply.
    Service,
    /// Gateway or anything newer: not a node load balancer cutover knows.
    Other,
}

impl SkuClass {
    pub fn of(sku: Option<&str>) -> Self {
        match sku {
            None | Some("") => SkuClass::Standard,
            Some(s) if s.eq_ignore_ascii_case("standard") => SkuClass::Standard,
            Some(s) if s.eq_ignore_ascii_case("basic") => SkuClass::Basic,
            Some(s) if s.eq_ignore_ascii_case("service") => SkuClass::Service,
            Some(_) => SkuClass::Other,
        }
    }
}

/// A resource's `provisioningState`, as far as the writer cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Provisioning {
    /// `Succeeded` or absent.
    #[default]
    Succeeded,
    /// `Updating` (or `Deleting`): an operation runs on the LB.
    Updating,
    /// `Failed`: the last operation failed; the document states a goal, not a fact.
    Failed,
}

impl Provisioning {
    pub fn parse(s: Option<&str>) -> Self {
        match s {
            None => Provisioning::Succeeded,
            Some(s) if s.eq_ignore_ascii_case("succeeded") => Provisioning::Succeeded,
            Some(s) if s.eq_ignore_ascii_case("failed") => Provisioning::Failed,
            Some(_) => Provisioning::Updating,
        }
    }
}

/// A document that is not the JSON shape ARM documents.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct DocError(String);

impl DocError {
    pub fn new(message: String) -> Self {
        Self(message)
    }
}

/// One backend entry as the scanner passes it: borrowed text, valid for the call only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryRef<'a> {
    pub name: &'a str,
    /// The NIC ipConfiguration ID (NIC-based pools), as read.
    pub ip_configuration_id: Option<&'a str>,
    pub ip_address: Option<&'a str>,
    pub admin: Admin,
}

/// Receives a document's backend entries in document order. `pool` numbers every pool of
/// the document from 0, the same numbering as [`DocHead::pools`].
pub trait EntrySink {
    fn entry(&mut self, pool: usize, entry: EntryRef<'_>);
}

/// A pool's own facts (its entries went to the [`EntrySink`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolHead {
    pub name: String,
    /// `provisioningState` is `Succeeded` (or absent): what entries say is a fact.
    pub settled: bool,
    pub usage: PoolUse,
}

/// What a document says besides its entries.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DocHead {
    pub etag: Option<String>,
    /// The LB's own `provisioningState` (`Succeeded` for a pool page).
    pub provisioning: Provisioning,
    /// The LB's `sku.name` (`None` for a pool page or when absent).
    pub sku: Option<String>,
    pub pools: Vec<PoolHead>,
    /// A pool page's next page.
    pub next_link: Option<String>,
}

/// Reads a load balancer document (GET of the LB, or a PUT answer).
pub fn read_lb(body: &[u8], sink: &mut impl EntrySink) -> Result<DocHead, DocError> {
    read(body, Shape::Lb, sink, &mut ())
}

/// [`read_lb`], feeding `also` from the same scan (the splicer's compactor: one pass over a
/// 16 MB document instead of two).
pub fn read_lb_also(
    body: &[u8],
    sink: &mut impl EntrySink,
    also: &mut impl Sink,
) -> Result<DocHead, DocError> {
    read(body, Shape::Lb, sink, also)
}

/// Reads one page of a pool LIST (no rules at hand: pools used by rules count as probed).
pub fn read_pool_page(body: &[u8], sink: &mut impl EntrySink) -> Result<DocHead, DocError> {
    read(body, Shape::PoolPage, sink, &mut ())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Lb,
    PoolPage,
}

const LB_POOLS: &[Option<&str>] = &[Some("properties"), Some("backendAddressPools"), None];
const PAGE_POOLS: &[Option<&str>] = &[Some("value"), None];
const LB_RULES: &[Option<&str>] = &[Some("properties"), Some("loadBalancingRules"), None];
const ENTRY: &[Option<&str>] = &[
    Some("properties"),
    Some("loadBalancerBackendAddresses"),
    None,
];

/// A string the reader keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Etag,
    LbProvisioning,
    Sku,
    NextLink,
    PoolName,
    PoolId,
    PoolProvisioning,
    EntryName,
    EntryIp,
    EntryIpc,
    EntryAdmin,
    RulePool,
    RuleProbe,
}

/// One pool while it is read.
#[derive(Debug, Default)]
struct PoolAcc {
    name: Option<String>,
    /// Lower-cased, without a trailing slash.
    id: Option<String>,
    provisioning: Option<String>,
    lb_rules: bool,
    outbound: bool,
    nat: bool,
}

/// One entry while it is read: buffers reused from entry to entry.
#[derive(Debug, Default)]
struct EntryAcc {
    name: Option<String>,
    ipc: Option<String>,
    ip: Option<String>,
    admin: Admin,
}

fn put(slot: &mut Option<String>, text: &str) {
    let s = slot.get_or_insert_with(String::new);
    s.clear();
    s.push_str(text);
}

fn norm_id(id: &str) -> String {
    id.trim_end_matches('/').to_ascii_lowercase()
}

struct Reader<'s, S> {
    shape: Shape,
    sink: &'s mut S,
    root_object: bool,
    head: DocHead,
    pools: Vec<PoolAcc>,
    entry: EntryAcc,
    rule_pools: Vec<String>,
    rule_probe: bool,
    /// IDs (normalized) of pools a load-balancing rule with a probe names.
    probed: HashSet<String>,
}

impl<S: EntrySink> Reader<'_, S> {
    fn pools_at(&self) -> &'static [Option<&'static str>] {
        match self.shape {
            Shape::Lb => LB_POOLS,
            Shape::PoolPage => PAGE_POOLS,
        }
    }

    /// The path below a pool object, when `path` is inside one.
    fn in_pool<'p>(&self, path: &'p [Frame]) -> Option<&'p [Frame]> {
        let at = self.pools_at();
        if path.len() > at.len() && scan::path_is(&path[..at.len()], at) {
            Some(&path[at.len()..])
        } else {
            None
        }
    }

    fn in_rule<'p>(&self, path: &'p [Frame]) -> Option<&'p [Frame]> {
        let n = LB_RULES.len();
        if self.shape == Shape::Lb && path.len() > n && scan::path_is(&path[..n], LB_RULES) {
            Some(&path[n..])
        } else {
            None
        }
    }

    fn field(&self, path: &[Frame]) -> Option<Field> {
        use scan::path_is as is;
        if let Some(rel) = self.in_pool(path) {
            if is(rel, &[Some("name")]) {
                return Some(Field::PoolName);
            }
            if is(rel, &[Some("id")]) {
                return Some(Field::PoolId);
            }
            if is(rel, &[Some("properties"), Some("provisioningState")]) {
                return Some(Field::PoolProvisioning);
            }
            if rel.len() > ENTRY.len() && is(&rel[..ENTRY.len()], ENTRY) {
                let e = &rel[ENTRY.len()..];
                return if is(e, &[Some("name")]) {
                    Some(Field::EntryName)
                } else if is(e, &[Some("properties"), Some("ipAddress")]) {
                    Some(Field::EntryIp)
                } else if is(e, &[Some("properties"), Some("adminState")]) {
                    Some(Field::EntryAdmin)
                } else if is(
                    e,
                    &[
                        Some("properties"),
                        Some("networkInterfaceIPConfiguration"),
                        Some("id"),
                    ],
                ) {
                    Some(Field::EntryIpc)
                } else {
                    None
                };
            }
            return None;
        }
        if let Some(rel) = self.in_rule(path) {
            return if is(
                rel,
                &[Some("properties"), Some("backendAddressPool"), Some("id")],
            ) || is(
                rel,
                &[
                    Some("properties"),
                    Some("backendAddressPools"),
                    None,
                    Some("id"),
                ],
            ) {
                Some(Field::RulePool)
            } else if is(rel, &[Some("properties"), Some("probe"), Some("id")]) {
                Some(Field::RuleProbe)
            } else {
                None
            };
        }
        match self.shape {
            Shape::Lb if is(path, &[Some("etag")]) => Some(Field::Etag),
            Shape::Lb if is(path, &[Some("sku"), Some("name")]) => Some(Field::Sku),
            Shape::Lb if is(path, &[Some("properties"), Some("provisioningState")]) => {
                Some(Field::LbProvisioning)
            }
            Shape::PoolPage if is(path, &[Some("nextLink")]) => Some(Field::NextLink),
            _ => None,
        }
    }

    fn finish(self) -> DocHead {
        let mut head = self.head;
        let with_rules = self.shape == Shape::Lb;
        head.pools = self
            .pools
            .into_iter()
            .map(|p| {
                // With the LB's rules at hand, a pool is probed when one of the rules naming
                // it has a probe; a pool read on its own only says which rules use it, so
                // assume they are probed.
                let probed = match (with_rules, &p.id) {
                    (true, Some(id)) => self.probed.contains(id),
                    _ => p.lb_rules,
                };
                let usage = match (p.lb_rules, probed, p.nat, p.outbound) {
                    (true, true, _, _) => PoolUse::Probed,
                    (true, false, _, _) => PoolUse::Unprobed,
                    (false, _, true, _) => PoolUse::NatOnly,
                    (false, _, false, true) => PoolUse::OutboundOnly,
                    (false, _, false, false) => PoolUse::Unused,
                };
                PoolHead {
                    name: p.name.unwrap_or_default(),
                    settled: Provisioning::parse(p.provisioning.as_deref())
                        == Provisioning::Succeeded,
                    usage,
                }
            })
            .collect();
        head
    }
}

impl<S: EntrySink> Sink for Reader<'_, S> {
    fn open(&mut self, path: &[Frame], _at: usize) {
        let at = self.pools_at();
        if path.len() == at.len() && scan::path_is(path, at) {
            self.pools.push(PoolAcc::default());
        } else if let Some(rel) = self.in_pool(path) {
            if scan::path_is(rel, ENTRY) {
                self.entry.name = None;
                self.entry.ipc = None;
                self.entry.ip = None;
                self.entry.admin = Admin::None;
            } else if scan::path_is(rel, &[Some("properties"), Some("outboundRule")])
                && let Some(p) = self.pools.last_mut()
            {
                p.outbound = true;
            }
        } else if self.shape == Shape::Lb && scan::path_is(path, LB_RULES) {
            self.rule_pools.clear();
            self.rule_probe = false;
        }
    }

    fn close(&mut self, path: &[Frame], frame: &Frame, _at: usize) {
        if path.is_empty() {
            self.root_object = frame.object;
            return;
        }
        if let Some(rel) = self.in_pool(path) {
            if scan::path_is(rel, ENTRY) && frame.object {
                let e = &self.entry;
                if let Some(name) = e.name.as_deref() {
                    self.sink.entry(
                        self.pools.len().saturating_sub(1),
                        EntryRef {
                            name,
                            ip_configuration_id: e.ipc.as_deref(),
                            ip_address: e.ip.as_deref(),
                            admin: e.admin,
                        },
                    );
                }
            } else if !frame.object && frame.members > 0 && rel.len() == 2 {
                let Some(p) = self.pools.last_mut() else {
                    return;
                };
                if scan::path_is(rel, &[Some("properties"), Some("loadBalancingRules")]) {
                    p.lb_rules = true;
                } else if scan::path_is(rel, &[Some("properties"), Some("outboundRules")]) {
                    p.outbound = true;
                } else if scan::path_is(rel, &[Some("properties"), Some("inboundNatRules")]) {
                    p.nat = true;
                }
            }
        } else if self.shape == Shape::Lb && scan::path_is(path, LB_RULES) && self.rule_probe {
            self.probed.extend(self.rule_pools.drain(..));
        }
    }

    fn wants_text(&self, path: &[Frame]) -> bool {
        self.field(path).is_some()
    }

    fn scalar(&mut self, path: &[Frame], _start: usize, _end: usize, text: Option<&[u8]>) {
        let (Some(field), Some(raw)) = (self.field(path), text) else {
            return;
        };
        let text: Cow<'_, str> = if raw.contains(&b'\\') {
            match scan::unescape(raw) {
                Some(s) => Cow::Owned(s),
                None => return,
            }
        } else {
            match std::str::from_utf8(raw) {
                Ok(s) => Cow::Borrowed(s),
                Err(_) => return,
            }
        };
        let pool = self.pools.last_mut();
        match field {
            Field::Etag => self.head.etag = Some(text.into_owned()),
            Field::LbProvisioning => {
                self.head.provisioning = Provisioning::parse(Some(text.as_ref()))
            }
            Field::Sku => self.head.sku = Some(text.into_owned()),
            Field::NextLink => {
                self.head.next_link = Some(text.into_owned()).filter(|s| !s.is_empty())
            }
            Field::PoolName => {
                if let Some(p) = pool {
                    p.name = Some(text.into_owned());
                }
            }
            Field::PoolId => {
                if let Some(p) = pool {
                    p.id = Some(norm_id(&text));
                }
            }
            Field::PoolProvisioning => {
                if let Some(p) = pool {
                    p.provisioning = Some(text.into_owned());
                }
            }
            Field::EntryName => put(&mut self.entry.name, &text),
            Field::EntryIp => put(&mut self.entry.ip, &text),
            Field::EntryIpc => put(&mut self.entry.ipc, &text),
            Field::EntryAdmin => self.entry.admin = Admin::from_arm(Some(text.as_ref())),
            Field::RulePool => self.rule_pools.push(norm_id(&text)),
            Field::RuleProbe => self.rule_probe = true,
        }
    }
}

fn read(
    body: &[u8],
    shape: Shape,
    sink: &mut impl EntrySink,
    also: &mut impl Sink,
) -> Result<DocHead, DocError> {
    let mut reader = Reader {
        shape,
        sink,
        root_object: false,
        head: DocHead::default(),
        pools: Vec::new(),
        entry: EntryAcc::default(),
        rule_pools: Vec::new(),
        rule_probe: false,
        probed: HashSet::new(),
    };
    scan::scan(body, &mut scan::Both(&mut reader, also)).map_err(|e| DocError(e.to_string()))?;
    if !reader.root_object {
        return Err(DocError("the document is not a JSON object".into()));
    }
    Ok(reader.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// Every entry as owned text, per document pool.
    #[derive(Default)]
    struct Collect(Vec<Seen>);

    /// (document pool, name, ipConfiguration ID, IP, admin state).
    type Seen = (usize, String, Option<String>, Option<String>, Admin);

    impl EntrySink for Collect {
        fn entry(&mut self, pool: usize, e: EntryRef<'_>) {
            self.0.push((
                pool,
                e.name.to_string(),
                e.ip_configuration_id.map(str::to_string),
                e.ip_address.map(str::to_string),
                e.admin,
            ));
        }
    }

    fn summarize(body: &[u8]) -> Result<(DocHead, Collect), DocError> {
        let mut c = Collect::default();
        let head = read_lb(body, &mut c)?;
        Ok((head, c))
    }

    fn mk_lb() -> Value {
        let pool_id = |p: &str| format!("/lb/backendAddressPools/{p}");
        json!({
            "name": "kubernetes", "etag": "W/\"1\"", "location": "eastus",
            "properties": {
                "provisioningState": "Succeeded",
                "frontendIPConfigurations": [{"name": "fe", "properties": {"publicIPAddress": {"id": "/pip"}}}],
                "loadBalancingRules": [
                    {"name": "http", "properties": {"backendAddressPool": {"id": pool_id("kubernetes")}, "probe": {"id": "/probe"}}},
                    {"name": "udp", "properties": {"backendAddressPool": {"id": pool_id("unprobed")}}}
                ],
                "backendAddressPools": [
                    {"name": "kubernetes", "id": pool_id("kubernetes"), "properties": {
                        "provisioningState": "Succeeded",
                        "loadBalancingRules": [{"id": "/rules/http"}],
                        "loadBalancerBackendAddresses": [
                            {"name": "a", "id": "keep-a", "properties": {"ipAddress": "10.0.0.1", "zz": 1}},
                            {"name": "b", "properties": {"ipAddress": "10.0.0.2", "adminState": "Down"}}
                        ]}},
                    {"name": "unprobed", "id": pool_id("unprobed"), "properties": {
                        "loadBalancingRules": [{"id": "/rules/udp"}],
                        "loadBalancerBackendAddresses": [{"name": "a", "properties": {"ipAddress": "10.0.0.1"}}]}},
                    {"name": "aksOutboundBackendPool", "id": pool_id("aksOutboundBackendPool"), "properties": {
                        "outboundRules": [{"id": "/out"}],
                        "loadBalancerBackendAddresses": [{"name": "a"}]}}
                ],
                "probes": [{"name": "probe"}]
            }
        })
    }

    #[test]
    fn summary_reads_entries_states_and_pool_use() {
        let (s, c) = summarize(mk_lb().to_string().as_bytes()).unwrap();
        assert_eq!(s.etag.as_deref(), Some("W/\"1\""));
        assert_eq!(s.provisioning, Provisioning::Succeeded);
        let uses: Vec<PoolUse> = s.pools.iter().map(|p| p.usage).collect();
        assert_eq!(
            uses,
            vec![PoolUse::Probed, PoolUse::Unprobed, PoolUse::OutboundOnly]
        );
        let names: Vec<&str> = s.pools.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["kubernetes", "unprobed", "aksOutboundBackendPool"]);
        assert_eq!(
            c.0[..2],
            [
                (0, "a".into(), None, Some("10.0.0.1".into()), Admin::None),
                (0, "b".into(), None, Some("10.0.0.2".into()), Admin::Down),
            ]
        );
        assert_eq!(c.0.iter().map(|e| e.0).collect::<Vec<_>>(), [0, 0, 1, 2]);
        let mut updating = mk_lb();
        updating["properties"]["provisioningState"] = json!("Updating");
        assert_eq!(
            summarize(updating.to_string().as_bytes())
                .unwrap()
                .0
                .provisioning,
            Provisioning::Updating
        );
    }

    /// ARM's own order: the LB's rules after its pools, a pool's rules after its entries;
    /// escaped strings and unknown members anywhere.
    #[test]
    fn rules_after_pools_and_escapes_read_the_same() {
        let ipc = "/subscriptions/s/resourceGroups/MC_rg/providers/Microsoft.Compute/virtualMachineScaleSets/aks-np/virtualMachines/3/networkInterfaces/n/ipConfigurations/ipconfig1";
        let doc = json!({
            "etag": "W/\"9\"",
            "properties": {
                "backendAddressPools": [
                    {"name": "kube\"rnetes", "id": "/LB/backendAddressPools/kubernetes/", "properties": {
                        "loadBalancerBackendAddresses": [
                            {"properties": {"adminState": "down", "networkInterfaceIPConfiguration": {"id": ipc}}, "name": "n-3"},
                            {"name": null},
                            {"name": "x", "properties": {"networkInterfaceIPConfiguration": null, "extra": [{"name": "no"}]}}
                        ],
                        "provisioningState": "Updating",
                        "loadBalancingRules": [{"id": "/r"}]}},
                    {"name": "out", "properties": {"loadBalancerBackendAddresses": [], "outboundRule": {"id": "/o"}}},
                    {"name": "lbonly", "id": "/lb/backendAddressPools/lbonly", "properties": {"loadBalancingRules": [{"id": "/r2"}]}}
                ],
                "loadBalancingRules": [
                    {"properties": {"backendAddressPools": [{"id": "/lb/backendaddresspools/KUBERNETES"}], "probe": {"id": "/p"}}},
                    {"properties": {"backendAddressPool": {"id": "/lb/backendAddressPools/lbonly"}, "probe": null}}
                ],
                "provisioningState": "Failed"
            }
        });
        let (s, c) = summarize(doc.to_string().as_bytes()).unwrap();
        assert_eq!(s.etag.as_deref(), Some("W/\"9\""));
        assert_eq!(s.provisioning, Provisioning::Failed);
        assert_eq!(s.pools[0].name, "kube\"rnetes");
        assert!(!s.pools[0].settled);
        let uses: Vec<PoolUse> = s.pools.iter().map(|p| p.usage).collect();
        assert_eq!(
            uses,
            [PoolUse::Probed, PoolUse::OutboundOnly, PoolUse::Unprobed]
        );
        assert_eq!(
            c.0,
            [
                (0, "n-3".into(), Some(ipc.into()), None, Admin::Down),
                (0, "x".into(), None, None, Admin::None),
            ]
        );
    }

    #[test]
    fn pool_pages_give_their_next_link() {
        let page = json!({"value": [{"name": "p", "properties": {
            "loadBalancingRules": [{"id": "/r"}],
            "loadBalancerBackendAddresses": [{"name": "a", "properties": {"ipAddress": "10.0.0.9"}}]}}],
            "nextLink": "https://next"});
        let mut c = Collect::default();
        let head = read_pool_page(page.to_string().as_bytes(), &mut c).unwrap();
        assert_eq!(head.next_link.as_deref(), Some("https://next"));
        assert_eq!(head.pools[0].usage, PoolUse::Probed);
        assert_eq!(
            c.0,
            [(0, "a".into(), None, Some("10.0.0.9".into()), Admin::None)]
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bad in [&b"not json"[..], b"[]", b"{\"properties\": 3}", b"", b"{"] {
            let _ = summarize(bad);
        }
        for bad in [&b"not json"[..], b"[]", b"", b"{"] {
            assert!(summarize(bad).is_err());
        }
    }
}
