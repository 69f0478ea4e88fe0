//! POP, acknowledgements and server-side assignment against scripted servers: what goes on
//! the wire (to which broker, with which names, in and out of a namespace), what a refusal of
//! the credentials becomes, and the fail-over of the assignment query.

mod scripted;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use rebalance_core::MessageQueue;
use rebalance_rocketmq::broker::assignment::{
    AssignmentAnswer, AssignmentQuery, RequestMode, RequestModeSetting,
};
use rebalance_rocketmq::broker::pop::{
    AckOutcome, AckRequest, BatchAckRequest, ChangeInvisibleTimeRequest, ChangeOutcome,
    NotificationRequest, POP_CK, PopError, PopOutcome, PopRequest, RetryFlag,
};
use rebalance_rocketmq::{
    BrokerClient, NameServerClient, Namespace, RemotingCommand, request_code,
};
use rebalance_runtime::RemoteError;
use scripted::scripted;

type Log = Arc<Mutex<Vec<RemotingCommand>>>;

fn ok() -> RemotingCommand {
    RemotingCommand::response(0, 0, None)
}

/// A name server routing every topic to `brokers` (name, address), 4 queues each.
async fn name_server(brokers: Vec<(&'static str, String)>) -> String {
    let (addr, _) = scripted(move |_req| {
        let datas: Vec<String> = brokers
            .iter()
            .map(|(name, addr)| {
                format!(r#"{{"brokerAddrs":{{"0":"{addr}"}},"brokerName":"{name}","cluster":"c"}}"#)
            })
            .collect();
        let queues: Vec<String> = brokers
            .iter()
            .map(|(name, _)| {
                format!(r#"{{"brokerName":"{name}","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}}"#)
            })
            .collect();
        let route = format!(
            r#"{{"brokerDatas":[{}],"queueDatas":[{}]}}"#,
            datas.join(","),
            queues.join(",")
        );
        Some(ok().with_body(route.into_bytes()))
    })
    .await;
    addr
}

/// A broker answering each request with `answer`, keeping every request.
async fn broker(
    answer: impl Fn(&RemotingCommand) -> RemotingCommand + Send + Sync + 'static,
) -> (String, Log) {
    let log = Log::default();
    let kept = log.clone();
    let (addr, _) = scripted(move |req| {
        kept.lock().unwrap().push(req.clone());
        Some(answer(req))
    })
    .await;
    (addr, log)
}

fn client(namesrv: &str, namespace: Option<&str>) -> BrokerClient {
    let mut builder = NameServerClient::builder(namesrv);
    if let Some(ns) = namespace {
        builder = builder.namespace(Namespace::new(ns).unwrap());
    }
    BrokerClient::new(builder.build().unwrap())
}

/// One stored-message record (V1, IPv4 hosts, uncompressed), as a broker writes it.
fn record(topic: &str, queue_id: i32, offset: i64, body: &str, properties: &str) -> Vec<u8> {
    let mut buf = BytesMut::new();
    buf.put_i32(0); // total size, set below
    buf.put_i32(0xDAA3_20A7_u32 as i32);
    buf.put_i32(0); // body CRC
    buf.put_i32(queue_id);
    buf.put_i32(0); // flag
    buf.put_i64(offset);
    buf.put_i64(1000 + offset); // commit-log offset
    buf.put_i32(0); // sysFlag
    buf.put_i64(1_700_000_000_000); // born
    buf.put_slice(&[127, 0, 0, 1]);
    buf.put_i32(5000);
    buf.put_i64(1_700_000_000_001); // stored
    buf.put_slice(&[127, 0, 0, 1]);
    buf.put_i32(10911);
    buf.put_i32(0); // reconsume times
    buf.put_i64(0); // prepared transaction offset
    buf.put_i32(body.len() as i32);
    buf.put_slice(body.as_bytes());
    buf.put_u8(topic.len() as u8);
    buf.put_slice(topic.as_bytes());
    buf.put_i16(properties.len() as i16);
    buf.put_slice(properties.as_bytes());
    let total = buf.len() as i32;
    buf[..4].copy_from_slice(&total.to_be_bytes());
    buf.to_vec()
}

/// Property string of a message with `pairs` (name \u{1} value \u{2} ...).
fn properties(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}\u{1}{v}\u{2}"))
        .collect()
}

/// A POP answer of the Rust broker's shape: one message of queue 2 at offset 7, and one copied
/// out of the retry topic with its handle set, under the popped topic (`wire_topic`).
fn popped(wire_topic: &str) -> RemotingCommand {
    let mut body = record(wire_topic, 2, 7, "fresh", &properties(&[("TAGS", "A")]));
    body.extend(record(
        wire_topic,
        0,
        4,
        "again",
        &properties(&[("TAGS", "A"), (POP_CK, "4 4000 30000 5 1 broker-a 0 4 0")]),
    ));
    RemotingCommand::response(0, 0, Some("FOUND".into()))
        .with_ext("popTime", 5000)
        .with_ext("invisibleTime", 30000)
        .with_ext("reviveQid", 3)
        .with_ext("restNum", 0)
        .with_ext("startOffsetInfo", "1 0 4;0 2 7")
        .with_ext("msgOffsetInfo", "1 0 4;0 2 7")
        .with_body(body)
}

/// A pop, acknowledgements of both messages (the redelivered one on its POP retry topic), a
/// change of invisible time and a batch acknowledgement reach the master of the broker with
/// the names it knows, in and out of a namespace; the messages come back with plain names.
#[tokio::test]
async fn pops_and_acknowledgements_reach_the_broker_with_the_names_it_knows() {
    for namespace in [None, Some("NS")] {
        let wrap = |name: &str| match namespace {
            Some(ns) => format!("{ns}%{name}"),
            None => name.to_string(),
        };
        let wire_topic = wrap("T");
        let answer_topic = wire_topic.clone();
        let (addr, log) = broker(move |req| match req.code {
            request_code::POP_MESSAGE => popped(&answer_topic),
            request_code::CHANGE_MESSAGE_INVISIBLETIME => ok()
                .with_ext("popTime", 9000)
                .with_ext("invisibleTime", 2000)
                .with_ext("reviveQid", 3),
            _ => ok(),
        })
        .await;
        let brokers = client(&name_server(vec![("broker-a", addr)]).await, namespace);
        let request = PopRequest::new("G", MessageQueue::new("T", "broker-a", -1))
            .with_poll_time(Duration::from_millis(100));
        let PopOutcome::Found(batch) = brokers.pop(&request).await.unwrap() else {
            panic!("nothing popped");
        };
        let queues: Vec<&MessageQueue> = batch.messages.iter().map(|m| m.message.queue()).collect();
        assert_eq!(
            queues,
            [
                &MessageQueue::new("T", "broker-a", 2),
                &MessageQueue::new("%RETRY%G_T", "broker-a", 0)
            ]
        );
        assert!(batch.messages.iter().all(|m| m.message.topic() == "T"));
        assert_eq!(
            batch.messages[0].handle.as_str(),
            "7 5000 30000 3 0 broker-a 2 7"
        );
        assert_eq!(batch.messages[1].handle.fields().retry, RetryFlag::V1);

        for popped in &batch.messages {
            let ack = AckRequest::new("G", "T", popped.handle.clone());
            assert_eq!(brokers.ack(&ack).await.unwrap(), AckOutcome::Acked);
        }
        let change = ChangeInvisibleTimeRequest::new(
            "G",
            "T",
            batch.messages[0].handle.clone(),
            Duration::from_secs(2),
        );
        let ChangeOutcome::Changed(new) = brokers.change_invisible_time(&change).await.unwrap()
        else {
            panic!("not changed");
        };
        assert_eq!(new.as_str(), "7 9000 2000 3 0 broker-a 2 7");
        let handles = batch.messages.iter().map(|m| m.handle.clone()).collect();
        let outcome = brokers
            .batch_ack(&BatchAckRequest::new("G", "T", handles))
            .await;
        assert_eq!(outcome.unwrap(), AckOutcome::Acked);

        let sent = log.lock().unwrap().clone();
        let codes: Vec<i32> = sent.iter().map(|r| r.code).collect();
        assert_eq!(
            codes,
            [200050, 200051, 200051, 200053, 200151],
            "{namespace:?}"
        );
        let pop = &sent[0];
        assert_eq!(pop.ext("consumerGroup"), Some(wrap("G").as_str()));
        assert_eq!(pop.ext("topic"), Some(wire_topic.as_str()));
        assert_eq!(pop.ext("queueId"), Some("-1"));
        let retry_topic = format!("%RETRY%{}_{}", wrap("G"), wrap("T"));
        let acked: Vec<(Option<&str>, Option<&str>, Option<&str>)> = sent[1..3]
            .iter()
            .map(|r| (r.ext("topic"), r.ext("queueId"), r.ext("offset")))
            .collect();
        assert_eq!(
            acked,
            [
                (Some(wire_topic.as_str()), Some("2"), Some("7")),
                (Some(retry_topic.as_str()), Some("0"), Some("4")),
            ]
        );
        assert!(
            sent[1..4]
                .iter()
                .all(|r| r.ext("bname") == Some("broker-a"))
        );
        let body: serde_json::Value = serde_json::from_slice(&sent[4].body).unwrap();
        assert_eq!(body["brokerName"], "broker-a");
        assert_eq!(
            body["acks"].as_array().unwrap().len(),
            2,
            "two pops: two entries"
        );
        assert!(
            body["acks"]
                .as_array()
                .unwrap()
                .iter()
                .all(|a| a["t"] == wire_topic.as_str())
        );
    }
}

/// The answers every broker version gives for a refusal of the credentials or permissions.
const DENIALS: [(i32, &str); 3] = [
    (16, "Authentication credentials are invalid"),
    (3001, "User:x is not found."),
    (
        1,
        "org.apache.rocketmq.acl.common.AclException: Check signature failed",
    ),
];

/// A refused POP, acknowledgement, notification or assignment query is a denial naming the
/// operation and the group and topic as the servers know them.
#[tokio::test]
async fn refusals_of_the_credentials_are_denials_naming_the_operation() {
    for (code, remark) in DENIALS {
        let (addr, _log) =
            broker(move |_| RemotingCommand::response(code, 0, Some(remark.into()))).await;
        let brokers = client(
            &name_server(vec![("broker-a", addr.clone())]).await,
            Some("NS"),
        );
        let queue = MessageQueue::new("T", "broker-a", 0);
        let handle = "1 2 3 4 0 broker-a 0 1".parse().unwrap();
        let expect = |operation: &'static str, result: Result<(), PopError>| {
            assert_eq!(
                result,
                Err(PopError::Remote(RemoteError::Denied {
                    server: addr.clone(),
                    operation,
                    resource: "group `NS%G` on topic `NS%T`".into(),
                    code,
                    remark: remark.into(),
                })),
                "{operation}, code {code}"
            );
        };
        let pop = PopRequest::new("G", queue.clone()).with_poll_time(Duration::ZERO);
        expect("pop", brokers.pop(&pop).await.map(drop));
        expect(
            "ack",
            brokers
                .ack(&AckRequest::new("G", "T", handle))
                .await
                .map(drop),
        );
        let notification = NotificationRequest::new("G", queue).with_poll_time(Duration::ZERO);
        expect(
            "notification",
            brokers.notification(&notification).await.map(drop),
        );
        let query = AssignmentQuery::new("T", "G", "c1", "AVG");
        expect(
            "query assignment",
            brokers.query_assignment(&query).await.map(drop),
        );
    }
}

/// The assignment query goes to the next broker of the topic when one cannot be reached; the
/// request mode is set at every broker, and a broker that could not be told fails the call.
#[tokio::test]
async fn assignment_queries_fail_over_and_request_modes_reach_every_broker() {
    let (addr, log) = broker(|req| match req.code {
        request_code::QUERY_ASSIGNMENT => ok().with_body(
            br#"{"messageQueueAssignments":[{"messageQueue":{"topic":"T","brokerName":"broker-b","queueId":-1},"mode":"POP","attachments":null}]}"#.to_vec(),
        ),
        _ => ok(),
    })
    .await;
    // broker-a's address refuses connections.
    let unreachable = "127.0.0.1:1".to_string();
    let namesrv = name_server(vec![("broker-a", unreachable), ("broker-b", addr)]).await;
    let brokers = client(&namesrv, None);
    let query = AssignmentQuery::new("T", "G", "c1", "AVG");
    let answer = brokers.query_assignment(&query).await.unwrap();
    let AssignmentAnswer::Queues(queues) = answer else {
        panic!("unbalanced");
    };
    assert_eq!(queues.len(), 1);
    assert_eq!(queues[0].queue, MessageQueue::new("T", "broker-b", -1));
    assert_eq!(queues[0].mode, RequestMode::Pop);

    let setting = RequestModeSetting::new("T", "G", RequestMode::Pop);
    let err = brokers
        .set_message_request_mode(&setting)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            PopError::Remote(RemoteError::Unreachable(_) | RemoteError::Timeout { .. })
        ),
        "{err:?}"
    );
    brokers
        .set_message_request_mode_at("broker-b", &setting)
        .await
        .unwrap();
    let codes: Vec<i32> = log.lock().unwrap().iter().map(|r| r.code).collect();
    assert_eq!(codes, [400, 401, 401], "broker-b was told both times");
    let body: serde_json::Value = serde_json::from_slice(&log.lock().unwrap()[1].body).unwrap();
    assert_eq!(body["mode"], "POP");
}

/// The broker client as the consume layer's `PopSource`: the messages (each with its handle)
/// and the tag-collided ones to acknowledge; POLLING_FULL as a failure and FLOW_CONTROL as
/// throttling; one
/// handle acknowledged with ACK_MESSAGE, several with one BATCH_ACK_MESSAGE, one by one in
/// order when the broker refuses the batch; a change of invisible time giving the new handle,
/// and 208 as a refusal with its code.
#[tokio::test]
async fn the_pop_source_maps_every_answer() {
    use rebalance_consume::{PopResult, PopSource, PullError};
    use rebalance_runtime::subscription::TagExpression;
    let refuse_batches = Arc::new(Mutex::new(false));
    let refusing = refuse_batches.clone();
    let polls = Arc::new(Mutex::new(0));
    let (addr, log) = broker(move |req| match req.code {
        request_code::POP_MESSAGE => {
            let mut n = polls.lock().unwrap();
            *n += 1;
            match *n {
                1 => {
                    let answer = popped("T");
                    // A second fresh message of queue 2 with another tag: popped, filtered.
                    let mut body = answer.body.to_vec();
                    body.extend(record("T", 2, 8, "other", &properties(&[("TAGS", "B")])));
                    answer
                        .with_ext("startOffsetInfo", "1 0 4;0 2 7")
                        .with_ext("msgOffsetInfo", "1 0 4;0 2 7;8")
                        .with_body(body)
                }
                2 => RemotingCommand::response(209, 0, Some("POLLING_FULL".into())),
                3 => RemotingCommand::response(215, 0, None),
                _ => RemotingCommand::response(210, 0, Some("NO_MESSAGE_IN_QUEUE".into())),
            }
        }
        request_code::BATCH_ACK_MESSAGE if *refusing.lock().unwrap() => {
            RemotingCommand::response(1, 0, Some("Serialization failed".into()))
        }
        request_code::CHANGE_MESSAGE_INVISIBLETIME if req.ext("offset") == Some("9") => {
            RemotingCommand::response(208, 0, Some("gone".into()))
        }
        request_code::CHANGE_MESSAGE_INVISIBLETIME => ok()
            .with_ext("popTime", 6000)
            .with_ext("invisibleTime", 1000)
            .with_ext("reviveQid", 3),
        _ => ok(),
    })
    .await;
    let namesrv = name_server(vec![("broker-a", addr)]).await;
    let source = client(&namesrv, None);
    let request = rebalance_consume::PopRequest::new(
        "G",
        MessageQueue::new("T", "broker-a", -1),
        TagExpression::parse("A").unwrap(),
    )
    .with_poll_time(Duration::ZERO);
    let PopResult::Found { messages, filtered } = PopSource::pop(&source, &request).await.unwrap()
    else {
        panic!("found");
    };
    let shown: Vec<(i32, i64, &str)> = messages
        .iter()
        .map(|m| {
            (
                m.queue().queue_id,
                m.queue_offset(),
                m.receipt_handle().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            (2, 7, "7 5000 30000 3 0 broker-a 2 7"),
            (0, 4, "4 4000 30000 5 1 broker-a 0 4 0")
        ]
    );
    assert_eq!(filtered.len(), 1);
    assert_eq!(
        (filtered[0].queue().queue_id, filtered[0].queue_offset()),
        (2, 8)
    );
    assert_eq!(
        filtered[0].receipt_handle(),
        Some("7 5000 30000 3 0 broker-a 2 8")
    );
    // POLLING_FULL: a failure (popped again after the error delay); FLOW_CONTROL: throttling
    // (20 ms).
    assert!(matches!(
        PopSource::pop(&source, &request).await,
        Err(PullError::Remote(RemoteError::Refused { code: 209, .. }))
    ));
    assert!(matches!(
        PopSource::pop(&source, &request).await,
        Err(PullError::Throttled(RemoteError::Refused { code: 215, .. }))
    ));
    assert_eq!(
        PopSource::pop(&source, &request).await.unwrap(),
        PopResult::NoMessage
    );

    let handles: Vec<&str> = messages
        .iter()
        .map(|m| m.receipt_handle().unwrap())
        .collect();
    log.lock().unwrap().clear();
    PopSource::ack(&source, "G", "T", &handles[..1])
        .await
        .unwrap();
    PopSource::ack(&source, "G", "T", &handles).await.unwrap();
    *refuse_batches.lock().unwrap() = true;
    PopSource::ack(&source, "G", "T", &handles).await.unwrap();
    let codes: Vec<(i32, Option<String>)> = log
        .lock()
        .unwrap()
        .iter()
        .map(|c| (c.code, c.ext("offset").map(String::from)))
        .collect();
    let ack = request_code::ACK_MESSAGE;
    let batch = request_code::BATCH_ACK_MESSAGE;
    assert_eq!(
        codes,
        [
            (ack, Some("7".into())),
            (batch, None),
            (batch, None),
            (ack, Some("7".into())),
            (ack, Some("4".into())),
        ]
    );
    assert!(matches!(
        PopSource::ack(&source, "G", "T", &["garbage"]).await,
        Err(RemoteError::Refused { code: 29, .. })
    ));
    let changed =
        PopSource::change_invisible_time(&source, "G", "T", handles[0], Duration::from_secs(1))
            .await
            .unwrap();
    assert_eq!(changed, "7 6000 1000 3 0 broker-a 2 7");
    let gone = "9 5000 30000 3 0 broker-a 2 9";
    assert!(matches!(
        PopSource::change_invisible_time(&source, "G", "T", gone, Duration::ZERO).await,
        Err(RemoteError::Refused { code: 208, .. })
    ));
}

/// The broker client as the runtime's `AssignmentSource`: the strategies it can run, the
/// answer's queues with their read modes, "cannot allocate" as unbalanced, and the read mode
/// set at every broker.
#[tokio::test]
async fn the_assignment_source_maps_every_answer() {
    use rebalance_runtime::{AssignmentRequest, AssignmentSource, ReadMode, ServerAnswer};
    let answers = Arc::new(Mutex::new(0));
    let (addr, log) = broker(move |req| match req.code {
        request_code::QUERY_ASSIGNMENT => {
            let mut n = answers.lock().unwrap();
            *n += 1;
            let body = if *n == 1 {
                r#"{"messageQueueAssignments":[{"messageQueue":{"topic":"T","brokerName":"broker-a","queueId":-1},"mode":"POP","attachments":null},{"messageQueue":{"topic":"T","brokerName":"broker-a","queueId":2},"mode":"PULL"}]}"#
            } else {
                "{}"
            };
            ok().with_body(body.as_bytes().to_vec())
        }
        _ => ok(),
    })
    .await;
    let namesrv = name_server(vec![("broker-a", addr)]).await;
    let source = client(&namesrv, None);
    assert_eq!(source.strategies(), ["AVG", "AVG_BY_CIRCLE"]);
    let me = rebalance_core::ClientId::from("10.0.0.1@1");
    let request = AssignmentRequest {
        group: "G",
        client_id: &me,
        topic: "T",
        strategy: "AVG",
    };
    let ServerAnswer::Queues(queues) = AssignmentSource::query_assignment(&source, &request)
        .await
        .unwrap()
    else {
        panic!("queues");
    };
    let shown: Vec<(i32, ReadMode)> = queues.iter().map(|q| (q.queue.queue_id, q.mode)).collect();
    assert_eq!(shown, [(-1, ReadMode::Pop), (2, ReadMode::Pull)]);
    assert_eq!(
        AssignmentSource::query_assignment(&source, &request)
            .await
            .unwrap(),
        ServerAnswer::Unbalanced
    );
    source
        .set_read_mode("G", "T", ReadMode::Pop, 1)
        .await
        .unwrap();
    let set = log.lock().unwrap().last().cloned().unwrap();
    assert_eq!(set.code, request_code::SET_MESSAGE_REQUEST_MODE);
    let body: serde_json::Value = serde_json::from_slice(&set.body).unwrap();
    assert_eq!(body["mode"], "POP");
    assert_eq!(body["popShareQueueNum"], 1);
    assert!(matches!(
        source
            .set_read_mode("G", "%RETRY%G", ReadMode::Pop, 0)
            .await,
        Err(RemoteError::Refused { code: 29, .. })
    ));
}

/// `record` with a zlib-compressed body of 16 MiB and one byte of zeros (sysFlag 0x1): past
/// the decode limit, a message no pop can deliver.
fn oversized_record(topic: &str, queue_id: i32, offset: i64, properties: &str) -> Vec<u8> {
    use std::io::Write;
    let mut zlib = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    zlib.write_all(&vec![0u8; (16 << 20) + 1]).unwrap();
    let body = zlib.finish().unwrap();
    let plain = record(topic, queue_id, offset, "", properties);
    // The fixed fields up to the body length are the same; patch sysFlag, then splice the body.
    let sys_flag_at = 4 + 4 + 4 + 4 + 4 + 8 + 8;
    let body_len_at = sys_flag_at + 4 + 8 + 8 + 8 + 8 + 4 + 8;
    let mut out = plain[..body_len_at].to_vec();
    out[sys_flag_at..sys_flag_at + 4].copy_from_slice(&1i32.to_be_bytes());
    out.extend_from_slice(&(body.len() as i32).to_be_bytes());
    out.extend_from_slice(&body);
    out.extend_from_slice(&plain[body_len_at + 4..]);
    let total = out.len() as i32;
    out[..4].copy_from_slice(&total.to_be_bytes());
    out
}

/// Found by review: a popped message too large to decode failed the whole pop, whose messages
/// were then invisible until their invisible time and popped again with it, forever (or lost,
/// where the broker does not revive them). The others are delivered; it is moved to the dead
/// letters by its commit-log offset (level -1, never the fallback) and its handle listed to be
/// acknowledged; refused, it stays out of both, to come back after its invisible time.
#[tokio::test]
async fn a_popped_message_too_large_to_decode_is_dead_lettered_and_acknowledged() {
    let mut body = record("T", 2, 7, "fresh", &properties(&[("TAGS", "A")]));
    body.extend(oversized_record("T", 2, 8, &properties(&[("TAGS", "A")])));
    for refuse in [false, true] {
        let body = body.clone();
        let (addr, log) = broker(move |req| match req.code {
            request_code::POP_MESSAGE => RemotingCommand::response(0, 0, Some("FOUND".into()))
                .with_ext("popTime", 5000)
                .with_ext("invisibleTime", 30000)
                .with_ext("reviveQid", 3)
                .with_ext("restNum", 0)
                .with_ext("startOffsetInfo", "0 2 7")
                .with_ext("msgOffsetInfo", "0 2 7,8")
                .with_body(body.clone()),
            request_code::CONSUMER_SEND_MSG_BACK if refuse => {
                RemotingCommand::response(1, 0, Some("look message by offset failed".into()))
            }
            _ => ok(),
        })
        .await;
        let brokers = client(&name_server(vec![("broker-a", addr)]).await, None);
        let request = PopRequest::new("G", MessageQueue::new("T", "broker-a", -1))
            .with_poll_time(Duration::from_millis(100));
        let PopOutcome::Found(batch) = brokers.pop(&request).await.unwrap() else {
            panic!("nothing popped");
        };
        let delivered: Vec<i64> = batch
            .messages
            .iter()
            .map(|m| m.message.queue_offset())
            .collect();
        assert_eq!(
            delivered,
            [7],
            "the others are delivered (refused: {refuse})"
        );
        let requests = log.lock().unwrap().clone();
        let codes: Vec<i32> = requests.iter().map(|r| r.code).collect();
        assert_eq!(codes, [request_code::POP_MESSAGE, 36], "never the fallback");
        let back = &requests[1];
        assert_eq!(back.ext("offset"), Some("1008"), "by its commit-log offset");
        assert_eq!(back.ext("delayLevel"), Some("-1"));
        assert_eq!(back.ext("originTopic"), Some("T"));
        let handle = "7 5000 30000 3 0 broker-a 2 8";
        if refuse {
            assert!(batch.unmatched.is_empty());
            assert_eq!(batch.oversized.len(), 1);
            assert_eq!(batch.oversized[0].handle.as_str(), handle);
            assert!(batch.oversized[0].message.body().is_empty());
        } else {
            let acknowledged: Vec<&str> = batch.unmatched.iter().map(|h| h.as_str()).collect();
            assert_eq!(acknowledged, [handle]);
            assert!(batch.oversized.is_empty());
        }
    }
}
