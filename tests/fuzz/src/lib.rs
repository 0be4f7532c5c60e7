//! Fuzz targets for every parser that reads the outside world. Each target takes raw bytes,
//! feeds them to the product's own parser and ignores the typed answer: a target fails only by
//! panicking (or by hanging, which the drivers time).
//!
//! Two drivers run them:
//! - [`driver`]: a coverage-less mutation driver on stable Rust; the test suite runs every
//!   target for a few seconds with it (`tests/smoke.rs`).
//! - `src/bin/libfuzzer.rs`: libFuzzer, coverage-guided, built by `tests/fuzz/run.sh` with
//!   stable `-C passes=sancov-module` instrumentation of the workspace crates.

pub mod driver;
pub mod seeds;

use actuator_svc::arm::{error, retry};
use actuator_svc::config::azure_json::{self, EnvOverrides};
use actuator_svc::inbound::validate;
use actuator_svc::lb::ids;
use actuator_svc::lb::index::{LbPools, NodeSpec, PoolIndex, nic_map};
use cutover_proto::v1::{
    GetNodeAdminStateRequest, ListHeldEntriesRequest, SetNodeAdminStateRequest, SignalMessage,
    WatchResultsRequest,
};
use prost::Message;
use serde_json::Value;
use signal_svc::core::{event::EventView, node::NodeView, notice};

/// A fuzz target: bytes in, nothing out; it must not panic.
pub type Target = fn(&[u8]);

/// Every target, by name.
pub const TARGETS: &[(&str, Target)] = &[
    ("azure_json", azure_json),
    ("arm_error", arm_error),
    ("retry_after", retry_after),
    ("arm_pools", arm_pools),
    ("spot_notice", spot_notice),
    ("kube_node", kube_node),
    ("kube_event", kube_event),
    ("rpc", rpc),
];

/// The target called `name`.
pub fn target(name: &str) -> Option<Target> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

/// Splits `data` at 0xff bytes into at most `n` parts (missing parts are empty).
fn parts(data: &[u8], n: usize) -> Vec<&[u8]> {
    let mut out: Vec<&[u8]> = data.splitn(n, |b| *b == 0xff).collect();
    out.resize(n, &[]);
    out
}

/// `azure.json` as cloud-provider-azure writes it (and as an operator may mangle it).
pub fn azure_json(data: &[u8]) {
    let env = EnvOverrides::default();
    let _ = azure_json::parse(&text(data), "kubernetes", &env);
}

/// ARM error bodies and `Azure-AsyncOperation` bodies.
pub fn arm_error(data: &[u8]) {
    let e = error::CloudError::parse(data);
    let _ = retry::is_retryable(429, &e.code, &e.details);
    let _ = error::parse_operation(data);
}

/// `retry-after-ms`, `x-ms-retry-after-ms` and `Retry-After` (seconds or HTTP date).
pub fn retry_after(data: &[u8]) {
    let p = parts(data, 4);
    let (ms, xms, ra) = (text(p[0]), text(p[1]), text(p[2]));
    // The clock is part of the input: dates are relative to it.
    let secs = p[3].iter().fold(0i64, |acc, b| {
        acc.wrapping_mul(256).wrapping_add(i64::from(*b))
    });
    let now = time::OffsetDateTime::from_unix_timestamp(secs.rem_euclid(253_402_300_799))
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    if let Some(d) = retry::parse_retry_after(&[Some(&ms), Some(&xms)], Some(&ra), now) {
        assert!(d <= retry::MAX_RETRY_AFTER, "uncapped Retry-After {d:?}");
    }
}

/// Backend pools (LIST pools, GET LB) and NICs, through the pool index, then node resolution
/// by providerID, IPs and name; plus the ARM ID parsers on every string found.
pub fn arm_pools(data: &[u8]) {
    let Ok(v) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let items: Vec<Value> = match &v {
        Value::Array(a) => a.clone(),
        Value::Object(o) => o
            .get("value")
            .and_then(Value::as_array)
            .cloned()
            .or_else(|| {
                v.pointer("/properties/backendAddressPools")
                    .and_then(Value::as_array)
                    .cloned()
            })
            .unwrap_or_else(|| vec![v.clone()]),
        _ => vec![v.clone()],
    };
    let nics = nic_map(&items);
    let lbs = [LbPools {
        name: "kubernetes".into(),
        id: "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/loadBalancers/kubernetes".into(),
        pools: items.clone(),
    }];
    let index = PoolIndex::build(&lbs, nics);
    let mut strings = Vec::new();
    collect_strings(&v, &mut strings, 256);
    for s in &strings {
        let _ = ids::parse_provider_id(s);
        let _ = ids::parse_ip_configuration_id(s);
        let _ = ids::parse_vm_id(s);
        let _ = ids::scale_set_vm_from_node_name(s);
        let spec = NodeSpec {
            name: s.clone(),
            uid: String::new(),
            provider_id: s.clone(),
            internal_ips: s.parse().ok().into_iter().collect(),
        };
        let _ = index.resolve(&spec, None);
        let _ = index.resolve(&spec, Some("kubernetes"));
    }
}

fn collect_strings(v: &Value, out: &mut Vec<String>, max: usize) {
    if out.len() >= max {
        return;
    }
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| collect_strings(x, out, max)),
        Value::Object(o) => o.values().for_each(|x| collect_strings(x, out, max)),
        _ => {}
    }
}

/// Spot eviction notices: event messages, node conditions and their RFC 1123 dates.
pub fn spot_notice(data: &[u8]) {
    let msg = text(data);
    let now = jiff::Timestamp::UNIX_EPOCH;
    let _ = notice::parse_event_message(&msg, now);
    for kind in [notice::CONDITION_PREEMPTION, notice::CONDITION_VM_EVENT] {
        let _ = notice::parse_condition(kind, "True", &msg, now);
    }
    let _ = notice::parse_rfc1123_gmt(&msg);
}

/// Kubernetes Node objects (JSON as the API server sends them) into signal-svc's view.
pub fn kube_node(data: &[u8]) {
    if let Ok(node) = serde_json::from_slice::<k8s_openapi::api::core::v1::Node>(data) {
        let _ = NodeView::from_node(&node, jiff::Timestamp::UNIX_EPOCH);
    }
}

/// core/v1 Events (read leniently from raw JSON) and the notice in their message.
pub fn kube_event(data: &[u8]) {
    if let Ok(v) = serde_json::from_slice::<Value>(data) {
        let ev = EventView::from_json(&v);
        let _ = notice::parse_event_message(&ev.message, jiff::Timestamp::UNIX_EPOCH);
    }
}

/// A refusal must be short and inert, whatever was sent.
fn inert<T>(r: Result<T, validate::Invalid>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            let m = e.to_string();
            assert!(m.len() < 1024, "refusal of {} bytes", m.len());
            assert!(
                !m.chars().any(validate::is_unsafe_char),
                "raw control in {m:?}"
            );
            None
        }
    }
}

/// Every RPC message: the first byte picks the message type, the rest is its wire encoding.
pub fn rpc(data: &[u8]) {
    let Some((kind, wire)) = data.split_first() else {
        return;
    };
    match kind % 5 {
        0 => {
            if let Ok(m) = SignalMessage::decode(wire) {
                inert(validate::signal_message(&m));
            }
        }
        1 => {
            if let Ok(m) = SetNodeAdminStateRequest::decode(wire)
                && let Some(v) = inert(validate::set_request(&m))
            {
                assert!(v.node.name.len() <= validate::MAX_NAME);
                assert!(v.timeout > std::time::Duration::ZERO && v.timeout <= validate::MAX_WAIT);
            }
        }
        2 => {
            if let Ok(m) = GetNodeAdminStateRequest::decode(wire) {
                inert(validate::get_request(&m));
            }
        }
        3 => {
            if let Ok(m) = ListHeldEntriesRequest::decode(wire) {
                inert(validate::list_request(&m));
            }
        }
        _ => {
            if let Ok(m) = WatchResultsRequest::decode(wire) {
                inert(validate::watch_request(&m));
            }
        }
    }
}
