//! `ExclusionExec`: drops row addresses an index may no longer describe.
//! One composable node over any row stream (see `common`), keeping every
//! column of the rows it keeps, with pluggable sources
//! ([`ExclusionSource`]):
//!
//! - fragments outside the planned covered set (gone from the manifest,
//!   or not in the current `fragment_bitmap` of every index used);
//! - rows in the fragment's deletion file;
//! - rows an overlay changed after a segment searched was built (the
//!   plan's re-evaluation branch reads them instead);
//! - always: offsets beyond the fragment's rows.
//!
//! (Addresses a compaction moved are remapped by the segment search
//! itself, through the fragment reuse index.)

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
use fathom_table::{Dataset, Fragment, FragmentId, RowAddress, RowSet};
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

    /// The sources resolved against the dataset.
    pub fn exclusion(&self) -> Exclusion {
        Exclusion::new(&self.dataset, &self.sources)
    }
}

/// Exclusion sources resolved against a dataset version: the fragments
/// whose rows may pass, and whether deleted rows are dropped. Applied per
/// address by [`ExclusionExec`], and to whole row sets by counts.
/// Resolving costs nothing for one `OutsideFragments` source (its set is
/// shared) and an intersection for each further one;
/// fragments are then found through the version's shared id map.
#[derive(Debug, Clone)]
pub struct Exclusion {
    dataset: Dataset,
    /// Fragment ids whose rows may pass when some source restricts them
    /// (`None`: every fragment of the version).
    keep: Option<Arc<RoaringBitmap>>,
    deletions: bool,
    /// Rows dropped one by one (overlaid since a segment's build).
    rows: Option<Arc<RowSet>>,
}

impl Exclusion {
    pub fn new(dataset: &Dataset, sources: &[ExclusionSource]) -> Self {
        let mut keep: Option<Arc<RoaringBitmap>> = None;
        let mut rows: Option<Arc<RowSet>> = None;
        for s in sources {
            match s {
                ExclusionSource::OutsideFragments(set) => {
                    keep = Some(match keep {
                        Some(k) => Arc::new(k.as_ref() & set.as_ref()),
                        None => set.clone(),
                    });
                }
                ExclusionSource::OverlaidRows(r) => {
                    rows = Some(match rows {
                        Some(x) => Arc::new(x.as_ref().clone() | r.as_ref().clone()),
                        None => r.clone(),
                    });
                }
                ExclusionSource::DeletedRows => {}
            }
        }
        Exclusion {
            dataset: dataset.clone(),
            keep,
            deletions: sources.contains(&ExclusionSource::DeletedRows),
            rows,
        }
    }

    fn passes(&self, id: u64) -> bool {
        self.keep
            .as_ref()
            .is_none_or(|k| u32::try_from(id).is_ok_and(|i| k.contains(i)))
    }

    /// Fragments whose rows may pass, in manifest order.
    pub fn fragments(&self) -> impl Iterator<Item = &Fragment> {
        self.dataset
            .fragments()
            .iter()
            .filter(|f| self.passes(f.id))
    }

    /// For a fragment whose rows may pass: the rows dropped one by one
    /// (deleted ones when they are dropped, overlaid ones) and its
    /// physical row count; `None` for any other.
    async fn fragment(&self, f: FragmentId) -> Result<Option<(Option<Arc<RoaringBitmap>>, u64)>> {
        if !self.passes(f.as_u64()) {
            return Ok(None);
        }
        let Some(fr) = self.dataset.fragment(f.as_u64()) else {
            return Ok(None);
        };
        let mut del = if self.deletions {
            self.dataset.deleted_rows(fr).await.map_err(to_df)?
        } else {
            None
        };
        let overlaid = self
            .rows
            .as_ref()
            .and_then(|r| r.fragments().find(|(id, _)| *id == f).map(|(_, b)| b));
        if let Some(o) = overlaid {
            del = Some(Arc::new(match del {
                Some(d) => d.as_ref() | o,
                None => o.clone(),
            }));
        }
        Ok(Some((del, fr.physical_rows)))
    }

    /// The rows of `rows` that pass, as a set: per fragment one range
    /// removal and one bitmap difference, no per-row work.
    pub async fn apply(&self, rows: &RowSet) -> Result<RowSet> {
        let mut out = Vec::new();
        for (f, offsets) in rows.fragments() {
            let Some((del, n)) = self.fragment(f).await? else {
                continue;
            };
            let mut b = offsets.clone();
            if let Ok(n) = u32::try_from(n) {
                b.remove_range(n..);
            }
            if let Some(d) = &del {
                b -= d.as_ref();
            }
            if !b.is_empty() {
                out.push((f.0, b));
            }
        }
        Ok(RowSet::from(roaring::RoaringTreemap::from_bitmaps(out)))
    }

    /// Every row of the fragments that pass, less the deleted ones.
    pub async fn all_rows(&self) -> Result<RowSet> {
        let mut all = RowSet::new();
        for fr in self.fragments() {
            let Ok(f) = FragmentId::try_from(fr.id) else {
                continue;
            };
            all.insert_range(f, 0..u32::try_from(fr.physical_rows).unwrap_or(u32::MAX));
        }
        self.apply(&all).await
    }
}

impl DisplayAs for ExclusionExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let ex = self.exclusion();
        write!(
            f,
            "ExclusionExec: covered_fragments={}",
            ex.fragments().count()
        )?;
        if ex.deletions {
            let with_deletions = ex
                .fragments()
                .filter(|fr| fr.deletion_file.is_some())
                .count();
            write!(f, ", with_deletions={with_deletions}")?;
        }
        if let Some(r) = &ex.rows {
            write!(f, ", overlaid_rows={}", r.len())?;
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
        let ex = Arc::new(self.exclusion());
        let schema = self.input.schema();
        let stream = input.then(move |batch| {
            let ex = ex.clone();
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
                // The current fragment's (deletions, rows), for runs of one fragment.
                type Current = (FragmentId, Option<(Option<Arc<RoaringBitmap>>, u64)>);
                let mut current: Option<Current> = None;
                for &v in a.values() {
                    let addr = RowAddress::from_u64(v);
                    let f = addr.fragment();
                    if current.as_ref().is_none_or(|c| c.0 != f) {
                        current = Some((f, ex.fragment(f).await?));
                    }
                    let o = addr.offset();
                    keep.push(match &current {
                        Some((_, Some((del, rows)))) => {
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
