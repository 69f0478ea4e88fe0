//! Metrics, through the [`metrics`] facade: the runtime records them, and the
//! application chooses where they go by installing a recorder (an exporter such as
//! `metrics-exporter-prometheus`). The library installs none; without one, every call is a
//! no-op.
//!
//! Names follow the Prometheus conventions: a `rebalance_` prefix, `_total` on counters, base
//! units (`_seconds`, `_bytes`). Every metric carries the consumer `group`; the per-topic ones
//! the (plain, un-namespaced) `topic` too. Gauges go up and down by each consumer's own
//! contribution, so two consumers of one group in a process add up instead of overwriting each
//! other.
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | `rebalance_rounds_total` | counter | group, topic, reason | rebalance rounds, per topic they covered; `reason` is why the round ran (`start`, `interval`, `retry`, `membership_changed`, `route_changed`, `manual`, `subscription_changed`, `lock_retry`, `lock_lost`, `offset_reset`, `membership_regained`, joined by `+` when several; `none` for the shutdown's report) |
//! | `rebalance_round_duration_seconds` | histogram | group | how long each round took |
//! | `rebalance_queues_added_total` | counter | group, topic, reason | queues this client took, by the reason of the round that took them |
//! | `rebalance_queues_removed_total` | counter | group, topic, reason | queues this client gave up: `reassigned`, `topic_gone`, `unsubscribed`, `shutdown`, `lost`, `offset_reset`, `membership_lapsed` |
//! | `rebalance_queues_owned` | gauge | group, topic | queues held now |
//! | `rebalance_callback_failures_total` | counter | group, topic, callback | listener callbacks that returned an error, panicked or timed out (`queues_added`, `queues_removed`, `message_queue_changed`) |
//! | `rebalance_lock_refusals_total` | counter | group, topic | queue locks a broker refused (ordered or exclusive consumption), at a round or a renewal |
//!
//! These are recorded by every consumer. The consume layer records its own (pulls, messages,
//! buffers, lag) under the same conventions: `rebalance_consume::metrics`.
//!
//! [`describe`] gives an exporter each metric's help text and unit; call it once after
//! installing the recorder.

use ::metrics::{Label, Unit, counter, gauge, histogram};
use ::metrics::{describe_counter, describe_gauge, describe_histogram};

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use crate::assignment::{ReportKind, RoundReport};

/// Rebalance rounds, per topic covered (`group`, `topic`, `reason`).
pub const ROUNDS: &str = "rebalance_rounds_total";
/// How long each round took, in seconds (`group`).
pub const ROUND_DURATION: &str = "rebalance_round_duration_seconds";
/// Queues taken (`group`, `topic`, `reason`: the round's).
pub const QUEUES_ADDED: &str = "rebalance_queues_added_total";
/// Queues given up (`group`, `topic`, `reason`: the removal's).
pub const QUEUES_REMOVED: &str = "rebalance_queues_removed_total";
/// Queues held now (`group`, `topic`).
pub const QUEUES_OWNED: &str = "rebalance_queues_owned";
/// Listener callbacks that failed (`group`, `topic`, `callback`).
pub const CALLBACK_FAILURES: &str = "rebalance_callback_failures_total";
/// Queue locks refused (`group`, `topic`).
pub const LOCK_REFUSALS: &str = "rebalance_lock_refusals_total";

/// Gives the installed recorder each metric's help text and unit (see the
/// [module documentation](self)).
pub fn describe() {
    describe_counter!(ROUNDS, Unit::Count, "Rebalance rounds, per topic covered");
    describe_histogram!(ROUND_DURATION, Unit::Seconds, "Rebalance round duration");
    describe_counter!(QUEUES_ADDED, Unit::Count, "Queues taken by this client");
    describe_counter!(
        QUEUES_REMOVED,
        Unit::Count,
        "Queues given up by this client"
    );
    describe_gauge!(QUEUES_OWNED, Unit::Count, "Queues held by this client");
    describe_counter!(
        CALLBACK_FAILURES,
        Unit::Count,
        "Listener callbacks that failed, panicked or timed out"
    );
    describe_counter!(
        LOCK_REFUSALS,
        Unit::Count,
        "Queue locks refused by a broker"
    );
}

fn labels(group: &str, topic: &str) -> Vec<Label> {
    vec![
        Label::new("group", group.to_owned()),
        Label::new("topic", topic.to_owned()),
    ]
}

fn labels_with(group: &str, topic: &str, key: &'static str, value: String) -> Vec<Label> {
    let mut labels = labels(group, topic);
    labels.push(Label::new(key, value));
    labels
}

/// Records a round's or the shutdown's report: rounds, queues added and removed, queues held,
/// callback failures, and (rounds) the duration.
pub(crate) fn record_report(group: &str, report: &RoundReport, owned: &OwnedGauge) {
    let round = report.kind == ReportKind::Round;
    let reason = if report.reasons.names().next().is_none() {
        "none".to_owned()
    } else {
        report.reasons.to_string()
    };
    for topic in &report.topics {
        let t = topic.topic.as_str();
        if round {
            counter!(ROUNDS, labels_with(group, t, "reason", reason.clone())).increment(1);
        }
        if !topic.added.is_empty() {
            let added = topic.added.len() as u64;
            counter!(
                QUEUES_ADDED,
                labels_with(group, t, "reason", reason.clone())
            )
            .increment(added);
            gauge!(QUEUES_OWNED, labels(group, t)).increment(added as f64);
            owned.add(t, added);
        }
        for removed in &topic.removed {
            let why = removed.reason.as_str().to_owned();
            counter!(QUEUES_REMOVED, labels_with(group, t, "reason", why)).increment(1);
        }
        if !topic.removed.is_empty() {
            gauge!(QUEUES_OWNED, labels(group, t)).decrement(topic.removed.len() as f64);
            owned.remove(t, topic.removed.len() as u64);
        }
    }
    for failure in &report.callback_errors {
        let callback = failure.callback.name().to_owned();
        counter!(
            CALLBACK_FAILURES,
            labels_with(group, &failure.topic, "callback", callback)
        )
        .increment(1);
    }
    if round {
        histogram!(ROUND_DURATION, vec![Label::new("group", group.to_owned())])
            .record(report.duration);
    }
}

/// What one consumer counts in the queues-held gauge, per topic: the queues its reports added
/// less those they removed.
///
/// When the consumer dies without reporting (aborted, or its service panicked),
/// [`forget_owned`] takes out exactly this: not the last published assignment, which no longer
/// has the queues released between rounds (a lock lost at a renewal, an offset reset, a
/// lapsed membership) whose removal waits for the next report (found by review: they stayed
/// in the gauge for good after an `abort()`).
#[derive(Debug, Default)]
pub(crate) struct OwnedGauge(Mutex<HashMap<String, u64>>);

impl OwnedGauge {
    fn add(&self, topic: &str, count: u64) {
        let mut owned = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        *owned.entry(topic.to_owned()).or_default() += count;
    }

    fn remove(&self, topic: &str, count: u64) {
        let mut owned = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(held) = owned.get_mut(topic) {
            *held = held.saturating_sub(count);
            if *held == 0 {
                owned.remove(topic);
            }
        }
    }

    fn take(&self) -> HashMap<String, u64> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Takes what this consumer still counts out of the queues-held gauge: it died without
/// reporting the release of its queues.
pub(crate) fn forget_owned(group: &str, owned: &OwnedGauge) {
    for (topic, count) in owned.take() {
        gauge!(QUEUES_OWNED, labels(group, &topic)).decrement(count as f64);
    }
}

/// Counts `count` queue locks of `topic` refused.
pub(crate) fn lock_refusals(group: &str, topic: &str, count: usize) {
    if count > 0 {
        counter!(LOCK_REFUSALS, labels(group, topic)).increment(count as u64);
    }
}

#[cfg(test)]
mod tests {
    use crate::lease_terms::RemovalReason;
    use crate::wake::WakeReasons;

    /// The table above names every value the `reason` labels take (found by review: the
    /// reasons added with offset resets and membership lapses were missing), as does the guide's
    /// copy of it.
    #[test]
    fn the_tables_name_every_reason_label() {
        let tables = [
            include_str!("metrics.rs"),
            include_str!("../../../docs/guide/production.md"),
        ];
        let removals = [
            RemovalReason::Reassigned,
            RemovalReason::TopicGone,
            RemovalReason::Unsubscribed,
            RemovalReason::Shutdown,
            RemovalReason::Lost,
            RemovalReason::OffsetReset,
            RemovalReason::MembershipLapsed,
        ];
        let names = removals
            .iter()
            .map(|r| r.as_str())
            .chain(WakeReasons::NAMES.iter().map(|(_, name)| *name))
            .chain(["none"]);
        for name in names {
            for table in tables {
                assert!(
                    table.contains(&format!("`{name}`")),
                    "`{name}` not in a table"
                );
            }
        }
    }
}
