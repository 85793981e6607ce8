//! What an index is asked, and what it answers.
//!
//! Results carry exactness in their type: an `Exact` set holds exactly
//! the rows matching the query (among the rows the segment covers); an
//! `AtMost` set may hold more and must be rechecked against the predicate.

use std::ops::{Bound, Range};

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float16Type, Float32Type, Float64Type};
use arrow_array::{Array, ArrayRef, BooleanArray};
use arrow_ord::cmp;
use arrow_ord::ord::make_comparator;
use arrow_schema::{DataType, SortOptions};
use roaring::RoaringTreemap;

use crate::error::Result;

/// A predicate on the indexed column. Values are arrays (one value each,
/// or the list for `IsIn`) of the column's type.
#[derive(Debug, Clone)]
pub enum ScalarQuery {
    Equals(ArrayRef),
    Range {
        lower: Bound<ArrayRef>,
        upper: Bound<ArrayRef>,
    },
    IsIn(ArrayRef),
    IsNull,
}

/// Row addresses an index returned.
#[derive(Debug, Clone, PartialEq)]
pub enum SearchResult {
    Exact(RoaringTreemap),
    AtMost(RoaringTreemap),
}

impl SearchResult {
    pub fn rows(&self) -> &RoaringTreemap {
        match self {
            SearchResult::Exact(r) | SearchResult::AtMost(r) => r,
        }
    }
    pub fn into_rows(self) -> RoaringTreemap {
        match self {
            SearchResult::Exact(r) | SearchResult::AtMost(r) => r,
        }
    }
    pub fn is_exact(&self) -> bool {
        matches!(self, SearchResult::Exact(_))
    }
}

impl ScalarQuery {
    /// Which entries of `values` satisfy the query (NULL never does,
    /// except for `IsNull`). The reference semantics every index follows:
    /// DataFusion's, i.e. floats compare by IEEE total order after -0.0 is
    /// made +0.0 (so `0.0 = -0.0`, `NaN = NaN`, NaN above +inf).
    pub fn matches(&self, values: &dyn Array) -> Result<BooleanArray> {
        let values = normalize_zero(values);
        let values = values.as_ref();
        let scalar = |v: &ArrayRef| arrow_array::Scalar::new(normalize_zero(v.as_ref()));
        let m = match self {
            ScalarQuery::IsNull => arrow_array::BooleanArray::from_iter(
                (0..values.len()).map(|i| Some(values.is_null(i))),
            ),
            ScalarQuery::Equals(v) => cmp::eq(&values, &scalar(v))?,
            ScalarQuery::IsIn(list) => {
                // One binary search per value in the sorted, distinct list:
                // O(n log N), not a pass over the values per list entry.
                let list = sorted_distinct(list.as_ref())?;
                let cmp = make_comparator(values, list.as_ref(), SortOptions::default())?;
                BooleanArray::from_iter((0..values.len()).map(|i| {
                    Some(
                        values.is_valid(i)
                            && binary_search_by(list.len(), |j| cmp(i, j).reverse()).is_ok(),
                    )
                }))
            }
            ScalarQuery::Range { lower, upper } => {
                let mut acc = BooleanArray::from(vec![true; values.len()]);
                match lower {
                    Bound::Included(v) => acc = and(&acc, &cmp::gt_eq(&values, &scalar(v))?),
                    Bound::Excluded(v) => acc = and(&acc, &cmp::gt(&values, &scalar(v))?),
                    Bound::Unbounded => acc = and(&acc, &not_null(values)),
                }
                match upper {
                    Bound::Included(v) => acc = and(&acc, &cmp::lt_eq(&values, &scalar(v))?),
                    Bound::Excluded(v) => acc = and(&acc, &cmp::lt(&values, &scalar(v))?),
                    Bound::Unbounded => {}
                }
                acc
            }
        };
        // NULL comparison results count as false.
        Ok(BooleanArray::from_iter(
            m.iter().map(|v| Some(v.unwrap_or(false))),
        ))
    }
}

impl ScalarQuery {
    /// For `IsIn` over `values` sorted ascending (nulls first, total order:
    /// B-tree pages and bitmap keys): the index ranges equal to some list
    /// value, by two binary searches per list value over what is left of
    /// `values`. `None` for the other queries (use [`Self::matches`]).
    pub fn in_ranges_sorted(&self, values: &dyn Array) -> Result<Option<Vec<Range<usize>>>> {
        let ScalarQuery::IsIn(list) = self else {
            return Ok(None);
        };
        let values = normalize_zero(values);
        let list = sorted_distinct(list.as_ref())?;
        let cmp = make_comparator(values.as_ref(), list.as_ref(), SortOptions::default())?;
        let n = values.len();
        let mut out = Vec::new();
        let mut lo = 0;
        for j in 0..list.len() {
            if lo == n {
                break;
            }
            let start = lo + partition_point(n - lo, |k| cmp(lo + k, j).is_lt());
            let end = start + partition_point(n - start, |k| cmp(start + k, j).is_le());
            if end > start {
                out.push(start..end);
            }
            lo = end;
        }
        Ok(Some(out))
    }
}

/// The first `k` in `0..n` for which `pred(k)` is false (`pred` true on a
/// prefix), as `slice::partition_point`.
fn partition_point(n: usize, mut pred: impl FnMut(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// `-0.0` made `+0.0` in float arrays (other types unchanged), as
/// DataFusion does before comparing. Monotone under the total order, so
/// sorted data stays sorted and page bounds stay bounds.
pub fn normalize_zero(values: &dyn Array) -> ArrayRef {
    fn fix<T: arrow_array::ArrowPrimitiveType>(
        a: &dyn Array,
        is_neg_zero: impl Fn(T::Native) -> bool,
        zero: T::Native,
    ) -> ArrayRef {
        let a = a.as_primitive::<T>();
        if !a.values().iter().any(|v| is_neg_zero(*v)) {
            return Arc::new(a.clone());
        }
        Arc::new(a.unary::<_, T>(|v| if is_neg_zero(v) { zero } else { v }))
    }
    match values.data_type() {
        DataType::Float16 => fix::<Float16Type>(
            values,
            |v| v.to_bits() == half::f16::NEG_ZERO.to_bits(),
            half::f16::ZERO,
        ),
        DataType::Float32 => {
            fix::<Float32Type>(values, |v| v.to_bits() == (-0.0f32).to_bits(), 0.0)
        }
        DataType::Float64 => {
            fix::<Float64Type>(values, |v| v.to_bits() == (-0.0f64).to_bits(), 0.0)
        }
        _ => arrow_array::make_array(values.to_data()),
    }
}

/// The non-null entries of `list`, zero-normalized, sorted and distinct.
pub fn sorted_distinct(list: &dyn Array) -> Result<ArrayRef> {
    let list = normalize_zero(list);
    let order = arrow_ord::sort::sort_to_indices(list.as_ref(), None, None)?;
    let sorted = arrow_select::take::take(list.as_ref(), &order, None)?;
    let cmp = make_comparator(sorted.as_ref(), sorted.as_ref(), SortOptions::default())?;
    let keep: Vec<u32> = (0..sorted.len())
        .filter(|&i| {
            sorted.is_valid(i) && (i == 0 || !sorted.is_valid(i - 1) || cmp(i - 1, i).is_ne())
        })
        .map(|i| i as u32)
        .collect();
    Ok(arrow_select::take::take(
        sorted.as_ref(),
        &arrow_array::UInt32Array::from(keep),
        None,
    )?)
}

/// Binary search over `0..n` with `f(j)` = how entry `j` compares to the
/// target (as `slice::binary_search_by`).
pub fn binary_search_by(
    n: usize,
    mut f: impl FnMut(usize) -> std::cmp::Ordering,
) -> std::result::Result<usize, usize> {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match f(mid) {
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
            std::cmp::Ordering::Equal => return Ok(mid),
        }
    }
    Err(lo)
}

fn not_null(values: &dyn Array) -> BooleanArray {
    BooleanArray::from_iter((0..values.len()).map(|i| Some(values.is_valid(i))))
}

fn and(a: &BooleanArray, b: &BooleanArray) -> BooleanArray {
    a.iter()
        .zip(b.iter())
        .map(|(x, y)| Some(x.unwrap_or(false) && y.unwrap_or(false)))
        .collect()
}
