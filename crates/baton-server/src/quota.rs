//! What one caller may hold open at once on a node (log follow streams per token, parked
//! lease requests per runner): each open one holds memory and a receiver here, so a
//! caller opening them without end would hold the node's.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

/// How many each caller holds now.
#[derive(Debug)]
pub(crate) struct Quota<K> {
    held: Mutex<HashMap<K, usize>>,
}

impl<K> Default for Quota<K> {
    fn default() -> Self {
        Quota {
            held: Mutex::default(),
        }
    }
}

/// One held place; given back when dropped.
#[derive(Debug)]
pub(crate) struct Held<K: Hash + Eq> {
    quota: Arc<Quota<K>>,
    key: K,
}

impl<K: Hash + Eq + Clone> Quota<K> {
    /// A place for `key`, unless it already holds `limit`.
    pub(crate) fn take(self: &Arc<Self>, key: K, limit: usize) -> Option<Held<K>> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let n = held.entry(key.clone()).or_default();
        if *n >= limit {
            return None;
        }
        *n += 1;
        Some(Held {
            quota: self.clone(),
            key,
        })
    }
}

impl<K: Hash + Eq> Drop for Held<K> {
    fn drop(&mut self) {
        let mut held = self.quota.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = held.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_holds_at_most_its_limit_and_gets_places_back() {
        let quota = Arc::new(Quota::default());
        let a1 = quota.take("a", 2).unwrap();
        let _a2 = quota.take("a", 2).unwrap();
        assert!(quota.take("a", 2).is_none());
        assert!(
            quota.take("b", 2).is_some(),
            "another caller is not held back"
        );
        drop(a1);
        assert!(quota.take("a", 2).is_some());
    }
}
