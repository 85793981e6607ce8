//! `ExclusionExec`: drops row addresses an index may no longer describe.
//! One composable node over any stream of addresses:
//!
//! 1. fragments outside the planned covered set (gone from the manifest,
//!    or not in the current `fragment_bitmap` of every index used);
//! 2. rows in the fragment's deletion file;
//! 3. offsets beyond the fragment's rows.
//!
//! New exclusion sources (overlays newer than a segment, with re-evaluation
//! on the flat path) plug in here.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use arrow_array::{RecordBatch, UInt64Array};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::metrics::{
    BaselineMetrics, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use fathom_table::{Dataset, Fragment};
use futures::StreamExt;
use roaring::RoaringBitmap;

use super::common::{addr_schema, single_partition, with_partitions};
use crate::error::to_df;

#[derive(Debug)]
pub struct ExclusionExec {
    input: Arc<dyn ExecutionPlan>,
    dataset: Dataset,
    /// Fragments whose index results are trusted.
    covered: Vec<u64>,
    props: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl ExclusionExec {
    pub fn new(input: Arc<dyn ExecutionPlan>, dataset: Dataset, covered: Vec<u64>) -> Self {
        ExclusionExec {
            props: with_partitions(single_partition(addr_schema()), &input),
            input,
            dataset,
            covered,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }
}

impl DisplayAs for ExclusionExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let with_deletions = self
            .dataset
            .fragments()
            .iter()
            .filter(|fr| fr.deletion_file.is_some() && self.covered.contains(&fr.id))
            .count();
        write!(
            f,
            "ExclusionExec: covered_fragments={}, with_deletions={}",
            self.covered.len(),
            with_deletions
        )
    }
}

impl ExecutionPlan for ExclusionExec {
    fn name(&self) -> &str {
        "ExclusionExec"
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
        Ok(Arc::new(ExclusionExec::new(
            children[0].clone(),
            self.dataset.clone(),
            self.covered.clone(),
        )))
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
        let excluded = MetricBuilder::new(&self.metrics).counter("rows_excluded", partition);
        let ds = self.dataset.clone();
        let frags: Arc<HashMap<u64, Fragment>> = Arc::new(
            ds.fragments()
                .iter()
                .filter(|f| self.covered.contains(&f.id))
                .map(|f| (f.id, f.clone()))
                .collect(),
        );
        let stream = input.then(move |batch| {
            let ds = ds.clone();
            let frags = frags.clone();
            let excluded = excluded.clone();
            let baseline = baseline.clone();
            async move {
                let elapsed = baseline.elapsed_compute().clone();
                let _timer = elapsed.timer();
                let batch = batch?;
                let a = batch
                    .column(0)
                    .as_any()
                    .downcast_ref::<UInt64Array>()
                    .ok_or_else(|| {
                        DataFusionError::Internal("ExclusionExec expects UInt64 addresses".into())
                    })?;
                let mut keep = Vec::with_capacity(a.len());
                let mut current: Option<(u64, Option<Arc<RoaringBitmap>>, u64)> = None;
                for &addr in a.values() {
                    let (f, o) = (addr >> 32, addr & 0xFFFF_FFFF);
                    if current.as_ref().is_none_or(|c| c.0 != f) {
                        current = match frags.get(&f) {
                            None => None,
                            Some(fr) => Some((
                                f,
                                ds.deleted_rows(fr).await.map_err(to_df)?,
                                fr.physical_rows,
                            )),
                        };
                    }
                    let live = match &current {
                        Some((cf, del, rows)) if *cf == f => {
                            o < *rows && !del.as_ref().is_some_and(|d| d.contains(o as u32))
                        }
                        _ => false,
                    };
                    if live {
                        keep.push(addr);
                    }
                }
                excluded.add(a.len() - keep.len());
                let out =
                    RecordBatch::try_new(addr_schema(), vec![Arc::new(UInt64Array::from(keep))])?;
                baseline.record_output(out.num_rows());
                Ok(out)
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            addr_schema(),
            stream,
        )))
    }
}
