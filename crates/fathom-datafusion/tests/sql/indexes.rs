//! The core oracle: for random tables, random indexes, random appends and
//! deletes between index builds, and random predicates on indexed and
//! unindexed columns, every query returns exactly what a full scan of the
//! same version returns (the same data in a MemTable, filtered by
//! DataFusion itself), and so do its counts, grouped or not.

use std::sync::Arc;

use datafusion::datasource::MemTable;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
use fathom_datafusion::{FathomTable, TableOptions, with_fathom_rules};
use fathom_index::IndexKind;
use fathom_table::{Dataset, WriteMode, WriteParams};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};

use super::common::{ids, rows, text};

fn predicate() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        (0i32..20).prop_map(|c| format!("k = {c}")),
        (0i32..20).prop_map(|c| format!("k < {c}")),
        (0i32..20).prop_map(|c| format!("k >= {c}")),
        (0i32..20, 0i32..20).prop_map(|(a, b)| format!("k BETWEEN {} AND {}", a.min(b), a.max(b))),
        (0i32..20, 0i32..20).prop_map(|(a, b)| format!("k IN ({a}, {b})")),
        Just("s IN ('ant', 'dog')".to_string()),
        Just("s = 'cat'".to_string()),
        Just("s <> 'bee'".to_string()),
        Just("s IS NULL".to_string()),
        Just("k IS NULL".to_string()),
        Just("x IS NOT NULL".to_string()),
        (-10i32..10).prop_map(|c| format!("x > {}", c as f64 / 10.0)),
        (-10i32..10).prop_map(|c| format!("x <= {}", c as f64 / 10.0)),
        (0i64..3000).prop_map(|c| format!("id = {c}")),
        // Signed zeros, NaN and infinities: SQL order, not bit patterns.
        prop::sample::select(vec![
            "x = 0.0",
            "x = -0.0",
            "x < 0.0",
            "x <= -0.0",
            "x > -0.0",
            "x >= 0.0",
            "x <> -0.0",
            "x IN (0.0, 1.5)",
            "x IN (-0.0)",
            "x = 'NaN'::DOUBLE",
            "x > 'inf'::DOUBLE",
            "x = '-inf'::DOUBLE",
            "x < 'NaN'::DOUBLE",
            "x >= 'NaN'::DOUBLE",
            "x NOT IN (-0.0, 'NaN'::DOUBLE)",
        ])
        .prop_map(String::from),
        // Long IN lists.
        (0i64..3000, 50usize..400).prop_map(|(a, n)| format!(
            "id IN ({})",
            (0..n as i64)
                .map(|i| (a + i * 37) % 4000)
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )),
        (0i64..3000).prop_map(|c| format!("id < {c}")),
    ];
    leaf.prop_recursive(3, 12, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} AND {b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} OR {b})")),
            inner.prop_map(|a| format!("NOT ({a})")),
        ]
    })
}

#[derive(Debug, Clone, Copy)]
enum Remap {
    No,
    Defer,
    Rewrite,
}

#[derive(Debug, Clone)]
enum Step {
    Append(usize),
    Delete(u64),
    Index(usize, usize),
    Extend(usize),
    /// Compact toward fragments of this many rows; extend the indexes
    /// over the new fragments or leave them uncovered; and keep the
    /// segments answering for the moved rows or not: through a fragment
    /// reuse index, or rewritten with the rows' new addresses.
    Compact(u64, bool, Remap),
    /// Set column 1 + (c % 3) (k, s or x) of about a fifth of the rows
    /// (chosen by the seed) to new random values: the column rewritten in
    /// place, written as overlays, or the rows moved to a new fragment.
    UpdateColumn(usize, u64, Update),
    /// Drop the first index on column c, if any.
    Drop(usize),
}

#[derive(Debug, Clone, Copy)]
enum Update {
    Columns,
    Overlay,
    Rows,
}

fn update_mode() -> impl Strategy<Value = Update> {
    prop::sample::select(vec![Update::Columns, Update::Overlay, Update::Rows])
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (1usize..600).prop_map(Step::Append),
        any::<u64>().prop_map(Step::Delete),
        (0usize..4, 0usize..3).prop_map(|(c, k)| Step::Index(c, k)),
        (0usize..4).prop_map(Step::Extend),
        (
            2u64..900,
            any::<bool>(),
            prop_oneof![Just(Remap::No), Just(Remap::Defer), Just(Remap::Rewrite)]
        )
            .prop_map(|(t, r, d)| Step::Compact(t, r, d)),
        (0usize..3, any::<u64>(), update_mode()).prop_map(|(c, s, u)| Step::UpdateColumn(c, s, u)),
        (0usize..4).prop_map(Step::Drop),
    ]
}

const COLUMNS: [&str; 4] = ["id", "k", "s", "x"];
const KINDS: [IndexKind; 3] = [IndexKind::BTREE, IndexKind::BITMAP, IndexKind::ZONEMAP];

/// 1,000 random rows (ids 0..1000) and two random indexes, so most
/// predicates have one to use.
async fn start(seed: u64, rng: &mut rand::rngs::StdRng, params: &WriteParams) -> Dataset {
    let uri = format!("memory://ix-{seed}-{}", rand::random::<u64>());
    let mut ds = Dataset::write(
        &uri,
        &[rows(0, 1000, rng)],
        WriteMode::Create,
        params.clone(),
    )
    .await
    .unwrap();
    for _ in 0..2 {
        let (c, k) = (rng.random_range(0..4), rng.random_range(0..3));
        let name = format!("{}_{}", COLUMNS[c], KINDS[k]);
        if !ds.manifest().indices.iter().any(|i| i.name == name) {
            ds = fathom_index::create_index(&ds, &name, COLUMNS[c], KINDS[k])
                .await
                .unwrap();
        }
    }
    ds
}

async fn build(seed: u64, steps: &[Step]) -> Dataset {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let params = WriteParams {
        // One seed in four: many tiny fragments (1 to 5 rows each).
        max_rows_per_file: if seed.is_multiple_of(4) {
            1 + (seed / 4 % 5) as usize
        } else {
            300
        },
        // Stable row ids: bitmaps then store row ids, B-trees addresses.
        enable_stable_row_ids: seed % 2 == 1,
        ..Default::default()
    };
    let mut next = 1000i64;
    let mut ds = start(seed, &mut rng, &params).await;
    for s in steps {
        ds = apply_step(ds, s, &mut rng, &params, &mut next).await;
    }
    ds
}

/// The name of the first index on column `c`, if any.
fn index_on(ds: &Dataset, c: usize) -> Option<String> {
    ds.manifest()
        .indices
        .iter()
        .find(|i| i.name.starts_with(COLUMNS[c]))
        .map(|i| i.name.clone())
}

/// Applies one mutation to `ds` (appended rows are numbered from `next`).
async fn apply_step(
    ds: Dataset,
    s: &Step,
    rng: &mut rand::rngs::StdRng,
    params: &WriteParams,
    next: &mut i64,
) -> Dataset {
    {
        let ds = match s {
            Step::Append(n) => {
                let b = rows(*next, *n, rng);
                *next += *n as i64;
                ds.append(&[b], params).await.unwrap()
            }
            Step::Delete(seed) => {
                let mut r = rand::rngs::StdRng::seed_from_u64(*seed);
                let addrs: Vec<u64> = ds
                    .fragments()
                    .iter()
                    .flat_map(|f| (0..f.physical_rows).map(move |o| (f.id << 32) | o))
                    .filter(|_| r.random_bool(0.1))
                    .collect();
                ds.delete_rows(&addrs).await.unwrap()
            }
            Step::Index(c, k) => {
                let name = format!("{}_{}", COLUMNS[*c], KINDS[*k]);
                if ds.manifest().indices.iter().any(|i| i.name == name) {
                    fathom_index::rebuild_index(&ds, &name).await.unwrap()
                } else {
                    fathom_index::create_index(&ds, &name, COLUMNS[*c], KINDS[*k])
                        .await
                        .unwrap()
                }
            }
            Step::Extend(c) => match index_on(&ds, *c) {
                Some(name) => fathom_index::extend_index(&ds, &name).await.unwrap(),
                None => ds,
            },
            Step::Compact(target, reindex, remap) => {
                let opts = fathom_table::CompactionOptions {
                    target_rows_per_fragment: *target,
                    defer_index_remap: matches!(remap, Remap::Defer),
                    remap_indexes: matches!(remap, Remap::Rewrite),
                    ..Default::default()
                };
                fathom_index::compact(&ds, &opts, *reindex, None)
                    .await
                    .unwrap()
                    .0
            }
            Step::UpdateColumn(c, seed, mode) => {
                let mut r = rand::rngs::StdRng::seed_from_u64(*seed);
                let live = ds
                    .scan()
                    .project(&["_rowaddr"])
                    .unwrap()
                    .collect()
                    .await
                    .unwrap();
                let addrs: Vec<u64> = live
                    .column(0)
                    .as_any()
                    .downcast_ref::<arrow_array::UInt64Array>()
                    .unwrap()
                    .values()
                    .iter()
                    .copied()
                    .filter(|_| r.random_bool(0.2))
                    .collect();
                let col = 1 + c % 3;
                let fresh = rows(0, addrs.len(), &mut r).project(&[col]).unwrap();
                match mode {
                    Update::Overlay => {
                        ds.update_overlay(&[COLUMNS[col]], &addrs, &fresh, None)
                            .await
                    }
                    Update::Columns => {
                        ds.update_columns(&[COLUMNS[col]], &addrs, &fresh, None)
                            .await
                    }
                    Update::Rows => ds.update_rows_with(&[COLUMNS[col]], &addrs, &fresh).await,
                }
                .unwrap()
            }
            Step::Drop(c) => match index_on(&ds, *c) {
                Some(name) => fathom_index::drop_index(&ds, &name).await.unwrap(),
                None => ds,
            },
        };
        if std::env::var("FATHOM_DEBUG_STEPS").is_ok() {
            eprintln!(
                "after {s:?}: frags {:?}",
                ds.fragments()
                    .iter()
                    .map(|f| (f.id, f.physical_rows))
                    .collect::<Vec<_>>()
            );
            for i in &ds.manifest().indices {
                eprintln!("  {} {:?} {:?}", i.name, i.uuid, i.fragment_bitmap);
            }
        }
        ds
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]
    #[test]
    fn indexed_queries_equal_a_full_scan(seed in 0u64..1_000_000, steps in prop::collection::vec(step(), 1..8), preds in prop::collection::vec(predicate(), 1..5)) {
        check(seed, steps, preds);
    }
}

/// Found by CI (seed 94159): a grouped count answered from a bitmap index
/// after a compaction left the new fragments unindexed and an extend
/// covered them.
#[test]
fn grouped_count_after_compact_and_extend() {
    check(
        94159,
        vec![
            Step::Delete(613669345857094324),
            Step::Compact(2, false, Remap::No),
            Step::Extend(1),
        ],
        vec!["(((k = 2 OR id < 1765) OR k < 0) AND x = 'NaN'::DOUBLE)".to_string()],
    );
}

fn check(seed: u64, steps: Vec<Step>, preds: Vec<String>) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let ds = build(seed, &steps).await;
        verify(ds, &preds, &format!("{steps:?}"), true).await;
    });
}

/// Every predicate in `preds` over `ds` (through its indexes) against the
/// same rows in a MemTable: the rows, `count(*)`, and, when `thorough`,
/// `count_rows`, a LIMIT and grouped counts. `after` names the history.
async fn verify(ds: Dataset, preds: &[String], after: &str, thorough: bool) {
    {
        let live = ds.scan().collect().await.unwrap();
        let config = SessionConfig::new()
            .with_target_partitions(2)
            .with_batch_size(100);
        // Counts answered from index row sets (IndexCountRule) must equal the scan's.
        let ctx = SessionContext::new_with_state(
            with_fathom_rules(
                SessionStateBuilder::new()
                    .with_config(config)
                    .with_default_features(),
            )
            .build(),
        );
        let options = TableOptions {
            min_rows_per_partition: 1,
            ..Default::default()
        };
        let table = Arc::new(FathomTable::new(ds, options));
        ctx.register_table("t", table.clone()).unwrap();
        ctx.register_table(
            "m",
            Arc::new(MemTable::try_new(live.schema(), vec![vec![live]]).unwrap()),
        )
        .unwrap();
        for pred in preds {
            if std::env::var("FATHOM_DEBUG_PLANS").is_ok() {
                let plan = ctx
                    .sql(&format!("EXPLAIN SELECT id FROM t WHERE {pred}"))
                    .await
                    .unwrap()
                    .collect()
                    .await
                    .unwrap();
                let text = arrow_cast::pretty::pretty_format_batches(&plan)
                    .unwrap()
                    .to_string();
                eprintln!(
                    "PLAN index={} union={}",
                    text.contains("ScalarIndexExec"),
                    text.contains("UnionExec")
                );
            }
            let got = ids(&ctx, &format!("SELECT id FROM t WHERE {pred} ORDER BY id")).await;
            let want = ids(&ctx, &format!("SELECT id FROM m WHERE {pred} ORDER BY id")).await;
            assert_eq!(got, want, "WHERE {pred} after {after}");
            let got = ids(
                &ctx,
                &format!("SELECT count(*)::BIGINT FROM t WHERE {pred}"),
            )
            .await;
            assert_eq!(
                got,
                vec![want.len() as i64],
                "count(*) WHERE {pred} after {after}"
            );
            if !thorough {
                continue;
            }
            let counted = table.count_rows(&ctx, Some(pred)).await.unwrap();
            assert_eq!(counted, want.len() as u64, "count_rows({pred})");
            let limited = ids(&ctx, &format!("SELECT id FROM t WHERE {pred} LIMIT 3")).await;
            assert_eq!(limited.len(), want.len().min(3));
            // Grouped counts (bitmap-indexed group columns use their bitmaps).
            for g in ["s", "k"] {
                let q = |t: &str| {
                    format!(
                        "SELECT {g}, count(*) AS n FROM {t} WHERE {pred} GROUP BY {g} ORDER BY {g}"
                    )
                };
                assert_eq!(
                    text(&ctx, &q("t")).await,
                    text(&ctx, &q("m")).await,
                    "{}",
                    q("t")
                );
            }
        }
        for g in ["s", "k"].iter().filter(|_| thorough) {
            let q =
                |t: &str| format!("SELECT {g}, count(1) AS n FROM {t} GROUP BY {g} ORDER BY {g}");
            assert_eq!(
                text(&ctx, &q("t")).await,
                text(&ctx, &q("m")).await,
                "{}",
                q("t")
            );
        }
    }
}

/// Queries run through a `PlanCache` in a session that lives through a
/// whole history of changes.
struct CachedQueries {
    ctx: SessionContext,
    cache: fathom_datafusion::PlanCache,
    preds: Vec<String>,
}

impl CachedQueries {
    /// Each predicate's rows and count, twice through the cache, equal the
    /// live rows of `ds` (the latest version) filtered in a MemTable.
    async fn check(&self, ds: &Dataset, after: &str) {
        let live = ds.scan().collect().await.unwrap();
        let oracle = SessionContext::new();
        oracle
            .register_table(
                "m",
                Arc::new(MemTable::try_new(live.schema(), vec![vec![live]]).unwrap()),
            )
            .unwrap();
        for pred in &self.preds {
            let want = ids(
                &oracle,
                &format!("SELECT id FROM m WHERE {pred} ORDER BY id"),
            )
            .await;
            for run in 0..2 {
                for (q, want) in [
                    (
                        format!("SELECT id FROM t WHERE {pred} ORDER BY id"),
                        want.clone(),
                    ),
                    (
                        format!("SELECT count(*)::BIGINT FROM t WHERE {pred}"),
                        vec![want.len() as i64],
                    ),
                ] {
                    let out = self.cache.sql(&self.ctx, &q).await.unwrap();
                    let got: Vec<i64> = out[0]
                        .1
                        .iter()
                        .flat_map(|b| {
                            b.column(0)
                                .as_any()
                                .downcast_ref::<arrow_array::Int64Array>()
                                .unwrap()
                                .values()
                                .to_vec()
                        })
                        .collect();
                    assert_eq!(got, want, "cached {q} (run {run}) after {after}");
                }
            }
        }
    }
}

/// Every row of a version (all columns, row ids), sorted, as text.
async fn contents(ds: &Dataset) -> Vec<String> {
    let b = ds.scan().with_row_id().collect().await.unwrap();
    let mut out: Vec<String> = arrow_cast::pretty::pretty_format_batches(&[b])
        .unwrap()
        .to_string()
        .lines()
        .filter(|l| l.starts_with('|'))
        .skip(1)
        .map(String::from)
        .collect();
    out.sort();
    out
}

/// The long run: mutation after mutation of every kind (appends, deletes,
/// updates by each strategy, compactions with each index strategy, index
/// creation, extension, rebuild and drop), with and without stable row
/// ids, four random predicates checked after each mutation against a full
/// scan of the same version, and a random earlier version re-read and
/// compared with what it held when it was current.
///
/// `FATHOM_CHANGE_STEPS` mutations (default 2,500: 10,000 (mutation,
/// query) steps) in 10 sequences; `FATHOM_CHANGE_SEED` varies them. The
/// 1,000,000-step run: `FATHOM_CHANGE_STEPS=250000 cargo test --release -p
/// fathom-datafusion --test sql -- long_run --nocapture` (README).
#[test]
fn long_run_of_changes_equals_full_scans() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let env = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let total = env("FATHOM_CHANGE_STEPS", 2500);
    let seed = env("FATHOM_CHANGE_SEED", 1);
    let sequences = 10u64.min(total.max(1));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    for q in 0..sequences {
        let seq_seed = seed.wrapping_mul(1_000_003).wrapping_add(q);
        let steps = total / sequences + u64::from(q < total % sequences);
        rt.block_on(async {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seq_seed);
            let mut bytes = [0u8; 32];
            bytes[..8].copy_from_slice(&seq_seed.to_le_bytes());
            let mut runner = TestRunner::new_with_rng(
                Config::default(),
                TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
            );
            let params = WriteParams {
                max_rows_per_file: if q % 3 == 0 { 40 } else { 300 },
                enable_stable_row_ids: q % 2 == 1,
                ..Default::default()
            };
            let mut next = 1000i64;
            let mut ds = start(seq_seed, &mut rng, &params).await;
            let mut history = vec![(ds.version(), contents(&ds).await)];
            // One session for the whole sequence, its table following the
            // latest version, its queries through a plan cache: two fixed
            // predicates, each run twice after every third mutation (the
            // first run plans again, the second reuses the plan).
            let cached = CachedQueries {
                ctx: fathom_datafusion::new_session(None).unwrap(),
                cache: fathom_datafusion::PlanCache::new(16),
                preds: (0..2)
                    .map(|_| predicate().new_tree(&mut runner).unwrap().current())
                    .collect(),
            };
            cached
                .ctx
                .register_table(
                    "t",
                    Arc::new(FathomTable::new(ds.clone(), TableOptions::default())),
                )
                .unwrap();
            let mut recent: Vec<Step> = vec![];
            for i in 0..steps {
                let mut step = step().new_tree(&mut runner).unwrap().current();
                // Keep the table near its starting size: appends of at
                // most 200 rows against deletes of a tenth.
                if let Step::Append(n) = &mut step {
                    *n = 1 + *n % 200;
                }
                ds = apply_step(ds, &step, &mut rng, &params, &mut next).await;
                recent.push(step);
                if recent.len() > 12 {
                    recent.remove(0);
                }
                let preds: Vec<String> = (0..4)
                    .map(|_| predicate().new_tree(&mut runner).unwrap().current())
                    .collect();
                let after =
                    format!("step {i} of sequence {q} (seed {seq_seed}), the last ones {recent:?}");
                verify(ds.clone(), &preds, &after, false).await;
                if i % 3 == 2 {
                    cached.check(&ds, &after).await;
                }
                history.push((ds.version(), contents(&ds).await));
                let (v, want) = &history[rng.random_range(0..history.len())];
                let old = ds.checkout(*v).await.unwrap();
                assert_eq!(
                    &contents(&old).await,
                    want,
                    "version {v} re-read after {after}"
                );
            }
            let stats = cached.cache.stats();
            assert!(
                stats.hits >= steps / 3,
                "sequence {q}: {} cached plans used in {steps} steps",
                stats.hits
            );
        });
    }
    eprintln!(
        "long run: {total} mutations, {} queries checked, in {:.1} s",
        total * 4,
        started.elapsed().as_secs_f64()
    );
}

/// `OPTIMIZE` from SQL: what it did, the rows unchanged, the index used
/// again afterwards; bad options are errors that name them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optimize_statement() {
    use fathom_datafusion::sql::run_sql;
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let uri = format!("memory://optimize-{}", rand::random::<u64>());
    let params = WriteParams {
        max_rows_per_file: 50,
        ..Default::default()
    };
    let ds = Dataset::write(&uri, &[rows(0, 1000, &mut rng)], WriteMode::Create, params)
        .await
        .unwrap();
    let ds = fathom_index::create_index(&ds, "id_idx", "id", IndexKind::BTREE)
        .await
        .unwrap();
    let ctx = fathom_datafusion::new_session(None).unwrap();
    ctx.register_table("t", Arc::new(FathomTable::new(ds, TableOptions::default())))
        .unwrap();
    run_sql(&ctx, "DELETE FROM t WHERE id % 3 = 0")
        .await
        .unwrap();
    let before = ids(&ctx, "SELECT id FROM t ORDER BY id").await;
    for bad in [
        "OPTIMIZE t WITH (target_rows = 10)",
        "OPTIMIZE t WITH (reindex = maybe)",
        "COMPACT TABLE t WITH (target_rows_per_fragment = -1)",
    ] {
        let e = run_sql(&ctx, bad).await.unwrap_err().to_string();
        let key = bad.split('(').nth(1).unwrap().split(' ').next().unwrap();
        assert!(e.contains(key), "{bad}: {e}");
    }
    let out = run_sql(&ctx, "OPTIMIZE t WITH (target_rows_per_fragment = 400);")
        .await
        .unwrap();
    let b = &out[0].1[0];
    let col = |n: &str| {
        b.column_by_name(n)
            .unwrap()
            .as_any()
            .downcast_ref::<arrow_array::UInt64Array>()
            .unwrap()
            .value(0)
    };
    assert_eq!(col("fragments_removed"), 20);
    // 667 live rows: one bin (the rest after 400 rows is under 400),
    // written as fragments of at most 400 rows.
    assert_eq!(col("fragments_added"), 2);
    assert_eq!(col("rows_rewritten"), before.len() as u64);
    assert_eq!(col("deleted_rows_dropped"), 1000 - before.len() as u64);
    assert_eq!(ids(&ctx, "SELECT id FROM t ORDER BY id").await, before);
    let plan = text(&ctx, "EXPLAIN SELECT id FROM t WHERE id = 500").await;
    assert!(plan.contains("ScalarIndexExec"), "{plan}");
    assert!(
        !plan.contains("UnionExec"),
        "the new fragments are indexed: {plan}"
    );
    assert_eq!(
        ids(&ctx, "SELECT id FROM t WHERE id = 500").await,
        vec![500]
    );
    // Nothing left to do: no commit, zeros.
    let out = run_sql(&ctx, "COMPACT t WITH (target_rows_per_fragment = 400)")
        .await
        .unwrap();
    let b = &out[0].1[0];
    assert_eq!(
        b.column_by_name("fragments_removed")
            .unwrap()
            .as_any()
            .downcast_ref::<arrow_array::UInt64Array>()
            .unwrap()
            .value(0),
        0
    );
}
