//! A `queues_added` that fails (returns an error, panics, or runs past `callback_timeout`):
//! called again with backoff by default, or the consumer shuts down so that the group
//! rebalances its queues. The attempt numbers logged are checked in `consumer_tracing.rs`.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use rebalance_core::MessageQueue;
use rebalance_runtime::RemovalReason;
use rebalance_runtime::assignment::{CallbackFailureKind, ListenerCallback};
use rebalance_runtime::config::AddedFailurePolicy;
use rebalance_runtime::memory::InMemoryCluster;
use tokio::time::Instant;

const MIN: Duration = Duration::from_secs(1);

/// When `queues_added` was called with `queue`, from `start`, in whole milliseconds.
fn added_at(recorder: &Recorder, queue: &MessageQueue, start: Instant) -> Vec<u128> {
    recorder
        .events
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, e)| matches!(e, Event::Added(q, _) if q == queue))
        .map(|(at, _)| at.duration_since(start).as_millis())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_failed_queues_added_is_called_again_with_backoff_until_it_succeeds() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let recorder = Recorder::new();
    // The first call and two retries fail; the third retry succeeds.
    *recorder.fail_added.lock().unwrap() = 3;
    let start = Instant::now();
    let a = start_recording(&cluster, 0, &["T"], recorder.clone(), |b| b).await;
    settle(MIN).await;
    let first = *added_at(&recorder, &MessageQueue::new("T", "broker-0", 0), start)
        .first()
        .expect("added");
    let rounds = a.handle.rounds();
    let report = rounds.borrow().clone();
    assert_eq!(report.callback_errors.len(), 1, "{report:?}");
    assert_eq!(
        report.callback_errors[0].callback,
        ListenerCallback::QueuesAdded
    );
    assert_eq!(
        report.callback_errors[0].failure,
        CallbackFailureKind::Returned("injected listener failure".into())
    );
    settle(Duration::from_secs(120)).await;
    // Both queues went in one call each time: 1 s, then 2 s, then 4 s after each failure; no
    // call after the one that succeeded.
    for i in 0..2 {
        let q = MessageQueue::new("T", "broker-0", i);
        let times: Vec<u128> = added_at(&recorder, &q, start)
            .into_iter()
            .map(|t| t - first)
            .collect();
        assert_eq!(times, [0, 1_000, 3_000, 7_000], "{q:?}");
    }
    assert_eq!(a.handle.assignment().len(), 2);
    assert!(!a.handle.is_stopped());
    a.handle.shutdown().await;
}

/// How the injected `queues_added` failures fail.
#[derive(Debug, Clone, Copy)]
enum Failing {
    Panics,
    HangsPastTheTimeout,
}

/// Starts member 0 of `T` (2 queues) whose first three `queues_added` calls fail as `how`
/// says, and checks that, under the default policy, the same leases are called again with
/// backoff (1 s, then 2 s, then 4 s after each failure) until the fourth call succeeds: four
/// calls of one lease, attempts 1 to 4. The first failure is in the round's report.
async fn failures_are_retried_with_backoff(how: Failing) {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let recorder = Recorder::new();
    let counter = match how {
        Failing::Panics => &recorder.panic_added,
        Failing::HangsPastTheTimeout => &recorder.hang_added,
    };
    *counter.lock().unwrap() = 3;
    let start = Instant::now();
    let a = start_recording(&cluster, 0, &["T"], recorder.clone(), |b| b).await;
    let timeout = java_intervals().callback_timeout;
    // Past the first call (cut short after `callback_timeout` when it hangs) and its report.
    settle(timeout + MIN / 2).await;
    let first = *added_at(&recorder, &MessageQueue::new("T", "broker-0", 0), start)
        .first()
        .expect("added");
    let report = a.handle.rounds().borrow().clone();
    assert_eq!(report.callback_errors.len(), 1, "{how:?}: {report:?}");
    let error = &report.callback_errors[0];
    assert_eq!(error.callback, ListenerCallback::QueuesAdded, "{how:?}");
    match how {
        Failing::Panics => assert_eq!(
            error.failure,
            CallbackFailureKind::Panicked("injected listener panic in queues_added".into())
        ),
        Failing::HangsPastTheTimeout => {
            assert_eq!(error.failure, CallbackFailureKind::TimedOut(timeout))
        }
    }
    settle(Duration::from_secs(180)).await;
    // A failing call ends at once when it panics, `callback_timeout` after it began when it
    // hangs; each retry begins 1 s, 2 s, then 4 s after the end of the failure before it.
    let took = match how {
        Failing::Panics => 0,
        Failing::HangsPastTheTimeout => timeout.as_millis(),
    };
    let expected = [0, took + 1_000, 2 * took + 3_000, 3 * took + 7_000];
    for i in 0..2 {
        let q = MessageQueue::new("T", "broker-0", i);
        let times: Vec<u128> = added_at(&recorder, &q, start)
            .into_iter()
            .map(|t| t - first)
            .collect();
        assert_eq!(times, expected, "{how:?}: {q:?}");
    }
    // Every call was a retry of the same leases, never a new addition.
    assert!(
        recorder.violations.lock().unwrap().is_empty(),
        "{how:?}: {:?}",
        recorder.violations.lock().unwrap()
    );
    assert_eq!(
        *counter.lock().unwrap(),
        0,
        "{how:?}: every failure injected"
    );
    assert_eq!(a.handle.assignment().len(), 2, "{how:?}");
    assert!(!a.handle.is_stopped(), "{how:?}");
    a.handle.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_panicking_queues_added_is_called_again_with_backoff_until_it_succeeds() {
    failures_are_retried_with_backoff(Failing::Panics).await;
}

#[tokio::test(start_paused = true)]
async fn a_queues_added_past_the_callback_timeout_is_called_again_with_backoff() {
    failures_are_retried_with_backoff(Failing::HangsPastTheTimeout).await;
}

#[tokio::test(start_paused = true)]
async fn a_queue_released_before_its_retry_is_not_added_again() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let recorder = Recorder::new();
    // Every call fails, for a long while.
    *recorder.fail_added.lock().unwrap() = 1_000;
    let began = Instant::now();
    let a = start_recording(&cluster, 0, &["T"], recorder.clone(), |b| b).await;
    settle(MIN).await;
    // A second member joins: one of a's queues goes to it.
    let b = start(&cluster, 1, &["T"]).await;
    settle(Duration::from_secs(5)).await;
    assert_eq!(a.handle.assignment().len(), 1);
    let gone: BTreeSet<MessageQueue> = recorder
        .removed_with(RemovalReason::Reassigned)
        .into_iter()
        .collect();
    assert_eq!(gone.len(), 1);
    let gone = gone.into_iter().next().unwrap();
    let removed_at = Instant::now();
    settle(Duration::from_secs(60)).await;
    let after: Vec<u128> = added_at(&recorder, &gone, began)
        .into_iter()
        .filter(|&t| t > removed_at.duration_since(began).as_millis())
        .collect();
    assert!(
        after.is_empty(),
        "called again after its release: {after:?}"
    );
    // The queue a keeps is still retried (at most a minute apart).
    let kept = a.handle.assignment().iter().next().cloned().unwrap();
    let calls = added_at(&recorder, &kept, began);
    assert!(calls.len() >= 5, "{calls:?}");
    assert!(calls.windows(2).all(|w| w[1] - w[0] <= 60_000), "{calls:?}");
    assert_eq!(b.handle.assignment().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn release_and_shutdown_hands_the_queues_to_the_group() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let b = start(&cluster, 1, &["T"]).await;
    settle(MIN).await;
    assert_eq!(b.handle.assignment().len(), 4);
    let recorder = Recorder::new();
    *recorder.fail_added.lock().unwrap() = 1;
    let a = start_recording(&cluster, 0, &["T"], recorder.clone(), |b| {
        b.on_queues_added_failure(AddedFailurePolicy::ReleaseAndShutdown)
    })
    .await;
    settle(Duration::from_secs(5)).await;
    // a took its half, its queues_added failed: it shut down, released them, unregistered.
    assert!(a.handle.is_stopped());
    assert_eq!(a.handle.join().await.ok(), Some(()));
    let added: Vec<MessageQueue> = recorder.added().into_iter().map(|(q, _)| q).collect();
    assert_eq!(added.len(), 2, "{added:?}");
    let mut released = recorder.removed_with(RemovalReason::Shutdown);
    released.sort();
    let mut expected = added.clone();
    expected.sort();
    assert_eq!(released, expected);
    assert!(!cluster.members(GROUP).contains(&a.id));
    // b has every queue again.
    settle(Duration::from_secs(5)).await;
    assert_eq!(b.handle.assignment().len(), 4);
    assert_eq!(recorder.added().len(), 2, "never called again");
}
