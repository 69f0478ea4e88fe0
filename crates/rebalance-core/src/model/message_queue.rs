//! [`MessageQueue`]: one queue of one topic on one broker.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::java;

/// One message queue: the unit a consumer group divides.
///
/// Equal when all three fields are equal. Ordered like the Java client's `MessageQueue`: topic,
/// then broker name (both by UTF-16 code units, see [`java::compare_str`]), then queue id.
/// Strings are shared (`Arc<str>`), so cloning costs two reference-count increments.
///
/// Queue ids are ordered as integers. Java compares them by the sign of a wrapping subtraction,
/// which agrees with integer order for every pair whose difference fits in 32 bits (all
/// non-negative ids, so all real queues) and is not a consistent order otherwise; a consistent
/// order is needed for sorting without surprises, so this type keeps integer order and
/// [`java::compare_queue_id`] offers the Java answer for a single pair.
///
/// ```
/// use rebalance_core::MessageQueue;
///
/// let mut queues = vec![
///     MessageQueue::new("TopicTest", "broker-2", 0),
///     MessageQueue::new("TopicTest", "broker-10", 1),
///     MessageQueue::new("TopicTest", "broker-10", 0),
/// ];
/// queues.sort();
/// assert_eq!(queues[0].to_string(), "MessageQueue [topic=TopicTest, brokerName=broker-10, queueId=0]");
/// assert_eq!(&*queues[2].broker_name, "broker-2");
/// ```
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageQueue {
    /// The topic the queue belongs to.
    pub topic: Arc<str>,
    /// The broker that hosts the queue (in RocketMQ, a broker *name*: a master and its slaves).
    pub broker_name: Arc<str>,
    /// The queue's number on that broker.
    pub queue_id: i32,
}

impl MessageQueue {
    /// Builds a queue. Pass `Arc<str>` values to share the strings between many queues.
    pub fn new(
        topic: impl Into<Arc<str>>,
        broker_name: impl Into<Arc<str>>,
        queue_id: i32,
    ) -> Self {
        Self {
            topic: topic.into(),
            broker_name: broker_name.into(),
            queue_id,
        }
    }

    /// Parses a queue written as a `[topic, broker_name, queue_id]` triple (the form of the
    /// reference vectors and the command line) or as a RocketMQ object
    /// (`{"topic", "brokerName", "queueId"}`).
    ///
    /// ```
    /// use rebalance_core::MessageQueue;
    /// let mq = MessageQueue::from_json(&serde_json::json!(["T", "b", 3])).unwrap();
    /// assert_eq!(mq, MessageQueue::new("T", "b", 3));
    /// assert_eq!(mq.to_json_triple(), serde_json::json!(["T", "b", 3]));
    /// assert!(MessageQueue::from_json(&serde_json::json!(["T", "b", 1e10])).is_none());
    /// ```
    pub fn from_json(v: &serde_json::Value) -> Option<Self> {
        match v {
            serde_json::Value::Array(a) if a.len() == 3 => {
                let id = i32::try_from(a[2].as_i64()?).ok()?;
                Some(Self::new(a[0].as_str()?, a[1].as_str()?, id))
            }
            serde_json::Value::Object(_) => Self::deserialize(v).ok(),
            _ => None,
        }
    }

    /// The queue as a `[topic, broker_name, queue_id]` JSON triple.
    pub fn to_json_triple(&self) -> serde_json::Value {
        serde_json::json!([&*self.topic, &*self.broker_name, self.queue_id])
    }
}

impl Ord for MessageQueue {
    fn cmp(&self, other: &Self) -> Ordering {
        // Queues of one topic usually share its string: skip comparing it with itself.
        let by = |a: &Arc<str>, b: &Arc<str>| {
            if Arc::ptr_eq(a, b) {
                Ordering::Equal
            } else {
                java::compare_str(a, b)
            }
        };
        by(&self.topic, &other.topic)
            .then_with(|| by(&self.broker_name, &other.broker_name))
            .then_with(|| self.queue_id.cmp(&other.queue_id))
    }
}

impl PartialOrd for MessageQueue {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The Java client's `toString()`, which is also the consistent-hash routing key:
/// `MessageQueue [topic=T, brokerName=B, queueId=Q]`.
impl fmt::Display for MessageQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MessageQueue [topic={}, brokerName={}, queueId={}]",
            self.topic, self.broker_name, self.queue_id
        )
    }
}

impl fmt::Debug for MessageQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.topic, self.broker_name, self.queue_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn display_matches_java_to_string() {
        let mq = MessageQueue::new("T", "b", -3);
        assert_eq!(
            mq.to_string(),
            "MessageQueue [topic=T, brokerName=b, queueId=-3]"
        );
    }

    #[test]
    fn serde_uses_rocketmq_field_names() {
        let mq = MessageQueue::new("T", "b", 1);
        let json = serde_json::to_string(&mq).unwrap();
        assert_eq!(json, r#"{"topic":"T","brokerName":"b","queueId":1}"#);
        let back: MessageQueue = serde_json::from_str(&json).unwrap();
        assert_eq!(back, mq);
    }

    #[test]
    fn from_json_takes_exactly_a_triple_or_an_object() {
        use serde_json::json;
        let mq = MessageQueue::new("T", "b", 3);
        assert_eq!(
            MessageQueue::from_json(&json!(["T", "b", 3])),
            Some(mq.clone())
        );
        assert_eq!(mq.to_json_triple(), json!(["T", "b", 3]));
        let object = json!({"topic": "T", "brokerName": "b", "queueId": 3});
        assert_eq!(MessageQueue::from_json(&object), Some(mq));
        // Malformed input from outside is refused, never a panic.
        for bad in [
            json!(["T", "b"]),
            json!(["T", "b", 3, 4]),
            json!([]),
            json!(["T", 1, 3]),
            json!(["T", "b", "3"]),
            json!(["T", "b", -2_147_483_649_i64]),
            json!({"topic": "T", "brokerName": "b"}),
            json!("T/b/3"),
        ] {
            assert_eq!(MessageQueue::from_json(&bad), None, "{bad}");
        }
    }

    #[test]
    fn order_is_topic_then_broker_then_id() {
        let a = MessageQueue::new("A", "z", 9);
        let b = MessageQueue::new("B", "a", 0);
        let c = MessageQueue::new("B", "a", 1);
        assert!(a < b && b < c);
        // UTF-16 order on broker names, not UTF-8.
        assert!(MessageQueue::new("T", "😀", 0) < MessageQueue::new("T", "ｚ", 0));
        // And on topics, which come first.
        assert!(MessageQueue::new("😀", "z", 9) < MessageQueue::new("ｚ", "a", 0));
    }

    proptest! {
        #[test]
        fn queue_id_order_matches_java_without_overflow(a in 0..=i32::MAX, b in 0..=i32::MAX) {
            let (x, y) = (MessageQueue::new("T", "b", a), MessageQueue::new("T", "b", b));
            prop_assert_eq!(x.cmp(&y), java::compare_queue_id(a, b));
        }
    }
}
