//! Shared by the SQL property tests: the random table and result helpers.

use std::sync::Arc;

use arrow_array::{Float64Array, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use datafusion::prelude::SessionContext;
use rand::Rng;

/// Rows `start..start + n`: id, k (0..20, 10% NULL), s (5 words, 15% NULL),
/// x (-1..1, 10% NULL, 8% one of 0.0, -0.0, NaN, +inf, -inf).
pub fn rows(start: i64, n: usize, rng: &mut rand::rngs::StdRng) -> RecordBatch {
    let words = ["ant", "bee", "cat", "dog", "eel"];
    RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("k", DataType::Int32, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("x", DataType::Float64, true),
        ])),
        vec![
            Arc::new(Int64Array::from_iter_values(start..start + n as i64)),
            Arc::new(Int32Array::from_iter(
                (0..n).map(|_| rng.random_bool(0.9).then(|| rng.random_range(0..20))),
            )),
            Arc::new(StringArray::from_iter((0..n).map(|_| {
                rng.random_bool(0.85).then(|| words[rng.random_range(0..5)])
            }))),
            Arc::new(Float64Array::from_iter((0..n).map(|_| {
                rng.random_bool(0.9).then(|| {
                    if rng.random_bool(0.08) {
                        [0.0, -0.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY]
                            [rng.random_range(0..5)]
                    } else {
                        rng.random_range(-1.0..1.0)
                    }
                })
            }))),
        ],
    )
    .unwrap()
}

/// The first column (Int64) of a query's result.
pub async fn ids(ctx: &SessionContext, sql: &str) -> Vec<i64> {
    let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    batches
        .iter()
        .flat_map(|b| {
            b.column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap()
                .values()
                .to_vec()
        })
        .collect()
}

/// A query's result as a table (for comparing whole results).
pub async fn text(ctx: &SessionContext, sql: &str) -> String {
    let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    arrow_cast::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string()
}

/// Runs `tests/interop/<script>` with `args` under pylance's Python and
/// parses what it prints as JSON.
pub fn interop_json(py: &str, script: &str, args: &[&std::ffi::OsStr]) -> serde_json::Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/interop")
        .join(script);
    let out = std::process::Command::new(py)
        .arg(path)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(out.stdout.trim_ascii()).expect("the script's output as JSON")
}

/// `count(*)` of `filter` over `t` by a full scan: the filter ORed with a
/// false term no index can answer.
pub async fn scan_count(ctx: &SessionContext, filter: &str) -> Vec<i64> {
    ids(
        ctx,
        &format!(
            "SELECT count(*)::BIGINT FROM t WHERE ({filter}) OR (id + 0 < -1 AND id IS NOT NULL)"
        ),
    )
    .await
}

/// Appends `batch` to the latest version of table `t` of `ctx` (a Fathom
/// table) as new fragments of at most `frag_rows` rows, outside SQL (the
/// table sees them at its next version check).
pub async fn append_to_t(ctx: &SessionContext, batch: RecordBatch, frag_rows: usize) {
    let p = ctx.table_provider("t").await.unwrap();
    let t = p.downcast_ref::<fathom_datafusion::FathomTable>().unwrap();
    let ds = t.latest().await.unwrap();
    let params = fathom_table::WriteParams {
        max_rows_per_file: frag_rows,
        ..Default::default()
    };
    fathom_table::Dataset::write(ds.uri(), &[batch], fathom_table::WriteMode::Append, params)
        .await
        .unwrap();
}
