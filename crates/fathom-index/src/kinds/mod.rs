//! The index kinds, one module each. A kind implements
//! [`crate::IndexType`] and is listed in [`crate::kind::REGISTRY`].

pub mod bitmap;
pub mod btree;
pub mod zonemap;

use arrow_array::RecordBatch;
use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use arrow_array::{ArrayRef, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use futures::TryStreamExt;

use crate::error::Result;
use crate::kind::BuildStream;

/// Column types the sorted kinds (B-tree, bitmap, zone map) index.
pub(crate) fn orderable(dt: &DataType) -> bool {
    (dt.is_primitive() && !matches!(dt, DataType::Float16))
        || matches!(
            dt,
            DataType::Boolean
                | DataType::Utf8
                | DataType::LargeUtf8
                | DataType::Binary
                | DataType::LargeBinary
        )
}

/// The whole stream as one (values, ids) pair, for kinds that must see
/// every value before writing (a sort, a grouping).
pub(crate) async fn collect(
    value_type: &DataType,
    batches: BuildStream<'_>,
) -> Result<(ArrayRef, UInt64Array)> {
    let parts: Vec<RecordBatch> = batches.try_collect().await?;
    let schema = std::sync::Arc::new(Schema::new(vec![
        Field::new("values", value_type.clone(), true),
        Field::new("ids", DataType::UInt64, false),
    ]));
    let parts = parts
        .into_iter()
        .map(|b| RecordBatch::try_new(schema.clone(), b.columns().to_vec()))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let all = arrow_select::concat::concat_batches(&schema, &parts)?;
    Ok((
        all.column(0).clone(),
        all.column(1).as_primitive::<UInt64Type>().clone(),
    ))
}
