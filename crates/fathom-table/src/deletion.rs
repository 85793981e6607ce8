//! Deletion files: the deleted physical row offsets of one fragment, as an
//! Arrow IPC file with one UInt32 column `row_id` (up to 5,000 rows) or a
//! portable 32-bit roaring bitmap (above), as Lance writes them.

use std::io::Cursor;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, UInt32Type};
use arrow_array::{RecordBatch, UInt32Array};
use arrow_schema::{DataType, Field, Schema};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use roaring::RoaringBitmap;

use crate::error::{Error, Result};
use crate::format::{DeletionFile, DeletionFileKind};
use crate::naming::deletion_file_path;

/// Above this many deleted rows a fragment's deletion file is a bitmap.
pub const BITMAP_THRESHOLD: u64 = 5_000;

/// Reads a fragment's deletion file.
pub async fn read_deletions(
    store: &dyn ObjectStore,
    root: &Path,
    fragment: u64,
    f: &DeletionFile,
) -> Result<RoaringBitmap> {
    let path = deletion_file_path(root, fragment, f.read_version, f.id, f.kind);
    let bytes = store
        .get(&path)
        .await
        .map_err(Error::io(store, &path))?
        .bytes()
        .await
        .map_err(Error::io(store, &path))?;
    let shown = crate::store::shown(store, &path);
    let bad = |m: String| Error::corrupt(&shown, m);
    let set = match f.kind {
        DeletionFileKind::Bitmap => RoaringBitmap::deserialize_from(&bytes[..])
            .map_err(|e| bad(format!("roaring bitmap: {e}")))?,
        DeletionFileKind::Arrow => {
            let reader = arrow_ipc::reader::FileReader::try_new(Cursor::new(bytes), None)
                .map_err(|e| bad(format!("arrow IPC: {e}")))?;
            let mut set = RoaringBitmap::new();
            for batch in reader {
                let batch = batch.map_err(|e| bad(format!("arrow IPC: {e}")))?;
                let col = batch
                    .column_by_name("row_id")
                    .or_else(|| (batch.num_columns() == 1).then(|| batch.column(0)))
                    .ok_or_else(|| bad("no row_id column".into()))?;
                match col.data_type() {
                    DataType::UInt32 => {
                        set.extend(col.as_primitive::<UInt32Type>().values().iter().copied())
                    }
                    DataType::Int32 => set.extend(
                        col.as_primitive::<Int32Type>()
                            .values()
                            .iter()
                            .map(|v| *v as u32),
                    ),
                    t => return Err(bad(format!("row_id column of type {t}"))),
                }
            }
            set
        }
    };
    if set.len() != f.num_deleted_rows {
        return Err(bad(format!(
            "holds {} rows but the manifest says {}",
            set.len(),
            f.num_deleted_rows
        )));
    }
    Ok(set)
}

/// Writes a deletion file for `deleted` (never empty) and describes it.
pub async fn write_deletions(
    store: &dyn ObjectStore,
    root: &Path,
    fragment: u64,
    read_version: u64,
    deleted: &RoaringBitmap,
) -> Result<DeletionFile> {
    let id: u64 = rand::random();
    let n = deleted.len();
    let kind = if n > BITMAP_THRESHOLD {
        DeletionFileKind::Bitmap
    } else {
        DeletionFileKind::Arrow
    };
    let bytes = match kind {
        DeletionFileKind::Bitmap => {
            let mut v = Vec::with_capacity(deleted.serialized_size());
            deleted
                .serialize_into(&mut v)
                .expect("writing to a Vec cannot fail");
            v
        }
        DeletionFileKind::Arrow => {
            let schema = Arc::new(Schema::new(vec![Field::new(
                "row_id",
                DataType::UInt32,
                false,
            )]));
            let batch = RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(UInt32Array::from_iter_values(deleted.iter()))],
            )?;
            let mut v = Vec::new();
            let mut w = arrow_ipc::writer::FileWriter::try_new(&mut v, &schema)?;
            w.write(&batch)?;
            w.finish()?;
            drop(w);
            v
        }
    };
    let path = deletion_file_path(root, fragment, read_version, id, kind);
    store
        .put(&path, PutPayload::from(bytes))
        .await
        .map_err(Error::io(store, &path))?;
    Ok(DeletionFile {
        kind,
        read_version,
        id,
        num_deleted_rows: n,
        base_id: None,
    })
}
