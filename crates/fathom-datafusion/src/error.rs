//! The one place where dataset-layer errors become DataFusion errors.

use datafusion::error::DataFusionError;

/// Converts a dataset error, keeping its message (it names the file,
/// column or value that is wrong).
pub fn to_df(e: fathom_table::Error) -> DataFusionError {
    match e {
        fathom_table::Error::InvalidInput(m) => DataFusionError::Plan(m),
        fathom_table::Error::Arrow(a) => DataFusionError::ArrowError(Box::new(a), None),
        fathom_table::Error::External(e) => match e.downcast::<DataFusionError>() {
            Ok(d) => *d,
            Err(e) => DataFusionError::External(e),
        },
        other => DataFusionError::External(Box::new(other)),
    }
}
