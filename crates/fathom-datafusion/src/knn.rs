//! Nearest-neighbour queries from SQL.
//!
//! ```sql
//! SELECT id, l2_distance(emb, [0.1, ...]) AS d FROM t WHERE category = 'c3'
//! ORDER BY d LIMIT 10;
//! ```
//!
//! [`KnnRule`], a logical optimizer rule, finds `Sort(fetch = k)` whose
//! first key (ascending) is a distance function of a vector column and a
//! constant vector, over projections of a Fathom table scan whose filters
//! were all pushed into the scan, and swaps the scan's source for a
//! [`KnnTable`]: the same table, whose scan returns only the k nearest
//! rows that pass the filters ([`KnnExec`]). The sort and projection
//! above stay, so the distances users see are computed by the same
//! function on the stored vectors, and the order is theirs. A logical
//! rule rather than a physical one because the scan is then planned once,
//! with the filters (as logical expressions) and the projection that the
//! table provider receives; DataFusion's own sort pushdown stops at a
//! computed sort key (research: rust-ecosystem.md section 8).
//!
//! A WHERE filter is a prefilter: the k nearest among rows that pass.
//! Session settings: `SET fathom.nprobes = 20`, `fathom.refine_factor`,
//! `fathom.exact_search = true` (brute force, no index).

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::extensions_options;
use datafusion::common::tree_node::Transformed;
use datafusion::config::ConfigExtension;
use datafusion::datasource::{TableProvider, TableType, provider_as_source, source_as_provider};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{
    Expr, LogicalPlan, Projection as LProjection, Sort, TableProviderFilterPushDown, TableScan,
};
use datafusion::optimizer::{ApplyOrder, OptimizerConfig, OptimizerRule};
use datafusion::physical_plan::ExecutionPlan;
use fathom_index::vector::{Metric, declared, is_vector};
use fathom_table::{Dataset, Manifest, ROW_ADDR, ROW_ID};
use roaring::RoaringBitmap;

use crate::exec::knn::{KnnExec, KnnSegment, KnnSpec};
use crate::plan::{
    Branch, LowerContext, Merge, ReevalBranch, ScanPlan, ScanRequest, Snapshot, lower, plan_scan,
    projection_of,
};
use crate::provider::FathomTable;
use crate::udf::{DistanceUdf, Vectors};

extensions_options! {
    /// Fathom's session settings (`SET fathom.<name> = <value>`).
    pub struct FathomOptions {
        /// Vector search: IVF partitions probed per segment.
        pub nprobes: usize, default = 20
        /// Vector search: candidates per segment are k × this (at least
        /// k), re-ranked by exact distance.
        pub refine_factor: usize, default = 1
        /// Vector search: ignore vector indexes, search by brute force.
        pub exact_search: bool, default = false
        /// Vector search: candidates an HNSW graph search keeps (at least k).
        pub hnsw_ef: usize, default = 100
        /// UPDATE: 'rows' moves updated rows to new fragments, 'columns'
        /// rewrites the set columns of the touched fragments in place,
        /// 'auto' picks the one writing fewer bytes.
        pub update_mode: String, default = "auto".to_string()
        /// Index scans over rows an overlay changed since the index was
        /// built: 'rows' excludes just those rows from the index result
        /// and re-evaluates them, 'fragments' scans their whole fragments
        /// flat.
        pub overlay_exclusion: String, default = "rows".to_string()
        /// Full-text search: vocabulary terms a fuzzy query term
        /// (`word~N`) expands to at most (Lance's `max_expansions`).
        pub fts_max_expansions: usize, default = 50
        /// Full-text search: leading characters a fuzzy term's expansions
        /// keep unchanged (Lance's `prefix_length`).
        pub fts_prefix_length: usize, default = 0
    }
}

impl ConfigExtension for FathomOptions {
    const PREFIX: &'static str = "fathom";
}

/// The segments a search of one column uses: among the indexes whose
/// segments `fits` (on the column, of the right kind), the one covering
/// the most current fragments, each of its segments assigned the current
/// fragments it covers that no earlier one took; with `whole_fragments`
/// (`fathom.overlay_exclusion = 'fragments'`), a fragment an overlay
/// changed since a segment's build is left to the flat path rather than
/// re-evaluated row by row. Returns the index's name and the segments.
pub(crate) fn choose_segments(
    ds: &Dataset,
    fits: &dyn Fn(&fathom_table::format::IndexMetadata) -> bool,
    whole_fragments: bool,
) -> (Option<String>, Vec<KnnSegment>) {
    let current: RoaringBitmap = ds.fragments().iter().map(|f| f.id as u32).collect();
    let mut by_name: std::collections::BTreeMap<String, Vec<&fathom_table::format::IndexMetadata>> =
        Default::default();
    for seg in &ds.manifest().indices {
        if seg.fragment_bitmap.is_some() && fits(seg) {
            by_name.entry(seg.name.clone()).or_default().push(seg);
        }
    }
    let best = by_name.into_iter().max_by_key(|(_, segs)| {
        let mut b = RoaringBitmap::new();
        for s in segs {
            b |= s.fragment_bitmap.as_ref().unwrap();
        }
        (b & &current).len()
    });
    let mut covered = RoaringBitmap::new();
    let mut segments = vec![];
    let index = best.as_ref().map(|(n, _)| n.clone());
    if let Some((_, segs)) = best {
        for s in segs {
            let mut mine = (s.fragment_bitmap.as_ref().unwrap() & &current) - &covered;
            if whole_fragments {
                for (f, _) in ds.overlaid_rows(s).fragments() {
                    mine.remove(f.0);
                }
            }
            if mine.is_empty() {
                continue;
            }
            covered |= &mine;
            segments.push(KnnSegment {
                meta: s.clone(),
                fragments: Arc::new(mine),
            });
        }
    }
    (index, segments)
}

/// A plan reading columns `output` (of `schema`) of the rows an overlay
/// changed since the build of each of `segments`, in the fragments it
/// answers for, `filters` applied (the re-evaluation branch, shown in
/// EXPLAIN); `None` when there are none.
pub(crate) fn overlaid_input(
    t: &FathomTable,
    state: &dyn Session,
    ds: &Dataset,
    schema: &SchemaRef,
    segments: &[KnnSegment],
    filters: &[Expr],
    output: Vec<usize>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let mut overlaid = fathom_table::RowSet::new();
    for s in segments {
        let mut r = ds.overlaid_rows(&s.meta).as_ref().clone();
        r.retain_fragments(|x| s.fragments.contains(x.0));
        overlaid = overlaid | r;
    }
    if overlaid.is_empty() {
        return Ok(None);
    }
    let snap = Snapshot {
        manifest: ds.manifest(),
        facts: ds.facts(),
        schema: ds.schema(),
        table_schema: schema,
    };
    let branch = ReevalBranch::new(
        snap,
        Arc::new(overlaid),
        filters.to_vec(),
        &output.iter().copied().collect(),
    )?;
    let plan = ScanPlan {
        branches: vec![Branch::Reeval(branch)],
        merge: Merge::Union,
        output,
        skipped: vec![],
    };
    Ok(Some(lower(
        &plan,
        &LowerContext {
            session: state,
            dataset: ds,
            table_schema: schema,
            cache: t.index_cache(),
        },
    )?))
}

/// Whether the session's `fathom.overlay_exclusion` asks for whole
/// fragments (an unknown value is an error naming the accepted ones).
pub(crate) fn whole_fragment_overlays(state: &dyn Session) -> Result<bool> {
    let v = state
        .config_options()
        .extensions
        .get::<FathomOptions>()
        .map_or("rows", |o| o.overlay_exclusion.as_str());
    match v.to_ascii_lowercase().as_str() {
        "rows" => Ok(false),
        "fragments" => Ok(true),
        other => Err(DataFusionError::Plan(format!(
            "fathom.overlay_exclusion is '{other}'; expected 'rows' or 'fragments'"
        ))),
    }
}

/// Rewrites `ORDER BY distance LIMIT k` over a Fathom table into a
/// vector search (see the module documentation).
#[derive(Debug, Default)]
pub struct KnnRule;

/// A distance call found in a sort key.
struct Found {
    metric: Metric,
    column: String,
    query: Vec<f32>,
}

fn distance_call(e: &Expr) -> Option<Found> {
    let Expr::ScalarFunction(f) = e else {
        return None;
    };
    let udf = f.func.inner().downcast_ref::<DistanceUdf>()?;
    let [a, b] = f.args.as_slice() else {
        return None;
    };
    let (col, lit) = match (a, b) {
        (Expr::Column(c), Expr::Literal(v, _)) | (Expr::Literal(v, _), Expr::Column(c)) => (c, v),
        _ => return None,
    };
    let v = Vectors::from_scalar("distance", lit).ok()?;
    let q = v.get(0)?.to_vec();
    Some(Found {
        metric: udf.metric(),
        column: col.name.clone(),
        query: q,
    })
}

/// The distance call a sort key names: the call itself, or a column the
/// projection below defines as one.
fn sort_key_distance(key: &Expr, input: &LogicalPlan) -> Option<Found> {
    if let Some(f) = distance_call(key) {
        return Some(f);
    }
    let Expr::Column(c) = key else {
        return None;
    };
    let LogicalPlan::Projection(p) = input else {
        return None;
    };
    let i = p.schema.index_of_column(c).ok()?;
    distance_call(p.expr[i].clone().unalias_nested().data.as_ref_expr())
}

trait AsRefExpr {
    fn as_ref_expr(&self) -> &Expr;
}
impl AsRefExpr for Expr {
    fn as_ref_expr(&self) -> &Expr {
        self
    }
}

/// `plan` with its Fathom table scan (under projections only) replaced by
/// a [`KnnTable`] scan; `None` if the shape does not fit.
fn replace_scan(plan: &LogicalPlan, knn: &Found, k: usize) -> Result<Option<LogicalPlan>> {
    match plan {
        LogicalPlan::Projection(p) => {
            let Some(input) = replace_scan(&p.input, knn, k)? else {
                return Ok(None);
            };
            Ok(Some(LogicalPlan::Projection(
                LProjection::try_new_with_schema(
                    p.expr.clone(),
                    Arc::new(input),
                    p.schema.clone(),
                )?,
            )))
        }
        LogicalPlan::TableScan(scan) if scan.fetch.is_none() => {
            let Ok(provider) = source_as_provider(&scan.source) else {
                return Ok(None);
            };
            if provider.downcast_ref::<FathomTable>().is_none() {
                return Ok(None);
            }
            if scan
                .projected_schema
                .index_of_column_by_name(None, &knn.column)
                .is_none()
                && provider.schema().index_of(&knn.column).is_err()
            {
                return Ok(None);
            }
            let table = KnnTable {
                inner: provider,
                column: knn.column.clone(),
                query: knn.query.clone(),
                metric: knn.metric,
                k,
            };
            Ok(Some(LogicalPlan::TableScan(TableScan {
                table_name: scan.table_name.clone(),
                source: provider_as_source(Arc::new(table)),
                projection: scan.projection.clone(),
                projected_schema: scan.projected_schema.clone(),
                filters: scan.filters.clone(),
                fetch: None,
                statistics_requests: scan.statistics_requests.clone(),
            })))
        }
        _ => Ok(None),
    }
}

impl OptimizerRule for KnnRule {
    fn name(&self) -> &str {
        "fathom_knn"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::TopDown)
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        let LogicalPlan::Sort(sort) = &plan else {
            return Ok(Transformed::no(plan));
        };
        let (Some(k), Some(first)) = (sort.fetch, sort.expr.first()) else {
            return Ok(Transformed::no(plan));
        };
        if !first.asc {
            return Ok(Transformed::no(plan));
        }
        let Some(found) = sort_key_distance(&first.expr, &sort.input) else {
            return Ok(Transformed::no(plan));
        };
        match replace_scan(&sort.input, &found, k)? {
            Some(input) => Ok(Transformed::yes(LogicalPlan::Sort(Sort {
                expr: sort.expr.clone(),
                input: Arc::new(input),
                fetch: sort.fetch,
            }))),
            None => Ok(Transformed::no(plan)),
        }
    }
}

/// A Fathom table whose scan returns the k nearest rows to a query vector
/// (among rows that pass the pushed filters).
#[derive(Debug)]
pub struct KnnTable {
    inner: Arc<dyn TableProvider>,
    column: String,
    query: Vec<f32>,
    metric: Metric,
    k: usize,
}

/// The dataset's columns, then `_rowid` and `_rowaddr`: the schema the
/// search's inner scans are planned against.
pub(crate) fn scan_schema(ds: &Dataset) -> SchemaRef {
    let mut fields: Vec<Field> = ds
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new(ROW_ID, DataType::UInt64, true));
    fields.push(Field::new(ROW_ADDR, DataType::UInt64, true));
    Arc::new(Schema::new(fields))
}

/// `m` with only the fragments in `keep`.
fn restricted(m: &Manifest, keep: impl Fn(u64) -> bool) -> Manifest {
    let mut m = m.clone();
    m.fragments.retain(|f| keep(f.id));
    m
}

impl KnnTable {
    fn table(&self) -> &FathomTable {
        self.inner
            .downcast_ref::<FathomTable>()
            .expect("checked by the rule")
    }
}

/// Plans and lowers a Fathom scan of `ds`'s fragments in `keep` (for the
/// inner scans of a search: prefilter and flat rows).
pub(crate) fn inner_scan(
    t: &FathomTable,
    state: &dyn Session,
    ds: &Dataset,
    schema: &SchemaRef,
    keep: &dyn Fn(u64) -> bool,
    output: Vec<usize>,
    filters: &[Expr],
) -> Result<Arc<dyn ExecutionPlan>> {
    let manifest = restricted(ds.manifest(), keep);
    let req = ScanRequest {
        output,
        filters: filters.to_vec(),
        limit: None,
        target_partitions: state.config().target_partitions(),
        min_rows_per_partition: t.options().min_rows_per_partition,
        zone_pruning: t.options().zone_pruning,
        whole_fragment_overlays: whole_fragment_overlays(state)?,
    };
    let facts = fathom_table::ManifestFacts::of(&manifest);
    let snap = Snapshot {
        manifest: &manifest,
        facts: &facts,
        schema: ds.schema(),
        table_schema: schema,
    };
    let plan = plan_scan(snap, &req)?;
    lower(
        &plan,
        &LowerContext {
            session: state,
            dataset: ds,
            table_schema: schema,
            cache: t.index_cache(),
        },
    )
}

/// The columns a search reads for its winners and where each output
/// column is in them: `names` are the output columns, by name into
/// `schema` (a [`scan_schema`]); names not there (a score) map to
/// `usize::MAX`.
pub(crate) fn winner_columns(
    ds: &Dataset,
    schema: &SchemaRef,
    names: &[String],
) -> Result<(fathom_table::scan::Projection, Vec<usize>)> {
    let wanted: BTreeSet<usize> = names
        .iter()
        .filter_map(|n| schema.index_of(n).ok())
        .collect();
    let read = projection_of(ds, schema, &wanted)?;
    let order: Vec<usize> = wanted.iter().copied().collect();
    let output_idx = names
        .iter()
        .map(|n| {
            order
                .iter()
                .position(|o| schema.field(*o).name() == n)
                .unwrap_or(usize::MAX)
        })
        .collect();
    Ok((read, output_idx))
}

/// Filters pushed into a search's scan, with column qualifiers removed.
pub(crate) fn unqualified(filters: &[Expr]) -> Result<Vec<Expr>> {
    filters
        .iter()
        .cloned()
        .map(crate::provider::strip_qualifiers)
        .collect()
}

#[async_trait]
impl TableProvider for KnnTable {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        self.inner.supports_filters_pushdown(filters)
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let t = self.table();
        let ds = t.latest().await?;
        let table_schema = t.schema();
        let schema = scan_schema(&ds);
        let column = ds.schema().index_of(&self.column).map_err(|_| {
            DataFusionError::Plan(format!("no vector column named '{}'", self.column))
        })?;
        match ds.schema().field(column).data_type() {
            DataType::FixedSizeList(_, n) if *n as usize == self.query.len() => {}
            DataType::FixedSizeList(_, n) => {
                return Err(DataFusionError::Plan(format!(
                    "the query vector has {} dimensions; column '{}' has {n}",
                    self.query.len(),
                    self.column
                )));
            }
            DataType::List(_) | DataType::LargeList(_) => {}
            other => {
                return Err(DataFusionError::Plan(format!(
                    "column '{}' is {other}, not a vector",
                    self.column
                )));
            }
        }
        let opts = state
            .config()
            .options()
            .extensions
            .get::<FathomOptions>()
            .cloned()
            .unwrap_or_default();
        let filters = unqualified(filters)?;
        // Output columns, by name into the scan schema.
        let out_cols: Vec<usize> = projection
            .cloned()
            .unwrap_or_else(|| (0..table_schema.fields().len()).collect());
        let names: Vec<String> = out_cols
            .iter()
            .map(|i| table_schema.field(*i).name().clone())
            .collect();
        let (read, output_idx) = winner_columns(&ds, &schema, &names)?;
        let out_schema = Arc::new(table_schema.project(&out_cols)?);

        // The index: the vector segments on this column with this metric.
        let field_id = ds.manifest().schema.fields[column].id;
        let searchable = !opts.exact_search && !ds.manifest().uses_stable_row_ids();
        let (index, segments) = choose_segments(
            &ds,
            &|seg| {
                searchable
                    && is_vector(seg)
                    && seg.fields.first() == Some(&field_id)
                    && declared(seg).is_some_and(|(_, m)| m == self.metric)
            },
            whole_fragment_overlays(state)?,
        );
        let mut covered = RoaringBitmap::new();
        for s in &segments {
            covered |= s.fragments.as_ref();
        }
        let addr = schema.index_of(ROW_ADDR)?;
        let prefilter = if !segments.is_empty() && !filters.is_empty() {
            let c = covered.clone();
            Some(inner_scan(
                t,
                state,
                &ds,
                &schema,
                &move |f| c.contains(f as u32),
                vec![addr],
                &filters,
            )?)
        } else {
            None
        };
        let uncovered = ds
            .fragments()
            .iter()
            .any(|f| !covered.contains(f.id as u32));
        let flat = if uncovered {
            let c = covered.clone();
            Some(inner_scan(
                t,
                state,
                &ds,
                &schema,
                &move |f| !c.contains(f as u32),
                vec![column, addr],
                &filters,
            )?)
        } else {
            None
        };
        // Rows an overlay changed since their segment's build: the index
        // does not answer for them (KnnExec leaves them out of its
        // search); they are scored by brute force on their current
        // vectors, filters re-applied.
        let reeval = overlaid_input(
            t,
            state,
            &ds,
            &schema,
            &segments,
            &filters,
            vec![column, addr],
        )?;
        let flat = match (flat, reeval) {
            (Some(a), Some(b)) => {
                Some(datafusion::physical_plan::union::UnionExec::try_new(vec![
                    a, b,
                ])?)
            }
            (a, b) => a.or(b),
        };
        let spec = KnnSpec {
            column,
            column_name: self.column.clone(),
            query: self.query.clone(),
            metric: self.metric,
            k: self.k,
            nprobes: opts.nprobes,
            refine_factor: opts.refine_factor,
            ef: opts.hnsw_ef,
            index,
        };
        Ok(Arc::new(KnnExec::new(
            ds,
            spec,
            segments,
            read,
            output_idx,
            prefilter,
            flat,
            t.index_cache().clone(),
            out_schema,
        )))
    }
}
