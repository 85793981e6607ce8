//! `ScalarIndexExec`: evaluates an index expression over the segments of
//! the indexes it uses and outputs the matching row addresses, sorted (a
//! row stream, see `common`). Rows deleted since a segment was built, and
//! fragments the plan does not cover, are removed downstream by
//! `ExclusionExec`.
//!
//! Exactness travels with the results: each segment's answer carries it,
//! AND / OR combine it, and the result must be at least as exact as the
//! plan (which chose the recheck) expected; a weaker one is an error,
//! never wrong rows.

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
use fathom_index::Exactness;
use fathom_index::IndexCache;
use fathom_index::segment::{search, usable};
use fathom_table::Dataset;
use fathom_table::RowSet;
use futures::StreamExt;
use futures::future::BoxFuture;

use super::common::{addr_schema, rowset_batches, single_partition};
use crate::index_expr::IndexExpr;

#[derive(Debug)]
pub struct ScalarIndexExec {
    dataset: Dataset,
    expr: IndexExpr,
    /// What the plan expects (and rechecks for).
    planned: Exactness,
    cache: Arc<IndexCache>,
    num_segments: usize,
    skipped_segments: usize,
    props: Arc<PlanProperties>,
    batch_size: usize,
    metrics: ExecutionPlanMetricsSet,
}

impl ScalarIndexExec {
    pub fn new(
        dataset: Dataset,
        expr: IndexExpr,
        planned: Exactness,
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
            planned,
            cache,
            num_segments,
            skipped_segments: 0,
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

    /// Segments of unusable kinds or versions the plan skipped (a metric).
    pub fn with_skipped_segments(mut self, n: usize) -> Self {
        self.skipped_segments = n;
        self
    }

    pub fn dataset(&self) -> &Dataset {
        &self.dataset
    }
    pub fn expr(&self) -> &IndexExpr {
        &self.expr
    }
    pub fn planned(&self) -> Exactness {
        self.planned
    }
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }
    pub fn skipped_segments(&self) -> usize {
        self.skipped_segments
    }
    pub fn cache(&self) -> &Arc<IndexCache> {
        &self.cache
    }
}

fn combine(a: Exactness, b: Exactness) -> Result<Exactness> {
    a.combine(b).ok_or_else(|| {
        DataFusionError::Internal(format!(
            "index results of exactness {} and {} cannot be combined",
            a.as_str(),
            b.as_str()
        ))
    })
}

/// An index expression's answer: the rows, how exact they are, and for an
/// `AtMost` answer the rows known to match (`None`: every row of an exact
/// answer).
#[derive(Debug, Clone)]
pub struct Evaluated {
    pub rows: RowSet,
    pub exactness: Exactness,
    pub certain: Option<RowSet>,
}

impl Evaluated {
    /// The rows known to match.
    pub fn certain(&self) -> &RowSet {
        self.certain.as_ref().unwrap_or(&self.rows)
    }
}

/// [`evaluate`], checked to be at least as exact as the plan expected
/// (a weaker answer is an error, never wrong rows).
pub async fn evaluate_planned(
    ds: &Dataset,
    cache: &IndexCache,
    e: &IndexExpr,
    planned: Exactness,
) -> Result<Evaluated> {
    let r = evaluate(ds, cache, e).await?;
    if !r.exactness.satisfies(planned) {
        return Err(DataFusionError::Internal(format!(
            "index search of {e} returned a {} result where the plan expected {}",
            r.exactness.as_str(),
            planned.as_str()
        )));
    }
    Ok(r)
}

/// Evaluates `e` over every usable segment of the indexes it names.
pub fn evaluate<'a>(
    ds: &'a Dataset,
    cache: &'a IndexCache,
    e: &'a IndexExpr,
) -> BoxFuture<'a, Result<Evaluated>> {
    Box::pin(async move {
        Ok(match e {
            IndexExpr::Query { index, query, .. } => {
                let mut parts = Vec::new();
                let mut exactness = Exactness::Exact;
                for seg in ds.manifest().indices.iter().filter(|i| &i.name == index) {
                    let Ok(kind) = usable(seg) else { continue };
                    let r = search(ds, seg, kind, cache, query, None)
                        .await
                        .map_err(|e| DataFusionError::External(Box::new(e)))?;
                    exactness = combine(exactness, r.exactness)?;
                    parts.push(r);
                }
                // The certain rows are only gathered for an inexact answer.
                let certain = (exactness != Exactness::Exact).then(|| {
                    let mut c = roaring::RoaringTreemap::new();
                    for r in &parts {
                        match (r.exactness, &r.certain) {
                            (Exactness::Exact, _) => c |= r.rows.as_treemap(),
                            (_, Some(x)) => c |= x.as_treemap(),
                            (_, None) => {}
                        }
                    }
                    RowSet::from(c)
                });
                let mut rows = match parts.len() {
                    1 => None,
                    _ => Some(roaring::RoaringTreemap::new()),
                };
                let rows = match rows.as_mut() {
                    None => parts.pop().map(|r| r.rows).unwrap_or_default(),
                    Some(all) => {
                        for r in &parts {
                            *all |= r.rows.as_treemap();
                        }
                        RowSet::from(std::mem::take(all))
                    }
                };
                Evaluated {
                    rows,
                    exactness,
                    certain,
                }
            }
            IndexExpr::And(a, b) | IndexExpr::Or(a, b) => {
                let (ra, rb) = (evaluate(ds, cache, a).await?, evaluate(ds, cache, b).await?);
                let exactness = combine(ra.exactness, rb.exactness)?;
                let and = matches!(e, IndexExpr::And(..));
                let certain = (exactness != Exactness::Exact).then(|| {
                    let (ca, cb) = (ra.certain().clone(), rb.certain().clone());
                    if and { ca & cb } else { ca | cb }
                });
                let rows = if and {
                    ra.rows & rb.rows
                } else {
                    ra.rows | rb.rows
                };
                Evaluated {
                    rows,
                    exactness,
                    certain,
                }
            }
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
            self.planned.as_str()
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
        MetricBuilder::new(&self.metrics)
            .counter("segments_skipped", partition)
            .add(self.skipped_segments);
        let planned = self.planned;
        let ds = self.dataset.clone();
        let expr = self.expr.clone();
        let cache = self.cache.clone();
        let bs = self.batch_size;
        let schema: SchemaRef = addr_schema();
        let elapsed = baseline.elapsed_compute().clone();
        let fut = async move {
            let timer = elapsed.timer();
            let rows = evaluate_planned(&ds, &cache, &expr, planned).await?.rows;
            matched.add(rows.len() as usize);
            let batches = rowset_batches(&rows, bs);
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
