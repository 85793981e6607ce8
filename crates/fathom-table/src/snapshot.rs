//! A dataset version as bytes: enough to reopen exactly that version in
//! another process (a worker of a distributed engine) that can reach the
//! dataset's URI, without listing or reading the manifest again.

use std::sync::Arc;

use bytes::Bytes;

use crate::dataset::Dataset;
use crate::error::Result;
use crate::manifest_io::{decode_manifest, encode_manifest};
use crate::naming::ManifestNaming;
use crate::scan::ReadCache;
use crate::store::store_for_uri;

/// What reopens one dataset version: its URI, its manifest (the bytes of
/// a manifest file) and how its manifests are named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatasetSnapshot {
    pub uri: String,
    pub manifest: Bytes,
    /// Manifests named `{version}.manifest` (Lance's V1 names).
    pub v1_names: bool,
}

impl Dataset {
    /// This version as a [`DatasetSnapshot`].
    pub fn snapshot(&self) -> DatasetSnapshot {
        DatasetSnapshot {
            uri: self.uri.clone(),
            manifest: encode_manifest(&self.manifest),
            v1_names: self.naming == ManifestNaming::V1,
        }
    }

    /// Reopens the version a [`DatasetSnapshot`] describes (no I/O: the
    /// store is resolved from the URI, data is read when scanned).
    pub fn from_snapshot(s: &DatasetSnapshot) -> Result<Self> {
        let (store, root) = store_for_uri(&s.uri)?;
        let manifest = decode_manifest(&s.manifest, &s.uri)?;
        let naming = if s.v1_names {
            ManifestNaming::V1
        } else {
            ManifestNaming::V2
        };
        Dataset::from_manifest(
            store,
            root,
            &s.uri,
            manifest,
            naming,
            Arc::new(ReadCache::default()),
        )
    }
}
