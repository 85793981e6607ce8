//! Transactions: what a commit does, how it is applied to the version it
//! read, and which concurrent commits it is compatible with.
//!
//! | ours \ theirs | Append | Delete | Update | CreateIndex | Overwrite/Restore |
//! |---|---|---|---|---|---|
//! | Append | ok | ok | ok | ok | conflict |
//! | Delete | ok | rebase (merge deletion vectors) | conflict if same fragments | ok | conflict |
//! | Update | ok | conflict if same fragments | conflict if same fragments | ok | conflict |
//! | CreateIndex | ok | ok | ok | conflict if same name | conflict |
//! | Overwrite/Restore | conflict | conflict | conflict | conflict | conflict |
//! | Rewrite (compaction) | ok | conflict if same fragments | conflict if same fragments | ok (rewritten fragments leave its coverage) | conflict |

use std::collections::{HashMap, HashSet};
use std::time::SystemTime;

use fathom_file::LanceSchema;
use roaring::RoaringBitmap;

use crate::error::{Error, Result};
use crate::format::{Fragment, IndexMetadata, Manifest, RowIdMeta};
use crate::pb;
use crate::rowids::RowIdSequence;

/// What a transaction does.
#[derive(Debug, Clone, PartialEq)]
pub enum Operation {
    /// New fragments (ids assigned at commit).
    Append { fragments: Vec<Fragment> },
    /// New deletion files for some fragments; whole fragments removed.
    Delete {
        updated: Vec<Fragment>,
        deleted_ids: Vec<u64>,
        predicate: String,
        /// Offsets this transaction deleted, per fragment (for rebasing;
        /// not serialized).
        new_deletions: HashMap<u64, RoaringBitmap>,
    },
    /// Replace everything: new schema and fragments.
    Overwrite {
        fragments: Vec<Fragment>,
        schema: LanceSchema,
        config_upsert: HashMap<String, String>,
    },
    /// Add index segments, remove others (by uuid).
    CreateIndex {
        new: Vec<IndexMetadata>,
        removed: Vec<IndexMetadata>,
    },
    /// Make an old version the latest.
    Restore { version: u64 },
    /// Compaction: in each group the old fragments' live rows were
    /// rewritten, in order, as the new fragments (ids assigned at commit).
    /// Index segments stop covering the old fragments in the same commit.
    Rewrite { groups: Vec<RewriteGroup> },
    /// Rows rewritten: fragments removed or updated, new fragments added.
    /// With `RewriteColumns`, `updated` fragments carry new data files for
    /// `fields_modified` (old columns tombstoned), and every index segment
    /// on one of those fields stops covering them in the same commit.
    Update {
        removed_ids: Vec<u64>,
        updated: Vec<Fragment>,
        new: Vec<Fragment>,
        fields_modified: Vec<u32>,
        mode: UpdateMode,
    },
    /// Overlays attached to fragments (`committed_version` stamped by
    /// `apply` with the version it builds).
    DataOverlay {
        groups: Vec<(u64, Vec<pb::DataOverlayFile>)>,
    },
}

/// How an [`Operation::Update`] changed rows (Lance's `UpdateMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UpdateMode {
    /// Rows deleted where they were and written to new fragments.
    #[default]
    RewriteRows,
    /// The modified columns of each updated fragment written whole to a
    /// new data file; rows stay where they are.
    RewriteColumns,
}

/// Removes `fragments` from the coverage of every segment keyed on or
/// carrying one of `fields` (their values there changed in place).
fn uncover(indices: &mut [IndexMetadata], fragments: &[Fragment], fields: &[u32]) {
    if fields.is_empty() || fragments.is_empty() {
        return;
    }
    for i in indices {
        let touches = i
            .fields
            .iter()
            .chain(&i.covering_fields)
            .any(|f| u32::try_from(*f).is_ok_and(|f| fields.contains(&f)));
        if let (true, Some(b)) = (touches, i.fragment_bitmap.as_mut()) {
            for f in fragments {
                b.remove(f.id as u32);
            }
        }
    }
}

impl Operation {
    /// Adjusts `self`, about to commit after `theirs`, where the two
    /// compose but not as-is: index segments built before a concurrent
    /// in-place column update must not cover the fragments it changed.
    pub fn rebase_onto(&mut self, theirs: &Operation) {
        if let (
            Operation::CreateIndex { new, .. },
            Operation::Update {
                updated,
                fields_modified,
                ..
            },
        ) = (self, theirs)
        {
            uncover(new, updated, fields_modified);
        }
    }
}

/// Old fragments and the fragments their live rows were rewritten into.
#[derive(Debug, Clone, PartialEq)]
pub struct RewriteGroup {
    pub old: Vec<Fragment>,
    pub new: Vec<Fragment>,
    /// With a deferred index remap: the old fragments' surviving row
    /// addresses, in the order the new fragments hold them (recorded in
    /// the fragment reuse index; the segments keep covering the rows).
    /// Not part of Lance's transaction file.
    pub survivors: Option<roaring::RoaringTreemap>,
}

impl Operation {
    pub fn name(&self) -> &'static str {
        match self {
            Operation::Append { .. } => "Append",
            Operation::Delete { .. } => "Delete",
            Operation::Overwrite { .. } => "Overwrite",
            Operation::CreateIndex { .. } => "CreateIndex",
            Operation::Restore { .. } => "Restore",
            Operation::Update { .. } => "Update",
            Operation::Rewrite { .. } => "Rewrite",
            Operation::DataOverlay { .. } => "DataOverlay",
        }
    }

    /// Existing fragments this operation modifies or removes.
    fn touched(&self) -> HashSet<u64> {
        match self {
            Operation::Delete {
                updated,
                deleted_ids,
                ..
            } => updated
                .iter()
                .map(|f| f.id)
                .chain(deleted_ids.iter().copied())
                .collect(),
            Operation::Update {
                removed_ids,
                updated,
                ..
            } => updated
                .iter()
                .map(|f| f.id)
                .chain(removed_ids.iter().copied())
                .collect(),
            Operation::Rewrite { groups } => groups
                .iter()
                .flat_map(|g| g.old.iter().map(|f| f.id))
                .collect(),
            Operation::DataOverlay { groups } => groups.iter().map(|(id, _)| *id).collect(),
            _ => HashSet::new(),
        }
    }
}

/// A transaction: an operation and the version it read.
#[derive(Debug, Clone, PartialEq)]
pub struct Transaction {
    pub read_version: u64,
    pub uuid: String,
    pub tag: String,
    pub operation: Operation,
}

/// How `theirs` (committed meanwhile) bears on `ours`.
#[derive(Debug, PartialEq, Eq)]
pub enum Compatibility {
    Compatible,
    /// Compatible after merging deletion vectors of these fragments.
    Rebase,
    Conflict(String),
}

pub fn check(ours: &Operation, theirs: &Operation) -> Compatibility {
    use Operation::*;
    let conflict = || {
        Compatibility::Conflict(format!(
            "a concurrent {} was committed while this {} was in progress",
            theirs.name(),
            ours.name()
        ))
    };
    match (ours, theirs) {
        (Overwrite { .. } | Restore { .. }, _) | (_, Overwrite { .. } | Restore { .. }) => {
            conflict()
        }
        (Append { .. }, _) => Compatibility::Compatible,
        (_, Append { .. }) => Compatibility::Compatible,
        (
            CreateIndex { new, .. },
            CreateIndex {
                new: theirs_new, ..
            },
        ) => {
            let names: HashSet<&str> = new.iter().map(|i| i.name.as_str()).collect();
            if theirs_new.iter().any(|i| names.contains(i.name.as_str())) {
                conflict()
            } else {
                Compatibility::Compatible
            }
        }
        (CreateIndex { .. }, _) | (_, CreateIndex { .. }) => Compatibility::Compatible,
        // Overlays compose with each other (the newest commit wins a cell)
        // and with deletes (deletions beat overlays).
        (DataOverlay { .. }, DataOverlay { .. } | Delete { .. })
        | (Delete { .. }, DataOverlay { .. }) => Compatibility::Compatible,
        (Delete { .. }, Delete { .. }) => {
            if ours.touched().is_disjoint(&theirs.touched()) {
                Compatibility::Compatible
            } else {
                Compatibility::Rebase
            }
        }
        _ => {
            if ours.touched().is_disjoint(&theirs.touched()) {
                Compatibility::Compatible
            } else {
                conflict()
            }
        }
    }
}

fn assign_ids(
    base: &Manifest,
    next_frag: &mut u64,
    next_row: &mut u64,
    frags: &[Fragment],
) -> Vec<Fragment> {
    frags
        .iter()
        .map(|f| {
            let mut f = f.clone();
            f.id = *next_frag;
            *next_frag += 1;
            if base.uses_stable_row_ids() && f.row_id_meta.is_none() {
                let seq = RowIdSequence::from_range(*next_row..*next_row + f.physical_rows);
                *next_row += f.physical_rows;
                f.row_id_meta = Some(RowIdMeta::Inline(seq.encode()));
            }
            f
        })
        .collect()
}

/// Builds the manifest of the next version from `base` (the latest version).
/// `restored` is the manifest of the version a Restore brings back.
pub fn apply(
    base: &Manifest,
    txn: &Transaction,
    restored: Option<&Manifest>,
    txn_file: &str,
) -> Result<Manifest> {
    let mut m = base.clone();
    let mut next_frag = base.next_fragment_id();
    let mut next_row = base.next_row_id;
    let mut added_reuse = None;
    match &txn.operation {
        Operation::Append { fragments } => {
            let new = assign_ids(base, &mut next_frag, &mut next_row, fragments);
            m.fragments.extend(new);
        }
        Operation::Delete {
            updated,
            deleted_ids,
            ..
        } => {
            let updated: HashMap<u64, &Fragment> = updated.iter().map(|f| (f.id, f)).collect();
            let deleted: HashSet<u64> = deleted_ids.iter().copied().collect();
            m.fragments = m
                .fragments
                .iter()
                .filter(|f| !deleted.contains(&f.id))
                .map(|f| {
                    updated.get(&f.id).map_or_else(
                        || f.clone(),
                        |u| {
                            // Only the deletion file changes: overlays
                            // attached meanwhile stay.
                            let mut n = (*u).clone();
                            n.passthrough.overlays = f.passthrough.overlays.clone();
                            n
                        },
                    )
                })
                .collect();
        }
        Operation::Update {
            removed_ids,
            updated: updated_list,
            new,
            fields_modified,
            ..
        } => {
            uncover(&mut m.indices, updated_list, fields_modified);
            let updated: HashMap<u64, &Fragment> = updated_list.iter().map(|f| (f.id, f)).collect();
            let removed: HashSet<u64> = removed_ids.iter().copied().collect();
            m.fragments = m
                .fragments
                .iter()
                .filter(|f| !removed.contains(&f.id))
                .map(|f| {
                    let mut f = updated
                        .get(&f.id)
                        .map_or_else(|| f.clone(), |u| (*u).clone());
                    // Data files left holding only tombstoned fields go.
                    f.files.retain(|d| d.fields.iter().any(|&id| id != -2));
                    f
                })
                .collect();
            let new = assign_ids(base, &mut next_frag, &mut next_row, new);
            m.fragments.extend(new);
        }
        Operation::Rewrite { groups } => {
            use crate::frag_reuse::{FragDigest, ReuseGroup, ReuseVersion};
            let digest = |f: &Fragment| FragDigest {
                id: f.id,
                physical_rows: f.physical_rows,
                num_deleted_rows: f.deletion_file.as_ref().map_or(0, |d| d.num_deleted_rows),
            };
            let mut rewritten = RoaringBitmap::new();
            let mut reuse = Vec::new();
            // A segment's stale answers for overlaid rows must not follow
            // them to the new fragments through the reuse index.
            let remapped: RoaringBitmap = groups
                .iter()
                .filter(|g| g.survivors.is_some())
                .flat_map(|g| g.old.iter().map(|f| f.id as u32))
                .collect();
            crate::overlay::exclude_overlaid(&mut m, &remapped);
            for g in groups {
                let new = assign_ids(base, &mut next_frag, &mut next_row, &g.new);
                match &g.survivors {
                    Some(changed) => reuse.push(ReuseGroup {
                        changed: changed.clone(),
                        old: g.old.iter().map(digest).collect(),
                        new: new.iter().map(digest).collect(),
                    }),
                    None => rewritten.extend(g.old.iter().map(|f| f.id as u32)),
                }
                replace_group(&mut m.fragments, &g.old, new, base.version)?;
            }
            // Segments name rows by their old addresses: without a reuse
            // index the rewritten fragments leave every segment's coverage
            // (scanned flat until an index is extended over the new ones).
            for i in &mut m.indices {
                if let Some(b) = &mut i.fragment_bitmap {
                    *b -= &rewritten;
                }
            }
            if !reuse.is_empty() {
                added_reuse = Some(ReuseVersion {
                    dataset_version: base.version,
                    groups: reuse,
                });
            }
        }
        Operation::Overwrite {
            fragments,
            schema,
            config_upsert,
        } => {
            m.schema = schema.clone();
            m.indices.clear();
            m.fragments = assign_ids(base, &mut next_frag, &mut next_row, fragments);
            m.config.extend(config_upsert.clone());
        }
        Operation::CreateIndex { new, removed } => {
            let removed: HashSet<uuid::Uuid> = removed.iter().map(|i| i.uuid).collect();
            m.indices.retain(|i| !removed.contains(&i.uuid));
            m.indices.extend(new.iter().cloned());
        }
        Operation::DataOverlay { groups } => {
            let stamp = base.version + 1;
            for (id, overlays) in groups {
                let f = m
                    .fragments
                    .iter_mut()
                    .find(|f| f.id == *id)
                    .ok_or_else(|| {
                        Error::invalid(format!(
                            "an overlay for fragment {id}, which is not in version {}",
                            base.version
                        ))
                    })?;
                for o in overlays {
                    let mut o = o.clone();
                    o.committed_version = stamp;
                    f.passthrough.overlays.push(o);
                }
            }
        }
        Operation::Restore { version } => {
            let r = restored.ok_or_else(|| {
                Error::invalid(format!("restore of version {version} without its manifest"))
            })?;
            m.schema = r.schema.clone();
            m.fragments = r.fragments.clone();
            m.indices = r.indices.clone();
            m.frag_reuse = r.frag_reuse.clone();
            m.config = r.config.clone();
            m.table_metadata = r.table_metadata.clone();
        }
    }
    m.version = base.version + 1;
    m.timestamp = SystemTime::now();
    m.tag = txn.tag.clone();
    m.next_row_id = next_row.max(base.next_row_id);
    let max_id = m.fragments.iter().map(|f| f.id).max();
    let prev = base.max_fragment_id.map(|v| v as u64);
    m.max_fragment_id = match (max_id, prev, next_frag) {
        (None, None, 0) => None,
        _ => Some(
            (next_frag.saturating_sub(1))
                .max(max_id.unwrap_or(0))
                .max(prev.unwrap_or(0)) as u32,
        ),
    };
    m.transaction_file = Some(txn_file.to_string());
    crate::frag_reuse::settle(&mut m, added_reuse)?;
    crate::overlay::exclude_overlaid(&mut m, &RoaringBitmap::new());
    m.update_feature_flags();
    Ok(m)
}

/// Replaces a group's old fragments by its new ones: in place when the old
/// ones are adjacent in the fragment list (scan order kept), else the new
/// ones go last. Every old fragment must still exist, unchanged.
fn replace_group(
    fragments: &mut Vec<Fragment>,
    old: &[Fragment],
    new: Vec<Fragment>,
    version: u64,
) -> Result<()> {
    let pos: HashMap<u64, usize> = fragments
        .iter()
        .enumerate()
        .map(|(i, f)| (f.id, i))
        .collect();
    for o in old {
        match pos.get(&o.id) {
            Some(&i) if fragments[i] == *o => {}
            _ => {
                return Err(Error::invalid(format!(
                    "compaction of version {version} rewrote fragment {}, which changed or was removed since",
                    o.id
                )));
            }
        }
    }
    let Some(first) = old.first().map(|o| pos[&o.id]) else {
        fragments.extend(new);
        return Ok(());
    };
    let adjacent = old.iter().enumerate().all(|(k, o)| pos[&o.id] == first + k);
    if adjacent {
        fragments.splice(first..first + old.len(), new);
    } else {
        let gone: HashSet<u64> = old.iter().map(|f| f.id).collect();
        fragments.retain(|f| !gone.contains(&f.id));
        fragments.extend(new);
    }
    Ok(())
}

impl Transaction {
    pub fn to_pb(&self) -> pb::Transaction {
        use pb::transaction as t;
        let frags = |v: &[Fragment]| v.iter().map(|f| f.to_pb()).collect::<Vec<_>>();
        let operation = match &self.operation {
            Operation::Append { fragments } => t::Operation::Append(t::Append {
                fragments: frags(fragments),
            }),
            Operation::Delete {
                updated,
                deleted_ids,
                predicate,
                ..
            } => t::Operation::Delete(t::Delete {
                updated_fragments: frags(updated),
                deleted_fragment_ids: deleted_ids.clone(),
                predicate: predicate.clone(),
            }),
            Operation::Overwrite {
                fragments,
                schema,
                config_upsert,
            } => t::Operation::Overwrite(t::Overwrite {
                fragments: frags(fragments),
                schema: schema.to_pb_fields(),
                schema_metadata: schema
                    .metadata
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
                    .collect(),
                config_upsert_values: config_upsert.clone(),
            }),
            Operation::CreateIndex { new, removed } => t::Operation::CreateIndex(t::CreateIndex {
                new_indices: new.iter().map(|i| i.to_pb()).collect(),
                removed_indices: removed.iter().map(|i| i.to_pb()).collect(),
            }),
            Operation::Restore { version } => {
                t::Operation::Restore(t::Restore { version: *version })
            }
            Operation::Rewrite { groups } => t::Operation::Rewrite(t::Rewrite {
                old_fragments: vec![],
                new_fragments: vec![],
                groups: groups
                    .iter()
                    .map(|g| t::rewrite::RewriteGroup {
                        old_fragments: frags(&g.old),
                        new_fragments: frags(&g.new),
                    })
                    .collect(),
            }),
            Operation::Update {
                removed_ids,
                updated,
                new,
                fields_modified,
                mode,
            } => t::Operation::Update(t::Update {
                removed_fragment_ids: removed_ids.clone(),
                updated_fragments: frags(updated),
                new_fragments: frags(new),
                fields_modified: fields_modified.clone(),
                fields_for_preserving_frag_bitmap: vec![],
                update_mode: match mode {
                    UpdateMode::RewriteRows => t::UpdateMode::RewriteRows,
                    UpdateMode::RewriteColumns => t::UpdateMode::RewriteColumns,
                } as i32,
            }),
            Operation::DataOverlay { groups } => t::Operation::DataOverlay(t::DataOverlay {
                groups: groups
                    .iter()
                    .map(|(id, o)| t::DataOverlayGroup {
                        fragment_id: *id,
                        overlays: o.clone(),
                    })
                    .collect(),
            }),
        };
        pb::Transaction {
            read_version: self.read_version,
            uuid: self.uuid.clone(),
            tag: self.tag.clone(),
            transaction_properties: Default::default(),
            operation: Some(operation),
        }
    }

    /// Decodes a committed transaction; `None` for operations this layer
    /// does not model (treated as conflicting with everything).
    pub fn from_pb(t: pb::Transaction) -> Result<Option<Self>> {
        use pb::transaction as tp;
        let frags = |v: Vec<pb::DataFragment>| {
            v.into_iter()
                .map(Fragment::from_pb)
                .collect::<Result<Vec<_>>>()
        };
        let operation = match t.operation {
            Some(tp::Operation::Append(a)) => Operation::Append {
                fragments: frags(a.fragments)?,
            },
            Some(tp::Operation::Delete(d)) => Operation::Delete {
                updated: frags(d.updated_fragments)?,
                deleted_ids: d.deleted_fragment_ids,
                predicate: d.predicate,
                new_deletions: HashMap::new(),
            },
            Some(tp::Operation::Overwrite(o)) => Operation::Overwrite {
                fragments: frags(o.fragments)?,
                schema: LanceSchema::from_pb(&o.schema, &o.schema_metadata)?,
                config_upsert: o.config_upsert_values,
            },
            Some(tp::Operation::CreateIndex(c)) => Operation::CreateIndex {
                new: c
                    .new_indices
                    .into_iter()
                    .map(IndexMetadata::from_pb)
                    .collect::<Result<_>>()?,
                removed: c
                    .removed_indices
                    .into_iter()
                    .map(IndexMetadata::from_pb)
                    .collect::<Result<_>>()?,
            },
            Some(tp::Operation::Restore(r)) => Operation::Restore { version: r.version },
            Some(tp::Operation::Rewrite(r)) => {
                let mut groups = r
                    .groups
                    .into_iter()
                    .map(|g| {
                        Ok(RewriteGroup {
                            old: frags(g.old_fragments)?,
                            new: frags(g.new_fragments)?,
                            survivors: None,
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                if !r.old_fragments.is_empty() {
                    groups.push(RewriteGroup {
                        old: frags(r.old_fragments)?,
                        new: frags(r.new_fragments)?,
                        survivors: None,
                    });
                }
                Operation::Rewrite { groups }
            }
            Some(tp::Operation::Update(u)) => Operation::Update {
                removed_ids: u.removed_fragment_ids,
                updated: frags(u.updated_fragments)?,
                new: frags(u.new_fragments)?,
                mode: if u.update_mode == tp::UpdateMode::RewriteColumns as i32 {
                    UpdateMode::RewriteColumns
                } else {
                    UpdateMode::RewriteRows
                },
                fields_modified: u.fields_modified,
            },
            Some(tp::Operation::DataOverlay(d)) => Operation::DataOverlay {
                groups: d
                    .groups
                    .into_iter()
                    .map(|g| (g.fragment_id, g.overlays))
                    .collect(),
            },
            None => return Ok(None),
        };
        Ok(Some(Transaction {
            read_version: t.read_version,
            uuid: t.uuid,
            tag: t.tag,
            operation,
        }))
    }
}
