//! The memo against rounds made in full: a round it skips must be one whose allocation and
//! diff would have changed nothing.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use proptest::prelude::*;
use rebalance_core::strategy::{Averagely, AveragelyByCircle, BalancedSticky, ConsistentHash};
use rebalance_core::{ClientId, MessageQueue, StrategyRef};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::allocation::Allocation;
use crate::assignment::fingerprint;
use crate::lease_terms::{RemovalReason, StartPosition};
use crate::service::diff::{Change, Target, diff};
use crate::table::{NewQueue, ProcessQueueTable};

const TOPIC: &str = "T";

fn me() -> ClientId {
    ClientId::from("c0")
}

/// Queue `i` of the pool: two brokers of 12 queues.
fn pool_queue(i: i32) -> MessageQueue {
    let broker = if i % 2 == 0 { "broker-a" } else { "broker-b" };
    MessageQueue::new(TOPIC, broker, i / 2)
}

/// The strategies a consumer may allocate with: two values of one strategy with different
/// parameters among them (consistent_hash with 3 and 5 virtual nodes).
fn strategies() -> Vec<StrategyRef> {
    vec![
        Arc::new(Averagely),
        Arc::new(AveragelyByCircle),
        Arc::new(ConsistentHash::new(3).expect("valid")),
        Arc::new(ConsistentHash::new(5).expect("valid")),
        Arc::new(BalancedSticky::new(16)),
    ]
}

/// What a round did.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    added: Vec<MessageQueue>,
    released: Vec<MessageQueue>,
    held: Vec<MessageQueue>,
    balanced: bool,
}

/// One consumer's rounds of topic `T` as the service makes them (allocate or skip, diff,
/// release, add, conclude), on its own table; without a memo every round runs in full.
struct Consumer {
    table: ProcessQueueTable,
    memo: Option<InputsMemo>,
    root: Arc<CancellationToken>,
}

impl Consumer {
    fn new(memo: bool) -> Self {
        Self {
            table: ProcessQueueTable::default(),
            memo: memo.then(InputsMemo::default),
            root: Arc::new(CancellationToken::new()),
        }
    }

    /// A round: releases of `busy` queues do not finish, `refused` queues cannot be added.
    /// Returns what it did and whether it skipped the allocation.
    fn round(
        &mut self,
        queues: &Arc<[MessageQueue]>,
        ids: &[ClientId],
        strategy: &StrategyRef,
        busy: &HashSet<MessageQueue>,
        refused: &HashSet<MessageQueue>,
    ) -> (Outcome, bool) {
        let allocation = Allocation::Strategy(strategy.clone());
        let inputs = Inputs {
            ids: ids.to_vec(),
            allocation: AllocationId::of(&allocation),
            peers: Arc::new([]),
        };
        let stamp = self.table.stamp(TOPIC);
        let skip = self.memo.as_mut().and_then(|memo| {
            let fingerprint = memo.observe(TOPIC, queues, ids);
            memo.unchanged(TOPIC, &inputs, stamp)
                .then_some(Target::Unchanged { fingerprint })
        });
        let skipped = skip.is_some();
        let target = skip.unwrap_or_else(|| Target::Share {
            all: queues.clone(),
            mine: strategy
                .allocate_shared("G", &me(), queues, ids)
                .expect("allocates"),
            fingerprint: fingerprint(queues, ids),
        });
        if let Some(memo) = &mut self.memo {
            memo.begin(TOPIC, inputs);
        }
        let mut diffs = diff(&self.table, BTreeMap::from([(TOPIC.to_string(), target)]));
        let topic_diff = diffs.pop().expect("one topic");
        let now = Instant::now();
        let mut released = Vec::new();
        let mut removed = Vec::new();
        let mut not_released = 0;
        for (q, reason) in topic_diff.releases() {
            if self.table.start_release(&q, now, reason) {
                released.push(q.clone());
            }
            if busy.contains(&q) {
                not_released += 1;
            } else {
                removed.push(q);
            }
        }
        self.table.remove_all(&removed);
        let mut added = Vec::new();
        let mut new = Vec::new();
        let mut not_added = 0;
        for change in &topic_diff.changes {
            let q = match change {
                Change::Add(q) => q,
                Change::Retake(q, _) if self.table.get(q).is_none() => q,
                Change::Retake(..) => {
                    not_added += 1;
                    continue;
                }
                Change::Release(..) | Change::Keep(_) => continue,
            };
            if refused.contains(q) {
                not_added += 1;
                continue;
            }
            added.push(q.clone());
            new.push(NewQueue {
                queue: q.clone(),
                start: StartPosition::Offset(0),
                unsaved: false,
                read_mode: crate::ReadMode::Pull,
                after_reset: false,
            });
        }
        let _leases = self.table.insert_all(new, &self.root, None);
        let balanced = not_added == 0 && not_released == 0;
        if let Some(memo) = &mut self.memo {
            memo.conclude(TOPIC, balanced, self.table.stamp(TOPIC));
        }
        let held = self.table.held().remove(TOPIC).unwrap_or_default();
        let outcome = Outcome {
            added,
            released,
            held,
            balanced,
        };
        (outcome, skipped)
    }

    /// The lock of the `at`-th held queue was lost at a renewal: released between rounds.
    fn lose_lock(&mut self, at: usize) {
        let held = self.table.held().remove(TOPIC).unwrap_or_default();
        if held.is_empty() {
            return;
        }
        let q = held[at % held.len()].clone();
        assert!(
            self.table
                .start_release(&q, Instant::now(), RemovalReason::Lost)
        );
        self.table.remove_all(&[q]);
    }
}

/// A change of a round's inputs, or of the table between rounds.
#[derive(Debug, Clone)]
enum Event {
    /// Nothing.
    Nothing,
    /// The route is published again with the same queues (an equal list, not the same one).
    SameQueuesAgain,
    /// One queue replaced by another: the same count.
    SwapQueue(usize, i32),
    AddQueue(i32),
    RemoveQueue(usize),
    /// One member (never this one) replaced by another: the same count.
    SwapMember(usize, u8),
    AddMember(u8),
    RemoveMember(usize),
    /// Another strategy value (another strategy, or the same one with other parameters).
    Strategy(usize),
    /// A held queue lost its lock at a renewal.
    LoseLock(usize),
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        3 => Just(Event::Nothing),
        1 => Just(Event::SameQueuesAgain),
        2 => (any::<usize>(), 0..24i32).prop_map(|(a, b)| Event::SwapQueue(a, b)),
        1 => (0..24i32).prop_map(Event::AddQueue),
        1 => any::<usize>().prop_map(Event::RemoveQueue),
        2 => (any::<usize>(), 1..12u8).prop_map(|(a, b)| Event::SwapMember(a, b)),
        1 => (1..12u8).prop_map(Event::AddMember),
        1 => any::<usize>().prop_map(Event::RemoveMember),
        2 => (0..5usize).prop_map(Event::Strategy),
        1 => any::<usize>().prop_map(Event::LoseLock),
    ]
}

/// The inputs the rounds allocate from, and the two consumers.
struct World {
    queues: Arc<[MessageQueue]>,
    ids: Vec<ClientId>,
    strategy: usize,
    strategies: Vec<StrategyRef>,
}

impl World {
    /// Applies `event`; returns whether the allocation's inputs really changed (a swap may
    /// pick what is already there).
    fn apply(&mut self, event: &Event, consumers: &mut [&mut Consumer]) -> bool {
        let (queues_before, ids_before, strategy_before) =
            (self.queues.clone(), self.ids.clone(), self.strategy);
        let mut queues: Vec<MessageQueue> = self.queues.to_vec();
        match *event {
            Event::Nothing => {}
            Event::SameQueuesAgain => {}
            Event::SwapQueue(at, id) => {
                let new = pool_queue(id);
                if !queues.contains(&new) && !queues.is_empty() {
                    let at = at % queues.len();
                    queues[at] = new;
                }
            }
            Event::AddQueue(id) => {
                let new = pool_queue(id);
                if !queues.contains(&new) {
                    queues.push(new);
                }
            }
            Event::RemoveQueue(at) => {
                if queues.len() > 1 {
                    queues.remove(at % queues.len());
                }
            }
            Event::SwapMember(at, n) => {
                let new = ClientId::from(format!("c{n}"));
                let others: Vec<usize> = (0..self.ids.len())
                    .filter(|&i| self.ids[i] != me())
                    .collect();
                if !self.ids.contains(&new) && !others.is_empty() {
                    let at = others[at % others.len()];
                    self.ids[at] = new;
                }
            }
            Event::AddMember(n) => {
                let new = ClientId::from(format!("c{n}"));
                if !self.ids.contains(&new) {
                    self.ids.push(new);
                }
            }
            Event::RemoveMember(at) => {
                let others: Vec<usize> = (0..self.ids.len())
                    .filter(|&i| self.ids[i] != me())
                    .collect();
                if !others.is_empty() {
                    self.ids.remove(others[at % others.len()]);
                }
            }
            Event::Strategy(s) => self.strategy = s,
            Event::LoseLock(at) => {
                for consumer in consumers.iter_mut() {
                    consumer.lose_lock(at);
                }
            }
        }
        queues.sort();
        self.ids.sort();
        // The route table hands the same list over while the route is unchanged, and a new one
        // (maybe equal) when it changed.
        if !matches!(event, Event::Nothing) {
            self.queues = queues.into();
        }
        *self.queues != *queues_before || self.ids != ids_before || self.strategy != strategy_before
    }
}

fn initial() -> (Arc<[MessageQueue]>, Vec<ClientId>) {
    let mut queues: Vec<MessageQueue> = (0..10).map(pool_queue).collect();
    queues.sort();
    let mut ids = vec![me(), ClientId::from("c1"), ClientId::from("c2")];
    ids.sort();
    (queues.into(), ids)
}

/// The queues of the pool whose bit is set in `mask`.
fn of_mask(mask: u32) -> HashSet<MessageQueue> {
    (0..24)
        .filter(|i| mask & (1 << i) != 0)
        .map(pool_queue)
        .collect()
}

#[test]
fn a_steady_round_is_skipped_and_a_change_is_not() {
    let (queues, ids) = initial();
    let strategies = strategies();
    let none = HashSet::new();
    let mut consumer = Consumer::new(true);
    let (first, skipped) = consumer.round(&queues, &ids, &strategies[0], &none, &none);
    assert!(!skipped && first.balanced && !first.added.is_empty());
    // The same list again, then an equal one: both skipped.
    let (_, skipped) = consumer.round(&queues, &ids, &strategies[0], &none, &none);
    assert!(skipped);
    let again: Arc<[MessageQueue]> = queues.to_vec().into();
    let (steady, skipped) = consumer.round(&again, &ids, &strategies[0], &none, &none);
    assert!(skipped);
    assert_eq!(steady.held, first.held);
    // Another value of the same strategy with other parameters: allocated again.
    let (_, skipped) = consumer.round(&again, &ids, &strategies[3], &none, &none);
    assert!(!skipped);
    let (_, skipped) = consumer.round(&again, &ids, &strategies[2], &none, &none);
    assert!(!skipped);
    // A queue lost between rounds: the table changed, so the round allocates and takes it back.
    consumer.lose_lock(0);
    let (back, skipped) = consumer.round(&again, &ids, &strategies[2], &none, &none);
    assert!(!skipped);
    assert_eq!(back.added.len(), 1);
    // A release that does not finish leaves the round unbalanced: the next one runs in full.
    let (before, _) = consumer.round(&again, &ids, &strategies[0], &none, &none);
    assert_eq!(before.held.len(), 4, "averagely: 10 queues, 3 members");
    let mut more = ids.clone();
    more.extend([ClientId::from("c8"), ClientId::from("c9")]);
    more.sort();
    let busy: HashSet<MessageQueue> = before.held.iter().cloned().collect();
    let (unbalanced, _) = consumer.round(&again, &more, &strategies[0], &busy, &none);
    assert_eq!((unbalanced.released.len(), unbalanced.balanced), (2, false));
    let (finished, skipped) = consumer.round(&again, &more, &strategies[0], &none, &none);
    assert!(!skipped, "a round after an unbalanced one is never skipped");
    assert!(finished.balanced && finished.held.len() == 2);
    let (_, skipped) = consumer.round(&again, &more, &strategies[0], &none, &none);
    assert!(skipped);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A consumer that skips steady rounds adds, releases and holds exactly what one that
    /// allocates and diffs every round does, through random changes of the queues, the members
    /// (also with the same count), the strategy and its parameters, locks lost between rounds,
    /// releases that do not finish and queues that cannot be added; and it never skips a
    /// round whose inputs changed.
    #[test]
    fn skipping_steady_rounds_changes_nothing(
        steps in proptest::collection::vec((event(), any::<u32>(), any::<u32>(), 0..4u8), 1..40),
    ) {
        let (queues, ids) = initial();
        let mut world = World { queues, ids, strategy: 0, strategies: strategies() };
        let mut full = Consumer::new(false);
        let mut memo = Consumer::new(true);
        let mut last_balanced = false;
        for (event, busy, refused, trouble) in steps {
            let changed = world.apply(&event, &mut [&mut full, &mut memo]);
            // Most rounds have no trouble; some have releases that do not finish, or queues
            // that cannot be added.
            let busy = if trouble == 1 { of_mask(busy) } else { HashSet::new() };
            let refused = if trouble == 2 { of_mask(refused) } else { HashSet::new() };
            let strategy = world.strategies[world.strategy].clone();
            let (expected, _) = full.round(&world.queues, &world.ids, &strategy, &busy, &refused);
            let (actual, skipped) = memo.round(&world.queues, &world.ids, &strategy, &busy, &refused);
            prop_assert_eq!(&actual, &expected, "after {:?}", event);
            prop_assert!(!(skipped && changed), "skipped a round whose inputs changed: {:?}", event);
            // And the skip happens: after a balanced round, with the same inputs and an
            // untouched table, nothing is allocated.
            if last_balanced && !changed && !matches!(event, Event::LoseLock(_)) {
                prop_assert!(skipped, "a steady round was not skipped after {:?}", event);
            }
            last_balanced = actual.balanced;
        }
    }
}

#[test]
fn the_fingerprint_is_the_documented_one_whatever_the_memo_saw() {
    let (queues, ids) = initial();
    let mut memo = InputsMemo::default();
    assert_eq!(
        memo.observe(TOPIC, &queues, &ids),
        fingerprint(&queues, &ids)
    );
    // Same list, other members; then another list.
    assert_eq!(
        memo.observe(TOPIC, &queues, &ids[..1]),
        fingerprint(&queues, &ids[..1])
    );
    let fewer: Arc<[MessageQueue]> = queues[1..].to_vec().into();
    assert_eq!(memo.observe(TOPIC, &fewer, &ids), fingerprint(&fewer, &ids));
}
