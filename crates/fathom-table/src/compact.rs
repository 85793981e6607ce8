//! Compaction: small fragments merged, deleted rows dropped.
//!
//! Planned as Lance plans it (`lance::dataset::optimize::plan_compaction`):
//! fragments in manifest order; a fragment is a candidate when more than
//! `materialize_deletions_threshold` of its rows are deleted (it is worth
//! rewriting alone) or when it has fewer than `target_rows_per_fragment`
//! rows (worth merging with neighbours). Adjacent candidates covered by the
//! same index segments form a bin (so a bin never mixes indexed and
//! unindexed rows); a bin of one small fragment without deletions to drop
//! is left alone, and bins are split so each rewrites about
//! `target_rows_per_fragment` rows. Each bin's live rows are read in order
//! and written as new fragments; one `Rewrite` commit replaces every bin's
//! old fragments by its new ones, in place in the fragment list, and takes
//! the old fragments out of every index segment's coverage (their rows are
//! scanned flat until an index is extended over the new fragments:
//! `fathom_index::compact` does that). With stable row ids the new
//! fragments carry the rows' ids.

use arrow_array::{Array, RecordBatch, UInt64Array};
use futures::TryStreamExt;

use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::format::{Fragment, RowIdMeta};
use crate::rowids::RowIdSequence;
use crate::transaction::{Operation, RewriteGroup};
use crate::write::WriteParams;

/// Reports `(phase, done, total)` during long work.
pub type ProgressFn = dyn Fn(&str, u64, u64) + Send + Sync;

/// What to compact (Lance's defaults).
#[derive(Debug, Clone, PartialEq)]
pub struct CompactionOptions {
    /// Rows a compacted fragment aims for (1,048,576).
    pub target_rows_per_fragment: u64,
    /// Rows read and written per batch (1,024).
    pub max_rows_per_group: usize,
    /// Rewrite fragments with many deleted rows even alone (true).
    pub materialize_deletions: bool,
    /// The deleted share above which a fragment is rewritten (0.1).
    pub materialize_deletions_threshold: f64,
    /// Record how rows moved in the fragment reuse index instead of taking
    /// the rewritten fragments out of the indexes' coverage (false): the
    /// segments keep answering for the rows, remapped when read. Ignored
    /// with stable row ids.
    pub defer_index_remap: bool,
    /// Rewrite the segments covering rewritten fragments with their rows'
    /// new addresses (`fathom_index::compact` does, right after the
    /// rewrite commit, which records the moves as with
    /// `defer_index_remap`; false). Ignored with stable row ids.
    pub remap_indexes: bool,
}

impl Default for CompactionOptions {
    fn default() -> Self {
        CompactionOptions {
            target_rows_per_fragment: 1 << 20,
            max_rows_per_group: 1024,
            materialize_deletions: true,
            materialize_deletions_threshold: 0.1,
            defer_index_remap: false,
            remap_indexes: false,
        }
    }
}

impl CompactionOptions {
    /// Sets an option by its Lance name (`target_rows_per_fragment`,
    /// `max_rows_per_group`, `materialize_deletions`,
    /// `materialize_deletions_threshold`).
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let bad = |what: &str| {
            Error::invalid(format!(
                "compaction option {key} = '{value}': expected {what}"
            ))
        };
        match key.to_ascii_lowercase().as_str() {
            "target_rows_per_fragment" => {
                self.target_rows_per_fragment = value
                    .parse()
                    .ok()
                    .filter(|&n: &u64| n > 0)
                    .ok_or_else(|| bad("a positive integer"))?
            }
            "max_rows_per_group" => {
                self.max_rows_per_group = value
                    .parse()
                    .ok()
                    .filter(|&n: &usize| n > 0)
                    .ok_or_else(|| bad("a positive integer"))?
            }
            "materialize_deletions" => {
                self.materialize_deletions = value
                    .to_ascii_lowercase()
                    .parse()
                    .map_err(|_| bad("true or false"))?
            }
            "defer_index_remap" => {
                self.defer_index_remap = value
                    .to_ascii_lowercase()
                    .parse()
                    .map_err(|_| bad("true or false"))?
            }
            "remap_indexes" => {
                self.remap_indexes = value
                    .to_ascii_lowercase()
                    .parse()
                    .map_err(|_| bad("true or false"))?
            }
            "materialize_deletions_threshold" => {
                self.materialize_deletions_threshold = value
                    .parse()
                    .ok()
                    .filter(|x: &f64| (0.0..=1.0).contains(x))
                    .ok_or_else(|| bad("a number from 0 to 1"))?
            }
            _ => {
                return Err(Error::invalid(format!(
                    "unknown compaction option '{key}' (known: target_rows_per_fragment, \
                     max_rows_per_group, materialize_deletions, materialize_deletions_threshold, \
                     defer_index_remap, remap_indexes)"
                )));
            }
        }
        Ok(())
    }
}

/// What a compaction did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompactionMetrics {
    pub fragments_removed: u64,
    pub fragments_added: u64,
    pub files_removed: u64,
    pub files_added: u64,
    /// Live rows rewritten.
    pub rows_rewritten: u64,
    /// Deleted rows whose space was reclaimed.
    pub deleted_rows_dropped: u64,
}

/// The bins a compaction would rewrite: fragment ids, each bin in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionPlan {
    pub read_version: u64,
    pub tasks: Vec<Vec<u64>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Candidacy {
    /// Enough rows deleted to rewrite it alone.
    Itself,
    /// Small: worth merging with neighbours.
    WithNeighbours,
}

struct Bin {
    ids: Vec<u64>,
    rows: Vec<u64>,
    candidacy: Vec<Candidacy>,
    indexes: Vec<usize>,
}

impl Bin {
    fn is_noop(&self) -> bool {
        self.ids.is_empty()
            || (self.ids.len() == 1 && self.candidacy[0] == Candidacy::WithNeighbours)
    }

    /// Splits into bins of at least `target` rows (the rest goes with the last).
    fn split(mut self, target: u64) -> Vec<Vec<u64>> {
        let mut out = Vec::new();
        loop {
            let (mut len, mut rows) = (0, 0);
            while rows < target && len < self.rows.len() {
                rows += self.rows[len];
                len += 1;
            }
            if self.rows[len..].iter().sum::<u64>() >= target {
                out.push(self.ids.drain(..len).collect());
                self.rows.drain(..len);
            } else {
                out.push(self.ids);
                return out;
            }
        }
    }
}

/// Deleted rows of a fragment: from its metadata, or its deletion vector
/// when the metadata does not say.
async fn deleted_count(ds: &Dataset, f: &Fragment) -> Result<u64> {
    match &f.deletion_file {
        None => Ok(0),
        Some(d) if d.num_deleted_rows > 0 => Ok(d.num_deleted_rows),
        Some(_) => Ok(ds.deleted_rows(f).await?.map_or(0, |b| b.len())),
    }
}

/// Which fragments a compaction of `ds` with `opts` rewrites.
pub async fn plan_compaction(ds: &Dataset, opts: &CompactionOptions) -> Result<CompactionPlan> {
    let indexes: Vec<_> = ds
        .manifest()
        .indices
        .iter()
        .filter(|i| !crate::frag_reuse::is_frag_reuse(i))
        .map(|i| i.fragment_bitmap.clone().unwrap_or_default())
        .collect();
    let mut bins: Vec<Bin> = Vec::new();
    let mut current: Option<Bin> = None;
    for f in ds.fragments() {
        let deleted = deleted_count(ds, f).await?;
        let live = f.physical_rows.saturating_sub(deleted);
        let share = if f.physical_rows == 0 {
            0.0
        } else {
            deleted as f64 / f.physical_rows as f64
        };
        // Overlays are folded into base data by rewriting the fragment.
        let candidacy = if f.has_overlays()
            || (opts.materialize_deletions && share > opts.materialize_deletions_threshold)
        {
            Some(Candidacy::Itself)
        } else if f.physical_rows < opts.target_rows_per_fragment {
            Some(Candidacy::WithNeighbours)
        } else {
            None
        };
        let covering: Vec<usize> = indexes
            .iter()
            .enumerate()
            .filter(|(_, b)| b.contains(f.id as u32))
            .map(|(i, _)| i)
            .collect();
        match (candidacy, current.as_mut()) {
            (None, None) => {}
            (None, Some(_)) => bins.push(current.take().unwrap()),
            (Some(c), Some(bin)) if bin.indexes == covering => {
                bin.ids.push(f.id);
                bin.rows.push(live);
                bin.candidacy.push(c);
            }
            (Some(c), _) => {
                if let Some(done) = current.take() {
                    bins.push(done);
                }
                current = Some(Bin {
                    ids: vec![f.id],
                    rows: vec![live],
                    candidacy: vec![c],
                    indexes: covering,
                });
            }
        }
    }
    bins.extend(current);
    let tasks = bins
        .into_iter()
        .filter(|b| !b.is_noop())
        .flat_map(|b| b.split(opts.target_rows_per_fragment))
        .collect();
    Ok(CompactionPlan {
        read_version: ds.version(),
        tasks,
    })
}

impl Dataset {
    /// Compacts the fragments [`plan_compaction`] picks, in one commit;
    /// returns the new version (this one when there is nothing to do).
    /// `progress` gets `("compacting", rows done, rows to rewrite)`.
    pub async fn compact_files(
        &self,
        opts: &CompactionOptions,
        progress: Option<&ProgressFn>,
    ) -> Result<(Dataset, CompactionMetrics)> {
        let plan = plan_compaction(self, opts).await?;
        let mut metrics = CompactionMetrics::default();
        if plan.tasks.is_empty() {
            return Ok((self.clone(), metrics));
        }
        let total: u64 = plan
            .tasks
            .iter()
            .flatten()
            .filter_map(|id| self.fragment(*id))
            .map(|f| f.num_rows())
            .sum();
        let report = |done: u64| {
            if let Some(p) = progress {
                p("compacting", done, total)
            }
        };
        report(0);
        let stable = self.manifest().uses_stable_row_ids();
        let params = WriteParams {
            max_rows_per_file: opts.target_rows_per_fragment.min(usize::MAX as u64) as usize,
            ..Default::default()
        };
        let mut groups = Vec::with_capacity(plan.tasks.len());
        let mut done = 0;
        let defer = (opts.defer_index_remap || opts.remap_indexes) && !stable;
        for ids in &plan.tasks {
            // A reuse index maps the k-th surviving old address (ascending)
            // to the k-th new row: write the rows in address order.
            let mut ids = ids.clone();
            if defer {
                ids.sort_unstable();
            }
            let old: Vec<Fragment> = ids
                .iter()
                .map(|id| {
                    self.fragment(*id)
                        .cloned()
                        .expect("planned from this version")
                })
                .collect();
            let mut writer = self.fragment_writer(params.clone())?;
            let mut scan = self
                .scan()
                .with_fragments(ids.clone())
                .batch_size(opts.max_rows_per_group);
            if stable {
                scan = scan.with_row_id();
            }
            let mut stream = scan.try_into_stream().await?;
            let mut row_ids: Vec<u64> = Vec::new();
            while let Some(batch) = stream.try_next().await? {
                let batch = if stable {
                    let last = batch.num_columns() - 1;
                    let ids = batch
                        .column(last)
                        .as_any()
                        .downcast_ref::<UInt64Array>()
                        .ok_or_else(|| Error::invalid("row ids are not UInt64"))?;
                    row_ids.extend(ids.values().iter().copied());
                    let mut b: RecordBatch = batch;
                    b.remove_column(last);
                    b
                } else {
                    batch
                };
                done += batch.num_rows() as u64;
                writer.write(&batch).await?;
                report(done);
            }
            let mut new = writer.finish().await?;
            if stable {
                let mut start = 0usize;
                for f in &mut new {
                    let end = start + f.physical_rows as usize;
                    let seq = RowIdSequence::from_ids(&row_ids[start..end]);
                    f.row_id_meta = Some(RowIdMeta::Inline(seq.encode()));
                    start = end;
                }
            }
            metrics.fragments_removed += old.len() as u64;
            metrics.fragments_added += new.len() as u64;
            // Data and deletion files, as Lance counts them.
            metrics.files_removed += old
                .iter()
                .map(|f| f.files.len() as u64 + f.deletion_file.is_some() as u64)
                .sum::<u64>();
            metrics.files_added += new.iter().map(|f| f.files.len() as u64).sum::<u64>();
            metrics.rows_rewritten += new.iter().map(|f| f.physical_rows).sum::<u64>();
            metrics.deleted_rows_dropped += old
                .iter()
                .map(|f| f.physical_rows)
                .sum::<u64>()
                .saturating_sub(new.iter().map(|f| f.physical_rows).sum::<u64>());
            let survivors = if defer {
                let mut parts = Vec::with_capacity(old.len());
                for f in &old {
                    parts.push((f.id, f.physical_rows, self.deleted_rows(f).await?));
                }
                Some(crate::frag_reuse::survivors(&parts))
            } else {
                None
            };
            groups.push(RewriteGroup {
                old,
                new,
                survivors,
            });
        }
        let ds = self.commit(Operation::Rewrite { groups }).await?;
        Ok((ds, metrics))
    }
}
