//! A vector segment's search does not depend on how its probed partitions
//! are split over threads, and IVF_FLAT with every partition probed is
//! brute force, allow-list included.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, UInt64Type};
use arrow_array::{ArrayRef, FixedSizeListArray, Float32Array, Int32Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use fathom_index::vector::{Metric, SearchOptions, VectorKind, VectorParams, VectorSegment};
use fathom_index::{IndexCache, create_vector_index};
use fathom_table::{Dataset, WriteMode, WriteParams};
use rand::{Rng, SeedableRng};

const DIM: usize = 16;

/// `n` vectors around 12 random centres.
fn table(seed: u64, n: usize) -> RecordBatch {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let centres: Vec<Vec<f32>> = (0..12)
        .map(|_| (0..DIM).map(|_| rng.random_range(-10.0..10.0)).collect())
        .collect();
    let mut values = Vec::with_capacity(n * DIM);
    for _ in 0..n {
        let c = &centres[rng.random_range(0..centres.len())];
        values.extend(c.iter().map(|x| x + rng.random_range(-1.5f32..1.5)));
    }
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    let emb = FixedSizeListArray::new(
        item.clone(),
        DIM as i32,
        Arc::new(Float32Array::from(values)),
        None,
    );
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int32, false),
        Field::new("emb", DataType::FixedSizeList(item, DIM as i32), true),
    ]));
    let cols: Vec<ArrayRef> = vec![
        Arc::new(Int32Array::from_iter_values(0..n as i32)),
        Arc::new(emb),
    ];
    RecordBatch::try_new(schema, cols).unwrap()
}

#[test]
fn search_is_the_same_on_any_number_of_threads_with_or_without_skipping() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let uri = format!("memory://vec-split-{}", rand::random::<u64>());
        let params = WriteParams {
            max_rows_per_file: 2500,
            ..Default::default()
        };
        let batch = table(7, 6000);
        let ds = Dataset::write(&uri, &[batch], WriteMode::Create, params)
            .await
            .unwrap();
        let all = ds
            .scan()
            .project(&["emb", "_rowaddr"])
            .unwrap()
            .collect()
            .await
            .unwrap();
        let vectors = all.column(0).as_fixed_size_list();
        let addrs = all.column(1).as_primitive::<UInt64Type>();
        let row = |i: usize| -> Vec<f32> {
            vectors
                .value(i)
                .as_primitive::<Float32Type>()
                .values()
                .to_vec()
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        for (kind, metric) in [
            (VectorKind::IvfFlat, Metric::L2),
            (VectorKind::IvfSq, Metric::L2),
            (VectorKind::IvfPq, Metric::L2),
            (VectorKind::IvfHnswSq, Metric::L2),
            (VectorKind::IvfFlat, Metric::Cosine),
            (VectorKind::IvfSq, Metric::Cosine),
            (VectorKind::IvfPq, Metric::Cosine),
            (VectorKind::IvfPq, Metric::Dot),
        ] {
            let mut p = VectorParams::new(kind);
            p.metric = metric;
            p.num_partitions = Some(8);
            p.num_sub_vectors = Some(4);
            let name = format!("v{kind:?}{metric:?}");
            let ds2 = create_vector_index(&ds, &name, "emb", p, None)
                .await
                .unwrap();
            let meta = ds2.manifest().indices.last().unwrap().clone();
            let cache = IndexCache::new(64 << 20);
            let seg = VectorSegment::load(ds2.store(), ds2.root(), &meta, &cache)
                .await
                .unwrap();
            let mut skipped = 0;
            for q in 0..6 {
                let query = row(rng.random_range(0..all.num_rows()));
                let query: Vec<f32> = query.iter().map(|x| x + 0.3 * q as f32).collect();
                let k = [1, 10, 37][q % 3];
                // Every third row is not allowed on odd queries.
                let allow = |id: u64| q.is_multiple_of(2) || !id.is_multiple_of(3);
                // One thread, every probed partition scored: the reference.
                let whole = SearchOptions {
                    threads: Some(1),
                    skip: false,
                };
                let one = seg
                    .search_with(&query, k, 8, 40, &cache, &allow, whole)
                    .await
                    .unwrap();
                assert!(one.1.partitions_probed == 8, "{kind:?}");
                assert_eq!(one.1.partitions_skipped, 0);
                for threads in 1..=5 {
                    for skip in [false, true] {
                        let opts = SearchOptions {
                            threads: Some(threads),
                            skip,
                        };
                        let split = seg
                            .search_with(&query, k, 8, 40, &cache, &allow, opts)
                            .await
                            .unwrap();
                        assert_eq!(
                            split.0, one.0,
                            "{kind:?} q{q} on {threads} threads, skip {skip}"
                        );
                        assert_eq!(split.1.partitions_probed, 8);
                        skipped += split.1.partitions_skipped;
                        if !skip {
                            assert_eq!(split.1.candidates_scored, one.1.candidates_scored);
                        }
                    }
                }
                if kind == VectorKind::IvfFlat {
                    // Brute force: exact distances, nearest first, ties by id.
                    let mut want: Vec<(u64, f32)> = (0..all.num_rows())
                        .filter(|i| allow(addrs.value(*i)))
                        .map(|i| (addrs.value(i), metric.distance(&query, &row(i))))
                        .collect();
                    want.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
                    want.truncate(k);
                    let got_ids: Vec<u64> = one.0.iter().map(|x| x.0).collect();
                    let want_ids: Vec<u64> = want.iter().map(|x| x.0).collect();
                    assert_eq!(got_ids, want_ids, "q{q}");
                    for (g, w) in one.0.iter().zip(&want) {
                        assert!((g.1 - w.1).abs() <= 1e-3 * w.1.max(1.0), "{g:?} vs {w:?}");
                    }
                }
            }
            // Skipping is exercised where scores are squared distances
            // (not dot; not IVF_FLAT's 1 - cos).
            let can_skip =
                metric == Metric::L2 || (metric == Metric::Cosine && kind != VectorKind::IvfFlat);
            assert_eq!(
                skipped > 0,
                can_skip,
                "{kind:?} {metric:?}: {skipped} skipped"
            );
        }
    });
}
