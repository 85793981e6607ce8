//! `CREATE EXTERNAL TABLE t STORED AS LANCE LOCATION '<uri>'
//! [OPTIONS ('version' '3', 'with_row_id' 'true', 'with_row_addr' 'true')]`.
//!
//! A location with no dataset yet, given column definitions, becomes a new
//! empty dataset with that schema. `version` pins the table (time travel,
//! read-only).

use std::sync::Arc;

use arrow_array::RecordBatch;
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProviderFactory};
use datafusion::datasource::TableProvider;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::CreateExternalTable;
use fathom_table::{Dataset, WriteMode, WriteParams};

use crate::error::to_df;
use crate::provider::{FathomTable, TableOptions};

/// Creates tables for `STORED AS LANCE`.
#[derive(Debug, Default)]
pub struct FathomTableFactory;

fn option<'a>(cmd: &'a CreateExternalTable, key: &str) -> Option<&'a str> {
    cmd.options
        .iter()
        .find(|(k, _)| {
            let k = k.to_ascii_lowercase();
            k == key || k == format!("format.{key}")
        })
        .map(|(_, v)| v.as_str())
}

fn flag(cmd: &CreateExternalTable, key: &str) -> Result<bool> {
    match option(cmd, key).map(|v| v.to_ascii_lowercase()) {
        None => Ok(false),
        Some(v) if v == "true" => Ok(true),
        Some(v) if v == "false" => Ok(false),
        Some(v) => Err(DataFusionError::Plan(format!(
            "option '{key}' must be true or false, got '{v}'"
        ))),
    }
}

/// Opens (or, with a schema, creates) the dataset for a table definition.
pub async fn open_table(
    uri: &str,
    version: Option<u64>,
    schema: Option<arrow_schema::SchemaRef>,
    options: TableOptions,
) -> Result<FathomTable> {
    let ds = match Dataset::open(uri).await {
        Ok(ds) => ds,
        Err(fathom_table::Error::NotFound { .. })
            if schema.as_ref().is_some_and(|s| !s.fields().is_empty()) =>
        {
            let empty = RecordBatch::new_empty(crate::util::storage_schema(&schema.unwrap()));
            Dataset::write(uri, &[empty], WriteMode::Create, WriteParams::default())
                .await
                .map_err(to_df)?
        }
        Err(e) => return Err(to_df(e)),
    };
    Ok(match version {
        Some(v) => FathomTable::pinned(ds.checkout(v).await.map_err(to_df)?, options),
        None => FathomTable::new(ds, options),
    })
}

#[async_trait]
impl TableProviderFactory for FathomTableFactory {
    async fn create(
        &self,
        _state: &dyn Session,
        cmd: &CreateExternalTable,
    ) -> Result<Arc<dyn TableProvider>> {
        // Unknown keys are refused (a misspelt option must not be ignored).
        const KNOWN: [&str; 3] = ["version", "with_row_id", "with_row_addr"];
        for k in cmd.options.keys() {
            let k = k.to_ascii_lowercase();
            let bare = k.strip_prefix("format.").unwrap_or(&k);
            if !KNOWN.contains(&bare) {
                return Err(DataFusionError::Plan(format!(
                    "unknown option '{bare}' for a Lance table (known: {})",
                    KNOWN.join(", ")
                )));
            }
        }
        let options = TableOptions {
            with_row_id: flag(cmd, "with_row_id")?,
            with_row_addr: flag(cmd, "with_row_addr")?,
            ..Default::default()
        };
        let version = option(cmd, "version")
            .map(|v| {
                v.parse::<u64>().map_err(|_| {
                    DataFusionError::Plan(format!("option 'version' must be a number, got '{v}'"))
                })
            })
            .transpose()?;
        let schema: arrow_schema::SchemaRef = Arc::new(cmd.schema.as_arrow().clone());
        let [location] = cmd.locations.as_slice() else {
            return Err(DataFusionError::Plan(format!(
                "a Lance table has one LOCATION (a dataset directory), got {}",
                cmd.locations.len()
            )));
        };
        Ok(Arc::new(
            open_table(location, version, Some(schema), options).await?,
        ))
    }
}
