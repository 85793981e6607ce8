//! Corrupted and truncated files give errors that name the file, never a
//! panic. The property test flips random bytes (anywhere, and in the
//! metadata tail where damage is most dangerous) and truncates.

use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema};
use bytes::Bytes;
use fathom_testing::generate::Gen;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use proptest::prelude::*;

use super::{memory, open, runtime, write_file};

fn sample() -> Bytes {
    runtime().block_on(async {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
            Field::new_list("l", Field::new("item", DataType::Int32, true), true),
            Field::new(
                "v",
                DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, true)), 4),
                true,
            ),
        ]));
        let mut g = Gen::new(3, 0.2);
        let b = g.batch(&schema, 300);
        let store = memory();
        write_file(
            &store,
            "ok.lance",
            &[b],
            fathom_file::FileWriterOptions {
                page_size_bytes: 256,
                ..Default::default()
            },
        )
        .await;
        store
            .get(&Path::from("ok.lance"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap()
    })
}

/// Opens and fully reads `bytes`; Ok or a named error, never a panic.
async fn read_all(store: &Arc<dyn ObjectStore>, bytes: Bytes) -> Result<(), String> {
    store
        .put(&Path::from("bad.lance"), PutPayload::from(bytes))
        .await
        .unwrap();
    let r = open(store, "bad.lance").await.map_err(|e| e.to_string())?;
    let n = r.num_rows();
    let _: Vec<_> = r
        .scan(0..n, None, 64)
        .map_err(|e| e.to_string())?
        .try_collect()
        .await
        .map_err(|e| e.to_string())?;
    if n > 0 {
        r.take(&[0, n - 1, n / 2], None)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[test]
fn truncated_and_bad_magic() {
    let good = sample();
    runtime().block_on(async {
        let store = memory();
        for cut in [0usize, 10, 39, 40, good.len() / 2, good.len() - 1] {
            let err = read_all(&store, good.slice(0..cut)).await.unwrap_err();
            assert!(err.contains("bad.lance"), "error must name the file: {err}");
        }
        let mut v = good.to_vec();
        let n = v.len();
        v[n - 1] = b'X';
        let err = read_all(&store, Bytes::from(v)).await.unwrap_err();
        assert!(err.contains("magic"), "{err}");
        // Version 2.3 (unstable) is refused with a clear message.
        let mut v = good.to_vec();
        v[n - 8..n - 6].copy_from_slice(&2u16.to_le_bytes());
        v[n - 6..n - 4].copy_from_slice(&3u16.to_le_bytes());
        let err = read_all(&store, Bytes::from(v.clone())).await.unwrap_err();
        assert!(err.contains("2.3"), "{err}");
        // A 2.0 file whose footer claims 2.1 is an error, not a misread.
        v[n - 6..n - 4].copy_from_slice(&1u16.to_le_bytes());
        let err = read_all(&store, Bytes::from(v)).await.unwrap_err();
        assert!(err.contains("bad.lance"), "{err}");
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, .. ProptestConfig::default() })]
    #[test]
    fn corrupted_bytes_never_panic(flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), any::<bool>()), 1..6)) {
        let good = sample();
        let mut v = good.to_vec();
        let n = v.len();
        for (idx, byte, tail) in flips {
            // Half the flips land in the last 1 KiB: footer, tables, metadata.
            let pos = if tail { n - 1 - idx.index(1024.min(n)) } else { idx.index(n) };
            v[pos] = byte;
        }
        let store = memory();
        let _ = runtime().block_on(read_all(&store, Bytes::from(v)));
    }
}
