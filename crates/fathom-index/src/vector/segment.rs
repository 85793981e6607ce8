//! A vector segment loaded for search: the model from `index.idx` (and
//! the codebook / bounds from `auxiliary.idx`), partitions read on demand
//! (only those probed) and kept in the [`IndexCache`]. Searching them is
//! in `search.rs`.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, UInt8Type, UInt64Type};
use fathom_file::FileReader;
use fathom_table::format::IndexMetadata;
use object_store::ObjectStore;
use object_store::path::Path;
use prost::Message;

use super::build::{AUX_FILE, INDEX_FILE};
use super::distance::Metric;
use super::hnsw;
use super::kmeans::Centroids;
use super::model::{Model, PQ_CODES, Quantizer, VectorKind, pq_columns};
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
    pub(super) pq_columns: Vec<f32>,
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
pub(super) struct Partition {
    pub(super) ids: Vec<u64>,
    pub(super) flat: Vec<f32>,
    pub(super) codes: Vec<u8>,
    pub(super) graph: Option<hnsw::Graph>,
    /// The largest Euclidean distance from the partition's reference
    /// point to one of its rows, in the space the scores are squared
    /// distances in (see [`VectorSegment::radius`]); infinite where the
    /// scores are not such distances.
    pub(super) radius: f32,
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

    pub(super) async fn partition(&self, p: usize, cache: &IndexCache) -> Result<Arc<Partition>> {
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
}

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
