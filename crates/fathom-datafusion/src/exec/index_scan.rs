//! `ScalarIndexExec`: evaluates an index expression over the segments of
//! the indexes it uses and outputs the matching row addresses, sorted.
//! Rows deleted since a segment was built, and fragments the plan does not
//! cover, are removed downstream by `ExclusionExec`.

use std::fmt;
use std::sync::Arc;

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
use fathom_index::IndexCache;
use fathom_index::segment::{search, usable};
use fathom_table::Dataset;
use futures::StreamExt;
use futures::future::BoxFuture;
use roaring::RoaringTreemap;

use super::common::{addr_batches, addr_schema, single_partition};
use crate::index_expr::IndexExpr;

#[derive(Debug)]
pub struct ScalarIndexExec {
    dataset: Dataset,
    expr: IndexExpr,
    cache: Arc<IndexCache>,
    num_segments: usize,
    props: Arc<PlanProperties>,
    batch_size: usize,
    metrics: ExecutionPlanMetricsSet,
}

impl ScalarIndexExec {
    pub fn new(
        dataset: Dataset,
        expr: IndexExpr,
        cache: Arc<IndexCache>,
        batch_size: usize,
    ) -> Self {
        let mut names = vec![];
        expr.indexes(&mut names);
        let num_segments = dataset
            .manifest()
            .indices
            .iter()
            .filter(|i| names.contains(&i.name) && usable(i).is_ok())
            .count();
        ScalarIndexExec {
            dataset,
            expr,
            cache,
            num_segments,
            props: Arc::new(
                single_partition(addr_schema())
                    .as_ref()
                    .clone()
                    .with_scheduling_type(
                        datafusion::physical_plan::execution_plan::SchedulingType::Cooperative,
                    ),
            ),
            batch_size,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }
}

fn eval<'a>(
    ds: &'a Dataset,
    cache: &'a IndexCache,
    e: &'a IndexExpr,
) -> BoxFuture<'a, Result<RoaringTreemap>> {
    Box::pin(async move {
        Ok(match e {
            IndexExpr::Query { index, query, .. } => {
                let mut out = RoaringTreemap::new();
                for seg in ds.manifest().indices.iter().filter(|i| &i.name == index) {
                    let Ok(kind) = usable(seg) else { continue };
                    let r = search(ds, seg, kind, cache, query)
                        .await
                        .map_err(|e| DataFusionError::External(Box::new(e)))?;
                    out |= r.into_rows();
                }
                out
            }
            IndexExpr::And(a, b) => eval(ds, cache, a).await? & eval(ds, cache, b).await?,
            IndexExpr::Or(a, b) => eval(ds, cache, a).await? | eval(ds, cache, b).await?,
        })
    })
}

impl DisplayAs for ScalarIndexExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "ScalarIndexExec: {}, segments={}, result={}",
            self.expr,
            self.num_segments,
            if self.expr.is_exact() {
                "exact"
            } else {
                "at_most"
            }
        )
    }
}

impl ExecutionPlan for ScalarIndexExec {
    fn name(&self) -> &str {
        "ScalarIndexExec"
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }
    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
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
        let matched = MetricBuilder::new(&self.metrics).counter("rows_matched_by_index", partition);
        let ds = self.dataset.clone();
        let expr = self.expr.clone();
        let cache = self.cache.clone();
        let bs = self.batch_size;
        let schema: SchemaRef = addr_schema();
        let elapsed = baseline.elapsed_compute().clone();
        let fut = async move {
            let timer = elapsed.timer();
            let rows = eval(&ds, &cache, &expr).await?;
            matched.add(rows.len() as usize);
            let batches = addr_batches(rows.iter(), bs);
            timer.done();
            Ok::<_, DataFusionError>(futures::stream::iter(batches.into_iter().map(Ok)))
        };
        let stream = futures::stream::once(fut)
            .flat_map(|r| match r {
                Ok(s) => s.boxed(),
                Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
            })
            .map(move |b| {
                if let Ok(b) = &b {
                    baseline.record_output(b.num_rows());
                }
                b
            });
        Ok(datafusion::physical_plan::coop::make_cooperative(Box::pin(
            RecordBatchStreamAdapter::new(schema, stream),
        )))
    }
}
