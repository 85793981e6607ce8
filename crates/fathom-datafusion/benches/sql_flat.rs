//! Flat-path SQL benchmark: filter queries on a 1,000,000-row dataset
//! against DataFusion over the same data in Parquet (page index and filter
//! pushdown on). Ratios measured in one run, medians of alternating blocks of runs,
//! local disk, warm cache.
//!
//! Run: `cargo bench -p fathom-datafusion --bench sql_flat --profile bench-fast`
//! (`FATHOM_BENCH_ROWS` changes the row count).

mod common;

use std::sync::Arc;
use std::time::Instant;

use common::{run, table, time_pair};

use datafusion::prelude::ParquetReadOptions;
use fathom_datafusion::{FathomTable, TableOptions};
use fathom_table::{Dataset, WriteMode, WriteParams};

#[tokio::main]
async fn main() {
    let rows = common::rows();
    let dir = tempfile::tempdir().unwrap();
    let batches = table(rows);

    let uri = dir.path().join("t.lance").to_str().unwrap().to_string();
    let t = Instant::now();
    let ds = Dataset::write(&uri, &batches, WriteMode::Create, WriteParams::default())
        .await
        .unwrap();
    let lance_write = t.elapsed().as_secs_f64() * 1e3;
    let ppath = dir.path().join("t.parquet");
    let t = Instant::now();
    common::write_parquet(&ppath, &batches);
    let parquet_write = t.elapsed().as_secs_f64() * 1e3;
    drop(batches);

    let ctx = common::session();
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
    let runs = 5;
    println!(
        "flat-path SQL benchmark: {rows} rows, local disk, warm cache, medians of 3 alternating blocks of {runs} runs"
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
        let (l, p) = time_pair(&ctx, &lq, &pq, runs).await;
        println!("{label:<32} {l:>10.2} {p:>10.2} {n1:>8} {:>14.3}", l / p);
    }
    println!(
        "{:<32} {lance_write:>10.0} {parquet_write:>10.0} {:>8} {:>14.3}",
        "write (ms)",
        "",
        lance_write / parquet_write
    );
}
