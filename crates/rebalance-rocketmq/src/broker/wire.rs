//! The JSON bodies of the broker requests, with the field names the servers expect.

use rebalance_core::MessageQueue;
use rebalance_runtime::{Registration, subscription::TagExpression};
use serde::{Deserialize, Serialize};

/// `consumeType` of a push consumer (the runtime decides what to consume; the broker only
/// needs to know the client is a consumer driven by rebalancing).
pub(crate) const CONSUME_PASSIVELY: &str = "CONSUME_PASSIVELY";

/// `expressionType` of a tag subscription.
pub(crate) const EXPRESSION_TYPE_TAG: &str = "TAG";

/// A subscription to the tags of a topic, as the Java client's `FilterAPI.buildSubscriptionData`
/// makes it: `subString` is the expression (`*` for every tag, then both sets are empty),
/// `tagsSet` the tags and `codeSet` their Java hash codes, which the broker compares with the
/// tag hash code stored with every message.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SubscriptionData<'a> {
    pub class_filter_mode: bool,
    pub topic: &'a str,
    pub sub_string: &'a str,
    pub tags_set: &'a [String],
    pub code_set: Vec<i32>,
    pub sub_version: i64,
    pub expression_type: &'a str,
}

impl<'a> SubscriptionData<'a> {
    fn new(topic: &'a str, expression: &'a TagExpression, sub_version: i64) -> Self {
        Self {
            class_filter_mode: false,
            topic,
            sub_string: expression.as_str(),
            tags_set: expression.tags(),
            code_set: expression
                .tags()
                .iter()
                .map(|t| java_hash_code(t))
                .collect(),
            sub_version,
            expression_type: EXPRESSION_TYPE_TAG,
        }
    }
}

/// Java's `String.hashCode()`: `s[0]*31^(n-1) + s[1]*31^(n-2) + ... + s[n-1]` over the UTF-16
/// code units, in wrapping 32-bit arithmetic. Brokers filter tags by this code.
pub(crate) fn java_hash_code(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |hash, unit| {
        hash.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ConsumerData<'a> {
    pub group_name: &'a str,
    pub consume_type: &'a str,
    pub message_model: &'a str,
    pub consume_from_where: &'a str,
    pub unit_mode: bool,
    pub subscription_data_set: Vec<SubscriptionData<'a>>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HeartbeatData<'a> {
    #[serde(rename = "clientID")]
    pub client_id: &'a str,
    pub producer_data_set: [(); 0],
    pub consumer_data_set: Vec<ConsumerData<'a>>,
    pub heartbeat_fingerprint: i32,
    pub without_sub: bool,
}

/// The heartbeat body of `registration`: one consumer data with a subscription per topic (and
/// its tags), each with its `subVersion` from `sub_versions` (in the order of
/// `registration.subscriptions`).
pub(crate) fn heartbeat_body(registration: &Registration, sub_versions: &[i64]) -> Vec<u8> {
    let subscriptions = registration
        .subscriptions
        .iter()
        .zip(sub_versions)
        .map(|(s, &sub_version)| SubscriptionData::new(&s.topic, &s.expression, sub_version))
        .collect();
    let body = HeartbeatData {
        client_id: registration.client_id.as_str(),
        producer_data_set: [],
        consumer_data_set: vec![ConsumerData {
            group_name: &registration.group,
            consume_type: CONSUME_PASSIVELY,
            message_model: registration.message_model.as_str(),
            consume_from_where: registration.consume_from.as_str(),
            unit_mode: false,
            subscription_data_set: subscriptions,
        }],
        heartbeat_fingerprint: 0,
        without_sub: false,
    };
    // Serializing plain strings, numbers and lists cannot fail.
    serde_json::to_vec(&body).unwrap_or_default()
}

/// A message queue as the Java client writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WireQueue {
    pub topic: String,
    pub broker_name: String,
    pub queue_id: i32,
}

impl From<&MessageQueue> for WireQueue {
    fn from(q: &MessageQueue) -> Self {
        Self {
            topic: q.topic.to_string(),
            broker_name: q.broker_name.to_string(),
            queue_id: q.queue_id,
        }
    }
}

impl From<WireQueue> for MessageQueue {
    fn from(q: WireQueue) -> Self {
        MessageQueue::new(q.topic.as_str(), q.broker_name.as_str(), q.queue_id)
    }
}

/// The body of LOCK_BATCH_MQ and UNLOCK_BATCH_MQ.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LockBatchBody<'a> {
    pub consumer_group: &'a str,
    pub client_id: &'a str,
    pub only_this_broker: bool,
    pub mq_set: Vec<WireQueue>,
}

/// The answer to LOCK_BATCH_MQ.
#[derive(Debug, Deserialize)]
pub(crate) struct LockBatchAnswer {
    #[serde(rename = "lockOKMQSet", default)]
    pub lock_ok_mq_set: Option<Vec<WireQueue>>,
}

/// The answer to GET_CONSUMER_LIST_BY_GROUP.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ConsumerListAnswer {
    #[serde(default)]
    pub consumer_id_list: Option<Vec<String>>,
}

#[cfg(test)]
mod tests {
    use rebalance_core::ClientId;
    use rebalance_runtime::{
        config::{ConsumeFrom, ConsumeOrder, MessageModel},
        subscription::Subscription,
    };
    use serde_json::json;

    use super::*;

    #[test]
    fn java_hash_codes() {
        // The values of Java's String.hashCode(), wrapping included.
        for (s, code) in [
            ("", 0),
            ("a", 97),
            ("TagA", 2_598_919),
            ("TagB", 2_598_920),
            ("Tag A", 80_565_531),
            ("hello world", 1_794_106_052),
            ("polygenelubricants", i32::MIN),
            ("é", 233),
            // Outside the BMP: a surrogate pair, 0xD83D * 31 + 0xDE00.
            ("😀", 1_772_899),
        ] {
            assert_eq!(java_hash_code(s), code, "{s:?}");
        }
    }

    #[test]
    fn tag_subscriptions_carry_the_expression_tags_and_codes() {
        let registration = Registration {
            client_id: ClientId::from("c"),
            group: "G".into(),
            message_model: MessageModel::Clustering,
            consume_order: ConsumeOrder::Concurrent,
            consume_from: ConsumeFrom::LastOffset,
            subscriptions: vec![
                Subscription::all("%RETRY%G"),
                Subscription::new("T", TagExpression::parse(" TagA ||TagB|| TagA ").unwrap()),
                Subscription::new("U", TagExpression::parse("").unwrap()),
            ],
        };
        let body: serde_json::Value =
            serde_json::from_slice(&heartbeat_body(&registration, &[7, 8, 9])).unwrap();
        assert_eq!(
            body["consumerDataSet"][0]["subscriptionDataSet"],
            json!([
                {"classFilterMode": false, "topic": "%RETRY%G", "subString": "*", "tagsSet": [],
                 "codeSet": [], "subVersion": 7, "expressionType": "TAG"},
                {"classFilterMode": false, "topic": "T", "subString": "TagA ||TagB|| TagA",
                 "tagsSet": ["TagA", "TagB"], "codeSet": [2_598_919, 2_598_920], "subVersion": 8,
                 "expressionType": "TAG"},
                {"classFilterMode": false, "topic": "U", "subString": "*", "tagsSet": [],
                 "codeSet": [], "subVersion": 9, "expressionType": "TAG"},
            ])
        );
    }

    #[test]
    fn heartbeat_has_every_field_the_broker_requires() {
        let registration = Registration {
            client_id: ClientId::from("127.0.0.1@1@x"),
            group: "G".into(),
            message_model: MessageModel::Broadcasting,
            consume_order: ConsumeOrder::Orderly,
            consume_from: ConsumeFrom::FirstOffset,
            subscriptions: vec![Subscription::all("T"), Subscription::all("U")],
        };
        let body: serde_json::Value =
            serde_json::from_slice(&heartbeat_body(&registration, &[42, 43])).unwrap();
        let sub = |t: &str, v: i64| {
            json!({"classFilterMode": false, "topic": t, "subString": "*", "tagsSet": [],
                   "codeSet": [], "subVersion": v, "expressionType": "TAG"})
        };
        assert_eq!(
            body,
            json!({
                "clientID": "127.0.0.1@1@x",
                "producerDataSet": [],
                "consumerDataSet": [{
                    "groupName": "G",
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "BROADCASTING",
                    "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                    "unitMode": false,
                    "subscriptionDataSet": [sub("T", 42), sub("U", 43)],
                }],
                "heartbeatFingerprint": 0,
                "withoutSub": false,
            })
        );
    }

    #[test]
    fn lock_bodies_use_the_java_names() {
        let body = LockBatchBody {
            consumer_group: "G",
            client_id: "c",
            only_this_broker: false,
            mq_set: vec![WireQueue::from(&MessageQueue::new("T", "b", 3))],
        };
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            json!({"consumerGroup": "G", "clientId": "c", "onlyThisBroker": false,
                   "mqSet": [{"topic": "T", "brokerName": "b", "queueId": 3}]})
        );
        let answer: LockBatchAnswer =
            serde_json::from_str(r#"{"lockOKMQSet":[{"topic":"T","brokerName":"b","queueId":3}]}"#)
                .unwrap();
        let queues: Vec<MessageQueue> = answer
            .lock_ok_mq_set
            .unwrap()
            .into_iter()
            .map(MessageQueue::from)
            .collect();
        assert_eq!(queues, [MessageQueue::new("T", "b", 3)]);
    }
}
