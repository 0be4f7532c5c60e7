//! Load balancer documents as ARM sends them, read and edited without holding them. Pure.
//!
//! A real AKS load balancer with 5,000 nodes is a ~10 MB JSON document (two entries per node
//! and pool, each with its NIC reference). Parsing it into `serde_json::Value` costs several
//! times that, and keeping one per LB was most of the actuator's memory. So:
//! - [`summarize`] reads only what resolution and writing need (names, owners, admin states,
//!   provisioning states, which rules use which pool) into small typed structs; every other
//!   field is skipped by serde without being stored;
//! - [`rewrite_for_put`] edits the admin states of named entries on the raw text, keeping
//!   every other field and the order of keys exactly as read (`RawValue` slices), so a
//!   whole-LB PUT sends back every rule, probe and frontend untouched.

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use std::collections::BTreeMap;

/// An admin state as read from or written to ARM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Admin {
    /// `None`, or the field absent.
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

/// `{"id": ...}` references.
#[derive(Debug, Default, Deserialize)]
struct SubRes {
    #[serde(default)]
    id: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct EntryProps {
    #[serde(default)]
    ip_address: Option<String>,
    #[serde(default, rename = "networkInterfaceIPConfiguration")]
    network_interface_ip_configuration: Option<SubRes>,
    #[serde(default)]
    admin_state: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct EntryDoc {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    properties: Option<EntryProps>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PoolProps {
    #[serde(default)]
    provisioning_state: Option<String>,
    #[serde(default)]
    load_balancer_backend_addresses: Vec<EntryDoc>,
    #[serde(default)]
    load_balancing_rules: Vec<SubRes>,
    #[serde(default)]
    outbound_rules: Vec<SubRes>,
    #[serde(default)]
    outbound_rule: Option<SubRes>,
}

#[derive(Debug, Default, Deserialize)]
struct PoolDoc {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    properties: Option<PoolProps>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RuleProps {
    #[serde(default)]
    backend_address_pool: Option<SubRes>,
    #[serde(default)]
    backend_address_pools: Vec<SubRes>,
    #[serde(default)]
    probe: Option<SubRes>,
}

#[derive(Debug, Default, Deserialize)]
struct RuleDoc {
    #[serde(default)]
    properties: Option<RuleProps>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LbProps {
    #[serde(default)]
    provisioning_state: Option<String>,
    #[serde(default)]
    backend_address_pools: Vec<PoolDoc>,
    #[serde(default)]
    load_balancing_rules: Option<Vec<RuleDoc>>,
}

#[derive(Debug, Default, Deserialize)]
struct LbDoc {
    #[serde(default)]
    etag: Option<String>,
    #[serde(default)]
    properties: Option<LbProps>,
}

#[derive(Debug, Default, Deserialize)]
struct PoolPage {
    #[serde(default)]
    value: Vec<PoolDoc>,
    #[serde(default, rename = "nextLink")]
    next_link: Option<String>,
}

/// One backend entry as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntrySummary {
    pub name: String,
    /// The NIC ipConfiguration ID (NIC-based pools), as read.
    pub ip_configuration_id: Option<String>,
    pub ip_address: Option<String>,
    pub admin: Admin,
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
    /// Nothing references it (yet); admin state is kept for when a rule does.
    Unused,
}

/// One pool as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolSummary {
    pub name: String,
    /// `provisioningState` is `Succeeded` (or absent): what entries say is a fact.
    pub settled: bool,
    pub usage: PoolUse,
    pub entries: Vec<EntrySummary>,
}

/// A load balancer as read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LbSummary {
    pub etag: Option<String>,
    /// The LB's own `provisioningState`.
    pub provisioning: Provisioning,
    pub pools: Vec<PoolSummary>,
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
    fn parse(s: Option<&str>) -> Self {
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

fn same_id(a: &str, b: &str) -> bool {
    a.trim_end_matches('/')
        .eq_ignore_ascii_case(b.trim_end_matches('/'))
}

fn pool_summary(p: PoolDoc, rules: Option<&[RuleDoc]>) -> PoolSummary {
    let props = p.properties.unwrap_or_default();
    let lb_rules = !props.load_balancing_rules.is_empty();
    let outbound = !props.outbound_rules.is_empty() || props.outbound_rule.is_some();
    // With the LB's rules at hand, a pool is probed when one of the rules naming it has a
    // probe; a pool read on its own only says which rules use it, so assume they are probed.
    let probed = match (rules, p.id.as_deref()) {
        (Some(rules), Some(pool_id)) => rules.iter().any(|r| {
            let Some(rp) = &r.properties else {
                return false;
            };
            let names_pool = rp
                .backend_address_pool
                .iter()
                .chain(&rp.backend_address_pools)
                .any(|s| s.id.as_deref().is_some_and(|id| same_id(id, pool_id)));
            names_pool && rp.probe.as_ref().is_some_and(|s| s.id.is_some())
        }),
        _ => lb_rules,
    };
    let usage = match (lb_rules, probed, outbound) {
        (true, true, _) => PoolUse::Probed,
        (true, false, _) => PoolUse::Unprobed,
        (false, _, true) => PoolUse::OutboundOnly,
        (false, _, false) => PoolUse::Unused,
    };
    let settled =
        Provisioning::parse(props.provisioning_state.as_deref()) == Provisioning::Succeeded;
    let entries = props
        .load_balancer_backend_addresses
        .into_iter()
        .filter_map(|e| {
            let name = e.name?;
            let props = e.properties.unwrap_or_default();
            Some(EntrySummary {
                name,
                ip_configuration_id: props.network_interface_ip_configuration.and_then(|s| s.id),
                ip_address: props.ip_address,
                admin: Admin::from_arm(props.admin_state.as_deref()),
            })
        })
        .collect();
    PoolSummary {
        name: p.name.unwrap_or_default(),
        settled,
        usage,
        entries,
    }
}

/// Reads a load balancer document (GET of the LB, or a PUT answer).
pub fn summarize(body: &[u8]) -> Result<LbSummary, DocError> {
    let doc: LbDoc = serde_json::from_slice(body).map_err(|e| DocError(e.to_string()))?;
    let props = doc.properties.unwrap_or_default();
    let rules = props.load_balancing_rules;
    Ok(LbSummary {
        etag: doc.etag,
        provisioning: Provisioning::parse(props.provisioning_state.as_deref()),
        pools: props
            .backend_address_pools
            .into_iter()
            .map(|p| pool_summary(p, Some(rules.as_deref().unwrap_or(&[]))))
            .collect(),
    })
}

/// Reads one page of a pool LIST: the pools and the next page's URL.
pub fn summarize_pool_page(body: &[u8]) -> Result<(Vec<PoolSummary>, Option<String>), DocError> {
    let page: PoolPage = serde_json::from_slice(body).map_err(|e| DocError(e.to_string()))?;
    let pools = page
        .value
        .into_iter()
        .map(|p| pool_summary(p, None))
        .collect();
    Ok((pools, page.next_link.filter(|s| !s.is_empty())))
}

/// A JSON object kept as `(key, raw value)` pairs in document order.
struct RawObject(Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for RawObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawObject;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<RawObject, A::Error> {
                let mut out = Vec::new();
                while let Some(kv) = m.next_entry::<String, Box<RawValue>>()? {
                    out.push(kv);
                }
                Ok(RawObject(out))
            }
        }
        d.deserialize_map(V)
    }
}

impl Serialize for RawObject {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl RawObject {
    fn parse(raw: &RawValue) -> Result<Self, DocError> {
        serde_json::from_str(raw.get()).map_err(|e| DocError(e.to_string()))
    }

    fn get(&self, key: &str) -> Option<&RawValue> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| &**v)
    }

    fn string(&self, key: &str) -> Option<String> {
        self.get(key)
            .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
    }

    fn set(&mut self, key: &str, value: Box<RawValue>) {
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value,
            None => self.0.push((key.to_string(), value)),
        }
    }

    fn remove(&mut self, key: &str) {
        self.0.retain(|(k, _)| k != key);
    }

    fn to_raw(&self) -> Result<Box<RawValue>, DocError> {
        let text = serde_json::to_string(self).map_err(|e| DocError(e.to_string()))?;
        RawValue::from_string(text).map_err(|e| DocError(e.to_string()))
    }

    /// Edits the array under `key` element by element; `f` returns the replacement or `None`
    /// to keep the element as it was.
    fn edit_array(
        &mut self,
        key: &str,
        mut f: impl FnMut(&RawValue) -> Result<Option<Box<RawValue>>, DocError>,
    ) -> Result<(), DocError> {
        let Some(raw) = self.get(key) else {
            return Ok(());
        };
        let mut items: Vec<Box<RawValue>> =
            serde_json::from_str(raw.get()).map_err(|e| DocError(e.to_string()))?;
        let mut changed = false;
        for item in &mut items {
            if let Some(new) = f(item)? {
                *item = new;
                changed = true;
            }
        }
        if changed {
            let text = serde_json::to_string(&items).map_err(|e| DocError(e.to_string()))?;
            self.set(
                key,
                RawValue::from_string(text).map_err(|e| DocError(e.to_string()))?,
            );
        }
        Ok(())
    }
}

fn admin_raw(a: Admin) -> Box<RawValue> {
    // A fixed ASCII literal: always valid JSON.
    RawValue::from_string(format!("\"{}\"", a.as_arm()))
        .unwrap_or_else(|_| RawValue::NULL.to_owned())
}

/// Sets the admin states of `changes` (entry name -> state) on one raw pool object and drops
/// its read-only `provisioningState`. Returns the pool and how many entries it changed.
fn edit_pool(
    pool: &RawValue,
    changes: &BTreeMap<String, Admin>,
) -> Result<(Box<RawValue>, usize), DocError> {
    let mut pool = RawObject::parse(pool)?;
    let mut count = 0;
    if let Some(props) = pool.get("properties") {
        let mut props = RawObject::parse(props)?;
        props.remove("provisioningState");
        props.edit_array("loadBalancerBackendAddresses", |entry| {
            let mut entry = RawObject::parse(entry)?;
            let Some(admin) = entry.string("name").and_then(|n| changes.get(&n).copied()) else {
                return Ok(None);
            };
            let mut eprops = match entry.get("properties") {
                Some(p) => RawObject::parse(p)?,
                None => RawObject(Vec::new()),
            };
            eprops.set("adminState", admin_raw(admin));
            entry.set("properties", eprops.to_raw()?);
            count += 1;
            Ok(Some(entry.to_raw()?))
        })?;
        pool.set("properties", props.to_raw()?);
    }
    Ok((pool.to_raw()?, count))
}

/// The body of a whole-LB PUT: the document as read, with the admin states of `changes`
/// (pool name -> entry name -> state) set and the read-only provisioning states dropped.
/// Returns the body and how many entries changed.
pub fn rewrite_for_put(
    lb: &[u8],
    changes: &BTreeMap<String, BTreeMap<String, Admin>>,
) -> Result<(Vec<u8>, usize), DocError> {
    let mut doc: RawObject = serde_json::from_slice(lb).map_err(|e| DocError(e.to_string()))?;
    let mut count = 0;
    if let Some(props) = doc.get("properties") {
        let mut props = RawObject::parse(props)?;
        props.remove("provisioningState");
        props.edit_array("backendAddressPools", |pool| {
            let p = RawObject::parse(pool)?;
            let name = p.string("name").unwrap_or_default();
            let none = BTreeMap::new();
            let (edited, n) = edit_pool(pool, changes.get(&name).unwrap_or(&none))?;
            count += n;
            Ok(Some(edited))
        })?;
        doc.set("properties", props.to_raw()?);
    }
    let body = serde_json::to_vec(&doc).map_err(|e| DocError(e.to_string()))?;
    Ok((body, count))
}

/// The body of a per-pool PUT: pool `pool` cut out of the LB document, edited like
/// [`rewrite_for_put`]. `None` when the LB has no such pool.
pub fn pool_for_put(
    lb: &[u8],
    pool: &str,
    changes: &BTreeMap<String, Admin>,
) -> Result<Option<(Vec<u8>, usize)>, DocError> {
    let doc: RawObject = serde_json::from_slice(lb).map_err(|e| DocError(e.to_string()))?;
    let Some(props) = doc.get("properties") else {
        return Ok(None);
    };
    let props = RawObject::parse(props)?;
    let Some(pools) = props.get("backendAddressPools") else {
        return Ok(None);
    };
    let pools: Vec<Box<RawValue>> =
        serde_json::from_str(pools.get()).map_err(|e| DocError(e.to_string()))?;
    for raw in pools {
        if RawObject::parse(&raw)?.string("name").as_deref() == Some(pool) {
            let (edited, n) = edit_pool(&raw, changes)?;
            return Ok(Some((edited.get().as_bytes().to_vec(), n)));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

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
        let s = summarize(mk_lb().to_string().as_bytes()).unwrap();
        assert_eq!(s.etag.as_deref(), Some("W/\"1\""));
        assert_eq!(s.provisioning, Provisioning::Succeeded);
        let uses: Vec<PoolUse> = s.pools.iter().map(|p| p.usage).collect();
        assert_eq!(
            uses,
            vec![PoolUse::Probed, PoolUse::Unprobed, PoolUse::OutboundOnly]
        );
        assert_eq!(s.pools[0].entries[1].admin, Admin::Down);
        assert_eq!(
            s.pools[0].entries[0].ip_address.as_deref(),
            Some("10.0.0.1")
        );
        let mut updating = mk_lb();
        updating["properties"]["provisioningState"] = json!("Updating");
        assert_eq!(
            summarize(updating.to_string().as_bytes())
                .unwrap()
                .provisioning,
            Provisioning::Updating
        );
    }

    #[test]
    fn rewrite_touches_only_named_entries_and_keeps_everything_else_in_order() {
        let lb = mk_lb();
        let text = serde_json::to_string(&lb).unwrap();
        let mut changes = BTreeMap::new();
        changes.insert(
            "kubernetes".to_string(),
            BTreeMap::from([
                ("a".to_string(), Admin::Down),
                ("b".to_string(), Admin::None),
            ]),
        );
        let (body, n) = rewrite_for_put(text.as_bytes(), &changes).unwrap();
        assert_eq!(n, 2);
        let out: Value = serde_json::from_slice(&body).unwrap();
        let mut want = lb.clone();
        want["properties"]
            .as_object_mut()
            .unwrap()
            .remove("provisioningState");
        for p in want["properties"]["backendAddressPools"]
            .as_array_mut()
            .unwrap()
        {
            p["properties"]
                .as_object_mut()
                .unwrap()
                .remove("provisioningState");
        }
        let e = &mut want["properties"]["backendAddressPools"][0]["properties"]["loadBalancerBackendAddresses"];
        e[0]["properties"]["adminState"] = json!("Down");
        e[1]["properties"]["adminState"] = json!("None");
        assert_eq!(out, want);
        // Key order as read, at every level we rebuilt.
        let keys = |text: &[u8]| -> Vec<String> {
            let top: RawObject = serde_json::from_slice(text).unwrap();
            let props = RawObject::parse(top.get("properties").unwrap()).unwrap();
            top.0
                .iter()
                .chain(props.0.iter())
                .map(|(k, _)| k.clone())
                .collect()
        };
        let mut want_keys = keys(text.as_bytes());
        want_keys.retain(|k| k != "provisioningState");
        assert_eq!(keys(&body), want_keys);
    }

    #[test]
    fn pool_put_body_is_the_edited_pool() {
        let text = mk_lb().to_string();
        let changes = BTreeMap::from([("a".to_string(), Admin::Down)]);
        let (body, n) = pool_for_put(text.as_bytes(), "unprobed", &changes)
            .unwrap()
            .unwrap();
        assert_eq!(n, 1);
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["name"], "unprobed");
        assert_eq!(
            v["properties"]["loadBalancerBackendAddresses"][0]["properties"]["adminState"],
            "Down"
        );
        assert!(
            pool_for_put(text.as_bytes(), "nope", &changes)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bad in [&b"not json"[..], b"[]", b"{\"properties\": 3}", b""] {
            let _ = summarize(bad);
            let _ = rewrite_for_put(bad, &BTreeMap::new());
        }
        assert!(summarize(b"not json").is_err());
    }
}
