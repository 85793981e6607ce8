//! Counts answered from index row sets (`IndexCountRule`): the plans they
//! take, the rows they avoid reading, and the same results as the same
//! table in a session without the rule (which streams rows), including
//! the shapes that must fall back.

use std::sync::Arc;

use datafusion::prelude::SessionContext;
use fathom_datafusion::{TableOptions, new_session, open_table, sql::run_sql};

use super::common::text;

async fn explain(ctx: &SessionContext, sql: &str, analyze: bool) -> String {
    let verb = if analyze {
        "EXPLAIN ANALYZE"
    } else {
        "EXPLAIN"
    };
    text(ctx, &format!("{verb} {sql}")).await
}

/// A metric's value on the first line of `plan` showing it (EXPLAIN
/// ANALYZE shows large counts as `64.86 K`).
fn metric(plan: &str, name: &str) -> Option<f64> {
    let at = plan.find(&format!("{name}="))? + name.len() + 1;
    let rest = &plan[at..];
    let num: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let scale = match rest[num.len()..]
        .strip_prefix(' ')
        .and_then(|r| r.chars().next())
    {
        Some('K') => 1e3,
        Some('M') => 1e6,
        _ => 1.0,
    };
    Some(num.parse::<f64>().ok()? * scale)
}

/// `ctx` over a data directory holding `t`, and a session without
/// Fathom's rules over the same dataset (the oracle).
async fn setup() -> (tempfile::TempDir, SessionContext, SessionContext) {
    let dir = tempfile::tempdir().unwrap();
    let ctx = new_session(Some(dir.path())).unwrap();
    // ts sorted: zones of 8,192 rows hold disjoint ranges.
    run_sql(
        &ctx,
        "CREATE TABLE t AS SELECT value AS id, value * 10 AS ts,
           CASE value % 5 WHEN 0 THEN 'c0' WHEN 1 THEN 'c1' WHEN 2 THEN 'c2'
             WHEN 3 THEN 'c3' ELSE NULL END AS cat,
           value % 7 AS k
         FROM generate_series(0, 99999)",
    )
    .await
    .unwrap();
    for ddl in [
        "CREATE INDEX id_idx ON t USING BTREE (id)",
        "CREATE INDEX cat_idx ON t USING BITMAP (cat)",
        "CREATE INDEX ts_idx ON t USING ZONEMAP (ts)",
        "DELETE FROM t WHERE id % 97 = 3",
    ] {
        run_sql(&ctx, ddl).await.unwrap();
    }
    let oracle = SessionContext::new();
    let uri = dir.path().join("t.lance");
    let table = open_table(uri.to_str().unwrap(), None, None, TableOptions::default())
        .await
        .unwrap();
    oracle.register_table("t", Arc::new(table)).unwrap();
    (dir, ctx, oracle)
}

async fn same(ctx: &SessionContext, oracle: &SessionContext, sql: &str) {
    assert_eq!(text(ctx, sql).await, text(oracle, sql).await, "{sql}");
}

#[tokio::test]
async fn counts_come_from_row_sets_and_equal_the_scan() {
    let (_dir, ctx, oracle) = setup().await;
    let counted = [
        "SELECT count(*) FROM t WHERE id = 4242",
        "SELECT count(*) FROM t WHERE id BETWEEN 5000 AND 5999",
        "SELECT count(*) FROM t WHERE cat = 'c3'",
        "SELECT count(*) FROM t WHERE cat IN ('c0', 'c1', 'c2')",
        "SELECT count(*) FROM t WHERE cat IS NULL",
        "SELECT count(1), count(id) FROM t WHERE cat = 'c1' AND id < 50000",
        "SELECT cat, count(*) FROM t WHERE id >= 12345 GROUP BY cat ORDER BY cat",
        "SELECT cat, count(*) AS n FROM t GROUP BY cat ORDER BY n, cat",
        "SELECT count(*) FROM t WHERE ts >= 100000 AND ts < 700000",
        "SELECT count(*) FROM t WHERE cat = 'c2' AND k = 3",
    ];
    for sql in counted {
        let plan = explain(&ctx, sql, false).await;
        assert!(plan.contains("IndexCountExec"), "{sql}\n{plan}");
        assert!(!plan.contains("TakeExec"), "{sql}\n{plan}");
        same(&ctx, &oracle, sql).await;
    }
    // Shapes that keep streaming rows, with the same results.
    for sql in [
        // A nullable column's count.
        "SELECT count(cat) FROM t WHERE id < 20000",
        // A limit under the count.
        "SELECT count(*) FROM (SELECT id FROM t WHERE id < 20000 LIMIT 7)",
        "SELECT count(DISTINCT cat) FROM t WHERE id < 20000",
        // No grouping index on k.
        "SELECT k, count(*) FROM t WHERE id < 20000 GROUP BY k ORDER BY k",
        "SELECT count(*) FILTER (WHERE k = 1) FROM t WHERE id < 20000",
    ] {
        let plan = explain(&ctx, sql, false).await;
        assert!(!plan.contains("IndexCountExec"), "{sql}\n{plan}");
        same(&ctx, &oracle, sql).await;
    }
}

/// `FathomTable::count_rows(filter)`, the SQL-free count, equals the SQL
/// count; bad filters are errors naming what is wrong.
#[tokio::test]
async fn count_rows_api_equals_sql() {
    let (dir, ctx, _oracle) = setup().await;
    let uri = dir.path().join("t.lance");
    let table = open_table(uri.to_str().unwrap(), None, None, TableOptions::default())
        .await
        .unwrap();
    for filter in [
        "id = 4242",
        "id BETWEEN 5000 AND 5999",
        "cat = 'c3'",
        "cat IN ('c0', 'c1', 'c2') OR id < 10",
        "cat IS NULL AND k > 2",
        "ts >= 100000 AND ts < 700000",
        "ts >= 100000 AND ts < 700000 AND k = 2",
        "k + 1 = 3",
        "id < 2.5e4",
    ] {
        let sql = format!("SELECT count(*) FROM t WHERE {filter}");
        let want = super::common::ids(
            &ctx,
            &format!("SELECT count(*)::BIGINT FROM t WHERE {filter}"),
        )
        .await[0];
        let got = table.count_rows(&ctx, Some(filter)).await.unwrap();
        assert_eq!(got as i64, want, "{sql}");
    }
    let all = super::common::ids(&ctx, "SELECT count(*)::BIGINT FROM t").await[0];
    assert_eq!(table.count_rows(&ctx, None).await.unwrap() as i64, all);
    assert_eq!(
        table.count_rows(&ctx, Some("  ")).await.unwrap() as i64,
        all
    );
    for (bad, says) in [
        ("nope = 1", "nope"),
        ("id + 1", "not a boolean"),
        ("cat = ", ""),
    ] {
        let e = table
            .count_rows(&ctx, Some(bad))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(says), "{bad}: {e}");
    }
}

/// Zones whose min and max both satisfy a range match whole: only the two
/// boundary zones are read and rechecked.
#[tokio::test]
async fn zone_map_counts_recheck_boundary_zones_only() {
    let (_dir, ctx, oracle) = setup().await;
    // ts = id * 10; zones of 8,192 ids. 100,000 .. 700,000 spans ids
    // 10,000 .. 69,999: zones 1 (boundary) to 8 (boundary).
    let sql = "SELECT count(*) FROM t WHERE ts >= 100000 AND ts < 700000";
    same(&ctx, &oracle, sql).await;
    let plan = explain(&ctx, sql, true).await;
    let rechecked = metric(&plan, "rows_rechecked").expect(&plan);
    assert!(
        rechecked > 0.0 && rechecked <= 2.0 * 8192.0,
        "{rechecked}\n{plan}"
    );
    // With a filter no index answers, every candidate row is rechecked.
    let sql = "SELECT count(*) FROM t WHERE ts >= 100000 AND ts < 700000 AND k = 2";
    same(&ctx, &oracle, sql).await;
    let plan = explain(&ctx, sql, true).await;
    let rechecked = metric(&plan, "rows_rechecked").expect(&plan);
    assert!(rechecked > 6.0 * 8192.0, "{rechecked}\n{plan}");
}

/// Part of the table outside the indexes: the flat part is aggregated as
/// before and added in the final aggregate.
#[tokio::test]
async fn counts_over_indexed_and_unindexed_fragments() {
    let (_dir, ctx, oracle) = setup().await;
    run_sql(
        &ctx,
        "INSERT INTO t SELECT value, value * 10, 'c3', value % 7 FROM generate_series(100000, 100999)",
    )
    .await
    .unwrap();
    run_sql(&ctx, "DELETE FROM t WHERE id % 11 = 0")
        .await
        .unwrap();
    let uri = _dir.path().join("t.lance");
    let table = open_table(uri.to_str().unwrap(), None, None, TableOptions::default())
        .await
        .unwrap();
    oracle.deregister_table("t").unwrap();
    oracle.register_table("t", Arc::new(table)).unwrap();
    for sql in [
        "SELECT count(*) FROM t WHERE cat = 'c3'",
        "SELECT cat, count(*) FROM t WHERE id > 50000 GROUP BY cat ORDER BY cat",
        "SELECT count(*) FROM t WHERE ts > 990000",
    ] {
        let plan = explain(&ctx, sql, false).await;
        assert!(
            plan.contains("IndexCountExec") && plan.contains("FragmentScanExec"),
            "{sql}\n{plan}"
        );
        same(&ctx, &oracle, sql).await;
    }
    // Grouping every row needs the bitmap to cover every fragment.
    let sql = "SELECT cat, count(*) FROM t GROUP BY cat ORDER BY cat";
    assert!(!explain(&ctx, sql, false).await.contains("IndexCountExec"));
    same(&ctx, &oracle, sql).await;
}
