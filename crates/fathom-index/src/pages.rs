//! Which pages or zones may hold matches, from their min/max/null counts.

use std::ops::Bound;

use arrow_array::{Array, ArrayRef, BooleanArray, Scalar};
use arrow_ord::cmp;
use arrow_ord::ord::make_comparator;
use arrow_schema::SortOptions;

use crate::error::Result;
use crate::query::{ScalarQuery, binary_search_by, normalize_zero, sorted_distinct};

fn and(a: &BooleanArray, b: &BooleanArray) -> BooleanArray {
    a.iter()
        .zip(b.iter())
        .map(|(x, y)| Some(x.unwrap_or(false) && y.unwrap_or(false)))
        .collect()
}

/// `acc` AND `lo.1` satisfies lower bound `lo.0` AND `hi.1` satisfies
/// upper bound `hi.0` (both sides zero-normalized already).
fn within(
    mut acc: BooleanArray,
    lo: (&Bound<ArrayRef>, &ArrayRef),
    hi: (&Bound<ArrayRef>, &ArrayRef),
) -> Result<BooleanArray> {
    let scalar = |v: &ArrayRef| Scalar::new(normalize_zero(v.as_ref()));
    match lo.0 {
        Bound::Included(v) => acc = and(&acc, &cmp::gt_eq(lo.1, &scalar(v))?),
        Bound::Excluded(v) => acc = and(&acc, &cmp::gt(lo.1, &scalar(v))?),
        Bound::Unbounded => {}
    }
    match hi.0 {
        Bound::Included(v) => acc = and(&acc, &cmp::lt_eq(hi.1, &scalar(v))?),
        Bound::Excluded(v) => acc = and(&acc, &cmp::lt(hi.1, &scalar(v))?),
        Bound::Unbounded => {}
    }
    Ok(acc)
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
    // Compare as the scan does: -0.0 is +0.0 (see `ScalarQuery::matches`).
    let (min, max) = (&normalize_zero(min.as_ref()), &normalize_zero(max.as_ref()));
    let scalar = |v: &ArrayRef| Scalar::new(normalize_zero(v.as_ref()));
    Ok(match q {
        ScalarQuery::IsNull => BooleanArray::from_iter(null_counts.iter().map(|c| Some(*c > 0))),
        ScalarQuery::Equals(v) => {
            let s = scalar(v);
            and(&cmp::lt_eq(min, &s)?, &cmp::gt_eq(max, &s)?)
        }
        ScalarQuery::IsIn(list) => {
            // Per page, the first list value >= its min (binary search in
            // the sorted list), and whether that value is <= its max.
            let list = sorted_distinct(list.as_ref())?;
            let cmin = make_comparator(min.as_ref(), list.as_ref(), SortOptions::default())?;
            let cmax = make_comparator(max.as_ref(), list.as_ref(), SortOptions::default())?;
            BooleanArray::from_iter((0..n).map(|p| {
                if !min.is_valid(p) || !max.is_valid(p) {
                    return Some(false);
                }
                let j = match binary_search_by(list.len(), |j| cmin(p, j).reverse()) {
                    Ok(j) | Err(j) => j,
                };
                Some(j < list.len() && cmax(p, j).is_ge())
            }))
        }
        ScalarQuery::Range { lower, upper } => {
            // Some value may lie in range: max above the lower bound, min
            // below the upper one.
            let valid = BooleanArray::from_iter((0..n).map(|i| Some(max.is_valid(i))));
            within(valid, (lower, max), (upper, min))?
        }
    })
}

/// For each zone with bounds `min[i]..=max[i]` and `null_counts[i]`
/// nulls: does every one of its rows match `q`? True only for zones with
/// no nulls whose min and max both satisfy `q` (every query here is
/// convex in the scan's total order, so all values between do too).
pub fn all_match(
    q: &ScalarQuery,
    min: &ArrayRef,
    max: &ArrayRef,
    null_counts: &[u64],
) -> Result<BooleanArray> {
    let n = null_counts.len();
    let (min, max) = (&normalize_zero(min.as_ref()), &normalize_zero(max.as_ref()));
    let scalar = |v: &ArrayRef| Scalar::new(normalize_zero(v.as_ref()));
    let no_nulls = BooleanArray::from_iter(
        (0..n).map(|i| Some(null_counts[i] == 0 && min.is_valid(i) && max.is_valid(i))),
    );
    let acc = match q {
        ScalarQuery::IsNull => BooleanArray::from(vec![false; n]),
        ScalarQuery::Equals(v) => {
            let s = scalar(v);
            and(&cmp::eq(min, &s)?, &cmp::eq(max, &s)?)
        }
        ScalarQuery::IsIn(list) => {
            // One value in the zone (min = max), and it is in the list.
            let list = sorted_distinct(list.as_ref())?;
            let cmin = make_comparator(min.as_ref(), list.as_ref(), SortOptions::default())?;
            let same = cmp::eq(min, max)?;
            BooleanArray::from_iter((0..n).map(|p| {
                if !min.is_valid(p) || !same.value(p) {
                    return Some(false);
                }
                let found = binary_search_by(list.len(), |j| cmin(p, j).reverse()).is_ok();
                Some(found)
            }))
        }
        ScalarQuery::Range { lower, upper } => {
            // Every value in range: min above the lower bound, max below
            // the upper one.
            within(
                BooleanArray::from(vec![true; n]),
                (lower, min),
                (upper, max),
            )?
        }
    };
    Ok(and(&acc, &no_nulls))
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
