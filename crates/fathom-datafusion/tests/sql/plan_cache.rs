//! `PlanCache`: a cached plan answers exactly what planning afresh does,
//! after every kind of change, and is really used when nothing changed.

use datafusion::prelude::SessionContext;
use fathom_datafusion::sql::{Output, run_sql};
use fathom_datafusion::{PlanCache, TableOptions, new_session, register_dataset};

use super::common::text;

fn render(out: &[Output]) -> String {
    let (_, batches) = out.last().unwrap();
    arrow_cast::pretty::pretty_format_batches(batches)
        .unwrap()
        .to_string()
}

const QUERIES: [&str; 7] = [
    "SELECT count(*) FROM t WHERE id < 500",
    "SELECT k, count(*) FROM t WHERE id >= 100 GROUP BY k ORDER BY k",
    "SELECT id, k, s FROM t WHERE id IN (1, 2, 3, 4000, 9999) ORDER BY id",
    "SELECT count(*), sum(id) FROM t WHERE s = 'v3'",
    "SELECT a.k, count(*) FROM t a JOIN t b ON a.id = b.id + 1 GROUP BY a.k ORDER BY a.k",
    "SELECT id FROM t WHERE k = 2 ORDER BY id DESC LIMIT 3",
    // A full-text search names its table in a string.
    "SELECT id, round(_score, 4) FROM fts('t', 's', 'v3') WHERE k = 3 ORDER BY _score DESC LIMIT 5",
];

/// Runs every query through the cache twice and checks both runs against
/// DataFusion planning afresh; returns (hits, misses) gained.
async fn check(ctx: &SessionContext, cache: &PlanCache, step: &str) -> (u64, u64) {
    let before = cache.stats();
    for q in QUERIES {
        let want = text(ctx, q).await;
        for run in 0..2 {
            let got = render(&cache.sql(ctx, q).await.unwrap());
            assert_eq!(got, want, "{step}, run {run}: {q}");
        }
    }
    let after = cache.stats();
    (after.hits - before.hits, after.misses - before.misses)
}

#[tokio::test]
async fn cached_plans_equal_fresh_plans_after_every_change() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = new_session(Some(dir.path())).unwrap();
    let make = "CREATE TABLE t AS SELECT value AS id, value % 5 AS k,
                  concat('v', CAST(value % 11 AS VARCHAR)) AS s
                FROM generate_series(0, 9999)";
    run_sql(&ctx, make).await.unwrap();
    let cache = PlanCache::new(64);

    let (hits, misses) = check(&ctx, &cache, "fresh").await;
    // The first run of each query plans; the second reuses (at least the
    // queries without dynamic filters: all but the join and the top-k).
    let n = QUERIES.len() as u64;
    assert_eq!(misses, n + (n - hits));
    assert!(hits >= 5, "cached plans were not used: {hits} hits");
    let (hits, _) = check(&ctx, &cache, "unchanged").await;
    assert!(hits >= 10, "{hits} hits with nothing changed");
    // The search's plan is one of those reused.
    let fts = QUERIES[6];
    let before = cache.stats().hits;
    cache.sql(&ctx, fts).await.unwrap();
    assert_eq!(cache.stats().hits, before + 1, "fts(...) was planned again");

    // Every change makes the next run of each query plan again.
    let other = new_session(Some(dir.path())).unwrap();
    let changes: [(&SessionContext, &str); 9] = [
        (
            &ctx,
            "INSERT INTO t VALUES (20000, 2, 'v3'), (20001, 3, 'v3')",
        ),
        (&ctx, "DELETE FROM t WHERE id % 7 = 1"),
        (&ctx, "UPDATE t SET s = 'v3' WHERE id < 40"),
        (&ctx, "CREATE INDEX id_idx ON t USING BTREE (id)"),
        (&ctx, "CREATE INDEX s_idx ON t USING BITMAP (s)"),
        (&ctx, "CREATE INDEX s_fts ON t USING INVERTED (s)"),
        // Another session (as another process would) commits.
        (&other, "INSERT INTO t VALUES (3, 2, 'v3')"),
        (&ctx, "SET datafusion.execution.batch_size = 1000"),
        // The same name, another dataset.
        (&ctx, "DROP TABLE t"),
    ];
    for (session, change) in changes {
        run_sql(session, change).await.unwrap();
        if change.starts_with("DROP") {
            run_sql(
                &ctx,
                "CREATE TABLE t AS SELECT value * 3 AS id, value % 4 AS k, 'v3' AS s
                 FROM generate_series(0, 4999)",
            )
            .await
            .unwrap();
        }
        let before = cache.stats();
        for q in QUERIES {
            let want = text(&ctx, q).await;
            let got = render(&cache.sql(&ctx, q).await.unwrap());
            assert_eq!(got, want, "first run after {change}: {q}");
        }
        assert_eq!(
            cache.stats().hits,
            before.hits,
            "a plan made before `{change}` was used after it"
        );
        check(&ctx, &cache, change).await;
    }
}

#[tokio::test]
async fn what_planning_binds_is_never_cached() {
    let dir = tempfile::tempdir().unwrap();
    let maker = new_session(Some(dir.path())).unwrap();
    run_sql(
        &maker,
        "CREATE TABLE t AS SELECT value AS id FROM generate_series(0, 99)",
    )
    .await
    .unwrap();
    // A session without a data directory: `mem` stays an in-memory table.
    let ctx = new_session(None).unwrap();
    let uri = dir.path().join("t.lance");
    register_dataset(&ctx, "t", uri.to_str().unwrap(), TableOptions::default())
        .await
        .unwrap();
    let cache = PlanCache::new(8);
    // Statements run through the cache as run_sql would.
    cache
        .sql(&ctx, "CREATE TABLE mem (x BIGINT)")
        .await
        .unwrap();
    cache
        .sql(&ctx, "INSERT INTO mem VALUES (1), (2)")
        .await
        .unwrap();
    for q in [
        // Planning folds now() to the moment of planning.
        "SELECT count(*) FROM t WHERE now() > TIMESTAMP '2000-01-01 00:00:00'",
        "SELECT count(*) FROM t WHERE random() < 2.0",
        // A table of another kind changes without a version.
        "SELECT count(*) FROM mem",
        "SELECT count(*) FROM t WHERE id IN (SELECT x FROM mem)",
        "EXPLAIN SELECT count(*) FROM t",
        "SHOW TABLES",
    ] {
        for _ in 0..2 {
            cache.sql(&ctx, q).await.unwrap();
        }
        assert_eq!(cache.stats().hits, 0, "{q} was cached");
        assert_eq!(cache.stats().entries, 0, "{q} was cached");
    }
    // A statement cache of one: the least recently used plan goes.
    let small = PlanCache::new(1);
    small.sql(&ctx, "SELECT count(*) FROM t").await.unwrap();
    small.sql(&ctx, "SELECT max(id) FROM t").await.unwrap();
    small.sql(&ctx, "SELECT max(id) FROM t").await.unwrap();
    assert_eq!(small.stats().entries, 1);
    assert_eq!(small.stats().hits, 1);
    let out = small.sql(&ctx, "SELECT count(*) FROM t").await.unwrap();
    assert_eq!(render(&out), text(&ctx, "SELECT count(*) FROM t").await);
    assert_eq!(small.stats().hits, 1);
}
