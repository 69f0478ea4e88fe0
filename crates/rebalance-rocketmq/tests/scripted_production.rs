//! Credentials and namespaces against scripted servers on loopback: every request is signed as
//! a verifying server recomputes it, a refusal is a typed error logged once per resource and
//! never retried, and a namespace is on the wire only.

mod scripted;

use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use rebalance_core::{ClientId, MessageQueue};
use rebalance_rocketmq::acl::{self, Credentials};
use rebalance_rocketmq::{
    BrokerClient, NameServerClient, Namespace, RemotingCommand, request_code,
};
use rebalance_runtime::subscription::Subscription;
use rebalance_runtime::{
    GroupDirectory, NameServer, OffsetStore, QueueLocker, Registration, RemoteError,
};
use scripted::answering;

/// A route of the topic on one broker at `addr`, two queues.
fn route(addr: &str) -> Vec<u8> {
    format!(
        r#"{{"brokerDatas":[{{"brokerAddrs":{{"0":"{addr}"}},"brokerName":"broker-a","cluster":"C"}}],"queueDatas":[{{"brokerName":"broker-a","perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2}}]}}"#
    )
    .into_bytes()
}

/// Whether `request` is signed with `secret` by access key `ak`, as a broker verifies it.
fn verified(request: &RemotingCommand, ak: &str, secret: &str) -> bool {
    let content = acl::signed_content(&request.ext_fields, &request.body);
    request.ext(acl::ACCESS_KEY) == Some(ak)
        && request.ext(acl::SIGNATURE) == Some(acl::signature(secret, &content).as_str())
}

/// What a broker answers when all is well.
fn broker_answer(request: &RemotingCommand) -> RemotingCommand {
    let ok = RemotingCommand::response(0, 0, None);
    match request.code {
        request_code::GET_CONSUMER_LIST_BY_GROUP => {
            ok.with_body(&br#"{"consumerIdList":["c1"]}"#[..])
        }
        request_code::QUERY_CONSUMER_OFFSET => ok.with_ext("offset", 7),
        request_code::LOCK_BATCH_MQ => {
            // Grants what was asked.
            let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
            let granted = serde_json::json!({"lockOKMQSet": body["mqSet"]});
            ok.with_body(serde_json::to_vec(&granted).unwrap())
        }
        _ => ok,
    }
}

fn registration(topic: &str) -> Registration {
    Registration {
        client_id: ClientId::from("c1"),
        group: "G".into(),
        message_model: Default::default(),
        consume_order: Default::default(),
        consume_from: Default::default(),
        subscriptions: vec![Subscription::all(topic), Subscription::all("%RETRY%G")],
    }
}

/// A name server and a broker that both verify signatures made with secret `sk` (answering 16
/// otherwise), and every request they got.
async fn verifying_cluster() -> (String, Arc<Mutex<Vec<RemotingCommand>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let (broker, _) = answering(move |request| {
        log.lock().unwrap().push(request.clone());
        if verified(request, "ak", "sk") {
            broker_answer(request)
        } else {
            RemotingCommand::response(16, 0, Some("Authentication credentials are invalid".into()))
        }
    })
    .await;
    let log = seen.clone();
    let (namesrv, _) = answering(move |request| {
        log.lock().unwrap().push(request.clone());
        if verified(request, "ak", "sk") {
            RemotingCommand::response(0, 0, None).with_body(route(&broker))
        } else {
            RemotingCommand::response(16, 0, Some("Authentication credentials are invalid".into()))
        }
    })
    .await;
    (namesrv, seen)
}

#[tokio::test]
async fn every_request_of_everything_built_from_the_name_server_client_is_signed() {
    let (namesrv, seen) = verifying_cluster().await;
    let name_server = NameServerClient::builder(&namesrv)
        .credentials(Credentials::new("ak", "sk").unwrap())
        .build()
        .unwrap();
    let brokers = BrokerClient::new(name_server.clone());
    let registration = registration("T");
    let queue = MessageQueue::new("T", "broker-a", 1);
    let client = ClientId::from("c1");

    name_server.topic_route("T").await.unwrap();
    brokers.register(&registration).await.unwrap();
    assert_eq!(
        brokers.consumer_ids("G", "T").await.unwrap(),
        std::slice::from_ref(&client)
    );
    assert_eq!(brokers.read("G", &queue).await.unwrap(), Some(7));
    brokers.persist("G", &queue, 8).await.unwrap();
    let outcome = brokers
        .lock("G", &client, std::slice::from_ref(&queue))
        .await
        .unwrap();
    assert_eq!(outcome.granted, std::slice::from_ref(&queue));
    brokers
        .unlock("G", &client, std::slice::from_ref(&queue))
        .await
        .unwrap();
    brokers.unregister(&registration).await.unwrap();

    let seen = seen.lock().unwrap();
    let codes: Vec<i32> = seen.iter().map(|r| r.code).collect();
    for code in [105, 34, 38, 14, 15, 41, 42, 35] {
        assert!(codes.contains(&code), "no request {code} in {codes:?}");
    }
    assert!(seen.iter().all(|r| verified(r, "ak", "sk")), "{seen:?}");
}

/// Collects what the tracing subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

#[tokio::test]
async fn refusals_are_typed_errors_logged_once_per_resource_and_never_retried() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::ERROR)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let (namesrv, seen) = verifying_cluster().await;
    // The right access key with a wrong secret: the name server refuses the route too.
    let wrong = NameServerClient::builder(&namesrv)
        .credentials(Credentials::new("ak", "wrong").unwrap())
        .build()
        .unwrap();
    match wrong.topic_route("T").await {
        Err(rebalance_runtime::RouteError::NameServer(RemoteError::Denied {
            operation,
            resource,
            code,
            ..
        })) => {
            assert_eq!(operation, "route lookup");
            assert_eq!(resource, "topic `T`");
            assert_eq!(code, 16);
        }
        other => panic!("expected a denial, got {other:?}"),
    }

    // Unsigned requests to the broker (the route comes from a name server that accepts them).
    let (broker_addr, broker_requests) = answering(|request| {
        if verified(request, "ak", "sk") {
            broker_answer(request)
        } else {
            RemotingCommand::response(16, 0, Some("Authentication credentials are invalid".into()))
        }
    })
    .await;
    let (open_namesrv, _) =
        answering(move |_| RemotingCommand::response(0, 0, None).with_body(route(&broker_addr)))
            .await;
    let unsigned = BrokerClient::new(NameServerClient::from_addresses(&open_namesrv).unwrap());
    let registration = registration("T");
    let queue = MessageQueue::new("T", "broker-a", 0);
    for _ in 0..3 {
        let err = unsigned.register(&registration).await.unwrap_err();
        assert!(
            matches!(&err, RemoteError::Denied { operation, resource, code: 16, .. }
                if *operation == "heartbeat" && resource == "group `G`"),
            "{err:?}"
        );
    }
    let err = unsigned.consumer_ids("G", "T").await.unwrap_err();
    assert!(
        matches!(&err, RemoteError::Denied { operation, .. } if *operation == "consumer list"),
        "{err:?}"
    );
    let err = unsigned.persist("G", &queue, 3).await.unwrap_err();
    assert!(
        matches!(&err, RemoteError::Denied { operation, resource, .. }
            if *operation == "offset commit" && resource == "group `G` on topic `T`"),
        "{err:?}"
    );
    let err = unsigned
        .lock("G", &ClientId::from("c1"), std::slice::from_ref(&queue))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RemoteError::Denied { operation, .. } if *operation == "lock"),
        "{err:?}"
    );
    // One request per call: nothing is retried.
    assert_eq!(broker_requests.load(Ordering::SeqCst), 6);

    let text = captured.text();
    let denied: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("request denied"))
        .collect();
    // One line per resource: topic T at the name server, group G (heartbeats and member list),
    // G on topic T (offsets, then locks).
    assert_eq!(denied.len(), 3, "{text}");
    assert!(denied[0].contains("access key `ak`"), "{}", denied[0]);
    assert!(
        denied[1].contains("sends no credentials") && denied[1].contains("group `G`"),
        "{}",
        denied[1]
    );
    drop(seen);
}

#[tokio::test]
async fn a_namespace_is_on_the_wire_only() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let (broker, _) = answering(move |request| {
        log.lock().unwrap().push(request.clone());
        broker_answer(request)
    })
    .await;
    let log = seen.clone();
    let (namesrv, _) = answering(move |request| {
        log.lock().unwrap().push(request.clone());
        RemotingCommand::response(0, 0, None).with_body(route(&broker))
    })
    .await;
    let name_server = NameServerClient::builder(&namesrv)
        .namespace(Namespace::new("NS").unwrap())
        .build()
        .unwrap();
    let brokers = BrokerClient::new(name_server.clone());
    let registration = registration("T");
    let queue = MessageQueue::new("T", "broker-a", 1);
    let client = ClientId::from("c1");

    let route = name_server.topic_route("T").await.unwrap();
    assert_eq!(
        route.subscribable_queues("T"),
        [MessageQueue::new("T", "broker-a", 0), queue.clone()],
        "plain names for the runtime"
    );
    assert!(
        name_server.routes().topic("T").is_some(),
        "cached under the plain name"
    );
    brokers.register(&registration).await.unwrap();
    brokers.consumer_ids("G", "T").await.unwrap();
    brokers.read("G", &queue).await.unwrap();
    brokers.persist("G", &queue, 8).await.unwrap();
    let outcome = brokers
        .lock("G", &client, std::slice::from_ref(&queue))
        .await
        .unwrap();
    assert_eq!(
        outcome.granted,
        std::slice::from_ref(&queue),
        "granted under the plain name"
    );
    brokers.unregister(&registration).await.unwrap();

    let seen = seen.lock().unwrap();
    let by_code = |code| {
        seen.iter()
            .find(|r| r.code == code)
            .unwrap_or_else(|| panic!("no request {code}"))
    };
    assert_eq!(by_code(105).ext("topic"), Some("NS%T"));
    let heartbeat: serde_json::Value = serde_json::from_slice(&by_code(34).body).unwrap();
    let consumer = &heartbeat["consumerDataSet"][0];
    assert_eq!(consumer["groupName"], "NS%G");
    let topics: Vec<&str> = consumer["subscriptionDataSet"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["topic"].as_str().unwrap())
        .collect();
    assert_eq!(topics, ["NS%T", "%RETRY%NS%G"]);
    assert_eq!(heartbeat["clientID"], "c1", "client ids are not namespaced");
    assert_eq!(by_code(38).ext("consumerGroup"), Some("NS%G"));
    for code in [14, 15] {
        assert_eq!(by_code(code).ext("consumerGroup"), Some("NS%G"));
        assert_eq!(by_code(code).ext("topic"), Some("NS%T"));
    }
    let lock: serde_json::Value = serde_json::from_slice(&by_code(41).body).unwrap();
    assert_eq!(lock["consumerGroup"], "NS%G");
    assert_eq!(lock["mqSet"][0]["topic"], "NS%T");
    assert_eq!(by_code(35).ext("consumerGroup"), Some("NS%G"));
}

/// A broker that lists the group's client id from two addresses (as a Java broker does, one
/// entry per connection): the broker client reports it at ERROR after the heartbeat, naming
/// both addresses, once.
#[tokio::test]
async fn a_client_id_connected_from_two_addresses_is_reported_with_both() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::ERROR)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let (broker, _) = answering(|request| {
        let ok = RemotingCommand::response(0, 0, None);
        if request.code == request_code::GET_CONSUMER_CONNECTION_LIST {
            assert_eq!(request.ext("consumerGroup"), Some("G"));
            ok.with_body(
                &br#"{"connectionSet":[{"clientId":"c1","clientAddr":"10.0.0.1:5000","language":"JAVA","version":475},{"clientId":"c1","clientAddr":"10.0.0.2:6000","language":"JAVA","version":475},{"clientId":"c2","clientAddr":"10.0.0.3:7000","language":"JAVA","version":475}],"subscriptionTable":{},"consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET"}"#[..],
            )
        } else {
            ok
        }
    })
    .await;
    let (namesrv, _) =
        answering(move |_| RemotingCommand::response(0, 0, None).with_body(route(&broker))).await;
    let brokers = BrokerClient::new(NameServerClient::from_addresses(&namesrv).unwrap());
    // Checked every 100 ms, reported once seen for 300 ms (60 s and 150 s by default: a
    // reconnected client's old connection is listed until the broker sees it closed).
    brokers.set_duplicate_id_checks(
        std::time::Duration::from_millis(100),
        std::time::Duration::from_millis(300),
    );
    let registration = registration("T");
    let started = std::time::Instant::now();
    let mut heartbeats = 0;
    loop {
        if heartbeats < 20 {
            brokers.register(&registration).await.unwrap();
            heartbeats += 1;
        }
        let text = captured.text();
        let lines: Vec<String> = text
            .lines()
            .filter(|l| l.contains("share one client id"))
            .map(str::to_string)
            .collect();
        if !lines.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "no ERROR about the shared id within 5 s: {text}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(300),
        "reported before it lasted"
    );
    // Checked again while it lasts: reported once.
    for _ in 0..5 {
        brokers.register(&registration).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let lines: Vec<String> = captured
        .text()
        .lines()
        .filter(|l| l.contains("share one client id"))
        .map(str::to_string)
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    assert!(line.contains("ERROR"), "{line}");
    assert!(line.contains("this consumer's client id `c1`"), "{line}");
    assert!(line.contains("10.0.0.1:5000 and 10.0.0.2:6000"), "{line}");
    // How ids are made, precisely: ours are unique per process, and so are recent Java ones.
    assert!(
        line.contains(
            "This library's ids default to ip@pid@nanos and Java clients' from 4.9 on to \
             ip@pid#nanos, which do not collide; Java clients before 4.9 default to ip@pid, which \
             collides where every process is PID 1"
        ),
        "{line}"
    );
    assert_eq!(
        captured
            .text()
            .lines()
            .filter(|l| l.contains("share one client id"))
            .count(),
        1
    );
}
