//! The RebalanceService: the one task that owns the ProcessQueue table.
//!
//! It runs rebalance rounds (on a wake-up or a timer), renews the locks of ordered queues,
//! persists offsets, applies subscription changes, and at shutdown releases everything. Doing
//! all of that in one task means no two of them ever race on a queue.

mod round;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use rebalance_core::MessageQueue;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use self::round::{ReleaseMode, Target};
use crate::assignment::{Assignment, RoundReport, TopicReport, Unbalanced};
use crate::context::Context;
use crate::directory::Registration;
use crate::listener::RemovalReason;
use crate::route_sync::RouteTable;
use crate::wake::{Trigger, WakeReasons};

/// Requests from the consumer's handle.
pub(crate) enum Command {
    Subscribe(String, oneshot::Sender<bool>),
    Unsubscribe(String, oneshot::Sender<bool>),
}

/// The channels the service publishes on.
pub(crate) struct Outputs {
    pub(crate) subscriptions: watch::Sender<Arc<BTreeSet<String>>>,
    pub(crate) registration: watch::Sender<Arc<Registration>>,
    pub(crate) assignment: watch::Sender<Arc<Assignment>>,
    pub(crate) rounds: watch::Sender<Arc<RoundReport>>,
    /// Asks the heartbeat task for a heartbeat now.
    pub(crate) heartbeat_now: Arc<tokio::sync::Notify>,
}

pub(crate) struct Service {
    ctx: Arc<Context>,
    table: crate::table::ProcessQueueTable,
    /// Parent of every queue's lease token.
    queues_token: CancellationToken,
    subscriptions: BTreeSet<String>,
    routes: watch::Receiver<Arc<RouteTable>>,
    trigger: Arc<Trigger>,
    outputs: Outputs,
    /// Final offsets the store refused, retried with every persistence tick.
    pending_offsets: HashMap<MessageQueue, i64>,
    lock_retry_at: Option<Instant>,
    round: u64,
    last_round_start: Option<Instant>,
    next_due: Instant,
    last_balanced: bool,
    callback_errors: Vec<String>,
}

impl Service {
    pub(crate) fn new(
        ctx: Arc<Context>,
        subscriptions: BTreeSet<String>,
        routes: watch::Receiver<Arc<RouteTable>>,
        trigger: Arc<Trigger>,
        outputs: Outputs,
        queues_token: CancellationToken,
    ) -> Self {
        Self {
            ctx,
            table: Default::default(),
            queues_token,
            subscriptions,
            routes,
            trigger,
            outputs,
            pending_offsets: HashMap::new(),
            lock_retry_at: None,
            round: 0,
            last_round_start: None,
            next_due: Instant::now(),
            last_balanced: false,
            callback_errors: Vec::new(),
        }
    }

    /// Runs until `token` is cancelled (or every handle is gone), then releases everything once
    /// `helpers` (route sync, heartbeat) have stopped, and unregisters.
    pub(crate) async fn run(
        mut self,
        mut commands: mpsc::Receiver<Command>,
        token: CancellationToken,
        helpers: TaskTracker,
    ) {
        let intervals = self.ctx.intervals;
        let mut renew =
            tokio::time::interval_at(Instant::now() + intervals.lock_renew, intervals.lock_renew);
        renew.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut persist = tokio::time::interval_at(
            Instant::now() + intervals.persist_offsets,
            intervals.persist_offsets,
        );
        persist.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut membership = self.ctx.directory.membership_changes(&self.ctx.group);
        let renewing = self.ctx.locks().is_some();
        loop {
            let run_at = self.next_run_at();
            tokio::select! {
                biased;
                _ = token.cancelled() => break,
                command = commands.recv() => match command {
                    Some(command) => self.handle(command),
                    None => {
                        tracing::info!("every consumer handle was dropped; shutting down");
                        token.cancel();
                        break;
                    }
                },
                _ = self.trigger.notified() => {}
                changed = changed(&mut membership) => {
                    if changed {
                        tracing::debug!("directory says the group's membership changed");
                        self.trigger.wake(WakeReasons::MEMBERSHIP_CHANGED);
                    } else {
                        membership = None;
                    }
                }
                _ = tokio::time::sleep_until(run_at) => self.run_round().await,
                _ = renew.tick(), if renewing => self.renew_locks().await,
                _ = persist.tick() => self.persist_offsets().await,
            }
        }
        helpers.close();
        helpers.wait().await;
        self.shutdown().await;
    }

    /// When the next round may run: as soon as allowed if a wake-up is pending, else when the
    /// timer says; never sooner than `rebalance_min` after the previous round started.
    fn next_run_at(&self) -> Instant {
        let min = self.ctx.intervals.rebalance_min;
        let earliest = self.last_round_start.map_or_else(Instant::now, |s| s + min);
        let mut due = self.next_due;
        if !self.trigger.pending().is_empty() {
            due = Instant::now();
        }
        if let Some(retry) = self.lock_retry_at {
            due = due.min(retry);
        }
        due.max(earliest)
    }

    fn handle(&mut self, command: Command) {
        let (topic, done, subscribe) = match command {
            Command::Subscribe(t, done) => (t, done, true),
            Command::Unsubscribe(t, done) => (t, done, false),
        };
        let changed = if subscribe {
            self.subscriptions.insert(topic.clone())
        } else {
            self.subscriptions.remove(&topic)
        };
        if changed {
            tracing::info!(topic, subscribe, "subscriptions changed");
            self.publish_subscriptions();
            self.trigger.wake(WakeReasons::SUBSCRIPTION_CHANGED);
        }
        let _ = done.send(changed);
    }

    fn publish_subscriptions(&self) {
        let subscriptions = Arc::new(self.subscriptions.clone());
        self.outputs.subscriptions.send_replace(subscriptions);
        let registration = self.ctx.registration(self.subscriptions.iter().cloned());
        self.outputs
            .registration
            .send_replace(Arc::new(registration));
    }

    fn note_callback(&mut self, result: Result<(), String>) {
        if let Err(e) = result {
            self.callback_errors.push(e);
        }
    }

    async fn run_round(&mut self) {
        let mut reasons = self.trigger.take();
        if self
            .lock_retry_at
            .take()
            .is_some_and(|at| at <= Instant::now())
        {
            reasons |= WakeReasons::LOCK_RETRY;
        }
        if reasons.is_empty() {
            reasons = if self.last_balanced {
                WakeReasons::INTERVAL
            } else {
                WakeReasons::RETRY
            };
        }
        self.round += 1;
        let span = tracing::info_span!(
            "rebalance",
            group = %self.ctx.group,
            client = %self.ctx.client_id,
            round = self.round,
            reasons = %reasons,
        );
        let report = self.round_inner(reasons).instrument(span).await;
        self.last_balanced = report.balanced;
        let wait = if report.balanced {
            self.ctx.intervals.rebalance_wait
        } else {
            self.ctx.intervals.rebalance_min
        };
        self.next_due = Instant::now() + wait;
        self.outputs.rounds.send_replace(Arc::new(report));
    }

    async fn round_inner(&mut self, reasons: WakeReasons) -> RoundReport {
        let started = Instant::now();
        self.last_round_start = Some(started);
        let routes = self.routes.borrow().clone();
        let mut topics = Vec::new();
        let subscribed: Vec<String> = self.subscriptions.iter().cloned().collect();
        for (topic, target) in self.targets(&subscribed, &routes).await {
            let mut report = topic_report(&topic);
            self.apply(&topic, target, &mut report).await;
            topics.push(report);
        }
        for topic in self.table.topics() {
            if !self.subscriptions.contains(&topic) {
                let mut report = topic_report(&topic);
                self.apply(
                    &topic,
                    Target::ReleaseAll(RemovalReason::Unsubscribed),
                    &mut report,
                )
                .await;
                topics.push(report);
            }
        }
        let balanced = topics.iter().all(|t| t.unbalanced.is_none());
        let directory_trouble = topics.iter().any(|t| {
            matches!(
                t.unbalanced,
                Some(
                    Unbalanced::NotInConsumerList
                        | Unbalanced::NoConsumers
                        | Unbalanced::DirectoryFailed(_)
                )
            )
        });
        if directory_trouble {
            self.outputs.heartbeat_now.notify_one();
        }
        self.publish_assignment(balanced);
        let report = RoundReport {
            client_id: Some(self.ctx.client_id.clone()),
            round: self.round,
            reasons,
            balanced,
            topics,
            callback_errors: std::mem::take(&mut self.callback_errors),
            duration: started.elapsed(),
        };
        let added: usize = report.topics.iter().map(|t| t.added.len()).sum();
        let removed: usize = report.topics.iter().map(|t| t.removed.len()).sum();
        let fingerprints: BTreeMap<&str, String> = report
            .topics
            .iter()
            .filter_map(|t| {
                t.fingerprint
                    .map(|f| (t.topic.as_str(), format!("{f:016x}")))
            })
            .collect();
        let unbalanced: Vec<String> = report
            .topics
            .iter()
            .filter_map(|t| t.unbalanced.as_ref().map(|u| format!("{}: {u:?}", t.topic)))
            .collect();
        tracing::info!(
            balanced,
            added,
            removed,
            held = self.table.len(),
            ?fingerprints,
            ?unbalanced,
            duration = ?report.duration,
            "rebalance round done"
        );
        report
    }

    /// Publishes the assignment when the held set or the balance changed.
    fn publish_assignment(&mut self, balanced: bool) {
        let changed = self.table.take_changed();
        if !changed && self.outputs.assignment.borrow().balanced == balanced {
            return;
        }
        let queues = if changed {
            self.table.held()
        } else {
            self.outputs.assignment.borrow().queues.clone()
        };
        let round = self.round;
        self.outputs.assignment.send_replace(Arc::new(Assignment {
            round,
            balanced,
            queues,
        }));
    }

    /// Renews the locks of held ordered queues; a queue whose lock is gone, or not renewed for
    /// `lock_lifetime`, is released as lost (and taken again when its lock comes back).
    async fn renew_locks(&mut self) {
        let Some(locker) = self.ctx.locks().cloned() else {
            return;
        };
        let mut held: Vec<MessageQueue> = self
            .table
            .iter()
            .filter(|(_, pq)| pq.is_held())
            .map(|(q, _)| q.clone())
            .collect();
        held.sort();
        if held.is_empty() {
            return;
        }
        let now = Instant::now();
        let lifetime = self.ctx.intervals.lock_lifetime;
        let lost: Vec<MessageQueue> = match locker
            .lock(&self.ctx.group, &self.ctx.client_id, &held)
            .await
        {
            Ok(granted) => {
                let granted: std::collections::HashSet<MessageQueue> =
                    granted.into_iter().collect();
                for (q, pq) in self.table.iter_mut() {
                    if granted.contains(q) {
                        pq.last_locked = Some(now);
                    }
                }
                held.into_iter().filter(|q| !granted.contains(q)).collect()
            }
            Err(e) => {
                tracing::warn!(error = %e, "lock renewal failed");
                held.into_iter()
                    .filter(|q| {
                        self.table
                            .get(q)
                            .and_then(|pq| pq.last_locked)
                            .is_none_or(|at| now.duration_since(at) >= lifetime)
                    })
                    .collect()
            }
        };
        if lost.is_empty() {
            return;
        }
        tracing::warn!(count = lost.len(), queues = ?lost, "lost the lock of ordered queues; releasing them");
        let mut by_topic: BTreeMap<String, Vec<MessageQueue>> = BTreeMap::new();
        for q in lost {
            by_topic.entry(q.topic.to_string()).or_default().push(q);
        }
        for (topic, queues) in by_topic {
            let mut report = topic_report(&topic);
            self.release(
                &topic,
                queues,
                RemovalReason::Lost,
                ReleaseMode::Try,
                &mut report,
            )
            .await;
        }
        self.publish_assignment(false);
        self.trigger.wake(WakeReasons::LOCK_LOST);
    }

    /// Persists the offsets the application committed since the last time, and retries final
    /// offsets the store refused earlier.
    async fn persist_offsets(&mut self) {
        let due: Vec<(MessageQueue, i64)> = self
            .table
            .iter()
            .filter(|(_, pq)| pq.is_held())
            .filter_map(|(q, pq)| pq.unpersisted_offset().map(|o| (q.clone(), o)))
            .collect();
        for (queue, offset) in due {
            match self
                .ctx
                .offsets
                .persist(&self.ctx.group, &queue, offset)
                .await
            {
                Ok(()) => {
                    if let Some(pq) = self.table.get_mut(&queue) {
                        pq.persisted = Some(offset);
                    }
                }
                Err(e) => {
                    tracing::warn!(queue = ?queue, offset, error = %e, "offset persistence failed; will retry")
                }
            }
        }
        let pending: Vec<(MessageQueue, i64)> = self
            .pending_offsets
            .iter()
            .map(|(q, o)| (q.clone(), *o))
            .collect();
        for (queue, offset) in pending {
            match self
                .ctx
                .offsets
                .persist(&self.ctx.group, &queue, offset)
                .await
            {
                Ok(()) => {
                    tracing::info!(queue = ?queue, offset, "persisted a released queue's final offset");
                    self.pending_offsets.remove(&queue);
                }
                Err(e) => {
                    tracing::warn!(queue = ?queue, offset, error = %e, "final offset still not persisted")
                }
            }
        }
    }

    /// Releases everything (waiting for ordered consumers up to `force_unlock_after`), retries
    /// refused offsets once more, and unregisters.
    async fn shutdown(&mut self) {
        let span =
            tracing::info_span!("shutdown", group = %self.ctx.group, client = %self.ctx.client_id);
        async {
            let topics = self.table.topics();
            for topic in topics {
                let queues = self.table.queues_of(&topic);
                let mut report = topic_report(&topic);
                self.release(&topic, queues, RemovalReason::Shutdown, ReleaseMode::Wait, &mut report)
                    .await;
            }
            self.persist_offsets().await;
            if !self.pending_offsets.is_empty() {
                tracing::error!(offsets = ?self.pending_offsets, "shutting down with offsets the store refused");
            }
            let registration = self.ctx.registration(self.subscriptions.iter().cloned());
            match self.ctx.directory.unregister(&registration).await {
                Ok(()) => tracing::info!("unregistered from the group"),
                Err(e) => tracing::warn!(error = %e, "could not unregister; the directory will expire this client"),
            }
            self.publish_assignment(false);
        }
        .instrument(span)
        .await
    }
}

fn topic_report(topic: &str) -> TopicReport {
    TopicReport {
        topic: topic.to_string(),
        fingerprint: None,
        unbalanced: None,
        added: Vec::new(),
        removed: Vec::new(),
    }
}

/// Waits for a membership change; `false` when the directory's channel closed. Never completes
/// when there is no channel.
async fn changed(receiver: &mut Option<watch::Receiver<u64>>) -> bool {
    match receiver {
        Some(rx) => rx.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}
