//! The scan planner: a pure function from (snapshot, request) to a
//! [`ScanPlan`], testable without I/O. Lowering the plan to execution
//! nodes is a separate step (`provider.rs`).
//!
//! ```text
//!   snapshot (manifest) ──┐
//!                         ├─► plan_scan ─► ScanPlan { partitions: [[unit, ...], ...] }
//!   request (filter,      │                      │
//!   projection, limit) ───┘                      └─► FragmentScanExec (one per plan)
//! ```
//!
//! Today every fragment is read on the flat path; index branches (and the
//! exclusion of rows an index may no longer describe) plug in here as
//! further parts of the plan.

use std::ops::Range;

use fathom_table::Fragment;

/// A piece of work: physical rows `rows` of fragment `fragment`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanUnit {
    pub fragment: u64,
    pub rows: Range<u64>,
}

/// Units assigned to partitions.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ScanPlan {
    pub partitions: Vec<Vec<ScanUnit>>,
}

impl ScanPlan {
    pub fn num_fragments(&self) -> usize {
        let mut ids: Vec<u64> = self
            .partitions
            .iter()
            .flatten()
            .map(|u| u.fragment)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids.len()
    }
    pub fn num_rows(&self) -> u64 {
        self.partitions
            .iter()
            .flatten()
            .map(|u| u.rows.end - u.rows.start)
            .sum()
    }
}

/// Below this many rows per partition, parallelism costs more than it gives.
pub const MIN_ROWS_PER_PARTITION: u64 = 32 * 1024;

/// Spreads fragments (split into row ranges when large) over at most
/// `target_partitions` partitions, balancing physical rows, with at least
/// `min_rows` rows per partition (small tables stay in order, in one).
pub fn plan_flat(fragments: &[Fragment], target_partitions: usize, min_rows: u64) -> ScanPlan {
    let n = target_partitions.max(1);
    let total: u64 = fragments.iter().map(|f| f.physical_rows).sum();
    if total == 0 {
        return ScanPlan {
            partitions: vec![vec![]],
        };
    }
    let per = total.div_ceil(n as u64).max(min_rows).max(1);
    let mut partitions: Vec<Vec<ScanUnit>> = vec![vec![]];
    let mut filled = 0u64;
    for f in fragments {
        let mut start = 0;
        while start < f.physical_rows {
            if filled >= per && partitions.len() < n {
                partitions.push(vec![]);
                filled = 0;
            }
            let take = (per - filled.min(per)).max(1).min(f.physical_rows - start);
            partitions.last_mut().unwrap().push(ScanUnit {
                fragment: f.id,
                rows: start..start + take,
            });
            filled += take;
            start += take;
        }
    }
    ScanPlan { partitions }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fathom_table::format::FragmentPassthrough;

    fn frag(id: u64, rows: u64) -> Fragment {
        Fragment {
            id,
            files: vec![],
            deletion_file: None,
            physical_rows: rows,
            row_id_meta: None,
            passthrough: FragmentPassthrough::default(),
        }
    }

    #[test]
    fn balanced_and_complete() {
        let frags = vec![frag(0, 100), frag(3, 10), frag(7, 290)];
        let plan = plan_flat(&frags, 4, 1);
        assert_eq!(plan.partitions.len(), 4);
        assert_eq!(plan.num_rows(), 400);
        assert_eq!(plan.num_fragments(), 3);
        for p in &plan.partitions {
            let rows: u64 = p.iter().map(|u| u.rows.end - u.rows.start).sum();
            assert_eq!(rows, 100);
        }
        // One big fragment is split into ranges across partitions.
        let plan = plan_flat(&[frag(1, 1000)], 3, 1);
        assert_eq!(plan.partitions.len(), 3);
        assert_eq!(plan.partitions[2][0].rows, 668..1000);
        assert_eq!(plan_flat(&[], 4, 1).partitions.len(), 1);
        // Small tables are not split.
        assert_eq!(
            plan_flat(&frags, 4, MIN_ROWS_PER_PARTITION)
                .partitions
                .len(),
            1
        );
    }
}

/// The index branch of a scan: which expression, over which fragments.
#[derive(Debug, Clone)]
pub struct IndexPlan {
    pub expr: crate::index_expr::IndexExpr,
    /// Fragments every index of `expr` covers (usable segments, current
    /// fragments only): answered by the index branch.
    pub covered: Vec<u64>,
    /// Whether rows from the index must be rechecked (an AtMost result, or
    /// filters the index cannot answer).
    pub recheck: bool,
    /// The filters to recheck with: all of them after an AtMost result,
    /// only those the index did not answer after an exact one.
    pub recheck_filters: Vec<datafusion::logical_expr::Expr>,
}

/// Plans the index branch for `filters` (column references unqualified)
/// over a snapshot; `None` when no index helps. Fragments not in
/// `covered` go to the flat branch.
pub fn plan_index(
    manifest: &fathom_table::Manifest,
    schema: &arrow_schema::Schema,
    filters: &[datafusion::logical_expr::Expr],
) -> Option<IndexPlan> {
    use std::collections::HashMap;

    use crate::index_expr::{ColumnIndex, Converter, IndexExpr};
    use fathom_index::IndexKind;
    use fathom_index::segment::usable;
    use roaring::RoaringBitmap;

    // One index per column: prefer exact kinds, then the widest coverage.
    let mut coverage: HashMap<String, RoaringBitmap> = HashMap::new();
    let mut by_column: HashMap<String, ColumnIndex> = HashMap::new();
    for seg in &manifest.indices {
        let Ok(kind) = usable(seg) else { continue };
        if let Some(b) = &seg.fragment_bitmap {
            *coverage.entry(seg.name.clone()).or_default() |= b;
        }
        let Some(field) = seg
            .fields
            .first()
            .and_then(|id| manifest.schema.fields.iter().find(|f| f.id == *id))
        else {
            continue;
        };
        let Ok(dt) = schema
            .field_with_name(&field.name)
            .map(|f| f.data_type().clone())
        else {
            continue;
        };
        let cand = ColumnIndex {
            name: seg.name.clone(),
            kind,
            data_type: dt,
        };
        let rank = |k: IndexKind| if k == IndexKind::ZoneMap { 0 } else { 1 };
        match by_column.get(&field.name) {
            Some(cur) if rank(cur.kind) > rank(kind) => {}
            Some(cur)
                if rank(cur.kind) == rank(kind)
                    && coverage.get(&cur.name).map_or(0, |b| b.len())
                        >= coverage[&seg.name].len() => {}
            _ => {
                by_column.insert(field.name.clone(), cand);
            }
        }
    }
    if by_column.is_empty() {
        return None;
    }
    let conv = Converter {
        indexes: &by_column,
    };
    let mut expr: Option<IndexExpr> = None;
    let mut residual = Vec::new();
    for f in filters {
        match conv.convert(f, false) {
            Some(e) => {
                expr = Some(match expr {
                    None => e,
                    Some(prev) => crate::index_expr::and(prev, e),
                })
            }
            None => residual.push(f.clone()),
        }
    }
    let expr = expr?;
    let mut names = vec![];
    expr.indexes(&mut names);
    let current: RoaringBitmap = manifest.fragments.iter().map(|f| f.id as u32).collect();
    let mut covered = current;
    for n in &names {
        covered &= coverage.get(n).cloned().unwrap_or_default();
    }
    if covered.is_empty() {
        return None;
    }
    let exact = expr.is_exact();
    Some(IndexPlan {
        recheck: !residual.is_empty() || !exact,
        recheck_filters: if exact { residual } else { filters.to_vec() },
        expr,
        covered: covered.iter().map(u64::from).collect(),
    })
}
