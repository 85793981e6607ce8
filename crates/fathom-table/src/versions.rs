//! A dataset's history: listing versions, finding the latest, time
//! travel (by version or time) and restoring an old version.

use std::time::SystemTime;

use object_store::ObjectStore;
use object_store::path::Path;

use crate::commit::commit;
use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::manifest_io::read_manifest;
use crate::naming::{self, ManifestNaming, manifest_path, parse_manifest_name};
use crate::transaction::Operation;

/// One entry of a dataset's history.
#[derive(Debug, Clone, PartialEq)]
pub struct VersionInfo {
    pub version: u64,
    pub timestamp: SystemTime,
    pub num_rows: u64,
    pub num_fragments: usize,
}

/// Versions present in `_versions/`, and how they are named.
pub(crate) async fn list_versions(
    store: &dyn ObjectStore,
    root: &Path,
    uri: &str,
) -> Result<(Vec<u64>, Option<ManifestNaming>)> {
    let dir = root.clone().join(naming::VERSIONS_DIR);
    let listed = match store.list_with_delimiter(Some(&dir)).await {
        Ok(l) => l.objects,
        Err(object_store::Error::NotFound { .. }) => vec![],
        Err(e) => return Err(Error::io(store, &dir)(e)),
    };
    let mut versions = Vec::new();
    let mut scheme = None;
    for o in listed {
        let Some(name) = o.location.filename() else {
            continue;
        };
        if let Some((v, n)) = parse_manifest_name(name) {
            if scheme.is_some_and(|s| s != n) {
                return Err(Error::corrupt(
                    uri,
                    "_versions/ mixes V1 and V2 manifest names",
                ));
            }
            scheme = Some(n);
            versions.push(v);
        }
    }
    versions.sort_unstable();
    Ok((versions, scheme))
}

impl Dataset {
    /// The newest committed version number.
    pub async fn latest_version(&self) -> Result<u64> {
        // Versions are committed one after another: when the next one's
        // manifest is absent (the usual case, checked before every query)
        // this one is the latest, known from one HEAD instead of a listing.
        let next = manifest_path(&self.root, self.version() + 1, self.naming);
        if let Err(object_store::Error::NotFound { .. }) =
            object_store::ObjectStoreExt::head(self.store.as_ref(), &next).await
        {
            return Ok(self.version());
        }
        let (v, _) = list_versions(self.store.as_ref(), &self.root, &self.uri).await?;
        Ok(v.last().copied().unwrap_or(self.version()))
    }

    /// The latest version (this one if nothing newer was committed).
    pub async fn checkout_latest(&self) -> Result<Self> {
        let v = self.latest_version().await?;
        self.checkout(v).await
    }

    /// An older (or newer) version: time travel.
    pub async fn checkout(&self, version: u64) -> Result<Self> {
        if version == self.version() {
            return Ok(self.clone());
        }
        Self::load(
            self.store.clone(),
            self.root.clone(),
            &self.uri,
            version,
            self.naming,
            self.cache.clone(),
        )
        .await
    }

    /// The version that was current at `ts`.
    pub async fn checkout_at(&self, ts: SystemTime) -> Result<Self> {
        let versions = self.versions().await?;
        let v = versions
            .iter()
            .rev()
            .find(|v| v.timestamp <= ts)
            .ok_or_else(|| {
                Error::invalid(format!("no version of {} existed at {ts:?}", self.uri))
            })?;
        self.checkout(v.version).await
    }

    /// All committed versions, oldest first.
    pub async fn versions(&self) -> Result<Vec<VersionInfo>> {
        let (versions, _) = list_versions(self.store.as_ref(), &self.root, &self.uri).await?;
        let mut out = Vec::with_capacity(versions.len());
        for v in versions {
            let m = read_manifest(
                self.store.as_ref(),
                &manifest_path(&self.root, v, self.naming),
            )
            .await?;
            out.push(VersionInfo {
                version: v,
                timestamp: m.timestamp,
                num_rows: m.num_rows(),
                num_fragments: m.fragments.len(),
            });
        }
        Ok(out)
    }

    /// Makes this (old) version the latest, as a new version.
    pub async fn restore(&self) -> Result<Self> {
        let latest = self.checkout_latest().await?;
        let target = self.target();
        let m = commit(
            &target,
            &latest.manifest,
            Operation::Restore {
                version: self.version(),
            },
            Some(&self.manifest),
        )
        .await?;
        self.with_manifest(m)
    }
}
