//! The commit protocol.
//!
//! 1. Data, deletion and index files are written first, under unique names.
//! 2. The transaction is written to `_transactions/`.
//! 3. The manifest of version `read + 1` is created with put-if-absent: the
//!    commit point. Two writers racing for a version cannot both win.
//! 4. The loser reads the transactions committed since its read version;
//!    if they are compatible (see `transaction::check`) it rebases and tries
//!    the next version, otherwise it fails with a conflict error. After
//!    [`MAX_ATTEMPTS`] it gives up.
//!
//! Nothing half-written is visible: until the manifest exists, readers see
//! the previous version, and files of a failed commit are never referenced.
//!
//! A dataset dropped while a commit is in flight (`DROP TABLE` renames the
//! directory aside, then deletes it) must not come back as a table whose
//! manifest names files that are gone. Between steps 2 and 3 the commit
//! checks that the version it builds on still exists, and after step 3
//! that its transaction file does; a drop at any moment before the
//! manifest lands fails one of the two checks, and the commit takes its
//! files back and fails with "dropped".

use std::collections::HashMap;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use prost::Message;
use roaring::RoaringBitmap;

use crate::deletion::{read_deletions, write_deletions};
use crate::error::{Error, Result};
use crate::format::{Fragment, Manifest};
use crate::manifest_io::{read_manifest, write_manifest_if_absent};
use crate::naming::{ManifestNaming, manifest_path, transaction_path};
use crate::pb;
use crate::transaction::{Compatibility, Operation, Transaction, apply, check};

/// Commit attempts before giving up.
pub const MAX_ATTEMPTS: usize = 20;

pub(crate) struct CommitTarget<'a> {
    pub store: &'a dyn ObjectStore,
    pub root: &'a Path,
    pub uri: &'a str,
    pub naming: ManifestNaming,
}

async fn read_transaction(t: &CommitTarget<'_>, m: &Manifest) -> Result<Option<Transaction>> {
    let Some(name) = &m.transaction_file else {
        return Ok(None);
    };
    let path = transaction_path(t.root, name);
    let bytes = match t.store.get(&path).await {
        Ok(r) => r.bytes().await.map_err(Error::io(t.store, &path))?,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(Error::io(t.store, &path)(e)),
    };
    let pbt = pb::Transaction::decode(bytes)
        .map_err(|e| Error::corrupt(crate::store::shown(t.store, &path), e))?;
    Transaction::from_pb(pbt)
}

/// Merges our new deletions into fragments that a concurrent delete changed.
async fn rebase_delete(
    t: &CommitTarget<'_>,
    op: &mut Operation,
    latest: &Manifest,
    read_version: u64,
) -> Result<()> {
    let Operation::Delete {
        updated,
        deleted_ids,
        new_deletions,
        ..
    } = op
    else {
        return Ok(());
    };
    let current: HashMap<u64, &Fragment> = latest.fragments.iter().map(|f| (f.id, f)).collect();
    let mut still_updated = Vec::new();
    for f in updated.drain(..) {
        let Some(cur) = current.get(&f.id) else {
            // Removed entirely by the other transaction: nothing left to delete.
            continue;
        };
        if cur.deletion_file == f.deletion_file || new_deletions.get(&f.id).is_none() {
            still_updated.push(f);
            continue;
        }
        let mut all: RoaringBitmap = match &cur.deletion_file {
            Some(d) => read_deletions(t.store, t.root, f.id, d).await?,
            None => RoaringBitmap::new(),
        };
        all |= &new_deletions[&f.id];
        if all.len() >= cur.physical_rows {
            deleted_ids.push(f.id);
            continue;
        }
        let mut merged = (*cur).clone();
        merged.deletion_file =
            Some(write_deletions(t.store, t.root, f.id, read_version, &all).await?);
        still_updated.push(merged);
    }
    *updated = still_updated;
    deleted_ids.retain(|id| current.contains_key(id));
    deleted_ids.sort_unstable();
    deleted_ids.dedup();
    Ok(())
}

async fn exists(t: &CommitTarget<'_>, path: &Path) -> Result<bool> {
    match t.store.head(path).await {
        Ok(_) => Ok(true),
        Err(object_store::Error::NotFound { .. }) => Ok(false),
        Err(e) => Err(Error::io(t.store, path)(e)),
    }
}

fn dropped(t: &CommitTarget<'_>) -> Error {
    Error::NotFound {
        uri: t.uri.to_string(),
        message:
            "the dataset was dropped while this commit was being written; nothing was committed"
                .into(),
    }
}

/// Commits `op` on top of `base` (the version it read); returns the new manifest.
pub(crate) async fn commit(
    t: &CommitTarget<'_>,
    base: &Manifest,
    mut op: Operation,
    restored: Option<&Manifest>,
) -> Result<Manifest> {
    let uuid = uuid::Uuid::new_v4().hyphenated().to_string();
    let mut latest = base.clone();
    for _attempt in 0..MAX_ATTEMPTS {
        let txn = Transaction {
            read_version: latest.version,
            uuid: uuid.clone(),
            tag: String::new(),
            operation: op.clone(),
        };
        let txn_name = format!("{}-{}.txn", latest.version, uuid);
        let txn_path = transaction_path(t.root, &txn_name);
        t.store
            .put(&txn_path, PutPayload::from(txn.to_pb().encode_to_vec()))
            .await
            .map_err(Error::io(t.store, &txn_path))?;
        let next = apply(&latest, &txn, restored, &txn_name)?;
        let path = manifest_path(t.root, next.version, t.naming);
        if latest.version > 0
            && !exists(t, &manifest_path(t.root, latest.version, t.naming)).await?
            && !exists(t, &path).await?
        {
            // The version we build on is gone and nobody committed after it:
            // the dataset was dropped (renamed aside) under us.
            let _ = t.store.delete(&txn_path).await;
            return Err(dropped(t));
        }
        if write_manifest_if_absent(t.store, &path, &next).await? {
            if !exists(t, &txn_path).await? {
                // Dropped between the check above and our manifest: ours
                // would start a table whose older files are gone. Take it back.
                let _ = t.store.delete(&path).await;
                return Err(dropped(t));
            }
            return Ok(next);
        }
        // Lost the race for this version: check what was committed since.
        let mut v = latest.version + 1;
        loop {
            let p = manifest_path(t.root, v, t.naming);
            let theirs_manifest = match read_manifest(t.store, &p).await {
                Ok(m) => m,
                Err(Error::Io {
                    source: object_store::Error::NotFound { .. },
                    ..
                }) => break,
                Err(e) => return Err(e),
            };
            let theirs = read_transaction(t, &theirs_manifest).await?;
            let compat = match &theirs {
                Some(theirs) => check(&op, &theirs.operation),
                None => Compatibility::Conflict(format!(
                    "version {v} was committed by an operation this library cannot inspect"
                )),
            };
            match compat {
                Compatibility::Compatible => {
                    if let Some(theirs) = &theirs {
                        op.rebase_onto(&theirs.operation);
                    }
                }
                Compatibility::Rebase => {
                    rebase_delete(t, &mut op, &theirs_manifest, base.version).await?
                }
                Compatibility::Conflict(why) => {
                    return Err(Error::Conflict {
                        uri: t.uri.to_string(),
                        message: format!(
                            "{why} (read version {}, conflicting version {v})",
                            base.version
                        ),
                    });
                }
            }
            latest = theirs_manifest;
            v += 1;
        }
    }
    Err(Error::Conflict {
        uri: t.uri.to_string(),
        message: format!("gave up after {MAX_ATTEMPTS} attempts: too many concurrent commits"),
    })
}
