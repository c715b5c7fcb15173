//! A bounded map whose entries expire: TokenReview and SubjectAccessReview answers kept
//! for a few seconds, as kube's delegating authenticator and authorizer keep them.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct TtlCache<K, V> {
    entries: Mutex<HashMap<K, (V, Instant)>>,
    capacity: usize,
}

impl<K: Eq + Hash + Clone, V: Clone> TtlCache<K, V> {
    pub fn new(capacity: usize) -> Self {
        TtlCache {
            entries: Mutex::new(HashMap::new()),
            capacity,
        }
    }

    pub fn get(&self, key: &K) -> Option<V> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .get(key)
            .filter(|(_, until)| *until > Instant::now())
            .map(|(v, _)| v.clone())
    }

    /// Keeps `value` for `ttl` (not at all when `ttl` is zero). A full cache first drops
    /// what has expired, then everything: a flood of distinct keys costs lookups, never
    /// memory.
    pub fn put(&self, key: K, value: V, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= self.capacity && !entries.contains_key(&key) {
            let now = Instant::now();
            entries.retain(|_, (_, until)| *until > now);
            if entries.len() >= self.capacity {
                entries.clear();
            }
        }
        entries.insert(key, (value, Instant::now() + ttl));
    }

    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_and_the_size_is_bounded() {
        let cache = TtlCache::new(2);
        cache.put("a", 1, Duration::from_secs(60));
        assert_eq!(cache.get(&"a"), Some(1));
        cache.put("b", 2, Duration::from_millis(1));
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(cache.get(&"b"), None, "expired");
        cache.put("c", 3, Duration::from_secs(60));
        assert_eq!(cache.len(), 2, "the expired entry made room");
        cache.put("d", 4, Duration::from_secs(60));
        assert!(cache.len() <= 2);
        assert_eq!(cache.get(&"d"), Some(4));
        cache.put("e", 5, Duration::ZERO);
        assert_eq!(cache.get(&"e"), None, "a zero TTL keeps nothing");
    }
}
