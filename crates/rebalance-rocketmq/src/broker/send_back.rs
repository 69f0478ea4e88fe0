//! Sending a message a consumer failed back for redelivery: CONSUMER_SEND_MSG_BACK (36) at the
//! message's broker, and when that fails, the Java client's fallback: the message sent again
//! as a normal message (SEND_MESSAGE) to the group's retry topic `%RETRY%{group}`.
//!
//! The fallback message is the Java client's (`sendMessageBackAsNormalMessage`): the body and
//! properties of the message, with [`ORIGIN_MESSAGE_ID`](property::ORIGIN_MESSAGE_ID) (the one
//! it had, else its id), [`RETRY_TOPIC`](property::RETRY_TOPIC) (its topic),
//! [`DELAY_TIME_LEVEL`](property::DELAY_TIME_LEVEL) `3 + reconsume times`, and the
//! reconsume count (`reconsume times + 1`) and maximum, which the Java producer moves from the
//! `RECONSUME_TIME` and `MAX_RECONSUME_TIMES` properties into the request's `reconsumeTimes`
//! and `maxReconsumeTimes` fields for a retry topic, as done here: the broker sends it to the
//! dead-letter topic once the count reaches the maximum. A send-back to the dead letters (a
//! negative delay level) falls back with a count of at least the maximum, as the Java orderly
//! consumer sends its messages past the limit. Properties the consume layer set for
//! its own use (`MIN_OFFSET`, `MAX_OFFSET`, `CONSUME_START_TIME`) and the transaction mark are
//! left out.
//!
//! A refusal of this client's credentials or permissions (see
//! [`is_denial`](crate::acl::is_denial)) is a [`RemoteError::Denied`] naming the operation
//! (`send back`: the group and the message's topic; `send to the retry topic`: the retry topic)
//! with the names the servers know, logged once per resource. The send-back fails with a
//! denial when the fallback was denied, or when the send-back was denied and the fallback
//! failed too.

use std::collections::BTreeMap;
use std::time::Duration;

use rebalance_consume::{SendBack, property};
use rebalance_core::MessageQueue;
use rebalance_runtime::RemoteError;
use rebalance_runtime::subscription::retry_topic;

use super::{BrokerClient, refused};
use crate::command::{RemotingCommand, request_code, response_code};
use crate::denial::Op;
use crate::namespace::{self, Namespace};
// The transaction mark (`TRAN_MSG`) a message sent back must not keep.
use crate::producer::{self, TRANSACTION_PREPARED, send_message_request};

/// How long a send-back may take (the Java client's 5 s).
pub const SEND_BACK_TIMEOUT: Duration = Duration::from_secs(5);

/// The producer group of the fallback sends (the Java client's inner producer).
pub const INNER_PRODUCER_GROUP: &str = "CLIENT_INNER_PRODUCER";

/// The delay level a message sent back as a normal message is delivered after: 3 (10 s) for
/// its first redelivery, one more for each later one (Java's `3 + reconsumeTimes`).
const FIRST_RETRY_DELAY_LEVEL: i32 = 3;

/// The CONSUMER_SEND_MSG_BACK request for `request`.
pub fn send_back_request(request: &SendBack<'_>) -> RemotingCommand {
    namespaced_send_back_request(request, None)
}

/// [`send_back_request`] in `namespace`: the group and the origin topic as the broker knows
/// them.
pub fn namespaced_send_back_request(
    request: &SendBack<'_>,
    namespace: Option<&Namespace>,
) -> RemotingCommand {
    let message = request.message;
    RemotingCommand::request(request_code::CONSUMER_SEND_MSG_BACK)
        .with_ext("offset", message.commit_log_offset())
        .with_ext("group", namespace::wrap(namespace, request.group))
        .with_ext("delayLevel", request.delay_level)
        .with_ext("originMsgId", message.msg_id())
        .with_ext("originTopic", namespace::wrap(namespace, message.topic()))
        .with_ext("unitMode", false)
        .with_ext("maxReconsumeTimes", request.max_reconsume_times)
        .with_ext("bname", &*message.queue().broker_name)
}

/// The message sent to the retry topic when CONSUMER_SEND_MSG_BACK failed (see the
/// [module documentation](self)), with the reconsume count and maximum for the request.
fn fallback_message(
    request: &SendBack<'_>,
    namespace: Option<&Namespace>,
) -> (producer::Message, i32, i32) {
    let message = request.message;
    let mut properties: BTreeMap<String, String> = message
        .properties()
        .iter()
        .filter(|(name, _)| {
            ![
                property::MIN_OFFSET,
                property::MAX_OFFSET,
                property::CONSUME_START_TIME,
                property::RECONSUME_TIME,
                property::MAX_RECONSUME_TIMES,
                TRANSACTION_PREPARED,
            ]
            .contains(&name.as_str())
        })
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    properties
        .entry(property::ORIGIN_MESSAGE_ID.to_string())
        .or_insert_with(|| message.msg_id().to_string());
    properties.insert(
        property::RETRY_TOPIC.to_string(),
        namespace::wrap(namespace, message.topic()).into_owned(),
    );
    let delay = FIRST_RETRY_DELAY_LEVEL.saturating_add(message.reconsume_times());
    properties.insert(property::DELAY_TIME_LEVEL.to_string(), delay.to_string());
    let fallback = producer::Message {
        body: message.body().clone(),
        properties,
    };
    // A message sent to the dead letters (a negative level) carries a count above the maximum,
    // so that the broker dead-letters it on arrival: a broker dead-letters a message sent to a
    // retry topic whose count is over the maximum (`reconsumeTimes > maxReconsumeTimes`, Java's
    // `SendMessageProcessor.handleRetryAndDLQ` and the Rust broker's), or of a group holding
    // locks (the Java orderly consumer's), and retries one at the maximum.
    let mut reconsume_times = message.reconsume_times().saturating_add(1);
    if request.delay_level < 0 {
        reconsume_times = reconsume_times.max(request.max_reconsume_times.saturating_add(1));
    }
    (fallback, reconsume_times, request.max_reconsume_times)
}

/// The SEND_MESSAGE request of the fallback to `queue` (a queue of the retry topic).
pub fn fallback_request(request: &SendBack<'_>, queue: &MessageQueue) -> RemotingCommand {
    namespaced_fallback_request(request, queue, None)
}

/// [`fallback_request`] in `namespace`: `queue` (plain) is sent as the broker knows it, and so
/// is the origin topic in [`RETRY_TOPIC`](property::RETRY_TOPIC). The producer group is the
/// client's inner one, never namespaced (as in Java).
pub fn namespaced_fallback_request(
    request: &SendBack<'_>,
    queue: &MessageQueue,
    namespace: Option<&Namespace>,
) -> RemotingCommand {
    let (message, reconsume_times, max_reconsume_times) = fallback_message(request, namespace);
    let wire_queue;
    let queue = match namespace {
        Some(ns) => {
            let topic = ns.wrap(&queue.topic);
            wire_queue = MessageQueue::new(&*topic, queue.broker_name.clone(), queue.queue_id);
            &wire_queue
        }
        None => queue,
    };
    // The copy keeps the message's birth time, as the Java client's does.
    let born = request.message.born_timestamp();
    send_message_request(INNER_PRODUCER_GROUP, queue, &message, born)
        .with_ext("reconsumeTimes", reconsume_times)
        .with_ext("maxReconsumeTimes", max_reconsume_times)
}

/// Whether a SEND_MESSAGE answer means the message is stored.
fn stored(response: &RemotingCommand) -> bool {
    matches!(
        response.code,
        response_code::SUCCESS
            | response_code::FLUSH_DISK_TIMEOUT
            | response_code::FLUSH_SLAVE_TIMEOUT
            | response_code::SLAVE_NOT_AVAILABLE
    )
}

/// The error of a send-back whose fallback failed too: a denial when either was denied (the
/// fallback's first), else the fallback's refusal, else both as unreachable; with the other
/// reason in the remark.
fn both_failed(first: RemoteError, fallback: RemoteError) -> RemoteError {
    match (fallback, first) {
        (
            RemoteError::Denied {
                server,
                operation,
                resource,
                code,
                remark,
            },
            first,
        ) => RemoteError::Denied {
            server,
            operation,
            resource,
            code,
            remark: format!("{remark} (after the send-back failed: {first})"),
        },
        (
            fallback,
            RemoteError::Denied {
                server,
                operation,
                resource,
                code,
                remark,
            },
        ) => RemoteError::Denied {
            server,
            operation,
            resource,
            code,
            remark: format!("{remark} (and the send to the retry topic failed: {fallback})"),
        },
        (RemoteError::Refused { code, remark }, first) => RemoteError::Refused {
            code,
            remark: format!("{remark} (after the send-back failed: {first})"),
        },
        (other, first) => RemoteError::Unreachable(format!(
            "send-back failed ({first}), and so did the send to the retry topic ({other})"
        )),
    }
}

impl BrokerClient {
    /// Sends a failed message back: CONSUMER_SEND_MSG_BACK at its broker's master, else the
    /// fallback to the retry topic. Fails only when both fail (with both reasons).
    ///
    /// The fallback follows any failure of the send-back, including one whose request may have
    /// reached the broker (a timeout, a connection closed before the answer): the message can
    /// then be delivered again twice, once through each. As with the Java client
    /// (`sendMessageBackAsNormalMessage` on any exception), redelivery is at least once.
    pub(super) async fn send_message_back(&self, request: SendBack<'_>) -> Result<(), RemoteError> {
        let error = match self.send_back_only(&request).await {
            Ok(addr) => {
                tracing::debug!(broker = %addr, group = request.group, msg_id = request.message.msg_id(), "sent back");
                return Ok(());
            }
            Err(e) => e,
        };
        if matches!(error, RemoteError::Denied { .. }) {
            // The denial itself is logged once per resource.
            tracing::debug!(group = request.group, msg_id = request.message.msg_id(), error = %error, "send-back denied; sending the message to the retry topic instead");
        } else {
            tracing::warn!(group = request.group, msg_id = request.message.msg_id(), error = %error, "send-back failed; sending the message to the retry topic instead");
        }
        let unreached = matches!(
            error,
            RemoteError::Timeout { .. } | RemoteError::Unreachable(_)
        );
        self.send_back_as_normal_message(&request, unreached)
            .await
            .map_err(|fallback| both_failed(error, fallback))
    }

    /// Moves the broker's stored copy of `message` (found by its commit-log offset) to
    /// `%DLQ%{group}`, whole: CONSUMER_SEND_MSG_BACK at level -1, never the fallback, which
    /// would send the copy this client holds. For a message this client cannot read (its body
    /// inflates past the decode limit: the copy here has an empty body). Returns the broker's
    /// address.
    pub(super) async fn dead_letter_stored(
        &self,
        group: &str,
        message: &rebalance_consume::Message,
    ) -> Result<String, RemoteError> {
        self.send_back_only(&SendBack::new(group, message).to_dead_letters())
            .await
    }

    /// CONSUMER_SEND_MSG_BACK at the message's broker's master, without the fallback; returns
    /// the broker's address.
    pub(super) async fn send_back_only(
        &self,
        request: &SendBack<'_>,
    ) -> Result<String, RemoteError> {
        let addr = self.broker_addr(request.message.queue(), true).await?;
        let op = self.group_topic_op("send back", request.group, request.message.topic());
        let response = self
            .remoting()
            .call_with_timeout(
                &addr,
                &op,
                namespaced_send_back_request(request, self.name_server().namespace()),
                SEND_BACK_TIMEOUT,
            )
            .await?;
        if response.code == response_code::SUCCESS {
            Ok(addr)
        } else {
            Err(refused(&response))
        }
    }

    /// The fallback: SEND_MESSAGE to the group's retry topic, on up to
    /// [`FALLBACK_BROKERS`] of its brokers one after the other while they refuse it: the
    /// message's broker first when it serves the retry topic, unless the send-back could not
    /// reach it (`unreached`: then it comes last, as the Java producer moves off the broker that
    /// failed; found by review: the fallback went to the broker that had just failed, only). A
    /// send not answered ends the fallback: that broker may have stored the message.
    async fn send_back_as_normal_message(
        &self,
        request: &SendBack<'_>,
        unreached: bool,
    ) -> Result<(), RemoteError> {
        let topic = retry_topic(request.group);
        let route = self.route(&topic).await?;
        let publish = route.publish_info(&topic).map_err(|e| {
            RemoteError::Unreachable(format!("no queue to send to in `{topic}`: {e}"))
        })?;
        let broker = &request.message.queue().broker_name;
        // One queue per broker, in the route's order.
        let mut candidates: Vec<&MessageQueue> = Vec::new();
        for queue in publish.queues() {
            if !candidates
                .iter()
                .any(|c| c.broker_name == queue.broker_name)
            {
                candidates.push(queue);
            }
        }
        // The message's broker first, or last when it could not be reached (a stable sort:
        // the others keep the route's order).
        candidates.sort_by_key(|q| (q.broker_name == *broker) == unreached);
        let mut last = RemoteError::Unreachable(format!("no queue in `{topic}`"));
        for queue in candidates.into_iter().take(FALLBACK_BROKERS) {
            match self.send_to_retry_topic(request, &topic, queue).await {
                Ok(()) => return Ok(()),
                // Refused: the broker did not store it; another broker may.
                Err(e @ (RemoteError::Refused { .. } | RemoteError::Denied { .. })) => {
                    tracing::debug!(broker = %queue.broker_name, %topic, msg_id = request.message.msg_id(), error = %e, "sending to the retry topic was refused; trying another broker");
                    last = e;
                }
                // Not answered (or cut off): the broker may have stored it, and a copy on
                // another broker would deliver it twice (found by review).
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    /// One SEND_MESSAGE of the fallback, to `queue` of the retry topic.
    async fn send_to_retry_topic(
        &self,
        request: &SendBack<'_>,
        topic: &str,
        queue: &MessageQueue,
    ) -> Result<(), RemoteError> {
        let addr = self.broker_addr(queue, true).await?;
        let ns = self.name_server().namespace();
        let op = Op::new(
            "send to the retry topic",
            format!("topic `{}`", self.wire(topic)),
        );
        let response = self
            .remoting()
            .call_with_timeout(
                &addr,
                &op,
                namespaced_fallback_request(request, queue, ns),
                SEND_BACK_TIMEOUT,
            )
            .await?;
        if !stored(&response) {
            return Err(refused(&response));
        }
        tracing::info!(broker = %addr, %topic, msg_id = request.message.msg_id(), "sent to the retry topic");
        Ok(())
    }
}

/// How many brokers of the retry topic the fallback tries (the Java producer's three attempts).
const FALLBACK_BROKERS: usize = 3;

#[cfg(test)]
mod tests {
    use rebalance_consume::Message;

    use super::*;
    use crate::message::properties;

    fn failed() -> Message {
        Message::new(MessageQueue::new("%RETRY%G", "broker-a", 0), 4, "body")
            .with_topic("Orders")
            .with_msg_id("UNIQ1")
            .with_commit_log_offset(1234)
            .with_reconsume_times(2)
            .with_timestamps(77, 78)
            .with_property(property::TAGS, "TagA")
            .with_property(property::MIN_OFFSET, "0")
            .with_property(property::MAX_OFFSET, "9")
            .with_property(TRANSACTION_PREPARED, "true")
    }

    #[test]
    fn the_send_back_names_the_stored_message_and_its_origin() {
        let message = failed();
        let request = SendBack::new("G", &message)
            .with_delay_level(1)
            .with_max_reconsume_times(3);
        let command = send_back_request(&request);
        assert_eq!(command.code, 36);
        for (name, value) in [
            ("offset", "1234"),
            ("group", "G"),
            ("delayLevel", "1"),
            ("originMsgId", "UNIQ1"),
            ("originTopic", "Orders"),
            ("unitMode", "false"),
            ("maxReconsumeTimes", "3"),
            ("bname", "broker-a"),
        ] {
            assert_eq!(command.ext(name), Some(value), "{name}");
        }
    }

    /// A message sent to the dead letters falls back with a count at the maximum, so that the
    /// broker dead-letters it on arrival instead of scheduling a retry.
    #[test]
    fn a_dead_letter_falls_back_with_a_count_above_the_maximum() {
        let message = failed();
        let queue = MessageQueue::new("%RETRY%G", "broker-a", 0);
        let dead = SendBack::new("G", &message)
            .with_max_reconsume_times(16)
            .to_dead_letters();
        assert_eq!(send_back_request(&dead).ext("delayLevel"), Some("-1"));
        let command = fallback_request(&dead, &queue);
        // Above the maximum: a broker retries a copy at it (`16 > 16` is false).
        assert_eq!(command.ext("reconsumeTimes"), Some("17"));
        assert_eq!(command.ext("maxReconsumeTimes"), Some("16"));
        let counted = message.clone().with_reconsume_times(20);
        let past = SendBack::new("G", &counted)
            .with_max_reconsume_times(16)
            .to_dead_letters();
        assert_eq!(
            fallback_request(&past, &queue).ext("reconsumeTimes"),
            Some("21")
        );
    }

    /// In a namespace, the group and origin topic of the send-back, and the retry topic and
    /// origin topic of the fallback, are the broker's names; the inner producer group is not
    /// namespaced.
    #[test]
    fn namespaced_send_backs_name_the_group_and_topics_in_the_namespace() {
        let ns = Namespace::new("NS").unwrap();
        let message = failed();
        let request = SendBack::new("G", &message);
        let command = namespaced_send_back_request(&request, Some(&ns));
        assert_eq!(command.ext("group"), Some("NS%G"));
        assert_eq!(command.ext("originTopic"), Some("NS%Orders"));
        let queue = MessageQueue::new("%RETRY%G", "broker-a", 0);
        let command = namespaced_fallback_request(&request, &queue, Some(&ns));
        assert_eq!(command.ext("topic"), Some("%RETRY%NS%G"));
        assert_eq!(command.ext("producerGroup"), Some(INNER_PRODUCER_GROUP));
        let sent = properties::parse(command.ext("properties").unwrap());
        assert_eq!(
            sent.get("RETRY_TOPIC").map(String::as_str),
            Some("NS%Orders")
        );
    }

    #[test]
    fn the_fallback_is_the_java_clients_normal_message() {
        let message = failed();
        let request = SendBack::new("G", &message).with_max_reconsume_times(5);
        let queue = MessageQueue::new("%RETRY%G", "broker-a", 0);
        let command = fallback_request(&request, &queue);
        assert_eq!(command.code, 10);
        assert_eq!(command.ext("topic"), Some("%RETRY%G"));
        assert_eq!(command.ext("producerGroup"), Some(INNER_PRODUCER_GROUP));
        assert_eq!(command.ext("reconsumeTimes"), Some("3"));
        assert_eq!(command.ext("maxReconsumeTimes"), Some("5"));
        assert_eq!(command.ext("bornTimestamp"), Some("77"));
        assert_eq!(&command.body[..], b"body");
        let sent = properties::parse(command.ext("properties").unwrap());
        assert_eq!(
            sent.get("ORIGIN_MESSAGE_ID").map(String::as_str),
            Some("UNIQ1")
        );
        assert_eq!(sent.get("RETRY_TOPIC").map(String::as_str), Some("Orders"));
        assert_eq!(sent.get("DELAY").map(String::as_str), Some("5"));
        assert_eq!(sent.get("TAGS").map(String::as_str), Some("TagA"));
        for gone in ["MIN_OFFSET", "MAX_OFFSET", "TRAN_MSG", "RECONSUME_TIME"] {
            assert!(!sent.contains_key(gone), "{gone}");
        }
        // An origin id already there is kept.
        let again = failed().with_property(property::ORIGIN_MESSAGE_ID, "FIRST");
        let command = fallback_request(&SendBack::new("G", &again), &queue);
        let sent = properties::parse(command.ext("properties").unwrap());
        assert_eq!(sent["ORIGIN_MESSAGE_ID"], "FIRST");
    }
}
