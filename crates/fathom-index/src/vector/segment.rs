//! A vector segment loaded for search: the model from `index.idx` (and
//! the codebook / bounds from `auxiliary.idx`), partitions read on demand
//! (only those probed) and kept in the [`IndexCache`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, UInt8Type, UInt64Type};
use fathom_file::FileReader;
use fathom_table::format::IndexMetadata;
use object_store::ObjectStore;
use object_store::path::Path;
use prost::Message;

use super::build::{AUX_FILE, INDEX_FILE, code_l2};
use super::distance::{Metric, l2_squared};
use super::hnsw;
use super::kmeans::Centroids;
use super::model::{Model, PQ_CODES, Quantizer, VectorKind, pq_columns};
use super::model::{sq_code, sq_place};
use super::nearest::Nearest;
use super::pb;
use crate::cache::IndexCache;
use crate::error::{Error, Result};

/// A loaded segment's header: the model and the partitions' row ranges.
#[derive(Debug)]
pub struct VectorSegment {
    pub uuid: uuid::Uuid,
    pub model: Arc<Model>,
    offsets: Vec<u64>,
    lengths: Vec<u32>,
    aux: FileReader,
    /// PQ codes stored transposed (pylance's default) or row by row.
    transposed: bool,
    /// IVF_HNSW_SQ: where each partition's graph is in `index.idx`.
    graphs: Option<GraphFile>,
    /// IVF_PQ: the codebook as columns ([`pq_columns`]).
    pq_columns: Vec<f32>,
}

/// The graphs of an IVF_HNSW_SQ segment: `index.idx`, each partition's
/// row range there, entry point and level offsets.
#[derive(Debug)]
struct GraphFile {
    index: FileReader,
    offsets: Vec<u64>,
    lengths: Vec<u32>,
    entries: Vec<u32>,
    level_offsets: Vec<Vec<u64>>,
}

/// `src`, a `rows` x `cols` matrix stored row by row, stored column by
/// column (PQ codes: byte k of row i moves from i·cols + k to k·rows + i;
/// transposing back swaps `rows` and `cols`).
pub(crate) fn transpose(src: &[u8], rows: usize, cols: usize) -> Vec<u8> {
    let mut out = vec![0u8; src.len()];
    for i in 0..rows {
        for k in 0..cols {
            out[k * rows + i] = src[i * cols + k];
        }
    }
    out
}

/// One partition's rows.
struct Partition {
    ids: Vec<u64>,
    flat: Vec<f32>,
    codes: Vec<u8>,
    graph: Option<hnsw::Graph>,
    /// The largest Euclidean distance from the partition's reference
    /// point to one of its rows, in the space the scores are squared
    /// distances in (see [`VectorSegment::radius`]); infinite where the
    /// scores are not such distances.
    radius: f32,
}

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

fn corrupt(meta: &IndexMetadata, file: &str, msg: impl std::fmt::Display) -> Error {
    Error::InvalidInput(format!(
        "vector index '{}' segment {} ({file}): {msg}",
        meta.name, meta.uuid
    ))
}

fn metadata_json(r: &FileReader, key: &str) -> Option<serde_json::Value> {
    serde_json::from_str(r.schema().metadata().get(key)?).ok()
}

async fn global(
    r: &FileReader,
    meta: &IndexMetadata,
    file: &str,
    key: &str,
) -> Result<bytes::Bytes> {
    let idx: usize = r
        .schema()
        .metadata()
        .get(key)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| corrupt(meta, file, format!("no '{key}' global buffer")))?;
    Ok(r.read_global_buffer(idx).await?)
}

fn tensor_f32(t: &pb::Tensor, meta: &IndexMetadata, file: &str) -> Result<Vec<f32>> {
    if t.data_type != pb::TENSOR_F32 || !t.data.len().is_multiple_of(4) {
        return Err(corrupt(
            meta,
            file,
            format!("tensor of type {} is not float32", t.data_type),
        ));
    }
    Ok(t.data
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect())
}

impl VectorSegment {
    /// Loads (or finds in `cache`) the header of segment `meta`.
    pub async fn load(
        store: &Arc<dyn ObjectStore>,
        root: &Path,
        meta: &IndexMetadata,
        cache: &IndexCache,
    ) -> Result<Arc<VectorSegment>> {
        let key = format!("vector/{}", meta.uuid);
        if let Some(s) = cache.get::<VectorSegment>(&key) {
            return Ok(s);
        }
        let index = crate::io::open(store, root, meta, INDEX_FILE).await?;
        let info = metadata_json(&index, "lance:index")
            .ok_or_else(|| corrupt(meta, INDEX_FILE, "no 'lance:index' metadata"))?;
        let kind_name = info["type"].as_str().unwrap_or("");
        let kind = VectorKind::parse(kind_name).ok_or_else(|| {
            Error::InvalidInput(format!(
                "vector index '{}' is {kind_name}, which this reader does not search",
                meta.name
            ))
        })?;
        let metric = Metric::parse(info["distance_type"].as_str().unwrap_or("l2"))?;
        let ivf = pb::Ivf::decode(global(&index, meta, INDEX_FILE, "lance:ivf").await?)
            .map_err(|e| corrupt(meta, INDEX_FILE, e))?;
        let t = ivf
            .centroids_tensor
            .as_ref()
            .ok_or_else(|| corrupt(meta, INDEX_FILE, "no centroids"))?;
        let centroids = tensor_f32(t, meta, INDEX_FILE)?;
        let [k, dim] = t.shape[..] else {
            return Err(corrupt(meta, INDEX_FILE, "centroids are not a matrix"));
        };
        let (k, dim) = (k as usize, dim as usize);
        if centroids.len() != k * dim || dim == 0 {
            return Err(corrupt(
                meta,
                INDEX_FILE,
                "centroid data does not match its shape",
            ));
        }
        let aux = crate::io::open(store, root, meta, AUX_FILE).await?;
        let storage: serde_json::Value = metadata_json(&aux, "storage_metadata")
            .and_then(|v| {
                v.get(0)
                    .and_then(|s| s.as_str())
                    .and_then(|s| serde_json::from_str(s).ok())
            })
            .ok_or_else(|| corrupt(meta, AUX_FILE, "no 'storage_metadata'"))?;
        let aux_ivf = pb::Ivf::decode(global(&aux, meta, AUX_FILE, "lance:ivf").await?)
            .map_err(|e| corrupt(meta, AUX_FILE, e))?;
        if aux_ivf.offsets.len() != k || aux_ivf.lengths.len() != k {
            return Err(corrupt(
                meta,
                AUX_FILE,
                format!(
                    "{} partitions listed for {k} centroids",
                    aux_ivf.lengths.len()
                ),
            ));
        }
        let mut transposed = false;
        let quantizer = match kind {
            VectorKind::IvfFlat => Quantizer::Flat,
            VectorKind::IvfSq | VectorKind::IvfHnswSq => {
                let b = &storage["bounds"];
                let (Some(start), Some(end)) = (b["start"].as_f64(), b["end"].as_f64()) else {
                    return Err(corrupt(meta, AUX_FILE, "no SQ bounds"));
                };
                if storage["num_bits"].as_u64().unwrap_or(8) != 8 {
                    return Err(corrupt(meta, AUX_FILE, "only 8-bit SQ codes are supported"));
                }
                Quantizer::Sq {
                    start: start as f32,
                    end: end as f32,
                }
            }
            VectorKind::IvfPq => {
                let m = storage["num_sub_vectors"].as_u64().unwrap_or(0) as usize;
                if storage["nbits"].as_u64() != Some(8) {
                    return Err(Error::InvalidInput(format!(
                        "vector index '{}' has {}-bit PQ codes; only 8-bit codes are searched",
                        meta.name, storage["nbits"]
                    )));
                }
                if m == 0 || dim % m != 0 {
                    return Err(corrupt(
                        meta,
                        AUX_FILE,
                        format!("{m} sub-vectors for {dim} dimensions"),
                    ));
                }
                transposed = storage["transposed"].as_bool().unwrap_or(false);
                let pos = storage["codebook_position"].as_u64().unwrap_or(2) as usize;
                let t = pb::Tensor::decode(aux.read_global_buffer(pos).await?)
                    .map_err(|e| corrupt(meta, AUX_FILE, e))?;
                let codebook = tensor_f32(&t, meta, AUX_FILE)?;
                if codebook.len() != PQ_CODES * dim {
                    return Err(corrupt(meta, AUX_FILE, "codebook size does not match"));
                }
                Quantizer::Pq { m, codebook }
            }
        };
        let mut hnsw_params = None;
        let graphs = if kind == VectorKind::IvfHnswSq {
            let list = metadata_json(&index, "lance:hnsw")
                .and_then(|v| v.as_array().cloned())
                .ok_or_else(|| corrupt(meta, INDEX_FILE, "no 'lance:hnsw' metadata"))?;
            if list.len() != k || ivf.offsets.len() != k || ivf.lengths.len() != k {
                return Err(corrupt(
                    meta,
                    INDEX_FILE,
                    "graph entries do not match the partitions",
                ));
            }
            let mut entries = vec![];
            let mut level_offsets = vec![];
            for e in &list {
                let e: serde_json::Value = e
                    .as_str()
                    .and_then(|s| serde_json::from_str(s).ok())
                    .ok_or_else(|| corrupt(meta, INDEX_FILE, "malformed 'lance:hnsw' entry"))?;
                entries.push(e["entry_point"].as_u64().unwrap_or(0) as u32);
                level_offsets.push(
                    e["level_offsets"]
                        .as_array()
                        .map(|a| a.iter().filter_map(|x| x.as_u64()).collect())
                        .unwrap_or_default(),
                );
                if hnsw_params.is_none() {
                    let p = &e["params"];
                    let d = hnsw::HnswParams::default();
                    hnsw_params = Some(hnsw::HnswParams {
                        m: p["m"].as_u64().map_or(d.m, |v| v as usize),
                        ef_construction: p["ef_construction"]
                            .as_u64()
                            .map_or(d.ef_construction, |v| v as usize),
                        max_level: p["max_level"].as_u64().map_or(d.max_level, |v| v as usize),
                    });
                }
            }
            Some(GraphFile {
                index: index.clone(),
                offsets: ivf.offsets.clone(),
                lengths: ivf.lengths.clone(),
                entries,
                level_offsets,
            })
        } else {
            None
        };
        let pq_columns = match &quantizer {
            Quantizer::Pq { m, codebook } => pq_columns(codebook, *m),
            _ => Vec::new(),
        };
        let seg = Arc::new(VectorSegment {
            uuid: meta.uuid,
            model: Arc::new(Model {
                kind,
                metric,
                dim,
                centroids: Centroids {
                    dim,
                    data: centroids,
                    inner_product: metric == Metric::Dot,
                },
                quantizer,
                loss: ivf.loss.unwrap_or(0.0),
                hnsw: hnsw_params,
            }),
            offsets: aux_ivf.offsets,
            lengths: aux_ivf.lengths,
            aux,
            transposed,
            graphs,
            pq_columns,
        });
        cache.insert(key, seg.clone(), (k * dim + 2 * PQ_CODES * dim) * 4);
        Ok(seg)
    }

    pub fn num_partitions(&self) -> usize {
        self.lengths.len()
    }

    async fn partition(&self, p: usize, cache: &IndexCache) -> Result<Arc<Partition>> {
        let key = format!("vector/{}/{p}", self.uuid);
        if let Some(x) = cache.get::<Partition>(&key) {
            return Ok(x);
        }
        let n = self.lengths[p] as u64;
        let start = self.offsets[p];
        let mut part = if n == 0 {
            Partition {
                ids: vec![],
                flat: vec![],
                codes: vec![],
                graph: None,
                radius: f32::INFINITY,
            }
        } else {
            let b = self.aux.read_range(start..start + n, None).await?;
            let ids = b.column(0).as_primitive::<UInt64Type>().values().to_vec();
            let vals = b.column(1).as_fixed_size_list().values().clone();
            match self.model.quantizer {
                Quantizer::Flat => Partition {
                    ids,
                    flat: vals.as_primitive::<Float32Type>().values().to_vec(),
                    codes: vec![],
                    graph: None,
                    radius: f32::INFINITY,
                },
                Quantizer::Pq { m, .. } if !self.transposed => {
                    let c = vals.as_primitive::<UInt8Type>().values();
                    Partition {
                        ids,
                        flat: vec![],
                        codes: transpose(c, n as usize, m),
                        graph: None,
                        radius: f32::INFINITY,
                    }
                }
                _ => Partition {
                    graph: match &self.graphs {
                        Some(g) => Some(self.load_graph(g, p, n as usize).await?),
                        None => None,
                    },
                    ids,
                    flat: vec![],
                    codes: vals.as_primitive::<UInt8Type>().values().to_vec(),
                    radius: f32::INFINITY,
                },
            }
        };
        part.radius = self.radius(p, &part);
        let part = Arc::new(part);
        let bytes = part.ids.len() * 8 + part.flat.len() * 4 + part.codes.len();
        cache.insert(key, part.clone(), bytes);
        Ok(part)
    }

    /// Partition `p`'s stored rows, uncached: ids, and codes row by row
    /// (or the vectors, for IVF_FLAT).
    pub async fn partition_rows(&self, p: usize) -> Result<(Vec<u64>, Vec<u8>, Vec<f32>)> {
        let n = self.lengths[p] as u64;
        if n == 0 {
            return Ok((vec![], vec![], vec![]));
        }
        let start = self.offsets[p];
        let b = self.aux.read_range(start..start + n, None).await?;
        let ids = b.column(0).as_primitive::<UInt64Type>().values().to_vec();
        let vals = b.column(1).as_fixed_size_list().values().clone();
        Ok(match self.model.quantizer {
            Quantizer::Flat => (
                ids,
                vec![],
                vals.as_primitive::<Float32Type>().values().to_vec(),
            ),
            Quantizer::Pq { m, .. } if self.transposed => {
                let t = vals.as_primitive::<UInt8Type>().values();
                (ids, transpose(t, m, n as usize), vec![])
            }
            _ => (
                ids,
                vals.as_primitive::<UInt8Type>().values().to_vec(),
                vec![],
            ),
        })
    }

    /// Partition `p`'s graph (`n` vectors) from `index.idx`.
    async fn load_graph(&self, g: &GraphFile, p: usize, n: usize) -> Result<hnsw::Graph> {
        let bad = |m: String| {
            Error::InvalidInput(format!(
                "vector index segment {} (index.idx), partition {p}: {m}",
                self.uuid
            ))
        };
        let (start, len) = (g.offsets[p], g.lengths[p] as u64);
        let b = g
            .index
            .read_range(start..start + len, Some(&[0, 1]))
            .await?;
        let vid = b.column(0).as_primitive::<arrow_array::types::UInt32Type>();
        let nbs = b.column(1).as_list::<i32>();
        let lo = &g.level_offsets[p];
        if lo.first() != Some(&0) || lo.last() != Some(&len) || lo.windows(2).any(|w| w[0] > w[1]) {
            return Err(bad(format!(
                "level offsets {lo:?} do not cover its {len} rows"
            )));
        }
        let mut graph = hnsw::Graph {
            entry_point: g.entries[p],
            levels: vec![],
        };
        for (l, w) in lo.windows(2).enumerate() {
            let mut level = hnsw::Level::default();
            for r in w[0] as usize..w[1] as usize {
                let node = vid.value(r);
                let list = nbs.value(r);
                let list = list.as_primitive::<arrow_array::types::UInt32Type>();
                if node as usize >= n || list.values().iter().any(|x| *x as usize >= n) {
                    return Err(bad(format!("node or neighbour beyond its {n} vectors")));
                }
                if l > 0 {
                    level.index.insert(node, level.nodes.len());
                } else if node as usize != level.nodes.len() {
                    return Err(bad("level 0 does not list every vector in order".into()));
                }
                level.nodes.push(node);
                level.neighbors.push(list.values().to_vec());
            }
            graph.levels.push(level);
        }
        if (graph.entry_point as usize) >= n && n > 0 {
            return Err(bad("entry point beyond its vectors".into()));
        }
        Ok(graph)
    }

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
    fn radius(&self, p: usize, part: &Partition) -> f32 {
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

/// Whether a segment is a vector index (by its `index_details`).
pub fn is_vector(meta: &IndexMetadata) -> bool {
    meta.index_details
        .as_ref()
        .is_some_and(|d| d.type_url.ends_with("VectorIndexDetails"))
}

/// The kind and metric a vector segment's manifest entry declares.
pub fn declared(meta: &IndexMetadata) -> Option<(String, Metric)> {
    if !is_vector(meta) {
        return None;
    }
    let d = meta.index_details.as_ref()?;
    let v = pb::VectorIndexDetails::decode(d.value.as_slice()).ok()?;
    let kind = if v.hnsw_index_config.is_some() {
        "IVF_HNSW_SQ"
    } else if v.pq.is_some() {
        "IVF_PQ"
    } else if v.sq.is_some() {
        "IVF_SQ"
    } else {
        "IVF_FLAT"
    };
    Some((kind.to_string(), Metric::from_proto(v.metric_type).ok()?))
}
