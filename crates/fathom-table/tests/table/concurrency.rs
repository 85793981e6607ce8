//! Many tasks appending and deleting at once: every committed row is
//! present exactly once, every deleted row is gone, no commit is lost.

use std::collections::BTreeSet;

use fathom_table::{Dataset, Error, WriteMode, WriteParams};

use super::{ids, rows, runtime, unique_uri};

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
