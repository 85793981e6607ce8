//! Runnable examples of Fathom, one feature per file:
//!
//! - `embed.rs`: Fathom tables in your own DataFusion `SessionContext`.
//! - `indexes_and_explain.rs`: create indexes, read the index-aware plan.
//! - `time_travel.rs`: query older versions of a table.
//!
//! Run one with `cargo run -p fathom-examples --example embed`.
