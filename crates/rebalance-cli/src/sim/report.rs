//! What a simulation measured, computed from its callbacks alone.

use std::collections::{BTreeSet, HashMap, HashSet};

use rebalance_core::{ClientId, MessageQueue};

use super::engine::{Change, Outcome, Status};

/// The measures of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Summary {
    /// The running clients' holdings are disjoint and cover every queue at the end.
    pub converged: bool,
    /// Sum over queues of the time (ms) two or more clients held them (a POP run's shared
    /// queues, id -1, which every member pops, are not counted).
    pub double_owned_queue_ms: u64,
    /// Sum over queues of the time (ms) nobody held them.
    pub unowned_queue_ms: u64,
    /// Queues added to a client after having been held by another (first assignments, and a
    /// client taking back a queue it held last, excluded).
    pub moves: u64,
    /// Rebalance rounds run by all clients together.
    pub rounds: u64,
}

/// Whether `queue` is a POP run's shared queue (every queue of a broker, id -1), which every
/// member holds at once by design.
fn shared(queue: &MessageQueue) -> bool {
    queue.queue_id == -1
}

/// Replays the callbacks (a crashed client stops holding anything when it crashes).
pub fn summarize(outcome: &Outcome) -> Summary {
    enum Step<'a> {
        Callback(&'a ClientId, bool, &'a [MessageQueue]),
        Crash(&'a ClientId),
    }
    let mut steps: Vec<(u64, Step<'_>)> = outcome
        .records
        .iter()
        .map(|r| {
            (
                r.t_ms,
                Step::Callback(&r.client, r.change == Change::Added, &r.queues),
            )
        })
        .collect();
    for c in &outcome.clients {
        if let (Status::Crashed, Some(at)) = (c.status, c.stopped_ms) {
            steps.push((at, Step::Crash(&c.client)));
        }
    }
    // Stable: callbacks keep their order; a crash goes after the callbacks of its instant.
    steps.sort_by_key(|(t, _)| *t);

    let total = outcome.queues.len() as u64;
    let mut holdings: HashMap<&ClientId, HashSet<&MessageQueue>> = HashMap::new();
    let mut owners: HashMap<&MessageQueue, u64> = HashMap::new();
    // The client that took each queue last: a queue taken back by it is not a move.
    let mut last_holder: HashMap<&MessageQueue, &ClientId> = HashMap::new();
    // Kept up to date as owner counts change: queues of the run held by someone, and queues
    // held by two or more.
    let (mut owned, mut doubled) = (0u64, 0u64);
    let mut summary = Summary::default();
    let mut last = 0;
    let mut account = |now: u64, owned: u64, doubled: u64, summary: &mut Summary| {
        let dt = now.saturating_sub(last);
        summary.double_owned_queue_ms += dt * doubled;
        summary.unowned_queue_ms += dt * total.saturating_sub(owned);
        last = last.max(now);
    };
    let drop_owner = |q: &MessageQueue,
                      owners: &mut HashMap<&MessageQueue, u64>,
                      owned: &mut u64,
                      doubled: &mut u64| {
        if let Some(n) = owners.get_mut(q) {
            *n -= 1;
            match *n {
                0 if outcome.queues.contains(q) => *owned -= 1,
                1 if !shared(q) => *doubled -= 1,
                _ => {}
            }
        }
    };
    for (t, step) in &steps {
        account(*t, owned, doubled, &mut summary);
        match step {
            Step::Callback(client, true, queues) => {
                let held = holdings.entry(client).or_default();
                for q in queues.iter() {
                    if held.insert(q) {
                        let n = owners.entry(q).or_default();
                        *n += 1;
                        match *n {
                            1 if outcome.queues.contains(q) => owned += 1,
                            2 if !shared(q) => doubled += 1,
                            _ => {}
                        }
                        // A shared (popped) queue is every member's at once: its holders
                        // do not take it from each other (found by review: counted as moves).
                        if !shared(q)
                            && last_holder
                                .insert(q, client)
                                .is_some_and(|prev| prev != *client)
                        {
                            summary.moves += 1;
                        }
                    }
                }
            }
            Step::Callback(client, false, queues) => {
                let held = holdings.entry(client).or_default();
                for q in queues.iter() {
                    if held.remove(q) {
                        drop_owner(q, &mut owners, &mut owned, &mut doubled);
                    }
                }
            }
            Step::Crash(client) => {
                for q in holdings.remove(client).unwrap_or_default() {
                    drop_owner(q, &mut owners, &mut owned, &mut doubled);
                }
            }
        }
    }
    account(outcome.duration_ms, owned, doubled, &mut summary);

    let mut covered: BTreeSet<&MessageQueue> = BTreeSet::new();
    let mut disjoint = true;
    for c in outcome
        .clients
        .iter()
        .filter(|c| c.status == Status::Running)
    {
        for q in &c.owned {
            disjoint &= covered.insert(q) || shared(q);
        }
    }
    summary.converged = disjoint
        && covered.len() == outcome.queues.len()
        && covered.iter().all(|q| outcome.queues.contains(*q));
    summary.rounds = outcome.clients.iter().map(|c| c.rounds).sum();
    summary
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::engine::{ClientEnd, Record};

    fn q(i: i32) -> MessageQueue {
        MessageQueue::new("T", "b", i)
    }

    fn record(t_ms: u64, client: &str, added: bool, queues: &[i32]) -> Record {
        Record {
            t_ms,
            client: client.into(),
            change: if added {
                Change::Added
            } else {
                Change::Removed(rebalance_runtime::RemovalReason::Reassigned)
            },
            topic: "T".into(),
            queues: queues.iter().map(|&i| q(i)).collect(),
        }
    }

    fn end(client: &str, status: Status, owned: &[i32], stopped_ms: Option<u64>) -> ClientEnd {
        ClientEnd {
            client: client.into(),
            index: 0,
            status,
            owned: owned.iter().map(|&i| q(i)).collect(),
            rounds: 3,
            started_ms: 0,
            stopped_ms,
        }
    }

    /// A shared (popped) queue held by every member is neither double-owned nor moved from one
    /// to the next (found by review: each member's share of it counted as a move).
    #[test]
    fn a_shared_queue_held_by_everyone_is_no_move() {
        let outcome = Outcome {
            records: vec![
                record(100, "a", true, &[-1]),
                record(200, "b", true, &[-1]),
                record(300, "c", true, &[-1]),
            ],
            clients: vec![
                end("a", Status::Running, &[-1], None),
                end("b", Status::Running, &[-1], None),
                end("c", Status::Running, &[-1], None),
            ],
            queues: [q(-1)].into(),
            duration_ms: 1000,
            messages: None,
        };
        let s = summarize(&outcome);
        assert_eq!((s.moves, s.double_owned_queue_ms), (0, 0));
    }

    #[test]
    fn integrates_double_and_unowned_time() {
        let outcome = Outcome {
            records: vec![
                record(100, "a", true, &[0, 1]), // 0..100: 2 unowned
                record(1000, "b", true, &[1]),   // 1000..1500: q1 doubled
                record(1500, "a", false, &[1]),
                record(2000, "b", true, &[2]), // q2 unowned until 2000
            ],
            clients: vec![
                end("a", Status::Running, &[0], None),
                end("b", Status::Crashed, &[], Some(3000)),
            ],
            queues: [q(0), q(1), q(2)].into(),
            duration_ms: 4000,
            messages: None,
        };
        let s = summarize(&outcome);
        assert_eq!(s.double_owned_queue_ms, 500);
        // q0,q1,q2 unowned 0..100 (300), q2 unowned 100..2000 (1900), b crashes at 3000: q1,q2 unowned 3000..4000 (2000).
        assert_eq!(s.unowned_queue_ms, 300 + 1900 + 2000);
        assert_eq!(
            s.moves, 1,
            "q1 went from a to b; q0 and q2 were first assignments"
        );
        assert!(!s.converged);
        assert_eq!(s.rounds, 6);
    }

    #[test]
    fn a_queue_taken_back_by_its_last_holder_is_not_a_move() {
        let outcome = Outcome {
            records: vec![
                record(0, "a", true, &[0, 1]),
                record(10, "a", false, &[1]), // a saw a joiner that left at once
                record(20, "a", true, &[1]),  // back to a: nobody else held it
                record(30, "a", false, &[0]),
                record(40, "b", true, &[0]), // a to b: a move
                record(50, "b", false, &[0]),
                record(60, "a", true, &[0]), // b to a: a move
            ],
            clients: vec![end("a", Status::Running, &[0, 1], None)],
            queues: [q(0), q(1)].into(),
            duration_ms: 100,
            messages: None,
        };
        let s = summarize(&outcome);
        assert_eq!(s.moves, 2);
        assert_eq!(s.unowned_queue_ms, 10 + 10 + 10);
        assert_eq!(s.double_owned_queue_ms, 0);
    }

    #[test]
    fn queues_outside_the_run_are_never_owned_but_may_be_doubled() {
        let outcome = Outcome {
            records: vec![
                record(0, "a", true, &[0, 9]),
                record(0, "b", true, &[9]),
                record(50, "b", false, &[9]),
            ],
            clients: vec![end("a", Status::Running, &[0], None)],
            queues: [q(0)].into(),
            duration_ms: 100,
            messages: None,
        };
        let s = summarize(&outcome);
        assert_eq!(s.unowned_queue_ms, 0, "q9 is not a queue of the run");
        assert_eq!(s.double_owned_queue_ms, 50);
    }
}
