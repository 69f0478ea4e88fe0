//! Every queue the listener is told to remove appears in a report that `rounds()` shows,
//! whatever released it: a round, a lock lost at renewal (in the round it wakes), or the
//! shutdown (in a report of its own).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use rebalance_core::MessageQueue;
use rebalance_runtime::RemovalReason;
use rebalance_runtime::assignment::{ReportKind, RoundReport};
use rebalance_runtime::config::ConsumeOrder;
use rebalance_runtime::memory::{ClusterCall, InMemoryCluster};
use rebalance_runtime::wake::WakeReasons;
use tokio::sync::watch;
use tokio::task::JoinHandle;

const MIN: Duration = Duration::from_secs(1);

/// Every report published on `rounds` until the consumer stops.
fn collect(mut rounds: watch::Receiver<Arc<RoundReport>>) -> JoinHandle<Vec<Arc<RoundReport>>> {
    tokio::spawn(async move {
        let mut seen = Vec::new();
        while rounds.changed().await.is_ok() {
            seen.push(rounds.borrow_and_update().clone());
        }
        seen
    })
}

/// The removals of `reports`, in order, with their reasons.
fn reported(reports: &[Arc<RoundReport>]) -> Vec<(MessageQueue, RemovalReason)> {
    reports
        .iter()
        .flat_map(|r| r.removed().map(|q| (q.queue.clone(), q.reason)))
        .collect()
}

/// The removals the listener was told of, in order.
fn told(recorder: &Recorder) -> Vec<(MessageQueue, RemovalReason)> {
    recorder
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Removed(q, r) => Some((q, r)),
            Event::Added(..) => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_lock_lost_at_renewal_and_the_shutdown_releases_are_reported() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let a = start_with(&cluster, 0, &["T"], |b| {
        b.consume_order(ConsumeOrder::Orderly)
    })
    .await;
    let reports = collect(a.handle.rounds());
    settle(MIN).await;
    assert_eq!(a.handle.assignment().len(), 2);
    // Renewals fail (at 20 s and 40 s): at 40 s the locks are older than their lifetime and
    // both queues are lost; once locking works again, a round takes them back.
    cluster.fail_next(ClusterCall::Lock, 3);
    settle(Duration::from_secs(45)).await;
    assert_eq!(a.recorder.removed_with(RemovalReason::Lost).len(), 2);
    settle(Duration::from_secs(30)).await;
    assert_eq!(a.handle.assignment().len(), 2, "taken back");
    a.handle.shutdown().await;
    let reports = reports.await.expect("collector");

    // Each removal the listener was told of is in exactly one report, with its reason.
    let told = told(&a.recorder);
    assert_eq!(told.len(), 4, "{told:?}");
    assert_eq!(reported(&reports), told);

    // The lost queues are in the report of the round the renewal woke at once.
    let lost: Vec<&Arc<RoundReport>> = reports
        .iter()
        .filter(|r| r.removed().any(|q| q.reason == RemovalReason::Lost))
        .collect();
    assert_eq!(lost.len(), 1, "{reports:#?}");
    let lost = lost[0];
    assert_eq!(lost.kind, ReportKind::Round);
    assert!(lost.reasons.contains(WakeReasons::LOCK_LOST), "{lost:?}");
    assert_eq!(lost.removed().count(), 2);

    let last = reports.last().expect("a report");
    assert_eq!(last.kind, ReportKind::Shutdown);
    assert!(!last.balanced);
    let shut: Vec<RemovalReason> = last.removed().map(|q| q.reason).collect();
    assert_eq!(shut, [RemovalReason::Shutdown; 2]);
    // Only the shutdown's report is not a round's.
    let not_rounds = reports
        .iter()
        .filter(|r| r.kind != ReportKind::Round)
        .count();
    assert_eq!(not_rounds, 1);
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_reports_its_releases_and_the_callbacks_that_failed() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 2, 2);
    let a = start(&cluster, 0, &["T"]).await;
    let reports = collect(a.handle.rounds());
    settle(MIN).await;
    assert_eq!(a.handle.assignment().len(), 4);
    *a.recorder.panic_removed.lock().unwrap() = 1;
    a.handle.shutdown().await;
    let reports = reports.await.expect("collector");
    let last = reports.last().expect("a report");
    assert_eq!(last.kind, ReportKind::Shutdown);
    assert_eq!(last.removed().count(), 4);
    assert_eq!(reported(&reports), told(&a.recorder));
    assert_eq!(last.callback_errors.len(), 1, "{last:?}");
    assert_eq!(last.callback_errors[0].topic, "T");
}

#[tokio::test(start_paused = true)]
async fn an_aborted_consumer_says_it_holds_nothing() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let a = start(&cluster, 0, &["T"]).await;
    let reports = collect(a.handle.rounds());
    settle(MIN).await;
    let before = a.handle.assignment();
    assert_eq!(before.len(), 4);
    assert!(before.balanced);
    let last_round = a.handle.rounds().borrow().round;

    a.handle.abort();
    settle(MIN).await;
    assert!(a.handle.is_stopped());
    let after = a.handle.assignment();
    assert!(after.is_empty(), "{after:?}");
    assert!(!after.balanced);
    assert_eq!(after.round, last_round);
    let reports = reports.await.expect("collector");
    let last = reports.last().expect("a report");
    assert_eq!(last.kind, ReportKind::Aborted);
    assert_eq!(last.round, last_round);
    assert_eq!(last.client_id.as_ref(), Some(&a.id));
    // As if the process had died: nothing released, still registered.
    assert!(told(&a.recorder).is_empty());
    assert_eq!(cluster.members(GROUP), vec![a.id.clone()]);
}
