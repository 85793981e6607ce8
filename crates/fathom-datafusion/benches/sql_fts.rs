//! Full-text search benchmark, measured in one run on 1,000,000 documents
//! (`FATHOM_BENCH_ROWS`) of 10–40 words from a Zipf vocabulary of 50,000
//! words: top-10 for a word in ~1 % of documents, for a frequent word,
//! for two words with AND, for three terms with OR, a two-word phrase, a
//! boolean query
//! (`+required optional -excluded`), and a word combined
//! with a B-tree range on `id`, ours through SQL (`fts(...)`, index path)
//! beside the same query with no index (every row tokenized) and beside
//! pylance 14 on a copy of the same dataset (where pylance is installed);
//! index build time and size beside pylance's (both with positions). Every top-10's scores are
//! checked against pylance's, place by place (tied ids may differ).
//!
//! Run: `cargo bench -p fathom-datafusion --bench sql_fts --profile bench-fast`

mod common;

use std::sync::Arc;
use std::time::Instant;

use arrow_array::{Float32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use common::{median, rows};
use datafusion::prelude::SessionContext;
use fathom_datafusion::sql::run_sql;
use fathom_datafusion::{TableOptions, register_dataset};
use fathom_table::{Dataset, WriteMode, WriteParams};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const VOCAB: usize = 50_000;

fn word(mut r: usize) -> String {
    let mut s = String::from("w");
    loop {
        s.push((b'a' + (r % 26) as u8) as char);
        r /= 26;
        if r == 0 {
            return s;
        }
    }
}

/// The table batches and each word's document frequency.
fn data(n: usize) -> (Vec<RecordBatch>, Vec<u32>) {
    let mut rng = StdRng::seed_from_u64(23);
    // Zipf (s = 1) by inverse CDF over the harmonic weights.
    let mut cdf = Vec::with_capacity(VOCAB);
    let mut acc = 0f64;
    for r in 1..=VOCAB {
        acc += 1.0 / r as f64;
        cdf.push(acc);
    }
    let words: Vec<String> = (0..VOCAB).map(word).collect();
    let mut df = vec![0u32; VOCAB];
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("body", DataType::Utf8, true),
    ]));
    let mut seen = vec![usize::MAX; VOCAB];
    let batches = (0..n)
        .step_by(50_000)
        .map(|s| {
            let e = (s + 50_000).min(n);
            let bodies: Vec<String> = (s..e)
                .map(|doc| {
                    let len = rng.random_range(10..=40);
                    let mut b = String::with_capacity(len * 7);
                    for i in 0..len {
                        let u = rng.random_range(0.0..acc);
                        let r = cdf.partition_point(|c| *c < u).min(VOCAB - 1);
                        if seen[r] != doc {
                            seen[r] = doc;
                            df[r] += 1;
                        }
                        if i > 0 {
                            b.push(' ');
                        }
                        b.push_str(&words[r]);
                    }
                    b
                })
                .collect();
            RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Int64Array::from_iter_values(s as i64..e as i64)),
                    Arc::new(StringArray::from(bodies)),
                ],
            )
            .unwrap()
        })
        .collect();
    (batches, df)
}

/// The word whose document frequency is closest to `share` of `n`.
fn word_at(df: &[u32], n: usize, share: f64) -> String {
    let target = share * n as f64;
    let r = (0..df.len())
        .min_by(|a, b| {
            (df[*a] as f64 - target)
                .abs()
                .total_cmp(&(df[*b] as f64 - target).abs())
        })
        .unwrap();
    word(r)
}

struct Q {
    name: &'static str,
    q: String,
    op: &'static str,
    filter: String,
}

/// The `_score`s of `sql`'s rows, in order.
async fn scores(ctx: &SessionContext, sql: &str) -> Vec<f64> {
    let b = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    b.iter()
        .flat_map(|b| {
            let s = b.column(1).as_any().downcast_ref::<Float32Array>().unwrap();
            s.values().iter().map(|v| *v as f64).collect::<Vec<_>>()
        })
        .collect()
}

/// Median ms of `runs` runs after a warm-up.
async fn time(ctx: &SessionContext, sql: &str, runs: usize) -> f64 {
    common::run(ctx, sql).await;
    let mut t = vec![];
    for _ in 0..runs {
        t.push(common::run(ctx, sql).await.0);
    }
    median(t)
}

fn dir_bytes(p: &std::path::Path) -> u64 {
    std::fs::read_dir(p)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.metadata().map_or(0, |m| m.len()))
                .sum()
        })
        .unwrap_or(0)
}

struct Pylance {
    version: String,
    build_ms: f64,
    bytes: u64,
    /// Per query: median ms and the scores of the top 10, best first.
    queries: Vec<(f64, Vec<f64>)>,
}

fn pylance(uri: &str, scratch: &std::path::Path, qs: &[Q]) -> Option<Pylance> {
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
    // Our index is dropped from the copy: pylance builds its own.
    let qfile = scratch.join("fts_queries.json");
    let json: Vec<serde_json::Value> = qs
        .iter()
        .map(|q| serde_json::json!({"q": q.q, "op": q.op, "filter": q.filter}))
        .collect();
    std::fs::write(&qfile, serde_json::to_string(&json).unwrap()).unwrap();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/interop/pylance_fts_bench.py");
    let out = Command::new(&py)
        .arg(script)
        .arg(&copy)
        .arg(&qfile)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&copy);
    if !out.status.success() {
        eprintln!(
            "pylance full-text benchmark failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    Some(Pylance {
        version: v["version"].as_str().unwrap_or("?").to_string(),
        build_ms: v["build_ms"].as_f64()?,
        bytes: v["index_bytes"].as_u64()?,
        queries: v["queries"]
            .as_array()?
            .iter()
            .map(|q| {
                (
                    q["ms"].as_f64().unwrap_or(f64::NAN),
                    q["scores"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|i| i.as_f64().unwrap())
                        .collect(),
                )
            })
            .collect(),
    })
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let n = rows();
    let scratch = tempfile::tempdir().unwrap();
    let uri = scratch.path().join("fts.lance");
    let uri = uri.to_str().unwrap().to_string();
    let t = Instant::now();
    let (batches, df) = data(n);
    Dataset::write(
        &uri,
        &batches,
        WriteMode::Create,
        WriteParams {
            max_rows_per_file: 250_000,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    drop(batches);
    println!(
        "{n} documents of 10-40 words (Zipf over {VOCAB} words) written in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let one = word_at(&df, n, 0.01);
    let frequent = word_at(&df, n, 0.2);
    let qs = vec![
        Q {
            name: "word in ~1% of docs",
            q: one.clone(),
            op: "OR",
            filter: String::new(),
        },
        Q {
            name: "word in ~20% of docs",
            q: frequent.clone(),
            op: "OR",
            filter: String::new(),
        },
        Q {
            name: "two words, AND",
            q: format!("{} {}", word_at(&df, n, 0.05), word_at(&df, n, 0.03)),
            op: "AND",
            filter: String::new(),
        },
        Q {
            name: "three terms, OR",
            q: format!(
                "{} {} {}",
                word_at(&df, n, 0.02),
                word_at(&df, n, 0.005),
                word_at(&df, n, 0.001)
            ),
            op: "OR",
            filter: String::new(),
        },
        Q {
            name: "two-word phrase",
            q: format!("\"{} {}\"", word(0), word(1)),
            op: "PHRASE",
            filter: String::new(),
        },
        Q {
            name: "boolean: +a b -c",
            q: format!(
                "+{} {} -{}",
                word_at(&df, n, 0.02),
                word_at(&df, n, 0.01),
                word_at(&df, n, 0.1)
            ),
            op: "OR",
            filter: String::new(),
        },
        Q {
            name: "nested: +\"a b\" (c d) -e",
            q: format!(
                "+\"{} {}\" ({} {}) -{}",
                word(0),
                word(1),
                word_at(&df, n, 0.02),
                word_at(&df, n, 0.01),
                word_at(&df, n, 0.1)
            ),
            op: "OR",
            filter: String::new(),
        },
        Q {
            name: "~1% word AND id range (B-tree)",
            q: one.clone(),
            op: "OR",
            filter: format!("id >= {} AND id < {}", n / 10, n / 10 + n / 20),
        },
    ];
    // Profiling aid: `FATHOM_BENCH_LOOP=<query number>` skips pylance and
    // the flat path and runs that query `FATHOM_BENCH_LOOP_RUNS` times
    // (default 200) once the index is built.
    let looped: Option<usize> = std::env::var("FATHOM_BENCH_LOOP")
        .ok()
        .map(|v| v.parse().expect("FATHOM_BENCH_LOOP: a query number"));
    // Pylance first, on a copy without our indexes.
    let py = match looped {
        Some(_) => None,
        None => pylance(&uri, scratch.path(), &qs),
    };

    let ctx = common::session();
    fathom_datafusion::add_vector_search(&ctx);
    ctx.register_udtf("fts", Arc::new(fathom_datafusion::fts::FtsTableFunction));
    register_dataset(&ctx, "t", &uri, TableOptions::default())
        .await
        .unwrap();
    let sql = |q: &Q| {
        let w = if q.filter.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", q.filter)
        };
        format!(
            "SELECT id, _score FROM fts('t', 'body', '{}', '{}'){w} ORDER BY _score DESC LIMIT 10",
            q.q, q.op
        )
    };
    // No index: every row tokenized.
    let mut flat = vec![];
    for q in &qs[..usize::from(looped.is_none())] {
        flat.push(time(&ctx, &sql(q), 3).await);
    }
    run_sql(&ctx, "CREATE INDEX id_idx ON t USING BTREE (id)")
        .await
        .unwrap();
    let t = Instant::now();
    run_sql(
        &ctx,
        "CREATE INDEX body_idx ON t USING INVERTED (body) WITH (with_position = true)",
    )
    .await
    .unwrap();
    let build_ms = t.elapsed().as_secs_f64() * 1e3;
    let ds = Dataset::open(&uri).await.unwrap();
    let seg = ds
        .manifest()
        .indices
        .iter()
        .find(|i| i.name == "body_idx")
        .unwrap();
    let bytes = dir_bytes(
        &scratch
            .path()
            .join(format!("fts.lance/_indices/{}", seg.uuid)),
    );

    if let Some(i) = looped {
        let runs: usize = std::env::var("FATHOM_BENCH_LOOP_RUNS")
            .map_or(200, |v| v.parse().expect("FATHOM_BENCH_LOOP_RUNS: a count"));
        let s = sql(&qs[i]);
        common::print_explain_analyze(&ctx, &s).await;
        println!(
            "{}: {:.3} ms (median of {runs})",
            qs[i].name,
            time(&ctx, &s, runs).await
        );
        // Where the uncached time goes: SQL to a logical plan (tables and
        // table functions resolved), to a physical plan, and the run.
        let (a, b, c) = common::phases(&ctx, &s, runs).await;
        println!("  stages (medians, ms): sql {a:.3}, physical plan {b:.3}, run {c:.3}");
        let cache = fathom_datafusion::PlanCache::new(4);
        println!(
            "{}, plan cached: {:.3} ms (median of {})",
            qs[i].name,
            common::time_cached(&ctx, &cache, &s, runs).await,
            3 * runs
        );
        return;
    }
    // As a service runs a query again: its plan made once (PlanCache).
    let cache = fathom_datafusion::PlanCache::new(16);
    println!(
        "\n{:<34} {:>10} {:>10} {:>12} {:>8} {:>10}",
        "query (top 10)", "ours ms", "cached ms", "pylance ms", "ratio", "cached/py"
    );
    for (i, q) in qs.iter().enumerate() {
        let s = sql(q);
        let ours = time(&ctx, &s, 7).await;
        let cached = common::time_cached(&ctx, &cache, &s, 7).await;
        let got = scores(&ctx, &s).await;
        let (theirs, same) = match &py {
            Some(p) => {
                // Ties make the ids at equal scores arbitrary: the top 10's
                // scores must be pylance's, place by place.
                let (ms, want) = &p.queries[i];
                let equal = got.len() == want.len()
                    && got
                        .iter()
                        .zip(want)
                        .all(|(a, b)| (a - b).abs() <= 1e-4 * b.abs().max(1.0));
                (*ms, if equal { "" } else { "  (scores differ)" })
            }
            None => (f64::NAN, ""),
        };
        println!(
            "{:<34} {:>10.2} {:>10.2} {:>12.2} {:>8.2} {:>10.2}{same}",
            q.name,
            ours,
            cached,
            theirs,
            ours / theirs,
            cached / theirs
        );
        if std::env::var("FATHOM_BENCH_EXPLAIN").is_ok() {
            common::print_explain_analyze(&ctx, &s).await;
        }
    }
    println!(
        "{:<34} {:>10.2} {:>12} {:>8.2}",
        "no index (flat): ~1% word",
        flat[0],
        "(flat/index)",
        flat[0] / time(&ctx, &sql(&qs[0]), 7).await
    );
    println!(
        "\n{:<34} {:>10} {:>12} {:>8}",
        "index build", "ours", "pylance", "ratio"
    );
    let (pb, psz) = py.as_ref().map_or((f64::NAN, 0), |p| (p.build_ms, p.bytes));
    println!(
        "{:<34} {:>10.1} {:>12.1} {:>8.2}",
        "build s",
        build_ms / 1e3,
        pb / 1e3,
        build_ms / pb
    );
    println!(
        "{:<34} {:>10.1} {:>12.1} {:>8.2}",
        "size MB",
        bytes as f64 / 1e6,
        psz as f64 / 1e6,
        bytes as f64 / psz as f64
    );
    if let Some(p) = &py {
        println!("(pylance {})", p.version);
    }
}
