//! NOTIFICATION (200054): whether a group has anything to pop in a queue (or in every queue of a
//! broker, queue id `-1`), held by the broker up to a poll time while there is nothing. No
//! message is taken.
//!
//! **Answers**: 0 → [`NotificationOutcome`] from the header (`hasMsg` required, `pollingFull`
//! optional); 209 (not sent by the brokers for this request, read as a precaution) → polling
//! full; 210 → nothing; a refusal of the credentials or permissions →
//! [`RemoteError::Denied`]; anything else → [`RemoteError::Refused`].

use std::time::Duration;

use rebalance_core::MessageQueue;
use rebalance_runtime::RemoteError;

use super::pop_message::{DEFAULT_POLL_TIME, pop_timeout};
use super::{PopError, invalid, millis};
use crate::broker::BrokerClient;
use crate::command::{RemotingCommand, request_code, response_code};
use crate::namespace::{self, Namespace};

/// A question to a broker: is there anything for `group` to pop in `queue`?
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotificationRequest {
    /// The consumer group.
    pub group: String,
    /// The queue; queue id `-1` for every readable queue of its broker.
    pub queue: MessageQueue,
    /// How long the broker may hold the request while there is nothing (zero: answer at once).
    pub poll_time: Duration,
    /// Asks about an orderly POP (a queue blocked by an unacknowledged batch has nothing).
    pub order: bool,
    /// For an orderly POP: the attempt id the POP will carry.
    pub attempt_id: Option<String>,
}

impl NotificationRequest {
    /// Asks about `queue` for `group`, held up to [`DEFAULT_POLL_TIME`], not orderly.
    pub fn new(group: impl Into<String>, queue: MessageQueue) -> Self {
        Self {
            group: group.into(),
            queue,
            poll_time: DEFAULT_POLL_TIME,
            order: false,
            attempt_id: None,
        }
    }

    /// Sets the poll time.
    pub fn with_poll_time(mut self, poll_time: Duration) -> Self {
        self.poll_time = poll_time;
        self
    }

    /// Asks about an orderly POP, with `attempt_id` if given.
    pub fn orderly(mut self, attempt_id: Option<String>) -> Self {
        self.order = true;
        self.attempt_id = attempt_id;
        self
    }
}

/// What a NOTIFICATION answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NotificationOutcome {
    /// There is something to pop.
    pub has_message: bool,
    /// The broker holds too many requests already: ask again a little later.
    pub polling_full: bool,
}

/// The NOTIFICATION request of `request` in `namespace` (`bornTime` 0: the broker stamps it).
pub fn notification_request(
    request: &NotificationRequest,
    namespace: Option<&Namespace>,
) -> Result<RemotingCommand, PopError> {
    if request.group.is_empty()
        || request.queue.topic.is_empty()
        || request.queue.broker_name.is_empty()
    {
        return Err(invalid(
            "NOTIFICATION",
            "the group, the topic or the broker name is empty",
        ));
    }
    if request.queue.queue_id < -1 {
        return Err(invalid(
            "NOTIFICATION",
            format!(
                "queue id {} (a queue id, or -1 for every queue)",
                request.queue.queue_id
            ),
        ));
    }
    let mut command = RemotingCommand::request(request_code::NOTIFICATION)
        .with_ext("consumerGroup", namespace::wrap(namespace, &request.group))
        .with_ext("topic", namespace::wrap(namespace, &request.queue.topic))
        .with_ext("queueId", request.queue.queue_id)
        .with_ext("pollTime", millis(request.poll_time))
        .with_ext("bornTime", 0)
        .with_ext("order", request.order)
        .with_ext("bname", &*request.queue.broker_name);
    if let Some(attempt) = &request.attempt_id {
        command = command.with_ext("attemptId", attempt);
    }
    Ok(command)
}

fn flag(response: &RemotingCommand, name: &str) -> Result<Option<bool>, RemoteError> {
    match response.ext(name) {
        None => Ok(None),
        Some("true") => Ok(Some(true)),
        Some("false") => Ok(Some(false)),
        Some(other) => Err(RemoteError::BadResponse(format!(
            "notification answered `{name}` `{}`, not true or false",
            crate::error::excerpt(other)
        ))),
    }
}

/// Reads the answer to a NOTIFICATION.
pub(crate) fn read_notification_answer(
    response: &RemotingCommand,
) -> Result<NotificationOutcome, RemoteError> {
    match response.code {
        response_code::SUCCESS => Ok(NotificationOutcome {
            has_message: flag(response, "hasMsg")?.ok_or_else(|| {
                RemoteError::BadResponse("notification answered without `hasMsg`".into())
            })?,
            polling_full: flag(response, "pollingFull")?.unwrap_or(false),
        }),
        response_code::POLLING_FULL => Ok(NotificationOutcome {
            has_message: false,
            polling_full: true,
        }),
        response_code::POLLING_TIMEOUT => Ok(NotificationOutcome::default()),
        _ => Err(crate::broker::refused(response)),
    }
}

impl BrokerClient {
    /// NOTIFICATION at the master of the queue's broker, waiting up to the poll time plus
    /// [`POP_TIMEOUT_MARGIN`](super::POP_TIMEOUT_MARGIN).
    pub async fn notification(
        &self,
        request: &NotificationRequest,
    ) -> Result<NotificationOutcome, PopError> {
        let command = notification_request(request, self.name_server().namespace())?;
        let addr = self.broker_addr(&request.queue, true).await?;
        let timeout = pop_timeout(request.poll_time, self.remoting().config().request_timeout);
        let op = self.group_topic_op("notification", &request.group, &request.queue.topic);
        let response = self
            .remoting()
            .call_with_timeout(&addr, &op, command, timeout)
            .await?;
        let outcome = read_notification_answer(&response)?;
        tracing::trace!(broker = %addr, queue = ?request.queue, ?outcome, "notification");
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> NotificationRequest {
        NotificationRequest::new("G", MessageQueue::new("T", "broker-a", -1))
            .with_poll_time(Duration::from_secs(2))
    }

    #[test]
    fn the_request_names_the_queue_and_lets_the_broker_stamp_the_born_time() {
        let command = notification_request(&request(), None).unwrap();
        assert_eq!(command.code, 200054);
        for (name, value) in [
            ("consumerGroup", "G"),
            ("topic", "T"),
            ("queueId", "-1"),
            ("pollTime", "2000"),
            ("bornTime", "0"),
            ("order", "false"),
            ("bname", "broker-a"),
        ] {
            assert_eq!(command.ext(name), Some(value), "{name}");
        }
        assert_eq!(command.ext("attemptId"), None);
        let ns = Namespace::new("NS").unwrap();
        let orderly = request().orderly(Some("a1".into()));
        let command = notification_request(&orderly, Some(&ns)).unwrap();
        assert_eq!(command.ext("consumerGroup"), Some("NS%G"));
        assert_eq!(command.ext("topic"), Some("NS%T"));
        assert_eq!(command.ext("order"), Some("true"));
        assert_eq!(command.ext("attemptId"), Some("a1"));
    }

    #[test]
    fn invalid_requests_send_nothing() {
        for bad in [
            NotificationRequest::new("", MessageQueue::new("T", "b", 0)),
            NotificationRequest::new("G", MessageQueue::new("", "b", 0)),
            NotificationRequest::new("G", MessageQueue::new("T", "", 0)),
            NotificationRequest::new("G", MessageQueue::new("T", "b", -2)),
        ] {
            assert!(matches!(
                notification_request(&bad, None),
                Err(PopError::InvalidRequest {
                    request: "NOTIFICATION",
                    ..
                })
            ));
        }
    }

    #[test]
    fn answers_are_typed() {
        let ok = |fields: &[(&str, &str)]| {
            fields
                .iter()
                .fold(RemotingCommand::response(0, 1, None), |c, (k, v)| {
                    c.with_ext(*k, *v)
                })
        };
        assert_eq!(
            read_notification_answer(&ok(&[("hasMsg", "true")])),
            Ok(NotificationOutcome {
                has_message: true,
                polling_full: false
            })
        );
        assert_eq!(
            read_notification_answer(&ok(&[("hasMsg", "false"), ("pollingFull", "true")])),
            Ok(NotificationOutcome {
                has_message: false,
                polling_full: true
            })
        );
        for bad in [
            ok(&[]),
            ok(&[("hasMsg", "yes")]),
            ok(&[("hasMsg", "true"), ("pollingFull", "1")]),
        ] {
            assert!(matches!(
                read_notification_answer(&bad),
                Err(RemoteError::BadResponse(_))
            ));
        }
        assert!(
            read_notification_answer(&RemotingCommand::response(209, 1, None))
                .unwrap()
                .polling_full
        );
        assert_eq!(
            read_notification_answer(&RemotingCommand::response(210, 1, None)),
            Ok(NotificationOutcome::default())
        );
        assert!(matches!(
            read_notification_answer(&RemotingCommand::response(17, 1, Some("no topic".into()))),
            Err(RemoteError::Refused { code: 17, remark }) if remark == "no topic"
        ));
    }
}
