//! `TakeExec`: materializes rows at the row addresses of its input (sorted
//! by address): per fragment, only the pages and byte ranges those rows
//! need. With an empty projection (`count(*)`) it reads no data at all.
//! It can recheck a filter on the rows it took and keep only some of the
//! columns (the addresses of the survivors, for a narrow first take):
//! done in place, this needs no separate filter node, and no repartition
//! in front of one.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchOptions, UInt64Array};
use arrow_schema::SchemaRef;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::metrics::{
    BaselineMetrics, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use fathom_table::scan::{FragmentReader, Projection, Rows};
use fathom_table::{Dataset, Fragment};
use futures::{StreamExt, TryStreamExt};
use tokio::sync::Mutex;

use super::common::{single_partition, with_partitions};
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
    /// Columns of `read_schema` to output (all when `None`).
    keep: Option<Vec<usize>>,
    props: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl TakeExec {
    pub fn new(
        input: Arc<dyn ExecutionPlan>,
        dataset: Dataset,
        read: Projection,
        limit: Option<usize>,
    ) -> Self {
        let schema = read.schema(dataset.schema());
        TakeExec {
            props: with_partitions(single_partition(schema.clone()), &input),
            input,
            dataset,
            read,
            read_schema: schema.clone(),
            schema,
            limit,
            filter: None,
            keep: None,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    /// Rechecks `filter` (over the read columns) on the taken rows, then
    /// outputs only columns `keep` of them, if given. No limit applies
    /// to the addresses then.
    pub fn with_recheck(
        mut self,
        filter: Arc<dyn PhysicalExpr>,
        keep: Option<Vec<usize>>,
    ) -> Result<Self> {
        if let Some(k) = &keep {
            self.schema = Arc::new(self.read_schema.project(k)?);
            self.props = with_partitions(single_partition(self.schema.clone()), &self.input);
        }
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
        let ds = self.dataset.clone();
        let read = Arc::new(self.read.clone());
        let schema = self.read_schema.clone();
        let filter = self.filter.clone();
        let keep = self.keep.clone();
        let frags: Arc<HashMap<u64, Fragment>> =
            Arc::new(ds.fragments().iter().map(|f| (f.id, f.clone())).collect());
        let readers: Arc<Mutex<HashMap<u64, Arc<FragmentReader>>>> = Arc::default();
        let empty_projection = read.fields.is_empty() && !read.with_row_id && !read.with_row_addr;
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
                let ds = ds.clone();
                let read = read.clone();
                let schema = schema.clone();
                let frags = frags.clone();
                let readers = readers.clone();
                let taken = taken.clone();
                let removed = removed.clone();
                let filter = filter.clone();
                let keep = keep.clone();
                let elapsed = elapsed.clone();
                async move {
                    let _timer = elapsed.timer();
                    let batch = batch?;
                    let a = batch
                        .column(0)
                        .as_any()
                        .downcast_ref::<UInt64Array>()
                        .unwrap()
                        .values()
                        .to_vec();
                    taken.add(a.len());
                    if empty_projection {
                        return Ok(RecordBatch::try_new_with_options(
                            schema,
                            vec![],
                            &RecordBatchOptions::new().with_row_count(Some(a.len())),
                        )?);
                    }
                    let mut parts = Vec::new();
                    let mut i = 0;
                    while i < a.len() {
                        let f = a[i] >> 32;
                        let mut j = i;
                        while j < a.len() && a[j] >> 32 == f {
                            j += 1;
                        }
                        let offsets: Vec<u64> = a[i..j].iter().map(|x| x & 0xFFFF_FFFF).collect();
                        let reader = {
                            let mut g = readers.lock().await;
                            match g.get(&f) {
                                Some(r) => r.clone(),
                                None => {
                                    let fr = frags.get(&f).ok_or_else(|| {
                                        DataFusionError::Internal(format!(
                                            "fragment {f} not in the snapshot"
                                        ))
                                    })?;
                                    let r = Arc::new(
                                        ds.fragment_reader(fr, read.with_row_id)
                                            .await
                                            .map_err(to_df)?,
                                    );
                                    g.insert(f, r.clone());
                                    r
                                }
                            }
                        };
                        parts.push(
                            reader
                                .read(&read, Rows::Take(&offsets))
                                .await
                                .map_err(to_df)?,
                        );
                        i = j;
                    }
                    let mut out = if parts.len() == 1 {
                        parts.pop().unwrap()
                    } else {
                        arrow_select::concat::concat_batches(&schema, &parts)?
                    };
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
                    }
                    if let Some(k) = &keep {
                        out = out.project(k)?;
                    }
                    Ok(out)
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
