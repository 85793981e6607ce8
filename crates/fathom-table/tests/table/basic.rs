//! The dataset API end to end: create, append, delete, time travel,
//! restore, cleanup, virtual columns, take, stable row ids, errors.

use std::time::{Duration, SystemTime};

use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use fathom_table::{CleanupPolicy, Dataset, Error, Projection, WriteMode, WriteParams};

use super::{ids, rows, runtime, unique_uri};

fn small_files() -> WriteParams {
    WriteParams {
        max_rows_per_file: 40,
        ..Default::default()
    }
}

#[test]
fn lifecycle() {
    runtime().block_on(async {
        let uri = unique_uri("life");
        let ds = Dataset::write(&uri, &[rows(0..100)], WriteMode::Create, small_files())
            .await
            .unwrap();
        assert_eq!(ds.version(), 1);
        assert_eq!(ds.fragments().len(), 3);
        assert_eq!(ds.count_rows(), 100);
        let err = Dataset::write(&uri, &[rows(0..1)], WriteMode::Create, small_files())
            .await
            .unwrap_err();
        assert!(matches!(err, Error::AlreadyExists { .. }), "{err}");

        let ds = ds.append(&[rows(100..150)], &small_files()).await.unwrap();
        assert_eq!((ds.version(), ds.count_rows()), (2, 150));
        let t1 = SystemTime::now();
        tokio::time::sleep(Duration::from_millis(20)).await;

        // Delete rows 10..20 and all of fragment 1 (rows 40..80).
        let ds = ds
            .delete_where(&["id"], |b| {
                let id = b.column(0).as_primitive::<arrow_array::types::Int64Type>();
                Ok(id
                    .iter()
                    .map(|v| v.map(|v| (10..20).contains(&v) || (40..80).contains(&v)))
                    .collect())
            })
            .await
            .unwrap();
        assert_eq!(ds.version(), 3);
        assert_eq!(ds.count_rows(), 100);
        assert!(
            ds.fragments().iter().all(|f| f.id != 1),
            "fully deleted fragment leaves the manifest"
        );
        let all = ds.scan().collect().await.unwrap();
        let want: Vec<i64> = (0..150)
            .filter(|i| !(10..20).contains(i) && !(40..80).contains(i))
            .collect();
        assert_eq!(ids(&all), want);

        // Time travel.
        let v2 = ds.checkout(2).await.unwrap();
        assert_eq!(
            ids(&v2.scan().collect().await.unwrap()),
            (0..150).collect::<Vec<_>>()
        );
        let at = ds.checkout_at(t1).await.unwrap();
        assert_eq!(at.version(), 2);
        assert!(matches!(
            ds.checkout(99).await.unwrap_err(),
            Error::VersionNotFound { version: 99, .. }
        ));
        let versions = ds.versions().await.unwrap();
        assert_eq!(
            versions.iter().map(|v| v.num_rows).collect::<Vec<_>>(),
            vec![100, 150, 100]
        );

        // Restore version 1 as version 4.
        let restored = ds.checkout(1).await.unwrap().restore().await.unwrap();
        assert_eq!(restored.version(), 4);
        assert_eq!(
            ids(&restored.scan().collect().await.unwrap()),
            (0..100).collect::<Vec<_>>()
        );
        // Fragment ids are never reused after a restore.
        let appended = restored
            .append(&[rows(500..501)], &small_files())
            .await
            .unwrap();
        let max_before = ds.fragments().iter().map(|f| f.id).max().unwrap();
        assert!(appended.fragments().last().unwrap().id > max_before);

        // Reopen from the URI: latest version.
        let reopened = Dataset::open(&uri).await.unwrap();
        assert_eq!(reopened.version(), 5);
        assert_eq!(reopened.count_rows(), 101);

        // Cleanup keeps the last two versions and what they need.
        let stats = reopened
            .cleanup_old_versions(&CleanupPolicy {
                keep_last: Some(2),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(stats.versions_removed, 3);
        assert!(stats.files_removed > 0);
        let after = Dataset::open(&uri).await.unwrap();
        assert_eq!(
            ids(&after.scan().collect().await.unwrap()),
            (0..100).chain(500..501).collect::<Vec<_>>()
        );
        assert_eq!(
            ids(&after
                .checkout(4)
                .await
                .unwrap()
                .scan()
                .collect()
                .await
                .unwrap()),
            (0..100).collect::<Vec<_>>()
        );
        assert!(after.checkout(2).await.is_err());
    });
}

#[test]
fn virtual_columns_and_take() {
    runtime().block_on(async {
        let uri = unique_uri("take");
        let ds = Dataset::write(&uri, &[rows(0..100)], WriteMode::Create, small_files())
            .await
            .unwrap();
        let ds = ds.delete_rows(&[5, (1 << 32) | 3]).await.unwrap();
        let b = ds
            .scan()
            .project(&["id", "_rowaddr", "_rowid"])
            .unwrap()
            .collect()
            .await
            .unwrap();
        let addr = b.column(1).as_primitive::<UInt64Type>();
        let rid = b.column(2).as_primitive::<UInt64Type>();
        for (i, id) in ids(&b).into_iter().enumerate() {
            let id = id as u64;
            let expect = ((id / 40) << 32) | (id % 40);
            assert_eq!(addr.value(i), expect);
            assert_eq!(rid.value(i), expect, "without stable ids, row id = address");
        }
        assert!(!ids(&b).contains(&5) && !ids(&b).contains(&43));

        // Take by address: any order, deleted rows skipped.
        let p = Projection::from_names(ds.schema(), &["id", "value"]).unwrap();
        let t = ds
            .take_addresses(&[(2 << 32) | 1, 5, 7, (1 << 32) | 3, 0], &p)
            .await
            .unwrap();
        assert_eq!(ids(&t), vec![81, 7, 0]);
        assert_eq!(t.column(1).as_string::<i32>().value(1), "v7");
        let err = ds
            .take_addresses(&[(9 << 32) | 1], &p)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("fragment 9"), "{err}");
        let err = ds.scan().project(&["nope"]).err().unwrap().to_string();
        assert!(err.contains("no column named 'nope'"), "{err}");
    });
}

#[test]
fn stable_row_ids() {
    runtime().block_on(async {
        let uri = unique_uri("stable");
        let params = WriteParams {
            max_rows_per_file: 30,
            enable_stable_row_ids: true,
            ..Default::default()
        };
        let ds = Dataset::write(&uri, &[rows(0..50)], WriteMode::Create, params.clone())
            .await
            .unwrap();
        let ds = ds.append(&[rows(50..70)], &params).await.unwrap();
        assert_eq!(ds.manifest().next_row_id, 70);
        let ds = ds.delete_rows(&[3, (1 << 32) | 2]).await.unwrap();
        let b = ds
            .scan()
            .project(&["id", "_rowid"])
            .unwrap()
            .collect()
            .await
            .unwrap();
        let rid = b.column(1).as_primitive::<UInt64Type>();
        for (i, id) in ids(&b).into_iter().enumerate() {
            assert_eq!(
                rid.value(i),
                id as u64,
                "row ids are assigned in insertion order"
            );
        }
        let p = Projection::from_names(ds.schema(), &["id"]).unwrap();
        let t = ds.take_row_ids(&[65, 3, 10, 32], &p).await.unwrap();
        assert_eq!(ids(&t), vec![65, 10], "deleted ids 3 and 32 are absent");
    });
}

#[test]
fn bad_input_is_refused_without_a_commit() {
    runtime().block_on(async {
        let uri = unique_uri("bad");
        let ds = Dataset::write(
            &uri,
            &[rows(0..10)],
            WriteMode::Create,
            WriteParams::default(),
        )
        .await
        .unwrap();
        let other = arrow_array::RecordBatch::try_new(
            std::sync::Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
                "id",
                arrow_schema::DataType::Utf8,
                true,
            )])),
            vec![std::sync::Arc::new(arrow_array::StringArray::from(vec![
                "x",
            ]))],
        )
        .unwrap();
        let err = ds
            .append(&[other], &WriteParams::default())
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("columns") || err.contains("type"), "{err}");
        assert_eq!(Dataset::open(&uri).await.unwrap().version(), 1);
        let err = Dataset::open(&unique_uri("missing")).await.unwrap_err();
        assert!(matches!(err, Error::NotFound { .. }), "{err}");
        let err = ds
            .delete_rows(&[(7 << 32) | 1])
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("fragment 7"), "{err}");
    });
}

/// Errors name files by the path a user would write: a local dataset's
/// missing data file is shown with its leading `/` (object-store paths are
/// store-relative and used to lose it).
#[test]
fn errors_show_whole_local_paths() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("p.lance");
    let ds = rt
        .block_on(Dataset::write(
            uri.to_str().unwrap(),
            &[rows(0..10)],
            WriteMode::Create,
            WriteParams::default(),
        ))
        .unwrap();
    let data = std::fs::read_dir(uri.join("data"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::remove_file(&data).unwrap();
    let err = rt.block_on(ds.scan().collect()).unwrap_err().to_string();
    let whole = data.canonicalize().unwrap_or(data.clone());
    let name = data.file_name().unwrap().to_str().unwrap();
    assert!(err.contains(name), "{err}");
    // Every mention of the file is an absolute path.
    for (i, _) in err.match_indices(name) {
        let start = err[..i].rfind(' ').map(|s| s + 1).unwrap_or(0);
        assert!(
            err[start..].starts_with('/'),
            "path without its leading '/': {err} (file {})",
            whole.display()
        );
    }
}
