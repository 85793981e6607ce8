//! `CountUnionExec`: the branches of a count that are all answered from
//! row sets, run one after another in one partition.
//!
//! When every branch under a `Partial` count is an [`IndexCountExec`]
//! (for example the index's rows and the overlaid rows re-evaluated), each
//! branch is a few set operations worth tens of microseconds. A
//! `UnionExec` would give each its own output partition, and the
//! `CoalescePartitionsExec` above would spawn a task and a channel per
//! partition: more than the branches cost. This node keeps the branches
//! visible in EXPLAIN and outputs their rows as one partition.
//!
//! [`IndexCountExec`]: super::count::IndexCountExec

use std::fmt;
use std::sync::Arc;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::{StreamExt, TryStreamExt};

use super::common::{only_partition, single_partition};

/// Count branches run serially, their rows output as one partition (see
/// the module documentation).
#[derive(Debug)]
pub struct CountUnionExec {
    branches: Vec<Arc<dyn ExecutionPlan>>,
    props: Arc<PlanProperties>,
}

impl CountUnionExec {
    /// `branches` must share one schema and have one partition each.
    pub fn try_new(branches: Vec<Arc<dyn ExecutionPlan>>) -> Result<Self> {
        let Some(first) = branches.first() else {
            return Err(DataFusionError::Internal(
                "CountUnionExec needs at least one branch".into(),
            ));
        };
        let schema = first.schema();
        for b in &branches {
            if b.schema().fields() != schema.fields() {
                return Err(DataFusionError::Internal(format!(
                    "CountUnionExec branches differ in schema: {} and {}",
                    schema,
                    b.schema()
                )));
            }
            let n = b.properties().partitioning.partition_count();
            if n != 1 {
                return Err(DataFusionError::Internal(format!(
                    "CountUnionExec branch {} has {n} partitions, not 1",
                    b.name()
                )));
            }
        }
        Ok(CountUnionExec {
            props: single_partition(schema),
            branches,
        })
    }
}

impl DisplayAs for CountUnionExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "CountUnionExec: branches={}", self.branches.len())
    }
}

impl ExecutionPlan for CountUnionExec {
    fn name(&self) -> &str {
        "CountUnionExec"
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        self.branches.iter().collect()
    }
    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }
    /// Each branch is one partition: nothing to gain from splitting.
    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false; self.branches.len()]
    }
    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(CountUnionExec::try_new(children)?))
    }
    fn execute(
        &self,
        partition: usize,
        ctx: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        only_partition("CountUnionExec", partition)?;
        let streams = self
            .branches
            .iter()
            .map(|b| b.execute(0, ctx.clone()))
            .collect::<Result<Vec<_>>>()?;
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema(),
            futures::stream::iter(streams.into_iter().map(Ok::<_, DataFusionError>))
                .try_flatten()
                .boxed(),
        )))
    }
}
