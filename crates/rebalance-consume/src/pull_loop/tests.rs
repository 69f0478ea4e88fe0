use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;

use super::PullLoop;
use crate::activity::Activity;
use crate::shared::{Mode, Shared};
use crate::testing::lease;
use crate::testing::{OrderlyRecorder, Recorder, TestSource, concurrent, orderly, queue};
use crate::{ConsumeOptions, Message, PullError, PullResult};
use rebalance_runtime::testing::DetachedLease;
use rebalance_runtime::{QueueLease, RemoteError, StartPosition};

fn spawn(shared: &Arc<Shared>, lease: &QueueLease) -> JoinHandle<()> {
    let (mut pull_loop, _link) =
        PullLoop::new(shared.clone(), lease.clone(), Arc::new(Activity::new()));
    tokio::spawn(async move { pull_loop.run().await })
}

fn sorted(mut offsets: Vec<i64>) -> Vec<i64> {
    offsets.sort_unstable();
    offsets
}

#[tokio::test(start_paused = true)]
async fn consumes_everything_commits_the_end_and_long_polls() {
    let source = Arc::new(TestSource::default());
    let q = queue(0);
    source.append(&q, 100);
    let stop = CancellationToken::new();
    let recorder = Arc::new(Recorder::default());
    let shared = concurrent(
        source.clone(),
        recorder.clone(),
        ConsumeOptions::default(),
        &stop,
    );
    let (lease, token) = lease(&q, StartPosition::Offset(0));
    let task = spawn(&shared, &lease);
    sleep(Duration::from_secs(1)).await;
    assert_eq!(sorted(recorder.offsets()), (0..100).collect::<Vec<_>>());
    assert_eq!(lease.committed(), Some(100));

    // A message arriving during a held pull is consumed at once.
    let before = Instant::now();
    source.append(&q, 1);
    sleep(Duration::from_millis(1)).await;
    assert_eq!(recorder.offsets().len(), 101);
    assert_eq!(lease.committed(), Some(101));
    assert!(before.elapsed() < Duration::from_millis(5));

    token.cancel();
    task.await.unwrap();
    let pulls = source.pulls().len();
    sleep(Duration::from_secs(60)).await;
    assert_eq!(
        source.pulls().len(),
        pulls,
        "no pull after the lease is cancelled"
    );
    stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn start_positions_are_resolved_and_committed_at_once() {
    let source = Arc::new(TestSource::default());
    let stop = CancellationToken::new();
    let recorder = Arc::new(Recorder::default());
    let shared = concurrent(
        source.clone(),
        recorder.clone(),
        ConsumeOptions::default(),
        &stop,
    );
    let cases = [
        (queue(0), StartPosition::Latest, 10),
        (queue(1), StartPosition::Earliest, 5),
        (queue(2), StartPosition::Timestamp(3_000), 3),
    ];
    for (q, start, expected) in cases {
        source.with(|s| {
            s.min.insert(
                q.clone(),
                if start == StartPosition::Earliest {
                    5
                } else {
                    0
                },
            );
        });
        source.append(&q, 5 + 5 * usize::from(start != StartPosition::Earliest));
        let (lease, token) = lease(&q, start);
        let task = spawn(&shared, &lease);
        sleep(Duration::from_millis(1)).await;
        let first_pull = source.pulls().into_iter().find(|p| p.1 == q).unwrap();
        assert_eq!(first_pull.2, expected, "{start:?}");
        sleep(Duration::from_secs(1)).await;
        assert_eq!(lease.committed(), Some(10), "{start:?}");
        token.cancel();
        task.await.unwrap();
    }
    assert_eq!(recorder.offsets().len(), 5 + 7, "nothing before the start");
    stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_moved_offset_is_committed_exactly_and_followed() {
    let source = Arc::new(TestSource::default());
    let stop = CancellationToken::new();
    let recorder = Arc::new(Recorder::default());
    let shared = concurrent(
        source.clone(),
        recorder.clone(),
        ConsumeOptions::default(),
        &stop,
    );
    // Backwards: 30 was committed (say, before the broker lost data); the queue ends at 10.
    let q = queue(0);
    source.append(&q, 10);
    let (lease, token) = lease(&q, StartPosition::Offset(30));
    lease.commit(30);
    let task = spawn(&shared, &lease);
    sleep(Duration::from_millis(10)).await;
    assert_eq!(lease.committed(), Some(10), "moved back, exactly");
    assert!(recorder.offsets().is_empty());
    token.cancel();
    task.await.unwrap();

    // Forwards: the messages before 12 were deleted.
    let q = queue(1);
    source.append(&q, 15);
    source.with(|s| {
        s.scripted
            .push_back(Ok(PullResult::OffsetMoved { next_offset: 12 }));
    });
    let (lease, token) = crate::testing::lease(&q, StartPosition::Offset(0));
    let task = spawn(&shared, &lease);
    sleep(Duration::from_millis(10)).await;
    assert_eq!(sorted(recorder.offsets()), vec![12, 13, 14]);
    assert_eq!(lease.committed(), Some(15));
    token.cancel();
    task.await.unwrap();
    stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn pull_errors_are_retried_after_3_s_and_throttling_after_a_short_pause() {
    let source = Arc::new(TestSource::default());
    let q = queue(0);
    source.append(&q, 3);
    source.with(|s| {
        let error = RemoteError::Unreachable("down".into());
        s.scripted.push_back(Err(PullError::Remote(error.clone())));
        s.scripted.push_back(Err(PullError::Remote(error.clone())));
        s.scripted.push_back(Err(PullError::Throttled(error)));
    });
    let stop = CancellationToken::new();
    let recorder = Arc::new(Recorder::default());
    let shared = concurrent(
        source.clone(),
        recorder.clone(),
        ConsumeOptions::default(),
        &stop,
    );
    let (lease, token) = lease(&q, StartPosition::Offset(0));
    let start = Instant::now();
    let task = spawn(&shared, &lease);
    sleep(Duration::from_secs(10)).await;
    let at: Vec<Duration> = source.pulls().iter().map(|p| p.0 - start).collect();
    assert_eq!(at[0], Duration::ZERO);
    assert_eq!(at[1], Duration::from_secs(3));
    assert_eq!(at[2], Duration::from_secs(6));
    assert_eq!(at[3], Duration::from_secs(6) + Duration::from_millis(20));
    assert_eq!(sorted(recorder.offsets()), vec![0, 1, 2]);
    token.cancel();
    task.await.unwrap();
    stop.cancel();
}

fn denied() -> PullError {
    PullError::Remote(RemoteError::Denied {
        server: "broker".into(),
        operation: "pull",
        resource: "group `G` on topic `T`".into(),
        code: 16,
        remark: "no permission".into(),
    })
}

/// A denied pull is not retried every 3 s: the loop backs off, 3 s doubling to 60 s while the
/// denial lasts (14 pulls in 10 minutes instead of 200), pulls again once it is lifted, and
/// starts from 3 s again after a success.
#[tokio::test(start_paused = true)]
async fn a_denied_pull_backs_off_up_to_60_s_and_resumes_once_served() {
    let source = Arc::new(TestSource::default());
    let q = queue(0);
    source.append(&q, 3);
    source.with(|s| s.scripted.extend((0..1000).map(|_| Err(denied()))));
    let stop = CancellationToken::new();
    let recorder = Arc::new(Recorder::default());
    let shared = concurrent(
        source.clone(),
        recorder.clone(),
        ConsumeOptions::default(),
        &stop,
    );
    let (lease, token) = lease(&q, StartPosition::Offset(0));
    let start = Instant::now();
    let task = spawn(&shared, &lease);
    sleep(Duration::from_secs(600)).await;
    let at: Vec<u64> = source
        .pulls()
        .iter()
        .map(|p| (p.0 - start).as_secs())
        .collect();
    assert_eq!(
        at,
        [0, 3, 9, 21, 45, 93, 153, 213, 273, 333, 393, 453, 513, 573],
        "3 s, doubling, at most 60 s apart"
    );
    assert!(recorder.offsets().is_empty());
    assert_eq!(shared.denials.len(), 1, "one resource remembered");

    // Lifted: the next attempt (at most 60 s later) pulls, and consumes.
    source.with(|s| s.scripted.clear());
    sleep(Duration::from_secs(60)).await;
    assert_eq!(sorted(recorder.offsets()), vec![0, 1, 2]);
    assert_eq!(shared.denials.len(), 0, "served again: forgotten");

    // Denied again after a success: 3 s first again.
    source.with(|s| {
        s.scripted.push_back(Err(denied()));
        s.scripted.push_back(Err(denied()));
    });
    source.append(&q, 1);
    sleep(Duration::from_millis(1)).await;
    let denied_at = source.pulls().last().unwrap().0;
    sleep(Duration::from_secs(10)).await;
    let after: Vec<Duration> = source
        .pulls()
        .iter()
        .map(|p| p.0)
        .filter(|t| *t > denied_at)
        .map(|t| t - denied_at)
        .collect();
    assert_eq!(
        after,
        [Duration::from_secs(3), Duration::from_secs(9)],
        "the back-off starts over"
    );
    assert_eq!(sorted(recorder.offsets()), vec![0, 1, 2, 3]);
    token.cancel();
    task.await.unwrap();
    stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn failed_messages_are_sent_back_or_retried_locally_and_hold_the_commit() {
    let source = Arc::new(TestSource::default());
    let q = queue(0);
    source.append(&q, 6);
    source.with(|s| s.failing_send_backs = 1);
    let stop = CancellationToken::new();
    let recorder = Arc::new(Recorder {
        fail: vec![2, 4],
        ..Recorder::default()
    });
    let shared = concurrent(
        source.clone(),
        recorder.clone(),
        ConsumeOptions::default(),
        &stop,
    );
    let (lease, token) = lease(&q, StartPosition::Offset(0));
    let task = spawn(&shared, &lease);
    sleep(Duration::from_secs(1)).await;
    // 2 failed and its send-back failed: it stays, and holds the commit offset; 4's send-back
    // worked.
    let sent: Vec<(i64, i32)> = source.with(|s| {
        s.sent_back
            .iter()
            .map(|(m, level)| (m.queue_offset(), *level))
            .collect()
    });
    assert_eq!(sent, vec![(4, 0)]);
    assert_eq!(lease.committed(), Some(2));
    sleep(Duration::from_secs(5)).await;
    let retried: Vec<(i64, i32)> = recorder
        .consumed
        .lock()
        .unwrap()
        .iter()
        .filter(|c| c.1 == 2)
        .map(|c| (c.1, c.2))
        .collect();
    assert_eq!(
        retried,
        vec![(2, 0), (2, 1)],
        "consumed again locally, counted"
    );
    assert_eq!(lease.committed(), Some(6));
    token.cancel();
    task.await.unwrap();
    stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn flow_control_bounds_the_buffer() {
    let source = Arc::new(TestSource::default());
    let q = queue(0);
    source.append(&q, 500);
    let stop = CancellationToken::new();
    let recorder = Arc::new(Recorder {
        delay: Duration::from_millis(10),
        ..Recorder::default()
    });
    let options = ConsumeOptions {
        consume_concurrency: 2,
        queue_max_messages: 40,
        ..ConsumeOptions::default()
    };
    let shared = concurrent(source.clone(), recorder.clone(), options, &stop);
    let (lease, token) = lease(&q, StartPosition::Offset(0));
    let task = spawn(&shared, &lease);
    let mut held_back = false;
    for _ in 0..400 {
        sleep(Duration::from_millis(7)).await;
        let pulled = source.pulls().last().map_or(0, |p| p.2 + 32).min(500);
        let consumed = recorder.offsets().len() as i64;
        assert!(
            pulled - consumed <= 40 + 32,
            "{pulled} pulled, {consumed} consumed"
        );
        held_back |= pulled - consumed >= 40;
    }
    assert!(held_back, "the limit was reached");
    sleep(Duration::from_secs(5)).await;
    assert_eq!(lease.committed(), Some(500));
    token.cancel();
    task.await.unwrap();
    stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn hand_off_waits_for_the_batches_in_flight_and_drops_the_rest() {
    for (await_in_flight, committed, ends_after) in [
        (None, 2, Duration::from_secs(1)),
        (
            Some(Duration::from_millis(100)),
            0,
            Duration::from_millis(600),
        ),
    ] {
        let source = Arc::new(TestSource::default());
        let q = queue(0);
        source.append(&q, 10);
        let stop = CancellationToken::new();
        let recorder = Arc::new(Recorder {
            delay: Duration::from_secs(1),
            ..Recorder::default()
        });
        let options = ConsumeOptions {
            consume_concurrency: 2,
            await_in_flight,
            ..ConsumeOptions::default()
        };
        let shared = concurrent(source.clone(), recorder.clone(), options, &stop);
        let (lease, token) = lease(&q, StartPosition::Offset(0));
        let start = Instant::now();
        let task = spawn(&shared, &lease);
        sleep(Duration::from_millis(500)).await;
        token.cancel();
        task.await.unwrap();
        assert_eq!(start.elapsed(), ends_after, "{await_in_flight:?}");
        assert_eq!(lease.committed(), Some(committed), "{await_in_flight:?}");
        sleep(Duration::from_secs(10)).await;
        assert_eq!(
            sorted(recorder.offsets()),
            vec![0, 1],
            "only the batches in flight were processed"
        );
        stop.cancel();
    }
}

#[tokio::test(start_paused = true)]
async fn orderly_consumes_in_order_under_the_guard_and_suspends() {
    let source = Arc::new(TestSource::default());
    let q = queue(0);
    source.append(&q, 6);
    let recorder = Arc::new(OrderlyRecorder {
        suspend: vec![2],
        suspend_times: 2,
        ..OrderlyRecorder::default()
    });
    let shared = orderly(source.clone(), recorder.clone(), ConsumeOptions::default());
    let (lease, token) = crate::testing::lease(&q, StartPosition::Offset(0));
    *recorder.lease.lock().unwrap() = Some(token.clone());
    let start = Instant::now();
    let task = spawn(&shared, &lease);
    sleep(Duration::from_millis(500)).await;
    assert_eq!(recorder.offsets(), vec![0, 1, 2]);
    assert_eq!(lease.committed(), Some(2), "suspended at 2");
    sleep(Duration::from_secs(3)).await;
    let consumed = recorder.consumed.lock().unwrap().clone();
    let offsets: Vec<i64> = consumed.iter().map(|c| c.1).collect();
    assert_eq!(offsets, vec![0, 1, 2, 2, 2, 3, 4, 5]);
    let retries: Vec<(Duration, i32)> = consumed
        .iter()
        .filter(|c| c.1 == 2)
        .map(|c| (c.0 - start, c.2))
        .collect();
    assert_eq!(
        retries,
        vec![
            (Duration::ZERO, 0),
            (Duration::from_secs(1), 1),
            (Duration::from_secs(2), 2)
        ]
    );
    assert_eq!(lease.committed(), Some(6));
    assert_eq!(*recorder.unguarded.lock().unwrap(), 0, "the guard was held");
    token.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn orderly_sends_a_message_past_the_limit_to_the_dead_letters_and_goes_on() {
    let source = Arc::new(TestSource::default());
    let q = queue(0);
    source.append(&q, 4);
    let recorder = Arc::new(OrderlyRecorder {
        suspend: vec![1],
        suspend_times: i32::MAX,
        ..OrderlyRecorder::default()
    });
    let options = ConsumeOptions {
        max_reconsume_times: 2,
        ..ConsumeOptions::default()
    };
    let shared = orderly(source.clone(), recorder.clone(), options);
    let (lease, token) = lease(&q, StartPosition::Offset(0));
    let task = spawn(&shared, &lease);
    sleep(Duration::from_secs(5)).await;
    assert_eq!(recorder.offsets(), vec![0, 1, 1, 1, 2, 3]);
    let dead: Vec<(i64, i32)> = source.with(|s| {
        s.sent_back
            .iter()
            .map(|(m, _)| (m.queue_offset(), m.reconsume_times()))
            .collect()
    });
    assert_eq!(dead, vec![(1, 2)]);
    let levels: Vec<i32> = source.with(|s| s.sent_back.iter().map(|(_, l)| *l).collect());
    assert_eq!(
        levels,
        vec![crate::DEAD_LETTER_LEVEL],
        "straight to the dead letters: a broker decides with its stored count (0 here), and a \
         plain send-back would put the message in the retry topic, behind its successors"
    );
    assert_eq!(lease.committed(), Some(4));
    token.cancel();
    task.await.unwrap();
}

/// Two messages past the limit in one batch, the first one's dead-lettering failing: neither
/// goes on until the first one does, so they reach the dead letters in order (found by review:
/// the second went first, and the first was consumed again after it).
#[tokio::test(start_paused = true)]
async fn orderly_dead_letters_in_order_when_a_send_fails() {
    let source = Arc::new(TestSource::default());
    let q = queue(0);
    source.append(&q, 2);
    source.with(|s| s.failing_send_backs = 1);
    let recorder = Arc::new(OrderlyRecorder {
        suspend: vec![0],
        suspend_times: i32::MAX,
        ..OrderlyRecorder::default()
    });
    let options = ConsumeOptions {
        max_reconsume_times: 0,
        consume_batch_size: 2,
        ..ConsumeOptions::default()
    };
    let shared = orderly(source.clone(), recorder.clone(), options);
    let (lease, token) = lease(&q, StartPosition::Offset(0));
    let task = spawn(&shared, &lease);
    sleep(Duration::from_secs(10)).await;
    let dead: Vec<i64> =
        source.with(|s| s.sent_back.iter().map(|(m, _)| m.queue_offset()).collect());
    assert_eq!(dead, vec![0, 1]);
    assert_eq!(lease.committed(), Some(2));
    token.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn orderly_waits_while_the_lock_is_stale() {
    let source = Arc::new(TestSource::default());
    let q = queue(0);
    source.append(&q, 3);
    let recorder = Arc::new(OrderlyRecorder::default());
    let shared = orderly(source.clone(), recorder.clone(), ConsumeOptions::default());
    let token = DetachedLease::locked(
        q.clone(),
        StartPosition::Offset(0),
        Instant::now(),
        Duration::from_secs(20),
    );
    let lease = token.lease();
    let task = spawn(&shared, &lease);
    sleep(Duration::from_secs(2)).await;
    assert!(recorder.offsets().is_empty(), "no batch on a stale lock");
    token.set_lock_valid_until(Instant::now() + Duration::from_secs(30));
    sleep(Duration::from_secs(1)).await;
    assert_eq!(recorder.offsets(), vec![0, 1, 2]);
    assert_eq!(lease.committed(), Some(3));
    token.cancel();
    task.await.unwrap();
}

mod properties {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Whenever the lease is cancelled: the loop ends once its batches in flight are done,
        /// pulls nothing after the cancellation, and its final commit is exactly the first
        /// offset it did not process.
        #[test]
        fn a_loop_never_outlives_its_lease(
            messages in 0usize..80,
            delay_ms in 0u64..50,
            concurrency in 1usize..4,
            cancel_ms in 0u64..400,
            fail in prop::collection::vec(0i64..80, 0..5),
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap();
            runtime.block_on(async move {
                let source = Arc::new(TestSource::default());
                let q = queue(0);
                source.append(&q, messages);
                let stop = CancellationToken::new();
                let recorder = Arc::new(Recorder {
                    delay: Duration::from_millis(delay_ms),
                    fail,
                    ..Recorder::default()
                });
                let options = ConsumeOptions {
                    consume_concurrency: concurrency,
                    ..ConsumeOptions::default()
                };
                let shared = concurrent(source.clone(), recorder.clone(), options, &stop);
                let (lease, token) = lease(&q, StartPosition::Offset(0));
                let task = spawn(&shared, &lease);
                sleep(Duration::from_millis(cancel_ms)).await;
                token.cancel();
                let cancelled_at = Instant::now();
                tokio::time::timeout(Duration::from_millis(delay_ms + 1), task)
                    .await
                    .expect("the loop ends with its last batch")
                    .unwrap();
                let last_pull = source.pulls().last().map(|p| p.0);
                prop_assert!(last_pull.is_none_or(|at| at <= cancelled_at));
                // First deliveries that succeeded, and sent-back ones, count as processed.
                let consumed = recorder.consumed.lock().unwrap().clone();
                let sent_back: Vec<i64> = source.with(|s| s.sent_back.iter().map(|m| m.0.queue_offset()).collect());
                let processed: BTreeSet<i64> = consumed.iter().map(|c| c.1).collect();
                let committed = lease.committed().unwrap_or(0);
                for offset in 0..committed {
                    prop_assert!(processed.contains(&offset), "{} committed but {} not processed", committed, offset);
                }
                if committed < messages as i64 {
                    prop_assert!(
                        !processed.contains(&committed) || recorder.fail.contains(&committed) && !sent_back.contains(&committed),
                        "the commit offset {} stops short of what was processed", committed
                    );
                }
                sleep(Duration::from_secs(1)).await;
                prop_assert_eq!(source.pulls().last().map(|p| p.0), last_pull, "a pull after the loop ended");
                stop.cancel();
                Ok(())
            })?;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_pull_that_never_answers_is_an_error_after_its_suspension_and_16_s() {
    let source = Arc::new(TestSource::default());
    source.with(|s| s.hang = true);
    let q = queue(0);
    let stop = CancellationToken::new();
    let recorder = Arc::new(Recorder::default());
    let shared = concurrent(
        source.clone(),
        recorder.clone(),
        ConsumeOptions::default(),
        &stop,
    );
    let (lease, token) = lease(&q, StartPosition::Offset(0));
    let task = spawn(&shared, &lease);
    sleep(Duration::from_secs(10)).await;
    source.with(|s| s.hang = false);
    source.append(&q, 3);
    // The hung pull is given up at 31 s (15 s suspension + 16 s), pulled again 3 s later.
    sleep(Duration::from_secs(20)).await;
    assert!(recorder.offsets().is_empty(), "the hung pull still runs");
    sleep(Duration::from_secs(5)).await;
    assert_eq!(sorted(recorder.offsets()), vec![0, 1, 2]);
    assert_eq!(lease.committed(), Some(3));
    token.cancel();
    task.await.unwrap();
    stop.cancel();
}

/// An idle queue whose source answers at once (no long polling, or `PULL_RETRY_IMMEDIATELY`
/// with the same offset) is pulled at most once a second, not at network speed.
#[tokio::test(start_paused = true)]
async fn an_idle_queue_whose_source_does_not_hold_pulls_is_pulled_once_a_second() {
    let source = Arc::new(TestSource::default());
    source.with(|s| s.no_hold = true);
    let q = queue(0);
    let stop = CancellationToken::new();
    let recorder = Arc::new(Recorder::default());
    let shared = concurrent(
        source.clone(),
        recorder.clone(),
        ConsumeOptions::default(),
        &stop,
    );
    let (lease, token) = lease(&q, StartPosition::Offset(0));
    let task = spawn(&shared, &lease);
    sleep(Duration::from_secs(10)).await;
    let pulls = source.pulls().len();
    assert!(
        (10..=11).contains(&pulls),
        "{pulls} pulls of an idle queue in 10 s"
    );
    // A message is still consumed within the spacing.
    source.append(&q, 1);
    sleep(Duration::from_millis(1001)).await;
    assert_eq!(recorder.offsets(), vec![0]);
    // The same with the broker's "retry immediately" answer at the same offset, from a source
    // that holds pulls.
    source.with(|s| {
        s.no_hold = false;
        for _ in 0..100 {
            s.scripted
                .push_back(Ok(PullResult::NoNewMessage { next_offset: 1 }));
        }
    });
    let before = source.pulls().len();
    sleep(Duration::from_secs(10)).await;
    let pulls = source.pulls().len() - before;
    assert!((9..=11).contains(&pulls), "{pulls} pulls in 10 s");
    token.cancel();
    task.await.unwrap();
    stop.cancel();
}

/// A source that panics while resolving a start position fails that lookup only: the loop
/// tries again after the error delay and consumes.
#[tokio::test(start_paused = true)]
async fn a_panicking_offset_lookup_is_a_failed_lookup_not_a_dead_loop() {
    let source = Arc::new(TestSource::default());
    let q = queue(0);
    source.append(&q, 3);
    source.with(|s| s.panicking_lookups = 2);
    let stop = CancellationToken::new();
    let recorder = Arc::new(Recorder::default());
    let shared = concurrent(
        source.clone(),
        recorder.clone(),
        ConsumeOptions::default(),
        &stop,
    );
    let (lease, token) = lease(&q, StartPosition::Earliest);
    let task = spawn(&shared, &lease);
    sleep(Duration::from_secs(7)).await;
    assert!(!task.is_finished(), "the loop lives");
    assert_eq!(sorted(recorder.offsets()), vec![0, 1, 2]);
    token.cancel();
    task.await.unwrap();
    stop.cancel();
}

/// Offsets from the source are checked before the loop adds one to them: a message at
/// `i64::MAX` (or a next offset out of range) is a failed pull, not an overflow that panics
/// (debug) or wraps every later offset (release).
#[tokio::test(start_paused = true)]
async fn an_impossible_offset_from_the_source_is_a_failed_pull() {
    let source = Arc::new(TestSource::default());
    let q = queue(0);
    source.append(&q, 2);
    source.with(|s| {
        s.scripted.push_back(Ok(PullResult::Found {
            messages: vec![crate::Message::new(q.clone(), i64::MAX, "x")],
            next_offset: 0,
            min_offset: 0,
            max_offset: 2,
        }));
        s.scripted
            .push_back(Ok(PullResult::NoNewMessage { next_offset: -5 }));
    });
    let stop = CancellationToken::new();
    let recorder = Arc::new(Recorder::default());
    let shared = concurrent(
        source.clone(),
        recorder.clone(),
        ConsumeOptions::default(),
        &stop,
    );
    let (lease, token) = lease(&q, StartPosition::Offset(0));
    let start = Instant::now();
    let task = spawn(&shared, &lease);
    sleep(Duration::from_secs(7)).await;
    let at: Vec<Duration> = source.pulls().iter().map(|p| p.0 - start).collect();
    assert_eq!(
        at[..3],
        [
            Duration::ZERO,
            Duration::from_secs(3),
            Duration::from_secs(6)
        ],
        "each impossible answer is a failed pull, retried after the error delay"
    );
    assert_eq!(sorted(recorder.offsets()), vec![0, 1]);
    assert_eq!(lease.committed(), Some(2));
    token.cancel();
    task.await.unwrap();
    stop.cancel();
}

/// A clustering consumer's pulls carry its progress, which a broker stores as the group's; a
/// broadcasting consumer's carry none (its progress is its own, not the group's).
#[tokio::test(start_paused = true)]
async fn only_a_clustering_consumers_pulls_carry_the_commit_offset() {
    for broadcasting in [false, true] {
        let source = Arc::new(TestSource::default());
        let q = queue(0);
        source.append(&q, 5);
        let stop = CancellationToken::new();
        let recorder = Arc::new(Recorder::default());
        let shared = crate::testing::concurrent_with(
            source.clone(),
            recorder.clone(),
            ConsumeOptions::default(),
            broadcasting,
            &stop,
        );
        let (lease, token) = lease(&q, StartPosition::Offset(0));
        let task = spawn(&shared, &lease);
        sleep(Duration::from_secs(1)).await;
        source.append(&q, 1);
        sleep(Duration::from_secs(1)).await;
        assert_eq!(recorder.offsets().len(), 6);
        let commits = source.with(|s| s.commits.clone());
        assert!(commits.len() >= 2, "{commits:?}");
        if broadcasting {
            assert!(commits.iter().all(Option::is_none), "{commits:?}");
        } else {
            assert!(commits.contains(&Some(5)), "{commits:?}");
        }
        token.cancel();
        task.await.unwrap();
        stop.cancel();
    }
}

#[tokio::test(start_paused = true)]
async fn a_loop_whose_lease_is_no_longer_trusted_neither_pulls_nor_consumes() {
    let expiry = Duration::from_secs(10);
    let source = Arc::new(TestSource::default());
    let q = queue(0);
    source.append(&q, 10);
    let stop = CancellationToken::new();
    let recorder = Arc::new(Recorder::default());
    let shared = concurrent(
        source.clone(),
        recorder.clone(),
        ConsumeOptions::default(),
        &stop,
    );
    let detached = DetachedLease::with_member_expiry(q.clone(), StartPosition::Offset(0), expiry);
    let lease = detached.lease();
    let task = spawn(&shared, &lease);
    sleep(Duration::from_secs(1)).await;
    assert_eq!(recorder.offsets().len(), 10);
    // No heartbeat vouches for the membership past 10 s (the process was frozen, or cut off):
    // what the pull held at that moment brings is not consumed, and no pull follows.
    sleep(expiry).await;
    let lapsed = Instant::now();
    source.append(&q, 10);
    sleep(Duration::from_secs(30)).await;
    assert_eq!(recorder.offsets().len(), 10, "nothing consumed untrusted");
    assert_eq!(lease.committed(), Some(10));
    let pulls_after: Vec<_> = source
        .pulls()
        .into_iter()
        .filter(|(at, _, _)| *at > lapsed)
        .collect();
    assert!(pulls_after.is_empty(), "pulled untrusted: {pulls_after:?}");
    detached.cancel();
    task.await.unwrap();
    stop.cancel();
}

/// A source that answers "offset moved" again and again, between answers that fill the buffer
/// (found by review): each move emptied the buffer, but the old buffer's batches stayed in the
/// work queue, which flow control does not see; the loop pulled a buffer's worth again at
/// once, and the work queue grew by one buffer per move, without bound, behind a slow listener.
/// After a move the loop pulls again only once the old buffer's batches are taken; they are
/// still consumed.
#[tokio::test(start_paused = true)]
async fn a_moved_offset_does_not_let_the_old_buffer_pile_up_in_the_work_queue() {
    let source = Arc::new(TestSource::default());
    let q = queue(0);
    let moves = 5;
    source.with(|s| {
        for _ in 0..moves {
            s.scripted.push_back(Ok(PullResult::Found {
                messages: (0..9).map(|o| Message::new(q.clone(), o, "x")).collect(),
                next_offset: 9,
                min_offset: 0,
                max_offset: 9,
            }));
            s.scripted
                .push_back(Ok(PullResult::OffsetMoved { next_offset: 0 }));
        }
    });
    let stop = CancellationToken::new();
    // One worker, a minute per message.
    let recorder = Arc::new(Recorder {
        delay: Duration::from_secs(60),
        ..Recorder::default()
    });
    let options = ConsumeOptions {
        consume_concurrency: 1,
        queue_max_messages: 10,
        ..ConsumeOptions::default()
    };
    let shared = concurrent(source.clone(), recorder.clone(), options, &stop);
    let (lease, _token) = lease(&q, StartPosition::Offset(0));
    let _task = spawn(&shared, &lease);
    let Mode::Concurrent { work } = &shared.mode else {
        unreachable!("a concurrent consumer")
    };
    for _ in 0..100 {
        sleep(Duration::from_secs(30)).await;
        assert!(
            work.waiting() <= 10,
            "{} messages wait in the work queue; the buffer's limit is 10",
            work.waiting()
        );
    }
    assert!(
        source.pulls().len() > 2 * moves,
        "every scripted answer was taken"
    );
    assert_eq!(
        recorder.offsets().len(),
        9 * moves,
        "every message pulled was consumed, before the moves or after"
    );
    stop.cancel();
}

/// An ordered queue removed while its batch waits for a permit of the consumer's concurrency
/// (found by review): its hand-off waited for that batch, so for the listener calls of other
/// queues holding the permits (a hung one: forever), and then ran it, on a queue already
/// removed. A batch that has no permit when its lease ends is given up, unprocessed.
#[tokio::test(start_paused = true)]
async fn an_ordered_queue_waiting_for_a_permit_is_handed_off_at_once() {
    let source = Arc::new(TestSource::default());
    let (busy, waiting) = (queue(0), queue(1));
    source.append(&busy, 1);
    source.append(&waiting, 3);
    // One permit, which the busy queue's batch holds for an hour.
    let recorder = Arc::new(OrderlyRecorder {
        delay: Duration::from_secs(3600),
        ..OrderlyRecorder::default()
    });
    let options = ConsumeOptions {
        consume_concurrency: 1,
        ..ConsumeOptions::default()
    };
    let shared = orderly(source.clone(), recorder.clone(), options);
    let (busy_lease, _busy_token) = lease(&busy, StartPosition::Offset(0));
    let _busy_task = spawn(&shared, &busy_lease);
    sleep(Duration::from_millis(10)).await;
    let (lease, token) = lease(&waiting, StartPosition::Offset(0));
    let task = spawn(&shared, &lease);
    sleep(Duration::from_millis(10)).await;
    token.cancel();
    tokio::time::timeout(Duration::from_secs(1), task)
        .await
        .expect("the hand-off does not wait for another queue's listener call")
        .unwrap();
    assert_eq!(lease.committed(), Some(0), "nothing of it consumed");
    sleep(Duration::from_secs(7200)).await;
    let consumed: Vec<i64> = recorder.offsets();
    assert_eq!(
        consumed,
        vec![0],
        "only the busy queue's message reached the listener"
    );
}
