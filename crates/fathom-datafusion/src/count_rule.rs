//! `IndexCountRule`: counts answered from index row sets.
//!
//! A physical optimizer rule. It finds aggregates that only count rows
//! (`count(*)`, `count(1)`, `count(col)` of a non-null column), ungrouped
//! or grouped by one column, in `Partial` or `Single` mode, over an index
//! branch of a Fathom scan (`TakeExec` over `ExclusionExec` over
//! `ScalarIndexExec`, the take reading no more than the count needs), and
//! replaces the aggregate with an [`IndexCountExec`] that outputs the same
//! columns from row-set cardinalities. Over a union of branches (some
//! fragments indexed, some not) a `Partial` aggregate is pushed into each
//! branch: the index branches count from sets, the flat ones aggregate as
//! before, and the `Final` aggregate above adds them up. A grouped count
//! is answered this way when the group column has an index that keeps
//! each value's rows (a bitmap) covering every fragment the branch counts;
//! with no filter at all, a flat scan of every fragment is counted the
//! same way.
//!
//! Why a rule and a counting node, rather than exact statistics feeding
//! DataFusion's `AggregateStatistics`: statistics are computed without
//! I/O, so they would need the index searched while planning (in
//! `TableProvider::scan`, for every query, counted or not); they cannot
//! carry groups; and they say nothing when part of the table is read on
//! the flat path. A node keeps planning free of I/O, serializes like the
//! other nodes, and composes with the flat branch under one `Final`.
//!
//! Anything else (a pushed-down limit, a filter on the aggregate, DISTINCT,
//! a nullable counted column, grouping sets, a group column without such
//! an index, a group index whose values an overlay changed since its
//! build) is left as it was: the shortcut never changes a result.

use std::collections::HashSet;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::error::Result;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{Column, Literal};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::union::UnionExec;
use datafusion::physical_plan::{ExecutionPlan, collect};
use fathom_index::Exactness;
use fathom_index::segment::usable;
use fathom_table::Dataset;

use crate::exec::count::{CountRecheck, IndexCountExec};
use crate::exec::count_union::CountUnionExec;
use crate::exec::exclusion::{Exclusion, ExclusionExec};
use crate::exec::index_scan::ScalarIndexExec;
use crate::exec::overlaid::OverlaidRowsExec;
use crate::exec::scan::FragmentScanExec;
use crate::exec::take::TakeExec;
use crate::plan::ExclusionSource;

/// Replaces counting aggregates over index branches with
/// [`IndexCountExec`] (see the module documentation). Added by
/// [`crate::new_session`]; add it to a session of your own with
/// `SessionStateBuilder::with_physical_optimizer_rule`.
#[derive(Debug, Default)]
pub struct IndexCountRule;

impl PhysicalOptimizerRule for IndexCountRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_down(|node| {
            let Some(agg) = node.downcast_ref::<AggregateExec>() else {
                return Ok(Transformed::no(node));
            };
            Ok(match rewrite(agg)? {
                Some(new) => Transformed::yes(new),
                None => Transformed::no(node),
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "fathom_index_count"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// The number of rows `plan` (a lowered Fathom scan outputting no
/// columns) returns: index branches counted from row sets, the others
/// executed and their rows counted.
pub(crate) async fn count_plan(
    plan: Arc<dyn ExecutionPlan>,
    task: Arc<datafusion::execution::TaskContext>,
) -> Result<u64> {
    let schema = Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
        "count",
        arrow_schema::DataType::Int64,
        false,
    )]));
    let leaves: Vec<Arc<dyn ExecutionPlan>> = match plan.downcast_ref::<UnionExec>() {
        Some(u) => u.children().into_iter().cloned().collect(),
        None => vec![plan],
    };
    let mut total = 0u64;
    for leaf in leaves {
        match counter(&leaf, None, &schema)? {
            Some(c) => {
                let batches = collect(Arc::new(c), task.clone()).await?;
                for b in &batches {
                    let n = b.column(0).as_primitive::<Int64Type>();
                    total += n.values().iter().map(|v| *v as u64).sum::<u64>();
                }
            }
            None => {
                let batches = collect(leaf, task.clone()).await?;
                total += batches.iter().map(|b| b.num_rows() as u64).sum::<u64>();
            }
        }
    }
    Ok(total)
}

/// Whether `e`, a count's argument, is non-null on every row of `schema`.
fn counts_every_row(e: &Arc<dyn PhysicalExpr>, schema: &arrow_schema::Schema) -> bool {
    if let Some(l) = e.downcast_ref::<Literal>() {
        return !l.value().is_null();
    }
    if let Some(c) = e.downcast_ref::<Column>() {
        return schema
            .fields()
            .get(c.index())
            .is_some_and(|f| !f.is_nullable());
    }
    false
}

fn rewrite(agg: &AggregateExec) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let mode = *agg.mode();
    if !matches!(mode, AggregateMode::Partial | AggregateMode::Single) {
        return Ok(None);
    }
    let input_schema = agg.input().schema();
    let only_counts = !agg.aggr_expr().is_empty()
        && agg.filter_expr().iter().all(Option::is_none)
        && agg.aggr_expr().iter().all(|a| {
            let args = a.expressions();
            a.fun().name() == "count"
                && !a.is_distinct()
                && args.len() == 1
                && counts_every_row(&args[0], &input_schema)
        });
    let gb = agg.group_expr();
    if !only_counts || gb.has_grouping_set() || gb.expr().len() > 1 {
        return Ok(None);
    }
    let group = match gb.expr() {
        [] => None,
        [(e, _)] => match e.downcast_ref::<Column>() {
            Some(c) => Some(c.index()),
            None => return Ok(None),
        },
        _ => return Ok(None),
    };
    let Some((stack, leaf, group)) = strip(agg.input().clone(), group) else {
        return Ok(None);
    };
    let schema = agg.schema();
    if let Some(c) = counter(&leaf, group, &schema)? {
        return Ok(Some(Arc::new(c)));
    }
    // Partial aggregation distributes over a union's children.
    let Some(union) = leaf.downcast_ref::<UnionExec>() else {
        return Ok(None);
    };
    if mode != AggregateMode::Partial {
        return Ok(None);
    }
    let mut any = false;
    let mut children = Vec::with_capacity(union.children().len());
    for child in union.children() {
        if let Some(c) = counter(child, group, &schema)? {
            any = true;
            children.push(Arc::new(c) as Arc<dyn ExecutionPlan>);
            continue;
        }
        let mut input = child.clone();
        for node in stack.iter().rev() {
            input = node.clone().replace_children(
                vec![input],
                ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
            )?;
        }
        children.push(Arc::new(AggregateExec::try_new(
            AggregateMode::Partial,
            gb.clone(),
            agg.aggr_expr().to_vec(),
            agg.filter_expr().to_vec(),
            input,
            input_schema.clone(),
        )?));
    }
    if !any {
        return Ok(None);
    }
    // Every branch counted from sets: run them serially in one partition.
    if children.iter().all(|c| c.is::<IndexCountExec>()) {
        return Ok(Some(Arc::new(CountUnionExec::try_new(children)?)));
    }
    Ok(Some(UnionExec::try_new(children)?))
}

/// Below the aggregate: nodes that neither drop nor add rows (repartition,
/// cooperative wrappers, projections of columns), the
/// leaf under them, and the group column's position at the leaf.
type Stripped = (
    Vec<Arc<dyn ExecutionPlan>>,
    Arc<dyn ExecutionPlan>,
    Option<usize>,
);

fn strip(mut node: Arc<dyn ExecutionPlan>, mut group: Option<usize>) -> Option<Stripped> {
    let mut stack = Vec::new();
    loop {
        let next = if node.is::<RepartitionExec>() || node.is::<CooperativeExec>() {
            node.children()[0].clone()
        } else if let Some(p) = node.downcast_ref::<ProjectionExec>() {
            group = match group {
                None => None,
                Some(g) => Some(p.expr().get(g)?.expr.downcast_ref::<Column>()?.index()),
            };
            p.input().clone()
        } else {
            return Some((stack, node, group));
        };
        stack.push(node);
        node = next;
    }
}

fn skip_coop(mut node: &Arc<dyn ExecutionPlan>) -> &Arc<dyn ExecutionPlan> {
    while node.is::<CooperativeExec>() {
        node = node.children()[0];
    }
    node
}

/// The count node answering `schema` for `leaf` (an index branch, or a
/// flat scan of every row), if it can.
fn counter(
    leaf: &Arc<dyn ExecutionPlan>,
    group: Option<usize>,
    schema: &arrow_schema::SchemaRef,
) -> Result<Option<IndexCountExec>> {
    let mut node = skip_coop(leaf);
    let mut group = group;
    // The branch's own projection to the scan's output columns.
    if let Some(p) = node.downcast_ref::<ProjectionExec>() {
        if let Some(g) = group {
            let Some(c) = p.expr()[g].expr.downcast_ref::<Column>() else {
                return Ok(None);
            };
            group = Some(c.index());
        }
        node = skip_coop(p.input());
    }
    let group_column = |n: &Arc<dyn ExecutionPlan>| -> Option<String> {
        group.map(|g| n.schema().field(g).name().clone())
    };
    if let Some(scan) = node.downcast_ref::<FragmentScanExec>() {
        return every_row(scan, group_column(node), schema);
    }
    let Some(take) = node.downcast_ref::<TakeExec>() else {
        return Ok(None);
    };
    if take.limit().is_some() || take.keep().is_some() {
        return Ok(None);
    }
    let column = group_column(node);
    let mut recheck = take.recheck().map(|p| CountRecheck {
        read: take.read().clone(),
        predicate: p.clone(),
        residual: take.recheck_residual(),
    });
    let mut input = skip_coop(take.children()[0]).clone();
    if let Some(narrow) = input.downcast_ref::<TakeExec>() {
        // A narrow first take holds the recheck; the outer take none.
        let (Some(p), None) = (narrow.recheck(), &recheck) else {
            return Ok(None);
        };
        recheck = Some(CountRecheck {
            read: narrow.read().clone(),
            predicate: p.clone(),
            residual: narrow.recheck_residual(),
        });
        let next = skip_coop(narrow.children()[0]).clone();
        input = next;
    }
    // A re-evaluation branch: the overlaid rows (minus exclusions), each
    // rechecked, counted without a take node and an aggregate over it.
    let (sources, below) = match input.downcast_ref::<ExclusionExec>() {
        Some(e) => (e.sources().to_vec(), skip_coop(e.children()[0]).clone()),
        None => (vec![], input.clone()),
    };
    if let Some(o) = below.downcast_ref::<OverlaidRowsExec>() {
        let Some(recheck) = recheck else {
            return Ok(None);
        };
        if column.is_some() {
            return Ok(None);
        }
        return Ok(Some(
            IndexCountExec::new(
                take.dataset().clone(),
                None,
                Exactness::AtMost,
                Default::default(),
                sources,
                Some(recheck),
                None,
                o.batch_size(),
                schema.clone(),
            )?
            .with_rows(o.rows().clone()),
        ));
    }
    let Some(exclusion) = input.downcast_ref::<ExclusionExec>() else {
        return Ok(None);
    };
    let Some(search) = skip_coop(exclusion.children()[0]).downcast_ref::<ScalarIndexExec>() else {
        return Ok(None);
    };
    if search.planned() != Exactness::Exact && recheck.is_none() {
        return Ok(None);
    }
    let ds = search.dataset();
    let group_index = match &column {
        None => None,
        Some(c) => match grouping_index(ds, c, &exclusion.exclusion()) {
            Some(i) => Some(i),
            None => return Ok(None),
        },
    };
    Ok(Some(IndexCountExec::new(
        ds.clone(),
        Some(search.expr().clone()),
        search.planned(),
        search.cache().clone(),
        exclusion.sources().to_vec(),
        recheck,
        group_index,
        search.batch_size(),
        schema.clone(),
    )?))
}

/// A flat scan without filter or limit over every fragment, grouped by a
/// column with a grouping index: counted from that index.
fn every_row(
    scan: &FragmentScanExec,
    column: Option<String>,
    schema: &arrow_schema::SchemaRef,
) -> Result<Option<IndexCountExec>> {
    // Ungrouped counts of every row come from metadata already.
    let Some(column) = column else {
        return Ok(None);
    };
    if scan.filter().is_some() || scan.prefilter().is_some() || scan.limit().is_some() {
        return Ok(None);
    }
    let ds = scan.dataset();
    let scanned: HashSet<u64> = scan
        .plan()
        .partitions
        .iter()
        .flatten()
        .map(|u| u.fragment)
        .collect();
    if ds.fragments().iter().any(|f| !scanned.contains(&f.id)) {
        return Ok(None);
    }
    let exclusions = vec![ExclusionSource::DeletedRows];
    let Some(group_index) = grouping_index(ds, &column, &Exclusion::new(ds, &exclusions)) else {
        return Ok(None);
    };
    let Some(cache) = scan.index_cache() else {
        return Ok(None);
    };
    Ok(Some(IndexCountExec::new(
        ds.clone(),
        None,
        Exactness::Exact,
        cache.clone(),
        exclusions,
        None,
        Some(group_index),
        scan.batch_size(),
        schema.clone(),
    )?))
}

/// The index on `column` that keeps each value's rows and whose usable
/// segments cover every fragment `ex` lets through.
fn grouping_index(ds: &Dataset, column: &str, ex: &Exclusion) -> Option<String> {
    let manifest = ds.manifest();
    let field = manifest.schema.fields.iter().find(|f| f.name == column)?;
    let mut names: Vec<&str> = manifest
        .indices
        .iter()
        .filter(|s| s.fields.first() == Some(&field.id))
        .filter(|s| usable(s).is_ok_and(|k| k.keeps_groups()))
        .map(|s| s.name.as_str())
        .collect();
    names.dedup();
    names.into_iter().find_map(|name| {
        let mut covered = roaring::RoaringBitmap::new();
        for s in manifest.indices.iter().filter(|s| s.name == name) {
            if let (Ok(_), Some(b)) = (usable(s), &s.fragment_bitmap) {
                // A group an overlay changed since the build is stale there.
                if !ds.overlaid_rows(s).is_empty() {
                    return None;
                }
                covered |= b;
            }
        }
        ex.fragments()
            .all(|f| u32::try_from(f.id).is_ok_and(|id| covered.contains(id)))
            .then(|| name.to_string())
    })
}
