//! Pure rendering of actuator answers as aligned tables or JSON. No I/O, so every shape is
//! unit-tested.

use crate::escape;
use cutover_proto::v1::{
    AdminState, EntryRef, GetNodeAdminStateResponse, HeldNode, ListHeldEntriesResponse, NodeRef,
    NodeResult, ResultPhase, Version,
};
use serde_json::{Value, json};

/// Azure's spelling of an admin state.
pub fn state_name(state: i32) -> &'static str {
    match AdminState::try_from(state) {
        Ok(AdminState::None) => "None",
        Ok(AdminState::Down) => "Down",
        Ok(AdminState::Up) => "Up",
        Ok(AdminState::Unspecified) | Err(_) => "-",
    }
}

fn phase_name(phase: i32) -> &'static str {
    match ResultPhase::try_from(phase) {
        Ok(ResultPhase::Accepted) => "Accepted",
        Ok(ResultPhase::Effective) => "Effective",
        Ok(ResultPhase::Failed) => "Failed",
        Ok(ResultPhase::Superseded) => "Superseded",
        Ok(ResultPhase::Unspecified) | Err(_) => "Queued",
    }
}

fn timestamp(ts: Option<&prost_types::Timestamp>) -> Option<String> {
    let ts = ts?;
    jiff::Timestamp::new(ts.seconds, ts.nanos)
        .ok()
        .map(|t| t.to_string())
}

fn version(v: Option<&Version>) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{}.{}", v.epoch, v.seq))
}

/// Lays rows out in columns separated by two spaces, headers first. Cells are escaped: they
/// hold what the actuator sent.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| escape::text(c).into_owned()).collect())
        .collect();
    let rows = rows.as_slice();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}  "));
            }
        }
        out.trim_end().to_string()
    };
    let mut out = line(headers.to_vec());
    for row in rows {
        out.push('\n');
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out.push('\n');
    out
}

fn entry_rows(entries: &[EntryRef]) -> Vec<Vec<String>> {
    entries
        .iter()
        .map(|e| {
            let member = if e.ip_address.is_empty() {
                e.ip_configuration_id
                    .rsplit('/')
                    .next()
                    .unwrap_or_default()
                    .to_string()
            } else {
                e.ip_address.clone()
            };
            vec![
                e.load_balancer.clone(),
                e.pool.clone(),
                e.entry.clone(),
                member,
                state_name(e.admin_state).to_string(),
            ]
        })
        .collect()
}

const ENTRY_HEADERS: [&str; 5] = ["LOAD BALANCER", "POOL", "ENTRY", "MEMBER", "ADMIN STATE"];

fn entry_json(e: &EntryRef) -> Value {
    json!({
        "loadBalancerId": e.load_balancer_id,
        "loadBalancer": e.load_balancer,
        "pool": e.pool,
        "entry": e.entry,
        "ipConfigurationId": e.ip_configuration_id,
        "ipAddress": e.ip_address,
        "adminState": state_name(e.admin_state),
    })
}

fn node_json(n: Option<&NodeRef>) -> Value {
    n.map_or(Value::Null, |n| {
        json!({
            "name": n.name, "uid": n.uid, "providerId": n.provider_id,
            "internalIps": n.internal_ips, "zone": n.zone,
        })
    })
}

/// `get`: one row per entry, with the cache age and the desired state above.
pub fn get_table(resp: &GetNodeAdminStateResponse) -> String {
    let age = resp
        .age
        .as_ref()
        .map_or_else(|| "-".to_string(), |d| format!("{}s", d.seconds));
    let mut out = format!("desired: {}   data age: {age}\n", state_name(resp.desired));
    for note in &resp.notes {
        out.push_str(&format!("note: {}\n", escape::text(note)));
    }
    if resp.entries.is_empty() {
        out.push_str("no backend entries found for this node\n");
    } else {
        out.push_str(&table(&ENTRY_HEADERS, &entry_rows(&resp.entries)));
    }
    out
}

pub fn get_json(resp: &GetNodeAdminStateResponse) -> Value {
    json!({
        "desired": state_name(resp.desired),
        "ageSeconds": resp.age.as_ref().map(|d| d.seconds),
        "notes": resp.notes,
        "entries": resp.entries.iter().map(entry_json).collect::<Vec<_>>(),
    })
}

/// One line per result, for `set` and `watch`.
pub fn result_table(results: &[NodeResult]) -> String {
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            vec![
                timestamp(r.at.as_ref()).unwrap_or_else(|| "-".into()),
                r.node.as_ref().map(|n| n.name.clone()).unwrap_or_default(),
                version(r.version.as_ref()),
                state_name(r.desired).to_string(),
                phase_name(r.phase).to_string(),
                r.entries.len().to_string(),
                if r.will_retry {
                    format!("{} (will retry)", r.reason)
                } else {
                    r.reason.clone()
                },
            ]
        })
        .collect();
    table(
        &[
            "TIME", "NODE", "VERSION", "DESIRED", "PHASE", "ENTRIES", "REASON",
        ],
        &rows,
    )
}

pub fn result_json(r: &NodeResult) -> Value {
    json!({
        "node": node_json(r.node.as_ref()),
        "version": version(r.version.as_ref()),
        "desired": state_name(r.desired),
        "phase": phase_name(r.phase),
        "reason": r.reason,
        "willRetry": r.will_retry,
        "at": timestamp(r.at.as_ref()),
        "receivedAt": timestamp(r.received_at.as_ref()),
        "entries": r.entries.iter().map(entry_json).collect::<Vec<_>>(),
    })
}

/// `list`: one row per held node.
pub fn held_table(resp: &ListHeldEntriesResponse) -> String {
    if resp.nodes.is_empty() {
        return "no entries held Down\n".to_string();
    }
    let rows: Vec<Vec<String>> = resp
        .nodes
        .iter()
        .map(|h: &HeldNode| {
            vec![
                h.node.as_ref().map(|n| n.name.clone()).unwrap_or_default(),
                h.source.clone(),
                if h.requester.is_empty() {
                    "-".to_string()
                } else {
                    h.requester.clone()
                },
                h.reasons.join(","),
                version(h.version.as_ref()),
                timestamp(h.since.as_ref()).unwrap_or_else(|| "-".into()),
                h.entries.len().to_string(),
                if h.effective { "yes" } else { "no" }.to_string(),
            ]
        })
        .collect();
    table(
        &[
            "NODE",
            "SOURCE",
            "BY",
            "REASONS",
            "VERSION",
            "SINCE",
            "ENTRIES",
            "EFFECTIVE",
        ],
        &rows,
    )
}

pub fn held_json(resp: &ListHeldEntriesResponse) -> Value {
    Value::Array(
        resp.nodes
            .iter()
            .map(|h| {
                json!({
                    "node": node_json(h.node.as_ref()),
                    "source": h.source,
                    "requester": h.requester,
                    "reasons": h.reasons,
                    "version": version(h.version.as_ref()),
                    "since": timestamp(h.since.as_ref()),
                    "effective": h.effective,
                    "entries": h.entries.iter().map(entry_json).collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(pool: &str, ip: &str, state: AdminState) -> EntryRef {
        EntryRef {
            load_balancer_id: "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/loadBalancers/kubernetes".into(),
            load_balancer: "kubernetes".into(),
            pool: pool.into(),
            entry: "aks-a".into(),
            ip_configuration_id: if ip.is_empty() {
                "/subscriptions/s/.../networkInterfaces/nic/ipConfigurations/ipconfig1".into()
            } else {
                String::new()
            },
            ip_address: ip.into(),
            admin_state: state as i32,
        }
    }

    #[test]
    fn tables_align_columns() {
        let out = table(&["A", "LONGER"], &[vec!["xyz".into(), "1".into()]]);
        assert_eq!(out, "A    LONGER\nxyz  1\n");
    }

    #[test]
    fn get_shows_each_entry_with_member_and_state() {
        let resp = GetNodeAdminStateResponse {
            entries: vec![
                entry("kubernetes", "10.224.0.4", AdminState::Down),
                entry("kubernetes-IPv6", "", AdminState::None),
            ],
            age: Some(prost_types::Duration {
                seconds: 3,
                nanos: 0,
            }),
            desired: AdminState::Down as i32,
            notes: vec!["resolved by name only".into()],
        };
        let out = get_table(&resp);
        assert!(out.starts_with("desired: Down   data age: 3s\nnote: resolved by name only\n"));
        assert!(out.contains("kubernetes-IPv6  aks-a  ipconfig1"), "{out}");
        assert!(out.contains("10.224.0.4  Down"), "{out}");
        let js = get_json(&resp);
        assert_eq!(js["entries"][1]["adminState"], "None");
        assert_eq!(js["ageSeconds"], 3);
    }

    #[test]
    fn results_show_phase_version_and_retry() {
        let r = NodeResult {
            node: Some(NodeRef {
                name: "aks-a".into(),
                ..Default::default()
            }),
            version: Some(Version { epoch: 3, seq: 17 }),
            desired: AdminState::Down as i32,
            phase: ResultPhase::Failed as i32,
            reason: "429 SubscriptionRequestsThrottled".into(),
            will_retry: true,
            at: Some(prost_types::Timestamp {
                seconds: 1_700_000_000,
                nanos: 0,
            }),
            ..Default::default()
        };
        let out = result_table(std::slice::from_ref(&r));
        assert!(out.contains("2023-11-14T22:13:20Z  aks-a  3.17     Down     Failed  0        429 SubscriptionRequestsThrottled (will retry)"), "{out}");
        assert_eq!(result_json(&r)["phase"], "Failed");
        assert_eq!(result_json(&r)["version"], "3.17");
    }

    #[test]
    fn empty_answers_say_so() {
        assert_eq!(
            held_table(&ListHeldEntriesResponse::default()),
            "no entries held Down\n"
        );
        assert!(get_table(&GetNodeAdminStateResponse::default()).contains("no backend entries"));
        assert_eq!(held_json(&ListHeldEntriesResponse::default()), json!([]));
    }

    /// A held node whose name, reason and source were written by someone hostile renders as
    /// inert text, in the table and in JSON alike.
    #[test]
    fn text_from_the_network_never_reaches_the_terminal_raw() {
        let evil = "aks\u{1b}]0;pwned\u{7}\u{1b}[2J\nforged\u{9b}1m\u{202e}";
        let resp = ListHeldEntriesResponse {
            nodes: vec![HeldNode {
                node: Some(NodeRef {
                    name: evil.into(),
                    ..Default::default()
                }),
                source: evil.into(),
                reasons: vec![evil.into()],
                entries: vec![EntryRef {
                    pool: evil.into(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        // The table's own line breaks are the only control characters left.
        let inert = |t: &str| t.lines().all(|l| !l.chars().any(escape::is_unsafe));
        let out = held_table(&resp);
        assert!(inert(&out), "{out:?}");
        assert_eq!(out.lines().count(), 2, "{out}");
        assert!(out.contains("aks\\u{1b}]0;pwned\\u{7}"), "{out}");
        let get = get_table(&GetNodeAdminStateResponse {
            notes: vec![evil.into()],
            entries: resp.nodes[0].entries.clone(),
            ..Default::default()
        });
        assert!(inert(&get), "{get:?}");
        let js = escape::json(&held_json(&resp));
        assert!(!js.chars().any(escape::is_unsafe), "{js:?}");
        let back: Value = serde_json::from_str(&js).unwrap();
        assert_eq!(back[0]["node"]["name"], evil);
    }
}
