//! Spot eviction notices.
//!
//! AKS node-problem-detector records `PreemptScheduled` Warning events whose message is the
//! IMDS scheduled event (`Scheduled: <NotBefore RFC 1123 GMT>. DurationInSeconds: ...`, or
//! `Preempt Scheduled: ...` on other script versions). The same reason is used for IMDS
//! failures (`IMDS query failed, exit code: 28 ...`), so the message, not the reason, decides.
//! Newer builds also set a node condition (`PreemptionScheduled` / `VMEventScheduled`).

use jiff::Timestamp;

/// Reason of the core/v1 events we watch.
pub const EVENT_REASON: &str = "PreemptScheduled";
/// Node condition on newer AKS builds (reason `SpotEvictionIncoming`).
pub const CONDITION_PREEMPTION: &str = "PreemptionScheduled";
/// Consolidated scheduled-events condition (all event types; only `Preempt` counts).
pub const CONDITION_VM_EVENT: &str = "VMEventScheduled";

/// A parsed eviction notice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Notice {
    /// The NotBefore deadline; `now` when it could not be parsed (fail closed: act at once).
    pub deadline: Timestamp,
    /// Whether `deadline` came from the message.
    pub deadline_parsed: bool,
}

/// Parses an event message. `None` means "not a notice" (IMDS noise, `Started.`, other text).
pub fn parse_event_message(message: &str, now: Timestamp) -> Option<Notice> {
    let msg = message.trim_start();
    let rest = msg
        .strip_prefix("Preempt Scheduled:")
        .or_else(|| msg.strip_prefix("Scheduled:"))?;
    Some(notice_from_deadline_text(rest, now))
}

/// Parses a node condition. Only a `True` condition of a known type is a notice.
pub fn parse_condition(type_: &str, status: &str, message: &str, now: Timestamp) -> Option<Notice> {
    if status != "True" {
        return None;
    }
    match type_ {
        CONDITION_PREEMPTION => {
            // The message format is not guaranteed; a true condition is the notice itself.
            let msg = message.trim_start();
            Some(match msg.strip_prefix("Preempt Scheduled:") {
                Some(rest) => notice_from_deadline_text(rest, now),
                None => Notice {
                    deadline: now,
                    deadline_parsed: false,
                },
            })
        }
        // Consolidated condition: true for Reboot/Redeploy/Freeze too; only Preempt counts.
        CONDITION_VM_EVENT => {
            let rest = message.trim_start().strip_prefix("Preempt Scheduled:")?;
            Some(notice_from_deadline_text(rest, now))
        }
        _ => None,
    }
}

fn notice_from_deadline_text(rest: &str, now: Timestamp) -> Notice {
    // RFC 1123 dates contain no '.', so the deadline ends at the first one.
    let text = rest.split('.').next().unwrap_or("").trim();
    match parse_rfc1123_gmt(text) {
        Some(deadline) => Notice {
            deadline,
            deadline_parsed: true,
        },
        None => Notice {
            deadline: now,
            deadline_parsed: false,
        },
    }
}

/// Parses `[Www, ]D Mon YYYY HH:MM:SS GMT` (also `UTC`, `UT`, `Z`, `+0000`). Other zones
/// are refused: a deadline we cannot place in time is treated as "now" by the caller.
pub fn parse_rfc1123_gmt(text: &str) -> Option<Timestamp> {
    let text = match text.split_once(',') {
        Some((weekday, rest)) if weekday.trim().len() == 3 => rest,
        Some(_) => return None,
        None => text,
    };
    let mut parts = text.split_whitespace();
    let day: i8 = parts.next()?.parse().ok()?;
    let month = month_number(parts.next()?)?;
    let year: i16 = parts.next()?.parse().ok()?;
    let hms = parts.next()?;
    let zone = parts.next()?;
    if parts.next().is_some() || !matches!(zone, "GMT" | "UTC" | "UT" | "Z" | "+0000") {
        return None;
    }
    let mut hms = hms.split(':');
    let hour: i8 = hms.next()?.parse().ok()?;
    let minute: i8 = hms.next()?.parse().ok()?;
    let second: i8 = hms.next()?.parse().ok()?;
    if hms.next().is_some() {
        return None;
    }
    let dt = jiff::civil::DateTime::new(year, month, day, hour, minute, second, 0).ok()?;
    dt.to_zoned(jiff::tz::TimeZone::UTC)
        .ok()
        .map(|z| z.timestamp())
}

fn month_number(name: &str) -> Option<i8> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    MONTHS
        .iter()
        .position(|m| m.eq_ignore_ascii_case(name))
        .and_then(|i| i8::try_from(i + 1).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2026-08-01T05:40:00Z".parse().unwrap()
    }
    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn event_messages() {
        let cases: &[(&str, Option<(&str, bool)>)] = &[
            (
                "Scheduled: Wed, 26 Feb 2025 10:13:13 GMT. DurationInSeconds: -1. Virtual machine is being evicted. For more information, see https://aka.ms/aks/scheduledevents.",
                Some(("2025-02-26T10:13:13Z", true)),
            ),
            (
                "Preempt Scheduled: Sat, 01 Aug 2026 05:41:02 GMT. For more information, see https://aka.ms/aks-spot-eviction. EventId: 3C1E3E5E-0F0E-4E5B-9C62-1B6F4E1D2A10",
                Some(("2026-08-01T05:41:02Z", true)),
            ),
            (
                "Preempt Scheduled: Sat, 1 Aug 2026 05:41:02 GMT. DurationInSeconds: -1.",
                Some(("2026-08-01T05:41:02Z", true)),
            ),
            // Zones other than GMT cannot be trusted: act now.
            (
                "Scheduled: Sat, 01 Aug 2026 05:41:02 PST. DurationInSeconds: -1.",
                Some(("2026-08-01T05:40:00Z", false)),
            ),
            (
                "Scheduled: . DurationInSeconds: -1.",
                Some(("2026-08-01T05:40:00Z", false)),
            ),
            (
                "Scheduled: not a date",
                Some(("2026-08-01T05:40:00Z", false)),
            ),
            (
                "IMDS query failed, exit code: 28\nConnection timed out after 24 seconds.",
                None,
            ),
            ("Started. DurationInSeconds: -1.", None),
            ("", None),
            ("Node condition VMEventScheduled is now: True", None),
        ];
        for (msg, want) in cases {
            let got = parse_event_message(msg, now());
            let want = want.map(|(t, p)| Notice {
                deadline: ts(t),
                deadline_parsed: p,
            });
            assert_eq!(got, want, "{msg:?}");
        }
    }

    #[test]
    fn conditions() {
        let n = now();
        let preempt = "Preempt Scheduled: Sat, 01 Aug 2026 05:41:02 GMT. For more information, see https://aka.ms/aks-spot-eviction. EventId: x";
        assert_eq!(
            parse_condition(CONDITION_PREEMPTION, "True", preempt, n),
            Some(Notice {
                deadline: ts("2026-08-01T05:41:02Z"),
                deadline_parsed: true
            })
        );
        assert_eq!(
            parse_condition(CONDITION_PREEMPTION, "False", preempt, n),
            None
        );
        assert_eq!(
            parse_condition(CONDITION_PREEMPTION, "True", "garbage", n),
            Some(Notice {
                deadline: n,
                deadline_parsed: false
            })
        );
        let vm = "Preempt Scheduled: Wed, 26 Feb 2025 10:13:13 GMT. DurationInSeconds: -1.  For more information, see https://aka.ms/aks/scheduledevents.";
        assert!(parse_condition(CONDITION_VM_EVENT, "True", vm, n).is_some());
        assert_eq!(
            parse_condition(
                CONDITION_VM_EVENT,
                "True",
                "Reboot Scheduled: Wed, 26 Feb 2025 10:13:13 GMT.",
                n
            ),
            None
        );
        assert_eq!(parse_condition(CONDITION_VM_EVENT, "False", vm, n), None);
        assert_eq!(parse_condition("Ready", "True", vm, n), None);
    }

    #[test]
    fn rfc1123_edge_cases() {
        assert_eq!(
            parse_rfc1123_gmt("Mon, 19 Sep 2016 18:29:47 GMT"),
            Some(ts("2016-09-19T18:29:47Z"))
        );
        assert_eq!(
            parse_rfc1123_gmt("19 Sep 2016 18:29:47 UTC"),
            Some(ts("2016-09-19T18:29:47Z"))
        );
        assert_eq!(parse_rfc1123_gmt("Mon, 31 Feb 2016 18:29:47 GMT"), None);
        assert_eq!(parse_rfc1123_gmt("Mon, 19 Sep 2016 25:29:47 GMT"), None);
        assert_eq!(parse_rfc1123_gmt("Mon, 19 Sep 2016 18:29:47 +0200"), None);
        assert_eq!(parse_rfc1123_gmt("Monday, 19 Sep 2016 18:29:47 GMT"), None);
    }

    /// Any date in range formatted as RFC 1123 GMT parses back to itself, with or without the
    /// weekday; any text at all answers without panicking.
    #[test]
    fn rfc1123_round_trips_and_never_panics() {
        fn prop(secs: u32, junk: String) -> bool {
            let t = Timestamp::from_second(i64::from(secs)).unwrap();
            let z = t.to_zoned(jiff::tz::TimeZone::UTC);
            let full = z.strftime("%a, %d %b %Y %H:%M:%S GMT").to_string();
            let bare = z.strftime("%d %b %Y %H:%M:%S UTC").to_string();
            let _ = parse_rfc1123_gmt(&junk);
            let _ = parse_event_message(&format!("Scheduled: {junk}"), now());
            let _ = parse_condition(CONDITION_VM_EVENT, "True", &junk, now());
            parse_rfc1123_gmt(&full) == Some(t) && parse_rfc1123_gmt(&bare) == Some(t)
        }
        quickcheck::QuickCheck::new()
            .tests(500)
            .quickcheck(prop as fn(u32, String) -> bool);
    }
}
