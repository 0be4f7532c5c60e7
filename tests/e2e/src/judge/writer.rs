//! The **one writer per LB** rule, shared by the whole-service simulation and the chaos soak:
//! at most one actuator owns an LB at a time, as the actuators' own state says, except within
//! [`WriterBounds::dual_owner_ms`]; and every ARM write that succeeded was sent by an actuator
//! that owned the LB then, or landed at most [`WriterBounds::in_flight_ms`] after it stopped
//! owning it while another held it (a write already on the wire; one landing later while
//! nobody else held the LB is measured, not judged: it wrote over no one). Both are measured.
//! The simulation tells writers apart by their simulated host, the soak by the replica each
//! request's `User-Agent` names.

use super::chaos::{Rule, Violation};
use super::leader::Ms;
use std::collections::BTreeMap;

/// One ARM write (a PUT of a load balancer or pool), by the actuator that sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArmWrite {
    pub at: Ms,
    pub lb: String,
    /// The replica that sent it.
    pub writer: String,
    pub status: u16,
}

/// The stated bounds of the rule.
#[derive(Debug, Clone, Copy)]
pub struct WriterBounds {
    /// Two owners of one LB at once, at most this long.
    pub dual_owner_ms: Ms,
    /// A write sent while owned lands at most this long after the ownership ended.
    pub in_flight_ms: Ms,
}

/// Ownership intervals per (LB, host): `[from, until)`.
fn intervals(
    ownership: &[(Ms, String, String, bool)],
    end: Ms,
) -> BTreeMap<(String, String), Vec<(Ms, Ms)>> {
    let mut open: BTreeMap<(String, String), Ms> = BTreeMap::new();
    let mut out: BTreeMap<(String, String), Vec<(Ms, Ms)>> = BTreeMap::new();
    for (t, host, lb, owns) in ownership {
        let k = (lb.clone(), host.clone());
        match (*owns, open.remove(&k)) {
            (true, None) => {
                open.insert(k, *t);
            }
            (true, Some(from)) => {
                open.insert(k, from);
            }
            (false, Some(from)) => out.entry(k).or_default().push((from, *t)),
            (false, None) => {}
        }
    }
    for (k, from) in open {
        out.entry(k).or_default().push((from, end));
    }
    out
}

/// The LB name the ungranted mode is recorded under (it covers every LB).
pub const ANY_LB: &str = "*";

/// The **one writer per LB** rule: (longest time two actuators owned one LB by grant, latest
/// a successful write completed after its sender stopped owning, violations). A replica
/// without any grant (`ungranted`, LB [`ANY_LB`]) may write only while no other holds a grant
/// for that LB.
pub fn one_writer(
    ownership: &[(Ms, String, String, bool)],
    ungranted: &[(Ms, String, String, bool)],
    writes: &[ArmWrite],
    end: Ms,
    b: &WriterBounds,
) -> (Ms, Ms, Vec<Violation>) {
    let owned = intervals(ownership, end);
    let free = intervals(ungranted, end);
    let within = |spans: Option<&Vec<(Ms, Ms)>>, t: Ms| {
        spans.is_some_and(|s| s.iter().any(|&(f, u)| f <= t && t < u))
    };
    let mut out = Vec::new();
    let mut dual = 0;
    let keys: Vec<&(String, String)> = owned.keys().collect();
    for (i, a) in keys.iter().enumerate() {
        for bkey in &keys[i + 1..] {
            if a.0 != bkey.0 {
                continue;
            }
            for &(f1, u1) in &owned[*a] {
                for &(f2, u2) in &owned[*bkey] {
                    let overlap = u1.min(u2).saturating_sub(f1.max(f2));
                    dual = dual.max(overlap);
                    if overlap > b.dual_owner_ms {
                        out.push(Violation {
                            rule: Rule::OneWriter,
                            text: format!(
                                "{} owned by {} and {} together for {overlap} ms from {} ms (bound {} ms)",
                                a.0, a.1, bkey.1, f1.max(f2), b.dual_owner_ms
                            ),
                        });
                    }
                }
            }
        }
    }
    let mut late = 0;
    for w in writes.iter().filter(|w| (200..300).contains(&w.status)) {
        let k = (w.lb.clone(), w.writer.clone());
        let spans = owned.get(&k).map_or(&[][..], Vec::as_slice);
        let owned_at = spans.iter().any(|&(f, u)| f <= w.at && w.at < u);
        if owned_at {
            continue;
        }
        if within(free.get(&(ANY_LB.to_owned(), w.writer.clone())), w.at) {
            let granted_elsewhere: Vec<&str> = owned
                .iter()
                .filter(|((lb, h), s)| *lb == w.lb && *h != w.writer && within(Some(s), w.at))
                .map(|((_, h), _)| h.as_str())
                .collect();
            if granted_elsewhere.is_empty() {
                continue;
            }
            out.push(Violation {
                rule: Rule::OneWriter,
                text: format!(
                    "{} written by {} at {} ms without any grant while {} held it",
                    w.lb,
                    w.writer,
                    w.at,
                    granted_elsewhere.join(", ")
                ),
            });
            continue;
        }
        let lost = spans
            .iter()
            .filter(|&&(_, u)| u <= w.at)
            .map(|&(_, u)| u)
            .max();
        // Another replica held the LB between the writer's loss and the write landing: two
        // writers (the etag refuses the late one only if the new owner wrote first).
        let overlapped = lost.is_some_and(|l| {
            owned.iter().any(|((lb, h), s)| {
                *lb == w.lb && *h != w.writer && s.iter().any(|&(f, u)| f < w.at && u > l)
            })
        });
        match lost {
            Some(l) if !overlapped || w.at - l <= b.in_flight_ms => late = late.max(w.at - l),
            _ => out.push(Violation {
                rule: Rule::OneWriter,
                text: format!(
                    "{} written by {} at {} ms ({}) without owning it{}",
                    w.lb,
                    w.writer,
                    w.at,
                    w.status,
                    lost.map_or(" ever before".to_owned(), |l| format!(
                        " ({} ms after it stopped, while another held it)",
                        w.at - l
                    ))
                ),
            }),
        }
    }
    (dual, late, out)
}

/// The LB name in an ARM path (`.../loadBalancers/<name>[/...]`).
pub fn lb_of(path: &str) -> String {
    let mut parts = path.split('/');
    while let Some(p) = parts.next() {
        if p.eq_ignore_ascii_case("loadBalancers") {
            return parts
                .next()
                .unwrap_or_default()
                .split('?')
                .next()
                .unwrap_or_default()
                .to_owned();
        }
    }
    String::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: WriterBounds = WriterBounds {
        dual_owner_ms: 50,
        in_flight_ms: 2_000,
    };

    fn arm(at: Ms, lb: &str, writer: &str) -> ArmWrite {
        ArmWrite {
            at,
            lb: lb.into(),
            writer: writer.into(),
            status: 201,
        }
    }

    fn own(t: Ms, host: &str, owns: bool) -> (Ms, String, String, bool) {
        (t, host.into(), "kubernetes".into(), owns)
    }

    #[test]
    fn a_clean_handover_has_no_dual_owner_and_writes_while_owned_pass() {
        let o = [
            own(0, "a", true),
            own(4_000, "a", false),
            own(5_000, "b", true),
        ];
        let w = [
            arm(100, "kubernetes", "a"),
            arm(4_500, "kubernetes", "a"),
            arm(9_000, "kubernetes", "b"),
        ];
        let (dual, late, v) = one_writer(&o, &[], &w, 10_000, &BOUNDS);
        assert_eq!((dual, late), (0, 500));
        assert!(v.is_empty(), "{v:?}");
    }

    #[test]
    fn overlapping_owners_and_writes_without_ownership_are_judged() {
        let o = [
            own(0, "a", true),
            own(3_000, "b", true),
            own(3_400, "a", false),
        ];
        let (dual, _, v) = one_writer(&o, &[], &[], 10_000, &BOUNDS);
        assert_eq!(dual, 400);
        assert_eq!(v.len(), 1, "{v:?}");
        // A write long after losing the LB while another held it, and one by a replica that
        // never owned it.
        let o = [
            own(0, "a", true),
            own(1_000, "a", false),
            own(4_000, "b", true),
        ];
        let w = [arm(9_000, "kubernetes", "a"), arm(9_500, "kubernetes", "c")];
        let (_, _, v) = one_writer(&o, &[], &w, 10_000, &BOUNDS);
        assert_eq!(v.len(), 2, "{v:?}");
        // The same late write with nobody else holding the LB is measured only (dst seed
        // 4105: a frozen replica's PUT held in the network 4 s, landing after its grant had
        // lapsed, before anyone else had it).
        let o = [own(0, "a", true), own(1_000, "a", false)];
        let (_, late, v) = one_writer(&o, &[], &w[..1], 10_000, &BOUNDS);
        assert!(v.is_empty(), "{v:?}");
        assert_eq!(late, 8_000);
        // A refused write (412, 429) is not a write.
        let mut refused = arm(9_000, "kubernetes", "a");
        refused.status = 412;
        assert!(
            one_writer(&o, &[], &[refused], 10_000, &BOUNDS)
                .2
                .is_empty()
        );
    }

    #[test]
    fn an_ungranted_replica_may_write_only_what_nobody_holds() {
        let free = [(0, "c".to_owned(), ANY_LB.to_owned(), true)];
        let w = [arm(500, "kubernetes", "c")];
        assert!(one_writer(&[], &free, &w, 10_000, &BOUNDS).2.is_empty());
        let o = [own(0, "a", true)];
        let (_, _, v) = one_writer(&o, &free, &w, 10_000, &BOUNDS);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(
            v[0].text.contains("without any grant while a held it"),
            "{v:?}"
        );
    }
}
