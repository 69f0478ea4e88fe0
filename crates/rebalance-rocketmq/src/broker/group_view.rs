//! What the brokers know and can ask about a consumer group, for tools (`rebalance describe`)
//! and tests: the group's committed and max offsets per queue (GET_CONSUME_STATS, 208), a
//! member's running info asked through a broker (GET_CONSUMER_RUNNING_INFO, 307, forwarded),
//! every member's offsets (INVOKE_BROKER_TO_GET_CONSUMER_STATUS, 223 → 221), and an operator's
//! offset reset (INVOKE_BROKER_TO_RESET_OFFSET, 222). Names are plain: the namespace is applied
//! on the way out and removed on the way back.

use std::collections::BTreeMap;

use rebalance_core::MessageQueue;
use rebalance_runtime::RemoteError;
use serde_json::Value;

use super::{BrokerClient, refused};
use crate::command::{RemotingCommand, request_code, response_code};
use crate::error::excerpt;
use crate::queue_keys::{parse_queue_key, stringify_object_keys};

/// One queue in a broker's GET_CONSUME_STATS answer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueProgress {
    /// The queue.
    pub queue: MessageQueue,
    /// Its max offset (the offset the next message gets).
    pub broker_offset: i64,
    /// The group's committed offset.
    pub consumer_offset: i64,
    /// Store time of the last consumed message, ms since the epoch (0 if none).
    pub last_timestamp: i64,
}

impl QueueProgress {
    /// Messages not consumed yet: max offset minus committed offset (never negative; offsets
    /// too far apart for an `i64`, which only a broken answer has, give `i64::MAX`).
    pub fn lag(&self) -> i64 {
        self.broker_offset
            .saturating_sub(self.consumer_offset)
            .max(0)
    }
}

/// A member's running info, as it answered GET_CONSUMER_RUNNING_INFO through a broker (any
/// client's answer in the Java shape: the Java client's, this crate's).
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct MemberRunningInfo {
    /// The queues the member holds, with the commit offset it reports for each.
    pub queues: Vec<(MessageQueue, i64)>,
    /// The queues the member pops (`mqPopTable`: server-side assignment in POP mode), sorted;
    /// queue id -1 stands for every queue of its broker. Other members may pop them too.
    pub popped: Vec<MessageQueue>,
    /// Its `properties` (string values only).
    pub properties: BTreeMap<String, String>,
    /// Its `userConsumerInfo` (this crate puts each topic's allocation fingerprint there,
    /// `fingerprint:{topic}`).
    pub user_info: BTreeMap<String, String>,
    /// The topics of its `subscriptionSet`.
    pub subscriptions: Vec<String>,
}

impl MemberRunningInfo {
    /// The allocation fingerprint the member reports for `topic` (members of this crate only).
    pub fn fingerprint(&self, topic: &str) -> Option<&str> {
        self.user_info
            .get(&format!("fingerprint:{topic}"))
            .map(String::as_str)
    }
}

/// How long a broker may hold GET_CONSUMER_RUNNING_INFO while it asks the member: a Java
/// broker waits up to 10 s for the member's answer (a Rust broker 5 s).
const RUNNING_INFO_FORWARD: std::time::Duration = std::time::Duration::from_secs(10);

/// How long [`BrokerClient::running_info_at`] waits: the broker's forward and `request_timeout`
/// on top (13 s with the default 3 s).
pub(crate) fn running_info_timeout(request_timeout: std::time::Duration) -> std::time::Duration {
    request_timeout.saturating_add(RUNNING_INFO_FORWARD)
}

/// The body of an answer as JSON, fastjson's queue-object keys made strings.
fn json_body(response: &RemotingCommand, what: &str) -> Result<Value, RemoteError> {
    let text = std::str::from_utf8(&response.body)
        .map_err(|e| RemoteError::BadResponse(format!("{what}: {e}")))?;
    serde_json::from_str(&stringify_object_keys(text))
        .map_err(|e| RemoteError::BadResponse(format!("{what}: {e}")))
}

/// The queue-keyed map at `value`, each key parsed (entries that are not queues are skipped).
fn queue_map(value: &Value) -> impl Iterator<Item = (MessageQueue, &Value)> {
    value
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((parse_queue_key(k)?, v)))
}

fn strings(value: &Value) -> BTreeMap<String, String> {
    value
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect()
}

/// The queues of a GET_CONSUME_STATS answer (`ConsumeStats`). Every queue's `brokerOffset` and
/// `consumerOffset` must be integers (a broker always writes both): a queue reported without one
/// would otherwise show a lag of 0, hiding a backlog. `lastTimestamp` is 0 when missing.
fn consume_stats(body: &Value) -> Result<Vec<QueueProgress>, RemoteError> {
    queue_map(&body["offsetTable"])
        .map(|(queue, v)| {
            let required = |key: &str| {
                v.get(key).and_then(Value::as_i64).ok_or_else(|| {
                    RemoteError::BadResponse(format!(
                        "consume stats: queue {} of topic {} on {} has no integer {key} ({})",
                        queue.queue_id,
                        queue.topic,
                        queue.broker_name,
                        excerpt(&v.to_string())
                    ))
                })
            };
            Ok(QueueProgress {
                broker_offset: required("brokerOffset")?,
                consumer_offset: required("consumerOffset")?.max(0),
                last_timestamp: v.get("lastTimestamp").and_then(Value::as_i64).unwrap_or(0),
                queue,
            })
        })
        .collect()
}

/// The queue-keyed offsets at `value` (an answer to `what`): each must be an integer, or the
/// answer is a [`RemoteError::BadResponse`] naming the queue (a queue dropped silently would
/// tell an operator that fewer queues were reset, or held, than were).
fn queue_offsets(value: &Value, what: &str) -> Result<Vec<(MessageQueue, i64)>, RemoteError> {
    queue_map(value)
        .map(|(queue, offset)| match offset.as_i64() {
            Some(offset) => Ok((queue, offset)),
            None => Err(RemoteError::BadResponse(format!(
                "{what}: queue {} of topic {} on {} has no integer offset ({})",
                queue.queue_id,
                queue.topic,
                queue.broker_name,
                excerpt(&offset.to_string())
            ))),
        })
        .collect()
}

impl BrokerClient {
    /// `queue` with its topic as the application names it.
    fn plain_queue(&self, mut queue: MessageQueue) -> MessageQueue {
        let plain = self.inner.name_server.plain_name(&queue.topic).into_owned();
        queue.topic = plain.into();
        queue
    }

    /// GET_CONSUME_STATS at the broker at `addr`: for each queue of `topic` (every topic the
    /// group committed offsets for, when `None`) on that broker, the max and committed offsets.
    pub async fn consume_stats_at(
        &self,
        addr: &str,
        group: &str,
        topic: Option<&str>,
    ) -> Result<Vec<QueueProgress>, RemoteError> {
        let mut request = RemotingCommand::request(request_code::GET_CONSUME_STATS)
            .with_ext("consumerGroup", self.wire(group));
        if let Some(topic) = topic {
            request = request.with_ext("topic", self.wire(topic));
        }
        let op = self.group_op("consume stats", group);
        let response = self.call_ok(addr, &op, request).await?;
        let body = json_body(&response, "consume stats")?;
        let mut queues = consume_stats(&body)?;
        for progress in &mut queues {
            progress.queue = self.plain_queue(progress.queue.clone());
        }
        queues.sort_by(|a, b| a.queue.cmp(&b.queue));
        Ok(queues)
    }

    /// GET_CONSUMER_RUNNING_INFO for the member `client_id` of `group`, asked of the broker at
    /// `addr`, which forwards it to the member (5 s on a Rust broker, 10 s on a Java one):
    /// the call waits for that and the request timeout on top (13 s with the default 3 s), so
    /// that a slow member's answer, or the broker's own verdict on it, is not taken for a
    /// silent broker.
    /// A member that does not answer it (an older client of this crate answers "request code
    /// not supported") is a [`RemoteError::Refused`] with the code and remark relayed.
    pub async fn running_info_at(
        &self,
        addr: &str,
        group: &str,
        client_id: &str,
    ) -> Result<MemberRunningInfo, RemoteError> {
        let request = RemotingCommand::request(request_code::GET_CONSUMER_RUNNING_INFO)
            .with_ext("consumerGroup", self.wire(group))
            .with_ext("clientId", client_id)
            .with_ext("jstackEnable", "false");
        let op = self.group_op("consumer running info", group);
        let timeout = running_info_timeout(self.remoting().config().request_timeout);
        let response = self
            .remoting()
            .call_with_timeout(addr, &op, request, timeout)
            .await?;
        if response.code != response_code::SUCCESS {
            return Err(refused(&response));
        }
        let body = json_body(&response, "consumer running info")?;
        let mut queues: Vec<(MessageQueue, i64)> = queue_map(&body["mqTable"])
            .map(|(q, v)| {
                let offset = v.get("commitOffset").and_then(Value::as_i64).unwrap_or(-1);
                (self.plain_queue(q), offset)
            })
            .collect();
        queues.sort();
        let mut popped: Vec<MessageQueue> = queue_map(&body["mqPopTable"])
            .map(|(q, _)| self.plain_queue(q))
            .collect();
        popped.sort();
        let subscriptions = body["subscriptionSet"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.get("topic")?.as_str())
            .map(|t| self.inner.name_server.plain_name(t).into_owned())
            .collect();
        Ok(MemberRunningInfo {
            queues,
            popped,
            properties: strings(&body["properties"]),
            user_info: strings(&body["userConsumerInfo"]),
            subscriptions,
        })
    }

    /// INVOKE_BROKER_TO_GET_CONSUMER_STATUS at the broker at `addr`: the broker asks each
    /// member of `group` for its offsets of `topic` (GET_CONSUMER_STATUS_FROM_CLIENT) and
    /// answers them by client id.
    pub async fn consumer_status_at(
        &self,
        addr: &str,
        group: &str,
        topic: &str,
    ) -> Result<BTreeMap<String, Vec<(MessageQueue, i64)>>, RemoteError> {
        let request = RemotingCommand::request(request_code::INVOKE_BROKER_TO_GET_CONSUMER_STATUS)
            .with_ext("group", self.wire(group))
            .with_ext("topic", self.wire(topic));
        let op = self.group_op("consumer status", group);
        let response = self.call_ok(addr, &op, request).await?;
        let body = json_body(&response, "consumer status")?;
        let table = body["consumerTable"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        table
            .iter()
            .map(|(client, offsets)| {
                let mut offsets = queue_offsets(offsets, "consumer status")?
                    .into_iter()
                    .map(|(q, o)| (self.plain_queue(q), o))
                    .collect::<Vec<_>>();
                offsets.sort();
                Ok((client.clone(), offsets))
            })
            .collect()
    }

    /// INVOKE_BROKER_TO_RESET_OFFSET at the broker at `addr` (what `mqadmin
    /// resetOffsetByTime` sends to each master): resets `group`'s offsets of `topic` on that
    /// broker to the first message stored at or after `timestamp_ms` (`-1`: the max offset).
    /// Brokers with server-side reset store the new offsets and hand them to the next pull;
    /// the others push RESET_CONSUMER_CLIENT_OFFSET to the group's clients. Returns the new
    /// offset of each queue, as the broker answers them.
    pub async fn reset_offsets_at(
        &self,
        addr: &str,
        group: &str,
        topic: &str,
        timestamp_ms: i64,
        force: bool,
    ) -> Result<Vec<(MessageQueue, i64)>, RemoteError> {
        let request = RemotingCommand::request(request_code::INVOKE_BROKER_TO_RESET_OFFSET)
            .with_ext("topic", self.wire(topic))
            .with_ext("group", self.wire(group))
            .with_ext("timestamp", timestamp_ms)
            .with_ext("isForce", force)
            .with_ext("queueId", -1);
        let op = self.group_op("reset offsets", group);
        let response = self.call(addr, &op, request).await?;
        if response.code != response_code::SUCCESS {
            return Err(refused(&response));
        }
        if response.body.is_empty() {
            return Ok(Vec::new());
        }
        let body = json_body(&response, "reset offsets")?;
        let mut offsets: Vec<(MessageQueue, i64)> =
            queue_offsets(&body["offsetTable"], "reset offsets")?
                .into_iter()
                .map(|(q, o)| (self.plain_queue(q), o))
                .collect();
        offsets.sort();
        Ok(offsets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A broker holds the question up to 10 s while the member answers (a Java one; a Rust one
    /// 5 s): the call outwaits it, where the request timeout alone (3 s) took a slow member for
    /// a silent broker. Found by review.
    #[test]
    fn a_running_info_call_outwaits_the_brokers_forward() {
        let request_timeout = std::time::Duration::from_secs(3);
        assert_eq!(
            running_info_timeout(request_timeout),
            std::time::Duration::from_secs(13)
        );
        assert_eq!(
            running_info_timeout(std::time::Duration::MAX),
            std::time::Duration::MAX
        );
    }

    fn progress(broker_offset: i64, consumer_offset: i64) -> QueueProgress {
        QueueProgress {
            queue: MessageQueue::new("T", "b", 0),
            broker_offset,
            consumer_offset,
            last_timestamp: 0,
        }
    }

    fn stats(text: &str) -> Result<Vec<QueueProgress>, RemoteError> {
        let body: Value = serde_json::from_str(&stringify_object_keys(text)).unwrap();
        consume_stats(&body)
    }

    #[test]
    fn consume_stats_are_read_from_the_rust_brokers_answer() {
        // As the Rust broker 1.0.0 answered (object keys; `pullOffset` from 5.1 on).
        let queues = stats(
            r#"{"offsetTable":{{"topic":"T1","brokerName":"broker-a","queueId":1}:{"brokerOffset":9,"consumerOffset":-1,"pullOffset":0,"lastTimestamp":7},
            {"topic":"T1","brokerName":"broker-a","queueId":0}:{"brokerOffset":5,"consumerOffset":3}},"consumeTps":0.0}"#,
        )
        .unwrap();
        let mut queues = queues;
        queues.sort_by(|a, b| a.queue.cmp(&b.queue));
        assert_eq!(queues.len(), 2);
        assert_eq!((queues[0].broker_offset, queues[0].consumer_offset), (5, 3));
        assert_eq!(queues[0].last_timestamp, 0);
        // A committed offset of -1 (none) is 0, as a Java broker reports it.
        assert_eq!((queues[1].broker_offset, queues[1].consumer_offset), (9, 0));
        assert_eq!(queues[1].lag(), 9);
        assert_eq!(
            stats(r#"{"offsetTable":{},"consumeTps":0.0}"#).unwrap(),
            vec![]
        );
    }

    #[test]
    fn a_queue_without_its_offsets_is_a_bad_answer_not_a_lag_of_zero() {
        for entry in [
            r#"{"consumerOffset":3}"#,
            r#"{"brokerOffset":9}"#,
            r#"{"brokerOffset":"9","consumerOffset":3}"#,
            r#"{"brokerOffset":9,"consumerOffset":null}"#,
        ] {
            let text = format!(
                r#"{{"offsetTable":{{{{"topic":"T1","brokerName":"b","queueId":4}}:{entry}}}}}"#
            );
            match stats(&text) {
                Err(RemoteError::BadResponse(message)) => {
                    assert!(message.contains("queue 4 of topic T1 on b"), "{message}");
                }
                other => panic!("{entry}: {other:?}"),
            }
        }
    }

    #[test]
    fn an_offset_that_is_not_an_integer_is_a_bad_answer_not_a_queue_left_out() {
        let body = |offset: &str| -> Value {
            let text = format!(
                r#"{{"offsetTable":{{{{"topic":"T1","brokerName":"b","queueId":0}}:5,{{"topic":"T1","brokerName":"b","queueId":3}}:{offset}}}}}"#
            );
            serde_json::from_str(&stringify_object_keys(&text)).unwrap()
        };
        let mut read = queue_offsets(&body("7")["offsetTable"], "reset offsets").unwrap();
        read.sort();
        assert_eq!(
            read,
            vec![
                (MessageQueue::new("T1", "b", 0), 5),
                (MessageQueue::new("T1", "b", 3), 7)
            ]
        );
        for bad in [r#""7""#, "7.5", "null", "{}"] {
            match queue_offsets(&body(bad)["offsetTable"], "reset offsets") {
                Err(RemoteError::BadResponse(message)) => {
                    assert!(message.contains("queue 3 of topic T1 on b"), "{message}");
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn lag_is_never_negative_and_never_overflows() {
        assert_eq!(progress(10, 3).lag(), 7);
        assert_eq!(progress(3, 10).lag(), 0);
        // Offsets from a broken answer: no "attempt to subtract with overflow" in debug builds.
        assert_eq!(progress(i64::MIN, 1).lag(), 0);
        assert_eq!(progress(i64::MIN, i64::MAX).lag(), 0);
        assert_eq!(progress(i64::MAX, -1).lag(), i64::MAX);
        assert_eq!(progress(i64::MAX, i64::MIN).lag(), i64::MAX);
    }
}
