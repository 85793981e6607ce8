//! Segments: which ones a reader may use, and searching one.

use fathom_table::Dataset;
use fathom_table::format::IndexMetadata;
use fathom_table::frag_reuse::FragReuse;

use crate::cache::IndexCache;
use crate::error::Result;
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
            Some(fr) => {
                let r = kind.search(seg, cache, q, None).await?;
                SearchResult {
                    rows: fr.remap_rows(&r.rows),
                    exactness: r.exactness,
                    certain: r.certain.as_ref().map(|c| fr.remap_rows(c)),
                }
                .restrict(allow)
            }
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
    let Some(mut g) = kind.groups(seg, cache).await? else {
        return Ok(None);
    };
    let stable = ds.manifest().uses_stable_row_ids();
    if kind.stored_ids(meta.index_version.unwrap_or(0), stable) == StoredIds::RowId {
        for r in &mut g.rows {
            *r = ds.row_ids_to_addresses(r.as_treemap()).await?.into();
        }
    } else if let Some(fr) = frag_reuse(ds, meta) {
        for r in &mut g.rows {
            *r = fr.remap_rows(r);
        }
    }
    for r in &mut g.rows {
        within_coverage(meta, r);
    }
    Ok(Some(g))
}
