//! Who held which queue when: the intervals `simulate --svg` draws, replayed from the run's
//! callbacks exactly as [`summarize`](super::summarize) replays them (a crashed client stops
//! holding anything when it crashes), so that the picture and the summary line agree.

use std::collections::{BTreeMap, HashMap};

use rebalance_core::{ClientId, MessageQueue};
use rebalance_runtime::RemovalReason;

use super::engine::{Change, Outcome, Status};

/// A stretch of simulated time, `[start_ms, end_ms)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Span {
    /// Where it starts (simulated ms since the start of the run).
    pub start_ms: u64,
    /// Where it ends.
    pub end_ms: u64,
}

impl Span {
    /// How long it lasts.
    pub fn len_ms(&self) -> u64 {
        self.end_ms.saturating_sub(self.start_ms)
    }
}

/// How a client stopped holding a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldEnd {
    /// Its `queues_removed` callback, with the reason.
    Released(RemovalReason),
    /// It crashed while holding the queue.
    Crashed,
    /// It still held the queue when the run ended.
    StillHeld,
}

impl HoldEnd {
    /// How the picture names it.
    pub fn describe(&self) -> String {
        match self {
            HoldEnd::Released(reason) => format!("released ({reason})"),
            HoldEnd::Crashed => "crashed".into(),
            HoldEnd::StillHeld => "held at the end".into(),
        }
    }
}

/// One client holding one queue, from its `queues_added` to its `queues_removed` (or crash,
/// or the end of the run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold {
    /// The client's index (its position in [`Outcome::clients`]).
    pub client: usize,
    /// When.
    pub span: Span,
    /// How it ended.
    pub end: HoldEnd,
}

/// A stretch during which two or more clients held the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    /// When.
    pub span: Span,
    /// The holders (client indices, ascending).
    pub clients: Vec<usize>,
}

/// One queue's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueTimeline {
    /// The queue.
    pub queue: MessageQueue,
    /// Every hold, by start (then client).
    pub holds: Vec<Hold>,
    /// Where nobody held it (no zero-length stretch; adjacent stretches merged).
    pub unowned: Vec<Span>,
    /// Where two or more clients held it (no zero-length stretch; adjacent stretches with the
    /// same holders merged).
    pub doubled: Vec<Overlap>,
}

/// The histories of some queues of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeline {
    /// The run's length (ms): every stretch ends by then.
    pub duration_ms: u64,
    /// One entry per queue asked for, in the order asked.
    pub queues: Vec<QueueTimeline>,
}

/// Replays the callbacks of `outcome` for `queues` (queues of the run; the others are skipped)
/// into their histories. Costs time and memory in the records and the holds of these queues
/// only, so a picture of a few queues of a huge run stays cheap.
pub fn timeline(outcome: &Outcome, queues: &[MessageQueue]) -> Timeline {
    let wanted: Vec<&MessageQueue> = queues
        .iter()
        .filter(|q| outcome.queues.contains(*q))
        .collect();
    let index_of: HashMap<&MessageQueue, usize> =
        wanted.iter().enumerate().map(|(i, q)| (*q, i)).collect();
    let client_index: HashMap<&ClientId, usize> = outcome
        .clients
        .iter()
        .map(|c| (&c.client, c.index))
        .collect();
    // Clients named by a callback but not in the list (never, from the engine) get indices
    // after every listed one, so that they are still drawn.
    let mut extra: BTreeMap<&ClientId, usize> = BTreeMap::new();
    let next = outcome
        .clients
        .iter()
        .map(|c| c.index + 1)
        .max()
        .unwrap_or(0);

    enum Step {
        Add(usize),
        Remove(usize, RemovalReason),
        Crash(usize),
    }
    let mut steps: Vec<(u64, Step, Vec<usize>)> = Vec::new();
    for r in &outcome.records {
        let rows: Vec<usize> = r
            .queues
            .iter()
            .filter_map(|q| index_of.get(q).copied())
            .collect();
        if rows.is_empty() {
            continue;
        }
        let client = match client_index.get(&r.client) {
            Some(i) => *i,
            None => {
                let n = extra.len();
                *extra.entry(&r.client).or_insert(next + n)
            }
        };
        let step = match r.change {
            Change::Added => Step::Add(client),
            Change::Removed(reason) => Step::Remove(client, reason),
        };
        steps.push((r.t_ms, step, rows));
    }
    for c in &outcome.clients {
        if let (Status::Crashed, Some(at)) = (c.status, c.stopped_ms) {
            steps.push((at, Step::Crash(c.index), Vec::new()));
        }
    }
    // Stable: callbacks keep their order; a crash goes after the callbacks of its instant.
    steps.sort_by_key(|(t, _, _)| *t);

    let end_ms = outcome.duration_ms;
    // Per row: the open holds (client, since) and the closed ones.
    let mut open: Vec<Vec<(usize, u64)>> = vec![Vec::new(); wanted.len()];
    let mut closed: Vec<Vec<Hold>> = vec![Vec::new(); wanted.len()];
    let close = |row: usize,
                 client: usize,
                 at: u64,
                 end: HoldEnd,
                 open: &mut [Vec<(usize, u64)>],
                 closed: &mut [Vec<Hold>]| {
        if let Some(k) = open[row].iter().position(|(c, _)| *c == client) {
            let (_, since) = open[row].remove(k);
            closed[row].push(Hold {
                client,
                span: Span {
                    start_ms: since.min(end_ms),
                    end_ms: at.min(end_ms),
                },
                end,
            });
        }
    };
    for (t, step, rows) in &steps {
        match step {
            Step::Add(client) => {
                for &row in rows {
                    if !open[row].iter().any(|(c, _)| c == client) {
                        open[row].push((*client, *t));
                    }
                }
            }
            Step::Remove(client, reason) => {
                for &row in rows {
                    let end = HoldEnd::Released(*reason);
                    close(row, *client, *t, end, &mut open, &mut closed);
                }
            }
            Step::Crash(client) => {
                for row in 0..wanted.len() {
                    close(row, *client, *t, HoldEnd::Crashed, &mut open, &mut closed);
                }
            }
        }
    }
    let queues = wanted
        .iter()
        .enumerate()
        .map(|(row, queue)| {
            let mut holds = std::mem::take(&mut closed[row]);
            for (client, since) in open[row].drain(..) {
                holds.push(Hold {
                    client,
                    span: Span {
                        start_ms: since.min(end_ms),
                        end_ms,
                    },
                    end: HoldEnd::StillHeld,
                });
            }
            holds.sort_by_key(|h| (h.span.start_ms, h.client, h.span.end_ms));
            let (unowned, mut doubled) = gaps_and_overlaps(&holds, end_ms);
            // A shared (popped) queue is every member's at once, as the summary counts it
            // (found by review: drawn double-owned for the whole run).
            if queue.queue_id == -1 {
                doubled.clear();
            }
            QueueTimeline {
                queue: (*queue).clone(),
                holds,
                unowned,
                doubled,
            }
        })
        .collect();
    Timeline {
        duration_ms: end_ms,
        queues,
    }
}

/// Sweeps a queue's holds over `[0, end_ms)`: where nobody held it, and where two or more did.
fn gaps_and_overlaps(holds: &[Hold], end_ms: u64) -> (Vec<Span>, Vec<Overlap>) {
    // Ends before starts at one instant: a hand-over in the same millisecond is neither a gap
    // nor an overlap (as the summary counts it: zero milliseconds either way).
    let mut edges: Vec<(u64, bool, usize)> = Vec::with_capacity(holds.len() * 2);
    // A hold of no time (taken and given back in one millisecond) changes nothing.
    for h in holds.iter().filter(|h| h.span.len_ms() > 0) {
        edges.push((h.span.start_ms, true, h.client));
        edges.push((h.span.end_ms, false, h.client));
    }
    edges.sort();
    // Holders now: client -> how many of its holds are open (one, unless the records repeat).
    let mut active: BTreeMap<usize, u32> = BTreeMap::new();
    let mut unowned: Vec<Span> = Vec::new();
    let mut doubled: Vec<Overlap> = Vec::new();
    let mut from = 0u64;
    let mut account = |from: u64, to: u64, active: &BTreeMap<usize, u32>| {
        if to <= from {
            return;
        }
        let span = Span {
            start_ms: from,
            end_ms: to,
        };
        match active.len() {
            0 => match unowned.last_mut() {
                Some(last) if last.end_ms == from => last.end_ms = to,
                _ => unowned.push(span),
            },
            1 => {}
            _ => {
                let clients: Vec<usize> = active.keys().copied().collect();
                match doubled.last_mut() {
                    Some(last) if last.span.end_ms == from && last.clients == clients => {
                        last.span.end_ms = to;
                    }
                    _ => doubled.push(Overlap { span, clients }),
                }
            }
        }
    };
    for (t, starts, client) in edges {
        let t = t.min(end_ms);
        account(from, t, &active);
        from = from.max(t);
        if starts {
            *active.entry(client).or_default() += 1;
        } else if let Some(n) = active.get_mut(&client) {
            *n -= 1;
            if *n == 0 {
                active.remove(&client);
            }
        }
    }
    account(from, end_ms, &active);
    (unowned, doubled)
}

/// At most `max` queues of `all` (sorted), spread evenly over the list so that every topic and
/// broker shows, always including the first and the last.
pub fn pick_rows(all: &[MessageQueue], max: usize) -> Vec<MessageQueue> {
    if all.len() <= max {
        return all.to_vec();
    }
    match max {
        0 => Vec::new(),
        1 => vec![all[0].clone()],
        _ => (0..max)
            .map(|k| all[k * (all.len() - 1) / (max - 1)].clone())
            .collect(),
    }
}

/// How many messages had been sent and not yet consumed successfully, over time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lag {
    /// The width of a bucket (ms).
    pub bucket_ms: u64,
    /// The most messages waiting at any instant of each bucket, from the start of the run.
    pub max_waiting: Vec<u64>,
}

/// The lag of a run that carried messages, in at most `buckets` buckets over its duration. A
/// message waits from its send until its first successful delivery (a redelivery through the
/// retry topic keeps the message's id), or until the end.
pub fn lag(outcome: &Outcome, buckets: usize) -> Option<Lag> {
    let messages = outcome.messages.as_ref()?;
    let buckets = buckets.max(1);
    let duration = outcome.duration_ms.max(1);
    let bucket_ms = duration.div_ceil(buckets as u64).max(1);
    let count = duration.div_ceil(bucket_ms) as usize;
    let mut first_success: HashMap<&str, u64> = HashMap::new();
    for d in messages.deliveries.iter().filter(|d| !d.failed) {
        let at = first_success.entry(d.msg_id.as_str()).or_insert(d.t_ms);
        *at = (*at).min(d.t_ms);
    }
    // +1 at each send, -1 at each first success (after the send: a clock never runs back, but
    // a record of the same millisecond must not go below zero first).
    let mut changes: Vec<(u64, i64)> = Vec::with_capacity(messages.produced.len() * 2);
    for p in &messages.produced {
        changes.push((p.t_ms, 1));
        if let Some(&at) = first_success.get(p.msg_id.as_str()) {
            changes.push((at.max(p.t_ms), -1));
        }
    }
    changes.sort_by_key(|(t, delta)| (*t, -*delta));
    let mut max_waiting = vec![0u64; count];
    let mut waiting: i64 = 0;
    let mut bucket = 0usize;
    let mut changes = changes.into_iter().peekable();
    while bucket < count {
        let bucket_end = (bucket as u64 + 1) * bucket_ms;
        let mut peak = waiting;
        while let Some((_, delta)) = changes.next_if(|(t, _)| *t < bucket_end) {
            waiting += delta;
            peak = peak.max(waiting);
        }
        max_waiting[bucket] = peak.max(0) as u64;
        bucket += 1;
    }
    Some(Lag {
        bucket_ms,
        max_waiting,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::sim::engine::{ClientEnd, Record};
    use crate::sim::summarize;

    fn q(i: i32) -> MessageQueue {
        MessageQueue::new("T", "b", i)
    }

    fn record(t_ms: u64, client: usize, added: bool, queues: &[i32]) -> Record {
        Record {
            t_ms,
            client: format!("c{client}").as_str().into(),
            change: if added {
                Change::Added
            } else {
                Change::Removed(RemovalReason::Reassigned)
            },
            topic: "T".into(),
            queues: queues.iter().map(|&i| q(i)).collect(),
        }
    }

    fn client(index: usize, status: Status, stopped_ms: Option<u64>) -> ClientEnd {
        ClientEnd {
            client: format!("c{index}").as_str().into(),
            index,
            status,
            owned: Vec::new(),
            rounds: 0,
            started_ms: 0,
            stopped_ms,
        }
    }

    fn span(start_ms: u64, end_ms: u64) -> Span {
        Span { start_ms, end_ms }
    }

    #[test]
    fn holds_gaps_and_overlaps_of_a_hand_over() {
        let outcome = Outcome {
            records: vec![
                record(100, 0, true, &[0, 1]),
                record(1000, 1, true, &[1]),
                record(1500, 0, false, &[1]),
                record(2000, 1, true, &[2]),
            ],
            clients: vec![
                client(0, Status::Running, None),
                client(1, Status::Crashed, Some(3000)),
            ],
            queues: [q(0), q(1), q(2)].into(),
            duration_ms: 4000,
            messages: None,
        };
        let t = timeline(&outcome, &[q(1), q(2), q(9)]);
        assert_eq!(t.queues.len(), 2, "q9 is not a queue of the run");
        let q1 = &t.queues[0];
        assert_eq!(
            q1.holds,
            [
                Hold {
                    client: 0,
                    span: span(100, 1500),
                    end: HoldEnd::Released(RemovalReason::Reassigned)
                },
                Hold {
                    client: 1,
                    span: span(1000, 3000),
                    end: HoldEnd::Crashed
                },
            ]
        );
        assert_eq!(q1.unowned, [span(0, 100), span(3000, 4000)]);
        assert_eq!(
            q1.doubled,
            [Overlap {
                span: span(1000, 1500),
                clients: vec![0, 1]
            }]
        );
        let q2 = &t.queues[1];
        assert_eq!(q2.unowned, [span(0, 2000), span(3000, 4000)]);
        assert!(q2.doubled.is_empty());
    }

    #[test]
    fn a_hand_over_in_one_millisecond_is_neither_gap_nor_overlap() {
        let outcome = Outcome {
            records: vec![
                record(0, 0, true, &[0]),
                record(50, 1, true, &[0]),
                record(50, 0, false, &[0]),
            ],
            clients: vec![
                client(0, Status::Running, None),
                client(1, Status::Running, None),
            ],
            queues: [q(0)].into(),
            duration_ms: 100,
            messages: None,
        };
        let t = timeline(&outcome, &[q(0)]);
        assert!(t.queues[0].unowned.is_empty(), "{:?}", t.queues[0]);
        assert!(t.queues[0].doubled.is_empty(), "{:?}", t.queues[0]);
        assert_eq!(t.queues[0].holds.len(), 2);
        assert_eq!(t.queues[0].holds[1].end, HoldEnd::StillHeld);
    }

    #[test]
    fn rows_are_spread_over_the_whole_list() {
        let all: Vec<MessageQueue> = (0..100).map(q).collect();
        let rows = pick_rows(&all, 5);
        let ids: Vec<i32> = rows.iter().map(|m| m.queue_id).collect();
        assert_eq!(ids, [0, 24, 49, 74, 99]);
        assert_eq!(pick_rows(&all[..3], 5).len(), 3);
        assert_eq!(pick_rows(&all, 1).len(), 1);
    }

    #[test]
    fn lag_counts_messages_until_their_first_success() {
        use crate::sim::traffic::{Delivery, MessageOutcome, Produced};
        let produced = |id: &str, t_ms| Produced {
            msg_id: id.into(),
            topic: "T".into(),
            t_ms,
        };
        let delivery = |id: &str, t_ms, failed| Delivery {
            t_ms,
            client: "c0".into(),
            topic: "T".into(),
            queue: q(0),
            offset: 0,
            msg_id: id.into(),
            reconsume_times: 0,
            failed,
        };
        let outcome = Outcome {
            records: Vec::new(),
            clients: Vec::new(),
            queues: [q(0)].into(),
            duration_ms: 400,
            messages: Some(MessageOutcome {
                produced: vec![produced("a", 0), produced("b", 0), produced("c", 150)],
                deliveries: vec![
                    delivery("a", 10, false),
                    delivery("b", 20, true),   // failed: still waiting
                    delivery("b", 250, false), // its retry
                ],
                dead_lettered: Vec::new(),
                send_failures: 0,
            }),
        };
        let lag = lag(&outcome, 4).unwrap();
        assert_eq!(lag.bucket_ms, 100);
        // 0..100: two sent, a consumed at 10; 100..200: b waits, c sent at 150; 200..300: b
        // consumed at 250, c waits until the end.
        assert_eq!(lag.max_waiting, [2, 2, 2, 1]);
        let none = Outcome {
            messages: None,
            ..outcome
        };
        assert!(super::lag(&none, 4).is_none());
    }

    /// Random callbacks of three clients on four queues, some crashes: what the timeline draws
    /// adds up to what the summary line says, and every callback's queue is in a hold.
    fn outcomes() -> impl Strategy<Value = Outcome> {
        let one = (
            0u64..1000,
            0usize..3,
            any::<bool>(),
            prop::collection::vec(0i32..4, 1..3),
        );
        (
            prop::collection::vec(one, 0..40),
            prop::collection::vec(prop::option::of(0u64..1100), 3),
        )
            .prop_map(|(mut records, crashes)| {
                records.sort_by_key(|r| r.0);
                let records = records
                    .into_iter()
                    .map(|(t, c, added, queues)| record(t, c, added, &queues))
                    .collect();
                let clients = crashes
                    .iter()
                    .enumerate()
                    .map(|(i, crash)| match crash {
                        Some(at) => client(i, Status::Crashed, Some(*at)),
                        None => client(i, Status::Running, None),
                    })
                    .collect();
                Outcome {
                    records,
                    clients,
                    queues: (0..4).map(q).collect(),
                    duration_ms: 1100,
                    messages: None,
                }
            })
    }

    proptest! {
        #[test]
        fn the_picture_adds_up_to_the_summary(outcome in outcomes()) {
            let all: Vec<MessageQueue> = outcome.queues.iter().cloned().collect();
            let t = timeline(&outcome, &all);
            let summary = summarize(&outcome);
            let unowned: u64 = t.queues.iter().flat_map(|r| &r.unowned).map(Span::len_ms).sum();
            let doubled: u64 = t
                .queues
                .iter()
                .flat_map(|r| &r.doubled)
                .map(|o| o.span.len_ms())
                .sum();
            prop_assert_eq!(unowned, summary.unowned_queue_ms);
            prop_assert_eq!(doubled, summary.double_owned_queue_ms);
            for row in &t.queues {
                for h in &row.holds {
                    prop_assert!(h.span.start_ms <= h.span.end_ms);
                    prop_assert!(h.span.end_ms <= t.duration_ms);
                }
                // Holds, gaps: every instant is either unowned or held.
                let mut covered = vec![false; t.duration_ms as usize];
                for h in &row.holds {
                    for ms in h.span.start_ms..h.span.end_ms {
                        covered[ms as usize] = true;
                    }
                }
                for g in &row.unowned {
                    for ms in g.start_ms..g.end_ms {
                        prop_assert!(!covered[ms as usize]);
                        covered[ms as usize] = true;
                    }
                }
                prop_assert!(covered.iter().all(|c| *c));
            }
            // Each added callback of a queue not held by that client opens a hold.
            for r in outcome.records.iter().filter(|r| r.change == Change::Added && r.t_ms <= 1100) {
                let c: usize = r.client.as_str()[1..].parse().unwrap();
                for queue in &r.queues {
                    let row = t.queues.iter().find(|row| &row.queue == queue).unwrap();
                    prop_assert!(
                        row.holds.iter().any(|h| h.client == c
                            && h.span.start_ms <= r.t_ms
                            && r.t_ms <= h.span.end_ms),
                        "no hold of c{} on {:?} at {}", c, queue, r.t_ms
                    );
                }
            }
        }
    }
}
