//! `FathomTable`: a dataset as a DataFusion table. `scan()` converts the
//! request and delegates: `plan::plan_scan` builds the plan value,
//! `plan::lower` turns it into execution nodes.

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};

use arrow_schema::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DFSchema, Statistics};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::ExprSchemable;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::utils::split_conjunction_owned;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::optimizer::simplify_expressions::ExprSimplifier;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::ExecutionPlan;
use fathom_table::{Dataset, ROW_ADDR, ROW_ID};

use crate::error::to_df;
use crate::exec::dml::{DmlExec, DmlKind};
use crate::plan::{LowerContext, MIN_ROWS_PER_PARTITION, ScanRequest, Snapshot, lower, plan_scan};

/// The dataset behind a table, refreshed to the latest version unless
/// pinned to one (time travel).
#[derive(Debug)]
pub struct TableState {
    dataset: RwLock<Dataset>,
    pinned: bool,
}

impl TableState {
    /// `dataset`, refreshed to the latest version unless `pinned`.
    pub fn new(dataset: Dataset, pinned: bool) -> Self {
        TableState {
            dataset: RwLock::new(dataset),
            pinned,
        }
    }

    /// Whether the table reads one version only (time travel).
    pub fn pinned(&self) -> bool {
        self.pinned
    }

    /// The version queries should read: the latest, unless pinned.
    pub async fn latest(&self) -> Result<Dataset> {
        let current = self.dataset.read().unwrap().clone();
        if self.pinned {
            return Ok(current);
        }
        let latest = current.checkout_latest().await.map_err(to_df)?;
        if latest.version() != current.version() {
            *self.dataset.write().unwrap() = latest.clone();
        }
        Ok(latest)
    }

    pub fn set(&self, ds: Dataset) {
        *self.dataset.write().unwrap() = ds;
    }

    pub fn current(&self) -> Dataset {
        self.dataset.read().unwrap().clone()
    }
}

/// Options of a registered table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableOptions {
    /// Expose `_rowid` (UInt64) as a column.
    pub with_row_id: bool,
    /// Expose `_rowaddr` (UInt64) as a column.
    pub with_row_addr: bool,
    /// Fewest rows a scan partition gets (default 32,768).
    pub min_rows_per_partition: u64,
    /// Skip zones whose statistics rule the filter out (default true).
    pub zone_pruning: bool,
}

impl Default for TableOptions {
    fn default() -> Self {
        TableOptions {
            with_row_id: false,
            with_row_addr: false,
            min_rows_per_partition: MIN_ROWS_PER_PARTITION,
            zone_pruning: true,
        }
    }
}

/// A Lance dataset as a DataFusion table.
#[derive(Debug)]
pub struct FathomTable {
    state: Arc<TableState>,
    schema: SchemaRef,
    options: TableOptions,
    /// Loaded index parts, shared by the queries on this table.
    index_cache: Arc<fathom_index::IndexCache>,
}

impl FathomTable {
    /// A table that follows the dataset's latest version.
    pub fn new(dataset: Dataset, options: TableOptions) -> Self {
        Self::build(dataset, options, false)
    }

    /// A table fixed at this dataset version (read-only).
    pub fn pinned(dataset: Dataset, options: TableOptions) -> Self {
        Self::build(dataset, options, true)
    }

    fn build(dataset: Dataset, options: TableOptions, pinned: bool) -> Self {
        let mut fields: Vec<Field> = dataset
            .schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        // Nullable so that INSERT can fill them with NULL; they are never null when read.
        if options.with_row_id {
            fields.push(Field::new(ROW_ID, DataType::UInt64, true));
        }
        if options.with_row_addr {
            fields.push(Field::new(ROW_ADDR, DataType::UInt64, true));
        }
        let schema = Arc::new(Schema::new_with_metadata(
            fields,
            dataset.schema().metadata().clone(),
        ));
        FathomTable {
            state: Arc::new(TableState::new(dataset, pinned)),
            schema,
            options,
            index_cache: Arc::new(fathom_index::IndexCache::default()),
        }
    }

    /// How the table scans.
    pub fn options(&self) -> &TableOptions {
        &self.options
    }

    /// The table's index cache.
    pub fn index_cache(&self) -> &Arc<fathom_index::IndexCache> {
        &self.index_cache
    }

    /// Replaces the dataset version the table reads (after an index change).
    pub fn set_dataset(&self, ds: Dataset) {
        self.state.set(ds)
    }

    /// The latest version (or the pinned one).
    pub async fn latest(&self) -> Result<Dataset> {
        self.state.latest().await
    }

    /// The dataset version last seen.
    pub fn dataset(&self) -> Dataset {
        self.state.current()
    }

    pub fn is_pinned(&self) -> bool {
        self.state.pinned
    }

    /// Fails if the dataset's columns changed since registration.
    fn check_schema(&self, ds: &Dataset) -> Result<()> {
        if ds.schema().fields().len() + self.virtual_names().len() != self.schema.fields().len() {
            return Err(DataFusionError::Plan(format!(
                "the schema of {} changed since the table was registered; register it again",
                ds.uri()
            )));
        }
        Ok(())
    }

    fn virtual_names(&self) -> Vec<&'static str> {
        let mut v = vec![];
        if self.options.with_row_id {
            v.push(ROW_ID);
        }
        if self.options.with_row_addr {
            v.push(ROW_ADDR);
        }
        v
    }

    /// Indices (into this table's schema) of the columns `e` references.
    /// Plans and lowers a scan of `ds` (see `plan`).
    fn plan_exec(
        &self,
        state: &dyn Session,
        ds: &Dataset,
        output: Vec<usize>,
        filters: Vec<Expr>,
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.plan_on(state, ds, &self.schema, output, filters, limit)
    }

    /// `plan_exec` over `table_schema`: the table's schema, or it with
    /// `_rowaddr` added.
    fn plan_on(
        &self,
        state: &dyn Session,
        ds: &Dataset,
        table_schema: &SchemaRef,
        output: Vec<usize>,
        filters: Vec<Expr>,
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let request = ScanRequest {
            output,
            filters: filters
                .into_iter()
                .map(strip_qualifiers)
                .collect::<Result<_>>()?,
            limit,
            target_partitions: state.config().target_partitions(),
            min_rows_per_partition: self.options.min_rows_per_partition,
            zone_pruning: self.options.zone_pruning,
            whole_fragment_overlays: crate::knn::whole_fragment_overlays(state)?,
        };
        let snapshot = Snapshot {
            manifest: ds.manifest(),
            facts: ds.facts(),
            schema: ds.schema(),
            table_schema,
        };
        let plan = plan_scan(snapshot, &request)?;
        lower(
            &plan,
            &LowerContext {
                session: state,
                dataset: ds,
                table_schema,
                cache: &self.index_cache,
            },
        )
    }

    /// The number of rows matching `filter`, a SQL boolean expression
    /// over the table's columns (`None`: every row), as
    /// `SELECT count(*) FROM t WHERE filter` returns it, without SQL
    /// planning: the filter is parsed, coerced and simplified as
    /// DataFusion does, planned like a scan, and counted like
    /// `IndexCountRule` counts (index branches from row sets, flat ones by
    /// scanning). The peer of pylance's `count_rows(filter)`, for callers
    /// to whom DataFusion's ~1 ms of SQL planning matters.
    pub async fn count_rows(&self, ctx: &SessionContext, filter: Option<&str>) -> Result<u64> {
        let ds = self.state.latest().await?;
        self.check_schema(&ds)?;
        let Some(filter) = filter.map(str::trim).filter(|f| !f.is_empty()) else {
            return Ok(ds.count_rows());
        };
        let state = ctx.state();
        let df_schema = Arc::new(DFSchema::try_from(self.schema.as_ref().clone())?);
        let expr = state.create_logical_expr(filter, &df_schema)?;
        let simplifier = ExprSimplifier::new(
            SimplifyContext::builder()
                .with_schema(df_schema.clone())
                .build(),
        );
        let expr = simplifier.simplify(simplifier.coerce(expr, &df_schema)?)?;
        let dt = expr.to_field(&df_schema)?.1.data_type().clone();
        if dt != DataType::Boolean {
            return Err(DataFusionError::Plan(format!(
                "count_rows filter '{filter}' is of type {dt}, not a boolean"
            )));
        }
        if expr.is_volatile() {
            return Err(DataFusionError::Plan(format!(
                "count_rows filter '{filter}' is volatile"
            )));
        }
        let filters = split_conjunction_owned(expr);
        let exec = self.plan_exec(&state, &ds, vec![], filters, None)?;
        crate::count_rule::count_plan(exec, state.task_ctx()).await
    }

    fn columns_of(&self, e: &Expr) -> Result<BTreeSet<usize>> {
        crate::plan::columns_of(&self.schema, e)
    }

    /// The rows a DELETE or UPDATE changes: a scan of `ds` planned like a
    /// query's (indexes, zone pruning, partitions over the cores) with
    /// `filters` pushed in, outputting `columns` (into this table's
    /// schema) and then `_rowaddr`, the address the commit names.
    async fn dml_input(
        &self,
        state: &dyn Session,
        ds: &Dataset,
        columns: BTreeSet<usize>,
        filters: Vec<Expr>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.check_schema(ds)?;
        for f in &filters {
            self.columns_of(f)?;
        }
        // The table's schema with `_rowaddr` (never null when read: the
        // index and flat branches then agree, and no cast joins them).
        let mut fields: Vec<Field> = self
            .schema
            .fields()
            .iter()
            .filter(|f| f.name() != ROW_ADDR)
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new(ROW_ADDR, DataType::UInt64, false));
        let schema = Arc::new(Schema::new_with_metadata(
            fields,
            self.schema.metadata().clone(),
        ));
        let mut output: Vec<usize> = columns.into_iter().collect();
        output.push(schema.index_of(ROW_ADDR)?);
        let filters = crate::fts::bind_text_match(ds, &self.index_cache, &filters).await?;
        self.plan_on(state, ds, &schema, output, filters, None)
    }

    fn check_writable(&self, what: &str) -> Result<()> {
        if self.state.pinned {
            return Err(DataFusionError::Plan(format!(
                "{what} on a table pinned to version {} (time travel) is not allowed; use the latest version",
                self.state.current().version()
            )));
        }
        Ok(())
    }
}

/// Removes table qualifiers: the read schema is unqualified.
pub(crate) fn strip_qualifiers(e: Expr) -> Result<Expr> {
    Ok(e.transform(|e| match e {
        Expr::Column(c) => Ok(Transformed::yes(Expr::Column(Column::new_unqualified(
            c.name,
        )))),
        other => Ok(Transformed::no(other)),
    })?
    .data)
}

#[async_trait]
impl TableProvider for FathomTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        // The scan evaluates pushed filters with DataFusion's own physical
        // expressions on every row it returns, so they are exact.
        Ok(filters
            .iter()
            .map(|f| {
                if f.is_volatile() || self.columns_of(f).is_err() {
                    TableProviderFilterPushDown::Unsupported
                } else {
                    TableProviderFilterPushDown::Exact
                }
            })
            .collect())
    }

    fn statistics(&self) -> Option<Statistics> {
        let mut s = Statistics::new_unknown(&self.schema);
        s.num_rows = datafusion::common::stats::Precision::Inexact(
            self.state.current().count_rows() as usize,
        );
        Some(s)
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let ds = self.state.latest().await?;
        self.check_schema(&ds)?;
        let output = projection
            .cloned()
            .unwrap_or_else(|| (0..self.schema.fields().len()).collect());
        let filters = crate::fts::bind_text_match(&ds, &self.index_cache, filters).await?;
        // A text_match the other filters are ANDed with: an index search.
        if let Some((i, search)) = crate::fts::routed_match(&ds, &filters) {
            let mut rest = filters;
            rest.remove(i);
            let out_schema = Arc::new(self.schema.project(&output)?);
            return crate::fts::plan_fts(self, state, ds, out_schema, &rest, &search, limit);
        }
        self.plan_exec(state, &ds, output, filters, limit)
    }

    async fn insert_into(
        &self,
        _state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        op: InsertOp,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.check_writable("INSERT")?;
        let overwrite = match op {
            InsertOp::Append => false,
            InsertOp::Overwrite => true,
            InsertOp::Replace => {
                return Err(DataFusionError::NotImplemented(
                    "REPLACE INTO is not supported".into(),
                ));
            }
        };
        Ok(Arc::new(DmlExec::new(
            self.state.clone(),
            self.state.current(),
            DmlKind::Insert { input, overwrite },
        )))
    }

    async fn delete_from(
        &self,
        state: &dyn Session,
        filters: Vec<Expr>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.check_writable("DELETE")?;
        let ds = self.state.latest().await?;
        let input = self.dml_input(state, &ds, BTreeSet::new(), filters).await?;
        Ok(Arc::new(DmlExec::new(
            self.state.clone(),
            ds,
            DmlKind::Delete { input },
        )))
    }

    async fn update(
        &self,
        state: &dyn Session,
        assignments: Vec<(String, Expr)>,
        filters: Vec<Expr>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.check_writable("UPDATE")?;
        let ds = self.state.latest().await?;
        let n = ds.schema().fields().len();
        let mode = state
            .config_options()
            .extensions
            .get::<crate::knn::FathomOptions>()
            .map_or(Ok(None), |o| {
                crate::exec::dml::parse_update_mode(&o.update_mode)
            })?;
        let mut needed: BTreeSet<usize> = BTreeSet::new();
        for (_, e) in &assignments {
            needed.extend(self.columns_of(e)?);
        }
        let input = self.dml_input(state, &ds, needed, filters).await?;
        let df_schema = DFSchema::try_from(input.schema().as_ref().clone())?;
        let mut per_column: Vec<Option<Arc<dyn PhysicalExpr>>> = vec![None; n];
        for (name, e) in assignments {
            let i = ds.schema().index_of(&name).map_err(|_| {
                DataFusionError::Plan(format!(
                    "UPDATE sets '{name}', which is not a column of the table"
                ))
            })?;
            per_column[i] = Some(state.create_physical_expr(strip_qualifiers(e)?, &df_schema)?);
        }
        Ok(Arc::new(DmlExec::new(
            self.state.clone(),
            ds,
            DmlKind::Update {
                input,
                assignments: per_column,
                mode,
            },
        )))
    }
}
