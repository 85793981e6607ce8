//! Building a vector segment: a reservoir sample of the column (one
//! streamed pass) trains the model, a second streamed pass assigns and
//! encodes every vector on all cores, then `index.idx` (centroids) and
//! `auxiliary.idx` (row ids and codes, partition after partition) are
//! written as pylance 14 writes them.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, UInt64Type};
use arrow_array::{
    Array, ArrayRef, FixedSizeListArray, Float32Array, RecordBatch, UInt8Array, UInt64Array,
};
use arrow_schema::{DataType, Field, Schema};
use fathom_file::{FileWriter, FileWriterOptions};
use fathom_table::format::{IndexFile, IndexMetadata};
use fathom_table::{Dataset, ROW_ADDR, ROW_ID};
use futures::TryStreamExt;
use prost::Message;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::distance::Metric;
use super::hnsw::{self, Graph};
use super::kmeans::par_ranges;
use super::model::{Model, PQ_CODES, Quantizer, VectorKind, VectorParams};
use super::pb;
use super::segment::{VectorSegment, transpose};
use crate::cache::IndexCache;
use crate::error::{Error, Result};
use crate::io::SegmentDir;
use crate::kind::RemapFn;
use crate::kind::SegmentRef;

pub const INDEX_FILE: &str = "index.idx";
pub const AUX_FILE: &str = "auxiliary.idx";

/// Progress of a long build: `phase` and rows done of `total`.
pub use fathom_table::compact::ProgressFn;

/// Train a new model, or reuse one (extending an index keeps its
/// centroids and codebook, as Lance's delta indexes do).
pub enum Training {
    Train(VectorParams),
    Reuse(Arc<Model>),
}

/// The vector column's dimension, or a clear error for other types.
pub fn vector_dim(ds: &Dataset, column: &str) -> Result<usize> {
    let field = ds
        .schema()
        .field_with_name(column)
        .map_err(|_| Error::InvalidInput(format!("no column named '{column}' to index")))?;
    match field.data_type() {
        DataType::FixedSizeList(item, n) if item.data_type() == &DataType::Float32 && *n > 0 => {
            Ok(*n as usize)
        }
        other => Err(Error::InvalidInput(format!(
            "a vector index needs a FixedSizeList<Float32> column; '{column}' is {other}"
        ))),
    }
}

/// Valid (non-null) vectors of `col` with their ids, prepared for `metric`.
fn vectors_of(
    col: &ArrayRef,
    ids: &UInt64Array,
    dim: usize,
    metric: Metric,
) -> (Vec<f32>, Vec<u64>) {
    let fsl = col.as_fixed_size_list();
    let values = fsl.values().as_primitive::<Float32Type>();
    let mut out = Vec::with_capacity(fsl.len() * dim);
    let mut out_ids = Vec::with_capacity(fsl.len());
    for i in 0..fsl.len() {
        if fsl.is_null(i) {
            continue;
        }
        // arrow-rs slices an FSL's values with it: row i is at i·dim.
        let v = &values.values()[i * dim..(i + 1) * dim];
        let at = out.len();
        out.extend_from_slice(v);
        Model::prepare_with(metric, &mut out[at..]);
        out_ids.push(ids.value(i));
    }
    (out, out_ids)
}

/// Runs CPU-bound `f` (which uses its own threads) without starving a
/// multi-threaded runtime's other tasks.
pub(crate) fn cpu<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

/// Builds one segment of index `name` on `column` over `fragments`.
pub async fn build_vector_segment(
    ds: &Dataset,
    name: &str,
    column: &str,
    training: Training,
    fragments: Vec<u64>,
    progress: Option<&ProgressFn>,
) -> Result<IndexMetadata> {
    let dim = vector_dim(ds, column)?;
    let field_id = ds.manifest().schema.fields[ds.schema().index_of(column)?].id;
    let id_column = if ds.manifest().uses_stable_row_ids() {
        ROW_ID
    } else {
        ROW_ADDR
    };
    let total: u64 = ds
        .fragments()
        .iter()
        .filter(|f| fragments.contains(&f.id))
        .map(|f| f.num_rows())
        .sum();
    let stream = || async {
        Ok::<_, Error>(
            ds.scan()
                .project(&[column, id_column])?
                .with_fragments(fragments.clone())
                .batch_size(16 * 1024)
                .try_into_stream()
                .await?
                .map_err(Error::from),
        )
    };
    let report = |phase: &str, done: u64| {
        if let Some(p) = progress {
            p(phase, done, total)
        }
    };

    let model = match training {
        Training::Reuse(m) => {
            if m.dim != dim {
                return Err(Error::InvalidInput(format!(
                    "index '{name}' was trained on {} dimensions; '{column}' has {dim}",
                    m.dim
                )));
            }
            m
        }
        Training::Train(p) => {
            if p.kind == VectorKind::IvfHnswSq && p.metric == Metric::Dot {
                return Err(Error::InvalidInput(
                    "IVF_HNSW_SQ supports the l2 and cosine metrics, not dot".into(),
                ));
            }
            let k = p.partitions_for(total as usize);
            let mut want = k * p.sample_rate;
            if p.kind == VectorKind::IvfPq {
                want = want.max(PQ_CODES * p.sample_rate);
            }
            let mut sample: Vec<f32> = Vec::with_capacity(want.min(total as usize) * dim);
            let mut seen = 0u64;
            let mut rng = StdRng::seed_from_u64(0x5eed);
            let mut s = Box::pin(stream().await?);
            while let Some(b) = s.try_next().await? {
                let (v, _) = vectors_of(
                    b.column(0),
                    b.column(1).as_primitive::<UInt64Type>(),
                    dim,
                    p.metric,
                );
                for row in v.chunks_exact(dim) {
                    if (seen as usize) < want {
                        sample.extend_from_slice(row);
                    } else {
                        let j = rng.random_range(0..=seen) as usize;
                        if j < want {
                            sample[j * dim..(j + 1) * dim].copy_from_slice(row);
                        }
                    }
                    seen += 1;
                }
                report("sampling", seen);
            }
            report("training", seen);
            let m = cpu(|| Model::train(&p, dim, &sample, seen as usize))?;
            Arc::new(m)
        }
    };

    // Assign and encode, keeping each partition's ids and codes.
    let k = model.centroids.k();
    let w = model.code_width();
    let mut ids: Vec<Vec<u64>> = vec![vec![]; k];
    let mut codes: Vec<Vec<u8>> = vec![vec![]; k];
    let mut flat: Vec<Vec<f32>> = vec![vec![]; k];
    let mut done = 0u64;
    let mut s = Box::pin(stream().await?);
    while let Some(b) = s.try_next().await? {
        let (v, vid) = vectors_of(
            b.column(0),
            b.column(1).as_primitive::<UInt64Type>(),
            dim,
            model.metric,
        );
        let (parts, code) = cpu(|| model.encode(&v));
        for (i, p) in parts.iter().enumerate() {
            let p = *p as usize;
            ids[p].push(vid[i]);
            match model.quantizer {
                Quantizer::Flat => flat[p].extend_from_slice(&v[i * dim..(i + 1) * dim]),
                _ => codes[p].extend_from_slice(&code[i * w..(i + 1) * w]),
            }
        }
        done += b.num_rows() as u64;
        report("encoding", done);
    }

    report(
        if model.hnsw.is_some() {
            "graphs"
        } else {
            "writing"
        },
        done,
    );
    write_vector_segment(ds, name, field_id, &fragments, &model, &ids, &codes, &flat).await
}

/// Writes a segment of `model` holding, per partition, `ids` and their
/// `codes` (row by row) or `flat` vectors; an IVF_HNSW_SQ segment's graphs
/// are built here from the codes.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn write_vector_segment(
    ds: &Dataset,
    name: &str,
    field_id: i32,
    fragments: &[u64],
    model: &Model,
    ids: &[Vec<u64>],
    codes: &[Vec<u8>],
    flat: &[Vec<f32>],
) -> Result<IndexMetadata> {
    let uuid = uuid::Uuid::new_v4();
    let dir = SegmentDir::new(ds.store().clone(), ds.root(), &uuid);
    let files = write_vector_files(&dir, model, ids, codes, flat).await?;
    Ok(crate::lifecycle::segment_metadata(
        ds,
        name,
        field_id,
        fragments,
        details(model),
        1,
        files,
        uuid,
    ))
}

/// The files of a segment (see [`write_vector_segment`]) in `dir`.
async fn write_vector_files(
    dir: &SegmentDir,
    model: &Model,
    ids: &[Vec<u64>],
    codes: &[Vec<u8>],
    flat: &[Vec<f32>],
) -> Result<Vec<IndexFile>> {
    let k = model.centroids.k();
    let graphs: Option<Vec<Graph>> = match (model.hnsw, &model.quantizer) {
        (Some(hp), Quantizer::Sq { .. }) => {
            let dim = model.dim;
            Some(cpu(|| {
                par_ranges(k, |r| {
                    r.map(|p| {
                        let c = &codes[p];
                        hnsw::build(
                            ids[p].len(),
                            &|a, b| {
                                code_l2(
                                    &c[a as usize * dim..(a as usize + 1) * dim],
                                    &c[b as usize * dim..(b as usize + 1) * dim],
                                )
                            },
                            &hp,
                            p as u64,
                        )
                    })
                    .collect::<Vec<_>>()
                })
                .concat()
            }))
        }
        _ => None,
    };
    let aux = write_aux(dir, model, ids, codes, flat).await?;
    let index = match &graphs {
        Some(g) => write_graph_file(dir, model, g, codes).await?,
        None => write_index_file(dir, model).await?,
    };
    Ok(vec![aux, index])
}

/// The files of a copy of vector segment `seg`, each stored row id `i`
/// replaced by `map(i)` (rows mapping to `None` left out), written in
/// `dir` without reading the table, and their `index_details`: codes are
/// kept, not re-encoded, and an IVF_HNSW_SQ segment's graphs are rebuilt
/// from them (as Lance remaps).
pub(crate) async fn remap_vector_files(
    seg: SegmentRef<'_>,
    dir: &SegmentDir,
    map: &RemapFn<'_>,
) -> Result<(Vec<IndexFile>, prost_types::Any)> {
    let vs = VectorSegment::load(seg.store, seg.root, seg.meta, &IndexCache::new(0)).await?;
    let model = vs.model.clone();
    let k = vs.num_partitions();
    let (dim, w) = (model.dim, model.code_width());
    let mut ids: Vec<Vec<u64>> = vec![vec![]; k];
    let mut codes: Vec<Vec<u8>> = vec![vec![]; k];
    let mut flat: Vec<Vec<f32>> = vec![vec![]; k];
    for p in 0..k {
        let (old, c, f) = vs.partition_rows(p).await?;
        for (i, id) in old.iter().enumerate() {
            let Some(new) = map(*id) else { continue };
            ids[p].push(new);
            match model.quantizer {
                Quantizer::Flat => flat[p].extend_from_slice(&f[i * dim..(i + 1) * dim]),
                _ => codes[p].extend_from_slice(&c[i * w..(i + 1) * w]),
            }
        }
    }
    let files = write_vector_files(dir, &model, &ids, &codes, &flat).await?;
    Ok((files, details(&model)))
}

/// The manifest's `index_details` for a model.
pub fn details(model: &Model) -> prost_types::Any {
    let mut d = pb::VectorIndexDetails {
        metric_type: model.metric.proto(),
        ..Default::default()
    };
    match &model.quantizer {
        Quantizer::Flat => d.flat = Some(pb::FlatDetails {}),
        Quantizer::Pq { m, .. } => {
            d.pq = Some(pb::PqDetails {
                num_bits: 8,
                num_sub_vectors: *m as u32,
            })
        }
        Quantizer::Sq { .. } => d.sq = Some(pb::SqDetails { num_bits: 8 }),
    }
    if let Some(h) = model.hnsw {
        d.hnsw_index_config = Some(pb::HnswDetails {
            max_connections: h.m as u32,
            construction_ef: h.ef_construction as u32,
            max_level: h.max_level as u32,
        });
    }
    for (k, v) in [
        ("lance.ivf.max_iters", "50"),
        ("lance.ivf.sample_rate", "256"),
        ("lance.skip_transpose", "false"),
    ] {
        d.runtime_hints.insert(k.into(), v.into());
    }
    prost_types::Any {
        type_url: pb::VECTOR_DETAILS_URL.into(),
        value: d.encode_to_vec(),
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn index_json(model: &Model) -> String {
    format!(
        "{{\"type\":\"{}\",\"distance_type\":\"{}\"}}",
        model.kind.name(),
        model.metric.name()
    )
}

async fn write_index_file(dir: &SegmentDir, model: &Model) -> Result<IndexFile> {
    let schema = Arc::new(Schema::new(vec![Field::new(
        "__flat_marker",
        DataType::UInt64,
        false,
    )]));
    let k = model.centroids.k();
    let ivf = pb::Ivf {
        centroids: vec![],
        offsets: vec![0; k],
        lengths: vec![0; k],
        centroids_tensor: Some(pb::Tensor {
            data_type: pb::TENSOR_F32,
            shape: vec![k as u32, model.dim as u32],
            data: f32_bytes(&model.centroids.data),
        }),
        loss: Some(model.loss),
    };
    let batch = RecordBatch::new_empty(schema);
    let flat: Vec<&str> = vec![""; k];
    dir.write(
        INDEX_FILE,
        &batch,
        &[
            ("lance:index", index_json(model)),
            ("lance:ivf", "1".into()),
            ("lance:flat", serde_json::to_string(&flat).unwrap()),
        ],
        vec![ivf.encode_to_vec()],
    )
    .await
}

pub use super::distance::code_l2;

/// `index.idx` of IVF_HNSW_SQ: every partition's graph rows (levels one
/// after another), the IVF centroids with the graph row ranges, and the
/// `lance:hnsw` entry of each partition.
async fn write_graph_file(
    dir: &SegmentDir,
    model: &Model,
    graphs: &[Graph],
    codes: &[Vec<u8>],
) -> Result<IndexFile> {
    use arrow_array::builder::{ArrayBuilder, Float32Builder, ListBuilder, UInt32Builder};
    let hp = model.hnsw.unwrap_or_default();
    let dim = model.dim;
    let scale = match model.quantizer {
        Quantizer::Sq { start, end } => (end - start) / 255.0,
        _ => 1.0,
    };
    let schema = Arc::new(Schema::new(vec![
        Field::new("__vector_id", DataType::UInt32, true),
        Field::new(
            "__neighbors",
            DataType::List(Arc::new(Field::new("item", DataType::UInt32, true))),
            true,
        ),
        Field::new(
            "_distance",
            DataType::List(Arc::new(Field::new("item", DataType::Float32, true))),
            true,
        ),
    ]));
    let mut w = FileWriter::try_new(
        dir.store.clone(),
        dir.dir.clone().join(INDEX_FILE),
        &schema,
        FileWriterOptions {
            dictionary: false,
            ..Default::default()
        },
    )?;
    let k = graphs.len();
    let (mut offsets, mut lengths, mut entries) = (vec![], vec![], vec![]);
    let mut at = 0u64;
    for (p, g) in graphs.iter().enumerate() {
        let c = &codes[p];
        let mut vid = UInt32Builder::new();
        let mut nbs = ListBuilder::new(UInt32Builder::new());
        let mut ds = ListBuilder::new(Float32Builder::new());
        let mut level_offsets = vec![0u64];
        for l in 0..hp.max_level.max(1) {
            if let Some(level) = g.levels.get(l) {
                for (node, list) in level.nodes.iter().zip(&level.neighbors) {
                    vid.append_value(*node);
                    let a = &c[*node as usize * dim..(*node as usize + 1) * dim];
                    for nb in list {
                        nbs.values().append_value(*nb);
                        let b = &c[*nb as usize * dim..(*nb as usize + 1) * dim];
                        ds.values().append_value(code_l2(a, b) * scale * scale);
                    }
                    nbs.append(true);
                    ds.append(true);
                }
            }
            level_offsets.push(vid.len() as u64);
        }
        let rows = vid.len() as u64;
        offsets.push(at);
        lengths.push(rows as u32);
        at += rows;
        entries.push(format!(
            "{{\"entry_point\":{},\"params\":{{\"max_level\":{},\"m\":{},\"ef_construction\":{},\"prefetch_distance\":2}},\"level_offsets\":{}}}",
            g.entry_point,
            hp.max_level,
            hp.m,
            hp.ef_construction,
            serde_json::to_string(&level_offsets).unwrap()
        ));
        if rows > 0 {
            let batch = RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(vid.finish()),
                    Arc::new(nbs.finish()),
                    Arc::new(ds.finish()),
                ],
            )?;
            w.write_batch(&batch).await?;
        }
    }
    let ivf = pb::Ivf {
        offsets,
        lengths,
        centroids_tensor: Some(pb::Tensor {
            data_type: pb::TENSOR_F32,
            shape: vec![k as u32, dim as u32],
            data: f32_bytes(&model.centroids.data),
        }),
        loss: Some(model.loss),
        ..Default::default()
    };
    let g = w.add_global_buffer(ivf.encode_to_vec());
    debug_assert_eq!(g, 1);
    w.set_metadata("lance:index", index_json(model));
    w.set_metadata("lance:ivf", "1");
    w.set_metadata("lance:hnsw", serde_json::to_string(&entries).unwrap());
    let written = w.finish().await?;
    Ok(IndexFile {
        path: INDEX_FILE.to_string(),
        size_bytes: written.size_bytes,
    })
}

async fn write_aux(
    dir: &SegmentDir,
    model: &Model,
    ids: &[Vec<u64>],
    codes: &[Vec<u8>],
    flat: &[Vec<f32>],
) -> Result<IndexFile> {
    let dim = model.dim;
    let (code_field, storage) = match &model.quantizer {
        Quantizer::Flat => (
            Field::new(
                "flat",
                DataType::FixedSizeList(
                    Arc::new(Field::new("item", DataType::Float32, true)),
                    dim as i32,
                ),
                false,
            ),
            format!("{{\"dim\":{dim}}}"),
        ),
        Quantizer::Pq { m, .. } => (
            Field::new(
                "__pq_code",
                DataType::FixedSizeList(
                    Arc::new(Field::new("item", DataType::UInt8, true)),
                    *m as i32,
                ),
                true,
            ),
            format!(
                "{{\"codebook_position\":2,\"nbits\":8,\"num_sub_vectors\":{m},\"dimension\":{dim},\"codebook_tensor\":[],\"transposed\":true}}"
            ),
        ),
        Quantizer::Sq { start, end } => (
            Field::new(
                "__sq_code",
                DataType::FixedSizeList(
                    Arc::new(Field::new("item", DataType::UInt8, true)),
                    dim as i32,
                ),
                true,
            ),
            format!(
                "{{\"dim\":{dim},\"num_bits\":8,\"bounds\":{{\"start\":{},\"end\":{}}}}}",
                serde_json::to_string(start).unwrap(),
                serde_json::to_string(end).unwrap()
            ),
        ),
    };
    let schema = Arc::new(Schema::new(vec![
        Field::new("_rowid", DataType::UInt64, true),
        code_field.clone(),
    ]));
    let path = dir.dir.clone().join(AUX_FILE);
    let mut w = FileWriter::try_new(
        dir.store.clone(),
        path,
        &schema,
        FileWriterOptions {
            dictionary: false,
            ..Default::default()
        },
    )?;
    let item = match code_field.data_type() {
        DataType::FixedSizeList(f, _) => f.clone(),
        _ => unreachable!(),
    };
    let mut offsets = Vec::with_capacity(ids.len());
    let mut lengths = Vec::with_capacity(ids.len());
    let mut at = 0u64;
    for p in 0..ids.len() {
        let n = ids[p].len();
        offsets.push(at);
        lengths.push(n as u32);
        at += n as u64;
        if n == 0 {
            continue;
        }
        let values: ArrayRef = match &model.quantizer {
            Quantizer::Flat => Arc::new(Float32Array::from(flat[p].clone())),
            // Transposed: byte k of row i at k·n + i.
            Quantizer::Pq { m, .. } => Arc::new(UInt8Array::from(transpose(&codes[p], n, *m))),
            Quantizer::Sq { .. } => Arc::new(UInt8Array::from(codes[p].clone())),
        };
        let width = values.len() / n;
        let col = FixedSizeListArray::try_new(item.clone(), width as i32, values, None)?;
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(UInt64Array::from(ids[p].clone())), Arc::new(col)],
        )?;
        w.write_batch(&batch).await?;
    }
    let ivf = pb::Ivf {
        offsets,
        lengths,
        ..Default::default()
    };
    let g = w.add_global_buffer(ivf.encode_to_vec());
    debug_assert_eq!(g, 1);
    if let Quantizer::Pq { codebook, .. } = &model.quantizer {
        let g = w.add_global_buffer(
            pb::Tensor {
                data_type: pb::TENSOR_F32,
                shape: vec![PQ_CODES as u32, dim as u32],
                data: f32_bytes(codebook),
            }
            .encode_to_vec(),
        );
        debug_assert_eq!(g, 2);
    }
    w.set_metadata("distance_type", model.metric.name());
    w.set_metadata("lance:ivf", "1");
    w.set_metadata(
        "storage_metadata",
        serde_json::to_string(&[storage]).unwrap(),
    );
    let written = w.finish().await?;
    Ok(IndexFile {
        path: AUX_FILE.to_string(),
        size_bytes: written.size_bytes,
    })
}
