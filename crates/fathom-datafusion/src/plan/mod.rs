//! The scan as a value.
//!
//! ```text
//!   Snapshot (manifest, schemas) ──┐
//!                                  ├─► plan_scan (pure) ─► ScanPlan ─► lower ─► exec nodes
//!   ScanRequest (projection,       │    branches: Flat | Index (| Knn | Fts | Reeval, next)
//!   filters, limit, options) ──────┘    merge:    Union (| TopK, next)
//! ```
//!
//! [`plan_scan`] decides everything a scan does (which index answers
//! which filters over which fragments, what is rechecked, what is read
//! late, where the limit goes) without I/O, so the decisions are tested
//! on the value itself. [`lower()`] turns the value into nodes.
//! Column numbers are positions in the table's schema (virtual `_rowid` /
//! `_rowaddr` last).

mod flat;
mod index;
mod lower;

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use arrow_schema::Schema;
use datafusion::logical_expr::Expr;
use fathom_index::Exactness;
use fathom_index::segment::Unusable;
use fathom_table::{Manifest, ManifestFacts, RowSet};
use roaring::RoaringBitmap;

pub use flat::{FlatPartitions, MIN_ROWS_PER_PARTITION, ScanUnit, plan_flat};
pub use index::choose_indexes;
pub use lower::{LowerContext, lower, projection_of};

use crate::index_expr::IndexExpr;

/// What the planner sees of a dataset version.
#[derive(Debug, Clone, Copy)]
pub struct Snapshot<'a> {
    pub manifest: &'a Manifest,
    /// Facts of `manifest`'s fragments (cached per version by
    /// `Dataset::facts`).
    pub facts: &'a ManifestFacts,
    /// The dataset's columns.
    pub schema: &'a Schema,
    /// The table's columns: the dataset's, then the virtual ones exposed.
    pub table_schema: &'a Schema,
}

/// What a query asks of a scan.
#[derive(Debug, Clone)]
pub struct ScanRequest {
    /// Table columns to output, in order.
    pub output: Vec<usize>,
    /// Pushed-down filters (exact), column references unqualified.
    pub filters: Vec<Expr>,
    pub limit: Option<usize>,
    pub target_partitions: usize,
    pub min_rows_per_partition: u64,
    pub zone_pruning: bool,
    /// Rows an overlay changed since an index segment was built: `false`
    /// excludes them from the index result and re-evaluates them (a
    /// [`ReevalBranch`]); `true` takes their whole fragments out of the
    /// index branch (scanned flat).
    pub whole_fragment_overlays: bool,
}

/// A scan: branches over disjoint parts of the table, merged.
#[derive(Debug, Clone)]
pub struct ScanPlan {
    pub branches: Vec<Branch>,
    pub merge: Merge,
    /// Table columns output, in order (every branch outputs them).
    pub output: Vec<usize>,
    /// Segments that could not be used, with why: their fragments are
    /// read on the flat path.
    pub skipped: Vec<SkippedSegment>,
}

/// How branch results combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    /// Rows of every branch (branches cover disjoint fragments).
    Union,
}

#[derive(Debug, Clone)]
pub enum Branch {
    Flat(FlatBranch),
    Index(IndexBranch),
    Reeval(ReevalBranch),
}

/// Rows of the index branch's fragments that an overlay changed after a
/// segment it searches was built (the index branch excludes them): read
/// by address with their current values, every filter evaluated.
#[derive(Debug, Clone)]
pub struct ReevalBranch {
    pub rows: Arc<RowSet>,
    /// Deleted rows (deletions beat overlays).
    pub exclusions: Vec<ExclusionSource>,
    /// Every filter of the scan (none: every row is kept).
    pub recheck: Option<Recheck>,
    /// Columns the final take reads.
    pub take: BTreeSet<usize>,
}

/// Reading fragments, filtering every row.
#[derive(Debug, Clone)]
pub struct FlatBranch {
    pub partitions: FlatPartitions,
    /// Columns read: output plus those the filters need.
    pub read: BTreeSet<usize>,
    /// Evaluated on every row read (DataFusion's physical expressions).
    pub filters: Vec<Expr>,
    /// Skip zones whose statistics rule the filters out.
    pub zone_pruning: bool,
    /// Late materialization: read these (filter) columns first, the rest
    /// only for rows that pass.
    pub read_first: Option<BTreeSet<usize>>,
    pub limit: Option<usize>,
}

/// Rows found by indexes, then read by address.
#[derive(Debug, Clone)]
pub struct IndexBranch {
    pub expr: IndexExpr,
    /// The segments searched: (index name, segment uuid).
    pub segments: Vec<(String, uuid::Uuid)>,
    /// Fragments every index of `expr` covers (current ones only).
    pub covered: Arc<RoaringBitmap>,
    /// What removes addresses the segments may no longer describe.
    pub exclusions: Vec<ExclusionSource>,
    /// How exact the index result is; the recheck follows from it.
    pub exactness: Exactness,
    pub recheck: Option<Recheck>,
    /// Columns the final take reads.
    pub take: BTreeSet<usize>,
    pub limit: Option<usize>,
}

/// Filters re-evaluated on rows the index returned.
#[derive(Debug, Clone)]
pub struct Recheck {
    /// All filters after an `AtMost` result; only those the index did not
    /// answer after an exact one.
    pub filters: Vec<Expr>,
    pub columns: BTreeSet<usize>,
    /// Some filters are ones no index answered: rows the index knows to
    /// match (whole zones of a zone map) are rechecked too.
    pub residual: bool,
    /// Recheck on a narrow take of `columns` first, then take the output
    /// columns of the survivors only (when the output needs more).
    pub narrow: bool,
}

impl ReevalBranch {
    /// Re-evaluation of `rows` against `filters`, outputting `output`.
    pub fn new(
        snap: Snapshot<'_>,
        rows: Arc<RowSet>,
        filters: Vec<Expr>,
        output: &BTreeSet<usize>,
    ) -> datafusion::error::Result<Self> {
        let columns = columns_of_all(snap.table_schema, &filters)?;
        let narrow = !output.is_subset(&columns);
        // Deletions beat overlays; with no deletion file in the overlaid
        // fragments (the rows' fragments are among them) there is nothing
        // to exclude (no node at all).
        let deleted = snap
            .facts
            .overlaid(snap.manifest)
            .any(|f| f.deletion_file.is_some());
        Ok(ReevalBranch {
            rows,
            exclusions: if deleted {
                vec![ExclusionSource::DeletedRows]
            } else {
                vec![]
            },
            take: if narrow || filters.is_empty() {
                output.clone()
            } else {
                columns.clone()
            },
            recheck: (!filters.is_empty()).then_some(Recheck {
                filters,
                columns,
                residual: true,
                narrow,
            }),
        })
    }
}

/// A reason to drop an address an index returned.
#[derive(Debug, Clone, PartialEq)]
pub enum ExclusionSource {
    /// Rows in the fragment's deletion file (deleted since the build).
    DeletedRows,
    /// Fragments outside this set: gone from the version, or not covered
    /// by every index used (read on the flat path instead).
    OutsideFragments(Arc<RoaringBitmap>),
    /// Rows an overlay changed after a segment searched was built
    /// (re-evaluated by a [`ReevalBranch`]).
    OverlaidRows(Arc<RowSet>),
}

/// A segment the planner did not use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedSegment {
    pub index: String,
    pub uuid: uuid::Uuid,
    pub reason: Unusable,
}

impl fmt::Display for SkippedSegment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "segment {} of index '{}' skipped: {}",
            self.uuid, self.index, self.reason
        )
    }
}

/// Table columns an expression references.
pub fn columns_of(table_schema: &Schema, e: &Expr) -> datafusion::error::Result<BTreeSet<usize>> {
    e.column_refs()
        .iter()
        .map(|c| {
            table_schema.index_of(c.name()).map_err(|_| {
                datafusion::error::DataFusionError::Plan(format!("no column named '{}'", c.name()))
            })
        })
        .collect()
}

fn columns_of_all(
    table_schema: &Schema,
    filters: &[Expr],
) -> datafusion::error::Result<BTreeSet<usize>> {
    let mut out = BTreeSet::new();
    for f in filters {
        out.extend(columns_of(table_schema, f)?);
    }
    Ok(out)
}

/// Plans a scan of `snap` for `req`.
pub fn plan_scan(snap: Snapshot<'_>, req: &ScanRequest) -> datafusion::error::Result<ScanPlan> {
    let filter_cols = columns_of_all(snap.table_schema, &req.filters)?;
    let output: BTreeSet<usize> = req.output.iter().copied().collect();
    let chosen = choose_indexes(snap);
    for s in &chosen.skipped {
        tracing::info!(target: "fathom::plan", "{s}");
    }
    let index = index::plan_index_branch(snap, &chosen, req, &output)?;
    let covered = index
        .as_ref()
        .map(|b| b.covered.clone())
        .unwrap_or_default();
    // Covered fragments are current ones: when they are as many, none is left.
    let all_covered = covered.len() == snap.manifest.fragments.len() as u64;
    let flat_fragments = snap
        .manifest
        .fragments
        .iter()
        .filter(|f| !all_covered && u32::try_from(f.id).is_ok_and(|id| !covered.contains(id)));
    let mut branches = Vec::new();
    if let Some(b) = index {
        let overlaid = b.exclusions.iter().find_map(|e| match e {
            ExclusionSource::OverlaidRows(r) => Some(r.clone()),
            _ => None,
        });
        let filters = req.filters.clone();
        branches.push(Branch::Index(b));
        if let Some(rows) = overlaid {
            branches.push(Branch::Reeval(ReevalBranch::new(
                snap, rows, filters, &output,
            )?));
        }
    }
    if branches.is_empty() || flat_fragments.clone().next().is_some() {
        let physical = snap.schema.fields().len();
        let only_physical = filter_cols.iter().all(|c| *c < physical);
        let late = !req.filters.is_empty() && !output.is_subset(&filter_cols);
        branches.push(Branch::Flat(FlatBranch {
            partitions: plan_flat(
                flat_fragments,
                req.target_partitions,
                req.min_rows_per_partition,
            ),
            read: output.union(&filter_cols).copied().collect(),
            filters: req.filters.clone(),
            zone_pruning: req.zone_pruning && only_physical && !req.filters.is_empty(),
            read_first: late.then(|| filter_cols.clone()),
            limit: req.limit,
        }));
    }
    Ok(ScanPlan {
        branches,
        merge: Merge::Union,
        output: req.output.clone(),
        skipped: chosen.skipped,
    })
}

#[cfg(test)]
mod tests;
