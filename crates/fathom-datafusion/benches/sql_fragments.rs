//! Cost against the number of fragments: the same 1,000,000 rows (id, a
//! random float, a 50-value string) written as 1, 1,000, 10,000 and
//! 100,000 fragments, a B-tree on `id`, each query timed end to end
//! (warm, median), beside pylance on a copy of the same dataset with its
//! own B-tree where it is installed. Also printed: opening the dataset,
//! and planning alone (SQL to a physical plan, no execution).
//!
//! Run: `cargo bench -p fathom-datafusion --bench sql_fragments --profile bench-fast`
//! (`FATHOM_BENCH_ROWS`, `FATHOM_BENCH_FRAGMENTS=1,1000,10000,100000`).

mod common;

use std::sync::Arc;
use std::time::Instant;

use arrow_array::{Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use datafusion::prelude::SessionContext;
use fathom_datafusion::{FathomTable, TableOptions};
use fathom_index::{IndexKind, create_index};
use fathom_table::{Dataset, WriteMode, WriteParams};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn batches(rows: usize) -> Vec<RecordBatch> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("v", DataType::Float64, false),
        Field::new("cat", DataType::Utf8, false),
    ]));
    let mut rng = StdRng::seed_from_u64(7);
    (0..rows)
        .step_by(100_000)
        .map(|start| {
            let n = 100_000.min(rows - start);
            RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Int64Array::from_iter_values(
                        (start..start + n).map(|i| i as i64),
                    )),
                    Arc::new(Float64Array::from_iter_values(
                        (0..n).map(|_| rng.random::<f64>()),
                    )),
                    Arc::new(StringArray::from_iter_values(
                        (0..n).map(|_| format!("cat{:02}", rng.random_range(0..50))),
                    )),
                ],
            )
            .unwrap()
        })
        .collect()
}

/// Median of running `f` at least 3 times, at most 25, for about a second.
async fn timed<F, Fut>(mut f: F) -> f64
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    f().await;
    let mut ts = vec![];
    let start = Instant::now();
    while ts.len() < 25 && (ts.len() < 3 || start.elapsed().as_secs_f64() < 1.0) {
        let t = Instant::now();
        f().await;
        ts.push(t.elapsed().as_secs_f64() * 1e3);
    }
    common::median(ts)
}

#[tokio::main]
async fn main() {
    let rows = common::rows();
    let counts: Vec<usize> = std::env::var("FATHOM_BENCH_FRAGMENTS")
        .unwrap_or_else(|_| "1,1000,10000,100000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .filter(|&n| n >= 1 && n <= rows)
        .collect();
    let point = 123_456 % rows;
    let (lo, hi) = (5_000 % rows, (5_000 % rows + 1_000).min(rows - 1));
    // (label, SQL over t, pylance columns, pylance filter)
    let queries = [
        (
            "point lookup (btree)".to_string(),
            format!("SELECT * FROM t WHERE id = {point}"),
            "*",
            format!("id = {point}"),
        ),
        (
            "range of 1,001 ids (btree)".to_string(),
            format!("SELECT * FROM t WHERE id BETWEEN {lo} AND {hi}"),
            "*",
            format!("id BETWEEN {lo} AND {hi}"),
        ),
        (
            "count, no index (flat)".to_string(),
            "SELECT count(*) FROM t WHERE v > 0.999".to_string(),
            "count",
            "v > 0.999".to_string(),
        ),
    ];
    let data = batches(rows);
    println!("fragment-count benchmark: {rows} rows, B-tree on id, local disk, warm, medians (ms)");
    println!(
        "{:>9} {:<28} {:>10} {:>10} {:>10} {:>11} {:>13}",
        "fragments", "query", "ours", "plan only", "pylance", "ours/pylnc", "ours/1-frag"
    );
    let mut first: Vec<(f64, Vec<String>)> = vec![];
    for &n in &counts {
        let dir = tempfile::tempdir().unwrap();
        let uri = dir.path().join("t.lance").to_str().unwrap().to_string();
        let t = Instant::now();
        let params = WriteParams {
            max_rows_per_file: rows.div_ceil(n),
            ..Default::default()
        };
        let ds = Dataset::write(&uri, &data, WriteMode::Create, params)
            .await
            .unwrap();
        let write_s = t.elapsed().as_secs_f64();
        assert_eq!(ds.fragments().len(), n);
        let t = Instant::now();
        create_index(&ds, "id_idx", "id", IndexKind::BTREE)
            .await
            .unwrap();
        let index_s = t.elapsed().as_secs_f64();
        let open = timed(|| {
            let uri = uri.clone();
            async move {
                std::hint::black_box(Dataset::open(&uri).await.unwrap().count_rows());
            }
        })
        .await;
        // Profiling aid: FATHOM_BENCH_LOOP="<sql over t>" runs it
        // FATHOM_BENCH_LOOP_RUNS times (100) at each fragment count
        // (e.g. under `perf record`).
        if let Ok(sql) = std::env::var("FATHOM_BENCH_LOOP") {
            let ctx = common::session();
            let ds = Dataset::open(&uri).await.unwrap();
            ctx.register_table("t", Arc::new(FathomTable::new(ds, TableOptions::default())))
                .unwrap();
            let runs: usize = std::env::var("FATHOM_BENCH_LOOP_RUNS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(100);
            let t = Instant::now();
            for _ in 0..runs {
                common::run(&ctx, &sql).await;
            }
            println!(
                "{n} fragments, {sql}: {:.3} ms per run",
                t.elapsed().as_secs_f64() * 1e3 / runs as f64
            );
            let (a, b, c) = common::phases(&ctx, &sql, 50).await;
            println!("  phases: sql {a:.3} ms, physical plan {b:.3} ms, execution {c:.3} ms");
            let provider = ctx.table_provider("t").await.unwrap();
            let state = ctx.state();
            let filters =
                vec![datafusion::prelude::col("id").eq(datafusion::prelude::lit(123456i64))];
            let opens: usize = std::env::var("FATHOM_BENCH_OPENS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(3);
            let t = Instant::now();
            for _ in 0..opens {
                std::hint::black_box(Dataset::open(&uri).await.unwrap());
            }
            println!(
                "  open: {:.3} ms",
                t.elapsed().as_secs_f64() * 1e3 / opens as f64
            );
            let loops = std::env::var("FATHOM_BENCH_SCANS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(100);
            let t = Instant::now();
            for _ in 0..loops {
                std::hint::black_box(provider.scan(&state, None, &filters, None).await.unwrap());
            }
            println!(
                "  provider scan (id = 123456): {:.3} ms",
                t.elapsed().as_secs_f64() * 1e3 / loops as f64
            );
            continue;
        }
        let ds = Dataset::open(&uri).await.unwrap();
        let ctx: SessionContext = common::session();
        ctx.register_table("t", Arc::new(FathomTable::new(ds, TableOptions::default())))
            .unwrap();
        let mut ours = vec![];
        for (i, (label, sql, _, _)) in queries.iter().enumerate() {
            let rows_out = common::sorted_text(&ctx, sql).await;
            let t = timed(|| async {
                let b = ctx.sql(sql).await.unwrap().collect().await.unwrap();
                std::hint::black_box(b);
            })
            .await;
            let plan = timed(|| async {
                let p = ctx.sql(sql).await.unwrap().create_physical_plan().await;
                std::hint::black_box(p.unwrap());
            })
            .await;
            if first.len() <= i {
                first.push((t, rows_out));
            } else {
                assert_eq!(
                    first[i].1, rows_out,
                    "{label}: results differ at {n} fragments"
                );
            }
            ours.push((t, plan));
        }
        // pylance after ours (its run leaves the machine busy for a while).
        let peer: Vec<(String, String)> = queries
            .iter()
            .map(|(_, _, c, f)| (c.to_string(), f.clone()))
            .collect();
        let py = common::pylance(&uri, dir.path(), Some("id:BTREE"), &peer);
        let py_open = py.as_ref().and_then(|r| r.open);
        println!(
            "{n:>9} {:<28} {open:>10.2} {:>10} {:>10} {:>11} {:>13}",
            "open dataset",
            "",
            py_open.map_or("n/a".into(), |p| format!("{p:.2}")),
            py_open.map_or("n/a".into(), |p| format!("{:.3}", open / p)),
            format!("(write {write_s:.1} s, index {index_s:.1} s)"),
        );
        for (i, (label, _, _, _)) in queries.iter().enumerate() {
            let (t, plan) = ours[i];
            let pyq = py.as_ref().and_then(|r| r.queries.get(i).copied());
            println!(
                "{n:>9} {label:<28} {t:>10.2} {plan:>10.3} {:>10} {:>11} {:>13.2}",
                pyq.map_or("n/a".into(), |p| format!("{p:.2}")),
                pyq.map_or("n/a".into(), |p| format!("{:.3}", t / p)),
                t / first[i].0,
            );
        }
        if n > 1 {
            compaction_rows(n, &uri, dir.path(), &ctx, &queries[0].1).await;
        }
        if std::env::var("FATHOM_BENCH_AGAIN").is_ok() {
            let t = timed(|| async {
                let b = ctx
                    .sql(&queries[0].1)
                    .await
                    .unwrap()
                    .collect()
                    .await
                    .unwrap();
                std::hint::black_box(b);
            })
            .await;
            println!("  point lookup again after pylance: {t:.2} ms");
        }
        if std::env::var("FATHOM_BENCH_EXPLAIN").is_ok() {
            for (_, sql, _, _) in &queries {
                common::print_explain_analyze(&ctx, sql).await;
            }
        }
    }
}

/// Deletes 5% of the rows and compacts (Lance's defaults, the B-tree
/// extended over the new fragment), beside pylance compacting a copy with
/// the same deletes (its B-tree remapped); then the point lookup again.
async fn compaction_rows(
    n: usize,
    uri: &str,
    scratch: &std::path::Path,
    ctx: &SessionContext,
    lookup: &str,
) {
    let filter = "id % 20 = 0";
    let copy = scratch.join("py_compact.lance");
    let copied = std::process::Command::new("cp")
        .args(["-r", uri, copy.to_str().unwrap()])
        .status()
        .is_ok_and(|s| s.success());
    let ds = Dataset::open(uri).await.unwrap();
    let ds = ds
        .delete_where(&["id"], |b| {
            let ids = b
                .column(0)
                .as_any()
                .downcast_ref::<arrow_array::Int64Array>()
                .unwrap();
            Ok(ids.iter().map(|v| v.map(|v| v % 20 == 0)).collect())
        })
        .await
        .unwrap();
    let t = Instant::now();
    let (ds, report) = fathom_index::compact(&ds, &Default::default(), true, None)
        .await
        .unwrap();
    let ours = t.elapsed().as_secs_f64();
    assert_eq!(report.reindexed, vec!["id_idx".to_string()]);
    let py = std::env::var("FATHOM_PYTHON").unwrap_or_else(|_| "python3".into());
    let theirs = if copied {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/interop/pylance_compact_bench.py");
        std::process::Command::new(&py)
            .arg(script)
            .arg(&copy)
            .arg(filter)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .find_map(|l| l.strip_prefix("compact_s ")?.trim().parse::<f64>().ok())
            })
    } else {
        None
    };
    let _ = std::fs::remove_dir_all(&copy);
    println!(
        "{n:>9} {:<28} {:>10.2} {:>10} {:>10} {:>11}   ({} fragments -> {}, seconds)",
        "compact (5% deleted, B-tree)",
        ours,
        "",
        theirs.map_or("n/a".into(), |p| format!("{p:.2}")),
        theirs.map_or("n/a".into(), |p| format!("{:.3}", ours / p)),
        report.metrics.fragments_removed,
        ds.fragments().len(),
    );
    ctx.register_table("c", Arc::new(FathomTable::new(ds, TableOptions::default())))
        .unwrap();
    let sql = lookup.replace(" FROM t ", " FROM c ");
    let t = timed(|| async {
        let b = ctx.sql(&sql).await.unwrap().collect().await.unwrap();
        std::hint::black_box(b);
    })
    .await;
    println!("{n:>9} {:<28} {t:>10.2}", "point lookup, compacted");
    ctx.deregister_table("c").unwrap();
}
