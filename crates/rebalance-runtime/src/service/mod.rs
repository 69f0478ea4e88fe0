//! The RebalanceService: the one task that owns the ProcessQueue table.
//!
//! It runs rebalance rounds (on a wake-up or a timer), renews the locks of ordered queues,
//! persists offsets, applies subscription changes, and at shutdown releases everything. Doing
//! all of that in one task means no two of them ever race on a queue.

mod added_failure;
mod added_retries;
mod departed;
mod diff;
mod directory_trouble;
mod final_offsets;
mod inputs_memo;
mod lapse;
mod lock_book;
mod locks;
mod membership;
mod offsets;
mod reset;
mod round;
mod schedule;
mod server_side;
mod settle;

pub(crate) use self::reset::{OffsetReset, PENDING_RESETS, ServiceRequest};

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use self::added_retries::AddedRetries;
use self::diff::{Target, diff};
use self::final_offsets::FinalOffsets;
use self::inputs_memo::{AllocationId, InputsMemo};
use self::lock_book::LockBook;
use self::round::ReleaseMode;
use self::schedule::{Due, Schedule};
use crate::assignment::{
    Assignment, ListenerCallbackError, ReportKind, RoundReport, TopicReport, Unbalanced,
};
use crate::callbacks::with_sources;
use crate::context::{Context, Subscriptions};
use crate::directory::Registration;
use crate::lease_terms::RemovalReason;
use crate::routes::RouteTable;
use crate::wake::{Trigger, WakeReasons};

/// The channels the service publishes on.
pub(crate) struct Outputs {
    pub(crate) subscriptions: watch::Sender<Arc<BTreeSet<String>>>,
    pub(crate) registration: watch::Sender<Arc<Registration>>,
    pub(crate) assignment: watch::Sender<Arc<Assignment>>,
    pub(crate) rounds: watch::Sender<Arc<RoundReport>>,
    /// Asks the heartbeat task for a heartbeat now.
    pub(crate) heartbeat_now: Arc<tokio::sync::Notify>,
    /// The held queues' leases, for the running info.
    pub(crate) leases: watch::Sender<Arc<crate::lease::HeldLeases>>,
}

pub(crate) struct Service {
    ctx: Arc<Context>,
    table: crate::table::ProcessQueueTable,
    /// Parent of every queue's lease token.
    queues_token: Arc<CancellationToken>,
    /// What the application subscribed to.
    requested: Subscriptions,
    /// What the consumer subscribes to: `requested`, the group's retry topic
    /// ([`Context::effective`]) and the POP retry topics of the topics the brokers answer only
    /// PULL (see [`effective`](Self::effective)).
    subscriptions: Subscriptions,
    routes: watch::Receiver<Arc<RouteTable>>,
    trigger: Arc<Trigger>,
    outputs: Outputs,
    /// Final offsets the store refused (locked queues only), retried with every persistence
    /// tick until their lock may have passed to someone else.
    final_offsets: FinalOffsets,
    /// Unanswered lock requests, and whether a round must retry its locks.
    locks: LockBook,
    /// Per topic, since when the directory answers without this client.
    missing_since: HashMap<String, Instant>,
    /// When the rebalance last asked the heartbeat task for a heartbeat.
    last_heartbeat_request: Option<Instant>,
    /// Which topic the next membership check lists (the topics take turns).
    check_turn: usize,
    round: u64,
    schedule: Schedule,
    /// `queues_added` calls to make again.
    added_retries: AddedRetries,
    /// Whether the service must shut the consumer down (a `queues_added` failed under
    /// [`AddedFailurePolicy::ReleaseAndShutdown`](crate::config::AddedFailurePolicy)).
    stop_requested: bool,
    /// Queues released since the last report outside a round (lost with their lock at
    /// renewal), by topic: the next report lists them.
    released_between: Vec<TopicReport>,
    callback_errors: Vec<ListenerCallbackError>,
    /// Per topic, its queue list's hash and the inputs of its last balanced round.
    memo: InputsMemo,
    /// The consumer's allocation, as the memo names it.
    allocation_id: AllocationId,
    /// Operators' offset resets and requests to persist now, taken by [`run`](Self::run).
    resets: Option<tokio::sync::mpsc::Receiver<ServiceRequest>>,
    /// Queues released for an offset reset, and the offset each starts from when the next
    /// round takes it again: the store may not have it (a Rust broker 1.0 ignores a commit
    /// below its stored offset), so it is not read back from there.
    reset_starts: HashMap<rebalance_core::MessageQueue, i64>,
    /// Server-side assignment: the read modes set and answered.
    server: server_side::ServerSide,
    /// When the membership was last trusted again after a gap: every release begun before
    /// then writes no final offset (its progress may be behind the next owner's).
    regained_at: Option<Instant>,
    /// The members of the last complete view, and those missing since (for their locks).
    departures: departed::Departures,
    /// Held locked queues whose broker may have lost its locks (see
    /// [`lock_losses`](Self::lock_losses)) and no renewal answered since: until when the last
    /// lock granted before the loss was trusted, and the instant its trust was cut.
    at_risk: BTreeMap<rebalance_core::MessageQueue, (Instant, Instant)>,
    /// The locker's loss notifications, and the counts last acted upon (see
    /// [`lock_losses`](Self::lock_losses)): read by the loop, and between a round's topics.
    loss_watch: Option<watch::Receiver<crate::LockLosses>>,
    losses_seen: crate::LockLosses,
    /// During a round: the queues whose lock a renewal found lost, released once the round
    /// ends (not under the diffs it is applying). `None` outside rounds: released at once.
    lost_mid_round: Option<Vec<rebalance_core::MessageQueue>>,
}

impl Service {
    pub(crate) fn new(
        ctx: Arc<Context>,
        requested: Subscriptions,
        routes: watch::Receiver<Arc<RouteTable>>,
        trigger: Arc<Trigger>,
        outputs: Outputs,
        queues_token: CancellationToken,
        resets: tokio::sync::mpsc::Receiver<ServiceRequest>,
    ) -> Self {
        let subscriptions = ctx.effective(&requested);
        let schedule = Schedule::new(ctx.intervals, ctx.locks().is_some(), Instant::now());
        let allocation_id = AllocationId::of(&ctx.allocation);
        let table = crate::table::ProcessQueueTable::new(ctx.activity.clone());
        Self {
            ctx,
            table,
            queues_token: Arc::new(queues_token),
            requested,
            subscriptions,
            routes,
            trigger,
            outputs,
            final_offsets: FinalOffsets::default(),
            locks: LockBook::default(),
            missing_since: HashMap::new(),
            last_heartbeat_request: None,
            check_turn: 0,
            round: 0,
            schedule,
            added_retries: AddedRetries::default(),
            stop_requested: false,
            released_between: Vec::new(),
            callback_errors: Vec::new(),
            memo: InputsMemo::default(),
            allocation_id,
            resets: Some(resets),
            reset_starts: HashMap::new(),
            server: server_side::ServerSide::default(),
            regained_at: None,
            departures: departed::Departures::default(),
            at_risk: BTreeMap::new(),
            loss_watch: None,
            losses_seen: crate::LockLosses::default(),
            lost_mid_round: None,
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
        let mut membership = self.ctx.directory.membership_changes(&self.ctx.group);
        // Asked once the membership notifications are watched, so that a member registering
        // in between is seen one way or the other.
        if self.schedule.may_start_alone() {
            let alone = tokio::select! {
                biased;
                _ = token.cancelled() => false,
                alone = self.alone_in_group() => alone,
            };
            if alone {
                self.schedule.started_alone();
            }
        }
        // A broker whose connection was lost may have lost the locks it granted (see
        // `QueueLocker::lock_losses`); those reported before the start concern nothing held.
        self.loss_watch = self.ctx.locks().and_then(|locker| locker.lock_losses());
        self.losses_seen = self
            .loss_watch
            .as_mut()
            .map(|rx| rx.borrow_and_update().clone())
            .unwrap_or_default();
        let mut resets = self.resets.take();
        let activity = self.ctx.activity.clone();
        loop {
            let pending = self.trigger.pending();
            let added_retry = self.added_retries.next_at();
            // The schedule says when; this task sleeps (see `Schedule`).
            let wake_at = self.schedule.next_at(Instant::now(), pending, added_retry);
            tokio::select! {
                biased;
                _ = token.cancelled() => break,
                changed = changed(&mut self.loss_watch) => {
                    if changed {
                        self.take_lock_losses().await;
                    } else {
                        tracing::warn!("the locker's loss notifications ended; locks are trusted for lock_lifetime from their last grant");
                        self.loss_watch = None;
                    }
                }
                changed = requested.changed() => match changed {
                    Ok(()) => {
                        let requested = requested.borrow_and_update().clone();
                        self.apply_requested(requested);
                    }
                    Err(_) => {
                        tracing::warn!("every consumer handle was dropped; shutting down (to stop a consumer on purpose, call `shutdown().await` on its handle, which waits until its queues are released; to keep it running, keep a handle)");
                        token.cancel();
                        break;
                    }
                },
                _ = self.trigger.notified() => {}
                Some(request) = next_reset(&mut resets) => match request {
                    ServiceRequest::Reset(reset) => self.reset_offsets(reset).await,
                    ServiceRequest::Persist(answer) => {
                        let refused = self.persist_committed(|_| true, offsets::Persisting::Asked).await;
                        // The handle may have stopped waiting.
                        let _ = answer.send(refused);
                    }
                },
                _ = activity.persist_wake.notified() => self.persist_requested().await,
                _ = activity.membership.regained.notified() => self.regain_membership().await,
                changed = changed(&mut membership) => {
                    if changed {
                        tracing::debug!("directory says the group's membership changed");
                        self.schedule.membership_changed(Instant::now());
                        self.trigger.wake(WakeReasons::MEMBERSHIP_CHANGED);
                    } else {
                        tracing::warn!("the directory's membership notifications ended; rounds now run on the timer only");
                        membership = None;
                    }
                }
                () = sleep_until(wake_at) => {
                    match self.schedule.take_due(Instant::now(), pending, added_retry) {
                        Some(Due::Renewal) => self.renew_locks().await,
                        Some(Due::AtRisk) => self.renew_at_risk().await,
                        Some(Due::Persistence) => self.persist_offsets().await,
                        Some(Due::AddedRetry) => self.retry_added().await,
                        Some(Due::Round) => self.run_round().await,
                        Some(Due::MembershipCheck) => self.check_membership().await,
                        None => {}
                    }
                }
            }
            if self.stop_requested {
                token.cancel();
                break;
            }
        }
        helpers.close();
        helpers.wait().await;
        self.shutdown().await;
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
        let requested = &self.requested;
        self.server
            .retain_pop_retry(|topic| requested.contains_key(topic));
        self.publish_subscriptions();
    }

    /// What the consumer subscribes to now: [`Context::effective`], and with `*` the POP retry
    /// topic of each topic the brokers last answered only PULL (see `server_side.rs`).
    fn effective(&self) -> Subscriptions {
        let mut subscriptions = self.ctx.effective(&self.requested);
        for (_, retry) in self.server.pop_retry_topics() {
            subscriptions.entry(retry.to_string()).or_default();
        }
        subscriptions
    }

    /// Recomputes the effective subscriptions and publishes them: the registration (the next
    /// heartbeat goes at once) and, when the topics changed, the topics to poll routes for, with
    /// a round.
    fn publish_subscriptions(&mut self) {
        let subscriptions = self.effective();
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
        // A heartbeat accepted after a gap is acted upon before anything is added.
        self.regain_membership().await;
        let give_back = self.schedule.giving_back();
        let reasons = self
            .schedule
            .start_round(Instant::now(), self.trigger.take());
        self.round += 1;
        let span = tracing::info_span!(
            "rebalance",
            group = %self.ctx.group,
            client = %self.ctx.client_id,
            round = self.round,
            reasons = %reasons,
        );
        self.lost_mid_round = Some(Vec::new());
        let report = self.round_inner(reasons, give_back).instrument(span).await;
        // What the locks' chores between the round's topics found lost, released now.
        // Each once, and only those still held and still not trusted: a later renewal of the
        // same round may have been granted (found by review: released as lost all the same).
        let mut lost = self.lost_mid_round.take().unwrap_or_default();
        lost.sort();
        lost.dedup();
        let (table, now) = (&self.table, Instant::now());
        let lost: Vec<_> = lost
            .into_iter()
            .filter(|q| {
                table.get(q).is_some_and(|pq| {
                    pq.is_held() && pq.lock_valid_until().is_none_or(|u| u <= now)
                })
            })
            .collect();
        if !lost.is_empty() {
            self.release_lost(lost).await;
        }
        // The brokers' answers may have changed the POP retry topics to subscribe.
        self.publish_subscriptions();
        let retry_locks = self.locks.take_retry();
        // A topic the name server does not know is not asked for again every second: its
        // route appearing wakes a round (found by review: a misspelled topic made a round,
        // and its directory calls, every second for the consumer's whole life; the Java client
        // counts such a round as balanced). It is still reported, and `ready()` still fails.
        let settled = report
            .topics
            .iter()
            .all(|t| matches!(t.unbalanced, None | Some(Unbalanced::TopicNotFound)));
        self.schedule
            .end_round(Instant::now(), settled, retry_locks);
        if give_back {
            // The round that takes the shares, once the group has settled.
            self.trigger.wake(WakeReasons::MEMBERSHIP_CHANGED);
        }
        crate::metrics::record_report(&self.ctx.group, &report, &self.ctx.owned_gauge);
        self.outputs.rounds.send_replace(Arc::new(report));
    }

    /// One round; `give_back`: every queue is released (see `Schedule::membership_changed`)
    /// and nothing allocated.
    async fn round_inner(&mut self, reasons: WakeReasons, give_back: bool) -> RoundReport {
        let started = Instant::now();
        let routes = self.routes.borrow().clone();
        let mut topics = Vec::new();
        let subscribed: Vec<String> = self.subscriptions.keys().cloned().collect();
        let subscriptions = &self.subscriptions;
        self.missing_since
            .retain(|t, _| subscriptions.contains_key(t));
        self.memo.retain(|t| subscriptions.contains_key(t));
        let mut targets = if give_back {
            subscribed
                .iter()
                .map(|topic| {
                    self.memo.forget(topic);
                    (
                        topic.clone(),
                        Target::release_all(RemovalReason::Reassigned),
                    )
                })
                .collect()
        } else {
            self.targets(&subscribed, &routes).await
        };
        self.lock_chores().await;
        // Before any lock request: the locks of members gone for lock_lifetime are dropped.
        self.take_over_departed(&routes).await;
        for (topic, target) in &mut targets {
            if !matches!(target, Target::NotYet) {
                let decided = std::mem::replace(target, Target::NotYet);
                *target = self.limit_absence(topic, decided, started);
            }
        }
        for topic_diff in diff(&self.table, targets) {
            self.lock_chores().await;
            let report = self.apply(topic_diff).await;
            let reached = report.unbalanced.is_none();
            let stamp = self.table.stamp(&report.topic);
            self.memo.conclude(&report.topic, reached, stamp);
            topics.push(report);
        }
        // Unanswered lock requests of topics no longer subscribed: a topic of which nothing is
        // in the table has no diff (whose `apply` would unlock them), and the locks the
        // brokers may have granted would hold the queues' next owners off until they expire.
        self.unlock_unanswered(|q, _| {
            subscribed
                .binary_search_by(|t| t.as_str().cmp(&q.topic))
                .is_err()
        })
        .await;
        // A reset queue not taken again in the round after its release is someone else's now:
        // its next owner reads the store. Kept while its release is still under way.
        let table = &self.table;
        self.reset_starts
            .retain(|q, _| table.get(q).is_some_and(|pq| !pq.is_held()));
        // Only now, the queues taken back announced to the listener: a handle never sees a
        // queue neither held nor awaiting its take-back while it is being taken back.
        self.ctx.take_backs.set(self.reset_starts.keys());
        let balanced = topics.iter().all(|t| t.unbalanced.is_none());
        self.report_released_between(&mut topics);
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
            kind: ReportKind::Round,
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
        let (queues, shared) = if changed {
            (self.table.held(), self.table.shared(None))
        } else {
            let last = self.outputs.assignment.borrow();
            (last.queues.clone(), last.shared.clone())
        };
        let round = self.round;
        let assignment = Arc::new(Assignment {
            round,
            balanced,
            queues,
            shared,
        });
        if changed {
            let states = self.table.held_states(&assignment.queues);
            self.outputs
                .leases
                .send_replace(Arc::new(crate::lease::HeldLeases {
                    assignment: assignment.clone(),
                    states,
                }));
        }
        self.outputs.assignment.send_replace(assignment);
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
            let started = Instant::now();
            // Nothing is taken back any more (found by review: a handle kept seeing queues
            // awaiting their take-back after the shutdown).
            self.reset_starts.clear();
            self.ctx.take_backs.set(std::iter::empty());
            let mut reports: BTreeMap<String, TopicReport> = BTreeMap::new();
            for mode in [ReleaseMode::Try, ReleaseMode::Wait] {
                for topic in self.table.topics() {
                    let queues = self
                        .table
                        .queues_of(&topic)
                        .into_iter()
                        .map(|q| (q, RemovalReason::Shutdown))
                        .collect();
                    let report = reports
                        .entry(topic.clone())
                        .or_insert_with(|| topic_report(&topic));
                    self.release(&topic, queues, mode, report).await;
                }
            }
            self.persist_offsets().await;
            self.settle_unlocked_finals().await;
            self.unlock_unanswered(|_, _| true).await;
            if !self.final_offsets.is_empty() {
                let given_up = self.final_offsets.drain();
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
            let mut topics = reports.into_values().collect();
            self.report_released_between(&mut topics);
            self.publish_shutdown(topics, started);
        }
        .instrument(span)
        .await
    }
}

impl Service {
    /// Publishes the shutdown's report (the last one), with the callbacks that failed since
    /// the last report.
    fn publish_shutdown(&mut self, topics: Vec<TopicReport>, started: Instant) {
        let report = RoundReport {
            client_id: Some(self.ctx.client_id.clone()),
            kind: ReportKind::Shutdown,
            round: self.round,
            reasons: WakeReasons::NONE,
            balanced: false,
            topics,
            callback_errors: std::mem::take(&mut self.callback_errors),
            duration: started.elapsed(),
        };
        let removed = report.removed().count();
        tracing::info!(removed, duration = ?report.duration, "shutdown report");
        crate::metrics::record_report(&self.ctx.group, &report, &self.ctx.owned_gauge);
        self.outputs.rounds.send_replace(Arc::new(report));
    }

    /// Adds the queues released since the last report outside a round to a report's `topics`:
    /// before the report's own removals of the topic.
    fn report_released_between(&mut self, topics: &mut Vec<TopicReport>) {
        for between in std::mem::take(&mut self.released_between) {
            match topics.iter_mut().find(|t| t.topic == between.topic) {
                Some(report) => {
                    let own = std::mem::replace(&mut report.removed, between.removed);
                    report.removed.extend(own);
                }
                None => topics.push(TopicReport {
                    unbalanced: None,
                    ..between
                }),
            }
        }
    }
}

fn topic_report(topic: &str) -> TopicReport {
    TopicReport {
        topic: topic.to_string(),
        fingerprint: None,
        unbalanced: None,
        added: Vec::new(),
        removed: Vec::new(),
        shared: Vec::new(),
    }
}

/// The next operator's reset or persistence request; never completes once every handle is
/// gone.
async fn next_reset(
    resets: &mut Option<tokio::sync::mpsc::Receiver<ServiceRequest>>,
) -> Option<ServiceRequest> {
    match resets {
        Some(rx) => match rx.recv().await {
            Some(reset) => Some(reset),
            None => {
                *resets = None;
                std::future::pending().await
            }
        },
        None => std::future::pending().await,
    }
}

/// Sleeps until `at`, and not at all when `at` has come: tokio's timer rounds a deadline up to
/// its next millisecond tick, even one already past, so work due now (a round asked for, with
/// `rebalance_min` long past) would otherwise wait up to a millisecond for the timer.
async fn sleep_until(at: Instant) {
    if at > Instant::now() {
        tokio::time::sleep_until(at).await;
    }
}

/// Waits for a change (of the membership, or a lock loss); `false` when the channel closed.
/// Never completes when there is no channel.
async fn changed<T>(receiver: &mut Option<watch::Receiver<T>>) -> bool {
    match receiver {
        Some(rx) => rx.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}
