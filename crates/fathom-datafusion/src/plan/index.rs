//! Planning the index branch: which index answers each column, which
//! filters convert to an index expression, what it covers, what is
//! rechecked.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use fathom_index::Exactness;
use fathom_index::segment::usable;
use fathom_table::RowSet;
use roaring::RoaringBitmap;

use super::{
    ExclusionSource, IndexBranch, Recheck, ScanRequest, SkippedSegment, Snapshot, columns_of_all,
};
use crate::index_expr::{ColumnIndex, Converter, IndexExpr, and};

/// The usable indexes of a snapshot, one per column.
#[derive(Debug, Clone, Default)]
pub struct ChosenIndexes {
    /// Column name -> the index chosen for it.
    pub by_column: HashMap<String, ColumnIndex>,
    /// Index name -> fragments its usable segments cover.
    pub coverage: HashMap<String, RoaringBitmap>,
    pub skipped: Vec<SkippedSegment>,
}

/// Picks, per column, the index to use: the kind with the highest
/// preference (exact kinds over zone maps), then the widest coverage.
/// Segments of unknown type or version, or without coverage, are skipped
/// (their fragments are scanned) and reported.
pub fn choose_indexes(snap: Snapshot<'_>) -> ChosenIndexes {
    let mut out = ChosenIndexes::default();
    let manifest = snap.manifest;
    for seg in &manifest.indices {
        // Vector segments answer nearest-neighbour searches (`knn`) and
        // inverted ones full-text searches (`fts`), not these filters.
        if fathom_index::vector::is_vector(seg) || fathom_index::fts::is_fts(seg) {
            continue;
        }
        // The fragment reuse index remaps the others; it answers nothing.
        if fathom_table::frag_reuse::is_frag_reuse(seg) {
            continue;
        }
        let kind = match usable(seg) {
            Ok(k) => k,
            Err(reason) => {
                out.skipped.push(SkippedSegment {
                    index: seg.name.clone(),
                    uuid: seg.uuid,
                    reason,
                });
                continue;
            }
        };
        if let Some(b) = &seg.fragment_bitmap {
            *out.coverage.entry(seg.name.clone()).or_default() |= b;
        }
        let Some(field) = seg
            .fields
            .first()
            .and_then(|id| manifest.schema.fields.iter().find(|f| f.id == *id))
        else {
            continue;
        };
        let Ok(dt) = snap
            .schema
            .field_with_name(&field.name)
            .map(|f| f.data_type().clone())
        else {
            continue;
        };
        let replace = match out.by_column.get(&field.name) {
            None => true,
            Some(cur) if cur.name == seg.name => false,
            Some(cur) => {
                let covered = |n: &str| out.coverage.get(n).map_or(0, |b| b.len());
                (kind.preference(), covered(&seg.name))
                    > (cur.kind.preference(), covered(&cur.name))
            }
        };
        if replace {
            out.by_column.insert(
                field.name.clone(),
                ColumnIndex {
                    name: seg.name.clone(),
                    kind,
                    data_type: dt,
                },
            );
        }
    }
    out
}

/// The index branch for `req`, or `None` when no index helps.
pub(super) fn plan_index_branch(
    snap: Snapshot<'_>,
    chosen: &ChosenIndexes,
    req: &ScanRequest,
    output: &BTreeSet<usize>,
) -> datafusion::error::Result<Option<IndexBranch>> {
    if chosen.by_column.is_empty() {
        return Ok(None);
    }
    let conv = Converter {
        indexes: &chosen.by_column,
    };
    let mut expr: Option<IndexExpr> = None;
    let mut residual = Vec::new();
    for f in &req.filters {
        match conv.convert(f, false) {
            Some(e) => {
                expr = Some(match expr {
                    None => e,
                    Some(prev) => and(prev, e),
                })
            }
            None => residual.push(f.clone()),
        }
    }
    let Some(expr) = expr else { return Ok(None) };
    // A subset (or a superset meeting a subset) would need the rest of the
    // rows from elsewhere: not planned as an index branch.
    let exactness = match expr.exactness() {
        Some(e @ (Exactness::Exact | Exactness::AtMost)) => e,
        _ => return Ok(None),
    };
    let mut names = vec![];
    expr.indexes(&mut names);
    let mut covered = snap.facts.ids.clone();
    for n in &names {
        covered &= chosen.coverage.get(n).cloned().unwrap_or_default();
    }
    let used = snap
        .manifest
        .indices
        .iter()
        .filter(|s| names.contains(&s.name) && usable(s).is_ok());
    // Rows whose indexed values an overlay changed since a segment's build.
    let mut overlaid = RowSet::new();
    for s in used.clone() {
        let rows = snap.facts.overlaid_rows(snap.manifest, s);
        if !rows.is_empty() {
            overlaid = overlaid | rows.as_ref().clone();
        }
    }
    overlaid.retain_fragments(|f| covered.contains(f.0));
    if req.whole_fragment_overlays {
        for (f, _) in overlaid.fragments() {
            covered.remove(f.0);
        }
        overlaid = RowSet::new();
    }
    if covered.is_empty() {
        return Ok(None);
    }
    let segments = used.map(|s| (s.name.clone(), s.uuid)).collect();
    let has_residual = !residual.is_empty();
    let recheck_filters = match exactness {
        Exactness::Exact => residual,
        _ => req.filters.clone(),
    };
    let recheck = if recheck_filters.is_empty() {
        None
    } else {
        let columns = columns_of_all(snap.table_schema, &recheck_filters)?;
        Some(Recheck {
            residual: has_residual,
            narrow: !output.is_subset(&columns),
            filters: recheck_filters,
            columns,
        })
    };
    let take = match &recheck {
        Some(r) if !r.narrow => r.columns.clone(),
        _ => output.clone(),
    };
    let covered = Arc::new(covered);
    let mut exclusions = vec![
        ExclusionSource::OutsideFragments(covered.clone()),
        ExclusionSource::DeletedRows,
    ];
    if !overlaid.is_empty() {
        exclusions.push(ExclusionSource::OverlaidRows(Arc::new(overlaid)));
    }
    Ok(Some(IndexBranch {
        expr,
        segments,
        exclusions,
        covered,
        exactness,
        limit: if recheck.is_some() { None } else { req.limit },
        recheck,
        take,
    }))
}
