//! The one place where dataset-layer errors become DataFusion errors.

use datafusion::error::DataFusionError;

/// Converts a dataset error, keeping its message (it names the file,
/// column or value that is wrong).
pub fn to_df(e: fathom_table::Error) -> DataFusionError {
    match e {
        fathom_table::Error::InvalidInput(m) => DataFusionError::Plan(m),
        fathom_table::Error::Arrow(a) => DataFusionError::ArrowError(Box::new(a), None),
        other => DataFusionError::External(Box::new(other)),
    }
}
