//! The pure step of a round: from the ProcessQueue table and each topic's target, the change
//! to make to every queue. The round ([`super::round`]) then drives the I/O from that list.

use std::collections::BTreeMap;
use std::sync::Arc;

use rebalance_core::MessageQueue;

use crate::assignment::Unbalanced;
use crate::lease_terms::RemovalReason;
use crate::table::{ProcessQueueTable, within_topic};

/// Where a topic should go this round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Target {
    /// Hold exactly `mine`.
    Share {
        all: Arc<[MessageQueue]>,
        mine: Arc<[MessageQueue]>,
        fingerprint: u64,
    },
    /// Release everything of the topic, for `reason`. With `unbalanced`, the round is reported
    /// so even once all is released (the directory has not listed this client for too long:
    /// the other members have split its queues).
    ReleaseAll {
        reason: RemovalReason,
        unbalanced: Option<Unbalanced>,
    },
    /// Change nothing: the view is incomplete.
    Keep(Unbalanced),
    /// The inputs are those of the topic's last balanced round and its entries have not
    /// changed since ([`InputsMemo`](super::inputs_memo::InputsMemo)): the table holds the
    /// share, and nothing changes. Not allocated, not diffed.
    Unchanged { fingerprint: u64 },
    /// Nothing to do and nothing to report: a retry topic whose route has not been seen yet
    /// (the broker creates it at the group's first heartbeat and then registers it), of which
    /// nothing is held. It is not a problem, so it neither unbalances the round (which would
    /// retry every second) nor leaves an assignor's view of the group incomplete; the route's
    /// appearance wakes a round.
    NotYet,
}

impl Target {
    /// Release everything of the topic, for `reason`.
    pub(super) fn release_all(reason: RemovalReason) -> Self {
        Self::ReleaseAll {
            reason,
            unbalanced: None,
        }
    }

    /// Whether the target gives `queue` (of its topic) up: a lock of it that this client may
    /// hold without holding the queue can then be unlocked. An incomplete view gives up
    /// nothing; an unchanged one gives up what the table does not hold (`in_table`).
    pub(super) fn gives_up(
        &self,
        queue: &MessageQueue,
        in_table: impl Fn(&MessageQueue) -> bool,
    ) -> bool {
        match self {
            Target::Share { mine, .. } => !mine.contains(queue),
            Target::Unchanged { .. } => !in_table(queue),
            Target::ReleaseAll { .. } => true,
            Target::Keep(_) | Target::NotYet => false,
        }
    }

    /// The fingerprint of the inputs the target was decided from, when it was.
    pub(super) fn fingerprint(&self) -> Option<u64> {
        match self {
            Target::Share { fingerprint, .. } | Target::Unchanged { fingerprint } => {
                Some(*fingerprint)
            }
            Target::ReleaseAll { .. } | Target::Keep(_) | Target::NotYet => None,
        }
    }
}

/// What a round does to one queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Change {
    /// Not in the table, in the share: take it (lock, read its offset, insert, announce).
    Add(MessageQueue),
    /// In the table and let go: announce it for this reason if it is held (a queue already
    /// being released keeps the reason it was announced for), then finish its release.
    Release(MessageQueue, RemovalReason),
    /// Being released (announced for this reason) but in the share again: finish its release,
    /// then take it back, in this round if the release finishes.
    Retake(MessageQueue, RemovalReason),
    /// Held, and staying so.
    Keep(MessageQueue),
}

/// One topic's changes for a round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TopicDiff {
    pub(super) topic: String,
    /// Never [`Target::NotYet`].
    pub(super) target: Target,
    /// One change per queue: with a share, the queues of the share in its order (the order
    /// `queues_added` gets them in), then the other queues of the table, sorted; unchanged,
    /// none; else the table's queues, sorted.
    pub(super) changes: Vec<Change>,
}

impl TopicDiff {
    /// The queues to release (or to finish releasing), sorted, with the reason to announce.
    pub(super) fn releases(&self) -> Vec<(MessageQueue, RemovalReason)> {
        let mut releases: Vec<(MessageQueue, RemovalReason)> = self
            .changes
            .iter()
            .filter_map(|c| match c {
                Change::Release(q, r) | Change::Retake(q, r) => Some((q.clone(), *r)),
                Change::Add(_) | Change::Keep(_) => None,
            })
            .collect();
        releases.sort_by(|a, b| a.0.cmp(&b.0));
        releases
    }
}

/// Every topic's changes: the topics of `targets` (every subscribed topic) in their order,
/// except those not there yet, then the topics of the table that are not subscribed any more
/// (released for [`RemovalReason::Unsubscribed`]), sorted.
pub(super) fn diff(table: &ProcessQueueTable, targets: BTreeMap<String, Target>) -> Vec<TopicDiff> {
    let unsubscribed: Vec<String> = table
        .topics()
        .into_iter()
        .filter(|t| !targets.contains_key(t))
        .collect();
    let subscribed = targets
        .into_iter()
        .filter(|(_, target)| !matches!(target, Target::NotYet));
    let unsubscribed = unsubscribed
        .into_iter()
        .map(|t| (t, Target::release_all(RemovalReason::Unsubscribed)));
    subscribed
        .chain(unsubscribed)
        .map(|(topic, target)| topic_diff(table, topic, target))
        .collect()
}

/// One topic's changes, in time linear in the share and the topic's entries (a share not in
/// queue order is sorted first).
fn topic_diff(table: &ProcessQueueTable, topic: String, target: Target) -> TopicDiff {
    let entries = || {
        table.entries_of(&topic).map(|(q, pq)| {
            let releasing = if pq.is_held() {
                None
            } else {
                table.release_of(q).map(|r| r.reason)
            };
            (q, releasing)
        })
    };
    let changes = match &target {
        Target::NotYet | Target::Unchanged { .. } => Vec::new(),
        Target::Keep(_) => entries()
            .map(|(q, releasing)| match releasing {
                Some(reason) => Change::Release(q.clone(), reason),
                None => Change::Keep(q.clone()),
            })
            .collect(),
        Target::ReleaseAll { reason, .. } => entries()
            .map(|(q, releasing)| Change::Release(q.clone(), releasing.unwrap_or(*reason)))
            .collect(),
        Target::Share { mine, .. } => share_changes(mine, entries().collect()),
    };
    TopicDiff {
        topic,
        target,
        changes,
    }
}

/// The changes that take a topic's `entries` (sorted, with the reason each one being released
/// was announced for) to `mine` (the share, each queue once): one walk over both in queue
/// order.
fn share_changes(
    mine: &[MessageQueue],
    entries: Vec<(&MessageQueue, Option<RemovalReason>)>,
) -> Vec<Change> {
    // The share's positions in queue order: the share itself for the strategies that answer
    // in queue order (most do), else sorted.
    let mut order: Vec<usize> = (0..mine.len()).collect();
    if !mine.is_sorted_by(|a, b| within_topic(a, b).is_le()) {
        order.sort_by(|&a, &b| within_topic(&mine[a], &mine[b]));
    }
    // Per position of the share: where it is in `entries`, if it is there.
    let mut found: Vec<Option<usize>> = vec![None; mine.len()];
    let mut wanted = vec![false; entries.len()];
    let mut at = 0;
    for &i in &order {
        while at < entries.len() && within_topic(entries[at].0, &mine[i]).is_lt() {
            at += 1;
        }
        if at < entries.len() && within_topic(entries[at].0, &mine[i]).is_eq() {
            found[i] = Some(at);
            wanted[at] = true;
        }
    }
    let mut changes = Vec::with_capacity(mine.len() + entries.len());
    changes.extend(
        mine.iter()
            .zip(&found)
            .map(|(q, found)| match found.map(|e| entries[e].1) {
                None => Change::Add(q.clone()),
                Some(None) => Change::Keep(q.clone()),
                Some(Some(reason)) => Change::Retake(q.clone(), reason),
            }),
    );
    changes.extend(
        entries
            .iter()
            .zip(&wanted)
            .filter(|(_, wanted)| !**wanted)
            .map(|((q, releasing), _)| {
                Change::Release((*q).clone(), releasing.unwrap_or(RemovalReason::Reassigned))
            }),
    );
    changes
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use tokio::time::Instant;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::lease_terms::StartPosition;

    fn q(topic: &str, i: i32) -> MessageQueue {
        MessageQueue::new(topic, "b", i)
    }

    /// A table holding `held` and releasing `releasing` (each with its reason).
    fn table(
        held: &[MessageQueue],
        releasing: &[(MessageQueue, RemovalReason)],
    ) -> ProcessQueueTable {
        let mut table = ProcessQueueTable::default();
        let root = Arc::new(CancellationToken::new());
        for queue in held.iter().chain(releasing.iter().map(|(q, _)| q)) {
            let _lease = table.insert(queue.clone(), StartPosition::Latest, &root, None, false);
        }
        for (queue, reason) in releasing {
            assert!(table.start_release(queue, Instant::now(), *reason));
        }
        table
    }

    /// The queue a change is about.
    fn queue_of(change: &Change) -> &MessageQueue {
        match change {
            Change::Add(q) | Change::Release(q, _) | Change::Retake(q, _) | Change::Keep(q) => q,
        }
    }

    fn share(mine: &[MessageQueue]) -> Target {
        Target::Share {
            all: mine.into(),
            mine: mine.into(),
            fingerprint: 7,
        }
    }

    fn one(table: &ProcessQueueTable, topic: &str, target: Target) -> Vec<Change> {
        let mut diffs = diff(table, BTreeMap::from([(topic.to_string(), target)]));
        assert_eq!(diffs.len(), 1, "{diffs:?}");
        diffs.remove(0).changes
    }

    #[test]
    fn a_share_adds_keeps_releases_and_retakes_one_change_per_queue() {
        let reassigned = RemovalReason::Reassigned;
        let lost = RemovalReason::Lost;
        let t = table(
            &[q("T", 0), q("T", 1)],
            &[(q("T", 2), lost), (q("T", 3), reassigned)],
        );
        // The share: 3 (being released) back, 0 kept, 4 and 5 new, in the allocation's order.
        let changes = one(
            &t,
            "T",
            share(&[q("T", 5), q("T", 3), q("T", 0), q("T", 4)]),
        );
        assert_eq!(
            changes,
            [
                Change::Add(q("T", 5)),
                Change::Retake(q("T", 3), reassigned),
                Change::Keep(q("T", 0)),
                Change::Add(q("T", 4)),
                Change::Release(q("T", 1), reassigned),
                // Already announced as lost: it keeps that reason.
                Change::Release(q("T", 2), lost),
            ]
        );
    }

    #[test]
    fn an_incomplete_view_keeps_what_is_held_and_finishes_releases() {
        let t = table(&[q("T", 1)], &[(q("T", 0), RemovalReason::Lost)]);
        let changes = one(&t, "T", Target::Keep(Unbalanced::RouteUnknown));
        assert_eq!(
            changes,
            [
                Change::Release(q("T", 0), RemovalReason::Lost),
                Change::Keep(q("T", 1)),
            ]
        );
    }

    #[test]
    fn release_all_lets_every_queue_go_for_its_reason() {
        let t = table(&[q("T", 1), q("T", 0)], &[(q("T", 2), RemovalReason::Lost)]);
        let changes = one(&t, "T", Target::release_all(RemovalReason::TopicGone));
        assert_eq!(
            changes,
            [
                Change::Release(q("T", 0), RemovalReason::TopicGone),
                Change::Release(q("T", 1), RemovalReason::TopicGone),
                Change::Release(q("T", 2), RemovalReason::Lost),
            ]
        );
    }

    #[test]
    fn unsubscribed_topics_come_last_and_not_yet_topics_not_at_all() {
        let t = table(&[q("A", 0), q("Z", 0), q("M", 0)], &[]);
        let targets = BTreeMap::from([
            ("M".to_string(), share(&[q("M", 0)])),
            ("B".to_string(), Target::NotYet),
            ("N".to_string(), share(&[])),
        ]);
        let diffs = diff(&t, targets);
        let topics: Vec<&str> = diffs.iter().map(|d| d.topic.as_str()).collect();
        assert_eq!(topics, ["M", "N", "A", "Z"]);
        assert_eq!(diffs[1].changes, []);
        assert_eq!(
            diffs[2].changes,
            [Change::Release(q("A", 0), RemovalReason::Unsubscribed)]
        );
        assert_eq!(
            diffs[2].target,
            Target::release_all(RemovalReason::Unsubscribed)
        );
    }

    #[test]
    fn releases_are_sorted_and_include_retakes() {
        let t = table(&[q("T", 4)], &[(q("T", 1), RemovalReason::Reassigned)]);
        let d = diff(
            &t,
            BTreeMap::from([("T".to_string(), share(&[q("T", 1), q("T", 0)]))]),
        );
        assert_eq!(
            d[0].releases(),
            [
                (q("T", 1), RemovalReason::Reassigned),
                (q("T", 4), RemovalReason::Reassigned),
            ]
        );
    }

    #[test]
    fn only_a_decision_gives_queues_up() {
        let mine = share(&[q("T", 0)]);
        let nowhere = |_: &MessageQueue| false;
        assert!(!mine.gives_up(&q("T", 0), nowhere));
        assert!(mine.gives_up(&q("T", 1), nowhere));
        assert!(Target::release_all(RemovalReason::TopicGone).gives_up(&q("T", 0), nowhere));
        assert!(!Target::Keep(Unbalanced::NoConsumers).gives_up(&q("T", 0), nowhere));
        let unchanged = Target::Unchanged { fingerprint: 7 };
        assert!(!unchanged.gives_up(&q("T", 0), |q| q.queue_id == 0));
        assert!(unchanged.gives_up(&q("T", 1), |q| q.queue_id == 0));
    }

    mod prop {
        use proptest::prelude::*;

        use super::*;

        proptest! {
            /// Every queue of the table and of the share gets exactly one change, and applying
            /// the changes (releases finished, adds and retakes taken) leaves exactly the share.
            #[test]
            fn one_change_per_queue_and_the_share_is_reached(
                held in proptest::collection::btree_set(0..12i32, 0..8),
                releasing in proptest::collection::btree_set(0..12i32, 0..4),
                mine in proptest::collection::vec(0..12i32, 0..8),
            ) {
                let releasing: Vec<_> = releasing
                    .difference(&held)
                    .map(|&i| (q("T", i), RemovalReason::Lost))
                    .collect();
                let held: Vec<_> = held.iter().map(|&i| q("T", i)).collect();
                let mut seen = HashSet::new();
                let mine: Vec<_> = mine.into_iter().filter(|i| seen.insert(*i)).map(|i| q("T", i)).collect();
                let t = table(&held, &releasing);
                let changes = one(&t, "T", share(&mine));
                let queues: Vec<&MessageQueue> = changes.iter().map(queue_of).collect();
                let unique: HashSet<&&MessageQueue> = queues.iter().collect();
                prop_assert_eq!(unique.len(), queues.len());
                let expected = held.len() + releasing.len()
                    + mine.iter().filter(|q| t.get(q).is_none()).count();
                prop_assert_eq!(queues.len(), expected);
                let after: HashSet<&MessageQueue> = changes
                    .iter()
                    .filter_map(|c| match c {
                        Change::Add(q) | Change::Retake(q, _) | Change::Keep(q) => Some(q),
                        Change::Release(..) => None,
                    })
                    .collect();
                prop_assert_eq!(after, mine.iter().collect::<HashSet<_>>());
            }
        }
    }
}
