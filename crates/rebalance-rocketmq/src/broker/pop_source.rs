//! The broker client as the consume layer's [`PopSource`] (POP_MESSAGE, ACK_MESSAGE /
//! BATCH_ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME) and the runtime's [`AssignmentSource`]
//! (QUERY_ASSIGNMENT, SET_MESSAGE_REQUEST_MODE): what a push consumer in POP mode needs.

use std::time::Duration;

use async_trait::async_trait;
use rebalance_consume::{Message, PopResult, PopSource, PopStart, PullError, property};
use rebalance_core::MessageQueue;
use rebalance_runtime::{
    AssignedQueue, AssignmentRequest, AssignmentSource, ReadMode, RemoteError, ServerAnswer,
};

use super::BrokerClient;
use super::assignment::{
    AssignmentAnswer, AssignmentQuery, RequestMode, RequestModeSetting, SERVER_STRATEGIES,
};
use super::pop::{
    AckOutcome, AckRequest, BatchAckRequest, ChangeInvisibleTimeRequest, ChangeOutcome, PopError,
    PopFilter, PopInitMode, PopOutcome, PopRequest, ReceiptHandle,
};
use crate::command::response_code;

/// A request this client refused to send, or the brokers' failure, as the consume layer's
/// [`RemoteError`].
fn remote(error: PopError) -> RemoteError {
    match error {
        PopError::Remote(e) => e,
        invalid @ PopError::InvalidRequest { .. } => RemoteError::Refused {
            code: response_code::INVALID_PARAMETER,
            remark: invalid.to_string(),
        },
    }
}

fn handle(text: &str) -> Result<ReceiptHandle, RemoteError> {
    ReceiptHandle::parse(text).map_err(|e| RemoteError::Refused {
        code: response_code::INVALID_PARAMETER,
        remark: format!("receipt handle `{text}`: {e}"),
    })
}

/// A message popped but not matching the expression, as the consume layer acknowledges it:
/// its queue, offset and handle. The queue is the one the message was read from: of the POP
/// retry topic for a redelivery, as for a delivered message (found by review: a filtered
/// retry message took the popped topic's queue of the same id, and one at the offset of an
/// ordinary message popped with it was dropped from the book, never acknowledged).
fn filtered(topic: &str, group: &str, handle: &ReceiptHandle) -> Message {
    let fields = handle.fields();
    let real_topic = fields.retry.real_topic(topic, group);
    let queue = MessageQueue::new(real_topic, fields.broker_name.as_str(), fields.queue_id);
    // Shown under the popped topic, which its acknowledgement names (the handle's retry flag
    // tells the broker the rest), as a delivered message is.
    Message::new(queue, fields.queue_offset, bytes::Bytes::new())
        .with_topic(topic)
        .with_property(property::POP_CK, handle.as_str())
}

#[async_trait]
impl PopSource for BrokerClient {
    /// POP_MESSAGE with the request's tags (see [`pop`](super::pop)): 215 FLOW_CONTROL is
    /// [`PullError::Throttled`] (popped again 20 ms later); 209 POLLING_FULL (the broker holds
    /// too many POPs) and 2 SYSTEM_BUSY are failures, popped again after the error delay (found
    /// by review: 50 POPs a second per queue against an overloaded broker).
    async fn pop(&self, request: &rebalance_consume::PopRequest) -> Result<PopResult, PullError> {
        let mut pop = PopRequest::new(request.group.to_string(), request.queue.clone())
            .with_max_messages(request.max_messages)
            .with_invisible_time(request.invisible_time)
            .with_poll_time(request.poll_time)
            .with_init_mode(match request.start {
                PopStart::Earliest => PopInitMode::Min,
                PopStart::Latest => PopInitMode::Max,
            })
            .with_filter(PopFilter::Tags(request.expression.clone()));
        if request.orderly {
            pop = pop.orderly(request.attempt_id.clone());
        }
        match BrokerClient::pop(self, &pop).await.map_err(remote)? {
            PopOutcome::Found(batch) => {
                let topic = &request.queue.topic;
                Ok(PopResult::Found {
                    messages: batch.messages.into_iter().map(|m| m.message).collect(),
                    filtered: batch
                        .unmatched
                        .iter()
                        .map(|h| filtered(topic, &request.group, h))
                        .collect(),
                })
            }
            PopOutcome::NoMessage => Ok(PopResult::NoMessage),
            PopOutcome::PollingFull => Err(PullError::Remote(RemoteError::Refused {
                code: response_code::POLLING_FULL,
                remark: "the broker holds too many POPs".into(),
            })),
            PopOutcome::FlowControl => Err(PullError::Throttled(RemoteError::Refused {
                code: response_code::FLOW_CONTROL,
                remark: "the broker asks to slow down".into(),
            })),
        }
    }

    /// One handle: ACK_MESSAGE. Several: one BATCH_ACK_MESSAGE (the Rust broker 1.0 moves an
    /// orderly queue past all of them at once); if a broker refuses the batch (a Java broker
    /// may not read its bit set, see [`pop`](super::pop)), ACK_MESSAGE one by one, in order.
    /// A message gone from the queue (208) is not an error.
    async fn ack(&self, group: &str, topic: &str, handles: &[&str]) -> Result<(), RemoteError> {
        let handles = handles
            .iter()
            .map(|h| handle(h))
            .collect::<Result<Vec<_>, _>>()?;
        if handles.len() > 1 {
            let batch = BatchAckRequest::new(group, topic, handles.clone());
            match self.batch_ack(&batch).await {
                Ok(_) => return Ok(()),
                Err(PopError::Remote(RemoteError::Refused { code, remark })) => {
                    tracing::debug!(
                        code,
                        remark,
                        "the broker refused a batch acknowledgement; acknowledging one by one"
                    );
                }
                Err(e) => return Err(remote(e)),
            }
        }
        for handle in handles {
            let request = AckRequest::new(group, topic, handle);
            if let AckOutcome::NoMessage { remark } =
                BrokerClient::ack(self, &request).await.map_err(remote)?
            {
                tracing::debug!(remark, "acknowledged a message the queue no longer has");
            }
        }
        Ok(())
    }

    /// CHANGE_MESSAGE_INVISIBLETIME; a message gone from the queue (208) is refused with that
    /// code. The Rust broker 1.0 refuses it (1) for an ordinary pop's message.
    async fn change_invisible_time(
        &self,
        group: &str,
        topic: &str,
        handle_text: &str,
        invisible_time: Duration,
    ) -> Result<String, RemoteError> {
        let request =
            ChangeInvisibleTimeRequest::new(group, topic, handle(handle_text)?, invisible_time);
        match BrokerClient::change_invisible_time(self, &request)
            .await
            .map_err(remote)?
        {
            ChangeOutcome::Changed(handle) => Ok(handle.as_str().to_string()),
            ChangeOutcome::NoMessage { remark } => Err(RemoteError::Refused {
                code: response_code::NO_MESSAGE,
                remark,
            }),
        }
    }
}

#[async_trait]
impl AssignmentSource for BrokerClient {
    fn strategies(&self) -> Vec<String> {
        SERVER_STRATEGIES.iter().map(|s| s.to_string()).collect()
    }

    /// QUERY_ASSIGNMENT at a broker of the topic (see [`assignment`](super::assignment)).
    async fn query_assignment(
        &self,
        request: &AssignmentRequest<'_>,
    ) -> Result<ServerAnswer, RemoteError> {
        let query = AssignmentQuery::new(
            request.topic,
            request.group,
            request.client_id.as_str(),
            request.strategy,
        );
        let answer = BrokerClient::query_assignment(self, &query)
            .await
            .map_err(remote)?;
        Ok(match answer {
            AssignmentAnswer::Queues(queues) => ServerAnswer::Queues(
                queues
                    .into_iter()
                    .map(|q| {
                        let mode = match q.mode {
                            RequestMode::Pull => ReadMode::Pull,
                            RequestMode::Pop => ReadMode::Pop,
                        };
                        AssignedQueue::new(q.queue, mode)
                    })
                    .collect(),
            ),
            AssignmentAnswer::Unbalanced => ServerAnswer::Unbalanced,
        })
    }

    /// SET_MESSAGE_REQUEST_MODE at every broker of the topic.
    async fn set_read_mode(
        &self,
        group: &str,
        topic: &str,
        mode: ReadMode,
        pop_share: i32,
    ) -> Result<(), RemoteError> {
        let mode = match mode {
            ReadMode::Pull => RequestMode::Pull,
            ReadMode::Pop => RequestMode::Pop,
        };
        let setting =
            RequestModeSetting::new(topic, group, mode).with_pop_share_queue_num(pop_share);
        self.set_message_request_mode(&setting)
            .await
            .map_err(remote)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filtered_message_keeps_the_queue_it_was_read_from() {
        let ordinary = ReceiptHandle::parse("5 1700000000000 60000 2 0 broker-a 0 6").unwrap();
        let message = filtered("T", "G", &ordinary);
        assert_eq!(message.queue(), &MessageQueue::new("T", "broker-a", 0));
        assert_eq!(message.queue_offset(), 6);
        // A redelivery read from the POP retry topic's queue 0 at offset 6: not queue 0 of
        // `T`, where an ordinary message at offset 6 popped with it would take its place in the
        // book and this one would never be acknowledged.
        let retry = ReceiptHandle::parse("5 1700000000000 60000 2 1 broker-a 0 6").unwrap();
        let message = filtered("T", "G", &retry);
        assert_eq!(
            message.queue(),
            &MessageQueue::new("%RETRY%G_T", "broker-a", 0)
        );
        assert_eq!(message.topic(), "T", "acknowledged under the popped topic");
        assert_eq!(message.receipt_handle(), Some(retry.as_str()));
        let v2 = ReceiptHandle::parse("5 1700000000000 60000 2 2 broker-a 0 6").unwrap();
        assert_eq!(&*filtered("T", "G", &v2).queue().topic, "%RETRY%G+T");
    }
}
