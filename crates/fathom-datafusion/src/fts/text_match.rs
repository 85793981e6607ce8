//! `text_match(column, query)`: the full-text match predicate, evaluated
//! row by row, or routed to the inverted index by the table provider.

use std::sync::Arc;

use arrow_array::BooleanArray;
use arrow_schema::DataType;
use datafusion::common::ScalarValue;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::prelude::lit;
use fathom_index::fts::search::Query;
use fathom_index::fts::{Analyzer, FtsParams, MatchOp};
use fathom_table::Dataset;

use super::{Boosted, Search, fts_segments, text_arg};
use crate::exec::common::text_at;

/// `text_match(column, query [, 'OR' | 'AND' | 'PHRASE'])`: whether the
/// text matches the query (any term, every term, or the phrase; a query in
/// double quotes is a phrase), analyzed as the column's inverted index
/// analyzes documents (the default analyzer without one). In WHERE over a
/// Fathom table, a `text_match` that the other filters are ANDed with is
/// answered by the inverted index (the rest are prefilters); anywhere
/// else it is evaluated row by row. NULL text is NULL.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct TextMatchUdf {
    signature: Signature,
}

impl Default for TextMatchUdf {
    fn default() -> Self {
        TextMatchUdf {
            signature: Signature::variadic_any(Volatility::Immutable),
        }
    }
}

/// The name of the match function.
pub const TEXT_MATCH: &str = "text_match";

/// The scalar arguments after the text: query, operator, and the
/// analysis parameters (JSON, added by the table provider from the index).
fn match_args(args: &[Expr]) -> Option<(String, String, MatchOp, Option<String>)> {
    let column = match args.first()? {
        Expr::Column(c) => c.name.clone(),
        _ => return None,
    };
    let query = text_arg(args.get(1))?;
    let op = match args.get(2) {
        None => default_op(&query),
        Some(e) => MatchOp::parse(&text_arg(Some(e))?)?,
    };
    let params = match args.get(3) {
        None => None,
        Some(e) => Some(text_arg(Some(e))?),
    };
    Some((column, query, op, params))
}

pub(crate) fn default_op(query: &str) -> MatchOp {
    let quoted = fathom_index::fts::search::split_slop(query).map_or(query, |(q, _)| q);
    // One quoted phrase and nothing else (`"a b" c` or `"a" "b"` are
    // boolean queries with phrase clauses).
    if quoted.len() >= 2
        && quoted.starts_with('"')
        && quoted.ends_with('"')
        && quoted.matches('"').count() == 2
    {
        MatchOp::Phrase
    } else {
        MatchOp::Or
    }
}

fn scalar_text(name: &str, c: &ColumnarValue) -> Result<Option<String>> {
    match c {
        ColumnarValue::Scalar(
            ScalarValue::Utf8(s) | ScalarValue::LargeUtf8(s) | ScalarValue::Utf8View(s),
        ) => Ok(s.clone()),
        _ => Err(DataFusionError::Plan(format!(
            "text_match: the {name} must be a constant string"
        ))),
    }
}

impl ScalarUDFImpl for TextMatchUdf {
    fn name(&self) -> &str {
        TEXT_MATCH
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        if !(2..=4).contains(&args.len()) {
            return Err(DataFusionError::Plan(
                "usage: text_match(text_column, 'query' [, 'OR' | 'AND' | 'PHRASE'])".into(),
            ));
        }
        for (i, a) in args.iter().enumerate() {
            if !matches!(
                a,
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null
            ) {
                return Err(DataFusionError::Plan(format!(
                    "text_match: argument {} must be text, got {a}",
                    i + 1
                )));
            }
        }
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let a = &args.args;
        let query = scalar_text("query", &a[1])?.unwrap_or_default();
        let op = match a.get(2) {
            None => default_op(&query),
            Some(c) => {
                let s = scalar_text("operator", c)?.unwrap_or_default();
                MatchOp::parse(&s).ok_or_else(|| {
                    DataFusionError::Plan(format!(
                        "text_match: the operator is 'OR', 'AND' or 'PHRASE', got '{s}'"
                    ))
                })?
            }
        };
        let params = match a.get(3) {
            Some(c) => match scalar_text("analysis parameters", c)? {
                Some(j) => {
                    FtsParams::from_json(&j).map_err(|e| DataFusionError::Plan(e.to_string()))?
                }
                None => FtsParams::default(),
            },
            None => FtsParams::default(),
        };
        let analyzer = Analyzer::new(&params).map_err(|e| DataFusionError::Plan(e.to_string()))?;
        let probe = Query::parse(&analyzer, &query, op)
            .map_err(|e| DataFusionError::Plan(format!("text_match: {e}")))?;
        if !probe.fuzzy.is_empty() {
            return Err(DataFusionError::Plan(format!(
                "text_match: fuzzy terms ('{query}') expand over the table's vocabulary, which \
                 a row-by-row predicate does not see; use fts(...)"
            )));
        }
        let matches = |t: &str| probe.matches_text(&analyzer, t);
        match &a[0] {
            ColumnarValue::Scalar(s) => {
                let v = match s {
                    ScalarValue::Utf8(s) | ScalarValue::LargeUtf8(s) | ScalarValue::Utf8View(s) => {
                        s.as_deref().map(matches)
                    }
                    _ => None,
                };
                Ok(ColumnarValue::Scalar(ScalarValue::Boolean(v)))
            }
            ColumnarValue::Array(arr) => {
                let out: BooleanArray = (0..arr.len())
                    .map(|i| text_at(arr, i).map(matches))
                    .collect();
                Ok(ColumnarValue::Array(Arc::new(out)))
            }
        }
    }
}

/// The `text_match` function.
pub fn text_match_udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(TextMatchUdf::default())
}

fn is_text_match(e: &Expr) -> Option<&[Expr]> {
    match e {
        Expr::ScalarFunction(f) if f.func.inner().downcast_ref::<TextMatchUdf>().is_some() => {
            Some(&f.args)
        }
        _ => None,
    }
}

/// `filters` with every `text_match` call on a column of `ds` given the
/// analysis parameters of that column's inverted index, so that rows the
/// index does not cover are matched as the index matches (the default
/// analyzer without an index).
pub(crate) async fn bind_text_match(
    ds: &Dataset,
    cache: &fathom_index::IndexCache,
    filters: &[Expr],
) -> Result<Vec<Expr>> {
    // The parameters of each column named by a text_match.
    let mut params: std::collections::HashMap<String, String> = Default::default();
    for f in filters {
        let mut columns = vec![];
        f.apply(|e| {
            if let Some((column, _, _, None)) = is_text_match(e).and_then(match_args) {
                columns.push(column);
            }
            Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
        })?;
        for column in columns {
            if params.contains_key(&column) {
                continue;
            }
            let Ok(c) = ds.schema().index_of(&column) else {
                continue;
            };
            let json = match fts_segments(ds, c, false).1.first() {
                Some(s) => {
                    fathom_index::fts::FtsSegment::load(ds.store(), ds.root(), &s.meta, cache)
                        .await
                        .map_err(|e| DataFusionError::External(Box::new(e)))?
                        .params
                        .to_json()
                }
                None => FtsParams::default().to_json(),
            };
            params.insert(column, json);
        }
    }
    if params.is_empty() {
        return Ok(filters.to_vec());
    }
    filters
        .iter()
        .map(|f| {
            Ok(f.clone()
                .transform(|e| {
                    let Some((column, query, op, None)) = is_text_match(&e).and_then(match_args)
                    else {
                        return Ok(Transformed::no(e));
                    };
                    let Some(json) = params.get(&column) else {
                        return Ok(Transformed::no(e));
                    };
                    let Expr::ScalarFunction(f) = &e else {
                        return Ok(Transformed::no(e));
                    };
                    let mut call = f.clone();
                    call.args = vec![
                        f.args[0].clone(),
                        lit(query),
                        lit(op.name()),
                        lit(json.clone()),
                    ];
                    Ok(Transformed::yes(Expr::ScalarFunction(call)))
                })?
                .data)
        })
        .collect()
}

/// The `text_match` an index can answer for these filters: a top-level
/// conjunct on a column with an inverted index (the others become its
/// prefilters).
pub(crate) fn routed_match(ds: &Dataset, filters: &[Expr]) -> Option<(usize, Search)> {
    filters.iter().enumerate().find_map(|(i, f)| {
        let (column, query, op, _) = match_args(is_text_match(f)?)?;
        // Fuzzy terms are refused where the predicate is evaluated.
        let fuzzy = Analyzer::new(&FtsParams::default())
            .and_then(|a| Query::parse(&a, &query, op))
            .map_or(true, |q| !q.fuzzy.is_empty());
        if fuzzy {
            return None;
        }
        let c = ds.schema().index_of(&column).ok()?;
        let (_, segs) = fts_segments(ds, c, false);
        (!segs.is_empty()).then_some((
            i,
            Search {
                columns: vec![Boosted { column, boost: 1.0 }],
                query,
                op,
            },
        ))
    })
}
