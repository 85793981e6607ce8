//! A schema whose tables are the datasets of one directory
//! (`<dir>/<name>.lance`): the embedded default of the CLI. `CREATE TABLE`
//! and `CREATE TABLE AS SELECT` write new datasets there, `DROP TABLE`
//! removes them; tables registered otherwise (external tables, views) live
//! beside them for the session.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use datafusion::catalog::{MemTable, SchemaProvider};
use datafusion::datasource::TableProvider;
use datafusion::error::{DataFusionError, Result};
use fathom_table::{Dataset, WriteMode, WriteParams};

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
        let ds = Dataset::open(&self.uri(name)).await.map_err(to_df)?;
        let t: Arc<dyn TableProvider> = Arc::new(FathomTable::new(ds, TableOptions::default()));
        self.opened
            .write()
            .unwrap()
            .insert(name.to_string(), t.clone());
        Ok(Some(t))
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
            let path = self.dir.join(format!("{name}{SUFFIX}"));
            std::fs::remove_dir_all(&path).map_err(|e| {
                DataFusionError::Execution(format!("cannot remove {}: {e}", path.display()))
            })?;
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
