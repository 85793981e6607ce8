//! `ExclusionExec`: drops row addresses an index may no longer describe.
//! One composable node over any row stream (see `common`), keeping every
//! column of the rows it keeps, with pluggable sources
//! ([`ExclusionSource`]):
//!
//! - fragments outside the planned covered set (gone from the manifest,
//!   or not in the current `fragment_bitmap` of every index used);
//! - rows in the fragment's deletion file;
//! - always: offsets beyond the fragment's rows.
//!
//! Next: rows covered by overlays newer than a segment, and address
//! remaps after compaction.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use arrow_array::{BooleanArray, UInt64Array};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::metrics::{
    BaselineMetrics, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use fathom_table::{Dataset, Fragment, FragmentId, RowAddress};
use futures::StreamExt;
use roaring::RoaringBitmap;

use super::common::{row_stream_extras, single_partition, with_partitions};
use crate::error::to_df;
use crate::plan::ExclusionSource;

#[derive(Debug)]
pub struct ExclusionExec {
    input: Arc<dyn ExecutionPlan>,
    dataset: Dataset,
    sources: Vec<ExclusionSource>,
    props: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl ExclusionExec {
    pub fn new(
        input: Arc<dyn ExecutionPlan>,
        dataset: Dataset,
        sources: Vec<ExclusionSource>,
    ) -> Self {
        ExclusionExec {
            props: with_partitions(single_partition(input.schema()), &input),
            input,
            dataset,
            sources,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    pub fn dataset(&self) -> &Dataset {
        &self.dataset
    }
    pub fn sources(&self) -> &[ExclusionSource] {
        &self.sources
    }

    /// Fragments whose rows may pass: all current ones, less those outside
    /// every `OutsideFragments` set.
    fn allowed(&self) -> HashSet<u64> {
        let mut ids: HashSet<u64> = self.dataset.fragments().iter().map(|f| f.id).collect();
        for s in &self.sources {
            if let ExclusionSource::OutsideFragments(keep) = s {
                let keep: HashSet<u64> = keep.iter().copied().collect();
                ids.retain(|f| keep.contains(f));
            }
        }
        ids
    }
}

impl DisplayAs for ExclusionExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let allowed = self.allowed();
        write!(f, "ExclusionExec: covered_fragments={}", allowed.len())?;
        if self.sources.contains(&ExclusionSource::DeletedRows) {
            let with_deletions = self
                .dataset
                .fragments()
                .iter()
                .filter(|fr| fr.deletion_file.is_some() && allowed.contains(&fr.id))
                .count();
            write!(f, ", with_deletions={with_deletions}")?;
        }
        Ok(())
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
            self.sources.clone(),
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
        row_stream_extras(&self.input.schema(), "ExclusionExec")?;
        let input = self.input.execute(partition, ctx)?;
        let baseline = BaselineMetrics::new(&self.metrics, partition);
        let excluded = MetricBuilder::new(&self.metrics).counter("rows_excluded", partition);
        let ds = self.dataset.clone();
        let allowed = self.allowed();
        let frags: Arc<HashMap<FragmentId, Fragment>> = Arc::new(
            ds.fragments()
                .iter()
                .filter(|f| allowed.contains(&f.id))
                .filter_map(|f| Some((FragmentId::try_from(f.id).ok()?, f.clone())))
                .collect(),
        );
        let deletions = self.sources.contains(&ExclusionSource::DeletedRows);
        let schema = self.input.schema();
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
                // (fragment, its deletions, its rows), for runs of one fragment.
                let mut current: Option<(FragmentId, Option<Arc<RoaringBitmap>>, u64)> = None;
                for &v in a.values() {
                    let addr = RowAddress::from_u64(v);
                    let f = addr.fragment();
                    if current.as_ref().is_none_or(|c| c.0 != f) {
                        current = match frags.get(&f) {
                            None => None,
                            Some(fr) => Some((
                                f,
                                if deletions {
                                    ds.deleted_rows(fr).await.map_err(to_df)?
                                } else {
                                    None
                                },
                                fr.physical_rows,
                            )),
                        };
                    }
                    let o = addr.offset();
                    keep.push(match &current {
                        Some((cf, del, rows)) if *cf == f => {
                            (o as u64) < *rows && !del.as_ref().is_some_and(|d| d.contains(o))
                        }
                        _ => false,
                    });
                }
                let mask = BooleanArray::from(keep);
                let out = arrow_select::filter::filter_record_batch(&batch, &mask)?;
                excluded.add(batch.num_rows() - out.num_rows());
                baseline.record_output(out.num_rows());
                Ok(out)
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }
}
