//! Index kinds behind one trait, found in a registry.
//!
//! An [`IndexType`] states what a kind is on disk (its `index_details`
//! type URL, the `index_versions` it reads and writes, whether it stores
//! row ids or addresses), what it answers (which column types, and how
//! exact each query's result is), and how it builds a segment from a
//! stream of batches and searches one. [`IndexKind`] is a cheap, copyable
//! handle to a registered type; [`REGISTRY`] lists them. Adding a kind is
//! its own module under `kinds/` plus one line in [`REGISTRY`].

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::DataType;
use async_trait::async_trait;
use fathom_table::RowSet;
use fathom_table::format::{IndexFile, IndexMetadata};
use futures::stream::BoxStream;
use object_store::ObjectStore;
use object_store::path::Path;

use crate::cache::IndexCache;
use crate::error::{Error, Result};
use crate::io::SegmentDir;
use crate::kinds::{bitmap::Bitmap, btree::BTree, zonemap::ZoneMap};
use crate::query::{Exactness, ScalarQuery, SearchResult};

/// What the 64-bit ids a segment stores are. Lance's rule (research
/// section 5): without stable row ids both are the row address; with them,
/// a B-tree of `index_version` 0 and a bitmap store stable row ids, a
/// B-tree of version 1 stores addresses (what pylance 14 writes), and a
/// zone map always names fragments and offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoredIds {
    RowAddress,
    RowId,
}

/// Batches to build a segment from: column 0 the values, column 1 the
/// stored ids (UInt64), in row-address order.
pub type BuildStream<'a> = BoxStream<'a, Result<RecordBatch>>;

/// Maps a stored id to the one a rewritten segment stores (`None`: the
/// row is gone).
pub type RemapFn<'a> = dyn Fn(u64) -> Option<u64> + Send + Sync + 'a;

/// A segment's distinct values and, for each, the stored ids of its rows.
#[derive(Debug, Clone)]
pub struct Groups {
    /// Distinct values, ascending, a null key first when rows are null.
    pub keys: arrow_array::ArrayRef,
    pub rows: Vec<RowSet>,
}

/// Where a segment lives.
#[derive(Debug, Clone, Copy)]
pub struct SegmentRef<'a> {
    pub store: &'a Arc<dyn ObjectStore>,
    pub root: &'a Path,
    pub meta: &'a IndexMetadata,
}

/// One kind of scalar index.
#[async_trait]
pub trait IndexType: Send + Sync + fmt::Debug + 'static {
    /// The name users write (`CREATE INDEX ... USING <name>`), upper case.
    fn name(&self) -> &'static str;
    /// The type URL written in `index_details`.
    fn type_url(&self) -> &'static str;
    /// Whether a segment's type URL names this kind: by default the last
    /// `.`/`/`-separated part of [`Self::type_url`], case-insensitively.
    fn reads_type_url(&self, url: &str) -> bool {
        last_part(url) == last_part(self.type_url())
    }
    /// The newest `index_version` a reader here understands.
    fn max_version(&self) -> i32;
    /// The `index_version` written on a dataset with or without stable row ids.
    fn write_version(&self, _stable_row_ids: bool) -> i32 {
        0
    }
    /// What a segment of this version stores.
    fn stored_ids(&self, index_version: i32, stable_row_ids: bool) -> StoredIds;
    /// Whether a column of this type can be indexed (default: types with
    /// a total order the kinds compare by, see `kinds::orderable`).
    fn supports(&self, data_type: &DataType) -> bool {
        crate::kinds::orderable(data_type)
    }
    /// How exact this kind's answer to `q` is (default: exact). The
    /// planner derives the recheck from it; a search must never return a
    /// weaker result.
    fn exactness(&self, _q: &ScalarQuery) -> Exactness {
        Exactness::Exact
    }
    /// Preference when several indexes cover a column (higher wins; ties
    /// go to the wider coverage).
    fn preference(&self) -> u8;
    /// Writes a segment's files from `batches`.
    async fn build(
        &self,
        dir: &SegmentDir,
        value_type: &DataType,
        batches: BuildStream<'_>,
    ) -> Result<Vec<IndexFile>>;
    /// Searches one segment: the stored ids of the rows matching `q`,
    /// restricted to `allow` when given.
    async fn search(
        &self,
        seg: SegmentRef<'_>,
        cache: &IndexCache,
        q: &ScalarQuery,
        allow: Option<&RowSet>,
    ) -> Result<SearchResult>;
    /// Writes a copy of a segment with every stored id `i` replaced by
    /// `map(i)` and rows mapping to `None` left out, without reading the
    /// table (a compaction's remap); `None` when this kind cannot (its
    /// entries are not keyed by row, like a zone map's): the caller then
    /// builds the segment anew from the table.
    async fn remap(
        &self,
        _seg: SegmentRef<'_>,
        _dir: &SegmentDir,
        _map: &RemapFn<'_>,
    ) -> Result<Option<Vec<IndexFile>>> {
        Ok(None)
    }
    /// Whether [`Self::groups`] answers (planning decides on it).
    fn keeps_groups(&self) -> bool {
        false
    }
    /// Every distinct value with its rows, if this kind keeps them
    /// (bitmaps do): grouped counts are then answered by cardinalities.
    async fn groups(&self, _seg: SegmentRef<'_>, _cache: &IndexCache) -> Result<Option<Groups>> {
        Ok(None)
    }
}

fn last_part(url: &str) -> String {
    url.rsplit(['/', '.'])
        .next()
        .unwrap_or("")
        .to_ascii_lowercase()
}

/// A handle to a registered index type.
#[derive(Clone, Copy)]
pub struct IndexKind(&'static dyn IndexType);

impl IndexKind {
    /// Sorted values in pages of 4,096 with a small page lookup: exact.
    pub const BTREE: IndexKind = IndexKind(&BTree);
    /// Value -> row-address bitmap, for low cardinality: exact.
    pub const BITMAP: IndexKind = IndexKind(&Bitmap);
    /// Per zone of 8,192 rows: min, max, null count: AtMost (IS NULL exact).
    pub const ZONEMAP: IndexKind = IndexKind(&ZoneMap);

    /// The registered type.
    pub fn get(&self) -> &'static dyn IndexType {
        self.0
    }

    /// The kind a type URL names, if one is registered.
    pub fn from_type_url(url: &str) -> Option<Self> {
        REGISTRY.iter().copied().find(|k| k.0.reads_type_url(url))
    }

    /// A user's name for a kind ("btree", "BITMAP", "zone_map").
    pub fn parse(s: &str) -> Result<Self> {
        let norm = |s: &str| s.to_ascii_lowercase().replace(['-', '_'], "");
        REGISTRY
            .iter()
            .copied()
            .find(|k| norm(k.0.name()) == norm(s))
            .ok_or_else(|| {
                let names: Vec<&str> = REGISTRY.iter().map(|k| k.0.name()).collect();
                Error::InvalidInput(format!(
                    "unknown index type '{}' (supported: {})",
                    norm(s),
                    names.join(", ")
                ))
            })
    }

    pub fn details(&self) -> prost_types::Any {
        prost_types::Any {
            type_url: self.0.type_url().to_string(),
            value: vec![],
        }
    }
}

impl std::ops::Deref for IndexKind {
    type Target = dyn IndexType;
    fn deref(&self) -> &Self::Target {
        self.0
    }
}

impl PartialEq for IndexKind {
    fn eq(&self, other: &Self) -> bool {
        self.0.name() == other.0.name()
    }
}

impl Eq for IndexKind {}

impl Hash for IndexKind {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.name().hash(state)
    }
}

impl fmt::Debug for IndexKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name())
    }
}

impl fmt::Display for IndexKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name())
    }
}

/// Every index kind this build knows.
pub static REGISTRY: &[IndexKind] = &[IndexKind::BTREE, IndexKind::BITMAP, IndexKind::ZONEMAP];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        for &k in REGISTRY {
            assert_eq!(IndexKind::from_type_url(k.type_url()), Some(k));
            assert_eq!(
                IndexKind::from_type_url(&k.type_url().to_uppercase()),
                Some(k)
            );
            assert_eq!(IndexKind::parse(&k.to_string().to_lowercase()).unwrap(), k);
        }
        assert_eq!(
            IndexKind::from_type_url("/lance.index.pb.VectorIndexDetails"),
            None
        );
        assert_eq!(IndexKind::parse("zone_map").unwrap(), IndexKind::ZONEMAP);
        let e = IndexKind::parse("hash").unwrap_err().to_string();
        assert!(e.contains("BTREE, BITMAP, ZONEMAP"), "{e}");
    }
}
