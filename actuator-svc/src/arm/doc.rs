//! Load balancer documents as ARM sends them, read and edited without holding them. Pure.
//!
//! A real AKS load balancer with 5,000 nodes is a ~10 MB JSON document (two entries per node
//! and pool, each with its NIC reference). Parsing it into `serde_json::Value` costs several
//! times that, and keeping one per LB was most of the actuator's memory. So:
//! - [`summarize`] reads only what resolution and writing need (names, owners, admin states,
//!   provisioning states, which rules use which pool) into small typed structs; every other
//!   field is skipped by serde without being stored;
//! - PUT bodies are spliced from the raw bytes (`arm::splice`), so a whole-LB PUT sends back
//!   every rule, probe and frontend byte for byte.

use serde::Deserialize;

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
    fn garbage_is_an_error_not_a_panic() {
        for bad in [&b"not json"[..], b"[]", b"{\"properties\": 3}", b""] {
            let _ = summarize(bad);
        }
        assert!(summarize(b"not json").is_err());
    }
}
