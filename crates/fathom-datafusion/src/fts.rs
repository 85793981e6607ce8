//! Full-text search from SQL.
//!
//! ```sql
//! SELECT id, _score FROM fts('t', 'body', 'quick fox')
//! WHERE category = 'c3' ORDER BY _score DESC LIMIT 10;
//! ```
//!
//! `fts(table, columns, query [, 'OR' | 'AND' | 'PHRASE'])` is table
//! `table` with a `_score` column (BM25, Float32), holding only the rows
//! that match `query` in `column`: any of its terms (`'OR'`, the default,
//! as Lance's `full_text_query`), all of them (`'AND'`), or the terms in
//! order at adjacent positions (`'PHRASE'`, or a query in double quotes:
//! `'"quick brown"'`; the index needs `with_position = true`). Scores sum
//! BM25 over the query terms a row holds (a phrase scores as AND does,
//! as in Lance). The query is analyzed as
//! the column's inverted index analyzes documents (the default analyzer
//! when the column has no index: then every row is tokenized, EXPLAIN
//! shows `no index (flat)`). WHERE filters on the table's columns are
//! prefilters (pushed into the search, answered by scalar indexes when
//! they can); a filter on `_score` applies to the result.
//!
//! `columns` is one text column or several, each optionally boosted
//! (`'title^2, body'`): a row's score is its best boosted column score
//! (Lance's multi-match). A query word written `word~` or `word~N` is a
//! fuzzy term: the table's terms within edit distance N (automatic by
//! length without N), the first `fathom.fts_max_expansions` (50) in byte
//! order that keep its first `fathom.fts_prefix_length` (0) characters,
//! each optional.
//!
//! [`FtsRule`] turns `ORDER BY _score DESC LIMIT k` over `fts(...)` into
//! a top-k search (block-max WAND: most matching rows are never scored);
//! without it every matching row is scored and DataFusion sorts them,
//! with the same result.

use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableFunctionArgs, TableFunctionImpl};
use datafusion::common::ScalarValue;
use datafusion::common::tree_node::Transformed;
use datafusion::datasource::{TableProvider, TableType, provider_as_source, source_as_provider};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::{
    Expr, LogicalPlan, Projection as LProjection, Sort, TableProviderFilterPushDown, TableScan,
};
use datafusion::optimizer::{ApplyOrder, OptimizerConfig, OptimizerRule};
use datafusion::physical_plan::ExecutionPlan;
use fathom_index::fts::search::Query;
use fathom_index::fts::{Analyzer, FtsParams, MatchOp, is_fts};
use fathom_table::{Dataset, ROW_ADDR};
use roaring::RoaringBitmap;

use crate::exec::fts::{FtsExec, FtsField, FtsSpec};
use crate::exec::knn::KnnSegment;
use crate::knn::{inner_scan, overlaid_input, scan_schema, unqualified, winner_columns};
use crate::provider::FathomTable;
use crate::util::block_on;
use futures::FutureExt;

mod text_match;
pub use text_match::{TEXT_MATCH, TextMatchUdf, text_match_udf};
pub(crate) use text_match::{bind_text_match, default_op, routed_match};

/// The score column `fts(...)` adds.
pub const SCORE_COLUMN: &str = "_score";

/// The `fts` table function.
#[derive(Debug, Default)]
pub struct FtsTableFunction;

fn text_arg(e: Option<&Expr>) -> Option<String> {
    match e {
        Some(Expr::Literal(
            ScalarValue::Utf8(Some(s))
            | ScalarValue::LargeUtf8(Some(s))
            | ScalarValue::Utf8View(Some(s)),
            _,
        )) => Some(s.clone()),
        _ => None,
    }
}

impl TableFunctionImpl for FtsTableFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let usage = || {
            DataFusionError::Plan(
                "usage: fts('<table>', '<text column>[^boost], ...', '<query>' [, 'OR' | 'AND' | 'PHRASE'])"
                    .into(),
            )
        };
        let e = args.exprs();
        if !(3..=4).contains(&e.len()) {
            return Err(usage());
        }
        let (Some(table), Some(column), Some(query)) =
            (text_arg(e.first()), text_arg(e.get(1)), text_arg(e.get(2)))
        else {
            return Err(usage());
        };
        // A query in double quotes is a phrase (as in Lance's query strings).
        let op = match e.get(3) {
            None => default_op(&query),
            Some(x) => text_arg(Some(x))
                .and_then(|s| MatchOp::parse(&s))
                .ok_or_else(|| {
                    DataFusionError::Plan(format!(
                        "fts: the operator is 'OR', 'AND' or 'PHRASE', got {x}"
                    ))
                })?,
        };
        if query.matches('"').count() % 2 == 1 {
            return Err(DataFusionError::Plan(format!(
                "fts: unbalanced double quote in query {query:?}"
            )));
        }
        // Malformed `+`/`-` clauses are plan errors (the index's own
        // analyzer checks again when the search runs).
        Analyzer::new(&FtsParams::default())
            .and_then(|a| Query::parse(&a, &query, op))
            .map_err(|e| DataFusionError::Plan(format!("fts: {e}")))?;
        let state = args
            .session()
            .as_any()
            .downcast_ref::<SessionState>()
            .ok_or_else(|| DataFusionError::Plan("fts: needs a SessionState".into()))?;
        let schema = state.schema_for_ref(table.as_str())?;
        let name = datafusion::common::TableReference::from(table.as_str())
            .table()
            .to_string();
        // The default (in-memory) schema answers at once: asked here, not
        // on a thread and runtime of its own (~0.2 ms a query); another
        // may do I/O, and is.
        let in_memory = schema.is::<datafusion::catalog::MemorySchemaProvider>();
        let mut lookup = Box::pin(async move { schema.table(&name).await });
        let found = match in_memory.then(|| (&mut lookup).now_or_never()).flatten() {
            Some(found) => found,
            None => block_on(lookup),
        };
        let inner = found?
            .ok_or_else(|| DataFusionError::Plan(format!("fts: no table named '{table}'")))?;
        let Some(t) = inner.downcast_ref::<FathomTable>() else {
            return Err(DataFusionError::Plan(format!(
                "fts: table '{table}' is not a Lance dataset"
            )));
        };
        let columns =
            Boosted::parse_list(&column).map_err(|e| DataFusionError::Plan(format!("fts: {e}")))?;
        for c in &columns {
            let column = &c.column;
            match t
                .schema()
                .field_with_name(column)
                .map(|f| f.data_type().clone())
            {
                Ok(DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View) => {}
                Ok(other) => {
                    return Err(DataFusionError::Plan(format!(
                        "fts: column '{column}' of '{table}' is {other}, not text"
                    )));
                }
                Err(_) => {
                    return Err(DataFusionError::Plan(format!(
                        "fts: table '{table}' has no column named '{column}'"
                    )));
                }
            }
        }
        let mut fts = FtsTable::new(inner, columns, query, op, None);
        fts.name = Some(datafusion::common::TableReference::from(table.as_str()));
        Ok(Arc::new(fts))
    }
}

/// A Fathom table's rows that match a full-text query, with their score.
#[derive(Debug)]
pub struct FtsTable {
    inner: Arc<dyn TableProvider>,
    columns: Vec<Boosted>,
    query: String,
    op: MatchOp,
    /// Best rows wanted (set by [`FtsRule`]); `None`: all matches.
    k: Option<usize>,
    schema: SchemaRef,
    /// The name `inner` was found under (by `fts(...)`).
    name: Option<datafusion::common::TableReference>,
}

impl FtsTable {
    pub fn new(
        inner: Arc<dyn TableProvider>,
        columns: Vec<Boosted>,
        query: String,
        op: MatchOp,
        k: Option<usize>,
    ) -> Self {
        let mut fields: Vec<Field> = inner
            .schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new(SCORE_COLUMN, DataType::Float32, false));
        FtsTable {
            schema: Arc::new(Schema::new(fields)),
            inner,
            columns,
            query,
            op,
            k,
            name: None,
        }
    }

    /// The searched table, and the name it was found under (a plan
    /// reading it is valid while that name still gives that table at the
    /// same version: see [`crate::PlanCache`]).
    pub(crate) fn source(
        &self,
    ) -> (
        Option<&datafusion::common::TableReference>,
        &Arc<dyn TableProvider>,
    ) {
        (self.name.as_ref(), &self.inner)
    }

    fn with_k(&self, k: usize) -> Self {
        let mut t = FtsTable::new(
            self.inner.clone(),
            self.columns.clone(),
            self.query.clone(),
            self.op,
            Some(k),
        );
        t.name = self.name.clone();
        t
    }

    fn table(&self) -> &FathomTable {
        self.inner
            .downcast_ref::<FathomTable>()
            .expect("checked by fts()")
    }
}

#[async_trait]
impl TableProvider for FtsTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        // Filters on the score apply to the result; the rest are prefilters.
        let on_table: Vec<&Expr> = filters
            .iter()
            .copied()
            .filter(|f| !f.column_refs().iter().any(|c| c.name == SCORE_COLUMN))
            .collect();
        let mut inner = self.inner.supports_filters_pushdown(&on_table)?.into_iter();
        Ok(filters
            .iter()
            .map(|f| {
                if f.column_refs().iter().any(|c| c.name == SCORE_COLUMN) {
                    TableProviderFilterPushDown::Unsupported
                } else {
                    inner
                        .next()
                        .unwrap_or(TableProviderFilterPushDown::Unsupported)
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let t = self.table();
        let ds = t.latest().await?;
        let out_cols: Vec<usize> = projection
            .cloned()
            .unwrap_or_else(|| (0..self.schema.fields().len()).collect());
        let out_schema = Arc::new(self.schema.project(&out_cols)?);
        // A LIMIT without ORDER BY may return any matching rows: the best.
        let k = match (self.k, limit) {
            (Some(k), Some(l)) => Some(k.min(l)),
            (k, l) => k.or(l),
        };
        let search = Search {
            columns: self.columns.clone(),
            query: self.query.clone(),
            op: self.op,
        };
        plan_fts(t, state, ds, out_schema, filters, &search, k)
    }
}

/// A full-text query on one or more columns.
#[derive(Debug, Clone)]
pub struct Search {
    pub columns: Vec<Boosted>,
    pub query: String,
    pub op: MatchOp,
}

/// A column searched, and the factor its scores are multiplied by.
#[derive(Debug, Clone, PartialEq)]
pub struct Boosted {
    pub column: String,
    pub boost: f32,
}

impl Boosted {
    /// `'title^2, body'`: columns separated by commas, each optionally
    /// followed by `^` and a positive boost (Elasticsearch's `fields`
    /// syntax for a multi-match).
    pub fn parse_list(s: &str) -> std::result::Result<Vec<Boosted>, String> {
        let mut out: Vec<Boosted> = vec![];
        for part in s.split(',') {
            let part = part.trim();
            let (column, boost) = match part.rsplit_once('^') {
                Some((c, b)) => {
                    let boost: f32 = b.trim().parse().map_err(|_| {
                        format!(
                            "boost '{}' of column '{}' is not a number",
                            b.trim(),
                            c.trim()
                        )
                    })?;
                    if !(boost.is_finite() && boost > 0.0) {
                        return Err(format!(
                            "boost of column '{}' must be a positive number, got {boost}",
                            c.trim()
                        ));
                    }
                    (c.trim(), boost)
                }
                None => (part, 1.0),
            };
            if column.is_empty() {
                return Err(format!("empty column name in column list {s:?}"));
            }
            if out.iter().any(|b| b.column == column) {
                return Err(format!("column '{column}' is listed twice"));
            }
            out.push(Boosted {
                column: column.to_string(),
                boost,
            });
        }
        Ok(out)
    }
}

/// The inverted index segments on dataset column `column` to search (the
/// widest-covering index if several), each with the current fragments it
/// covers that no earlier one took. Segments of a dataset with stable row
/// ids hold row ids, not addresses: none is used there (flat search).
pub(crate) fn fts_segments(
    ds: &Dataset,
    column: usize,
    whole_fragments: bool,
) -> (Option<String>, Vec<KnnSegment>) {
    let field_id = ds.manifest().schema.fields[column].id;
    let stable = ds.manifest().uses_stable_row_ids();
    crate::knn::choose_segments(
        ds,
        &|seg| !stable && is_fts(seg) && seg.fields.first() == Some(&field_id),
        whole_fragments,
    )
}

/// Plans an [`FtsExec`] over Fathom table `t` (version `ds`): the rows
/// matching `search` that pass `filters` (prefilters), best `k` (all
/// without), as `out_schema` (table columns by name, `_score`).
pub(crate) fn plan_fts(
    t: &FathomTable,
    state: &dyn Session,
    ds: Dataset,
    out_schema: SchemaRef,
    filters: &[Expr],
    search: &Search,
    k: Option<usize>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let schema = scan_schema(&ds);
    let filters = unqualified(filters)?;
    let names: Vec<String> = out_schema
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let (read, output_idx) = winner_columns(&ds, &schema, &names)?;
    let addr = schema.index_of(ROW_ADDR)?;
    let prefilter = if filters.is_empty() {
        None
    } else {
        Some(inner_scan(
            t,
            state,
            &ds,
            &schema,
            &|_| true,
            vec![addr],
            &filters,
        )?)
    };
    let mut fields = Vec::with_capacity(search.columns.len());
    let mut flats = Vec::with_capacity(search.columns.len());
    for c in &search.columns {
        let column = ds
            .schema()
            .index_of(&c.column)
            .map_err(|_| DataFusionError::Plan(format!("no text column named '{}'", c.column)))?;
        let (index, segments) =
            fts_segments(&ds, column, crate::knn::whole_fragment_overlays(state)?);
        let mut covered = RoaringBitmap::new();
        for s in &segments {
            covered |= s.fragments.as_ref();
        }
        let uncovered = ds
            .fragments()
            .iter()
            .any(|f| !covered.contains(f.id as u32));
        let flat = if uncovered {
            Some(inner_scan(
                t,
                state,
                &ds,
                &schema,
                &move |f| !covered.contains(f as u32),
                vec![column, addr],
                &[],
            )?)
        } else {
            None
        };
        // Rows whose text an overlay changed since a segment's build: the
        // segment's documents for them are stale (FtsExec leaves them out
        // of its answers and statistics); their current text is tokenized
        // and scored with the flat rows.
        let reeval = overlaid_input(t, state, &ds, &schema, &segments, &[], vec![column, addr])?;
        flats.push(match (flat, reeval) {
            (Some(a), Some(b)) => {
                Some(datafusion::physical_plan::union::UnionExec::try_new(vec![
                    a, b,
                ])?)
            }
            (a, b) => a.or(b),
        });
        fields.push(FtsField {
            column,
            column_name: c.column.clone(),
            boost: c.boost,
            index,
            segments,
        });
    }
    let (max_expansions, prefix_length) = state
        .config_options()
        .extensions
        .get::<crate::knn::FathomOptions>()
        .map_or((fathom_index::fts::search::MAX_EXPANSIONS, 0), |o| {
            (o.fts_max_expansions, o.fts_prefix_length)
        });
    let spec = FtsSpec {
        fields,
        query: search.query.clone(),
        op: search.op,
        k,
        max_expansions,
        prefix_length,
    };
    Ok(Arc::new(FtsExec::new(
        ds,
        spec,
        read,
        output_idx,
        prefilter,
        flats,
        t.index_cache().clone(),
        out_schema,
    )))
}

/// Turns `ORDER BY _score DESC LIMIT k` over `fts(...)` into a top-k
/// search (see the module documentation).
#[derive(Debug, Default)]
pub struct FtsRule;

/// Whether sort key `key` (over `input`) is the `_score` of an fts scan.
fn is_score(key: &Expr, input: &LogicalPlan) -> bool {
    let Expr::Column(c) = key else {
        return false;
    };
    match input {
        LogicalPlan::Projection(p) => {
            let Ok(i) = p.schema.index_of_column(c) else {
                return false;
            };
            let e = p.expr[i].clone().unalias_nested().data;
            is_score(&e, &p.input)
        }
        LogicalPlan::TableScan(s) => {
            c.name == SCORE_COLUMN
                && source_as_provider(&s.source)
                    .is_ok_and(|p| p.downcast_ref::<FtsTable>().is_some())
        }
        _ => false,
    }
}

/// `plan` with its fts scan (under projections only) asking for the best `k`.
fn with_k(plan: &LogicalPlan, k: usize) -> Result<Option<LogicalPlan>> {
    match plan {
        LogicalPlan::Projection(p) => {
            let Some(input) = with_k(&p.input, k)? else {
                return Ok(None);
            };
            Ok(Some(LogicalPlan::Projection(
                LProjection::try_new_with_schema(
                    p.expr.clone(),
                    Arc::new(input),
                    p.schema.clone(),
                )?,
            )))
        }
        LogicalPlan::TableScan(scan) => {
            let Ok(provider) = source_as_provider(&scan.source) else {
                return Ok(None);
            };
            let Some(f) = provider.downcast_ref::<FtsTable>() else {
                return Ok(None);
            };
            if f.k.is_some_and(|old| old <= k) {
                return Ok(None);
            }
            Ok(Some(LogicalPlan::TableScan(TableScan {
                table_name: scan.table_name.clone(),
                source: provider_as_source(Arc::new(f.with_k(k))),
                projection: scan.projection.clone(),
                projected_schema: scan.projected_schema.clone(),
                filters: scan.filters.clone(),
                fetch: scan.fetch,
                statistics_requests: scan.statistics_requests.clone(),
            })))
        }
        _ => Ok(None),
    }
}

impl OptimizerRule for FtsRule {
    fn name(&self) -> &str {
        "fathom_fts"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::TopDown)
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        let LogicalPlan::Sort(sort) = &plan else {
            return Ok(Transformed::no(plan));
        };
        let (Some(k), Some(first)) = (sort.fetch, sort.expr.first()) else {
            return Ok(Transformed::no(plan));
        };
        // Other sort keys would break ties among rows we did not keep.
        if first.asc || sort.expr.len() > 1 || !is_score(&first.expr, &sort.input) {
            return Ok(Transformed::no(plan));
        }
        match with_k(&sort.input, k)? {
            Some(input) => Ok(Transformed::yes(LogicalPlan::Sort(Sort {
                expr: sort.expr.clone(),
                input: Arc::new(input),
                fetch: sort.fetch,
            }))),
            None => Ok(Transformed::no(plan)),
        }
    }
}
