//! HNSW graphs, one per IVF partition (IVF_HNSW_SQ), over the partition's
//! scalar codes. Lance's layout (research: lance-index-bytes.md section
//! 2.5): the graph rows of a partition are its levels one after another,
//! level 0 holding every vector id (its row in the partition), upper
//! levels the ids present, ascending; each row lists neighbour ids and
//! their distances; `level_offsets` and the entry point are kept per
//! partition in the `lance:hnsw` metadata.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::nearest::Ordered;

/// Graph parameters (Lance's defaults: m 20, ef_construction 150, 7 levels).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HnswParams {
    pub m: usize,
    pub ef_construction: usize,
    pub max_level: usize,
}

impl Default for HnswParams {
    fn default() -> Self {
        HnswParams {
            m: 20,
            ef_construction: 150,
            max_level: 7,
        }
    }
}

/// One partition's graph: per level, the nodes present (ascending) and
/// their neighbours; level 0 holds every node.
#[derive(Debug, Clone, Default)]
pub struct Graph {
    pub entry_point: u32,
    pub levels: Vec<Level>,
}

#[derive(Debug, Clone, Default)]
pub struct Level {
    pub nodes: Vec<u32>,
    pub neighbors: Vec<Vec<u32>>,
    /// Where a node is in `nodes` (upper levels only; level 0 is dense).
    pub index: HashMap<u32, usize>,
}

impl Level {
    fn of(&self, level: usize, node: u32) -> &[u32] {
        let i = if level == 0 {
            Some(node as usize)
        } else {
            self.index.get(&node).copied()
        };
        i.map_or(&[], |i| &self.neighbors[i])
    }
}

/// Nearest `ef` nodes to the query at `level`, from `entry` (ascending).
/// Only nodes `allow` accepts enter the result; the walk goes through the
/// others.
#[allow(clippy::too_many_arguments)]
fn search_level(
    g: &Graph,
    dist: &dyn Fn(u32) -> f32,
    prefetch: &dyn Fn(u32),
    entry: &[(f32, u32)],
    ef: usize,
    level: usize,
    visited: &mut Visited,
    allow: &dyn Fn(u32) -> bool,
) -> Vec<(f32, u32)> {
    visited.clear();
    let mut cand: BinaryHeap<Reverse<(Ordered, u32)>> = BinaryHeap::new();
    let mut best: BinaryHeap<(Ordered, u32)> = BinaryHeap::new();
    for &(d, n) in entry {
        if visited.insert(n) {
            cand.push(Reverse((Ordered(d), n)));
            if allow(n) {
                best.push((Ordered(d), n));
            }
        }
    }
    while best.len() > ef {
        best.pop();
    }
    let lvl = &g.levels[level];
    while let Some(Reverse((d, n))) = cand.pop() {
        if best.len() >= ef && d > best.peek().unwrap().0 {
            break;
        }
        let nbs = lvl.of(level, n);
        // Ask for every neighbour's vector before scoring the first: their
        // memory loads overlap instead of each waiting for the last.
        for &nb in nbs {
            prefetch(nb);
        }
        for &nb in nbs {
            if !visited.insert(nb) {
                continue;
            }
            let dn = Ordered(dist(nb));
            if best.len() < ef || dn < best.peek().unwrap().0 {
                cand.push(Reverse((dn, nb)));
                if allow(nb) {
                    best.push((dn, nb));
                    if best.len() > ef {
                        best.pop();
                    }
                }
            }
        }
    }
    let mut out: Vec<(f32, u32)> = best.into_iter().map(|(d, n)| (d.0, n)).collect();
    out.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    out
}

/// A visited set reused across searches (generation-stamped).
struct Visited {
    stamp: Vec<u32>,
    epoch: u32,
}

impl Visited {
    fn new(n: usize) -> Self {
        Visited {
            stamp: vec![0; n],
            epoch: 0,
        }
    }
    /// Room for nodes `0..n`.
    fn grow(&mut self, n: usize) {
        if self.stamp.len() < n {
            // New slots hold 0, which no epoch after a `clear` equals.
            self.stamp.resize(n, 0);
        }
    }
    fn clear(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.stamp.iter_mut().for_each(|s| *s = 0);
            self.epoch = 1;
        }
    }
    fn insert(&mut self, n: u32) -> bool {
        let s = &mut self.stamp[n as usize];
        if *s == self.epoch {
            false
        } else {
            *s = self.epoch;
            true
        }
    }
}

/// The `k` nearest allowed nodes to the query (`dist` from the query to
/// a node), searching level 0 with `ef` candidates.
pub fn search(
    g: &Graph,
    n: usize,
    dist: &dyn Fn(u32) -> f32,
    prefetch: &dyn Fn(u32),
    k: usize,
    ef: usize,
    allow: &dyn Fn(u32) -> bool,
) -> Vec<(f32, u32)> {
    if n == 0 || g.levels.is_empty() {
        return vec![];
    }
    // One visited set per thread, grown to the largest graph searched,
    // rather than one allocation per partition searched.
    thread_local! {
        static VISITED: std::cell::RefCell<Visited> = std::cell::RefCell::new(Visited::new(0));
    }
    VISITED.with_borrow_mut(|visited| {
        visited.grow(n);
        let mut ep = vec![(dist(g.entry_point), g.entry_point)];
        for level in (1..g.levels.len()).rev() {
            if g.levels[level].nodes.is_empty() {
                continue;
            }
            ep = search_level(g, dist, prefetch, &ep, 1, level, visited, &|_| true);
        }
        let mut out = search_level(g, dist, prefetch, &ep, ef.max(k), 0, visited, allow);
        out.truncate(k);
        out
    })
}

/// Builds the graph of `n` nodes with `dist(a, b)` between nodes.
pub fn build(
    n: usize,
    dist: &(dyn Fn(u32, u32) -> f32 + Sync),
    p: &HnswParams,
    seed: u64,
) -> Graph {
    let mut g = Graph {
        entry_point: 0,
        levels: vec![Level::default(); p.max_level.max(1)],
    };
    if n == 0 {
        return g;
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let ml = 1.0 / (p.m.max(2) as f64).ln();
    // adj[node][level]
    let mut adj: Vec<Vec<Vec<u32>>> = Vec::with_capacity(n);
    let mut top = 0usize;
    let mut visited = Visited::new(n);
    for i in 0..n as u32 {
        let u: f64 = rng.random_range(1e-12..1.0);
        let lvl = ((-u.ln() * ml).floor() as usize).min(p.max_level.max(1) - 1);
        adj.push(vec![vec![]; lvl + 1]);
        if i == 0 {
            top = lvl;
            g.entry_point = 0;
            continue;
        }
        // A view of the graph built so far for the level searches.
        let dq = |x: u32| dist(i, x);
        let mut ep = vec![(dq(g.entry_point), g.entry_point)];
        for level in (lvl + 1..=top).rev() {
            ep = greedy(&adj, &dq, ep[0], level);
        }
        for level in (0..=lvl.min(top)).rev() {
            let w = search_adj(&adj, &dq, &ep, p.ef_construction, level, &mut visited);
            let mmax = if level == 0 { 2 * p.m } else { p.m };
            let chosen = select(&w, p.m, dist);
            adj[i as usize][level] = chosen.clone();
            for nb in chosen {
                let list = &mut adj[nb as usize][level];
                list.push(i);
                if list.len() > mmax {
                    let mut scored: Vec<(f32, u32)> =
                        list.iter().map(|&x| (dist(nb, x), x)).collect();
                    scored.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                    *list = select(&scored, mmax, dist);
                }
            }
            ep = w;
        }
        if lvl > top {
            top = lvl;
            g.entry_point = i;
        }
    }
    for (level, l) in g.levels.iter_mut().enumerate() {
        for (node, a) in adj.iter().enumerate() {
            if let Some(nb) = a.get(level) {
                if level > 0 {
                    l.index.insert(node as u32, l.nodes.len());
                }
                l.nodes.push(node as u32);
                l.neighbors.push(nb.clone());
            }
        }
    }
    g
}

/// The HNSW paper's neighbour heuristic: from `cands` (ascending by
/// distance to the node), keep a candidate only if it is nearer to the
/// node than to every neighbour kept so far (so links spread in all
/// directions and the graph stays connected), then fill up to `m` with
/// the nearest of those passed over.
fn select(cands: &[(f32, u32)], m: usize, dist: &(dyn Fn(u32, u32) -> f32 + Sync)) -> Vec<u32> {
    let mut kept: Vec<u32> = Vec::with_capacity(m);
    let mut passed = vec![];
    for &(d, c) in cands {
        if kept.len() >= m {
            break;
        }
        if kept.iter().all(|&r| dist(c, r) > d) {
            kept.push(c);
        } else {
            passed.push(c);
        }
    }
    for c in passed {
        if kept.len() >= m {
            break;
        }
        kept.push(c);
    }
    kept
}

fn greedy(
    adj: &[Vec<Vec<u32>>],
    dq: &dyn Fn(u32) -> f32,
    start: (f32, u32),
    level: usize,
) -> Vec<(f32, u32)> {
    let (mut d, mut n) = start;
    loop {
        let mut moved = false;
        for &nb in adj[n as usize].get(level).map_or(&[][..], |v| v) {
            let dn = dq(nb);
            if dn < d {
                d = dn;
                n = nb;
                moved = true;
            }
        }
        if !moved {
            return vec![(d, n)];
        }
    }
}

fn search_adj(
    adj: &[Vec<Vec<u32>>],
    dq: &dyn Fn(u32) -> f32,
    entry: &[(f32, u32)],
    ef: usize,
    level: usize,
    visited: &mut Visited,
) -> Vec<(f32, u32)> {
    visited.clear();
    let mut cand: BinaryHeap<Reverse<(Ordered, u32)>> = BinaryHeap::new();
    let mut best: BinaryHeap<(Ordered, u32)> = BinaryHeap::new();
    for &(d, n) in entry {
        if visited.insert(n) {
            cand.push(Reverse((Ordered(d), n)));
            best.push((Ordered(d), n));
        }
    }
    while let Some(Reverse((d, n))) = cand.pop() {
        if best.len() >= ef && d > best.peek().unwrap().0 {
            break;
        }
        for &nb in adj[n as usize].get(level).map_or(&[][..], |v| v) {
            if !visited.insert(nb) {
                continue;
            }
            let dn = Ordered(dq(nb));
            if best.len() < ef || dn < best.peek().unwrap().0 {
                cand.push(Reverse((dn, nb)));
                best.push((dn, nb));
                if best.len() > ef {
                    best.pop();
                }
            }
        }
    }
    let mut out: Vec<(f32, u32)> = best.into_iter().map(|(d, n)| (d.0, n)).collect();
    out.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_neighbours_with_and_without_a_filter() {
        let mut rng = StdRng::seed_from_u64(3);
        let n = 2000;
        let pts: Vec<[f32; 4]> = (0..n)
            .map(|_| std::array::from_fn(|_| rng.random_range(-1.0..1.0)))
            .collect();
        let d = |a: &[f32; 4], b: &[f32; 4]| -> f32 {
            a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
        };
        let g = build(
            n,
            &|a, b| d(&pts[a as usize], &pts[b as usize]),
            &HnswParams::default(),
            1,
        );
        assert_eq!(g.levels[0].nodes.len(), n);
        let mut hits = 0;
        for t in 0..50 {
            let q: [f32; 4] = std::array::from_fn(|_| rng.random_range(-1.0..1.0));
            let allow = |x: u32| t % 2 == 0 || x.is_multiple_of(3);
            let got = search(&g, n, &|x| d(&q, &pts[x as usize]), &|_| {}, 10, 64, &allow);
            let mut want: Vec<(f32, u32)> = (0..n as u32)
                .filter(|x| allow(*x))
                .map(|x| (d(&q, &pts[x as usize]), x))
                .collect();
            want.sort_by(|a, b| a.0.total_cmp(&b.0));
            want.truncate(10);
            assert!(got.iter().all(|x| allow(x.1)));
            assert_eq!(got.len(), 10);
            hits += got
                .iter()
                .filter(|x| want.iter().any(|w| w.1 == x.1))
                .count();
        }
        let recall = hits as f64 / 500.0;
        assert!(recall > 0.95, "recall {recall}");
    }
}
