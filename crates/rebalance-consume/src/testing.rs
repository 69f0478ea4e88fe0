//! A scripted [`MessageSource`] and helpers for the consume layer's unit tests.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rebalance_core::MessageQueue;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::shared::{Mode, Shared};
use super::work::WorkQueue;
use super::{
    ConcurrentContext, ConcurrentListener, ConsumeOptions, ConsumeResult, Message, MessageSource,
    OrderlyContext, OrderlyListener, OrderlyResult, PullError, PullRequest, PullResult, SendBack,
};
use rebalance_runtime::QueueLease;
use rebalance_runtime::RemoteError;
use rebalance_runtime::StartPosition;
use rebalance_runtime::testing::DetachedLease;

/// A message source over per-queue logs, with scripted answers and failures.
#[derive(Default)]
pub(crate) struct TestSource {
    state: Mutex<State>,
    arrived: Notify,
}

#[derive(Default)]
pub(crate) struct State {
    pub(crate) logs: HashMap<MessageQueue, Vec<Message>>,
    pub(crate) min: HashMap<MessageQueue, i64>,
    /// Answers given before the log is read, in order.
    pub(crate) scripted: VecDeque<Result<PullResult, PullError>>,
    /// When set, pulls never answer.
    pub(crate) hang: bool,
    /// When set, offset lookups never answer.
    pub(crate) hang_lookups: bool,
    /// How many offset lookups panic before they answer again.
    pub(crate) panicking_lookups: usize,
    /// When set, a pull with nothing to return answers at once instead of holding.
    pub(crate) no_hold: bool,
    /// The commit offset every pull carried, in order.
    pub(crate) commits: Vec<Option<i64>>,
    /// (when, offset) of every pull started.
    pub(crate) pulls: Vec<(Instant, MessageQueue, i64)>,
    pub(crate) sent_back: Vec<(Message, i32)>,
    /// How many send-backs fail before they succeed again.
    pub(crate) failing_send_backs: usize,
    /// How many send-backs panic (after the failing ones) before they succeed again.
    pub(crate) panicking_send_backs: usize,
    /// While set, a send-back never answers.
    pub(crate) hanging_send_backs: bool,
}

impl TestSource {
    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap())
    }

    /// Appends `count` messages (bodies of 10 bytes) to `queue`'s log.
    pub(crate) fn append(&self, queue: &MessageQueue, count: usize) {
        self.with(|s| {
            let log = s.logs.entry(queue.clone()).or_default();
            let min = s.min.get(queue).copied().unwrap_or(0);
            for _ in 0..count {
                let offset = min + log.len() as i64;
                log.push(
                    Message::new(queue.clone(), offset, vec![0u8; 10])
                        .with_msg_id(format!("{queue:?}#{offset}")),
                );
            }
        });
        self.arrived.notify_waiters();
    }

    pub(crate) fn pulls(&self) -> Vec<(Instant, MessageQueue, i64)> {
        self.with(|s| s.pulls.clone())
    }

    fn read(&self, request: &PullRequest, first: bool) -> Option<Result<PullResult, PullError>> {
        self.with(|s| {
            if first {
                s.pulls
                    .push((Instant::now(), request.queue.clone(), request.offset));
                s.commits.push(request.commit_offset);
                if let Some(answer) = s.scripted.pop_front() {
                    return Some(answer);
                }
            }
            let min = s.min.get(&request.queue).copied().unwrap_or(0);
            let log = s.logs.get(&request.queue).map(Vec::as_slice).unwrap_or(&[]);
            let max = min + log.len() as i64;
            if request.offset < min || request.offset > max {
                return Some(Ok(PullResult::OffsetMoved {
                    next_offset: if request.offset < min { min } else { max },
                }));
            }
            let start = (request.offset - min) as usize;
            let end = (start + request.max_messages as usize).min(log.len());
            if start == end {
                return None;
            }
            let messages: Vec<Message> = log[start..end]
                .iter()
                .filter(|m| request.expression.matches(m.tags()))
                .cloned()
                .collect();
            Some(Ok(PullResult::Found {
                messages,
                next_offset: min + end as i64,
                min_offset: min,
                max_offset: max,
            }))
        })
    }
}

#[async_trait]
impl MessageSource for TestSource {
    async fn pull(&self, request: &PullRequest) -> Result<PullResult, PullError> {
        let deadline = Instant::now() + request.suspend;
        let mut first = true;
        loop {
            let arrived = self.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            if self.with(|s| s.hang) {
                std::future::pending::<()>().await;
            }
            let answer = self.read(request, first);
            first = false;
            if let Some(answer) = answer {
                return answer;
            }
            if Instant::now() >= deadline || self.with(|s| s.no_hold) {
                return Ok(PullResult::NoNewMessage {
                    next_offset: request.offset,
                });
            }
            tokio::select! {
                _ = arrived => {}
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    async fn send_back(&self, request: SendBack<'_>) -> Result<(), RemoteError> {
        if self.with(|s| s.hanging_send_backs) {
            std::future::pending::<()>().await;
        }
        let panics = self.with(|s| {
            let panics = s.failing_send_backs == 0 && s.panicking_send_backs > 0;
            if panics {
                s.panicking_send_backs -= 1;
            }
            panics
        });
        assert!(!panics, "the test source panics in send_back");
        self.with(|s| {
            if s.failing_send_backs > 0 {
                s.failing_send_backs -= 1;
                return Err(RemoteError::Unreachable("send-back refused".into()));
            }
            s.sent_back
                .push((request.message.clone(), request.delay_level));
            Ok(())
        })
    }

    async fn min_offset(&self, queue: &MessageQueue) -> Result<i64, RemoteError> {
        if self.with(|s| s.hang_lookups) {
            std::future::pending::<()>().await;
        }
        let panics = self.with(|s| {
            let panics = s.panicking_lookups > 0;
            s.panicking_lookups = s.panicking_lookups.saturating_sub(1);
            panics
        });
        assert!(!panics, "the test source panics in min_offset");
        Ok(self.with(|s| s.min.get(queue).copied().unwrap_or(0)))
    }

    async fn max_offset(&self, queue: &MessageQueue) -> Result<i64, RemoteError> {
        Ok(self.with(|s| {
            s.min.get(queue).copied().unwrap_or(0) + s.logs.get(queue).map_or(0, Vec::len) as i64
        }))
    }

    async fn offset_at(&self, queue: &MessageQueue, timestamp_ms: i64) -> Result<i64, RemoteError> {
        // Test convention: message i is stored at time i * 1000.
        let max = self.max_offset(queue).await?;
        Ok((timestamp_ms / 1000).min(max))
    }
}

/// A concurrent listener that records what it consumed, sleeps `delay` per batch, and fails
/// the first delivery of the offsets in `fail`.
#[derive(Default)]
pub(crate) struct Recorder {
    pub(crate) delay: Duration,
    pub(crate) fail: Vec<i64>,
    pub(crate) consumed: Mutex<Vec<(MessageQueue, i64, i32)>>,
}

impl Recorder {
    pub(crate) fn offsets(&self) -> Vec<i64> {
        self.consumed.lock().unwrap().iter().map(|c| c.1).collect()
    }
}

#[async_trait]
impl ConcurrentListener for Recorder {
    async fn consume(
        &self,
        messages: &[Message],
        _context: &mut ConcurrentContext,
    ) -> ConsumeResult {
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        let mut consumed = self.consumed.lock().unwrap();
        for m in messages {
            consumed.push((m.queue().clone(), m.queue_offset(), m.reconsume_times()));
        }
        let fail = messages
            .iter()
            .any(|m| m.reconsume_times() == 0 && self.fail.contains(&m.queue_offset()));
        if fail {
            ConsumeResult::ReconsumeLater
        } else {
            ConsumeResult::Success
        }
    }
}

/// Shared state for a concurrent consumer over `source`, with `workers` workers running until
/// `stop` is cancelled.
pub(crate) fn concurrent(
    source: Arc<TestSource>,
    listener: Arc<dyn ConcurrentListener>,
    options: ConsumeOptions,
    stop: &CancellationToken,
) -> Arc<Shared> {
    concurrent_with(source, listener, options, false, stop)
}

/// [`concurrent`], broadcasting or not.
pub(crate) fn concurrent_with(
    source: Arc<TestSource>,
    listener: Arc<dyn ConcurrentListener>,
    options: ConsumeOptions,
    broadcasting: bool,
    stop: &CancellationToken,
) -> Arc<Shared> {
    let work = Arc::new(WorkQueue::default());
    let shared = Arc::new(Shared::new(
        Arc::from("G"),
        source,
        options,
        broadcasting,
        Mode::Concurrent { work: work.clone() },
        HashMap::new(),
    ));
    for _ in 0..options.consume_concurrency {
        tokio::spawn(super::concurrent::run_worker(
            shared.clone(),
            listener.clone(),
            work.clone(),
            stop.clone(),
        ));
    }
    shared
}

/// An orderly listener that records what it consumed (and when), sleeps `delay` per batch,
/// suspends the offsets in `suspend` while their reconsume count is below `suspend_times`,
/// and checks that the lease's consume guard is held while it runs.
#[derive(Default)]
pub(crate) struct OrderlyRecorder {
    pub(crate) delay: Duration,
    pub(crate) suspend: Vec<i64>,
    pub(crate) suspend_times: i32,
    pub(crate) lease: Mutex<Option<Arc<DetachedLease>>>,
    pub(crate) consumed: Mutex<Vec<(Instant, i64, i32)>>,
    pub(crate) unguarded: Mutex<usize>,
}

impl OrderlyRecorder {
    pub(crate) fn offsets(&self) -> Vec<i64> {
        self.consumed.lock().unwrap().iter().map(|c| c.1).collect()
    }
}

#[async_trait]
impl OrderlyListener for OrderlyRecorder {
    async fn consume(&self, messages: &[Message], _context: &mut OrderlyContext) -> OrderlyResult {
        let lease = self.lease.lock().unwrap().clone();
        if let Some(lease) = lease
            && !lease.guard_held()
        {
            *self.unguarded.lock().unwrap() += 1;
        }
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        let mut consumed = self.consumed.lock().unwrap();
        for m in messages {
            consumed.push((Instant::now(), m.queue_offset(), m.reconsume_times()));
        }
        let suspend = messages.iter().any(|m| {
            self.suspend.contains(&m.queue_offset()) && m.reconsume_times() < self.suspend_times
        });
        if suspend {
            OrderlyResult::Suspend
        } else {
            OrderlyResult::Success
        }
    }
}

/// Shared state for an orderly consumer over `source`.
pub(crate) fn orderly(
    source: Arc<TestSource>,
    listener: Arc<dyn OrderlyListener>,
    options: ConsumeOptions,
) -> Arc<Shared> {
    Arc::new(Shared::new(
        Arc::from("G"),
        source,
        options,
        false,
        Mode::Orderly {
            listener,
            permits: Arc::new(tokio::sync::Semaphore::new(options.consume_concurrency)),
        },
        HashMap::new(),
    ))
}

/// A lease of `queue` starting at `start`, and what plays the runtime's part for it (its
/// `cancel()` takes the queue away).
pub(crate) fn lease(
    queue: &MessageQueue,
    start: StartPosition,
) -> (QueueLease, Arc<DetachedLease>) {
    let detached = Arc::new(DetachedLease::new(queue.clone(), start));
    (detached.lease(), detached)
}

pub(crate) fn queue(id: i32) -> MessageQueue {
    MessageQueue::new("T", "b", id)
}
