//! A write interrupted after its data files but before its manifest
//! leaves the dataset readable and unchanged; corrupt or truncated
//! manifests give errors naming the file.

use fathom_table::{Dataset, WriteMode, WriteParams};
use object_store::{ObjectStoreExt, PutPayload};

use super::{ids, rows, runtime, unique_uri};

#[test]
fn interrupted_write_is_invisible() {
    runtime().block_on(async {
        let uri = unique_uri("crash");
        let ds = Dataset::write(
            &uri,
            &[rows(0..10)],
            WriteMode::Create,
            WriteParams::default(),
        )
        .await
        .unwrap();
        // The data files of a write that died before committing.
        let frags = fathom_table::write::write_fragments(
            ds.store(),
            ds.root(),
            &ds.manifest().schema,
            &[rows(10..20)],
            &WriteParams::default(),
        )
        .await
        .unwrap();
        assert_eq!(frags.len(), 1);
        let again = Dataset::open(&uri).await.unwrap();
        assert_eq!(again.version(), 1);
        assert_eq!(
            ids(&again.scan().collect().await.unwrap()),
            (0..10).collect::<Vec<_>>()
        );
        // And the next commit works normally.
        let next = again
            .append(&[rows(20..25)], &WriteParams::default())
            .await
            .unwrap();
        assert_eq!(next.count_rows(), 15);
    });
}

#[test]
fn corrupt_manifest_is_named() {
    runtime().block_on(async {
        let uri = unique_uri("corrupt");
        let ds = Dataset::write(
            &uri,
            &[rows(0..10)],
            WriteMode::Create,
            WriteParams::default(),
        )
        .await
        .unwrap();
        let path = fathom_table::naming::manifest_path(
            ds.root(),
            1,
            fathom_table::naming::ManifestNaming::V2,
        );
        let bytes = ds.store().get(&path).await.unwrap().bytes().await.unwrap();
        for bad in [bytes.slice(0..bytes.len() / 2), bytes.slice(0..3)] {
            ds.store().put(&path, PutPayload::from(bad)).await.unwrap();
            let err = Dataset::open(&uri).await.unwrap_err().to_string();
            assert!(
                err.contains(path.as_ref()) && err.contains("corrupt"),
                "{err}"
            );
        }
        let mut flipped = bytes.to_vec();
        let n = flipped.len();
        flipped[n - 20] ^= 0xff;
        ds.store()
            .put(&path, PutPayload::from(flipped))
            .await
            .unwrap();
        let _ = Dataset::open(&uri).await; // must not panic
    });
}

#[test]
fn unknown_feature_flags_are_refused() {
    runtime().block_on(async {
        let uri = unique_uri("flags");
        let ds = Dataset::write(
            &uri,
            &[rows(0..10)],
            WriteMode::Create,
            WriteParams::default(),
        )
        .await
        .unwrap();
        let path = fathom_table::naming::manifest_path(
            ds.root(),
            2,
            fathom_table::naming::ManifestNaming::V2,
        );
        let mut m = ds.manifest().clone();
        m.version = 2;
        m.reader_feature_flags |= 128; // covered index metadata: not implemented
        let bytes = fathom_table::manifest_io::encode_manifest(&m);
        ds.store()
            .put(&path, PutPayload::from(bytes))
            .await
            .unwrap();
        let err = Dataset::open(&uri).await.unwrap_err().to_string();
        assert!(err.contains("covered index metadata (128)"), "{err}");
        // The older version is still readable.
        assert_eq!(ds.checkout(1).await.unwrap().count_rows(), 10);
    });
}

#[test]
fn v1_manifest_names_are_read() {
    runtime().block_on(async {
        use fathom_table::naming::{ManifestNaming, manifest_path};
        let uri = unique_uri("v1");
        let ds = Dataset::write(
            &uri,
            &[rows(0..10)],
            WriteMode::Create,
            WriteParams::default(),
        )
        .await
        .unwrap();
        let ds = ds
            .append(&[rows(10..12)], &WriteParams::default())
            .await
            .unwrap();
        for v in 1..=2 {
            let from = manifest_path(ds.root(), v, ManifestNaming::V2);
            let to = manifest_path(ds.root(), v, ManifestNaming::V1);
            ds.store().rename(&from, &to).await.unwrap();
        }
        let reopened = Dataset::open(&uri).await.unwrap();
        assert_eq!((reopened.version(), reopened.count_rows()), (2, 12));
        // New commits keep the V1 scheme.
        let next = reopened
            .append(&[rows(12..13)], &WriteParams::default())
            .await
            .unwrap();
        assert_eq!(next.version(), 3);
        let v3 = manifest_path(ds.root(), 3, ManifestNaming::V1);
        assert!(ds.store().head(&v3).await.is_ok());
    });
}

/// A data file truncated on local disk after it was read (and mapped):
/// the next read is an error naming the file, not a crash.
#[test]
fn truncated_local_data_file_is_an_error() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let uri = dir.path().join("t.lance").to_str().unwrap().to_string();
        let ds = Dataset::write(
            &uri,
            &[rows(0..20_000)],
            WriteMode::Create,
            WriteParams::default(),
        )
        .await
        .unwrap();
        assert_eq!(ds.scan().collect().await.unwrap().num_rows(), 20_000);
        let name = ds.fragments()[0].files[0].path.clone();
        let file = dir.path().join("t.lance").join("data").join(&name);
        let len = std::fs::metadata(&file).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&file)
            .unwrap()
            .set_len(len / 2)
            .unwrap();
        let e = ds.scan().collect().await.unwrap_err().to_string();
        assert!(e.contains(&name), "{e}");
        let e = match Dataset::open(&uri).await {
            Ok(again) => again.scan().collect().await.unwrap_err().to_string(),
            Err(e) => e.to_string(),
        };
        assert!(e.contains(&name), "{e}");
    });
}
