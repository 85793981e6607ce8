//! Segments: which ones a reader may use, and searching one.

use fathom_table::Dataset;
use fathom_table::format::IndexMetadata;

use crate::cache::IndexCache;
use crate::error::Result;
use crate::kind::{IndexKind, StoredIds};
use crate::query::{ScalarQuery, SearchResult};
use crate::{bitmap, btree, zonemap};

/// Why a segment cannot be used (its fragments are then scanned).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unusable {
    UnknownType(String),
    UnknownVersion(i32),
    UnknownCoverage,
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

/// Searches one segment of a known kind; the result is row addresses of
/// `ds` (a segment storing stable row ids is translated, ids of rows gone
/// since are dropped).
pub async fn search(
    ds: &Dataset,
    meta: &IndexMetadata,
    kind: IndexKind,
    cache: &IndexCache,
    q: &ScalarQuery,
) -> Result<SearchResult> {
    let (store, root) = (ds.store(), ds.root());
    let r = match kind {
        IndexKind::BTree => btree::search(store, root, meta, cache, q).await?,
        IndexKind::Bitmap => bitmap::search(store, root, meta, cache, q).await?,
        IndexKind::ZoneMap => zonemap::search(store, root, meta, cache, q).await?,
    };
    let stable = ds.manifest().uses_stable_row_ids();
    Ok(
        match kind.stored_ids(meta.index_version.unwrap_or(0), stable) {
            StoredIds::RowAddress => r,
            StoredIds::RowId => match r {
                SearchResult::Exact(ids) => {
                    SearchResult::Exact(ds.row_ids_to_addresses(&ids).await?)
                }
                SearchResult::AtMost(ids) => {
                    SearchResult::AtMost(ds.row_ids_to_addresses(&ids).await?)
                }
            },
        },
    )
}
