//! Dev-only helpers: seeded generators of Arrow data with nulls at every
//! level, empty lists and strings, all-null stretches and low-cardinality
//! strings, used by property tests across the workspace.

pub mod generate;
