//! The flat path against an oracle: random predicates over a
//! multi-fragment table with deletions (fragments of 97 rows, and of 3
//! rows and 1 row: hundreds of tiny fragments), scanned in parallel, must
//! return exactly what DataFusion returns over the same rows in a MemTable.

use std::sync::Arc;

use arrow_array::RecordBatch;
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;
use fathom_datafusion::{FathomTable, TableOptions};
use fathom_table::{Dataset, WriteMode, WriteParams};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};

use super::common::{ids, rows, text};

fn data(n: usize, seed: u64) -> RecordBatch {
    rows(0, n, &mut rand::rngs::StdRng::seed_from_u64(seed))
}

fn predicate() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        (0i32..20).prop_map(|c| format!("k = {c}")),
        (0i32..20).prop_map(|c| format!("k < {c}")),
        (0i32..20, 0i32..20).prop_map(|(a, b)| format!("k BETWEEN {} AND {}", a.min(b), a.max(b))),
        Just("s IN ('ant', 'dog')".to_string()),
        Just("s = 'cat'".to_string()),
        Just("s IS NULL".to_string()),
        Just("k IS NULL".to_string()),
        (-10i32..10).prop_map(|c| format!("x > {}", c as f64 / 10.0)),
        (0i64..1000).prop_map(|c| format!("id >= {c}")),
    ];
    leaf.prop_recursive(3, 12, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} AND {b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} OR {b})")),
            inner.prop_map(|a| format!("NOT ({a})")),
        ]
    })
}

async fn setup(seed: u64) -> SessionContext {
    let uri = format!("memory://flat-{seed}-{}", rand::random::<u64>());
    let params = WriteParams {
        // Seeds 2 and 3: many tiny fragments (3 rows, 1 row).
        max_rows_per_file: match seed {
            2 => 3,
            3 => 1,
            _ => 97,
        },
        ..Default::default()
    };
    let ds = Dataset::write(&uri, &[data(1000, seed)], WriteMode::Create, params)
        .await
        .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dels: Vec<u64> = ds
        .fragments()
        .iter()
        .flat_map(|f| (0..f.physical_rows).map(move |o| (f.id << 32) | o))
        .filter(|_| rng.random_bool(0.2))
        .collect();
    // Also drop one fragment entirely.
    let whole: Vec<u64> = (0..ds.fragments()[3].physical_rows)
        .map(|o| (ds.fragments()[3].id << 32) | o)
        .collect();
    let ds = ds.delete_rows(&[dels, whole].concat()).await.unwrap();
    let live = ds.scan().collect().await.unwrap();
    let config = datafusion::prelude::SessionConfig::new()
        .with_target_partitions(3)
        .with_batch_size(64);
    let ctx = SessionContext::new_with_config(config);
    ctx.register_table("t", Arc::new(FathomTable::new(ds, TableOptions::default())))
        .unwrap();
    ctx.register_table(
        "m",
        Arc::new(MemTable::try_new(live.schema(), vec![vec![live]]).unwrap()),
    )
    .unwrap();
    ctx
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, .. ProptestConfig::default() })]
    #[test]
    fn filters_match_a_full_scan_oracle(seed in 0u64..4, pred in predicate()) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async {
            let ctx = setup(seed).await;
            let got = ids(&ctx, &format!("SELECT id FROM t WHERE {pred} ORDER BY id")).await;
            let want = ids(&ctx, &format!("SELECT id FROM m WHERE {pred} ORDER BY id")).await;
            assert_eq!(got, want, "{pred}");
            let got = ids(&ctx, &format!("SELECT count(*)::BIGINT FROM t WHERE {pred}")).await;
            assert_eq!(got, vec![want.len() as i64]);
            let limited = ids(&ctx, &format!("SELECT id FROM t WHERE {pred} LIMIT 5")).await;
            assert_eq!(limited.len(), want.len().min(5));
            assert!(limited.iter().all(|i| want.contains(i)));
        });
    }
}

#[test]
fn parallel_scan_covers_every_live_row_once() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let ctx = setup(9).await;
        let got = ids(&ctx, "SELECT id FROM t ORDER BY id").await;
        let want = ids(&ctx, "SELECT id FROM m ORDER BY id").await;
        assert_eq!(got, want);
        let plan = ctx
            .sql("EXPLAIN SELECT id FROM t")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let text = arrow_cast::pretty::pretty_format_batches(&plan)
            .unwrap()
            .to_string();
        assert!(
            text.contains("FragmentScanExec: version=2, fragments=10"),
            "{text}"
        );
        // Zone statistics prune whole zones (here: fragments) the filter rules out.
        let plan = ctx
            .sql("EXPLAIN ANALYZE SELECT k FROM t WHERE id >= 900")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let text = arrow_cast::pretty::pretty_format_batches(&plan)
            .unwrap()
            .to_string();
        let pruned: usize = text
            .split("rows_pruned_by_zone_stats=")
            .nth(1)
            .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(pruned > 500, "{text}");
        assert_eq!(
            ids(&ctx, "SELECT id FROM t WHERE id >= 900 ORDER BY id").await,
            ids(&ctx, "SELECT id FROM m WHERE id >= 900 ORDER BY id").await
        );
        // count(*) without a filter comes from exact statistics.
        assert_eq!(
            ids(&ctx, "SELECT count(*)::BIGINT FROM t").await,
            vec![want.len() as i64]
        );
    });
}

/// EXPLAIN ANALYZE of an UPDATE or DELETE runs it and says where its time
/// went: finding the rows, and writing them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_analyze_dml_splits_find_and_write() {
    let ctx = setup(5).await;
    let before = ids(&ctx, "SELECT id FROM t WHERE id < 100 ORDER BY id").await;
    for (sql, node) in [
        ("UPDATE t SET k = 7 WHERE id < 100", "FathomUpdateExec"),
        ("DELETE FROM t WHERE id < 50", "FathomDeleteExec"),
    ] {
        let text = text(&ctx, &format!("EXPLAIN ANALYZE {sql}")).await;
        let line = text
            .lines()
            .find(|l| l.contains(node))
            .unwrap_or_else(|| panic!("{text}"));
        assert!(
            line.contains("find_time=") && line.contains("write_time="),
            "{line}"
        );
    }
    let k7 = ids(
        &ctx,
        "SELECT id FROM t WHERE k = 7 AND id < 100 ORDER BY id",
    )
    .await;
    let want: Vec<i64> = before.into_iter().filter(|i| *i >= 50).collect();
    assert_eq!(k7, want);
}
