//! `IndexCountExec`: `COUNT(*)` of an index branch from row-set
//! cardinalities, optionally grouped by a column whose index keeps each
//! value's rows (a bitmap).
//!
//! It stands where an aggregate over the branch's rows stood (put there by
//! [`crate::IndexCountRule`]) and outputs what that aggregate would have:
//! the group values, if any, then the count in each count column. The
//! index result is a row set; exclusion is applied to it as bitmap
//! operations (per fragment, one range removal and one difference with
//! the deletion file), so no address is streamed and nothing is taken.
//! An `AtMost` result (zone maps) is rechecked only where it is not
//! certain: the boundary zones' rows are taken (recheck columns only) and
//! filtered; zones that match whole are counted as they are.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use arrow_array::{ArrayRef, BooleanArray, Int64Array, RecordBatch};
use arrow_schema::{DataType, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::metrics::{
    BaselineMetrics, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use fathom_index::segment::{groups, usable};
use fathom_index::{Exactness, IndexCache};
use fathom_table::scan::Projection;
use fathom_table::{Dataset, RowAddress, RowSet, Taker};

use super::common::single_partition;
use super::exclusion::Exclusion;
use super::index_scan::{Evaluated, evaluate_planned};
use crate::error::to_df;
use crate::index_expr::IndexExpr;
use crate::plan::ExclusionSource;

/// A filter the index answer may not satisfy: rechecked on the rows that
/// are not certain.
#[derive(Debug, Clone)]
pub struct CountRecheck {
    /// Columns read for the recheck.
    pub read: Projection,
    /// Over `read`'s schema.
    pub predicate: Arc<dyn PhysicalExpr>,
    /// It holds filters no index answered: every row is rechecked, even
    /// those the index knows to match.
    pub residual: bool,
}

#[derive(Debug)]
pub struct IndexCountExec {
    dataset: Dataset,
    /// The filter's index expression; `None`: every row.
    expr: Option<IndexExpr>,
    /// Instead of `expr`: these rows (the rows overlays changed since an
    /// index's build, re-evaluated), every one rechecked.
    rows: Option<Arc<RowSet>>,
    planned: Exactness,
    cache: Arc<IndexCache>,
    exclusions: Vec<ExclusionSource>,
    recheck: Option<CountRecheck>,
    /// The index whose keys group the counts.
    group_index: Option<String>,
    batch_size: usize,
    /// Group column (if any), then count columns (Int64).
    schema: SchemaRef,
    props: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl IndexCountExec {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        dataset: Dataset,
        expr: Option<IndexExpr>,
        planned: Exactness,
        cache: Arc<IndexCache>,
        exclusions: Vec<ExclusionSource>,
        recheck: Option<CountRecheck>,
        group_index: Option<String>,
        batch_size: usize,
        schema: SchemaRef,
    ) -> Result<Self> {
        let groups = usize::from(group_index.is_some());
        if schema.fields().len() <= groups
            || schema
                .fields()
                .iter()
                .skip(groups)
                .any(|f| f.data_type() != &DataType::Int64)
        {
            return Err(DataFusionError::Internal(format!(
                "IndexCountExec outputs {} group column(s) then Int64 counts, not {schema}",
                groups
            )));
        }
        Ok(IndexCountExec {
            props: single_partition(schema.clone()),
            dataset,
            expr,
            rows: None,
            planned,
            cache,
            exclusions,
            recheck,
            group_index,
            batch_size,
            schema,
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    /// Counts `rows` (after the exclusions), each rechecked, instead of
    /// an index expression's rows: a re-evaluation branch counted.
    pub fn with_rows(mut self, rows: Arc<RowSet>) -> Self {
        self.expr = None;
        self.rows = Some(rows);
        self
    }

    pub fn dataset(&self) -> &Dataset {
        &self.dataset
    }
    pub fn rows(&self) -> Option<&Arc<RowSet>> {
        self.rows.as_ref()
    }
    pub fn expr(&self) -> Option<&IndexExpr> {
        self.expr.as_ref()
    }
    pub fn planned(&self) -> Exactness {
        self.planned
    }
    pub fn cache(&self) -> &Arc<IndexCache> {
        &self.cache
    }
    pub fn exclusions(&self) -> &[ExclusionSource] {
        &self.exclusions
    }
    pub fn recheck(&self) -> Option<&CountRecheck> {
        self.recheck.as_ref()
    }
    pub fn group_index(&self) -> Option<&str> {
        self.group_index.as_deref()
    }
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }
}

/// The live rows matching the branch: exclusion applied as set
/// operations, uncertain rows rechecked. Returns them and how many were
/// rechecked.
/// Which rows of `batch` pass `predicate` (NULL does not).
fn passes(predicate: &Arc<dyn PhysicalExpr>, batch: &RecordBatch) -> Result<BooleanArray> {
    let mask = predicate.evaluate(batch)?.into_array(batch.num_rows())?;
    let mask = mask
        .as_any()
        .downcast_ref::<BooleanArray>()
        .ok_or_else(|| DataFusionError::Internal("recheck is not a predicate".into()))?;
    Ok(if arrow_array::Array::null_count(mask) > 0 {
        arrow_select::filter::prep_null_mask_filter(mask)
    } else {
        mask.clone()
    })
}

#[allow(clippy::too_many_arguments)]
async fn matching(
    ds: &Dataset,
    cache: &IndexCache,
    expr: Option<&IndexExpr>,
    given: Option<&RowSet>,
    planned: Exactness,
    ex: &Exclusion,
    recheck: Option<&CountRecheck>,
    batch_size: usize,
) -> Result<(RowSet, usize)> {
    let (rows, exactness, certain) = match (given, expr) {
        // Re-evaluated rows: none is known to match.
        (Some(g), _) => {
            let rows = ex.apply(g).await?;
            if let Some(recheck) = recheck {
                // Fragment by fragment, straight from the overlay files
                // when they hold exactly these rows.
                let taker = Taker::new(ds, recheck.read.clone());
                let mut passing: Vec<u64> = Vec::new();
                for (f, offsets) in rows.fragments() {
                    let batch = taker.take_fragment(f, offsets).await.map_err(to_df)?;
                    let mask = passes(&recheck.predicate, &batch)?;
                    let hi = f.as_u64() << 32;
                    let mut it = offsets.iter();
                    let mut at = 0;
                    for i in mask.values().set_indices() {
                        let o = it.nth(i - at).expect("one mask bit per offset");
                        at = i + 1;
                        passing.push(hi | u64::from(o));
                    }
                }
                let n = rows.len() as usize;
                let passed = roaring::RoaringTreemap::from_sorted_iter(passing)
                    .map_err(|e| DataFusionError::Internal(format!("recheck order: {e}")))?;
                return Ok((RowSet::from(passed), n));
            }
            (rows, Exactness::AtMost, None)
        }
        (None, None) => return Ok((ex.all_rows().await?, 0)),
        (None, Some(expr)) => {
            let Evaluated {
                rows,
                exactness,
                certain,
            } = evaluate_planned(ds, cache, expr, planned).await?;
            (ex.apply(&rows).await?, exactness, certain)
        }
    };
    let Some(recheck) = recheck else {
        return Ok((rows, 0));
    };
    // Without a recheck the result is exact; with one, only the rows not
    // known to match are read.
    let certain = match certain {
        _ if recheck.residual => RowSet::new(),
        Some(c) => ex.apply(&c).await?,
        None if exactness == Exactness::Exact => rows.clone(),
        None => RowSet::new(),
    };
    let uncertain: Vec<RowAddress> = (rows - certain.clone())
        .to_u64s()
        .into_iter()
        .map(RowAddress::from_u64)
        .collect();
    let taker = Taker::new(ds, recheck.read.clone());
    // Ascending, as the uncertain rows are: one bulk build, not an insert
    // per row.
    let mut passing: Vec<u64> = Vec::new();
    for chunk in uncertain.chunks(batch_size.max(1)) {
        let batch = taker.take_sorted(chunk).await.map_err(to_df)?;
        let mask = passes(&recheck.predicate, &batch)?;
        passing.extend(mask.values().set_indices().map(|i| chunk[i].as_u64()));
    }
    let passed = RowSet::from(
        roaring::RoaringTreemap::from_sorted_iter(passing)
            .map_err(|e| DataFusionError::Internal(format!("recheck order: {e}")))?,
    );
    Ok((certain | passed, uncertain.len()))
}

/// Per key of index `name` (over all its usable segments): the number of
/// `rows` holding it. Keys no row holds are left out, as GROUP BY does.
async fn group_counts(
    ds: &Dataset,
    cache: &IndexCache,
    name: &str,
    rows: &RowSet,
) -> Result<Vec<(ScalarValue, u64)>> {
    let mut by_key: HashMap<ScalarValue, u64> = HashMap::new();
    let mut order: Vec<ScalarValue> = Vec::new();
    for seg in ds.manifest().indices.iter().filter(|i| i.name == name) {
        let Ok(kind) = usable(seg) else { continue };
        let g = groups(ds, seg, kind, cache)
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))?
            .ok_or_else(|| {
                DataFusionError::Internal(format!("index '{name}' keeps no groups of its rows"))
            })?;
        for (i, keyed) in g.rows.iter().enumerate() {
            let n = keyed.as_treemap().intersection_len(rows.as_treemap());
            if n == 0 {
                continue;
            }
            let k = ScalarValue::try_from_array(g.keys.as_ref(), i)?;
            match by_key.get_mut(&k) {
                Some(c) => *c += n,
                None => {
                    order.push(k.clone());
                    by_key.insert(k, n);
                }
            }
        }
    }
    Ok(order
        .into_iter()
        .map(|k| {
            let n = by_key[&k];
            (k, n)
        })
        .collect())
}

impl DisplayAs for IndexCountExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "IndexCountExec: ")?;
        match (&self.expr, &self.rows) {
            (_, Some(r)) => write!(f, "overlaid rows={}", r.len())?,
            (Some(e), None) => write!(f, "{e}, result={}", self.planned.as_str())?,
            (None, None) => write!(f, "all rows")?,
        }
        if let Some(g) = &self.group_index {
            write!(f, ", group_by_index={g}")?;
        }
        if let Some(r) = &self.recheck {
            write!(f, ", recheck_uncertain={}", r.predicate)?;
        }
        Ok(())
    }
}

impl ExecutionPlan for IndexCountExec {
    fn name(&self) -> &str {
        "IndexCountExec"
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }
    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        match &self.recheck {
            Some(r) => f(&r.predicate),
            None => Ok(TreeNodeRecursion::Continue),
        }
    }
    fn with_new_children(
        self: Arc<Self>,
        _c: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }
    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
    fn execute(
        &self,
        partition: usize,
        _ctx: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let baseline = BaselineMetrics::new(&self.metrics, partition);
        let counted = MetricBuilder::new(&self.metrics).counter("rows_counted", partition);
        let rechecked = MetricBuilder::new(&self.metrics).counter("rows_rechecked", partition);
        let ds = self.dataset.clone();
        let cache = self.cache.clone();
        let expr = self.expr.clone();
        let given = self.rows.clone();
        let planned = self.planned;
        let ex = Exclusion::new(&self.dataset, &self.exclusions);
        let recheck = self.recheck.clone();
        let group_index = self.group_index.clone();
        let bs = self.batch_size;
        let schema = self.schema.clone();
        let fut = async move {
            let timer = baseline.elapsed_compute().timer();
            let (rows, n_rechecked) = matching(
                &ds,
                &cache,
                expr.as_ref(),
                given.as_deref(),
                planned,
                &ex,
                recheck.as_ref(),
                bs,
            )
            .await?;
            rechecked.add(n_rechecked);
            counted.add(rows.len() as usize);
            let counts = schema.fields().len() - usize::from(group_index.is_some());
            let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
            let ns: Vec<i64> = match &group_index {
                None => vec![rows.len() as i64],
                Some(name) => {
                    let groups = group_counts(&ds, &cache, name, &rows).await?;
                    let keys = ScalarValue::iter_to_array(groups.iter().map(|(k, _)| k.clone()))
                        .or_else(|_| {
                            Ok::<_, DataFusionError>(arrow_array::new_empty_array(
                                schema.field(0).data_type(),
                            ))
                        })?;
                    let target = schema.field(0).data_type();
                    let keys = if keys.data_type() == target {
                        keys
                    } else {
                        datafusion::arrow::compute::cast(&keys, target)?
                    };
                    columns.push(keys);
                    groups.iter().map(|(_, n)| *n as i64).collect()
                }
            };
            let n = Arc::new(Int64Array::from(ns)) as ArrayRef;
            columns.extend(std::iter::repeat_n(n, counts));
            let batch = RecordBatch::try_new(schema, columns)?;
            timer.done();
            baseline.record_output(batch.num_rows());
            Ok(batch)
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            futures::stream::once(fut),
        )))
    }
}
