//! Removing old versions and the files only they reference.

use std::collections::HashSet;
use std::time::SystemTime;

use object_store::ObjectStoreExt;
use object_store::path::Path;

use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::format::Manifest;
use crate::manifest_io::read_manifest;
use crate::naming::{self, manifest_path};
use crate::versions::list_versions;

/// What `cleanup_old_versions` keeps.
#[derive(Debug, Clone, Default)]
pub struct CleanupPolicy {
    /// Keep the newest N versions (at least 1: the latest is always kept).
    pub keep_last: Option<usize>,
    /// Keep versions committed at or after this time.
    pub keep_newer_than: Option<SystemTime>,
}

/// What a cleanup removed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CleanupStats {
    pub versions_removed: usize,
    pub files_removed: usize,
    pub bytes_removed: u64,
}

impl Dataset {
    /// Removes old versions and the files only they needed.
    pub async fn cleanup_old_versions(&self, policy: &CleanupPolicy) -> Result<CleanupStats> {
        let (versions, _) = list_versions(self.store.as_ref(), &self.root, &self.uri).await?;
        let Some(&latest) = versions.last() else {
            return Ok(CleanupStats::default());
        };
        let mut manifests = Vec::new();
        for &v in &versions {
            manifests.push(
                read_manifest(
                    self.store.as_ref(),
                    &manifest_path(&self.root, v, self.naming),
                )
                .await?,
            );
        }
        let n = versions.len();
        let keep_last = policy.keep_last.unwrap_or(usize::MAX).max(1);
        let keep = |i: usize, m: &Manifest| -> bool {
            m.version == latest
                || m.version == self.version()
                || (policy.keep_last.is_some() && i + keep_last >= n)
                || policy.keep_newer_than.is_some_and(|t| m.timestamp >= t)
                || (policy.keep_last.is_none() && policy.keep_newer_than.is_none())
        };
        let files_of = |m: &Manifest| -> HashSet<Path> {
            let mut s = HashSet::new();
            for f in &m.fragments {
                for d in &f.files {
                    s.insert(naming::data_file_path(&self.root, &d.path));
                }
                for o in &f.passthrough.overlays {
                    if let Some(d) = &o.data_file {
                        s.insert(naming::data_file_path(&self.root, &d.path));
                    }
                }
                if let Some(d) = &f.deletion_file {
                    s.insert(naming::deletion_file_path(
                        &self.root,
                        f.id,
                        d.read_version,
                        d.id,
                        d.kind,
                    ));
                }
            }
            for i in &m.indices {
                for file in &i.files {
                    s.insert(naming::index_dir(&self.root, &i.uuid).join(file.path.as_str()));
                }
            }
            if let Some(t) = &m.transaction_file {
                s.insert(naming::transaction_path(&self.root, t));
            }
            s
        };
        let mut kept_files = HashSet::new();
        let mut removed_files = HashSet::new();
        let mut removed_versions = Vec::new();
        for (i, m) in manifests.iter().enumerate() {
            if keep(i, m) {
                kept_files.extend(files_of(m));
            } else {
                removed_files.extend(files_of(m));
                removed_versions.push(m.version);
            }
        }
        let mut stats = CleanupStats::default();
        // Manifests first: once a version is gone, nothing can need its files.
        for v in &removed_versions {
            let p = manifest_path(&self.root, *v, self.naming);
            self.store
                .delete(&p)
                .await
                .map_err(Error::io(&*self.store, &p))?;
            stats.versions_removed += 1;
        }
        for p in removed_files.difference(&kept_files) {
            let size = self.store.head(p).await.map(|m| m.size).unwrap_or(0);
            match self.store.delete(p).await {
                Ok(()) => {
                    stats.files_removed += 1;
                    stats.bytes_removed += size;
                }
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(Error::io(&*self.store, p)(e)),
            }
        }
        Ok(stats)
    }
}
