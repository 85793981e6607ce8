//! `TakeExec`: materializes rows at the row addresses of its input (sorted
//! by address): per fragment, only the pages and byte ranges those rows
//! need. With an empty projection (`count(*)`) it reads no data at all.

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
use futures::StreamExt;
use tokio::sync::Mutex;

use super::common::{single_partition, with_partitions};
use crate::error::to_df;

#[derive(Debug, Clone)]
pub struct TakeExec {
    input: Arc<dyn ExecutionPlan>,
    dataset: Dataset,
    read: Projection,
    schema: SchemaRef,
    limit: Option<usize>,
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
            schema,
            limit,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }
}

impl DisplayAs for TakeExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let cols: Vec<String> = self
            .schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        write!(f, "TakeExec: projection=[{}]", cols.join(", "))?;
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
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }
    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        // Partitioning follows the new input.
        Ok(Arc::new(TakeExec::new(
            children[0].clone(),
            self.dataset.clone(),
            self.read.clone(),
            self.limit,
        )))
    }
    fn fetch(&self) -> Option<usize> {
        self.limit
    }
    fn with_fetch(&self, limit: Option<usize>) -> Option<Arc<dyn ExecutionPlan>> {
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
        let taken = MetricBuilder::new(&self.metrics).counter("rows_taken", partition);
        let ds = self.dataset.clone();
        let read = Arc::new(self.read.clone());
        let schema = self.schema.clone();
        let frags: Arc<HashMap<u64, Fragment>> =
            Arc::new(ds.fragments().iter().map(|f| (f.id, f.clone())).collect());
        let readers: Arc<Mutex<HashMap<u64, Arc<FragmentReader>>>> = Arc::default();
        let empty_projection = read.fields.is_empty() && !read.with_row_id && !read.with_row_addr;
        let mut left = self.limit.unwrap_or(usize::MAX);
        let stream = input
            .map(move |b| {
                // Apply the limit to addresses before any data is read.
                let b = b?;
                let n = b.num_rows().min(left);
                left -= n;
                Ok::<_, DataFusionError>(b.slice(0, n))
            })
            .take_while(|b| futures::future::ready(!matches!(b, Ok(b) if b.num_rows() == 0)))
            .then(move |batch| {
                let ds = ds.clone();
                let read = read.clone();
                let schema = schema.clone();
                let frags = frags.clone();
                let readers = readers.clone();
                let taken = taken.clone();
                async move {
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
                    Ok(arrow_select::concat::concat_batches(&schema, &parts)?)
                }
            })
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
