//! Writing new fragments: batches are split into data files of at most
//! `max_rows_per_file` rows (one fragment each), written with the
//! dataset's field ids.

use std::sync::Arc;

use arrow_array::RecordBatch;
use fathom_file::{FileWriter, FileWriterOptions, LanceSchema};
use object_store::ObjectStore;
use object_store::path::Path;

use crate::error::{Error, Result};
use crate::format::{DataFile, Fragment, FragmentPassthrough};
use crate::naming::{data_file_path, new_data_file_name};

/// How new data is written.
#[derive(Debug, Clone)]
pub struct WriteParams {
    /// Rows per data file / fragment (default 1,048,576).
    pub max_rows_per_file: usize,
    /// Use stable row ids (only when creating a dataset).
    pub enable_stable_row_ids: bool,
    pub file: FileWriterOptions,
}

impl Default for WriteParams {
    fn default() -> Self {
        Self {
            max_rows_per_file: 1 << 20,
            enable_stable_row_ids: false,
            file: FileWriterOptions::default(),
        }
    }
}

/// Checks that a batch matches the dataset schema (names and types).
pub fn check_batch(schema: &arrow_schema::Schema, batch: &RecordBatch) -> Result<()> {
    let got = batch.schema();
    if got.fields().len() != schema.fields().len() {
        return Err(Error::invalid(format!(
            "data has {} columns ({}) but the table has {} ({})",
            got.fields().len(),
            got.fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect::<Vec<_>>()
                .join(", "),
            schema.fields().len(),
            schema
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect::<Vec<_>>()
                .join(", "),
        )));
    }
    for (w, g) in schema.fields().iter().zip(got.fields()) {
        if w.name() != g.name() || !w.data_type().equals_datatype(g.data_type()) {
            return Err(Error::invalid(format!(
                "column '{}' of type {} does not match the table's column '{}' of type {}",
                g.name(),
                g.data_type(),
                w.name(),
                w.data_type()
            )));
        }
    }
    Ok(())
}

fn all_ids(schema: &LanceSchema) -> Vec<i32> {
    fn walk(f: &fathom_file::LanceField, out: &mut Vec<i32>) {
        out.push(f.id);
        f.children.iter().for_each(|c| walk(c, out));
    }
    let mut out = Vec::new();
    schema.fields.iter().for_each(|f| walk(f, &mut out));
    out
}

/// Writes `batches` as new fragments (ids not yet assigned).
pub async fn write_fragments(
    store: &Arc<dyn ObjectStore>,
    root: &Path,
    schema: &LanceSchema,
    batches: &[RecordBatch],
    params: &WriteParams,
) -> Result<Vec<Fragment>> {
    let arrow_schema = schema.to_arrow()?;
    let ids = all_ids(schema);
    let mut out = Vec::new();
    let mut writer: Option<(FileWriter, String)> = None;
    let finish = |w: FileWriter, name: String| async {
        let written = w.finish().await?;
        Ok::<Fragment, Error>(Fragment {
            id: 0,
            files: vec![DataFile {
                path: name,
                fields: ids.clone(),
                column_indices: (0..ids.len() as i32).collect(),
                file_major_version: 2,
                file_minor_version: 0,
                file_size_bytes: written.size_bytes,
                base_id: None,
            }],
            deletion_file: None,
            physical_rows: written.num_rows,
            row_id_meta: None,
            passthrough: FragmentPassthrough::default(),
        })
    };
    for batch in batches {
        check_batch(&arrow_schema, batch)?;
        // Re-label the batch with the table schema (nullability, metadata).
        let batch = RecordBatch::try_new(Arc::new(arrow_schema.clone()), batch.columns().to_vec())
            .map_err(|e| Error::invalid(format!("data does not fit the table schema: {e}")))?;
        let mut offset = 0;
        while offset < batch.num_rows() {
            if writer.is_none() {
                let name = new_data_file_name();
                let w = FileWriter::with_lance_schema(
                    store.clone(),
                    data_file_path(root, &name),
                    schema.clone(),
                    params.file.clone(),
                )?;
                writer = Some((w, name));
            }
            let (w, _) = writer.as_mut().unwrap();
            let room = params.max_rows_per_file.max(1) - w.num_rows() as usize;
            let n = room.min(batch.num_rows() - offset);
            w.write_batch(&batch.slice(offset, n)).await?;
            offset += n;
            if w.num_rows() as usize >= params.max_rows_per_file.max(1) {
                let (w, name) = writer.take().unwrap();
                out.push(finish(w, name).await?);
            }
        }
    }
    if let Some((w, name)) = writer.take() {
        out.push(finish(w, name).await?);
    }
    Ok(out)
}
