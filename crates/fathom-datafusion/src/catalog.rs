//! A schema whose tables are the datasets of one directory
//! (`<dir>/<name>.lance`): the embedded default of the CLI. `CREATE TABLE`
//! and `CREATE TABLE AS SELECT` write new datasets there, `DROP TABLE`
//! removes them; tables registered otherwise (external tables, views) live
//! beside them for the session.
//!
//! - `CREATE OR REPLACE TABLE t AS ...` through [`crate::sql::run_sql`] (the
//!   CLI) is one overwrite commit of a new version of `t`: the query runs
//!   first, reading the old version, and a failure leaves `t` as it was;
//!   old versions stay readable (time travel) until cleaned up. (Plain
//!   `SessionContext::sql` runs DataFusion's own replace, which drops the
//!   table before running the query: use `run_sql`.)
//! - `DROP TABLE t` removes the dataset with every version: the directory
//!   is first renamed aside (one atomic step, so no reader or writer ever
//!   sees half of it), then deleted. A writer committing meanwhile fails
//!   with an error rather than leaving a table that points at missing
//!   files (see `fathom_table::commit`).
//! - Table names are names, not paths: no `/`, `\`, leading `.` or empty
//!   name.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use datafusion::catalog::{MemTable, SchemaProvider};
use datafusion::datasource::TableProvider;
use datafusion::error::{DataFusionError, Result};
use fathom_table::{Dataset, WriteMode, WriteParams};
use futures::StreamExt;

use crate::error::to_df;
use crate::provider::{FathomTable, TableOptions};
use crate::util::block_on;

/// Datasets of a local directory as a DataFusion schema.
#[derive(Debug)]
pub struct DirectorySchema {
    dir: std::path::PathBuf,
    registered: RwLock<HashMap<String, Arc<dyn TableProvider>>>,
    opened: RwLock<HashMap<String, Arc<dyn TableProvider>>>,
}

const SUFFIX: &str = ".lance";

impl DirectorySchema {
    pub fn new(dir: impl Into<std::path::PathBuf>) -> Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|e| {
            DataFusionError::Plan(format!(
                "cannot create data directory {}: {e}",
                dir.display()
            ))
        })?;
        Ok(DirectorySchema {
            dir,
            registered: Default::default(),
            opened: Default::default(),
        })
    }

    /// Checks that `name` names a dataset of this directory (not a path).
    pub fn check_name(name: &str) -> Result<()> {
        if name.is_empty()
            || name.starts_with('.')
            || name.contains(['/', '\\', '\0'])
            || name.trim() != name
        {
            return Err(DataFusionError::Plan(format!(
                "invalid table name {name:?}: a table of the data directory is a name, not a path \
                 (no '/', '\\', leading '.', surrounding spaces, or empty name); \
                 use CREATE EXTERNAL TABLE ... STORED AS LANCE LOCATION '...' for a path"
            )));
        }
        Ok(())
    }

    /// Writes `batches` as table `name`: a new dataset, or, with `replace`
    /// and an existing dataset, one overwrite commit of a new version (the
    /// old versions stay). Nothing is committed unless the whole stream is
    /// written.
    pub async fn write_table(
        &self,
        name: &str,
        schema: arrow_schema::SchemaRef,
        batches: datafusion::execution::SendableRecordBatchStream,
        replace: bool,
    ) -> Result<()> {
        Self::check_name(name)?;
        let exists = self.on_disk().iter().any(|n| n == name);
        if exists && !replace {
            return Err(DataFusionError::Plan(format!(
                "table '{name}' already exists"
            )));
        }
        let uri = self.uri(name);
        let storage = crate::util::storage_schema(&schema);
        let stream = batches.map(|b| {
            b.and_then(|b| crate::util::to_storage(&b))
                .map_err(|e| fathom_table::Error::External(Box::new(e)))
        });
        let mode = if exists {
            WriteMode::Overwrite
        } else {
            WriteMode::Create
        };
        let ds = Dataset::write_stream(&uri, storage, stream, mode, WriteParams::default(), |_| {})
            .await
            .map_err(to_df)?;
        let t: Arc<dyn TableProvider> = Arc::new(FathomTable::new(ds, TableOptions::default()));
        self.opened.write().unwrap().insert(name.to_string(), t);
        Ok(())
    }

    /// Removes dataset `name` with every version: renamed aside first (so
    /// it disappears in one step), then deleted.
    fn remove_dataset(&self, name: &str) -> Result<()> {
        let path = self.dir.join(format!("{name}{SUFFIX}"));
        let aside = self
            .dir
            .join(format!(".{name}{SUFFIX}.dropped-{}", uuid::Uuid::new_v4()));
        std::fs::rename(&path, &aside).map_err(|e| {
            DataFusionError::Execution(format!(
                "cannot drop table '{name}' ({}): {e}",
                path.display()
            ))
        })?;
        std::fs::remove_dir_all(&aside).map_err(|e| {
            DataFusionError::Execution(format!(
                "table '{name}' was dropped but {} could not be deleted: {e}",
                aside.display()
            ))
        })
    }

    fn uri(&self, name: &str) -> String {
        self.dir
            .join(format!("{name}{SUFFIX}"))
            .to_string_lossy()
            .into_owned()
    }

    fn on_disk(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return vec![];
        };
        entries
            .filter_map(|e| e.ok())
            .filter(|e| e.path().join("_versions").is_dir())
            .filter_map(|e| {
                e.file_name()
                    .to_str()
                    .and_then(|n| n.strip_suffix(SUFFIX))
                    .map(String::from)
            })
            .collect()
    }
}

#[async_trait]
impl SchemaProvider for DirectorySchema {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.on_disk();
        names.extend(self.registered.read().unwrap().keys().cloned());
        names.sort();
        names.dedup();
        names
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        if let Some(t) = self.registered.read().unwrap().get(name) {
            return Ok(Some(t.clone()));
        }
        if let Some(t) = self.opened.read().unwrap().get(name) {
            return Ok(Some(t.clone()));
        }
        if !self.on_disk().iter().any(|n| n == name) {
            return Ok(None);
        }
        let ds = Dataset::open(&self.uri(name)).await.map_err(|e| {
            DataFusionError::Execution(format!("table '{name}' cannot be opened: {e}"))
        })?;
        let t: Arc<dyn TableProvider> = Arc::new(FathomTable::new(ds, TableOptions::default()));
        self.opened
            .write()
            .unwrap()
            .insert(name.to_string(), t.clone());
        Ok(Some(t))
    }

    /// Every dataset of the directory is a base table: listing them
    /// (`SHOW TABLES`) opens none, so one unreadable dataset does not hide
    /// the others (querying it gives the error that names it).
    async fn table_type(&self, name: &str) -> Result<Option<datafusion::datasource::TableType>> {
        if let Some(t) = self.registered.read().unwrap().get(name) {
            return Ok(Some(t.table_type()));
        }
        Ok(self
            .on_disk()
            .iter()
            .any(|n| n == name)
            .then_some(datafusion::datasource::TableType::Base))
    }

    fn register_table(
        &self,
        name: String,
        table: Arc<dyn TableProvider>,
    ) -> Result<Option<Arc<dyn TableProvider>>> {
        if self.table_exist(&name) {
            return Err(DataFusionError::Plan(format!(
                "table '{name}' already exists"
            )));
        }
        Self::check_name(&name)?;
        // CREATE TABLE [AS SELECT] arrives as a MemTable: persist it as a dataset.
        if let Some(mem) = table.downcast_ref::<MemTable>() {
            let schema = mem.schema();
            let mut batches = Vec::new();
            for part in &mem.batches {
                let guard = part
                    .try_read()
                    .map_err(|_| DataFusionError::Internal("table data is locked".into()))?;
                for b in guard.iter() {
                    batches.push(crate::util::to_storage(b)?);
                }
            }
            if batches.is_empty() {
                batches.push(arrow_array::RecordBatch::new_empty(
                    crate::util::storage_schema(&schema),
                ));
            }
            let uri = self.uri(&name);
            let ds = block_on(async move {
                Dataset::write(&uri, &batches, WriteMode::Create, WriteParams::default())
                    .await
                    .map_err(to_df)
            })?;
            let t: Arc<dyn TableProvider> = Arc::new(FathomTable::new(ds, TableOptions::default()));
            self.opened.write().unwrap().insert(name, t);
            return Ok(None);
        }
        Ok(self.registered.write().unwrap().insert(name, table))
    }

    fn deregister_table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        if let Some(t) = self.registered.write().unwrap().remove(name) {
            return Ok(Some(t));
        }
        let opened = self.opened.write().unwrap().remove(name);
        if self.on_disk().iter().any(|n| n == name) {
            self.remove_dataset(name)?;
            return Ok(opened.or_else(|| {
                Some(Arc::new(
                    MemTable::try_new(Arc::new(arrow_schema::Schema::empty()), vec![vec![]])
                        .unwrap(),
                ))
            }));
        }
        Ok(opened)
    }

    fn table_exist(&self, name: &str) -> bool {
        self.registered.read().unwrap().contains_key(name)
            || self.on_disk().iter().any(|n| n == name)
    }
}
