//! Zone statistics of a data file as DataFusion `PruningStatistics`, so
//! the flat path skips zones its filter cannot match, with DataFusion's own
//! `PruningPredicate` deciding (the same logic that prunes Parquet pages).

use std::collections::HashSet;
use std::ops::Range;

use arrow_array::{ArrayRef, BooleanArray};
use datafusion::common::pruning::PruningStatistics;
use datafusion::common::{Column, ScalarValue};
use fathom_file::stats::ZoneStats;

pub struct Zones<'a>(pub &'a ZoneStats);

impl PruningStatistics for Zones<'_> {
    fn min_values(&self, column: &Column) -> Option<ArrayRef> {
        self.0.column(column.name()).map(|c| c.0)
    }
    fn max_values(&self, column: &Column) -> Option<ArrayRef> {
        self.0.column(column.name()).map(|c| c.1)
    }
    fn num_containers(&self) -> usize {
        self.0.num_zones()
    }
    fn null_counts(&self, column: &Column) -> Option<ArrayRef> {
        self.0.column(column.name()).map(|c| c.2)
    }
    fn row_counts(&self) -> Option<ArrayRef> {
        Some(self.0.rows())
    }
    fn contained(&self, _column: &Column, _values: &HashSet<ScalarValue>) -> Option<BooleanArray> {
        None
    }
}

/// `runs` restricted to the zones where `keep` is true.
pub fn restrict(runs: &[Range<u64>], keep: &[bool], rows_per_zone: u64) -> Vec<Range<u64>> {
    let mut out = Vec::new();
    for r in runs {
        let mut s = r.start;
        while s < r.end {
            let z = s / rows_per_zone;
            let e = ((z + 1) * rows_per_zone).min(r.end);
            if keep.get(z as usize).copied().unwrap_or(true) {
                match out.last_mut() {
                    Some(Range { end, .. }) if *end == s => *end = e,
                    _ => out.push(s..e),
                }
            }
            s = e;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn restrict_runs() {
        let keep = [true, false, true];
        assert_eq!(
            super::restrict(&[0..25, 27..30], &keep, 10),
            vec![0..10, 20..25, 27..30]
        );
    }
}
