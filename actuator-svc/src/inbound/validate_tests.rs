use super::*;
use cutover_proto::v1::Snapshot;
use prost::Message;
use quickcheck::{QuickCheck, TestResult};

const PROVIDER_ID: &str = "azure:///subscriptions/0b1f6471-1bf0-4dda-aec3-cb9272f09590/resourceGroups/mc_rg_aks_eastus/providers/Microsoft.Compute/virtualMachineScaleSets/aks-nodepool1-12345678-vmss/virtualMachines/3";

fn mk_desired() -> NodeDesiredState {
    NodeDesiredState {
        node: Some(NodeRef {
            name: "aks-nodepool1-12345678-vmss000003".into(),
            uid: "5f0c2b9e-2d6a-4c8e-9d43-0c1f4b5e6a7b".into(),
            provider_id: PROVIDER_ID.into(),
            internal_ips: vec!["10.0.0.1".into(), "fd00::1".into()],
            zone: "eastus-1".into(),
        }),
        desired: AdminState::Down as i32,
        reasons: vec!["node.kubernetes.io/out-of-service".into()],
        version: Some(Version { epoch: 1, seq: 1 }),
        ..Default::default()
    }
}

fn n(d: &mut NodeDesiredState) -> &mut NodeRef {
    d.node.as_mut().unwrap()
}

fn secs(seconds: i64, nanos: i32) -> prost_types::Duration {
    prost_types::Duration { seconds, nanos }
}

#[test]
fn valid_desired_state_converts() {
    let d = desired_state(&mk_desired(), "delta").unwrap();
    assert_eq!(d.key, "5f0c2b9e-2d6a-4c8e-9d43-0c1f4b5e6a7b");
    assert_eq!((d.desired, d.spec.internal_ips.len()), (Admin::Down, 2));
    let standalone = "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/flex-vm1";
    let mut m = mk_desired();
    m.node.as_mut().unwrap().provider_id = standalone.into();
    assert!(desired_state(&m, "delta").is_ok());
}

#[test]
fn every_broken_field_is_named() {
    type Mutation = Box<dyn Fn(&mut NodeDesiredState)>;
    let cases: Vec<(Mutation, &str)> = vec![
        (Box::new(|d| d.node = None), "delta.node: required"),
        (Box::new(|d| n(d).name.clear()), "delta.node.name: required"),
        (
            Box::new(|d| n(d).name = "Upper".into()),
            "delta.node.name: \"Upper\" is not a Kubernetes node name",
        ),
        (
            Box::new(|d| n(d).name = "a..b".into()),
            "delta.node.name: \"a..b\" is not",
        ),
        (
            Box::new(|d| n(d).name = "-a".into()),
            "delta.node.name: \"-a\" is not",
        ),
        (
            Box::new(|d| n(d).name = "a".repeat(254)),
            "delta.node.name: \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"... (254 bytes) is too long",
        ),
        (Box::new(|d| n(d).uid.clear()), "delta.node.uid: required"),
        (
            Box::new(|d| n(d).uid = "name:x".into()),
            "delta.node.uid: \"name:x\" is not a UID",
        ),
        (
            Box::new(|d| n(d).internal_ips[1] = "nope".into()),
            "delta.node.internal_ips[1]: \"nope\" is not an IP address",
        ),
        (
            Box::new(|d| n(d).internal_ips[0] = " 10.0.0.1".into()),
            "delta.node.internal_ips[0]",
        ),
        (
            Box::new(|d| n(d).internal_ips = vec!["10.0.0.1".into(); 9]),
            "delta.node.internal_ips: 9 given, at most 8",
        ),
        (
            Box::new(|d| n(d).provider_id = "aws:///x".into()),
            "delta.node.provider_id: \"aws:///x\" is not an Azure",
        ),
        (
            Box::new(|d| n(d).provider_id = "azure:///subscriptions/s".into()),
            "delta.node.provider_id",
        ),
        (Box::new(|d| n(d).zone = "z".repeat(64)), "delta.node.zone"),
        (
            Box::new(|d| n(d).zone = "east us".into()),
            "delta.node.zone",
        ),
        (
            Box::new(|d| d.desired = AdminState::Up as i32),
            "delta.desired: must be DOWN or NONE",
        ),
        (
            Box::new(|d| d.desired = 0),
            "delta.desired: must be DOWN or NONE",
        ),
        (
            Box::new(|d| d.desired = 99),
            "delta.desired: must be DOWN or NONE",
        ),
        (
            Box::new(|d| d.reasons = vec!["k".into(); 17]),
            "delta.reasons: 17 given, at most 16",
        ),
        (
            Box::new(|d| d.reasons = vec!["ok".into(), "r".repeat(318)]),
            "delta.reasons[1]",
        ),
        (
            Box::new(|d| d.reasons = vec!["a\u{1b}[2J".into()]),
            "delta.reasons[0]: \"a\\u{1b}[2J\" contains control",
        ),
        (
            Box::new(|d| {
                d.observed_at = Some(prost_types::Timestamp {
                    seconds: 0,
                    nanos: -1,
                })
            }),
            "delta.observed_at",
        ),
        (Box::new(|d| d.version = None), "delta.version: required"),
    ];
    for (mutate, expected) in cases {
        let mut d = mk_desired();
        mutate(&mut d);
        let e = desired_state(&d, "delta").unwrap_err().to_string();
        assert!(e.starts_with(expected), "{e} vs {expected}");
    }
}

#[test]
fn hostile_names_are_refused_with_a_short_escaped_echo() {
    let megabyte = "a".repeat(1 << 20);
    for bad in [
        megabyte.as_str(),
        "node\0x",
        "node\u{7}",
        "node\u{1b}[31m",
        "node\nx",
        "node\u{202e}x",
    ] {
        let e = node_ref(
            Some(&NodeRef {
                name: bad.into(),
                ..Default::default()
            }),
            "node",
            false,
        )
        .unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("node.name: \""), "{msg}");
        assert!(msg.len() < 300, "{} bytes", msg.len());
        assert!(!msg.chars().any(is_unsafe_char), "{msg:?}");
    }
}

#[test]
fn echo_escapes_and_cuts() {
    assert_eq!(echo("ab"), "\"ab\"");
    assert_eq!(echo("a\"b\\"), "\"a\\\"b\\\\\"");
    assert_eq!(
        echo("\u{0}\u{7}\u{1b}\n\u{9b}"),
        "\"\\u{0}\\u{7}\\u{1b}\\u{a}\\u{9b}\""
    );
    let long = "é".repeat(40);
    assert_eq!(echo(&long), format!("\"{}\"... (80 bytes)", "é".repeat(32)));
}

#[test]
fn wait_timeouts_are_positive_and_bounded() {
    assert_eq!(wait_duration(None), Ok(DEFAULT_WAIT));
    assert_eq!(
        wait_duration(Some(&secs(0, 1_000))),
        Ok(Duration::from_micros(1))
    );
    assert_eq!(
        wait_duration(Some(&secs(600, 0))),
        Ok(Duration::from_secs(600))
    );
    for (d, why) in [
        (secs(0, 0), "wait_timeout: must be positive"),
        (secs(-1, 0), "wait_timeout: must not be negative"),
        (secs(0, -1), "wait_timeout: must not be negative"),
        (secs(600, 1), "wait_timeout: at most 10 minutes"),
        (
            secs(i64::MAX, 999_999_999),
            "wait_timeout: at most 10 minutes",
        ),
        (secs(1, 1_000_000_000), "wait_timeout: nanos out of range"),
    ] {
        let e = wait_duration(Some(&d)).unwrap_err().to_string();
        assert!(e.starts_with(why), "{d:?}: {e}");
    }
}

#[test]
fn tool_requests_validate_every_field() {
    let ok = SetNodeAdminStateRequest {
        node: Some(NodeRef {
            name: "n".into(),
            ..Default::default()
        }),
        admin_state: AdminState::Down as i32,
        reason: "maintenance ticket 1234".into(),
        wait: WaitFor::Effective as i32,
        wait_timeout: None,
    };
    let v = set_request(&ok).unwrap();
    assert_eq!(key_of(&v.node.uid, &v.node.name), "name:n");
    assert_eq!((v.wait, v.timeout), (WaitFor::Effective, DEFAULT_WAIT));
    assert_eq!(v.reasons, vec!["maintenance ticket 1234"]);
    let bad = |f: fn(&mut SetNodeAdminStateRequest)| {
        let mut r = ok.clone();
        f(&mut r);
        set_request(&r).unwrap_err().field
    };
    assert_eq!(bad(|r| r.wait = 7), "wait");
    assert_eq!(bad(|r| r.reason = "x".repeat(400)), "reason");
    assert_eq!(bad(|r| r.reason = "line\nbreak".into()), "reason");
    assert_eq!(bad(|r| r.wait_timeout = Some(secs(0, 0))), "wait_timeout");
    assert_eq!(bad(|r| r.admin_state = 3), "admin_state");

    assert_eq!(
        list_request(&ListHeldEntriesRequest {
            load_balancer: "kubernetes-internal".into()
        }),
        Ok(Some("kubernetes-internal"))
    );
    assert_eq!(list_request(&ListHeldEntriesRequest::default()), Ok(None));
    for lb in ["-x", "a b", "x-", &"l".repeat(81), "kube\u{1b}"] {
        let e = list_request(&ListHeldEntriesRequest {
            load_balancer: lb.into(),
        })
        .unwrap_err();
        assert_eq!(e.field, "load_balancer", "{lb:?}");
    }
    assert_eq!(watch_request(&WatchResultsRequest::default()), Ok(None));
    assert_eq!(
        watch_request(&WatchResultsRequest {
            node_name: "bad\u{0}".into()
        })
        .unwrap_err()
        .field,
        "node_name"
    );
    assert!(
        get_request(&GetNodeAdminStateRequest::default())
            .unwrap_err()
            .to_string()
            .starts_with("node: required")
    );
}

#[test]
fn stream_messages_validate_each_kind() {
    let snapshot = |nodes| SignalMessage {
        kind: Some(signal_message::Kind::Snapshot(Snapshot { nodes })),
    };
    assert!(signal_message(&snapshot(vec![mk_desired(); 3])).is_ok());
    let mut broken = mk_desired();
    broken.node.as_mut().unwrap().name = "x\n".into();
    let e = signal_message(&snapshot(vec![mk_desired(), broken])).unwrap_err();
    assert_eq!(e.field, "snapshot.nodes[1].node.name");
    let hello = SignalMessage {
        kind: Some(signal_message::Kind::Hello(Hello {
            cluster_name: "k\u{1b}".into(),
            ..Default::default()
        })),
    };
    assert_eq!(
        signal_message(&hello).unwrap_err().field,
        "hello.cluster_name"
    );
    let forget = SignalMessage {
        kind: Some(signal_message::Kind::Forget(Forget {
            node: mk_desired().node,
            version: None,
        })),
    };
    assert_eq!(signal_message(&forget).unwrap_err().field, "forget.version");
    assert_eq!(
        signal_message(&SignalMessage::default()).unwrap_err().field,
        "kind"
    );
}

/// The decode limit admits the largest legitimate snapshot chunk and is not much larger.
#[test]
fn message_limit_fits_the_largest_valid_snapshot_chunk() {
    let worst = NodeDesiredState {
        node: Some(NodeRef {
            name: format!("{}.{}", "a".repeat(126), "b".repeat(126)),
            uid: "u".repeat(MAX_UID),
            provider_id: format!(
                "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/{}",
                "v".repeat(MAX_PROVIDER_ID - 87)
            ),
            internal_ips: vec!["ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255".into(); MAX_IPS],
            zone: "z".repeat(MAX_ZONE),
        }),
        desired: AdminState::Down as i32,
        reasons: vec!["r".repeat(MAX_REASON); MAX_REASONS],
        observed_at: Some(prost_types::Timestamp {
            seconds: i64::MAX,
            nanos: 999_999_999,
        }),
        version: Some(Version {
            epoch: u64::MAX,
            seq: u64::MAX,
        }),
        deadline: Some(prost_types::Timestamp {
            seconds: i64::MAX,
            nanos: 999_999_999,
        }),
        hold: Some(cutover_proto::v1::Hold {
            reason: "r".repeat(MAX_HOLD_TEXT),
            requester: "q".repeat(MAX_HOLD_TEXT),
            since: Some(prost_types::Timestamp {
                seconds: i64::MAX,
                nanos: 999_999_999,
            }),
        }),
    };
    desired_state(&worst, "worst").unwrap();
    assert!(worst.encoded_len() <= MAX_DESIRED_STATE_BYTES);
    let chunk = SignalMessage {
        kind: Some(signal_message::Kind::Snapshot(Snapshot {
            nodes: vec![worst; SNAPSHOT_CHUNK],
        })),
    };
    let len = chunk.encoded_len();
    assert!(len <= MAX_DECODED_MESSAGE, "{len} > {MAX_DECODED_MESSAGE}");
    assert!(MAX_DECODED_MESSAGE < len + len / 10, "limit far above need");
}

// Properties (bounded case counts: they run in CI).

fn quick() -> QuickCheck {
    QuickCheck::new().tests(500).max_tests(5_000)
}

/// Whatever a caller puts in a NodeRef, validation answers without panicking; an accepted
/// node is a bounded Kubernetes name, and a refusal is short and inert.
#[test]
fn any_node_ref_is_refused_or_sane() {
    fn prop(name: String, uid: String, pid: String, ips: Vec<String>, zone: String) -> bool {
        let n = NodeRef {
            name,
            uid,
            provider_id: pid,
            internal_ips: ips,
            zone,
        };
        match node_ref(Some(&n), "node", false) {
            Ok((r, spec)) => {
                r.name.len() <= MAX_NAME
                    && kube_name(&r.name, "n").is_ok()
                    && spec.internal_ips.len() == r.internal_ips.len()
            }
            Err(e) => {
                let m = e.to_string();
                m.len() < 512 && !m.chars().any(is_unsafe_char)
            }
        }
    }
    quick().quickcheck(prop as fn(String, String, String, Vec<String>, String) -> bool);
}

/// Names built from the DNS-1123 alphabet are accepted exactly when each label is well formed.
#[test]
fn kube_names_from_the_alphabet() {
    fn prop(raw: Vec<u8>) -> TestResult {
        const ALPHABET: &[u8] = b"abz09-.";
        if raw.is_empty() {
            return TestResult::discard();
        }
        let name: String = raw
            .iter()
            .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
            .collect();
        let labels_ok = name
            .split('.')
            .all(|l| !l.is_empty() && !l.starts_with('-') && !l.ends_with('-'));
        TestResult::from_bool(
            kube_name(&name, "n").is_ok() == (labels_ok && name.len() <= MAX_NAME),
        )
    }
    quick().quickcheck(prop as fn(Vec<u8>) -> TestResult);
}

/// Arbitrary bytes decoded as any RPC message never make validation panic.
#[test]
fn arbitrary_wire_bytes_never_panic() {
    fn prop(bytes: Vec<u8>) -> bool {
        if let Ok(m) = SignalMessage::decode(bytes.as_slice()) {
            let _ = signal_message(&m);
        }
        if let Ok(m) = SetNodeAdminStateRequest::decode(bytes.as_slice()) {
            let _ = set_request(&m);
        }
        if let Ok(m) = GetNodeAdminStateRequest::decode(bytes.as_slice()) {
            let _ = get_request(&m);
        }
        if let Ok(m) = ListHeldEntriesRequest::decode(bytes.as_slice()) {
            let _ = list_request(&m);
        }
        if let Ok(m) = WatchResultsRequest::decode(bytes.as_slice()) {
            let _ = watch_request(&m);
        }
        true
    }
    quick().quickcheck(prop as fn(Vec<u8>) -> bool);
}

/// Every wait_timeout is either refused or within (0, 10 min].
#[test]
fn any_wait_timeout_is_refused_or_in_range() {
    fn prop(seconds: i64, nanos: i32) -> bool {
        match wait_duration(Some(&secs(seconds, nanos))) {
            Ok(d) => !d.is_zero() && d <= MAX_WAIT,
            Err(e) => e.field == "wait_timeout",
        }
    }
    quick().quickcheck(prop as fn(i64, i32) -> bool);
}

#[test]
fn echo_is_short_and_inert_for_any_text() {
    fn prop(s: String) -> bool {
        let e = echo(&s);
        e.chars().count() <= 2 + ECHO_CHARS * 10 + 32 && !e.chars().any(is_unsafe_char)
    }
    quick().quickcheck(prop as fn(String) -> bool);
}
