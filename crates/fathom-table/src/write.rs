//! Writing new fragments: batches are split into data files of at most
//! `max_rows_per_file` rows (one fragment each), written with the
//! dataset's field ids.

use fathom_file::FileVersion;
use std::sync::Arc;

use arrow_array::RecordBatch;
use fathom_file::{FileWriter, FileWriterOptions, LanceSchema};
use object_store::ObjectStore;
use object_store::path::Path;

use crate::error::{Error, Result};
use crate::format::{DataFile, Fragment, FragmentPassthrough};
use crate::naming::{data_file_path, new_data_file_name};

/// Rows per zone of the statistics written with each data file.
pub const ZONE_ROWS: u64 = 8192;

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
            file: FileWriterOptions {
                zone_stats_rows: Some(ZONE_ROWS),
                ..Default::default()
            },
        }
    }
}

/// `batch` in the table's form: columns matched by name, each cast to the
/// table's type where it differs (child field names such as pyarrow's
/// `element`, nullability flags and metadata, or a wider or narrower type
/// such as an Int64 CSV column appended to an Int32 table; a value that
/// does not fit is an error, never a silent NULL), and NULLs refused in
/// NOT NULL columns. Every error names the column.
pub fn conform_batch(schema: &arrow_schema::SchemaRef, batch: &RecordBatch) -> Result<RecordBatch> {
    let got = batch.schema();
    let names = |s: &arrow_schema::Schema| {
        s.fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if got.fields().len() != schema.fields().len() {
        return Err(Error::invalid(format!(
            "data has {} columns ({}) but the table has {} ({})",
            got.fields().len(),
            names(&got),
            schema.fields().len(),
            names(schema),
        )));
    }
    let opts = arrow_cast::CastOptions {
        safe: false,
        ..Default::default()
    };
    let mut columns = Vec::with_capacity(schema.fields().len());
    for (i, want) in schema.fields().iter().enumerate() {
        // By name; by position when the names differ only in case or the
        // data's names are positional (column1, ... from VALUES).
        let j = got.index_of(want.name()).unwrap_or(i);
        let col = batch.column(j);
        let col = if col.data_type() == want.data_type() {
            col.clone()
        } else {
            arrow_cast::cast_with_options(col, want.data_type(), &opts).map_err(|e| {
                Error::invalid(format!(
                    "column '{}': cannot store {} as the table's {}: {e}",
                    want.name(),
                    col.data_type(),
                    want.data_type()
                ))
            })?
        };
        if !want.is_nullable() && col.logical_null_count() > 0 {
            return Err(Error::invalid(format!(
                "column '{}' is NOT NULL but {} of the rows written have NULL in it",
                want.name(),
                col.logical_null_count()
            )));
        }
        columns.push(col);
    }
    RecordBatch::try_new_with_options(
        schema.clone(),
        columns,
        &arrow_array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )
    .map_err(|e| Error::invalid(format!("data does not fit the table schema: {e}")))
}

/// Field ids a data file lists: every field for 2.0; for 2.1+ only the
/// fields that have columns (leaves and packed structs, as Lance lists
/// them).
fn file_ids(schema: &LanceSchema, version: FileVersion) -> Vec<i32> {
    if version == FileVersion::V2_0 {
        return all_ids(schema);
    }
    fn walk(f: &fathom_file::LanceField, out: &mut Vec<i32>) {
        if f.is_packed_struct() {
            // One column for the whole struct, listed under its own id.
            out.push(f.id);
            return;
        }
        let parent = f.logical_type == "struct"
            || f.logical_type.starts_with("list")
            || f.logical_type.starts_with("large_list");
        if !parent {
            out.push(f.id);
        }
        f.children.iter().for_each(|c| walk(c, out));
    }
    let mut out = Vec::new();
    schema.fields.iter().for_each(|f| walk(f, &mut out));
    out
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

/// Writes batches into new fragments as they arrive, with bounded memory.
pub struct FragmentWriter {
    store: Arc<dyn ObjectStore>,
    root: Path,
    schema: LanceSchema,
    arrow_schema: Arc<arrow_schema::Schema>,
    ids: Vec<i32>,
    params: WriteParams,
    current: Option<(FileWriter, String)>,
    done: Vec<Fragment>,
    rows: u64,
}

impl FragmentWriter {
    pub fn new(
        store: Arc<dyn ObjectStore>,
        root: Path,
        schema: LanceSchema,
        params: WriteParams,
    ) -> Result<Self> {
        let arrow_schema = Arc::new(schema.to_arrow()?);
        Ok(FragmentWriter {
            ids: file_ids(&schema, params.file.version),
            store,
            root,
            schema,
            arrow_schema,
            params,
            current: None,
            done: vec![],
            rows: 0,
        })
    }

    /// Rows written so far.
    pub fn rows_written(&self) -> u64 {
        self.rows
    }

    async fn close_current(&mut self) -> Result<()> {
        if let Some((w, name)) = self.current.take() {
            let written = w.finish().await?;
            self.done.push(Fragment {
                id: 0,
                files: vec![DataFile {
                    path: name,
                    fields: self.ids.clone(),
                    column_indices: (0..self.ids.len() as i32).collect(),
                    file_major_version: self.params.file.version.numbers().0,
                    file_minor_version: self.params.file.version.numbers().1,
                    file_size_bytes: written.size_bytes,
                    base_id: None,
                }],
                deletion_file: None,
                physical_rows: written.num_rows,
                row_id_meta: None,
                passthrough: FragmentPassthrough::default(),
            });
        }
        Ok(())
    }

    /// Appends a batch (checked against the table schema).
    pub async fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let batch = conform_batch(&self.arrow_schema, batch)?;
        let max = self.params.max_rows_per_file.max(1);
        let mut offset = 0;
        while offset < batch.num_rows() {
            if self.current.is_none() {
                let name = new_data_file_name();
                let w = FileWriter::with_lance_schema(
                    self.store.clone(),
                    data_file_path(&self.root, &name),
                    self.schema.clone(),
                    self.params.file.clone(),
                )?;
                self.current = Some((w, name));
            }
            let (w, _) = self.current.as_mut().unwrap();
            let n = (max - w.num_rows() as usize).min(batch.num_rows() - offset);
            w.write_batch(&batch.slice(offset, n)).await?;
            offset += n;
            self.rows += n as u64;
            if w.num_rows() as usize >= max {
                self.close_current().await?;
            }
        }
        Ok(())
    }

    /// Finishes the last file; returns the new fragments (ids not yet assigned).
    pub async fn finish(mut self) -> Result<Vec<Fragment>> {
        self.close_current().await?;
        Ok(self.done)
    }
}

/// Writes `batches` as new fragments (ids not yet assigned).
pub async fn write_fragments(
    store: &Arc<dyn ObjectStore>,
    root: &Path,
    schema: &LanceSchema,
    batches: &[RecordBatch],
    params: &WriteParams,
) -> Result<Vec<Fragment>> {
    let mut w = FragmentWriter::new(store.clone(), root.clone(), schema.clone(), params.clone())?;
    for b in batches {
        w.write(b).await?;
    }
    w.finish().await
}

/// How `Dataset::write` treats an existing dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Fail if it exists.
    Create,
    /// Add rows (creating the dataset if needed).
    Append,
    /// Replace schema and rows (creating the dataset if needed).
    Overwrite,
}
