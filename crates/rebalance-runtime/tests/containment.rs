//! Failures of code the runtime calls stay contained: hung listener callbacks are cut short,
//! panicking strategies and assignors fail only their round, and a task that panics anyway is
//! reported by the handle.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use common::*;
use rebalance_core::assignor::{
    AssignError, GroupAssignment, GroupAssignor, GroupSubscription, build_assignor,
};
use rebalance_core::model::TopicRoute;
use rebalance_core::strategy::Averagely;
use rebalance_core::{AllocateError, AllocateStrategy, ClientId, MessageQueue};
use rebalance_runtime::memory::{ClusterClient, InMemoryCluster};
use rebalance_runtime::{
    ConsumerError, GroupDirectory, ListenerError, NameServer, QueueLease, QueueListener,
    Registration, RemoteError, RemovalReason, RemovedQueue, RouteError,
    assignment::{
        AllocationFailure, CallbackFailureKind, ListenerCallback, ListenerCallbackError, Unbalanced,
    },
    config::Intervals,
};
use tokio::sync::watch;

/// Records through a [`Recorder`], then hangs forever in the callbacks chosen.
struct Hangs {
    recorder: Arc<Recorder>,
    added: AtomicBool,
    removed: AtomicBool,
}

impl Hangs {
    fn new(recorder: Arc<Recorder>, added: bool, removed: bool) -> Arc<Self> {
        Arc::new(Self {
            recorder,
            added: AtomicBool::new(added),
            removed: AtomicBool::new(removed),
        })
    }
}

#[async_trait]
impl QueueListener for Hangs {
    async fn queues_added(&self, topic: &str, queues: &[QueueLease]) -> Result<(), ListenerError> {
        self.recorder.queues_added(topic, queues).await?;
        if self.added.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        Ok(())
    }

    async fn queues_removed(
        &self,
        topic: &str,
        queues: &[RemovedQueue],
    ) -> Result<(), ListenerError> {
        self.recorder.queues_removed(topic, queues).await?;
        if self.removed.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        Ok(())
    }
}

fn callback_errors(member: &Member) -> Vec<ListenerCallbackError> {
    member.handle.rounds().borrow().callback_errors.clone()
}

#[tokio::test(start_paused = true)]
async fn a_hung_added_callback_is_cut_short_and_the_consumer_goes_on() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    cluster.create_topic("U", 1, 2);
    let recorder = Recorder::new();
    let listener = Hangs::new(recorder.clone(), true, false);
    let a = start_recording(&cluster, 0, &["T"], recorder, |b| {
        b.listener(listener).intervals(Intervals {
            callback_timeout: Duration::from_secs(3),
            ..java_intervals()
        })
    })
    .await;
    settle(Duration::from_secs(2)).await;
    assert_eq!(
        a.handle.rounds().borrow().round,
        0,
        "the first round still waits for the callback"
    );
    settle(Duration::from_secs(2)).await;
    assert_eq!(a.handle.assignment().len(), 4, "the round went on");
    let errors = callback_errors(&a);
    assert_eq!(
        errors,
        [ListenerCallbackError {
            callback: ListenerCallback::QueuesAdded,
            topic: "T".into(),
            failure: CallbackFailureKind::TimedOut(Duration::from_secs(3)),
        }]
    );
    assert!(
        a.recorder
            .leases
            .lock()
            .unwrap()
            .values()
            .all(|l| !l.is_cancelled()),
        "the queues are held as if the callback had returned"
    );
    // The service still serves commands and runs rounds (the failed queues_added is called
    // again meanwhile, 1 s after the failure, and cut short after 3 s again; the queues_added
    // of U's queues hangs too).
    assert!(a.handle.subscribe("U").unwrap());
    settle(Duration::from_secs(10)).await;
    assert_eq!(a.handle.assignment().len(), 6);
    assert_partition(&[&a], &all_queues(&cluster, &["T", "U"]));
    a.handle.shutdown().await;
    assert!(a.handle.join().await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_hung_removed_callback_lets_the_hand_off_proceed() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let all = all_queues(&cluster, &["T"]);
    let exclusive = |b: rebalance_runtime::ConsumerBuilder| b.exclusive_hand_off(true);
    let recorder = Recorder::new();
    *recorder.commit_on_add.lock().unwrap() = Some(42);
    let listener = Hangs::new(recorder.clone(), false, true);
    let a = start_recording(&cluster, 0, &["T"], recorder, |b| {
        exclusive(b).listener(listener)
    })
    .await;
    settle(Duration::from_secs(1)).await;
    assert_eq!(a.handle.assignment().len(), 4);

    let b = start_with(&cluster, 1, &["T"], exclusive).await;
    settle(Duration::from_secs(5)).await;
    assert_eq!(
        b.handle.assignment().len(),
        0,
        "a's removal callback still runs: its queues stay locked"
    );
    // The default callback timeout is 10 s; b retries its locks every second.
    settle(Duration::from_secs(8)).await;
    assert_partition(&[&a, &b], &all);
    assert_eq!(b.handle.assignment().len(), 2);
    let errors = callback_errors(&a);
    assert!(
        errors
            .iter()
            .any(|e| e.callback == ListenerCallback::QueuesRemoved
                && e.topic == "T"
                && e.failure == CallbackFailureKind::TimedOut(Duration::from_secs(10))),
        "{errors:?}"
    );
    for (q, start) in b.recorder.added() {
        assert_eq!(
            start,
            rebalance_runtime::StartPosition::Offset(42),
            "{q:?}: a persisted its last offset before unlocking"
        );
    }
    b.handle.shutdown().await;
    a.handle.shutdown().await;
}

/// Panics in the first `panics` calls, then allocates averagely.
#[derive(Debug)]
struct PanicsFirst {
    panics: AtomicUsize,
}

impl AllocateStrategy for PanicsFirst {
    fn name(&self) -> &str {
        "panics_first"
    }

    fn allocate(
        &self,
        group: &str,
        current: &ClientId,
        mq_all: &[MessageQueue],
        cid_all: &[ClientId],
    ) -> Result<Vec<MessageQueue>, AllocateError> {
        if self
            .panics
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            panic!("injected strategy panic");
        }
        Averagely.allocate(group, current, mq_all, cid_all)
    }
}

/// Allocates averagely in the first `allowed` calls, then refuses.
#[derive(Debug)]
struct RefusesAfter {
    allowed: AtomicUsize,
}

impl AllocateStrategy for RefusesAfter {
    fn name(&self) -> &str {
        "refuses_after"
    }

    fn allocate(
        &self,
        group: &str,
        current: &ClientId,
        mq_all: &[MessageQueue],
        cid_all: &[ClientId],
    ) -> Result<Vec<MessageQueue>, AllocateError> {
        match self
            .allowed
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        {
            Ok(_) => Averagely.allocate(group, current, mq_all, cid_all),
            Err(_) => Err(AllocateError::Other {
                strategy: self.name().to_string(),
                message: "no capacity table".to_string(),
            }),
        }
    }
}

/// Panics in the first `panics` calls, then assigns by range.
#[derive(Debug)]
struct AssignorPanicsFirst {
    panics: AtomicUsize,
}

impl GroupAssignor for AssignorPanicsFirst {
    fn name(&self) -> &str {
        "assignor_panics_first"
    }

    fn assign(&self, group: &GroupSubscription) -> Result<GroupAssignment, AssignError> {
        if self
            .panics
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            panic!("injected assignor panic");
        }
        build_assignor("range").unwrap().assign(group)
    }
}

fn strategy_failure(member: &Member) -> Option<AllocationFailure> {
    member
        .handle
        .rounds()
        .borrow()
        .topics
        .iter()
        .find_map(|t| match &t.unbalanced {
            Some(Unbalanced::StrategyFailed(why)) => Some(why.clone()),
            _ => None,
        })
}

#[tokio::test(start_paused = true)]
async fn a_panicking_strategy_fails_only_its_round() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let a = start_with(&cluster, 0, &["T"], |b| {
        b.strategy(Arc::new(PanicsFirst {
            panics: AtomicUsize::new(2),
        }))
    })
    .await;
    settle(Duration::from_millis(10)).await;
    let why = strategy_failure(&a).expect("the round reports the panic");
    assert_eq!(
        why,
        AllocationFailure::Panicked {
            name: "panics_first".into(),
            message: "injected strategy panic".into()
        }
    );
    assert_eq!(
        why.to_string(),
        "panics_first panicked: injected strategy panic"
    );
    assert!(a.handle.assignment().is_empty());
    assert!(!a.handle.is_stopped());
    // Unbalanced rounds are retried every second; the third call succeeds.
    settle(Duration::from_millis(2500)).await;
    assert_eq!(a.handle.assignment().len(), 4);
    assert!(a.handle.assignment().balanced);
    a.handle.shutdown().await;
    assert!(a.handle.join().await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_refusing_strategy_keeps_the_share_and_reports_its_own_error() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let a = start_with(&cluster, 0, &["T"], |b| {
        b.strategy(Arc::new(RefusesAfter {
            allowed: AtomicUsize::new(1),
        }))
    })
    .await;
    settle(Duration::from_millis(10)).await;
    assert_eq!(a.handle.assignment().len(), 4);
    // A member joins: the next round (once `rebalance_min`, 1 s, has passed since the first)
    // asks the strategy again. A round with unchanged inputs would not ask it at all.
    let b = start_with(&cluster, 1, &["T"], |b| b).await;
    settle(Duration::from_millis(1010)).await;
    assert_eq!(
        strategy_failure(&a),
        Some(AllocationFailure::Strategy(AllocateError::Other {
            strategy: "refuses_after".into(),
            message: "no capacity table".into()
        }))
    );
    let assignment = a.handle.assignment();
    assert_eq!(assignment.len(), 4, "the last good share is kept");
    assert!(!assignment.balanced);
    for m in [a, b] {
        m.handle.shutdown().await;
        assert!(m.handle.join().await.is_ok());
    }
}

#[tokio::test(start_paused = true)]
async fn a_panicking_assignor_fails_only_its_round() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let a = start_with(&cluster, 0, &["T"], |b| {
        b.assignor(Arc::new(AssignorPanicsFirst {
            panics: AtomicUsize::new(1),
        }))
    })
    .await;
    settle(Duration::from_millis(10)).await;
    let why = strategy_failure(&a).expect("the round reports the panic");
    assert_eq!(
        why,
        AllocationFailure::Panicked {
            name: "assignor_panics_first".into(),
            message: "injected assignor panic".into()
        }
    );
    assert!(a.handle.assignment().is_empty());
    settle(Duration::from_millis(1500)).await;
    assert_eq!(a.handle.assignment().len(), 4);
    a.handle.shutdown().await;
    assert!(a.handle.join().await.is_ok());
}

/// The cluster's directory and name server, each panicking on demand: `directory` in member
/// lists, `heartbeat` in registrations, `name_server` in routes.
struct Panicky {
    inner: ClusterClient,
    directory: AtomicBool,
    heartbeat: AtomicBool,
    name_server: AtomicBool,
}

fn check(flag: &AtomicBool, what: &str) {
    if flag.load(Ordering::SeqCst) {
        panic!("injected {what} panic");
    }
}

#[async_trait]
impl GroupDirectory for Panicky {
    async fn register(&self, registration: &Registration) -> Result<(), RemoteError> {
        check(&self.heartbeat, "heartbeat");
        self.inner.register(registration).await
    }

    async fn unregister(&self, registration: &Registration) -> Result<(), RemoteError> {
        self.inner.unregister(registration).await
    }

    async fn consumer_ids(&self, group: &str, topic: &str) -> Result<Vec<ClientId>, RemoteError> {
        check(&self.directory, "directory");
        self.inner.consumer_ids(group, topic).await
    }

    fn membership_changes(&self, group: &str) -> Option<watch::Receiver<u64>> {
        self.inner.membership_changes(group)
    }
}

#[async_trait]
impl NameServer for Panicky {
    async fn topic_route(&self, topic: &str) -> Result<TopicRoute, RouteError> {
        check(&self.name_server, "name server");
        self.inner.topic_route(topic).await
    }
}

/// A consumer of T whose name server and directory are `panicky` (nothing panics yet).
fn panicky_consumer(
    cluster: &InMemoryCluster,
) -> (
    rebalance_runtime::ConsumerBuilder,
    Arc<Panicky>,
    Arc<Recorder>,
) {
    let id = client_id(0);
    let client = Arc::new(cluster.client(id.clone()));
    let panicky = Arc::new(Panicky {
        inner: cluster.client(id.clone()),
        directory: AtomicBool::new(false),
        heartbeat: AtomicBool::new(false),
        name_server: AtomicBool::new(false),
    });
    let recorder = Recorder::new();
    let builder = rebalance_runtime::Consumer::builder(GROUP)
        .intervals(java_intervals())
        .client_id(id)
        .subscribe("T")
        .name_server(panicky.clone())
        .directory(panicky.clone())
        .offset_store(client.clone())
        .locker(client)
        .listener(recorder.clone());
    (builder, panicky, recorder)
}

async fn start_panicky(cluster: &InMemoryCluster) -> (Member, Arc<Panicky>) {
    let (builder, panicky, recorder) = panicky_consumer(cluster);
    let id = client_id(0);
    let handle = builder.start().await.unwrap();
    settle(Duration::from_millis(10)).await;
    assert_eq!(handle.assignment().len(), 4);
    (
        Member {
            id,
            handle,
            recorder,
        },
        panicky,
    )
}

#[tokio::test(start_paused = true)]
async fn a_panic_in_the_service_task_is_reported_by_the_handle() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let (a, panicky) = start_panicky(&cluster).await;
    let leases = a.recorder.held_leases();
    assert_eq!(cluster.members(GROUP), vec![a.id.clone()]);

    panicky.directory.store(true, Ordering::SeqCst);
    a.handle.rebalance_now();
    settle(Duration::from_secs(2)).await;
    assert!(a.handle.is_stopped());
    match a.handle.join().await {
        Err(ConsumerError::TaskPanicked { task, message }) => {
            assert_eq!(task, "rebalance service");
            assert_eq!(message, "injected directory panic");
        }
        other => panic!("expected TaskPanicked, got {other:?}"),
    }
    assert!(
        leases.iter().all(QueueLease::is_cancelled),
        "the application is told to stop consuming"
    );
    assert!(cluster.members(GROUP).is_empty(), "unregistered");
    // The assignment and the last report say that the queues are not held any more, and why.
    let assignment = a.handle.assignment();
    assert!(
        assignment.is_empty() && !assignment.balanced,
        "{assignment:?}"
    );
    let last = a.handle.rounds().borrow().clone();
    assert_eq!(
        last.kind,
        rebalance_runtime::assignment::ReportKind::TaskPanicked {
            task: "rebalance service"
        }
    );
    // Shutting down a crashed consumer returns at once, and the failure stays visible.
    a.handle.shutdown().await;
    assert!(matches!(
        a.handle.join().await,
        Err(ConsumerError::TaskPanicked { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn a_panic_in_route_sync_stops_the_consumer_cleanly_and_is_reported() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let (a, panicky) = start_panicky(&cluster).await;
    let all = all_queues(&cluster, &["T"]);
    // Only the route poll (every 30 s) panics; the directory keeps answering, so the service
    // can shut down the ordinary way.
    panicky.name_server.store(true, Ordering::SeqCst);
    settle(Duration::from_secs(29)).await;
    assert!(!a.handle.is_stopped());
    settle(Duration::from_secs(2)).await;
    assert!(a.handle.is_stopped());
    match a.handle.join().await {
        Err(ConsumerError::TaskPanicked { task, message }) => {
            assert_eq!(task, "route sync");
            assert_eq!(message, "injected name server panic");
        }
        other => panic!("expected TaskPanicked, got {other:?}"),
    }
    let mut released = a.recorder.removed_with(RemovalReason::Shutdown);
    released.sort();
    assert_eq!(
        released,
        all.into_iter().collect::<Vec<_>>(),
        "the live service released everything"
    );
    assert!(cluster.members(GROUP).is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_panic_in_the_first_route_poll_or_heartbeat_fails_start_with_a_typed_error() {
    // The tasks named as when a later poll or heartbeat panics.
    for (part, task) in [("name server", "route sync"), ("heartbeat", "heartbeat")] {
        let cluster = InMemoryCluster::new();
        cluster.create_topic("T", 1, 4);
        let (builder, panicky, recorder) = panicky_consumer(&cluster);
        let flag = match part {
            "name server" => &panicky.name_server,
            _ => &panicky.heartbeat,
        };
        flag.store(true, Ordering::SeqCst);
        match builder.start().await {
            Err(ConsumerError::TaskPanicked {
                task: panicked,
                message,
            }) => {
                assert_eq!(panicked, task);
                assert_eq!(message, format!("injected {part} panic"));
            }
            other => panic!("{part}: expected TaskPanicked, got {other:?}"),
        }
        settle(Duration::from_secs(60)).await;
        assert!(
            cluster.members(GROUP).is_empty(),
            "{part}: never registered"
        );
        assert!(recorder.added().is_empty(), "{part}: nothing taken");
    }
}
