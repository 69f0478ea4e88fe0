//! One rebalance round: compute each topic's share and move the table towards it.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use rebalance_core::{ClientId, MessageQueue};
use tokio::time::Instant;

use super::diff::{Change, Target, TopicDiff};
use super::final_offsets::TakeBack;
use super::inputs_memo::Inputs;
use super::offsets::NextAnswer;
use super::{Service, topic_report};
use crate::allocation::{Allocation, TopicView, assign_leaderless};
use crate::assignment::{ListenerCallback, TopicReport, Unbalanced, fingerprint};
use crate::assignment_source::ReadMode;
use crate::callbacks::{allocation_contained, contained};
use crate::config::MessageModel;
use crate::error::RouteError;
use crate::lease_terms::{RemovalReason, RemovedQueue, StartPosition};
use crate::locker::LockOutcome;
use crate::routes::{RouteTable, TopicState};
use crate::subscription::is_retry_topic;
use crate::table::{NewQueue, Releasing, within_topic};

/// What a round sees of a topic.
enum Sight {
    /// Its queues and members: the allocation decides.
    Allocate(TopicView),
    /// Broadcasting: every queue of the topic, whoever the members are.
    Everything(Arc<[MessageQueue]>),
    /// The target follows without allocating.
    Decided(Target),
}

/// How a release waits for the consumer of an ordered queue to finish its batch.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum ReleaseMode {
    /// Try once; if busy, leave it for the next round (until `force_unlock_after`).
    Try,
    /// Wait for it, up to `force_unlock_after` after the release started (shutdown).
    Wait,
}

/// Each queue of `topic` once, in the answer's order. The allocation is outside input: a
/// strategy may name a queue twice, or queues of other topics (`by_config` answers its list
/// as configured), and a custom assignor may repeat a partition.
fn own_queues_once(topic: &str, answer: Arc<[MessageQueue]>) -> Arc<[MessageQueue]> {
    // Most strategies answer in queue order: then one walk proves it.
    let ascending = answer
        .windows(2)
        .all(|w| within_topic(&w[0], &w[1]).is_lt());
    if ascending && answer.iter().all(|q| &*q.topic == topic) {
        return answer;
    }
    let mut seen: HashSet<&MessageQueue> = HashSet::with_capacity(answer.len());
    let kept: Vec<&MessageQueue> = answer
        .iter()
        .filter(|q| &*q.topic == topic && seen.insert(*q))
        .collect();
    if kept.len() == answer.len() {
        return answer;
    }
    tracing::warn!(
        topic,
        answered = answer.len(),
        kept = kept.len(),
        "the allocation named queues twice or queues of other topics; taking each queue of this topic once"
    );
    kept.into_iter().cloned().collect()
}

impl Service {
    /// Every subscribed topic's target for this round. A topic whose inputs are those of its
    /// last balanced round, with its entries unchanged since, is [`Target::Unchanged`]: neither
    /// allocated nor diffed (with a group assignor, only when every topic is).
    pub(super) async fn targets(
        &mut self,
        topics: &[String],
        routes: &RouteTable,
    ) -> BTreeMap<String, Target> {
        let mut targets = BTreeMap::new();
        let mut views = BTreeMap::new();
        // Every member the lists name, unless one of them failed (for the departures).
        let mut members: Option<BTreeSet<ClientId>> = Some(BTreeSet::new());
        for topic in topics {
            match self.view(topic, routes).await {
                Sight::Allocate(view) => {
                    if let Some(members) = &mut members {
                        members.extend(view.ids.iter().cloned());
                    }
                    views.insert(topic.clone(), view);
                }
                Sight::Everything(queues) => {
                    let fingerprint = self.memo.observe(topic, &queues, &[]);
                    let inputs = self.inputs(Vec::new(), Arc::new([]));
                    let target = if self.memo.unchanged(topic, &inputs, self.table.stamp(topic)) {
                        Target::Unchanged { fingerprint }
                    } else {
                        Target::Share {
                            mine: queues.clone(),
                            all: queues,
                            fingerprint,
                        }
                    };
                    self.memo.begin(topic, inputs);
                    targets.insert(topic.clone(), target);
                }
                Sight::Decided(target) => {
                    if matches!(
                        target,
                        Target::Keep(
                            Unbalanced::DirectoryFailed(_)
                                | Unbalanced::NoConsumers
                                | Unbalanced::NotInConsumerList
                        )
                    ) {
                        members = None;
                    }
                    self.memo.forget(topic);
                    targets.insert(topic.clone(), target);
                }
            }
        }
        if let Some(members) = members.filter(|m| !m.is_empty()) {
            self.departures.observe(members, Instant::now());
        }
        match &self.ctx.allocation {
            Allocation::Strategy(strategy) => {
                let strategy = strategy.clone();
                for (topic, view) in views {
                    let fingerprint = self.memo.observe(&topic, &view.queues, &view.ids);
                    let inputs = self.inputs(view.ids, Arc::new([]));
                    if self
                        .memo
                        .unchanged(&topic, &inputs, self.table.stamp(&topic))
                    {
                        tracing::debug!(
                            topic,
                            "inputs unchanged since the last balanced round; not allocating"
                        );
                        targets.insert(topic.clone(), Target::Unchanged { fingerprint });
                        self.memo.begin(&topic, inputs);
                        continue;
                    }
                    let target = match allocation_contained(strategy.name(), || {
                        strategy.allocate_shared(
                            &self.ctx.group,
                            &self.ctx.client_id,
                            &view.queues,
                            &inputs.ids,
                        )
                    }) {
                        Ok(mine) => Target::Share {
                            all: view.queues,
                            mine: own_queues_once(&topic, mine),
                            fingerprint,
                        },
                        Err(e) => {
                            tracing::warn!(topic, strategy = strategy.name(), error = %e, "the strategy refused; keeping the current share");
                            Target::Keep(Unbalanced::StrategyFailed(e))
                        }
                    };
                    self.memo.begin(&topic, inputs);
                    targets.insert(topic, target);
                }
            }
            Allocation::Assignor(assignor) => {
                let assignor = assignor.clone();
                // The assignment of one topic may depend on the others (round robin's cursor):
                // decide only from a complete view, and skip only when no topic changed. A
                // topic the name server does not know is left out of the view, as a Kafka
                // assignor leaves a topic without metadata (it has no queue to assign): it
                // holds the others back no more (found by review).
                let incomplete = targets.values().any(
                    |t| matches!(t, Target::Keep(why) if !matches!(why, Unbalanced::TopicNotFound)),
                );
                let peers: Arc<[String]> = views.keys().cloned().collect();
                let mut fingerprints = BTreeMap::new();
                let mut unchanged = !incomplete && !views.is_empty();
                for (topic, view) in &views {
                    let fingerprint = self.memo.observe(topic, &view.queues, &view.ids);
                    let inputs = self.inputs(view.ids.clone(), peers.clone());
                    unchanged &= self.memo.unchanged(topic, &inputs, self.table.stamp(topic));
                    self.memo.begin(topic, inputs);
                    fingerprints.insert(topic.clone(), fingerprint);
                }
                if unchanged {
                    tracing::debug!(
                        "no topic's inputs changed since the last balanced round; not assigning"
                    );
                    targets.extend(
                        fingerprints
                            .into_iter()
                            .map(|(topic, fingerprint)| (topic, Target::Unchanged { fingerprint })),
                    );
                    return targets;
                }
                let result = if incomplete {
                    Err(Unbalanced::GroupViewIncomplete)
                } else {
                    allocation_contained(assignor.name(), || {
                        assign_leaderless(&assignor, &self.ctx.client_id, &views)
                    })
                    .map_err(|e| {
                        tracing::warn!(assignor = assignor.name(), error = %e, "the assignor refused; keeping the current share");
                        Unbalanced::StrategyFailed(e)
                    })
                };
                match result {
                    Ok(mut mine) => {
                        for (topic, view) in views {
                            let share = mine.remove(&topic).unwrap_or_default();
                            let share = own_queues_once(&topic, share.into());
                            let target = Target::Share {
                                all: view.queues,
                                mine: share,
                                fingerprint: fingerprints.get(&topic).copied().unwrap_or_default(),
                            };
                            targets.insert(topic, target);
                        }
                    }
                    Err(why) => {
                        targets.extend(views.into_keys().map(|t| (t, Target::Keep(why.clone()))))
                    }
                }
            }
            Allocation::Server(server) => {
                let server = server.clone();
                for (topic, view) in views {
                    // Observed for the fingerprint, never remembered: the brokers are asked
                    // every round.
                    let fingerprint = self.memo.observe(&topic, &view.queues, &view.ids);
                    let target = self.ask_brokers(&server, &topic, &view, fingerprint).await;
                    targets.insert(topic, target);
                }
            }
        }
        targets
    }

    /// The inputs of a topic's share besides its queues: `ids`, this consumer's allocation, and
    /// the topics allocated with it (`peers`, for a group assignor).
    fn inputs(&self, ids: Vec<ClientId>, peers: Arc<[String]>) -> Inputs {
        Inputs {
            ids,
            allocation: self.allocation_id,
            peers,
        }
    }

    /// What this client sees of `topic`: its queues and members to allocate from, or the target
    /// to follow without allocating (route unknown or gone, broadcasting, directory problems).
    async fn view(&self, topic: &str, routes: &RouteTable) -> Sight {
        let ctx = &self.ctx;
        let queues = match routes.topic(topic) {
            TopicState::Unknown(_)
                if is_retry_topic(topic) && self.table.entries_of(topic).next().is_none() =>
            {
                tracing::debug!(topic, "no route for the retry topic yet");
                return Sight::Decided(Target::NotYet);
            }
            TopicState::Unknown(why) => {
                let why = match why {
                    None => Unbalanced::RouteUnknown,
                    Some(RouteError::TopicNotFound(_)) => Unbalanced::TopicNotFound,
                    Some(RouteError::NameServer(e)) => Unbalanced::NameServerFailed(e.clone()),
                };
                return Sight::Decided(Target::Keep(why));
            }
            TopicState::Gone => {
                return Sight::Decided(Target::release_all(RemovalReason::TopicGone));
            }
            TopicState::Known { queues, .. } => queues.clone(),
        };
        if ctx.message_model == MessageModel::Broadcasting {
            return Sight::Everything(queues);
        }
        let mut ids: Vec<ClientId> = match ctx.directory.consumer_ids(&ctx.group, topic).await {
            Ok(ids) => ids,
            Err(e) => {
                tracing::warn!(topic, error = %e, "could not list the group's consumers; keeping the current share");
                return Sight::Decided(Target::Keep(Unbalanced::DirectoryFailed(e)));
            }
        };
        ids.sort();
        if ids.is_empty() {
            tracing::warn!(
                topic,
                "the directory lists no consumer; keeping the current share"
            );
            return Sight::Decided(Target::Keep(Unbalanced::NoConsumers));
        }
        if !ids.contains(&ctx.client_id) {
            tracing::warn!(
                topic,
                "this client is not in the consumer list (not registered yet, or expired); keeping the current share"
            );
            return Sight::Decided(Target::Keep(Unbalanced::NotInConsumerList));
        }
        if queues.is_empty() {
            tracing::warn!(
                topic,
                "the route has no readable queue; releasing the topic's queues"
            );
            return Sight::Decided(Target::Share {
                all: queues,
                mine: Arc::new([]),
                fingerprint: fingerprint(&[], &ids),
            });
        }
        Sight::Allocate(TopicView { queues, ids })
    }

    /// Makes `diff`'s changes: releases first (so that a queue retaken finishes its release
    /// before it is added again), then additions; reports what was done.
    pub(super) async fn apply(&mut self, diff: TopicDiff) -> TopicReport {
        let releases = diff.releases();
        let TopicDiff {
            topic,
            target,
            changes,
        } = diff;
        let topic = topic.as_str();
        let mut report = topic_report(topic);
        report.fingerprint = target.fingerprint();
        let gives_up = &target;
        self.unlock_unanswered(|q, table| {
            &*q.topic == topic && gives_up.gives_up(q, |q| table.get(q).is_some())
        })
        .await;
        let not_released = self
            .release(topic, releases, ReleaseMode::Try, &mut report)
            .await;
        let mut to_add = Vec::new();
        let mut still_releasing = 0;
        for change in changes {
            match change {
                Change::Add(q) => to_add.push(q),
                Change::Retake(q, _) if self.table.get(&q).is_none() => to_add.push(q),
                Change::Retake(..) => still_releasing += 1,
                Change::Release(..) | Change::Keep(_) => {}
            }
        }
        let not_added = self.add(topic, to_add, &mut report).await + still_releasing;
        match target {
            Target::Keep(why) => report.unbalanced = Some(why),
            Target::ReleaseAll { unbalanced, .. } => {
                report.unbalanced =
                    unbalanced.or((not_released > 0).then_some(Unbalanced::Pending {
                        not_added: 0,
                        not_released,
                    }));
            }
            Target::Share { all, mine, .. } => {
                if not_added > 0 || not_released > 0 {
                    report.unbalanced = Some(Unbalanced::Pending {
                        not_added,
                        not_released,
                    });
                }
                if !report.added.is_empty() || !report.removed.is_empty() {
                    let listener = self.ctx.listener.clone();
                    let changed = contained(
                        ListenerCallback::MessageQueueChanged,
                        topic,
                        self.ctx.intervals.callback_timeout,
                        listener.message_queue_changed(topic, &all, &mine),
                    )
                    .await;
                    self.note_callback(changed);
                }
            }
            Target::Unchanged { .. } | Target::NotYet => {}
        }
        if matches!(self.ctx.allocation, Allocation::Server(_)) {
            report.shared = self.table.shared(Some(topic));
        }
        report
    }

    /// Releases `queues` of `topic`: announce the held ones (for their reason), wait for the
    /// consumer (ordered), persist the last offset (not when the membership lapsed, nor when
    /// the queue's lock was no longer trusted as its release began), unlock, forget. Returns how
    /// many could not be finished yet.
    pub(super) async fn release(
        &mut self,
        topic: &str,
        queues: Vec<(MessageQueue, RemovalReason)>,
        mode: ReleaseMode,
        report: &mut TopicReport,
    ) -> usize {
        if queues.is_empty() {
            return 0;
        }
        let now = Instant::now();
        // Each queue the table has, with its release (begun now, or earlier); the ones begun
        // now are announced.
        let mut releasing = Vec::with_capacity(queues.len());
        let mut announced = Vec::new();
        for (queue, reason) in queues {
            let Some(release) = self.table.begin_release(&queue, now, reason) else {
                continue;
            };
            if release.started {
                announced.push(RemovedQueue {
                    queue: queue.clone(),
                    reason,
                });
            }
            releasing.push((queue, release));
        }
        if !announced.is_empty() {
            let mut reasons: Vec<&str> = announced.iter().map(|r| r.reason.as_str()).collect();
            reasons.dedup();
            let reason = reasons.join("+");
            tracing::info!(topic, count = announced.len(), %reason, queues = ?queues_of(&announced), "releasing queues");
            let listener = self.ctx.listener.clone();
            let result = contained(
                ListenerCallback::QueuesRemoved,
                topic,
                self.ctx.intervals.callback_timeout,
                listener.queues_removed(topic, &announced),
            )
            .await;
            self.note_callback(result);
            report.removed.extend(announced);
        }
        let locks = self.ctx.locks().cloned();
        let group = self.ctx.group.clone();
        // First which queues can go now (an ordered queue waits for its batch), then all their
        // final offsets in one call to the store, then forget and unlock them.
        let mut leaving = Vec::new();
        let mut busy = 0;
        for (queue, Releasing { release, state, .. }) in releasing {
            let write_final = self.may_write_final(&release);
            // A lock no longer trusted when the release began (the broker refused its renewal:
            // someone else holds it; or renewals went unanswered for `lock_lifetime`) may have a
            // new holder, whose progress may be further than ours: nothing lands over it, as no
            // retry of a refused final offset does.
            let lock_gone = locks.is_some() && state.lock_expired(release.since);
            if locks.is_some() {
                let deadline = release.since + self.ctx.intervals.force_unlock_after;
                let free = match mode {
                    ReleaseMode::Try => state.consume_lock_is_free(),
                    ReleaseMode::Wait => {
                        tokio::time::timeout_at(deadline, state.consume_lock_freed())
                            .await
                            .is_ok()
                    }
                };
                if !free {
                    if Instant::now() < deadline {
                        tracing::info!(topic, queue = ?queue, "queue is still consuming a batch; unlocking it later");
                        busy += 1;
                        continue;
                    }
                    tracing::warn!(topic, queue = ?queue, "queue kept consuming past force_unlock_after; releasing it anyway");
                }
            }
            if !write_final {
                tracing::info!(topic, queue = ?queue, "not writing the final offset: this client's membership lapsed since the queue's progress was made");
            } else if lock_gone {
                tracing::warn!(topic, queue = ?queue, "not writing the final offset: the queue's lock was no longer ours when it was released, and its next owner may be further; it resumes from the last stored offset");
            }
            leaving.push((queue, state, write_final && !lock_gone));
        }
        // Read once each is free to go: an ordered batch may have committed while waited for.
        let finals: Vec<(MessageQueue, i64)> = leaving
            .iter()
            .filter(|(_, _, write_final)| *write_final)
            .filter_map(|(q, state, _)| {
                self.table.final_offset_of(q, state).map(|o| (q.clone(), o))
            })
            .collect();
        let leaving: Vec<MessageQueue> = leaving.into_iter().map(|(q, _, _)| q).collect();
        let mut unsettled = HashSet::new();
        if !finals.is_empty() {
            let mut answers = self
                .ctx
                .offsets
                .persist_many(&group, &finals)
                .await
                .into_iter();
            for (queue, offset) in finals {
                let answer = answers.next_answer();
                let e = match answer {
                    Ok(()) => {
                        tracing::debug!(topic, queue = ?queue, offset, "final offset persisted");
                        continue;
                    }
                    Err(e) => e,
                };
                // Retrying is safe only while our lock keeps the next owner off the queue.
                let retry_until = self
                    .table
                    .get(&queue)
                    .and_then(|pq| pq.lock_valid_until())
                    .filter(|_| locks.is_some())
                    .filter(|&until| Instant::now() < until);
                match retry_until {
                    Some(until) => {
                        tracing::warn!(topic, queue = ?queue, offset, error = %e, retry_for = ?until.duration_since(Instant::now()), "could not persist the final offset; keeping the lock and retrying while it lasts");
                        self.final_offsets.keep(queue.clone(), offset, until);
                        unsettled.insert(queue);
                    }
                    // Without locks: not retried (it could land over the next owner's
                    // progress), but kept, so that the queue coming back to this client (its
                    // broker back in the route) resumes from it, not from the stale store.
                    None if locks.is_none() => {
                        tracing::warn!(topic, queue = ?queue, offset, error = %e, keep_for = ?super::final_offsets::UNLOCKED_KEPT_FOR, "could not persist the final offset; not retrying, since no lock keeps the next owner off the queue (it resumes from the last stored offset); keeping it in case the queue comes back here");
                        self.final_offsets
                            .keep_unlocked(queue, offset, Instant::now());
                    }
                    None => {
                        tracing::error!(topic, queue = ?queue, offset, error = %e, "could not persist the final offset; not retrying, since no lock keeps the next owner off the queue: it resumes from the last stored offset");
                    }
                }
            }
        }
        let mut to_unlock = Vec::new();
        for queue in &leaving {
            if let Err(e) = self.ctx.offsets.remove(&group, queue).await {
                tracing::warn!(topic, queue = ?queue, error = %e, "offset store could not forget the queue");
            }
            // Never unlock before the last offset is settled: the next owner would read an old one.
            if locks.is_some() && !unsettled.contains(queue) {
                to_unlock.push(queue.clone());
            }
        }
        let removed = leaving;
        self.table.remove_all(&removed);
        if let (Some(locker), false) = (locks, to_unlock.is_empty())
            && let Err(e) = locker.unlock(&group, &self.ctx.client_id, &to_unlock).await
        {
            tracing::warn!(topic, count = to_unlock.len(), error = %e, "unlock failed; the broker lock will expire");
        }
        busy
    }

    /// Adds `queues` of `topic`: lock (ordered), read the start offset, insert, announce.
    /// Returns how many could not be added.
    async fn add(
        &mut self,
        topic: &str,
        mut queues: Vec<MessageQueue>,
        report: &mut TopicReport,
    ) -> usize {
        if queues.is_empty() {
            return 0;
        }
        let wanted = queues.len();
        // The shutdown began during this round: a queue added now would get a lease cancelled
        // at birth and be released again at once (locked, announced twice, unlocked).
        if self.queues_token.is_cancelled() {
            tracing::debug!(topic, count = wanted, "shutting down; not adding queues");
            return wanted;
        }
        // Not vouched for (no heartbeat accepted for member_expiry, or none since a gap): the
        // others may hold these queues; a lease made now would not be trusted, and would be
        // released as soon as a heartbeat is accepted.
        if !self.membership_trusted() {
            tracing::info!(
                topic,
                count = wanted,
                "this client's membership is not vouched for (no heartbeat accepted for member_expiry); adding no queue until one is"
            );
            self.request_heartbeat();
            return wanted;
        }
        let group = self.ctx.group.clone();
        // Popped queues (server-side assignment in POP mode) are neither locked nor have an
        // offset of this client's: they start where the brokers' pop offset is.
        let popped: Vec<MessageQueue> = if matches!(self.ctx.allocation, Allocation::Server(_)) {
            let (popped, pulled) = std::mem::take(&mut queues)
                .into_iter()
                .partition(|q| self.server.mode_of(q) == ReadMode::Pop);
            queues = pulled;
            popped
        } else {
            Vec::new()
        };
        let mut lock_valid_until = None;
        if let Some(locker) = self.ctx.locks().cloned() {
            // The broker's lock runs from when it handled the request, at the latest from the
            // answer: trusting it from the request on never trusts it too long (a renewal
            // does the same).
            let asked_at = Instant::now();
            let outcome = match locker.lock(&group, &self.ctx.client_id, &queues).await {
                Ok(outcome) => outcome,
                Err(e) => {
                    tracing::warn!(topic, error = %e, "lock request failed at every broker");
                    LockOutcome::unanswered(&queues)
                }
            };
            // Someone else holds a refused queue's lock now: a final offset still pending for it
            // must not be retried over that client's progress.
            for q in &outcome.refused {
                if let Some(offset) = self.final_offsets.forget(q) {
                    tracing::warn!(topic, queue = ?q, offset, "dropping a final offset the store refused: the queue's lock belongs to another client now");
                }
            }
            crate::metrics::lock_refusals(&group, topic, outcome.refused.len());
            let before = queues.len();
            queues = self.locks.record_request(queues, &outcome);
            if queues.len() < before {
                tracing::info!(
                    topic,
                    refused = outcome.refused.len(),
                    unanswered = outcome.unanswered.len(),
                    retry_in = ?self.ctx.intervals.lock_retry,
                    "locks not granted; trying again after this round"
                );
            }
            lock_valid_until = Some(asked_at + self.ctx.intervals.lock_lifetime);
        }
        // Start positions first, then the inserts: the shutdown may begin during the lock
        // request or the offset reads, and then nothing is inserted (see below). A queue's start
        // is known without the store (a reset, a refused final offset taken back) or read from
        // it: all the reads in one call, answered in order.
        let mut known: Vec<KnownStart> = Vec::with_capacity(queues.len());
        let mut to_read = Vec::new();
        for queue in &queues {
            let start = self.start_without_store(topic, queue);
            if let KnownStart::Read { .. } = start {
                to_read.push(queue.clone());
            }
            known.push(start);
        }
        let mut read = if to_read.is_empty() {
            Vec::new()
        } else {
            self.ctx.offsets.read_many(&group, &to_read).await
        }
        .into_iter();
        let mut starts = Vec::with_capacity(queues.len() + popped.len());
        let pop_start = self.ctx.consume_from.start_without_offset(topic);
        starts.extend(popped.into_iter().map(|q| (q, pop_start, false, false)));
        let mut unread = Vec::new();
        for (queue, known) in queues.into_iter().zip(known) {
            let at_least = match known {
                KnownStart::Known(start, unsaved) => {
                    starts.push((queue, start, unsaved, false));
                    continue;
                }
                KnownStart::Reset(offset) => {
                    starts.push((queue, StartPosition::Offset(offset), true, true));
                    continue;
                }
                KnownStart::Read { at_least } => at_least,
            };
            let answer = read.next_answer();
            let stored = match answer {
                Ok(Some(offset)) if offset >= 0 => Some(offset),
                // RocketMQ's "none" (-1), as Java's `computePullFromWhere` reads it.
                Ok(Some(-1) | None) => None,
                // Any other negative is an error there ("Failed to query consume offset"), not
                // "none": a store that holds -7 must not start the queue at its end, skipping
                // its backlog without a word (found by review).
                Ok(Some(offset)) => {
                    tracing::error!(topic, queue = ?queue, offset, "the offset store holds an impossible offset for the queue (only -1 means none); adding the queue later");
                    unread.push(queue);
                    continue;
                }
                Err(e) => {
                    tracing::warn!(topic, queue = ?queue, error = %e, "could not read the start offset; adding the queue later");
                    unread.push(queue);
                    continue;
                }
            };
            // A refused final offset of this client's, kept without a lock, is a floor: every
            // message below it was consumed here, and a stored offset beyond it is another
            // member's progress, never gone back over.
            let (start, unsaved) = match (stored, at_least) {
                (Some(stored), Some(kept)) if stored >= kept => {
                    tracing::info!(topic, queue = ?queue, stored, kept, "taking the queue back: the stored offset is past the final offset the store refused; resuming from the stored one");
                    (StartPosition::Offset(stored), false)
                }
                (stored, Some(kept)) => {
                    tracing::info!(topic, queue = ?queue, ?stored, kept, "taking the queue back: resuming from the final offset the store refused, past the stored one");
                    (StartPosition::Offset(kept), true)
                }
                (Some(stored), None) => (StartPosition::Offset(stored), false),
                (None, None) => (self.ctx.consume_from.start_without_offset(topic), false),
            };
            starts.push((queue, start, unsaved, false));
        }
        // Not taken, so not locked either: a lock kept would hold the queue's next owner off
        // until it expired at the broker (the next round locks it again if it is still ours).
        // The same holds for every queue when the shutdown began during the awaits above: a
        // lease inserted now would be cancelled at birth. A queue whose refused final offset
        // is still pending stays locked: the shutdown settles it, then unlocks it.
        let shutting_down = self.queues_token.is_cancelled();
        if shutting_down {
            tracing::debug!(
                topic,
                count = wanted,
                "shutdown began while adding queues; not adding them"
            );
            unread.extend(
                starts
                    .drain(..)
                    .map(|(queue, ..)| queue)
                    .filter(|q| !self.final_offsets.contains(q)),
            );
        }
        if let (Some(locker), false) = (self.ctx.locks().cloned(), unread.is_empty())
            && let Err(e) = locker.unlock(&group, &self.ctx.client_id, &unread).await
        {
            tracing::warn!(topic, queues = ?unread, error = %e, "could not unlock queues that were not added; the broker locks will expire");
        }
        let new: Vec<NewQueue> = starts
            .into_iter()
            .map(|(queue, start, unsaved, after_reset)| {
                // A final offset taken back (resumed from, or passed by the stored one) is
                // settled by the new lease.
                self.final_offsets.forget(&queue);
                let read_mode = self.server.mode_of(&queue);
                NewQueue {
                    queue,
                    start,
                    unsaved,
                    read_mode,
                    after_reset,
                }
            })
            .collect();
        let leases = self
            .table
            .insert_all(new, &self.queues_token, lock_valid_until);
        if !leases.is_empty() {
            tracing::info!(topic, count = leases.len(), queues = ?leases.iter().map(|l| l.queue()).collect::<Vec<_>>(), "adding queues");
            let listener = self.ctx.listener.clone();
            let result = contained(
                ListenerCallback::QueuesAdded,
                topic,
                self.ctx.intervals.callback_timeout,
                listener.queues_added(topic, &leases),
            )
            .await;
            if let Err(error) = result {
                self.added_failed(topic, leases.clone(), 1, error);
            }
            report
                .added
                .extend(leases.iter().map(|l| l.queue().clone()));
        }
        wanted - leases.len()
    }

    /// Where `queue` starts when the offset store need not be asked: from an operator's reset
    /// offset, or from a final offset the store refused that is still ours to take back; or
    /// that the store must be read, with a refused final offset of an unlocked queue as the
    /// floor.
    fn start_without_store(&mut self, topic: &str, queue: &MessageQueue) -> KnownStart {
        let read = KnownStart::Read { at_least: None };
        // Released for an operator's reset: it starts from the reset offset, persisted like
        // a commit, whatever the store says.
        // The handles still see it awaiting its take-back until the round's end, after the
        // lease that takes it back was announced (`Service::round_inner`).
        if let Some(offset) = self.reset_starts.remove(queue) {
            tracing::info!(topic, queue = ?queue, offset, "taking the queue again from its reset offset");
            return KnownStart::Reset(offset);
        }
        // Our lock was granted again before the refused final offset's window closed: nobody
        // else held the queue meanwhile, so the value is still its latest progress. It stays
        // pending until the queue is inserted, so that a shutdown now still settles it.
        if self.final_offsets.is_empty() {
            return read;
        }
        match self.final_offsets.take_back(queue, Instant::now()) {
            TakeBack::Resume(offset) => {
                tracing::info!(topic, queue = ?queue, offset, "taking the queue back: resuming from the final offset the store refused");
                KnownStart::Known(StartPosition::Offset(offset), true)
            }
            TakeBack::AtLeast(offset) => KnownStart::Read {
                at_least: Some(offset),
            },
            TakeBack::Expired(offset) => {
                tracing::warn!(topic, queue = ?queue, offset, "dropping a final offset the store refused: its lock may have passed to another client meanwhile, or it was kept too long");
                read
            }
            TakeBack::Nothing => read,
        }
    }
}

/// A queue's start as known before the offset store is read.
enum KnownStart {
    /// Known without the store, and whether it is unsaved (still to be persisted).
    Known(StartPosition, bool),
    /// Released for an offset reset and taken back from the reset offset (unsaved, and the
    /// lease's `QueueLease::after_reset`).
    Reset(i64),
    /// Read from the store; `at_least`, a refused final offset of this client's kept without
    /// a lock, is the floor.
    Read { at_least: Option<i64> },
}

fn queues_of(removed: &[RemovedQueue]) -> Vec<&MessageQueue> {
    removed.iter().map(|r| &r.queue).collect()
}
