//! NRP's JSON for load balancers and backend pools, written straight into bytes.
//!
//! A 5,000-node dual-stack LB is a 16 MB document whose every entry carries the LB's etag, so
//! every operation end changes all of it. Building a `serde_json::Value` tree of it first cost
//! ~140 ms of allocation per render, twice per operation, under the store's lock: the
//! simulator then answered 420-840 ms late and took the cores the services under test need.
//! Written directly, a render is a copy of strings.
//!
//! Key order is NRP's where a client may depend on it (the recorded LoadBalancerGet and pool
//! examples in `shared/vectors/arm`, and every raw NRP body in contracts/arm.md section 9):
//! `name`, `id`, `etag`, `type` first, and `provisioningState` first in every `properties`.
//! Free-form members follow in sorted order.

use crate::model::{ADDRESS_TYPE, Address, LB_TYPE, LoadBalancer, POOL_TYPE, Pool, Scope};
use serde_json::{Map, Value};

/// An object being written: tracks the commas.
struct Obj<'a> {
    out: &'a mut Vec<u8>,
    empty: bool,
}

impl<'a> Obj<'a> {
    fn open(out: &'a mut Vec<u8>) -> Self {
        out.push(b'{');
        Self { out, empty: true }
    }

    /// Writes `"k":` and hands out the buffer for the value.
    fn key(&mut self, k: &str) -> &mut Vec<u8> {
        if !self.empty {
            self.out.push(b',');
        }
        self.empty = false;
        string(self.out, &[k]);
        self.out.push(b':');
        self.out
    }

    fn str(&mut self, k: &str, parts: &[&str]) {
        string(self.key(k), parts);
    }

    fn value(&mut self, k: &str, v: &Value) {
        value(self.key(k), v);
    }

    fn close(self) {
        self.out.push(b'}');
    }
}

/// A JSON string of the concatenated `parts`, escaped as serde_json escapes.
fn string(out: &mut Vec<u8>, parts: &[&str]) {
    out.push(b'"');
    for p in parts {
        if p.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
            let quoted = serde_json::to_string(p).unwrap_or_default();
            out.extend_from_slice(&quoted.as_bytes()[1..quoted.len() - 1]);
        } else {
            out.extend_from_slice(p.as_bytes());
        }
    }
    out.push(b'"');
}

fn value(out: &mut Vec<u8>, v: &Value) {
    // Writing into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, v);
}

/// Members of `map` in sorted order, except `skip`.
fn members(obj: &mut Obj<'_>, map: &Map<String, Value>, skip: &[&str]) {
    for (k, v) in map {
        if !skip.contains(&k.as_str()) {
            obj.value(k, v);
        }
    }
}

/// The whole load balancer, as GET and PUT answer it.
pub fn load_balancer(out: &mut Vec<u8>, lb: &LoadBalancer, sub: &str, rg: &str) {
    let scope = Scope {
        sub,
        rg,
        lb: &lb.name,
    };
    let lb_id = scope.lb_id();
    let mut top = Obj::open(out);
    top.str("name", &[&lb.name]);
    top.str("id", &[&lb_id]);
    top.str("etag", &[&lb.etag]);
    top.str("type", &[LB_TYPE]);
    top.str("location", &[&lb.location]);
    if let Some(tags) = &lb.tags {
        top.value("tags", tags);
    }
    top.value("sku", &lb.sku);
    let mut props = Obj::open(top.key("properties"));
    props.str("provisioningState", &[&lb.provisioning_state]);
    props.str("resourceGuid", &[&lb.resource_guid]);
    // Children (frontends, rules, probes) carry ids, the LB's etag and provisioning state,
    // and back-references, as in real output. They are few; only pools are large.
    let mut children = lb.props.clone();
    children.extend(crate::structure::render(
        &lb.props,
        &lb_id,
        &lb.etag,
        &lb.provisioning_state,
    ));
    // NRP's order of the child collections (LoadBalancerGet example); anything else after.
    const POOLS: &str = "backendAddressPools";
    const ORDER: &[&str] = &[
        "frontendIPConfigurations",
        POOLS,
        "loadBalancingRules",
        "probes",
        "inboundNatRules",
        "inboundNatPools",
        "outboundRules",
    ];
    for k in ORDER {
        if *k == POOLS {
            let buf = props.key(POOLS);
            buf.push(b'[');
            for (i, p) in lb.pools.iter().enumerate() {
                if i > 0 {
                    buf.push(b',');
                }
                pool(buf, lb, p, scope);
            }
            buf.push(b']');
        } else if let Some(v) = children.get(*k) {
            props.value(k, v);
        }
    }
    let mut skip = vec!["provisioningState", "resourceGuid"];
    skip.extend_from_slice(ORDER);
    members(&mut props, &children, &skip);
    props.close();
    top.close();
}

/// One pool of `lb`, with back-references derived from the LB's rules (seeded ones are kept
/// when the LB has no rules at all). Every child carries the load balancer's etag.
pub fn pool(out: &mut Vec<u8>, lb: &LoadBalancer, p: &Pool, scope: Scope<'_>) {
    let pool_id = scope.pool_id(&p.name);
    let mut obj = Obj::open(out);
    obj.str("name", &[&p.name]);
    obj.str("id", &[&pool_id]);
    obj.str("etag", &[&lb.etag]);
    obj.str("type", &[POOL_TYPE]);
    let mut props = Obj::open(obj.key("properties"));
    props.str("provisioningState", &[&p.provisioning_state]);
    if !p.addresses.is_empty() || !p.nic_based {
        let buf = props.key("loadBalancerBackendAddresses");
        buf.push(b'[');
        for (i, a) in p.addresses.iter().enumerate() {
            if i > 0 {
                buf.push(b',');
            }
            address(buf, p, a, &pool_id, &lb.etag);
        }
        buf.push(b']');
    }
    if !p.backend_ip_configurations.is_empty() {
        let buf = props.key("backendIPConfigurations");
        buf.push(b'[');
        for (i, id) in p.backend_ip_configurations.iter().enumerate() {
            if i > 0 {
                buf.push(b',');
            }
            let mut o = Obj::open(buf);
            o.str("id", &[id]);
            o.close();
        }
        buf.push(b']');
    }
    const OURS: &[&str] = &[
        "provisioningState",
        "loadBalancerBackendAddresses",
        "backendIPConfigurations",
    ];
    if crate::structure::has_rules(&lb.props) {
        let mut rest = p.props.clone();
        for k in crate::structure::POOL_BACK_REFS {
            rest.remove(*k);
        }
        rest.extend(crate::structure::pool_refs(
            &lb.props,
            &scope.lb_id(),
            &p.name,
        ));
        members(&mut props, &rest, OURS);
    } else {
        members(&mut props, &p.props, OURS);
    }
    props.close();
    obj.close();
}

/// One backend entry. NIC-style entries are sub-resources with their own id, etag, type and
/// provisioning state; IP-based ones are a name and properties.
fn address(out: &mut Vec<u8>, p: &Pool, a: &Address, pool_id: &str, etag: &str) {
    let mut obj = Obj::open(out);
    obj.str("name", &[&a.name]);
    let nic = a.nic_ip_configuration().is_some();
    if nic {
        obj.str("id", &[pool_id, "/loadBalancerBackendAddresses/", &a.name]);
        obj.str("etag", &[etag]);
        obj.str("type", &[ADDRESS_TYPE]);
    }
    let mut props = Obj::open(obj.key("properties"));
    if nic {
        props.str("provisioningState", &[&p.provisioning_state]);
    }
    if let Some(s) = a.admin_state {
        props.str("adminState", &[s.as_str()]);
    }
    members(&mut props, &a.props, &["adminState", "provisioningState"]);
    props.close();
    obj.close();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped_like_serde_json() {
        let mut out = Vec::new();
        string(&mut out, &["a\"b", "\\c\n", "plain"]);
        assert_eq!(
            serde_json::from_slice::<String>(&out).unwrap(),
            "a\"b\\c\nplain"
        );
    }

    #[test]
    fn commas_separate_members_and_nested_objects_close() {
        let mut out = Vec::new();
        let mut o = Obj::open(&mut out);
        o.str("a", &["1"]);
        let mut inner = Obj::open(o.key("b"));
        inner.value("c", &Value::Bool(true));
        inner.close();
        o.str("d", &["x", "y"]);
        o.close();
        assert_eq!(out, br#"{"a":"1","b":{"c":true},"d":"xy"}"#);
    }
}
