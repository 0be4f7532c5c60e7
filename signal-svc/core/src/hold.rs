//! Durable tool holds: a tool asks any actuator replica to hold a node `Down`; the actuator
//! relays it (`HoldRequest`) and signal-svc stores it on the Node itself, as the annotation
//! [`HOLD_ANNOTATION`]. The Node is a store the cluster already has and signal-svc already
//! watches, so a hold survives every restart and reaches every actuator replica as an
//! ordinary desired state.
//!
//! The annotation value is a small JSON object, `{"reason": "...", "by": "...", "since":
//! "<RFC 3339>"}`. Only a well-formed value is a trigger; anything else is reported once and
//! ignored (an unreadable hold must not cut a node nobody meant to cut).

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// The Node annotation that stores a hold; also the reason key of a held node's desired state.
pub const HOLD_ANNOTATION: &str = "cutover.io/hold";
/// Longest hold reason (and requester), in characters.
pub const MAX_HOLD_TEXT: usize = 256;
/// An annotation value longer than this is not ours (reason + requester + time + JSON).
const MAX_ANNOTATION: usize = 2 * MAX_HOLD_TEXT * 6 + 128;

/// One hold, as stored on the Node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hold {
    pub reason: String,
    pub by: String,
    pub since: Timestamp,
}

impl Hold {
    /// The annotation value.
    pub fn to_annotation(&self) -> String {
        // Serialising three strings cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parses an annotation value; `Err` says why it is not a hold.
    pub fn parse(value: &str) -> Result<Self, String> {
        if value.len() > MAX_ANNOTATION {
            return Err(format!("value longer than {MAX_ANNOTATION} bytes"));
        }
        let hold: Hold = serde_json::from_str(value).map_err(|e| e.to_string())?;
        text("reason", &hold.reason)?;
        text("by", &hold.by)?;
        Ok(hold)
    }
}

/// At most [`MAX_HOLD_TEXT`] characters, none of them control or invisible formatting ones
/// (they end up in terminals through `cutoverctl`).
pub fn text(field: &str, value: &str) -> Result<(), String> {
    if value.chars().count() > MAX_HOLD_TEXT {
        return Err(format!("{field}: longer than {MAX_HOLD_TEXT} characters"));
    }
    if value.chars().any(|c| c.is_control() || is_invisible(c)) {
        return Err(format!(
            "{field}: contains control or invisible formatting characters"
        ));
    }
    Ok(())
}

fn is_invisible(c: char) -> bool {
    matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}')
}

/// A Kubernetes node name: a DNS-1123 subdomain (lowercase alphanumerics, '-' and '.', each
/// label starting and ending alphanumeric, at most 253 characters).
pub fn node_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    if ok {
        Ok(())
    } else {
        Err("node name is not a DNS-1123 subdomain".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_round_trips_through_its_annotation() {
        let h = Hold {
            reason: "ticket 1234".into(),
            by: "spiffe://cluster.local/ns/ops/sa/cutoverctl".into(),
            since: "2026-11-23T13:00:00Z".parse().unwrap(),
        };
        let v = h.to_annotation();
        assert!(v.contains("\"since\":\"2026-11-23T13:00:00Z\""), "{v}");
        assert_eq!(Hold::parse(&v).unwrap(), h);
    }

    #[test]
    fn malformed_values_are_not_holds() {
        for bad in [
            "",
            "yes",
            "{}",
            r#"{"reason":"r","by":"b"}"#,
            r#"{"reason":"r","by":"b","since":"yesterday"}"#,
            r#"{"reason":"r","by":"b","since":"2026-11-23T13:00:00Z","extra":1}"#,
            r#"{"reason":"a\u001b[2Jb","by":"b","since":"2026-11-23T13:00:00Z"}"#,
        ] {
            assert!(Hold::parse(bad).is_err(), "{bad}");
        }
        let long = format!(
            r#"{{"reason":"{}","by":"b","since":"2026-11-23T13:00:00Z"}}"#,
            "x".repeat(MAX_HOLD_TEXT + 1)
        );
        assert!(Hold::parse(&long).is_err());
    }

    #[test]
    fn node_names_are_dns_1123_subdomains() {
        for ok in ["aks-np-1", "a", "node.example.com", "0-1"] {
            assert!(node_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Aks", "-a", "a-", "a..b", "a_b", &"a".repeat(254)] {
            assert!(node_name(bad).is_err(), "{bad}");
        }
    }
}
