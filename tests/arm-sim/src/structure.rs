//! A load balancer's non-pool structure: frontend IP configurations, load-balancing rules,
//! probes, inbound NAT rules and pools, outbound rules (pure).
//!
//! Stored form: each child as its writer sent it, minus what NRP computes (`id`, `etag`, `type`,
//! `provisioningState` and the back-references). Rendering puts those back the way ARM returns
//! them: ids under the LB, the LB's etag and provisioning state, and back-references derived
//! from the rules (`loadBalancingRules`, `outboundRules`, `inboundNatRules`, `inboundNatPools`
//! on frontends; `loadBalancingRules` on probes; `loadBalancingRules`, `outboundRules` +
//! `outboundRule`, `inboundNatRules` on pools). So a GET → modify pools → PUT round trip brings
//! every child back byte for byte (only the etag changes, as on ARM).
//!
//! The [`fingerprint`] hashes the stored form plus the pool names, never pool members: a whole-LB
//! PUT that leaves it unchanged touched only backend entries; one that changes it dropped,
//! reordered or altered a rule, probe, frontend or outbound rule ([`changes`] says which).

use crate::model::LB_TYPE;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// A write that changed a load balancer's structure (the structure log).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StructureChange {
    pub time: jiff::Timestamp,
    pub lb: String,
    /// The operation of the write (`PutLoadBalancerOperation` for a whole-LB PUT).
    pub op_id: String,
    pub operation: String,
    /// Fingerprints before and after.
    pub before: String,
    pub after: String,
    /// What moved, e.g. `loadBalancingRules: removed 'a1-TCP-80'`.
    pub changes: Vec<String>,
}

/// Child collections of a load balancer, in ARM's order.
pub const CHILD_KINDS: &[&str] = &[
    "frontendIPConfigurations",
    "loadBalancingRules",
    "probes",
    "inboundNatRules",
    "inboundNatPools",
    "outboundRules",
];

/// readOnly back-references a child kind carries (computed, never stored).
fn back_refs(kind: &str) -> &'static [&'static str] {
    match kind {
        "frontendIPConfigurations" => &[
            "loadBalancingRules",
            "outboundRules",
            "inboundNatRules",
            "inboundNatPools",
        ],
        "probes" => &["loadBalancingRules"],
        "inboundNatRules" => &["backendIPConfiguration"],
        _ => &[],
    }
}

/// Pool properties that are back-references (derived when the LB has rules).
pub const POOL_BACK_REFS: &[&str] = &[
    "loadBalancingRules",
    "outboundRules",
    "outboundRule",
    "inboundNatRules",
];

/// Strips what NRP computes from every child of `props` (in place).
pub fn normalize(props: &mut Map<String, Value>) {
    for kind in CHILD_KINDS {
        let Some(Value::Array(items)) = props.get_mut(*kind) else {
            continue;
        };
        for item in items.iter_mut() {
            let Some(obj) = item.as_object_mut() else {
                continue;
            };
            for k in ["id", "etag", "type"] {
                obj.remove(k);
            }
            if let Some(Value::Object(p)) = obj.get_mut("properties") {
                p.remove("provisioningState");
                for r in back_refs(kind) {
                    p.remove(*r);
                }
            }
        }
    }
}

/// The last segment after `/{kind}/` of a reference `{"id": ...}`, lower-cased.
fn ref_name(v: &Value, kind: &str) -> Option<String> {
    let id = v.get("id")?.as_str()?.to_ascii_lowercase();
    let marker = format!("/{}/", kind.to_ascii_lowercase());
    let at = id.rfind(&marker)?;
    Some(id[at + marker.len()..].to_owned())
}

fn items<'a>(props: &'a Map<String, Value>, kind: &str) -> &'a [Value] {
    props
        .get(kind)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// `{"id": ...}` of every `kind` child whose property `field` (a reference or an array of
/// references) names `target` under `target_kind`.
fn referrers(
    props: &Map<String, Value>,
    lb_id: &str,
    kind: &str,
    field: &str,
    target_kind: &str,
    target: &str,
) -> Vec<Value> {
    items(props, kind)
        .iter()
        .filter(|item| {
            let Some(v) = item.get("properties").and_then(|p| p.get(field)) else {
                return false;
            };
            let refs: Vec<&Value> = match v {
                Value::Array(a) => a.iter().collect(),
                other => vec![other],
            };
            refs.iter()
                .any(|r| ref_name(r, target_kind).as_deref() == Some(target))
        })
        .map(|item| {
            json!({ "id": format!("{lb_id}/{kind}/{}", item["name"].as_str().unwrap_or_default()) })
        })
        .collect()
}

/// Whether the LB has any rule that could refer to pools (otherwise seeded pool
/// back-references are kept verbatim).
pub fn has_rules(props: &Map<String, Value>) -> bool {
    ["loadBalancingRules", "outboundRules", "inboundNatRules"]
        .iter()
        .any(|k| !items(props, k).is_empty())
}

/// The back-references of pool `pool`, derived from the LB's rules.
pub fn pool_refs(props: &Map<String, Value>, lb_id: &str, pool: &str) -> Map<String, Value> {
    let pool = pool.to_ascii_lowercase();
    let mut out = Map::new();
    let mut lb_rules = referrers(
        props,
        lb_id,
        "loadBalancingRules",
        "backendAddressPool",
        "backendAddressPools",
        &pool,
    );
    for r in referrers(
        props,
        lb_id,
        "loadBalancingRules",
        "backendAddressPools",
        "backendAddressPools",
        &pool,
    ) {
        if !lb_rules.contains(&r) {
            lb_rules.push(r);
        }
    }
    let outbound = referrers(
        props,
        lb_id,
        "outboundRules",
        "backendAddressPool",
        "backendAddressPools",
        &pool,
    );
    let nat = referrers(
        props,
        lb_id,
        "inboundNatRules",
        "backendAddressPool",
        "backendAddressPools",
        &pool,
    );
    if !lb_rules.is_empty() {
        out.insert("loadBalancingRules".into(), Value::Array(lb_rules));
    }
    if let Some(first) = outbound.first() {
        // NRP still fills the singular (deprecated) field next to the list.
        out.insert("outboundRule".into(), first.clone());
        out.insert("outboundRules".into(), Value::Array(outbound));
    }
    if !nat.is_empty() {
        out.insert("inboundNatRules".into(), Value::Array(nat));
    }
    out
}

/// The child collections as ARM renders them.
pub fn render(
    props: &Map<String, Value>,
    lb_id: &str,
    etag: &str,
    state: &str,
) -> Map<String, Value> {
    let mut out = Map::new();
    for kind in CHILD_KINDS {
        let Some(Value::Array(list)) = props.get(*kind) else {
            continue;
        };
        let rendered = list
            .iter()
            .map(|item| {
                let Some(obj) = item.as_object() else {
                    return item.clone();
                };
                let name = obj.get("name").and_then(Value::as_str).unwrap_or_default();
                let mut obj = obj.clone();
                let mut p = match obj.remove("properties") {
                    Some(Value::Object(p)) => p,
                    _ => Map::new(),
                };
                p.insert("provisioningState".into(), json!(state));
                let me = name.to_ascii_lowercase();
                let derived: Vec<(&str, Vec<Value>)> = match *kind {
                    "frontendIPConfigurations" => vec![
                        (
                            "loadBalancingRules",
                            referrers(
                                props,
                                lb_id,
                                "loadBalancingRules",
                                "frontendIPConfiguration",
                                kind,
                                &me,
                            ),
                        ),
                        (
                            "inboundNatRules",
                            referrers(
                                props,
                                lb_id,
                                "inboundNatRules",
                                "frontendIPConfiguration",
                                kind,
                                &me,
                            ),
                        ),
                        (
                            "inboundNatPools",
                            referrers(
                                props,
                                lb_id,
                                "inboundNatPools",
                                "frontendIPConfiguration",
                                kind,
                                &me,
                            ),
                        ),
                        (
                            "outboundRules",
                            referrers(
                                props,
                                lb_id,
                                "outboundRules",
                                "frontendIPConfigurations",
                                kind,
                                &me,
                            ),
                        ),
                    ],
                    "probes" => vec![(
                        "loadBalancingRules",
                        referrers(props, lb_id, "loadBalancingRules", "probe", kind, &me),
                    )],
                    _ => Vec::new(),
                };
                for (k, v) in derived {
                    if !v.is_empty() {
                        p.insert(k.into(), Value::Array(v));
                    }
                }
                obj.insert("id".into(), json!(format!("{lb_id}/{kind}/{name}")));
                obj.insert("etag".into(), json!(etag));
                obj.insert("type".into(), json!(format!("{LB_TYPE}/{kind}")));
                obj.insert("properties".into(), Value::Object(p));
                Value::Object(obj)
            })
            .collect();
        out.insert((*kind).to_owned(), Value::Array(rendered));
    }
    out
}

/// What the fingerprint covers: the stored non-pool properties, the SKU and the pool names.
fn structural(props: &Map<String, Value>, sku: &Value, pools: &[&str]) -> Value {
    json!({ "properties": props, "sku": sku, "backendAddressPools": pools })
}

/// A stable 64-bit FNV-1a hash (hex) of the structure. serde_json sorts object keys, so equal
/// structures always serialise identically.
pub fn fingerprint(props: &Map<String, Value>, sku: &Value, pools: &[&str]) -> String {
    let text = structural(props, sku, pools).to_string();
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{hash:016x}")
}

/// Human-readable differences between two structures, e.g.
/// `loadBalancingRules: removed 'a1-TCP-80'`, `probes: reordered`, `sku: changed`.
pub fn changes(
    before: (&Map<String, Value>, &Value, &[&str]),
    after: (&Map<String, Value>, &Value, &[&str]),
) -> Vec<String> {
    let mut out = Vec::new();
    let mut keys: Vec<&String> = before.0.keys().chain(after.0.keys()).collect();
    keys.sort();
    keys.dedup();
    for key in keys {
        let (b, a) = (before.0.get(key), after.0.get(key));
        if b == a {
            continue;
        }
        let named = |v: Option<&Value>| -> Option<Vec<(String, Value)>> {
            v.unwrap_or(&Value::Array(Vec::new())).as_array().map(|a| {
                a.iter()
                    .map(|i| (i["name"].as_str().unwrap_or_default().to_owned(), i.clone()))
                    .collect()
            })
        };
        match (named(b), named(a)) {
            (Some(b), Some(a)) if CHILD_KINDS.contains(&key.as_str()) => {
                for (n, v) in &b {
                    match a.iter().find(|(m, _)| m == n) {
                        None => out.push(format!("{key}: removed '{n}'")),
                        Some((_, w)) if w != v => out.push(format!("{key}: changed '{n}'")),
                        Some(_) => {}
                    }
                }
                for (n, _) in &a {
                    if !b.iter().any(|(m, _)| m == n) {
                        out.push(format!("{key}: added '{n}'"));
                    }
                }
                let order = |x: &[(String, Value)], other: &[(String, Value)]| -> Vec<String> {
                    x.iter()
                        .filter(|(n, _)| other.iter().any(|(m, _)| m == n))
                        .map(|(n, _)| n.clone())
                        .collect()
                };
                if order(&b, &a) != order(&a, &b) {
                    out.push(format!("{key}: reordered"));
                }
            }
            _ => out.push(format!("{key}: changed")),
        }
    }
    if before.1 != after.1 {
        out.push("sku: changed".into());
    }
    if before.2 != after.2 {
        out.push(format!(
            "backendAddressPools: {:?} became {:?}",
            before.2, after.2
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lb_props() -> Map<String, Value> {
        let lb = "/s/lb";
        let v = json!({
            "frontendIPConfigurations": [{"name": "fe", "properties": {"publicIPAddress": {"id": "/pip"}}}],
            "probes": [{"name": "pr", "properties": {"protocol": "Tcp", "port": 30080}}],
            "loadBalancingRules": [{"name": "r1", "properties": {
                "frontendIPConfiguration": {"id": format!("{lb}/frontendIPConfigurations/fe")},
                "backendAddressPool": {"id": format!("{lb}/backendAddressPools/pool")},
                "probe": {"id": format!("{lb}/probes/pr")}, "protocol": "Tcp", "frontendPort": 80}}],
            "outboundRules": [{"name": "o", "properties": {
                "frontendIPConfigurations": [{"id": format!("{lb}/frontendIPConfigurations/fe")}],
                "backendAddressPool": {"id": format!("{lb}/backendAddressPools/out")}}}],
        });
        v.as_object().unwrap().clone()
    }

    #[test]
    fn render_adds_back_references_and_normalize_removes_them() {
        let props = lb_props();
        let r = render(&props, "/s/lb", "W/\"e\"", "Succeeded");
        let fe = &r["frontendIPConfigurations"][0];
        assert_eq!(fe["id"], "/s/lb/frontendIPConfigurations/fe");
        assert_eq!(
            fe["properties"]["loadBalancingRules"][0]["id"],
            "/s/lb/loadBalancingRules/r1"
        );
        assert_eq!(
            fe["properties"]["outboundRules"][0]["id"],
            "/s/lb/outboundRules/o"
        );
        assert_eq!(
            r["probes"][0]["properties"]["loadBalancingRules"][0]["id"],
            "/s/lb/loadBalancingRules/r1"
        );
        let pool = pool_refs(&props, "/s/lb", "POOL");
        assert_eq!(
            pool["loadBalancingRules"][0]["id"],
            "/s/lb/loadBalancingRules/r1"
        );
        let out = pool_refs(&props, "/s/lb", "out");
        assert_eq!(out["outboundRule"]["id"], "/s/lb/outboundRules/o");
        assert!(!out.contains_key("loadBalancingRules"));
        let mut back = r.clone();
        normalize(&mut back);
        assert_eq!(back, props, "normalize(render(x)) == x");
    }

    #[test]
    fn fingerprint_ignores_nothing_structural_and_changes_name_what_moved() {
        let props = lb_props();
        let sku = json!({"name": "Standard"});
        let fp = fingerprint(&props, &sku, &["pool", "out"]);
        assert_eq!(fp, fingerprint(&props.clone(), &sku, &["pool", "out"]));
        let mut dropped = props.clone();
        dropped.insert("loadBalancingRules".into(), json!([]));
        assert_ne!(fp, fingerprint(&dropped, &sku, &["pool", "out"]));
        assert_eq!(
            changes((&props, &sku, &["pool"]), (&dropped, &sku, &["pool"])),
            ["loadBalancingRules: removed 'r1'"]
        );
        let mut altered = props.clone();
        altered["probes"][0]["properties"]["port"] = json!(1);
        assert_eq!(
            changes((&props, &sku, &[]), (&altered, &sku, &[])),
            ["probes: changed 'pr'"]
        );
        assert_ne!(fp, fingerprint(&props, &sku, &["out", "pool"]));
    }
}
