//! POP consumption and server-side assignment against a real RocketMQ name server and broker
//! (the Rust broker 1.0): every fact the transport relies on, checked. Every wait is bounded.
//!
//! What the Rust broker 1.0 does, as these tests observe it (where it differs from the Java
//! broker or from the spec, the test says so):
//! - POP needs no SET_MESSAGE_REQUEST_MODE first: the mode only changes what
//!   QUERY_ASSIGNMENT assigns.
//! - **Unacknowledged messages of a concurrent POP never come back.** The broker writes each
//!   pop's checkpoint (and each ACK) to its revive log as a timer message whose *delay*
//!   (`TIMER_DELAY_MS`) is the *absolute* revive time, which its timer refuses ("timer delay
//!   exceeds the configured maximum", status `WheelTimerMsgIllegal`): no checkpoint is ever
//!   stored, nothing is revived, no POP retry topic is created, and since the group's offset
//!   moved at the pop, a popped message that is not consumed is lost to the group. ACK answers 0
//!   all the same (its ACK record is refused too, and logged).
//! - So CHANGE_MESSAGE_INVISIBLETIME of a concurrent POP's message answers 1 `append check
//!   point error, status: WheelTimerMsgIllegal`.
//! - Orderly POP works differently (no checkpoint: the queue is blocked) and does redeliver,
//!   with the count in `orderCountInfo`; but acknowledging a later message of the batch before an
//!   earlier one moves the group past the earlier one, which is then never redelivered, and a
//!   batch acknowledged in full still blocks its queue until its invisible time has passed.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rebalance_consume::property;
use rebalance_core::MessageQueue;
use rebalance_rocketmq::broker::assignment::{
    AssignmentAnswer, AssignmentQuery, RequestMode, RequestModeSetting,
};
use rebalance_rocketmq::broker::pop::{
    AckOutcome, AckRequest, BatchAckRequest, ChangeInvisibleTimeRequest, ChangeOutcome,
    NotificationRequest, PopFilter, PopInitMode, PopOutcome, PopRequest, PoppedMessage,
    ReceiptHandle, RetryFlag, ack_message_request, pop_message_request,
};
use rebalance_rocketmq::message::unique_id;
use rebalance_rocketmq::producer::{Message as Outgoing, MessageSender};
use rebalance_rocketmq::testkit::TestCluster;
use rebalance_rocketmq::{BrokerClient, NameServerClient, RemotingClient, RemotingCommand};
use rebalance_runtime::GroupDirectory;
use rebalance_runtime::config::MessageModel;
use tokio::time::Instant;

use common::init_tracing;

const BROKER: &str = "broker-a";

struct Setup {
    // Dropped before the cluster: the servers outlive the clients.
    brokers: BrokerClient,
    sender: MessageSender,
    raw: RemotingClient,
    broker_addr: String,
    topic: String,
    cluster: TestCluster,
}

async fn setup(topic: &str, queues: i32) -> Setup {
    init_tracing();
    let cluster = TestCluster::start().unwrap();
    cluster.create_topic(topic, queues).await.unwrap();
    let name_server = NameServerClient::from_addresses(&cluster.namesrv_addr()).unwrap();
    let brokers = BrokerClient::new(name_server.clone());
    let sender = MessageSender::new(name_server, "pop-test-producer");
    Setup {
        brokers,
        sender,
        raw: cluster.remoting(),
        broker_addr: cluster.first_broker_addr(),
        topic: topic.to_string(),
        cluster,
    }
}

impl Setup {
    fn queue(&self, id: i32) -> MessageQueue {
        MessageQueue::new(self.topic.as_str(), BROKER, id)
    }

    /// Sends `n` messages round-robin over `queues` queues; returns their ids in order, once
    /// the broker has dispatched them all to its queues (a POP right after a send may otherwise
    /// see only some of them).
    async fn send(&self, n: usize, queues: i32) -> Vec<String> {
        let mut ids = Vec::new();
        let mut ends = BTreeMap::new();
        for i in 0..n {
            let id = unique_id();
            let message = Outgoing::new(format!("m{i}"))
                .with_tags("A")
                .with_property(property::UNIQ_KEY, &id);
            let queue = self.queue(i as i32 % queues);
            let sent = self.sender.send(&queue, &message).await.unwrap();
            let offset = sent.queue_offset.expect("the broker says the offset");
            ends.insert(queue.queue_id, offset + 1);
            ids.push(id);
        }
        for (queue_id, end) in ends {
            let dispatched = rebalance_rocketmq::testkit::wait_until(
                Duration::from_secs(10),
                Duration::from_millis(20),
                || async move {
                    let (_, max) = self.max_offset(&self.topic, queue_id).await;
                    (max >= Some(end)).then_some(())
                },
            )
            .await;
            assert!(
                dispatched.is_some(),
                "queue {queue_id} not at {end} within 10 s"
            );
        }
        ids
    }

    /// A request sent as it is, and the broker's answer whatever it is.
    async fn raw(&self, command: RemotingCommand) -> RemotingCommand {
        self.raw
            .invoke_with_timeout(&self.broker_addr, command, Duration::from_secs(20))
            .await
            .unwrap()
    }

    /// A POP by `group` of every queue, answered at once, invisible for `invisible`.
    fn pop_request(&self, group: &str, invisible: Duration) -> PopRequest {
        PopRequest::new(group, self.queue(-1))
            .with_invisible_time(invisible)
            .with_poll_time(Duration::from_millis(500))
            .with_init_mode(PopInitMode::Min)
    }

    /// Pops with `request` until `want` messages came or `within` passed.
    async fn pop_until(
        &self,
        request: &PopRequest,
        want: usize,
        within: Duration,
    ) -> Vec<PoppedMessage> {
        let deadline = Instant::now() + within;
        let mut got = Vec::new();
        while got.len() < want && Instant::now() < deadline {
            if let PopOutcome::Found(batch) = self.brokers.pop(request).await.unwrap() {
                assert!(batch.unmatched.is_empty());
                got.extend(batch.messages);
            }
        }
        got
    }

    async fn ack(&self, group: &str, handle: &ReceiptHandle) -> AckOutcome {
        let request = AckRequest::new(group, self.topic.as_str(), handle.clone());
        self.brokers.ack(&request).await.unwrap()
    }

    /// GET_MAX_OFFSET of queue `queue_id` of `topic` (code and offset).
    async fn max_offset(&self, topic: &str, queue_id: i32) -> (i32, Option<i64>) {
        let answer = self
            .raw(
                RemotingCommand::request(30)
                    .with_ext("topic", topic)
                    .with_ext("queueId", queue_id),
            )
            .await;
        (
            answer.code,
            answer.ext("offset").and_then(|o| o.parse().ok()),
        )
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn ids(messages: &[PoppedMessage]) -> BTreeSet<String> {
    messages
        .iter()
        .map(|m| m.message.msg_id().to_string())
        .collect()
}

/// Popped messages are invisible to the next POP, their handles are those the broker expects,
/// and every one acknowledged is answered 0. No SET_MESSAGE_REQUEST_MODE is needed first.
///
/// Observed: the 0 answer's header has `popTime` (the broker's now), `invisibleTime`,
/// `reviveQid` (rotating over the revive queues from one POP to the next), `restNum`,
/// `startOffsetInfo` and `msgOffsetInfo`, whose offsets of one queue are joined by `;`
/// (`0 0 0;1;2;0 1 0;1`, where Java writes `0 0 0,1,2;0 1 0,1`), starting with a queue
/// that changes from one POP to the next; an empty answer is 210
/// `NO_MESSAGE_IN_QUEUE` without any header field.
#[tokio::test]
async fn popped_messages_are_invisible_until_acknowledged() {
    let s = setup("PopInvisible", 4).await;
    let group = "pop-invisible";
    let sent = s.send(10, 4).await;
    // The first answer raw, to see its header as the broker writes it.
    let request = s.pop_request(group, Duration::from_secs(30));
    let first = s.raw(pop_message_request(&request, None).unwrap()).await;
    assert_eq!(first.code, 0, "{first:?}");
    assert_eq!(first.remark.as_deref(), Some("FOUND"));
    let pop_time: i64 = first.ext("popTime").unwrap().parse().unwrap();
    assert!(
        (pop_time - now_ms()).abs() < 10_000,
        "popTime is the broker's now"
    );
    assert_eq!(first.ext("invisibleTime"), Some("30000"));
    let records =
        rebalance_rocketmq::message::decode_batch(&first.body, &Default::default()).unwrap();
    assert_eq!(
        records.len(),
        10,
        "one POP of queue -1 takes from every queue"
    );
    // The queues come in an order that rotates; each one's offsets are joined by `;`.
    let offsets = first.ext("msgOffsetInfo").unwrap();
    for entry in ["0 0 0;1;2", "0 1 0;1;2", "0 2 0;1", "0 3 0;1"] {
        assert!(offsets.contains(entry), "{offsets}");
    }
    assert!(!offsets.contains(','), "{offsets}");
    let starts: BTreeSet<&str> = first.ext("startOffsetInfo").unwrap().split(';').collect();
    assert_eq!(starts, BTreeSet::from(["0 0 0", "0 1 0", "0 2 0", "0 3 0"]));
    let first_revive_qid = first.ext("reviveQid").unwrap().to_string();

    let again = s.raw(pop_message_request(&request, None).unwrap()).await;
    assert_eq!(again.code, 210, "{again:?}");
    assert_eq!(again.remark.as_deref(), Some("NO_MESSAGE_IN_QUEUE"));
    assert!(again.ext_fields.is_empty(), "no header: {again:?}");
    assert_eq!(
        s.brokers.pop(&request).await.unwrap(),
        PopOutcome::NoMessage
    );

    // Through the client, three at a time: every message with its handle, acknowledged.
    let more = s.send(9, 4).await;
    let small = request.clone().with_max_messages(3);
    let mut revive_qids = BTreeSet::from([first_revive_qid]);
    let mut popped = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while popped.len() < more.len() && Instant::now() < deadline {
        if let PopOutcome::Found(batch) = s.brokers.pop(&small).await.unwrap() {
            assert!(batch.messages.len() <= 3);
            revive_qids.insert(batch.revive_queue_id.to_string());
            popped.extend(batch.messages);
        }
    }
    assert_eq!(ids(&popped), more.iter().cloned().collect());
    assert!(
        revive_qids.len() > 1,
        "the revive queue rotates: {revive_qids:?}"
    );
    for m in &popped {
        let fields = m.handle.fields();
        assert_eq!(fields.retry, RetryFlag::Normal);
        assert_eq!(fields.broker_name, BROKER);
        assert_eq!(fields.queue_id, m.message.queue().queue_id);
        assert_eq!(fields.queue_offset, m.message.queue_offset());
        assert!(fields.checkpoint_offset <= fields.queue_offset);
        assert_eq!(m.message.queue().topic.as_ref(), s.topic);
        assert_eq!(s.ack(group, &m.handle).await, AckOutcome::Acked);
    }
    assert!(!sent.is_empty());
}

/// The Rust broker 1.0 never brings an unacknowledged message of a concurrent POP back (see
/// the [crate documentation](self)): none within 20 s of its invisible time, no checkpoint in
/// the revive log, no POP retry topic.
#[tokio::test]
async fn the_rust_broker_never_brings_unacknowledged_messages_back() {
    let s = setup("PopRevive", 4).await;
    let group = "pop-revive";
    let sent = s.send(4, 4).await;
    let request = s.pop_request(group, Duration::from_secs(2));
    let popped = s.pop_until(&request, 4, Duration::from_secs(20)).await;
    assert_eq!(ids(&popped), sent.iter().cloned().collect());
    // Two acknowledged, two not.
    for m in popped.iter().filter(|m| m.message.queue().queue_id < 2) {
        assert_eq!(s.ack(group, &m.handle).await, AckOutcome::Acked);
    }
    let watch = s.pop_request(group, Duration::from_secs(60));
    let back = s.pop_until(&watch, 1, Duration::from_secs(22)).await;
    assert!(back.is_empty(), "came back: {back:?}");
    for queue_id in 0..8 {
        assert_eq!(
            s.max_offset("rmq_sys_REVIVE_LOG_DefaultCluster", queue_id)
                .await,
            (0, Some(0)),
            "revive queue {queue_id} holds no checkpoint"
        );
    }
    let retry_topic = format!("%RETRY%{group}_{}", s.topic);
    let retry = s.max_offset(&retry_topic, 0).await;
    eprintln!("FACT max offset of {retry_topic}: {retry:?}");
    assert!(
        matches!(retry, (17, _) | (0, Some(0))),
        "nothing in the POP retry topic: {retry:?}"
    );
}

/// CHANGE_MESSAGE_INVISIBLETIME of a concurrent POP's message fails on the Rust broker 1.0
/// (its new checkpoint is refused like every other, see the [crate documentation](self)).
#[tokio::test]
async fn changing_a_concurrent_pops_invisible_time_fails() {
    let s = setup("PopChange", 1).await;
    let group = "pop-change";
    s.send(1, 1).await;
    let request = s.pop_request(group, Duration::from_secs(60));
    let popped = s.pop_until(&request, 1, Duration::from_secs(20)).await;
    let change = ChangeInvisibleTimeRequest::new(
        group,
        s.topic.as_str(),
        popped[0].handle.clone(),
        Duration::from_secs(1),
    );
    let err = s.brokers.change_invisible_time(&change).await.unwrap_err();
    assert!(
        matches!(&err, rebalance_rocketmq::broker::pop::PopError::Remote(rebalance_runtime::RemoteError::Refused { code: 1, remark }) if remark.contains("WheelTimerMsgIllegal")),
        "{err:?}"
    );
    // An offset past the queue's end is answered 208 before that.
    let mut fields = popped[0].handle.fields().clone();
    fields.queue_offset = 5;
    let past = ChangeInvisibleTimeRequest::new(
        group,
        s.topic.as_str(),
        ReceiptHandle::from_fields(fields).unwrap(),
        Duration::from_secs(1),
    );
    assert!(matches!(
        s.brokers.change_invisible_time(&past).await.unwrap(),
        ChangeOutcome::NoMessage { .. }
    ));
}

/// BATCH_ACK_MESSAGE with the bit set as a JSON array of whole 8-byte words is answered 0; a
/// base64 bit set (how fastjson writes Java's `byte[]`) fails the body's decoding (1
/// `Serialization failed`); a body without acknowledgements is answered 208.
#[tokio::test]
async fn batch_acknowledgements_and_their_bit_sets() {
    let s = setup("PopBatchAck", 2).await;
    let group = "pop-batch";
    let sent = s.send(6, 2).await;
    let request = s.pop_request(group, Duration::from_secs(30));
    let popped = s.pop_until(&request, 6, Duration::from_secs(20)).await;
    assert_eq!(ids(&popped), sent.iter().cloned().collect());
    let handles = popped.iter().map(|m| m.handle.clone()).collect();
    let outcome = s
        .brokers
        .batch_ack(&BatchAckRequest::new(group, s.topic.as_str(), handles))
        .await
        .unwrap();
    assert_eq!(outcome, AckOutcome::Acked);
    let base64 = format!(
        r#"{{"brokerName":"{BROKER}","acks":[{{"c":"{group}","t":"{}","r":"0","so":0,"q":0,"rq":0,"pt":1,"it":1,"b":"AQAAAAAAAAA="}}]}}"#,
        s.topic
    );
    let answer = s
        .raw(RemotingCommand::request(200151).with_body(base64.into_bytes()))
        .await;
    assert_eq!(
        (answer.code, answer.remark.as_deref()),
        (1, Some("Serialization failed"))
    );
    let empty = format!(r#"{{"brokerName":"{BROKER}","acks":[]}}"#);
    let answer = s
        .raw(RemotingCommand::request(200151).with_body(empty.into_bytes()))
        .await;
    assert_eq!(answer.code, 208);
}

/// A held POP is answered when a message arrives, or with nothing at the end of its poll time
/// (here longer than the client's 3 s request timeout: the call waits for it); NOTIFICATION says
/// whether there is anything without taking it, held up to its poll time too.
#[tokio::test]
async fn long_polling_and_notification() {
    let s = setup("PopPoll", 2).await;
    let group = "pop-poll";
    let held = s
        .pop_request(group, Duration::from_secs(30))
        .with_poll_time(Duration::from_secs(4));
    let started = Instant::now();
    assert_eq!(s.brokers.pop(&held).await.unwrap(), PopOutcome::NoMessage);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(3500) && waited < Duration::from_secs(8),
        "{waited:?}"
    );

    let now = NotificationRequest::new(group, s.queue(-1)).with_poll_time(Duration::ZERO);
    let outcome = s.brokers.notification(&now).await.unwrap();
    assert!(!outcome.has_message && !outcome.polling_full);
    let started = Instant::now();
    let held_notification =
        NotificationRequest::new(group, s.queue(-1)).with_poll_time(Duration::from_secs(3));
    let outcome = s.brokers.notification(&held_notification).await.unwrap();
    assert!(!outcome.has_message);
    assert!(started.elapsed() >= Duration::from_millis(2500), "held");

    let popping = {
        let brokers = s.brokers.clone();
        let held = held.clone().with_poll_time(Duration::from_secs(8));
        tokio::spawn(async move {
            let started = Instant::now();
            (brokers.pop(&held).await, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let sent = s.send(1, 2).await;
    let (outcome, waited) = popping.await.unwrap();
    let PopOutcome::Found(batch) = outcome.unwrap() else {
        panic!("nothing popped");
    };
    assert_eq!(batch.messages[0].message.msg_id(), sent[0]);
    assert!(
        waited < Duration::from_secs(5),
        "woken by the arrival: {waited:?}"
    );

    s.send(1, 2).await;
    let outcome = s.brokers.notification(&now).await.unwrap();
    assert!(outcome.has_message);
}

/// What the broker answers to requests it refuses (the client refuses the first two before
/// sending): `maxMsgNums` 33 and a queue id past the topic's are 1 `Internal error` (Java: 29);
/// an unknown topic 17; a missing required field 29; a `bornTime` more than 500 ms older than
/// the poll time 210 `…pop message is timeout too much`; a filter that does not parse 23. An
/// acknowledgement of an offset past the queue's end is 208, of a queue the topic does not have
/// 13, of an unknown topic 17, with a malformed `extraInfo` 29.
#[tokio::test]
async fn refused_requests_and_their_codes() {
    let s = setup("PopCodes", 4).await;
    let group = "pop-codes";
    s.send(4, 4).await;
    let base = s
        .pop_request(group, Duration::from_secs(30))
        .with_poll_time(Duration::ZERO);
    let pop = |r: &PopRequest| pop_message_request(r, None).unwrap();
    let mut unknown = base.clone();
    unknown.queue = MessageQueue::new("NoSuchTopic", BROKER, -1);
    let mut missing = pop(&base);
    missing.ext_fields.remove("invisibleTime");
    let old = base
        .clone()
        .with_born_time(now_ms() - 10_000)
        .with_poll_time(Duration::from_secs(1));
    let handle: ReceiptHandle = format!("0 {} 30000 0 0 {BROKER} 0 0", now_ms())
        .parse()
        .unwrap();
    let ack = |h: ReceiptHandle| {
        ack_message_request(&AckRequest::new(group, s.topic.as_str(), h), None).unwrap()
    };
    let with = |f: &dyn Fn(&mut rebalance_rocketmq::broker::pop::HandleFields)| {
        let mut fields = handle.fields().clone();
        f(&mut fields);
        ReceiptHandle::from_fields(fields).unwrap()
    };
    let cases: Vec<(&str, RemotingCommand, i32, &str)> = vec![
        (
            "maxMsgNums 33",
            pop(&base).with_ext("maxMsgNums", 33),
            1,
            "Internal error",
        ),
        (
            "queueId 4",
            pop(&base).with_ext("queueId", 4),
            1,
            "Internal error",
        ),
        ("unknown topic", pop(&unknown), 17, "not exist"),
        ("missing invisibleTime", missing, 29, "Argument is invalid"),
        ("old bornTime", pop(&old), 210, "timeout too much"),
        (
            "bad filter",
            pop(&base.clone().with_filter(PopFilter::Sql92("a >".into()))),
            23,
            "subscription",
        ),
        (
            "ack past the end",
            ack(with(&|f| f.queue_offset = 1000)),
            208,
            "not in queue offset range",
        ),
        (
            "ack queue 99",
            ack(with(&|f| f.queue_id = 99)),
            13,
            "is illegal",
        ),
        (
            "ack unknown topic",
            ack_message_request(&AckRequest::new(group, "NoSuchTopic", handle.clone()), None)
                .unwrap(),
            17,
            "not exist",
        ),
        (
            "ack malformed extraInfo",
            ack(handle.clone()).with_ext("extraInfo", "garbage"),
            29,
            "Argument is invalid",
        ),
    ];
    for (what, command, code, remark) in cases {
        let answer = s.raw(command).await;
        assert_eq!(answer.code, code, "{what}: {answer:?}");
        assert!(
            answer.remark_or_empty().contains(remark),
            "{what}: {answer:?}"
        );
    }
}

fn queues(answer: AssignmentAnswer) -> Vec<(i32, RequestMode)> {
    let AssignmentAnswer::Queues(queues) = answer else {
        panic!("unbalanced");
    };
    queues.iter().map(|q| (q.queue.queue_id, q.mode)).collect()
}

/// Server-side assignment among the clients the heartbeats registered: AVG and AVG_BY_CIRCLE as
/// the client-side strategies compute them; **any other strategy name, a client that did not
/// heartbeat, or an unknown topic: 0 with an empty list** (Java: the list absent); broadcasting:
/// every queue. POP mode with no sharing: one entry per broker, queue id -1; with
/// `popShareQueueNum` 1: each client's AVG share and the next client's. The mode of a retry
/// topic is refused with 16; an unknown topic's and group's stored (Java: 17/26); a query
/// without `messageModel` fails to decode (1 `Serialization failed`).
#[tokio::test]
async fn server_side_assignment() {
    let s = setup("PopAssign", 4).await;
    let group = "pop-assign";
    let members: Vec<common::Client> = (0..3)
        .map(|i| common::client(&s.cluster, &format!("m{i}"), group, &[s.topic.as_str()]))
        .collect();
    for m in &members[..2] {
        m.brokers.register(&m.registration).await.unwrap();
    }
    let ids: Vec<String> = members
        .iter()
        .map(|m| m.registration.client_id.to_string())
        .collect();
    assert!(
        ids[0] < ids[1] && ids[1] < ids[2],
        "sorted as the broker sorts them"
    );
    let query = |i: usize, strategy: &str| {
        AssignmentQuery::new(s.topic.as_str(), group, ids[i].as_str(), strategy)
    };
    let brokers = &s.brokers;
    let ask = |q: AssignmentQuery| async move { brokers.query_assignment(&q).await.unwrap() };
    use RequestMode::{Pop, Pull};
    assert_eq!(queues(ask(query(0, "AVG")).await), [(0, Pull), (1, Pull)]);
    assert_eq!(queues(ask(query(1, "AVG")).await), [(2, Pull), (3, Pull)]);
    assert_eq!(
        queues(ask(query(0, "AVG_BY_CIRCLE")).await),
        [(0, Pull), (2, Pull)]
    );
    for strategy in ["CONSISTENT_HASH", "NOPE"] {
        assert_eq!(
            ask(query(0, strategy)).await,
            AssignmentAnswer::Queues(vec![]),
            "{strategy}"
        );
    }
    assert_eq!(
        ask(query(2, "AVG")).await,
        AssignmentAnswer::Queues(vec![]),
        "not registered"
    );
    let unknown = s
        .brokers
        .query_assignment_at(
            BROKER,
            &AssignmentQuery::new("NoSuchTopic", group, ids[0].as_str(), "AVG"),
        )
        .await
        .unwrap();
    assert_eq!(unknown, AssignmentAnswer::Queues(vec![]));
    assert_eq!(
        queues(ask(query(0, "AVG").with_message_model(MessageModel::Broadcasting)).await),
        [(0, Pull), (1, Pull), (2, Pull), (3, Pull)]
    );

    let pop_mode = RequestModeSetting::new(s.topic.as_str(), group, RequestMode::Pop);
    s.brokers.set_message_request_mode(&pop_mode).await.unwrap();
    assert_eq!(queues(ask(query(0, "AVG")).await), [(-1, Pop)]);
    assert_eq!(queues(ask(query(1, "AVG")).await), [(-1, Pop)]);
    members[2]
        .brokers
        .register(&members[2].registration)
        .await
        .unwrap();
    let shared = pop_mode.clone().with_pop_share_queue_num(1);
    s.brokers.set_message_request_mode(&shared).await.unwrap();
    let expected: BTreeMap<usize, Vec<(i32, RequestMode)>> = BTreeMap::from([
        (0, vec![(0, Pop), (1, Pop), (2, Pop)]),
        (1, vec![(2, Pop), (3, Pop)]),
        (2, vec![(0, Pop), (1, Pop), (3, Pop)]),
    ]);
    for (i, expected) in expected {
        assert_eq!(queues(ask(query(i, "AVG")).await), expected, "client {i}");
    }

    let retry = s
        .raw(RemotingCommand::request(401).with_body(
            format!(r#"{{"topic":"%RETRY%{group}","consumerGroup":"{group}","mode":"POP","popShareQueueNum":0}}"#)
                .into_bytes(),
        ))
        .await;
    assert_eq!(
        (retry.code, retry.remark.as_deref()),
        (16, Some("retry topic is not allowed to set mode"))
    );
    let unknown = RequestModeSetting::new("NoSuchTopic", "nobody", RequestMode::Pop);
    s.brokers
        .set_message_request_mode_at(BROKER, &unknown)
        .await
        .unwrap();
    let missing = s
        .raw(RemotingCommand::request(400).with_body(
            format!(
                r#"{{"topic":"{}","consumerGroup":"{group}","clientId":"{}","strategyName":"AVG"}}"#,
                s.topic, ids[0]
            )
            .into_bytes(),
        ))
        .await;
    assert_eq!(
        (missing.code, missing.remark.as_deref()),
        (1, Some("Serialization failed"))
    );
}

/// Orderly POP (`order=true`) on the Rust broker 1.0: revive queue 999 and `orderCountInfo`;
/// the queue is blocked for another attempt (another attempt id, or none) until the batch is
/// acknowledged or its invisible time passes, after which the same messages come again, in
/// order, with their count raised; a retry with the same attempt id gets the batch again. A
/// batch acknowledgement of several offsets (the bit set as this client writes it) moves the
/// queue past all of them.
///
/// Observed deviations: the first orderly POP of a queue without offset returns its first
/// message only (a second one, same attempt, returns the batch); **acknowledging a later
/// message of the batch before an earlier one moves the group past the earlier one**, which
/// never comes back (Java commits up to the first unacknowledged offset); with no attempt id at
/// all two POPs count as the same attempt (the Java broker blocks a blank one). Changing an
/// orderly message's invisible time works, answering the pop's own `popTime` and
/// `invisibleTime` = now + the requested time − `popTime`.
#[tokio::test]
async fn orderly_pop() {
    let s = setup("PopOrderly", 1).await;
    let group = "pop-orderly";
    let sent = s.send(3, 1).await;
    let request = |attempt: &str| {
        PopRequest::new(group, s.queue(0))
            .with_invisible_time(Duration::from_secs(3))
            .with_poll_time(Duration::ZERO)
            .with_init_mode(PopInitMode::Min)
            .orderly(Some(attempt.to_string()))
    };
    // Pops until something is found (the broker may take a moment to dispatch), for 10 s.
    let brokers = &s.brokers;
    let found = |request: PopRequest| async move {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match brokers.pop(&request).await.unwrap() {
                PopOutcome::Found(batch) => return batch,
                other if Instant::now() >= deadline => panic!("nothing popped: {other:?}"),
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    };
    let offsets = |batch: &rebalance_rocketmq::broker::pop::PopBatch| -> Vec<(i64, i32)> {
        batch
            .messages
            .iter()
            .map(|m| (m.message.queue_offset(), m.message.reconsume_times()))
            .collect()
    };
    let first = s
        .raw(pop_message_request(&request("a1"), None).unwrap())
        .await;
    assert_eq!(first.code, 0);
    assert_eq!(first.ext("reviveQid"), Some("999"));
    assert!(first.ext("orderCountInfo").is_some(), "{first:?}");
    let batch = found(request("a1")).await;
    assert_eq!(
        offsets(&batch),
        [(0, 0), (1, 0), (2, 0)],
        "the same attempt: the batch"
    );
    assert!(batch.messages.iter().all(|m| m.handle.is_orderly()));
    assert_eq!(ids(&batch.messages), sent.iter().cloned().collect());
    assert_eq!(
        s.brokers.pop(&request("a2")).await.unwrap(),
        PopOutcome::NoMessage,
        "blocked"
    );
    let no_attempt = PopRequest::new(group, s.queue(0))
        .with_poll_time(Duration::ZERO)
        .orderly(None);
    assert_eq!(
        s.brokers.pop(&no_attempt).await.unwrap(),
        PopOutcome::NoMessage
    );

    tokio::time::sleep(Duration::from_millis(3500)).await;
    let batch = found(request("a3")).await;
    assert_eq!(offsets(&batch), [(0, 1), (1, 1), (2, 1)], "again, counted");
    let change = ChangeInvisibleTimeRequest::new(
        group,
        s.topic.as_str(),
        batch.messages[2].handle.clone(),
        Duration::from_secs(1),
    );
    let before = now_ms();
    let ChangeOutcome::Changed(changed) = s.brokers.change_invisible_time(&change).await.unwrap()
    else {
        panic!("not changed");
    };
    assert_eq!(changed.fields().pop_time, batch.pop_time);
    let visible = changed.visible_again_at();
    assert!(
        visible >= before + 1000 && visible < now_ms() + 1100,
        "{changed}"
    );
    // The middle one acknowledged first: the first one is skipped from then on.
    assert_eq!(
        s.ack(group, &batch.messages[1].handle).await,
        AckOutcome::Acked
    );
    assert_eq!(
        s.brokers.pop(&request("a4")).await.unwrap(),
        PopOutcome::NoMessage
    );
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let batch = found(request("a5")).await;
    assert_eq!(offsets(&batch), [(2, 2)], "offset 0 is lost");
    assert_eq!(
        s.ack(group, &batch.messages[0].handle).await,
        AckOutcome::Acked
    );
    let more = s.send(1, 1).await;
    let batch = found(request("a6")).await;
    assert_eq!(
        offsets(&batch),
        [(3, 0)],
        "acknowledged: the queue moves on"
    );
    assert_eq!(batch.messages[0].message.msg_id(), more[0]);
    // A batch acknowledgement of several offsets: the bit set is read as written.
    s.send(2, 1).await;
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let batch = found(request("a7")).await;
    assert_eq!(offsets(&batch), [(3, 1), (4, 0), (5, 0)]);
    let handles = batch.messages.iter().map(|m| m.handle.clone()).collect();
    let acked = s
        .brokers
        .batch_ack(&BatchAckRequest::new(group, s.topic.as_str(), handles))
        .await
        .unwrap();
    assert_eq!(acked, AckOutcome::Acked);
    let last = s.send(1, 1).await;
    let batch = found(request("a8")).await;
    assert_eq!(offsets(&batch), [(6, 0)], "all three acknowledged");
    assert_eq!(batch.messages[0].message.msg_id(), last[0]);
}

/// **An orderly batch acknowledged in full still holds its queue until its invisible time has
/// passed** on the Rust broker 1.0 (the Java broker lets the queue go at the last
/// acknowledgement): a pop right after the acknowledgements, with another attempt id or the
/// same one, finds nothing although a new message is there; once the invisible time has
/// passed, the next pop returns the new messages only (the acknowledged ones do not come
/// again). A change of invisible time of acknowledged messages does not let the queue go
/// either (answered 0 without header). The acknowledgements move the group's offset but
/// never reach the batch's record (group and topic passed the other way round in
/// `ack_message_processor.rs:143`, see the [module documentation](self)).
#[tokio::test]
async fn an_acknowledged_orderly_batch_holds_its_queue_for_its_invisible_time() {
    let s = setup("PopOrderlyHold", 2).await;
    let group = "pop-orderly-hold";
    s.send(3, 1).await;
    let invisible = Duration::from_secs(4);
    let request = |attempt: &str| {
        PopRequest::new(group, s.queue(-1))
            .with_invisible_time(invisible)
            .with_poll_time(Duration::ZERO)
            .with_init_mode(PopInitMode::Min)
            .orderly(Some(attempt.to_string()))
    };
    let offsets = |outcome: &PopOutcome| -> Vec<(i32, i64, i32)> {
        match outcome {
            PopOutcome::Found(b) => b
                .messages
                .iter()
                .map(|m| {
                    (
                        m.message.queue().queue_id,
                        m.message.queue_offset(),
                        m.message.reconsume_times(),
                    )
                })
                .collect(),
            _ => Vec::new(),
        }
    };
    let popped_at = Instant::now();
    let first = s.brokers.pop(&request("x")).await.unwrap();
    assert_eq!(offsets(&first), [(0, 0, 0), (0, 1, 0), (0, 2, 0)]);
    let PopOutcome::Found(batch) = first else {
        unreachable!()
    };
    let handles: Vec<ReceiptHandle> = batch.messages.iter().map(|m| m.handle.clone()).collect();
    let acked = s
        .brokers
        .batch_ack(&BatchAckRequest::new(group, s.topic.as_str(), handles))
        .await
        .unwrap();
    assert_eq!(acked, AckOutcome::Acked);
    let change = ChangeInvisibleTimeRequest::new(
        group,
        s.topic.as_str(),
        batch.messages[2].handle.clone(),
        Duration::ZERO,
    );
    let changed = s.brokers.change_invisible_time(&change).await;
    assert!(
        matches!(
            &changed,
            Err(rebalance_rocketmq::broker::pop::PopError::Remote(
                rebalance_runtime::RemoteError::BadResponse(_)
            ))
        ),
        "answered without header: {changed:?}"
    );
    s.send(2, 1).await;
    for attempt in ["x", "y"] {
        assert_eq!(
            s.brokers.pop(&request(attempt)).await.unwrap(),
            PopOutcome::NoMessage,
            "attempt {attempt}: the acknowledged batch still holds queue 0"
        );
    }
    // Another queue is not held.
    let message = Outgoing::new("q1").with_property(property::UNIQ_KEY, unique_id());
    s.sender.send(&s.queue(1), &message).await.unwrap();
    // Popped once the broker has dispatched it (a pop right after a send may miss it), while
    // queue 0 is still held.
    let mut other = PopOutcome::NoMessage;
    for _ in 0..20 {
        other = s.brokers.pop(&request("z")).await.unwrap();
        if matches!(other, PopOutcome::Found(_)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        offsets(&other).iter().map(|o| o.0).collect::<Vec<_>>(),
        [1],
        "queue 1 only"
    );
    // Once the hold ends (the broker's pop time, a little after `popped_at`, plus the
    // invisible time), queue 0's new messages, and only those.
    tokio::time::sleep_until(popped_at + invisible).await;
    let mut queue0 = Vec::new();
    for _ in 0..30 {
        let after = s.brokers.pop(&request("w")).await.unwrap();
        queue0 = offsets(&after).into_iter().filter(|o| o.0 == 0).collect();
        if !queue0.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        queue0,
        [(0, 3, 0), (0, 4, 0)],
        "the new messages only, once the invisible time passed"
    );
    // Soon after it passed: the pops' round trips, with room for a loaded machine.
    let late = popped_at.elapsed().saturating_sub(invisible);
    assert!(
        late <= Duration::from_secs(2),
        "queue 0 held {late:?} past its invisible time"
    );
}
