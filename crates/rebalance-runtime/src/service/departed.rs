//! Members that left the group, and the locks they leave behind: a member that dies holding
//! ordered queues keeps their broker locks until the broker expires them (RocketMQ: 60 s after
//! its last renewal), and nobody may consume those queues meanwhile. The members that saw it
//! leave free them sooner: once it has been missing from the member list for `lock_lifetime`,
//! each asks the brokers that no longer list it to drop its locks on every queue of the
//! subscribed topics ([`QueueLocker::unlock_departed`](crate::QueueLocker::unlock_departed);
//! a lock held by anyone else stays), and the lock retry of whoever the queue is allocated to
//! gets it, also a member that joined after the departure (which never saw the departed one).
//!
//! **Why that never lets two members consume one ordered queue at once.** A client consumes an
//! ordered queue only under a lock it trusts, and it trusts a lock for `lock_lifetime` from the
//! request of its last granted renewal (`QueueLease::consume_guard`; a lease whose lock ran out
//! stays refused until a renewal is granted, and a renewal is granted only to the lock's
//! holder). A member that left the list renewed nothing since, as far as the brokers that no
//! longer list it are concerned: dead, it renews nothing; frozen or cut off, its renewals do
//! not arrive (one that arrives late, at a broker that was told to drop the lock, finds it free
//! or someone else's: refused, or granted to it alone); alive and reaching the broker, it is
//! listed there again (it heartbeats the broker it locks at) and its locks stay. So
//! `lock_lifetime` after this client first saw it missing (which is after it left), it trusts
//! none of its locks there, and whatever it still holds in memory it does not consume. Every
//! member is assumed to run with the same `lock_lifetime`, as they run the same strategy; and a
//! member whose connection to a broker keeps dropping and coming back between two of this
//! client's rounds, each time heartbeating and renewing, could be missed as "listed": a flapping
//! link short of a partition, which the brokers' own member lists do not settle either.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rebalance_core::{ClientId, MessageQueue};
use tokio::time::Instant;

use super::Service;
use crate::routes::RouteTable;

/// How long a member missing from the list is remembered: its locks have expired at the
/// brokers long before (RocketMQ: 60 s).
const FORGET_AFTER: Duration = Duration::from_secs(10 * 60);
/// The most departed members remembered.
const MAX_DEPARTED: usize = 256;
/// The most departed members whose locks one round asks the brokers to drop.
const MAX_PER_ROUND: usize = 8;
/// How soon the locks of one departed member are asked for again after a failure.
const ASK_AGAIN_AFTER: Duration = Duration::from_secs(5);

/// The members of the last complete view of the group, and since when each member that was in
/// an earlier view has been missing.
#[derive(Debug, Default)]
pub(super) struct Departures {
    last: BTreeSet<ClientId>,
    /// Missing since (the first view without it), and when its locks were last asked for.
    missing: BTreeMap<ClientId, (Instant, Option<Instant>)>,
}

impl Departures {
    /// Takes a complete view of the group's `members` at `now`.
    pub(super) fn observe(&mut self, members: BTreeSet<ClientId>, now: Instant) {
        for gone in self.last.difference(&members) {
            self.missing.entry(gone.clone()).or_insert((now, None));
        }
        self.missing.retain(|id, (since, _)| {
            !members.contains(id) && now.saturating_duration_since(*since) < FORGET_AFTER
        });
        while self.missing.len() > MAX_DEPARTED {
            let oldest = self
                .missing
                .iter()
                .min_by_key(|(_, (since, _))| *since)
                .map(|(id, _)| id.clone());
            match oldest {
                Some(id) => self.missing.remove(&id),
                None => break,
            };
        }
        self.last = members;
    }

    /// The members missing for at least `bound` whose locks were not asked for in the last
    /// [`ASK_AGAIN_AFTER`], with how long each has been missing (at most [`MAX_PER_ROUND`],
    /// the longest missing first); each is marked asked.
    pub(super) fn due(&mut self, bound: Duration, now: Instant) -> Vec<(ClientId, Duration)> {
        let mut due: Vec<(ClientId, Duration)> = self
            .missing
            .iter()
            .filter(|(_, (since, asked))| {
                now.saturating_duration_since(*since) >= bound
                    && asked.is_none_or(|at| now.saturating_duration_since(at) >= ASK_AGAIN_AFTER)
            })
            .map(|(id, (since, _))| (id.clone(), now.saturating_duration_since(*since)))
            .collect();
        due.sort_by_key(|(_, missing_for)| std::cmp::Reverse(*missing_for));
        due.truncate(MAX_PER_ROUND);
        for (id, _) in &due {
            if let Some((_, asked)) = self.missing.get_mut(id) {
                *asked = Some(now);
            }
        }
        due
    }

    /// The brokers dropped `id`'s locks: it is not asked about again (unless it comes back and
    /// leaves again).
    pub(super) fn done(&mut self, id: &ClientId) {
        self.missing.remove(id);
    }
}

impl Service {
    /// Asks the brokers to drop the locks that every member missing from the group for
    /// `lock_lifetime` may still hold on the queues of the subscribed topics (`routes` known),
    /// once per member (again after a failure), so that whoever the queues go to gets their
    /// locks at its next try (see the [module documentation](self)).
    pub(super) async fn take_over_departed(&mut self, routes: &RouteTable) {
        let Some(locker) = self.ctx.locks().cloned() else {
            return;
        };
        let bound = self.ctx.intervals.lock_lifetime;
        let due = self.departures.due(bound, Instant::now());
        if due.is_empty() {
            return;
        }
        let queues: Vec<MessageQueue> = self
            .subscriptions
            .keys()
            .filter_map(|topic| routes.queues(topic))
            .flat_map(|queues| queues.iter().cloned())
            .collect();
        if queues.is_empty() {
            return;
        }
        for (departed, missing_for) in due {
            match locker
                .unlock_departed(&self.ctx.group, &departed, &queues)
                .await
            {
                Ok(asked) => {
                    tracing::info!(%departed, ?missing_for, brokers_asked_for = asked.len(), "asked the brokers that no longer list a member missing from the group for longer than lock_lifetime to drop its locks (it trusts none of them any more), instead of waiting for them to expire");
                    self.departures.done(&departed);
                }
                Err(e) => {
                    tracing::warn!(%departed, error = %e, "could not drop the locks of a departed member; trying again shortly (they expire at the brokers anyway)");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(names: &[&str]) -> BTreeSet<ClientId> {
        names.iter().map(|n| ClientId::from(*n)).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_member_counts_as_departed_from_the_first_view_without_it_until_it_is_back() {
        let mut departures = Departures::default();
        let bound = Duration::from_secs(30);
        let t0 = Instant::now();
        departures.observe(ids(&["a", "b", "c"]), t0);
        departures.observe(ids(&["a", "b"]), t0 + Duration::from_secs(2));
        assert!(
            departures
                .due(bound, t0 + Duration::from_secs(31))
                .is_empty()
        );
        let due = departures.due(bound, t0 + Duration::from_secs(32));
        assert_eq!(due, vec![(ClientId::from("c"), bound)]);
        // Asked: not again for a while.
        assert!(
            departures
                .due(bound, t0 + Duration::from_secs(33))
                .is_empty()
        );
        assert_eq!(departures.due(bound, t0 + Duration::from_secs(37)).len(), 1);
        // Back in the group: no longer departed, and its clock starts again if it leaves.
        departures.observe(ids(&["a", "b", "c"]), t0 + Duration::from_secs(40));
        assert!(
            departures
                .due(bound, t0 + Duration::from_secs(100))
                .is_empty()
        );
        departures.observe(ids(&["a", "b"]), t0 + Duration::from_secs(50));
        assert!(
            departures
                .due(bound, t0 + Duration::from_secs(79))
                .is_empty()
        );
        assert_eq!(departures.due(bound, t0 + Duration::from_secs(80)).len(), 1);
        // Forgotten after a while.
        departures.observe(
            ids(&["a", "b"]),
            t0 + Duration::from_secs(50) + FORGET_AFTER,
        );
        assert!(
            departures
                .due(bound, t0 + Duration::from_secs(60) + FORGET_AFTER)
                .is_empty()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_member_never_seen_is_not_departed_and_the_list_is_bounded() {
        let mut departures = Departures::default();
        let t0 = Instant::now();
        departures.observe(ids(&["a"]), t0);
        departures.observe(ids(&["b"]), t0);
        assert_eq!(departures.missing.len(), 1, "only a, seen before");
        let many: BTreeSet<ClientId> = (0..MAX_DEPARTED + 10)
            .map(|i| ClientId::from(format!("m{i}")))
            .collect();
        departures.observe(many, t0);
        departures.observe(BTreeSet::new(), t0 + Duration::from_secs(1));
        assert_eq!(departures.missing.len(), MAX_DEPARTED);
        assert_eq!(
            departures
                .due(Duration::ZERO, t0 + Duration::from_secs(2))
                .len(),
            MAX_PER_ROUND
        );
    }
}
