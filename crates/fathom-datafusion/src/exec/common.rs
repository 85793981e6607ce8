//! Pieces shared by the index-branch nodes.

use std::sync::Arc;

use arrow_array::{RecordBatch, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use datafusion::physical_expr::{EquivalenceProperties, Partitioning};
use datafusion::physical_plan::PlanProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};

/// Schema of a stream of row addresses.
pub fn addr_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        fathom_table::ROW_ADDR,
        DataType::UInt64,
        false,
    )]))
}

pub fn single_partition(schema: SchemaRef) -> Arc<PlanProperties> {
    Arc::new(PlanProperties::new(
        EquivalenceProperties::new(schema),
        Partitioning::UnknownPartitioning(1),
        EmissionType::Incremental,
        Boundedness::Bounded,
    ))
}

/// Sorted addresses as batches of at most `batch_size`.
pub fn addr_batches(addrs: impl Iterator<Item = u64>, batch_size: usize) -> Vec<RecordBatch> {
    let all: Vec<u64> = addrs.collect();
    all.chunks(batch_size.max(1))
        .map(|c| {
            RecordBatch::try_new(addr_schema(), vec![Arc::new(UInt64Array::from(c.to_vec()))])
                .unwrap()
        })
        .collect()
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
