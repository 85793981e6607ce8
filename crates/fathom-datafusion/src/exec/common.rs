//! Pieces shared by the index-branch nodes, and their row-stream contract.
//!
//! # The row stream
//!
//! Index-branch nodes (`ScalarIndexExec` and, next, vector and full-text
//! searches, then `ExclusionExec`, `TakeExec`) pass a *row stream*: column 0
//! is `_rowaddr` (UInt64, non-null), sorted by address within a partition
//! for scalar results; further columns are optional per-row values a
//! ranked search produced, `_score` or `_distance` (Float32). Exclusion
//! keeps every column of the rows it keeps; take appends them, unchanged,
//! after the columns it reads.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use datafusion::error::{DataFusionError, Result};
use datafusion::physical_expr::{EquivalenceProperties, Partitioning};
use datafusion::physical_plan::PlanProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use fathom_table::{Dataset, RowAddress};

use crate::error::to_df;
use roaring::RoaringBitmap;

/// Schema of a stream of row addresses.
pub fn addr_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        fathom_table::ROW_ADDR,
        DataType::UInt64,
        false,
    )]))
}

/// Name of a ranked search's score column (higher is better: BM25).
pub const SCORE: &str = "_score";
/// Name of a vector search's distance column (lower is better).
pub const DISTANCE: &str = "_distance";

/// Checks that `schema` is a row stream; returns the positions of its
/// extra (score / distance) columns.
pub fn row_stream_extras(schema: &Schema, node: &str) -> Result<Vec<usize>> {
    let bad =
        |why: String| DataFusionError::Internal(format!("{node} input is not a row stream: {why}"));
    match schema.fields().first() {
        Some(f) if f.name() == fathom_table::ROW_ADDR && f.data_type() == &DataType::UInt64 => {}
        Some(f) => return Err(bad(format!("column 0 is {} {}", f.name(), f.data_type()))),
        None => return Err(bad("no columns".into())),
    }
    schema
        .fields()
        .iter()
        .enumerate()
        .skip(1)
        .map(|(i, f)| match f.name().as_str() {
            SCORE | DISTANCE if f.data_type() == &DataType::Float32 => Ok(i),
            other => Err(bad(format!("unexpected column {other} {}", f.data_type()))),
        })
        .collect()
}

pub fn single_partition(schema: SchemaRef) -> Arc<PlanProperties> {
    Arc::new(PlanProperties::new(
        EquivalenceProperties::new(schema),
        Partitioning::UnknownPartitioning(1),
        EmissionType::Incremental,
        Boundedness::Bounded,
    ))
}

/// The check at the top of `execute` for a node with one output
/// partition: any other partition number is an internal error naming the
/// node.
pub fn only_partition(node: &str, partition: usize) -> Result<()> {
    if partition == 0 {
        Ok(())
    } else {
        Err(DataFusionError::Internal(format!(
            "{node} has one partition, asked for {partition}"
        )))
    }
}

/// Sorted addresses as batches of at most `batch_size`: each batch's
/// values are filled straight from the iterator into the buffer the array
/// then owns (no intermediate vector of all addresses, no copy).
pub fn addr_batches(addrs: impl Iterator<Item = u64>, batch_size: usize) -> Vec<RecordBatch> {
    let bs = batch_size.max(1);
    let mut addrs = addrs.peekable();
    let mut out = Vec::new();
    while addrs.peek().is_some() {
        let chunk: Vec<u64> = addrs.by_ref().take(bs).collect();
        out.push(
            RecordBatch::try_new(addr_schema(), vec![Arc::new(UInt64Array::from(chunk))])
                .expect("one non-null UInt64 column"),
        );
    }
    out
}

/// The addresses of `rows` (ascending) as batches of at most
/// `batch_size`: fragment by fragment, each bitmap walked directly (the
/// treemap's own iterator costs several times more per address).
pub fn rowset_batches(rows: &fathom_table::RowSet, batch_size: usize) -> Vec<RecordBatch> {
    let bs = batch_size.max(1);
    let total = rows.len() as usize;
    let mut out = Vec::with_capacity(total.div_ceil(bs));
    let mut buf: Vec<u64> = Vec::with_capacity(total.min(bs));
    let flush = |buf: &mut Vec<u64>, out: &mut Vec<RecordBatch>, left: usize| {
        let full = std::mem::replace(buf, Vec::with_capacity(left.min(bs)));
        out.push(
            RecordBatch::try_new(addr_schema(), vec![Arc::new(UInt64Array::from(full))])
                .expect("one non-null UInt64 column"),
        );
    };
    let mut done = 0usize;
    for (f, b) in rows.fragments() {
        let hi = f.as_u64() << 32;
        let mut it = b.iter();
        loop {
            let room = bs - buf.len();
            let before = buf.len();
            buf.extend(it.by_ref().take(room).map(|o| hi | u64::from(o)));
            done += buf.len() - before;
            if buf.len() == bs {
                flush(&mut buf, &mut out, total - done);
            } else {
                break;
            }
        }
    }
    if !buf.is_empty() {
        flush(&mut buf, &mut out, 0);
    }
    out
}

/// `props` with the partition count of `input` (a node that maps each input
/// partition to one output partition).
pub fn with_partitions(
    props: Arc<PlanProperties>,
    input: &Arc<dyn datafusion::physical_plan::ExecutionPlan>,
) -> Arc<PlanProperties> {
    let n = input.properties().partitioning.partition_count();
    Arc::new(
        props
            .as_ref()
            .clone()
            .with_partitioning(Partitioning::UnknownPartitioning(n)),
    )
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

/// Rows of the table version that are not deleted, by fragment, loaded
/// as segments ask for them.
#[derive(Default)]
pub(crate) struct Deleted(HashMap<u32, Option<Arc<RoaringBitmap>>>);

impl Deleted {
    pub(crate) async fn load(&mut self, ds: &Dataset, fragments: &RoaringBitmap) -> Result<()> {
        for f in fragments.iter() {
            if self.0.contains_key(&f) {
                continue;
            }
            if let Some(fr) = ds.fragment(f as u64) {
                self.0.insert(f, ds.deleted_rows(fr).await.map_err(to_df)?);
            }
        }
        Ok(())
    }

    pub(crate) fn live(&self, a: RowAddress) -> bool {
        match self.0.get(&a.fragment().0) {
            Some(None) => true,
            Some(Some(d)) => !d.contains(a.offset()),
            None => false,
        }
    }
}
