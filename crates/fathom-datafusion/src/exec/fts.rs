//! `FtsExec`: BM25-ranked full-text search, as one node.
//!
//! ```text
//! FtsExec (matching rows of the output columns and `_score`, best first)
//!   [prefilter]  a Fathom scan of every fragment outputting the
//!                `_rowaddr` of rows that pass the WHERE filters (scalar
//!                indexes answer it when they can): the allow-list
//!   [flat]       a Fathom scan of the fragments no segment covers,
//!                outputting the text and `_rowaddr` of every live row:
//!                tokenized here with the index's analyzer
//! ```
//!
//! Scores are BM25 (k1 = 1.2, b = 0.75) under the statistics of the whole
//! table version: documents, tokens and each term's document frequency
//! from the segments (over the current fragments assigned to them, rows
//! deleted since the build included, as Lance counts them) plus the flat
//! rows. A row's score therefore does not depend on whether its fragment
//! is indexed. Segments are searched by block-max WAND (OR) or
//! intersection (AND) for the top k among allowed rows (deleted rows and
//! rows failing the filters never take a place); flat rows are scored
//! directly; the global top k (score descending, ties by row address) is
//! read. Without k, every matching row is returned.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use arrow_array::{Array, ArrayRef, Float32Array, RecordBatch};
use arrow_schema::{DataType, SchemaRef};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::metrics::{
    Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet, Time,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, collect,
};
use fathom_index::IndexCache;
use fathom_index::fts::search::{Query, TopK};
use fathom_index::fts::{Analyzer, Corpus, FtsParams, FtsSegment, MatchOp, Scored};
use fathom_table::scan::Projection;
use fathom_table::{Dataset, RowAddress, RowSet};
use roaring::RoaringBitmap;

use super::common::single_partition;
use super::knn::KnnSegment;
use crate::error::to_df;

/// What a full-text search asks.
#[derive(Debug, Clone)]
pub struct FtsSpec {
    /// The text column (position in the dataset's schema) and its name.
    pub column: usize,
    pub column_name: String,
    /// The query text, analyzed as the index's documents are.
    pub query: String,
    pub op: MatchOp,
    /// Rows wanted (best first); `None`: every matching row.
    pub k: Option<usize>,
    /// The index used (name), if any.
    pub index: Option<String>,
}

/// Where an output column comes from.
pub const SCORE: usize = usize::MAX;

#[derive(Debug)]
pub struct FtsExec {
    dataset: Dataset,
    spec: FtsSpec,
    segments: Vec<KnnSegment>,
    /// Columns read from the winners (ascending dataset order) and, per
    /// output column, its position there ([`SCORE`]: the score).
    read: Projection,
    output_idx: Vec<usize>,
    prefilter: Option<Arc<dyn ExecutionPlan>>,
    flat: Option<Arc<dyn ExecutionPlan>>,
    cache: Arc<IndexCache>,
    schema: SchemaRef,
    props: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl FtsExec {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        dataset: Dataset,
        spec: FtsSpec,
        segments: Vec<KnnSegment>,
        read: Projection,
        output_idx: Vec<usize>,
        prefilter: Option<Arc<dyn ExecutionPlan>>,
        flat: Option<Arc<dyn ExecutionPlan>>,
        cache: Arc<IndexCache>,
        schema: SchemaRef,
    ) -> Self {
        FtsExec {
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

    pub fn spec(&self) -> &FtsSpec {
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

impl DisplayAs for FtsExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let s = &self.spec;
        write!(
            f,
            "FtsExec: column={}, query={:?}, op={}, k={}",
            s.column_name,
            s.query,
            s.op.name(),
            s.k.map_or("all".to_string(), |k| k.to_string())
        )?;
        match &s.index {
            Some(name) if !self.segments.is_empty() => {
                let covered: u64 = self.segments.iter().map(|x| x.fragments.len()).sum();
                write!(
                    f,
                    ", index={name}, segments={}, covered_fragments={covered}",
                    self.segments.len(),
                )?;
            }
            _ => write!(f, ", no index (flat)")?,
        }
        write!(
            f,
            ", prefilter={}, flat={}",
            self.prefilter.is_some(),
            self.flat.is_some()
        )
    }
}

impl ExecutionPlan for FtsExec {
    fn name(&self) -> &str {
        "FtsExec"
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
        Ok(Arc::new(FtsExec::new(
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
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "FtsExec has one partition; {partition} requested"
            )));
        }
        let m = |name: &'static str| MetricBuilder::new(&self.metrics).counter(name, partition);
        let counters = Counters {
            scored: m("docs_scored"),
            blocks: m("blocks_decoded"),
            blocks_total: m("blocks_total"),
            flat: m("rows_tokenized"),
            allowed: m("rows_allowed"),
            stats_time: MetricBuilder::new(&self.metrics).subset_time("statistics_time", partition),
            search_time: MetricBuilder::new(&self.metrics).subset_time("search_time", partition),
            fetch_time: MetricBuilder::new(&self.metrics).subset_time("fetch_time", partition),
        };
        let run = FtsRun {
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
    scored: Count,
    blocks: Count,
    blocks_total: Count,
    flat: Count,
    allowed: Count,
    /// Loading segments, reading flat rows, corpus statistics.
    stats_time: Time,
    /// Scoring: segments and flat hits.
    search_time: Time,
    /// Reading the winners' columns.
    fetch_time: Time,
}

struct FtsRun {
    dataset: Dataset,
    spec: FtsSpec,
    segments: Vec<KnnSegment>,
    read: Projection,
    output_idx: Vec<usize>,
    prefilter: Option<Arc<dyn ExecutionPlan>>,
    flat: Option<Arc<dyn ExecutionPlan>>,
    cache: Arc<IndexCache>,
    schema: SchemaRef,
}

fn ext(e: fathom_index::Error) -> DataFusionError {
    match e {
        fathom_index::Error::InvalidInput(m) => DataFusionError::Execution(m),
        e => DataFusionError::External(Box::new(e)),
    }
}

/// The text of row `i` of a string column (`None`: null).
pub fn text_at(a: &ArrayRef, i: usize) -> Option<&str> {
    if a.is_null(i) {
        return None;
    }
    Some(match a.data_type() {
        DataType::LargeUtf8 => a.as_string::<i64>().value(i),
        DataType::Utf8View => a.as_string_view().value(i),
        _ => a.as_string::<i32>().value(i),
    })
}

/// A flat row holding some query term.
struct FlatHit {
    addr: u64,
    tf: Vec<u32>,
    len: u32,
}

impl FtsRun {
    async fn run(self, ctx: Arc<TaskContext>, c: Counters) -> Result<RecordBatch> {
        let ds = &self.dataset;
        let stats_timer = c.stats_time.timer();
        let mut segs = Vec::with_capacity(self.segments.len());
        for s in &self.segments {
            segs.push(
                FtsSegment::load(ds.store(), ds.root(), &s.meta, &self.cache)
                    .await
                    .map_err(ext)?,
            );
        }
        let default_analyzer;
        let analyzer: &Analyzer = match segs.first() {
            Some(s) => &s.analyzer,
            None => {
                default_analyzer = Analyzer::new(&FtsParams::default()).map_err(ext)?;
                &default_analyzer
            }
        };
        let mut q = Query::parse(analyzer, &self.spec.query, self.spec.op).map_err(ext)?;
        let terms = q.terms.clone();

        // Rows the WHERE filters allow (all rows without filters).
        let allow: Option<RowSet> = match &self.prefilter {
            Some(p) => {
                let mut s = RowSet::new();
                for b in collect(p.clone(), ctx.clone()).await? {
                    for a in b.column(0).as_primitive::<UInt64Type>().values() {
                        s.insert(RowAddress::from_u64(*a));
                    }
                }
                c.allowed.add(s.len() as usize);
                Some(s)
            }
            None => None,
        };

        // Flat rows: statistics of all, terms of those that hold some.
        let mut corpus = Corpus::default();
        let mut hits: Vec<FlatHit> = Vec::new();
        if let Some(flat) = &self.flat {
            let probe = &q;
            for b in collect(flat.clone(), ctx.clone()).await? {
                c.flat.add(b.num_rows());
                let text = b.column(0);
                let addrs = b.column(1).as_primitive::<UInt64Type>();
                for i in 0..b.num_rows() {
                    let Some(t) = text_at(text, i) else { continue };
                    let (tf, len, holds) = if self.spec.op == MatchOp::Phrase {
                        let (tf, len, pos) = probe.row_positions(analyzer, t);
                        let refs: Vec<&[u32]> = pos.iter().map(|p| p.as_slice()).collect();
                        let holds = tf.iter().all(|f| *f > 0) && probe.phrase_at(&refs);
                        (tf, len, holds)
                    } else {
                        let (tf, len) = probe.row(analyzer, t);
                        (tf, len, true)
                    };
                    corpus.add_row(&terms, &tf, len);
                    if holds && tf.iter().any(|f| *f > 0) {
                        hits.push(FlatHit {
                            addr: addrs.value(i),
                            tf,
                            len,
                        });
                    }
                }
            }
        }
        // Indexed rows: the segments' statistics over their fragments.
        for (seg, s) in segs.iter().zip(&self.segments) {
            let reuse = fathom_index::segment::frag_reuse(ds, &s.meta);
            let (docs, tokens) = seg.counts(&s.fragments, reuse);
            corpus.docs += docs;
            corpus.tokens += tokens;
            for t in &terms {
                let n = seg
                    .df(t, &s.fragments, reuse, &self.cache)
                    .await
                    .map_err(ext)?;
                *corpus.df.entry(t.clone()).or_default() += n;
            }
        }
        q.bind(&corpus);
        stats_timer.done();
        let search_timer = c.search_time.timer();
        let mut top = TopK::new(self.spec.k);
        if q.can_match() {
            if !segs.is_empty() {
                // Without a prefilter a row passes when its fragment is
                // one the segment answers for and it is not deleted.
                let mut deleted: HashMap<u32, Option<Arc<RoaringBitmap>>> = HashMap::new();
                if allow.is_none() {
                    for s in &self.segments {
                        for f in s.fragments.iter() {
                            if let Some(fr) = ds.fragment(f as u64) {
                                deleted.insert(f, ds.deleted_rows(fr).await.map_err(to_df)?);
                            }
                        }
                    }
                }
                for (seg, s) in segs.iter().zip(&self.segments) {
                    let frags = s.fragments.clone();
                    let reuse = fathom_index::segment::frag_reuse(ds, &s.meta);
                    let allow_fn = |id: u64| {
                        let id = match reuse {
                            Some(fr) => match fr.remap(id) {
                                Some(a) => a,
                                None => return false,
                            },
                            None => id,
                        };
                        let a = RowAddress::from_u64(id);
                        let f = a.fragment().0;
                        if !frags.contains(f) {
                            return false;
                        }
                        match &allow {
                            Some(ok) => ok.contains(a),
                            None => match deleted.get(&f) {
                                Some(None) => true,
                                Some(Some(d)) => !d.contains(a.offset()),
                                None => false,
                            },
                        }
                    };
                    let stats = seg
                        .search(&q, &allow_fn, &self.cache, &mut top)
                        .await
                        .map_err(ext)?;
                    c.scored.add(stats.docs_scored);
                    c.blocks.add(stats.blocks_decoded);
                    c.blocks_total.add(stats.blocks_total);
                }
            }
            for h in &hits {
                if allow
                    .as_ref()
                    .is_some_and(|a| !a.contains(RowAddress::from_u64(h.addr)))
                {
                    continue;
                }
                if let Some(score) = q.score(&h.tf, h.len) {
                    top.push(Scored {
                        addr: h.addr,
                        score,
                    });
                }
            }
        }
        let mut winners = top.into_sorted();
        // Segments that predate a deferred-remap compaction answer with
        // the rows' old addresses.
        if let Some(fr) = ds.manifest().frag_reuse.as_deref() {
            for w in &mut winners {
                if let Some(a) = fr.remap(w.addr) {
                    w.addr = a;
                }
            }
        }
        search_timer.done();
        let _fetch_timer = c.fetch_time.timer();
        let addrs: Vec<u64> = winners.iter().map(|w| w.addr).collect();
        let b = ds.take_addresses(&addrs, &self.read).await.map_err(to_df)?;
        if b.num_rows() != winners.len() {
            return Err(DataFusionError::Internal(format!(
                "full-text search: {} rows found, {} read",
                winners.len(),
                b.num_rows()
            )));
        }
        let scores: ArrayRef = Arc::new(Float32Array::from_iter_values(
            winners.iter().map(|w| w.score),
        ));
        let cols: Vec<ArrayRef> = self
            .output_idx
            .iter()
            .map(|i| {
                if *i == SCORE {
                    scores.clone()
                } else {
                    b.column(*i).clone()
                }
            })
            .collect();
        Ok(RecordBatch::try_new_with_options(
            self.schema.clone(),
            cols,
            &arrow_array::RecordBatchOptions::new().with_row_count(Some(winners.len())),
        )?)
    }
}
