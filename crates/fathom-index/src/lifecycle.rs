//! Creating, extending, rebuilding, dropping and listing indexes. Each
//! change builds files under `_indices/<uuid>/` first and then commits a
//! `CreateIndex` transaction, so a failure leaves the table unchanged.

use std::time::{SystemTime, UNIX_EPOCH};

use fathom_table::format::IndexMetadata;
use fathom_table::{Dataset, Operation, ROW_ADDR, ROW_ID};
use futures::{StreamExt, TryStreamExt};
use roaring::RoaringBitmap;

use crate::error::{Error, Result};
use crate::fts::{FtsParams, FtsSegment, build_fts_segment, is_fts};
use crate::io::SegmentDir;
use crate::kind::{IndexKind, StoredIds};
use crate::segment::usable;
use crate::vector::{
    ProgressFn, Training, VectorParams, VectorSegment, build_vector_segment, declared, is_vector,
};

/// What `list_indexes` reports.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexInfo {
    pub name: String,
    pub kind: String,
    pub column: String,
    pub segments: usize,
    /// Current fragments covered by some segment.
    pub covered_fragments: Vec<u64>,
    /// Current fragments no segment covers (scanned flat).
    pub uncovered_fragments: Vec<u64>,
}

/// Builds one segment over `fragments` (current, by id).
pub async fn build_segment(
    ds: &Dataset,
    name: &str,
    column: &str,
    kind: IndexKind,
    fragments: Vec<u64>,
) -> Result<IndexMetadata> {
    let field = ds
        .schema()
        .field_with_name(column)
        .map_err(|_| Error::InvalidInput(format!("no column named '{column}' to index")))?;
    if !kind.supports(field.data_type()) {
        return Err(Error::InvalidInput(format!(
            "cannot build a {kind} index on column '{column}' of type {}",
            field.data_type()
        )));
    }
    let field_id = ds.manifest().schema.fields[ds.schema().index_of(column)?].id;
    let stable = ds.manifest().uses_stable_row_ids();
    let version = kind.write_version(stable);
    let id_column = match kind.stored_ids(version, stable) {
        StoredIds::RowAddress => ROW_ADDR,
        StoredIds::RowId => ROW_ID,
    };
    // Streamed: each kind decides what it must hold in memory.
    let batches = ds
        .scan()
        .project(&[column, id_column])?
        .with_fragments(fragments.clone())
        .batch_size(64 * 1024)
        .try_into_stream()
        .await?
        .map_err(Error::from)
        .boxed();
    let uuid = uuid::Uuid::new_v4();
    let dir = SegmentDir::new(ds.store().clone(), ds.root(), &uuid);
    let files = kind.build(&dir, field.data_type(), batches).await?;
    Ok(segment_metadata(
        ds,
        name,
        field_id,
        &fragments,
        kind.details(),
        version,
        files,
        uuid,
    ))
}

/// The manifest entry of a segment built now on version `ds`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn segment_metadata(
    ds: &Dataset,
    name: &str,
    field_id: i32,
    fragments: &[u64],
    details: prost_types::Any,
    version: i32,
    files: Vec<fathom_table::format::IndexFile>,
    uuid: uuid::Uuid,
) -> IndexMetadata {
    IndexMetadata {
        uuid,
        name: name.to_string(),
        fields: vec![field_id],
        dataset_version: ds.version(),
        fragment_bitmap: Some(
            fragments
                .iter()
                .map(|f| *f as u32)
                .collect::<RoaringBitmap>(),
        ),
        index_details: Some(details),
        index_version: Some(version),
        created_at_ms: Some(now_ms()),
        base_id: None,
        files,
        covering_fields: vec![],
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

fn segments<'a>(ds: &'a Dataset, name: &str) -> Vec<&'a IndexMetadata> {
    ds.manifest()
        .indices
        .iter()
        .filter(|i| i.name == name)
        .collect()
}

/// Creates index `name` on `column` over all current fragments.
pub async fn create_index(
    ds: &Dataset,
    name: &str,
    column: &str,
    kind: IndexKind,
) -> Result<Dataset> {
    if !segments(ds, name).is_empty() {
        return Err(Error::InvalidInput(format!(
            "an index named '{name}' already exists on {}",
            ds.uri()
        )));
    }
    let frags = ds.fragments().iter().map(|f| f.id).collect();
    let seg = build_segment(ds, name, column, kind, frags).await?;
    Ok(ds
        .commit(Operation::CreateIndex {
            new: vec![seg],
            removed: vec![],
        })
        .await?)
}

/// Creates vector index `name` (IVF_FLAT / IVF_PQ / IVF_SQ) on `column`
/// over all current fragments; `progress` hears of sampling, training,
/// encoding and writing.
pub async fn create_vector_index(
    ds: &Dataset,
    name: &str,
    column: &str,
    params: VectorParams,
    progress: Option<&ProgressFn>,
) -> Result<Dataset> {
    if !segments(ds, name).is_empty() {
        return Err(Error::InvalidInput(format!(
            "an index named '{name}' already exists on {}",
            ds.uri()
        )));
    }
    crate::vector::vector_dim(ds, column)?;
    let frags = ds.fragments().iter().map(|f| f.id).collect();
    let seg =
        build_vector_segment(ds, name, column, Training::Train(params), frags, progress).await?;
    Ok(ds
        .commit(Operation::CreateIndex {
            new: vec![seg],
            removed: vec![],
        })
        .await?)
}

/// Creates inverted (full-text) index `name` on text column `column`
/// over all current fragments; `progress` hears of tokenizing and
/// writing.
pub async fn create_fts_index(
    ds: &Dataset,
    name: &str,
    column: &str,
    params: FtsParams,
    progress: Option<&ProgressFn>,
) -> Result<Dataset> {
    if !segments(ds, name).is_empty() {
        return Err(Error::InvalidInput(format!(
            "an index named '{name}' already exists on {}",
            ds.uri()
        )));
    }
    let frags = ds.fragments().iter().map(|f| f.id).collect();
    let seg = build_fts_segment(ds, name, column, &params, frags, progress).await?;
    Ok(ds
        .commit(Operation::CreateIndex {
            new: vec![seg],
            removed: vec![],
        })
        .await?)
}

/// The analysis parameters of inverted segment `seg`.
async fn fts_params_of(ds: &Dataset, seg: &IndexMetadata) -> Result<FtsParams> {
    Ok(
        FtsSegment::load(ds.store(), ds.root(), seg, &Default::default())
            .await?
            .params
            .clone(),
    )
}

/// Parameters that rebuild a vector segment like `seg` (same kind,
/// metric, partitions and sub-vectors).
async fn vector_params_of(ds: &Dataset, seg: &IndexMetadata) -> Result<VectorParams> {
    let model = VectorSegment::load(ds.store(), ds.root(), seg, &Default::default())
        .await?
        .model
        .clone();
    let mut p = VectorParams::new(model.kind);
    p.metric = model.metric;
    p.num_partitions = Some(model.centroids.k());
    if let crate::vector::model::Quantizer::Pq { m, .. } = model.quantizer {
        p.num_sub_vectors = Some(m);
    }
    if let Some(h) = model.hnsw {
        p.hnsw = h;
    }
    Ok(p)
}

fn index_column(ds: &Dataset, seg: &IndexMetadata) -> Result<String> {
    let id = seg.fields.first().copied().unwrap_or(-1);
    ds.manifest()
        .schema
        .fields
        .iter()
        .find(|f| f.id == id)
        .map(|f| f.name.clone())
        .ok_or_else(|| {
            Error::InvalidInput(format!(
                "index '{}' is on field {id}, which the table no longer has",
                seg.name
            ))
        })
}

/// Adds a segment over the fragments no segment of `name` covers (after
/// appends). A no-op when everything is covered.
pub async fn extend_index(ds: &Dataset, name: &str) -> Result<Dataset> {
    let segs = segments(ds, name);
    let first = segs
        .first()
        .ok_or_else(|| Error::InvalidInput(format!("no index named '{name}'")))?;
    let column = index_column(ds, first)?;
    let mut covered = RoaringBitmap::new();
    for s in &segs {
        if let Some(b) = &s.fragment_bitmap {
            covered |= b;
        }
    }
    let todo: Vec<u64> = ds
        .fragments()
        .iter()
        .map(|f| f.id)
        .filter(|id| !covered.contains(*id as u32))
        .collect();
    if todo.is_empty() {
        return Ok(ds.clone());
    }
    let seg = if is_vector(first) {
        // A delta segment with the first one's centroids and codebook.
        let model = VectorSegment::load(ds.store(), ds.root(), first, &Default::default())
            .await?
            .model
            .clone();
        build_vector_segment(ds, name, &column, Training::Reuse(model), todo, None).await?
    } else if is_fts(first) {
        let p = fts_params_of(ds, first).await?;
        build_fts_segment(ds, name, &column, &p, todo, None).await?
    } else {
        let kind = usable(first).map_err(|u| {
            Error::InvalidInput(format!("index '{name}' cannot be extended: {u:?}"))
        })?;
        build_segment(ds, name, &column, kind, todo).await?
    };
    // Segments that cover nothing any more (their fragments were compacted
    // away) go in the same commit.
    let empty: Vec<IndexMetadata> = segs
        .iter()
        .filter(|s| s.fragment_bitmap.as_ref().is_none_or(|b| b.is_empty()))
        .map(|s| (*s).clone())
        .collect();
    Ok(ds
        .commit(Operation::CreateIndex {
            new: vec![seg],
            removed: empty,
        })
        .await?)
}

/// Replaces every segment of `name` with one over all current fragments.
pub async fn rebuild_index(ds: &Dataset, name: &str) -> Result<Dataset> {
    let segs: Vec<IndexMetadata> = segments(ds, name).into_iter().cloned().collect();
    let first = segs
        .first()
        .ok_or_else(|| Error::InvalidInput(format!("no index named '{name}'")))?;
    let column = index_column(ds, first)?;
    let frags = ds.fragments().iter().map(|f| f.id).collect();
    let seg = if is_vector(first) {
        let p = vector_params_of(ds, first).await?;
        build_vector_segment(ds, name, &column, Training::Train(p), frags, None).await?
    } else if is_fts(first) {
        let p = fts_params_of(ds, first).await?;
        build_fts_segment(ds, name, &column, &p, frags, None).await?
    } else {
        let kind = usable(first)
            .map_err(|u| Error::InvalidInput(format!("index '{name}' cannot be rebuilt: {u:?}")))?;
        build_segment(ds, name, &column, kind, frags).await?
    };
    Ok(ds
        .commit(Operation::CreateIndex {
            new: vec![seg],
            removed: segs,
        })
        .await?)
}

/// Rewrites every segment that names rows by addresses a deferred-remap
/// compaction moved (the fragment reuse index applies to it) into one
/// that names them by their current addresses, in one `CreateIndex`
/// commit; the reuse index versions no segment needs any more are then
/// trimmed. B-tree, bitmap, vector and full-text segments are remapped
/// from their own files (rows of deleted addresses dropped; vector codes
/// kept, HNSW graphs rebuilt from the codes; full-text postings kept,
/// block maxima scored again); zone maps (whose zones span rows: Lance
/// cannot remap them either) are built anew from the table over the
/// fragments they cover. Returns the new version and the indexes
/// rewritten.
pub async fn remap_indexes(
    ds: &Dataset,
    progress: Option<&ProgressFn>,
) -> Result<(Dataset, Vec<String>)> {
    let Some(fr) = ds.manifest().frag_reuse.clone() else {
        return Ok((ds.clone(), vec![]));
    };
    let todo: Vec<IndexMetadata> = ds
        .manifest()
        .indices
        .iter()
        .filter(|i| !fathom_table::frag_reuse::is_frag_reuse(i) && fr.applies_to(i.dataset_version))
        .cloned()
        .collect();
    let (mut new, mut removed, mut names) = (vec![], vec![], vec![]);
    let total = todo.len() as u64;
    let dense = fr.dense();
    for (k, meta) in todo.into_iter().enumerate() {
        if let Some(p) = progress {
            p(&format!("remapping {}", meta.name), k as u64, total);
        }
        let covered = meta.fragment_bitmap.clone().unwrap_or_default();
        // (A fragment deleted whole may stay in a segment's coverage.)
        let frags: Vec<u64> = covered
            .iter()
            .map(u64::from)
            .filter(|f| ds.fragment(*f).is_some())
            .collect();
        // The coverage was remapped when the manifest was read; a row that
        // moved to a fragment outside it (its group was not all covered)
        // is left out, as is a deleted one.
        let map = |id: u64| {
            dense
                .remap(id)
                .filter(|a| covered.contains((a >> 32) as u32))
        };
        let seg = if frags.is_empty() {
            None
        } else {
            let uuid = uuid::Uuid::new_v4();
            let dir = SegmentDir::new(ds.store().clone(), ds.root(), &uuid);
            let seg = crate::kind::SegmentRef {
                store: ds.store(),
                root: ds.root(),
                meta: &meta,
            };
            match crate::segment::remap_files(seg, &dir, &map).await? {
                Some(w) => Some(IndexMetadata {
                    dataset_version: ds.version(),
                    fragment_bitmap: Some(frags.iter().map(|f| *f as u32).collect()),
                    created_at_ms: Some(now_ms()),
                    ..w.describe(&meta, uuid)
                }),
                None => {
                    let kind = usable(&meta).map_err(|u| {
                        Error::InvalidInput(format!("index '{}' cannot be rebuilt: {u}", meta.name))
                    })?;
                    let column = index_column(ds, &meta)?;
                    Some(build_segment(ds, &meta.name, &column, kind, frags).await?)
                }
            }
        };
        names.push(meta.name.clone());
        new.extend(seg);
        removed.push(meta);
    }
    if removed.is_empty() {
        return Ok((ds.clone(), vec![]));
    }
    names.sort();
    names.dedup();
    let out = ds.commit(Operation::CreateIndex { new, removed }).await?;
    Ok((out, names))
}

/// Removes index `name` (all its segments).
pub async fn drop_index(ds: &Dataset, name: &str) -> Result<Dataset> {
    let segs: Vec<IndexMetadata> = segments(ds, name).into_iter().cloned().collect();
    if segs.is_empty() {
        return Err(Error::InvalidInput(format!(
            "no index named '{name}' on {}",
            ds.uri()
        )));
    }
    Ok(ds
        .commit(Operation::CreateIndex {
            new: vec![],
            removed: segs,
        })
        .await?)
}

/// The indexes of a version and what they cover.
pub fn list_indexes(ds: &Dataset) -> Vec<IndexInfo> {
    let mut names: Vec<&str> = ds
        .manifest()
        .indices
        .iter()
        .map(|i| i.name.as_str())
        .collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .map(|name| {
            let segs = segments(ds, name);
            let mut covered = RoaringBitmap::new();
            for s in &segs {
                if let Some(b) = &s.fragment_bitmap {
                    covered |= b;
                }
            }
            let (c, u): (Vec<u64>, Vec<u64>) = ds
                .fragments()
                .iter()
                .map(|f| f.id)
                .partition(|id| covered.contains(*id as u32));
            IndexInfo {
                name: name.to_string(),
                kind: match declared(segs[0]) {
                    Some((kind, metric)) => format!("{kind} ({})", metric.name()),
                    None if is_fts(segs[0]) => "INVERTED".to_string(),
                    None if fathom_table::frag_reuse::is_frag_reuse(segs[0]) => {
                        "FRAGMENT_REUSE (system)".to_string()
                    }
                    None => segs[0]
                        .index_details
                        .as_ref()
                        .and_then(|d| IndexKind::from_type_url(&d.type_url))
                        .map_or("unknown".to_string(), |k| k.to_string()),
                },
                column: index_column(ds, segs[0]).unwrap_or_else(|_| "?".into()),
                segments: segs.len(),
                covered_fragments: c,
                uncovered_fragments: u,
            }
        })
        .collect()
}

/// What [`compact`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompactionReport {
    pub metrics: fathom_table::CompactionMetrics,
    /// Indexes extended over the new fragments (when asked to).
    pub reindexed: Vec<String>,
    /// Indexes whose segments were rewritten with remapped addresses
    /// (with `remap_indexes`).
    pub remapped: Vec<String>,
    /// Indexes that could not be extended, and why (their new fragments
    /// are scanned flat until the index is rebuilt).
    pub not_reindexed: Vec<(String, String)>,
}

/// Compacts the table ([`Dataset::compact_files`]: one `Rewrite` commit
/// that takes the rewritten fragments out of every index's coverage) and,
/// when `reindex` is set, extends each index that covered a rewritten
/// fragment over the new fragments (a `CreateIndex` commit per index), so
/// queries use the indexes again instead of scanning those rows flat.
/// Indexes are extended with the model they were built with (centroids,
/// codebooks, analyzer), not retrained.
pub async fn compact(
    ds: &Dataset,
    opts: &fathom_table::CompactionOptions,
    reindex: bool,
    progress: Option<&ProgressFn>,
) -> Result<(Dataset, CompactionReport)> {
    let (mut out, metrics) = ds.compact_files(opts, progress).await?;
    let mut report = CompactionReport {
        metrics,
        ..Default::default()
    };
    if opts.remap_indexes && out.version() != ds.version() {
        (out, report.remapped) = remap_indexes(&out, progress).await?;
    }
    if out.version() == ds.version() || !reindex {
        return Ok((out, report));
    }
    let mut rewritten = RoaringBitmap::new();
    for f in ds.fragments() {
        if out.fragment(f.id).is_none() {
            rewritten.insert(f.id as u32);
        }
    }
    let mut names: Vec<String> = ds
        .manifest()
        .indices
        .iter()
        .filter(|i| {
            i.fragment_bitmap
                .as_ref()
                .is_some_and(|b| !b.is_disjoint(&rewritten))
        })
        .map(|i| i.name.clone())
        .collect();
    names.sort();
    names.dedup();
    for (k, name) in names.iter().enumerate() {
        if let Some(p) = progress {
            p(&format!("reindexing {name}"), k as u64, names.len() as u64);
        }
        // Indexes this layer cannot extend (kinds it only reads) stay
        // uncovered for the new fragments: still correct, scanned flat.
        match extend_index(&out, name).await {
            Ok(d) => {
                // (Nothing to extend when a reuse index kept the coverage.)
                if d.version() != out.version() {
                    report.reindexed.push(name.clone());
                }
                out = d;
            }
            Err(Error::InvalidInput(why)) => report.not_reindexed.push((name.clone(), why)),
            Err(e) => return Err(e),
        }
    }
    if let Some(p) = progress {
        p("reindexing", names.len() as u64, names.len() as u64);
    }
    Ok((out, report))
}
