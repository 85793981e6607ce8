//! Many tasks appending and deleting at once: every committed row is
//! present exactly once, every deleted row is gone, no commit is lost.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow_array::RecordBatch;

use fathom_table::{Dataset, Error, WriteMode, WriteParams};

use super::{ids, rows, runtime, segment, unique_uri};

#[test]
fn concurrent_appends_and_deletes() {
    runtime().block_on(async {
        let uri = unique_uri("conc");
        let base = Dataset::write(
            &uri,
            &[rows(0..200)],
            WriteMode::Create,
            WriteParams {
                max_rows_per_file: 50,
                ..Default::default()
            },
        )
        .await
        .unwrap();
        let mut tasks = Vec::new();
        // 8 appenders, each writing 25 distinct rows.
        for t in 0..8i64 {
            let ds = base.clone();
            tasks.push(tokio::spawn(async move {
                ds.append(
                    &[rows(1000 + t * 25..1000 + (t + 1) * 25)],
                    &WriteParams::default(),
                )
                .await
                .map(|_| ())
            }));
        }
        // 6 deleters, each deleting rows of its own (and of a shared) fragment.
        for t in 0..6u64 {
            let ds = base.clone();
            tasks.push(tokio::spawn(async move {
                let frag = t % 4;
                let addrs: Vec<u64> = (0..5).map(|k| (frag << 32) | (t * 7 + k)).collect();
                ds.delete_rows(&addrs).await.map(|_| ())
            }));
        }
        let mut conflicts = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(()) => {}
                Err(Error::Conflict { .. }) => conflicts += 1,
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(conflicts, 0, "appends and deletes all compose");
        let ds = Dataset::open(&uri).await.unwrap();
        assert_eq!(ds.version(), 1 + 14);
        let got = ids(&ds.scan().collect().await.unwrap());
        let set: BTreeSet<i64> = got.iter().copied().collect();
        assert_eq!(set.len(), got.len(), "no row twice");
        let mut want: BTreeSet<i64> = (0..200).chain(1000..1200).collect();
        for t in 0..6u64 {
            let frag = t % 4;
            for k in 0..5 {
                want.remove(&((frag * 50 + t * 7 + k) as i64));
            }
        }
        assert_eq!(set, want);
    });
}

#[test]
fn overwrite_conflicts_clearly() {
    runtime().block_on(async {
        let uri = unique_uri("ow");
        let base = Dataset::write(
            &uri,
            &[rows(0..10)],
            WriteMode::Create,
            WriteParams::default(),
        )
        .await
        .unwrap();
        base.append(&[rows(10..20)], &WriteParams::default())
            .await
            .unwrap();
        let err = base
            .overwrite(&[rows(0..1)], &WriteParams::default())
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Conflict { .. }), "{err}");
        assert!(err.to_string().contains("Append"), "{err}");
        let ds = Dataset::open(&uri).await.unwrap();
        assert_eq!(ds.count_rows(), 20, "the committed append is intact");
    });
}

/// A compaction planned on an old version: a concurrent append composes
/// (its fragment stays), a concurrent delete in a rewritten fragment is a
/// conflict (the rewrite copied the row it deletes), and nothing is lost.
#[test]
fn compaction_against_concurrent_writers() {
    runtime().block_on(async {
        let uri = unique_uri("compact-conc");
        let params = WriteParams {
            max_rows_per_file: 50,
            ..Default::default()
        };
        let base = Dataset::write(&uri, &[rows(0..200)], WriteMode::Create, params)
            .await
            .unwrap();
        let opts = fathom_table::CompactionOptions::default();
        // An append meanwhile: compatible.
        base.append(&[rows(500..510)], &WriteParams::default())
            .await
            .unwrap();
        let (ds, m) = base.compact_files(&opts, None).await.unwrap();
        assert_eq!(m.fragments_removed, 4);
        let mut got = ids(&Dataset::open(&uri)
            .await
            .unwrap()
            .scan()
            .collect()
            .await
            .unwrap());
        got.sort_unstable();
        let want: Vec<i64> = (0..200).chain(500..510).collect();
        assert_eq!(got, want);
        assert_eq!(
            ds.fragments().len(),
            2,
            "the compacted fragment and the appended one"
        );
        // A delete meanwhile in a fragment being rewritten: conflict.
        let latest = Dataset::open(&uri).await.unwrap();
        latest.delete_rows(&[(4 << 32) | 3]).await.unwrap();
        let before = Dataset::open(&uri).await.unwrap();
        let e = latest
            .append(&[rows(600..601)], &WriteParams::default())
            .await
            .map(|_| ());
        assert!(e.is_ok());
        let stale = latest.checkout(latest.version()).await.unwrap();
        let r = stale
            .compact_files(
                &fathom_table::CompactionOptions {
                    materialize_deletions_threshold: 0.0,
                    ..opts.clone()
                },
                None,
            )
            .await;
        match r {
            Err(Error::Conflict { .. }) => {}
            other => panic!("expected a conflict, got {other:?}"),
        }
        let after = Dataset::open(&uri).await.unwrap();
        assert_eq!(after.count_rows(), before.count_rows() + 1);
    });
}

/// An in-place column update and index segments on that column: a segment
/// committed meanwhile from an older version (built on the old values) is
/// rebased to leave the updated fragments, an update committed after a
/// segment takes them out of it, a segment on another column keeps them,
/// and a delete meanwhile in an updated fragment is a conflict.
#[test]
fn column_update_against_concurrent_index_and_delete() {
    use fathom_table::Operation;
    fn values(n: usize) -> RecordBatch {
        RecordBatch::try_new(
            Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
                "value",
                arrow_schema::DataType::Utf8,
                true,
            )])),
            vec![Arc::new(arrow_array::StringArray::from(vec!["new"; n]))],
        )
        .unwrap()
    }
    runtime().block_on(async {
        let uri = unique_uri("update-conc");
        let params = WriteParams {
            max_rows_per_file: 50,
            ..Default::default()
        };
        let base = Dataset::write(&uri, &[rows(0..200)], WriteMode::Create, params)
            .await
            .unwrap();
        let v = base.version();
        // Fragment 1 updated in place; meanwhile (from `base`) segments
        // on `value` (field 1) and on `id` (field 0) over all 4 fragments.
        base.update_columns(&["value"], &[(1 << 32) | 5], &values(1), None)
            .await
            .unwrap();
        let ds = base
            .commit(Operation::CreateIndex {
                new: vec![
                    segment("value_idx", 1, 0..4, v),
                    segment("id_idx", 0, 0..4, v),
                ],
                removed: vec![],
            })
            .await
            .unwrap();
        let cover = |ds: &Dataset, name: &str| -> Vec<u32> {
            ds.manifest()
                .indices
                .iter()
                .filter(|i| i.name == name)
                .flat_map(|i| i.fragment_bitmap.clone().unwrap())
                .collect()
        };
        assert_eq!(cover(&ds, "value_idx"), vec![0, 2, 3]);
        assert_eq!(cover(&ds, "id_idx"), vec![0, 1, 2, 3]);
        // An update from a version before the segments: applied to the
        // latest manifest, it takes fragment 2 out of value_idx.
        let stale = ds.checkout(v + 1).await.unwrap();
        let ds = stale
            .update_columns(&["value"], &[(2 << 32) | 7], &values(1), None)
            .await
            .unwrap();
        assert_eq!(cover(&ds, "value_idx"), vec![0, 3]);
        assert_eq!(cover(&ds, "id_idx"), vec![0, 1, 2, 3]);
        // A delete meanwhile in a fragment the update rewrites: conflict.
        let before = ds.clone();
        ds.delete_rows(&[(3 << 32) | 1]).await.unwrap();
        match before
            .update_columns(&["value"], &[(3 << 32) | 2], &values(1), None)
            .await
        {
            Err(Error::Conflict { .. }) => {}
            other => panic!("expected a conflict, got {other:?}"),
        }
        let latest = Dataset::open(&uri).await.unwrap();
        assert_eq!(latest.count_rows(), 199);
        let b = latest.scan().collect().await.unwrap();
        let news = b
            .column(1)
            .as_any()
            .downcast_ref::<arrow_array::StringArray>()
            .unwrap()
            .iter()
            .filter(|s| *s == Some("new"))
            .count();
        assert_eq!(news, 2);
    });
}
