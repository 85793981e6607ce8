//! # fathom-index: scalar indexes over Lance datasets
//!
//! | kind | answers | result |
//! |---|---|---|
//! | B-tree | =, range, IN, IS NULL | exact |
//! | bitmap | =, range, IN, IS NULL | exact |
//! | zone map | =, range, IN; IS NULL | AtMost (recheck); IS NULL exact |
//!
//! An index is a set of segments (`IndexMetadata`), each covering a set of
//! fragments. Opening a dataset loads no index; a search loads only what it
//! needs (a B-tree's page lookup, then the pages it hits) into a
//! byte-bounded [`IndexCache`]. Results are row addresses of the rows the
//! segment covered when built: callers exclude rows deleted since, and
//! fragments the segment no longer covers (see fathom-datafusion).
//! No DataFusion dependency.

pub mod cache;
pub mod error;
pub mod fts;
pub mod io;
pub mod kind;
pub mod kinds;
pub mod lifecycle;
pub mod pages;
pub mod query;
pub mod rowaddr_map;
pub mod segment;
pub mod vector;

pub use cache::IndexCache;
pub use error::{Error, Result};
pub use kind::{Groups, IndexKind, IndexType, REGISTRY, RemapFn, SegmentRef, StoredIds};
pub use lifecycle::{
    CompactionReport, IndexInfo, compact, create_fts_index, create_index, create_vector_index,
    drop_index, extend_index, list_indexes, rebuild_index, remap_indexes,
};
pub use query::{Exactness, RankedResult, ScalarQuery, SearchResult};
