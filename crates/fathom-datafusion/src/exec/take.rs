//! `TakeExec`: materializes rows at the row addresses of its input (a row
//! stream sorted by address, see `common`) with `fathom_table::Taker`,
//! the same take DML and index builds use: per fragment, only the pages
//! and byte ranges those rows need. With an empty projection (`count(*)`)
//! it reads no data at all. Score / distance columns of the input are
//! appended, unchanged, after the columns read.
//! It can recheck a filter on the rows it took and keep only some of the
//! columns (the addresses of the survivors, for a narrow first take):
//! done in place, this needs no separate filter node, and no repartition
//! in front of one.

use std::fmt;
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, UInt64Array};
use arrow_schema::{Schema, SchemaRef};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::metrics::{
    BaselineMetrics, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use fathom_table::scan::Projection;
use fathom_table::{Dataset, RowAddress, Taker};
use futures::{StreamExt, TryStreamExt};

use super::common::{row_stream_extras, single_partition, with_partitions};
use crate::error::to_df;

#[derive(Debug, Clone)]
pub struct TakeExec {
    input: Arc<dyn ExecutionPlan>,
    dataset: Dataset,
    read: Projection,
    /// The read columns (before `keep`).
    read_schema: SchemaRef,
    schema: SchemaRef,
    limit: Option<usize>,
    /// Rechecked on every taken batch (against `read_schema`).
    filter: Option<Arc<dyn PhysicalExpr>>,
    /// Whether the recheck holds filters no index answered (see
    /// `plan::Recheck::residual`).
    residual: bool,
    /// Columns of `read_schema` to output (all when `None`).
    keep: Option<Vec<usize>>,
    /// Input columns passed through (scores, distances), appended.
    extras: Vec<usize>,
    props: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl TakeExec {
    pub fn new(
        input: Arc<dyn ExecutionPlan>,
        dataset: Dataset,
        read: Projection,
        limit: Option<usize>,
    ) -> Result<Self> {
        let extras = row_stream_extras(&input.schema(), "TakeExec")?;
        let read_schema = read.schema(dataset.schema());
        let schema = Self::output_schema(&read_schema, None, &input.schema(), &extras)?;
        Ok(TakeExec {
            props: with_partitions(single_partition(schema.clone()), &input),
            input,
            dataset,
            read,
            read_schema,
            schema,
            limit,
            filter: None,
            residual: true,
            keep: None,
            extras,
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    /// The read columns (those kept), then the input's extra columns.
    fn output_schema(
        read: &SchemaRef,
        keep: Option<&[usize]>,
        input: &Schema,
        extras: &[usize],
    ) -> Result<SchemaRef> {
        let read = match keep {
            Some(k) => read.project(k)?,
            None => read.as_ref().clone(),
        };
        let mut fields: Vec<_> = read.fields().iter().cloned().collect();
        fields.extend(extras.iter().map(|i| input.fields()[*i].clone()));
        Ok(std::sync::Arc::new(Schema::new(fields)))
    }

    pub fn dataset(&self) -> &Dataset {
        &self.dataset
    }
    pub fn read(&self) -> &Projection {
        &self.read
    }
    pub fn limit(&self) -> Option<usize> {
        self.limit
    }
    pub fn recheck(&self) -> Option<&Arc<dyn PhysicalExpr>> {
        self.filter.as_ref()
    }
    pub fn keep(&self) -> Option<&[usize]> {
        self.keep.as_deref()
    }
    pub fn recheck_residual(&self) -> bool {
        self.residual
    }

    /// Says whether the recheck holds filters no index answered (the
    /// default, and the safe answer, is yes).
    pub fn with_recheck_residual(mut self, residual: bool) -> Self {
        self.residual = residual;
        self
    }

    /// Rechecks `filter` (over the read columns) on the taken rows, then
    /// outputs only columns `keep` of them, if given. No limit applies
    /// to the addresses then.
    pub fn with_recheck(
        mut self,
        filter: Arc<dyn PhysicalExpr>,
        keep: Option<Vec<usize>>,
    ) -> Result<Self> {
        self.schema = Self::output_schema(
            &self.read_schema,
            keep.as_deref(),
            &self.input.schema(),
            &self.extras,
        )?;
        self.props = with_partitions(single_partition(self.schema.clone()), &self.input);
        self.filter = Some(filter);
        self.keep = keep;
        self.limit = None;
        Ok(self)
    }
}

impl DisplayAs for TakeExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let names = |s: &SchemaRef| -> String {
            let v: Vec<String> = s.fields().iter().map(|f| f.name().clone()).collect();
            v.join(", ")
        };
        write!(f, "TakeExec: projection=[{}]", names(&self.read_schema))?;
        if let Some(p) = &self.filter {
            write!(f, ", recheck={p}")?;
        }
        if self.keep.is_some() {
            write!(f, ", output=[{}]", names(&self.schema))?;
        }
        if let Some(l) = self.limit {
            write!(f, ", limit={l}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for TakeExec {
    fn name(&self) -> &str {
        "TakeExec"
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }
    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }
    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        match &self.filter {
            Some(p) => f(p),
            None => Ok(TreeNodeRecursion::Continue),
        }
    }
    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        // Partitioning follows the new input.
        let mut new = self.as_ref().clone();
        new.props = with_partitions(single_partition(self.schema.clone()), &children[0]);
        new.input = children[0].clone();
        Ok(Arc::new(new))
    }
    fn fetch(&self) -> Option<usize> {
        self.limit
    }
    fn with_fetch(&self, limit: Option<usize>) -> Option<Arc<dyn ExecutionPlan>> {
        // A limit on addresses would cut rows the recheck may drop.
        if self.filter.is_some() {
            return None;
        }
        let mut new = self.clone();
        new.limit = limit;
        Some(Arc::new(new))
    }
    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
    fn execute(
        &self,
        partition: usize,
        ctx: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, ctx)?;
        let baseline = BaselineMetrics::new(&self.metrics, partition);
        // Time spent taking (reads included: they are mostly page-cache copies).
        let elapsed = baseline.elapsed_compute().clone();
        let taken = MetricBuilder::new(&self.metrics).counter("rows_taken", partition);
        let removed =
            MetricBuilder::new(&self.metrics).counter("rows_removed_by_recheck", partition);
        let taker = Arc::new(Taker::new(&self.dataset, self.read.clone()));
        let filter = self.filter.clone();
        let keep = self.keep.clone();
        let extras = self.extras.clone();
        let out_schema = self.schema.clone();
        let limit = self.limit.unwrap_or(usize::MAX);
        let stream = input
            // Apply the limit to addresses before any data is read; the
            // input ends once it is reached (an empty batch does not end it).
            .scan(limit, |left, b| {
                if *left == 0 {
                    return futures::future::ready(None);
                }
                futures::future::ready(Some(b.map(|b| {
                    let n = b.num_rows().min(*left);
                    *left -= n;
                    b.slice(0, n)
                })))
            })
            .try_filter(|b| futures::future::ready(b.num_rows() > 0))
            .then(move |batch| {
                let taker = taker.clone();
                let taken = taken.clone();
                let removed = removed.clone();
                let filter = filter.clone();
                let keep = keep.clone();
                let extras = extras.clone();
                let out_schema = out_schema.clone();
                let elapsed = elapsed.clone();
                async move {
                    let _timer = elapsed.timer();
                    let batch = batch?;
                    let addrs: Vec<RowAddress> = batch
                        .column(0)
                        .as_any()
                        .downcast_ref::<UInt64Array>()
                        .ok_or_else(|| {
                            DataFusionError::Internal("TakeExec expects UInt64 addresses".into())
                        })?
                        .values()
                        .iter()
                        .map(|a| RowAddress::from_u64(*a))
                        .collect();
                    taken.add(addrs.len());
                    let mut out = taker.take_sorted(&addrs).await.map_err(to_df)?;
                    let mut extra: Vec<ArrayRef> =
                        extras.iter().map(|i| batch.column(*i).clone()).collect();
                    if let Some(p) = &filter {
                        let mask = p.evaluate(&out)?.into_array(out.num_rows())?;
                        let mask = mask
                            .as_any()
                            .downcast_ref::<arrow_array::BooleanArray>()
                            .ok_or_else(|| {
                                DataFusionError::Internal("recheck is not a predicate".into())
                            })?;
                        let before = out.num_rows();
                        out = arrow_select::filter::filter_record_batch(&out, mask)?;
                        removed.add(before - out.num_rows());
                        extra = extra
                            .iter()
                            .map(|c| arrow_select::filter::filter(c, mask))
                            .collect::<std::result::Result<_, _>>()?;
                    }
                    if let Some(k) = &keep {
                        out = out.project(k)?;
                    }
                    if extra.is_empty() {
                        return Ok(out);
                    }
                    let mut cols = out.columns().to_vec();
                    cols.extend(extra);
                    Ok(RecordBatch::try_new_with_options(
                        out_schema,
                        cols,
                        &arrow_array::RecordBatchOptions::new()
                            .with_row_count(Some(out.num_rows())),
                    )?)
                }
            })
            .try_filter(|b| futures::future::ready(b.num_rows() > 0))
            .map(move |b| {
                if let Ok(b) = &b {
                    baseline.record_output(b.num_rows());
                }
                b
            });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            stream,
        )))
    }
}
