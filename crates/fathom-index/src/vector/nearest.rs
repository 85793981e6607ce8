//! The `k` nearest (distance, id) pairs seen: the one top-k a vector
//! search keeps, whether it scores a segment's partitions (one per
//! thread, merged after) or exact distances of fetched rows.

use std::collections::BinaryHeap;

/// An f32 ordered by `total_cmp` (NaN last).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ordered(pub f32);
impl Eq for Ordered {}
impl PartialOrd for Ordered {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Ordered {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&o.0)
    }
}

/// Keeps the `k` smallest (distance, id) pairs, ties by the lower id: the
/// kept set does not depend on the order pairs arrive in, so per-thread
/// sets merged give the set one pass would.
#[derive(Debug, Clone)]
pub struct Nearest {
    k: usize,
    heap: BinaryHeap<(Ordered, u64)>,
}

impl Nearest {
    pub fn new(k: usize) -> Nearest {
        Nearest {
            k,
            heap: BinaryHeap::with_capacity(k.saturating_add(1).min(1 << 16)),
        }
    }

    /// Whether `(d, id)` could not take a place (cheap: callers test this
    /// before costlier checks such as an allow-list).
    #[inline]
    pub fn rejects(&self, d: f32, id: u64) -> bool {
        self.k == 0
            || (self.heap.len() >= self.k
                && self.heap.peek().is_some_and(|top| (Ordered(d), id) >= *top))
    }

    /// The k-th distance once k pairs are kept.
    pub fn kth(&self) -> Option<f32> {
        if self.k == 0 || self.heap.len() < self.k {
            None
        } else {
            self.heap.peek().map(|top| top.0.0)
        }
    }

    #[inline]
    pub fn push(&mut self, d: f32, id: u64) {
        if self.rejects(d, id) {
            return;
        }
        self.heap.push((Ordered(d), id));
        if self.heap.len() > self.k {
            self.heap.pop();
        }
    }

    /// Adds every pair `other` kept.
    pub fn merge(&mut self, other: Nearest) {
        for (d, id) in other.heap {
            self.push(d.0, id);
        }
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// `(id, distance)`, nearest first, ties by lower id.
    pub fn into_sorted(self) -> Vec<(u64, f32)> {
        let mut v: Vec<(u64, f32)> = self.heap.into_iter().map(|(d, id)| (id, d.0)).collect();
        v.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Any split of the input into parts, each kept and merged, keeps what
    /// one pass keeps, which is the sorted input's first k.
    #[test]
    fn merge_of_parts_equals_one_pass_equals_sort() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..200 {
            let n = (next() % 300) as usize;
            let k = (next() % 40) as usize;
            // Few distinct distances, so ties are common.
            let pairs: Vec<(u64, f32)> = (0..n)
                .map(|i| (i as u64 * 7 % 1000, (next() % 13) as f32))
                .collect();
            let mut want = pairs.clone();
            want.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
            want.dedup();
            want.truncate(k);
            let mut one = Nearest::new(k);
            for (id, d) in &pairs {
                one.push(*d, *id);
            }
            let parts = 1 + (next() % 4) as usize;
            let mut merged = Nearest::new(k);
            for chunk in pairs.chunks(n.div_ceil(parts).max(1)) {
                let mut t = Nearest::new(k);
                for (id, d) in chunk {
                    t.push(*d, *id);
                }
                merged.merge(t);
            }
            assert_eq!(one.into_sorted(), want, "round {round}");
            assert_eq!(merged.into_sorted(), want, "round {round}");
        }
    }
}
