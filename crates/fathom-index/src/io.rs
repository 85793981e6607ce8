//! Reading and writing the Lance files of an index segment
//! (`_indices/<uuid>/<file>`).

use std::sync::Arc;

use arrow_array::RecordBatch;
use fathom_file::{FileReader, FileReaderOptions, FileWriter, FileWriterOptions};
use fathom_table::format::{IndexFile, IndexMetadata};
use fathom_table::naming::index_dir;
use object_store::ObjectStore;
use object_store::path::Path;

use crate::error::{Error, Result};

/// Where a segment's files go.
pub struct SegmentDir {
    pub store: Arc<dyn ObjectStore>,
    pub dir: Path,
}

impl SegmentDir {
    pub fn new(store: Arc<dyn ObjectStore>, root: &Path, uuid: &uuid::Uuid) -> Self {
        SegmentDir {
            store,
            dir: index_dir(root, uuid),
        }
    }

    /// Writes `batch` (and extra global buffers, schema metadata) as one file.
    pub async fn write(
        &self,
        name: &str,
        batch: &RecordBatch,
        metadata: &[(&str, String)],
        globals: Vec<Vec<u8>>,
    ) -> Result<IndexFile> {
        let mut w = FileWriter::try_new(
            self.store.clone(),
            self.dir.clone().join(name),
            &batch.schema(),
            FileWriterOptions {
                // Dictionaries would make page_data pages depend on each other.
                dictionary: false,
                ..Default::default()
            },
        )?;
        w.write_batch(batch).await?;
        for g in globals {
            w.add_global_buffer(g);
        }
        for (k, v) in metadata {
            w.set_metadata(*k, v.clone());
        }
        let written = w.finish().await?;
        Ok(IndexFile {
            path: name.to_string(),
            size_bytes: written.size_bytes,
        })
    }
}

/// Opens file `name` of a segment (size from the metadata: no HEAD request).
pub async fn open(
    store: &Arc<dyn ObjectStore>,
    root: &Path,
    meta: &IndexMetadata,
    name: &str,
) -> Result<FileReader> {
    let size = meta
        .files
        .iter()
        .find(|f| f.path == name)
        .map(|f| f.size_bytes);
    let path = index_dir(root, &meta.uuid).join(name);
    FileReader::open(store.clone(), path, size, FileReaderOptions::default())
        .await
        .map_err(|e| match e {
            fathom_file::Error::Io { path, source } => Error::Corrupt {
                path,
                message: format!(
                    "index '{}' segment {} is missing a file: {source}",
                    meta.name, meta.uuid
                ),
            },
            e => e.into(),
        })
}

/// Opens file `name` of a segment and reads all its rows (small files:
/// lookups, bitmaps, zone maps).
pub async fn read_all(
    store: &Arc<dyn ObjectStore>,
    root: &Path,
    meta: &IndexMetadata,
    name: &str,
) -> Result<(FileReader, RecordBatch)> {
    let r = open(store, root, meta, name).await?;
    let b = r.read_range(0..r.num_rows(), None).await?;
    Ok((r, b))
}
