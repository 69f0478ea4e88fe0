//! The message sender against scripted servers on loopback: the answers a single real broker
//! does not give (stored without confirmed durability) and a broker whose master is down, and
//! what each send carries (its birth time, its unique key).

mod scripted;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use rebalance_core::MessageQueue;
use rebalance_rocketmq::message::properties;
use rebalance_rocketmq::{
    Message, MessageSender, NameServerClient, RemotingCommand, SendError, SendStatus, request_code,
};
use rebalance_runtime::{NameServer, RemoteError};
use scripted::answering;

/// A name server routing topic T to broker-a, whose addresses are `addrs` (broker id, address).
async fn name_server(addrs: &[(i64, &str)]) -> NameServerClient {
    let addrs: Vec<String> = addrs
        .iter()
        .map(|(id, addr)| format!(r#""{id}":"{addr}""#))
        .collect();
    let route = format!(
        r#"{{"brokerDatas":[{{"brokerAddrs":{{{}}},"brokerName":"broker-a","cluster":"c"}}],"queueDatas":[{{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}}]}}"#,
        addrs.join(",")
    );
    let (namesrv, _) = answering(move |_| {
        RemotingCommand::response(0, 0, None).with_body(route.clone().into_bytes())
    })
    .await;
    NameServerClient::from_addresses(&namesrv).unwrap()
}

/// A send answer with `code` storing the message at queue 2, offset 9.
fn stored(code: i32) -> RemotingCommand {
    RemotingCommand::response(code, 0, None)
        .with_ext("queueId", 2)
        .with_ext("queueOffset", 9)
        .with_ext("msgId", "7F00000100002A9F0000000000000000")
}

#[tokio::test]
async fn a_stored_message_whose_durability_is_unconfirmed_is_a_status_not_an_error() {
    // The broker answers the n-th send with the n-th code: SUCCESS, FLUSH_DISK_TIMEOUT (10),
    // SLAVE_NOT_AVAILABLE (11), FLUSH_SLAVE_TIMEOUT (12), then a refusal.
    let codes = [0, 10, 11, 12, 1];
    let sent = Arc::new(AtomicUsize::new(0));
    let next = sent.clone();
    let (broker, _) = answering(move |req| {
        assert_eq!(req.code, request_code::SEND_MESSAGE);
        match codes[next.fetch_add(1, Ordering::SeqCst)] {
            1 => RemotingCommand::response(1, 0, Some("disk full".into())),
            code => stored(code),
        }
    })
    .await;
    let sender = MessageSender::new(name_server(&[(0, &broker)]).await, "P");
    let queue = MessageQueue::new("T", "broker-a", 2);
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let result = sender.send(&queue, &Message::new("x")).await.unwrap();
        assert_eq!((result.queue.queue_id, result.queue_offset), (2, Some(9)));
        statuses.push(result.status);
    }
    assert_eq!(
        statuses,
        [
            SendStatus::SendOk,
            SendStatus::FlushDiskTimeout,
            SendStatus::SlaveNotAvailable,
            SendStatus::FlushSlaveTimeout
        ]
    );
    assert_eq!(
        sender.send(&queue, &Message::new("x")).await,
        Err(SendError::Remote(RemoteError::Refused {
            code: 1,
            remark: "disk full".into()
        }))
    );
}

#[tokio::test]
async fn messages_go_to_the_master_only_never_to_a_slave() {
    let (slave, asked) = answering(|_| stored(0)).await;
    // broker-a's master is down: only its slave (broker id 1) is in the route.
    let name_server = name_server(&[(1, &slave)]).await;
    name_server.topic_route("T").await.unwrap();
    let sender = MessageSender::new(name_server, "P");
    let outcome = sender
        .send(&MessageQueue::new("T", "broker-a", 0), &Message::new("x"))
        .await;
    assert!(
        matches!(
            &outcome,
            Err(SendError::NotSent {
                error: RemoteError::Unreachable(_),
                broker_at_fault: false
            })
        ),
        "{outcome:?}"
    );
    let failure = outcome.unwrap_err();
    assert!(!failure.maybe_stored() && !failure.broker_failed());
    assert_eq!(asked.load(Ordering::SeqCst), 0, "the slave got nothing");
}

#[tokio::test]
async fn a_sent_message_carries_its_birth_time_in_unix_milliseconds() {
    let born = Arc::new(Mutex::new(Vec::new()));
    let seen = born.clone();
    let (broker, _) = answering(move |req| {
        seen.lock()
            .unwrap()
            .push(req.ext("bornTimestamp").map(str::to_string));
        stored(0)
    })
    .await;
    let sender = MessageSender::new(name_server(&[(0, &broker)]).await, "P");
    let unix_ms = || {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        i64::try_from(now.as_millis()).unwrap()
    };
    let before = unix_ms();
    sender
        .send(&MessageQueue::new("T", "broker-a", 2), &Message::new("x"))
        .await
        .unwrap();
    let after = unix_ms();
    let born = born.lock().unwrap().clone();
    let [Some(born)] = born.as_slice() else {
        panic!("one send with a bornTimestamp: {born:?}");
    };
    let born: i64 = born.parse().unwrap();
    assert!(
        (before..=after).contains(&born),
        "born at {born}, sent between {before} and {after}"
    );
}

/// A send that timed out after the broker stored the message, retried with the same `Message`
/// (on the broker `ProducerHandle::select` gives when passed the failed one), must carry the
/// same unique key (`UNIQ_KEY`, the id consumers see), so that the copy is recognised as the
/// same message, as with the Java producer, which stamps it before its retry loop (found by
/// review: the key was left to the broker, which made a new one for each send).
#[tokio::test]
async fn a_message_sent_again_keeps_its_unique_key_and_the_result_carries_it() {
    let keys = Arc::new(Mutex::new(Vec::new()));
    let seen = keys.clone();
    let (broker, _) = answering(move |req| {
        let sent = properties::parse(req.ext("properties").unwrap_or_default());
        seen.lock().unwrap().push(sent.get("UNIQ_KEY").cloned());
        stored(0)
    })
    .await;
    let sender = MessageSender::new(name_server(&[(0, &broker)]).await, "P");
    let sent_keys = |n: usize| -> Vec<Option<String>> {
        let keys = keys.lock().unwrap();
        keys[keys.len() - n..].to_vec()
    };
    // The retry: one message sent twice, to two queues.
    let message = Message::new("x").with_tags("TagA");
    let first = sender
        .send(&MessageQueue::new("T", "broker-a", 2), &message)
        .await
        .unwrap();
    let again = sender
        .send(&MessageQueue::new("T", "broker-a", 3), &message)
        .await
        .unwrap();
    let both = sent_keys(2);
    let [Some(key), Some(key_again)] = both.as_slice() else {
        panic!("both sends carry a UNIQ_KEY: {both:?}");
    };
    let (key, key_again) = (key.clone(), key_again.clone());
    assert_eq!(key, key_again);
    assert_eq!(message.properties.get("UNIQ_KEY"), Some(&key));
    assert_eq!(
        (first.msg_id.as_str(), again.msg_id.as_str()),
        (&*key, &*key)
    );
    // Two messages have two keys.
    sender
        .send(&MessageQueue::new("T", "broker-a", 2), &Message::new("x"))
        .await
        .unwrap();
    assert_ne!(sent_keys(1), [Some(key)]);
    // A key the application sets is the one sent.
    let own = Message::new("y").with_property("UNIQ_KEY", "MY-ID");
    let result = sender
        .send(&MessageQueue::new("T", "broker-a", 2), &own)
        .await
        .unwrap();
    assert_eq!(sent_keys(1), [Some("MY-ID".to_string())]);
    assert_eq!(result.msg_id, "MY-ID");
    // A message built without `new` (a struct literal, `Default`) gets one for its send.
    let bare = Message {
        body: "z".into(),
        ..Message::default()
    };
    let result = sender
        .send(&MessageQueue::new("T", "broker-a", 2), &bare)
        .await
        .unwrap();
    assert_eq!(sent_keys(1), [Some(result.msg_id.clone())]);
    assert_eq!(result.msg_id.len(), 32);
}

/// A broker that answers SUCCESS stored the message: an answer without its offset or store id,
/// or with them as something else than numbers, is a success whose missing parts are unknown,
/// not an error an application would retry (storing the message twice) and blame the broker
/// for (found by review).
#[tokio::test]
async fn a_success_answer_without_its_fields_is_a_success_with_them_unknown() {
    let answers = [
        RemotingCommand::response(0, 0, None),
        RemotingCommand::response(0, 0, None)
            .with_ext("queueId", "two")
            .with_ext("queueOffset", "soon"),
        RemotingCommand::response(10, 0, None).with_ext("queueId", 3_000_000_000_i64),
    ];
    let next = Arc::new(AtomicUsize::new(0));
    let at = next.clone();
    let (broker, _) = answering(move |_| answers[at.fetch_add(1, Ordering::SeqCst)].clone()).await;
    let sender = MessageSender::new(name_server(&[(0, &broker)]).await, "P");
    let queue = MessageQueue::new("T", "broker-a", 2);
    for status in [
        SendStatus::SendOk,
        SendStatus::SendOk,
        SendStatus::FlushDiskTimeout,
    ] {
        let message = Message::new("x");
        let result = sender.send(&queue, &message).await.unwrap();
        assert_eq!(result.status, status);
        // The queue asked for: a broker stores a message sent to queue 2 in queue 2.
        assert_eq!(result.queue, queue);
        assert_eq!((result.queue_offset, result.offset_msg_id), (None, None));
        assert_eq!(Some(result.msg_id.as_str()), message.unique_key());
    }
    assert_eq!(next.load(Ordering::SeqCst), 3);
}

/// How a send to T/broker-a/0, broker-a's master at `broker` and the client's timeouts
/// `config`, fails.
async fn failed_send(broker: &str, config: rebalance_rocketmq::ClientConfig) -> SendError {
    let routing = name_server(&[(0, broker)]).await;
    let name_server = NameServerClient::builder(&routing.addresses().join(";"))
        .client_config(config)
        .build()
        .unwrap();
    name_server.topic_route("T").await.unwrap();
    MessageSender::new(name_server, "P")
        .send(&MessageQueue::new("T", "broker-a", 0), &Message::new("x"))
        .await
        .unwrap_err()
}

fn quick(connect_timeout: std::time::Duration) -> rebalance_rocketmq::ClientConfig {
    rebalance_rocketmq::ClientConfig {
        request_timeout: std::time::Duration::from_millis(200),
        connect_timeout,
        ..Default::default()
    }
}

fn not_sent(failure: &SendError, by_broker: bool) -> bool {
    matches!(failure, SendError::NotSent { broker_at_fault, .. } if *broker_at_fault == by_broker)
}

/// What a failed send says about its message: never sent when the broker could not be
/// reached (a refused connection: the broker at fault, nothing stored) or found (the name
/// server failed: no broker at fault); sent and maybe stored when it left and was not answered
/// (found by review: a refused connection was "maybe stored", and a name server's failure
/// isolated a healthy broker).
#[tokio::test]
async fn a_failed_send_says_whether_it_left_and_whose_fault_it_was() {
    let second = std::time::Duration::from_secs(1);
    // A port nothing listens on: the connection is refused.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().to_string()
    };
    let failure = failed_send(&closed, quick(second)).await;
    assert!(not_sent(&failure, true), "{failure:?}");
    assert!(failure.broker_failed() && !failure.maybe_stored());

    // A broker that takes the request and never answers: it may have stored it.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let failure = failed_send(&silent_addr, quick(second)).await;
    assert!(
        matches!(failure, SendError::Remote(RemoteError::Timeout { .. })),
        "{failure:?}"
    );
    assert!(failure.broker_failed() && failure.maybe_stored());

    // A host that drops connection attempts (a listener whose queue of connections not yet
    // accepted is full: the kernel ignores the next ones): no connection within the send's
    // time is not sent either, whatever the connect timeout (found by review: timed out
    // before it, it was "maybe stored").
    let full = tokio::net::TcpSocket::new_v4().unwrap();
    full.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let full = full.listen(1).unwrap();
    let full_addr = full.local_addr().unwrap();
    let mut queued = Vec::new();
    while let Ok(Ok(stream)) = tokio::time::timeout(
        std::time::Duration::from_millis(100),
        tokio::net::TcpStream::connect(full_addr),
    )
    .await
    {
        queued.push(stream);
        assert!(queued.len() < 64, "the listener's queue never fills");
    }
    let failure = failed_send(&full_addr.to_string(), quick(3 * second)).await;
    assert!(not_sent(&failure, true), "{failure:?}");
    assert!(!failure.maybe_stored());

    // A name server that does not answer: no broker saw anything, none is at fault.
    let unreachable = NameServerClient::builder(&closed)
        .client_config(quick(second))
        .build()
        .unwrap();
    let failure = MessageSender::new(unreachable, "P")
        .send(&MessageQueue::new("T", "broker-a", 0), &Message::new("x"))
        .await
        .unwrap_err();
    assert!(not_sent(&failure, false), "{failure:?}");
    assert!(!failure.broker_failed() && !failure.maybe_stored());
}
