//! Pulls and send-backs against scripted servers: the answers a real broker gives rarely
//! ("subscription not latest", a failed send-back) and what the client does about them.

mod scripted;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rebalance_consume::{Message, MessageSource, PullError, PullRequest, SendBack};
use rebalance_core::MessageQueue;
use rebalance_rocketmq::message::properties;
use rebalance_rocketmq::{BrokerClient, NameServerClient, RemotingCommand, request_code};
use rebalance_runtime::subscription::TagExpression;
use rebalance_runtime::{GroupDirectory, RemoteError};
use scripted::scripted;

type Log = Arc<Mutex<Vec<RemotingCommand>>>;

fn ok() -> RemotingCommand {
    RemotingCommand::response(0, 0, None)
}

/// A name server routing `topics` to broker-a at `broker`.
async fn name_server(broker: String, topics: &'static [&'static str]) -> String {
    let (addr, _) = scripted(move |req| {
        let topic = req.ext("topic").unwrap_or_default();
        if !topics.contains(&topic) {
            return Some(RemotingCommand::response(17, 0, Some("no route".into())));
        }
        let route = format!(
            r#"{{"brokerDatas":[{{"brokerAddrs":{{"0":"{broker}"}},"brokerName":"broker-a","cluster":"c"}}],"queueDatas":[{{"brokerName":"broker-a","perm":6,"readQueueNums":1,"topicSysFlag":0,"writeQueueNums":1}}]}}"#
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

fn count(log: &Log, code: i32) -> usize {
    log.lock()
        .unwrap()
        .iter()
        .filter(|r| r.code == code)
        .count()
}

fn registration() -> rebalance_runtime::Registration {
    rebalance_runtime::Registration {
        client_id: "c1".into(),
        group: "G".into(),
        message_model: Default::default(),
        consume_order: Default::default(),
        consume_from: Default::default(),
        subscriptions: vec![rebalance_runtime::subscription::Subscription::all("T")],
    }
}

/// "Subscription not latest" (24 from the Rust broker, 25 from Java's) fails the pull for the
/// consume layer to retry, after this client heartbeats the broker again, once however many
/// pulls get it at once.
#[tokio::test]
async fn subscription_not_latest_heartbeats_again_once_and_fails_the_pull() {
    for code in [24, 25] {
        let (addr, log) = broker(move |req| match req.code {
            request_code::PULL_MESSAGE => RemotingCommand::response(
                code,
                0,
                Some("the consumer's subscription not latest".into()),
            ),
            _ => ok(),
        })
        .await;
        let namesrv = name_server(addr, &["T"]).await;
        let brokers = BrokerClient::new(NameServerClient::from_addresses(&namesrv).unwrap());
        brokers.register(&registration()).await.unwrap();
        assert_eq!(count(&log, request_code::HEART_BEAT), 1);

        let request = PullRequest::new(
            "G",
            MessageQueue::new("T", "broker-a", 0),
            0,
            TagExpression::all(),
        );
        for _ in 0..5 {
            let err = brokers.pull(&request).await.unwrap_err();
            assert!(
                matches!(&err, PullError::Remote(RemoteError::Refused { code: c, .. }) if *c == code),
                "{err:?}"
            );
        }
        let heartbeats = rebalance_rocketmq::testkit::wait_until(
            Duration::from_secs(5),
            Duration::from_millis(10),
            || async {
                let n = count(&log, request_code::HEART_BEAT);
                (n >= 2).then_some(n)
            },
        )
        .await;
        assert_eq!(heartbeats, Some(2), "code {code}: one heartbeat again");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(count(&log, request_code::HEART_BEAT), 2, "code {code}");
    }
}

fn failed_message() -> Message {
    Message::new(MessageQueue::new("T", "broker-a", 0), 3, "payload")
        .with_msg_id("UNIQ1")
        .with_commit_log_offset(99)
        .with_reconsume_times(1)
}

/// A refused CONSUMER_SEND_MSG_BACK is followed by a SEND_MESSAGE to the retry topic.
#[tokio::test]
async fn a_refused_send_back_is_sent_to_the_retry_topic() {
    let (addr, log) = broker(|req| match req.code {
        request_code::CONSUMER_SEND_MSG_BACK => {
            RemotingCommand::response(1, 0, Some("look message by offset failed".into()))
        }
        request_code::SEND_MESSAGE => ok()
            .with_ext("msgId", "X")
            .with_ext("queueId", 0)
            .with_ext("queueOffset", 0),
        _ => ok(),
    })
    .await;
    let namesrv = name_server(addr, &["T", "%RETRY%G"]).await;
    let brokers = BrokerClient::new(NameServerClient::from_addresses(&namesrv).unwrap());
    let message = failed_message();
    brokers
        .send_back(SendBack::new("G", &message).with_max_reconsume_times(4))
        .await
        .unwrap();
    let requests = log.lock().unwrap().clone();
    let codes: Vec<i32> = requests.iter().map(|r| r.code).collect();
    assert_eq!(codes, [36, 10]);
    let back = &requests[0];
    assert_eq!(back.ext("offset"), Some("99"));
    assert_eq!(back.ext("originMsgId"), Some("UNIQ1"));
    let send = &requests[1];
    assert_eq!(send.ext("topic"), Some("%RETRY%G"));
    assert_eq!(send.ext("reconsumeTimes"), Some("2"));
    assert_eq!(send.ext("maxReconsumeTimes"), Some("4"));
    let props = properties::parse(send.ext("properties").unwrap());
    assert_eq!(props["ORIGIN_MESSAGE_ID"], "UNIQ1");
    assert_eq!(props["RETRY_TOPIC"], "T");
    assert_eq!(props["DELAY"], "4");
    assert_eq!(&send.body[..], b"payload");
}

/// A name server routing T and the retry topic to broker-a at `a` and broker-b at `b`.
async fn two_brokers(a: String, b: String) -> String {
    let (addr, _) = scripted(move |req| {
        let topic = req.ext("topic").unwrap_or_default();
        if !["T", "%RETRY%G"].contains(&topic) {
            return Some(RemotingCommand::response(17, 0, Some("no route".into())));
        }
        let route = format!(
            r#"{{"brokerDatas":[{{"brokerAddrs":{{"0":"{a}"}},"brokerName":"broker-a","cluster":"c"}},{{"brokerAddrs":{{"0":"{b}"}},"brokerName":"broker-b","cluster":"c"}}],"queueDatas":[{{"brokerName":"broker-a","perm":6,"readQueueNums":1,"topicSysFlag":0,"writeQueueNums":1}},{{"brokerName":"broker-b","perm":6,"readQueueNums":1,"topicSysFlag":0,"writeQueueNums":1}}]}}"#
        );
        Some(ok().with_body(route.into_bytes()))
    })
    .await;
    addr
}

/// The message's broker cannot be reached: the send-back fails, and its fallback goes to the
/// retry topic on another broker, not to the one that just failed only (found by review).
#[tokio::test]
async fn a_send_back_to_an_unreachable_broker_falls_back_to_another() {
    let gone = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gone_addr = gone.local_addr().unwrap().to_string();
    drop(gone);
    let (b, log) = broker(|req| match req.code {
        request_code::SEND_MESSAGE => ok()
            .with_ext("msgId", "X")
            .with_ext("queueId", 0)
            .with_ext("queueOffset", 0),
        _ => ok(),
    })
    .await;
    let namesrv = two_brokers(gone_addr, b).await;
    let brokers = BrokerClient::new(NameServerClient::from_addresses(&namesrv).unwrap());
    let message = failed_message();
    brokers
        .send_back(SendBack::new("G", &message))
        .await
        .unwrap();
    let requests = log.lock().unwrap().clone();
    let sends: Vec<&RemotingCommand> = requests
        .iter()
        .filter(|r| r.code == request_code::SEND_MESSAGE)
        .collect();
    assert_eq!(sends.len(), 1, "stored once, on broker-b");
    assert_eq!(sends[0].ext("topic"), Some("%RETRY%G"));
}

/// When both fail, the error says so, with both reasons.
#[tokio::test]
async fn a_send_back_fails_only_when_the_fallback_fails_too() {
    let (addr, _log) = broker(|req| match req.code {
        request_code::CONSUMER_SEND_MSG_BACK => {
            RemotingCommand::response(1, 0, Some("first reason".into()))
        }
        _ => RemotingCommand::response(14, 0, Some("second reason".into())),
    })
    .await;
    let namesrv = name_server(addr, &["T", "%RETRY%G"]).await;
    let brokers = BrokerClient::new(NameServerClient::from_addresses(&namesrv).unwrap());
    let message = failed_message();
    let err = brokers
        .send_back(SendBack::new("G", &message))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, RemoteError::Refused { code: 14, .. }),
        "{err:?}"
    );
    assert!(
        text.contains("first reason") && text.contains("second reason"),
        "{text}"
    );
}

/// The answers every broker version gives for a refusal of the credentials or permissions:
/// NO_PERMISSION, the ACL 2.0 codes, and ACL 1.0's SYSTEM_ERROR with an `AclException`.
const DENIALS: [(i32, &str); 4] = [
    (16, "Authentication credentials are invalid"),
    (3001, "User:x is not found."),
    (3002, ""),
    (
        1,
        "org.apache.rocketmq.acl.common.AclException: Check signature failed for accessKey=rocketmq2",
    ),
];

/// A name server client in namespace `NS` (when `namespaced`) at `namesrv`.
fn name_server_client(namesrv: &str, namespaced: bool) -> NameServerClient {
    let mut builder = NameServerClient::builder(namesrv);
    if namespaced {
        builder = builder.namespace(rebalance_rocketmq::Namespace::new("NS").unwrap());
    }
    builder.build().unwrap()
}

/// A refused pull is a denial naming the pull and its group and topic as the servers know
/// them (in a namespace, the wrapped names permissions are granted on), for every code that means a denial; another
/// failure keeps its code.
#[tokio::test]
async fn a_denied_pull_is_a_denial_naming_the_pull_its_group_and_topic() {
    for namespaced in [false, true] {
        for (code, remark) in DENIALS {
            let (addr, log) = broker(move |req| match req.code {
                request_code::PULL_MESSAGE => {
                    RemotingCommand::response(code, 0, Some(remark.into()))
                }
                _ => ok(),
            })
            .await;
            let namesrv = name_server(addr.clone(), &["T", "NS%T"]).await;
            let brokers = BrokerClient::new(name_server_client(&namesrv, namespaced));
            let request = PullRequest::new(
                "G",
                MessageQueue::new("T", "broker-a", 0),
                0,
                TagExpression::all(),
            );
            let err = brokers.pull(&request).await.unwrap_err();
            assert_eq!(
                err,
                PullError::Remote(RemoteError::Denied {
                    server: addr.clone(),
                    operation: "pull",
                    resource: if namespaced {
                        "group `NS%G` on topic `NS%T`".into()
                    } else {
                        "group `G` on topic `T`".into()
                    },
                    code,
                    remark: remark.into(),
                }),
                "code {code}, namespaced {namespaced}"
            );
            let sent = log.lock().unwrap().clone();
            let pulled = sent.iter().find(|r| r.code == request_code::PULL_MESSAGE);
            let wire_topic = if namespaced { "NS%T" } else { "T" };
            assert_eq!(pulled.and_then(|r| r.ext("topic")), Some(wire_topic));
        }
    }
    // Code 1 without an `AclException` is a failure of the broker, not a denial.
    let (addr, _log) = broker(|req| match req.code {
        request_code::PULL_MESSAGE => {
            RemotingCommand::response(1, 0, Some("the broker is starting".into()))
        }
        _ => ok(),
    })
    .await;
    let namesrv = name_server(addr, &["T"]).await;
    let brokers = BrokerClient::new(NameServerClient::from_addresses(&namesrv).unwrap());
    let request = PullRequest::new(
        "G",
        MessageQueue::new("T", "broker-a", 0),
        0,
        TagExpression::all(),
    );
    let err = brokers.pull(&request).await.unwrap_err();
    assert!(
        matches!(err, PullError::Remote(RemoteError::Refused { code: 1, .. })),
        "{err:?}"
    );
}

/// Whether the send-back is denied, whether its fallback is, and the operation and resource
/// of the denial expected (`None`: the fallback is stored).
type SendBackCase = (bool, bool, Option<(&'static str, &'static str)>);

/// A refused send-back and a refused fallback are denials naming the operation and the
/// resource (the names the servers know), whichever of the two was denied, for every code that
/// means a denial; a denied send-back whose fallback is stored succeeds.
#[tokio::test]
async fn a_denied_send_back_or_fallback_is_a_denial_naming_operation_and_resource() {
    let stored = || {
        ok().with_ext("msgId", "X")
            .with_ext("queueId", 0)
            .with_ext("queueOffset", 0)
    };
    let other = |reason: &str| RemotingCommand::response(14, 0, Some(reason.into()));
    for namespaced in [false, true] {
        for (code, remark) in DENIALS {
            let denied = move || RemotingCommand::response(code, 0, Some(remark.into()));
            // Resources are named as the servers know them (what permissions are granted on).
            let (back, retry) = if namespaced {
                ("group `NS%G` on topic `NS%T`", "topic `%RETRY%NS%G`")
            } else {
                ("group `G` on topic `T`", "topic `%RETRY%G`")
            };
            let cases: [SendBackCase; 4] = [
                (true, false, Some(("send back", back))),
                (false, true, Some(("send to the retry topic", retry))),
                (true, true, Some(("send to the retry topic", retry))),
                (true, false, None),
            ];
            for (case, (back_denied, fallback_denied, expected)) in cases.into_iter().enumerate() {
                let fallback_stored = expected.is_none();
                let (addr, log) = broker(move |req| match req.code {
                    request_code::CONSUMER_SEND_MSG_BACK if back_denied => denied(),
                    request_code::CONSUMER_SEND_MSG_BACK => other("first reason"),
                    request_code::SEND_MESSAGE if fallback_denied => denied(),
                    request_code::SEND_MESSAGE if fallback_stored => stored(),
                    request_code::SEND_MESSAGE => other("second reason"),
                    _ => ok(),
                })
                .await;
                let namesrv =
                    name_server(addr.clone(), &["T", "%RETRY%G", "NS%T", "%RETRY%NS%G"]).await;
                let brokers = BrokerClient::new(name_server_client(&namesrv, namespaced));
                let message = failed_message();
                let result = brokers.send_back(SendBack::new("G", &message)).await;
                let what = format!("code {code}, namespaced {namespaced}, case {case}");
                let codes: Vec<i32> = log.lock().unwrap().iter().map(|r| r.code).collect();
                assert_eq!(codes, [36, 10], "{what}");
                let Some((operation, resource)) = expected else {
                    assert_eq!(result, Ok(()), "{what}");
                    continue;
                };
                let Err(RemoteError::Denied {
                    server,
                    operation: op,
                    resource: res,
                    code: c,
                    remark: text,
                }) = result
                else {
                    panic!("{what}: not a denial: {result:?}");
                };
                assert_eq!(server, addr, "{what}");
                assert_eq!((op, res.as_str(), c), (operation, resource, code), "{what}");
                assert!(text.starts_with(remark), "{what}: {text}");
                if !(back_denied && fallback_denied) {
                    // The other failure is in the remark.
                    let reason = if back_denied {
                        "second reason"
                    } else {
                        "first reason"
                    };
                    assert!(text.contains(reason), "{what}: {text}");
                }
            }
        }
    }
}

/// One stored V1 record of topic `T`, queue 0, at queue offset `offset` and commit-log offset
/// 7,777, whose body is `body` zlib-compressed (sysFlag 0x1), with `UNIQ_KEY` `BIG1`.
fn compressed_record(offset: i64, body: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut zlib = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    zlib.write_all(body).unwrap();
    let body = zlib.finish().unwrap();
    let props = "UNIQ_KEY\u{1}BIG1\u{2}TAGS\u{1}A\u{2}";
    let mut r = Vec::new();
    r.extend_from_slice(&0i32.to_be_bytes()); // total size, patched below
    r.extend_from_slice(&rebalance_rocketmq::message::decode::MAGIC_V1.to_be_bytes());
    r.extend_from_slice(&0i32.to_be_bytes()); // body CRC
    r.extend_from_slice(&0i32.to_be_bytes()); // queue id
    r.extend_from_slice(&0i32.to_be_bytes()); // flag
    r.extend_from_slice(&offset.to_be_bytes());
    r.extend_from_slice(&7_777i64.to_be_bytes()); // commit-log offset
    r.extend_from_slice(&1i32.to_be_bytes()); // sysFlag: compressed (zlib)
    r.extend_from_slice(&0i64.to_be_bytes()); // born timestamp
    r.extend_from_slice(&[127, 0, 0, 1, 0, 0, 0x27, 0x10]); // born host
    r.extend_from_slice(&0i64.to_be_bytes()); // store timestamp
    r.extend_from_slice(&[127, 0, 0, 1, 0, 0, 0x27, 0x11]); // store host
    r.extend_from_slice(&0i32.to_be_bytes()); // reconsume times
    r.extend_from_slice(&0i64.to_be_bytes()); // prepared transaction offset
    r.extend_from_slice(&(body.len() as i32).to_be_bytes());
    r.extend_from_slice(&body);
    r.push(1); // topic length
    r.extend_from_slice(b"T");
    r.extend_from_slice(&(props.len() as i16).to_be_bytes());
    r.extend_from_slice(props.as_bytes());
    let total = r.len() as i32;
    r[..4].copy_from_slice(&total.to_be_bytes());
    r
}

/// Found by review: a message whose compressed body inflates past the decode limit (16 MiB)
/// failed its queue's pull at the same offset every 3 s, forever. It is moved to the group's
/// dead letters by CONSUMER_SEND_MSG_BACK (delay level -1, the broker's stored copy found by
/// its commit-log offset, never the fallback that would send the body this client could not
/// read), and the pull answers nothing found, the next pull after it. Refused, the pull fails
/// (tried again later) and nothing is skipped.
#[tokio::test]
async fn a_message_too_large_to_decode_is_dead_lettered_and_the_queue_goes_on() {
    let body = compressed_record(5, &vec![0u8; (16 << 20) + 1]);
    for refuse in [false, true] {
        let body = body.clone();
        let (addr, log) = broker(move |req| match req.code {
            request_code::PULL_MESSAGE => ok()
                .with_ext("nextBeginOffset", 6)
                .with_ext("minOffset", 0)
                .with_ext("maxOffset", 6)
                .with_body(body.clone()),
            request_code::CONSUMER_SEND_MSG_BACK if refuse => {
                RemotingCommand::response(1, 0, Some("look message by offset failed".into()))
            }
            _ => ok(),
        })
        .await;
        let namesrv = name_server(addr, &["T", "%RETRY%G"]).await;
        let brokers = BrokerClient::new(NameServerClient::from_addresses(&namesrv).unwrap());
        let pull = PullRequest::new(
            "G",
            MessageQueue::new("T", "broker-a", 0),
            5,
            TagExpression::all(),
        );
        let result = brokers.pull(&pull).await;
        let requests = log.lock().unwrap().clone();
        let codes: Vec<i32> = requests.iter().map(|r| r.code).collect();
        assert_eq!(
            codes,
            [11, 36],
            "never the fallback (refused: {refuse}): {result:?}"
        );
        let back = &requests[1];
        assert_eq!(back.ext("offset"), Some("7777"));
        assert_eq!(back.ext("delayLevel"), Some("-1"));
        assert_eq!(back.ext("originMsgId"), Some("BIG1"));
        assert_eq!(back.ext("originTopic"), Some("T"));
        assert_eq!(back.ext("group"), Some("G"));
        match (refuse, result) {
            (false, Ok(found)) => assert_eq!(
                found,
                rebalance_consume::PullResult::Found {
                    messages: vec![],
                    next_offset: 6,
                    min_offset: 0,
                    max_offset: 6
                }
            ),
            (true, Err(PullError::Remote(e))) => {
                assert!(e.to_string().contains("too large to decode"), "{e}")
            }
            (refuse, other) => panic!("refused: {refuse}: {other:?}"),
        }
    }
}
