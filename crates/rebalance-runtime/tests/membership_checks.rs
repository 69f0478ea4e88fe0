//! `Intervals::membership_check`: between steady rounds a member lists the
//! group every second, so that a member the directory drops without telling anyone (the Rust
//! broker 1.0 never pushes departures: it drops a killed member when its connection closes) is
//! taken over within the check's period, not at the survivors' next round, up to
//! `rebalance_wait` (20 s) later; and a round still runs only when something changed. On
//! tokio's paused clock.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use common::*;
use rebalance_core::ClientId;
use rebalance_runtime::config::Intervals;
use rebalance_runtime::memory::{ClusterCall, ClusterClient, ClusterConfig, InMemoryCluster};
use rebalance_runtime::subscription::Subscription;
use rebalance_runtime::wake::WakeReasons;
use rebalance_runtime::{ConsumerBuilder, GroupDirectory, Registration, RemoteError};
use tokio::sync::watch;
use tokio::time::Instant;

/// The consumers' defaults: adaptive settling, and a membership check every second.
fn defaults(b: ConsumerBuilder) -> ConsumerBuilder {
    b.intervals(Intervals::default())
}

/// Starts member `i` with the defaults on its own connection to the cluster, which is returned:
/// the test drops the member through it as a broker drops a client whose connection closed.
async fn member(cluster: &InMemoryCluster, i: usize) -> (Member, ClusterClient) {
    let client = cluster.client(client_id(i));
    let connection = client.clone();
    let m = start_with(cluster, i, &["T"], move |b| defaults(b).cluster(connection)).await;
    (m, client)
}

/// The broker drops `id` (its connection closed): what the Rust broker does at once when a
/// member is killed.
async fn drop_member(connection: &ClusterClient, id: &ClientId) {
    let registration = Registration {
        client_id: id.clone(),
        group: GROUP.into(),
        message_model: Default::default(),
        consume_order: Default::default(),
        consume_from: Default::default(),
        subscriptions: vec![Subscription::all("T")],
    };
    connection.unregister(&registration).await.expect("dropped");
}

/// Three members; the third is killed (aborted, nothing released) and dropped by the directory
/// at once. Returns how long after the drop the survivors held every queue, and the survivors.
async fn kill_and_take_over(config: ClusterConfig) -> (Duration, [Member; 2]) {
    let cluster = InMemoryCluster::with_config(config);
    cluster.create_topic("T", 2, 6);
    let all = all_queues(&cluster, &["T"]);
    let (a, _) = member(&cluster, 0).await;
    let (b, _) = member(&cluster, 1).await;
    let (c, c_connection) = member(&cluster, 2).await;
    // The members' rounds and checks fall on whole seconds here (they started together): the
    // kill comes 50 ms after a check, the worst case.
    settle(Duration::from_millis(5_070)).await;
    assert_partition(&[&a, &b, &c], &all);
    let orphans = c.recorder.held();
    assert!(!orphans.is_empty());
    let rounds = a.handle.rounds().borrow().round;
    c.handle.abort();
    drop_member(&c_connection, &c.id).await;
    let dropped = Instant::now();
    let mut took = None;
    for _ in 0..2_000 {
        settle(Duration::from_millis(10)).await;
        let held: std::collections::BTreeSet<_> = a
            .recorder
            .held()
            .union(&b.recorder.held())
            .cloned()
            .collect();
        if held == all {
            took = Some(Instant::now() - dropped);
            break;
        }
    }
    let took = took.expect("the survivors took the killed member's queues over");
    assert_partition(&[&a, &b], &all);
    assert_eq!(a.handle.rounds().borrow().round, rounds + 1, "one round");
    (took, [a, b])
}

#[tokio::test(start_paused = true)]
async fn a_member_dropped_without_notice_is_taken_over_within_two_seconds() {
    let (took, survivors) = kill_and_take_over(ClusterConfig {
        notify_departures: false,
        ..ClusterConfig::default()
    })
    .await;
    eprintln!("a member dropped without notice was taken over {took:?} after the drop");
    // The check's period (1 s), then a round at once (a single change of a stable group).
    assert!(took <= Duration::from_millis(1100), "{took:?}");
    for s in &survivors {
        let report = s.handle.rounds().borrow().clone();
        assert!(
            report.reasons.contains(WakeReasons::MEMBERSHIP_CHANGED),
            "{report:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_member_dropped_with_notice_is_taken_over_within_one_second() {
    let (took, _) = kill_and_take_over(ClusterConfig::default()).await;
    eprintln!("a member dropped with notice was taken over {took:?} after the drop");
    assert!(took <= Duration::from_millis(100), "{took:?}");
}

/// What bounded the takeover before the checks: without them (the Java client's way), the
/// survivors of a silent drop wait for their next round, `rebalance_wait` after the last one.
#[tokio::test(start_paused = true)]
async fn without_checks_a_silent_drop_waits_for_the_next_round() {
    let cluster = InMemoryCluster::with_config(ClusterConfig {
        notify_departures: false,
        ..ClusterConfig::default()
    });
    cluster.create_topic("T", 2, 6);
    let all = all_queues(&cluster, &["T"]);
    let no_checks = |b: ConsumerBuilder| {
        b.intervals(Intervals {
            membership_check: None,
            ..Intervals::default()
        })
    };
    let a = start_with(&cluster, 0, &["T"], no_checks).await;
    let connection = cluster.client(client_id(1));
    let c = {
        let connection = connection.clone();
        start_with(&cluster, 1, &["T"], move |b| {
            no_checks(b).cluster(connection)
        })
        .await
    };
    settle(Duration::from_secs(5)).await;
    assert_partition(&[&a, &c], &all);
    let last_round = a.handle.rounds().borrow().clone();
    c.handle.abort();
    drop_member(&connection, &c.id).await;
    settle(Duration::from_secs(10)).await;
    assert_ne!(a.recorder.held(), all, "nobody noticed yet");
    assert_eq!(a.handle.rounds().borrow().round, last_round.round);
    settle(Duration::from_secs(12)).await;
    assert_eq!(a.recorder.held(), all, "the 20 s round took them");
    assert!(
        a.handle
            .rounds()
            .borrow()
            .reasons
            .contains(WakeReasons::INTERVAL)
    );
}

/// Counts the directory's member listings.
struct CountingDirectory {
    inner: ClusterClient,
    listings: AtomicUsize,
}

#[async_trait]
impl GroupDirectory for CountingDirectory {
    async fn register(&self, registration: &Registration) -> Result<(), RemoteError> {
        self.inner.register(registration).await
    }

    async fn unregister(&self, registration: &Registration) -> Result<(), RemoteError> {
        self.inner.unregister(registration).await
    }

    async fn consumer_ids(&self, group: &str, topic: &str) -> Result<Vec<ClientId>, RemoteError> {
        self.listings.fetch_add(1, Ordering::SeqCst);
        self.inner.consumer_ids(group, topic).await
    }

    fn membership_changes(&self, group: &str) -> Option<watch::Receiver<u64>> {
        self.inner.membership_changes(group)
    }

    fn bound_client_id(&self) -> Option<ClientId> {
        self.inner.bound_client_id()
    }
}

/// The steady cost: in a minute of a stable group a member runs the rounds of its timer and no
/// more (3, every 20 s), and lists the group once per second besides, one request each (one
/// topic: the group's retry topic has no route here).
#[tokio::test(start_paused = true)]
async fn a_steady_group_runs_no_more_rounds_and_lists_the_group_once_a_second() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 2, 6);
    let all = all_queues(&cluster, &["T"]);
    let directory = Arc::new(CountingDirectory {
        inner: cluster.client(client_id(0)),
        listings: AtomicUsize::new(0),
    });
    let a = {
        let directory = directory.clone();
        start_with(&cluster, 0, &["T"], move |b| {
            defaults(b).directory(directory)
        })
        .await
    };
    let (b, _) = member(&cluster, 1).await;
    settle(Duration::from_secs(5)).await;
    assert_partition(&[&a, &b], &all);
    let (rounds, listings) = (
        a.handle.rounds().borrow().round,
        directory.listings.load(Ordering::SeqCst),
    );
    settle(Duration::from_secs(60)).await;
    let rounds = a.handle.rounds().borrow().round - rounds;
    let listings = directory.listings.load(Ordering::SeqCst) - listings;
    eprintln!("a steady minute: {rounds} rounds, {listings} member listings");
    assert_eq!(rounds, 3, "the timer's rounds only");
    // One per second, less the seconds of the three rounds (each lists the group itself).
    assert!((57..=60).contains(&listings), "{listings} listings");
    assert!(
        a.handle
            .rounds()
            .borrow()
            .reasons
            .contains(WakeReasons::INTERVAL)
    );
}

/// A check that fails changes nothing: no round, and the next check or round tries again.
#[tokio::test(start_paused = true)]
async fn a_failed_check_runs_no_round() {
    let cluster = InMemoryCluster::with_config(ClusterConfig {
        notify_departures: false,
        ..ClusterConfig::default()
    });
    cluster.create_topic("T", 2, 6);
    let all = all_queues(&cluster, &["T"]);
    let (a, _) = member(&cluster, 0).await;
    settle(Duration::from_secs(3)).await;
    assert_eq!(a.recorder.held(), all);
    let before = a.handle.rounds().borrow().round;
    cluster.fail_next(ClusterCall::ConsumerIds, 3);
    settle(Duration::from_secs(4)).await;
    assert_eq!(a.handle.rounds().borrow().round, before);
    assert_eq!(a.recorder.held(), all);
}
