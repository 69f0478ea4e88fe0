//! Production clusters against a real RocketMQ name server and broker: a broker enforcing
//! authentication (ACL signing), two namespaces on one broker, and two consumers sharing one
//! client id. Every wait is bounded.

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rebalance_core::{ClientId, MessageQueue};
use rebalance_rocketmq::testkit::{ClusterOptions, TestCluster};
use rebalance_rocketmq::{
    Admin, BrokerClient, Credentials, NameServerClient, Namespace, RemotingClient, TopicConfig,
};
use rebalance_runtime::config::{ConsumeOrder, Intervals};
use rebalance_runtime::{
    Consumer, ConsumerHandle, GroupDirectory, ListenerError, OffsetStore, QueueLease,
    QueueListener, QueueLocker, RemoteError, RemovedQueue, StartPosition,
};

const WAIT: Duration = Duration::from_secs(3);

/// The broker's super user in the authentication tests.
fn super_user() -> Credentials {
    Credentials::new("rocketmq2", "12345678").unwrap()
}

/// Keeps every lease and where it started.
#[derive(Default)]
struct Leases {
    held: Mutex<Vec<QueueLease>>,
    added: Mutex<Vec<(MessageQueue, StartPosition)>>,
}

#[async_trait]
impl QueueListener for Leases {
    async fn queues_added(&self, _topic: &str, queues: &[QueueLease]) -> Result<(), ListenerError> {
        let mut added = self.added.lock().unwrap();
        for lease in queues {
            added.push((lease.queue().clone(), lease.start_position()));
        }
        self.held.lock().unwrap().extend(queues.iter().cloned());
        Ok(())
    }

    async fn queues_removed(
        &self,
        _topic: &str,
        queues: &[RemovedQueue],
    ) -> Result<(), ListenerError> {
        let gone: BTreeSet<&MessageQueue> = queues.iter().map(|r| &r.queue).collect();
        self.held
            .lock()
            .unwrap()
            .retain(|l| !gone.contains(l.queue()));
        Ok(())
    }
}

struct Member {
    id: ClientId,
    handle: ConsumerHandle,
    leases: Arc<Leases>,
}

/// A consumer of `group` on `topic` with its own connections, over `name_server`.
async fn join(
    name_server: NameServerClient,
    group: &str,
    topic: &str,
    label: &str,
    order: ConsumeOrder,
) -> Member {
    let brokers = BrokerClient::new(name_server.clone());
    let id = common::client_id(label);
    let leases = Arc::new(Leases::default());
    let handle = Consumer::builder(group)
        .client_id(id.clone())
        .subscribe(topic)
        .consume_order(order)
        .intervals(Intervals {
            rebalance_wait: WAIT,
            ..Intervals::default()
        })
        .name_server(Arc::new(name_server))
        .directory(Arc::new(brokers.clone()))
        .offset_store(Arc::new(brokers.clone()))
        .locker(Arc::new(brokers))
        .listener(leases.clone())
        .start()
        .await
        .unwrap();
    Member { id, handle, leases }
}

/// The queues of `topic` `member` holds.
fn held(member: &Member, topic: &str) -> BTreeSet<MessageQueue> {
    member
        .handle
        .assignment()
        .iter()
        .filter(|q| *q.topic == *topic)
        .cloned()
        .collect()
}

/// Waits (at most `within`) until `members` hold disjoint shares of `all` covering it, each
/// of `per_member` queues.
async fn converge(what: &str, members: &[&Member], all: &BTreeSet<MessageQueue>, within: Duration) {
    let topic = all.iter().next().map(|q| q.topic.to_string()).unwrap();
    let per_member = all.len() / members.len();
    common::eventually(what, within, || async {
        let shares: Vec<BTreeSet<MessageQueue>> = members.iter().map(|m| held(m, &topic)).collect();
        let union: BTreeSet<MessageQueue> = shares.iter().flatten().cloned().collect();
        let disjoint = shares.iter().map(BTreeSet::len).sum::<usize>() == union.len();
        let even = shares.iter().all(|s| s.len() == per_member);
        (disjoint && even && union == *all).then_some(())
    })
    .await;
}

fn queues(route: &rebalance_core::TopicRoute, topic: &str) -> BTreeSet<MessageQueue> {
    route.subscribable_queues(topic).into_iter().collect()
}

fn authenticated_cluster() -> TestCluster {
    TestCluster::start_with(ClusterOptions {
        authentication: Some(super_user()),
        ..Default::default()
    })
    .unwrap()
}

/// Unsigned requests, a wrong secret and an unknown user are each refused with the typed
/// error, for heartbeats, member lists, offsets and locks alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_enforcing_authentication_refuses_bad_credentials_with_a_typed_error() {
    common::init_tracing();
    let cluster = authenticated_cluster();
    let topic = "AuthRefused";
    let group = "auth-refused";
    cluster.create_topic(topic, 4).await.unwrap();
    let queue = MessageQueue::new(topic, "broker-a", 0);
    let clients = [
        (
            "unsigned",
            NameServerClient::from_addresses(&cluster.namesrv_addr()).unwrap(),
        ),
        (
            "wrong secret",
            NameServerClient::builder(&cluster.namesrv_addr())
                .credentials(Credentials::new("rocketmq2", "not-the-secret").unwrap())
                .build()
                .unwrap(),
        ),
        (
            "unknown user",
            NameServerClient::builder(&cluster.namesrv_addr())
                .credentials(Credentials::new("nobody", "12345678").unwrap())
                .build()
                .unwrap(),
        ),
    ];
    for (label, name_server) in clients {
        let brokers = BrokerClient::new(name_server);
        let client = common::client(&cluster, label, group, &[topic]);
        let denied = |result: Result<(), RemoteError>, operation: &str| match result {
            Err(RemoteError::Denied {
                operation: op,
                code: 16,
                resource,
                ..
            }) if op == operation => assert!(resource.contains(group), "{label}: {resource}"),
            other => panic!("{label}: {operation} gave {other:?}"),
        };
        denied(brokers.register(&client.registration).await, "heartbeat");
        denied(
            brokers.consumer_ids(group, topic).await.map(drop),
            "consumer list",
        );
        denied(brokers.persist(group, &queue, 5).await, "offset commit");
        denied(brokers.read(group, &queue).await.map(drop), "offset read");
        denied(
            brokers
                .lock(
                    group,
                    &client.registration.client_id,
                    std::slice::from_ref(&queue),
                )
                .await
                .map(drop),
            "lock",
        );
    }
}

/// Signed consumers work end to end: heartbeats, rounds over the broker's member list,
/// orderly locks, and offsets committed and read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_consumers_heartbeat_rebalance_lock_and_commit() {
    common::init_tracing();
    let cluster = authenticated_cluster();
    let topic = "AuthSigned";
    let group = "auth-signed";
    let all = queues(&cluster.create_topic(topic, 8).await.unwrap(), topic);
    let signed = || {
        NameServerClient::builder(&cluster.namesrv_addr())
            .credentials(super_user())
            .build()
            .unwrap()
    };
    let a = join(signed(), group, topic, "a", ConsumeOrder::Orderly).await;
    converge("a holds all 8", &[&a], &all, Duration::from_secs(15)).await;
    let b = join(signed(), group, topic, "b", ConsumeOrder::Orderly).await;
    converge("a and b share 8", &[&a, &b], &all, Duration::from_secs(20)).await;

    // The locks are the members': another client cannot take any.
    let intruder = BrokerClient::new(signed());
    let all_list: Vec<MessageQueue> = all.iter().cloned().collect();
    let outcome = intruder
        .lock(group, &common::client_id("intruder"), &all_list)
        .await
        .unwrap();
    assert!(outcome.granted.is_empty(), "{outcome:?}");
    assert_eq!(outcome.refused.len(), 8);

    // Offsets committed through the leases are persisted at release and read back signed.
    for lease in a.leases.held.lock().unwrap().iter() {
        lease.commit(300 + i64::from(lease.queue().queue_id));
    }
    let a_queues = held(&a, topic);
    a.handle.shutdown().await;
    converge(
        "b takes over",
        &[&b],
        &all,
        2 * WAIT + Duration::from_secs(6),
    )
    .await;
    for q in &a_queues {
        assert_eq!(
            intruder.read(group, q).await.unwrap(),
            Some(300 + i64::from(q.queue_id)),
            "{q:?}"
        );
    }
    let started: Vec<(MessageQueue, StartPosition)> = b
        .leases
        .added
        .lock()
        .unwrap()
        .iter()
        .filter(|(q, _)| a_queues.contains(q))
        .cloned()
        .collect();
    assert_eq!(started.len(), a_queues.len());
    for (q, start) in started {
        assert_eq!(start, StartPosition::Offset(300 + i64::from(q.queue_id)));
    }
    b.handle.shutdown().await;
}

/// Two namespaces with the same group and topic names on one broker do not see each other:
/// each splits its own topic's queues among its own members, its offsets are its own, and the
/// application sees plain names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_namespaces_on_one_broker_do_not_see_each_other() {
    common::init_tracing();
    let cluster = TestCluster::start().unwrap();
    let (topic, group) = ("Orders", "orders-group");
    let admin = Admin::new(RemotingClient::default());
    for ns in ["tenant1", "tenant2"] {
        admin
            .create_topic(
                &cluster.first_broker_addr(),
                &TopicConfig::new(format!("{ns}%{topic}"), 4),
            )
            .await
            .unwrap();
    }
    let in_ns = |ns: &str| {
        NameServerClient::builder(&cluster.namesrv_addr())
            .namespace(Namespace::new(ns).unwrap())
            .build()
            .unwrap()
    };
    // The plain topic does not exist: the namespaced ones are what the clients find.
    let all = queues(&in_ns("tenant1").route(topic).await.unwrap(), topic);
    assert_eq!(all.len(), 4);
    assert!(
        all.iter().all(|q| *q.topic == *topic),
        "plain names: {all:?}"
    );

    let a1 = join(
        in_ns("tenant1"),
        group,
        topic,
        "a1",
        ConsumeOrder::Concurrent,
    )
    .await;
    let a2 = join(
        in_ns("tenant1"),
        group,
        topic,
        "a2",
        ConsumeOrder::Concurrent,
    )
    .await;
    let b1 = join(
        in_ns("tenant2"),
        group,
        topic,
        "b1",
        ConsumeOrder::Concurrent,
    )
    .await;
    converge(
        "tenant1's two members share its 4 queues",
        &[&a1, &a2],
        &all,
        Duration::from_secs(20),
    )
    .await;
    converge(
        "tenant2's only member holds its 4 queues",
        &[&b1],
        &all,
        Duration::from_secs(20),
    )
    .await;
    // Stable: a few more rounds change nothing.
    tokio::time::sleep(Duration::from_secs(2)).await;
    converge(
        "still split per tenant",
        &[&a1, &a2],
        &all,
        Duration::from_secs(5),
    )
    .await;
    converge("still whole", &[&b1], &all, Duration::from_secs(5)).await;

    // Each tenant's directory lists its own members only.
    let t1 = BrokerClient::new(in_ns("tenant1"));
    let t2 = BrokerClient::new(in_ns("tenant2"));
    let mut members = t1.consumer_ids(group, topic).await.unwrap();
    members.sort();
    let mut expected = vec![a1.id.clone(), a2.id.clone()];
    expected.sort();
    assert_eq!(members, expected);
    assert_eq!(
        t2.consumer_ids(group, topic).await.unwrap(),
        std::slice::from_ref(&b1.id)
    );
    // On the broker, the names carry the namespace; the plain group is nobody's.
    let raw = BrokerClient::new(NameServerClient::from_addresses(&cluster.namesrv_addr()).unwrap());
    let raw_members = raw
        .consumer_connections_at(&cluster.first_broker_addr(), &format!("tenant2%{group}"))
        .await
        .unwrap();
    assert_eq!(raw_members.len(), 1);
    assert_eq!(raw_members[0].client_id, b1.id.as_str());
    assert!(
        raw.consumer_connections_at(&cluster.first_broker_addr(), group)
            .await
            .unwrap()
            .is_empty()
    );

    // Offsets are per tenant.
    let queue = all.iter().next().unwrap().clone();
    t1.persist(group, &queue, 41).await.unwrap();
    t2.persist(group, &queue, 42).await.unwrap();
    assert_eq!(t1.read(group, &queue).await.unwrap(), Some(41));
    assert_eq!(t2.read(group, &queue).await.unwrap(), Some(42));
    for m in [a1, a2, b1] {
        m.handle.shutdown().await;
    }
}

/// Two processes (own connections each) heartbeating one client id in one group: the Rust
/// broker 1.0 keeps one connection per client id (the latest heartbeat's), so its connection
/// list (GET_CONSUMER_CONNECTION_LIST) cannot show the collision; the broker client finds no
/// duplicate there. (A Java broker keeps one entry per connection, where the duplicate shows:
/// see `scripted_production.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_broker_lists_a_shared_client_id_once() {
    common::init_tracing();
    let cluster = TestCluster::start().unwrap();
    let (topic, group) = ("Shared", "shared-id");
    cluster.create_topic(topic, 4).await.unwrap();
    let first = common::client(&cluster, "same", group, &[topic]);
    let mut second = common::client(&cluster, "other", group, &[topic]);
    second.registration.client_id = first.registration.client_id.clone();
    first.brokers.register(&first.registration).await.unwrap();
    second.brokers.register(&second.registration).await.unwrap();

    let broker = cluster.first_broker_addr();
    let connections = first
        .brokers
        .consumer_connections_at(&broker, group)
        .await
        .unwrap();
    assert_eq!(connections.len(), 1, "{connections:?}");
    assert_eq!(
        connections[0].client_id,
        first.registration.client_id.as_str()
    );
    assert!(
        first
            .brokers
            .duplicate_client_ids_at(&broker, group)
            .await
            .unwrap()
            .is_empty()
    );
    first.brokers.unregister(&first.registration).await.unwrap();
    second
        .brokers
        .unregister(&second.registration)
        .await
        .unwrap();
}
