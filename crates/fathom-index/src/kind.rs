//! Index kinds and their `index_details` type URLs (compared
//! case-insensitively, on the last `.`-separated segment).

use std::fmt;

use crate::error::{Error, Result};

/// Scalar index kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IndexKind {
    /// Sorted values in pages of 4,096 with a small page lookup: exact.
    BTree,
    /// Value -> row-address bitmap, for low cardinality: exact.
    Bitmap,
    /// Per zone of 8,192 rows: min, max, null count: AtMost (IS NULL exact).
    ZoneMap,
}

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

impl IndexKind {
    pub fn type_url(&self) -> &'static str {
        match self {
            IndexKind::BTree => "/lance.table.BTreeIndexDetails",
            IndexKind::Bitmap => "/lance.table.BitmapIndexDetails",
            IndexKind::ZoneMap => "/lance.table.ZoneMapIndexDetails",
        }
    }

    /// The kind a type URL names, if it is one of ours.
    pub fn from_type_url(url: &str) -> Option<Self> {
        let last = url
            .rsplit(['/', '.'])
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        match last.as_str() {
            "btreeindexdetails" => Some(IndexKind::BTree),
            "bitmapindexdetails" => Some(IndexKind::Bitmap),
            "zonemapindexdetails" => Some(IndexKind::ZoneMap),
            _ => None,
        }
    }

    /// A user's name for a kind ("btree", "BITMAP", "zonemap").
    pub fn parse(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().replace(['-', '_'], "").as_str() {
            "btree" => Ok(IndexKind::BTree),
            "bitmap" => Ok(IndexKind::Bitmap),
            "zonemap" => Ok(IndexKind::ZoneMap),
            other => Err(Error::InvalidInput(format!(
                "unknown index type '{other}' (supported: BTREE, BITMAP, ZONEMAP)"
            ))),
        }
    }

    /// The newest `index_version` of this kind a reader here understands.
    pub fn max_version(&self) -> i32 {
        match self {
            IndexKind::BTree => 1,
            IndexKind::Bitmap | IndexKind::ZoneMap => 0,
        }
    }

    /// What a segment of this kind and version stores, on a dataset with
    /// or without stable row ids.
    pub fn stored_ids(&self, index_version: i32, stable_row_ids: bool) -> StoredIds {
        match self {
            _ if !stable_row_ids => StoredIds::RowAddress,
            IndexKind::ZoneMap => StoredIds::RowAddress,
            IndexKind::BTree if index_version >= 1 => StoredIds::RowAddress,
            IndexKind::BTree | IndexKind::Bitmap => StoredIds::RowId,
        }
    }

    /// The `index_version` we write, as pylance 14 does: a B-tree on a
    /// dataset with stable row ids is version 1 (addresses), all else 0.
    pub fn write_version(&self, stable_row_ids: bool) -> i32 {
        match self {
            IndexKind::BTree if stable_row_ids => 1,
            _ => 0,
        }
    }

    pub fn details(&self) -> prost_types::Any {
        prost_types::Any {
            type_url: self.type_url().to_string(),
            value: vec![],
        }
    }
}

impl fmt::Display for IndexKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IndexKind::BTree => "BTREE",
            IndexKind::Bitmap => "BITMAP",
            IndexKind::ZoneMap => "ZONEMAP",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        for k in [IndexKind::BTree, IndexKind::Bitmap, IndexKind::ZoneMap] {
            assert_eq!(IndexKind::from_type_url(k.type_url()), Some(k));
            assert_eq!(
                IndexKind::from_type_url(&k.type_url().to_uppercase()),
                Some(k)
            );
        }
        assert_eq!(
            IndexKind::from_type_url("/lance.index.pb.VectorIndexDetails"),
            None
        );
        assert_eq!(IndexKind::parse("BTREE").unwrap(), IndexKind::BTree);
        assert!(IndexKind::parse("hash").is_err());
    }
}
