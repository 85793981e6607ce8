//! Updates and what they cost the indexed queries after them: 1,000,000
//! rows (id, k in 0..1000, v, cat) in 10 fragments, B-trees on id and k;
//! `UPDATE t SET k = (k + 1) % 1000 WHERE id % 100 = 7` (1% of the rows,
//! every fragment touched) with each update mode ('rows': moved to a new
//! fragment; 'columns': k rewritten in place, so the k index stops
//! covering the touched fragments; 'overlay': only the changed cells
//! written, the k index keeps covering every fragment and the overlaid
//! rows are re-evaluated), then the index extended, then
//! `OPTIMIZE` (compaction, indexes extended). Each phase times the same
//! queries (warm, median) beside a full scan of the same data (the first
//! version, before any index), and pylance doing the same cycle on a copy
//! where it is installed (its update moves rows; its compaction remaps
//! its indexes). Results are checked equal across modes at every phase.
//!
//! Run: `cargo bench -p fathom-datafusion --bench sql_updates --profile bench-fast`
//! (`FATHOM_BENCH_ROWS`).

mod common;

use std::sync::Arc;
use std::time::Instant;

use arrow_array::{Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use datafusion::prelude::SessionContext;
use fathom_datafusion::sql::run_sql;
use fathom_datafusion::{FathomTable, TableOptions};
use fathom_index::{IndexKind, create_index};
use fathom_table::{Dataset, WriteMode, WriteParams};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn batches(rows: usize) -> Vec<RecordBatch> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Float64, false),
        Field::new("cat", DataType::Utf8, false),
    ]));
    let mut rng = StdRng::seed_from_u64(11);
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
                    Arc::new(Int64Array::from_iter_values(
                        (0..n).map(|_| rng.random_range(0..1000)),
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

/// `data` as a new dataset of 10 fragments at `uri`.
async fn write(uri: &str, data: &[RecordBatch], rows: usize) -> Dataset {
    let params = WriteParams {
        max_rows_per_file: rows.div_ceil(10),
        ..Default::default()
    };
    Dataset::write(uri, data, WriteMode::Create, params)
        .await
        .unwrap()
}

/// B-trees on `id` and `k`.
async fn index_id_and_k(ds: Dataset) -> Dataset {
    let ds = create_index(&ds, "id_idx", "id", IndexKind::BTREE)
        .await
        .unwrap();
    create_index(&ds, "k_idx", "k", IndexKind::BTREE)
        .await
        .unwrap()
}

/// Median of running `sql` at least 3 times, at most 200, for about a
/// second (15 runs of a ~1 ms query left medians 1.3x apart between runs
/// of one process).
async fn timed(ctx: &SessionContext, sql: &str) -> f64 {
    common::run(ctx, sql).await;
    let mut ts = vec![];
    let start = Instant::now();
    while ts.len() < 200 && (ts.len() < 3 || start.elapsed().as_secs_f64() < 1.0) {
        ts.push(common::run(ctx, sql).await.0);
    }
    common::median(ts)
}

/// Profiling aid: `FATHOM_BENCH_LOOP="<mode>@<fresh|updated>|<sql over t>"`
/// runs the query `FATHOM_BENCH_LOOP_N` times (3,000) at that phase of that
/// mode's run (`<mode>` alone means after its update), prints its EXPLAIN
/// ANALYZE and the time by stage, and exits.
fn loop_query(mode: &str, phase: &str) -> Option<String> {
    let v = std::env::var("FATHOM_BENCH_LOOP").ok()?;
    let (at, sql) = v.split_once('|')?;
    let (m, p) = at.split_once('@').unwrap_or((at, "updated"));
    (m == mode && p == phase).then(|| sql.to_string())
}

async fn profile_loop(ctx: &SessionContext, sql: &str) {
    common::print_explain_analyze(ctx, sql).await;
    let n: usize = std::env::var("FATHOM_BENCH_LOOP_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let (a, b, c) = common::phases(ctx, sql, n).await;
    // Warm now: the metrics of one more run.
    common::print_explain_analyze(ctx, sql).await;
    println!(
        "{sql}: medians of {n} runs: {:.3} ms (sql {a:.3}, physical plan {b:.3}, run {c:.3})",
        a + b + c
    );
}

const UPDATE: &str = "UPDATE t SET k = (k + 1) % 1000 WHERE id % 100 = 7";

#[tokio::main]
async fn main() {
    let rows = common::rows();
    // `FATHOM_BENCH_ONLY=wide`: only the wide-table update costs.
    if std::env::var("FATHOM_BENCH_ONLY").is_ok_and(|v| v == "wide") {
        wide_update(rows).await;
        return;
    }
    let point = (123_457 % rows) as i64;
    // (label, SQL over t, pylance columns, pylance filter)
    let queries = [
        (
            "point lookup (id index)",
            format!("SELECT * FROM t WHERE id = {point}"),
            "*",
            format!("id = {point}"),
        ),
        (
            "count k = 17 (k index)",
            "SELECT count(*) FROM t WHERE k = 17".to_string(),
            "count",
            "k = 17".to_string(),
        ),
        (
            "k IN 100..102 (k index)",
            "SELECT id, v FROM t WHERE k BETWEEN 100 AND 102".to_string(),
            "id,v",
            "k BETWEEN 100 AND 102".to_string(),
        ),
    ];
    let data = batches(rows);
    println!(
        "update benchmark: {rows} rows in 10 fragments, B-trees on id and k, local disk, warm, medians (ms)"
    );
    let mut results: Vec<Vec<Vec<String>>> = vec![];
    let mut table: Vec<(String, Vec<f64>)> = vec![];
    let mut scans: Vec<f64> = vec![];
    let mut py_uri = None;
    let modes = ["rows", "columns", "overlay"];
    let mut update_times = vec![];
    let dirs: Vec<_> = modes.iter().map(|_| tempfile::tempdir().unwrap()).collect();
    for (m, mode) in modes.iter().enumerate() {
        let uri = dirs[m].path().join("t.lance").to_str().unwrap().to_string();
        let ds = write(&uri, &data, rows).await;
        if m == 0 {
            // pylance gets a copy of the unindexed dataset.
            let copy = dirs[0].path().join("py.lance");
            let ok = std::process::Command::new("cp")
                .args(["-r", &uri, copy.to_str().unwrap()])
                .status()
                .is_ok_and(|s| s.success());
            py_uri = ok.then_some(copy);
        }
        let ds = index_id_and_k(ds).await;
        let ctx = common::session();
        fathom_datafusion::add_vector_search(&ctx); // Fathom's session settings
        ctx.register_table(
            "t",
            Arc::new(FathomTable::new(ds.clone(), TableOptions::default())),
        )
        .unwrap();
        let q = &queries;
        let phase = |name: String, ctx: SessionContext| async move {
            // The run's writes (a 1M-row table per mode, the updates)
            // flushed first, so the kernel's writeback of them does not
            // run during the timings.
            let _ = std::process::Command::new("sync").status();
            let mut times = vec![];
            let mut outs = vec![];
            for (_, sql, _, _) in q {
                outs.push(common::sorted_text(&ctx, sql).await);
                times.push(timed(&ctx, sql).await);
            }
            (name, times, outs)
        };
        if m == 0 {
            // Full scans: the first version has no index.
            let flat = common::session();
            let v1 = ds.checkout(1).await.unwrap();
            flat.register_table("t", Arc::new(FathomTable::new(v1, TableOptions::default())))
                .unwrap();
            let (_, times, _) = phase("scan".into(), flat).await;
            scans = times;
        }
        let mut record = |name: String, times: Vec<f64>, outs: Vec<Vec<String>>, i: usize| {
            if results.len() <= i {
                results.push(outs);
            } else {
                assert_eq!(results[i], outs, "{name}: results differ between modes");
            }
            table.push((name, times));
        };
        let (n, t, o) = phase(format!("fresh index ({mode} run)"), ctx.clone()).await;
        record(n, t, o, 0);
        if let Some(sql) = loop_query(mode, "fresh") {
            profile_loop(&ctx, &sql).await;
            return;
        }
        run_sql(&ctx, &format!("SET fathom.update_mode = '{mode}'"))
            .await
            .unwrap();
        let t0 = Instant::now();
        let out = run_sql(&ctx, UPDATE).await.unwrap();
        let update_s = t0.elapsed().as_secs_f64();
        update_times.push(update_s);
        let updated = datafusion::arrow::util::pretty::pretty_format_batches(&out[0].1)
            .unwrap()
            .to_string();
        let (n, t, o) = phase(
            format!("after 1% update ({mode}, {update_s:.2} s)"),
            ctx.clone(),
        )
        .await;
        record(n, t, o, 1);
        if let Some(sql) = loop_query(mode, "updated") {
            profile_loop(&ctx, &sql).await;
            return;
        }
        let t0 = Instant::now();
        run_sql(
            &ctx,
            "CREATE INDEX IF NOT EXISTS k_idx ON t USING BTREE (k)",
        )
        .await
        .unwrap();
        let extend_s = t0.elapsed().as_secs_f64();
        let (n, t, o) = phase(format!("  k index extended ({extend_s:.2} s)"), ctx.clone()).await;
        record(n, t, o, 2);
        let t0 = Instant::now();
        run_sql(&ctx, "OPTIMIZE t").await.unwrap();
        let compact_s = t0.elapsed().as_secs_f64();
        let (n, t, o) = phase(format!("  compacted ({compact_s:.2} s)"), ctx.clone()).await;
        record(n, t, o, 3);
        assert!(updated.contains(&(rows / 100).to_string()), "{updated}");
    }
    // pylance: the same cycle on the copy.
    let mut py_rows: Vec<(String, Vec<f64>)> = vec![];
    if let Some(copy) = &py_uri {
        let py = std::env::var("FATHOM_PYTHON").unwrap_or_else(|_| "python3".into());
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/interop/pylance_update_bench.py");
        let mut cmd = std::process::Command::new(&py);
        cmd.arg(script).arg(copy);
        for (_, _, c, f) in &queries {
            cmd.arg(format!("{c}|{f}"));
        }
        if let Ok(out) = cmd.output().map(|o| (o.status.success(), o))
            && out.0
        {
            let text = String::from_utf8_lossy(&out.1.stdout).to_string();
            let mut extra = String::new();
            for line in text.lines() {
                let w: Vec<&str> = line.split_whitespace().collect();
                match w.as_slice() {
                    ["phase", name, ms @ ..] => py_rows.push((
                        name.to_string(),
                        ms.iter().map(|m| m.parse().unwrap_or(f64::NAN)).collect(),
                    )),
                    ["update_s", s, ..] | ["compact_s", s] => {
                        extra.push_str(&format!("{} {s} s; ", w[0]))
                    }
                    ["version", v] => extra.push_str(&format!("pylance {v}; ")),
                    _ => {}
                }
            }
            println!("{extra}");
        }
    }
    print!("{:<44}", "phase");
    for (label, _, _, _) in &queries {
        print!(" {label:>24}");
    }
    println!();
    let row = |name: &str, t: &[f64]| {
        print!("{name:<44}");
        for x in t {
            print!(" {x:>24.3}");
        }
        println!();
    };
    row("full scan (no index)", &scans);
    for (name, t) in &table {
        row(name, t);
    }
    for (name, t) in &py_rows {
        row(&format!("pylance {name}"), t);
    }
    // Ratios: ours after each phase vs fresh, and vs pylance's same phase.
    // Each phase against the fresh index of its own mode's run (fresh
    // latencies vary between runs of one process).
    let mut fresh = &table[0].1;
    println!("ratios (ours / fresh index of the same run, ours / full scan):");
    for (name, t) in &table {
        if name.starts_with("fresh") {
            fresh = t;
            continue;
        }
        print!("{name:<44}");
        for (i, x) in t.iter().enumerate() {
            print!(" {:>11.2} {:>11.3}", x / fresh[i], x / scans[i]);
        }
        println!();
    }
    println!(
        "update time / rows mode's: columns {:.2}, overlay {:.2} (target for overlay: at most 0.2)",
        update_times[1] / update_times[0],
        update_times[2] / update_times[0]
    );
    if py_rows.len() == 3 {
        println!("ours / pylance (fresh; rows mode after update; rows mode compacted):");
        for (ours, theirs) in [
            (&table[0], &py_rows[0]),
            (&table[1], &py_rows[1]),
            (&table[3], &py_rows[2]),
        ] {
            print!("{:<44}", ours.0);
            for (a, b) in ours.1.iter().zip(&theirs.1) {
                print!(" {:>24.3}", a / b);
            }
            println!();
        }
    }
    compaction_strategies(rows, &data, &queries).await;
    costly_index_compaction(rows / 5).await;
    wide_update(rows).await;
}

/// The wide tables' data: `rows` rows of `id`, `k` in 0..1000 (when
/// `with_k`), a `dim`-d float32 `emb` near one of 64 random centres and a
/// 12-word `body` from a skewed 2,000-word vocabulary, in batches of 50,000.
/// Returns the batches and the centres (to draw queries near the data).
fn embedded_text(
    rows: usize,
    dim: usize,
    with_k: bool,
    seed: u64,
) -> (Vec<RecordBatch>, Vec<Vec<f32>>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let centres: Vec<Vec<f32>> = (0..64)
        .map(|_| (0..dim).map(|_| rng.random_range(-1.0f32..1.0)).collect())
        .collect();
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    let mut fields = vec![Field::new("id", DataType::Int64, false)];
    if with_k {
        fields.push(Field::new("k", DataType::Int64, false));
    }
    fields.push(Field::new(
        "emb",
        DataType::FixedSizeList(item.clone(), dim as i32),
        false,
    ));
    fields.push(Field::new("body", DataType::Utf8, false));
    let schema = Arc::new(Schema::new(fields));
    let mut data = vec![];
    for start in (0..rows).step_by(50_000) {
        let n = 50_000.min(rows - start);
        let mut vals = Vec::with_capacity(n * dim);
        let mut bodies = Vec::with_capacity(n);
        for _ in 0..n {
            let c = &centres[rng.random_range(0..64)];
            vals.extend(c.iter().map(|x| x + rng.random_range(-0.2f32..0.2)));
            let words: Vec<String> = (0..12)
                .map(|_| format!("w{}", (rng.random::<f64>().powi(3) * 2000.0) as usize))
                .collect();
            bodies.push(words.join(" "));
        }
        let mut columns: Vec<arrow_array::ArrayRef> = vec![Arc::new(Int64Array::from_iter_values(
            start as i64..(start + n) as i64,
        ))];
        if with_k {
            columns.push(Arc::new(Int64Array::from_iter_values(
                (0..n).map(|_| rng.random_range(0..1000)),
            )));
        }
        columns.push(Arc::new(
            arrow_array::FixedSizeListArray::try_new(
                item.clone(),
                dim as i32,
                Arc::new(arrow_array::Float32Array::from(vals)),
                None,
            )
            .unwrap(),
        ));
        columns.push(Arc::new(StringArray::from(bodies)));
        data.push(RecordBatch::try_new(schema.clone(), columns).unwrap());
    }
    (data, centres)
}

/// What the same 1% update of one narrow column costs by mode when the
/// rows are wide: `rows` rows (id, k, a 128-d float32 embedding, a
/// 12-word text; ~650 bytes a row) in 10 fragments, a B-tree on k; `UPDATE`
/// of `k` where `id % 100 = 7` on fresh copies, three times per mode,
/// interleaved. Moving the rows rewrites their embeddings and text;
/// rewriting the column rewrites all of `k`; an overlay writes the changed
/// cells. The results are checked equal across modes.
async fn wide_update(rows: usize) {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base.lance").to_str().unwrap().to_string();
    {
        let (data, _) = embedded_text(rows, 128, true, 17);
        let ds = write(&base, &data, rows).await;
        create_index(&ds, "k_idx", "k", IndexKind::BTREE)
            .await
            .unwrap();
    }
    let modes = ["rows", "columns", "overlay"];
    let mut seconds: Vec<Vec<f64>> = vec![vec![]; modes.len()];
    let mut first: Option<Vec<String>> = None;
    for trial in 0..3 {
        for (m, mode) in modes.iter().enumerate() {
            let uri = dir.path().join(format!("{mode}{trial}.lance"));
            let copied = std::process::Command::new("cp")
                .args(["-r", &base, uri.to_str().unwrap()])
                .status()
                .unwrap();
            assert!(copied.success());
            // The copy flushed first, so its writeback does not run
            // during the timing (as before each query phase).
            let _ = std::process::Command::new("sync").status();
            let ds = Dataset::open(uri.to_str().unwrap()).await.unwrap();
            let ctx = common::session();
            fathom_datafusion::add_vector_search(&ctx);
            ctx.register_table("t", Arc::new(FathomTable::new(ds, TableOptions::default())))
                .unwrap();
            run_sql(&ctx, &format!("SET fathom.update_mode = '{mode}'"))
                .await
                .unwrap();
            let t0 = Instant::now();
            // `FATHOM_BENCH_EXPLAIN`: the last trial's statement shows
            // where its time went (finding the rows, writing them).
            if trial == 2 && std::env::var("FATHOM_BENCH_EXPLAIN").is_ok() {
                common::print_explain_analyze(&ctx, UPDATE).await;
            } else {
                run_sql(&ctx, UPDATE).await.unwrap();
            }
            seconds[m].push(t0.elapsed().as_secs_f64());
            let out = common::sorted_text(
                &ctx,
                "SELECT k, count(*) FROM t WHERE id % 100 = 7 AND k < 5 GROUP BY k",
            )
            .await;
            match &first {
                None => first = Some(out),
                Some(f) => assert_eq!(f, &out, "{mode}: rows differ between update modes"),
            }
            std::fs::remove_dir_all(&uri).unwrap();
        }
    }
    let med: Vec<f64> = seconds.into_iter().map(common::median).collect();
    println!(
        "UPDATE of 1% of k on a wide table ({rows} rows, k + 128-d embedding + 12-word text), \
         median of 3 (ms): rows {:.1}, columns {:.1}, overlay {:.1}; \
         overlay / rows {:.2} (target: at most 0.2), columns / rows {:.2}",
        med[0] * 1e3,
        med[1] * 1e3,
        med[2] * 1e3,
        med[2] / med[0],
        med[1] / med[0]
    );
}

/// Compaction where the indexes are costly to build: `rows` rows (id, a
/// 64-d vector near one of 64 centres, a 12-word text), an IVF_PQ index
/// (64 partitions, 8 sub-vectors) and an inverted index, 1% deleted, 10
/// fragments -> 1; segments remapped (codes and postings kept) against
/// re-indexed (encoding and tokenizing the new fragment); a vector and a
/// full-text top 10 after each, checked equal.
async fn costly_index_compaction(rows: usize) {
    let (data, centres) = embedded_text(rows, 64, false, 5);
    let q: Vec<String> = centres[7].iter().map(|x| format!("{x:?}")).collect();
    let queries = [
        format!(
            "SELECT id FROM t ORDER BY l2_distance(emb, [{}]) LIMIT 10",
            q.join(", ")
        ),
        "SELECT id FROM fts('t', 'body', 'w3 w40') ORDER BY _score DESC, id LIMIT 10".to_string(),
    ];
    println!(
        "compaction with costly indexes: {rows} rows (64-d IVF_PQ, inverted on 12-word text), 1% deleted, 10 fragments -> 1 (s; query ms):"
    );
    let mut seconds = vec![];
    let mut first: Option<Vec<Vec<String>>> = None;
    for (label, with) in [
        ("index rewrite (remap_indexes)", "remap_indexes = true"),
        ("re-index the new fragment (reindex)", "reindex = true"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let uri = dir.path().join("t.lance").to_str().unwrap().to_string();
        write(&uri, &data, rows).await;
        let ctx = fathom_datafusion::new_session(None).unwrap();
        fathom_datafusion::register_dataset(&ctx, "t", &uri, TableOptions::default())
            .await
            .unwrap();
        for sql in [
            "CREATE INDEX emb_idx ON t USING IVF_PQ (emb) WITH (num_partitions = 64, num_sub_vectors = 8)",
            "CREATE INDEX body_idx ON t USING INVERTED (body)",
            "DELETE FROM t WHERE id % 100 = 7",
        ] {
            run_sql(&ctx, sql).await.unwrap();
        }
        let t0 = Instant::now();
        run_sql(&ctx, &format!("OPTIMIZE t WITH ({with})"))
            .await
            .unwrap();
        let s = t0.elapsed().as_secs_f64();
        seconds.push(s);
        let mut outs = vec![];
        let mut times = vec![];
        for sql in &queries {
            outs.push(common::sorted_text(&ctx, sql).await);
            times.push(timed(&ctx, sql).await);
        }
        match &first {
            None => first = Some(outs),
            Some(f) => assert_eq!(f, &outs, "{label}: results differ between strategies"),
        }
        println!(
            "{:<44} {:>8.2} s   vector top 10 {:>7.3}   full-text top 10 {:>7.3}",
            label, s, times[0], times[1]
        );
    }
    println!(
        "compaction time, index rewrite / re-index: {:.2}",
        seconds[0] / seconds[1]
    );
}

/// Compaction after deleting 1% of the rows, with each index strategy, on
/// the same data: the segments rewritten with the rows' new addresses
/// (`remap_indexes`), re-indexed over the new fragment from the table,
/// kept through a fragment reuse index (Lance's `defer_index_remap`), or
/// left (the new fragment scanned flat); compaction time and the queries
/// after it.
async fn compaction_strategies(
    rows: usize,
    data: &[RecordBatch],
    queries: &[(&str, String, &str, String)],
) {
    let strategies = [
        ("index rewrite (remap_indexes)", "remap_indexes = true"),
        ("re-index the new fragment (reindex)", "reindex = true"),
        (
            "fragment reuse index (deferred remap)",
            "reindex = false, defer_index_remap = true",
        ),
        ("leave indexes (reindex = false)", "reindex = false"),
    ];
    println!(
        "compaction after DELETE of 1% (id % 100 = 7), {rows} rows in 10 fragments -> 1, per index strategy (ms):"
    );
    let mut seconds = vec![];
    let mut first: Option<Vec<Vec<String>>> = None;
    for (label, with) in strategies {
        let dir = tempfile::tempdir().unwrap();
        let uri = dir.path().join("t.lance").to_str().unwrap().to_string();
        let ds = write(&uri, data, rows).await;
        let ds = index_id_and_k(ds).await;
        let ctx = common::session();
        fathom_datafusion::add_vector_search(&ctx);
        ctx.register_table("t", Arc::new(FathomTable::new(ds, TableOptions::default())))
            .unwrap();
        run_sql(&ctx, "DELETE FROM t WHERE id % 100 = 7")
            .await
            .unwrap();
        let t0 = Instant::now();
        run_sql(&ctx, &format!("OPTIMIZE t WITH ({with})"))
            .await
            .unwrap();
        let s = t0.elapsed().as_secs_f64();
        seconds.push(s);
        let mut outs = vec![];
        let mut times = vec![];
        for (_, sql, _, _) in queries {
            outs.push(common::sorted_text(&ctx, sql).await);
            times.push(timed(&ctx, sql).await);
        }
        match &first {
            None => first = Some(outs),
            Some(f) => assert_eq!(f, &outs, "{label}: results differ between strategies"),
        }
        print!("{:<44}", format!("{label} ({s:.2} s)"));
        for x in times {
            print!(" {x:>24.3}");
        }
        println!();
    }
    println!(
        "compaction time, reuse index / index rewrite: {:.2} (target: at most 0.5); \
         reuse index / re-index: {:.2}; index rewrite / re-index: {:.2}",
        seconds[2] / seconds[0],
        seconds[2] / seconds[1],
        seconds[0] / seconds[1]
    );
}
