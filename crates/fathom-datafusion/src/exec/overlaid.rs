//! `OverlaidRowsExec`: the source of the re-evaluation branch. Outputs,
//! as a row stream (see `common`), the addresses of rows an overlay
//! changed after an index segment the scan searches was built: the index
//! branch excludes them (its answer for them is stale) and the take above
//! this node reads their current values and evaluates every filter.

use std::fmt;
use std::sync::Arc;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::metrics::{BaselineMetrics, ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use fathom_table::RowSet;

use super::common::{addr_schema, rowset_batches, single_partition};

#[derive(Debug)]
pub struct OverlaidRowsExec {
    rows: Arc<RowSet>,
    batch_size: usize,
    props: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl OverlaidRowsExec {
    pub fn new(rows: Arc<RowSet>, batch_size: usize) -> Self {
        OverlaidRowsExec {
            rows,
            batch_size,
            props: single_partition(addr_schema()),
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }
    pub fn rows(&self) -> &Arc<RowSet> {
        &self.rows
    }
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }
}

impl DisplayAs for OverlaidRowsExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "OverlaidRowsExec: rows={}, fragments={}",
            self.rows.len(),
            self.rows.fragments().count()
        )
    }
}

impl ExecutionPlan for OverlaidRowsExec {
    fn name(&self) -> &str {
        "OverlaidRowsExec"
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
        _children: Vec<Arc<dyn ExecutionPlan>>,
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
        let batches = rowset_batches(&self.rows, self.batch_size);
        baseline.record_output(self.rows.len() as usize);
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            addr_schema(),
            futures::stream::iter(batches.into_iter().map(Ok)),
        )))
    }
}
