//! Running async dataset work from DataFusion's synchronous hooks
//! (`register_table`, table functions).

use std::future::Future;

use datafusion::error::{DataFusionError, Result};

/// Runs `fut` to completion on a fresh thread with its own runtime, so it
/// works whether or not the caller is inside a (current-thread) runtime.
pub fn block_on<F, T>(fut: F) -> Result<T>
where
    F: Future<Output = Result<T>> + Send,
    T: Send,
{
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| DataFusionError::External(Box::new(e)))?
                .block_on(fut)
        })
        .join()
        .map_err(|_| DataFusionError::Internal("dataset task panicked".into()))?
    })
}

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, Schema, SchemaRef};

/// The type a Lance 2.0 file stores for `dt`: view types become their
/// plain counterparts (DataFusion produces `Utf8View` for VARCHAR), and
/// dictionary-encoded values their value type (the writer
/// dictionary-encodes pages of few distinct strings itself, as Lance does).
pub fn storage_type(dt: &DataType) -> DataType {
    match dt {
        DataType::Dictionary(_, value) => storage_type(value),
        DataType::Utf8View => DataType::Utf8,
        DataType::BinaryView => DataType::Binary,
        DataType::ListView(f) | DataType::List(f) => DataType::List(Arc::new(storage_field(f))),
        DataType::LargeListView(f) | DataType::LargeList(f) => {
            DataType::LargeList(Arc::new(storage_field(f)))
        }
        DataType::FixedSizeList(f, n) => DataType::FixedSizeList(Arc::new(storage_field(f)), *n),
        DataType::Struct(fs) => DataType::Struct(fs.iter().map(|f| storage_field(f)).collect()),
        other => other.clone(),
    }
}

fn storage_field(f: &Field) -> Field {
    f.clone().with_data_type(storage_type(f.data_type()))
}

/// `schema` with storage types.
pub fn storage_schema(schema: &Schema) -> SchemaRef {
    Arc::new(Schema::new_with_metadata(
        schema
            .fields()
            .iter()
            .map(|f| storage_field(f))
            .collect::<Vec<_>>(),
        schema.metadata().clone(),
    ))
}

/// Casts a batch to storage types where needed.
pub fn to_storage(batch: &RecordBatch) -> Result<RecordBatch> {
    let schema = storage_schema(&batch.schema());
    if schema.as_ref() == batch.schema().as_ref() {
        return Ok(batch.clone());
    }
    let cols = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(c, f)| datafusion::arrow::compute::cast(c, f.data_type()))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new(schema, cols)?)
}
