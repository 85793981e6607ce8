//! What an index is asked, and what it answers.
//!
//! Results carry exactness in their type: an `Exact` set holds exactly
//! the rows matching the query (among the rows the segment covers); an
//! `AtMost` set may hold more and must be rechecked against the predicate.

use std::ops::Bound;

use arrow_array::{Array, ArrayRef, BooleanArray};
use arrow_ord::cmp;
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
    /// except for `IsNull`). The reference semantics every index follows.
    pub fn matches(&self, values: &dyn Array) -> Result<BooleanArray> {
        let m = match self {
            ScalarQuery::IsNull => arrow_array::BooleanArray::from_iter(
                (0..values.len()).map(|i| Some(values.is_null(i))),
            ),
            ScalarQuery::Equals(v) => cmp::eq(&values, &arrow_array::Scalar::new(v.clone()))?,
            ScalarQuery::IsIn(list) => {
                let mut acc = BooleanArray::from(vec![false; values.len()]);
                for i in 0..list.len() {
                    if list.is_null(i) {
                        continue;
                    }
                    let one = arrow_array::Scalar::new(list.slice(i, 1));
                    acc = arrow_arith_or(&acc, &cmp::eq(&values, &one)?);
                }
                acc
            }
            ScalarQuery::Range { lower, upper } => {
                let mut acc = BooleanArray::from(vec![true; values.len()]);
                match lower {
                    Bound::Included(v) => {
                        acc = and(
                            &acc,
                            &cmp::gt_eq(&values, &arrow_array::Scalar::new(v.clone()))?,
                        )
                    }
                    Bound::Excluded(v) => {
                        acc = and(
                            &acc,
                            &cmp::gt(&values, &arrow_array::Scalar::new(v.clone()))?,
                        )
                    }
                    Bound::Unbounded => acc = and(&acc, &not_null(values)),
                }
                match upper {
                    Bound::Included(v) => {
                        acc = and(
                            &acc,
                            &cmp::lt_eq(&values, &arrow_array::Scalar::new(v.clone()))?,
                        )
                    }
                    Bound::Excluded(v) => {
                        acc = and(
                            &acc,
                            &cmp::lt(&values, &arrow_array::Scalar::new(v.clone()))?,
                        )
                    }
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

fn not_null(values: &dyn Array) -> BooleanArray {
    BooleanArray::from_iter((0..values.len()).map(|i| Some(values.is_valid(i))))
}

fn and(a: &BooleanArray, b: &BooleanArray) -> BooleanArray {
    a.iter()
        .zip(b.iter())
        .map(|(x, y)| Some(x.unwrap_or(false) && y.unwrap_or(false)))
        .collect()
}

fn arrow_arith_or(a: &BooleanArray, b: &BooleanArray) -> BooleanArray {
    a.iter()
        .zip(b.iter())
        .map(|(x, y)| Some(x.unwrap_or(false) || y.unwrap_or(false)))
        .collect()
}
