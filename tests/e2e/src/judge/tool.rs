//! The **tool answers** rule, shared by the whole-service simulation and the chaos soak (the
//! drain gate through the actuators, issue 26): every entry a `GetNodeAdminState(fresh)`
//! answer reports Down or None was in that state in ARM, with its operation complete, at some
//! moment between the question and the answer.

use super::chaos::{Rule, Violation};
use super::leader::Ms;
use super::{EntryKey, State};
use std::collections::BTreeMap;

/// One answer: which entries it reported in which state (entries answered without a state,
/// such as those of an LB with an operation running, say nothing and are left out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolRead {
    pub sent: Ms,
    pub answered: Ms,
    /// The node asked about (an index into the cluster's nodes).
    pub node: usize,
    /// The actuator that answered.
    pub host: String,
    pub entries: Vec<(EntryKey, State)>,
}

/// The entries an answer reports Down or None, keyed as ARM's log is (others say nothing).
pub fn answered(answer: cutover_proto::v1::GetNodeAdminStateResponse) -> Vec<(EntryKey, State)> {
    use cutover_proto::v1::AdminState;
    answer
        .entries
        .into_iter()
        .filter_map(|e| {
            let state = match AdminState::try_from(e.admin_state).ok()? {
                AdminState::Down => State::Down,
                AdminState::None => State::None,
                _ => return None,
            };
            let target = if e.ip_configuration_id.is_empty() {
                e.ip_address
            } else {
                e.ip_configuration_id
            };
            Some((super::key(&e.load_balancer, &e.pool, &target), state))
        })
        .collect()
}

/// The **tool answers** rule (issue 26: the drain gate through the actuator): every entry a
/// `GetNodeAdminState(fresh)` answer reports Down or None was in that state in ARM, with its
/// operation complete, at some moment between the question and the answer (within `slack`).
/// Entries answered without a state (an operation running) say nothing.
pub fn tool_answers(
    reads: &[ToolRead],
    arm: &[(Ms, EntryKey, State, bool)],
    nodes: &[aks_fixture::Node],
    slack: Ms,
) -> Vec<Violation> {
    let norm = |k: &EntryKey| {
        (
            k.0.to_ascii_lowercase(),
            k.1.to_ascii_lowercase(),
            k.2.to_ascii_lowercase(),
        )
    };
    let mut history: BTreeMap<_, Vec<(Ms, State)>> = BTreeMap::new();
    for (t, k, s, _) in arm {
        history.entry(norm(k)).or_default().push((*t, *s));
    }
    let mut out = Vec::new();
    for r in reads {
        let (from, to) = (r.sent.saturating_sub(slack), r.answered + slack);
        for (k, said) in &r.entries {
            let changes = history.get(&norm(k)).map_or(&[][..], Vec::as_slice);
            // The state in force at `from`, and every state it took until `to`.
            let at_from = changes
                .iter()
                .take_while(|(t, _)| *t <= from)
                .last()
                .map_or(State::None, |(_, s)| *s);
            let had: Vec<State> = std::iter::once(at_from)
                .chain(
                    changes
                        .iter()
                        .filter(|(t, _)| *t > from && *t <= to)
                        .map(|(_, s)| *s),
                )
                .collect();
            if !had.contains(said) {
                out.push(Violation {
                    rule: Rule::DrainGate,
                    text: format!(
                        "GetNodeAdminState(fresh) from {} about {} said {said:?} for {}/{} {} (asked {} ms, answered {} ms) while ARM had {had:?}",
                        r.host,
                        nodes.get(r.node).map_or("?", |n| n.name.as_str()),
                        k.0,
                        k.1,
                        k.2,
                        r.sent,
                        r.answered
                    ),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::key;

    #[test]
    fn a_tool_answer_must_match_arm_between_question_and_answer() {
        let entry = key("kubernetes", "kubernetes", "/NIC/ipconfig1");
        // ARM: Down effective at 1000 ms, None again at 3000 ms.
        let arm = vec![
            (1000, entry.clone(), State::Down, false),
            (3000, entry.clone(), State::None, false),
        ];
        let read = |sent, answered, state| ToolRead {
            sent,
            answered,
            node: 0,
            host: "actuator-1".into(),
            // The answer's names may differ in case from ARM's log.
            entries: vec![(key("Kubernetes", "kubernetes", "/nic/IPCONFIG1"), state)],
        };
        let judge = |r: ToolRead| tool_answers(&[r], &arm, &[], 10).len();
        // Down before ARM applied it: the early gate of issue 26.
        assert_eq!(judge(read(500, 900, State::Down)), 1);
        // Down while (or just as) it was effective.
        assert_eq!(judge(read(1500, 1600, State::Down)), 0);
        assert_eq!(judge(read(900, 995, State::Down)), 0);
        // None read across the restore: it held at some moment in between.
        assert_eq!(judge(read(2900, 3100, State::None)), 0);
        // None while ARM said Down throughout.
        assert_eq!(judge(read(2000, 2500, State::None)), 1);
        // Nothing known of an entry means the simulator's initial None.
        let other = ToolRead {
            entries: vec![(key("kubernetes", "kubernetes", "/other"), State::Down)],
            ..read(0, 10, State::Down)
        };
        assert_eq!(judge(other), 1);
    }
}
