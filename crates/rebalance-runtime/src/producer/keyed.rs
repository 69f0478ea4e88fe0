//! Selectors for ordered and keyed messages (the Java client's `MessageQueueSelector`): the
//! application names the queue by a key, and the same key keeps its queue.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use rebalance_core::{MessageQueue, java};

/// Chooses a queue for a message by its key. Fault avoidance does not apply: an ordered
/// message must go to its key's queue even when that broker is slow.
pub trait QueueSelector: Send + Sync {
    /// The index in `queues` (a topic's publish queues, never empty) of the queue for a
    /// message with `key`, or `None` to refuse (the producer reports a typed error; so does an
    /// index out of range).
    fn select(&self, queues: &[MessageQueue], key: &str) -> Option<usize>;
}

/// The queue at `hash(key) mod n`, with Java's `String.hashCode`: the Java client's
/// `SelectMessageQueueByHash` with a string argument, so a Rust producer and a Java producer
/// put a key on the same queue. A key keeps its queue while the number of queues is stable.
///
/// ```
/// use rebalance_core::MessageQueue;
/// use rebalance_runtime::producer::{QueueSelector, SelectByHash};
///
/// let queues: Vec<MessageQueue> = (0..8).map(|i| MessageQueue::new("T", "b", i)).collect();
/// // "hello".hashCode() == 99162322, and 99162322 % 8 == 2.
/// assert_eq!(SelectByHash.select(&queues, "hello"), Some(2));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct SelectByHash;

impl QueueSelector for SelectByHash {
    fn select(&self, queues: &[MessageQueue], key: &str) -> Option<usize> {
        hash_index(key, queues.len())
    }
}

/// Java's `Math.abs(key.hashCode() % n)`.
fn hash_index(key: &str, n: usize) -> Option<usize> {
    if n == 0 {
        return None;
    }
    let rem = i64::from(java::string_hash(key)) % n as i64;
    Some(rem.unsigned_abs() as usize)
}

/// A queue at random (the Java client's `SelectMessageQueueByRandom`), from a seeded,
/// lock-free SplitMix64 generator: reproducible runs with [`seeded`](Self::seeded). The key is
/// ignored.
///
/// ```
/// use rebalance_core::MessageQueue;
/// use rebalance_runtime::producer::{QueueSelector, SelectByRandom};
///
/// let queues: Vec<MessageQueue> = (0..8).map(|i| MessageQueue::new("T", "b", i)).collect();
/// let (a, b) = (SelectByRandom::seeded(7), SelectByRandom::seeded(7));
/// let first: Vec<_> = (0..5).map(|_| a.select(&queues, "").unwrap()).collect();
/// let second: Vec<_> = (0..5).map(|_| b.select(&queues, "").unwrap()).collect();
/// assert_eq!(first, second);
/// ```
#[derive(Debug)]
pub struct SelectByRandom {
    state: AtomicU64,
}

impl Default for SelectByRandom {
    /// Seeded from the standard library's per-process random hash keys.
    fn default() -> Self {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(0x5eed);
        Self::seeded(hasher.finish())
    }
}

impl SelectByRandom {
    /// A generator whose sequence `seed` decides.
    pub fn seeded(seed: u64) -> Self {
        Self {
            state: AtomicU64::new(seed),
        }
    }

    /// The next value of the sequence (SplitMix64; one atomic add per value, so threads never
    /// get the same value).
    pub fn next_u64(&self) -> u64 {
        let mut z = self
            .state
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

impl QueueSelector for SelectByRandom {
    fn select(&self, queues: &[MessageQueue], _key: &str) -> Option<usize> {
        if queues.is_empty() {
            return None;
        }
        // Multiply-shift: uniform enough, and no division.
        Some(((u128::from(self.next_u64()) * queues.len() as u128) >> 64) as usize)
    }
}

/// The machine room of a broker: the text before its first `@` (`room1@broker-a` is in
/// `room1`), the whole name when it has none, as the consumers' machine-room strategies read it.
fn broker_room(broker_name: &str) -> &str {
    broker_name.split('@').next().unwrap_or_default()
}

/// Prefers the producer's machine room: the key hashes (as [`SelectByHash`]) over the queues
/// whose broker is in `room`, or over all queues when no broker of the topic is in the room.
/// A key keeps its queue while the room's queues are stable.
///
/// ```
/// use rebalance_core::MessageQueue;
/// use rebalance_runtime::producer::{QueueSelector, SelectByMachineRoom};
///
/// let queues: Vec<MessageQueue> = ["roomA@b1", "roomB@b2"]
///     .iter()
///     .flat_map(|b| (0..4).map(move |i| MessageQueue::new("T", *b, i)))
///     .collect();
/// let near = SelectByMachineRoom::new("roomB");
/// for key in ["a", "b", "order-42"] {
///     let i = near.select(&queues, key).unwrap();
///     assert_eq!(&*queues[i].broker_name, "roomB@b2");
/// }
/// let far = SelectByMachineRoom::new("roomZ"); // no broker there: every queue is eligible
/// assert!(far.select(&queues, "k").is_some());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectByMachineRoom {
    room: String,
}

impl SelectByMachineRoom {
    /// Prefers brokers in `room`.
    pub fn new(room: impl Into<String>) -> Self {
        Self { room: room.into() }
    }

    /// The preferred room.
    pub fn room(&self) -> &str {
        &self.room
    }

    fn in_room(&self, queue: &MessageQueue) -> bool {
        broker_room(&queue.broker_name) == self.room
    }
}

impl QueueSelector for SelectByMachineRoom {
    fn select(&self, queues: &[MessageQueue], key: &str) -> Option<usize> {
        let local = queues.iter().filter(|q| self.in_room(q)).count();
        if local == 0 {
            return hash_index(key, queues.len());
        }
        let nth = hash_index(key, local)?;
        queues
            .iter()
            .enumerate()
            .filter(|(_, q)| self.in_room(q))
            .nth(nth)
            .map(|(i, _)| i)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn queues(brokers: &[&str], per: i32) -> Vec<MessageQueue> {
        brokers
            .iter()
            .flat_map(|b| (0..per).map(move |i| MessageQueue::new("T", *b, i)))
            .collect()
    }

    #[test]
    fn hash_matches_java_select_by_hash() {
        // Java: Math.abs("hello".hashCode() % n); negative hash codes too.
        let q = queues(&["b"], 7);
        assert_eq!(SelectByHash.select(&q, "hello"), Some(99_162_322 % 7));
        // "polygenelubricants".hashCode() == Integer.MIN_VALUE; MIN_VALUE % 7 == -2.
        assert_eq!(java::string_hash("polygenelubricants"), i32::MIN);
        assert_eq!(SelectByHash.select(&q, "polygenelubricants"), Some(2));
        assert_eq!(SelectByHash.select(&[], "x"), None);
        assert_eq!(SelectByRandom::seeded(1).select(&[], "x"), None);
    }

    #[test]
    fn random_covers_every_queue_and_is_reproducible() {
        let q = queues(&["a", "b"], 4);
        let r = SelectByRandom::seeded(42);
        let mut seen = [0usize; 8];
        for _ in 0..8000 {
            seen[r.select(&q, "").unwrap()] += 1;
        }
        assert!(seen.iter().all(|n| (800..1200).contains(n)), "{seen:?}");
        let a: Vec<u64> = (0..4)
            .map(|_| SelectByRandom::seeded(3).next_u64())
            .collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        // The default is seeded differently per instance (almost surely).
        let x: Vec<u64> = (0..3)
            .map(|_| SelectByRandom::default().next_u64())
            .collect();
        assert!(x[0] != x[1] || x[1] != x[2]);
    }

    #[test]
    fn random_is_splitmix64_so_a_seed_replays_the_reference_sequence() {
        // The first outputs of Vigna's reference `splitmix64.c` with the state at 0.
        let r = SelectByRandom::seeded(0);
        let values: Vec<u64> = (0..5).map(|_| r.next_u64()).collect();
        assert_eq!(
            values,
            [
                0xe220_a839_7b1d_cdaf,
                0x6e78_9e6a_a1b9_65f4,
                0x06c4_5d18_8009_454f,
                0xf88b_b8a8_724c_81ec,
                0x1b39_896a_51a8_749b,
            ]
        );
        // Multiply-shift maps each value to its queue: the top bits pick it.
        let q = queues(&["a", "b"], 4);
        let r = SelectByRandom::seeded(0);
        let picks: Vec<usize> = (0..5).map(|_| r.select(&q, "").unwrap()).collect();
        let expected: Vec<usize> = values.iter().map(|v| (v >> 61) as usize).collect();
        assert_eq!(picks, expected);
    }

    #[test]
    fn machine_room_hashes_over_its_room_or_over_every_queue_without_one() {
        let q = queues(&["room0@a", "room1@b"], 4);
        // "hello".hashCode() == 99162322: queue 2 of room1's four, index 6 overall.
        let near = SelectByMachineRoom::new("room1");
        assert_eq!(near.room(), "room1");
        assert_eq!(near.select(&q, "hello"), Some(4 + 99_162_322 % 4));
        // No broker in the room: as SelectByHash over every queue.
        let far = SelectByMachineRoom::new("roomZ");
        assert_eq!(far.room(), "roomZ");
        for key in ["hello", "order-42", "polygenelubricants"] {
            assert_eq!(far.select(&q, key), SelectByHash.select(&q, key), "{key}");
        }
        assert_eq!(far.select(&q, "hello"), Some(99_162_322 % 8));
    }

    #[test]
    fn rooms_are_the_text_before_the_first_at() {
        assert_eq!(broker_room("room1@broker-a"), "room1");
        assert_eq!(broker_room("room1@broker@x"), "room1");
        assert_eq!(broker_room("broker-a"), "broker-a");
        assert_eq!(broker_room("@b"), "");
    }

    proptest! {
        #[test]
        fn keyed_selection_is_stable(key in ".{0,20}", n in 1usize..64, noise in 0usize..5) {
            let q = queues(&["room0@a", "room1@b"], n as i32);
            let first = SelectByHash.select(&q, &key).unwrap();
            prop_assert!(first < q.len());
            // Other traffic in between changes nothing: the answer is a function of key and count.
            for i in 0..noise {
                let _ = SelectByHash.select(&q, &format!("{key}{i}"));
            }
            prop_assert_eq!(SelectByHash.select(&q, &key), Some(first));
            // Same count, other queue names: the same position.
            let renamed = queues(&["x", "y"], n as i32);
            prop_assert_eq!(SelectByHash.select(&renamed, &key), Some(first));

            let room = SelectByMachineRoom::new("room1");
            let i = room.select(&q, &key).unwrap();
            prop_assert_eq!(&*q[i].broker_name, "room1@b");
            prop_assert_eq!(room.select(&q, &key), Some(i));
        }
    }
}
