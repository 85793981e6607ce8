//! Every Fathom node survives DataFusion's physical plan serialization
//! (datafusion-proto with `FathomPhysicalCodec`): real plans (flat,
//! indexed with exclusions and rechecks, zone pruning, late reads, DML)
//! are encoded, decoded, and must display the same and return the same
//! rows; decoded DML must commit what the original would have.

use std::sync::Arc;

use arrow_array::RecordBatch;
use datafusion::physical_plan::{ExecutionPlan, collect, displayable};
use datafusion::prelude::SessionContext;
use datafusion_proto::bytes::{
    physical_plan_from_bytes_with_extension_codec, physical_plan_to_bytes_with_extension_codec,
};
use fathom_datafusion::{FathomPhysicalCodec, new_session, sql::run_sql};

fn text(plan: &Arc<dyn ExecutionPlan>) -> String {
    displayable(plan.as_ref()).indent(true).to_string()
}

fn sorted_rows(batches: &[RecordBatch]) -> Vec<String> {
    let mut rows: Vec<String> = arrow_cast::pretty::pretty_format_batches(batches)
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

async fn round_trip(
    ctx: &SessionContext,
    sql: &str,
) -> (Arc<dyn ExecutionPlan>, Arc<dyn ExecutionPlan>) {
    let codec = FathomPhysicalCodec::default();
    let plan = ctx
        .sql(sql)
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let bytes = physical_plan_to_bytes_with_extension_codec(plan.clone(), &codec)
        .unwrap_or_else(|e| panic!("encoding the plan of {sql}: {e}\n{}", text(&plan)));
    let back = physical_plan_from_bytes_with_extension_codec(&bytes, &ctx.task_ctx(), &codec)
        .unwrap_or_else(|e| panic!("decoding the plan of {sql}: {e}"));
    assert_eq!(text(&plan), text(&back), "{sql}");
    (plan, back)
}

async fn setup() -> (tempfile::TempDir, SessionContext) {
    let dir = tempfile::tempdir().unwrap();
    let ctx = new_session(Some(dir.path())).unwrap();
    run_sql(
        &ctx,
        "CREATE TABLE t AS SELECT value AS id, value % 7 AS k,
           CASE value % 3 WHEN 0 THEN 'ant' WHEN 1 THEN 'bee' ELSE NULL END AS s,
           value * 0.25 AS x
         FROM generate_series(0, 19999)",
    )
    .await
    .unwrap();
    run_sql(&ctx, "CREATE INDEX id_idx ON t USING BTREE (id)")
        .await
        .unwrap();
    run_sql(&ctx, "CREATE INDEX s_idx ON t USING BITMAP (s)")
        .await
        .unwrap();
    run_sql(&ctx, "CREATE INDEX x_idx ON t USING ZONEMAP (x)")
        .await
        .unwrap();
    // An uncovered appended fragment and deleted rows: union, exclusions.
    run_sql(
        &ctx,
        "INSERT INTO t SELECT value AS id, value % 7, 'ant', value * 0.25
         FROM generate_series(20000, 20999)",
    )
    .await
    .unwrap();
    run_sql(&ctx, "DELETE FROM t WHERE id % 100 = 5")
        .await
        .unwrap();
    (dir, ctx)
}

#[tokio::test]
async fn queries_round_trip_with_the_same_rows() {
    let (_dir, ctx) = setup().await;
    let cases = [
        // flat: zone pruning and a late read
        (
            "SELECT id, s FROM t WHERE k = 3 AND x > 100",
            &["FragmentScanExec"][..],
        ),
        // exact index, partial coverage: union with the flat branch
        (
            "SELECT id, x FROM t WHERE id BETWEEN 50 AND 20500",
            &[
                "ScalarIndexExec",
                "ExclusionExec",
                "TakeExec",
                "FragmentScanExec",
            ][..],
        ),
        // AND / OR / IN over two indexes, residual recheck on an unindexed column
        (
            "SELECT * FROM t WHERE (s = 'ant' OR id IN (7, 8, 9, 20100)) AND k = 1",
            &["ScalarIndexExec", "TakeExec"][..],
        ),
        // zone map: AtMost, rechecked
        (
            "SELECT id FROM t WHERE x BETWEEN 10 AND 20",
            &["ScalarIndexExec"][..],
        ),
        // counts from index row sets (the union's flat part aggregated)
        (
            "SELECT count(*) FROM t WHERE s IS NULL",
            &["IndexCountExec"][..],
        ),
        (
            "SELECT s, count(*) FROM t WHERE id < 5000 GROUP BY s",
            &["IndexCountExec: id_idx", "group_by_index=s_idx"][..],
        ),
        (
            "SELECT count(*) FROM t WHERE x BETWEEN 10 AND 2000",
            &["IndexCountExec", "recheck_uncertain"][..],
        ),
        // the appended fragment is not in s_idx: aggregated from the scan
        (
            "SELECT s, count(1) AS n FROM t GROUP BY s",
            &["FragmentScanExec"][..],
        ),
        (
            "SELECT id FROM t WHERE id > 19990 LIMIT 3",
            &["TakeExec"][..],
        ),
    ];
    for (sql, nodes) in cases {
        let (plan, back) = round_trip(&ctx, sql).await;
        let shown = text(&plan);
        for n in nodes {
            assert!(shown.contains(n), "{sql}: expected {n} in\n{shown}");
        }
        let a = collect(plan, ctx.task_ctx()).await.unwrap();
        let b = collect(back, ctx.task_ctx()).await.unwrap();
        assert!(!a.is_empty());
        if sql.contains("LIMIT") {
            assert_eq!(
                a.iter().map(|b| b.num_rows()).sum::<usize>(),
                b.iter().map(|b| b.num_rows()).sum::<usize>()
            );
        } else {
            assert_eq!(sorted_rows(&a), sorted_rows(&b), "{sql}");
        }
    }
}

#[tokio::test]
async fn overlay_reevaluation_round_trips() {
    let (_dir, ctx) = setup().await;
    run_sql(&ctx, "CREATE INDEX k_idx ON t USING BITMAP (k)")
        .await
        .unwrap();
    run_sql(&ctx, "SET fathom.update_mode = 'overlay'")
        .await
        .unwrap();
    run_sql(&ctx, "UPDATE t SET k = 3 WHERE id IN (1, 2, 10)")
        .await
        .unwrap();
    let sql = "SELECT id, k FROM t WHERE k = 3 AND id < 30";
    let (plan, back) = round_trip(&ctx, sql).await;
    let shown = text(&plan);
    for n in ["overlaid_rows=3", "OverlaidRowsExec: rows=3"] {
        assert!(shown.contains(n), "expected {n} in\n{shown}");
    }
    let a = collect(plan, ctx.task_ctx()).await.unwrap();
    let b = collect(back, ctx.task_ctx()).await.unwrap();
    assert_eq!(sorted_rows(&a), sorted_rows(&b));
    let ids: Vec<String> = sorted_rows(&a)
        .iter()
        .map(|r| r.split('|').nth(1).unwrap().trim().to_string())
        .collect();
    let mut want: Vec<String> = [1, 2, 3, 10, 17, 24]
        .iter()
        .map(|i: &i32| i.to_string())
        .collect();
    want.sort();
    let mut got = ids;
    got.sort();
    assert_eq!(got, want);
    // The count of the overlaid rows, as a node of its own.
    let sql = "SELECT count(*) FROM t WHERE k = 3 AND id < 30";
    let (plan, back) = round_trip(&ctx, sql).await;
    let shown = text(&plan);
    assert!(
        shown.contains("IndexCountExec: overlaid rows=3"),
        "expected the overlaid rows counted in\n{shown}"
    );
    // A fragment the index does not cover is counted on the flat path:
    // the branches stay a parallel union.
    assert!(
        shown.contains("UnionExec") && !shown.contains("CountUnionExec"),
        "{shown}"
    );
    let a = collect(plan, ctx.task_ctx()).await.unwrap();
    let b = collect(back, ctx.task_ctx()).await.unwrap();
    assert_eq!(sorted_rows(&a), sorted_rows(&b));
    assert_eq!(sorted_rows(&a), vec!["| 6        |".to_string()]);
    // Once the index covers every fragment, both branches are counted
    // from sets: one serial union, decoded as one, counting the same.
    run_sql(
        &ctx,
        "CREATE INDEX IF NOT EXISTS k_idx ON t USING BITMAP (k)",
    )
    .await
    .unwrap();
    let sql = "SELECT count(*) FROM t WHERE k = 3";
    let (plan, back) = round_trip(&ctx, sql).await;
    for p in [&plan, &back] {
        let t = text(p);
        assert!(
            t.contains("CountUnionExec: branches=2")
                && t.contains("IndexCountExec: overlaid rows=3"),
            "{t}"
        );
    }
    let a = collect(plan, ctx.task_ctx()).await.unwrap();
    let b = collect(back, ctx.task_ctx()).await.unwrap();
    assert_eq!(sorted_rows(&a), sorted_rows(&b));
    let flat = ctx
        .sql("SELECT count(*) FROM t WHERE k + 0 = 3")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(sorted_rows(&a), sorted_rows(&flat));
}

#[tokio::test]
async fn dml_round_trips_and_commits_once() {
    let (_dir, ctx) = setup().await;
    let count = |sql: &'static str| {
        let ctx = ctx.clone();
        async move { super::common::ids(&ctx, sql).await[0] }
    };
    let before = count("SELECT count(*)::BIGINT FROM t").await;

    let (_, back) = round_trip(&ctx, "DELETE FROM t WHERE id < 1000 AND k = 2").await;
    assert!(text(&back).contains("FathomDeleteExec"));
    collect(back, ctx.task_ctx()).await.unwrap();
    let deleted = before - count("SELECT count(*)::BIGINT FROM t").await;
    // ids 0..1000 with id % 7 = 2, less those already deleted (id % 100 = 5).
    let expect = (0..1000i64).filter(|i| i % 7 == 2 && i % 100 != 5).count() as i64;
    assert_eq!(deleted, expect);

    let (_, back) = round_trip(&ctx, "UPDATE t SET x = -1.0 WHERE id BETWEEN 10 AND 19").await;
    collect(back, ctx.task_ctx()).await.unwrap();
    assert_eq!(
        count("SELECT count(*)::BIGINT FROM t WHERE x = -1.0").await,
        (10..20).filter(|i| i % 7 != 2).count() as i64
    );

    let (_, back) = round_trip(&ctx, "INSERT INTO t VALUES (99999, 1, 'bee', 2.5)").await;
    assert!(text(&back).contains("FathomInsertExec"));
    collect(back, ctx.task_ctx()).await.unwrap();
    assert_eq!(count("SELECT id FROM t WHERE id = 99999").await, 99999);
}

#[tokio::test]
async fn a_corrupt_node_is_an_error_not_a_panic() {
    use datafusion_proto::physical_plan::{DefaultPhysicalProtoConverter, PhysicalExtensionCodec};
    let ctx = SessionContext::new();
    let codec = FathomPhysicalCodec::default();
    let err = codec
        .try_decode(
            &[0xff, 0x01, 0x02],
            &[],
            &ctx.task_ctx(),
            &DefaultPhysicalProtoConverter {},
        )
        .unwrap_err();
    assert!(err.to_string().contains("FathomPhysicalCodec"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vector_search_round_trips() {
    let (_dir, ctx) = super::vector::setup(3000, 1000).await;
    run_sql(
        &ctx,
        "CREATE INDEX e ON t USING IVF_PQ (emb) WITH (num_partitions = 4)",
    )
    .await
    .unwrap();
    run_sql(&ctx, "DELETE FROM t WHERE id % 9 = 0")
        .await
        .unwrap();
    run_sql(
        &ctx,
        "INSERT INTO t SELECT id + 5000, cat, emb FROM t WHERE id < 300",
    )
    .await
    .unwrap();
    let q = vec!["0.25"; 16].join(", ");
    for filter in ["true", "cat = 'c3'"] {
        let sql = format!(
            "SELECT id, l2_distance(emb, [{q}]) AS d FROM t WHERE {filter} ORDER BY d LIMIT 7"
        );
        let (plan, back) = round_trip(&ctx, &sql).await;
        let shown = text(&plan);
        assert!(
            shown.contains("KnnExec") && shown.contains("index=e"),
            "{shown}"
        );
        let a = collect(plan, ctx.task_ctx()).await.unwrap();
        let b = collect(back, ctx.task_ctx()).await.unwrap();
        assert_eq!(sorted_rows(&a), sorted_rows(&b), "{sql}");
        assert_eq!(a.iter().map(|b| b.num_rows()).sum::<usize>(), 7);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_text_search_round_trips() {
    let (_dir, ctx) = super::vector::setup(3000, 1000).await;
    run_sql(&ctx, "CREATE INDEX c ON t USING INVERTED (cat)")
        .await
        .unwrap();
    run_sql(&ctx, "DELETE FROM t WHERE id % 9 = 0")
        .await
        .unwrap();
    run_sql(
        &ctx,
        "INSERT INTO t SELECT id + 5000, cat, emb FROM t WHERE id < 300",
    )
    .await
    .unwrap();
    for (filter, limit) in [("true", " LIMIT 7"), ("id % 3 = 0", "")] {
        let sql = format!(
            "SELECT id, _score FROM fts('t', 'cat', 'c3 c5') WHERE {filter} ORDER BY _score DESC{limit}"
        );
        let (plan, back) = round_trip(&ctx, &sql).await;
        let shown = text(&plan);
        assert!(
            shown.contains("FtsExec") && shown.contains("index=c") && shown.contains("flat=true"),
            "{shown}"
        );
        let a = collect(plan, ctx.task_ctx()).await.unwrap();
        let b = collect(back, ctx.task_ctx()).await.unwrap();
        assert_eq!(sorted_rows(&a), sorted_rows(&b), "{sql}");
        assert!(a.iter().map(|b| b.num_rows()).sum::<usize>() >= 7);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_column_full_text_search_round_trips() {
    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("m.lance").to_str().unwrap().to_string();
    let n = 2000i64;
    let words = |i: i64, m: i64| format!("w{} w{} x{}", i % m, (i * 7) % m, i % 3);
    let b = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("a", DataType::Utf8, false),
            Field::new("b", DataType::Utf8, false),
        ])),
        vec![
            Arc::new(Int64Array::from_iter_values(0..n)),
            Arc::new(StringArray::from_iter_values((0..n).map(|i| words(i, 11)))),
            Arc::new(StringArray::from_iter_values((0..n).map(|i| words(i, 13)))),
        ],
    )
    .unwrap();
    fathom_table::Dataset::write(
        &uri,
        &[b],
        fathom_table::WriteMode::Create,
        fathom_table::WriteParams {
            max_rows_per_file: 700,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let ctx = new_session(None).unwrap();
    fathom_datafusion::register_dataset(&ctx, "m", &uri, Default::default())
        .await
        .unwrap();
    // `a` indexed, `b` flat: the node has one flat input, for `b`.
    run_sql(&ctx, "CREATE INDEX a_idx ON m USING INVERTED (a)")
        .await
        .unwrap();
    for (filter, limit) in [("true", " LIMIT 7"), ("id % 3 = 0", "")] {
        let sql = format!(
            "SELECT id, _score FROM fts('m', 'a^2, b', 'w3 w5') WHERE {filter} ORDER BY _score DESC{limit}"
        );
        let (plan, back) = round_trip(&ctx, &sql).await;
        let shown = text(&plan);
        assert!(
            shown.contains("columns=[a^2, b]")
                && shown.contains("a: index=a_idx")
                && shown.contains("b: no index (flat)"),
            "{shown}"
        );
        assert_eq!(text(&back), shown);
        let a = collect(plan, ctx.task_ctx()).await.unwrap();
        let b = collect(back, ctx.task_ctx()).await.unwrap();
        assert_eq!(sorted_rows(&a), sorted_rows(&b), "{sql}");
        assert!(a.iter().map(|b| b.num_rows()).sum::<usize>() >= 7);
    }
}
