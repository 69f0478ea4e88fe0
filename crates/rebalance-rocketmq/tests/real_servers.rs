//! Against a real RocketMQ name server and broker started on loopback by the test kit.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use rebalance_core::{ClientId, MessageQueue};
use rebalance_rocketmq::testkit::TestCluster;
use rebalance_rocketmq::{Admin, NameServerClient, RemotingCommand, request_code};
use rebalance_runtime::{
    GroupDirectory, NameServer, OffsetStore, QueueLocker, RemoteError, RouteError,
};

use common::{Client, client, eventually, init_tracing};

const SOON: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_of_a_created_topic_matches_what_the_broker_registered() {
    init_tracing();
    let cluster = TestCluster::start().unwrap();
    let broker_addr = cluster.first_broker_addr();
    cluster.create_topic("RouteTopic", 8).await.unwrap();

    let name_server = NameServerClient::from_addresses(&cluster.namesrv_addr()).unwrap();
    let route = name_server.topic_route("RouteTopic").await.unwrap();
    assert_eq!(route.queue_datas.len(), 1, "{route:?}");
    let queue_data = &route.queue_datas[0];
    assert_eq!(queue_data.broker_name, "broker-a");
    assert_eq!(
        (queue_data.read_queue_nums, queue_data.write_queue_nums),
        (8, 8)
    );
    assert_eq!(queue_data.perm, 6);
    let broker = route.broker("broker-a").expect("broker data of broker-a");
    assert_eq!(broker.master_addr(), Some(broker_addr.as_str()));
    assert_eq!(broker.cluster, "DefaultCluster");
    let queues = route.subscribable_queues("RouteTopic");
    let ids: Vec<i32> = queues.iter().map(|q| q.queue_id).collect();
    assert_eq!(ids, (0..8).collect::<Vec<_>>());
    // The route cache now knows the broker.
    assert_eq!(
        name_server.routes().master_addr("broker-a"),
        Some(broker_addr.clone())
    );

    // An unknown topic is an answer, not a failure of the name server.
    assert_eq!(
        name_server.topic_route("NoSuchTopic").await,
        Err(RouteError::TopicNotFound("NoSuchTopic".into()))
    );

    // A new queue holds no message yet.
    let admin = Admin::default();
    assert_eq!(admin.max_offset(&broker_addr, "RouteTopic", 3).await, Ok(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_notifications_and_unregistration() {
    init_tracing();
    let cluster = TestCluster::start().unwrap();
    cluster.create_topic("GroupTopic", 4).await.unwrap();
    let a = client(&cluster, "a", "G1", &["GroupTopic"]);
    let b = client(&cluster, "b", "G1", &["GroupTopic"]);

    // Nobody yet: "no consumer for this group" is an empty list.
    assert_eq!(a.brokers.consumer_ids("G1", "GroupTopic").await, Ok(vec![]));

    let mut a_changes = a.brokers.membership_changes("G1").unwrap();
    a.brokers.register(&a.registration).await.unwrap();
    let members = a.brokers.consumer_ids("G1", "GroupTopic").await.unwrap();
    assert_eq!(members, std::slice::from_ref(&a.registration.client_id));
    // The broker notifies the new member itself too.
    eventually("A notified of its own registration", SOON, || {
        let changed = a_changes.has_changed().unwrap_or(false);
        async move { changed.then_some(()) }
    })
    .await;
    a_changes.borrow_and_update();
    // A heartbeat that changes nothing is not a membership change.
    a.brokers.register(&a.registration).await.unwrap();

    let b_changes = b.brokers.membership_changes("G1").unwrap();
    b.brokers.register(&b.registration).await.unwrap();
    eventually("A notified that B joined", SOON, || {
        let changed = a_changes.has_changed().unwrap_or(false);
        async move { changed.then_some(()) }
    })
    .await;
    eventually("B notified of its own registration", SOON, || {
        let changed = b_changes.has_changed().unwrap_or(false);
        async move { changed.then_some(()) }
    })
    .await;
    let members: BTreeSet<ClientId> = a
        .brokers
        .consumer_ids("G1", "GroupTopic")
        .await
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(
        members,
        BTreeSet::from([
            a.registration.client_id.clone(),
            b.registration.client_id.clone()
        ])
    );

    b.brokers.unregister(&b.registration).await.unwrap();
    let after = a.brokers.consumer_ids("G1", "GroupTopic").await.unwrap();
    assert_eq!(
        after,
        std::slice::from_ref(&a.registration.client_id),
        "B is gone at once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_connection_removes_the_client() {
    init_tracing();
    let cluster = TestCluster::start().unwrap();
    cluster.create_topic("CloseTopic", 2).await.unwrap();
    let a = client(&cluster, "a", "G2", &["CloseTopic"]);
    let b = client(&cluster, "b", "G2", &["CloseTopic"]);
    a.brokers.register(&a.registration).await.unwrap();
    b.brokers.register(&b.registration).await.unwrap();
    assert_eq!(
        a.brokers
            .consumer_ids("G2", "CloseTopic")
            .await
            .unwrap()
            .len(),
        2
    );
    // B's process dies without unregistering: its connections close.
    b.brokers.remoting().close_all();
    drop(b);
    let a_id = a.registration.client_id.clone();
    eventually(
        "the broker drops B when its connection closes",
        SOON,
        || {
            let brokers = a.brokers.clone();
            let a_id = a_id.clone();
            async move {
                let ids = brokers.consumer_ids("G2", "CloseTopic").await.ok()?;
                (ids == [a_id]).then_some(())
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_client_whose_connection_was_lost_is_listed_again_after_its_next_request() {
    init_tracing();
    let cluster = TestCluster::start().unwrap();
    cluster.create_topic("LostTopic", 2).await.unwrap();
    let a = client(&cluster, "a", "G6", &["LostTopic"]);
    let b = client(&cluster, "b", "G6", &["LostTopic"]);
    a.brokers.register(&a.registration).await.unwrap();
    b.brokers.register(&b.registration).await.unwrap();
    let broker = cluster.broker_addr("broker-a").unwrap();
    // B's connection is lost (not closed by B's client): the broker drops B with it.
    b.brokers
        .remoting()
        .connection(&broker)
        .await
        .unwrap()
        .close();
    // B's next request reconnects and heartbeats again at once, without the runtime's next
    // heartbeat (30 s later): the broker lists B again.
    b.brokers.consumer_ids("G6", "LostTopic").await.unwrap();
    let b_id = b.registration.client_id.clone();
    eventually("the broker lists B again", SOON, || {
        let brokers = a.brokers.clone();
        let b_id = b_id.clone();
        async move {
            let ids = brokers.consumer_ids("G6", "LostTopic").await.ok()?;
            (ids.len() == 2 && ids.contains(&b_id)).then_some(())
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_are_none_until_persisted_then_read_back_by_anyone() {
    init_tracing();
    let cluster = TestCluster::start().unwrap();
    cluster.create_topic("OffsetTopic", 4).await.unwrap();
    let a = client(&cluster, "a", "G3", &["OffsetTopic"]);
    let b = client(&cluster, "b", "G3", &["OffsetTopic"]);
    a.brokers.register(&a.registration).await.unwrap();
    let q1 = MessageQueue::new("OffsetTopic", "broker-a", 1);
    let q2 = MessageQueue::new("OffsetTopic", "broker-a", 2);

    assert_eq!(a.brokers.read("G3", &q1).await, Ok(None));
    a.brokers.persist("G3", &q1, 42).await.unwrap();
    assert_eq!(a.brokers.read("G3", &q1).await, Ok(Some(42)));
    // Another client (another connection) reads what A persisted: the broker has it.
    assert_eq!(b.brokers.read("G3", &q1).await, Ok(Some(42)));
    // Forward updates replace the offset. A backward one is acknowledged but ignored by this
    // broker (it keeps the larger offset; a Java broker stores the smaller one with a warning).
    a.brokers.persist("G3", &q1, 50).await.unwrap();
    assert_eq!(b.brokers.read("G3", &q1).await, Ok(Some(50)));
    a.brokers.persist("G3", &q1, 7).await.unwrap();
    assert_eq!(b.brokers.read("G3", &q1).await, Ok(Some(50)));
    assert_eq!(b.brokers.read("G3", &q2).await, Ok(None));
    // Another group has its own offsets.
    assert_eq!(b.brokers.read("OtherGroup", &q1).await, Ok(None));
    // A queue of a broker nobody knows cannot be reached.
    let nowhere = MessageQueue::new("OffsetTopic", "broker-zz", 0);
    assert!(matches!(
        a.brokers.read("G3", &nowhere).await,
        Err(RemoteError::Unreachable(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_queue_goes_to_another_client_only_after_unlock() {
    init_tracing();
    let cluster = TestCluster::start().unwrap();
    cluster.create_topic("LockTopic", 8).await.unwrap();
    let a = client(&cluster, "a", "G4", &["LockTopic"]);
    let b = client(&cluster, "b", "G4", &["LockTopic"]);

    assert_eq!(lock(&a, "G4", 0..4).await, ids(0..4));
    // B asks for 2..6: 2 and 3 are A's.
    assert_eq!(lock(&b, "G4", 2..6).await, ids(4..6));
    // Renewing is granted to the holder.
    assert_eq!(lock(&a, "G4", 0..4).await, ids(0..4));
    // Another group locks independently.
    assert_eq!(lock(&b, "G4-other", 0..2).await, ids(0..2));

    unlock(&a, "G4", 2..4).await;
    assert_eq!(lock(&b, "G4", 2..6).await, ids(2..6));
    // A still holds 0 and 1, and can no longer have 2.
    assert_eq!(lock(&a, "G4", 0..3).await, ids(0..2));
    // Unlocking somebody else's queue does nothing.
    unlock(&a, "G4", 4..6).await;
    assert!(lock(&a, "G4", 4..6).await.is_empty());
}

/// LockTopic's queues with these ids.
fn lock_topic(ids: std::ops::Range<i32>) -> Vec<MessageQueue> {
    ids.map(|i| MessageQueue::new("LockTopic", "broker-a", i))
        .collect()
}

fn ids(ids: std::ops::Range<i32>) -> Vec<i32> {
    ids.collect()
}

/// The ids of the LockTopic queues `c` is granted when it asks to lock `ids` for `group`.
async fn lock(c: &Client, group: &str, ids: std::ops::Range<i32>) -> Vec<i32> {
    let outcome = c
        .brokers
        .lock(group, &c.registration.client_id, &lock_topic(ids))
        .await
        .unwrap();
    outcome.granted.iter().map(|q| q.queue_id).collect()
}

async fn unlock(c: &Client, group: &str, ids: std::ops::Range<i32>) {
    c.brokers
        .unlock(group, &c.registration.client_id, &lock_topic(ids))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn name_server_failover_skips_a_dead_address_and_remembers_the_live_one() {
    init_tracing();
    let cluster = TestCluster::start().unwrap();
    cluster.create_topic("FailoverTopic", 2).await.unwrap();
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let live = cluster.namesrv_addr();
    let name_server = NameServerClient::from_addresses(&format!("{dead};{live}")).unwrap();
    assert_eq!(name_server.preferred_address(), dead);
    let route = name_server.topic_route("FailoverTopic").await.unwrap();
    assert_eq!(route.subscribable_queues("FailoverTopic").len(), 2);
    assert_eq!(name_server.preferred_address(), live);
    // "Topic not found" from the live one is an answer: no failover back to the dead one.
    assert_eq!(
        name_server.topic_route("Nope").await,
        Err(RouteError::TopicNotFound("Nope".into()))
    );
    assert_eq!(name_server.preferred_address(), live);

    // Every name server down: a failure of the name server, not "topic not found".
    let all_dead = NameServerClient::from_addresses(&dead).unwrap();
    assert!(matches!(
        all_dead.topic_route("FailoverTopic").await,
        Err(RouteError::NameServer(RemoteError::Unreachable(_)))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_broker_is_reached_again_and_keeps_its_offsets() {
    init_tracing();
    let mut cluster = TestCluster::start().unwrap();
    cluster.create_topic("RestartTopic", 2).await.unwrap();
    let a = client(&cluster, "a", "G5", &["RestartTopic"]);
    a.brokers.register(&a.registration).await.unwrap();
    let q0 = MessageQueue::new("RestartTopic", "broker-a", 0);
    a.brokers.persist("G5", &q0, 11).await.unwrap();

    cluster.stop_broker("broker-a").unwrap();
    let err = a
        .brokers
        .consumer_ids("G5", "RestartTopic")
        .await
        .unwrap_err();
    assert!(matches!(err, RemoteError::Unreachable(_)), "{err}");

    cluster.start_broker("broker-a").unwrap();
    // The client reconnects on its own (after its backoff) and the broker has kept the offset.
    let offset = eventually("offset readable after the restart", SOON, || {
        let brokers = a.brokers.clone();
        let q0 = q0.clone();
        async move { brokers.read("G5", &q0).await.ok() }
    })
    .await;
    assert_eq!(offset, Some(11));
    a.brokers.register(&a.registration).await.unwrap();
    assert_eq!(
        a.brokers.consumer_ids("G5", "RestartTopic").await.unwrap(),
        std::slice::from_ref(&a.registration.client_id)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_brokers_heartbeats_and_locks_reach_both() {
    init_tracing();
    let mut cluster = TestCluster::start().unwrap();
    let b_addr = cluster.add_broker("broker-b").unwrap();
    let a_addr = cluster.broker_addr("broker-a").unwrap();
    let route = cluster.create_topic("TwoBrokers", 4).await.unwrap();
    assert_eq!(route.subscribable_queues("TwoBrokers").len(), 8);
    let a = client(&cluster, "a", "G6", &["TwoBrokers"]);
    let a_id = a.registration.client_id.clone();
    a.brokers.register(&a.registration).await.unwrap();
    // Every master got the heartbeat: ask each broker directly.
    for addr in [&a_addr, &b_addr] {
        let answer = a
            .brokers
            .remoting()
            .invoke(
                addr,
                RemotingCommand::request(request_code::GET_CONSUMER_LIST_BY_GROUP)
                    .with_ext("consumerGroup", "G6"),
            )
            .await
            .unwrap();
        assert_eq!(answer.code, 0, "{addr}: {answer:?}");
        let body: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
        assert_eq!(
            body["consumerIdList"],
            serde_json::json!([a_id.as_str()]),
            "{addr}"
        );
    }
    let queues = route.subscribable_queues("TwoBrokers");
    let locked = a.brokers.lock("G6", &a_id, &queues).await.unwrap();
    assert_eq!(locked.granted, queues, "both brokers granted their queues");
    // With broker-b gone, broker-a's queues are still granted; broker-b's are unanswered (not
    // refused: nobody said another client holds them).
    cluster.kill_broker("broker-b").unwrap();
    let other = common::client_id("other");
    let locked = a.brokers.lock("G6-b", &other, &queues).await.unwrap();
    let on = |broker: &str| -> Vec<MessageQueue> {
        queues
            .iter()
            .filter(|q| &*q.broker_name == broker)
            .cloned()
            .collect()
    };
    assert_eq!(locked.granted, on("broker-a"));
    assert_eq!(locked.unanswered, on("broker-b"));
    assert!(locked.refused.is_empty(), "{locked:?}");
    // Asked again by a's client, broker-a refuses: its queues are other's now.
    let again = a.brokers.lock("G6-b", &a_id, &queues).await.unwrap();
    assert_eq!(again.refused, on("broker-a"));
    assert_eq!(again.unanswered, on("broker-b"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_broker_wants_one_client_id_per_connection_and_known_groups_for_offsets() {
    init_tracing();
    let cluster = TestCluster::start().unwrap();
    cluster.create_topic("RulesTopic", 2).await.unwrap();
    let a = client(&cluster, "a", "G7", &["RulesTopic"]);
    let q0 = MessageQueue::new("RulesTopic", "broker-a", 0);
    // No heartbeat yet: the broker does not know the group and refuses to store its offsets.
    assert!(matches!(
        a.brokers.persist("G7", &q0, 3).await,
        Err(RemoteError::Refused { code: 26, .. })
    ));
    a.brokers.register(&a.registration).await.unwrap();
    a.brokers.persist("G7", &q0, 3).await.unwrap();
    assert_eq!(a.brokers.read("G7", &q0).await, Ok(Some(3)));
    // A second client id over the same connection is refused; with its own connection it is not.
    let mut other = a.registration.clone();
    other.client_id = common::client_id("other");
    assert!(matches!(
        a.brokers.register(&other).await,
        Err(RemoteError::Refused { code: 29, .. })
    ));
    let b = client(&cluster, "b", "G7", &["RulesTopic"]);
    b.brokers.register(&other).await.unwrap();
    assert_eq!(
        a.brokers
            .consumer_ids("G7", "RulesTopic")
            .await
            .unwrap()
            .len(),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_name_server_is_reached_again() {
    init_tracing();
    let mut cluster = TestCluster::start().unwrap();
    cluster.create_topic("NsRestart", 2).await.unwrap();
    let name_server = NameServerClient::from_addresses(&cluster.namesrv_addr()).unwrap();
    name_server.topic_route("NsRestart").await.unwrap();

    cluster.stop_name_server();
    assert!(matches!(
        name_server.topic_route("NsRestart").await,
        Err(RouteError::NameServer(RemoteError::Unreachable(_)))
    ));
    // The last route is still in the cache for the broker clients.
    assert!(name_server.routes().topic("NsRestart").is_some());

    cluster.start_name_server().unwrap();
    // Reconnected: the name server answers again. It restarted empty, so until the broker's
    // next periodic registration (30 s) the topic is unknown: an answer, not a failure.
    let answer = eventually("the name server answers after its restart", SOON, || {
        let name_server = name_server.clone();
        async move {
            match name_server.topic_route("NsRestart").await {
                Err(RouteError::NameServer(_)) => None,
                other => Some(other),
            }
        }
    })
    .await;
    assert!(
        matches!(&answer, Ok(_) | Err(RouteError::TopicNotFound(_))),
        "{answer:?}"
    );
    // Either way the broker clients still find the broker.
    assert_eq!(
        name_server.routes().master_addr("broker-a"),
        Some(cluster.first_broker_addr())
    );
    // The topic's route is cached while the name server knows the topic, and forgotten when it
    // says the topic does not exist.
    assert_eq!(
        name_server.routes().topic("NsRestart").is_some(),
        answer.is_ok(),
        "{answer:?}"
    );
}
