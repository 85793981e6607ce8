//! Runnable examples of Fathom, one feature per file:
//!
//! - `embed.rs`: Fathom tables in your own DataFusion `SessionContext`.
//! - `indexes_and_explain.rs`: create indexes, read the index-aware plan.
//! - `time_travel.rs`: query older versions of a table.
//! - `repeated_queries.rs`: run the same query again without planning it again.
//!
//! Run one with `cargo run -p fathom-examples --example embed`.
