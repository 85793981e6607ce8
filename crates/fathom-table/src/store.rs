//! Object stores by URI: `memory://name` (process-wide, for tests),
//! `file:///abs/path` and plain paths (local disk), and `s3://bucket/path`
//! configured from the environment (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT`, `AWS_ALLOW_HTTP`,
//! ...). Commits need conditional put (`If-None-Match`), which S3 has.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use object_store::ObjectStore;
use object_store::memory::InMemory;
use object_store::path::Path;

use crate::error::{Error, Result};

fn memory_stores() -> &'static Mutex<HashMap<String, Arc<InMemory>>> {
    static STORES: OnceLock<Mutex<HashMap<String, Arc<InMemory>>>> = OnceLock::new();
    STORES.get_or_init(Default::default)
}

/// The store and root path of a dataset URI.
pub fn store_for_uri(uri: &str) -> Result<(Arc<dyn ObjectStore>, Path)> {
    if let Some(rest) = uri.strip_prefix("memory://") {
        let (name, path) = rest.split_once('/').unwrap_or((rest, ""));
        let store = memory_stores()
            .lock()
            .unwrap()
            .entry(name.to_string())
            .or_insert_with(|| Arc::new(InMemory::new()))
            .clone();
        return Ok((store, Path::from(path)));
    }
    if let Some(rest) = uri.strip_prefix("s3://") {
        let (bucket, path) = rest.split_once('/').unwrap_or((rest, ""));
        let store = object_store::aws::AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .build()
            .map_err(|e| Error::invalid(format!("cannot configure S3 for '{uri}': {e}")))?;
        return Ok((Arc::new(store), Path::from(path)));
    }
    let local = if let Some(rest) = uri.strip_prefix("file://") {
        rest.to_string()
    } else if uri.contains("://") {
        return Err(Error::invalid(format!(
            "unsupported URI scheme in '{uri}' (supported: file://, s3://, memory://, plain paths)"
        )));
    } else {
        uri.to_string()
    };
    let abs =
        std::path::absolute(&local).map_err(|e| Error::invalid(format!("path '{local}': {e}")))?;
    let root = Path::from_absolute_path(&abs)
        .map_err(|e| Error::invalid(format!("path '{local}': {e}")))?;
    Ok((Arc::new(crate::localfs::LocalStore::new()), root))
}

pub use fathom_file::io::shown;
