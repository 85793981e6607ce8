//! `KnnExec`: the k nearest rows to a query vector, as one node.
//!
//! ```text
//! KnnExec (k rows of the output columns, nearest first)
//!   [prefilter]  a Fathom scan of the indexed fragments outputting the
//!                `_rowaddr` of rows that pass the WHERE filters (scalar
//!                indexes answer it when they can): the allow-list
//!   [flat]       a Fathom scan of the fragments no segment covers,
//!                outputting the vector and `_rowaddr` of rows that pass:
//!                brute force
//! ```
//!
//! Each vector segment is searched in its `nprobes` nearest partitions for
//! `k · max(refine_factor, 1)` candidates among allowed rows (without a
//! filter: live rows of the fragments it is assigned; deleted rows never
//! take a place). Candidates' stored vectors are then read and their
//! exact distances computed, the brute-force rows are scored exactly, and
//! the global top k by exact distance (ties by row address) is taken and
//! read. The distances a query returns are thus always exact; with every
//! partition probed the result is the brute-force result.

use std::fmt;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::SchemaRef;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, collect,
};
use fathom_index::IndexCache;
use fathom_index::vector::Metric;
use fathom_index::vector::Nearest;
use fathom_table::format::IndexMetadata;
use fathom_table::scan::Projection;
use fathom_table::{Dataset, RowAddress, RowSet};
use roaring::RoaringBitmap;

use super::common::{only_partition, single_partition};
use super::exclusion::Exclusion;
use crate::error::to_df;
use crate::plan::ExclusionSource;
use crate::udf::Vectors;

/// A vector segment searched, with the fragments assigned to it.
#[derive(Debug, Clone)]
pub struct KnnSegment {
    pub meta: IndexMetadata,
    pub fragments: Arc<RoaringBitmap>,
}

/// What a vector search asks.
#[derive(Debug, Clone)]
pub struct KnnSpec {
    /// The vector column (position in the dataset's schema) and its name.
    pub column: usize,
    pub column_name: String,
    pub query: Vec<f32>,
    pub metric: Metric,
    pub k: usize,
    pub nprobes: usize,
    pub refine_factor: usize,
    /// Candidates an HNSW graph search keeps.
    pub ef: usize,
    /// The index used (name), if any.
    pub index: Option<String>,
}

#[derive(Debug)]
pub struct KnnExec {
    dataset: Dataset,
    spec: KnnSpec,
    segments: Vec<KnnSegment>,
    /// Output columns as read (ascending dataset order) and the order to
    /// output them in.
    read: Projection,
    output_idx: Vec<usize>,
    prefilter: Option<Arc<dyn ExecutionPlan>>,
    flat: Option<Arc<dyn ExecutionPlan>>,
    cache: Arc<IndexCache>,
    schema: SchemaRef,
    props: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl KnnExec {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        dataset: Dataset,
        spec: KnnSpec,
        segments: Vec<KnnSegment>,
        read: Projection,
        output_idx: Vec<usize>,
        prefilter: Option<Arc<dyn ExecutionPlan>>,
        flat: Option<Arc<dyn ExecutionPlan>>,
        cache: Arc<IndexCache>,
        schema: SchemaRef,
    ) -> Self {
        KnnExec {
            props: single_partition(schema.clone()),
            dataset,
            spec,
            segments,
            read,
            output_idx,
            prefilter,
            flat,
            cache,
            schema,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    pub fn spec(&self) -> &KnnSpec {
        &self.spec
    }
    pub fn segments(&self) -> &[KnnSegment] {
        &self.segments
    }
    pub fn dataset(&self) -> &Dataset {
        &self.dataset
    }
    pub fn read(&self) -> &Projection {
        &self.read
    }
    pub fn output_idx(&self) -> &[usize] {
        &self.output_idx
    }
    pub fn has_prefilter(&self) -> bool {
        self.prefilter.is_some()
    }
    pub fn has_flat(&self) -> bool {
        self.flat.is_some()
    }
}

impl DisplayAs for KnnExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let s = &self.spec;
        write!(
            f,
            "KnnExec: column={}, metric={}, k={}",
            s.column_name,
            s.metric.name(),
            s.k
        )?;
        match &s.index {
            Some(name) if !self.segments.is_empty() => {
                let covered: u64 = self.segments.iter().map(|x| x.fragments.len()).sum();
                write!(
                    f,
                    ", index={name}, segments={}, covered_fragments={covered}, nprobes={}, refine_factor={}",
                    self.segments.len(),
                    s.nprobes,
                    s.refine_factor
                )?;
            }
            _ => write!(f, ", exact (brute force)")?,
        }
        write!(
            f,
            ", prefilter={}, brute_force={}",
            self.prefilter.is_some(),
            self.flat.is_some()
        )
    }
}

impl ExecutionPlan for KnnExec {
    fn name(&self) -> &str {
        "KnnExec"
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        self.prefilter.iter().chain(self.flat.iter()).collect()
    }
    /// The children are read whole (every partition) by `collect`.
    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false; self.children().len()]
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
        let mut it = children.into_iter();
        let prefilter = self.prefilter.as_ref().and_then(|_| it.next());
        let flat = self.flat.as_ref().and_then(|_| it.next());
        Ok(Arc::new(KnnExec::new(
            self.dataset.clone(),
            self.spec.clone(),
            self.segments.clone(),
            self.read.clone(),
            self.output_idx.clone(),
            prefilter,
            flat,
            self.cache.clone(),
            self.schema.clone(),
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
        only_partition("KnnExec", partition)?;
        let m = |name: &'static str| MetricBuilder::new(&self.metrics).counter(name, partition);
        let counters = Counters {
            probed: m("partitions_probed"),
            skipped: m("partitions_skipped"),
            scored: m("candidates_scored"),
            brute: m("rows_brute_forced"),
            allowed: m("rows_allowed"),
            excluded: m("rows_excluded"),
        };
        let run = KnnRun {
            dataset: self.dataset.clone(),
            spec: self.spec.clone(),
            segments: self.segments.clone(),
            read: self.read.clone(),
            output_idx: self.output_idx.clone(),
            prefilter: self.prefilter.clone(),
            flat: self.flat.clone(),
            cache: self.cache.clone(),
            schema: self.schema.clone(),
        };
        let fut = async move { run.run(ctx, counters).await };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            futures::stream::once(fut),
        )))
    }
}

struct Counters {
    probed: datafusion::physical_plan::metrics::Count,
    skipped: datafusion::physical_plan::metrics::Count,
    scored: datafusion::physical_plan::metrics::Count,
    brute: datafusion::physical_plan::metrics::Count,
    allowed: datafusion::physical_plan::metrics::Count,
    excluded: datafusion::physical_plan::metrics::Count,
}

struct KnnRun {
    dataset: Dataset,
    spec: KnnSpec,
    segments: Vec<KnnSegment>,
    read: Projection,
    output_idx: Vec<usize>,
    prefilter: Option<Arc<dyn ExecutionPlan>>,
    flat: Option<Arc<dyn ExecutionPlan>>,
    cache: Arc<IndexCache>,
    schema: SchemaRef,
}

impl KnnRun {
    /// Exact distances of the rows at `addrs` (sorted), pushed into `top`.
    async fn score_addresses(&self, addrs: &[u64], top: &mut Nearest) -> Result<()> {
        if addrs.is_empty() {
            return Ok(());
        }
        let p = Projection {
            fields: vec![self.spec.column],
            with_row_id: false,
            with_row_addr: true,
        };
        let b = self
            .dataset
            .take_addresses(addrs, &p)
            .await
            .map_err(to_df)?;
        self.score_batch(b.column(0), b.column(1), top)
    }

    fn score_batch(&self, vectors: &ArrayRef, addrs: &ArrayRef, top: &mut Nearest) -> Result<()> {
        let v = Vectors::from_array(&self.spec.column_name, vectors)?;
        let a = addrs.as_primitive::<UInt64Type>();
        for i in 0..v.len() {
            if let Some(x) = v.get(i)
                && x.len() == self.spec.query.len()
            {
                let d = self.spec.metric.distance(&self.spec.query, x);
                // A NaN distance (a NaN in the stored vector) ranks nowhere.
                if !d.is_nan() {
                    top.push(d, a.value(i));
                }
            }
        }
        Ok(())
    }

    async fn run(self, ctx: Arc<TaskContext>, c: Counters) -> Result<RecordBatch> {
        let k = self.spec.k;
        let mut top = Nearest::new(k);
        if !self.segments.is_empty() {
            // Rows the search may return.
            let allow: RowSet = match &self.prefilter {
                Some(p) => {
                    let mut s = RowSet::new();
                    for b in collect(p.clone(), ctx.clone()).await? {
                        for a in b.column(0).as_primitive::<UInt64Type>().values() {
                            s.insert(RowAddress::from_u64(*a));
                        }
                    }
                    s
                }
                None => {
                    let mut all = RoaringBitmap::new();
                    for s in &self.segments {
                        all |= s.fragments.as_ref();
                    }
                    Exclusion::new(
                        &self.dataset,
                        &[
                            ExclusionSource::DeletedRows,
                            ExclusionSource::OutsideFragments(Arc::new(all)),
                        ],
                    )
                    .all_rows()
                    .await?
                }
            };
            c.allowed.add(allow.len() as usize);
            let want = k * self.spec.refine_factor.max(1);
            let mut candidates: Vec<u64> = Vec::new();
            for s in &self.segments {
                // (One built before a deferred-remap compaction is loaded
                // remapped to the rows' current addresses.)
                let seg = fathom_index::segment::load_vector(&self.dataset, &s.meta, &self.cache)
                    .await
                    .map_err(|e| DataFusionError::External(Box::new(e)))?;
                let frags = s.fragments.clone();
                // Rows overlaid since the build: scored on the flat input.
                let mut overlaid = self.dataset.overlaid_rows(&s.meta).as_ref().clone();
                overlaid.retain_fragments(|x| frags.contains(x.0));
                let allow_fn = |id: u64| {
                    let a = RowAddress::from_u64(id);
                    frags.contains(a.fragment().0) && allow.contains(a) && !overlaid.contains(a)
                };
                let (hits, stats) = seg
                    .search(
                        &self.spec.query,
                        want,
                        self.spec.nprobes,
                        self.spec.ef,
                        &self.cache,
                        &allow_fn,
                    )
                    .await
                    .map_err(|e| DataFusionError::External(Box::new(e)))?;
                c.probed.add(stats.partitions_probed);
                c.skipped.add(stats.partitions_skipped);
                c.scored.add(stats.candidates_scored);
                c.excluded.add(stats.rows_excluded);
                candidates.extend(
                    hits.into_iter()
                        .map(|(id, _)| id)
                        .filter(|a| !overlaid.contains(RowAddress::from_u64(*a))),
                );
            }
            candidates.sort_unstable();
            candidates.dedup();
            self.score_addresses(&candidates, &mut top).await?;
        }
        if let Some(flat) = &self.flat {
            for b in collect(flat.clone(), ctx.clone()).await? {
                c.brute.add(b.num_rows());
                self.score_batch(b.column(0), b.column(1), &mut top)?;
            }
        }
        let winners: Vec<u64> = top.into_sorted().into_iter().map(|(a, _)| a).collect();
        let b = self
            .dataset
            .take_addresses(&winners, &self.read)
            .await
            .map_err(to_df)?;
        let cols: Vec<ArrayRef> = self
            .output_idx
            .iter()
            .map(|i| b.column(*i).clone())
            .collect();
        Ok(RecordBatch::try_new_with_options(
            self.schema.clone(),
            cols,
            &arrow_array::RecordBatchOptions::new().with_row_count(Some(b.num_rows())),
        )?)
    }
}
