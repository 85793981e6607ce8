//! SQL tests: every `tests/slt/*.slt` file runs through sqllogictest
//! against a fresh session whose default schema is a temporary data
//! directory, plus scenario tests in Rust.

mod catalog;
mod codec;
mod common;
mod counts;
mod flat;
mod fts;
mod fts_nested;
mod indexes;
mod plan_cache;
mod pylance_compaction;
mod pylance_fts;
mod pylance_stable;
mod pylance_vector;
mod row_stream;
mod slt;
mod vector;
