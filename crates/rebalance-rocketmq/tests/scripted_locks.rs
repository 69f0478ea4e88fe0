//! The broker locker against scripted brokers on loopback: with several brokers, one answer
//! grants and refuses, and a failing broker's queues come back unanswered (not refused), so the
//! runtime keeps them for the lock lifetime instead of releasing them at once.

mod scripted;

use rebalance_core::{ClientId, MessageQueue};
use rebalance_rocketmq::{BrokerClient, NameServerClient, RemotingCommand, request_code};
use rebalance_runtime::{QueueLocker, RemoteError};
use scripted::answering;

/// A route of topic T on broker-a and broker-b, two queues each.
fn route(a: &str, b: &str) -> String {
    format!(
        r#"{{"brokerDatas":[{{"brokerAddrs":{{"0":"{a}"}},"brokerName":"broker-a","cluster":"C"}},{{"brokerAddrs":{{"0":"{b}"}},"brokerName":"broker-b","cluster":"C"}}],"queueDatas":[{{"brokerName":"broker-a","perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2}},{{"brokerName":"broker-b","perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2}}]}}"#
    )
}

/// broker-a grants queue 0 only (queue 1 is held by someone else).
async fn granting_broker() -> String {
    answering(|req| {
        assert_eq!(req.code, request_code::LOCK_BATCH_MQ);
        RemotingCommand::response(0, 0, None).with_body(
            r#"{"lockOKMQSet":[{"topic":"T","brokerName":"broker-a","queueId":0}]}"#.as_bytes(),
        )
    })
    .await
    .0
}

/// A broker that answers every request with a system error.
async fn failing_broker() -> String {
    answering(|_| RemotingCommand::response(1, 0, Some("system busy".into())))
        .await
        .0
}

async fn locker(a: &str, b: &str) -> BrokerClient {
    let route = route(a, b);
    let (namesrv, _) = answering(move |_| {
        RemotingCommand::response(0, 0, None).with_body(route.clone().into_bytes())
    })
    .await;
    BrokerClient::new(NameServerClient::from_addresses(&namesrv).unwrap())
}

fn q(broker: &str, id: i32) -> MessageQueue {
    MessageQueue::new("T", broker, id)
}

#[tokio::test]
async fn a_failing_broker_leaves_its_queues_unanswered_not_refused() {
    let a = granting_broker().await;
    let b = failing_broker().await;
    let brokers = locker(&a, &b).await;
    let all = [
        q("broker-a", 0),
        q("broker-a", 1),
        q("broker-b", 0),
        q("broker-b", 1),
    ];
    let outcome = brokers
        .lock("G", &ClientId::from("c1"), &all)
        .await
        .unwrap();
    assert_eq!(outcome.granted, vec![q("broker-a", 0)]);
    assert_eq!(outcome.refused, vec![q("broker-a", 1)]);
    assert_eq!(outcome.unanswered, vec![q("broker-b", 0), q("broker-b", 1)]);
}

#[tokio::test]
async fn the_lock_fails_only_when_no_broker_answers() {
    let a = failing_broker().await;
    let b = failing_broker().await;
    let brokers = locker(&a, &b).await;
    let all = [q("broker-a", 0), q("broker-b", 0)];
    let err = brokers
        .lock("G", &ClientId::from("c1"), &all)
        .await
        .unwrap_err();
    assert!(matches!(err, RemoteError::Refused { code: 1, .. }), "{err}");
}

#[tokio::test]
async fn a_broker_without_master_costs_one_route_lookup_per_lock_not_one_per_queue() {
    use std::sync::atomic::Ordering;
    // broker-a has lost its master: the route lists only its slave.
    let (namesrv, asked) = answering(|_| {
        RemotingCommand::response(0, 0, None).with_body(
            r#"{"brokerDatas":[{"brokerAddrs":{"1":"127.0.0.1:1"},"brokerName":"broker-a","cluster":"C"}],"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":8,"topicSysFlag":0,"writeQueueNums":8}]}"#
                .as_bytes(),
        )
    })
    .await;
    let brokers = BrokerClient::new(NameServerClient::from_addresses(&namesrv).unwrap());
    let all: Vec<MessageQueue> = (0..8).map(|id| q("broker-a", id)).collect();
    let err = brokers
        .lock("G", &ClientId::from("c1"), &all)
        .await
        .unwrap_err();
    assert!(matches!(err, RemoteError::Unreachable(_)), "{err}");
    assert_eq!(asked.load(Ordering::SeqCst), 1, "one lookup for the broker");
    brokers
        .unlock("G", &ClientId::from("c1"), &all)
        .await
        .unwrap_err();
    assert_eq!(
        asked.load(Ordering::SeqCst),
        2,
        "and one more for the unlock"
    );
}
