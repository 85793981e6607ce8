//! File format benchmark: ratios measured in one run on one 1,000,000-row
//! table (id, x, category, text, ts, a 128-d float32 vector), local disk,
//! warm page cache, median of several runs.
//!
//! - take of 1,000 random rows, two columns and all columns, against the
//!   same rows from Parquet read by arrow-rs with the page index and a row
//!   selection;
//! - a full scan of one column against Parquet;
//! - peak heap allocated while writing 1M and 4M rows (bounded by pages,
//!   not rows);
//! - the same take and scans on a file pylance wrote with its default
//!   version (2.2: bit-packing, FSST, dictionaries, full-zip vectors), ours
//!   against pylance's own `LanceFileReader` on that file (when pylance is
//!   installed), and on a 2.2 file we wrote.
//!
//! Run: `cargo bench -p fathom-file --bench file_format --profile bench-fast`
//! (`FATHOM_BENCH_ROWS` changes the row count).

use std::alloc::{GlobalAlloc, Layout};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
use arrow_array::{
    ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use fathom_file::localfs::LocalStore;
use fathom_file::{FileReader, FileReaderOptions, FileWriter, FileWriterOptions};
use futures::TryStreamExt;
use mimalloc::MiMalloc;
use object_store::ObjectStore;
use parquet::arrow::arrow_reader::{
    ArrowReaderOptions, ParquetRecordBatchReaderBuilder, RowSelection, RowSelector,
};
use parquet::arrow::{ArrowWriter, ProjectionMask};
use parquet::file::metadata::PageIndexPolicy;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

struct Counting;
static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { MiMalloc.alloc(l) };
        let now = CURRENT.fetch_add(l.size(), Ordering::Relaxed) + l.size();
        PEAK.fetch_max(now, Ordering::Relaxed);
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        CURRENT.fetch_sub(l.size(), Ordering::Relaxed);
        unsafe { MiMalloc.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = unsafe { MiMalloc.realloc(p, l, new) };
        if new >= l.size() {
            let now = CURRENT.fetch_add(new - l.size(), Ordering::Relaxed) + new - l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        } else {
            CURRENT.fetch_sub(l.size() - new, Ordering::Relaxed);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const DIM: i32 = 128;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("x", DataType::Float64, true),
        Field::new("category", DataType::Utf8, true),
        Field::new("text", DataType::Utf8, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        Field::new(
            "vector",
            DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, true)), DIM),
            true,
        ),
    ]))
}

fn batch(schema: &SchemaRef, start: usize, n: usize, rng: &mut StdRng) -> RecordBatch {
    const WORDS: [&str; 12] = [
        "lance", "fathom", "index", "vector", "query", "scan", "table", "arrow", "page", "row",
        "search", "data",
    ];
    let ids = Int64Array::from_iter_values((start..start + n).map(|i| i as i64));
    let x = Float64Array::from_iter_values((0..n).map(|_| rng.random::<f64>()));
    let cat =
        StringArray::from_iter_values((0..n).map(|_| format!("cat{:02}", rng.random_range(0..50))));
    let text = StringArray::from_iter_values((0..n).map(|_| {
        (0..rng.random_range(4..10))
            .map(|_| WORDS[rng.random_range(0..WORDS.len())])
            .collect::<Vec<_>>()
            .join(" ")
    }));
    let ts = TimestampMicrosecondArray::from_iter_values(
        (start..start + n).map(|i| 1_700_000_000_000_000 + i as i64 * 1_000_000),
    );
    let mut vb = FixedSizeListBuilder::with_capacity(
        Float32Builder::with_capacity(n * DIM as usize),
        DIM,
        n,
    );
    for _ in 0..n {
        for _ in 0..DIM {
            vb.values().append_value(rng.random::<f32>());
        }
        vb.append(true);
    }
    let cols: Vec<ArrayRef> = vec![
        Arc::new(ids),
        Arc::new(x),
        Arc::new(cat),
        Arc::new(text),
        Arc::new(ts),
        Arc::new(vb.finish()),
    ];
    RecordBatch::try_new(schema.clone(), cols).unwrap()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> f64 {
    median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(f());
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect(),
    )
}

/// Medians of `a` and `b`, run alternately so both see the same machine state.
fn time_pair<T, U>(runs: usize, mut a: impl FnMut() -> T, mut b: impl FnMut() -> U) -> (f64, f64) {
    let (mut ta, mut tb) = (vec![], vec![]);
    for _ in 0..runs {
        ta.push(time(1, &mut a));
        tb.push(time(1, &mut b));
    }
    (median(ta), median(tb))
}

fn parquet_take(path: &std::path::Path, sorted: &[u64], cols: &[usize], rows: usize) -> usize {
    let file = std::fs::File::open(path).unwrap();
    let b = ParquetRecordBatchReaderBuilder::try_new_with_options(
        file,
        ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Required),
    )
    .unwrap();
    let mask = ProjectionMask::roots(b.parquet_schema(), cols.iter().copied());
    let mut selectors = Vec::new();
    let mut pos = 0u64;
    for &i in sorted {
        if i > pos {
            selectors.push(RowSelector::skip((i - pos) as usize));
        }
        selectors.push(RowSelector::select(1));
        pos = i + 1;
    }
    if (pos as usize) < rows {
        selectors.push(RowSelector::skip(rows - pos as usize));
    }
    let reader = b
        .with_projection(mask)
        .with_row_selection(RowSelection::from(selectors))
        .build()
        .unwrap();
    reader.map(|b| b.unwrap().num_rows()).sum()
}

fn parquet_scan(path: &std::path::Path, cols: &[usize]) -> usize {
    let file = std::fs::File::open(path).unwrap();
    let b = ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
    let mask = ProjectionMask::roots(b.parquet_schema(), cols.iter().copied());
    b.with_projection(mask)
        .build()
        .unwrap()
        .map(|b| b.unwrap().num_rows())
        .sum()
}

/// Take and scans on 2.2 files: `(label, fathom ms on pylance's file,
/// pylance ms on it, fathom ms on our own 2.2 file)`. Empty when pylance is
/// not installed (our own 2.2 file alone is then still measured).
fn bench_v22(
    rt: &tokio::runtime::Runtime,
    store: &Arc<dyn ObjectStore>,
    dir: &std::path::Path,
    schema: &SchemaRef,
    rows: usize,
    idx: &[u64],
    runs: usize,
) -> Vec<(&'static str, f64, Option<f64>, f64)> {
    let py = std::env::var("FATHOM_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/interop/pylance_file_bench.py");
    // Our own 2.2 file, and the same rows as Arrow IPC for pylance to write.
    let ipc = dir.join("t.arrow");
    rt.block_on(async {
        let mut w = FileWriter::try_new(
            store.clone(),
            "ours22.lance".into(),
            schema,
            FileWriterOptions {
                version: fathom_file::FileVersion::V2_2,
                ..Default::default()
            },
        )
        .unwrap();
        let f = std::fs::File::create(&ipc).unwrap();
        let mut ipc_w = arrow_ipc::writer::FileWriter::try_new(f, schema).unwrap();
        let mut rng = StdRng::seed_from_u64(1);
        for s in (0..rows).step_by(10_000) {
            let b = batch(schema, s, 10_000.min(rows - s), &mut rng);
            w.write_batch(&b).await.unwrap();
            ipc_w.write(&b).unwrap();
        }
        w.finish().await.unwrap();
        ipc_w.finish().unwrap();
    });
    let pylance = std::process::Command::new(&py)
        .arg(&script)
        .arg("write")
        .arg(&ipc)
        .arg(dir.join("py22.lance"))
        .output()
        .is_ok_and(|o| o.status.success());
    std::fs::remove_file(&ipc).ok();
    let open = |name: &str| {
        rt.block_on(FileReader::open(
            store.clone(),
            name.into(),
            None,
            FileReaderOptions::default(),
        ))
        .unwrap()
    };
    let names = ["id", "x", "category", "text", "ts", "vector"];
    let cases: [(&'static str, Vec<usize>, bool); 4] = [
        ("take 1000 rows, 2 columns", vec![0, 1], true),
        (
            "take 1000 rows, all 6 columns",
            vec![0, 1, 2, 3, 4, 5],
            true,
        ),
        ("scan of one column (x: float64)", vec![1], false),
        ("scan of one column (text: utf8)", vec![3], false),
    ];
    // Each measurement opens the file, as pylance's does.
    let measure = |name: &str, cols: &[usize], take: bool| {
        let mut t: Vec<f64> = (0..runs)
            .map(|_| {
                let s = Instant::now();
                let r = open(name);
                let n = if take {
                    rt.block_on(r.take(idx, Some(cols))).unwrap().num_rows()
                } else {
                    rt.block_on(async {
                        let s = r.scan(0..rows as u64, Some(cols), 8192).unwrap();
                        s.try_collect::<Vec<_>>()
                            .await
                            .unwrap()
                            .iter()
                            .map(|b| b.num_rows())
                            .sum::<usize>()
                    })
                };
                assert!(n > 0);
                s.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        t.sort_by(|a, b| a.partial_cmp(b).unwrap());
        t[t.len() / 2]
    };
    // Profiling aid: FATHOM_BENCH_LOOP=<case number> repeats that case on
    // pylance's file (for perf) and measures nothing else.
    if let Some(k) = std::env::var("FATHOM_BENCH_LOOP")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        let (label, cols, take) = &cases[k];
        // FATHOM_BENCH_LOOP_RUNS: how many times (200).
        let times: usize = std::env::var("FATHOM_BENCH_LOOP_RUNS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(200);
        let s = Instant::now();
        for _ in 0..times {
            measure("py22.lance", cols, *take);
        }
        println!(
            "{label}: {:.2} ms per run",
            s.elapsed().as_secs_f64() * 1e3 / times as f64 / runs as f64
        );
        // Exiting skips the temporary directory's drop: remove it here.
        std::fs::remove_dir_all(dir).ok();
        std::process::exit(0);
    }
    let mut theirs = std::collections::HashMap::new();
    if pylance {
        let idx_file = dir.join("idx.txt");
        std::fs::write(
            &idx_file,
            idx.iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join("\n"),
        )
        .unwrap();
        let specs: Vec<String> = cases
            .iter()
            .enumerate()
            .map(|(i, (_, cols, take))| {
                let cols: Vec<&str> = cols.iter().map(|c| names[*c]).collect();
                format!(
                    "{}{i}={}",
                    if *take { "take" } else { "scan" },
                    cols.join(",")
                )
            })
            .collect();
        let out = std::process::Command::new(&py)
            .arg(&script)
            .arg("time")
            .arg(dir.join("py22.lance"))
            .arg(&idx_file)
            .args(&specs)
            .output()
            .unwrap();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some((k, v)) = line.split_once(' ') {
                theirs.insert(k.to_string(), v.parse::<f64>().unwrap_or(f64::NAN));
            }
        }
        // Keyed by the spec's label part.
        theirs = specs
            .iter()
            .zip(&cases)
            .filter_map(|(spec, (label, _, _))| {
                let k = spec.split('=').next().unwrap();
                theirs.get(k).map(|v| (label.to_string(), *v))
            })
            .collect();
    }
    cases
        .iter()
        .map(|(label, cols, take)| {
            let ours_on_theirs = if pylance {
                measure("py22.lance", cols, *take)
            } else {
                f64::NAN
            };
            let own = measure("ours22.lance", cols, *take);
            (*label, ours_on_theirs, theirs.get(*label).copied(), own)
        })
        .collect()
}

fn main() {
    let rows: usize = std::env::var("FATHOM_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn ObjectStore> = Arc::new(LocalStore::new_with_prefix(dir.path()).unwrap());
    let schema = schema();
    let batch_rows = 10_000;

    // Write Lance, measuring peak heap above the baseline, for rows and 4x rows.
    let mut peaks = Vec::new();
    let mut lance_write_ms = 0.0;
    for (name, n) in [("t.lance", rows), ("t4.lance", rows * 4)] {
        let mut rng = StdRng::seed_from_u64(1);
        let t = Instant::now();
        let base = CURRENT.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        let mut max_batch = 0usize;
        rt.block_on(async {
            let mut w = FileWriter::try_new(
                store.clone(),
                name.into(),
                &schema,
                FileWriterOptions::default(),
            )
            .unwrap();
            for s in (0..n).step_by(batch_rows) {
                let b = batch(&schema, s, batch_rows.min(n - s), &mut rng);
                max_batch = max_batch.max(b.get_array_memory_size());
                w.write_batch(&b).await.unwrap();
            }
            w.finish().await.unwrap();
        });
        if n == rows {
            lance_write_ms = t.elapsed().as_secs_f64() * 1e3;
        }
        peaks.push((n, PEAK.load(Ordering::Relaxed) - base, max_batch));
    }
    std::fs::remove_file(dir.path().join("t4.lance")).ok();

    // Write Parquet with page statistics (page index) on.
    let ppath = dir.path().join("t.parquet");
    let t = Instant::now();
    {
        let props = WriterProperties::builder()
            .set_statistics_enabled(EnabledStatistics::Page)
            .set_max_row_group_row_count(Some(1 << 20))
            .build();
        let mut w = ArrowWriter::try_new(
            std::fs::File::create(&ppath).unwrap(),
            schema.clone(),
            Some(props),
        )
        .unwrap();
        let mut rng = StdRng::seed_from_u64(1);
        for s in (0..rows).step_by(batch_rows) {
            w.write(&batch(&schema, s, batch_rows.min(rows - s), &mut rng))
                .unwrap();
        }
        w.close().unwrap();
    }
    let parquet_write_ms = t.elapsed().as_secs_f64() * 1e3;
    let lance_size = std::fs::metadata(dir.path().join("t.lance")).unwrap().len();
    let parquet_size = std::fs::metadata(&ppath).unwrap().len();

    let reader = rt
        .block_on(FileReader::open(
            store.clone(),
            "t.lance".into(),
            None,
            FileReaderOptions::default(),
        ))
        .unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    let mut idx: Vec<u64> = (0..1000)
        .map(|_| rng.random_range(0..rows as u64))
        .collect();
    idx.sort();
    idx.dedup();

    let runs = 7;
    let mut report = Vec::new();
    for (label, cols) in [
        ("take 1000 rows, 2 columns", vec![0usize, 1]),
        ("take 1000 rows, all 6 columns", vec![0, 1, 2, 3, 4, 5]),
    ] {
        let (l, p) = time_pair(
            runs,
            || {
                rt.block_on(reader.take(&idx, Some(&cols)))
                    .unwrap()
                    .num_rows()
            },
            || parquet_take(&ppath, &idx, &cols, rows),
        );
        report.push((label, l, p));
    }
    let scan = |col: usize| {
        rt.block_on(async {
            let s = reader.scan(0..rows as u64, Some(&[col]), 8192).unwrap();
            s.try_collect::<Vec<_>>()
                .await
                .unwrap()
                .iter()
                .map(|b| b.num_rows())
                .sum::<usize>()
        })
    };
    let (l, p) = time_pair(runs, || scan(1), || parquet_scan(&ppath, &[1]));
    report.push(("scan of one column (x: float64)", l, p));
    let (l, p) = time_pair(runs, || scan(3), || parquet_scan(&ppath, &[3]));
    report.push(("scan of one column (text: utf8)", l, p));

    // File format 2.2: pylance's default file, and ours.
    let v22 = bench_v22(&rt, &store, dir.path(), &schema, rows, &idx, runs);

    println!("fathom-file benchmark: {rows} rows, local disk, warm cache, median of {runs} runs");
    println!(
        "{:<36} {:>12} {:>12} {:>16}",
        "operation", "lance ms", "parquet ms", "lance / parquet"
    );
    for (label, l, p) in &report {
        println!("{label:<36} {l:>12.2} {p:>12.2} {:>16.3}", l / p);
    }
    println!(
        "{:<36} {:>12.0} {:>12.0} {:>16.3}",
        "write (ms)",
        lance_write_ms,
        parquet_write_ms,
        lance_write_ms / parquet_write_ms
    );
    println!(
        "{:<36} {:>12} {:>12} {:>16.3}",
        "file size (MiB)",
        lance_size >> 20,
        parquet_size >> 20,
        lance_size as f64 / parquet_size as f64
    );
    if !v22.is_empty() {
        println!();
        println!(
            "{:<36} {:>12} {:>12} {:>16} {:>12}",
            "2.2 file (pylance-written)",
            "fathom ms",
            "pylance ms",
            "fathom / pylance",
            "ours 2.2 ms"
        );
        for (label, ours, theirs, own) in &v22 {
            let ratio = theirs.map_or("-".to_string(), |t| format!("{:.3}", ours / t));
            let theirs = theirs.map_or("-".to_string(), |t| format!("{t:.2}"));
            println!("{label:<36} {ours:>12.2} {theirs:>12} {ratio:>16} {own:>12.2}");
        }
    }
    for (n, peak, batch) in peaks {
        println!(
            "peak heap while writing {n} rows: {:.1} MiB (largest input batch {:.1} MiB, 6 columns x 8 MiB pages)",
            peak as f64 / 1048576.0,
            batch as f64 / 1048576.0
        );
    }
}
