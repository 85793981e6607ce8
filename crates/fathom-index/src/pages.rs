//! Which pages or zones may hold matches, from their min/max/null counts.

use std::ops::Bound;

use arrow_array::{Array, ArrayRef, BooleanArray, Scalar};
use arrow_ord::cmp;

use crate::error::Result;
use crate::query::ScalarQuery;

fn and(a: &BooleanArray, b: &BooleanArray) -> BooleanArray {
    a.iter()
        .zip(b.iter())
        .map(|(x, y)| Some(x.unwrap_or(false) && y.unwrap_or(false)))
        .collect()
}
fn or(a: &BooleanArray, b: &BooleanArray) -> BooleanArray {
    a.iter()
        .zip(b.iter())
        .map(|(x, y)| Some(x.unwrap_or(false) || y.unwrap_or(false)))
        .collect()
}

/// For each page with bounds `min[i]..=max[i]` (null bounds = no non-null
/// value) and `null_counts[i]` nulls: may it hold rows matching `q`?
pub fn may_match(
    q: &ScalarQuery,
    min: &ArrayRef,
    max: &ArrayRef,
    null_counts: &[u64],
) -> Result<BooleanArray> {
    let n = null_counts.len();
    Ok(match q {
        ScalarQuery::IsNull => BooleanArray::from_iter(null_counts.iter().map(|c| Some(*c > 0))),
        ScalarQuery::Equals(v) => {
            let s = Scalar::new(v.clone());
            and(&cmp::lt_eq(min, &s)?, &cmp::gt_eq(max, &s)?)
        }
        ScalarQuery::IsIn(list) => {
            let mut acc = BooleanArray::from(vec![false; n]);
            for i in 0..list.len() {
                if list.is_valid(i) {
                    let e = ScalarQuery::Equals(list.slice(i, 1));
                    acc = or(&acc, &may_match(&e, min, max, null_counts)?);
                }
            }
            acc
        }
        ScalarQuery::Range { lower, upper } => {
            let mut acc = BooleanArray::from_iter((0..n).map(|i| Some(max.is_valid(i))));
            match lower {
                Bound::Included(v) => acc = and(&acc, &cmp::gt_eq(max, &Scalar::new(v.clone()))?),
                Bound::Excluded(v) => acc = and(&acc, &cmp::gt(max, &Scalar::new(v.clone()))?),
                Bound::Unbounded => {}
            }
            match upper {
                Bound::Included(v) => acc = and(&acc, &cmp::lt_eq(min, &Scalar::new(v.clone()))?),
                Bound::Excluded(v) => acc = and(&acc, &cmp::lt(min, &Scalar::new(v.clone()))?),
                Bound::Unbounded => {}
            }
            acc
        }
    })
}

/// Sorted order of `values`, nulls first (arrow's total order for floats).
pub fn sort_indices(values: &dyn Array) -> Result<arrow_array::UInt32Array> {
    Ok(arrow_ord::sort::sort_to_indices(
        values,
        Some(arrow_schema::SortOptions {
            descending: false,
            nulls_first: true,
        }),
        None,
    )?)
}
