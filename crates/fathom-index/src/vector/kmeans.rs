//! k-means (Lloyd's, seeded with k-means++) and the
//! nearest-centroid search the build and the queries share. Assignment,
//! the costly step, runs on every core.

use std::ops::Range;

use rand::rngs::StdRng;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};

use super::distance::{dot, l2_squared};

/// Runs `f` over `0..n` split into one contiguous range per core.
pub fn par_ranges<T: Send>(n: usize, f: impl Fn(Range<usize>) -> T + Sync) -> Vec<T> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(n.max(1));
    if threads <= 1 || n < 256 {
        return vec![f(0..n)];
    }
    let step = n.div_ceil(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let r = (t * step).min(n)..((t + 1) * step).min(n);
                let f = &f;
                s.spawn(move || f(r))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Rows of the data a block of [`nearest_rows`] multiplies at once.
const BLOCK_ROWS: usize = 128;

/// Squared norms of the rows of `c` (row-major, `dim` wide).
pub fn row_norms(c: &[f32], dim: usize) -> Vec<f32> {
    c.chunks_exact(dim.max(1)).map(|r| dot(r, r)).collect()
}

/// For every row of `data` (row-major, `dim` wide): the nearest row of
/// `c` (`k × dim`, squared norms `c_norms`) and its score, as
/// [`Centroids::score`] gives it (squared L2, or minus the inner product).
/// Blocks of rows are multiplied with all of `c` at once
/// (`|x|² - 2x·c + |c|²`): a cache-blocked matrix product instead of one
/// distance loop per pair. Rounding can differ from the pairwise loop in
/// the last bits; ties go to the lower index.
pub fn nearest_rows(
    c: &[f32],
    c_norms: &[f32],
    dim: usize,
    data: &[f32],
    inner_product: bool,
) -> Vec<(u32, f32)> {
    let n = data.len() / dim.max(1);
    nearest_strided(c, c_norms, dim, data, dim, n, inner_product)
}

/// [`nearest_rows`] over `n` rows of `dim` values that start `stride`
/// values apart in `data` (sub-vectors of wider rows).
pub fn nearest_strided(
    c: &[f32],
    c_norms: &[f32],
    dim: usize,
    data: &[f32],
    stride: usize,
    n: usize,
    inner_product: bool,
) -> Vec<(u32, f32)> {
    let k = c_norms.len();
    assert!(
        n == 0 || (n - 1) * stride + dim <= data.len(),
        "rows past the data"
    );
    let mut out = Vec::with_capacity(n);
    if k == 0 || dim == 0 {
        out.resize(n, (0, f32::INFINITY));
        return out;
    }
    let mut prod = vec![0f32; BLOCK_ROWS * k];
    for start in (0..n).step_by(BLOCK_ROWS) {
        let rows = BLOCK_ROWS.min(n - start);
        let x = &data[start * stride..(start + rows - 1) * stride + dim];
        // prod (rows × k) = x (rows × dim) · cᵀ (dim × k).
        // SAFETY: the strides describe `x`, `c` and `prod` within their
        // lengths: x holds rows of dim values `stride` apart (checked
        // above), c is k × dim row-major (read as its transpose), prod
        // holds rows × k.
        unsafe {
            matrixmultiply::sgemm(
                rows,
                dim,
                k,
                1.0,
                x.as_ptr(),
                stride as isize,
                1,
                c.as_ptr(),
                1,
                dim as isize,
                0.0,
                prod.as_mut_ptr(),
                k as isize,
                1,
            );
        }
        for (i, p) in prod[..rows * k].chunks_exact(k).enumerate() {
            let mut best = (0u32, f32::INFINITY);
            if inner_product {
                for (j, d) in p.iter().enumerate() {
                    if -d < best.1 {
                        best = (j as u32, -d);
                    }
                }
            } else {
                for (j, (d, cn)) in p.iter().zip(c_norms).enumerate() {
                    let s = cn - 2.0 * d;
                    if s < best.1 {
                        best = (j as u32, s);
                    }
                }
                let v = &x[i * stride..i * stride + dim];
                best.1 = (best.1 + dot(v, v)).max(0.0);
            }
            out.push(best);
        }
    }
    out
}

/// Trained centroids, row-major `k × dim`.
#[derive(Debug, Clone)]
pub struct Centroids {
    pub dim: usize,
    pub data: Vec<f32>,
    /// Assign by largest inner product instead of smallest L2.
    pub inner_product: bool,
}

impl Centroids {
    pub fn k(&self) -> usize {
        self.data.len() / self.dim.max(1)
    }

    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }

    /// The score a centroid gets for `v` (smaller is nearer).
    #[inline]
    pub fn score(&self, v: &[f32], i: usize) -> f32 {
        if self.inner_product {
            -dot(v, self.row(i))
        } else {
            l2_squared(v, self.row(i))
        }
    }

    /// The nearest centroid of `v` and its score.
    pub fn nearest(&self, v: &[f32]) -> (usize, f32) {
        let mut best = (0, f32::INFINITY);
        for i in 0..self.k() {
            let d = self.score(v, i);
            if d < best.1 {
                best = (i, d);
            }
        }
        best
    }

    /// The `n` nearest centroids of `v`, nearest first.
    pub fn nearest_n(&self, v: &[f32], n: usize) -> Vec<usize> {
        let mut all: Vec<(f32, usize)> = (0..self.k()).map(|i| (self.score(v, i), i)).collect();
        let n = n.min(all.len());
        if n < all.len() {
            all.select_nth_unstable_by(n, |a, b| a.0.total_cmp(&b.0));
            all.truncate(n);
        }
        all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        all.into_iter().map(|(_, i)| i).collect()
    }

    /// The nearest centroid of every row of `data` (row-major), in parallel.
    pub fn assign(&self, data: &[f32]) -> Vec<u32> {
        let n = data.len() / self.dim;
        let norms = row_norms(&self.data, self.dim);
        par_ranges(n, |r| {
            nearest_rows(
                &self.data,
                &norms,
                self.dim,
                &data[r.start * self.dim..r.end * self.dim],
                self.inner_product,
            )
            .into_iter()
            .map(|(j, _)| j)
            .collect::<Vec<_>>()
        })
        .concat()
    }
}

/// k-means++ seeding: each next centroid is a row drawn with probability
/// proportional to its squared distance to the nearest centroid so far
/// (distances updated on every core).
fn init_plus_plus(c: &mut Centroids, data: &[f32], k: usize, rng: &mut StdRng) {
    let dim = c.dim;
    let n = data.len() / dim;
    let first = sample(rng, n, 1).index(0);
    c.data
        .extend_from_slice(&data[first * dim..(first + 1) * dim]);
    let mut best = vec![f32::INFINITY; n];
    for j in 1..k {
        let last = c.data[(j - 1) * dim..j * dim].to_vec();
        let parts = par_ranges(n, |r| {
            let mut local = Vec::with_capacity(r.len());
            for i in r {
                let d = l2_squared(&data[i * dim..(i + 1) * dim], &last);
                local.push(d);
            }
            local
        });
        let mut total = 0f64;
        for (b, d) in best.iter_mut().zip(parts.into_iter().flatten()) {
            *b = b.min(d);
            total += *b as f64;
        }
        let pick = if total > 0.0 {
            let mut t = rng.random_range(0.0..total);
            let mut pick = n - 1;
            for (i, b) in best.iter().enumerate() {
                t -= *b as f64;
                if t < 0.0 {
                    pick = i;
                    break;
                }
            }
            pick
        } else {
            rng.random_range(0..n)
        };
        c.data
            .extend_from_slice(&data[pick * dim..(pick + 1) * dim]);
    }
}

/// Trains `k` centroids on `data` (row-major, `dim` wide) with at most
/// `max_iters` rounds, stopping when the loss improves by less than 1e-4
/// relatively. Returns the centroids and the final loss (sum of scores).
pub fn train(
    data: &[f32],
    dim: usize,
    k: usize,
    max_iters: usize,
    inner_product: bool,
    seed: u64,
) -> (Centroids, f64) {
    let n = data.len() / dim;
    let k = k.min(n).max(1);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut c = Centroids {
        dim,
        data: Vec::with_capacity(k * dim),
        inner_product,
    };
    if n == 0 {
        c.data = vec![0.0; dim];
        return (c, 0.0);
    }
    init_plus_plus(&mut c, data, k, &mut rng);
    let mut last = f64::INFINITY;
    let mut loss = 0.0;
    for _ in 0..max_iters.max(1) {
        // Assign and accumulate sums per thread, then reduce.
        let norms = row_norms(&c.data, dim);
        let parts = par_ranges(n, |r| {
            let mut sums = vec![0f64; k * dim];
            let mut counts = vec![0usize; k];
            let mut loss = 0f64;
            let near = nearest_rows(
                &c.data,
                &norms,
                dim,
                &data[r.start * dim..r.end * dim],
                inner_product,
            );
            for (i, (j, d)) in r.zip(near) {
                let j = j as usize;
                let v = &data[i * dim..(i + 1) * dim];
                loss += d as f64;
                counts[j] += 1;
                for (s, x) in sums[j * dim..(j + 1) * dim].iter_mut().zip(v) {
                    *s += *x as f64;
                }
            }
            (sums, counts, loss)
        });
        let mut sums = vec![0f64; k * dim];
        let mut counts = vec![0usize; k];
        loss = 0.0;
        for (s, cn, l) in parts {
            for (a, b) in sums.iter_mut().zip(s) {
                *a += b;
            }
            for (a, b) in counts.iter_mut().zip(cn) {
                *a += b;
            }
            loss += l;
        }
        for j in 0..k {
            if counts[j] > 0 {
                for d in 0..dim {
                    c.data[j * dim + d] = (sums[j * dim + d] / counts[j] as f64) as f32;
                }
            }
        }
        // An empty cluster takes half of the largest one: a copy of its
        // centroid, nudged apart.
        for j in 0..k {
            if counts[j] == 0 {
                let big = (0..k).max_by_key(|&i| counts[i]).unwrap();
                for d in 0..dim {
                    let x = c.data[big * dim + d];
                    let eps = 1e-4 * (1.0 + x.abs());
                    c.data[j * dim + d] = x + eps;
                    c.data[big * dim + d] = x - eps;
                }
                counts[j] = counts[big] / 2;
                counts[big] -= counts[j];
            }
        }
        if last.is_finite() && (last - loss).abs() <= 1e-4 * last.abs() {
            break;
        }
        last = loss;
    }
    (c, loss)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The blocked matrix-product search finds, for every row, a centroid
    /// whose exact score is the pairwise minimum (up to rounding), for
    /// L2 and inner product, whole rows and strided sub-vectors, partial
    /// last blocks included.
    #[test]
    fn blocked_nearest_equals_pairwise() {
        let mut rng = StdRng::seed_from_u64(5);
        for (dim, k, n) in [(128, 256, 300), (8, 256, 1000), (3, 5, 129), (16, 1, 7)] {
            let c: Vec<f32> = (0..k * dim).map(|_| rng.random_range(-1.0..1.0)).collect();
            let data: Vec<f32> = (0..n * dim).map(|_| rng.random_range(-1.0..1.0)).collect();
            for ip in [false, true] {
                let cs = Centroids {
                    dim,
                    data: c.clone(),
                    inner_product: ip,
                };
                let got = nearest_rows(&c, &row_norms(&c, dim), dim, &data, ip);
                assert_eq!(got.len(), n);
                for (i, (j, d)) in got.iter().enumerate() {
                    let v = &data[i * dim..(i + 1) * dim];
                    let (_, best) = cs.nearest(v);
                    let mine = cs.score(v, *j as usize);
                    assert!(
                        (mine - best).abs() <= 1e-4 * (1.0 + best.abs()),
                        "{dim} {ip} {i}"
                    );
                    assert!(
                        (d - mine).abs() <= 1e-3 * (1.0 + mine.abs()),
                        "{dim} {ip} {i}: {d} {mine}"
                    );
                }
            }
            // Sub-vector 1 of rows two sub-vectors wide.
            if n > 1 {
                let rows = n / 2;
                let got = nearest_strided(
                    &c,
                    &row_norms(&c, dim),
                    dim,
                    &data[dim..],
                    2 * dim,
                    rows,
                    false,
                );
                let cs = Centroids {
                    dim,
                    data: c.clone(),
                    inner_product: false,
                };
                for (i, (j, _)) in got.iter().enumerate() {
                    let v = &data[(2 * i + 1) * dim..(2 * i + 2) * dim];
                    let (_, best) = cs.nearest(v);
                    assert!(
                        (cs.score(v, *j as usize) - best).abs() <= 1e-4 * (1.0 + best),
                        "{i}"
                    );
                }
            }
        }
    }

    #[test]
    fn separates_clusters() {
        // Three well-separated 2-d blobs.
        let mut data = vec![];
        for (cx, cy) in [(0.0, 0.0), (10.0, 10.0), (-10.0, 5.0)] {
            for i in 0..100 {
                let t = i as f32 * 0.01;
                data.extend_from_slice(&[cx + t, cy - t]);
            }
        }
        let (c, loss) = train(&data, 2, 3, 50, false, 7);
        assert_eq!(c.k(), 3);
        let a = c.assign(&data);
        for b in 0..3 {
            let first = a[b * 100];
            assert!(a[b * 100..(b + 1) * 100].iter().all(|x| *x == first));
        }
        assert!(loss < 100.0, "{loss}");
        assert_eq!(c.nearest_n(&[10.0, 10.0], 2)[0], a[100] as usize);
    }
}
