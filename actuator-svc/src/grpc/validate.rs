//! Request validation: proto messages to domain values, or a message naming the field (the
//! caller turns it into INVALID_ARGUMENT). Pure; nothing is applied before validation passes.

use crate::index::{Admin, NodeSpec};
use cutover_proto::v1::{AdminState, NodeDesiredState, NodeRef, Version};
use std::net::IpAddr;
use std::time::Duration;

/// A validated desired state from the stream.
#[derive(Debug, Clone)]
pub struct Desired {
    pub key: String,
    pub node: NodeRef,
    pub spec: NodeSpec,
    pub desired: Admin,
    pub version: Version,
    pub reasons: Vec<String>,
}

/// The store key of a node: its UID, or its name when a tool gave none.
pub fn key_of(uid: &str, name: &str) -> String {
    if uid.is_empty() {
        format!("name:{name}")
    } else {
        uid.to_string()
    }
}

/// Validates a `NodeRef` at `field`.
pub fn node(
    node: Option<&NodeRef>,
    field: &str,
    require_uid: bool,
) -> Result<(NodeRef, NodeSpec), String> {
    let Some(n) = node else {
        return Err(format!("{field}: required"));
    };
    if n.name.trim().is_empty() {
        return Err(format!("{field}.name: required"));
    }
    if require_uid && n.uid.trim().is_empty() {
        return Err(format!("{field}.uid: required"));
    }
    if !n.provider_id.is_empty() && !n.provider_id.starts_with("azure://") {
        return Err(format!(
            "{field}.provider_id: {:?} is not an Azure providerID (azure:///subscriptions/...)",
            n.provider_id
        ));
    }
    let mut ips = Vec::with_capacity(n.internal_ips.len());
    for (i, ip) in n.internal_ips.iter().enumerate() {
        let parsed: IpAddr = ip
            .trim()
            .parse()
            .map_err(|_| format!("{field}.internal_ips[{i}]: {ip:?} is not an IP address"))?;
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

/// Validates a settable admin state at `field`: DOWN or NONE.
pub fn admin(value: i32, field: &str) -> Result<Admin, String> {
    match AdminState::try_from(value) {
        Ok(AdminState::Down) => Ok(Admin::Down),
        Ok(AdminState::None) => Ok(Admin::None),
        _ => Err(format!("{field}: must be DOWN or NONE")),
    }
}

/// Validates a stream desired state at `field`.
pub fn desired(d: &NodeDesiredState, field: &str) -> Result<Desired, String> {
    let (node, spec) = node(d.node.as_ref(), &format!("{field}.node"), true)?;
    let desired = admin(d.desired, &format!("{field}.desired"))?;
    let Some(version) = d.version else {
        return Err(format!("{field}.version: required"));
    };
    Ok(Desired {
        key: key_of(&node.uid, &node.name),
        node,
        spec,
        desired,
        version,
        reasons: d.reasons.clone(),
    })
}

/// Validates `wait_timeout`: default 60 s, at most 10 min.
pub fn wait_timeout(d: Option<&prost_types::Duration>) -> Result<Duration, String> {
    let Some(d) = d else {
        return Ok(Duration::from_secs(60));
    };
    if d.seconds < 0 || d.nanos < 0 {
        return Err("wait_timeout: must not be negative".into());
    }
    let dur = Duration::new(d.seconds as u64, d.nanos as u32);
    if dur > Duration::from_secs(600) {
        return Err("wait_timeout: at most 10 minutes".into());
    }
    if dur.is_zero() {
        return Ok(Duration::from_secs(60));
    }
    Ok(dur)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mk_desired() -> NodeDesiredState {
        NodeDesiredState {
            node: Some(NodeRef {
                name: "n1".into(),
                uid: "u1".into(),
                internal_ips: vec!["10.0.0.1".into(), "fd00::1".into()],
                ..Default::default()
            }),
            desired: AdminState::Down as i32,
            version: Some(Version { epoch: 1, seq: 1 }),
            ..Default::default()
        }
    }

    #[test]
    fn valid_desired_state_converts() {
        let d = desired(&mk_desired(), "delta").unwrap();
        assert_eq!(
            (d.key.as_str(), d.desired, d.spec.internal_ips.len()),
            ("u1", Admin::Down, 2)
        );
    }

    #[test]
    fn every_broken_field_is_named() {
        type Mutation = Box<dyn Fn(&mut NodeDesiredState)>;
        let cases: Vec<(Mutation, &str)> = vec![
            (Box::new(|d| d.node = None), "delta.node: required"),
            (
                Box::new(|d| d.node.as_mut().unwrap().name.clear()),
                "delta.node.name: required",
            ),
            (
                Box::new(|d| d.node.as_mut().unwrap().uid.clear()),
                "delta.node.uid: required",
            ),
            (
                Box::new(|d| d.node.as_mut().unwrap().internal_ips[1] = "nope".into()),
                "delta.node.internal_ips[1]",
            ),
            (
                Box::new(|d| d.node.as_mut().unwrap().provider_id = "aws:///x".into()),
                "delta.node.provider_id",
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
            (Box::new(|d| d.version = None), "delta.version: required"),
        ];
        for (mutate, expected) in cases {
            let mut d = mk_desired();
            mutate(&mut d);
            let e = desired(&d, "delta").unwrap_err();
            assert!(e.starts_with(expected), "{e} vs {expected}");
        }
    }

    #[test]
    fn tool_nodes_may_omit_uid_and_waits_are_bounded() {
        let (n, _) = node(
            Some(&NodeRef {
                name: "n".into(),
                ..Default::default()
            }),
            "node",
            false,
        )
        .unwrap();
        assert_eq!(key_of(&n.uid, &n.name), "name:n");
        assert_eq!(wait_timeout(None), Ok(Duration::from_secs(60)));
        assert!(
            wait_timeout(Some(&prost_types::Duration {
                seconds: 601,
                nanos: 0
            }))
            .is_err()
        );
        assert!(
            wait_timeout(Some(&prost_types::Duration {
                seconds: -1,
                nanos: 0
            }))
            .is_err()
        );
    }
}
