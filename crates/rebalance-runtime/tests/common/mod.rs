//! Shared helpers of the runtime's integration tests: a listener that records every callback,
//! consumers on the in-memory cluster, a directory that shows its heartbeats, and the group
//! invariants.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rebalance_core::{ClientId, MessageQueue};
use rebalance_runtime::config::Intervals;
use rebalance_runtime::memory::{ClusterClient, InMemoryCluster};
use rebalance_runtime::{
    Consumer, ConsumerBuilder, ConsumerHandle, GroupDirectory, ListenerError, QueueLease,
    QueueListener, QueueLocker, Registration, RemoteError, RemovalReason, RemovedQueue,
    StartPosition,
};
use tokio::sync::watch;
use tokio::time::Instant;

pub const GROUP: &str = "G";

/// One callback as the application saw it.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Added(MessageQueue, StartPosition),
    Removed(MessageQueue, RemovalReason),
}

/// Records callbacks, keeps the leases, and checks that a queue is never added while held or
/// removed while not held.
#[derive(Default)]
pub struct Recorder {
    pub events: Mutex<Vec<(Instant, Event)>>,
    pub leases: Mutex<BTreeMap<MessageQueue, QueueLease>>,
    pub violations: Mutex<Vec<String>>,
    /// Offset committed for each added queue, as a consumer would after some progress.
    pub commit_on_add: Mutex<Option<i64>>,
    /// Fail (Err) the next N added callbacks.
    pub fail_added: Mutex<usize>,
    /// Panic in the next N added callbacks.
    pub panic_added: Mutex<usize>,
    /// Never return from the next N added callbacks (until `callback_timeout` cuts them short).
    pub hang_added: Mutex<usize>,
    /// Panic in the next N removed callbacks.
    pub panic_removed: Mutex<usize>,
}

impl Recorder {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn held(&self) -> BTreeSet<MessageQueue> {
        self.leases.lock().unwrap().keys().cloned().collect()
    }

    /// The leases of the queues held now.
    pub fn held_leases(&self) -> Vec<QueueLease> {
        self.leases.lock().unwrap().values().cloned().collect()
    }

    pub fn events(&self) -> Vec<Event> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(|(_, e)| e.clone())
            .collect()
    }

    pub fn removed_with(&self, reason: RemovalReason) -> Vec<MessageQueue> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Removed(q, r) if r == reason => Some(q),
                _ => None,
            })
            .collect()
    }

    pub fn added(&self) -> Vec<(MessageQueue, StartPosition)> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Added(q, s) => Some((q, s)),
                _ => None,
            })
            .collect()
    }
}

#[async_trait]
impl QueueListener for Recorder {
    async fn queues_added(&self, _topic: &str, queues: &[QueueLease]) -> Result<(), ListenerError> {
        let now = Instant::now();
        let commit = *self.commit_on_add.lock().unwrap();
        {
            let mut leases = self.leases.lock().unwrap();
            let mut events = self.events.lock().unwrap();
            for lease in queues {
                // The same lease again is a retry of a failed call, not a second addition.
                let replaced = leases.insert(lease.queue().clone(), lease.clone());
                if replaced.is_some_and(|old| !old.is_same_lease(lease)) {
                    self.violations
                        .lock()
                        .unwrap()
                        .push(format!("{:?} added while held", lease.queue()));
                }
                if lease.is_cancelled() {
                    self.violations
                        .lock()
                        .unwrap()
                        .push(format!("{:?} added already cancelled", lease.queue()));
                }
                if let Some(offset) = commit {
                    lease.commit(offset);
                }
                events.push((
                    now,
                    Event::Added(lease.queue().clone(), lease.start_position()),
                ));
            }
        }
        if take_one(&self.panic_added) {
            panic!("injected listener panic in queues_added");
        }
        if take_one(&self.hang_added) {
            std::future::pending::<()>().await;
        }
        if take_one(&self.fail_added) {
            return Err("injected listener failure".into());
        }
        Ok(())
    }

    async fn queues_removed(
        &self,
        _topic: &str,
        queues: &[RemovedQueue],
    ) -> Result<(), ListenerError> {
        let now = Instant::now();
        {
            let mut leases = self.leases.lock().unwrap();
            let mut events = self.events.lock().unwrap();
            for removed in queues {
                match leases.remove(&removed.queue) {
                    Some(lease) if !lease.is_cancelled() => self.violations.lock().unwrap().push(
                        format!("{:?} removed but its lease is not cancelled", removed.queue),
                    ),
                    Some(_) => {}
                    None => self
                        .violations
                        .lock()
                        .unwrap()
                        .push(format!("{:?} removed while not held", removed.queue)),
                }
                events.push((now, Event::Removed(removed.queue.clone(), removed.reason)));
            }
        }
        if take_one(&self.panic_removed) {
            panic!("injected listener panic");
        }
        Ok(())
    }
}

/// Whether `count` was above zero, taking one from it (the lock is released at once).
fn take_one(count: &Mutex<usize>) -> bool {
    let mut count = count.lock().unwrap();
    let take = *count > 0;
    if take {
        *count -= 1;
    }
    take
}

/// A member of the test group.
pub struct Member {
    pub id: ClientId,
    pub handle: ConsumerHandle,
    pub recorder: Arc<Recorder>,
}

pub fn client_id(i: usize) -> ClientId {
    ClientId::from(format!("10.0.0.{}@{}", i + 1, 9000 + i))
}

/// The default intervals without settling or membership checks: the first round runs at once,
/// every change is acted upon at once, and the members are listed only by the rounds, as in the
/// Java client. The tests of other features assume that timing (and count the directory's
/// calls); settling (on by default, `Intervals::adaptive_settle`) has its own tests
/// (`settle.rs`), and so do the checks (`membership_checks.rs`).
pub fn java_intervals() -> Intervals {
    Intervals {
        adaptive_settle: None,
        membership_check: None,
        ..Intervals::default()
    }
}

/// A builder for member `i` subscribed to `topics`, wired to `cluster`, with
/// [`java_intervals`].
pub fn builder(
    cluster: &InMemoryCluster,
    i: usize,
    topics: &[&str],
    recorder: Arc<Recorder>,
) -> ConsumerBuilder {
    let id = client_id(i);
    let mut b = Consumer::builder(GROUP)
        .intervals(java_intervals())
        .client_id(id.clone())
        .cluster(cluster.client(id))
        .listener(recorder);
    for t in topics {
        b = b.subscribe(*t);
    }
    b
}

pub async fn start(cluster: &InMemoryCluster, i: usize, topics: &[&str]) -> Member {
    start_with(cluster, i, topics, |b| b).await
}

pub async fn start_with(
    cluster: &InMemoryCluster,
    i: usize,
    topics: &[&str],
    configure: impl FnOnce(ConsumerBuilder) -> ConsumerBuilder,
) -> Member {
    start_recording(cluster, i, topics, Recorder::new(), configure).await
}

/// [`start_with`], recording into `recorder` (which a listener set by `configure` may wrap).
pub async fn start_recording(
    cluster: &InMemoryCluster,
    i: usize,
    topics: &[&str],
    recorder: Arc<Recorder>,
    configure: impl FnOnce(ConsumerBuilder) -> ConsumerBuilder,
) -> Member {
    let handle = configure(builder(cluster, i, topics, recorder.clone()))
        .start()
        .await
        .expect("consumer starts");
    Member {
        id: client_id(i),
        handle,
        recorder,
    }
}

/// Lets simulated time pass (the tests run on a paused clock).
pub async fn settle(d: Duration) {
    tokio::time::sleep(d).await;
}

/// Every queue of `topics` in the cluster's routes.
pub fn all_queues(cluster: &InMemoryCluster, topics: &[&str]) -> BTreeSet<MessageQueue> {
    topics
        .iter()
        .flat_map(|t| {
            cluster
                .route(t)
                .map(|r| r.subscribable_queues(t))
                .unwrap_or_default()
        })
        .collect()
}

/// The running members' holdings (by the listener's view and by the runtime's assignment, which
/// must agree) are disjoint and cover every queue.
pub fn assert_partition(members: &[&Member], all: &BTreeSet<MessageQueue>) {
    let mut seen: BTreeMap<MessageQueue, &ClientId> = BTreeMap::new();
    for m in members {
        let held = m.recorder.held();
        let assigned: BTreeSet<MessageQueue> = m.handle.assignment().iter().cloned().collect();
        assert_eq!(
            held, assigned,
            "{}: listener view and assignment differ",
            m.id
        );
        for q in held {
            if let Some(other) = seen.insert(q.clone(), &m.id) {
                panic!("{q:?} held by both {other} and {}", m.id);
            }
        }
        let violations = m.recorder.violations.lock().unwrap();
        assert!(violations.is_empty(), "{}: {violations:?}", m.id);
    }
    let covered: BTreeSet<MessageQueue> = seen.keys().cloned().collect();
    let missing: Vec<&MessageQueue> = all.difference(&covered).collect();
    assert!(missing.is_empty(), "queues held by nobody: {missing:?}");
    let extra: Vec<&MessageQueue> = covered.difference(all).collect();
    assert!(
        extra.is_empty(),
        "queues that do not exist are held: {extra:?}"
    );
}

/// The in-memory directory, keeping every registration it was sent (refused ones too) and
/// refusing heartbeats while told to.
pub struct WatchedDirectory {
    inner: ClusterClient,
    sent: Mutex<Vec<Registration>>,
    refuse: AtomicBool,
}

impl WatchedDirectory {
    pub fn new(inner: ClusterClient) -> Arc<Self> {
        Arc::new(Self {
            inner,
            sent: Mutex::new(Vec::new()),
            refuse: AtomicBool::new(false),
        })
    }

    /// Every registration sent so far, in order.
    pub fn sent(&self) -> Vec<Registration> {
        self.sent.lock().unwrap().clone()
    }

    /// How many heartbeats were sent (refused ones included).
    pub fn registers(&self) -> usize {
        self.sent.lock().unwrap().len()
    }

    /// Refuse heartbeats from now on, or accept them again.
    pub fn refuse(&self, refuse: bool) {
        self.refuse.store(refuse, Ordering::SeqCst);
    }
}

#[async_trait]
impl GroupDirectory for WatchedDirectory {
    async fn register(&self, registration: &Registration) -> Result<(), RemoteError> {
        self.sent.lock().unwrap().push(registration.clone());
        if self.refuse.load(Ordering::SeqCst) {
            return Err(RemoteError::Unreachable(
                "heartbeats refused by the test".into(),
            ));
        }
        self.inner.register(registration).await
    }

    async fn unregister(&self, registration: &Registration) -> Result<(), RemoteError> {
        self.inner.unregister(registration).await
    }

    async fn consumer_ids(&self, group: &str, topic: &str) -> Result<Vec<ClientId>, RemoteError> {
        self.inner.consumer_ids(group, topic).await
    }

    fn membership_changes(&self, group: &str) -> Option<watch::Receiver<u64>> {
        self.inner.membership_changes(group)
    }
}

/// Another client ("intruder@1") takes the lock of `queue`, which must be free; returns it, to
/// renew or release the lock later.
pub async fn intruder_locks(cluster: &InMemoryCluster, queue: &MessageQueue) -> ClusterClient {
    let intruder = cluster.client("intruder@1");
    let id = intruder.client_id().clone();
    let answer = intruder
        .lock(GROUP, &id, std::slice::from_ref(queue))
        .await
        .unwrap();
    assert_eq!(answer.granted, vec![queue.clone()]);
    intruder
}
