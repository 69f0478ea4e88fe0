//! Against scripted servers on loopback: answers the real servers do not give (fastjson routes,
//! odd codes, silence), to check the clients' handling of them.

mod scripted;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rebalance_core::MessageQueue;
use rebalance_rocketmq::{
    BrokerClient, ClientConfig, NameServerClient, RemotingClient, RemotingCommand, request_code,
};
use rebalance_runtime::{GroupDirectory, NameServer, OffsetStore, RemoteError, RouteError};
use scripted::scripted;

fn ok(body: &str) -> RemotingCommand {
    RemotingCommand::response(0, 0, None).with_body(body.to_string().into_bytes())
}

const FASTJSON_ROUTE: &str = r#"{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"},"brokerName":"broker-a","cluster":"DefaultCluster"}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}"#;

#[tokio::test]
async fn fastjson_routes_with_integer_keys_are_understood() {
    let (addr, _) = scripted(|req| {
        assert_eq!(req.code, request_code::GET_ROUTEINFO_BY_TOPIC);
        assert_eq!(req.ext("topic"), Some("T"));
        Some(ok(FASTJSON_ROUTE))
    })
    .await;
    let name_server = NameServerClient::from_addresses(&addr).unwrap();
    let route = name_server.topic_route("T").await.unwrap();
    let broker = route.broker("broker-a").unwrap();
    assert_eq!(broker.master_addr(), Some("127.0.0.1:10911"));
    assert_eq!(broker.broker_addrs.len(), 2);
    assert_eq!(route.subscribable_queues("T").len(), 4);
}

#[tokio::test]
async fn failing_name_servers_are_skipped_and_the_working_one_remembered() {
    // One refuses every request (as this name server answers unknown codes), one answers.
    let (refusing, refused_count) = scripted(|_| {
        Some(RemotingCommand::response(
            16,
            0,
            Some("Authentication credentials are invalid".into()),
        ))
    })
    .await;
    let (working, working_count) = scripted(|_| Some(ok(FASTJSON_ROUTE))).await;
    let name_server = NameServerClient::from_addresses(&format!("{refusing};{working}")).unwrap();
    name_server.topic_route("T").await.unwrap();
    name_server.topic_route("T").await.unwrap();
    assert_eq!(
        refused_count.load(Ordering::SeqCst),
        1,
        "asked once, then skipped"
    );
    assert_eq!(working_count.load(Ordering::SeqCst), 2);
    assert_eq!(name_server.preferred_address(), working);

    // Only the refusing one: its error comes back as a name server failure, a denial naming
    // the operation and the resource.
    let only_refusing = NameServerClient::from_addresses(&refusing).unwrap();
    assert_eq!(
        only_refusing.topic_route("T").await,
        Err(RouteError::NameServer(RemoteError::Denied {
            server: refusing.clone(),
            operation: "route lookup",
            resource: "topic `T`".into(),
            code: 16,
            remark: "Authentication credentials are invalid".into()
        }))
    );
}

#[tokio::test]
async fn garbage_routes_are_bad_responses() {
    let (addr, _) = scripted(|_| Some(ok("{\"queueDatas\":[{oops"))).await;
    let name_server = NameServerClient::from_addresses(&addr).unwrap();
    assert!(matches!(
        name_server.topic_route("T").await,
        Err(RouteError::NameServer(RemoteError::BadResponse(_)))
    ));
}

/// A route that lists queues on a broker it gives no address for.
const ROUTE_WITHOUT_ITS_BROKER: &str = r#"{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10911"},"brokerName":"broker-a","cluster":"c"}],"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4},{"brokerName":"broker-b","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}"#;

#[tokio::test]
async fn a_route_that_makes_no_sense_is_not_cached_and_the_next_name_server_is_asked() {
    let answer_nonsense = Arc::new(AtomicBool::new(false));
    let (first, _) = scripted({
        let nonsense = answer_nonsense.clone();
        move |_| {
            let body = if nonsense.load(Ordering::SeqCst) {
                ROUTE_WITHOUT_ITS_BROKER
            } else {
                FASTJSON_ROUTE
            };
            Some(ok(body))
        }
    })
    .await;
    let (second, second_count) = scripted(|_| Some(ok(FASTJSON_ROUTE))).await;
    let name_server = NameServerClient::from_addresses(&first).unwrap();
    let good = name_server.topic_route("T").await.unwrap();
    answer_nonsense.store(true, Ordering::SeqCst);
    let err = name_server.topic_route("T").await.unwrap_err();
    assert!(
        matches!(&err, RouteError::NameServer(RemoteError::BadResponse(why)) if why.contains("broker-b")),
        "{err:?}"
    );
    assert_eq!(
        name_server.routes().topic("T"),
        Some(good.clone()),
        "the last good route stays in the cache the broker clients read"
    );
    let both = NameServerClient::from_addresses(&format!("{first};{second}")).unwrap();
    assert_eq!(both.topic_route("T").await, Ok(good));
    assert_eq!(second_count.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_silent_server_times_out_with_a_typed_error() {
    let (addr, _) = scripted(|_| None).await;
    let remoting = RemotingClient::new(ClientConfig {
        request_timeout: Duration::from_millis(200),
        ..Default::default()
    });
    let name_server = NameServerClient::new(remoting, &addr).unwrap();
    assert_eq!(
        name_server.topic_route("T").await,
        Err(RouteError::NameServer(RemoteError::Timeout {
            service: addr.clone(),
            after: Duration::from_millis(200)
        }))
    );
}

#[tokio::test]
async fn broker_requests_carry_the_fields_the_servers_expect() {
    // A broker that checks the fields of what it gets and answers like the real one.
    let (broker, _) = scripted(|req| {
        let has = |k: &str, v: &str| req.ext(k) == Some(v);
        Some(match req.code {
            request_code::QUERY_CONSUMER_OFFSET => {
                assert!(
                    has("consumerGroup", "G") && has("topic", "T") && has("queueId", "3"),
                    "{req:?}"
                );
                assert!(has("setZeroIfNotFound", "false"), "{req:?}");
                RemotingCommand::response(0, 0, None).with_ext("offset", "99")
            }
            request_code::UPDATE_CONSUMER_OFFSET => {
                assert!(has("commitOffset", "100") && has("queueId", "3"), "{req:?}");
                RemotingCommand::response(0, 0, None)
            }
            request_code::UNREGISTER_CLIENT => {
                assert!(
                    has("clientID", "c1") && has("consumerGroup", "G"),
                    "{req:?}"
                );
                RemotingCommand::response(0, 0, None)
            }
            request_code::GET_CONSUMER_LIST_BY_GROUP => {
                assert!(has("consumerGroup", "G"), "{req:?}");
                RemotingCommand::response(26, 0, Some("subscription group not exist".into()))
            }
            _ => RemotingCommand::response(3, 0, None),
        })
    })
    .await;
    let route = FASTJSON_ROUTE.replace("127.0.0.1:10911", &broker);
    let (namesrv, _) = scripted(move |_| Some(ok(&route))).await;
    let brokers = BrokerClient::new(NameServerClient::from_addresses(&namesrv).unwrap());
    let q = MessageQueue::new("T", "broker-a", 3);
    assert_eq!(brokers.read("G", &q).await, Ok(Some(99)));
    brokers.persist("G", &q, 100).await.unwrap();
    let registration = rebalance_runtime::Registration {
        client_id: "c1".into(),
        group: "G".into(),
        message_model: Default::default(),
        consume_order: Default::default(),
        consume_from: Default::default(),
        subscriptions: vec![rebalance_runtime::subscription::Subscription::all("T")],
    };
    // The slave address in the route is dead: unregistering reports it after trying all.
    let err = brokers.unregister(&registration).await.unwrap_err();
    assert!(matches!(err, RemoteError::Unreachable(_)), "{err}");
    assert_eq!(
        brokers.consumer_ids("G", "T").await,
        Err(RemoteError::Refused {
            code: 26,
            remark: "subscription group not exist".into()
        })
    );
}

type Log = Arc<std::sync::Mutex<Vec<RemotingCommand>>>;

/// A broker that accepts everything and keeps what it got.
async fn recording_broker() -> (String, Log) {
    let log = Log::default();
    let kept = log.clone();
    let (addr, _) = scripted(move |req| {
        kept.lock().unwrap().push(req.clone());
        Some(RemotingCommand::response(0, 0, None))
    })
    .await;
    (addr, log)
}

fn codes(log: &Log, code: i32) -> Vec<RemotingCommand> {
    log.lock()
        .unwrap()
        .iter()
        .filter(|r| r.code == code)
        .cloned()
        .collect()
}

fn route_to(broker_name: &str, addr: &str) -> String {
    format!(
        r#"{{"brokerDatas":[{{"brokerAddrs":{{"0":"{addr}"}},"brokerName":"{broker_name}","cluster":"c"}}],"queueDatas":[{{"brokerName":"{broker_name}","perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2}}]}}"#
    )
}

/// A name server routing topic T to broker-a at `a`, and topic U to broker-b at `b` while
/// `u_exists` holds ("topic not exist", code 17, after).
async fn name_server_for(a: &str, b: &str, u_exists: Arc<AtomicBool>) -> String {
    let (t, u) = (route_to("broker-a", a), route_to("broker-b", b));
    let (addr, _) = scripted(move |req| match req.ext("topic") {
        Some("T") => Some(ok(&t)),
        Some("U") if u_exists.load(Ordering::SeqCst) => Some(ok(&u)),
        _ => Some(RemotingCommand::response(
            17,
            0,
            Some("No topic route info".into()),
        )),
    })
    .await;
    addr
}

/// Two recording brokers (broker-a serving T, broker-b serving U while `u_exists` holds), their
/// name server and a broker client, with the brokers' logs.
async fn two_brokers(u_exists: Arc<AtomicBool>) -> (BrokerClient, NameServerClient, Log, Log) {
    let (a, a_log) = recording_broker().await;
    let (b, b_log) = recording_broker().await;
    let namesrv = name_server_for(&a, &b, u_exists).await;
    let name_server = NameServerClient::from_addresses(&namesrv).unwrap();
    let brokers = BrokerClient::new(name_server.clone());
    (brokers, name_server, a_log, b_log)
}

fn registration(topics: &[&str]) -> rebalance_runtime::Registration {
    rebalance_runtime::Registration {
        client_id: "c1".into(),
        group: "G".into(),
        message_model: Default::default(),
        consume_order: Default::default(),
        consume_from: Default::default(),
        subscriptions: topics
            .iter()
            .map(|t| rebalance_runtime::subscription::Subscription::all(*t))
            .collect(),
    }
}

/// The subVersion of each topic in a heartbeat, in the order sent.
fn sub_versions(heartbeat: &RemotingCommand) -> Vec<(String, i64)> {
    let body: serde_json::Value = serde_json::from_slice(&heartbeat.body).unwrap();
    body["consumerDataSet"][0]["subscriptionDataSet"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["topic"].as_str().unwrap().to_string(),
                s["subVersion"].as_i64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn unregistering_reaches_every_broker_heartbeated() {
    let (brokers, _, a_log, b_log) = two_brokers(Arc::new(AtomicBool::new(true))).await;

    brokers.register(&registration(&["T", "U"])).await.unwrap();
    assert_eq!(codes(&a_log, request_code::HEART_BEAT).len(), 1);
    assert_eq!(codes(&b_log, request_code::HEART_BEAT).len(), 1);

    // No subscription left: both brokers are still told.
    brokers.unregister(&registration(&[])).await.unwrap();
    for log in [&a_log, &b_log] {
        let sent = codes(log, request_code::UNREGISTER_CLIENT);
        assert_eq!(sent.len(), 1, "{sent:?}");
        assert_eq!(sent[0].ext("clientID"), Some("c1"));
        assert_eq!(sent[0].ext("consumerGroup"), Some("G"));
    }
    // Once unregistered, there is nothing left to tell.
    brokers.unregister(&registration(&[])).await.unwrap();
    assert_eq!(codes(&a_log, request_code::UNREGISTER_CLIENT).len(), 1);
    assert_eq!(codes(&b_log, request_code::UNREGISTER_CLIENT).len(), 1);
}

#[tokio::test]
async fn the_broker_of_a_dropped_topic_is_told_with_the_next_heartbeat() {
    let (brokers, _, a_log, b_log) = two_brokers(Arc::new(AtomicBool::new(true))).await;

    brokers.register(&registration(&["T", "U"])).await.unwrap();
    // U dropped at run time: broker-a is heartbeated with T only, and broker-b, which serves
    // nothing subscribed any more, is told to forget the client at once.
    brokers.register(&registration(&["T"])).await.unwrap();
    let beats = codes(&a_log, request_code::HEART_BEAT);
    assert_eq!(beats.len(), 2);
    let topics: Vec<String> = sub_versions(&beats[1])
        .into_iter()
        .map(|(t, _)| t)
        .collect();
    assert_eq!(topics, ["T"], "the heartbeat no longer lists U");
    assert_eq!(codes(&b_log, request_code::HEART_BEAT).len(), 1);
    let told = codes(&b_log, request_code::UNREGISTER_CLIENT);
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(told[0].ext("clientID"), Some("c1"));
    assert_eq!(told[0].ext("consumerGroup"), Some("G"));
    assert!(codes(&a_log, request_code::UNREGISTER_CLIENT).is_empty());

    // Told once: later heartbeats and the final unregistration leave broker-b alone.
    brokers.register(&registration(&["T"])).await.unwrap();
    brokers.unregister(&registration(&["T"])).await.unwrap();
    assert_eq!(codes(&b_log, request_code::UNREGISTER_CLIENT).len(), 1);
    assert_eq!(codes(&a_log, request_code::UNREGISTER_CLIENT).len(), 1);

    // Every topic dropped: the heartbeat tells broker-a and is not a failure (nothing is
    // subscribed, so no broker has to know the client).
    brokers.register(&registration(&["T"])).await.unwrap();
    brokers.register(&registration(&[])).await.unwrap();
    assert_eq!(codes(&a_log, request_code::UNREGISTER_CLIENT).len(), 2);
    assert_eq!(codes(&a_log, request_code::HEART_BEAT).len(), 4);
}

#[tokio::test]
async fn a_subscribed_topic_without_a_route_keeps_its_broker_registered() {
    let u_exists = Arc::new(AtomicBool::new(true));
    let (brokers, name_server, _, b_log) = two_brokers(u_exists.clone()).await;

    brokers.register(&registration(&["T", "U"])).await.unwrap();
    // U still subscribed, but its route cannot be had: broker-b is not heartbeated, and not
    // told to forget the client either (its route may come back).
    u_exists.store(false, Ordering::SeqCst);
    assert!(name_server.topic_route("U").await.is_err());
    brokers.register(&registration(&["T", "U"])).await.unwrap();
    assert_eq!(codes(&b_log, request_code::HEART_BEAT).len(), 1);
    assert!(codes(&b_log, request_code::UNREGISTER_CLIENT).is_empty());
    // The final unregistration still reaches it.
    brokers
        .unregister(&registration(&["T", "U"]))
        .await
        .unwrap();
    assert_eq!(codes(&b_log, request_code::UNREGISTER_CLIENT).len(), 1);
}

#[tokio::test]
async fn each_subscription_carries_the_version_of_when_it_was_made() {
    let (brokers, _, a_log, b_log) = two_brokers(Arc::new(AtomicBool::new(true))).await;

    brokers.register(&registration(&["T"])).await.unwrap();
    brokers.register(&registration(&["T"])).await.unwrap();
    brokers.register(&registration(&["T", "U"])).await.unwrap();
    let beats = codes(&a_log, request_code::HEART_BEAT);
    let first = sub_versions(&beats[0]);
    let [(ref topic, t)] = first[..] else {
        panic!("{first:?}")
    };
    assert_eq!(topic, "T");
    assert_eq!(
        sub_versions(&beats[1]),
        first,
        "a heartbeat is not a new subscription"
    );
    let later = sub_versions(&beats[2]);
    assert_eq!(later[0], ("T".to_string(), t), "T keeps its version");
    assert_eq!(later[1].0, "U");
    assert!(
        later[1].1 > t,
        "U, subscribed at run time, is newer: {later:?}"
    );
    // Every broker gets the same versions.
    assert_eq!(
        sub_versions(&codes(&b_log, request_code::HEART_BEAT)[0]),
        later
    );
}

#[tokio::test]
async fn a_topic_the_name_server_no_longer_knows_loses_its_cached_route() {
    let (a, a_log) = recording_broker().await;
    let (b, b_log) = recording_broker().await;
    let u_exists = Arc::new(AtomicBool::new(true));
    let namesrv = name_server_for(&a, &b, u_exists.clone()).await;
    let name_server = NameServerClient::from_addresses(&namesrv).unwrap();
    let brokers = BrokerClient::new(name_server.clone());

    name_server.topic_route("U").await.unwrap();
    assert!(name_server.routes().topic("U").is_some());
    u_exists.store(false, Ordering::SeqCst);
    assert_eq!(
        name_server.topic_route("U").await,
        Err(RouteError::TopicNotFound("U".into()))
    );
    assert_eq!(name_server.routes().topic("U"), None, "forgotten");
    assert_eq!(
        name_server.routes().master_addr("broker-b"),
        Some(b.clone()),
        "the broker's address stays known"
    );

    // Member lists and heartbeats no longer go to the gone topic's broker.
    assert!(matches!(
        brokers.consumer_ids("G", "U").await,
        Err(RemoteError::Refused { code: 17, .. })
    ));
    brokers.register(&registration(&["T", "U"])).await.unwrap();
    assert_eq!(codes(&a_log, request_code::HEART_BEAT).len(), 1);
    assert!(
        b_log.lock().unwrap().is_empty(),
        "{:?}",
        b_log.lock().unwrap()
    );
}

#[tokio::test]
async fn heartbeats_reach_the_slaves_too_and_a_failing_slave_is_not_a_failed_heartbeat() {
    let (master, master_log) = recording_broker().await;
    let (slave, slave_log) = recording_broker().await;
    // A slave that refuses everything.
    let (refusing, refused) =
        scripted(|_| Some(RemotingCommand::response(1, 0, Some("slave down".into())))).await;
    let route = |slaves: &[&str]| {
        let slaves: String = slaves
            .iter()
            .enumerate()
            .map(|(i, addr)| format!(r#","{}":"{addr}""#, i + 1))
            .collect();
        format!(
            r#"{{"brokerDatas":[{{"brokerAddrs":{{"0":"{master}"{slaves}}},"brokerName":"broker-a","cluster":"c"}}],"queueDatas":[{{"brokerName":"broker-a","perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2}}]}}"#
        )
    };
    let (t, u) = (route(&[&slave]), route(&[&refusing]));
    let (namesrv, _) = scripted(move |req| match req.ext("topic") {
        Some("T") => Some(ok(&t)),
        _ => Some(ok(&u)),
    })
    .await;
    let brokers = BrokerClient::new(NameServerClient::from_addresses(&namesrv).unwrap());

    // A slave lists the group while its master is down, so it must know the members.
    brokers.register(&registration(&["T"])).await.unwrap();
    assert_eq!(codes(&master_log, request_code::HEART_BEAT).len(), 1);
    assert_eq!(codes(&slave_log, request_code::HEART_BEAT).len(), 1);
    // And it is told when the client leaves.
    brokers.unregister(&registration(&["T"])).await.unwrap();
    assert_eq!(codes(&slave_log, request_code::UNREGISTER_CLIENT).len(), 1);

    // Topic U's slave refuses: the heartbeat still counts, the master having accepted it.
    brokers.register(&registration(&["U"])).await.unwrap();
    assert_eq!(refused.load(Ordering::SeqCst), 1);
    assert_eq!(codes(&master_log, request_code::HEART_BEAT).len(), 2);
}

#[tokio::test]
async fn while_the_master_is_down_the_slave_is_still_heartbeated() {
    let (slave, slave_log) = recording_broker().await;
    // The master is gone: the route lists only the slave (broker id 1).
    let route = format!(
        r#"{{"brokerDatas":[{{"brokerAddrs":{{"1":"{slave}"}},"brokerName":"broker-a","cluster":"c"}}],"queueDatas":[{{"brokerName":"broker-a","perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2}}]}}"#
    );
    let (namesrv, _) = scripted(move |_| Some(ok(&route))).await;
    let brokers = BrokerClient::new(NameServerClient::from_addresses(&namesrv).unwrap());

    // The slave answers the member lists meanwhile: it must keep knowing this client.
    let outcome = brokers.register(&registration(&["T"])).await;
    assert!(
        matches!(outcome, Err(RemoteError::Unreachable(_))),
        "no master took the heartbeat: {outcome:?}"
    );
    let beats = codes(&slave_log, request_code::HEART_BEAT);
    assert_eq!(beats.len(), 1, "the slave was heartbeated");
    assert_eq!(sub_versions(&beats[0])[0].0, "T");
    // And it is told when the client leaves.
    brokers.unregister(&registration(&["T"])).await.unwrap();
    assert_eq!(codes(&slave_log, request_code::UNREGISTER_CLIENT).len(), 1);
}

/// A route of topic T whose broker-a is down to its slave (broker id 1) at `slave`.
fn slave_only_route(slave: &str) -> String {
    format!(
        r#"{{"brokerDatas":[{{"brokerAddrs":{{"1":"{slave}"}},"brokerName":"broker-a","cluster":"c"}}],"queueDatas":[{{"brokerName":"broker-a","perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2}}]}}"#
    )
}

#[tokio::test]
async fn while_the_master_is_down_the_slave_answers_member_lists_and_offsets() {
    // As the Java client: a broker without a master is still asked, at its slave, for the
    // group's members and the stored offsets, and takes offset updates.
    let log = Log::default();
    let kept = log.clone();
    let (slave, _) = scripted(move |req| {
        kept.lock().unwrap().push(req.clone());
        Some(match req.code {
            request_code::GET_CONSUMER_LIST_BY_GROUP => ok(r#"{"consumerIdList":["c2","c1"]}"#),
            request_code::QUERY_CONSUMER_OFFSET => {
                RemotingCommand::response(0, 0, None).with_ext("offset", "7")
            }
            _ => RemotingCommand::response(0, 0, None),
        })
    })
    .await;
    let route = slave_only_route(&slave);
    let (namesrv, _) = scripted(move |_| Some(ok(&route))).await;
    let brokers = BrokerClient::new(NameServerClient::from_addresses(&namesrv).unwrap());
    let q = MessageQueue::new("T", "broker-a", 1);

    assert_eq!(
        brokers.consumer_ids("G", "T").await,
        Ok(vec!["c2".into(), "c1".into()])
    );
    assert_eq!(brokers.read("G", &q).await, Ok(Some(7)));
    brokers.persist("G", &q, 8).await.unwrap();
    let updates = codes(&log, request_code::UPDATE_CONSUMER_OFFSET);
    assert_eq!(updates.len(), 1, "{updates:?}");
    assert_eq!(updates[0].ext("commitOffset"), Some("8"));
}

#[tokio::test]
async fn an_unreachable_broker_is_skipped_for_the_member_list() {
    // A port nobody listens on: bind, note the port, close.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let (alive, asked) = scripted(|req| {
        assert_eq!(req.code, request_code::GET_CONSUMER_LIST_BY_GROUP);
        Some(ok(r#"{"consumerIdList":["c1"]}"#))
    })
    .await;
    // broker-a (dead) comes first in the route, broker-b (alive) second.
    let route = format!(
        r#"{{"brokerDatas":[{{"brokerAddrs":{{"0":"{dead}"}},"brokerName":"broker-a","cluster":"c"}},{{"brokerAddrs":{{"0":"{alive}"}},"brokerName":"broker-b","cluster":"c"}}],"queueDatas":[{{"brokerName":"broker-a","perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2}},{{"brokerName":"broker-b","perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2}}]}}"#
    );
    let (namesrv, _) = scripted(move |_| Some(ok(&route))).await;
    let brokers = BrokerClient::new(NameServerClient::from_addresses(&namesrv).unwrap());
    assert_eq!(brokers.consumer_ids("G", "T").await, Ok(vec!["c1".into()]));
    assert_eq!(asked.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_broker_reconnected_to_is_heartbeated_again_at_once() {
    let (broker, log) = recording_broker().await;
    let route = route_to("broker-a", &broker);
    let (namesrv, _) = scripted(move |_| Some(ok(&route))).await;
    let brokers = BrokerClient::new(NameServerClient::from_addresses(&namesrv).unwrap());
    let heartbeats = || codes(&log, request_code::HEART_BEAT);
    let beaten_twice = || async {
        for _ in 0..200 {
            if heartbeats().len() >= 2 {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    };

    let lose_the_connection_then_ask = || async {
        let connection = brokers.remoting().connection(&broker).await.unwrap();
        connection.close();
        brokers.consumer_ids("G", "T").await.unwrap();
    };

    brokers.register(&registration(&["T"])).await.unwrap();
    assert_eq!(heartbeats().len(), 1);
    // The connection is lost (a broker drops the consumers of a closed connection): the next
    // request reconnects, and the broker hears the same heartbeat again, without waiting for
    // the runtime's next one.
    lose_the_connection_then_ask().await;
    assert!(beaten_twice().await, "heartbeated again after reconnecting");
    let sent = heartbeats();
    assert_eq!(
        sent[1].body, sent[0].body,
        "the same registration, same versions"
    );

    // After unregistering, a reconnection tells the broker nothing.
    brokers.unregister(&registration(&["T"])).await.unwrap();
    lose_the_connection_then_ask().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(heartbeats().len(), 2);
}

/// The tag expression and subVersion of topic `T` in a heartbeat.
fn t_subscription(heartbeat: &RemotingCommand) -> (String, i64) {
    let body: serde_json::Value = serde_json::from_slice(&heartbeat.body).unwrap();
    let sub = body["consumerDataSet"][0]["subscriptionDataSet"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["topic"] == "T")
        .unwrap()
        .clone();
    (
        sub["subString"].as_str().unwrap().to_string(),
        sub["subVersion"].as_i64().unwrap(),
    )
}

/// The heartbeats sent again after a reconnection are the registrations as they are when
/// sent: a registration changed meanwhile is not sent in its old form with a newly minted
/// subVersion, which the broker, keeping the newest version, would take over the new one.
#[tokio::test]
async fn a_subscription_changed_during_a_reconnection_is_not_overridden_by_its_old_form() {
    let log = Log::default();
    let hold = Arc::new(AtomicBool::new(false));
    let held_group = Arc::new(std::sync::Mutex::new(None::<String>));
    let (broker, _) = scripted({
        let (log, hold, held_group) = (log.clone(), hold.clone(), held_group.clone());
        move |req| {
            log.lock().unwrap().push(req.clone());
            if req.code == request_code::HEART_BEAT && hold.swap(false, Ordering::SeqCst) {
                // The first heartbeat after the reconnection gets no answer: the others wait.
                let body: serde_json::Value = serde_json::from_slice(&req.body).unwrap();
                let group = body["consumerDataSet"][0]["groupName"].as_str().unwrap();
                *held_group.lock().unwrap() = Some(group.to_string());
                return None;
            }
            Some(RemotingCommand::response(0, 0, None))
        }
    })
    .await;
    let route = route_to("broker-a", &broker);
    let (namesrv, _) = scripted(move |_| Some(ok(&route))).await;
    let remoting = RemotingClient::new(ClientConfig {
        request_timeout: Duration::from_millis(300),
        ..Default::default()
    });
    let brokers = BrokerClient::new(NameServerClient::new(remoting, &namesrv).unwrap());
    let in_group = |group: &str, expression: &str| {
        let mut r = registration(&["T"]);
        r.group = group.into();
        r.subscriptions[0].expression =
            rebalance_runtime::subscription::TagExpression::parse(expression).unwrap();
        r
    };
    brokers.register(&in_group("G1", "*")).await.unwrap();
    brokers.register(&in_group("G2", "*")).await.unwrap();

    hold.store(true, Ordering::SeqCst);
    let connection = brokers.remoting().connection(&broker).await.unwrap();
    connection.close();
    brokers.consumer_ids("G1", "T").await.unwrap();
    let mut held = None;
    for _ in 0..200 {
        held = held_group.lock().unwrap().clone();
        if held.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let other = match held.as_deref() {
        Some("G1") => "G2",
        Some("G2") => "G1",
        other => panic!("no heartbeat held after the reconnection: {other:?}"),
    };
    // While the first heartbeat sent again waits, the other group's subscription changes.
    brokers.register(&in_group(other, "TagA")).await.unwrap();
    // The held heartbeat times out, then the other group's is sent again.
    tokio::time::sleep(Duration::from_millis(600)).await;

    let of_other: Vec<(String, i64)> = codes(&log, request_code::HEART_BEAT)
        .iter()
        .filter(|h| {
            let body: serde_json::Value = serde_json::from_slice(&h.body).unwrap();
            body["consumerDataSet"][0]["groupName"] == other
        })
        .map(t_subscription)
        .collect();
    assert!(of_other.len() >= 2, "{of_other:?}");
    let newest = of_other.iter().max_by_key(|(_, version)| *version).unwrap();
    assert_eq!(
        newest.0, "TagA",
        "the broker keeps the newest version: {of_other:?}"
    );
}

/// A route with broker-a at `a` and broker-b at `b`, masters both.
fn two_master_route(a: &str, b: &str) -> String {
    format!(
        r#"{{"brokerDatas":[{{"brokerAddrs":{{"0":"{a}"}},"brokerName":"broker-a","cluster":"c"}},{{"brokerAddrs":{{"0":"{b}"}},"brokerName":"broker-b","cluster":"c"}}],"queueDatas":[{{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}},{{"brokerName":"broker-b","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}}]}}"#
    )
}

#[tokio::test]
async fn a_heartbeat_one_master_accepts_is_accepted_and_one_none_accepts_fails() {
    let (alive, beats) = scripted(|req| {
        Some(match req.code {
            request_code::HEART_BEAT => RemotingCommand::response(0, 0, None),
            _ => RemotingCommand::response(3, 0, None),
        })
    })
    .await;
    // A port nobody listens on: connections are refused at once.
    let dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().to_string()
    };
    let registration = rebalance_runtime::Registration {
        client_id: "c1".into(),
        group: "G".into(),
        message_model: Default::default(),
        consume_order: Default::default(),
        consume_from: Default::default(),
        subscriptions: vec![rebalance_runtime::subscription::Subscription::all("T")],
    };
    // One master down: the other vouches for the client, so the heartbeat is accepted (a
    // broker down must not stop the consumption of the other brokers' queues).
    let route = two_master_route(&alive, &dead);
    let (namesrv, _) = scripted(move |_| Some(ok(&route))).await;
    let brokers = BrokerClient::new(NameServerClient::from_addresses(&namesrv).unwrap());
    brokers.register(&registration).await.unwrap();
    assert_eq!(beats.load(Ordering::SeqCst), 1);
    // Every master down: the heartbeat fails.
    let other_dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().to_string()
    };
    let route = two_master_route(&other_dead, &dead);
    let (namesrv, _) = scripted(move |_| Some(ok(&route))).await;
    let brokers = BrokerClient::new(NameServerClient::from_addresses(&namesrv).unwrap());
    let err = brokers.register(&registration).await.unwrap_err();
    assert!(matches!(err, RemoteError::Unreachable(_)), "{err}");
}
