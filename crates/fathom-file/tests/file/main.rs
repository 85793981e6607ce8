//! Integration tests of the file format. Oracles: the Arrow data written
//! (round trip), Arrow's own `take` (random access), seed 002's table (List
//! offsets), and pylance (interop, in `interop.rs`).

mod corruption;
mod interop;
mod roundtrip;
mod seed_list;

use std::sync::Arc;

use arrow_array::RecordBatch;
use fathom_file::{FileReader, FileReaderOptions, FileWriter, FileWriterOptions};
use object_store::ObjectStore;
use object_store::memory::InMemory;
use object_store::path::Path;

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

pub async fn write_file(
    store: &Arc<dyn ObjectStore>,
    path: &str,
    batches: &[RecordBatch],
    opts: FileWriterOptions,
) -> fathom_file::WrittenFile {
    let mut w =
        FileWriter::try_new(store.clone(), Path::from(path), &batches[0].schema(), opts).unwrap();
    for b in batches {
        w.write_batch(b).await.unwrap();
    }
    w.finish().await.unwrap()
}

pub async fn open(store: &Arc<dyn ObjectStore>, path: &str) -> fathom_file::Result<FileReader> {
    FileReader::open(
        store.clone(),
        Path::from(path),
        None,
        FileReaderOptions::default(),
    )
    .await
}

pub fn memory() -> Arc<dyn ObjectStore> {
    Arc::new(InMemory::new())
}
