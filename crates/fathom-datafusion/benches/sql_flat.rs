//! Flat-path SQL benchmark: filter queries on a 1,000,000-row dataset
//! against DataFusion over the same data in Parquet (page index and filter
//! pushdown on). Ratios measured in one run, medians of alternating runs,
//! local disk, warm cache.
//!
//! Run: `cargo bench -p fathom-datafusion --bench sql_flat --profile bench-fast`
//! (`FATHOM_BENCH_ROWS` changes the row count).

use std::sync::Arc;
use std::time::Instant;

use arrow_array::{
    Float64Array, Int32Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use fathom_datafusion::{FathomTable, TableOptions};
use fathom_table::{Dataset, WriteMode, WriteParams};
use parquet::arrow::ArrowWriter;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("k", DataType::Int32, false),
        Field::new("cat", DataType::Utf8, false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            false,
        ),
        Field::new("x", DataType::Float64, false),
        Field::new("text", DataType::Utf8, false),
    ]))
}

fn batch(s: &SchemaRef, start: usize, n: usize, rng: &mut StdRng) -> RecordBatch {
    RecordBatch::try_new(
        s.clone(),
        vec![
            Arc::new(Int64Array::from_iter_values(
                (start..start + n).map(|i| i as i64),
            )),
            Arc::new(Int32Array::from_iter_values(
                (0..n).map(|_| rng.random_range(0..1000)),
            )),
            Arc::new(StringArray::from_iter_values(
                (0..n).map(|_| format!("cat{:02}", rng.random_range(0..50))),
            )),
            Arc::new(TimestampMicrosecondArray::from_iter_values(
                (start..start + n).map(|i| 1_700_000_000_000_000 + i as i64 * 1_000_000),
            )),
            Arc::new(Float64Array::from_iter_values(
                (0..n).map(|_| rng.random::<f64>()),
            )),
            Arc::new(StringArray::from_iter_values(
                (0..n).map(|i| format!("row {i} of the benchmark table")),
            )),
        ],
    )
    .unwrap()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

async fn run(ctx: &SessionContext, sql: &str) -> (f64, usize) {
    let t = Instant::now();
    let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    (
        t.elapsed().as_secs_f64() * 1e3,
        batches.iter().map(|b| b.num_rows()).sum(),
    )
}

#[tokio::main]
async fn main() {
    let rows: usize = std::env::var("FATHOM_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().unwrap();
    let s = schema();
    let mut rng = StdRng::seed_from_u64(3);
    let batches: Vec<RecordBatch> = (0..rows)
        .step_by(50_000)
        .map(|st| batch(&s, st, 50_000.min(rows - st), &mut rng))
        .collect();

    let uri = dir.path().join("t.lance").to_str().unwrap().to_string();
    let t = Instant::now();
    let ds = Dataset::write(&uri, &batches, WriteMode::Create, WriteParams::default())
        .await
        .unwrap();
    let lance_write = t.elapsed().as_secs_f64() * 1e3;
    let ppath = dir.path().join("t.parquet");
    let t = Instant::now();
    {
        let props = WriterProperties::builder()
            .set_statistics_enabled(EnabledStatistics::Page)
            .build();
        let mut w = ArrowWriter::try_new(
            std::fs::File::create(&ppath).unwrap(),
            s.clone(),
            Some(props),
        )
        .unwrap();
        for b in &batches {
            w.write(b).unwrap();
        }
        w.close().unwrap();
    }
    let parquet_write = t.elapsed().as_secs_f64() * 1e3;
    drop(batches);

    let config = SessionConfig::new()
        .set_bool("datafusion.execution.parquet.pushdown_filters", true)
        .set_bool("datafusion.execution.parquet.reorder_filters", true)
        .set_bool("datafusion.execution.parquet.enable_page_index", true);
    let ctx = SessionContext::new_with_config(config);
    ctx.register_table("t", Arc::new(FathomTable::new(ds, TableOptions::default())))
        .unwrap();
    ctx.register_parquet("p", ppath.to_str().unwrap(), ParquetReadOptions::default())
        .await
        .unwrap();

    let queries = [
        (
            "point lookup (id = ...)",
            "SELECT * FROM {} WHERE id = 123456",
        ),
        (
            "range of 1,000 ids",
            "SELECT * FROM {} WHERE id BETWEEN 500000 AND 500999",
        ),
        (
            "equality on 50-value string",
            "SELECT id, x FROM {} WHERE cat = 'cat07'",
        ),
        (
            "IN on 50-value string",
            "SELECT id, x FROM {} WHERE cat IN ('cat01', 'cat02', 'cat03')",
        ),
        (
            "AND of two columns",
            "SELECT id, text FROM {} WHERE k = 7 AND cat = 'cat03'",
        ),
        (
            "timestamp range",
            "SELECT count(*) FROM {} WHERE ts >= TIMESTAMP '2023-11-14 22:13:20' + INTERVAL '10 hours' AND ts < TIMESTAMP '2023-11-14 22:13:20' + INTERVAL '11 hours'",
        ),
        (
            "full-scan predicate",
            "SELECT count(*) FROM {} WHERE x > 0.5 AND text LIKE '%9 of%'",
        ),
    ];
    let runs = 7;
    println!(
        "flat-path SQL benchmark: {rows} rows, local disk, warm cache, median of {runs} alternating runs"
    );
    println!(
        "{:<32} {:>10} {:>10} {:>8} {:>14}",
        "query", "lance ms", "parquet ms", "rows", "lance/parquet"
    );
    for (label, q) in queries {
        let (lq, pq) = (q.replace("{}", "t"), q.replace("{}", "p"));
        let (_, n1) = run(&ctx, &lq).await;
        let (_, n2) = run(&ctx, &pq).await;
        assert_eq!(n1, n2, "{label}: row counts differ");
        let (mut lt, mut pt) = (vec![], vec![]);
        for _ in 0..runs {
            lt.push(run(&ctx, &lq).await.0);
            pt.push(run(&ctx, &pq).await.0);
        }
        let (l, p) = (median(lt), median(pt));
        println!("{label:<32} {l:>10.2} {p:>10.2} {n1:>8} {:>14.3}", l / p);
    }
    println!(
        "{:<32} {lance_write:>10.0} {parquet_write:>10.0} {:>8} {:>14.3}",
        "write (ms)",
        "",
        lance_write / parquet_write
    );
}
