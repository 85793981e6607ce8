//! `FragmentScanExec`: the flat path. Reads the planned fragment row
//! ranges of one snapshot, skips deleted rows, evaluates the pushed filter
//! (exactly, with DataFusion's own physical expressions), projects, and
//! stops at the limit.

use std::fmt;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use datafusion::common::Statistics;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_plan::coop::make_cooperative;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType, SchedulingType};
use datafusion::physical_plan::metrics::{
    BaselineMetrics, Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use fathom_table::Dataset;
use fathom_table::scan::{Projection, Rows, chunk_runs};
use futures::StreamExt;

use crate::error::to_df;
use crate::plan::{FlatPartitions, ScanUnit};

/// Scans fragments on the flat path.
#[derive(Debug, Clone)]
pub struct FragmentScanExec {
    dataset: Dataset,
    plan: FlatPartitions,
    /// What is read: requested columns plus those the filter needs.
    read: Projection,
    /// Columns of the read batch that are output.
    output: Vec<usize>,
    filter: Option<Arc<dyn PhysicalExpr>>,
    /// Late materialization: read these columns first, evaluate this filter
    /// (bound to them), then read the rest only for matching rows.
    prefilter: Option<(Projection, Arc<dyn PhysicalExpr>)>,
    /// Skips zones whose statistics rule the filter out.
    pruning: Option<Arc<datafusion::physical_optimizer::pruning::PruningPredicate>>,
    limit: Option<usize>,
    schema: SchemaRef,
    props: Arc<PlanProperties>,
    batch_size: usize,
    skipped_segments: usize,
    /// The table's index cache, for rules that answer from an index what
    /// this scan would read (grouped counts).
    index_cache: Option<Arc<fathom_index::IndexCache>>,
    metrics: ExecutionPlanMetricsSet,
}

impl FragmentScanExec {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        dataset: Dataset,
        plan: FlatPartitions,
        read: Projection,
        output: Vec<usize>,
        filter: Option<Arc<dyn PhysicalExpr>>,
        limit: Option<usize>,
        schema: SchemaRef,
        batch_size: usize,
    ) -> Self {
        let props = Arc::new(
            PlanProperties::new(
                EquivalenceProperties::new(schema.clone()),
                Partitioning::UnknownPartitioning(plan.partitions.len().max(1)),
                EmissionType::Incremental,
                Boundedness::Bounded,
            )
            .with_scheduling_type(SchedulingType::Cooperative),
        );
        FragmentScanExec {
            dataset,
            plan,
            read,
            output,
            filter,
            prefilter: None,
            pruning: None,
            limit,
            schema,
            props,
            batch_size,
            skipped_segments: 0,
            index_cache: None,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    /// Enables late materialization with `columns` and `filter` bound to them.
    pub fn with_prefilter(mut self, columns: Projection, filter: Arc<dyn PhysicalExpr>) -> Self {
        self.prefilter = Some((columns, filter));
        self
    }

    /// Enables zone pruning with a predicate over the table's columns.
    pub fn with_pruning(
        mut self,
        p: Arc<datafusion::physical_optimizer::pruning::PruningPredicate>,
    ) -> Self {
        self.pruning = Some(p);
        self
    }

    /// Segments of unusable kinds or versions the plan skipped (a metric).
    pub fn with_skipped_segments(mut self, n: usize) -> Self {
        self.skipped_segments = n;
        self
    }

    /// The table's index cache (see the field).
    pub fn with_index_cache(mut self, cache: Arc<fathom_index::IndexCache>) -> Self {
        self.index_cache = Some(cache);
        self
    }

    pub fn index_cache(&self) -> Option<&Arc<fathom_index::IndexCache>> {
        self.index_cache.as_ref()
    }
    pub fn plan(&self) -> &FlatPartitions {
        &self.plan
    }
    pub fn dataset(&self) -> &Dataset {
        &self.dataset
    }
    pub fn read(&self) -> &Projection {
        &self.read
    }
    pub fn output(&self) -> &[usize] {
        &self.output
    }
    pub fn filter(&self) -> Option<&Arc<dyn PhysicalExpr>> {
        self.filter.as_ref()
    }
    pub fn prefilter(&self) -> Option<&(Projection, Arc<dyn PhysicalExpr>)> {
        self.prefilter.as_ref()
    }
    pub fn pruning(
        &self,
    ) -> Option<&Arc<datafusion::physical_optimizer::pruning::PruningPredicate>> {
        self.pruning.as_ref()
    }
    pub fn limit(&self) -> Option<usize> {
        self.limit
    }
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }
    pub fn skipped_segments(&self) -> usize {
        self.skipped_segments
    }
}

impl DisplayAs for FragmentScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let cols: Vec<String> = self
            .schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        write!(
            f,
            "FragmentScanExec: version={}, fragments={}, rows={}, projection=[{}]",
            self.dataset.version(),
            self.plan.num_fragments(),
            self.plan.num_rows(),
            cols.join(", ")
        )?;
        if let Some(filter) = &self.filter {
            write!(f, ", filter={filter}")?;
        }
        if let Some(l) = self.limit {
            write!(f, ", limit={l}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for FragmentScanExec {
    fn name(&self) -> &str {
        "FragmentScanExec"
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
        match &self.filter {
            Some(e) => f(e),
            None => Ok(TreeNodeRecursion::Continue),
        }
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
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

    fn statistics_from_inputs(
        &self,
        _input: &[Arc<Statistics>],
        args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        let mut s = Statistics::new_unknown(&self.schema);
        if self.filter.is_none() {
            let rows = match args.partition() {
                None => Some(self.dataset.count_rows()),
                // Per partition the live count would need the deletion files.
                Some(_) => None,
            };
            if let Some(rows) = rows {
                let rows = self.limit.map_or(rows, |l| rows.min(l as u64)) as usize;
                s.num_rows = Precision::Exact(rows);
            }
        }
        Ok(Arc::new(s))
    }

    fn execute(
        &self,
        partition: usize,
        _ctx: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let units: Vec<ScanUnit> = self
            .plan
            .partitions
            .get(partition)
            .cloned()
            .unwrap_or_default();
        let baseline = BaselineMetrics::new(&self.metrics, partition);
        if partition == 0 {
            MetricBuilder::new(&self.metrics)
                .counter("segments_skipped", partition)
                .add(self.skipped_segments);
        }
        let scanned: Count = MetricBuilder::new(&self.metrics).counter("rows_scanned", partition);
        let fragments: Count =
            MetricBuilder::new(&self.metrics).counter("fragments_scanned", partition);
        let ds = self.dataset.clone();
        let read = Arc::new(self.read.clone());
        let output = self.output.clone();
        let filter = self.filter.clone();
        let schema = self.schema.clone();
        let batch_size = self.batch_size as u64;
        let limit = self.limit;
        let prefilter = self.prefilter.clone();
        let pruning = self.pruning.clone();
        let pruned: Count =
            MetricBuilder::new(&self.metrics).counter("rows_pruned_by_zone_stats", partition);
        let stream = futures::stream::iter(units)
            .then(move |unit| {
                let ds = ds.clone();
                let read = read.clone();
                let fragments = fragments.clone();
                let filter = filter.clone();
                let prefilter = prefilter.clone();
                let output = output.clone();
                let schema = schema.clone();
                let scanned = scanned.clone();
                let pruning = pruning.clone();
                let pruned = pruned.clone();
                async move {
                    let frag = ds.fragment(unit.fragment).ok_or_else(|| {
                        datafusion::error::DataFusionError::Internal(format!(
                            "fragment {} not in snapshot",
                            unit.fragment
                        ))
                    })?;
                    fragments.add(1);
                    let reader = ds
                        .fragment_reader(
                            frag,
                            read.with_row_id || prefilter.as_ref().is_some_and(|p| p.0.with_row_id),
                        )
                        .await
                        .map_err(to_df)?;
                    let runs: Vec<_> = reader
                        .live_runs()
                        .into_iter()
                        .filter_map(|r| {
                            let s = r.start.max(unit.rows.start);
                            let e = r.end.min(unit.rows.end);
                            (s < e).then_some(s..e)
                        })
                        .collect();
                    let runs = match (&pruning, reader.zone_stats().await.map_err(to_df)?) {
                        (Some(p), Some(stats)) => {
                            let keep = p.prune(&crate::pruning::Zones(&stats))?;
                            let kept = crate::pruning::restrict(&runs, &keep, stats.rows_per_zone);
                            let before: u64 = runs.iter().map(|r| r.end - r.start).sum();
                            let after: u64 = kept.iter().map(|r| r.end - r.start).sum();
                            pruned.add((before - after) as usize);
                            kept
                        }
                        _ => runs,
                    };
                    let chunks = chunk_runs(&runs, batch_size);
                    Ok::<_, datafusion::error::DataFusionError>(futures::stream::iter(chunks).map(
                        move |c| {
                            let reader = reader.clone();
                            let read = read.clone();
                            let filter = filter.clone();
                            let prefilter = prefilter.clone();
                            let output = output.clone();
                            let schema = schema.clone();
                            let scanned = scanned.clone();
                            Ok(async move {
                                scanned.add(c.iter().map(|r| (r.end - r.start) as usize).sum());
                                let batch = match (&prefilter, &filter) {
                                    (Some((cols, f)), _) => {
                                        // Late materialization: filter columns first.
                                        let first = reader
                                            .read(cols, Rows::Runs(&c))
                                            .await
                                            .map_err(to_df)?;
                                        let mask = boolean(
                                            f.evaluate(&first)?.into_array(first.num_rows())?,
                                        )?;
                                        let matched = selected_offsets(&c, &mask);
                                        let runs = fathom_file::reader::indices_to_runs(&matched);
                                        reader
                                            .read(&read, Rows::Runs(&runs))
                                            .await
                                            .map_err(to_df)?
                                    }
                                    (None, Some(f)) => {
                                        let batch = reader
                                            .read(&read, Rows::Runs(&c))
                                            .await
                                            .map_err(to_df)?;
                                        let mask = boolean(
                                            f.evaluate(&batch)?.into_array(batch.num_rows())?,
                                        )?;
                                        arrow_select::filter::filter_record_batch(&batch, &mask)?
                                    }
                                    (None, None) => {
                                        reader.read(&read, Rows::Runs(&c)).await.map_err(to_df)?
                                    }
                                };
                                let projected = batch.project(&output)?;
                                Ok(RecordBatch::try_new_with_options(
                                    schema,
                                    projected.columns().to_vec(),
                                    &arrow_array::RecordBatchOptions::new()
                                        .with_row_count(Some(projected.num_rows())),
                                )?)
                            })
                        },
                    ))
                }
            })
            .try_flatten_unordered_compat()
            .filter(|b| futures::future::ready(!matches!(b, Ok(b) if b.num_rows() == 0)));
        // Tiny fragments give tiny batches: gathered into batches of about
        // `batch_size` rows (no more than the limit, so a limit stops early).
        let target = limit.map_or(self.batch_size, |l| l.min(self.batch_size));
        let stream = coalesce_small(stream.boxed(), self.schema.clone(), target);
        let stream = apply_limit(stream, limit).map(move |b| {
            if let Ok(b) = &b {
                baseline.record_output(b.num_rows());
            }
            b
        });
        Ok(make_cooperative(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            stream,
        ))))
    }
}

/// The offsets in `runs` (in order, one mask slot each) where `mask` is
/// true (NULL counts as false), walking the mask's set bits only.
fn selected_offsets(runs: &[std::ops::Range<u64>], mask: &arrow_array::BooleanArray) -> Vec<u64> {
    let bits = match arrow_array::Array::nulls(mask) {
        Some(n) if n.null_count() > 0 => mask.values() & n.inner(),
        _ => mask.values().clone(),
    };
    let mut out = Vec::with_capacity(bits.count_set_bits());
    let mut at = 0usize;
    for r in runs {
        let len = (r.end - r.start) as usize;
        out.extend(
            bits.slice(at, len)
                .set_indices()
                .map(|i| r.start + i as u64),
        );
        at += len;
    }
    out
}

fn boolean(a: arrow_array::ArrayRef) -> Result<arrow_array::BooleanArray> {
    arrow_array::cast::AsArray::as_boolean_opt(&a)
        .cloned()
        .ok_or_else(|| datafusion::error::DataFusionError::Plan("filter is not boolean".into()))
}

/// Gathers batches smaller than half of `target` rows into batches of
/// `target` rows (larger ones pass through uncopied), in order.
fn coalesce_small(
    s: futures::stream::BoxStream<'static, Result<RecordBatch>>,
    schema: arrow_schema::SchemaRef,
    target: usize,
) -> futures::stream::BoxStream<'static, Result<RecordBatch>> {
    // Batches without columns (counts) carry only a row count: left alone.
    if schema.fields().is_empty() || target < 2 {
        return s;
    }
    let c = arrow_select::coalesce::BatchCoalescer::new(schema, target)
        .with_biggest_coalesce_batch_size(Some(target / 2));
    /// Reading input; input ended (draining); stopped after an error.
    #[derive(PartialEq)]
    enum State {
        Reading,
        Draining,
        Stopped,
    }
    futures::stream::unfold((s, c, State::Reading), |(mut s, mut c, state)| async move {
        loop {
            if let Some(b) = c.next_completed_batch() {
                return Some((Ok(b), (s, c, state)));
            }
            if state != State::Reading {
                return None;
            }
            match s.next().await {
                Some(Ok(b)) => {
                    if let Err(e) = c.push_batch(b) {
                        return Some((Err(e.into()), (s, c, State::Stopped)));
                    }
                }
                Some(Err(e)) => return Some((Err(e), (s, c, State::Stopped))),
                None => {
                    if let Err(e) = c.finish_buffered_batch() {
                        return Some((Err(e.into()), (s, c, State::Stopped)));
                    }
                    return c
                        .next_completed_batch()
                        .map(|b| (Ok(b), (s, c, State::Draining)));
                }
            }
        }
    })
    .boxed()
}

/// Truncates a stream of batches after `limit` rows.
fn apply_limit(
    s: impl futures::Stream<Item = Result<RecordBatch>> + Send + 'static,
    limit: Option<usize>,
) -> futures::stream::BoxStream<'static, Result<RecordBatch>> {
    let Some(limit) = limit else {
        return s.boxed();
    };
    s.scan(limit, |left, b| {
        if *left == 0 {
            return futures::future::ready(None);
        }
        let r = b.map(|b| {
            let n = b.num_rows().min(*left);
            *left -= n;
            b.slice(0, n)
        });
        futures::future::ready(Some(r))
    })
    .boxed()
}

/// `try_flatten` over a stream of streams of futures, reading ahead by two.
trait TryFlattenCompat: Sized {
    fn try_flatten_unordered_compat(
        self,
    ) -> futures::stream::BoxStream<'static, Result<RecordBatch>>;
}

impl<S, Inner, Fut> TryFlattenCompat for S
where
    S: futures::Stream<Item = Result<Inner>> + Send + 'static,
    Inner: futures::Stream<Item = Result<Fut>> + Send + 'static,
    Fut: futures::Future<Output = Result<RecordBatch>> + Send + 'static,
{
    fn try_flatten_unordered_compat(
        self,
    ) -> futures::stream::BoxStream<'static, Result<RecordBatch>> {
        use futures::TryStreamExt;
        self.try_flatten().try_buffered(2).boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::selected_offsets;
    use arrow_array::BooleanArray;

    #[test]
    fn selected_offsets_walk_runs_and_skip_nulls() {
        // Two runs (3..6 and 10..13): six mask slots, one NULL.
        let mask = BooleanArray::from(vec![
            Some(true),
            Some(false),
            None,
            Some(true),
            Some(true),
            Some(false),
        ]);
        assert_eq!(selected_offsets(&[3..6, 10..13], &mask), vec![3, 10, 11]);
        let all = BooleanArray::from(vec![true; 4]);
        assert_eq!(selected_offsets(&[0..1, 7..10], &all), vec![0, 7, 8, 9]);
    }
}
