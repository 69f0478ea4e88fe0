//! [`MembershipNotifier`]: turns the brokers' `NOTIFY_CONSUMER_IDS_CHANGED` pushes into watch
//! channels, one per consumer group.

use dashmap::DashMap;
use tokio::sync::watch;

use crate::command::{RemotingCommand, request_code, response_code};
use crate::connection::ServerRequestHandler;

/// Counts the membership-change notifications received per consumer group.
///
/// Each subscribed group has a watch channel whose value is the number of notifications so far;
/// receivers see that it changed, so notifications coalesce and none is lost.
///
/// Only groups someone [subscribed](Self::subscribe) to have a channel: a push for any other
/// group (which a server may send for any name) is dropped with a debug event, and a group whose
/// receivers are all gone loses its channel at its next push. Memory stays bounded by the groups
/// watched, whatever the servers send.
///
/// ```
/// use rebalance_rocketmq::MembershipNotifier;
///
/// let notifier = MembershipNotifier::default();
/// let mut changes = notifier.subscribe("G");
/// assert!(notifier.notify("G"));
/// notifier.notify("G");
/// assert!(changes.has_changed().unwrap());
/// assert_eq!(*changes.borrow_and_update(), 2);
/// assert!(!notifier.notify("nobody-watches"), "dropped");
/// assert_eq!(notifier.watched_groups(), 1);
/// ```
#[derive(Debug, Default)]
pub struct MembershipNotifier {
    groups: DashMap<String, watch::Sender<u64>>,
}

impl MembershipNotifier {
    /// A receiver that changes whenever a notification for `group` arrives.
    pub fn subscribe(&self, group: &str) -> watch::Receiver<u64> {
        self.groups
            .entry(group.to_string())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    /// Records a notification for `group`, if anyone watches it; returns whether someone did.
    /// A group whose receivers are all dropped is forgotten here.
    pub fn notify(&self, group: &str) -> bool {
        if self
            .groups
            .remove_if(group, |_, sender| sender.receiver_count() == 0)
            .is_some()
        {
            tracing::debug!(
                group,
                "membership change for a group nobody watches any more; channel dropped"
            );
            return false;
        }
        match self.groups.get(group) {
            Some(sender) => {
                sender.send_modify(|n| *n = n.wrapping_add(1));
                true
            }
            None => {
                tracing::debug!(
                    group,
                    "membership change for a group nobody watches, ignored"
                );
                false
            }
        }
    }

    /// How many groups have a channel (at most the groups subscribed to).
    pub fn watched_groups(&self) -> usize {
        self.groups.len()
    }
}

impl ServerRequestHandler for MembershipNotifier {
    fn handle(&self, peer: &str, request: &RemotingCommand) -> Option<RemotingCommand> {
        if request.code != request_code::NOTIFY_CONSUMER_IDS_CHANGED {
            tracing::debug!(peer, code = request.code, "unsupported request from server");
            return None;
        }
        match request.ext("consumerGroup") {
            Some(group) => {
                if self.notify(group) {
                    tracing::info!(peer, group, "broker notified: consumer ids changed");
                }
            }
            None => {
                tracing::warn!(
                    peer,
                    "consumer-ids-changed notification without a group, ignored"
                )
            }
        }
        Some(RemotingCommand::response(
            response_code::SUCCESS,
            request.opaque,
            None,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notifications_bump_only_their_group() {
        let notifier = MembershipNotifier::default();
        let mut g = notifier.subscribe("G");
        let h = notifier.subscribe("H");
        assert!(!h.has_changed().unwrap());
        let request = RemotingCommand::request(request_code::NOTIFY_CONSUMER_IDS_CHANGED)
            .with_ext("consumerGroup", "G");
        let answer = notifier.handle("b:1", &request).unwrap();
        assert_eq!(answer.code, response_code::SUCCESS);
        assert!(g.has_changed().unwrap());
        assert!(!h.has_changed().unwrap());
        assert_eq!(*g.borrow_and_update(), 1);
        // Pushes for groups nobody subscribed to leave nothing behind, however many.
        for n in 0..1000 {
            let push = RemotingCommand::request(request_code::NOTIFY_CONSUMER_IDS_CHANGED)
                .with_ext("consumerGroup", format!("stranger-{n}"));
            assert!(
                notifier.handle("b:1", &push).is_some(),
                "still acknowledged"
            );
        }
        assert_eq!(notifier.watched_groups(), 2);
        assert!(!notifier.notify("late"));
        assert_eq!(*notifier.subscribe("late").borrow(), 0);
        // A group whose receivers are gone is forgotten at its next push; a new subscriber
        // gets a fresh channel that works.
        drop(h);
        assert!(!notifier.notify("H"));
        assert_eq!(notifier.watched_groups(), 2, "G and late");
        let mut h = notifier.subscribe("H");
        assert!(notifier.notify("H"));
        assert!(h.has_changed().unwrap());
        h.borrow_and_update();
        // Other codes are not this handler's business.
        assert!(
            notifier
                .handle("b:1", &RemotingCommand::request(307))
                .is_none()
        );
        // A notification without a group changes nothing.
        notifier.handle(
            "b:1",
            &RemotingCommand::request(request_code::NOTIFY_CONSUMER_IDS_CHANGED),
        );
        assert!(!g.has_changed().unwrap() && !h.has_changed().unwrap());
        assert_eq!(notifier.watched_groups(), 3);
    }
}
