//! Writes a small table to a local Lance 2.0 file, then reads it back by
//! scan and by `take`. Usage: `cargo run -p fathom-file --example file_demo [DIR]`.

use std::sync::Arc;

use arrow_array::{Array, Float32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use fathom_file::{FileReader, FileReaderOptions, FileWriter, FileWriterOptions};
use futures::TryStreamExt;
use object_store::local::LocalFileSystem;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "fathom-data".into());
    std::fs::create_dir_all(&dir)?;
    let store = Arc::new(LocalFileSystem::new_with_prefix(&dir)?);
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("score", DataType::Float32, true),
    ]));
    let n = 100_000;
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from_iter_values(0..n)),
            Arc::new(StringArray::from_iter(
                (0..n).map(|i| (i % 7 != 0).then(|| format!("name-{}", i % 100))),
            )),
            Arc::new(Float32Array::from_iter_values(
                (0..n).map(|i| i as f32 / 10.0),
            )),
        ],
    )?;
    let mut w = FileWriter::try_new(
        store.clone(),
        "demo.lance".into(),
        &schema,
        FileWriterOptions::default(),
    )?;
    w.write_batch(&batch).await?;
    let written = w.finish().await?;
    println!(
        "wrote {dir}/demo.lance: {} rows, {} bytes",
        written.num_rows, written.size_bytes
    );

    let r = FileReader::open(
        store,
        "demo.lance".into(),
        Some(written.size_bytes),
        FileReaderOptions::default(),
    )
    .await?;
    let rows: usize = r
        .scan(0..r.num_rows(), None, 8192)?
        .try_collect::<Vec<_>>()
        .await?
        .iter()
        .map(|b| b.num_rows())
        .sum();
    println!("scanned {rows} rows");
    let took = r.take(&[99_999, 7, 42], None).await?;
    println!("{}", arrow_cast_free_print(&took));
    let (requests, bytes) = r.io_stats();
    println!("I/O so far: {requests} requests, {bytes} bytes");
    Ok(())
}

fn arrow_cast_free_print(b: &RecordBatch) -> String {
    let ids = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
    let names = b.column(1).as_any().downcast_ref::<StringArray>().unwrap();
    let scores = b.column(2).as_any().downcast_ref::<Float32Array>().unwrap();
    (0..b.num_rows())
        .map(|i| {
            format!(
                "id={} name={:?} score={}",
                ids.value(i),
                names.is_valid(i).then(|| names.value(i)),
                scores.value(i)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}
