//! Shared by the SQL benchmarks: the 1,000,000-row benchmark table and timing.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Instant;

use arrow_array::{
    Float64Array, Int32Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::prelude::SessionContext;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The benchmarks run on mimalloc, as DataFusion's own CLI and `fathom`
/// do: glibc's allocator slows down as a long-lived process's heap fills
/// with cached readers and metadata (at 10,000 fragments a third of a
/// point lookup was spent in `malloc`), which is the allocator, not the
/// query.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub fn schema() -> SchemaRef {
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

pub fn batch(s: &SchemaRef, start: usize, n: usize, rng: &mut StdRng) -> RecordBatch {
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

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

pub async fn run(ctx: &SessionContext, sql: &str) -> (f64, usize) {
    let t = Instant::now();
    let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    (
        t.elapsed().as_secs_f64() * 1e3,
        batches.iter().map(|b| b.num_rows()).sum(),
    )
}

/// The benchmark table as batches of 50,000 rows.
pub fn table(rows: usize) -> Vec<RecordBatch> {
    let s = schema();
    let mut rng = StdRng::seed_from_u64(3);
    (0..rows)
        .step_by(50_000)
        .map(|st| batch(&s, st, 50_000.min(rows - st), &mut rng))
        .collect()
}

/// Rows from `FATHOM_BENCH_ROWS`, default 1,000,000.
pub fn rows() -> usize {
    std::env::var("FATHOM_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

/// Medians of the times `time(false)` (a) and `time(true)` (b) return,
/// taken in alternating blocks of `runs` back-to-back runs (three
/// rounds): each query is timed warm, the way pylance's script times its
/// own, while slow drift still hits both alike. (Strictly alternating
/// single runs would time a point lookup just after a full scan has
/// flushed the CPU caches, and favour the heavier query.)
async fn blocks<F, Fut>(runs: usize, mut time: F) -> (f64, f64)
where
    F: FnMut(bool) -> Fut,
    Fut: std::future::Future<Output = f64>,
{
    let (mut ta, mut tb) = (vec![], vec![]);
    for _ in 0..3 {
        for _ in 0..runs {
            ta.push(time(false).await);
        }
        for _ in 0..runs {
            tb.push(time(true).await);
        }
    }
    (median(ta), median(tb))
}

/// Medians of running SQL `a` and `b` end to end (see [`blocks`]).
pub async fn time_pair(ctx: &SessionContext, a: &str, b: &str, runs: usize) -> (f64, f64) {
    blocks(runs, |second| async move {
        run(ctx, if second { b } else { a }).await.0
    })
    .await
}

/// Median of running SQL `q` end to end through a plan cache (its plan
/// made by a first, untimed run and reused while the table is unchanged).
#[allow(dead_code)]
pub async fn time_cached(
    ctx: &SessionContext,
    cache: &fathom_datafusion::PlanCache,
    q: &str,
    runs: usize,
) -> f64 {
    std::hint::black_box(cache.sql(ctx, q).await.unwrap());
    let mut ts = Vec::with_capacity(3 * runs);
    for _ in 0..3 * runs {
        let t = Instant::now();
        std::hint::black_box(cache.sql(ctx, q).await.unwrap());
        ts.push(t.elapsed().as_secs_f64() * 1e3);
    }
    median(ts)
}

/// Medians of executing the physical plans of `a` and `b` (planned once):
/// execution alone, without SQL parsing and planning (see [`blocks`]).
pub async fn time_pair_exec(ctx: &SessionContext, a: &str, b: &str, runs: usize) -> (f64, f64) {
    let pa = ctx
        .sql(a)
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let pb = ctx
        .sql(b)
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    blocks(runs, |second| {
        // Plans hold per-run state (repartition channels): reset, not re-planned.
        let p = datafusion::physical_plan::execution_plan::reset_plan_states(if second {
            pb.clone()
        } else {
            pa.clone()
        })
        .unwrap();
        async move {
            let t = Instant::now();
            let b = datafusion::physical_plan::collect(p, ctx.task_ctx())
                .await
                .unwrap();
            std::hint::black_box(b);
            t.elapsed().as_secs_f64() * 1e3
        }
    })
    .await
}

/// A session comparing fairly with Parquet: page index, filter pushdown
/// and filter reordering on.
/// Fathom's optimizer rules are on (they only touch Fathom scans).
pub fn session() -> SessionContext {
    let config = datafusion::prelude::SessionConfig::new()
        .set_bool("datafusion.execution.parquet.pushdown_filters", true)
        .set_bool("datafusion.execution.parquet.reorder_filters", true)
        .set_bool("datafusion.execution.parquet.enable_page_index", true);
    let state = fathom_datafusion::with_fathom_rules(
        datafusion::execution::session_state::SessionStateBuilder::new()
            .with_config(config)
            .with_default_features(),
    )
    .build();
    SessionContext::new_with_state(state)
}

/// A query's result rows as sorted text (to compare results of queries
/// whose row order is not defined).
#[allow(dead_code)]
pub async fn sorted_text(ctx: &SessionContext, sql: &str) -> Vec<String> {
    let b = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    let mut rows: Vec<String> = datafusion::arrow::util::pretty::pretty_format_batches(&b)
        .unwrap()
        .to_string()
        .lines()
        .filter(|l| l.starts_with('|'))
        .skip(1)
        .map(String::from)
        .collect();
    rows.sort();
    rows
}

/// Writes `batches` as one Parquet file with page statistics (the page index).
pub fn write_parquet(path: &std::path::Path, batches: &[RecordBatch]) {
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::{EnabledStatistics, WriterProperties};
    let props = WriterProperties::builder()
        .set_statistics_enabled(EnabledStatistics::Page)
        .build();
    let file = std::fs::File::create(path).unwrap();
    let mut w = ArrowWriter::try_new(file, batches[0].schema(), Some(props)).unwrap();
    for b in batches {
        w.write(b).unwrap();
    }
    w.close().unwrap();
}

/// Median milliseconds of each phase of `sql`: SQL to an optimized
/// logical plan, to a physical plan, and execution.
#[allow(dead_code)]
pub async fn phases(ctx: &SessionContext, sql: &str, runs: usize) -> (f64, f64, f64) {
    let (mut a, mut b, mut c) = (vec![], vec![], vec![]);
    for _ in 0..runs {
        let t = Instant::now();
        let df = ctx.sql(sql).await.unwrap();
        let t1 = t.elapsed().as_secs_f64() * 1e3;
        let p = df.create_physical_plan().await.unwrap();
        let t2 = t.elapsed().as_secs_f64() * 1e3;
        let r = datafusion::physical_plan::collect(p, ctx.task_ctx())
            .await
            .unwrap();
        std::hint::black_box(r);
        let t3 = t.elapsed().as_secs_f64() * 1e3;
        a.push(t1);
        b.push(t2 - t1);
        c.push(t3 - t2);
    }
    (median(a), median(b), median(c))
}

/// What `tests/interop/pylance_bench.py` printed: its version, per index
/// its build time and size, the time to open the dataset, and per query
/// its median time (ms).
pub struct PylanceReport {
    pub version: String,
    pub builds: Vec<(f64, u64)>,
    pub open: Option<f64>,
    pub queries: Vec<f64>,
}

impl PylanceReport {
    fn parse(s: &str) -> Self {
        let mut r = PylanceReport {
            version: String::new(),
            builds: vec![],
            open: None,
            queries: vec![],
        };
        for line in s.lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            match w.as_slice() {
                ["version", v] => r.version = v.to_string(),
                ["build", ms, bytes] => r
                    .builds
                    .push((ms.parse().unwrap_or(f64::NAN), bytes.parse().unwrap_or(0))),
                ["open", ms] => r.open = ms.parse().ok(),
                ["query", ms] => r.queries.push(ms.parse().unwrap_or(f64::NAN)),
                _ => {}
            }
        }
        r
    }
}

/// Runs the pylance side on a copy of the dataset at `uri` (made in
/// `scratch`), when pylance is installed (`FATHOM_PYTHON`, default
/// `python3`): builds `indexes` (`col:KIND,...`, or the script's
/// default), then times each `(columns, filter)` query.
pub fn pylance(
    uri: &str,
    scratch: &std::path::Path,
    indexes: Option<&str>,
    queries: &[(String, String)],
) -> Option<PylanceReport> {
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
    let ok = Command::new("cp")
        .args(["-r", uri, copy.to_str().unwrap()])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("could not copy {uri} for pylance");
        return None;
    }
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/interop/pylance_bench.py");
    let mut cmd = Command::new(&py);
    cmd.arg(script);
    if let Some(ix) = indexes {
        cmd.arg(format!("--indexes={ix}"));
    }
    cmd.arg(&copy);
    for (c, f) in queries {
        cmd.arg(format!("{c}|{f}"));
    }
    let out = cmd.output().unwrap();
    let _ = std::fs::remove_dir_all(&copy);
    if out.status.success() {
        Some(PylanceReport::parse(&String::from_utf8_lossy(&out.stdout)))
    } else {
        eprintln!(
            "pylance benchmark failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        None
    }
}

/// Prints `EXPLAIN ANALYZE` of `sql` (the `FATHOM_BENCH_EXPLAIN` aid).
pub async fn print_explain_analyze(ctx: &SessionContext, sql: &str) {
    let b = ctx
        .sql(&format!("EXPLAIN ANALYZE {sql}"))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    println!(
        "{}",
        datafusion::arrow::util::pretty::pretty_format_batches(&b).unwrap()
    );
}
