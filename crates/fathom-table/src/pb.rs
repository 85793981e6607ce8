//! Generated protobuf messages of the table format. The public API uses the
//! domain types in `format`; conversions live at the edge.
#![allow(clippy::all, missing_docs)]

include!(concat!(env!("OUT_DIR"), "/lance.table.rs"));
