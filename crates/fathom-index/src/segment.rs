//! Segments: which ones a reader may use, and searching one.

use std::sync::Arc;

use fathom_table::format::IndexMetadata;
use object_store::ObjectStore;
use object_store::path::Path;

use crate::cache::IndexCache;
use crate::error::Result;
use crate::kind::{INDEX_VERSION, IndexKind};
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
    if v > INDEX_VERSION {
        return Err(Unusable::UnknownVersion(v));
    }
    if meta.fragment_bitmap.is_none() {
        return Err(Unusable::UnknownCoverage);
    }
    Ok(kind)
}

/// Searches one segment of a known kind.
pub async fn search(
    store: &Arc<dyn ObjectStore>,
    root: &Path,
    meta: &IndexMetadata,
    kind: IndexKind,
    cache: &IndexCache,
    q: &ScalarQuery,
) -> Result<SearchResult> {
    match kind {
        IndexKind::BTree => btree::search(store, root, meta, cache, q).await,
        IndexKind::Bitmap => bitmap::search(store, root, meta, cache, q).await,
        IndexKind::ZoneMap => zonemap::search(store, root, meta, cache, q).await,
    }
}
