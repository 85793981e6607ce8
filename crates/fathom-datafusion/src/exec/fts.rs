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

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use arrow_array::{ArrayRef, Float32Array, RecordBatch};
use arrow_schema::SchemaRef;
use arrow_schema::SortOptions;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{
    EquivalenceProperties, Partitioning, PhysicalExpr, PhysicalSortExpr,
};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{
    Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet, Time,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, collect,
};
use fathom_index::IndexCache;
use fathom_index::fts::search::{Query, TopK, accepts};
use fathom_index::fts::{Analyzer, Corpus, FtsParams, FtsSegment, MatchOp, Scored};
use fathom_table::scan::Projection;
use fathom_table::{Dataset, RowAddress, RowSet};

use super::common::{Deleted, only_partition, single_partition, text_at};
use super::knn::KnnSegment;
use crate::error::to_df;

/// One text column a full-text search reads.
#[derive(Debug, Clone)]
pub struct FtsField {
    /// The text column (position in the dataset's schema) and its name.
    pub column: usize,
    pub column_name: String,
    /// Its scores are multiplied by this (> 0; 1 unless the query says).
    pub boost: f32,
    /// The index used (name), if any, and its segments with the current
    /// fragments each answers for.
    pub index: Option<String>,
    pub segments: Vec<KnnSegment>,
}

/// What a full-text search asks.
#[derive(Debug, Clone)]
pub struct FtsSpec {
    /// The columns searched: a row's score is its best boosted score over
    /// them (Lance's multi-match); a row matches when any column matches.
    pub fields: Vec<FtsField>,
    /// The query text, analyzed as each column's index analyzes documents.
    pub query: String,
    pub op: MatchOp,
    /// Rows wanted (best first); `None`: every matching row.
    pub k: Option<usize>,
    /// Fuzzy terms: most expansions of each, and leading characters an
    /// expansion shares with the term (`fathom.fts_max_expansions`,
    /// `fathom.fts_prefix_length`).
    pub max_expansions: usize,
    pub prefix_length: usize,
}

/// The node's properties: one partition, rows best first (by `_score`
/// descending, when it is an output column), so that DataFusion needs no
/// sort for `ORDER BY _score DESC` (a limit is enough).
fn best_first(schema: &SchemaRef) -> Arc<PlanProperties> {
    let Ok(i) = schema.index_of(crate::fts::SCORE_COLUMN) else {
        return single_partition(schema.clone());
    };
    let order = PhysicalSortExpr {
        expr: Arc::new(Column::new(crate::fts::SCORE_COLUMN, i)),
        options: SortOptions {
            descending: true,
            nulls_first: true,
        },
    };
    Arc::new(PlanProperties::new(
        EquivalenceProperties::new_with_orderings(schema.clone(), [[order]]),
        Partitioning::UnknownPartitioning(1),
        EmissionType::Final,
        Boundedness::Bounded,
    ))
}

/// Where an output column comes from.
pub const SCORE: usize = usize::MAX;

#[derive(Debug)]
pub struct FtsExec {
    dataset: Dataset,
    spec: FtsSpec,
    /// Columns read from the winners (ascending dataset order) and, per
    /// output column, its position there ([`SCORE`]: the score).
    read: Projection,
    output_idx: Vec<usize>,
    prefilter: Option<Arc<dyn ExecutionPlan>>,
    /// Per field, the scan of the fragments its segments do not cover.
    flat: Vec<Option<Arc<dyn ExecutionPlan>>>,
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
        read: Projection,
        output_idx: Vec<usize>,
        prefilter: Option<Arc<dyn ExecutionPlan>>,
        flat: Vec<Option<Arc<dyn ExecutionPlan>>>,
        cache: Arc<IndexCache>,
        schema: SchemaRef,
    ) -> Self {
        assert_eq!(flat.len(), spec.fields.len(), "one flat input per field");
        FtsExec {
            props: best_first(&schema),
            dataset,
            spec,
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
    /// Per field, whether it has a flat input.
    pub fn has_flat(&self) -> Vec<bool> {
        self.flat.iter().map(Option::is_some).collect()
    }
}

impl DisplayAs for FtsExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let s = &self.spec;
        let field = |f: &mut fmt::Formatter, x: &FtsField| {
            write!(f, "{}", x.column_name)?;
            if x.boost != 1.0 {
                write!(f, "^{}", x.boost)?;
            }
            Ok(())
        };
        let index = |f: &mut fmt::Formatter, x: &FtsField| match &x.index {
            Some(name) if !x.segments.is_empty() => {
                let covered: u64 = x.segments.iter().map(|x| x.fragments.len()).sum();
                write!(
                    f,
                    "index={name}, segments={}, covered_fragments={covered}",
                    x.segments.len(),
                )
            }
            _ => write!(f, "no index (flat)"),
        };
        if let [one] = &s.fields[..] {
            write!(f, "FtsExec: column=")?;
            field(f, one)?;
        } else {
            write!(f, "FtsExec: columns=[")?;
            for (i, x) in s.fields.iter().enumerate() {
                if i > 0 {
                    write!(f, ", ")?;
                }
                field(f, x)?;
            }
            write!(f, "]")?;
        }
        write!(
            f,
            ", query={:?}, op={}, k={}",
            s.query,
            s.op.name(),
            s.k.map_or("all".to_string(), |k| k.to_string())
        )?;
        if let [one] = &s.fields[..] {
            write!(f, ", ")?;
            index(f, one)?;
        } else {
            for x in &s.fields {
                write!(f, ", {}: ", x.column_name)?;
                index(f, x)?;
            }
        }
        write!(
            f,
            ", prefilter={}, flat={}",
            self.prefilter.is_some(),
            self.flat.iter().any(Option::is_some)
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
        self.prefilter
            .iter()
            .chain(self.flat.iter().flatten())
            .collect()
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
        let flat = self
            .flat
            .iter()
            .map(|f| f.as_ref().and_then(|_| it.next()))
            .collect();
        Ok(Arc::new(FtsExec::new(
            self.dataset.clone(),
            self.spec.clone(),
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
        only_partition("FtsExec", partition)?;
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
    read: Projection,
    output_idx: Vec<usize>,
    prefilter: Option<Arc<dyn ExecutionPlan>>,
    flat: Vec<Option<Arc<dyn ExecutionPlan>>>,
    cache: Arc<IndexCache>,
    schema: SchemaRef,
}

/// The rows of `s`'s fragments whose text an overlay changed since the
/// segment's build: its documents for them are stale (left out of its
/// answers and statistics; the flat input scores their current text).
fn stale_rows(ds: &Dataset, s: &KnnSegment) -> RowSet {
    let mut r = ds.overlaid_rows(&s.meta).as_ref().clone();
    r.retain_fragments(|f| s.fragments.contains(f.0));
    r
}

fn ext(e: fathom_index::Error) -> DataFusionError {
    match e {
        fathom_index::Error::InvalidInput(m) => DataFusionError::Execution(m),
        e => DataFusionError::External(Box::new(e)),
    }
}

/// A flat row holding some query term.
struct FlatHit {
    addr: u64,
    tf: Vec<u32>,
    len: u32,
    /// Each term's positions, when matching needs them (phrases).
    pos: Vec<Vec<u32>>,
}

impl FtsRun {
    async fn run(self, ctx: Arc<TaskContext>, c: Counters) -> Result<RecordBatch> {
        // Rows the WHERE filters allow (all rows without filters).
        let stats_timer = c.stats_time.timer();
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
        stats_timer.done();
        let mut deleted = Deleted::default();
        let winners = if let [_] = &self.spec.fields[..] {
            self.field_top(0, &ctx, &c, allow.as_ref(), &mut deleted)
                .await?
        } else {
            // A row's score is its best over the fields. The global top k
            // is among the fields' own top k: a row that k others beat in
            // its best field is beaten by them overall.
            let mut best: HashMap<u64, f32> = HashMap::new();
            for i in 0..self.spec.fields.len() {
                for w in self
                    .field_top(i, &ctx, &c, allow.as_ref(), &mut deleted)
                    .await?
                {
                    let e = best.entry(w.addr).or_insert(w.score);
                    *e = e.max(w.score);
                }
            }
            let mut top = TopK::new(self.spec.k);
            for (addr, score) in best {
                top.push(Scored { addr, score });
            }
            top.into_sorted()
        };
        self.fetch(winners, &c).await
    }

    /// Field `i`'s best rows (all without k), current addresses, boosted
    /// scores, best first.
    async fn field_top(
        &self,
        i: usize,
        ctx: &Arc<TaskContext>,
        c: &Counters,
        allow: Option<&RowSet>,
        deleted: &mut Deleted,
    ) -> Result<Vec<Scored>> {
        let ds = &self.dataset;
        let field = &self.spec.fields[i];
        let stats_timer = c.stats_time.timer();
        let mut segs = Vec::with_capacity(field.segments.len());
        for s in &field.segments {
            segs.push(
                fathom_index::segment::load_fts(ds, &s.meta, &self.cache)
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
        let stale: Vec<RowSet> = field.segments.iter().map(|s| stale_rows(ds, s)).collect();
        let mut q = Query::parse(analyzer, &self.spec.query, self.spec.op).map_err(ext)?;
        let flat_rows = match &self.flat[i] {
            Some(flat) => collect(flat.clone(), ctx.clone()).await?,
            None => vec![],
        };
        if !q.fuzzy.is_empty() {
            let expansions = self
                .expand_fuzzy(&q, analyzer, &segs, field, &flat_rows)
                .await?;
            q.expand(expansions);
        }
        let terms = q.terms.clone();

        // Flat rows: statistics of all, terms of those that hold some.
        let mut corpus = Corpus::default();
        let mut hits: Vec<FlatHit> = Vec::new();
        {
            let probe = &q;
            for b in &flat_rows {
                c.flat.add(b.num_rows());
                let text = b.column(0);
                let addrs = b.column(1).as_primitive::<UInt64Type>();
                for i in 0..b.num_rows() {
                    let Some(t) = text_at(text, i) else { continue };
                    // Matches do not depend on the statistics (bound
                    // below): phrases are checked here, scores later.
                    let (tf, len, pos, holds) = if probe.needs_positions() {
                        let (tf, len, pos) = probe.row_positions(analyzer, t);
                        let refs: Vec<&[u32]> = pos.iter().map(|p| p.as_slice()).collect();
                        let holds = probe.score_at(&tf, len, &refs).is_some();
                        (tf, len, pos, holds)
                    } else {
                        let (tf, len) = probe.row(analyzer, t);
                        (tf, len, vec![], true)
                    };
                    corpus.add_row(&terms, &tf, len);
                    if holds && tf.iter().any(|f| *f > 0) {
                        hits.push(FlatHit {
                            addr: addrs.value(i),
                            tf,
                            len,
                            pos,
                        });
                    }
                }
            }
        }
        // Indexed rows: the segments' statistics over their fragments,
        // rows overlaid since a build left out (the flat input holds their
        // current text).
        for ((seg, s), stale) in segs.iter().zip(&field.segments).zip(&stale) {
            let (docs, tokens) = seg.counts(&s.fragments, stale);
            corpus.docs += docs;
            corpus.tokens += tokens;
            for t in &terms {
                let n = seg
                    .df(t, &s.fragments, stale, &self.cache)
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
            if !segs.is_empty() && allow.is_none() {
                // Without a prefilter a row passes when its fragment is
                // one the segment answers for and it is not deleted.
                for s in &field.segments {
                    deleted.load(ds, &s.fragments).await?;
                }
            }
            let deleted = &*deleted;
            for ((seg, s), stale) in segs.iter().zip(&field.segments).zip(&stale) {
                let frags = s.fragments.clone();
                let allow_fn = |id: u64| {
                    let a = RowAddress::from_u64(id);
                    if !frags.contains(a.fragment().0) || stale.contains(a) {
                        return false;
                    }
                    match allow {
                        Some(ok) => ok.contains(a),
                        None => deleted.live(a),
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
            for h in &hits {
                if allow.is_some_and(|a| !a.contains(RowAddress::from_u64(h.addr))) {
                    continue;
                }
                let score = if q.needs_positions() {
                    let refs: Vec<&[u32]> = h.pos.iter().map(|p| p.as_slice()).collect();
                    q.score_at(&h.tf, h.len, &refs)
                } else {
                    q.score(&h.tf, h.len)
                };
                if let Some(score) = score {
                    top.push(Scored {
                        addr: h.addr,
                        score,
                    });
                }
            }
        }
        let mut winners = top.into_sorted();
        if field.boost != 1.0 {
            for w in &mut winners {
                w.score *= field.boost;
            }
        }
        search_timer.done();
        Ok(winners)
    }

    /// Per fuzzy term of `q`, the terms of the table version's vocabulary
    /// (rows the statistics count: the flat rows' tokens and the segments'
    /// terms with a document in their fragments) within its distance, the
    /// first [`MAX_EXPANSIONS`] in byte order.
    async fn expand_fuzzy(
        &self,
        q: &Query,
        analyzer: &Analyzer,
        segs: &[Arc<FtsSegment>],
        field: &FtsField,
        flat_rows: &[RecordBatch],
    ) -> Result<Vec<Vec<String>>> {
        let ds = &self.dataset;
        let autos = q
            .fuzzy
            .iter()
            .map(|f| f.automaton())
            .collect::<fathom_index::Result<Vec<_>>>()
            .map_err(ext)?;
        // An expansion keeps the term's first `prefix_length` characters
        // (Lucene's and Lance's `prefix_length`; a shorter term whole).
        let prefixes: Vec<&str> = q
            .fuzzy
            .iter()
            .map(|f| {
                let t = f.token.as_str();
                let end = t
                    .char_indices()
                    .nth(self.spec.prefix_length)
                    .map_or(t.len(), |(i, _)| i);
                &t[..end]
            })
            .collect();
        let mut found: Vec<BTreeSet<String>> = vec![BTreeSet::new(); autos.len()];
        let mut seen: HashSet<String> = HashSet::new();
        for b in flat_rows {
            let text = b.column(0);
            for r in 0..b.num_rows() {
                let Some(t) = text_at(text, r) else { continue };
                analyzer.analyze(t, |tok, _| {
                    if seen.contains(tok) {
                        return;
                    }
                    seen.insert(tok.to_string());
                    for (j, a) in autos.iter().enumerate() {
                        if tok.starts_with(prefixes[j]) && accepts(a, tok) {
                            found[j].insert(tok.to_string());
                        }
                    }
                });
            }
        }
        for (seg, s) in segs.iter().zip(&field.segments) {
            let stale = stale_rows(ds, s);
            for (j, f) in q.fuzzy.iter().enumerate() {
                for t in seg.fuzzy_terms(f).map_err(ext)? {
                    if !t.starts_with(prefixes[j]) || found[j].contains(&t) {
                        continue;
                    }
                    if seg
                        .df(&t, &s.fragments, &stale, &self.cache)
                        .await
                        .map_err(ext)?
                        > 0
                    {
                        found[j].insert(t);
                    }
                }
            }
        }
        Ok(found
            .into_iter()
            .map(|f| f.into_iter().take(self.spec.max_expansions).collect())
            .collect())
    }

    /// The output rows: `winners`' columns read, with their scores.
    async fn fetch(&self, winners: Vec<Scored>, c: &Counters) -> Result<RecordBatch> {
        let ds = &self.dataset;
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
