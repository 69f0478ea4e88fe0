//! What every pull loop and worker of a push consumer shares.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use rebalance_core::MessageQueue;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::activity::DenialLog;
use super::in_flight::InFlight;
use super::pause::PausedQueues;
use super::work::WorkQueue;
use super::{ConsumeOptions, MessageSource, OrderlyListener};
use crate::metrics::TopicMetrics;
use rebalance_runtime::subscription::TagExpression;

/// The listener, and how its calls are bounded.
pub(crate) enum Mode {
    /// Batches go to the work queue, consumed by `consume_concurrency` workers.
    Concurrent { work: Arc<WorkQueue> },
    /// Each queue's loop consumes its batches in order, holding one of `consume_concurrency`
    /// permits per batch (so a queue yields to waiting queues between batches).
    Orderly {
        listener: Arc<dyn OrderlyListener>,
        permits: Arc<Semaphore>,
    },
}

/// The state shared by a push consumer's loops and workers.
pub(crate) struct Shared {
    pub(crate) group: Arc<str>,
    pub(crate) source: Arc<dyn MessageSource>,
    pub(crate) options: ConsumeOptions,
    pub(crate) broadcasting: bool,
    pub(crate) mode: Mode,
    /// The batches in the listener now.
    pub(crate) in_flight: InFlight,
    /// Ordered batches still in the listener when their hand-off's `await_in_flight` was up:
    /// they run on (never cancelled, like concurrent batches), uncommitted, until they end or
    /// `abandon` (the shutdown's `await_in_flight` is up).
    pub(crate) outliving: TaskTracker,
    pub(crate) abandon: CancellationToken,
    /// The resources the loops were denied, each logged once.
    pub(crate) denials: DenialLog,
    /// The queues that do not pull for now (the stream consumer's `pause`).
    pub(crate) paused: PausedQueues,
    /// The tag expression of each subscribed topic (a topic missing here takes every tag).
    subscriptions: RwLock<HashMap<String, TagExpression>>,
    /// How many queues of each topic this client consumes (for per-topic limits).
    held: Mutex<HashMap<Arc<str>, usize>>,
    /// Each topic's metric handles ([`topic_metrics`](Self::topic_metrics)).
    metrics: Mutex<HashMap<String, Arc<TopicMetrics>>>,
    /// POP consumption, when configured: the source and options of the popped leases' loops.
    pub(crate) pop: Option<Arc<crate::pop::PopShared>>,
    /// The explicit commits waiting for the loops to take the acknowledgements made before.
    pub(crate) commits: Arc<crate::commit_waits::CommitWaits>,
    /// How long `queues_added` spends on the start positions' lookups (see
    /// `start_positions::resolve_within`).
    pub(crate) resolve_within: std::time::Duration,
}

impl Shared {
    pub(crate) fn new(
        group: Arc<str>,
        source: Arc<dyn MessageSource>,
        options: ConsumeOptions,
        broadcasting: bool,
        mode: Mode,
        subscriptions: HashMap<String, TagExpression>,
    ) -> Self {
        Self {
            group,
            source,
            options,
            broadcasting,
            mode,
            in_flight: InFlight::default(),
            outliving: TaskTracker::new(),
            abandon: CancellationToken::new(),
            denials: DenialLog::default(),
            paused: PausedQueues::default(),
            subscriptions: RwLock::new(subscriptions),
            held: Mutex::new(HashMap::new()),
            metrics: Mutex::new(HashMap::new()),
            pop: None,
            commits: Default::default(),
            resolve_within: crate::start_positions::RESOLVE_WITHIN,
        }
    }

    /// The same, its callbacks bounded by `callback_timeout`.
    pub(crate) fn with_callback_timeout(mut self, callback_timeout: std::time::Duration) -> Self {
        self.resolve_within = crate::start_positions::resolve_within(callback_timeout);
        self
    }

    /// The same, popping the leases the brokers assign by POP with `pop`.
    pub(crate) fn with_pop(mut self, pop: Option<crate::pop::PopShared>) -> Self {
        self.pop = pop.map(Arc::new);
        self
    }

    /// The metric handles of `topic`, registered on first use and shared by its queues.
    pub(crate) fn topic_metrics(&self, topic: &str) -> Arc<TopicMetrics> {
        let mut metrics = self.metrics.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(known) = metrics.get(topic) {
            return known.clone();
        }
        let made = Arc::new(TopicMetrics::new(&self.group, topic));
        metrics.insert(topic.to_string(), made.clone());
        made
    }

    /// The tag expression pulls of `topic` use.
    pub(crate) fn expression(&self, topic: &str) -> TagExpression {
        self.subscriptions
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(topic)
            .cloned()
            .unwrap_or_else(TagExpression::all)
    }

    /// Records a subscription's expression.
    pub(crate) fn set_expression(&self, topic: String, expression: TagExpression) {
        self.subscriptions
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(topic, expression);
    }

    /// Counts a queue in or out of its topic's share.
    pub(crate) fn count_queue(&self, queue: &MessageQueue, held: bool) {
        let mut counts = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let count = counts.entry(queue.topic.clone()).or_default();
        if held {
            *count += 1;
        } else {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.remove(&queue.topic);
            }
        }
    }

    /// How many queues of `topic` this client consumes (at least 1).
    pub(crate) fn queues_of(&self, topic: &str) -> usize {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(topic)
            .copied()
            .unwrap_or(1)
            .max(1)
    }

    pub(crate) fn orderly(&self) -> bool {
        matches!(self.mode, Mode::Orderly { .. })
    }
}
