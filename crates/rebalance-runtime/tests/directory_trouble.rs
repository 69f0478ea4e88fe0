//! When the directory misbehaves: a client the directory no longer lists keeps its queues only
//! for a bounded time, and the heartbeats the rebalance asks for are rate-limited.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use common::*;
use rebalance_core::ClientId;
use rebalance_runtime::memory::{ClusterCall, ClusterConfig, InMemoryCluster};
use rebalance_runtime::{
    GroupDirectory, Registration, RemoteError, RemovalReason, assignment::Unbalanced,
    config::Intervals,
};
use tokio::sync::watch;

const MIN: Duration = Duration::from_secs(1);

async fn start_observed(cluster: &InMemoryCluster, i: usize) -> (Member, Arc<WatchedDirectory>) {
    let directory = WatchedDirectory::new(cluster.client(client_id(i)));
    let observed = directory.clone();
    let member = start_with(cluster, i, &["T"], move |b| b.directory(observed)).await;
    (member, directory)
}

#[tokio::test(start_paused = true)]
async fn a_client_missing_from_the_member_list_releases_its_queues_after_the_lock_lifetime() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let all = all_queues(&cluster, &["T"]);
    let expiry = ClusterConfig::default().heartbeat_expiry;
    let lifetime = Intervals::default().lock_lifetime;
    let (a, directory) = start_observed(&cluster, 0).await;
    let b = start(&cluster, 1, &["T"]).await;
    settle(2 * MIN).await;
    assert_partition(&[&a, &b], &all);
    // a's heartbeats stop reaching the directory, which drops a at about 120 s; b then takes
    // every queue. a keeps its two (a directory hiccup is no reason to stop at once)…
    directory.refuse(true);
    settle(expiry + MIN).await;
    assert_eq!(cluster.members(GROUP), vec![b.id.clone()]);
    assert_eq!(b.handle.assignment().len(), 4);
    assert_eq!(a.handle.assignment().len(), 2, "kept at first");
    settle(lifetime - 5 * MIN).await;
    assert_eq!(a.handle.assignment().len(), 2, "kept for the lock lifetime");
    // …but not longer than the lock lifetime: then it stops consuming them twice.
    settle(6 * MIN).await;
    assert!(a.handle.assignment().is_empty());
    assert_eq!(a.recorder.removed_with(RemovalReason::Reassigned).len(), 2);
    assert_eq!(
        a.handle.rounds().borrow().topics[0].unbalanced,
        Some(Unbalanced::NotInConsumerList)
    );
    assert_partition(&[&a, &b], &all);
    // Once its heartbeats get through again, a rejoins and takes its share back.
    directory.refuse(false);
    settle(10 * MIN).await;
    assert_eq!(a.handle.assignment().len(), 2);
    assert_partition(&[&a, &b], &all);
}

#[tokio::test(start_paused = true)]
async fn heartbeats_asked_for_by_directory_trouble_are_rate_limited() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let (a, directory) = start_observed(&cluster, 0).await;
    settle(MIN).await;
    let before = directory.registers();
    // The directory fails for the next 20 rounds; unbalanced rounds run every second.
    cluster.fail_next(ClusterCall::ConsumerIds, 20);
    a.handle.rebalance_now();
    settle(Duration::from_millis(10)).await;
    assert_eq!(
        directory.registers(),
        before + 1,
        "the first trouble asks at once"
    );
    // 19 more failing rounds in the next 19 s (before the 30 s heartbeat tick): one heartbeat
    // every 5 s at most, not one per round.
    settle(Duration::from_secs(19)).await;
    let asked = directory.registers() - before;
    assert!((3..=5).contains(&asked), "{asked} heartbeats in 19 s");
    settle(5 * MIN).await;
    assert!(a.handle.assignment().balanced);
}

/// A directory that, once told to flap, fails every other member list.
struct Flapping {
    inner: Arc<WatchedDirectory>,
    flap: AtomicBool,
    calls: AtomicUsize,
}

#[async_trait]
impl GroupDirectory for Flapping {
    async fn register(&self, registration: &Registration) -> Result<(), RemoteError> {
        self.inner.register(registration).await
    }

    async fn unregister(&self, registration: &Registration) -> Result<(), RemoteError> {
        self.inner.unregister(registration).await
    }

    async fn consumer_ids(&self, group: &str, topic: &str) -> Result<Vec<ClientId>, RemoteError> {
        if self.flap.load(Ordering::SeqCst) && self.calls.fetch_add(1, Ordering::SeqCst) % 2 == 1 {
            return Err(RemoteError::Unreachable("flapping directory".into()));
        }
        self.inner.consumer_ids(group, topic).await
    }

    fn membership_changes(&self, group: &str) -> Option<watch::Receiver<u64>> {
        self.inner.membership_changes(group)
    }
}

#[tokio::test(start_paused = true)]
async fn directory_failures_between_rounds_that_miss_the_client_do_not_restart_its_clock() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let all = all_queues(&cluster, &["T"]);
    let expiry = ClusterConfig::default().heartbeat_expiry;
    let lifetime = Intervals::default().lock_lifetime;
    let watched = WatchedDirectory::new(cluster.client(client_id(0)));
    let directory = Arc::new(Flapping {
        inner: watched.clone(),
        flap: AtomicBool::new(false),
        calls: AtomicUsize::new(0),
    });
    let flapping = directory.clone();
    let a = start_with(&cluster, 0, &["T"], move |b| b.directory(flapping)).await;
    let b = start(&cluster, 1, &["T"]).await;
    settle(2 * MIN).await;
    assert_partition(&[&a, &b], &all);
    // a's heartbeats stop reaching the directory, which drops a; b takes every queue. From
    // now on a's rounds alternate between "not listed" and "directory failed". A failure says
    // nothing about the membership, so a's absence keeps counting through them and a still
    // lets its queues go after the lock lifetime instead of consuming them twice for good.
    watched.refuse(true);
    directory.flap.store(true, Ordering::SeqCst);
    settle(expiry + MIN).await;
    assert_eq!(cluster.members(GROUP), vec![b.id.clone()]);
    assert_eq!(a.handle.assignment().len(), 2, "kept at first");
    settle(lifetime + 5 * MIN).await;
    assert!(a.handle.assignment().is_empty());
    assert_eq!(a.recorder.removed_with(RemovalReason::Reassigned).len(), 2);
    assert_partition(&[&a, &b], &all);
}

/// A directory that leaves this client out of its member lists while told to (a broker that
/// lost the client's registration while its heartbeats are still accepted elsewhere).
struct Hiding {
    inner: rebalance_runtime::memory::ClusterClient,
    me: ClientId,
    hide: AtomicBool,
}

#[async_trait]
impl GroupDirectory for Hiding {
    async fn register(&self, registration: &Registration) -> Result<(), RemoteError> {
        self.inner.register(registration).await
    }

    async fn unregister(&self, registration: &Registration) -> Result<(), RemoteError> {
        self.inner.unregister(registration).await
    }

    async fn consumer_ids(&self, group: &str, topic: &str) -> Result<Vec<ClientId>, RemoteError> {
        let mut ids = self.inner.consumer_ids(group, topic).await?;
        if self.hide.load(Ordering::SeqCst) {
            ids.retain(|id| *id != self.me);
        }
        Ok(ids)
    }

    fn membership_changes(&self, group: &str) -> Option<watch::Receiver<u64>> {
        self.inner.membership_changes(group)
    }
}

/// Found by review: a client the directory no longer listed (its membership still vouched
/// for by accepted heartbeats) went on consuming its queues for the whole lock lifetime, at
/// the same time as the members that had split the topic without it. From the first round
/// that finds it missing, its leases are not trusted (the push consumer pulls and starts
/// nothing under them); listed again, the same leases are trusted again, nothing handed off;
/// missing for the lock lifetime, they are released.
#[tokio::test(start_paused = true)]
async fn a_client_missing_from_the_member_list_stops_consuming_at_once_and_resumes_when_listed() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let all = all_queues(&cluster, &["T"]);
    let lifetime = Intervals::default().lock_lifetime;
    let directory = Arc::new(Hiding {
        inner: cluster.client(client_id(0)),
        me: client_id(0),
        hide: AtomicBool::new(false),
    });
    let observed = directory.clone();
    // The membership checks (every second, by default) see the change between rounds.
    let checked = Intervals {
        adaptive_settle: None,
        ..Intervals::default()
    };
    let a = start_with(&cluster, 0, &["T"], move |b| {
        b.directory(observed).intervals(checked)
    })
    .await;
    let b = start(&cluster, 1, &["T"]).await;
    settle(2 * MIN).await;
    assert_partition(&[&a, &b], &all);
    let trusted = |m: &Member| {
        let now = tokio::time::Instant::now();
        m.recorder
            .held_leases()
            .iter()
            .filter(|l| l.is_trusted(now))
            .count()
    };
    assert_eq!(trusted(&a), 2);
    directory.hide.store(true, Ordering::SeqCst);
    settle(3 * MIN).await;
    assert_eq!(a.handle.assignment().len(), 2, "kept");
    assert_eq!(trusted(&a), 0, "but not consumed");
    assert_eq!(
        a.handle.rounds().borrow().topics[0].unbalanced,
        Some(Unbalanced::NotInConsumerList)
    );
    directory.hide.store(false, Ordering::SeqCst);
    settle(3 * MIN).await;
    assert_eq!(trusted(&a), 2, "consumed again once listed");
    assert!(
        a.recorder
            .events()
            .iter()
            .all(|e| matches!(e, common::Event::Added(..))),
        "nothing handed off: {:?}",
        a.recorder.events()
    );
    directory.hide.store(true, Ordering::SeqCst);
    settle(lifetime + 3 * MIN).await;
    assert!(a.handle.assignment().is_empty());
    assert_eq!(a.recorder.removed_with(RemovalReason::Reassigned).len(), 2);
}
