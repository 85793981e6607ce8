//! # fathom-file: the Lance file format, version 2.0
//!
//! A columnar file built for random access as well as scans: every column
//! is a sequence of pages, each described by a protobuf encoding, with the
//! column metadata, offset tables and a 40-byte footer at the end.
//!
//! - [`FileWriter`] streams RecordBatches into a file with bounded memory.
//! - [`FileReader`] opens a file with one tail read and answers scans,
//!   row ranges and `take` of scattered rows, reading only the byte ranges
//!   the requested rows need.
//!
//! Files written here are read by the real Lance (pylance's
//! `LanceFileReader`), and 2.0 files that Lance writes are read here; the
//! interop tests in `tests/interop` check both directions.

pub mod encoding;
pub mod error;
pub mod format;
pub mod io;
pub mod localfs;
#[doc(hidden)]
// Generated; public only because fathom-table's generated types refer to it.
pub mod pb;
pub mod reader;
pub mod schema;
pub mod stats;
pub mod writer;

pub use error::{Error, Result};
pub use format::KEEP_WHOLE_MAX;
pub use reader::{FileReader, FileReaderOptions};
pub use schema::{LanceField, LanceSchema};
pub use writer::{FileVersion, FileWriter, FileWriterOptions, WrittenFile};
