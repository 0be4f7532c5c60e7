//! Request validation at the edge: proto messages to domain values, or an [`Invalid`] naming the
//! field (the caller turns it into INVALID_ARGUMENT). Pure; nothing is applied before
//! validation passes.
//!
//! Every string that reaches the store, the logs or another tool's terminal is bounded here,
//! and a refusal never echoes more than [`ECHO_CHARS`] escaped characters of the bad value: a
//! caller that sends a megabyte of escape sequences gets back a short, inert message.

use crate::lb::ids::parse_provider_id;
use crate::lb::index::{Admin, NodeSpec};
use cutover_proto::v1::{
    AdminState, Forget, GetNodeAdminStateRequest, Hello, ListHeldEntriesRequest, NodeDesiredState,
    NodeRef, SetNodeAdminStateRequest, SignalMessage, Version, WaitFor, WatchResultsRequest,
    signal_message,
};
use std::fmt::Write as _;
use std::net::IpAddr;
use std::time::Duration;

/// A Kubernetes object name (DNS-1123 subdomain).
pub const MAX_NAME: usize = 253;
/// Kubernetes UIDs are 36-character UUIDs; the slack admits other tools' opaque keys.
pub const MAX_UID: usize = 128;
/// Azure providerIDs are about 220 bytes (subscription GUID, resource group ≤ 90, VM or scale
/// set ≤ 64, instance id); twice that leaves room without admitting junk.
pub const MAX_PROVIDER_ID: usize = 512;
/// A dual-stack node has two InternalIPs; a few more are tolerated.
pub const MAX_IPS: usize = 8;
/// A label value (`topology.kubernetes.io/zone`).
pub const MAX_ZONE: usize = 63;
/// Reasons are taint keys (a 253-byte prefix, '/', a 63-byte name) or a tool's short note.
pub const MAX_REASON: usize = 317;
/// Reasons per desired state: the trigger taints present on a node.
pub const MAX_REASONS: usize = 16;
/// Azure resource names (load balancers) are at most 80 characters.
pub const MAX_LB_NAME: usize = 80;
/// `Hello.cluster_name` and `Hello.sender_identity`.
pub const MAX_IDENTITY: usize = 253;
/// The longest `wait_timeout` a tool may ask for.
pub const MAX_WAIT: Duration = Duration::from_secs(600);
/// `wait_timeout` when the tool gives none.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(60);
/// How much of a refused value a message repeats.
pub const ECHO_CHARS: usize = 32;

/// A durable tool hold's reason and requester: 256 characters (signal-svc's bound) of up to
/// 4 bytes each.
pub const MAX_HOLD_TEXT: usize = 4 * 256;

/// The largest legitimate `NodeDesiredState` on the wire, every field at its bound: strings
/// plus a few bytes of tag and length each, the timestamps, the version and the hold.
pub const MAX_DESIRED_STATE_BYTES: usize = (MAX_NAME + 3)
    + (MAX_UID + 3)
    + (MAX_PROVIDER_ID + 3)
    + MAX_IPS * (45 + 2)
    + (MAX_ZONE + 2)
    + MAX_REASONS * (MAX_REASON + 3)
    + 2 * 18
    + 24
    + 2
    + 8
    + (2 * (MAX_HOLD_TEXT + 3) + 18 + 3);
/// Nodes per snapshot message that signal-svc sends (`stream::SNAPSHOT_CHUNK`).
pub const SNAPSHOT_CHUNK: usize = 500;
/// The limit on every decoded message of the actuator service: the largest legitimate message
/// is a full snapshot chunk of worst-case nodes (about 3.3 MB); anything beyond is refused by
/// the codec before it is buffered as a message.
pub const MAX_DECODED_MESSAGE: usize = SNAPSHOT_CHUNK * (MAX_DESIRED_STATE_BYTES + 4) + 1024;
/// The limit for the health and reflection services, whose requests are a service name.
pub const MAX_DECODED_SMALL: usize = 64 * 1024;

/// A refused request: which field, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct Invalid {
    pub field: String,
    pub problem: String,
}

impl Invalid {
    fn new(field: impl Into<String>, problem: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            problem: problem.into(),
        }
    }

    /// `problem` about the value `bad`, echoed short and escaped.
    fn value(field: impl Into<String>, bad: &str, problem: &str) -> Self {
        Self::new(field, format!("{} {problem}", echo(bad)))
    }
}

impl From<Invalid> for String {
    fn from(e: Invalid) -> Self {
        e.to_string()
    }
}

impl From<Invalid> for tonic::Status {
    fn from(e: Invalid) -> Self {
        tonic::Status::invalid_argument(e.to_string())
    }
}

/// A character that must not reach a log line or a terminal raw: C0/C1 controls, DEL, and the
/// invisible formatting characters that reorder or hide text (bidi overrides, zero-width).
pub fn is_unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}')
}

/// A quoted, escaped prefix of `value` of at most [`ECHO_CHARS`] characters, with the total
/// length when it was cut.
pub fn echo(value: &str) -> String {
    let mut out = String::from("\"");
    for (i, c) in value.chars().enumerate() {
        if i == ECHO_CHARS {
            let _ = write!(out, "\"... ({} bytes)", value.len());
            return out;
        }
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if is_unsafe_char(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn bounded(field: &str, value: &str, max: usize) -> Result<(), Invalid> {
    if value.len() > max {
        return Err(Invalid::value(
            field,
            value,
            &format!("is too long: at most {max} bytes"),
        ));
    }
    Ok(())
}

fn printable(field: &str, value: &str, max: usize) -> Result<(), Invalid> {
    bounded(field, value, max)?;
    if value.chars().any(is_unsafe_char) {
        return Err(Invalid::value(
            field,
            value,
            "contains control or invisible formatting characters",
        ));
    }
    Ok(())
}

/// DNS-1123 label: lower-case alphanumerics and '-', starting and ending alphanumeric.
fn dns_label(label: &str) -> bool {
    let b = label.as_bytes();
    let edge = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.first().is_some_and(edge)
        && b.last().is_some_and(edge)
        && b.iter().all(|c| edge(c) || *c == b'-')
}

/// Validates a Kubernetes object name (DNS-1123 subdomain, at most 253 characters) at `field`.
pub fn kube_name(value: &str, field: &str) -> Result<(), Invalid> {
    if value.is_empty() {
        return Err(Invalid::new(field, "required"));
    }
    bounded(field, value, MAX_NAME)?;
    if !value.split('.').all(dns_label) {
        return Err(Invalid::value(
            field,
            value,
            "is not a Kubernetes node name (lower-case letters, digits, '-' and '.', starting and ending with a letter or digit)",
        ));
    }
    Ok(())
}

fn uid(value: &str, field: &str) -> Result<(), Invalid> {
    bounded(field, value, MAX_UID)?;
    if !value
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
    {
        return Err(Invalid::value(
            field,
            value,
            "is not a UID (letters, digits, '-', '_' and '.')",
        ));
    }
    Ok(())
}

fn provider_id(value: &str, field: &str) -> Result<(), Invalid> {
    if value.is_empty() {
        return Ok(());
    }
    printable(field, value, MAX_PROVIDER_ID)?;
    if value.chars().any(char::is_whitespace) || parse_provider_id(value).is_none() {
        return Err(Invalid::value(
            field,
            value,
            "is not an Azure VM or scale-set VM providerID (azure:///subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.Compute/...)",
        ));
    }
    Ok(())
}

fn zone(value: &str, field: &str) -> Result<(), Invalid> {
    bounded(field, value, MAX_ZONE)?;
    if !value
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
    {
        return Err(Invalid::value(
            field,
            value,
            "is not a label value (letters, digits, '-', '_' and '.')",
        ));
    }
    Ok(())
}

/// Validates reasons (taint keys or a tool's note) at `field`.
pub fn reasons(values: &[String], field: &str) -> Result<(), Invalid> {
    if values.len() > MAX_REASONS {
        return Err(Invalid::new(
            field,
            format!("{} given, at most {MAX_REASONS}", values.len()),
        ));
    }
    for (i, r) in values.iter().enumerate() {
        printable(&format!("{field}[{i}]"), r, MAX_REASON)?;
    }
    Ok(())
}

/// Validates a `NodeRef` at `field` into the node and what the index resolves it by.
pub fn node_ref(
    node: Option<&NodeRef>,
    field: &str,
    require_uid: bool,
) -> Result<(NodeRef, NodeSpec), Invalid> {
    let Some(n) = node else {
        return Err(Invalid::new(field, "required"));
    };
    kube_name(&n.name, &format!("{field}.name"))?;
    if require_uid && n.uid.is_empty() {
        return Err(Invalid::new(format!("{field}.uid"), "required"));
    }
    uid(&n.uid, &format!("{field}.uid"))?;
    provider_id(&n.provider_id, &format!("{field}.provider_id"))?;
    zone(&n.zone, &format!("{field}.zone"))?;
    if n.internal_ips.len() > MAX_IPS {
        return Err(Invalid::new(
            format!("{field}.internal_ips"),
            format!("{} given, at most {MAX_IPS}", n.internal_ips.len()),
        ));
    }
    let mut ips = Vec::with_capacity(n.internal_ips.len());
    for (i, ip) in n.internal_ips.iter().enumerate() {
        let f = format!("{field}.internal_ips[{i}]");
        // The longest textual IPv6 address is 45 bytes; checking first keeps the parse cheap.
        bounded(&f, ip, 45)?;
        let parsed: IpAddr = ip
            .parse()
            .map_err(|_| Invalid::value(&f, ip, "is not an IP address"))?;
        ips.push(parsed);
    }
    Ok((
        n.clone(),
        NodeSpec {
            name: n.name.clone(),
            uid: n.uid.clone(),
            provider_id: n.provider_id.clone(),
            internal_ips: ips,
        },
    ))
}

/// [`node_ref`] with the message as a string (the handlers' existing call shape).
pub fn node(
    node: Option<&NodeRef>,
    field: &str,
    require_uid: bool,
) -> Result<(NodeRef, NodeSpec), String> {
    Ok(node_ref(node, field, require_uid)?)
}

/// A validated desired state from the stream.
#[derive(Debug, Clone)]
pub struct Desired {
    pub key: String,
    pub node: NodeRef,
    pub spec: NodeSpec,
    pub desired: Admin,
    pub version: Version,
    pub reasons: Vec<String>,
    /// A durable tool hold (`NodeDesiredState.hold`).
    pub hold: Option<cutover_proto::v1::Hold>,
}

/// The store key of a node: its UID, or its name when a tool gave none. UIDs never contain
/// ':' (see `uid`), so the two kinds of key cannot collide.
pub fn key_of(uid: &str, name: &str) -> String {
    if uid.is_empty() {
        format!("name:{name}")
    } else {
        uid.to_string()
    }
}

fn admin_state(value: i32, field: &str) -> Result<Admin, Invalid> {
    match AdminState::try_from(value) {
        Ok(AdminState::Down) => Ok(Admin::Down),
        Ok(AdminState::None) => Ok(Admin::None),
        _ => Err(Invalid::new(field, "must be DOWN or NONE")),
    }
}

/// Validates a settable admin state at `field`: DOWN or NONE.
pub fn admin(value: i32, field: &str) -> Result<Admin, String> {
    Ok(admin_state(value, field)?)
}

fn timestamp(ts: Option<&prost_types::Timestamp>, field: &str) -> Result<(), Invalid> {
    match ts {
        Some(t) if !(0..1_000_000_000).contains(&t.nanos) => {
            Err(Invalid::new(field, "nanos out of range"))
        }
        _ => Ok(()),
    }
}

/// Validates a stream desired state at `field`.
pub fn desired_state(d: &NodeDesiredState, field: &str) -> Result<Desired, Invalid> {
    let (node, spec) = node_ref(d.node.as_ref(), &format!("{field}.node"), true)?;
    let desired = admin_state(d.desired, &format!("{field}.desired"))?;
    reasons(&d.reasons, &format!("{field}.reasons"))?;
    timestamp(d.observed_at.as_ref(), &format!("{field}.observed_at"))?;
    timestamp(d.deadline.as_ref(), &format!("{field}.deadline"))?;
    if let Some(h) = &d.hold {
        printable(&format!("{field}.hold.reason"), &h.reason, MAX_HOLD_TEXT)?;
        printable(
            &format!("{field}.hold.requester"),
            &h.requester,
            MAX_HOLD_TEXT,
        )?;
        timestamp(h.since.as_ref(), &format!("{field}.hold.since"))?;
    }
    let Some(version) = d.version else {
        return Err(Invalid::new(format!("{field}.version"), "required"));
    };
    Ok(Desired {
        key: key_of(&node.uid, &node.name),
        node,
        spec,
        desired,
        version,
        reasons: d.reasons.clone(),
        hold: d.hold.clone(),
    })
}

/// [`desired_state`] with the message as a string (the handlers' existing call shape).
pub fn desired(d: &NodeDesiredState, field: &str) -> Result<Desired, String> {
    Ok(desired_state(d, field)?)
}

/// Validates a `Forget`: the node (name and UID) and its version.
pub fn forget(f: &Forget) -> Result<(NodeRef, Version), Invalid> {
    let (node, _) = node_ref(f.node.as_ref(), "forget.node", true)?;
    let Some(version) = f.version else {
        return Err(Invalid::new("forget.version", "required"));
    };
    Ok((node, version))
}

/// Validates a `Hello` before its fields are compared or logged.
pub fn hello(h: &Hello) -> Result<(), Invalid> {
    printable("hello.cluster_name", &h.cluster_name, MAX_IDENTITY)?;
    printable("hello.sender_identity", &h.sender_identity, MAX_IDENTITY)
}

/// Validates `wait_timeout`: absent means the 60 s default; otherwise positive and at most
/// 10 minutes. Zero is refused rather than read as "the default": a caller who sends it asked
/// for something we would not do.
pub fn wait_timeout(d: Option<&prost_types::Duration>) -> Result<Duration, String> {
    Ok(wait_duration(d)?)
}

fn wait_duration(d: Option<&prost_types::Duration>) -> Result<Duration, Invalid> {
    const FIELD: &str = "wait_timeout";
    let Some(d) = d else {
        return Ok(DEFAULT_WAIT);
    };
    if d.seconds < 0 || d.nanos < 0 {
        return Err(Invalid::new(FIELD, "must not be negative"));
    }
    if d.nanos >= 1_000_000_000 {
        return Err(Invalid::new(FIELD, "nanos out of range"));
    }
    if d.seconds == 0 && d.nanos == 0 {
        return Err(Invalid::new(
            FIELD,
            "must be positive (omit it for the 60 s default)",
        ));
    }
    // `seconds` is non-negative here; the comparison happens before any conversion overflows.
    if d.seconds as u64 > MAX_WAIT.as_secs()
        || (d.seconds as u64 == MAX_WAIT.as_secs() && d.nanos > 0)
    {
        return Err(Invalid::new(FIELD, "at most 10 minutes"));
    }
    Ok(Duration::new(d.seconds as u64, d.nanos as u32))
}

/// Validates `wait`: an enum value this actuator knows.
pub fn wait_for(value: i32) -> Result<WaitFor, Invalid> {
    WaitFor::try_from(value).map_err(|_| Invalid::new("wait", format!("unknown value {value}")))
}

/// Validates an optional load balancer name filter (Azure resource name rules).
pub fn load_balancer_filter(value: &str, field: &str) -> Result<(), Invalid> {
    if value.is_empty() {
        return Ok(());
    }
    bounded(field, value, MAX_LB_NAME)?;
    let b = value.as_bytes();
    let ok = b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last()
            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'));
    if !ok {
        return Err(Invalid::value(
            field,
            value,
            "is not a load balancer name (letters, digits, '-', '_' and '.')",
        ));
    }
    Ok(())
}

/// Validates an optional node name filter.
pub fn node_name_filter(value: &str, field: &str) -> Result<(), Invalid> {
    if value.is_empty() {
        return Ok(());
    }
    kube_name(value, field)
}

/// A validated `SetNodeAdminState`.
#[derive(Debug, Clone)]
pub struct SetRequest {
    pub node: NodeRef,
    pub spec: NodeSpec,
    pub desired: Admin,
    pub reasons: Vec<String>,
    pub wait: WaitFor,
    pub timeout: Duration,
}

/// Validates a whole `SetNodeAdminStateRequest`.
pub fn set_request(req: &SetNodeAdminStateRequest) -> Result<SetRequest, Invalid> {
    let (node, spec) = node_ref(req.node.as_ref(), "node", false)?;
    let desired = admin_state(req.admin_state, "admin_state")?;
    printable("reason", &req.reason, MAX_REASON)?;
    let wait = wait_for(req.wait)?;
    let timeout = wait_duration(req.wait_timeout.as_ref())?;
    Ok(SetRequest {
        node,
        spec,
        desired,
        reasons: if req.reason.is_empty() {
            vec![]
        } else {
            vec![req.reason.clone()]
        },
        wait,
        timeout,
    })
}

/// Validates a whole `GetNodeAdminStateRequest`.
pub fn get_request(req: &GetNodeAdminStateRequest) -> Result<(NodeRef, NodeSpec), Invalid> {
    node_ref(req.node.as_ref(), "node", false)
}

/// Validates a whole `ListHeldEntriesRequest`: the filter, `None` for all load balancers.
pub fn list_request(req: &ListHeldEntriesRequest) -> Result<Option<&str>, Invalid> {
    load_balancer_filter(&req.load_balancer, "load_balancer")?;
    Ok((!req.load_balancer.is_empty()).then_some(req.load_balancer.as_str()))
}

/// Validates a whole `WatchResultsRequest`: the filter, `None` for every node.
pub fn watch_request(req: &WatchResultsRequest) -> Result<Option<&str>, Invalid> {
    node_name_filter(&req.node_name, "node_name")?;
    Ok((!req.node_name.is_empty()).then_some(req.node_name.as_str()))
}

/// Validates one stream message on its own (the stream's order rules are the handler's).
pub fn signal_message(m: &SignalMessage) -> Result<(), Invalid> {
    match &m.kind {
        None => Err(Invalid::new("kind", "required")),
        Some(signal_message::Kind::Hello(h)) => hello(h),
        Some(signal_message::Kind::Snapshot(s)) => {
            for (i, d) in s.nodes.iter().enumerate() {
                desired_state(d, &format!("snapshot.nodes[{i}]"))?;
            }
            Ok(())
        }
        Some(signal_message::Kind::SnapshotEnd(_)) => Ok(()),
        Some(signal_message::Kind::Delta(d)) => desired_state(d, "delta").map(|_| ()),
        Some(signal_message::Kind::Forget(f)) => forget(f).map(|_| ()),
        Some(signal_message::Kind::Assignment(a)) => assignment_shape(a),
        Some(signal_message::Kind::HoldAck(a)) => {
            bounded("hold_ack.request_id", &a.request_id, 64)?;
            printable("hold_ack.error", &a.error, 1024)?;
            bounded("hold_ack.node_uid", &a.node_uid, MAX_UID)
        }
        Some(signal_message::Kind::NodeStatus(s)) => {
            node_ref(s.node.as_ref(), "node_status.node", true)?;
            if s.version.is_none() {
                return Err(Invalid::new("node_status.version", "required"));
            }
            Ok(())
        }
    }
}

/// The shape of an `Assignment` (whether its load balancers are ours is checked against the
/// managed set by `ownership::Grant::from_proto`): Azure load balancer names are at most 80
/// characters, and no fleet manages more than a few hundred.
pub fn assignment_shape(a: &cutover_proto::v1::Assignment) -> Result<(), Invalid> {
    if a.load_balancers.len() > 256 {
        return Err(Invalid::new(
            "assignment.load_balancers",
            format!("{} names; at most 256", a.load_balancers.len()),
        ));
    }
    for (i, lb) in a.load_balancers.iter().enumerate() {
        printable(&format!("assignment.load_balancers[{i}]"), lb, 80)?;
    }
    if a.valid_for.is_none() {
        return Err(Invalid::new("assignment.valid_for", "required"));
    }
    Ok(())
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;
