//! Searching a loaded vector segment: the probed partitions scored on
//! every core, nearest first, each skipped when the triangle inequality
//! shows none of its rows can take a place, into one top k.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use super::build::code_l2;
use super::distance::{Metric, l2_squared};
use super::hnsw;
use super::model::{Model, PQ_CODES, Quantizer, sq_code, sq_place};
use super::nearest::Nearest;
use super::segment::{Partition, VectorSegment};
use crate::cache::IndexCache;
use crate::error::{Error, Result};

/// What a search did.
#[derive(Debug, Default, Clone, Copy)]
pub struct SearchStats {
    pub partitions_probed: usize,
    /// Probed partitions not scored: every row of theirs lies farther
    /// than the k-th distance already found (triangle inequality).
    pub partitions_skipped: usize,
    pub candidates_scored: usize,
    /// Rows near enough to take a place that the allow-list rejected.
    pub rows_excluded: usize,
}

impl VectorSegment {
    /// Partition `p`'s radius: the largest Euclidean distance from its
    /// reference point to a row, measured where the partition's scores
    /// are squared Euclidean distances (times a constant):
    /// - IVF_FLAT, l2: the stored vectors, around the centroid;
    /// - IVF_PQ, l2 and cosine: the reconstructions (centroid plus
    ///   decoded residual), around the centroid: the norm of the decoded
    ///   residual, from the codewords' norms;
    /// - IVF_SQ and IVF_HNSW_SQ, l2 and cosine: code space, around the
    ///   centroid's place there.
    ///
    /// Infinite (never skipped) for dot, and for IVF_FLAT with cosine
    /// (1 - cos is half a squared distance only between non-zero
    /// vectors).
    pub(super) fn radius(&self, p: usize, part: &Partition) -> f32 {
        let model = &self.model;
        let n = part.ids.len();
        if model.metric == Metric::Dot || n == 0 {
            return f32::INFINITY;
        }
        let c = model.centroids.row(p);
        let dim = model.dim;
        let mut max = 0f32;
        match &model.quantizer {
            Quantizer::Flat if model.metric == Metric::L2 => {
                for x in part.flat.chunks_exact(dim) {
                    max = max.max(l2_squared(x, c));
                }
            }
            Quantizer::Flat => return f32::INFINITY,
            Quantizer::Pq { m, codebook } => {
                let sub = dim / m;
                let norms: Vec<f32> = codebook
                    .chunks_exact(sub)
                    .map(|y| y.iter().map(|v| v * v).sum())
                    .collect();
                let mut acc = vec![0f32; n];
                for j in 0..*m {
                    let t = &norms[j * PQ_CODES..(j + 1) * PQ_CODES];
                    for (a, code) in acc.iter_mut().zip(&part.codes[j * n..(j + 1) * n]) {
                        *a += t[*code as usize];
                    }
                }
                max = acc.into_iter().fold(0f32, f32::max);
            }
            Quantizer::Sq { start, end } => {
                let at = sq_place(c, *start, *end);
                for x in part.codes.chunks_exact(dim) {
                    let d: f32 = x
                        .iter()
                        .zip(&at)
                        .map(|(x, y)| (*x as f32 - y) * (*x as f32 - y))
                        .sum();
                    max = max.max(d);
                }
            }
        }
        if max.is_finite() {
            max.sqrt()
        } else {
            f32::INFINITY
        }
    }

    /// A lower bound on the score of every row of partition `p` (radius
    /// `radius`) for the prepared query `q` (`qc`: its SQ codes), by the
    /// triangle inequality, made smaller by a margin that covers f32
    /// rounding; zero when the query may be as near as the partition's
    /// rows.
    fn score_floor(&self, q: &[f32], qc: &[u8], p: usize, radius: f32) -> f32 {
        if !radius.is_finite() {
            return 0.0;
        }
        let model = &self.model;
        let c = model.centroids.row(p);
        let (dist, scale) = match &model.quantizer {
            Quantizer::Sq { start, end } => {
                let at = sq_place(c, *start, *end);
                let d: f32 = qc
                    .iter()
                    .zip(&at)
                    .map(|(x, y)| (*x as f32 - y) * (*x as f32 - y))
                    .sum();
                (d.sqrt(), ((end - start) / 255.0).powi(2))
            }
            _ => (l2_squared(q, c).sqrt(), 1.0),
        };
        let gap = dist - radius - 1e-4 * (dist + radius);
        if gap > 0.0 && gap.is_finite() {
            gap * gap * scale * (1.0 - 1e-4)
        } else {
            0.0
        }
    }

    /// Scores partition `p` (`part`) for the prepared query `q` into `top`.
    #[allow(clippy::too_many_arguments)]
    fn score_partition(
        &self,
        q: &[f32],
        p: usize,
        part: &Partition,
        k: usize,
        ef: usize,
        allow: &(dyn Fn(u64) -> bool + Sync),
        top: &mut Nearest,
        stats: &mut SearchStats,
        scratch: &mut Vec<f32>,
    ) {
        let model = &self.model;
        stats.partitions_probed += 1;
        let n = part.ids.len();
        if n == 0 {
            return;
        }
        // A graph search that would keep every row scores them all.
        let graph = part.graph.as_ref().filter(|_| ef.max(k) < n);
        let offer = |top: &mut Nearest, stats: &mut SearchStats, i: usize, dist: f32| {
            let id = part.ids[i];
            if top.rejects(dist, id) {
                return;
            }
            if !allow(id) {
                stats.rows_excluded += 1;
                return;
            }
            top.push(dist, id);
        };
        match (graph, &model.quantizer) {
            (Some(g), Quantizer::Sq { start, end }) => {
                let qc: Vec<u8> = q.iter().map(|x| sq_code(*x, *start, *end)).collect();
                let s2 = ((end - start) / 255.0).powi(2);
                let dim = model.dim;
                let codes = &part.codes;
                let dist = |node: u32| {
                    let c = &codes[node as usize * dim..(node as usize + 1) * dim];
                    code_l2(&qc, c) * s2
                };
                let prefetch = |node: u32| {
                    if let Some(c) = codes.get(node as usize * dim..(node as usize + 1) * dim) {
                        prefetch_bytes(c);
                    }
                };
                let ids = &part.ids;
                let found = hnsw::search(g, n, &dist, &prefetch, k, ef, &|node| {
                    allow(ids[node as usize])
                });
                let found_n = found.len();
                for (d, node) in found {
                    offer(top, stats, node as usize, d);
                }
                stats.candidates_scored += found_n;
            }
            _ => {
                model.scorer(q, p, &self.pq_columns).score_into(
                    model.metric,
                    q,
                    n,
                    &part.flat,
                    &part.codes,
                    scratch,
                );
                // Rows farther than the k-th kept distance cannot take a
                // place (equal ones may, by a lower id): one comparison.
                let mut bound = top.kth().unwrap_or(f32::INFINITY);
                for (i, dist) in scratch.iter().enumerate() {
                    if *dist > bound {
                        continue;
                    }
                    offer(top, stats, i, *dist);
                    bound = top.kth().unwrap_or(f32::INFINITY);
                }
                stats.candidates_scored += n;
            }
        }
    }

    /// The `k` nearest stored ids to `query` (raw, `dim` long) among the
    /// `nprobes` nearest partitions, by the index's approximate distance,
    /// nearest first; rows whose id `allow` rejects never take a place.
    pub async fn search(
        &self,
        query: &[f32],
        k: usize,
        nprobes: usize,
        ef: usize,
        cache: &IndexCache,
        allow: &(dyn Fn(u64) -> bool + Sync),
    ) -> Result<(Vec<(u64, f32)>, SearchStats)> {
        self.search_with(
            query,
            k,
            nprobes,
            ef,
            cache,
            allow,
            SearchOptions::default(),
        )
        .await
    }

    /// [`search`](Self::search) with options: the result does not depend
    /// on them.
    #[allow(clippy::too_many_arguments)]
    pub async fn search_with(
        &self,
        query: &[f32],
        k: usize,
        nprobes: usize,
        ef: usize,
        cache: &IndexCache,
        allow: &(dyn Fn(u64) -> bool + Sync),
        opts: SearchOptions,
    ) -> Result<(Vec<(u64, f32)>, SearchStats)> {
        let model = &self.model;
        if query.len() != model.dim {
            return Err(Error::InvalidInput(format!(
                "query vector has {} dimensions; the index has {}",
                query.len(),
                model.dim
            )));
        }
        let mut q = query.to_vec();
        Model::prepare_with(model.metric, &mut q);
        let probes = model.centroids.nearest_n(&q, nprobes.max(1));
        let mut parts = Vec::with_capacity(probes.len());
        for p in probes {
            parts.push((p, self.partition(p, cache).await?));
        }
        // Partitions are scored on every core when there are enough rows
        // to pay for the threads, each thread taking the next partition
        // in nearest-first order into its own top k, merged after: the k
        // smallest (distance, id) pairs are the same whichever thread saw
        // them. A partition whose every row lies farther than the k-th
        // distance some thread already holds (its score floor) is
        // skipped: none of its rows could take a place, so the result is
        // the one scoring it would give.
        let rows: usize = parts.iter().map(|(_, p)| p.ids.len()).sum();
        let threads = opts
            .threads
            .unwrap_or_else(|| {
                if rows >= PARALLEL_ROWS {
                    std::thread::available_parallelism().map_or(1, |n| n.get())
                } else {
                    1
                }
            })
            .min(parts.len())
            .max(1);
        let qc: Vec<u8> = match &model.quantizer {
            Quantizer::Sq { start, end } => q.iter().map(|x| sq_code(*x, *start, *end)).collect(),
            _ => Vec::new(),
        };
        let floors: Vec<f32> = parts
            .iter()
            .map(|(p, part)| {
                if opts.skip {
                    self.score_floor(&q, &qc, *p, part.radius)
                } else {
                    0.0
                }
            })
            .collect();
        // The least k-th distance any thread holds (f32 bits: scores whose
        // floors are not zero are non-negative, ordered as their bits).
        let bound = AtomicU32::new(f32::INFINITY.to_bits());
        let next = AtomicUsize::new(0);
        let run = || {
            let mut top = Nearest::new(k);
            let mut stats = SearchStats::default();
            let mut scratch = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((p, part)) = parts.get(i) else { break };
                if floors[i] > f32::from_bits(bound.load(Ordering::Relaxed)) {
                    stats.partitions_probed += 1;
                    stats.partitions_skipped += 1;
                    continue;
                }
                self.score_partition(
                    &q,
                    *p,
                    part,
                    k,
                    ef,
                    allow,
                    &mut top,
                    &mut stats,
                    &mut scratch,
                );
                if let Some(kth) = top.kth()
                    && kth >= 0.0
                {
                    bound.fetch_min(kth.to_bits(), Ordering::Relaxed);
                }
            }
            (top, stats)
        };
        let done: Vec<(Nearest, SearchStats)> = if threads == 1 {
            vec![run()]
        } else {
            std::thread::scope(|s| {
                let handles: Vec<_> = (1..threads)
                    .map(|_| {
                        let run = &run;
                        s.spawn(run)
                    })
                    .collect();
                let mut v = vec![run()];
                v.extend(handles.into_iter().map(|h| h.join().unwrap()));
                v
            })
        };
        let mut top = Nearest::new(k);
        let mut stats = SearchStats::default();
        for (t, s) in done {
            stats.partitions_probed += s.partitions_probed;
            stats.partitions_skipped += s.partitions_skipped;
            stats.candidates_scored += s.candidates_scored;
            stats.rows_excluded += s.rows_excluded;
            top.merge(t);
        }
        Ok((top.into_sorted(), stats))
    }
}

/// How [`VectorSegment::search_with`] runs.
#[derive(Debug, Clone, Copy)]
pub struct SearchOptions {
    /// Threads scoring partitions (`None`: every core once
    /// [`PARALLEL_ROWS`] rows are probed, else one).
    pub threads: Option<usize>,
    /// Skip partitions whose rows all lie beyond the k-th distance found.
    pub skip: bool,
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            threads: None,
            skip: true,
        }
    }
}

/// Asks the CPU to bring `bytes` into its caches (a hint: never faults,
/// changes nothing).
#[inline]
fn prefetch_bytes(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    for line in bytes.chunks(64) {
        // SAFETY: a prefetch reads nothing the program sees and cannot
        // fault; the address is inside `bytes`.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                line.as_ptr() as *const i8
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// Partitions are scored on several cores from this many rows probed.
pub const PARALLEL_ROWS: usize = 32_768;
