//! Spot eviction notices: only an eviction (`Preempt`) is acted on.
//!
//! The forms, with their sources:
//! - **Event** `PreemptScheduled` (core/v1, Warning), recorded by AKS node-problem-detector's
//!   `custom-scheduledevents-consolidated-preempt-plugin-monitor` (Preempt only). Its message is
//!   the IMDS scheduled event, `<EventStatus>: <NotBefore RFC 1123 GMT>. DurationInSeconds: <d>.
//!   <Description> For more information, see https://aka.ms/aks/scheduledevents.` (NotBefore
//!   empty once `Started`), or `Preempt Scheduled: ...` on other script versions (AKS NPD
//!   script `check_scheduledevent.sh`; contracts/kube.md 4.5). The same reason is used for IMDS
//!   failures (`IMDS query failed, exit code: 28 ...`, an observed AKS node dump), so the
//!   message, not the reason, decides.
//! - **Condition** `PreemptionScheduled` (reason `SpotEvictionIncoming`) on newer AKS builds.
//!   NPD forwards `<EventType> <EventStatus>[: <NotBefore>]. ...`; both the mandatory eviction
//!   (`Preempt Scheduled: <date>. ... EventId: <GUID>`, `Preempt Started.`) and the advisory
//!   Spot rebalance recommendation (`SpotRebalanceRecommendation Advisory[: ...]`) set it
//!   `True` with that reason, so neither the condition nor its reason alone proves an eviction
//!   (Azure/karpenter-provider-azure spot interruption handling, `parseNotice` and its tests:
//!   code-index ids 68876011990 and 68946380839; e2e "rebalance recommendation must not
//!   disrupt", id 68923108078; KPA PR #1829 `preemption.go`).
//! - **Condition** `VMEventScheduled` (consolidated, every event type, reason
//!   `VMEventScheduled`): `<EventType> <EventStatus>: <NotBefore>. DurationInSeconds: ...`
//!   (maksim-paskal/aks-node-termination-handler#98); only `Preempt` counts, the other IMDS
//!   types (`Freeze`, `Reboot`, `Redeploy`, `Terminate`) are known and not ours.
//!
//! `Scheduled` carries the NotBefore deadline (RFC 1123, GMT/UTC only; unparseable means
//! "now", fail closed); `Started` means the eviction is under way: act now. An advisory is
//! counted, never acted on; a form we do not know is logged once and counted, never acted on.
//! Whitespace runs are collapsed before matching, as KPA does.

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
    /// The NotBefore deadline; `now` when it could not be parsed (fail closed: act at once)
    /// or when the eviction has already started.
    pub deadline: Timestamp,
    /// Whether `deadline` is known: parsed from the message, or `now` for a started eviction.
    pub deadline_parsed: bool,
}

/// What a message says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reading {
    /// An eviction (Preempt scheduled or started): act.
    Notice(Notice),
    /// A Spot rebalance recommendation ("at risk"): count, do not act.
    Advisory,
    /// A known message that is not a notice (IMDS failure, another IMDS event type).
    Ignored,
    /// A form we do not know: log once, count, do not act.
    Unknown,
}

const ADVISORY: &str = "SpotRebalanceRecommendation Advisory";
const VM_EVENT_TYPES: [&str; 4] = ["Freeze", "Reboot", "Redeploy", "Terminate"];

/// Reads a `PreemptScheduled` event message.
pub fn read_event_message(message: &str, now: Timestamp) -> Reading {
    let msg = normalize(message);
    if let Some(r) = read_preempt(&msg, now) {
        return r;
    }
    // The preempt plugin writes the bare IMDS status (the event type is implied).
    if let Some(rest) = payload(&msg, "Scheduled") {
        return Reading::Notice(notice_from_deadline_text(rest, now));
    }
    if payload(&msg, "Started").is_some() {
        return started(now);
    }
    if payload(&msg, ADVISORY).is_some() {
        return Reading::Advisory;
    }
    if msg.starts_with("IMDS query failed") {
        return Reading::Ignored;
    }
    Reading::Unknown
}

/// Reads a node condition; `None` unless it is one of ours and `True`.
pub fn read_condition(type_: &str, status: &str, message: &str, now: Timestamp) -> Option<Reading> {
    if status != "True" || !matches!(type_, CONDITION_PREEMPTION | CONDITION_VM_EVENT) {
        return None;
    }
    let msg = normalize(message);
    if let Some(r) = read_preempt(&msg, now) {
        return Some(r);
    }
    if payload(&msg, ADVISORY).is_some() {
        return Some(Reading::Advisory);
    }
    let other_type = VM_EVENT_TYPES
        .iter()
        .any(|t| msg.strip_prefix(t).is_some_and(|r| r.starts_with(' ')));
    if type_ == CONDITION_VM_EVENT && other_type {
        return Some(Reading::Ignored);
    }
    Some(Reading::Unknown)
}

/// Parses an event message. `None` means "not a notice" (noise, advisory, unknown form).
pub fn parse_event_message(message: &str, now: Timestamp) -> Option<Notice> {
    match read_event_message(message, now) {
        Reading::Notice(n) => Some(n),
        _ => None,
    }
}

/// Parses a node condition. Only a `True` condition of a known type carrying an eviction is
/// a notice.
pub fn parse_condition(type_: &str, status: &str, message: &str, now: Timestamp) -> Option<Notice> {
    match read_condition(type_, status, message, now)? {
        Reading::Notice(n) => Some(n),
        _ => None,
    }
}

fn normalize(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `Preempt Scheduled[: date]` or `Preempt Started[...]`.
fn read_preempt(msg: &str, now: Timestamp) -> Option<Reading> {
    if let Some(rest) = payload(msg, "Preempt Scheduled") {
        return Some(Reading::Notice(notice_from_deadline_text(rest, now)));
    }
    payload(msg, "Preempt Started").map(|_| started(now))
}

fn started(now: Timestamp) -> Reading {
    Reading::Notice(Notice {
        deadline: now,
        deadline_parsed: true,
    })
}

/// The text after `header` when the header is followed by `:` (a payload) or ends the
/// sentence (`.` / `. ...`); header lookalikes (`Preempt ScheduledX`) do not match.
fn payload<'a>(msg: &'a str, header: &str) -> Option<&'a str> {
    let rest = msg.strip_prefix(header)?;
    if let Some(p) = rest.strip_prefix(':') {
        return Some(p);
    }
    (rest == "." || rest.starts_with(". ")).then_some("")
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
            // The eviction is under way: act now.
            (
                "Started: . DurationInSeconds: -1.",
                Some(("2026-08-01T05:40:00Z", true)),
            ),
            (
                "Started. DurationInSeconds: -1.",
                Some(("2026-08-01T05:40:00Z", true)),
            ),
            (
                "  Preempt   Scheduled:\tSat,  1 Aug 2026 05:41:02 GMT. ",
                Some(("2026-08-01T05:41:02Z", true)),
            ),
            (
                "SpotRebalanceRecommendation Advisory: . For more information",
                None,
            ),
            ("ScheduledSomething: Sat, 01 Aug 2026 05:41:02 GMT.", None),
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
        // A form we do not know is not acted on (it is counted by the index).
        assert_eq!(
            parse_condition(CONDITION_PREEMPTION, "True", "garbage", n),
            None
        );
        assert_eq!(
            parse_condition(CONDITION_PREEMPTION, "True", "Preempt Started.", n),
            Some(Notice {
                deadline: n,
                deadline_parsed: true
            })
        );
        assert_eq!(
            parse_condition(
                CONDITION_PREEMPTION,
                "True",
                "SpotRebalanceRecommendation Advisory: Sat, 01 Aug 2026 05:41:02 GMT.",
                n
            ),
            None,
            "a rebalance recommendation is not an eviction"
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

    /// Every form, as the index sees it (acted on, counted, or ignored).
    #[test]
    fn readings() {
        let n = now();
        let at = |s: &str| {
            Reading::Notice(Notice {
                deadline: ts(s),
                deadline_parsed: true,
            })
        };
        let started = Reading::Notice(Notice {
            deadline: n,
            deadline_parsed: true,
        });
        let ev = |m: &str| read_event_message(m, n);
        assert_eq!(ev("Preempt Started. For more information"), started);
        assert_eq!(
            ev("SpotRebalanceRecommendation Advisory. For more information, see x."),
            Reading::Advisory
        );
        assert_eq!(ev("IMDS query failed, exit code: 28"), Reading::Ignored);
        assert_eq!(
            ev("Node condition VMEventScheduled is now: True"),
            Reading::Unknown
        );
        assert_eq!(ev(""), Reading::Unknown);
        assert_eq!(
            ev("Preempt Advisory: Sat, 01 Aug 2026 05:41:02 GMT."),
            Reading::Unknown
        );

        let pc = |m: &str| read_condition(CONDITION_PREEMPTION, "True", m, n);
        assert_eq!(
            pc(
                "Preempt Scheduled: Sat, 01 Aug 2026 05:41:02 GMT. For more information, see https://aka.ms/aks-spot-eviction. EventId: x"
            ),
            Some(at("2026-08-01T05:41:02Z"))
        );
        assert_eq!(pc("Preempt Started: . For more information"), Some(started));
        assert_eq!(
            pc("SpotRebalanceRecommendation Advisory:"),
            Some(Reading::Advisory)
        );
        assert_eq!(
            pc(
                "SpotRebalanceRecommendation Advisory: Preempt Scheduled: Sat, 01 Aug 2026 05:41:02 GMT."
            ),
            Some(Reading::Advisory)
        );
        for unknown in [
            "SpotEvictionIncoming",
            "Unknown event: Preempt Scheduled: Sat, 01 Aug 2026 05:41:02 GMT.",
            "NotPreempt Scheduled: Sat, 01 Aug 2026 05:41:02 GMT.",
            "Preempt ScheduledSomething: x",
            "Preempt Started eventually.",
            "Terminate Scheduled: Sat, 01 Aug 2026 05:41:02 GMT.",
            "",
        ] {
            assert_eq!(pc(unknown), Some(Reading::Unknown), "{unknown:?}");
        }
        let vm = |m: &str| read_condition(CONDITION_VM_EVENT, "True", m, n);
        assert_eq!(
            vm(
                "Preempt Scheduled: Wed, 26 Feb 2025 10:13:13 GMT. DurationInSeconds: -1.  For more information, see https://aka.ms/aks/scheduledevents."
            ),
            Some(at("2025-02-26T10:13:13Z"))
        );
        for other in [
            "Reboot Scheduled: x.",
            "Freeze Scheduled: x.",
            "Redeploy Started.",
            "Terminate Scheduled: x.",
        ] {
            assert_eq!(vm(other), Some(Reading::Ignored), "{other:?}");
        }
        assert_eq!(
            vm("SpotRebalanceRecommendation Advisory: ."),
            Some(Reading::Advisory)
        );
        assert_eq!(vm("Something new: x"), Some(Reading::Unknown));
        assert_eq!(
            read_condition(CONDITION_VM_EVENT, "False", "VM has no scheduled event", n),
            None
        );
        assert_eq!(read_condition("Ready", "True", "Preempt Started.", n), None);
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
