//! `fathom import SRC DATASET`: Parquet, CSV (with header) or JSON lines,
//! streamed into a dataset with a progress bar.

use std::fs::File;
use std::io::{BufReader, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, SchemaRef};
use fathom_table::{Dataset, WriteMode, WriteParams};
use indicatif::{ProgressBar, ProgressStyle};

use crate::{ImportMode, SourceFormat};

type Batches = Box<dyn Iterator<Item = Result<RecordBatch, ArrowError>> + Send>;

fn open(source: &Path, format: SourceFormat) -> Result<(SchemaRef, Batches, Option<u64>), String> {
    let format = match format {
        SourceFormat::Auto => match source
            .extension()
            .and_then(|e| e.to_str())
            .map(|e| e.to_ascii_lowercase())
            .as_deref()
        {
            Some("parquet") | Some("pq") => SourceFormat::Parquet,
            Some("csv") => SourceFormat::Csv,
            Some("json") | Some("jsonl") | Some("ndjson") => SourceFormat::Json,
            _ => {
                return Err(format!(
                    "cannot tell the format of {}; pass --format parquet|csv|json",
                    source.display()
                ));
            }
        },
        f => f,
    };
    let file = File::open(source).map_err(|e| format!("cannot open {}: {e}", source.display()))?;
    let bad = |e: String| format!("{}: {e}", source.display());
    match format {
        SourceFormat::Parquet => {
            let b = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                .map_err(|e| bad(e.to_string()))?;
            let rows = b.metadata().file_metadata().num_rows() as u64;
            let schema = b.schema().clone();
            let r = b
                .with_batch_size(8192)
                .build()
                .map_err(|e| bad(e.to_string()))?;
            Ok((schema, Box::new(r), Some(rows)))
        }
        SourceFormat::Csv => {
            let mut file = file;
            let (schema, _) = arrow_csv::reader::Format::default()
                .with_header(true)
                .infer_schema(&mut file, Some(10_000))
                .map_err(|e| bad(e.to_string()))?;
            file.seek(SeekFrom::Start(0))
                .map_err(|e| bad(e.to_string()))?;
            let schema = Arc::new(schema);
            let r = arrow_csv::ReaderBuilder::new(schema.clone())
                .with_header(true)
                .with_batch_size(8192)
                .build(file)
                .map_err(|e| bad(e.to_string()))?;
            Ok((schema, Box::new(r), None))
        }
        SourceFormat::Json => {
            let mut reader = BufReader::new(file);
            let (schema, _) =
                arrow_json::reader::infer_json_schema_from_seekable(&mut reader, Some(10_000))
                    .map_err(|e| bad(e.to_string()))?;
            let schema = Arc::new(schema);
            let r = arrow_json::ReaderBuilder::new(schema.clone())
                .with_batch_size(8192)
                .build(reader)
                .map_err(|e| bad(e.to_string()))?;
            Ok((schema, Box::new(r), None))
        }
        SourceFormat::Auto => unreachable!(),
    }
}

pub async fn run(
    source: &Path,
    uri: &str,
    mode: ImportMode,
    format: SourceFormat,
    max_rows_per_file: usize,
) -> Result<(), String> {
    let (schema, batches, total) = open(source, format)?;
    let bar = match total {
        Some(n) => ProgressBar::new(n).with_style(
            ProgressStyle::with_template(
                "{spinner} importing [{bar:40}] {pos}/{len} rows ({per_sec}, eta {eta})",
            )
            .unwrap()
            .progress_chars("=> "),
        ),
        None => ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("{spinner} importing {pos} rows ({per_sec})").unwrap(),
        ),
    };
    let source_name = source.display().to_string();
    let stream = futures::stream::iter(batches.map(move |b| {
        b.map_err(|e| fathom_table::Error::InvalidInput(format!("{source_name}: {e}")))
            .and_then(|b| to_storage(&b).map_err(fathom_table::Error::Arrow))
    }));
    let storage = to_storage_schema(&schema);
    let mode = match mode {
        ImportMode::Create => WriteMode::Create,
        ImportMode::Append => WriteMode::Append,
        ImportMode::Overwrite => WriteMode::Overwrite,
    };
    let params = WriteParams {
        max_rows_per_file,
        ..Default::default()
    };
    let b2 = bar.clone();
    let ds = Dataset::write_stream(uri, storage, stream, mode, params, move |rows| {
        b2.set_position(rows)
    })
    .await
    .map_err(|e| e.to_string())?;
    bar.finish_and_clear();
    println!(
        "imported {} into {uri}: version {}, {} rows in {} fragments",
        source.display(),
        ds.version(),
        ds.count_rows(),
        ds.fragments().len()
    );
    Ok(())
}

fn to_storage_schema(s: &SchemaRef) -> SchemaRef {
    fathom_datafusion::storage_schema(s)
}

fn to_storage(b: &RecordBatch) -> Result<RecordBatch, ArrowError> {
    fathom_datafusion::to_storage(b).map_err(|e| ArrowError::ExternalError(Box::new(e)))
}
