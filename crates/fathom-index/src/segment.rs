//! Segments: which ones a reader may use, and searching one.

use std::sync::Arc;

use fathom_table::Dataset;
use fathom_table::format::{IndexFile, IndexMetadata};
use fathom_table::frag_reuse::FragReuse;
use object_store::ObjectStore;
use object_store::path::Path;

use crate::cache::IndexCache;
use crate::error::Result;
use crate::io::SegmentDir;
use crate::kind::{Groups, IndexKind, SegmentRef, StoredIds};
use crate::query::{ScalarQuery, SearchResult};
use fathom_table::RowSet;

/// Why a segment cannot be used (its fragments are then scanned).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unusable {
    UnknownType(String),
    UnknownVersion(i32),
    UnknownCoverage,
}

impl std::fmt::Display for Unusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unusable::UnknownType(url) => write!(f, "no index kind reads type '{url}'"),
            Unusable::UnknownVersion(v) => write!(f, "index_version {v} is newer than this reader"),
            Unusable::UnknownCoverage => f.write_str("it records no fragment coverage"),
        }
    }
}

/// The kind of a segment, if this reader can use it.
pub fn usable(meta: &IndexMetadata) -> std::result::Result<IndexKind, Unusable> {
    let url = meta
        .index_details
        .as_ref()
        .map(|d| d.type_url.as_str())
        .unwrap_or("");
    let kind =
        IndexKind::from_type_url(url).ok_or_else(|| Unusable::UnknownType(url.to_string()))?;
    let v = meta.index_version.unwrap_or(0);
    if v > kind.max_version() {
        return Err(Unusable::UnknownVersion(v));
    }
    if meta.fragment_bitmap.is_none() {
        return Err(Unusable::UnknownCoverage);
    }
    Ok(kind)
}

/// The fragment reuse index, when `meta` was built before a compaction
/// it records (its row addresses must be remapped).
pub fn frag_reuse<'a>(ds: &'a Dataset, meta: &IndexMetadata) -> Option<&'a FragReuse> {
    ds.manifest()
        .frag_reuse
        .as_deref()
        .filter(|f| f.applies_to(meta.dataset_version))
}

/// A segment built before deferred-remap compactions, rewritten in
/// memory with the rows' current addresses: made once per segment and
/// set of compactions (the first search after a compaction pays it) and
/// kept in the index cache, so later answers need no remapping.
pub(crate) struct Remapped {
    pub store: Arc<dyn ObjectStore>,
    pub root: Path,
    pub meta: IndexMetadata,
}

impl Remapped {
    pub fn seg(&self) -> SegmentRef<'_> {
        SegmentRef {
            store: &self.store,
            root: &self.root,
            meta: &self.meta,
        }
    }
}

/// The cache key of `meta` remapped through the versions of `fr` that
/// apply to it (a later compaction adds a version, so a new key).
pub fn remapped_key(meta: &IndexMetadata, fr: &FragReuse) -> String {
    let versions: Vec<String> = fr
        .versions
        .iter()
        .filter(|v| v.dataset_version >= meta.dataset_version)
        .map(|v| v.dataset_version.to_string())
        .collect();
    format!("remapped/{}/{}", meta.uuid, versions.join(","))
}

/// The files of a copy of `seg` with every stored row address `a`
/// replaced by `map(a)` (rows mapping to `None` left out), written in
/// `dir` from the segment's own files, and its `index_details`; `None`
/// for a kind whose entries are not keyed by row (a zone map: it is built
/// anew from the table instead).
pub(crate) async fn remap_files(
    seg: SegmentRef<'_>,
    dir: &SegmentDir,
    map: &crate::kind::RemapFn<'_>,
) -> Result<Option<RemappedFiles>> {
    let meta = seg.meta;
    Ok(if crate::vector::is_vector(meta) {
        let (files, details) = crate::vector::build::remap_vector_files(seg, dir, map).await?;
        Some(RemappedFiles {
            files,
            details: Some(details),
            version: Some(1),
        })
    } else if crate::fts::is_fts(meta) {
        let (files, details) = crate::fts::build::remap_fts_files(seg, dir, map).await?;
        Some(RemappedFiles {
            files,
            details: Some(details),
            version: Some(crate::fts::INDEX_VERSION),
        })
    } else {
        let kind = usable(meta).map_err(|u| {
            crate::error::Error::InvalidInput(format!(
                "index '{}' cannot be remapped: {u}",
                meta.name
            ))
        })?;
        kind.remap(seg, dir, map).await?.map(|files| RemappedFiles {
            files,
            details: meta.index_details.clone(),
            version: meta.index_version,
        })
    })
}

/// What [`remap_files`] wrote: the files, and the `index_details` and
/// `index_version` that describe them.
pub(crate) struct RemappedFiles {
    pub files: Vec<IndexFile>,
    pub details: Option<prost_types::Any>,
    pub version: Option<i32>,
}

impl RemappedFiles {
    /// `meta` describing these files as segment `uuid`.
    pub fn describe(self, meta: &IndexMetadata, uuid: uuid::Uuid) -> IndexMetadata {
        IndexMetadata {
            uuid,
            files: self.files,
            index_details: self.details,
            index_version: self.version,
            ..meta.clone()
        }
    }
}

/// `meta` rewritten in memory through `fr` (every kind that remaps from
/// its own files: B-tree, bitmap, vector, full-text); `None` for a kind
/// that cannot (a zone map), whose answers are then remapped one by one.
async fn remapped(
    ds: &Dataset,
    meta: &IndexMetadata,
    cache: &IndexCache,
    fr: &FragReuse,
) -> Result<Option<Arc<Remapped>>> {
    let key = remapped_key(meta, fr);
    if let Some(r) = cache.get::<Remapped>(&key) {
        return Ok(Some(r));
    }
    let dense = fr.dense();
    let map = |id: u64| dense.remap(id);
    let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
    let root = Path::from("remapped");
    let uuid = uuid::Uuid::new_v4();
    let dir = SegmentDir::new(store.clone(), &root, &uuid);
    let seg = SegmentRef {
        store: ds.store(),
        root: ds.root(),
        meta,
    };
    let written = remap_files(seg, &dir, &map).await?;
    let Some(w) = written else {
        return Ok(None);
    };
    let out = Arc::new(Remapped {
        store,
        root,
        meta: w.describe(meta, uuid),
    });
    let bytes = out.meta.files.iter().map(|f| f.size_bytes as usize).sum();
    cache.insert(key, out.clone(), bytes);
    Ok(Some(out))
}

/// The in-memory copy of `meta` with current row addresses when it was
/// built before a deferred-remap compaction (and its kind remaps).
async fn current_copy(
    ds: &Dataset,
    meta: &IndexMetadata,
    cache: &IndexCache,
) -> Result<Option<Arc<Remapped>>> {
    match frag_reuse(ds, meta) {
        Some(fr) => remapped(ds, meta, cache, fr).await,
        None => Ok(None),
    }
}

/// Vector segment `meta` of `ds`, loaded (and cached); one built before a
/// deferred-remap compaction is remapped first, once, so its ids are
/// current row addresses.
pub async fn load_vector(
    ds: &Dataset,
    meta: &IndexMetadata,
    cache: &IndexCache,
) -> Result<Arc<crate::vector::VectorSegment>> {
    use crate::vector::VectorSegment;
    match current_copy(ds, meta, cache).await? {
        Some(m) => VectorSegment::load(&m.store, &m.root, &m.meta, cache).await,
        None => VectorSegment::load(ds.store(), ds.root(), meta, cache).await,
    }
}

/// Full-text segment `meta` of `ds`, as [`load_vector`] loads a vector one.
pub async fn load_fts(
    ds: &Dataset,
    meta: &IndexMetadata,
    cache: &IndexCache,
) -> Result<Arc<crate::fts::FtsSegment>> {
    use crate::fts::FtsSegment;
    match current_copy(ds, meta, cache).await? {
        Some(m) => FtsSegment::load(&m.store, &m.root, &m.meta, cache).await,
        None => FtsSegment::load(ds.store(), ds.root(), meta, cache).await,
    }
}

/// Keeps only the rows of fragments `meta` covers: a segment speaks for
/// those alone. (With stable row ids, compaction and updates move rows to
/// new fragments under the same id; a segment built before the move still
/// holds the id, with the row's old value, but no longer covers it.)
fn within_coverage(meta: &IndexMetadata, rows: &mut RowSet) {
    let Some(covered) = meta.fragment_bitmap.as_ref() else {
        return;
    };
    if rows.fragments().any(|(f, _)| !covered.contains(f.0)) {
        rows.retain_fragments(|f| covered.contains(f.0));
    }
}

/// Searches one segment of a known kind; the result is row addresses of
/// `ds` (a segment storing stable row ids is translated, ids of rows gone
/// since are dropped) in the fragments the segment covers, restricted to
/// `allow` (addresses) when given.
pub async fn search(
    ds: &Dataset,
    meta: &IndexMetadata,
    kind: IndexKind,
    cache: &IndexCache,
    q: &ScalarQuery,
    allow: Option<&RowSet>,
) -> Result<SearchResult> {
    let seg = SegmentRef {
        store: ds.store(),
        root: ds.root(),
        meta,
    };
    let stable = ds.manifest().uses_stable_row_ids();
    let reuse = frag_reuse(ds, meta);
    let mut r = match kind.stored_ids(meta.index_version.unwrap_or(0), stable) {
        StoredIds::RowAddress => match reuse {
            None => kind.search(seg, cache, q, allow).await?,
            // Built before a compaction that deferred its remap: the
            // segment names rows by their old addresses.
            Some(fr) => match remapped(ds, meta, cache, fr).await? {
                Some(m) => kind.search(m.seg(), cache, q, allow).await?,
                None => {
                    let r = kind.search(seg, cache, q, None).await?;
                    SearchResult {
                        rows: fr.remap_rows(&r.rows),
                        exactness: r.exactness,
                        certain: r.certain.as_ref().map(|c| fr.remap_rows(c)),
                    }
                    .restrict(allow)
                }
            },
        },
        StoredIds::RowId => {
            let r = kind.search(seg, cache, q, None).await?;
            let rows = ds.row_ids_to_addresses(r.rows.as_treemap()).await?;
            let certain = match &r.certain {
                Some(c) => Some(ds.row_ids_to_addresses(c.as_treemap()).await?.into()),
                None => None,
            };
            SearchResult {
                rows: rows.into(),
                exactness: r.exactness,
                certain,
            }
            .restrict(allow)
        }
    };
    within_coverage(meta, &mut r.rows);
    if let Some(c) = r.certain.as_mut() {
        within_coverage(meta, c);
    }
    Ok(r)
}

/// A segment's distinct values and the row addresses (of `ds`, in the
/// fragments it covers) of each, if its kind keeps them (see [`crate::IndexType::groups`]).
pub async fn groups(
    ds: &Dataset,
    meta: &IndexMetadata,
    kind: IndexKind,
    cache: &IndexCache,
) -> Result<Option<Groups>> {
    let seg = SegmentRef {
        store: ds.store(),
        root: ds.root(),
        meta,
    };
    let stable = ds.manifest().uses_stable_row_ids();
    let row_ids = kind.stored_ids(meta.index_version.unwrap_or(0), stable) == StoredIds::RowId;
    let reuse = frag_reuse(ds, meta).filter(|_| !row_ids);
    let remapped = match reuse {
        Some(fr) => remapped(ds, meta, cache, fr).await?,
        None => None,
    };
    let seg = remapped.as_ref().map_or(seg, |m| m.seg());
    let Some(mut g) = kind.groups(seg, cache).await? else {
        return Ok(None);
    };
    if row_ids {
        for r in &mut g.rows {
            *r = ds.row_ids_to_addresses(r.as_treemap()).await?.into();
        }
    } else if let (Some(fr), None) = (reuse, &remapped) {
        for r in &mut g.rows {
            *r = fr.remap_rows(r);
        }
    }
    for r in &mut g.rows {
        within_coverage(meta, r);
    }
    Ok(Some(g))
}
