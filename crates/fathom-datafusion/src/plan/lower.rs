//! Lowering a [`ScanPlan`] to execution nodes.
//!
//! ```text
//! Flat  : FragmentScanExec (filter, zone pruning, late read, limit)
//! Index : ScalarIndexExec ─► ExclusionExec ─► [TakeExec narrow + recheck] ─► TakeExec ─► ProjectionExec
//! Reeval: OverlaidRowsExec ─► ExclusionExec ─► [TakeExec narrow + recheck] ─► TakeExec ─► ProjectionExec
//! Merge : UnionExec of the branches
//! ```

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow_schema::{Schema, SchemaRef};
use datafusion::catalog::Session;
use datafusion::common::DFSchema;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::Expr;
use datafusion::logical_expr::utils::conjunction;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Column as PhysColumn;
use datafusion::physical_expr::projection::ProjectionExpr;
use datafusion::physical_optimizer::pruning::PruningPredicateBuilder;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::union::UnionExec;
use fathom_index::IndexCache;
use fathom_table::scan::Projection;
use fathom_table::{Dataset, ROW_ADDR, ROW_ID};

use super::{Branch, ExclusionSource, FlatBranch, IndexBranch, Merge, Recheck, ScanPlan};
use crate::exec::exclusion::ExclusionExec;
use crate::exec::index_scan::ScalarIndexExec;
use crate::exec::overlaid::OverlaidRowsExec;
use crate::exec::scan::FragmentScanExec;
use crate::exec::take::TakeExec;

/// What lowering needs besides the plan.
pub struct LowerContext<'a> {
    pub session: &'a dyn Session,
    pub dataset: &'a Dataset,
    /// The table's schema (the dataset's columns, then virtual ones).
    pub table_schema: &'a SchemaRef,
    pub cache: &'a Arc<IndexCache>,
}

impl LowerContext<'_> {
    /// What the reader produces for table columns `columns`.
    pub fn projection(&self, columns: &BTreeSet<usize>) -> Result<Projection> {
        projection_of(self.dataset, self.table_schema, columns)
    }

    /// `filters` as one physical predicate over `schema`.
    pub fn predicate(
        &self,
        filters: &[Expr],
        schema: &Schema,
    ) -> Result<Option<Arc<dyn PhysicalExpr>>> {
        let Some(expr) = conjunction(filters.iter().cloned()) else {
            return Ok(None);
        };
        let df_schema = DFSchema::try_from(schema.clone())?;
        Ok(Some(self.session.create_physical_expr(expr, &df_schema)?))
    }

    fn schema_of(&self, p: &Projection) -> SchemaRef {
        p.schema(self.dataset.schema())
    }
}

/// What the reader of `dataset` produces for columns `columns` of a table
/// whose schema is `table_schema` (the dataset's columns, then virtual ones).
pub fn projection_of(
    dataset: &Dataset,
    table_schema: &Schema,
    columns: &BTreeSet<usize>,
) -> Result<Projection> {
    let n = dataset.schema().fields().len();
    let mut p = Projection {
        fields: vec![],
        with_row_id: false,
        with_row_addr: false,
    };
    for &c in columns {
        if c < n {
            p.fields.push(c);
        } else {
            match table_schema.field(c).name().as_str() {
                ROW_ID => p.with_row_id = true,
                ROW_ADDR => p.with_row_addr = true,
                other => {
                    return Err(DataFusionError::Internal(format!(
                        "column {other} is neither stored nor virtual"
                    )));
                }
            }
        }
    }
    Ok(p)
}

/// Turns `plan` into execution nodes.
pub fn lower(plan: &ScanPlan, ctx: &LowerContext<'_>) -> Result<Arc<dyn ExecutionPlan>> {
    let out_schema = Arc::new(ctx.table_schema.project(&plan.output)?);
    let mut nodes = Vec::with_capacity(plan.branches.len());
    for (i, b) in plan.branches.iter().enumerate() {
        // Skipped segments are counted once, on the first branch.
        let skipped = if i == 0 { plan.skipped.len() } else { 0 };
        nodes.push(match b {
            Branch::Flat(f) => lower_flat(f, &plan.output, &out_schema, skipped, ctx)?,
            Branch::Index(x) => lower_index(x, &plan.output, skipped, ctx)?,
            Branch::Reeval(r) => {
                let rows = Arc::new(OverlaidRowsExec::new(
                    r.rows.clone(),
                    ctx.session.config().batch_size(),
                ));
                let tail = Tail {
                    exclusions: &r.exclusions,
                    recheck: r.recheck.as_ref(),
                    take: &r.take,
                    limit: None,
                };
                lower_rows(rows, tail, &plan.output, ctx)?
            }
        });
    }
    match plan.merge {
        Merge::Union if nodes.len() == 1 => Ok(nodes.pop().unwrap()),
        Merge::Union => UnionExec::try_new(nodes),
    }
}

fn lower_flat(
    b: &FlatBranch,
    output: &[usize],
    out_schema: &SchemaRef,
    skipped: usize,
    ctx: &LowerContext<'_>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let read = ctx.projection(&b.read)?;
    let read_schema = ctx.schema_of(&read);
    // Read batches hold the read columns in ascending table order.
    let order: Vec<usize> = b.read.iter().copied().collect();
    let output_idx: Vec<usize> = output
        .iter()
        .map(|c| order.iter().position(|o| o == c).unwrap())
        .collect();
    let filter = ctx.predicate(&b.filters, &read_schema)?;
    let mut exec = FragmentScanExec::new(
        ctx.dataset.clone(),
        b.partitions.clone(),
        read,
        output_idx,
        filter,
        b.limit,
        out_schema.clone(),
        ctx.session.config().batch_size(),
    )
    .with_skipped_segments(skipped)
    .with_index_cache(ctx.cache.clone());
    if b.zone_pruning
        && let Some(f) = ctx.predicate(&b.filters, ctx.dataset.schema())?
        && let Some(p) = PruningPredicateBuilder::new()
            .with_file_schema(ctx.dataset.schema().clone())
            .build(f)
    {
        exec = exec.with_pruning(p);
    }
    if let Some(first) = &b.read_first {
        let cols = ctx.projection(first)?;
        if let Some(f) = ctx.predicate(&b.filters, &ctx.schema_of(&cols))? {
            exec = exec.with_prefilter(cols, f);
        }
    }
    Ok(Arc::new(exec))
}

fn lower_index(
    b: &IndexBranch,
    output: &[usize],
    skipped: usize,
    ctx: &LowerContext<'_>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let search: Arc<dyn ExecutionPlan> = Arc::new(
        ScalarIndexExec::new(
            ctx.dataset.clone(),
            b.expr.clone(),
            b.exactness,
            ctx.cache.clone(),
            ctx.session.config().batch_size(),
        )
        .with_skipped_segments(skipped),
    );
    let tail = Tail {
        exclusions: &b.exclusions,
        recheck: b.recheck.as_ref(),
        take: &b.take,
        limit: b.limit,
    };
    lower_rows(search, tail, output, ctx)
}

/// What follows a row stream's source in an index or re-evaluation branch.
struct Tail<'a> {
    exclusions: &'a [ExclusionSource],
    recheck: Option<&'a Recheck>,
    take: &'a BTreeSet<usize>,
    limit: Option<usize>,
}

/// Exclusion, recheck and take of the rows `source` outputs, projected to
/// `output`.
fn lower_rows(
    source: Arc<dyn ExecutionPlan>,
    b: Tail<'_>,
    output: &[usize],
    ctx: &LowerContext<'_>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let ds = ctx.dataset;
    let mut branch: Arc<dyn ExecutionPlan> = if b.exclusions.is_empty() {
        source
    } else {
        Arc::new(ExclusionExec::new(
            source,
            ds.clone(),
            b.exclusions.to_vec(),
        ))
    };
    let single_recheck = match b.recheck {
        Some(r) if r.narrow => {
            // Narrow take of the recheck columns (and addresses), rechecked
            // in place, keeping the addresses of the survivors: the last
            // take reads only those.
            let mut read = ctx.projection(&r.columns)?;
            read.with_row_addr = true;
            let schema = ctx.schema_of(&read);
            let predicate = ctx
                .predicate(&r.filters, &schema)?
                .expect("a recheck has a filter");
            let addr = schema.index_of(ROW_ADDR)?;
            branch = Arc::new(
                TakeExec::new(branch, ds.clone(), read, None)?
                    .with_recheck(predicate, Some(vec![addr]))?
                    .with_recheck_residual(r.residual),
            );
            None
        }
        r => r,
    };
    let take_read = ctx.projection(b.take)?;
    let take_schema = ctx.schema_of(&take_read);
    let mut take = TakeExec::new(branch, ds.clone(), take_read, b.limit)?;
    if let Some(r) = single_recheck {
        let predicate = ctx
            .predicate(&r.filters, &take_schema)?
            .expect("a recheck has a filter");
        take = take
            .with_recheck(predicate, None)?
            .with_recheck_residual(r.residual);
    }
    let order: Vec<usize> = b.take.iter().copied().collect();
    let exprs: Vec<ProjectionExpr> = output
        .iter()
        .map(|c| {
            let i = order.iter().position(|o| o == c).unwrap();
            let name = take_schema.field(i).name().clone();
            ProjectionExpr {
                expr: Arc::new(PhysColumn::new(&name, i)) as Arc<dyn PhysicalExpr>,
                alias: ctx.table_schema.field(*c).name().clone(),
            }
        })
        .collect();
    Ok(Arc::new(ProjectionExec::try_new(exprs, Arc::new(take))?))
}
