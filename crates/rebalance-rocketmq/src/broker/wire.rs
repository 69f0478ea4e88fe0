//! The JSON bodies of the broker requests, with the field names the servers expect.

use rebalance_core::MessageQueue;
use rebalance_runtime::Registration;
use serde::{Deserialize, Serialize};

/// `consumeType` of a push consumer (the runtime decides what to consume; the broker only
/// needs to know the client is a consumer driven by rebalancing).
pub(crate) const CONSUME_PASSIVELY: &str = "CONSUME_PASSIVELY";

/// A subscription to every tag of a topic.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SubscriptionData<'a> {
    pub class_filter_mode: bool,
    pub topic: &'a str,
    pub sub_string: &'a str,
    pub tags_set: [&'a str; 0],
    pub code_set: [i32; 0],
    pub sub_version: i64,
    pub expression_type: &'a str,
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

/// The heartbeat body of `registration`: one consumer data with a `*` subscription per topic,
/// each with its `subVersion` from `sub_versions` (in the order of `registration.topics`).
pub(crate) fn heartbeat_body(registration: &Registration, sub_versions: &[i64]) -> Vec<u8> {
    let subscriptions = registration
        .topics
        .iter()
        .zip(sub_versions)
        .map(|(topic, &sub_version)| SubscriptionData {
            class_filter_mode: false,
            topic,
            sub_string: "*",
            tags_set: [],
            code_set: [],
            sub_version,
            expression_type: "TAG",
        })
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
    use rebalance_runtime::{ConsumeFrom, ConsumeOrder, MessageModel};
    use serde_json::json;

    use super::*;

    #[test]
    fn heartbeat_has_every_field_the_broker_requires() {
        let registration = Registration {
            client_id: ClientId::from("127.0.0.1@1@x"),
            group: "G".into(),
            message_model: MessageModel::Broadcasting,
            consume_order: ConsumeOrder::Orderly,
            consume_from: ConsumeFrom::FirstOffset,
            topics: vec!["T".into(), "U".into()],
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
