//! [`MembershipNotifier`]: turns the brokers' `NOTIFY_CONSUMER_IDS_CHANGED` pushes into watch
//! channels, one per consumer group.

use dashmap::DashMap;
use tokio::sync::watch;

use crate::command::{RemotingCommand, request_code, response_code};
use crate::connection::ServerRequestHandler;

/// Counts the membership-change notifications received per consumer group.
///
/// Each group has a watch channel whose value is the number of notifications so far; receivers
/// see that it changed, so notifications coalesce and none is lost.
///
/// ```
/// use rebalance_rocketmq::MembershipNotifier;
///
/// let notifier = MembershipNotifier::default();
/// let mut changes = notifier.subscribe("G");
/// notifier.notify("G");
/// notifier.notify("G");
/// assert!(changes.has_changed().unwrap());
/// assert_eq!(*changes.borrow_and_update(), 2);
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

    /// Records a notification for `group`.
    pub fn notify(&self, group: &str) {
        self.groups
            .entry(group.to_string())
            .or_insert_with(|| watch::channel(0).0)
            .send_modify(|n| *n = n.wrapping_add(1));
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
                tracing::info!(peer, group, "broker notified: consumer ids changed");
                self.notify(group);
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
        let request = RemotingCommand::request(request_code::NOTIFY_CONSUMER_IDS_CHANGED)
            .with_ext("consumerGroup", "G");
        let answer = notifier.handle("b:1", &request).unwrap();
        assert_eq!(answer.code, response_code::SUCCESS);
        assert!(g.has_changed().unwrap());
        assert!(!h.has_changed().unwrap());
        assert_eq!(*g.borrow_and_update(), 1);
        // A group nobody watches yet keeps its count for later subscribers.
        notifier.notify("late");
        assert_eq!(*notifier.subscribe("late").borrow(), 1);
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
    }
}
