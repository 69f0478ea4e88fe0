//! The RebalanceService: the one task that owns the ProcessQueue table.
//!
//! It runs rebalance rounds (on a wake-up or a timer), renews the locks of ordered queues,
//! persists offsets, applies subscription changes, and at shutdown releases everything. Doing
//! all of that in one task means no two of them ever race on a queue.

mod directory_trouble;
mod locks;
mod offsets;
mod round;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use rebalance_core::MessageQueue;
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use self::offsets::PendingOffset;
use self::round::{ReleaseMode, Target};
use crate::assignment::{Assignment, ListenerCallbackError, RoundReport, TopicReport, Unbalanced};
use crate::callbacks::with_sources;
use crate::context::{Context, Subscriptions};
use crate::directory::Registration;
use crate::listener::RemovalReason;
use crate::route_sync::RouteTable;
use crate::wake::{Trigger, WakeReasons};

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
    /// What the application subscribed to.
    requested: Subscriptions,
    /// What the consumer subscribes to: `requested` and the group's retry topic
    /// ([`Context::effective`]).
    subscriptions: Subscriptions,
    routes: watch::Receiver<Arc<RouteTable>>,
    trigger: Arc<Trigger>,
    outputs: Outputs,
    /// Final offsets the store refused (locked queues only), retried with every persistence
    /// tick until their lock may have passed to someone else.
    pending_offsets: HashMap<MessageQueue, PendingOffset>,
    /// When the locks a round could not get (refused or not answered) are tried again:
    /// `lock_retry` after that round.
    lock_retry_at: Option<Instant>,
    /// Whether the running round could not get some lock.
    locks_to_retry: bool,
    /// Queues not held whose lock request went unanswered: the broker may have granted it.
    /// They are unlocked when they leave the share and at shutdown, so that a lost answer does
    /// not hold the next owner off until the broker's lock expires.
    unanswered_locks: HashSet<MessageQueue>,
    /// Per topic, since when the directory answers without this client.
    missing_since: HashMap<String, Instant>,
    /// When the rebalance last asked the heartbeat task for a heartbeat.
    last_heartbeat_request: Option<Instant>,
    round: u64,
    last_round_start: Option<Instant>,
    /// When the group will have been quiet for `membership_settle` since the last membership
    /// change notified (cleared when a round starts).
    membership_quiet_at: Option<Instant>,
    /// When the first membership change not yet acted upon was notified: settling lasts at most
    /// `rebalance_wait` from there (cleared when a round starts).
    settle_started: Option<Instant>,
    next_due: Instant,
    last_balanced: bool,
    callback_errors: Vec<ListenerCallbackError>,
}

impl Service {
    pub(crate) fn new(
        ctx: Arc<Context>,
        requested: Subscriptions,
        routes: watch::Receiver<Arc<RouteTable>>,
        trigger: Arc<Trigger>,
        outputs: Outputs,
        queues_token: CancellationToken,
    ) -> Self {
        let subscriptions = ctx.effective(&requested);
        let settle = ctx.intervals.membership_settle;
        Self {
            ctx,
            table: Default::default(),
            queues_token,
            requested,
            subscriptions,
            routes,
            trigger,
            outputs,
            pending_offsets: HashMap::new(),
            lock_retry_at: None,
            locks_to_retry: false,
            unanswered_locks: HashSet::new(),
            missing_since: HashMap::new(),
            last_heartbeat_request: None,
            round: 0,
            last_round_start: None,
            // A starting member is a membership change too: its first round waits for the
            // group to settle, like the rounds its arrival causes in the others.
            membership_quiet_at: Some(Instant::now() + settle),
            settle_started: Some(Instant::now()),
            next_due: Instant::now(),
            last_balanced: false,
            callback_errors: Vec::new(),
        }
    }

    /// Runs until `token` is cancelled (or every handle is gone: `requested`, the subscriptions
    /// the handles edit, closes), then releases everything once `helpers` (route sync,
    /// heartbeat) have stopped, and unregisters.
    pub(crate) async fn run(
        mut self,
        mut requested: watch::Receiver<Subscriptions>,
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
                changed = requested.changed() => match changed {
                    Ok(()) => {
                        let requested = requested.borrow_and_update().clone();
                        self.apply_requested(requested);
                    }
                    Err(_) => {
                        tracing::info!("every consumer handle was dropped; shutting down");
                        token.cancel();
                        break;
                    }
                },
                _ = self.trigger.notified() => {}
                changed = changed(&mut membership) => {
                    if changed {
                        let settle = self.ctx.intervals.membership_settle;
                        tracing::debug!(?settle, "directory says the group's membership changed");
                        self.membership_quiet_at = Some(Instant::now() + settle);
                        self.settle_started.get_or_insert_with(Instant::now);
                        self.trigger.wake(WakeReasons::MEMBERSHIP_CHANGED);
                    } else {
                        tracing::warn!("the directory's membership notifications ended; rounds now run on the timer only");
                        membership = None;
                    }
                }
                // Renewal and persistence come before the round: they are short and periodic,
                // and rounds that run back to back (each longer than `rebalance_min`, with a
                // wake-up during each) must not starve them.
                _ = renew.tick(), if renewing => self.renew_locks().await,
                _ = persist.tick() => self.persist_offsets().await,
                _ = tokio::time::sleep_until(run_at) => self.run_round().await,
            }
        }
        helpers.close();
        helpers.wait().await;
        self.shutdown().await;
    }

    /// When the next round may run: as soon as allowed if a wake-up is pending, else when the
    /// timer says; never sooner than `rebalance_min` after the previous round started, except
    /// for the retry of a refused lock, which runs `lock_retry` (500 ms) after the round that
    /// asked for it, as the Java client's `rebalanceLater(500)` does.
    ///
    /// While the group settles (`membership_settle` is set, and only membership changes, or
    /// this member's start, are pending), nothing runs until the group has been unchanged for
    /// `membership_settle`, or `rebalance_wait` after the change that began the burst: not the
    /// timers, not lock retries, which would plan from a group still changing.
    fn next_run_at(&self) -> Instant {
        let intervals = &self.ctx.intervals;
        let earliest = self
            .last_round_start
            .map_or_else(Instant::now, |s| s + intervals.rebalance_min);
        let pending = self.trigger.pending();
        let settling = WakeReasons::START | WakeReasons::MEMBERSHIP_CHANGED;
        if let (Some(quiet), Some(started)) = (self.membership_quiet_at, self.settle_started) {
            let only_changes = self.round == 0 || settling.contains(pending);
            if !intervals.membership_settle.is_zero() && !pending.is_empty() && only_changes {
                return quiet.min(started + intervals.rebalance_wait).max(earliest);
            }
        }
        let due = if pending.is_empty() {
            self.next_due
        } else {
            Instant::now()
        };
        let due = due.max(earliest);
        match self.lock_retry_at {
            Some(retry) => due.min(retry),
            None => due,
        }
    }

    /// Takes the subscriptions the application asked for through its handles.
    fn apply_requested(&mut self, requested: Subscriptions) {
        for (topic, tags) in &requested {
            if self.requested.get(topic) != Some(tags) {
                tracing::info!(topic, %tags, "subscribed");
            }
        }
        for topic in self.requested.keys() {
            if !requested.contains_key(topic) {
                tracing::info!(topic, "unsubscribed");
            }
        }
        self.requested = requested;
        self.publish_subscriptions();
    }

    /// Recomputes the effective subscriptions and publishes them: the registration (the next
    /// heartbeat goes at once) and, when the topics changed, the topics to poll routes for, with
    /// a round.
    fn publish_subscriptions(&mut self) {
        let subscriptions = self.ctx.effective(&self.requested);
        if subscriptions == self.subscriptions {
            return;
        }
        let topics_changed = !subscriptions.keys().eq(self.subscriptions.keys());
        self.subscriptions = subscriptions;
        let registration = self.ctx.registration(&self.subscriptions);
        self.outputs
            .registration
            .send_replace(Arc::new(registration));
        if topics_changed {
            let topics: BTreeSet<String> = self.subscriptions.keys().cloned().collect();
            self.outputs.subscriptions.send_replace(Arc::new(topics));
            self.trigger.wake(WakeReasons::SUBSCRIPTION_CHANGED);
        }
    }

    fn note_callback(&mut self, result: Result<(), ListenerCallbackError>) {
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
        self.membership_quiet_at = None;
        self.settle_started = None;
        let span = tracing::info_span!(
            "rebalance",
            group = %self.ctx.group,
            client = %self.ctx.client_id,
            round = self.round,
            reasons = %reasons,
        );
        let report = self.round_inner(reasons).instrument(span).await;
        // A lock refused early in a long round (a broker that times out, then other topics) is
        // retried `lock_retry` after the round, not at once: the retry would otherwise be due
        // before the round ends, and every round would run straight after the previous one.
        if std::mem::take(&mut self.locks_to_retry) {
            self.lock_retry_at = Some(Instant::now() + self.ctx.intervals.lock_retry);
        }
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
        let subscribed: Vec<String> = self.subscriptions.keys().cloned().collect();
        let subscriptions = &self.subscriptions;
        self.missing_since
            .retain(|t, _| subscriptions.contains_key(t));
        for (topic, target) in self.targets(&subscribed, &routes).await {
            if matches!(target, Target::NotYet) {
                continue;
            }
            let target = self.limit_absence(&topic, target, started);
            let mut report = topic_report(&topic);
            self.apply(&topic, target, &mut report).await;
            topics.push(report);
        }
        for topic in self.table.topics() {
            if !self.subscriptions.contains_key(&topic) {
                let mut report = topic_report(&topic);
                self.apply(
                    &topic,
                    Target::release_all(RemovalReason::Unsubscribed),
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
            self.request_heartbeat();
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
            .filter_map(|t| {
                let why = t.unbalanced.as_ref()?;
                Some(format!("{}: {}", t.topic, with_sources(why)))
            })
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

    /// Releases everything (waiting for ordered consumers up to `force_unlock_after`), retries
    /// refused offsets once more, and unregisters.
    async fn shutdown(&mut self) {
        let span =
            tracing::info_span!("shutdown", group = %self.ctx.group, client = %self.ctx.client_id);
        async {
            // Every topic's queues are announced (and the free ones released) first, then the
            // batches still in progress are waited for: all of them from about the same start,
            // so `force_unlock_after` bounds the whole shutdown rather than each topic in turn.
            for mode in [ReleaseMode::Try, ReleaseMode::Wait] {
                for topic in self.table.topics() {
                    let queues = self.table.queues_of(&topic);
                    let mut report = topic_report(&topic);
                    self.release(&topic, queues, RemovalReason::Shutdown, mode, &mut report)
                        .await;
                }
            }
            self.persist_offsets().await;
            self.unlock_unanswered(|_| true).await;
            if !self.pending_offsets.is_empty() {
                let mut given_up: Vec<(MessageQueue, i64)> = self
                    .pending_offsets
                    .drain()
                    .map(|(q, p)| (q, p.offset))
                    .collect();
                given_up.sort();
                tracing::error!(offsets = ?given_up, "shutting down with final offsets the store refused; their next owners resume from the last stored offsets");
                self.unlock_released(given_up.into_iter().map(|(q, _)| q).collect())
                    .await;
            }
            let registration = self.ctx.registration(&self.subscriptions);
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
