//! Vector search from SQL against brute force computed here, from the
//! rows themselves: with every partition probed (and, for quantized
//! kinds, enough refinement) the result equals brute force exactly, after
//! appends (unindexed fragments), deletes, updates and index extends;
//! WHERE filters are prefilters; at default settings recall@10 is printed
//! and held above a floor.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Int64Type};
use arrow_array::{Array, FixedSizeListArray, Float32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use datafusion::prelude::SessionContext;
use fathom_datafusion::sql::run_sql;
use fathom_datafusion::{TableOptions, new_session, register_dataset};
use fathom_table::{Dataset, WriteMode, WriteParams};
use rand::{Rng, SeedableRng};

use super::common::text;

const DIM: usize = 16;

/// Rows `start..start+n`: id, cat (c0..c9), emb near one of 12 centres.
pub fn batch(start: i64, n: usize, rng: &mut rand::rngs::StdRng) -> RecordBatch {
    let centres: Vec<Vec<f32>> = (0..12)
        .map(|c| {
            let mut r = rand::rngs::StdRng::seed_from_u64(c);
            (0..DIM).map(|_| r.random_range(-5.0..5.0)).collect()
        })
        .collect();
    let mut vals = Vec::with_capacity(n * DIM);
    for _ in 0..n {
        let c = &centres[rng.random_range(0..12)];
        vals.extend(c.iter().map(|x| x + rng.random_range(-1.0f32..1.0)));
    }
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("cat", DataType::Utf8, true),
            Field::new(
                "emb",
                DataType::FixedSizeList(item.clone(), DIM as i32),
                true,
            ),
        ])),
        vec![
            Arc::new(Int64Array::from_iter_values(start..start + n as i64)),
            Arc::new(StringArray::from_iter_values(
                (0..n).map(|i| format!("c{}", (start as usize + i) % 10)),
            )),
            Arc::new(
                FixedSizeListArray::try_new(
                    item,
                    DIM as i32,
                    Arc::new(Float32Array::from(vals)),
                    None,
                )
                .unwrap(),
            ),
        ],
    )
    .unwrap()
}

fn vec_literal(q: &[f32]) -> String {
    let parts: Vec<String> = q.iter().map(|x| format!("{x:?}")).collect();
    format!("[{}]", parts.join(", "))
}

fn l2(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let d: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    1.0 - d / (na * nb)
}

/// (id, distance) of the k nearest rows passing `filter`, by brute force
/// over every row the table returns.
async fn brute(
    ctx: &SessionContext,
    q: &[f32],
    metric: &str,
    filter: &str,
    k: usize,
) -> Vec<(i64, f32)> {
    let sql = format!("SELECT id, emb FROM t WHERE {filter}");
    let batches = ctx.sql(&sql).await.unwrap().collect().await.unwrap();
    let mut all = vec![];
    for b in &batches {
        let ids = b.column(0).as_primitive::<Int64Type>();
        let e = b.column(1).as_fixed_size_list();
        for i in 0..b.num_rows() {
            if e.is_null(i) {
                continue;
            }
            let v = e.value(i);
            let v = v.as_primitive::<Float32Type>().values();
            let d = if metric == "l2" {
                l2(q, v)
            } else {
                cosine(q, v)
            };
            all.push((ids.value(i), d));
        }
    }
    all.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    all.truncate(k);
    all
}

async fn knn(
    ctx: &SessionContext,
    q: &[f32],
    metric: &str,
    filter: &str,
    k: usize,
) -> Vec<(i64, f32)> {
    let sql = format!(
        "SELECT id, {metric}_distance(emb, {}) AS d FROM t WHERE {filter} ORDER BY d LIMIT {k}",
        vec_literal(q)
    );
    let batches = ctx.sql(&sql).await.unwrap().collect().await.unwrap();
    batches
        .iter()
        .flat_map(|b| {
            let ids = b.column(0).as_primitive::<Int64Type>().clone();
            let d = b.column(1).as_primitive::<Float32Type>().clone();
            (0..b.num_rows()).map(move |i| (ids.value(i), d.value(i)))
        })
        .collect()
}

fn same(got: &[(i64, f32)], want: &[(i64, f32)], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: {got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            g.0 == w.0 || (g.1 - w.1).abs() <= 1e-5 * w.1.abs().max(1.0),
            "{what}: {got:?} vs {want:?}"
        );
        assert!(
            (g.1 - w.1).abs() <= 1e-4 * w.1.abs().max(1.0),
            "{what}: {got:?} vs {want:?}"
        );
    }
}

pub async fn setup(rows: usize, frag_rows: usize) -> (tempfile::TempDir, SessionContext) {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("t.lance").to_str().unwrap().to_string();
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let b = batch(0, rows, &mut rng);
    Dataset::write(
        &uri,
        &[b],
        WriteMode::Create,
        WriteParams {
            max_rows_per_file: frag_rows,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let ctx = new_session(None).unwrap();
    register_dataset(&ctx, "t", &uri, TableOptions::default())
        .await
        .unwrap();
    (dir, ctx)
}

/// Random changes (appends, deletes, updates that move rows, index
/// extends and rebuilds) between checks; each check runs random queries,
/// unfiltered and prefiltered (one filter a scalar index answers), and
/// compares with brute force. One seed uses many tiny fragments.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equals_brute_force_through_changes() {
    let cases = [
        ("IVF_FLAT", "l2", 3000, 1000),
        ("IVF_PQ", "l2", 3000, 1000),
        ("IVF_SQ", "cosine", 3000, 1000),
        ("IVF_PQ", "cosine", 3000, 1000),
        ("IVF_HNSW_SQ", "l2", 3000, 1000),
        ("IVF_FLAT", "l2", 400, 7),
    ];
    for (seed, (kind, metric, rows, frag_rows)) in cases.into_iter().enumerate() {
        let (_dir, ctx) = setup(rows, frag_rows).await;
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed as u64);
        run_sql(
            &ctx,
            &format!(
                "CREATE INDEX emb_idx ON t USING {kind} (emb) WITH (num_partitions = 6, metric = '{metric}')"
            ),
        )
        .await
        .unwrap();
        run_sql(&ctx, "CREATE INDEX cat_idx ON t USING BITMAP (cat)")
            .await
            .unwrap();
        // Every partition probed, every candidate refined: exact.
        run_sql(&ctx, "SET fathom.nprobes = 100").await.unwrap();
        run_sql(&ctx, "SET fathom.refine_factor = 1000")
            .await
            .unwrap();
        let plan = text(
            &ctx,
            &format!(
                "EXPLAIN SELECT id, {metric}_distance(emb, {}) AS d FROM t WHERE cat = 'c1' ORDER BY d LIMIT 5",
                vec_literal(&[0.0; DIM])
            ),
        )
        .await;
        assert!(
            plan.contains("KnnExec") && plan.contains("index=emb_idx"),
            "{plan}"
        );
        assert!(
            plan.contains("prefilter=true") && plan.contains("ScalarIndexExec"),
            "{plan}"
        );
        let mut next_id = 100_000i64;
        let mut log = vec![];
        for step in 0..8 {
            for filter in ["true", "cat = 'c3'", "id % 7 = 1"] {
                for _ in 0..2 {
                    let q: Vec<f32> = (0..DIM).map(|_| rng.random_range(-5.0..5.0)).collect();
                    let k = [1, 10, 25][rng.random_range(0..3)];
                    // Overlaid rows re-scored one by one, or their whole
                    // fragments searched by brute force.
                    let exclusion = ["rows", "fragments"][rng.random_range(0..2)];
                    run_sql(
                        &ctx,
                        &format!("SET fathom.overlay_exclusion = '{exclusion}'"),
                    )
                    .await
                    .unwrap();
                    let what = format!(
                        "{kind} {metric} seed {seed} after {log:?} WHERE {filter} k {k} exclusion {exclusion}"
                    );
                    let got = knn(&ctx, &q, metric, filter, k).await;
                    let want = brute(&ctx, &q, metric, filter, k).await;
                    same(&got, &want, &what);
                }
            }
            if step == 7 {
                break;
            }
            let op = rng.random_range(0..7);
            match op {
                6 => {
                    // New vectors for about a tenth of the rows, as overlays:
                    // the index keeps covering them, its answer for them is
                    // stale; they are re-scored by brute force.
                    let p = ctx.table_provider("t").await.unwrap();
                    let t = p.downcast_ref::<fathom_datafusion::FathomTable>().unwrap();
                    let ds = t.latest().await.unwrap();
                    let live = ds
                        .scan()
                        .project(&["_rowaddr"])
                        .unwrap()
                        .collect()
                        .await
                        .unwrap();
                    let addrs: Vec<u64> = live
                        .column(0)
                        .as_primitive::<arrow_array::types::UInt64Type>()
                        .values()
                        .iter()
                        .copied()
                        .filter(|_| rng.random_bool(0.1))
                        .collect();
                    let fresh = batch(0, addrs.len(), &mut rng).project(&[2]).unwrap();
                    ds.update_overlay(&["emb"], &addrs, &fresh, None)
                        .await
                        .unwrap();
                    log.push(format!("overlay emb of {} rows", addrs.len()));
                }
                0 => {
                    // Appended rows: an unindexed fragment, brute-forced.
                    let n = rng.random_range(1..400);
                    let b = batch(next_id, n, &mut rng);
                    next_id += n as i64;
                    super::common::append_to_t(&ctx, b, frag_rows).await;
                    log.push(format!("append {n}"));
                }
                1 => {
                    let m = rng.random_range(3..9);
                    run_sql(&ctx, &format!("DELETE FROM t WHERE id % {m} = 0"))
                        .await
                        .unwrap();
                    log.push(format!("delete %{m}"));
                }
                2 => {
                    // Rows move to a new fragment (rewritten) or their
                    // columns are rewritten in place; ids change.
                    let m = rng.random_range(5..13);
                    let mode = ["rows", "columns", "auto", "overlay"][rng.random_range(0..4)];
                    run_sql(&ctx, &format!("SET fathom.update_mode = '{mode}'"))
                        .await
                        .unwrap();
                    run_sql(
                        &ctx,
                        &format!("UPDATE t SET id = id + 1000000, cat = 'c3' WHERE id % {m} = 2"),
                    )
                    .await
                    .unwrap();
                    log.push(format!("update %{m} ({mode})"));
                }
                3 => {
                    run_sql(
                        &ctx,
                        "CREATE INDEX IF NOT EXISTS emb_idx ON t USING IVF_FLAT (emb)",
                    )
                    .await
                    .unwrap();
                    log.push("extend".into());
                }
                4 => {
                    let target = rng.random_range(5..500);
                    let reindex = rng.random_bool(0.5);
                    let defer = rng.random_bool(0.5);
                    // Segments rewritten with the moved rows' new addresses.
                    let remap = rng.random_bool(0.5);
                    run_sql(
                        &ctx,
                        &format!(
                            "COMPACT TABLE t WITH (target_rows_per_fragment = {target}, reindex = {reindex}, defer_index_remap = {defer}, remap_indexes = {remap})"
                        ),
                    )
                    .await
                    .unwrap();
                    log.push(format!(
                        "compact {target} reindex {reindex} defer {defer} remap {remap}"
                    ));
                }
                _ => {
                    run_sql(&ctx, "REINDEX emb_idx ON t").await.unwrap();
                    log.push("rebuild".into());
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recall_at_default_settings() {
    let (_dir, ctx) = setup(20_000, 10_000).await;
    run_sql(&ctx, "CREATE INDEX emb_idx ON t USING IVF_PQ (emb) WITH (num_partitions = 32, num_sub_vectors = 8)")
        .await
        .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let mut hits = 0;
    let queries = 20;
    for _ in 0..queries {
        let q: Vec<f32> = (0..DIM).map(|_| rng.random_range(-5.0..5.0)).collect();
        let want: Vec<i64> = brute(&ctx, &q, "l2", "true", 10)
            .await
            .into_iter()
            .map(|x| x.0)
            .collect();
        let got = knn(&ctx, &q, "l2", "true", 10).await;
        hits += got.iter().filter(|g| want.contains(&g.0)).count();
    }
    let recall = hits as f64 / (10 * queries) as f64;
    println!("IVF_PQ recall@10 (32 partitions, nprobes 20, refine 1): {recall:.3}");
    assert!(recall >= 0.8, "recall {recall}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clear_errors() {
    let (_dir, ctx) = setup(500, 500).await;
    let e = run_sql(
        &ctx,
        "SELECT id, l2_distance(emb, [1.0, 2.0]) AS d FROM t ORDER BY d LIMIT 3",
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("2 dimensions") && e.contains("16"), "{e}");
    let e = run_sql(&ctx, "CREATE INDEX i ON t USING IVF_PQ (cat)")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("FixedSizeList<Float32>") && e.contains("cat"),
        "{e}"
    );
    let e = run_sql(
        &ctx,
        "CREATE INDEX i ON t USING IVF_PQ (emb) WITH (num_sub_vectors = 5)",
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("does not divide"), "{e}");
    let e = run_sql(
        &ctx,
        "CREATE INDEX i ON t USING IVF_PQ (emb) WITH (metric = 'hamming')",
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("hamming"), "{e}");
    // A cosine index is not used for an l2 query: brute force instead.
    run_sql(
        &ctx,
        "CREATE INDEX i ON t USING IVF_FLAT (emb) WITH (metric = 'cosine', num_partitions = 4)",
    )
    .await
    .unwrap();
    let plan = text(
        &ctx,
        &format!(
            "EXPLAIN SELECT id, l2_distance(emb, {}) AS d FROM t ORDER BY d LIMIT 5",
            vec_literal(&[0.5; DIM])
        ),
    )
    .await;
    assert!(plan.contains("exact (brute force)"), "{plan}");
}

/// A distance over a vector literal longer than 16 numbers names its
/// column by the first values, the length and a hash: different vectors
/// get different names (both can be selected), the same vector the same
/// name, and the values are those of the literals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_vector_literals_name_columns_briefly() {
    let ctx = new_session(None).unwrap();
    let a: Vec<f32> = (0..20).map(|i| i as f32 / 4.0).collect();
    let mut b = a.clone();
    b[19] += 1.0;
    let zero = vec_literal(&[0.0; 20]);
    let sql = format!(
        "SELECT l2_distance({}, {zero}), l2_distance({}, {zero}), l2_distance({}, {zero})",
        vec_literal(&a),
        vec_literal(&b),
        vec_literal(&a)
    );
    let e = run_sql(&ctx, &sql).await.unwrap_err().to_string();
    // The first and third are the same expression: DataFusion refuses the
    // duplicate name, as it does for any repeated expression.
    assert!(e.contains("unique expression names"), "{e}");
    let sql = format!(
        "SELECT l2_distance({}, {zero}), l2_distance({}, {zero})",
        vec_literal(&a),
        vec_literal(&b)
    );
    let df = ctx.sql(&sql).await.unwrap();
    let names: Vec<String> = df
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_ne!(names[0], names[1]);
    for n in &names {
        assert!(
            n.starts_with("l2_distance([0,0.25,0.5,...20 values #"),
            "{n}"
        );
        assert!(n.len() < 120, "{n}");
    }
    let b0 = df.collect().await.unwrap();
    let got = |c: usize| b0[0].column(c).as_primitive::<Float32Type>().value(0);
    let zeros = [0.0f32; 20];
    assert!((got(0) - l2(&a, &zeros)).abs() < 1e-3);
    assert!((got(1) - l2(&b, &zeros)).abs() < 1e-3);
    // Short literals keep DataFusion's own name.
    let df = ctx
        .sql("SELECT l2_distance([1.0, 2.0], [0.0, 0.0])")
        .await
        .unwrap();
    let name = df.schema().field(0).name().clone();
    assert!(!name.contains("values #"), "{name}");
}

/// Found with the overlay work: rebuilding a vector search node with its
/// own children (as optimizer rules do) dropped its brute-force input
/// when it had no prefilter, losing the unindexed fragments' rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuilt_search_keeps_its_brute_force_input() {
    use datafusion::physical_plan::ExecutionPlan;
    use datafusion::physical_plan::execution_plan::{
        ChildrenPropertiesMode, ReplaceChildrenOptions,
    };
    fn find(p: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
        if p.name() == "KnnExec" {
            return Some(p.clone());
        }
        p.children().into_iter().find_map(find)
    }
    let (_dir, ctx) = setup(600, 300).await;
    run_sql(
        &ctx,
        "CREATE INDEX emb_idx ON t USING IVF_FLAT (emb) WITH (num_partitions = 2)",
    )
    .await
    .unwrap();
    // An appended, unindexed fragment: brute-forced, no prefilter.
    run_sql(
        &ctx,
        "INSERT INTO t SELECT id + 10000, cat, emb FROM t WHERE id < 10",
    )
    .await
    .unwrap();
    let sql = format!(
        "SELECT id, l2_distance(emb, {}) AS d FROM t ORDER BY d LIMIT 3",
        vec_literal(&[0.0; DIM])
    );
    let plan = ctx
        .sql(&sql)
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let knn = find(&plan).expect("a KnnExec");
    let children: Vec<_> = knn.children().into_iter().cloned().collect();
    assert_eq!(children.len(), 1, "the brute-force input");
    let rebuilt = knn
        .clone()
        .replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
        .unwrap();
    assert_eq!(
        rebuilt.children().len(),
        1,
        "rebuilt without its brute-force input"
    );
}

/// `OPTIMIZE ... WITH (remap_indexes = true)`: the segments are rewritten
/// with the moved rows' new addresses (no reuse index is left, every
/// fragment stays covered) and answer as they did before the compaction:
/// the same neighbours at few probes for the kinds whose codes and
/// partitions are kept; IVF_HNSW_SQ, whose graphs are rebuilt, the same
/// neighbours as brute force when every partition is probed with a wide
/// search. Scalar and full-text indexes answer the same rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remapped_segments_answer_as_before_compaction() {
    for kind in ["IVF_FLAT", "IVF_PQ", "IVF_SQ", "IVF_HNSW_SQ"] {
        let (dir, ctx) = setup(3000, 500).await;
        for sql in [
            format!("CREATE INDEX emb_idx ON t USING {kind} (emb) WITH (num_partitions = 6)"),
            "CREATE INDEX id_idx ON t USING BTREE (id)".into(),
            "CREATE INDEX cat_idx ON t USING BITMAP (cat)".into(),
            "CREATE INDEX cat_fts ON t USING INVERTED (cat)".into(),
            // Spread over every fragment, above the 10% threshold.
            "DELETE FROM t WHERE id % 7 = 3".into(),
            "SET fathom.nprobes = 2".into(),
        ] {
            run_sql(&ctx, &sql).await.unwrap();
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let queries: Vec<Vec<f32>> = (0..6)
            .map(|_| (0..DIM).map(|_| rng.random_range(-5.0..5.0)).collect())
            .collect();
        let scalar = [
            "SELECT id FROM t WHERE cat = 'c3' ORDER BY id",
            "SELECT id FROM t WHERE id BETWEEN 700 AND 2100 ORDER BY id",
            "SELECT id FROM t WHERE text_match(cat, 'c7') ORDER BY id",
        ];
        let mut before = vec![];
        for q in &queries {
            before.push(knn(&ctx, q, "l2", "true", 10).await);
        }
        let mut scalar_before = vec![];
        for q in scalar {
            scalar_before.push(text(&ctx, q).await);
        }
        let out = run_sql(&ctx, "OPTIMIZE t WITH (remap_indexes = true)")
            .await
            .unwrap();
        let report = arrow_cast::pretty::pretty_format_batches(&out[0].1)
            .unwrap()
            .to_string();
        assert!(
            report.contains("cat_fts, cat_idx, emb_idx, id_idx"),
            "{kind}: {report}"
        );
        let ds = Dataset::open(dir.path().join("t.lance").to_str().unwrap())
            .await
            .unwrap();
        assert!(
            ds.manifest().frag_reuse.is_none(),
            "{kind}: reuse index left"
        );
        assert_eq!(ds.fragments().len(), 1, "{kind}");
        for info in fathom_index::list_indexes(&ds) {
            assert!(info.uncovered_fragments.is_empty(), "{kind}: {info:?}");
        }
        for (q, want) in scalar.iter().zip(&scalar_before) {
            assert_eq!(&text(&ctx, q).await, want, "{kind}: {q}");
        }
        if kind == "IVF_HNSW_SQ" {
            run_sql(&ctx, "SET fathom.nprobes = 6").await.unwrap();
            run_sql(&ctx, "SET fathom.hnsw_ef = 600").await.unwrap();
            run_sql(&ctx, "SET fathom.refine_factor = 20")
                .await
                .unwrap();
            for q in &queries {
                let got = knn(&ctx, q, "l2", "true", 10).await;
                same(&got, &brute(&ctx, q, "l2", "true", 10).await, kind);
            }
        } else {
            for (q, want) in queries.iter().zip(&before) {
                same(&knn(&ctx, q, "l2", "true", 10).await, want, kind);
            }
        }
    }
}
