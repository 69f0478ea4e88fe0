//! A [`RunningInfo`] as the Java client's `ConsumerRunningInfo` JSON, which `mqadmin
//! consumerStatus`, `consumerProgress -s` and the dashboard parse with fastjson: string-valued
//! `properties`, a `subscriptionSet`, an `mqTable` keyed by queue objects (the popped queues in
//! `mqPopTable`), a `statusTable`, and the library's diagnostics in `userConsumerInfo`.

use rebalance_runtime::config::ConsumeOrder;
use rebalance_runtime::running::{RunningInfo, epoch_millis};
use serde_json::{Map, Value, json};

use crate::broker::wire::{CONSUME_PASSIVELY, EXPRESSION_TYPE_TAG, java_hash_code};
use crate::namespace::Namespace;
use crate::queue_keys::queue_key;

/// Java's `MQVersion` name of the protocol version this client announces (475).
pub(crate) const CLIENT_VERSION_DESC: &str = "V5_3_1";

/// The body answering GET_CONSUMER_RUNNING_INFO for `info`, names wrapped in `namespace`.
/// `name_servers`: the name server addresses, as Java lists them (`a:9876;b:9876;`).
pub(crate) fn running_info_body(
    info: &RunningInfo,
    namespace: Option<&Namespace>,
    name_servers: &str,
) -> Vec<u8> {
    let wire = |name: &str| match namespace {
        Some(ns) => ns.wrap(name).into_owned(),
        None => name.to_string(),
    };
    let started = epoch_millis(info.started_at);
    let mut properties = Map::new();
    let mut prop = |k: &str, v: String| {
        properties.insert(k.to_string(), Value::String(v));
    };
    prop("PROP_NAMESERVER_ADDR", name_servers.to_string());
    prop(
        "PROP_CONSUMEORDERLY",
        (info.consume_order == ConsumeOrder::Orderly).to_string(),
    );
    prop("PROP_CONSUME_TYPE", CONSUME_PASSIVELY.to_string());
    prop("PROP_CLIENT_VERSION", CLIENT_VERSION_DESC.to_string());
    prop("PROP_CONSUMER_START_TIMESTAMP", started.to_string());
    prop("PROP_CLIENT_LANGUAGE", "RUST".to_string());
    prop(
        "PROP_CLIENT_LIBRARY",
        concat!("rebalance-rocketmq ", env!("CARGO_PKG_VERSION")).to_string(),
    );
    prop("consumerGroup", wire(&info.group));
    prop("clientId", info.client_id.to_string());
    prop("messageModel", info.message_model.as_str().to_string());
    prop("consumeFromWhere", info.consume_from.as_str().to_string());
    prop("language", "RUST".to_string());

    let subscriptions: Vec<Value> = info
        .subscriptions
        .iter()
        .map(|s| {
            let tags = s.expression.tags();
            let codes: Vec<i32> = tags.iter().map(|t| java_hash_code(t)).collect();
            json!({
                "classFilterMode": false,
                "codeSet": codes,
                "expressionType": EXPRESSION_TYPE_TAG,
                "subString": s.expression.as_str(),
                "subVersion": started,
                "tagsSet": tags,
                "topic": wire(&s.topic),
            })
        })
        .collect();

    let mut status = Map::new();
    for (topic, s) in &info.status {
        status.insert(
            wire(topic),
            json!({
                "consumeFailedMsgs": s.consume_failed_msgs,
                "consumeFailedTPS": s.consume_failed_tps,
                "consumeOKTPS": s.consume_ok_tps,
                "consumeRT": s.consume_rt,
                "pullRT": s.pull_rt,
                "pullTPS": s.pull_tps,
            }),
        );
    }
    let user: Map<String, Value> = info
        .diagnostics
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .chain([(
            "consuming".to_string(),
            Value::String(info.consuming.to_string()),
        )])
        .collect();

    // The queue tables are fastjson's: object keys, written by hand around serde's values.
    // Popped queues go to `mqPopTable` (Java's `PopProcessQueueInfo`), the others to `mqTable`.
    let millis = |t: Option<std::time::SystemTime>| t.map_or(0, epoch_millis);
    let mut mq_pop_table = String::from("{");
    for q in info.queues.iter().filter(|q| q.popped) {
        if mq_pop_table.len() > 1 {
            mq_pop_table.push(',');
        }
        let mut queue = q.queue.clone();
        queue.topic = wire(&queue.topic).into();
        let value = json!({
            "droped": false,
            "lastPopTimestamp": millis(q.last_pull),
            "waitAckCount": q.buffer.count,
        });
        mq_pop_table.push_str(&queue_key(&queue));
        mq_pop_table.push(':');
        mq_pop_table.push_str(&value.to_string());
    }
    mq_pop_table.push('}');
    let mut mq_table = String::from("{");
    for q in info.queues.iter().filter(|q| !q.popped) {
        if mq_table.len() > 1 {
            mq_table.push(',');
        }
        let mut queue = q.queue.clone();
        queue.topic = wire(&queue.topic).into();
        let value = json!({
            "cachedMsgCount": q.buffer.count,
            "cachedMsgMaxOffset": q.buffer.max_offset,
            "cachedMsgMinOffset": q.buffer.min_offset,
            "cachedMsgSizeInMiB": q.buffer.bytes / (1024 * 1024),
            "commitOffset": q.commit_offset,
            "droped": false,
            "lastConsumeTimestamp": millis(q.last_consume),
            "lastLockTimestamp": millis(q.last_lock),
            "lastPullTimestamp": millis(q.last_pull),
            "locked": q.locked,
            "transactionMsgCount": 0,
            "transactionMsgMaxOffset": 0,
            "transactionMsgMinOffset": 0,
            "tryUnlockTimes": 0,
        });
        mq_table.push_str(&queue_key(&queue));
        mq_table.push(':');
        mq_table.push_str(&value.to_string());
    }
    mq_table.push('}');

    format!(
        "{{\"properties\":{},\"subscriptionSet\":{},\"mqTable\":{},\"mqPopTable\":{},\"statusTable\":{},\"userConsumerInfo\":{}}}",
        Value::Object(properties),
        Value::Array(subscriptions),
        mq_table,
        mq_pop_table,
        Value::Object(status),
        Value::Object(user),
    )
    .into_bytes()
}
