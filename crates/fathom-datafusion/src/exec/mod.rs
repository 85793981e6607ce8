//! Execution nodes, one per file.

pub mod common;
pub mod count;
pub mod count_union;
pub mod dml;
pub mod exclusion;
pub mod fts;
pub mod index_scan;
pub mod knn;
pub mod overlaid;
pub mod scan;
pub mod take;
