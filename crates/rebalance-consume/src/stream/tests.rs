//! The stream's semantics over the pull loops, on leases the tests play the runtime for: ack
//! order and the commit offset, redelivery of what is dropped or handed back, the hand-off,
//! pause, backpressure, and ordered batches.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use proptest::prelude::*;
use rebalance_core::MessageQueue;
use rebalance_runtime::testing::DetachedLease;
use rebalance_runtime::{QueueLease, QueueListener, RemovalReason, RemovedQueue, StartPosition};
use tokio::time::{Instant, sleep, timeout};
use tokio_util::sync::CancellationToken;

use super::messages::messages;
use super::ordered::{BatchFeed, batches};
use super::stale::StaleLeases;
use super::{OrderedBatch, StreamMessage};
use crate::ConsumeOptions;
use crate::leases::Leases;
use crate::shared::{Mode, Shared};
use crate::testing::{TestSource, orderly, queue};
use crate::work::WorkQueue;

/// A stream over the pull loops of the leases it is given, on a [`TestSource`].
struct Rig {
    source: Arc<TestSource>,
    shared: Arc<Shared>,
    leases: Arc<Leases>,
    stream: Pin<Box<dyn futures_util::stream::FusedStream<Item = StreamMessage> + Send>>,
    stop: CancellationToken,
    stale: Arc<StaleLeases>,
}

impl Rig {
    fn new(options: ConsumeOptions) -> Self {
        let source = Arc::new(TestSource::default());
        let work = Arc::new(WorkQueue::default());
        let shared = Arc::new(Shared::new(
            Arc::from("G"),
            source.clone(),
            options,
            false,
            Mode::Concurrent { work: work.clone() },
            HashMap::new(),
        ));
        let stop = CancellationToken::new();
        let stale = Arc::new(StaleLeases::default());
        let stream = messages(shared.clone(), work, stop.clone(), stale.clone());
        Self {
            source,
            leases: Arc::new(Leases::new(shared.clone())),
            shared,
            stream,
            stop,
            stale,
        }
    }

    /// Hands the queue to the loops, as the runtime would.
    async fn hold(&self, detached: DetachedLease) -> (QueueLease, Arc<DetachedLease>) {
        let lease = detached.lease();
        self.leases
            .queues_added(&lease.queue().topic, std::slice::from_ref(&lease))
            .await
            .unwrap();
        (lease, Arc::new(detached))
    }

    async fn hold_from(&self, q: &MessageQueue, offset: i64) -> (QueueLease, Arc<DetachedLease>) {
        self.hold(DetachedLease::new(q.clone(), StartPosition::Offset(offset)))
            .await
    }

    /// The next message, if one comes within a second.
    async fn next(&mut self) -> Option<StreamMessage> {
        timeout(Duration::from_secs(1), self.stream.next())
            .await
            .ok()
            .flatten()
    }

    /// The next `count` messages (fails when they do not come).
    async fn take(&mut self, count: usize) -> Vec<StreamMessage> {
        let mut taken = Vec::new();
        for _ in 0..count {
            let message = self.next().await;
            taken.push(message.unwrap_or_else(|| panic!("only {} messages came", taken.len())));
        }
        taken
    }

    /// Takes `queue` away and hands it off; completes when the hand-off is done.
    fn remove(&self, q: &MessageQueue) -> tokio::task::JoinHandle<()> {
        let leases = self.leases.clone();
        let removed = [RemovedQueue {
            queue: q.clone(),
            reason: RemovalReason::Reassigned,
        }];
        tokio::spawn(async move {
            leases
                .queues_removed(&removed[0].queue.topic, &removed)
                .await
                .unwrap();
        })
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn offsets(messages: &[StreamMessage]) -> Vec<i64> {
    messages.iter().map(|m| m.queue_offset()).collect()
}

/// Lets the pull loops take the reports.
async fn settle() {
    sleep(Duration::from_millis(1)).await;
}

#[tokio::test(start_paused = true)]
async fn the_commit_is_the_smallest_unacknowledged_offset_whatever_the_ack_order() {
    let mut rig = Rig::new(ConsumeOptions::default());
    let q = queue(0);
    rig.source.append(&q, 5);
    let (lease, _runtime) = rig.hold_from(&q, 0).await;
    let mut held: Vec<Option<StreamMessage>> = rig.take(5).await.into_iter().map(Some).collect();
    assert_eq!(
        held.iter()
            .flatten()
            .map(|m| m.queue_offset())
            .collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );
    let mut ack = |offset: usize| held[offset].take().unwrap().ack();
    for offset in [3, 1, 4] {
        ack(offset);
    }
    settle().await;
    assert_eq!(lease.committed(), Some(0), "0 is not acknowledged");
    ack(0);
    settle().await;
    assert_eq!(lease.committed(), Some(2));
    ack(2);
    settle().await;
    assert_eq!(lease.committed(), Some(5));
    assert!(rig.next().await.is_none());
}

/// What the application does with a message in the property test.
#[derive(Debug, Clone, Copy)]
enum Settle {
    Ack,
    Drop,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Whatever the order of acknowledgements and drops, the committed offset is the smallest
    /// offset not acknowledged at every step, and a dropped message comes again until it is.
    #[test]
    fn the_commit_never_passes_a_message_not_acknowledged(
        order in Just((0..10i64).collect::<Vec<i64>>()).prop_shuffle(),
        settles in prop::collection::vec(prop_oneof![3 => Just(Settle::Ack), 1 => Just(Settle::Drop)], 10),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(async move {
            let mut rig = Rig::new(ConsumeOptions::default());
            let q = queue(0);
            rig.source.append(&q, 10);
            let (lease, _runtime) = rig.hold_from(&q, 0).await;
            let mut held: HashMap<i64, StreamMessage> =
                rig.take(10).await.into_iter().map(|m| (m.queue_offset(), m)).collect();
            let mut unacknowledged: BTreeSet<i64> = (0..10).collect();
            for (offset, how) in order.iter().zip(&settles) {
                let message = held.remove(offset).unwrap();
                match how {
                    Settle::Ack => {
                        message.ack();
                        unacknowledged.remove(offset);
                    }
                    Settle::Drop => drop(message),
                }
                settle().await;
                let expected = unacknowledged.first().copied().unwrap_or(10);
                prop_assert_eq!(lease.committed(), Some(expected));
            }
            // The dropped ones come again (counted once more), and are acknowledged now.
            sleep(Duration::from_secs(6)).await;
            let again = rig.take(unacknowledged.len()).await;
            let mut again_offsets = offsets(&again);
            again_offsets.sort();
            prop_assert_eq!(again_offsets, unacknowledged.iter().copied().collect::<Vec<_>>());
            prop_assert!(again.iter().all(|m| m.reconsume_times() == 1));
            for message in again {
                message.ack();
            }
            settle().await;
            prop_assert_eq!(lease.committed(), Some(10));
            Ok(())
        })?;
    }
}

#[tokio::test(start_paused = true)]
async fn a_message_handed_back_is_sent_back_and_no_longer_holds_the_commit() {
    let mut rig = Rig::new(ConsumeOptions::default());
    let q = queue(0);
    rig.source.append(&q, 3);
    let (lease, _runtime) = rig.hold_from(&q, 0).await;
    let mut held = rig.take(3).await.into_iter();
    held.next().unwrap().ack();
    held.next().unwrap().nack_with_delay_level(2).await;
    held.next().unwrap().ack();
    settle().await;
    assert_eq!(lease.committed(), Some(3));
    let sent: Vec<(i64, i32)> = rig.source.with(|s| {
        s.sent_back
            .iter()
            .map(|(m, level)| (m.queue_offset(), *level))
            .collect()
    });
    assert_eq!(sent, vec![(1, 2)]);
    assert!(
        rig.next().await.is_none(),
        "redelivered through the retry topic, not here"
    );
}

#[tokio::test(start_paused = true)]
async fn a_message_whose_send_back_fails_comes_again_here() {
    let mut rig = Rig::new(ConsumeOptions::default());
    let q = queue(0);
    rig.source.append(&q, 2);
    rig.source.with(|s| s.failing_send_backs = 1);
    let (lease, _runtime) = rig.hold_from(&q, 0).await;
    let mut held = rig.take(2).await.into_iter();
    held.next().unwrap().nack().await;
    held.next().unwrap().ack();
    settle().await;
    assert_eq!(lease.committed(), Some(0), "0 is not consumed");
    sleep(Duration::from_secs(5)).await;
    let again = rig.take(1).await;
    assert_eq!(offsets(&again), vec![0]);
    assert_eq!(again[0].reconsume_times(), 1);
    again.into_iter().for_each(StreamMessage::ack);
    settle().await;
    assert_eq!(lease.committed(), Some(2));
}

/// A queue taken away: the stream yields nothing more of it (not even what it buffered), the
/// hand-off waits for the messages yielded, and the final commit covers exactly the
/// acknowledged ones.
#[tokio::test(start_paused = true)]
async fn a_hand_off_waits_for_the_messages_yielded_and_commits_what_was_acknowledged() {
    let mut rig = Rig::new(ConsumeOptions::default());
    let q = queue(0);
    rig.source.append(&q, 8);
    let (lease, runtime) = rig.hold_from(&q, 0).await;
    let mut held = rig.take(3).await.into_iter();
    let (m0, m1, m2) = (
        held.next().unwrap(),
        held.next().unwrap(),
        held.next().unwrap(),
    );
    m0.ack();
    m2.ack();
    runtime.cancel();
    let removal = rig.remove(&q);
    assert!(
        rig.next().await.is_none(),
        "nothing more of a queue taken away"
    );
    assert!(!removal.is_finished(), "the hand-off waits for offset 1");
    sleep(Duration::from_secs(60)).await;
    assert!(!removal.is_finished());
    m1.ack();
    removal.await.unwrap();
    assert_eq!(
        lease.committed(),
        Some(3),
        "0 to 2, not the buffered 3 to 7"
    );
}

#[tokio::test(start_paused = true)]
async fn await_in_flight_bounds_the_hand_offs_wait_for_a_message_held() {
    let mut rig = Rig::new(ConsumeOptions {
        await_in_flight: Some(Duration::from_secs(5)),
        ..ConsumeOptions::default()
    });
    let q = queue(0);
    rig.source.append(&q, 3);
    let (lease, runtime) = rig.hold_from(&q, 0).await;
    let mut held = rig.take(3).await.into_iter();
    let (m0, m1, m2) = (
        held.next().unwrap(),
        held.next().unwrap(),
        held.next().unwrap(),
    );
    m0.ack();
    m2.ack();
    runtime.cancel();
    let started = Instant::now();
    rig.remove(&q).await.unwrap();
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    assert_eq!(lease.committed(), Some(1), "1 was abandoned");
    m1.ack();
    settle().await;
    assert_eq!(
        lease.committed(),
        Some(1),
        "a late acknowledgement moves nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn a_paused_queue_stops_pulling_and_still_yields_what_it_buffered() {
    let mut rig = Rig::new(ConsumeOptions::default());
    let (q0, q1) = (queue(0), queue(1));
    let _held0 = rig.hold_from(&q0, 0).await;
    let _held1 = rig.hold_from(&q1, 0).await;
    settle().await;
    assert!(rig.shared.paused.pause(&q0));
    // The pull waiting for q0 answers with what arrives: buffered, so yielded.
    rig.source.append(&q0, 2);
    let first = rig.take(2).await;
    assert_eq!(offsets(&first), vec![0, 1]);
    first.into_iter().for_each(StreamMessage::ack);
    rig.source.append(&q0, 2);
    rig.source.append(&q1, 1);
    let pulls_of_q0 = |rig: &Rig| rig.source.pulls().iter().filter(|p| p.1 == q0).count();
    let before = pulls_of_q0(&rig);
    let other = rig.take(1).await;
    assert_eq!(other[0].queue(), &q1, "the other queue goes on");
    sleep(Duration::from_secs(30)).await;
    assert!(rig.next().await.is_none());
    assert_eq!(pulls_of_q0(&rig), before, "no pull of a paused queue");
    assert!(rig.shared.paused.resume(&q0));
    let resumed = Instant::now();
    let rest = rig.take(2).await;
    assert_eq!(offsets(&rest), vec![2, 3]);
    assert!(resumed.elapsed() <= Duration::from_millis(100));
}

/// Backpressure: a stream nobody polls stops pulling once the queue's buffer is full.
#[tokio::test(start_paused = true)]
async fn a_stream_nobody_polls_stops_pulling_at_the_buffer_limit() {
    let mut rig = Rig::new(ConsumeOptions {
        queue_max_messages: 10,
        pull_batch_size: 4,
        ..ConsumeOptions::default()
    });
    let q = queue(0);
    rig.source.append(&q, 100);
    let (lease, _runtime) = rig.hold_from(&q, 0).await;
    sleep(Duration::from_secs(30)).await;
    assert_eq!(
        rig.source.pulls().len(),
        3,
        "4 + 4 + 4 messages: over the limit of 10"
    );
    let yielded = rig.take(12).await;
    assert_eq!(offsets(&yielded), (0..12).collect::<Vec<_>>());
    yielded.into_iter().for_each(StreamMessage::ack);
    sleep(Duration::from_secs(1)).await;
    assert_eq!(lease.committed(), Some(12));
    assert!(rig.source.pulls().len() > 3, "pulling again once drained");
}

#[tokio::test(start_paused = true)]
async fn a_lease_left_behind_by_a_seek_yields_nothing_more() {
    let mut rig = Rig::new(ConsumeOptions::default());
    let q = queue(0);
    rig.source.append(&q, 4);
    let (lease, _runtime) = rig.hold_from(&q, 0).await;
    let first = rig.take(1).await;
    rig.stale.mark(&lease);
    assert!(
        rig.next().await.is_none(),
        "1 to 3 are buffered but left behind"
    );
    first.into_iter().for_each(StreamMessage::ack);
    settle().await;
    assert_eq!(lease.committed(), Some(1), "only what was acknowledged");
}

/// A lease marked left behind for a moment only (a seek whose reset was refused unmarks it):
/// what the stream skipped meanwhile comes again after the local retry delay, and the commit
/// moves past it once acknowledged (found by review: the skipped messages stayed in the
/// loop's buffer, never yielded again, and held the queue's commit for the rest of the lease).
#[tokio::test(start_paused = true)]
async fn messages_skipped_while_a_refused_seek_marked_the_lease_come_again() {
    let mut rig = Rig::new(ConsumeOptions::default());
    let q = queue(0);
    rig.source.append(&q, 4);
    let (lease, _runtime) = rig.hold_from(&q, 0).await;
    let first = rig.take(1).await;
    rig.stale.mark(&lease);
    assert!(rig.next().await.is_none(), "1 to 3 skipped while marked");
    rig.stale.unmark(&lease);
    first.into_iter().for_each(StreamMessage::ack);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let again = rig.take(3).await;
    assert_eq!(
        again.iter().map(|m| m.queue_offset()).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    again.into_iter().for_each(StreamMessage::ack);
    settle().await;
    assert_eq!(lease.committed(), Some(4));
}

/// Four messages of a queue locked for an hour, held; the first taken (it holds no guard the
/// others wait for, but the next one's wait for its guard can yield: see [`poll_out_of_budget`]).
async fn locked_with_first_taken(
    rig: &mut Rig,
) -> (MessageQueue, QueueLease, Arc<DetachedLease>, StreamMessage) {
    let q = queue(0);
    rig.source.append(&q, 4);
    let detached = DetachedLease::locked(
        q.clone(),
        StartPosition::Offset(0),
        Instant::now() + Duration::from_secs(3600),
        Duration::from_secs(60),
    );
    let (lease, detached) = rig.hold(detached).await;
    let m0 = rig.take(1).await.pop().unwrap();
    (q, lease, detached, m0)
}

/// Polls `next` once with this task's cooperative budget spent: the stream's wait for a consume
/// guard yields there (a tokio lock's acquisition spends budget).
async fn poll_out_of_budget<F: Future + Unpin>(next: &mut F) -> std::task::Poll<F::Output> {
    let mut spent = 0;
    while tokio::task::coop::has_budget_remaining() && spent < 10_000 {
        tokio::task::consume_budget().await;
        spent += 1;
    }
    assert!(
        !tokio::task::coop::has_budget_remaining(),
        "a budget to spend"
    );
    std::future::poll_fn(|cx| std::task::Poll::Ready(Pin::new(&mut *next).poll(cx))).await
}

/// A seek that runs while the stream's wait for a locked queue's consume guard yields (here:
/// tokio's cooperative budget ran out at it): the message of the lease the seek left behind is
/// not yielded after the seek, stays uncommitted, and its guard is given back.
#[tokio::test(start_paused = true)]
async fn a_seek_while_the_stream_waits_for_a_guard_leaves_that_message_unyielded() {
    let mut rig = Rig::new(ConsumeOptions::default());
    let (_, lease, detached, m0) = locked_with_first_taken(&mut rig).await;
    let next = rig.stream.next();
    tokio::pin!(next);
    assert!(
        poll_out_of_budget(&mut next).await.is_pending(),
        "the guard's wait yielded"
    );
    // The seek (the stream's part of it).
    rig.stale.mark(&lease);
    let after = timeout(Duration::from_secs(1), &mut next).await;
    assert!(
        after.is_err(),
        "nothing of the lease left behind: {:?}",
        after.map(|m| m.map(|m| m.queue_offset()))
    );
    m0.ack();
    settle().await;
    assert_eq!(lease.committed(), Some(1), "only what was acknowledged");
    assert!(!detached.guard_held(), "the guard is given back");
}

/// The stream dropped while its wait for a locked queue's consume guard yields (tokio's
/// cooperative budget ran out at it): the message it began is not counted as yielded, so the
/// hand-off does not wait for it (found by review: without `await_in_flight` the hand-off, and
/// the shutdown, waited for it forever).
#[tokio::test(start_paused = true)]
async fn a_stream_dropped_while_it_waits_for_a_guard_leaves_the_hand_off_nothing_to_wait_for() {
    let mut rig = Rig::new(ConsumeOptions::default());
    let (q, lease, detached, m0) = locked_with_first_taken(&mut rig).await;
    {
        let next = rig.stream.next();
        tokio::pin!(next);
        assert!(
            poll_out_of_budget(&mut next).await.is_pending(),
            "the guard's wait yielded"
        );
    }
    // The application drops the stream there.
    rig.stream = Box::pin(futures_util::stream::empty());
    m0.ack();
    detached.cancel();
    let removal = rig.remove(&q);
    timeout(Duration::from_secs(60), removal)
        .await
        .expect("the hand-off waits for no message the stream never yielded")
        .unwrap();
    assert_eq!(lease.committed(), Some(1), "only what was acknowledged");
    assert!(!detached.guard_held(), "no guard is held");
}

/// An ordered stream over the pull loops, on a [`TestSource`].
struct OrderedRig {
    source: Arc<TestSource>,
    leases: Arc<Leases>,
    batches: Pin<Box<dyn futures_util::stream::FusedStream<Item = OrderedBatch> + Send>>,
    stop: CancellationToken,
}

impl OrderedRig {
    fn new(options: ConsumeOptions) -> Self {
        let source = Arc::new(TestSource::default());
        let (feed, received) = BatchFeed::new();
        let shared = orderly(source.clone(), Arc::new(feed), options);
        let stop = CancellationToken::new();
        Self {
            source,
            leases: Arc::new(Leases::new(shared)),
            batches: batches(received, stop.clone(), Arc::default()),
            stop,
        }
    }

    async fn next(&mut self) -> Option<OrderedBatch> {
        timeout(Duration::from_secs(5), self.batches.next())
            .await
            .ok()
            .flatten()
    }
}

impl Drop for OrderedRig {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn batch_offsets(batch: &OrderedBatch) -> Vec<(i64, i32)> {
    batch
        .into_iter()
        .map(|m| (m.queue_offset(), m.reconsume_times()))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn ordered_batches_come_in_order_one_at_a_time_under_the_guard_and_commit_exactly() {
    let mut rig = OrderedRig::new(ConsumeOptions {
        consume_batch_size: 2,
        ..ConsumeOptions::default()
    });
    let q = queue(0);
    rig.source.append(&q, 5);
    let detached = DetachedLease::locked(
        q.clone(),
        StartPosition::Offset(0),
        Instant::now() + Duration::from_secs(3600),
        Duration::from_secs(60),
    );
    let lease = detached.lease();
    rig.leases
        .queues_added("T", std::slice::from_ref(&lease))
        .await
        .unwrap();
    let first = rig.next().await.unwrap();
    assert_eq!(batch_offsets(&first), vec![(0, 0), (1, 0)]);
    assert!(
        detached.guard_held(),
        "the queue's guard is held while the batch is out"
    );
    assert!(rig.next().await.is_none(), "one batch of a queue at a time");
    first.commit();
    let second = rig.next().await.unwrap();
    assert_eq!(lease.committed(), Some(2));
    assert_eq!(batch_offsets(&second), vec![(2, 0), (3, 0)]);
    let suspended = Instant::now();
    second.suspend_for(Duration::from_secs(2));
    let again = rig.next().await.unwrap();
    assert_eq!(suspended.elapsed(), Duration::from_secs(2));
    assert_eq!(
        batch_offsets(&again),
        vec![(2, 1), (3, 1)],
        "the same messages again"
    );
    assert_eq!(lease.committed(), Some(2));
    again.commit();
    let last = rig.next().await.unwrap();
    assert_eq!(batch_offsets(&last), vec![(4, 0)]);
    drop(last);
    let dropped = rig.next().await.unwrap();
    assert_eq!(
        batch_offsets(&dropped),
        vec![(4, 1)],
        "a dropped batch is suspended"
    );
    dropped.commit();
    settle().await;
    assert_eq!(lease.committed(), Some(5));
    assert!(!detached.guard_held());
}

/// A batch queued for the stream while its lease was trusted, taken by the application only
/// after the lease's lock ran out (the process frozen, the application busy elsewhere): it is
/// withdrawn, not given, since another member may hold the queue by then (found by review:
/// trust was checked only when the batch was queued).
#[tokio::test(start_paused = true)]
async fn a_batch_queued_before_its_lock_ran_out_is_not_given_after() {
    let mut rig = OrderedRig::new(ConsumeOptions::default());
    let q = queue(0);
    rig.source.append(&q, 3);
    let detached = DetachedLease::locked(
        q.clone(),
        StartPosition::Offset(0),
        Instant::now() + Duration::from_secs(30),
        Duration::from_secs(20),
    );
    let lease = detached.lease();
    rig.leases
        .queues_added("T", std::slice::from_ref(&lease))
        .await
        .unwrap();
    settle().await;
    assert!(detached.guard_held(), "the batch is queued under the guard");
    sleep(Duration::from_secs(31)).await;
    assert!(!lease.is_trusted(Instant::now()));
    assert!(
        rig.next().await.is_none(),
        "a batch of a lease no longer trusted is not given"
    );
    assert_eq!(lease.committed().unwrap_or(0), 0, "nothing committed");
}

/// A queue taken away while its batch waits for a stream nobody polls: the hand-off does not
/// wait for it (it was never given), and commits before it.
#[tokio::test(start_paused = true)]
async fn a_queue_taken_away_withdraws_the_batch_nobody_took() {
    let mut rig = OrderedRig::new(ConsumeOptions::default());
    let q = queue(0);
    rig.source.append(&q, 3);
    let detached = DetachedLease::new(q.clone(), StartPosition::Offset(0));
    let lease = detached.lease();
    rig.leases
        .queues_added("T", std::slice::from_ref(&lease))
        .await
        .unwrap();
    settle().await;
    detached.cancel();
    let removed = [RemovedQueue {
        queue: q.clone(),
        reason: RemovalReason::Reassigned,
    }];
    timeout(
        Duration::from_secs(1),
        rig.leases.queues_removed("T", &removed),
    )
    .await
    .expect("the hand-off does not wait for a batch never given")
    .unwrap();
    assert_eq!(lease.committed(), Some(0));
    assert!(
        rig.next().await.is_none(),
        "the withdrawn batch is not given"
    );
}

/// A nack cancelled during its send-back (a `timeout`, a `select!`) hands the message back as
/// a message dropped unacknowledged: it comes again here, the commit moves past it once it is
/// acknowledged, and the queue's hand-off ends (found by review: the message was left
/// unsettled, the commit stuck before it and the hand-off waited forever).
#[tokio::test(start_paused = true)]
async fn a_nack_cancelled_during_its_send_back_hands_the_message_back() {
    let mut rig = Rig::new(ConsumeOptions::default());
    let q = queue(0);
    rig.source.append(&q, 3);
    rig.source.with(|s| s.hanging_send_backs = true);
    let (lease, _detached) = rig.hold_from(&q, 0).await;
    let mut held = rig.take(3).await.into_iter();
    let first = held.next().unwrap();
    assert!(
        timeout(Duration::from_secs(1), first.nack()).await.is_err(),
        "the nack is cancelled during its send-back"
    );
    rig.source.with(|s| s.hanging_send_backs = false);
    held.for_each(StreamMessage::ack);
    settle().await;
    let again = timeout(Duration::from_secs(30), rig.stream.next())
        .await
        .ok()
        .flatten()
        .expect("the message comes again");
    assert_eq!((again.queue_offset(), again.reconsume_times()), (0, 1));
    again.ack();
    settle().await;
    assert_eq!(lease.committed(), Some(3));
    let removal = rig.remove(&q);
    timeout(Duration::from_secs(60), removal)
        .await
        .expect("the hand-off ends")
        .unwrap();
}

/// The task polling an ordered stream ended while a handle keeps the consumer alive: the
/// batches nobody received are offered again unchanged, never counted as suspensions, so none
/// goes to the dead letters and the commit stays before them (found by review: each offer
/// counted as a suspension, and past `max_reconsume_times` every message was dead-lettered and
/// committed past, unseen).
#[tokio::test(start_paused = true)]
async fn batches_nobody_received_are_not_counted_towards_the_dead_letters() {
    let mut rig = OrderedRig::new(ConsumeOptions {
        max_reconsume_times: 2,
        ..ConsumeOptions::default()
    });
    let q = queue(0);
    rig.source.append(&q, 3);
    // The stream's receiving end is gone.
    rig.batches = Box::pin(futures_util::stream::empty());
    let detached = DetachedLease::new(q.clone(), StartPosition::Offset(0));
    let lease = detached.lease();
    rig.leases
        .queues_added("T", std::slice::from_ref(&lease))
        .await
        .unwrap();
    sleep(Duration::from_secs(120)).await;
    let sent_back = rig.source.with(|s| s.sent_back.len());
    assert_eq!(sent_back, 0, "nothing sent back or dead-lettered");
    assert_eq!(lease.committed().unwrap_or(0), 0, "nothing committed past");
}
