//! Dataset tests. Oracles: an in-memory model of the table (property
//! test), the rows written (basic, concurrency), and pylance (interop).

mod basic;
mod concurrency;
mod crash;
mod frag_reuse;
mod interop;
mod model;
mod s3;

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("value", DataType::Utf8, true),
    ]))
}

/// Rows `ids` with value "v{id}" (null when id % 5 == 0).
pub fn rows(ids: impl IntoIterator<Item = i64>) -> RecordBatch {
    let ids: Vec<i64> = ids.into_iter().collect();
    let values: Vec<Option<String>> = ids
        .iter()
        .map(|i| (i % 5 != 0).then(|| format!("v{i}")))
        .collect();
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(ids)),
            Arc::new(StringArray::from(values)),
        ],
    )
    .unwrap()
}

/// The ids of a batch, in order.
pub fn ids(b: &RecordBatch) -> Vec<i64> {
    b.column_by_name("id")
        .unwrap()
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap()
        .values()
        .to_vec()
}

pub fn unique_uri(tag: &str) -> String {
    format!("memory://{tag}-{}", uuid::Uuid::new_v4())
}

/// An index segment entry (no files) named `name` on field `field`,
/// covering `frags`, built at version `v`.
pub fn segment(
    name: &str,
    field: i32,
    frags: std::ops::Range<u32>,
    v: u64,
) -> fathom_table::IndexMetadata {
    fathom_table::IndexMetadata {
        uuid: uuid::Uuid::new_v4(),
        name: name.into(),
        fields: vec![field],
        dataset_version: v,
        fragment_bitmap: Some(frags.collect()),
        index_details: None,
        index_version: Some(0),
        created_at_ms: None,
        base_id: None,
        files: vec![],
        covering_fields: vec![],
    }
}
