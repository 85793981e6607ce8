//! Filters to index expressions.
//!
//! A filter converts when every leaf is `column op literal` on a column
//! with a usable index: `=`, `<>`, `<`, `<=`, `>`, `>=`, `BETWEEN`, `IN`,
//! `IS [NOT] NULL`, combined with AND / OR. `NOT` is pushed down to the
//! leaves first (De Morgan, and `NOT (x < v)` = `x >= v`), which is exact
//! under SQL's three-valued logic because every leaf already excludes
//! NULLs, so the index expression never needs a "universe" of rows.
//! Whatever does not convert is a residual, rechecked on the rows the
//! index returns.

use std::collections::HashMap;
use std::fmt;
use std::ops::Bound;

use arrow_array::ArrayRef;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{BinaryExpr, Expr, Operator};
use fathom_index::{Exactness, IndexKind, ScalarQuery};

/// An index usable for a column.
#[derive(Debug, Clone)]
pub struct ColumnIndex {
    pub name: String,
    pub kind: IndexKind,
    pub data_type: arrow_schema::DataType,
}

/// AND / OR of index queries.
#[derive(Debug, Clone)]
pub enum IndexExpr {
    Query {
        index: String,
        column: String,
        kind: IndexKind,
        query: ScalarQuery,
    },
    And(Box<IndexExpr>, Box<IndexExpr>),
    Or(Box<IndexExpr>, Box<IndexExpr>),
}

impl IndexExpr {
    /// How exact the result is, as each leaf's kind states for its query
    /// (`None`: a superset meets a subset, which no recheck can repair).
    pub fn exactness(&self) -> Option<Exactness> {
        match self {
            IndexExpr::Query { kind, query, .. } => Some(kind.exactness(query)),
            IndexExpr::And(a, b) | IndexExpr::Or(a, b) => a.exactness()?.combine(b.exactness()?),
        }
    }

    /// Names of the indexes used.
    pub fn indexes(&self, out: &mut Vec<String>) {
        match self {
            IndexExpr::Query { index, .. } => {
                if !out.contains(index) {
                    out.push(index.clone())
                }
            }
            IndexExpr::And(a, b) | IndexExpr::Or(a, b) => {
                a.indexes(out);
                b.indexes(out);
            }
        }
    }
}

fn show(a: &ArrayRef) -> String {
    let f = arrow_cast_value(a);
    if a.len() == 1 {
        f[0].clone()
    } else {
        format!("[{}]", f.join(", "))
    }
}

fn arrow_cast_value(a: &ArrayRef) -> Vec<String> {
    let fmt =
        datafusion::arrow::util::display::ArrayFormatter::try_new(a.as_ref(), &Default::default())
            .unwrap();
    (0..a.len()).map(|i| fmt.value(i).to_string()).collect()
}

impl fmt::Display for IndexExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexExpr::Query {
                index,
                column,
                query,
                ..
            } => {
                let q = match query {
                    ScalarQuery::Equals(v) => format!("{column} = {}", show(v)),
                    ScalarQuery::IsIn(v) => format!("{column} IN {}", show(v)),
                    ScalarQuery::IsNull => format!("{column} IS NULL"),
                    ScalarQuery::Range { lower, upper } => {
                        let lo = match lower {
                            Bound::Included(v) => format!("{} <= ", show(v)),
                            Bound::Excluded(v) => format!("{} < ", show(v)),
                            Bound::Unbounded => String::new(),
                        };
                        let hi = match upper {
                            Bound::Included(v) => format!(" <= {}", show(v)),
                            Bound::Excluded(v) => format!(" < {}", show(v)),
                            Bound::Unbounded => String::new(),
                        };
                        if lo.is_empty() && hi.is_empty() {
                            format!("{column} IS NOT NULL")
                        } else {
                            format!("{lo}{column}{hi}")
                        }
                    }
                };
                write!(f, "{index}({q})")
            }
            IndexExpr::And(a, b) => write!(f, "({a} AND {b})"),
            IndexExpr::Or(a, b) => write!(f, "({a} OR {b})"),
        }
    }
}

/// Converts filters using the indexes in `indexes` (by column name).
pub struct Converter<'a> {
    pub indexes: &'a HashMap<String, ColumnIndex>,
}

fn literal(e: &Expr) -> Option<&ScalarValue> {
    match e {
        Expr::Literal(v, _) if !v.is_null() => Some(v),
        _ => None,
    }
}

fn column(e: &Expr) -> Option<&str> {
    match e {
        Expr::Column(c) => Some(c.name.as_str()),
        _ => None,
    }
}

fn flip(op: Operator) -> Operator {
    match op {
        Operator::Lt => Operator::Gt,
        Operator::LtEq => Operator::GtEq,
        Operator::Gt => Operator::Lt,
        Operator::GtEq => Operator::LtEq,
        o => o,
    }
}

impl Converter<'_> {
    fn leaf(
        &self,
        col: &str,
        query: impl FnOnce(&ColumnIndex) -> Option<ScalarQuery>,
    ) -> Option<IndexExpr> {
        let idx = self.indexes.get(col)?;
        Some(IndexExpr::Query {
            index: idx.name.clone(),
            column: col.to_string(),
            kind: idx.kind,
            query: query(idx)?,
        })
    }

    fn value(idx: &ColumnIndex, v: &ScalarValue) -> Option<ArrayRef> {
        // Only exact casts: a literal that changes value when cast is left to the residual.
        let cast = v.cast_to(&idx.data_type).ok()?;
        let back = cast.cast_to(&v.data_type()).ok()?;
        if back != *v {
            return None;
        }
        // -0.0 is +0.0 in SQL comparisons: normalized before bounds are
        // merged (`x > -0.0 AND x >= 0.0` must stay `x > 0.0`).
        Some(fathom_index::query::normalize_zero(
            cast.to_array().ok()?.as_ref(),
        ))
    }

    fn compare(&self, col: &str, op: Operator, v: &ScalarValue) -> Option<IndexExpr> {
        if op == Operator::NotEq {
            return Some(IndexExpr::Or(
                Box::new(self.compare(col, Operator::Lt, v)?),
                Box::new(self.compare(col, Operator::Gt, v)?),
            ));
        }
        self.leaf(col, |idx| {
            let a = Self::value(idx, v)?;
            Some(match op {
                Operator::Eq => ScalarQuery::Equals(a),
                Operator::Lt => ScalarQuery::Range {
                    lower: Bound::Unbounded,
                    upper: Bound::Excluded(a),
                },
                Operator::LtEq => ScalarQuery::Range {
                    lower: Bound::Unbounded,
                    upper: Bound::Included(a),
                },
                Operator::Gt => ScalarQuery::Range {
                    lower: Bound::Excluded(a),
                    upper: Bound::Unbounded,
                },
                Operator::GtEq => ScalarQuery::Range {
                    lower: Bound::Included(a),
                    upper: Bound::Unbounded,
                },
                _ => return None,
            })
        })
    }

    /// Converts `e`, or `None` if some part has no usable index.
    pub fn convert(&self, e: &Expr, negated: bool) -> Option<IndexExpr> {
        self.convert_at(e, negated, 0)
    }

    /// Nesting deeper than this is left to the residual filter: a bound on
    /// recursion, so no filter can exhaust the stack here. (A chain of one
    /// operator, `a OR b OR c ...`, is flattened without recursion and does
    /// not count towards it.)
    const MAX_DEPTH: usize = 64;

    fn convert_at(&self, e: &Expr, negated: bool, depth: usize) -> Option<IndexExpr> {
        if depth > Self::MAX_DEPTH {
            return None;
        }
        match e {
            Expr::Not(inner) => self.convert_at(inner, !negated, depth + 1),
            Expr::BinaryExpr(BinaryExpr {
                op: op @ (Operator::And | Operator::Or),
                ..
            }) => {
                // Operands of the chain of `op`, left to right, found with an
                // explicit stack.
                let mut operands = Vec::new();
                let mut stack = vec![e];
                while let Some(x) = stack.pop() {
                    match x {
                        Expr::BinaryExpr(BinaryExpr { left, op: o, right }) if o == op => {
                            stack.push(right);
                            stack.push(left);
                        }
                        other => operands.push(other),
                    }
                }
                let mut parts = operands
                    .into_iter()
                    .map(|x| self.convert_at(x, negated, depth + 1))
                    .collect::<Option<Vec<_>>>()?;
                // De Morgan: NOT (a AND b) = NOT a OR NOT b.
                let is_and = (*op == Operator::And) != negated;
                // Combined pairwise, so the result is a balanced tree (depth
                // log n) whatever the length of the chain.
                while parts.len() > 1 {
                    let mut next = Vec::with_capacity(parts.len().div_ceil(2));
                    let mut it = parts.into_iter();
                    while let Some(a) = it.next() {
                        next.push(match it.next() {
                            Some(b) if is_and => and(a, b),
                            Some(b) => IndexExpr::Or(Box::new(a), Box::new(b)),
                            None => a,
                        });
                    }
                    parts = next;
                }
                parts.pop()
            }
            Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
                let (col, op, v) =
                    match (column(left), literal(right), column(right), literal(left)) {
                        (Some(c), Some(v), _, _) => (c, *op, v),
                        (_, _, Some(c), Some(v)) => (c, flip(*op), v),
                        _ => return None,
                    };
                let op = if negated {
                    match op {
                        Operator::Eq => Operator::NotEq,
                        Operator::NotEq => Operator::Eq,
                        Operator::Lt => Operator::GtEq,
                        Operator::LtEq => Operator::Gt,
                        Operator::Gt => Operator::LtEq,
                        Operator::GtEq => Operator::Lt,
                        _ => return None,
                    }
                } else {
                    op
                };
                self.compare(col, op, v)
            }
            Expr::Between(b) => {
                let col = column(&b.expr)?;
                let (lo, hi) = (literal(&b.low)?, literal(&b.high)?);
                if b.negated != negated {
                    // x NOT BETWEEN lo AND hi = x < lo OR x > hi
                    Some(IndexExpr::Or(
                        Box::new(self.compare(col, Operator::Lt, lo)?),
                        Box::new(self.compare(col, Operator::Gt, hi)?),
                    ))
                } else {
                    self.leaf(col, |idx| {
                        Some(ScalarQuery::Range {
                            lower: Bound::Included(Self::value(idx, lo)?),
                            upper: Bound::Included(Self::value(idx, hi)?),
                        })
                    })
                }
            }
            Expr::InList(l) if l.negated == negated => {
                let col = column(&l.expr)?;
                let values: Vec<&ScalarValue> =
                    l.list.iter().map(literal).collect::<Option<_>>()?;
                self.leaf(col, |idx| {
                    let arrays: Vec<ArrayRef> = values
                        .iter()
                        .map(|v| Self::value(idx, v))
                        .collect::<Option<_>>()?;
                    let refs: Vec<&dyn arrow_array::Array> =
                        arrays.iter().map(|a| a.as_ref()).collect();
                    Some(ScalarQuery::IsIn(arrow_select::concat::concat(&refs).ok()?))
                })
            }
            Expr::IsNull(inner) | Expr::IsNotNull(inner) => {
                let col = column(inner)?;
                let is_null = matches!(e, Expr::IsNull(_)) != negated;
                self.leaf(col, |_| {
                    Some(if is_null {
                        ScalarQuery::IsNull
                    } else {
                        ScalarQuery::Range {
                            lower: Bound::Unbounded,
                            upper: Bound::Unbounded,
                        }
                    })
                })
            }
            _ => None,
        }
    }
}

/// `a AND b`, merging two ranges on the same index into one range (so
/// `x >= 5 AND x <= 9` searches once for `5 <= x <= 9`, not twice for
/// half-open ranges).
pub fn and(a: IndexExpr, b: IndexExpr) -> IndexExpr {
    use std::cmp::Ordering;
    if let (
        IndexExpr::Query {
            index: ia,
            column,
            kind,
            query:
                ScalarQuery::Range {
                    lower: la,
                    upper: ua,
                },
        },
        IndexExpr::Query {
            index: ib,
            query:
                ScalarQuery::Range {
                    lower: lb,
                    upper: ub,
                },
            ..
        },
    ) = (&a, &b)
        && ia == ib
    {
        let cmp = |x: &ArrayRef, y: &ArrayRef| -> Option<Ordering> {
            let c = datafusion::arrow::array::make_comparator(
                x.as_ref(),
                y.as_ref(),
                Default::default(),
            )
            .ok()?;
            Some(c(0, 0))
        };
        // The tighter of two bounds; `greater` picks the larger value (lower bounds).
        let pick =
            |x: &Bound<ArrayRef>, y: &Bound<ArrayRef>, greater: bool| -> Option<Bound<ArrayRef>> {
                Some(match (x, y) {
                    (Bound::Unbounded, o) | (o, Bound::Unbounded) => o.clone(),
                    (
                        Bound::Included(p) | Bound::Excluded(p),
                        Bound::Included(q) | Bound::Excluded(q),
                    ) => match cmp(p, q)? {
                        Ordering::Equal => {
                            if matches!(x, Bound::Excluded(_)) {
                                x.clone()
                            } else {
                                y.clone()
                            }
                        }
                        Ordering::Greater => {
                            if greater {
                                x.clone()
                            } else {
                                y.clone()
                            }
                        }
                        Ordering::Less => {
                            if greater {
                                y.clone()
                            } else {
                                x.clone()
                            }
                        }
                    },
                })
            };
        if let (Some(lower), Some(upper)) = (pick(la, lb, true), pick(ua, ub, false)) {
            return IndexExpr::Query {
                index: ia.clone(),
                column: column.clone(),
                kind: *kind,
                query: ScalarQuery::Range { lower, upper },
            };
        }
    }
    IndexExpr::And(Box::new(a), Box::new(b))
}
