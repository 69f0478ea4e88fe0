//! Small builders and checks shared by the assignors' unit tests.

use super::{GroupAssignment, GroupSubscription, MemberSubscription};

/// A group with `topics` (name, partitions) and `members` (id, subscribed topics).
pub fn group(topics: &[(&str, u32)], members: &[(&str, &[&str])]) -> GroupSubscription {
    let mut g = GroupSubscription::new();
    for (t, n) in topics {
        g = g.with_topic(*t, *n);
    }
    for (id, subs) in members {
        g = g.with_member(MemberSubscription::new(*id, subs.iter().copied()));
    }
    g
}

/// Every member's partitions as `"member: topic-p topic-p"`.
pub fn lists(a: &GroupAssignment) -> Vec<String> {
    a.iter()
        .map(|(m, p)| {
            p.iter()
                .fold(format!("{m}:"), |s, (t, p)| format!("{s} {t}-{p}"))
        })
        .collect()
}
