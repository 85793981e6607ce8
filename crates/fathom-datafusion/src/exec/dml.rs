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
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, execute_stream,
};
use fathom_table::scan::Projection;
use fathom_table::{Operation, UpdateMode, WriteParams};
use futures::{StreamExt, TryStreamExt};

use crate::error::to_df;
use crate::provider::TableState;

/// What a DML node does.
#[derive(Debug, Clone)]
pub enum DmlKind {
    Insert {
        input: Arc<dyn ExecutionPlan>,
        overwrite: bool,
    },
    Delete {
        /// Columns read to evaluate the filter (plus `_rowaddr`).
        read: Projection,
        filter: Option<Arc<dyn PhysicalExpr>>,
    },
    Update {
        read: Projection,
        filter: Option<Arc<dyn PhysicalExpr>>,
        /// Per table column: its new value, or `None` to keep it.
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
    kind: DmlKind,
    props: Arc<PlanProperties>,
}

pub fn count_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        "count",
        DataType::UInt64,
        false,
    )]))
}

impl DmlExec {
    pub fn new(state: Arc<TableState>, kind: DmlKind) -> Self {
        let props = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(count_schema()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        ));
        DmlExec { state, kind, props }
    }

    pub fn state(&self) -> &Arc<TableState> {
        &self.state
    }
    pub fn kind(&self) -> &DmlKind {
        &self.kind
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
            DmlKind::Delete { filter, .. } => {
                write!(f, "FathomDeleteExec")?;
                if let Some(p) = filter {
                    write!(f, ": filter={p}")?;
                }
                Ok(())
            }
            DmlKind::Update { filter, mode, .. } => {
                let mode = mode.map_or("auto", |m| m.name());
                write!(f, "FathomUpdateExec: mode={mode}")?;
                if let Some(p) = filter {
                    write!(f, ", filter={p}")?;
                }
                Ok(())
            }
        }
    }
}

fn mask(
    filter: &Option<Arc<dyn PhysicalExpr>>,
    batch: &RecordBatch,
) -> Result<Option<arrow_array::BooleanArray>> {
    let Some(f) = filter else { return Ok(None) };
    let m = f.evaluate(batch)?.into_array(batch.num_rows())?;
    let m = arrow_array::cast::AsArray::as_boolean_opt(&m)
        .ok_or_else(|| DataFusionError::Plan("filter is not boolean".into()))?
        .clone();
    // NULL counts as false.
    Ok(Some(if arrow_array::Array::null_count(&m) > 0 {
        arrow_select::filter::prep_null_mask_filter(&m)
    } else {
        m
    }))
}

async fn run(state: Arc<TableState>, kind: DmlKind, ctx: Arc<TaskContext>) -> Result<u64> {
    let ds = state.latest().await?;
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
        DmlKind::Delete { read, filter } => {
            let mut stream = ds
                .scan()
                .with_projection(read)
                .try_into_stream()
                .await
                .map_err(to_df)?;
            let mut addrs = Vec::new();
            while let Some(batch) = stream.try_next().await.map_err(to_df)? {
                let a = batch
                    .column(batch.num_columns() - 1)
                    .as_any()
                    .downcast_ref::<UInt64Array>()
                    .unwrap()
                    .clone();
                match mask(&filter, &batch)? {
                    Some(m) => addrs.extend(
                        arrow_select::filter::filter(&a, &m)?
                            .as_any()
                            .downcast_ref::<UInt64Array>()
                            .unwrap()
                            .values()
                            .iter()
                            .copied(),
                    ),
                    None => addrs.extend(a.values().iter().copied()),
                }
            }
            let (new, n) = ds.delete_rows_counted(&addrs).await.map_err(to_df)?;
            state.set(new);
            Ok(n)
        }
        DmlKind::Update {
            read,
            filter,
            assignments,
            mode,
        } => {
            let mut stream = ds
                .scan()
                .with_projection(read)
                .try_into_stream()
                .await
                .map_err(to_df)?;
            // The matched rows' addresses and the new values of the set
            // columns; the rest of each row is read only if rows move.
            let set: Vec<usize> = (0..n_fields)
                .filter(|i| assignments[*i].is_some())
                .collect();
            let table_schema = ds.schema().clone();
            let set_schema = Arc::new(table_schema.project(&set)?);
            let mut addrs = Vec::new();
            let mut values = Vec::new();
            while let Some(batch) = stream.try_next().await.map_err(to_df)? {
                let batch = match mask(&filter, &batch)? {
                    Some(m) => arrow_select::filter::filter_record_batch(&batch, &m)?,
                    None => batch,
                };
                if batch.num_rows() == 0 {
                    continue;
                }
                let a = batch
                    .column(batch.num_columns() - 1)
                    .as_any()
                    .downcast_ref::<UInt64Array>()
                    .unwrap();
                addrs.extend(a.values().iter().copied());
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
            let values = arrow_select::concat::concat_batches(&set_schema, &values)?;
            let names: Vec<&str> = set
                .iter()
                .map(|&i| table_schema.field(i).name().as_str())
                .collect();
            let n = addrs.len() as u64;
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
            DmlKind::Insert { input, .. } => vec![input],
            _ => vec![],
        }
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
        match (&self.kind, children.as_slice()) {
            (DmlKind::Insert { overwrite, .. }, [child]) => Ok(Arc::new(DmlExec::new(
                self.state.clone(),
                DmlKind::Insert {
                    input: child.clone(),
                    overwrite: *overwrite,
                },
            ))),
            _ => Ok(self),
        }
    }
    fn execute(
        &self,
        partition: usize,
        ctx: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "DmlExec has one partition, asked for {partition}"
            )));
        }
        let state = self.state.clone();
        let kind = self.kind.clone();
        let fut = async move {
            let n = run(state, kind, ctx).await?;
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
