//! [`Memo`]: a few recent results kept inside a strategy value, keyed by the exact inputs.
//!
//! Strategies are shared (`Arc<dyn AllocateStrategy>`) and called every rebalance round with the
//! same queue and member lists most of the time, so work that depends on one of those lists only
//! (hashes of the queues, a ring built from the members) is worth keeping. The key is the input
//! itself, compared element by element, so a hit can never give another input's answer. The lock
//! is held only to clone or store `Arc`s: comparing keys and computing values happen outside it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

/// Up to `capacity` `(key, value)` pairs, most recently used first.
pub(crate) struct Memo<K: ?Sized, V> {
    entries: Mutex<VecDeque<(Arc<K>, Arc<V>)>>,
    capacity: usize,
}

impl<K: ?Sized, V> Memo<K, V> {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            entries: Mutex::new(VecDeque::with_capacity(capacity)),
            capacity: capacity.max(1),
        }
    }

    fn snapshot(&self) -> Vec<(Arc<K>, Arc<V>)> {
        // A panic while the lock was held cannot leave the list inconsistent (every update is a
        // single push or remove), so a poisoned lock is still usable.
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.iter().cloned().collect()
    }

    /// The value stored for the key that `matches`, computing and storing it with `compute` when
    /// there is none. `compute` returns the key to store along with the value.
    pub(crate) fn get_or_insert_with(
        &self,
        matches: impl Fn(&K) -> bool,
        compute: impl FnOnce() -> (Arc<K>, V),
    ) -> Arc<V> {
        if let Some((key, value)) = self.snapshot().into_iter().find(|(k, _)| matches(k)) {
            self.touch(&key);
            return value;
        }
        let (key, value) = compute();
        let value = Arc::new(value);
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.push_front((key, value.clone()));
        entries.truncate(self.capacity);
        value
    }

    /// Moves the entry whose key is `key` (by address) to the front.
    fn touch(&self, key: &Arc<K>) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(i) = entries.iter().position(|(k, _)| Arc::ptr_eq(k, key))
            && i > 0
            && let Some(entry) = entries.remove(i)
        {
            entries.push_front(entry);
        }
    }

    /// How many entries are stored.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl<K: ?Sized, V> std::fmt::Debug for Memo<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memo")
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(memo: &Memo<[u32], u32>, key: &[u32], calls: &mut u32) -> u32 {
        *memo.get_or_insert_with(
            |k| k == key,
            || {
                *calls += 1;
                (key.into(), key.iter().sum())
            },
        )
    }

    #[test]
    fn hits_compare_keys_exactly_and_evict_the_least_recent() {
        let memo: Memo<[u32], u32> = Memo::new(2);
        let mut calls = 0;
        assert_eq!(get(&memo, &[1, 2], &mut calls), 3);
        assert_eq!(get(&memo, &[1, 2], &mut calls), 3);
        assert_eq!(calls, 1);
        // Same sum, different key: computed, not confused with the first.
        assert_eq!(get(&memo, &[2, 1], &mut calls), 3);
        assert_eq!(calls, 2);
        // Touch [1, 2] so that [2, 1] is the one evicted.
        get(&memo, &[1, 2], &mut calls);
        get(&memo, &[5], &mut calls);
        assert_eq!(memo.len(), 2);
        get(&memo, &[1, 2], &mut calls);
        assert_eq!(calls, 3);
        get(&memo, &[2, 1], &mut calls);
        assert_eq!(calls, 4);
    }

    #[test]
    fn debug_shows_the_capacity_only() {
        let memo: Memo<[u32], u32> = Memo::new(0);
        assert_eq!(format!("{memo:?}"), "Memo { capacity: 1, .. }");
    }
}
