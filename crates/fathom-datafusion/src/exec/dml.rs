//! Data-changing nodes: INSERT (append or overwrite), DELETE and UPDATE.
//! Each runs its statement as exactly one commit and outputs one row with
//! the number of rows affected; a statement that fails commits nothing.

use std::fmt;
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{
    self, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, execute_stream,
};
use fathom_table::{Dataset, Operation, UpdateMode, WriteParams};
use futures::{StreamExt, TryStreamExt};

use super::common::only_partition;
use crate::error::to_df;
use crate::provider::TableState;

/// What a DML node does.
#[derive(Debug, Clone)]
pub enum DmlKind {
    Insert {
        input: Arc<dyn ExecutionPlan>,
        overwrite: bool,
    },
    /// `input`: the rows the WHERE matches (the table's own planned scan,
    /// so indexes find them), `_rowaddr` as the last column.
    Delete { input: Arc<dyn ExecutionPlan> },
    Update {
        /// The rows the WHERE matches: the columns the new values are
        /// computed from, then `_rowaddr`.
        input: Arc<dyn ExecutionPlan>,
        /// Per table column: its new value (over `input`'s columns), or
        /// `None` to keep it.
        assignments: Vec<Option<Arc<dyn PhysicalExpr>>>,
        /// How the rows are rewritten (`None`: the cheaper of rows and
        /// columns, see `Dataset::cheaper_update`).
        mode: Option<UpdateStrategy>,
    },
}

/// How UPDATE writes new values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateStrategy {
    /// Lance's `RewriteRows`: rows moved to new fragments.
    Rows,
    /// Lance's `RewriteColumns`: the set columns rewritten in place.
    Columns,
    /// Only the changed cells, as overlay files (feature flag 64).
    Overlay,
}

impl UpdateStrategy {
    pub fn name(&self) -> &'static str {
        match self {
            UpdateStrategy::Rows => "rows",
            UpdateStrategy::Columns => "columns",
            UpdateStrategy::Overlay => "overlay",
        }
    }
}

/// The `fathom.update_mode` setting: `None` for 'auto'.
pub fn parse_update_mode(s: &str) -> Result<Option<UpdateStrategy>> {
    match s.to_ascii_lowercase().as_str() {
        "auto" => Ok(None),
        "rows" => Ok(Some(UpdateStrategy::Rows)),
        "columns" => Ok(Some(UpdateStrategy::Columns)),
        "overlay" => Ok(Some(UpdateStrategy::Overlay)),
        other => Err(DataFusionError::Plan(format!(
            "fathom.update_mode is '{other}'; expected 'auto', 'rows', 'columns' or 'overlay'"
        ))),
    }
}

/// Runs one DML statement.
#[derive(Debug)]
pub struct DmlExec {
    state: Arc<TableState>,
    /// The version a DELETE or UPDATE was planned on: its input reads it
    /// and its commit names it as the read version (so a concurrent
    /// writer is rebased over or conflicts, as Lance's rules say).
    dataset: Dataset,
    kind: DmlKind,
    props: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

/// Where a DML statement's time went (EXPLAIN ANALYZE): finding the rows
/// (running the input, evaluating the new values) and writing them (data,
/// deletion or overlay files, and the commit).
struct DmlTimes {
    find: metrics::Time,
    write: metrics::Time,
}

pub fn count_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        "count",
        DataType::UInt64,
        false,
    )]))
}

impl DmlExec {
    pub fn new(state: Arc<TableState>, dataset: Dataset, kind: DmlKind) -> Self {
        let props = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(count_schema()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        ));
        DmlExec {
            state,
            dataset,
            kind,
            props,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    pub fn state(&self) -> &Arc<TableState> {
        &self.state
    }
    pub fn kind(&self) -> &DmlKind {
        &self.kind
    }
    /// The version the statement was planned on.
    pub fn dataset(&self) -> &Dataset {
        &self.dataset
    }
}

impl DisplayAs for DmlExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        match &self.kind {
            DmlKind::Insert { overwrite, .. } => {
                write!(
                    f,
                    "FathomInsertExec: {}",
                    if *overwrite { "overwrite" } else { "append" }
                )
            }
            DmlKind::Delete { .. } => write!(f, "FathomDeleteExec"),
            DmlKind::Update {
                assignments, mode, ..
            } => {
                let mode = mode.map_or("auto", |m| m.name());
                write!(f, "FathomUpdateExec: mode={mode}, set=[")?;
                let names = self.dataset.schema();
                for (n, (i, e)) in assignments
                    .iter()
                    .enumerate()
                    .filter_map(|(i, e)| Some((i, e.as_ref()?)))
                    .enumerate()
                {
                    let sep = if n == 0 { "" } else { ", " };
                    write!(f, "{sep}{} = {e}", names.field(i).name())?;
                }
                write!(f, "]")
            }
        }
    }
}

/// The addresses in the last column of `batch`.
fn addresses(batch: &RecordBatch) -> Result<&UInt64Array> {
    batch
        .column(batch.num_columns() - 1)
        .as_any()
        .downcast_ref::<UInt64Array>()
        .ok_or_else(|| DataFusionError::Internal("DML input without _rowaddr last".into()))
}

async fn run(
    state: Arc<TableState>,
    planned: Dataset,
    kind: DmlKind,
    ctx: Arc<TaskContext>,
    times: DmlTimes,
) -> Result<u64> {
    let ds = match &kind {
        // An append composes with whatever committed since planning.
        DmlKind::Insert { .. } => state.latest().await?,
        _ => planned,
    };
    let n_fields = ds.schema().fields().len();
    match kind {
        DmlKind::Insert { input, overwrite } => {
            let mut stream = execute_stream(input, ctx)?;
            let table_schema = ds.schema().clone();
            let mut writer = if overwrite {
                None
            } else {
                Some(ds.fragment_writer(WriteParams::default()).map_err(to_df)?)
            };
            let mut batches_for_overwrite = Vec::new();
            let mut rows = 0u64;
            while let Some(batch) = stream
                .try_next()
                .await
                .map_err(|e| crate::sql::name_values_column(e, &table_schema))?
            {
                // Drop virtual columns DataFusion filled with NULLs.
                let cols: Vec<ArrayRef> = batch.columns()[..n_fields].to_vec();
                let batch = RecordBatch::try_new(table_schema.clone(), cols).map_err(|e| {
                    DataFusionError::Plan(format!(
                        "inserted rows do not fit table {}: {e}",
                        ds.uri()
                    ))
                })?;
                rows += batch.num_rows() as u64;
                match &mut writer {
                    Some(w) => w.write(&batch).await.map_err(to_df)?,
                    None => batches_for_overwrite.push(batch),
                }
            }
            let new = match writer {
                Some(w) => {
                    let fragments = w.finish().await.map_err(to_df)?;
                    if fragments.is_empty() {
                        return Ok(0);
                    }
                    ds.commit(Operation::Append { fragments })
                        .await
                        .map_err(to_df)?
                }
                None => {
                    let mut w = ds.fragment_writer(WriteParams::default()).map_err(to_df)?;
                    for b in &batches_for_overwrite {
                        w.write(b).await.map_err(to_df)?;
                    }
                    let fragments = w.finish().await.map_err(to_df)?;
                    ds.commit(Operation::Overwrite {
                        fragments,
                        schema: ds.manifest().schema.clone(),
                        config_upsert: Default::default(),
                    })
                    .await
                    .map_err(to_df)?
                }
            };
            state.set(new);
            Ok(rows)
        }
        DmlKind::Delete { input } => {
            let find = times.find.timer();
            let mut stream = execute_stream(input, ctx)?;
            let mut addrs = Vec::new();
            while let Some(batch) = stream.try_next().await? {
                addrs.extend(addresses(&batch)?.values().iter().copied());
            }
            find.done();
            let _write = times.write.timer();
            let (new, n) = ds.delete_rows_counted(&addrs).await.map_err(to_df)?;
            state.set(new);
            Ok(n)
        }
        DmlKind::Update {
            input,
            assignments,
            mode,
        } => {
            let find = times.find.timer();
            let mut stream = execute_stream(input, ctx)?;
            // The matched rows' addresses and the new values of the set
            // columns; the rest of each row is read only if rows move.
            let set: Vec<usize> = (0..n_fields)
                .filter(|i| assignments[*i].is_some())
                .collect();
            let table_schema = ds.schema().clone();
            let set_schema = Arc::new(table_schema.project(&set)?);
            let mut addrs = Vec::new();
            let mut values = Vec::new();
            while let Some(batch) = stream.try_next().await? {
                if batch.num_rows() == 0 {
                    continue;
                }
                addrs.extend(addresses(&batch)?.values().iter().copied());
                let mut cols = Vec::with_capacity(set.len());
                for &i in &set {
                    let want = table_schema.field(i).data_type();
                    let e = assignments[i].as_ref().unwrap();
                    let v = e.evaluate(&batch)?.into_array(batch.num_rows())?;
                    cols.push(if v.data_type() == want {
                        v
                    } else {
                        arrow_cast_compat(&v, want)?
                    });
                }
                values.push(RecordBatch::try_new(set_schema.clone(), cols).map_err(|e| {
                    DataFusionError::Plan(format!(
                        "updated rows do not fit table {}: {e}",
                        ds.uri()
                    ))
                })?);
            }
            if addrs.is_empty() {
                return Ok(0);
            }
            let mut values = arrow_select::concat::concat_batches(&set_schema, &values)?;
            // The input's partitions interleave: in address order, as one
            // sequential scan would have found them.
            if addrs.windows(2).any(|w| w[0] > w[1]) {
                let mut order: Vec<u32> = (0..addrs.len() as u32).collect();
                order.sort_unstable_by_key(|&i| addrs[i as usize]);
                let order = arrow_array::UInt32Array::from(order);
                addrs = order.values().iter().map(|&i| addrs[i as usize]).collect();
                values = arrow_select::take::take_record_batch(&values, &order)?;
            }
            let names: Vec<&str> = set
                .iter()
                .map(|&i| table_schema.field(i).name().as_str())
                .collect();
            let n = addrs.len() as u64;
            find.done();
            let _write = times.write.timer();
            let mode = mode.unwrap_or_else(|| match ds.cheaper_update(&addrs, &values) {
                UpdateMode::RewriteColumns => UpdateStrategy::Columns,
                UpdateMode::RewriteRows => UpdateStrategy::Rows,
            });
            let new = match mode {
                UpdateStrategy::Columns => ds.update_columns(&names, &addrs, &values, None).await,
                UpdateStrategy::Rows => ds.update_rows_with(&names, &addrs, &values).await,
                UpdateStrategy::Overlay => ds.update_overlay(&names, &addrs, &values, None).await,
            }
            .map_err(to_df)?;
            state.set(new);
            Ok(n)
        }
    }
}

fn arrow_cast_compat(v: &ArrayRef, to: &DataType) -> Result<ArrayRef> {
    Ok(datafusion::arrow::compute::cast(v, to)?)
}

impl ExecutionPlan for DmlExec {
    fn name(&self) -> &str {
        "DmlExec"
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        match &self.kind {
            DmlKind::Insert { input, .. }
            | DmlKind::Delete { input }
            | DmlKind::Update { input, .. } => vec![input],
        }
    }
    /// It gathers addresses: splitting its input for it buys nothing.
    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }
    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
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
        let [child] = children.as_slice() else {
            return Err(DataFusionError::Internal(format!(
                "DmlExec has one input, given {}",
                children.len()
            )));
        };
        let input = child.clone();
        let kind = match &self.kind {
            DmlKind::Insert { overwrite, .. } => DmlKind::Insert {
                input,
                overwrite: *overwrite,
            },
            DmlKind::Delete { .. } => DmlKind::Delete { input },
            DmlKind::Update {
                assignments, mode, ..
            } => DmlKind::Update {
                input,
                assignments: assignments.clone(),
                mode: *mode,
            },
        };
        Ok(Arc::new(DmlExec::new(
            self.state.clone(),
            self.dataset.clone(),
            kind,
        )))
    }
    fn execute(
        &self,
        partition: usize,
        ctx: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        only_partition("DmlExec", partition)?;
        let state = self.state.clone();
        let planned = self.dataset.clone();
        let kind = self.kind.clone();
        // An INSERT's reading and writing interleave: not split.
        let times = match &kind {
            DmlKind::Insert { .. } => DmlTimes {
                find: metrics::Time::new(),
                write: metrics::Time::new(),
            },
            _ => DmlTimes {
                find: MetricBuilder::new(&self.metrics).subset_time("find_time", 0),
                write: MetricBuilder::new(&self.metrics).subset_time("write_time", 0),
            },
        };
        let fut = async move {
            let n = run(state, planned, kind, ctx, times).await?;
            Ok(RecordBatch::try_new(
                count_schema(),
                vec![Arc::new(UInt64Array::from(vec![n]))],
            )?)
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            count_schema(),
            futures::stream::once(fut).boxed(),
        )))
    }
}
