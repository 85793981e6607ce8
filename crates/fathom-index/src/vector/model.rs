//! A trained vector index model: IVF centroids plus a quantizer (none,
//! product or scalar), with Lance's encodings (research:
//! lance-index-bytes.md sections 2.3, 2.4).

use super::distance::{Metric, code_l2_kernel, cosine_distance, dot, l2_squared, normalize};
use super::kmeans::{Centroids, nearest_rows, nearest_strided, par_ranges, row_norms, train};
use crate::error::{Error, Result};

/// The vector index kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VectorKind {
    IvfFlat,
    IvfPq,
    IvfSq,
    /// IVF partitions of SQ codes, each searched through an HNSW graph.
    IvfHnswSq,
}

impl VectorKind {
    pub fn name(self) -> &'static str {
        match self {
            VectorKind::IvfFlat => "IVF_FLAT",
            VectorKind::IvfPq => "IVF_PQ",
            VectorKind::IvfSq => "IVF_SQ",
            VectorKind::IvfHnswSq => "IVF_HNSW_SQ",
        }
    }

    /// `ivf_pq`, `IVF-PQ`, `IvfFlat` ...; `None` if not a vector kind.
    pub fn parse(s: &str) -> Option<VectorKind> {
        match s.to_ascii_lowercase().replace(['-', '_'], "").as_str() {
            "ivfflat" => Some(VectorKind::IvfFlat),
            "ivfpq" => Some(VectorKind::IvfPq),
            "ivfsq" => Some(VectorKind::IvfSq),
            "ivfhnswsq" => Some(VectorKind::IvfHnswSq),
            _ => None,
        }
    }
}

/// How to build a vector index; `None` fields take Lance's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct VectorParams {
    pub kind: VectorKind,
    pub metric: Metric,
    pub num_partitions: Option<usize>,
    pub num_sub_vectors: Option<usize>,
    pub num_bits: u32,
    pub max_iters: usize,
    /// Training rows per centroid (IVF) and per code (PQ).
    pub sample_rate: usize,
    /// HNSW graph parameters (IVF_HNSW_SQ).
    pub hnsw: super::hnsw::HnswParams,
}

impl VectorParams {
    pub fn new(kind: VectorKind) -> Self {
        VectorParams {
            kind,
            metric: Metric::L2,
            num_partitions: None,
            num_sub_vectors: None,
            num_bits: 8,
            max_iters: 50,
            sample_rate: 256,
            hnsw: Default::default(),
        }
    }

    /// Parameters from `WITH (name = value, ...)` options, Lance's names.
    pub fn from_options(kind: VectorKind, options: &[(String, String)]) -> Result<Self> {
        let mut p = VectorParams::new(kind);
        for (k, v) in options {
            let num = |what: &str| -> Result<usize> {
                v.parse::<usize>().ok().filter(|n| *n > 0).ok_or_else(|| {
                    Error::InvalidInput(format!("{what} must be a positive integer, got '{v}'"))
                })
            };
            match k.to_ascii_lowercase().as_str() {
                "metric" | "metric_type" | "distance_type" => p.metric = Metric::parse(v)?,
                "num_partitions" => p.num_partitions = Some(num(k)?),
                "num_sub_vectors" if kind == VectorKind::IvfPq => p.num_sub_vectors = Some(num(k)?),
                "num_bits" if kind != VectorKind::IvfFlat => {
                    if num(k)? != 8 {
                        return Err(Error::InvalidInput(format!(
                            "num_bits = {v} is not supported ({} codes are 8 bits)",
                            kind.name()
                        )));
                    }
                }
                "max_iterations" | "max_iters" => p.max_iters = num(k)?,
                "m" | "max_connections" if kind == VectorKind::IvfHnswSq => p.hnsw.m = num(k)?,
                "ef_construction" if kind == VectorKind::IvfHnswSq => {
                    p.hnsw.ef_construction = num(k)?
                }
                "max_level" if kind == VectorKind::IvfHnswSq => p.hnsw.max_level = num(k)?,
                "sample_rate" => p.sample_rate = num(k)?,
                other => {
                    return Err(Error::InvalidInput(format!(
                        "unknown option '{other}' for a {} index (options: metric, num_partitions{}, max_iterations, sample_rate)",
                        kind.name(),
                        match kind {
                            VectorKind::IvfPq => ", num_sub_vectors, num_bits",
                            VectorKind::IvfSq => ", num_bits",
                            VectorKind::IvfHnswSq => ", num_bits, m, ef_construction, max_level",
                            VectorKind::IvfFlat => "",
                        }
                    )));
                }
            }
        }
        Ok(p)
    }

    /// Partitions for `rows` vectors: as given, else √rows (at least 1).
    pub fn partitions_for(&self, rows: usize) -> usize {
        self.num_partitions
            .unwrap_or_else(|| ((rows as f64).sqrt().round() as usize).max(1))
    }

    /// Sub-vectors for `dim`: as given (must divide `dim`), else dim/16,
    /// dim/8 or 1, the first that divides.
    pub fn sub_vectors_for(&self, dim: usize) -> Result<usize> {
        match self.num_sub_vectors {
            Some(m) if dim.is_multiple_of(m) => Ok(m),
            Some(m) => Err(Error::InvalidInput(format!(
                "num_sub_vectors = {m} does not divide the vector dimension {dim}"
            ))),
            None if dim.is_multiple_of(16) && dim >= 16 => Ok(dim / 16),
            None if dim.is_multiple_of(8) && dim >= 8 => Ok(dim / 8),
            None => Ok(1),
        }
    }
}

/// How vectors are stored in the partitions.
#[derive(Debug, Clone)]
pub enum Quantizer {
    /// The vectors themselves (unit-normalised for cosine).
    Flat,
    /// `m` sub-vector codes of 8 bits; codebook `[m][256][dim/m]`.
    Pq { m: usize, codebook: Vec<f32> },
    /// One 8-bit code per dimension over `[start, end]`.
    Sq { start: f32, end: f32 },
}

/// What a trained index knows besides the partitions' contents.
#[derive(Debug, Clone)]
pub struct Model {
    pub kind: VectorKind,
    pub metric: Metric,
    pub dim: usize,
    pub centroids: Centroids,
    pub quantizer: Quantizer,
    pub loss: f64,
    /// Graph parameters of IVF_HNSW_SQ.
    pub hnsw: Option<super::hnsw::HnswParams>,
}

pub const PQ_CODES: usize = 256;

impl Model {
    /// Trains a model on `sample` (row-major, `dim` wide, already prepared
    /// with [`Model::prepare_with`]).
    pub fn train(p: &VectorParams, dim: usize, sample: &[f32], total_rows: usize) -> Result<Model> {
        let n = sample.len() / dim;
        let k = p.partitions_for(total_rows).min(n.max(1));
        let (centroids, loss) = train(sample, dim, k, p.max_iters, p.metric == Metric::Dot, 42);
        let quantizer = match p.kind {
            VectorKind::IvfFlat => Quantizer::Flat,
            VectorKind::IvfSq | VectorKind::IvfHnswSq => {
                let (mut lo, mut hi) = (f32::INFINITY, f32::NEG_INFINITY);
                for x in sample.iter().filter(|x| x.is_finite()) {
                    lo = lo.min(*x);
                    hi = hi.max(*x);
                }
                if lo > hi {
                    (lo, hi) = (0.0, 1.0);
                }
                Quantizer::Sq { start: lo, end: hi }
            }
            VectorKind::IvfPq => {
                let m = p.sub_vectors_for(dim)?;
                let sub = dim / m;
                // Codes of residuals (l2, cosine) or of the vectors (dot).
                let data: Vec<f32> = if p.metric == Metric::Dot {
                    sample.to_vec()
                } else {
                    let assign = centroids.assign(sample);
                    let mut r = sample.to_vec();
                    for (i, a) in assign.iter().enumerate() {
                        let c = centroids.row(*a as usize);
                        for (x, y) in r[i * dim..(i + 1) * dim].iter_mut().zip(c) {
                            *x -= y;
                        }
                    }
                    r
                };
                let mut codebook = Vec::with_capacity(m * PQ_CODES * sub);
                for j in 0..m {
                    let part: Vec<f32> = (0..n)
                        .flat_map(|i| {
                            data[i * dim + j * sub..i * dim + (j + 1) * sub]
                                .iter()
                                .copied()
                        })
                        .collect();
                    let (cb, _) = train(&part, sub, PQ_CODES, p.max_iters, false, 43 + j as u64);
                    let mut cb = cb.data;
                    // Fewer training rows than codes: pad with copies.
                    while cb.len() < PQ_CODES * sub {
                        let first = cb[..sub].to_vec();
                        cb.extend(first);
                    }
                    codebook.extend(cb);
                }
                Quantizer::Pq { m, codebook }
            }
        };
        Ok(Model {
            kind: p.kind,
            metric: p.metric,
            dim,
            centroids,
            quantizer,
            loss,
            hnsw: (p.kind == VectorKind::IvfHnswSq).then_some(p.hnsw),
        })
    }

    /// What the index stores a vector as before quantizing: unit length
    /// for cosine, as is otherwise.
    pub fn prepare_with(metric: Metric, v: &mut [f32]) {
        if metric == Metric::Cosine {
            normalize(v);
        }
    }

    pub fn code_width(&self) -> usize {
        match &self.quantizer {
            Quantizer::Flat => 0,
            Quantizer::Pq { m, .. } => *m,
            Quantizer::Sq { .. } => self.dim,
        }
    }

    /// Partition and code of every prepared vector of `data` (row-major),
    /// in parallel: `(partitions, codes)` with `code_width` bytes per row
    /// (none for flat).
    pub fn encode(&self, data: &[f32]) -> (Vec<u32>, Vec<u8>) {
        let dim = self.dim;
        let n = data.len() / dim;
        let w = self.code_width();
        let norms = row_norms(&self.centroids.data, dim);
        // Per sub-vector: its codebook and the codes' squared norms.
        let books: Vec<(&[f32], Vec<f32>)> = match &self.quantizer {
            Quantizer::Pq { m, codebook } => {
                let sub = dim / m;
                codebook
                    .chunks_exact(PQ_CODES * sub)
                    .map(|b| (b, row_norms(b, sub)))
                    .collect()
            }
            _ => Vec::new(),
        };
        // Rows encoded at once (bounds the residual buffer).
        const STEP: usize = 4096;
        let parts = par_ranges(n, |r| {
            let mut parts = Vec::with_capacity(r.len());
            let mut codes = Vec::with_capacity(r.len() * w);
            let mut resid = Vec::new();
            for s in r.clone().step_by(STEP) {
                let e = (s + STEP).min(r.end);
                let x = &data[s * dim..e * dim];
                let near = nearest_rows(
                    &self.centroids.data,
                    &norms,
                    dim,
                    x,
                    self.centroids.inner_product,
                );
                let first = parts.len();
                parts.extend(near.iter().map(|(p, _)| *p));
                match &self.quantizer {
                    Quantizer::Flat => {}
                    Quantizer::Sq { start, end } => {
                        codes.extend(x.iter().map(|v| sq_code(*v, *start, *end)));
                    }
                    Quantizer::Pq { m, .. } => {
                        let src: &[f32] = if self.metric == Metric::Dot {
                            x
                        } else {
                            resid.clear();
                            resid.extend_from_slice(x);
                            for (row, p) in resid.chunks_exact_mut(dim).zip(&parts[first..]) {
                                for (v, c) in row.iter_mut().zip(self.centroids.row(*p as usize)) {
                                    *v -= c;
                                }
                            }
                            &resid
                        };
                        let sub = dim / m;
                        let rows = e - s;
                        let at = codes.len();
                        codes.resize(at + rows * m, 0);
                        for (j, (book, book_norms)) in books.iter().enumerate() {
                            let near = nearest_strided(
                                book,
                                book_norms,
                                sub,
                                &src[j * sub..],
                                dim,
                                rows,
                                false,
                            );
                            for (i, (c, _)) in near.into_iter().enumerate() {
                                codes[at + i * m + j] = c as u8;
                            }
                        }
                    }
                }
            }
            (parts, codes)
        });
        let mut ps = Vec::with_capacity(n);
        let mut cs = Vec::with_capacity(n * w);
        for (p, c) in parts {
            ps.extend(p);
            cs.extend(c);
        }
        (ps, cs)
    }

    /// A scorer of partition `p`'s codes for the prepared query `q`.
    pub fn scorer(&self, q: &[f32], p: usize) -> Scorer {
        match &self.quantizer {
            Quantizer::Flat => Scorer::Flat,
            Quantizer::Sq { start, end } => Scorer::Sq {
                query: q.iter().map(|x| sq_code(*x, *start, *end)).collect(),
                scale: (end - start) / 255.0,
                start: *start,
            },
            Quantizer::Pq { m, codebook } => {
                let sub = self.dim / m;
                let mut table = vec![0f32; m * PQ_CODES];
                let mut r = q.to_vec();
                if self.metric != Metric::Dot {
                    for (x, c) in r.iter_mut().zip(self.centroids.row(p)) {
                        *x -= c;
                    }
                }
                for j in 0..*m {
                    let x = &r[j * sub..(j + 1) * sub];
                    for c in 0..PQ_CODES {
                        let y = &codebook[(j * PQ_CODES + c) * sub..(j * PQ_CODES + c + 1) * sub];
                        table[j * PQ_CODES + c] = if self.metric == Metric::Dot {
                            -dot(x, y)
                        } else {
                            l2_squared(x, y)
                        };
                    }
                }
                Scorer::Pq { m: *m, table }
            }
        }
    }
}

/// Lance's 8-bit scalar code: floor((x - start) / (end - start) · 255), clipped.
pub fn sq_code(x: f32, start: f32, end: f32) -> u8 {
    let span = end - start;
    if span <= 0.0 {
        return 0;
    }
    ((x - start) / span * 255.0).floor().clamp(0.0, 255.0) as u8
}

/// `v`'s place in SQ code space (codes are this, floored and clipped).
pub fn sq_place(v: &[f32], start: f32, end: f32) -> Vec<f32> {
    let span = end - start;
    if span <= 0.0 {
        return vec![0.0; v.len()];
    }
    v.iter().map(|x| (x - start) / span * 255.0).collect()
}

/// Approximate distances of one partition's rows to a query.
pub enum Scorer {
    Flat,
    Pq {
        m: usize,
        table: Vec<f32>,
    },
    Sq {
        /// The query's own codes (l2, cosine: distances in code space,
        /// as Lance computes them).
        query: Vec<u8>,
        scale: f32,
        start: f32,
    },
}

impl Scorer {
    /// Distances of the `n` rows of a partition: `flat` holds their
    /// vectors (flat), `codes` their codes (PQ: transposed, byte `k·n + i`
    /// is byte `k` of row `i`; SQ: row-major).
    pub fn score(
        &self,
        metric: Metric,
        q: &[f32],
        n: usize,
        flat: &[f32],
        codes: &[u8],
    ) -> Vec<f32> {
        score_rows(self, metric, q, n, flat, codes)
    }
}

super::distance::avx2_dispatch! {
    fn score_rows(
        s: &Scorer,
        metric: Metric,
        q: &[f32],
        n: usize,
        flat: &[f32],
        codes: &[u8],
    ) -> Vec<f32> {
        match s {
            Scorer::Flat => {
                // Plain loops: an iterator's `collect` would be a generic
                // function of its own, compiled without AVX2.
                let dim = q.len();
                let mut out = Vec::with_capacity(n);
                for x in flat[..n * dim].chunks_exact(dim.max(1)) {
                    out.push(match metric {
                        Metric::L2 => l2_squared(q, x),
                        Metric::Cosine => cosine_distance(q, x),
                        Metric::Dot => 1.0 - dot(q, x),
                    });
                }
                out
            }
            Scorer::Pq { m, table } => {
                let mut out = vec![if metric == Metric::Dot { 1.0 } else { 0.0 }; n];
                for k in 0..*m {
                    let t = &table[k * PQ_CODES..(k + 1) * PQ_CODES];
                    for (o, c) in out.iter_mut().zip(&codes[k * n..(k + 1) * n]) {
                        *o += t[*c as usize];
                    }
                }
                out
            }
            Scorer::Sq {
                query,
                scale,
                start,
            } => {
                let dim = query.len();
                let s2 = scale * scale;
                if metric == Metric::Dot {
                    // Dequantized: x · (start + (code + ½)·scale).
                    let qsum: f32 = q.iter().sum();
                    let base = start + 0.5 * scale;
                    let mut out = Vec::with_capacity(n);
                    for c in codes[..n * dim].chunks_exact(dim.max(1)) {
                        let mut acc = [0f32; 8];
                        for (j, (c, x)) in c.iter().zip(q).enumerate() {
                            acc[j % 8] += *c as f32 * x;
                        }
                        out.push(1.0 - (base * qsum + scale * acc.iter().sum::<f32>()));
                    }
                    out
                } else {
                    let mut out = Vec::with_capacity(n);
                    for c in codes[..n * dim].chunks_exact(dim.max(1)) {
                        out.push(code_l2_kernel(query, c) * s2);
                    }
                    out
                }
            }
        }
    }
}
