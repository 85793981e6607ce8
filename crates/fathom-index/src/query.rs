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
use fathom_table::{RowAddress, RowSet};

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

/// How a set of rows relates to the rows that match a query (among the
/// rows the segment covers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Exactness {
    /// Exactly the matching rows.
    Exact,
    /// A superset: every matching row, maybe more. Rechecked.
    AtMost,
    /// A subset: only matching rows, maybe not all (the complement of an
    /// `AtMost` set). Usable only with the rest found another way.
    AtLeast,
}

impl Exactness {
    /// The exactness of `a AND b` or `a OR b` (the same rule for both):
    /// `None` when a superset meets a subset, which is neither.
    pub fn combine(self, other: Exactness) -> Option<Exactness> {
        use Exactness::*;
        match (self, other) {
            (Exact, x) | (x, Exact) => Some(x),
            (AtMost, AtMost) => Some(AtMost),
            (AtLeast, AtLeast) => Some(AtLeast),
            _ => None,
        }
    }

    /// The exactness of `NOT a` (over the rows the segment covers).
    pub fn negate(self) -> Exactness {
        match self {
            Exactness::Exact => Exactness::Exact,
            Exactness::AtMost => Exactness::AtLeast,
            Exactness::AtLeast => Exactness::AtMost,
        }
    }

    /// Whether this result is at least as exact as `planned` promised
    /// (an exact result satisfies any plan).
    pub fn satisfies(self, planned: Exactness) -> bool {
        self == Exactness::Exact || self == planned
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Exactness::Exact => "exact",
            Exactness::AtMost => "at_most",
            Exactness::AtLeast => "at_least",
        }
    }
}

/// Rows an index returned, with how exact they are.
///
/// An `AtMost` result may also know a subset of its rows that certainly
/// match (`certain`: a zone map's zones whose min and max both satisfy
/// the predicate and that hold no nulls), so that only the rest need a
/// recheck. For an exact result every row is certain.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchResult {
    pub rows: RowSet,
    pub exactness: Exactness,
    /// Rows known to match, a subset of `rows` (`AtMost` results only).
    pub certain: Option<RowSet>,
}

impl SearchResult {
    pub fn exact(rows: impl Into<RowSet>) -> Self {
        SearchResult {
            rows: rows.into(),
            exactness: Exactness::Exact,
            certain: None,
        }
    }
    pub fn at_most(rows: impl Into<RowSet>) -> Self {
        SearchResult {
            rows: rows.into(),
            exactness: Exactness::AtMost,
            certain: None,
        }
    }
    /// An `AtMost` result whose rows `certain` (a subset) surely match.
    pub fn at_most_with_certain(rows: impl Into<RowSet>, certain: RowSet) -> Self {
        SearchResult {
            rows: rows.into(),
            exactness: Exactness::AtMost,
            certain: Some(certain),
        }
    }
    pub fn rows(&self) -> &RowSet {
        &self.rows
    }
    pub fn into_rows(self) -> RowSet {
        self.rows
    }
    pub fn is_exact(&self) -> bool {
        self.exactness == Exactness::Exact
    }
    /// Keeps only rows in `allow`.
    pub fn restrict(mut self, allow: Option<&RowSet>) -> Self {
        if let Some(a) = allow {
            self.rows = self.rows & a.clone();
            self.certain = self.certain.map(|c| c & a.clone());
        }
        self
    }
}

/// A ranked result (vector and full-text search): row addresses with a
/// score each, best first. `Exact` when the ranking is the true one
/// (brute force), `AtMost` when the candidates are approximate and their
/// scores must be recomputed before the final top-k.
#[derive(Debug, Clone, PartialEq)]
pub struct RankedResult {
    pub rows: Vec<(RowAddress, f32)>,
    pub exactness: Exactness,
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
    /// For `Equals`, `Range` and `IsNull` over `values` sorted ascending
    /// (nulls first, total order: B-tree pages): the one index range of
    /// the values matching, found by binary searches instead of comparing
    /// every value. `None` for `IsIn` (see [`Self::in_ranges_sorted`]) or
    /// when `values` do not hold their nulls first.
    pub fn range_sorted(&self, values: &dyn Array) -> Result<Option<Range<usize>>> {
        let n = values.len();
        let nulls = values.null_count();
        if nulls > 0 && !values.is_null(nulls - 1) {
            return Ok(None);
        }
        let values = normalize_zero(values);
        // Position of the first value at `from` or after for which `past`
        // says it is past the bound `v`.
        let first = |from: usize, v: &ArrayRef, past: fn(std::cmp::Ordering) -> bool| {
            let v = normalize_zero(v.as_ref());
            if v.is_null(0) {
                return Ok(None);
            }
            let c = make_comparator(values.as_ref(), v.as_ref(), SortOptions::default())?;
            Ok::<_, crate::error::Error>(Some(
                from + partition_point(n - from, |k| !past(c(from + k, 0))),
            ))
        };
        Ok(match self {
            ScalarQuery::IsNull => Some(0..nulls),
            ScalarQuery::IsIn(_) => None,
            ScalarQuery::Equals(v) => {
                let (Some(s), Some(e)) = (
                    first(nulls, v, |o| o.is_ge())?,
                    first(nulls, v, |o| o.is_gt())?,
                ) else {
                    return Ok(None);
                };
                Some(s..e)
            }
            ScalarQuery::Range { lower, upper } => {
                let start = match lower {
                    Bound::Included(v) => first(nulls, v, |o| o.is_ge())?,
                    Bound::Excluded(v) => first(nulls, v, |o| o.is_gt())?,
                    Bound::Unbounded => Some(nulls),
                };
                let Some(start) = start else { return Ok(None) };
                let end = match upper {
                    Bound::Included(v) => first(start, v, |o| o.is_gt())?,
                    Bound::Excluded(v) => first(start, v, |o| o.is_ge())?,
                    Bound::Unbounded => Some(n),
                };
                let Some(end) = end else { return Ok(None) };
                Some(start..end.max(start))
            }
        })
    }

    /// For `IsIn` over `values` sorted ascending (nulls first, total order:
    /// B-tree pages and bitmap keys): the index ranges equal to some list
    /// value, by two binary searches per list value over what is left of
    /// `values`. `None` for the other queries (use [`Self::matches`]).
    pub fn in_ranges_sorted(&self, values: &dyn Array) -> Result<Option<Vec<Range<usize>>>> {
        let ScalarQuery::IsIn(list) = self else {
            return Ok(None);
        };
        let list = sorted_distinct(list.as_ref())?;
        in_ranges_of_sorted(list.as_ref(), values).map(Some)
    }
}

/// The ranges of sorted `values` equal to members of `list` (sorted and
/// distinct, see [`sorted_distinct`]): list values below the first value
/// are skipped with one binary search, and the walk stops at the last
/// value, so a page costs about (list values in its range) x log(page),
/// not the whole list. Sort the list once per search, not per page.
pub fn in_ranges_of_sorted(list: &dyn Array, values: &dyn Array) -> Result<Vec<Range<usize>>> {
    let values = normalize_zero(values);
    let n = values.len();
    let mut out = Vec::new();
    if n == 0 || list.is_empty() {
        return Ok(out);
    }
    let cmp = make_comparator(values.as_ref(), list, SortOptions::default())?;
    // First list value not below values[0].
    let first = partition_point(list.len(), |j| cmp(0, j).is_gt());
    let mut lo = 0;
    for j in first..list.len() {
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
    Ok(out)
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

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Float64Array, Int32Array};

    /// Binary-searched ranges of sorted pages equal a comparison of every
    /// value, for equality, every kind of bound and IS NULL, over floats
    /// with signed zeros, NaN and infinities, and nulls first.
    #[test]
    fn range_sorted_equals_matches() {
        let specials = [
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            0.0,
            -0.0,
            1.5,
            -2.0,
        ];
        let mut seed = 7u64;
        let mut next = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seed >> 33
        };
        for round in 0..300 {
            let n = (next() % 40) as usize;
            let nulls = if round % 3 == 0 {
                (next() % 4) as usize
            } else {
                0
            };
            let mut vals: Vec<f64> = (0..n)
                .map(|_| match next() % 3 {
                    0 => specials[(next() % specials.len() as u64) as usize],
                    _ => (next() % 9) as f64 - 4.0,
                })
                .collect();
            vals.sort_by(|a, b| a.total_cmp(b));
            let floats: ArrayRef = Arc::new(Float64Array::from_iter(
                std::iter::repeat_n(None, nulls).chain(vals.iter().map(|v| Some(*v))),
            ));
            let mut ints: Vec<i32> = vals
                .iter()
                .filter(|v| v.is_finite())
                .map(|v| *v as i32)
                .collect();
            ints.sort();
            let ints: ArrayRef = Arc::new(Int32Array::from_iter(
                std::iter::repeat_n(None, nulls).chain(ints.into_iter().map(Some)),
            ));
            let f = |v: f64| -> ArrayRef { Arc::new(Float64Array::from(vec![v])) };
            let i = |v: f64| -> ArrayRef { Arc::new(Int32Array::from(vec![v as i32])) };
            let a = specials[(next() % specials.len() as u64) as usize];
            let b = (next() % 9) as f64 - 4.0;
            for (values, mk) in [(&floats, &f as &dyn Fn(f64) -> ArrayRef), (&ints, &i)] {
                if std::ptr::eq(values, &ints) && !a.is_finite() {
                    continue;
                }
                let bound = |k: u64, v: f64| match k % 3 {
                    0 => Bound::Included(mk(v)),
                    1 => Bound::Excluded(mk(v)),
                    _ => Bound::Unbounded,
                };
                let queries = [
                    ScalarQuery::IsNull,
                    ScalarQuery::Equals(mk(a)),
                    ScalarQuery::Equals(mk(b)),
                    ScalarQuery::Range {
                        lower: bound(next(), a.min(b)),
                        upper: bound(next(), a.max(b)),
                    },
                    ScalarQuery::Range {
                        lower: bound(next(), b),
                        upper: bound(next(), a),
                    },
                ];
                for q in queries {
                    let want: Vec<usize> = {
                        let m = q.matches(values.as_ref()).unwrap();
                        (0..m.len()).filter(|&k| m.value(k)).collect()
                    };
                    let got: Vec<usize> =
                        q.range_sorted(values.as_ref()).unwrap().unwrap().collect();
                    assert_eq!(got, want, "{q:?} over {values:?}");
                }
            }
        }
    }
}
