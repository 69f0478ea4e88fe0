//! [`Leases`]: the push consumer's [`QueueListener`]: a pull loop per lease, started at once,
//! awaited when its queue is removed, restarted when it stopped pulling.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::FutureExt;
use rebalance_core::MessageQueue;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::ConsumeOptions;
use super::activity::Activity;
use super::calls::PULL_GRACE;
use super::config::{PULL_ERROR_DELAY, PULL_EXPIRY};
use super::link::LeaseLink;
use super::pull_loop::PullLoop;
use super::shared::Shared;
use rebalance_runtime::{ListenerError, QueueLease, QueueListener, ReadMode, RemovedQueue};

/// How often loops are checked for having stopped pulling.
const WATCH_EVERY: Duration = Duration::from_secs(20);

/// How long a pull loop waiting for a pull's answer may go without activity before it counts
/// as stalled: [`PULL_EXPIRY`], or longer when the pull may take longer (held for the whole
/// `pull_suspend`, and cut short [`PULL_GRACE`] after it), with [`PULL_ERROR_DELAY`]'s margin.
fn stalled_pulling_after(options: &ConsumeOptions) -> Duration {
    let longest = options
        .pull_suspend
        .saturating_add(PULL_GRACE)
        .saturating_add(PULL_ERROR_DELAY);
    PULL_EXPIRY.max(longest)
}

/// The loop a lease's task runs now (a new one after each restart).
#[derive(Clone)]
struct Current {
    link: Arc<LeaseLink>,
    activity: Arc<Activity>,
}

/// One lease's task, and its current loop.
struct Running {
    lease: QueueLease,
    current: Arc<Mutex<Current>>,
    task: JoinHandle<()>,
}

impl Running {
    fn current(&self) -> Current {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The pull loops of a push consumer, by queue (a queue may briefly have a loop of an old,
/// cancelled lease next to its new one).
pub(crate) struct Leases {
    shared: Arc<Shared>,
    loops: Mutex<HashMap<MessageQueue, Vec<Running>>>,
    /// The loops handing their queues off, which `queues_removed` took out of `loops` to await
    /// them: [`abort_all`](Self::abort_all) aborts them too (found by review: a consumer
    /// aborted mid-release dropped that wait, and the loops ran on detached, an ordered batch
    /// committing after the "crash"). Locked after `loops`, never before.
    handing_off: Mutex<Vec<(tokio::task::AbortHandle, Arc<LeaseLink>)>>,
}

/// Runs the loops of `lease` one after the other: the first, then a fresh one each time the
/// current one retires (it stopped pulling) while the lease lives.
///
/// Not an `async fn`: that would keep a second copy of `pull_loop` in every parked task (its
/// arguments are moved into locals); the block uses the captured one in place. The lease is
/// the loop's own (a second copy would be kept for as long as the task is parked too).
#[allow(clippy::manual_async_fn)]
fn run_lease(
    shared: Arc<Shared>,
    current: Arc<Mutex<Current>>,
    mut pull_loop: PullLoop,
) -> impl Future<Output = ()> + Send {
    async move {
        loop {
            pull_loop.run().await;
            let retired = current
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .activity
                .is_retired();
            let lease = pull_loop.lease();
            if !retired || lease.is_cancelled() {
                return;
            }
            tracing::info!(queue = ?lease.queue(), "starting a new pull loop");
            let activity = Arc::new(Activity::new());
            let (next, link) = PullLoop::new(shared.clone(), lease.clone(), activity.clone());
            *current.lock().unwrap_or_else(PoisonError::into_inner) = Current { link, activity };
            pull_loop = next;
        }
    }
}

impl Leases {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self {
            shared,
            loops: Mutex::new(HashMap::new()),
            handing_off: Mutex::new(Vec::new()),
        }
    }

    fn start(&self, lease: QueueLease) -> Running {
        let activity = Arc::new(Activity::new());
        if lease.read_mode() == ReadMode::Pop {
            let (task, link) =
                crate::pop::spawn(self.shared.clone(), lease.clone(), activity.clone());
            let current = Arc::new(Mutex::new(Current { link, activity }));
            return Running {
                lease,
                current,
                task,
            };
        }
        let (pull_loop, link) = PullLoop::new(self.shared.clone(), lease.clone(), activity.clone());
        let current = Arc::new(Mutex::new(Current { link, activity }));
        let span = tracing::info_span!("pull_loop", queue = %lease.queue().topic, broker = %lease.queue().broker_name, id = lease.queue().queue_id);
        let run = run_lease(self.shared.clone(), current.clone(), pull_loop);
        let task = tokio::spawn(run.instrument(span));
        Running {
            lease,
            current,
            task,
        }
    }

    /// Retires the loops of live leases that have not pulled for [`PULL_EXPIRY`] (while a pull
    /// waits for its answer, longer when `pull_suspend` lets it take longer, see
    /// [`stalled_pulling_after`]) and have no batch in the listener: each stops pulling, lets its batches finish (a running listener
    /// call is never cancelled) and commits them; then its task starts a fresh loop, from the
    /// lease's committed offset. A removal awaits the task, so its hand-off covers both.
    ///
    /// A live lease whose task has ended (it can only have panicked: a loop returns only once
    /// its lease is cancelled) gets a new task at once, from the lease's committed offset: a
    /// held queue is never left unconsumed.
    pub(crate) fn restart_stalled(&self) -> usize {
        let stalled_pulling_after = stalled_pulling_after(&self.shared.options);
        let mut loops = self.loops.lock().unwrap_or_else(PoisonError::into_inner);
        let mut restarted = 0;
        for running in loops.values_mut().flatten() {
            if running.lease.is_cancelled() {
                continue;
            }
            if running.task.is_finished() {
                let ended = (&mut running.task).now_or_never();
                let panic = match ended {
                    Some(Err(e)) if e.is_panic() => {
                        rebalance_runtime::containment::panic_message(&*e.into_panic())
                    }
                    _ => "it ended".to_owned(),
                };
                tracing::error!(queue = ?running.lease.queue(), panic = %panic, "the pull loop of a held queue ended; starting it again from the committed offset");
                *running = self.start(running.lease.clone());
                restarted += 1;
                continue;
            }
            let Current { link, activity } = running.current();
            let idle = activity.idle();
            let stalled_after = if activity.is_pulling() {
                stalled_pulling_after
            } else {
                PULL_EXPIRY
            };
            if activity.is_retired() || link.in_flight() > 0 || idle < stalled_after {
                continue;
            }
            tracing::warn!(queue = ?running.lease.queue(), ?idle, "the pull loop has not pulled for too long; restarting it");
            activity.retire();
            restarted += 1;
        }
        restarted
    }

    /// Checks the loops every 20 s until `stop` is cancelled.
    pub(crate) async fn watch(self: Arc<Self>, stop: CancellationToken) {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(WATCH_EVERY) => {}
            }
            self.restart_stalled();
        }
    }

    /// The live lease of `queue`, when this consumer holds it.
    pub(crate) fn lease_of(&self, queue: &MessageQueue) -> Option<QueueLease> {
        let loops = self.loops.lock().unwrap_or_else(PoisonError::into_inner);
        loops
            .get(queue)?
            .iter()
            .map(|running| &running.lease)
            .find(|lease| !lease.is_cancelled())
            .cloned()
    }

    /// The links of the live leases' current loops.
    pub(crate) fn links(&self) -> Vec<Arc<LeaseLink>> {
        let loops = self.loops.lock().unwrap_or_else(PoisonError::into_inner);
        loops
            .values()
            .flatten()
            .filter(|running| !running.lease.is_cancelled())
            .map(|running| running.current().link)
            .collect()
    }

    /// Stops every loop at once, handing nothing off (a crash).
    pub(crate) fn abort_all(&self) {
        let loops = self.loops.lock().unwrap_or_else(PoisonError::into_inner);
        for running in loops.values().flatten() {
            running.task.abort();
            running.current().link.drop_lease();
        }
        let handing_off = self
            .handing_off
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for (task, link) in handing_off.iter() {
            task.abort();
            link.drop_lease();
        }
        // A commit waiting for the loops looks again (a loop whose task is gone is not waited
        // for).
        self.shared.commits.changed();
    }

    /// Ends the task of `queue`'s loops as a panic would (for tests).
    #[cfg(test)]
    pub(crate) fn kill_task_of(&self, queue: &MessageQueue) {
        let loops = self.loops.lock().unwrap_or_else(PoisonError::into_inner);
        for running in loops.get(queue).into_iter().flatten() {
            running.task.abort();
        }
    }

    /// How many loops run (for tests).
    #[cfg(test)]
    pub(crate) fn running(&self) -> usize {
        let loops = self.loops.lock().unwrap_or_else(PoisonError::into_inner);
        loops
            .values()
            .flatten()
            .filter(|r| !r.task.is_finished())
            .count()
    }
}

#[async_trait]
impl QueueListener for Leases {
    async fn queues_added(&self, _topic: &str, queues: &[QueueLease]) -> Result<(), ListenerError> {
        super::start_positions::resolve(&self.shared, queues).await;
        for lease in queues {
            self.shared.count_queue(lease.queue(), true);
            // Before the loop starts: a pause carried across the queue's reset holds from its
            // first pull on.
            self.shared.paused.added(lease.queue(), lease.after_reset());
            let running = self.start(lease.clone());
            self.loops
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(lease.queue().clone())
                .or_default()
                .push(running);
            // Again, now that the lease is found: a pause made between the two (a stream's
            // `pause` before it could find the lease, carried to it) holds too (found by
            // review: it was left carried, the queue not paused).
            if lease.after_reset() {
                self.shared.paused.added(lease.queue(), true);
            }
        }
        Ok(())
    }

    async fn queues_removed(
        &self,
        _topic: &str,
        queues: &[RemovedQueue],
    ) -> Result<(), ListenerError> {
        // Take the loops of the cancelled leases out first: no lock is held across the wait.
        let mut stopping = Vec::new();
        {
            let mut loops = self.loops.lock().unwrap_or_else(PoisonError::into_inner);
            for removed in queues {
                // A queue taken away is forgotten paused (as the Java lite pull consumer); one
                // released to restart from a reset offset (a seek) is the same queue if the
                // reset's own lease takes it back: its pause is carried to that lease, and
                // forgotten if the queue comes back any other way (see `PausedQueues::added`).
                if removed.reason == rebalance_runtime::RemovalReason::OffsetReset {
                    self.shared.paused.carry(&removed.queue);
                } else {
                    self.shared.paused.resume(&removed.queue);
                }
                let Some(running) = loops.get_mut(&removed.queue) else {
                    continue;
                };
                let (cancelled, live): (Vec<_>, Vec<_>) =
                    running.drain(..).partition(|r| r.lease.is_cancelled());
                *running = live;
                if running.is_empty() {
                    loops.remove(&removed.queue);
                }
                for r in &cancelled {
                    self.shared.count_queue(r.lease.queue(), false);
                }
                stopping.extend(cancelled);
            }
            // Under the loops' lock: `abort_all` finds each loop in one place or the other.
            let mut handing_off = self
                .handing_off
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            handing_off.retain(|(task, _)| !task.is_finished());
            handing_off.extend(
                stopping
                    .iter()
                    .map(|r| (r.task.abort_handle(), r.current().link)),
            );
        }
        for running in stopping {
            if let Err(e) = running.task.await
                && e.is_panic()
            {
                tracing::error!(queue = ?running.lease.queue(), "a pull loop panicked");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use async_trait::async_trait;
    use tokio::time::sleep;

    use super::*;
    use crate::testing::{TestSource, concurrent, lease, queue};
    use crate::{ConcurrentContext, ConcurrentListener, ConsumeOptions, ConsumeResult, Message};
    use rebalance_runtime::{RemovalReason, StartPosition};

    /// Offset 0 takes 1 s at its first delivery and forever at the next ones.
    #[derive(Default)]
    struct SlowFirst {
        deliveries: Mutex<Vec<i64>>,
    }

    #[async_trait]
    impl ConcurrentListener for SlowFirst {
        async fn consume(&self, messages: &[Message], _: &mut ConcurrentContext) -> ConsumeResult {
            let offset = messages[0].queue_offset();
            let earlier = {
                let mut deliveries = self.deliveries.lock().unwrap();
                deliveries.push(offset);
                deliveries.iter().filter(|&&o| o == offset).count() - 1
            };
            if offset == 0 {
                sleep(if earlier == 0 {
                    Duration::from_secs(1)
                } else {
                    Duration::from_secs(1000)
                })
                .await;
            }
            ConsumeResult::Success
        }
    }

    /// The loops of a concurrent consumer (`SlowFirst`) with `options` on `source`, holding queue
    /// 0 from `start`; with its lease, the lease's token and the consumer's stop.
    async fn holding_queue_0(
        source: &Arc<TestSource>,
        options: ConsumeOptions,
        start: StartPosition,
    ) -> (Leases, QueueLease, impl Sized, CancellationToken) {
        let stop = CancellationToken::new();
        let listener = Arc::new(SlowFirst::default());
        let shared = concurrent(source.clone(), listener, options, &stop);
        let leases = Leases::new(shared);
        let (lease, token) = lease(&queue(0), start);
        leases
            .queues_added("T", std::slice::from_ref(&lease))
            .await
            .unwrap();
        (leases, lease, token, stop)
    }

    /// With a `callback_timeout` under the 3 s the lookups may take, `queues_added` still
    /// returns in time, every loop started (they resolve their start themselves), even with
    /// lookups that never answer (found by review: the callback timed out before starting any
    /// loop, at every retry).
    #[tokio::test(start_paused = true)]
    async fn a_short_callback_timeout_still_starts_every_loop() {
        let source = Arc::new(TestSource::default());
        source.with(|s| s.hang_lookups = true);
        let work = Arc::new(crate::work::WorkQueue::default());
        let shared = Arc::new(
            Shared::new(
                Arc::from("G"),
                source.clone(),
                ConsumeOptions::default(),
                false,
                crate::shared::Mode::Concurrent { work },
                std::collections::HashMap::new(),
            )
            .with_callback_timeout(Duration::from_secs(1)),
        );
        let leases = Leases::new(shared);
        // The test source hangs its min offset lookups: the start of Earliest.
        let (q0, _t0) = lease(&queue(0), StartPosition::Earliest);
        let (q1, _t1) = lease(&queue(1), StartPosition::Earliest);
        let added =
            tokio::time::timeout(Duration::from_secs(1), leases.queues_added("T", &[q0, q1])).await;
        assert!(matches!(added, Ok(Ok(()))), "within the callback's second");
        assert_eq!(leases.running(), 2);
    }

    /// A consumer aborted while a release waits for an ordered batch (its service killed, the
    /// wait dropped): the batch is stopped with everything else, as a crash would, not left
    /// running to commit after it (found by review).
    #[tokio::test(start_paused = true)]
    async fn an_abort_during_a_hand_off_stops_the_loop_handing_off() {
        let source = Arc::new(TestSource::default());
        let q = queue(0);
        source.append(&q, 1);
        let recorder = Arc::new(crate::testing::OrderlyRecorder {
            delay: Duration::from_secs(30),
            ..Default::default()
        });
        let shared =
            crate::testing::orderly(source.clone(), recorder.clone(), ConsumeOptions::default());
        let leases = Arc::new(Leases::new(shared));
        let (lease, token) = lease(&q, StartPosition::Offset(0));
        leases
            .queues_added("T", std::slice::from_ref(&lease))
            .await
            .unwrap();
        sleep(Duration::from_secs(1)).await;
        token.cancel();
        let releasing = {
            let leases = leases.clone();
            let q = q.clone();
            tokio::spawn(async move { leases.queues_removed("T", &removed(&q)).await })
        };
        sleep(Duration::from_millis(100)).await;
        // The service is killed: its wait for the hand-off is dropped.
        releasing.abort();
        leases.abort_all();
        sleep(Duration::from_secs(60)).await;
        assert!(
            recorder.offsets().is_empty(),
            "the batch finished after the abort: {:?}",
            recorder.offsets()
        );
        assert!(source.with(|s| s.commits.iter().all(|c| *c != Some(1))));
    }

    fn removed(q: &MessageQueue) -> [RemovedQueue; 1] {
        [RemovedQueue {
            queue: q.clone(),
            reason: RemovalReason::Reassigned,
        }]
    }

    #[tokio::test(start_paused = true)]
    async fn an_old_loop_never_writes_into_a_newer_lease_of_its_queue() {
        let source = Arc::new(TestSource::default());
        let q = queue(0);
        source.append(&q, 5);
        let stop = CancellationToken::new();
        let listener = Arc::new(SlowFirst::default());
        let shared = concurrent(
            source.clone(),
            listener.clone(),
            ConsumeOptions::default(),
            &stop,
        );
        let leases = Leases::new(shared);
        let (first, first_token) = lease(&q, StartPosition::Offset(0));
        leases
            .queues_added("T", std::slice::from_ref(&first))
            .await
            .unwrap();
        sleep(Duration::from_millis(500)).await;
        // Removed and added again before the removal callback (two quick rounds).
        first_token.cancel();
        let (second, second_token) = lease(&q, StartPosition::Offset(0));
        leases
            .queues_added("T", std::slice::from_ref(&second))
            .await
            .unwrap();
        second_token.cancel();
        let (third, _third_token) = lease(&q, StartPosition::Offset(0));
        leases
            .queues_added("T", std::slice::from_ref(&third))
            .await
            .unwrap();
        leases.queues_removed("T", &removed(&q)).await.unwrap();
        assert_eq!(leases.running(), 1, "only the newest lease's loop runs");
        assert_eq!(
            first.committed(),
            Some(5),
            "the first loop finished its batches and committed them"
        );
        sleep(Duration::from_secs(5)).await;
        // The third loop's offset 0 is stuck in the listener: its commit must stay at 0,
        // whatever the older loops of the queue did.
        assert_eq!(third.committed(), Some(0));
        let first_after = first.committed();
        let second_after = second.committed();
        sleep(Duration::from_secs(60)).await;
        assert_eq!(
            (first.committed(), second.committed()),
            (first_after, second_after)
        );
        // One loop: one long-polled pull per 15 s once the queue is drained.
        let pulls = source.pulls().len();
        sleep(Duration::from_secs(60)).await;
        assert_eq!(source.pulls().len() - pulls, 4);
        stop.cancel();
    }

    /// A held queue whose loop's task ended (a panic, say) gets a new loop from its
    /// committed offset at the watcher's next look: it is never held and left unconsumed.
    #[tokio::test(start_paused = true)]
    async fn a_held_queue_whose_loop_ended_gets_a_new_one() {
        let source = Arc::new(TestSource::default());
        let q = queue(0);
        source.append(&q, 2);
        let stop = CancellationToken::new();
        let listener = Arc::new(SlowFirst::default());
        let shared = concurrent(source.clone(), listener, ConsumeOptions::default(), &stop);
        let leases = Leases::new(shared);
        let (lease, _token) = lease(&q, StartPosition::Offset(1));
        leases
            .queues_added("T", std::slice::from_ref(&lease))
            .await
            .unwrap();
        sleep(Duration::from_millis(10)).await;
        assert_eq!(lease.committed(), Some(2));
        leases.kill_task_of(&q);
        sleep(Duration::from_millis(10)).await;
        assert_eq!(leases.running(), 0);
        source.append(&q, 3);
        sleep(Duration::from_secs(1)).await;
        assert_eq!(lease.committed(), Some(2), "nobody consumes the queue");
        assert_eq!(leases.restart_stalled(), 1);
        sleep(Duration::from_millis(10)).await;
        assert_eq!(leases.running(), 1);
        assert_eq!(
            lease.committed(),
            Some(5),
            "the new loop consumes from the commit"
        );
        assert_eq!(leases.restart_stalled(), 0);
        stop.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn a_loop_that_stopped_pulling_is_restarted() {
        let source = Arc::new(TestSource::default());
        // A pull is cut short after 30 s; an offset lookup that never answers stalls the loop.
        source.with(|s| s.hang_lookups = true);
        let q = queue(0);
        let (leases, lease, _token, stop) =
            holding_queue_0(&source, ConsumeOptions::default(), StartPosition::Earliest).await;
        sleep(Duration::from_secs(119)).await;
        assert_eq!(leases.restart_stalled(), 0);
        sleep(Duration::from_secs(2)).await;
        source.with(|s| s.hang_lookups = false);
        assert_eq!(leases.restart_stalled(), 1);
        source.append(&q, 3);
        sleep(Duration::from_secs(2)).await;
        assert_eq!(lease.committed(), Some(3), "the restarted loop consumes");
        assert_eq!(leases.running(), 1);
        assert_eq!(leases.restart_stalled(), 0);
        stop.cancel();
    }

    /// An idle queue whose pull the source holds for a `pull_suspend` longer than
    /// [`PULL_EXPIRY`] (found by review): its loop counted as stalled while the pull was held,
    /// and was restarted every 2 minutes.
    #[tokio::test(start_paused = true)]
    async fn a_long_held_pull_is_not_a_stalled_loop() {
        let source = Arc::new(TestSource::default());
        let options = ConsumeOptions {
            pull_suspend: Duration::from_secs(200),
            ..ConsumeOptions::default()
        };
        let (leases, _lease, _token, stop) =
            holding_queue_0(&source, options, StartPosition::Offset(0)).await;
        sleep(Duration::from_secs(150)).await;
        assert_eq!(source.pulls().len(), 1, "one pull, held");
        assert_eq!(leases.restart_stalled(), 0, "the loop waits for its pull");
        sleep(Duration::from_secs(100)).await;
        assert_eq!(
            source.pulls().len(),
            2,
            "pulled again once the first answered"
        );
        assert_eq!(leases.restart_stalled(), 0);
        stop.cancel();
    }

    /// However long `pull_suspend`, a loop stuck elsewhere than in a pull (an offset lookup
    /// that never answers) is restarted after [`PULL_EXPIRY`].
    #[tokio::test(start_paused = true)]
    async fn a_stuck_lookup_is_restarted_whatever_the_pull_suspend() {
        let source = Arc::new(TestSource::default());
        source.with(|s| s.hang_lookups = true);
        let options = ConsumeOptions {
            pull_suspend: Duration::from_secs(3600),
            ..ConsumeOptions::default()
        };
        let (leases, _lease, _token, stop) =
            holding_queue_0(&source, options, StartPosition::Earliest).await;
        sleep(Duration::from_secs(121)).await;
        assert_eq!(leases.restart_stalled(), 1);
        stop.cancel();
    }
}
