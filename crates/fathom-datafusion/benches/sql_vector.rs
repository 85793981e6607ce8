//! Vector search benchmark, measured in one run on 1,000,000 rows
//! (`FATHOM_BENCH_ROWS`) of 128-d float32 vectors in 256 low-rank
//! clusters, with a 20-value `cat` column (a prefilter on one value keeps
//! ~5 % of rows): for IVF_PQ (256 partitions, 16 sub-vectors; refine 1
//! and 10), IVF_FLAT, IVF_SQ and IVF_HNSW_SQ (256 partitions), and a prefiltered
//! IVF_PQ query, recall@10 against brute force and median latency, ours
//! through SQL beside pylance 14's on a copy of the same dataset with the
//! same parameters (where pylance is installed), index build times beside
//! pylance's, and brute force (no index) both ways.
//!
//! Run: `cargo bench -p fathom-datafusion --bench sql_vector --profile bench-fast`

mod common;

use std::sync::Arc;
use std::time::Instant;

use arrow_array::{FixedSizeListArray, Float32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use common::{median, rows};
use datafusion::prelude::SessionContext;
use fathom_datafusion::sql::run_sql;
use fathom_datafusion::{TableOptions, register_dataset};
use fathom_table::{Dataset, WriteMode, WriteParams};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const DIM: usize = 128;
const CLUSTERS: usize = 256;
const RANK: usize = 8;
const QUERIES: usize = 50;

fn normal(rng: &mut StdRng) -> f32 {
    // Box-Muller.
    let (u, v): (f32, f32) = (rng.random_range(1e-7..1.0), rng.random_range(0.0..1.0));
    (-2.0 * u.ln()).sqrt() * (2.0 * std::f32::consts::PI * v).cos()
}

/// The vectors (row-major) and the table batches.
fn data(n: usize) -> (Vec<f32>, Vec<RecordBatch>) {
    let mut rng = StdRng::seed_from_u64(17);
    let centres: Vec<f32> = (0..CLUSTERS * DIM)
        .map(|_| normal(&mut rng) * 2.0)
        .collect();
    let bases: Vec<f32> = (0..CLUSTERS * DIM * RANK)
        .map(|_| normal(&mut rng) * 0.4)
        .collect();
    let mut vecs = Vec::with_capacity(n * DIM);
    for _ in 0..n {
        let c = rng.random_range(0..CLUSTERS);
        let z: Vec<f32> = (0..RANK).map(|_| normal(&mut rng)).collect();
        for d in 0..DIM {
            let mut x = centres[c * DIM + d] + 0.05 * normal(&mut rng);
            for (r, zr) in z.iter().enumerate() {
                x += bases[(c * DIM + d) * RANK + r] * zr;
            }
            vecs.push(x);
        }
    }
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("cat", DataType::Utf8, false),
        Field::new(
            "emb",
            DataType::FixedSizeList(item.clone(), DIM as i32),
            true,
        ),
    ]));
    let batches = (0..n)
        .step_by(50_000)
        .map(|s| {
            let e = (s + 50_000).min(n);
            RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Int64Array::from_iter_values(s as i64..e as i64)),
                    Arc::new(StringArray::from_iter_values(
                        (s..e).map(|i| format!("c{}", (i * 7919) % 20)),
                    )),
                    Arc::new(
                        FixedSizeListArray::try_new(
                            item.clone(),
                            DIM as i32,
                            Arc::new(Float32Array::from(vecs[s * DIM..e * DIM].to_vec())),
                            None,
                        )
                        .unwrap(),
                    ),
                ],
            )
            .unwrap()
        })
        .collect();
    (vecs, batches)
}

fn l2(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

/// Ids of the 10 nearest rows (passing `keep`) by brute force.
fn truth(vecs: &[f32], q: &[f32], keep: impl Fn(usize) -> bool) -> Vec<i64> {
    let mut all: Vec<(f32, usize)> = (0..vecs.len() / DIM)
        .filter(|i| keep(*i))
        .map(|i| (l2(q, &vecs[i * DIM..(i + 1) * DIM]), i))
        .collect();
    all.select_nth_unstable_by(10, |a, b| a.0.total_cmp(&b.0));
    all.truncate(10);
    all.iter().map(|x| x.1 as i64).collect()
}

fn recall(got: &[Vec<i64>], want: &[Vec<i64>]) -> f64 {
    let hits: usize = got
        .iter()
        .zip(want)
        .map(|(g, w)| g.iter().filter(|x| w.contains(x)).count())
        .sum();
    hits as f64 / (10 * want.len()) as f64
}

fn sql_of(q: &[f32], filter: &str) -> String {
    let lit: Vec<String> = q.iter().map(|x| format!("{x:?}")).collect();
    format!(
        "SELECT id, l2_distance(emb, [{}]) AS d FROM t{} ORDER BY d LIMIT 10",
        lit.join(","),
        if filter.is_empty() {
            String::new()
        } else {
            format!(" WHERE {filter}")
        }
    )
}

/// Median latency (each query three times, after a warm-up pass) and the
/// ids per query.
async fn ours(ctx: &SessionContext, qs: &[Vec<f32>], filter: &str) -> (f64, Vec<Vec<i64>>) {
    let mut times = vec![];
    let mut ids = vec![];
    // Warm: the partitions every query probes are loaded once first
    // (pylance's side does the same).
    // `FATHOM_BENCH_LOOP_RUNS=n`: the warm-up pass n times (for a profiler).
    let passes: usize = std::env::var("FATHOM_BENCH_LOOP_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    for _ in 0..passes {
        for q in qs {
            ctx.sql(&sql_of(q, filter))
                .await
                .unwrap()
                .collect()
                .await
                .unwrap();
        }
    }
    // `FATHOM_BENCH_EXPLAIN=1`: the first query's EXPLAIN ANALYZE.
    if std::env::var("FATHOM_BENCH_EXPLAIN").is_ok() {
        let b = ctx
            .sql(&format!("EXPLAIN ANALYZE {}", sql_of(&qs[0], filter)))
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let text = datafusion::arrow::util::pretty::pretty_format_batches(&b).unwrap();
        for line in text.to_string().lines().filter(|l| l.contains("Exec")) {
            println!("{}", line.chars().take(400).collect::<String>());
        }
        // `FATHOM_BENCH_PLAN_LOOP=n`: plan (not run) the first query n
        // times (for a profiler).
        if let Ok(n) = std::env::var("FATHOM_BENCH_PLAN_LOOP") {
            let sql = sql_of(&qs[0], filter);
            for _ in 0..n.parse::<usize>().unwrap() {
                let df = ctx.sql(&sql).await.unwrap();
                std::hint::black_box(df.create_physical_plan().await.unwrap());
            }
        }
        let (a, b, c) = common::phases(ctx, &sql_of(&qs[0], filter), 200).await;
        println!("  stages (medians, ms): sql {a:.3}, physical plan {b:.3}, run {c:.3}");
    }
    for q in qs {
        let sql = sql_of(q, filter);
        let mut got = vec![];
        for _ in 0..3 {
            let t = Instant::now();
            let b = ctx.sql(&sql).await.unwrap().collect().await.unwrap();
            times.push(t.elapsed().as_secs_f64() * 1e3);
            got = b
                .iter()
                .flat_map(|b| {
                    b.column(0)
                        .as_any()
                        .downcast_ref::<Int64Array>()
                        .unwrap()
                        .values()
                        .to_vec()
                })
                .collect();
        }
        ids.push(got);
    }
    (median(times), ids)
}

struct Pylance {
    build_ms: f64,
    configs: std::collections::HashMap<String, (f64, Vec<Vec<i64>>)>,
}

fn pylance(
    uri: &str,
    scratch: &std::path::Path,
    kind: &str,
    qfile: &std::path::Path,
    configs: &[&str],
) -> Option<Pylance> {
    use std::process::Command;
    let py = std::env::var("FATHOM_PYTHON").unwrap_or_else(|_| "python3".into());
    if !Command::new(&py)
        .args(["-c", "import lance"])
        .status()
        .is_ok_and(|s| s.success())
    {
        return None;
    }
    let copy = scratch.join("py.lance");
    let _ = std::fs::remove_dir_all(&copy);
    Command::new("cp")
        .args(["-r", uri, copy.to_str().unwrap()])
        .status()
        .ok()?;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/interop/pylance_vector_bench.py");
    let out = Command::new(&py)
        .arg(script)
        .arg(&copy)
        .args([kind, &CLUSTERS.to_string(), "16"])
        .arg(qfile)
        .args(configs)
        .output()
        .ok()?;
    let _ = std::fs::remove_dir_all(&copy);
    if !out.status.success() {
        eprintln!(
            "pylance vector benchmark failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(out.stdout.trim_ascii()).ok()?;
    let mut configs = std::collections::HashMap::new();
    for (k, c) in v["configs"].as_object()? {
        let ids = c["ids"]
            .as_array()?
            .iter()
            .map(|r| {
                r.as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_i64().unwrap())
                    .collect()
            })
            .collect();
        configs.insert(k.clone(), (c["ms"].as_f64()?, ids));
    }
    Some(Pylance {
        build_ms: v["build_ms"].as_f64()?,
        configs,
    })
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(bench());
}

async fn bench() {
    let n = rows();
    let scratch = tempfile::tempdir().unwrap();
    let uri = scratch.path().join("t.lance").to_str().unwrap().to_string();
    let t = Instant::now();
    let (vecs, batches) = data(n);
    Dataset::write(&uri, &batches, WriteMode::Create, WriteParams::default())
        .await
        .unwrap();
    drop(batches);
    println!(
        "vector benchmark: {n} rows x {DIM}-d, {CLUSTERS} clusters of rank {RANK}; data written in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let mut rng = StdRng::seed_from_u64(99);
    let qs: Vec<Vec<f32>> = (0..QUERIES)
        .map(|_| {
            let i = rng.random_range(0..n);
            vecs[i * DIM..(i + 1) * DIM]
                .iter()
                .map(|x| x + 0.1 * normal(&mut rng))
                .collect()
        })
        .collect();
    let qfile = scratch.path().join("queries.json");
    std::fs::write(&qfile, serde_json::to_string(&qs).unwrap()).unwrap();
    let cat3 = |i: usize| (i * 7919) % 20 == 3;
    let want: Vec<Vec<i64>> = qs.iter().map(|q| truth(&vecs, q, |_| true)).collect();
    let want_f: Vec<Vec<i64>> = qs.iter().map(|q| truth(&vecs, q, cat3)).collect();
    drop(vecs);

    let ctx = common::session();
    fathom_datafusion::add_vector_search(&ctx);
    register_dataset(&ctx, "t", &uri, TableOptions::default())
        .await
        .unwrap();
    println!(
        "\n{:<34} {:>9} {:>9} {:>9} {:>9} {:>7}",
        "query (k = 10)", "recall", "ms", "py recall", "py ms", "ratio"
    );
    let row = |label: &str, ours: (f64, f64), py: Option<(f64, f64)>| match py {
        Some((r, ms)) => println!(
            "{label:<34} {:>9.3} {:>9.2} {:>9.3} {:>9.2} {:>6.2}x",
            ours.0,
            ours.1,
            r,
            ms,
            ours.1 / ms
        ),
        None => println!("{label:<34} {:>9.3} {:>9.2}", ours.0, ours.1),
    };

    // Brute force both ways (skipped when `FATHOM_BENCH_CASE` names
    // another case).
    if std::env::var("FATHOM_BENCH_CASE").is_err() {
        run_sql(&ctx, "SET fathom.exact_search = true")
            .await
            .unwrap();
        let (ms, ids) = ours(&ctx, &qs[..5], "").await;
        let py = pylance(&uri, scratch.path(), "IVF_FLAT", &qfile, &["flat"]);
        row(
            "brute force (no index)",
            (recall(&ids, &want[..5]), ms),
            py.as_ref().map(|p| {
                let (ms, ids) = &p.configs["flat"];
                (recall(&ids[..5], &want[..5]), *ms)
            }),
        );
        run_sql(&ctx, "SET fathom.exact_search = false")
            .await
            .unwrap();
    }

    let mut builds = vec![];
    for (kind, opts, cases) in [
        (
            "IVF_PQ",
            "num_partitions = 256, num_sub_vectors = 16",
            vec![
                ("nprobes 20", 20, 1, ""),
                ("nprobes 20, refine 10", 20, 10, ""),
                ("prefilter cat = 'c3', nprobes 20", 20, 1, "cat = 'c3'"),
            ],
        ),
        (
            "IVF_FLAT",
            "num_partitions = 256",
            vec![("nprobes 20", 20, 1, "")],
        ),
        (
            "IVF_SQ",
            "num_partitions = 256",
            vec![("nprobes 20", 20, 1, "")],
        ),
        (
            "IVF_HNSW_SQ",
            "num_partitions = 256",
            vec![("nprobes 20", 20, 1, "")],
        ),
    ] {
        // `FATHOM_BENCH_KINDS=IVF_PQ,IVF_SQ` runs some kinds only.
        if let Ok(only) = std::env::var("FATHOM_BENCH_KINDS")
            && !only.split(',').any(|k| k.trim().eq_ignore_ascii_case(kind))
        {
            continue;
        }
        run_sql(&ctx, "DROP INDEX IF EXISTS emb_idx ON t")
            .await
            .unwrap();
        let t = Instant::now();
        run_sql(
            &ctx,
            &format!("CREATE INDEX emb_idx ON t USING {kind} (emb) WITH ({opts})"),
        )
        .await
        .unwrap();
        let build = t.elapsed().as_secs_f64() * 1e3;
        let configs: Vec<String> = cases
            .iter()
            .map(|(_, np, rf, f)| format!("{np}:{}:{f}", if *rf > 1 { *rf } else { 0 }))
            .collect();
        let cfg_refs: Vec<&str> = configs.iter().map(String::as_str).collect();
        let py = pylance(&uri, scratch.path(), kind, &qfile, &cfg_refs);
        builds.push((kind, build, py.as_ref().map(|p| p.build_ms)));
        for ((label, np, rf, filter), cfg) in cases.iter().zip(&configs) {
            // `FATHOM_BENCH_CASE="nprobes 20, refine 10"` runs that case only.
            if let Ok(only) = std::env::var("FATHOM_BENCH_CASE")
                && *label != only
            {
                continue;
            }
            run_sql(&ctx, &format!("SET fathom.nprobes = {np}"))
                .await
                .unwrap();
            run_sql(&ctx, &format!("SET fathom.refine_factor = {rf}"))
                .await
                .unwrap();
            let truth = if filter.is_empty() { &want } else { &want_f };
            let (ms, ids) = ours(&ctx, &qs, filter).await;
            row(
                &format!("{kind} {label}"),
                (recall(&ids, truth), ms),
                py.as_ref().map(|p| {
                    let (ms, ids) = &p.configs[cfg];
                    (recall(ids, truth), *ms)
                }),
            );
        }
    }
    println!(
        "\n{:<12} {:>10} {:>10} {:>7}",
        "build", "ours s", "pylance s", "ratio"
    );
    for (kind, ours, py) in builds {
        match py {
            Some(p) => println!(
                "{kind:<12} {:>10.1} {:>10.1} {:>6.2}x",
                ours / 1e3,
                p / 1e3,
                ours / p
            ),
            None => println!("{kind:<12} {:>10.1}", ours / 1e3),
        }
    }
}
