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
