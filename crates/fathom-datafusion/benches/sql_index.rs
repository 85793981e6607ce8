//! Scalar index benchmark, ratios measured in one run on a 1,000,000-row
//! table (local disk, warm cache, medians of alternating blocks of runs): each query
//! via its index against a full scan of the same data (the version before
//! the indexes existed), against DataFusion over Parquet (page index and
//! filter pushdown on), and, where pylance is installed, against pylance
//! on a copy of the same dataset with the same indexes. Counts of the
//! same filters, and grouped counts, beside pylance's `count_rows(filter)`
//! (for groups, its `to_table` of the group column and a pyarrow
//! `group_by`). Index build times and sizes beside pylance's.
//!
//! Run: `cargo bench -p fathom-datafusion --bench sql_index --profile bench-fast`

mod common;

use std::sync::Arc;
use std::time::Instant;

use common::{run, table, time_pair};
use datafusion::prelude::ParquetReadOptions;
use fathom_datafusion::{FathomTable, TableOptions};
use fathom_index::{IndexKind, create_index};
use fathom_table::{Dataset, WriteMode, WriteParams};

/// (label, SQL with `{}` for the table, pylance filter, pylance columns).
const FIXED: [(&str, &str, &str, &str); 6] = [
    (
        "point lookup (btree)",
        "SELECT * FROM {} WHERE id = 123456",
        "id = 123456",
        "*",
    ),
    (
        "range of 1,000 ids (btree)",
        "SELECT * FROM {} WHERE id BETWEEN 500000 AND 500999",
        "id BETWEEN 500000 AND 500999",
        "*",
    ),
    (
        "equality, 50-value string (bitmap)",
        "SELECT id, x FROM {} WHERE cat = 'cat07'",
        "cat = 'cat07'",
        "id,x",
    ),
    (
        "IN, 50-value string (bitmap)",
        "SELECT id, x FROM {} WHERE cat IN ('cat01', 'cat02', 'cat03')",
        "cat IN ('cat01', 'cat02', 'cat03')",
        "id,x",
    ),
    (
        "equality AND unindexed column",
        "SELECT id, text FROM {} WHERE cat = 'cat03' AND k = 7",
        "cat = 'cat03' AND k = 7",
        "id,text",
    ),
    (
        "timestamp range (zone map)",
        "SELECT id FROM {} WHERE ts >= TIMESTAMP '2023-11-15 08:13:20' AND ts < TIMESTAMP '2023-11-15 09:13:20'",
        "ts >= TIMESTAMP '2023-11-15 08:13:20' AND ts < TIMESTAMP '2023-11-15 09:13:20'",
        "id",
    ),
];

/// Count queries: (label, SQL, pylance filter, with `group_column|` in
/// front for a grouped count).
const COUNTS: [(&str, &str, &str); 10] = [
    (
        "count: point (btree)",
        "SELECT count(*) FROM {} WHERE id = 123456",
        "id = 123456",
    ),
    (
        "count: range of 1,000 ids (btree)",
        "SELECT count(*) FROM {} WHERE id BETWEEN 500000 AND 500999",
        "id BETWEEN 500000 AND 500999",
    ),
    (
        "count: equality (bitmap)",
        "SELECT count(*) FROM {} WHERE cat = 'cat07'",
        "cat = 'cat07'",
    ),
    (
        "count: IN of 5 values (bitmap)",
        "SELECT count(*) FROM {} WHERE cat IN ('cat01', 'cat02', 'cat03', 'cat04', 'cat05')",
        "cat IN ('cat01', 'cat02', 'cat03', 'cat04', 'cat05')",
    ),
    (
        "count: timestamp range (zone map)",
        "SELECT count(*) FROM {} WHERE ts >= TIMESTAMP '2023-11-15 08:13:20' AND ts < TIMESTAMP '2023-11-15 09:13:20'",
        "ts >= TIMESTAMP '2023-11-15 08:13:20' AND ts < TIMESTAMP '2023-11-15 09:13:20'",
    ),
    (
        "count: one week (zone map)",
        "SELECT count(*) FROM {} WHERE ts >= TIMESTAMP '2023-11-14 00:00:00' AND ts < TIMESTAMP '2023-11-21 00:00:00'",
        "ts >= TIMESTAMP '2023-11-14 00:00:00' AND ts < TIMESTAMP '2023-11-21 00:00:00'",
    ),
    (
        "count: equality AND unindexed",
        "SELECT count(*) FROM {} WHERE cat = 'cat03' AND k = 7",
        "cat = 'cat03' AND k = 7",
    ),
    (
        "grouped count, all rows (bitmap)",
        "SELECT cat, count(*) FROM {} GROUP BY cat",
        "cat|",
    ),
    (
        "grouped count, id range (btree+bitmap)",
        "SELECT cat, count(*) FROM {} WHERE id < 300000 GROUP BY cat",
        "cat|id < 300000",
    ),
    (
        "grouped count, one week (zone+bitmap)",
        "SELECT cat, count(*) FROM {} WHERE ts >= TIMESTAMP '2023-11-14 00:00:00' AND ts < TIMESTAMP '2023-11-21 00:00:00' GROUP BY cat",
        "cat|ts >= TIMESTAMP '2023-11-14 00:00:00' AND ts < TIMESTAMP '2023-11-21 00:00:00'",
    ),
];

/// `IN` lists of `n` ids spread over the table (one B-tree search for the
/// whole sorted list, not one per value).
fn in_list(n: usize, rows: usize) -> (String, String, String, String) {
    let ids: Vec<String> = (0..n)
        .map(|i| ((i * 7919 + 13) % rows).to_string())
        .collect();
    let filter = format!("id IN ({})", ids.join(", "));
    (
        format!("IN of {n} ids (btree)"),
        format!("SELECT id, x FROM {{}} WHERE {filter}"),
        filter,
        "id,x".to_string(),
    )
}

#[tokio::main]
async fn main() {
    let rows = common::rows();
    let mut queries: Vec<(String, String, String, String)> = FIXED
        .iter()
        .map(|(a, b, c, d)| (a.to_string(), b.to_string(), c.to_string(), d.to_string()))
        .collect();
    queries.push(in_list(1_000, rows));
    queries.push(in_list(10_000, rows));
    // Counts of the same filters (and grouped counts): pylance answers
    // with count_rows(filter), or for groups its fastest way, to_table of
    // the group column then a pyarrow group_by.
    for (label, sql, filter) in COUNTS {
        let (peer, filter) = match filter.split_once('|') {
            Some((g, f)) => (format!("group:{g}"), f.to_string()),
            None => ("count".to_string(), filter.to_string()),
        };
        queries.push((label.to_string(), sql.to_string(), filter, peer));
    }
    let ids: Vec<String> = (0..1_000)
        .map(|i| ((i * 7919 + 13) % rows).to_string())
        .collect();
    let filter = format!("id IN ({})", ids.join(", "));
    queries.push((
        "count: IN of 1,000 ids (btree)".into(),
        format!("SELECT count(*) FROM {{}} WHERE {filter}"),
        filter,
        "count".into(),
    ));
    let dir = tempfile::tempdir().unwrap();
    let batches = table(rows);
    let uri = dir.path().join("t.lance").to_str().unwrap().to_string();
    let base = Dataset::write(&uri, &batches, WriteMode::Create, WriteParams::default())
        .await
        .unwrap();
    let ppath = dir.path().join("t.parquet");
    common::write_parquet(&ppath, &batches);
    drop(batches);

    // Build the indexes, timing each.
    let mut ds = base.clone();
    let mut builds = vec![];
    for (name, col, kind) in [
        ("id_idx", "id", IndexKind::BTREE),
        ("cat_idx", "cat", IndexKind::BITMAP),
        ("ts_idx", "ts", IndexKind::ZONEMAP),
    ] {
        let t = Instant::now();
        ds = create_index(&ds, name, col, kind).await.unwrap();
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let size: u64 = ds
            .manifest()
            .indices
            .iter()
            .filter(|i| i.name == name)
            .flat_map(|i| i.files.iter())
            .map(|f| f.size_bytes)
            .sum();
        builds.push((format!("{kind} on {col}"), ms, size));
    }

    let ctx = common::session();
    let table = Arc::new(FathomTable::new(ds, TableOptions::default()));
    ctx.register_table("t", table.clone()).unwrap();
    // The baseline is a true full scan: no index, no zone pruning.
    let full = TableOptions {
        zone_pruning: false,
        ..Default::default()
    };
    ctx.register_table("full", Arc::new(FathomTable::pinned(base, full)))
        .unwrap();
    ctx.register_parquet("p", ppath.to_str().unwrap(), ParquetReadOptions::default())
        .await
        .unwrap();

    // Profiling aid: FATHOM_BENCH_COUNT_ROWS="<filter>" runs count_rows
    // 3,000 times and exits.
    if let Ok(filter) = std::env::var("FATHOM_BENCH_COUNT_ROWS") {
        let t = Instant::now();
        for _ in 0..3000 {
            std::hint::black_box(table.count_rows(&ctx, Some(&filter)).await.unwrap());
        }
        println!(
            "count_rows({filter}): {:.3} ms per call",
            t.elapsed().as_secs_f64() / 3.0
        );
        return;
    }
    // Profiling aid: FATHOM_BENCH_LOOP="<sql over t>" runs it 3,000 times
    // end to end and exits (e.g. under `perf record`).
    if let Ok(sql) = std::env::var("FATHOM_BENCH_LOOP") {
        // FATHOM_BENCH_SET="key=value;..." tries session settings.
        for kv in std::env::var("FATHOM_BENCH_SET")
            .unwrap_or_default()
            .split(';')
        {
            if let Some((k, v)) = kv.split_once('=') {
                ctx.sql(&format!("SET {k} = {v}")).await.unwrap();
            }
        }
        let t = Instant::now();
        for _ in 0..3000 {
            run(&ctx, &sql).await;
        }
        println!("{sql}: {:.3} ms per run", t.elapsed().as_secs_f64() / 3.0);
        // Our share of planning: the provider's scan alone.
        let provider = ctx.table_provider("t").await.unwrap();
        let state = ctx.state();
        let filters = vec![datafusion::prelude::col("id").eq(datafusion::prelude::lit(123456i64))];
        let t = Instant::now();
        for _ in 0..3000 {
            std::hint::black_box(
                provider
                    .scan(&state, Some(&vec![]), &filters, None)
                    .await
                    .unwrap(),
            );
        }
        println!(
            "provider scan (id = 123456, no columns): {:.3} ms per call",
            t.elapsed().as_secs_f64() / 3.0
        );
        let t = Instant::now();
        for _ in 0..3000 {
            std::hint::black_box(ctx.sql(&sql).await.unwrap());
        }
        println!(
            "SQL to optimized logical plan: {:.3} ms per call",
            t.elapsed().as_secs_f64() / 3.0
        );
        let df = ctx.sql(&sql).await.unwrap();
        let t = Instant::now();
        for _ in 0..3000 {
            std::hint::black_box(df.clone().create_physical_plan().await.unwrap());
        }
        println!(
            "DataFrame::create_physical_plan (a session-state copy, logical optimization, physical planning): {:.3} ms per call",
            t.elapsed().as_secs_f64() / 3.0
        );
        let state = ctx.state();
        let logical = df.logical_plan().clone();
        let t = Instant::now();
        for _ in 0..3000 {
            std::hint::black_box(state.optimize(&logical).unwrap());
        }
        println!(
            "  of which logical optimization: {:.3} ms per call",
            t.elapsed().as_secs_f64() / 3.0
        );
        let optimized = state.optimize(&logical).unwrap();
        let planner = datafusion::physical_planner::DefaultPhysicalPlanner::default();
        let t = Instant::now();
        for _ in 0..3000 {
            std::hint::black_box(
                datafusion::physical_planner::PhysicalPlanner::create_physical_plan(
                    &planner, &optimized, &state,
                )
                .await
                .unwrap(),
            );
        }
        println!(
            "  of which physical planning and optimization: {:.3} ms per call",
            t.elapsed().as_secs_f64() / 3.0
        );
        // The same without Fathom's rules.
        let plain = datafusion::prelude::SessionContext::new();
        plain.register_table("t", table.clone()).unwrap();
        let pstate = plain.state();
        let optimized = pstate.optimize(&logical).unwrap();
        let t = Instant::now();
        for _ in 0..3000 {
            std::hint::black_box(
                datafusion::physical_planner::PhysicalPlanner::create_physical_plan(
                    &planner, &optimized, &pstate,
                )
                .await
                .unwrap(),
            );
        }
        println!(
            "  the same in a session without Fathom's rules: {:.3} ms per call",
            t.elapsed().as_secs_f64() / 3.0
        );
        return;
    }

    // pylance on a copy, if installed.
    let peer: Vec<(String, String)> = queries
        .iter()
        .map(|(_, _, f, c)| (c.clone(), f.clone()))
        .collect();
    let pylance = common::pylance(&uri, dir.path(), None, &peer);

    let runs = 5;
    println!(
        "scalar index benchmark: {rows} rows, local disk, warm cache, medians of 3 alternating blocks of {runs} runs"
    );
    println!(
        "{:<40} {:>9} {:>9} {:>9} {:>8} {:>11} {:>12} {:>12} {:>10} {:>10} {:>10} {:>10}",
        "query",
        "index ms",
        "scan ms",
        "pq ms",
        "rows",
        "index/scan",
        "index/parq",
        "ours/pylance",
        "exec only",
        "cached ms",
        "cached/py",
        "exec/py"
    );
    let cache = fathom_datafusion::PlanCache::new(64);
    for (i, (label, q, _, _)) in queries.iter().enumerate() {
        let (tq, fq, pq) = (
            q.replace("{}", "t"),
            q.replace("{}", "full"),
            q.replace("{}", "p"),
        );
        let (_, n1) = run(&ctx, &tq).await;
        let (_, n2) = run(&ctx, &fq).await;
        let (_, n3) = run(&ctx, &pq).await;
        assert!(
            n1 == n2 && n2 == n3,
            "{label}: row counts differ ({n1}, {n2}, {n3})"
        );
        if label.contains("count") {
            // Counts must agree, not only their number of rows.
            assert_eq!(
                common::sorted_text(&ctx, &tq).await,
                common::sorted_text(&ctx, &fq).await,
                "{label}"
            );
        }
        if std::env::var("FATHOM_BENCH_EXPLAIN").is_ok() {
            common::print_explain_analyze(&ctx, &tq).await;
        }
        if std::env::var("FATHOM_BENCH_PHASES").is_ok() {
            let (sql, phys, exec) = common::phases(&ctx, &tq, 15).await;
            println!(
                "  phases of {label}: sql {sql:.3} ms, physical plan {phys:.3} ms, execution {exec:.3} ms"
            );
        }
        let (it, ft) = time_pair(&ctx, &tq, &fq, runs).await;
        let (_, pt) = time_pair(&ctx, &tq, &pq, runs).await;
        // Execution alone (plans made once): index path over full scan.
        let (ie, fe) = common::time_pair_exec(&ctx, &tq, &fq, runs).await;
        // Through a plan cache: the query planned once, run again.
        let cached = common::time_cached(&ctx, &cache, &tq, runs).await;
        let py = pylance.as_ref().and_then(|r| r.queries.get(i).copied());
        let ratio = |ours: f64| py.map_or("n/a".to_string(), |py| format!("{:.3}", ours / py));
        let vs_py = ratio(it);
        let (cached_py, exec_py) = (ratio(cached), ratio(ie));
        let mut api_line = None;
        if queries[i].3 == "count" {
            // The SQL-free count (FathomTable::count_rows), pylance's peer.
            let filter = &queries[i].2;
            let want = table.count_rows(&ctx, Some(filter)).await.unwrap();
            assert_eq!(
                common::sorted_text(&ctx, &tq).await,
                common::sorted_text(&ctx, &format!("SELECT {want} AS \"count(*)\"")).await,
                "{label}: count_rows"
            );
            let mut ts = vec![];
            for _ in 0..15 {
                let t = Instant::now();
                std::hint::black_box(table.count_rows(&ctx, Some(filter)).await.unwrap());
                ts.push(t.elapsed().as_secs_f64() * 1e3);
            }
            let ct = common::median(ts);
            let vs_py = pylance
                .as_ref()
                .and_then(|r| r.queries.get(i).copied())
                .map_or("n/a".to_string(), |py| format!("{:.3}", ct / py));
            api_line = Some(format!(
                "  {:<38} {ct:>9.2} {:>52} {vs_py:>12}",
                "(same, FathomTable::count_rows)", ""
            ));
        }
        println!(
            "{label:<40} {it:>9.2} {ft:>9.2} {pt:>9.2} {n1:>8} {:>11.3} {:>12.3} {vs_py:>12} {:>10.3} {cached:>10.3} {cached_py:>10} {exec_py:>10}",
            it / ft,
            it / pt,
            ie / fe
        );
        if let Some(l) = api_line {
            println!("{l}");
        }
    }
    println!(
        "(exec only: index/scan ratio of executing plans made once, SQL parsing and planning left out; \
         cached: end to end through fathom_datafusion::PlanCache, the plan made once and reused; \
         exec/py: executing the plan made once, over pylance's whole call)"
    );
    println!("index builds (ms, bytes):");
    for (i, (what, ms, size)) in builds.iter().enumerate() {
        let py = pylance.as_ref().and_then(|r| r.builds.get(i).copied());
        match py {
            Some((pms, psize)) => println!(
                "  {what:<20} ours {ms:>8.0} ms {size:>10} B   pylance {pms:>8.0} ms {psize:>10} B   build ratio {:.3}",
                ms / pms
            ),
            None => println!("  {what:<20} ours {ms:>8.0} ms {size:>10} B   pylance n/a"),
        }
    }
    if let Some(r) = &pylance {
        println!(
            "pylance {} (its query times in ms: {:?})",
            r.version, r.queries
        );
    }
}
