//! What the messages of a simulation did, counted from the producer's and the listeners'
//! records.

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};

use super::traffic::MessageOutcome;

/// The message counts of a run (the summary line's `"messages"`).
///
/// Per message id: `d` deliveries, `f` of them failed by the listener. Then `unique` counts
/// the messages with `d > 0`, `retried` sums `min(f, d - 1)` (redeliveries that follow a
/// failure), `duplicates` sums `d - 1 - min(f, d - 1)` (deliveries beyond the first that no
/// failure asked for), so `consumed = unique + retried + duplicates`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MessageSummary {
    /// Messages the producer sent.
    pub produced: u64,
    /// Deliveries to a listener that it finished (failed ones included).
    pub consumed: u64,
    /// Messages delivered at least once.
    pub unique: u64,
    /// Deliveries beyond the first of a message, not counting redeliveries of failures.
    pub duplicates: u64,
    /// Messages sent, never consumed successfully and not dead-lettered.
    pub lost: u64,
    /// Redeliveries that followed a failure.
    pub retried: u64,
    /// Messages in the group's dead-letter topic.
    pub dead_lettered: u64,
    /// The longest time from a message's send to its first delivery (ms).
    pub max_delay_ms: u64,
}

impl MessageSummary {
    /// Counts the messages of a run.
    pub fn of(outcome: &MessageOutcome) -> Self {
        #[derive(Default)]
        struct Counts {
            delivered: u64,
            failed: u64,
            succeeded: bool,
            first_ms: Option<u64>,
        }
        let mut counts: HashMap<&str, Counts> = HashMap::new();
        for d in &outcome.deliveries {
            let c = counts.entry(d.msg_id.as_str()).or_default();
            c.delivered += 1;
            if d.failed {
                c.failed += 1;
            } else {
                c.succeeded = true;
            }
            c.first_ms = Some(c.first_ms.map_or(d.t_ms, |t| t.min(d.t_ms)));
        }
        let dead: HashSet<&str> = outcome.dead_lettered.iter().map(String::as_str).collect();
        let mut summary = MessageSummary {
            produced: outcome.produced.len() as u64,
            consumed: outcome.deliveries.len() as u64,
            dead_lettered: dead.len() as u64,
            ..MessageSummary::default()
        };
        for c in counts.values() {
            summary.unique += 1;
            let retried = c.failed.min(c.delivered - 1);
            summary.retried += retried;
            summary.duplicates += c.delivered - 1 - retried;
        }
        for p in &outcome.produced {
            let c = counts.get(p.msg_id.as_str());
            if !c.is_some_and(|c| c.succeeded) && !dead.contains(p.msg_id.as_str()) {
                summary.lost += 1;
            }
            if let Some(first) = c.and_then(|c| c.first_ms) {
                summary.max_delay_ms = summary.max_delay_ms.max(first.saturating_sub(p.t_ms));
            }
        }
        summary
    }

    /// The summary line's `"messages"` object.
    pub fn to_json(&self) -> Value {
        json!({
            "produced": self.produced,
            "consumed": self.consumed,
            "unique": self.unique,
            "duplicates": self.duplicates,
            "lost": self.lost,
            "retried": self.retried,
            "dead_lettered": self.dead_lettered,
            "max_delay_ms": self.max_delay_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use rebalance_core::MessageQueue;

    use super::*;
    use crate::sim::traffic::{Delivery, Produced};

    fn produced(id: &str, t_ms: u64) -> Produced {
        Produced {
            msg_id: id.into(),
            topic: "T".into(),
            t_ms,
        }
    }

    fn delivery(id: &str, t_ms: u64, failed: bool) -> Delivery {
        Delivery {
            t_ms,
            client: "c".into(),
            topic: "T".into(),
            queue: MessageQueue::new("T", "b", 0),
            offset: 0,
            msg_id: id.into(),
            reconsume_times: 0,
            failed,
        }
    }

    #[test]
    fn counts_retries_duplicates_losses_and_delays() {
        let outcome = MessageOutcome {
            produced: vec![
                produced("a", 0),
                produced("b", 100),
                produced("c", 200),
                produced("d", 300),
                produced("e", 400),
            ],
            deliveries: vec![
                delivery("a", 50, false),
                delivery("a", 900, false), // a duplicate
                delivery("b", 150, true),
                delivery("b", 10_150, false), // the retry of a failure
                delivery("c", 1200, true),    // failed, its retry never came: lost
                delivery("e", 400, true),     // failed, then dead-lettered
            ],
            dead_lettered: vec!["e".into()],
            send_failures: 0,
        };
        let s = MessageSummary::of(&outcome);
        assert_eq!(
            s,
            MessageSummary {
                produced: 5,
                consumed: 6,
                unique: 4,
                duplicates: 1,
                lost: 2, // c and d
                retried: 1,
                dead_lettered: 1,
                max_delay_ms: 1000, // c: sent at 200, first delivered at 1200
            }
        );
        assert_eq!(s.consumed, s.unique + s.retried + s.duplicates);
        assert_eq!(s.to_json()["max_delay_ms"], 1000);
    }
}
