//! Running SQL with Fathom's statements on top of DataFusion's:
//!
//! ```sql
//! CREATE INDEX name ON t [USING BTREE | BITMAP | ZONEMAP] (column);
//! CREATE INDEX name ON t USING IVF_PQ | IVF_FLAT | IVF_SQ (vector_column)
//!     [WITH (metric = 'l2' | 'cosine' | 'dot', num_partitions = 256,
//!            num_sub_vectors = 16, max_iterations = 50, sample_rate = 256)];
//! CREATE INDEX name ON t USING INVERTED (text_column)
//!     [WITH (base_tokenizer = 'simple' | 'whitespace' | 'raw' | 'ngram',
//!            language = 'English', with_position = true, lower_case = true,
//!            stem = true, remove_stop_words = true, ascii_folding = true,
//!            max_token_length = 40, min_ngram_length = 3, max_ngram_length = 3)];
//! CREATE INDEX IF NOT EXISTS name ON t ...;   -- extends an existing index to new fragments
//! DROP INDEX name ON t;
//! REINDEX [INDEX] name ON t;                 -- rebuilds: one new segment over every fragment
//! SHOW INDEXES FROM t;
//! OPTIMIZE t [WITH (target_rows_per_fragment = 1048576, max_rows_per_group = 1024,
//!     materialize_deletions = true, materialize_deletions_threshold = 0.1,
//!     reindex = true, defer_index_remap = false, remap_indexes = false)];
//!     -- compaction (COMPACT t is the same); remap_indexes rewrites the
//!     -- segments with the moved rows' new addresses instead of re-indexing
//! ```
//! Everything else goes to DataFusion unchanged.

use std::sync::Arc;

use arrow_array::{RecordBatch, StringArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionContext;
use datafusion::sql::parser::{DFParser, Statement as DFStatement};
use datafusion::sql::sqlparser::ast::{Expr as SqlExpr, IndexType, ObjectType, Statement};
use fathom_index::fts::FtsParams;
use fathom_index::vector::{VectorKind, VectorParams};
use fathom_index::{
    IndexKind, create_fts_index, create_index, create_vector_index, drop_index, extend_index,
    list_indexes, rebuild_index,
};

use crate::catalog::DirectorySchema;
use crate::provider::FathomTable;
use datafusion::dataframe::DataFrame;
use datafusion::logical_expr::{DdlStatement, LogicalPlan};

fn idx_err(e: fathom_index::Error) -> DataFusionError {
    match e {
        fathom_index::Error::InvalidInput(m) => DataFusionError::Plan(m),
        e => DataFusionError::External(Box::new(e)),
    }
}

async fn fathom_table(
    ctx: &SessionContext,
    name: &str,
) -> Result<Arc<dyn datafusion::datasource::TableProvider>> {
    let t = ctx.table_provider(name).await?;
    if t.downcast_ref::<FathomTable>().is_none() {
        return Err(DataFusionError::Plan(format!(
            "table '{name}' is not a Lance dataset; indexes need one"
        )));
    }
    Ok(t)
}

/// Runs one statement; `None` if it is not one of Fathom's own.
async fn fathom_statement(
    ctx: &SessionContext,
    stmt: &Statement,
) -> Result<Option<Vec<RecordBatch>>> {
    match stmt {
        Statement::CreateIndex(ci) => {
            let name = ci
                .name
                .as_ref()
                .ok_or_else(|| DataFusionError::Plan("CREATE INDEX needs a name".into()))?
                .to_string();
            let table = ci.table_name.to_string();
            let [col] = ci.columns.as_slice() else {
                return Err(DataFusionError::Plan(format!(
                    "an index is on one column; CREATE INDEX {name} lists {}",
                    ci.columns.len()
                )));
            };
            let column = match &col.column.expr {
                SqlExpr::Identifier(id) => id.value.clone(),
                other => {
                    return Err(DataFusionError::Plan(format!(
                        "cannot index the expression {other}; name a column"
                    )));
                }
            };
            let using = match &ci.using {
                None => None,
                Some(IndexType::Custom(id)) => Some(id.value.clone()),
                Some(other) => Some(other.to_string()),
            };
            let options = with_options(&ci.with)?;
            let vector = using.as_deref().and_then(VectorKind::parse);
            let fts = using.as_deref().is_some_and(|u| {
                ["INVERTED", "FTS", "FULLTEXT"].contains(&u.to_ascii_uppercase().as_str())
            });
            let kind = match (&using, vector) {
                (_, Some(_)) => IndexKind::BTREE,
                _ if fts => IndexKind::BTREE,
                (None, None) => IndexKind::BTREE,
                (Some(u), None) => IndexKind::parse(u).map_err(idx_err)?,
            };
            if vector.is_none() && !fts && !options.is_empty() {
                return Err(DataFusionError::Plan(format!(
                    "a {kind} index takes no options (WITH ({}))",
                    options
                        .iter()
                        .map(|(k, _)| k.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            let provider = fathom_table(ctx, &table).await?;
            let t = provider.downcast_ref::<FathomTable>().unwrap();
            if t.is_pinned() {
                return Err(DataFusionError::Plan(format!(
                    "table '{table}' is pinned to an old version; indexes need the latest"
                )));
            }
            let ds = t.latest().await?;
            let exists = ds.manifest().indices.iter().any(|i| i.name == name);
            let new = if exists && ci.if_not_exists {
                extend_index(&ds, &name).await.map_err(idx_err)?
            } else if fts {
                let params = FtsParams::from_options(&options).map_err(idx_err)?;
                let progress = ctx.state().config().get_extension::<BuildProgress>();
                create_fts_index(
                    &ds,
                    &name,
                    &column,
                    params,
                    progress.as_ref().map(|p| &*p.0),
                )
                .await
                .map_err(idx_err)?
            } else if let Some(v) = vector {
                let params = VectorParams::from_options(v, &options).map_err(idx_err)?;
                let progress = ctx.state().config().get_extension::<BuildProgress>();
                create_vector_index(
                    &ds,
                    &name,
                    &column,
                    params,
                    progress.as_ref().map(|p| &*p.0),
                )
                .await
                .map_err(idx_err)?
            } else {
                create_index(&ds, &name, &column, kind)
                    .await
                    .map_err(idx_err)?
            };
            t.set_dataset(new);
            Ok(Some(vec![]))
        }
        Statement::Drop {
            object_type: ObjectType::Index,
            names,
            table,
            if_exists,
            ..
        } => {
            let table = table
                .as_ref()
                .ok_or_else(|| DataFusionError::Plan("use DROP INDEX name ON table".into()))?
                .to_string();
            let provider = fathom_table(ctx, &table).await?;
            let t = provider.downcast_ref::<FathomTable>().unwrap();
            let mut ds = t.latest().await?;
            for n in names {
                let n = n.to_string();
                if *if_exists && !ds.manifest().indices.iter().any(|i| i.name == n) {
                    continue;
                }
                ds = drop_index(&ds, &n).await.map_err(idx_err)?;
            }
            t.set_dataset(ds);
            Ok(Some(vec![]))
        }
        _ => Ok(None),
    }
}

/// Hears of the phases of long index builds (`CREATE INDEX` of a vector
/// index: sampling, training, encoding, writing) with rows done and the
/// total. Set it on a session with
/// `ctx.state_ref().write().config_mut().set_extension(Arc::new(BuildProgress(..)))`;
/// the CLI shows it as a progress bar.
pub struct BuildProgress(pub Arc<fathom_index::vector::ProgressFn>);

/// `WITH (name = value, ...)` of CREATE INDEX as (name, value) pairs;
/// values are numbers, strings or identifiers.
fn with_options(with: &[SqlExpr]) -> Result<Vec<(String, String)>> {
    use datafusion::sql::sqlparser::ast::{BinaryOperator, Value};
    with.iter()
        .map(|e| match e {
            SqlExpr::BinaryOp {
                left,
                op: BinaryOperator::Eq,
                right,
            } => {
                let key = match left.as_ref() {
                    SqlExpr::Identifier(id) => id.value.clone(),
                    other => other.to_string(),
                };
                let value = match right.as_ref() {
                    SqlExpr::Value(v) => match &v.value {
                        Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
                        other => other.to_string(),
                    },
                    SqlExpr::Identifier(id) => id.value.clone(),
                    other => other.to_string(),
                };
                Ok((key, value))
            }
            other => Err(DataFusionError::Plan(format!(
                "index options are written name = value; got {other}"
            ))),
        })
        .collect()
}

/// The indexes of a table as rows (name, kind, column, segments, covered
/// and uncovered fragment counts).
pub async fn indexes_batch(ctx: &SessionContext, table: &str) -> Result<RecordBatch> {
    let provider = fathom_table(ctx, table).await?;
    let ds = provider
        .downcast_ref::<FathomTable>()
        .unwrap()
        .latest()
        .await?;
    let infos = list_indexes(&ds);
    let schema = Arc::new(Schema::new(vec![
        Field::new("index", DataType::Utf8, false),
        Field::new("type", DataType::Utf8, false),
        Field::new("column", DataType::Utf8, false),
        Field::new("segments", DataType::UInt64, false),
        Field::new("covered_fragments", DataType::UInt64, false),
        Field::new("uncovered_fragments", DataType::UInt64, false),
    ]));
    Ok(RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from_iter_values(
                infos.iter().map(|i| i.name.as_str()),
            )),
            Arc::new(StringArray::from_iter_values(
                infos.iter().map(|i| i.kind.as_str()),
            )),
            Arc::new(StringArray::from_iter_values(
                infos.iter().map(|i| i.column.as_str()),
            )),
            Arc::new(UInt64Array::from_iter_values(
                infos.iter().map(|i| i.segments as u64),
            )),
            Arc::new(UInt64Array::from_iter_values(
                infos.iter().map(|i| i.covered_fragments.len() as u64),
            )),
            Arc::new(UInt64Array::from_iter_values(
                infos.iter().map(|i| i.uncovered_fragments.len() as u64),
            )),
        ],
    )?)
}

/// One row describing what a compaction did.
fn compaction_batch(r: &fathom_index::CompactionReport) -> Result<RecordBatch> {
    let m = &r.metrics;
    let counts = [
        ("fragments_removed", m.fragments_removed),
        ("fragments_added", m.fragments_added),
        ("files_removed", m.files_removed),
        ("files_added", m.files_added),
        ("rows_rewritten", m.rows_rewritten),
        ("deleted_rows_dropped", m.deleted_rows_dropped),
    ];
    let mut fields: Vec<Field> = counts
        .iter()
        .map(|(n, _)| Field::new(*n, DataType::UInt64, false))
        .collect();
    fields.push(Field::new("remapped", DataType::Utf8, false));
    fields.push(Field::new("reindexed", DataType::Utf8, false));
    fields.push(Field::new("not_reindexed", DataType::Utf8, false));
    let mut columns: Vec<arrow_array::ArrayRef> = counts
        .iter()
        .map(|(_, v)| Arc::new(UInt64Array::from(vec![*v])) as _)
        .collect();
    columns.push(Arc::new(StringArray::from(vec![r.remapped.join(", ")])));
    columns.push(Arc::new(StringArray::from(vec![r.reindexed.join(", ")])));
    let not: Vec<String> = r
        .not_reindexed
        .iter()
        .map(|(n, why)| format!("{n}: {why}"))
        .collect();
    columns.push(Arc::new(StringArray::from(vec![not.join("; ")])));
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

/// A statement's result: its schema (empty for DDL) and rows.
pub type Output = (arrow_schema::SchemaRef, Vec<RecordBatch>);

/// Whole-text statements sqlparser does not know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Special {
    /// `SHOW INDEXES FROM t` (or `SHOW INDEX ON t`).
    ShowIndexes { table: String },
    /// `REINDEX [INDEX] name ON t`.
    Reindex { index: String, table: String },
    /// `OPTIMIZE [TABLE] t [WITH (k = v, ...)]` or `COMPACT [TABLE] t ...`.
    Compact {
        table: String,
        options: Vec<(String, String)>,
    },
}

/// `OPTIMIZE|COMPACT [TABLE] t [WITH (k = v, ...)]`.
fn compact_statement(sql: &str) -> Option<Special> {
    let text = sql.trim().trim_end_matches(';').trim();
    let lower = text.to_ascii_lowercase();
    let with_at = lower.match_indices(" with").map(|(i, _)| i).find(|&i| {
        lower[i + 5..]
            .chars()
            .next()
            .is_some_and(|c| c == '(' || c.is_whitespace())
    });
    let (head, with) = match with_at {
        Some(i) => (&text[..i], Some(text[i + 5..].trim())),
        None => (text, None),
    };
    let words: Vec<&str> = head.split_whitespace().collect();
    let is = |w: &str, k: &str| w.eq_ignore_ascii_case(k);
    let table = match words.as_slice() {
        [verb, t] if is(verb, "optimize") || is(verb, "compact") => t,
        [verb, kw, t] if (is(verb, "optimize") || is(verb, "compact")) && is(kw, "table") => t,
        _ => return None,
    };
    let mut options = Vec::new();
    if let Some(w) = with {
        let inner = w.strip_prefix('(')?.strip_suffix(')')?;
        for kv in inner.split(',').filter(|kv| !kv.trim().is_empty()) {
            let (k, v) = kv.split_once('=')?;
            let v = v.trim().trim_matches('\'').trim_matches('"');
            options.push((k.trim().to_ascii_lowercase(), v.to_string()));
        }
    }
    Some(Special::Compact {
        table: table.to_string(),
        options,
    })
}

/// Recognizes Fathom's whole-text statements.
pub fn special(sql: &str) -> Option<Special> {
    let words: Vec<&str> = sql
        .trim()
        .trim_end_matches(';')
        .split_whitespace()
        .collect();
    let is = |w: &str, k: &str| w.eq_ignore_ascii_case(k);
    match words.as_slice() {
        [show, idx, from, table]
            if is(show, "show")
                && (is(idx, "indexes") || is(idx, "index"))
                && (is(from, "from") || is(from, "on")) =>
        {
            Some(Special::ShowIndexes {
                table: table.to_string(),
            })
        }
        [re, name, on, table] | [re, _, name, on, table]
            if is(re, "reindex") && is(on, "on") && (words.len() == 4 || is(words[1], "index")) =>
        {
            Some(Special::Reindex {
                index: name.to_string(),
                table: table.to_string(),
            })
        }
        _ => compact_statement(sql),
    }
}

async fn run_special(ctx: &SessionContext, s: Special) -> Result<Output> {
    match s {
        Special::ShowIndexes { table } => {
            let b = indexes_batch(ctx, &table).await?;
            Ok((b.schema(), vec![b]))
        }
        Special::Reindex { index, table } => {
            let provider = fathom_table(ctx, &table).await?;
            let t = provider.downcast_ref::<FathomTable>().unwrap();
            if t.is_pinned() {
                return Err(DataFusionError::Plan(format!(
                    "table '{table}' is pinned to an old version; indexes need the latest"
                )));
            }
            let ds = t.latest().await?;
            t.set_dataset(rebuild_index(&ds, &index).await.map_err(idx_err)?);
            Ok((Arc::new(Schema::empty()), vec![]))
        }
        Special::Compact { table, options } => {
            let provider = fathom_table(ctx, &table).await?;
            let t = provider.downcast_ref::<FathomTable>().unwrap();
            if t.is_pinned() {
                return Err(DataFusionError::Plan(format!(
                    "table '{table}' is pinned to an old version; compaction needs the latest"
                )));
            }
            let mut opts = fathom_table::CompactionOptions::default();
            let mut reindex = true;
            for (k, v) in &options {
                if k == "reindex" {
                    reindex = v.to_ascii_lowercase().parse().map_err(|_| {
                        DataFusionError::Plan(format!(
                            "compaction option reindex = '{v}': expected true or false"
                        ))
                    })?;
                } else {
                    opts.set(k, v)
                        .map_err(|e| DataFusionError::Plan(e.to_string()))?;
                }
            }
            let ds = t.latest().await?;
            let progress = ctx.state().config().get_extension::<BuildProgress>();
            let (ds, report) =
                fathom_index::compact(&ds, &opts, reindex, progress.as_ref().map(|p| &*p.0))
                    .await
                    .map_err(idx_err)?;
            t.set_dataset(ds);
            let b = compaction_batch(&report)?;
            Ok((b.schema(), vec![b]))
        }
    }
}

/// Runs every statement of `sql`; returns each statement's result.
pub async fn run_sql(ctx: &SessionContext, sql: &str) -> Result<Vec<Output>> {
    if let Some(s) = special(sql) {
        return Ok(vec![run_special(ctx, s).await?]);
    }
    let mut out = Vec::new();
    for stmt in DFParser::parse_sql(sql)? {
        out.push(run_statement(ctx, stmt).await?);
    }
    Ok(out)
}

/// Runs one parsed statement.
pub async fn run_statement(ctx: &SessionContext, stmt: DFStatement) -> Result<Output> {
    let insert_target = match &stmt {
        DFStatement::Statement(s) => match s.as_ref() {
            Statement::Insert(ins) => Some(ins.table.to_string()),
            _ => None,
        },
        _ => None,
    };
    match run_statement_inner(ctx, stmt).await {
        Err(e) if insert_target.is_some() => {
            let name = insert_target.unwrap();
            match ctx.table_provider(name.as_str()).await {
                Ok(t) => Err(name_values_column(e, &t.schema())),
                Err(_) => Err(e),
            }
        }
        r => r,
    }
}

async fn run_statement_inner(ctx: &SessionContext, stmt: DFStatement) -> Result<Output> {
    if let DFStatement::Statement(s) = &stmt
        && let Some(r) = fathom_statement(ctx, s).await?
    {
        return Ok((Arc::new(Schema::empty()), r));
    }
    let plan = ctx.state().statement_to_plan(stmt).await?;
    if let Some(out) = directory_ddl(ctx, &plan).await? {
        return Ok(out);
    }
    let df = ctx.execute_logical_plan(plan).await?;
    let schema = Arc::new(df.schema().as_arrow().clone());
    Ok((schema, df.collect().await?))
}

/// The directory schema a table reference resolves to, if it is one.
fn directory_schema(
    ctx: &SessionContext,
    name: &datafusion::common::TableReference,
) -> Option<Arc<dyn datafusion::catalog::SchemaProvider>> {
    let state = ctx.state();
    let resolved = name.clone().resolve(
        &state.config_options().catalog.default_catalog,
        &state.config_options().catalog.default_schema,
    );
    let schema = ctx.catalog(&resolved.catalog)?.schema(&resolved.schema)?;
    schema.downcast_ref::<DirectorySchema>()?;
    Some(schema)
}

/// `CREATE [OR REPLACE] TABLE ... [AS query]` into a data directory: the
/// query streams into a new dataset, or into one overwrite commit of the
/// existing one (never drop-then-create: a failing query must leave the
/// table as it was, and history stays). `None` for anything else.
async fn directory_ddl(ctx: &SessionContext, plan: &LogicalPlan) -> Result<Option<Output>> {
    let LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(cmt)) = plan else {
        return Ok(None);
    };
    let Some(schema) = directory_schema(ctx, &cmt.name) else {
        return Ok(None);
    };
    let dir = schema.downcast_ref::<DirectorySchema>().unwrap();
    let name = cmt.name.table();
    DirectorySchema::check_name(name)?;
    let exists = schema.table_exist(name);
    let empty: Output = (Arc::new(Schema::empty()), vec![]);
    if exists && cmt.if_not_exists {
        return Ok(Some(empty));
    }
    if exists && !cmt.or_replace {
        return Err(DataFusionError::Plan(format!(
            "table '{name}' already exists"
        )));
    }
    if cmt.temporary {
        return Err(DataFusionError::NotImplemented(
            "temporary tables are not supported in a data directory".into(),
        ));
    }
    let input = ctx.state().optimize(cmt.input.as_ref())?;
    let df = DataFrame::new(ctx.state(), input);
    let arrow_schema: arrow_schema::SchemaRef = Arc::new(df.schema().as_arrow().clone());
    let stream = df.execute_stream().await?;
    dir.write_table(name, arrow_schema, stream, cmt.or_replace)
        .await?;
    Ok(Some(empty))
}

/// DataFusion plans `INSERT ... VALUES` with positional names (`column1`,
/// ...) and its values check then reports a NULL in a NOT NULL column by
/// that name; say which column of the table it is.
pub(crate) fn name_values_column(
    e: DataFusionError,
    table: &arrow_schema::Schema,
) -> DataFusionError {
    let msg = e.to_string();
    let Some(rest) = msg.split("Column 'column").nth(1) else {
        return e;
    };
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    match digits.parse::<usize>() {
        Ok(n) if n >= 1 && n <= table.fields().len() && msg.contains("non-nullable") => {
            DataFusionError::Execution(format!(
                "column '{}' is NOT NULL but the inserted rows have NULL in it",
                table.field(n - 1).name()
            ))
        }
        _ => e,
    }
}
