//! Reading fragments: data files joined by field id, deleted rows removed,
//! absent columns read as NULL, virtual `_rowaddr` / `_rowid` columns.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use arrow_array::{ArrayRef, RecordBatch, RecordBatchOptions, UInt64Array, new_null_array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use fathom_file::{FileReader, FileReaderOptions};

use crate::overlay::Overlay;
use futures::future::try_join_all;
use lru::LruCache;
use object_store::ObjectStore;
use object_store::path::Path;
use roaring::RoaringBitmap;

use crate::deletion::read_deletions;
use crate::error::{Error, Result};
use crate::format::{Fragment, RowIdMeta};
use crate::naming::data_file_path;
use crate::rowids::RowIdSequence;

/// Name of the row address column: `(fragment id << 32) | offset`.
pub const ROW_ADDR: &str = "_rowaddr";
/// Name of the row id column (= address unless stable row ids are on).
pub const ROW_ID: &str = "_rowid";

/// Row address of `offset` in fragment `frag` (ids and offsets of a
/// valid fragment fit in 32 bits; see [`crate::RowAddress`]).
fn row_address(frag: u64, offset: u64) -> u64 {
    crate::RowAddress::new(crate::FragmentId(frag as u32), offset as u32).as_u64()
}

/// Open files and decoded deletion vectors, shared by the readers of one
/// dataset (files are immutable, so entries never go stale). Each is a
/// least-recently-used cache of [`CACHE_ENTRIES`] entries: a table of up
/// to that many fragments is read without reopening a file, and a larger
/// one drops the entries read longest ago, never the whole cache at once.
#[derive(Debug)]
pub struct ReadCache {
    files: Mutex<LruCache<String, CachedFile>>,
    /// Keyed by (fragment id, deletion file read version, file id).
    deletions: Mutex<LruCache<(u64, u64, u64), Arc<RoaringBitmap>>>,
}

/// Entries of each [`ReadCache`] map: enough for 100,000 fragments with
/// room to spare (an open reader of a small file holds a few KiB of
/// metadata).
pub const CACHE_ENTRIES: usize = 1 << 17;

impl Default for ReadCache {
    fn default() -> Self {
        let n = NonZeroUsize::new(CACHE_ENTRIES).unwrap();
        ReadCache {
            files: Mutex::new(LruCache::new(n)),
            deletions: Mutex::new(LruCache::new(n)),
        }
    }
}

/// An open data file and, per dataset field id, the index of its
/// top-level field in the file (both computed once per file).
#[derive(Debug, Clone)]
pub(crate) struct CachedFile {
    pub reader: FileReader,
    pub by_id: Arc<HashMap<i32, usize>>,
}

impl ReadCache {
    pub(crate) async fn file(
        &self,
        store: &Arc<dyn ObjectStore>,
        path: Path,
        size: u64,
    ) -> Result<CachedFile> {
        let key = path.to_string();
        if let Some(r) = self.files.lock().unwrap().get(&key) {
            return Ok(r.clone());
        }
        let reader = FileReader::open(
            store.clone(),
            path,
            (size > 0).then_some(size),
            FileReaderOptions::default(),
        )
        .await?;
        let by_id = reader
            .lance_schema()
            .fields
            .iter()
            .enumerate()
            .map(|(i, fld)| (fld.id, i))
            .collect();
        let file = CachedFile {
            reader,
            by_id: Arc::new(by_id),
        };
        self.files.lock().unwrap().put(key, file.clone());
        Ok(file)
    }

    pub(crate) async fn deletions(
        &self,
        store: &dyn ObjectStore,
        root: &Path,
        frag: &Fragment,
    ) -> Result<Option<Arc<RoaringBitmap>>> {
        let Some(d) = &frag.deletion_file else {
            return Ok(None);
        };
        let key = (frag.id, d.read_version, d.id);
        if let Some(b) = self.deletions.lock().unwrap().get(&key) {
            return Ok(Some(b.clone()));
        }
        let b = Arc::new(read_deletions(store, root, frag.id, d).await?);
        self.deletions.lock().unwrap().put(key, b.clone());
        Ok(Some(b))
    }
}

/// Which columns a read produces.
#[derive(Debug, Clone)]
pub struct Projection {
    /// Indices of top-level fields of the dataset schema.
    pub fields: Vec<usize>,
    pub with_row_id: bool,
    pub with_row_addr: bool,
}

impl Projection {
    pub fn all(schema: &Schema) -> Self {
        Projection {
            fields: (0..schema.fields().len()).collect(),
            with_row_id: false,
            with_row_addr: false,
        }
    }

    /// Resolves column names (including `_rowid` / `_rowaddr`).
    pub fn from_names(schema: &Schema, names: &[impl AsRef<str>]) -> Result<Self> {
        let mut p = Projection {
            fields: vec![],
            with_row_id: false,
            with_row_addr: false,
        };
        for n in names {
            match n.as_ref() {
                ROW_ID => p.with_row_id = true,
                ROW_ADDR => p.with_row_addr = true,
                name => p.fields.push(schema.index_of(name).map_err(|_| {
                    Error::invalid(format!(
                        "no column named '{name}' (columns: {})",
                        schema
                            .fields()
                            .iter()
                            .map(|f| f.name().as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })?),
            }
        }
        Ok(p)
    }

    /// The output schema.
    /// Whether nothing is read (`count(*)`): only a row count.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty() && !self.with_row_id && !self.with_row_addr
    }

    pub fn schema(&self, schema: &Schema) -> SchemaRef {
        let mut fields: Vec<Field> = self
            .fields
            .iter()
            .map(|i| schema.field(*i).clone())
            .collect();
        if self.with_row_id {
            fields.push(Field::new(ROW_ID, DataType::UInt64, false));
        }
        if self.with_row_addr {
            fields.push(Field::new(ROW_ADDR, DataType::UInt64, false));
        }
        Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
    }
}

/// Live (not deleted) offsets of a fragment as runs.
pub fn live_runs(physical_rows: u64, deleted: Option<&RoaringBitmap>) -> Vec<Range<u64>> {
    let Some(deleted) = deleted.filter(|d| !d.is_empty()) else {
        return if physical_rows > 0 {
            vec![0..physical_rows]
        } else {
            vec![]
        };
    };
    let mut out = Vec::new();
    let mut start = 0u64;
    for d in deleted.iter() {
        let d = d as u64;
        if d >= physical_rows {
            break;
        }
        if d > start {
            out.push(start..d);
        }
        start = d + 1;
    }
    if start < physical_rows {
        out.push(start..physical_rows);
    }
    out
}

/// Splits runs into chunks of at most `n` rows.
pub fn chunk_runs(runs: &[Range<u64>], n: u64) -> Vec<Vec<Range<u64>>> {
    let mut out = Vec::new();
    let mut cur: Vec<Range<u64>> = Vec::new();
    let mut size = 0;
    for r in runs {
        let mut s = r.start;
        while s < r.end {
            let take = (r.end - s).min(n - size);
            cur.push(s..s + take);
            size += take;
            s += take;
            if size == n {
                out.push(std::mem::take(&mut cur));
                size = 0;
            }
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// An overlay with its reader and, per dataset field id, its column.
type OpenOverlay = (Overlay, FileReader, Arc<HashMap<i32, usize>>);

/// Reads one fragment.
pub struct FragmentReader {
    pub fragment: Fragment,
    /// Per data file: its reader and, per dataset field id, the top-level field index in the file.
    files: Vec<(FileReader, Arc<HashMap<i32, usize>>)>,
    pub deleted: Option<Arc<RoaringBitmap>>,
    row_ids: Option<Arc<Vec<u64>>>,
    schema: SchemaRef,
    field_ids: Arc<[i32]>,
    /// Overlays, newest first, each with its reader and, per dataset
    /// field id, its column in the file.
    overlays: Vec<OpenOverlay>,
    /// Per dataset field id, the offsets any overlay holds a value of.
    overlay_cover: HashMap<i32, RoaringBitmap>,
}

impl FragmentReader {
    pub(crate) async fn open(
        store: &Arc<dyn ObjectStore>,
        root: &Path,
        cache: &ReadCache,
        fragment: &Fragment,
        schema: SchemaRef,
        field_ids: Arc<[i32]>,
        need_row_ids: bool,
    ) -> Result<Self> {
        let deleted = cache.deletions(store.as_ref(), root, fragment).await?;
        let mut files = Vec::with_capacity(fragment.files.len());
        for f in &fragment.files {
            if f.base_id.is_some() {
                return Err(Error::Unsupported {
                    uri: root.to_string(),
                    message: format!("data file {} lives under another base path", f.path),
                });
            }
            if f.file_major_version != 2 || f.file_minor_version > 2 {
                return Err(Error::Unsupported {
                    uri: root.to_string(),
                    message: format!(
                        "data file {} has format {}.{}; 2.0, 2.1 and 2.2 are implemented",
                        f.path, f.file_major_version, f.file_minor_version
                    ),
                });
            }
            let CachedFile { reader, mut by_id } = cache
                .file(store, data_file_path(root, &f.path), f.file_size_bytes)
                .await?;
            if f.fields.contains(&-2) {
                // Tombstoned fields (rewritten into a newer file) are not
                // read from this one: a field counts if it or one of its
                // children is still listed.
                fn listed(fld: &fathom_file::LanceField, ids: &[i32]) -> bool {
                    ids.contains(&fld.id) || fld.children.iter().any(|c| listed(c, ids))
                }
                let top = &reader.lance_schema().fields;
                by_id = Arc::new(
                    by_id
                        .iter()
                        .filter(|(_, i)| listed(&top[**i], &f.fields))
                        .map(|(id, i)| (*id, *i))
                        .collect(),
                );
            }
            if reader.num_rows() != fragment.physical_rows {
                return Err(Error::corrupt(
                    &f.path,
                    format!(
                        "has {} rows but fragment {} has {}",
                        reader.num_rows(),
                        fragment.id,
                        fragment.physical_rows
                    ),
                ));
            }
            files.push((reader, by_id));
        }
        let mut overlays = Vec::new();
        if fragment.has_overlays() {
            let mut found = Vec::new();
            for (pos, o) in fragment.overlays()?.into_iter().enumerate() {
                if o.file.base_id.is_some() {
                    return Err(Error::Unsupported {
                        uri: root.to_string(),
                        message: format!(
                            "overlay file {} lives under another base path",
                            o.file.path
                        ),
                    });
                }
                let CachedFile { reader, by_id } = cache
                    .file(
                        store,
                        data_file_path(root, &o.file.path),
                        o.file.file_size_bytes,
                    )
                    .await?;
                let most = o.coverage.iter().map(|c| c.len()).max().unwrap_or(0);
                if reader.num_rows() < most
                    || o.coverage
                        .iter()
                        .any(|c| c.max().is_some_and(|m| m as u64 >= fragment.physical_rows))
                {
                    return Err(Error::corrupt(
                        &o.file.path,
                        format!(
                            "overlay of fragment {} has {} rows for coverage of {most} offsets (fragment of {} rows)",
                            fragment.id,
                            reader.num_rows(),
                            fragment.physical_rows
                        ),
                    ));
                }
                found.push((o.committed_version, pos, o, reader, by_id));
            }
            found.sort_by_key(|b| std::cmp::Reverse((b.0, b.1)));
            overlays = found.into_iter().map(|(_, _, o, r, b)| (o, r, b)).collect();
        }
        let mut overlay_cover: HashMap<i32, RoaringBitmap> = HashMap::new();
        for (o, _, _) in &overlays {
            for (id, c) in o.file.fields.iter().zip(&o.coverage) {
                if *id >= 0 && !c.is_empty() {
                    *overlay_cover.entry(*id).or_default() |= c;
                }
            }
        }
        let row_ids = match (&fragment.row_id_meta, need_row_ids) {
            (Some(RowIdMeta::Inline(b)), true) => {
                let ids = RowIdSequence::decode(b)?.to_vec();
                if ids.len() as u64 != fragment.physical_rows {
                    return Err(Error::corrupt(
                        root,
                        format!(
                            "fragment {} has {} row ids for {} rows",
                            fragment.id,
                            ids.len(),
                            fragment.physical_rows
                        ),
                    ));
                }
                Some(Arc::new(ids))
            }
            (Some(RowIdMeta::External { path, .. }), true) => {
                return Err(Error::Unsupported {
                    uri: root.to_string(),
                    message: format!("external row id file {path}"),
                });
            }
            _ => None,
        };
        Ok(FragmentReader {
            fragment: fragment.clone(),
            files,
            deleted,
            row_ids,
            schema,
            field_ids,
            overlays,
            overlay_cover,
        })
    }

    /// Zone statistics of the fragment (when it has one data file written
    /// with them): per zone of physical rows, min / max / nulls per column.
    pub async fn zone_stats(&self) -> Result<Option<fathom_file::stats::ZoneStats>> {
        match self.files.as_slice() {
            [(reader, _)]
                if !self.fragment.files[0].fields.contains(&-2) && self.overlays.is_empty() =>
            {
                Ok(reader.zone_stats().await?)
            }
            _ => Ok(None),
        }
    }

    /// Live offsets of the fragment as runs.
    pub fn live_runs(&self) -> Vec<Range<u64>> {
        live_runs(self.fragment.physical_rows, self.deleted.as_deref())
    }

    /// The row id of one physical offset (stable id, or the address).
    pub fn row_id(&self, offset: u64) -> u64 {
        match &self.row_ids {
            Some(ids) => ids[offset as usize],
            None => row_address(self.fragment.id, offset),
        }
    }

    /// Row ids of given offsets (stable ids, or addresses).
    fn row_ids_of(&self, offsets: impl Iterator<Item = u64>) -> UInt64Array {
        match &self.row_ids {
            Some(ids) => UInt64Array::from_iter_values(offsets.map(|o| ids[o as usize])),
            None => {
                UInt64Array::from_iter_values(offsets.map(|o| row_address(self.fragment.id, o)))
            }
        }
    }

    /// The rows at `offsets` when every projected column comes whole from
    /// the newest overlay holding it, which covers exactly `offsets`
    /// (`None` otherwise, or when row ids or addresses are asked for).
    pub(crate) async fn read_overlaid(
        &self,
        projection: &Projection,
        offsets: &RoaringBitmap,
    ) -> Result<Option<RecordBatch>> {
        if self.overlays.is_empty()
            || projection.with_row_id
            || projection.with_row_addr
            || projection.fields.is_empty()
        {
            return Ok(None);
        }
        let mut sources = Vec::with_capacity(projection.fields.len());
        for &field in &projection.fields {
            let id = self.field_ids[field];
            let newest = self
                .overlays
                .iter()
                .find_map(|(o, r, by_id)| Some((o.covers(id)?, r, by_id.get(&id))));
            match newest {
                Some((c, r, Some(&col))) if c == offsets && r.num_rows() == c.len() => {
                    sources.push((r, col))
                }
                _ => return Ok(None),
            }
        }
        let n = offsets.len();
        let mut arrays = Vec::with_capacity(sources.len());
        for (r, col) in sources {
            let b = r.read_selection(&[0..n], Some(&[col])).await?;
            arrays.push(b.column(0).clone());
        }
        Ok(Some(RecordBatch::try_new_with_options(
            projection.schema(&self.schema),
            arrays,
            &RecordBatchOptions::new().with_row_count(Some(n as usize)),
        )?))
    }

    /// Reads rows at `sel` (sorted runs of physical offsets) or, with
    /// `take`, at the given offsets in the given order.
    pub async fn read(&self, projection: &Projection, sel: Rows<'_>) -> Result<RecordBatch> {
        let n = match &sel {
            Rows::Runs(r) => r.iter().map(|r| r.end - r.start).sum::<u64>() as usize,
            Rows::Take(t) => t.len(),
        };
        let offsets = || -> Box<dyn Iterator<Item = u64> + '_> {
            match &sel {
                Rows::Runs(r) => Box::new(r.iter().flat_map(|r| r.clone())),
                Rows::Take(t) => Box::new(t.iter().copied()),
            }
        };
        // Per projected field that overlays change: where each selected
        // cell comes from. A field whose every selected cell an overlay
        // holds (re-evaluating overlaid rows reads just those) is not read
        // from the base files.
        let offs: Vec<u64> = if self.overlays.is_empty() {
            vec![]
        } else {
            offsets().collect()
        };
        let mut planned: Vec<Option<crate::overlay::Picks>> = projection
            .fields
            .iter()
            .map(|&field| {
                let id = self.field_ids[field];
                if !self.overlay_cover.contains_key(&id) {
                    return None;
                }
                let relevant: Vec<&Overlay> = self.overlays.iter().map(|(o, _, _)| o).collect();
                Some(crate::overlay::plan_picks(id, &offs, &relevant)).filter(|p| p.uses_overlays())
            })
            .collect();
        // Which file provides each projected field.
        let mut per_file: Vec<Vec<(usize, usize)>> = vec![vec![]; self.files.len()];
        let mut columns: Vec<Option<ArrayRef>> = vec![None; projection.fields.len()];
        for (out_idx, &field) in projection.fields.iter().enumerate() {
            let id = self.field_ids[field];
            if planned[out_idx].as_ref().is_some_and(|p| p.base_unused()) {
                continue;
            }
            if let Some((fi, local)) = self
                .files
                .iter()
                .enumerate()
                .rev()
                .find_map(|(fi, (_, by_id))| by_id.get(&id).map(|l| (fi, *l)))
            {
                per_file[fi].push((out_idx, local));
            }
        }
        let reads = per_file
            .iter()
            .enumerate()
            .filter(|(_, v)| !v.is_empty())
            .map(|(fi, v)| {
                let proj: Vec<usize> = v.iter().map(|(_, l)| *l).collect();
                let reader = &self.files[fi].0;
                let sel = &sel;
                async move {
                    let batch = match sel {
                        Rows::Runs(r) => reader.read_selection(r, Some(&proj)).await?,
                        Rows::Take(t) => reader.take(t, Some(&proj)).await?,
                    };
                    Ok::<_, Error>((fi, batch))
                }
            });
        for (fi, batch) in try_join_all(reads).await? {
            for (k, (out_idx, _)) in per_file[fi].iter().enumerate() {
                columns[*out_idx] = Some(batch.column(k).clone());
            }
        }
        let mut arrays: Vec<ArrayRef> = Vec::with_capacity(projection.fields.len());
        for (k, (c, &field)) in columns.into_iter().zip(&projection.fields).enumerate() {
            let id = self.field_ids[field];
            let base = || {
                c.clone()
                    .unwrap_or_else(|| new_null_array(self.schema.field(field).data_type(), n))
            };
            arrays.push(match planned[k].take() {
                None => base(),
                Some(picks) => {
                    let readers: Vec<(&FileReader, Option<usize>, &str)> = self
                        .overlays
                        .iter()
                        .map(|(o, r, by_id)| (r, by_id.get(&id).copied(), o.file.path.as_str()))
                        .collect();
                    let base = (!picks.base_unused()).then(base);
                    crate::overlay::resolve(base, picks, &readers).await?
                }
            });
        }
        if projection.with_row_id {
            arrays.push(Arc::new(self.row_ids_of(offsets())));
        }
        if projection.with_row_addr {
            arrays.push(Arc::new(UInt64Array::from_iter_values(
                offsets().map(|o| row_address(self.fragment.id, o)),
            )));
        }
        Ok(RecordBatch::try_new_with_options(
            projection.schema(&self.schema),
            arrays,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )?)
    }
}

/// Rows to read from a fragment.
pub enum Rows<'a> {
    /// Sorted, disjoint runs of physical offsets.
    Runs(&'a [Range<u64>]),
    /// Physical offsets in output order (repeats allowed).
    Take(&'a [u64]),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_skip_deleted() {
        let d: RoaringBitmap = [0u32, 3, 4, 9].into_iter().collect();
        assert_eq!(live_runs(10, Some(&d)), vec![1..3, 5..9]);
        assert_eq!(live_runs(3, None), vec![0..3]);
        assert_eq!(
            chunk_runs(&[0..5, 7..9], 3),
            vec![vec![0..3], vec![3..5, 7..8], vec![8..9]]
        );
    }
}
