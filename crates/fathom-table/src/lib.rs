//! # fathom-table: versioned datasets in the Lance table format
//!
//! A dataset is a directory on an object store holding immutable versions
//! of a table (`_versions/*.manifest`), each a list of fragments; a
//! fragment is a set of data files (Lance 2.0, 2.1 or 2.2, see `fathom-file`) plus an
//! optional deletion file. Commits are atomic (put-if-absent on the next
//! manifest) and concurrent writers are reconciled by their transactions.
//!
//! Byte-compatible with Lance: datasets written here open in pylance, and
//! datasets pylance writes open here (its default 2.2 as well as 2.0 and
//! 2.1). Rows are added as 2.0 data files, so only 2.0 datasets take new
//! rows; deletes and index builds work on every version.

mod address;
pub mod cleanup;
pub mod commit;
pub mod compact;
pub mod dataset;
pub mod deletion;
pub mod error;
pub mod format;
pub mod frag_reuse;
pub use fathom_file::localfs;
pub mod manifest_io;
pub mod naming;
pub mod overlay;
#[doc(hidden)]
// Generated; public only for the pass-through fields of `Fragment` and `Manifest`
// (row-id sequences, overlays, base paths) that are kept byte-for-byte.
pub mod pb;
pub mod rowids;
pub mod scan;
pub mod scanner;
pub mod snapshot;
pub mod store;
pub mod take;
pub mod transaction;
pub mod update;
pub mod versions;
pub mod write;

pub use address::{FragmentId, RowAddress, RowSet};
pub use cleanup::{CleanupPolicy, CleanupStats};
pub use compact::{CompactionMetrics, CompactionOptions, CompactionPlan, plan_compaction};
pub use dataset::Dataset;
pub use error::{Error, Result};
pub use format::{DataFile, DeletionFile, Fragment, IndexMetadata, Manifest, ManifestFacts};
pub use scan::{Projection, ROW_ADDR, ROW_ID};
pub use scanner::Scanner;
pub use snapshot::DatasetSnapshot;
pub use take::Taker;
pub use transaction::{Operation, UpdateMode};
pub use versions::VersionInfo;
pub use write::WriteMode;
pub use write::WriteParams;
