//! Execution nodes, one per file.

pub mod dml;
pub mod scan;
