//! A byte-bounded cache of loaded index parts (page lookups, pages,
//! bitmaps). Index files are immutable, so entries never go stale; the
//! least recently used are evicted when the total exceeds the budget.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

type Entry = (std::sync::Arc<dyn Any + Send + Sync>, usize, u64);

/// Loaded index parts, shared by queries.
pub struct IndexCache {
    max_bytes: usize,
    inner: Mutex<(HashMap<String, Entry>, usize)>,
    tick: AtomicU64,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
}

impl Default for IndexCache {
    fn default() -> Self {
        // Vector partitions are the largest parts (an IVF_FLAT of 1,000,000
        // 128-d vectors holds 512 MB).
        Self::new(1024 * 1024 * 1024)
    }
}

impl std::fmt::Debug for IndexCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexCache")
            .field("bytes", &self.size())
            .field("max_bytes", &self.max_bytes)
            .finish()
    }
}

impl IndexCache {
    pub fn new(max_bytes: usize) -> Self {
        IndexCache {
            max_bytes,
            inner: Mutex::new((HashMap::new(), 0)),
            tick: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    pub fn get<T: Any + Send + Sync>(&self, key: &str) -> Option<std::sync::Arc<T>> {
        let mut g = self.inner.lock().unwrap();
        let t = self.tick.fetch_add(1, Ordering::Relaxed);
        match g.0.get_mut(key) {
            Some(e) => {
                e.2 = t;
                self.hits.fetch_add(1, Ordering::Relaxed);
                e.0.clone().downcast::<T>().ok()
            }
            None => {
                self.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Whether `key` is held (no effect on recency or the counters).
    pub fn contains(&self, key: &str) -> bool {
        self.inner.lock().unwrap().0.contains_key(key)
    }

    pub fn insert<T: Any + Send + Sync>(
        &self,
        key: String,
        value: std::sync::Arc<T>,
        bytes: usize,
    ) {
        let mut g = self.inner.lock().unwrap();
        let t = self.tick.fetch_add(1, Ordering::Relaxed);
        if let Some(old) = g.0.insert(key, (value, bytes, t)) {
            g.1 -= old.1;
        }
        g.1 += bytes;
        while g.1 > self.max_bytes && g.0.len() > 1 {
            let oldest =
                g.0.iter()
                    .min_by_key(|(_, e)| e.2)
                    .map(|(k, _)| k.clone())
                    .unwrap();
            let e = g.0.remove(&oldest).unwrap();
            g.1 -= e.1;
        }
    }

    /// Bytes held.
    pub fn size(&self) -> usize {
        self.inner.lock().unwrap().1
    }
}
