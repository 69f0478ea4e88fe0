//! Server-side assignment (`Allocation::Server`) on the in-memory cluster: the rounds ask the
//! brokers instead of running a strategy, and everything else stays (leases, callbacks, reports,
//! the hand-off); what `start()` refuses; POP answers as shared queues.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use common::{GROUP, Member, all_queues, assert_partition, client_id, settle, start_with};
use rebalance_core::MessageQueue;
use rebalance_runtime::allocation::{Allocation, ServerAllocation};
use rebalance_runtime::assignment::Unbalanced;
use rebalance_runtime::config::{ConsumeOrder, MessageModel};
use rebalance_runtime::memory::{ClusterCall, InMemoryCluster};
use rebalance_runtime::{
    AssignmentSource, ConsumerBuilder, ConsumerError, LocalOffsetStore, ReadMode, RemovalReason,
    StartPosition,
};

fn server(cluster: &InMemoryCluster, i: usize, strategy: &str) -> ServerAllocation {
    ServerAllocation::new(Arc::new(cluster.client(client_id(i))), strategy)
}

/// Member `i` allocating server-side with `allocation`.
fn with(allocation: ServerAllocation) -> impl FnOnce(ConsumerBuilder) -> ConsumerBuilder {
    move |b| b.allocation(Allocation::Server(allocation))
}

async fn server_member(cluster: &InMemoryCluster, i: usize, strategy: &str) -> Member {
    start_with(cluster, i, &["T"], with(server(cluster, i, strategy))).await
}

fn held(m: &Member) -> BTreeSet<MessageQueue> {
    m.handle.assignment().iter().cloned().collect()
}

/// The brokers' AVG and AVG_BY_CIRCLE give each member what the client-side `averagely` and
/// `averagely_by_circle` give it from the same view: the shares partition the topic, the
/// listener hears of them as of any share, and a leaving member's queues move to the others.
#[tokio::test(start_paused = true)]
async fn server_side_shares_are_the_client_side_strategys() {
    for (server_name, client_name) in [
        ("AVG", "averagely"),
        ("AVG_BY_CIRCLE", "averagely_by_circle"),
    ] {
        let cluster = InMemoryCluster::new();
        cluster.create_topic("T", 2, 5);
        let all = all_queues(&cluster, &["T"]);
        let a = server_member(&cluster, 0, server_name).await;
        let b = server_member(&cluster, 1, server_name).await;
        let c = server_member(&cluster, 2, server_name).await;
        settle(Duration::from_secs(3)).await;
        assert_partition(&[&a, &b, &c], &all);
        // The same members, allocating themselves.
        let twin = InMemoryCluster::new();
        twin.create_topic("T", 2, 5);
        let mut twins = Vec::new();
        for i in 0..3 {
            twins.push(
                start_with(&twin, i, &["T"], |b| {
                    b.strategy_named(client_name, &Default::default()).unwrap()
                })
                .await,
            );
        }
        settle(Duration::from_secs(3)).await;
        for (m, t) in [&a, &b, &c].into_iter().zip(&twins) {
            assert_eq!(held(m), held(t), "{server_name}: {}", m.id);
            assert!(
                m.handle.assignment().shared.is_empty(),
                "pulled, not shared"
            );
        }
        let c_held = held(&c).len();
        c.handle.shutdown().await;
        settle(Duration::from_secs(25)).await;
        assert_partition(&[&a, &b], &all);
        assert_eq!(
            c.recorder.removed_with(RemovalReason::Shutdown).len(),
            c_held
        );
        for m in [a, b].into_iter().chain(twins) {
            m.handle.shutdown().await;
        }
    }
}

/// A group may mix members that allocate themselves with `averagely` and members that ask the
/// brokers for `AVG`: the brokers compute the same shares from the same view.
#[tokio::test(start_paused = true)]
async fn a_group_can_mix_client_side_and_server_side_members_in_pull_mode() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 2, 4);
    let all = all_queues(&cluster, &["T"]);
    let a = server_member(&cluster, 0, "AVG").await;
    let b = start_with(&cluster, 1, &["T"], |b| b).await;
    let c = server_member(&cluster, 2, "AVG").await;
    let d = start_with(&cluster, 3, &["T"], |b| b).await;
    settle(Duration::from_secs(3)).await;
    assert_partition(&[&a, &b, &c, &d], &all);
    for m in [&a, &b, &c, &d] {
        assert_eq!(m.handle.assignment().len(), 2, "{}", m.id);
    }
    for m in [a, b, c, d] {
        m.handle.shutdown().await;
    }
}

/// `start()` refuses a strategy the brokers cannot run, naming theirs, and server-side
/// assignment for orderly and broadcasting consumers, and an exclusive hand-off of popped
/// queues: never an idle consumer.
#[tokio::test(start_paused = true)]
async fn what_start_refuses() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let refused = |configure: Box<dyn FnOnce(ConsumerBuilder) -> ConsumerBuilder>| {
        let cluster = cluster.clone();
        async move {
            let recorder = common::Recorder::new();
            configure(common::builder(&cluster, 0, &["T"], recorder))
                .start()
                .await
                .expect_err("refused")
        }
    };
    let err = refused(Box::new(with(server(&cluster, 0, "CONSISTENT_HASH")))).await;
    assert!(matches!(err, ConsumerError::ServerStrategy { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "the brokers cannot run the strategy `CONSISTENT_HASH` for server-side assignment; they accept AVG, AVG_BY_CIRCLE"
    );
    let err = refused(Box::new(|b| {
        with(server(&cluster, 0, "AVG"))(b.consume_order(ConsumeOrder::Orderly))
    }))
    .await;
    assert!(
        matches!(err, ConsumerError::ServerSideRefused("orderly consumers")),
        "{err}"
    );
    let err = refused(Box::new(|b| {
        with(server(&cluster, 0, "AVG"))(
            b.message_model(MessageModel::Broadcasting)
                .offset_store(Arc::new(LocalOffsetStore::new())),
        )
    }))
    .await;
    assert!(
        matches!(
            err,
            ConsumerError::ServerSideRefused("broadcasting consumers")
        ),
        "{err}"
    );
    let popping = server(&cluster, 0, "AVG").with_read_mode(ReadMode::Pop, 0);
    let err = refused(Box::new(|b| with(popping)(b.exclusive_hand_off(true)))).await;
    assert!(matches!(err, ConsumerError::ServerSideRefused(_)), "{err}");
    assert!(cluster.members(GROUP).is_empty(), "nothing was started");
}

/// The read mode is each broker's own: a broker added to the topic's route after the mode was
/// set gets it too, before it answers a query (found by review: it was set once per topic,
/// and a broker joining the route, first by name, answered PULL for every queue: the group
/// switched to PULL, silently and for good).
#[tokio::test(start_paused = true)]
async fn a_broker_added_to_the_route_gets_the_read_mode_too() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 2, 4);
    let full = cluster.route("T").unwrap();
    let mut only_b1 = full.clone();
    only_b1.broker_datas.retain(|b| b.broker_name == "broker-1");
    only_b1.queue_datas.retain(|q| q.broker_name == "broker-1");
    cluster.set_route("T", only_b1);
    let popping = server(&cluster, 0, "AVG").with_read_mode(ReadMode::Pop, 0);
    let a = start_with(&cluster, 0, &["T"], with(popping)).await;
    settle(Duration::from_secs(3)).await;
    assert_eq!(
        held(&a),
        BTreeSet::from([MessageQueue::new("T", "broker-1", -1)])
    );
    assert_eq!(
        cluster.read_mode_at(GROUP, "T", "broker-0"),
        (ReadMode::Pull, 0)
    );
    cluster.set_route("T", full);
    settle(Duration::from_secs(40)).await;
    assert_eq!(
        cluster.read_mode_at(GROUP, "T", "broker-0"),
        (ReadMode::Pop, 0)
    );
    assert_eq!(
        held(&a),
        BTreeSet::from([
            MessageQueue::new("T", "broker-0", -1),
            MessageQueue::new("T", "broker-1", -1)
        ])
    );
    for lease in a.recorder.held_leases() {
        assert_eq!(lease.read_mode(), ReadMode::Pop);
    }
}

/// In POP mode the brokers give every member one queue per broker, id -1: leases read by POP,
/// shown as shared in the assignment and the round reports; neither an offset read nor
/// persisted for them. A member that does not read POP keeps nothing and says why.
#[tokio::test(start_paused = true)]
async fn pop_mode_shares_every_broker_with_every_member() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 2, 4);
    let popping = |i| server(&cluster, i, "AVG").with_read_mode(ReadMode::Pop, 0);
    let a = start_with(&cluster, 0, &["T"], with(popping(0))).await;
    let b = start_with(&cluster, 1, &["T"], with(popping(1))).await;
    let refusing = start_with(&cluster, 2, &["T"], with(server(&cluster, 2, "AVG"))).await;
    settle(Duration::from_secs(3)).await;
    assert_eq!(cluster.read_mode(GROUP, "T"), (ReadMode::Pop, 0));
    let brokers: BTreeSet<MessageQueue> = cluster
        .route("T")
        .unwrap()
        .broker_datas
        .iter()
        .map(|b| MessageQueue::new("T", b.broker_name.as_str(), -1))
        .collect();
    for m in [&a, &b] {
        let assignment = m.handle.assignment();
        assert_eq!(held(m), brokers, "{}", m.id);
        assert_eq!(
            assignment.shared,
            brokers.iter().cloned().collect::<Vec<_>>()
        );
        for lease in m.recorder.held_leases() {
            assert_eq!(lease.read_mode(), ReadMode::Pop);
            assert_eq!(lease.start_position(), StartPosition::Latest);
            lease.commit(7);
        }
        let report = m.handle.rounds().borrow().clone();
        let topic = report.topics.iter().find(|t| t.topic == "T").unwrap();
        assert_eq!(topic.shared, assignment.shared);
    }
    assert!(held(&refusing).is_empty());
    let report = refusing.handle.rounds().borrow().clone();
    let topic = report.topics.iter().find(|t| t.topic == "T").unwrap();
    assert_eq!(topic.unbalanced, Some(Unbalanced::PopNotAccepted));
    // Nothing read from the store, nothing persisted for the popped queues (even committed).
    settle(Duration::from_secs(12)).await;
    for q in &brokers {
        assert_eq!(cluster.offset(GROUP, q), None, "{q:?}");
    }
    a.handle.shutdown().await;
    for q in &brokers {
        assert_eq!(cluster.offset(GROUP, q), None, "no final offset for {q:?}");
    }
    b.handle.shutdown().await;
    refusing.handle.shutdown().await;
}

/// With a POP share, each member reads its own share and the next member's: shared queues with
/// real ids, each read by two members.
#[tokio::test(start_paused = true)]
async fn a_pop_share_overlaps_the_next_members_share() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let mut members = Vec::new();
    for i in 0..3 {
        let allocation = server(&cluster, i, "AVG").with_read_mode(ReadMode::Pop, 1);
        members.push(start_with(&cluster, i, &["T"], with(allocation)).await);
    }
    settle(Duration::from_secs(3)).await;
    let ids = |m: &Member| held(m).iter().map(|q| q.queue_id).collect::<Vec<_>>();
    assert_eq!(ids(&members[0]), [0, 1, 2]);
    assert_eq!(ids(&members[1]), [2, 3]);
    assert_eq!(ids(&members[2]), [0, 1, 3]);
    for m in members {
        m.handle.shutdown().await;
    }
}

/// An operator's change of the group's mode (PULL to POP) releases the pulled queues and takes
/// the popped ones; the popped queue's lease reads by POP.
#[tokio::test(start_paused = true)]
async fn a_change_of_read_mode_moves_the_member_to_the_new_queues() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let allocation = server(&cluster, 0, "AVG").accepting_pop(true);
    let a = start_with(&cluster, 0, &["T"], with(allocation)).await;
    settle(Duration::from_secs(3)).await;
    assert_eq!(a.handle.assignment().len(), 2);
    assert!(a.handle.assignment().shared.is_empty());
    let operator = cluster.client("operator@1");
    operator
        .set_read_mode(GROUP, "T", ReadMode::Pop, 0)
        .await
        .unwrap();
    a.handle.rebalance_now();
    settle(Duration::from_secs(3)).await;
    let popped = MessageQueue::new("T", "broker-0", -1);
    assert_eq!(held(&a), BTreeSet::from([popped.clone()]));
    assert_eq!(a.recorder.removed_with(RemovalReason::Reassigned).len(), 2);
    let lease = a.recorder.held_leases().pop().unwrap();
    assert_eq!(lease.read_mode(), ReadMode::Pop);
    a.handle.shutdown().await;
}

/// A failed question keeps the share and makes the round unbalanced (the next one comes 1 s
/// later); the read mode is set again until it succeeds.
#[tokio::test(start_paused = true)]
async fn failures_keep_the_share() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    cluster.fail_next(ClusterCall::SetReadMode, 1);
    let allocation = server(&cluster, 0, "AVG").with_read_mode(ReadMode::Pop, 0);
    let a = start_with(&cluster, 0, &["T"], with(allocation)).await;
    settle(Duration::from_millis(100)).await;
    assert!(held(&a).is_empty());
    settle(Duration::from_secs(2)).await;
    assert_eq!(held(&a).len(), 1, "set and asked at the next round");
    cluster.fail_next(ClusterCall::QueryAssignment, 1);
    a.handle.rebalance_now();
    settle(Duration::from_millis(100)).await;
    let report = a.handle.rounds().borrow().clone();
    let topic = report.topics.iter().find(|t| t.topic == "T").unwrap();
    assert!(
        matches!(topic.unbalanced, Some(Unbalanced::AssignmentFailed(_))),
        "{topic:?}"
    );
    assert_eq!(held(&a).len(), 1, "kept");
    a.handle.shutdown().await;
}

/// Brokers whose answer repeats every queue, out of order, and adds queues to pull that the
/// route does not have.
struct Garbled {
    route: Vec<MessageQueue>,
}

#[async_trait::async_trait]
impl AssignmentSource for Garbled {
    fn strategies(&self) -> Vec<String> {
        vec!["AVG".to_owned()]
    }

    async fn query_assignment(
        &self,
        _: &rebalance_runtime::AssignmentRequest<'_>,
    ) -> Result<rebalance_runtime::ServerAnswer, rebalance_runtime::RemoteError> {
        let pulled =
            |q: &MessageQueue| rebalance_runtime::AssignedQueue::new(q.clone(), ReadMode::Pull);
        let mut answer: Vec<_> = self.route.iter().rev().map(pulled).collect();
        answer.extend(self.route.iter().map(pulled));
        answer.push(pulled(&MessageQueue::new("T", "broker-0", -1)));
        answer.push(pulled(&MessageQueue::new("T", "nowhere", 0)));
        Ok(rebalance_runtime::ServerAnswer::Queues(answer))
    }

    async fn set_read_mode(
        &self,
        _: &str,
        _: &str,
        _: ReadMode,
        _: i32,
    ) -> Result<(), rebalance_runtime::RemoteError> {
        Ok(())
    }
}

/// The brokers' answer is outside input: a queue named twice is held once, and a queue to pull
/// that the route does not have is not held at all (found by review: both were taken as given).
#[tokio::test(start_paused = true)]
async fn an_answer_with_repeated_or_unknown_queues_gives_each_route_queue_once() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let all = all_queues(&cluster, &["T"]);
    let source = Garbled {
        route: all.iter().cloned().collect(),
    };
    let a = start_with(
        &cluster,
        0,
        &["T"],
        with(ServerAllocation::new(Arc::new(source), "AVG")),
    )
    .await;
    settle(Duration::from_secs(3)).await;
    let mut got: Vec<MessageQueue> = a.handle.assignment().iter().cloned().collect();
    got.sort();
    assert_eq!(got, all.iter().cloned().collect::<Vec<_>>());
    a.handle.shutdown().await;
}
