//! Each index kind against brute force: for random columns (with nulls)
//! and random queries, an Exact result equals the matching rows and an
//! AtMost result contains them.

use std::ops::Bound;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use arrow_array::{ArrayRef, Float64Array, Int32Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use fathom_index::segment::{search, usable};
use fathom_index::{Exactness, IndexCache, IndexKind, ScalarQuery, SearchResult, create_index};
use fathom_table::RowSet;
use fathom_table::{CompactionOptions, Dataset, WriteMode, WriteParams};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use roaring::RoaringTreemap;

fn table(seed: u64, n: usize) -> RecordBatch {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let words = ["a", "bb", "c", "dd", "e", "ff", ""];
    RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("i", DataType::Int32, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("f", DataType::Float64, true),
        ])),
        vec![
            Arc::new(Int32Array::from_iter((0..n).map(|_| {
                rng.random_bool(0.9).then(|| rng.random_range(-50..50))
            }))),
            Arc::new(StringArray::from_iter((0..n).map(|_| {
                rng.random_bool(0.9).then(|| words[rng.random_range(0..7)])
            }))),
            Arc::new(Float64Array::from_iter((0..n).map(|_| {
                rng.random_bool(0.9).then(|| {
                    if rng.random_bool(0.2) {
                        SPECIAL[rng.random_range(0..SPECIAL.len())]
                    } else {
                        rng.random_range(-1.0..1.0)
                    }
                })
            }))),
        ],
    )
    .unwrap()
}

/// Floats where total order and SQL order part: signed zeros, NaN, infinities.
const SPECIAL: [f64; 6] = [
    0.0,
    -0.0,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    -f64::NAN,
];

fn value(col: &str, k: i32) -> ArrayRef {
    match col {
        "i" => Arc::new(Int32Array::from(vec![k])),
        "s" => Arc::new(StringArray::from(vec![
            ["a", "bb", "c", "dd", "e", "ff", ""][(k.rem_euclid(7)) as usize],
        ])),
        _ if k % 5 == 0 => Arc::new(Float64Array::from(vec![
            SPECIAL[(k / 5).rem_euclid(6) as usize],
        ])),
        _ => Arc::new(Float64Array::from(vec![k as f64 / 50.0])),
    }
}

fn query(col: &str, kind: u8, a: i32, b: i32) -> ScalarQuery {
    let (lo, hi) = (a.min(b), a.max(b));
    match kind % 6 {
        0 => ScalarQuery::Equals(value(col, a)),
        1 => ScalarQuery::Range {
            lower: Bound::Included(value(col, lo)),
            upper: Bound::Excluded(value(col, hi)),
        },
        2 => ScalarQuery::Range {
            lower: Bound::Unbounded,
            upper: Bound::Included(value(col, hi)),
        },
        3 => ScalarQuery::Range {
            lower: Bound::Excluded(value(col, lo)),
            upper: Bound::Unbounded,
        },
        4 => {
            // A long list with repeats, in no order.
            let parts: Vec<ArrayRef> = (0..40)
                .map(|i| value(col, if i % 2 == 0 { a + i * 7 } else { b - i * 3 }))
                .collect();
            let refs: Vec<&dyn arrow_array::Array> = parts.iter().map(|p| p.as_ref()).collect();
            ScalarQuery::IsIn(arrow_select::concat::concat(&refs).unwrap())
        }
        _ => ScalarQuery::IsNull,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 30, .. ProptestConfig::default() })]
    #[test]
    fn indexes_match_brute_force(seed in 0u64..1000, stable in any::<bool>(), col in prop::sample::select(vec!["i", "s", "f"]), kind in prop::sample::select(vec![IndexKind::BTREE, IndexKind::BITMAP, IndexKind::ZONEMAP]), queries in prop::collection::vec((any::<u8>(), -60i32..60, -60i32..60), 1..8), defer in any::<bool>()) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let uri = format!("memory://idx-{seed}-{}", rand::random::<u64>());
            // Several fragments, pages and zones: 20,000 rows in files of 7,000.
            let params = WriteParams { max_rows_per_file: 7000, enable_stable_row_ids: stable, ..Default::default() };
            let ds = Dataset::write(&uri, &[table(seed, 20_000)], WriteMode::Create, params).await.unwrap();
            let ds = ds.delete_rows(&(0..20_000u64).step_by(13).map(|i| ((i / 7000) << 32) | (i % 7000)).collect::<Vec<_>>()).await.unwrap();
            let ds = create_index(&ds, "idx", col, kind).await.unwrap();
            // A compaction that defers the segment's remap to a fragment
            // reuse index (ignored with stable row ids).
            let ds = if defer {
                let opts = CompactionOptions { defer_index_remap: true, ..Default::default() };
                ds.compact_files(&opts, None).await.unwrap().0
            } else {
                ds
            };
            let meta = ds.manifest().indices.iter().find(|i| i.name == "idx").unwrap().clone();
            assert_eq!(usable(&meta), Ok(kind));
            let all = ds.scan().project(&[col, "_rowaddr"]).unwrap().collect().await.unwrap();
            let addrs = all.column(1).as_primitive::<UInt64Type>();
            let cache = IndexCache::new(1 << 20);
            for (qk, a, b) in queries {
                let q = query(col, qk, a, b);
                let m = q.matches(all.column(0).as_ref()).unwrap();
                // A segment answers for the fragments it covers (with stable
                // row ids, a zone map stops covering the ones compacted).
                let covered = meta.fragment_bitmap.as_ref().unwrap();
                let want: RoaringTreemap = (0..m.len()).filter(|i| m.value(*i)).map(|i| addrs.value(i)).filter(|a| covered.contains((a >> 32) as u32)).collect();
                let got = search(&ds, &meta, kind, &cache, &q, None).await.unwrap();
                // Never weaker than the kind promised the planner.
                assert!(got.exactness.satisfies(kind.exactness(&q)), "{kind} {q:?}: {:?}", got.exactness);
                let g = got.rows.as_treemap();
                match got.exactness {
                    Exactness::Exact => assert_eq!(g, &want, "{kind} {q:?}"),
                    Exactness::AtMost => assert!(want.is_subset(g), "{kind} {q:?} missed rows: {:?} of {} got {}", (&want - g).iter().take(5).collect::<Vec<_>>(), want.len(), g.len()),
                    Exactness::AtLeast => panic!("{kind} returned a subset"),
                }
                // An allow-list restricts the result to its rows.
                let allow: RowSet = got.rows.iter().step_by(3).collect();
                let restricted = search(&ds, &meta, kind, &cache, &q, Some(&allow)).await.unwrap();
                assert_eq!(restricted.rows, allow, "{kind} {q:?} allow-list");
            }
            // Through the reuse index, a kind keyed by row is remapped
            // once, when first searched, and kept in the cache.
            // (A cache too small for it, like the one above, remaps again.)
            if let Some(fr) = fathom_index::segment::frag_reuse(&ds, &meta) {
                let key = fathom_index::segment::remapped_key(&meta, fr);
                let roomy = IndexCache::new(1 << 30);
                search(&ds, &meta, kind, &roomy, &ScalarQuery::IsNull, None).await.unwrap();
                assert_eq!(roomy.contains(&key), kind != IndexKind::ZONEMAP, "{kind}");
            } else {
                assert!(!defer || stable, "no reuse index after a deferred remap");
            }
        });
    }
}

#[test]
fn btree_loads_only_the_pages_it_needs() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let n = 100_000;
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("i", DataType::Int32, false)])),
            vec![Arc::new(Int32Array::from_iter_values(0..n))],
        )
        .unwrap();
        let ds = Dataset::write(
            "memory://btree-pages",
            &[batch],
            WriteMode::Create,
            WriteParams::default(),
        )
        .await
        .unwrap();
        let ds = create_index(&ds, "i_idx", "i", IndexKind::BTREE)
            .await
            .unwrap();
        let meta = ds.manifest().indices[0].clone();
        let cache = IndexCache::new(64 << 20);
        let got = search(
            &ds,
            &meta,
            IndexKind::BTREE,
            &cache,
            &ScalarQuery::Equals(Arc::new(Int32Array::from(vec![54_321]))),
            None,
        )
        .await
        .unwrap();
        assert_eq!(
            got,
            SearchResult::exact(roaring::RoaringTreemap::from_iter([54_321u64]))
        );
        // The lookup and one page of 4,096 values: far less than the 25 pages.
        let cached = cache.size();
        assert!(
            cached < 200_000,
            "cache holds {cached} bytes after one point lookup"
        );
    });
}
