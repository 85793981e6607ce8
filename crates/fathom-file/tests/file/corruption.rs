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

/// A 2.2 file of our own writer (structs with nulls, long strings and
/// vectors in full-zip pages), and, when pylance is installed, one of
/// pylance's (bit-packing, FSST, dictionaries, lists, constant pages).
fn samples_v22() -> &'static Vec<Bytes> {
    static S: std::sync::OnceLock<Vec<Bytes>> = std::sync::OnceLock::new();
    S.get_or_init(|| {
        let mut out = vec![runtime().block_on(async {
            let schema = Arc::new(Schema::new(vec![
                Field::new("a", DataType::Int64, true),
                Field::new("s", DataType::Utf8, true),
                Field::new_struct(
                    "st",
                    vec![
                        Field::new("x", DataType::Int32, true),
                        Field::new("y", DataType::LargeUtf8, true),
                    ],
                    true,
                ),
                Field::new(
                    "v",
                    DataType::FixedSizeList(
                        Arc::new(Field::new("item", DataType::Float32, true)),
                        70,
                    ),
                    true,
                ),
            ]));
            let mut g = Gen::new(4, 0.2);
            let b = g.batch(&schema, 300);
            let store = memory();
            write_file(
                &store,
                "ok.lance",
                &[b],
                fathom_file::FileWriterOptions {
                    page_size_bytes: 4096,
                    version: fathom_file::FileVersion::V2_2,
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
        })];
        if let Some(py) = super::interop::pylance() {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("py.lance");
            let code = r#"
import sys, numpy as np, pyarrow as pa
from lance.file import LanceFileWriter
n = 2000
r = np.random.default_rng(3)
def nul(a, p=0.2):
    return pa.array(a.to_pylist(), a.type, mask=r.random(len(a)) < p)
w = ["ant", "bee", "cat", "dog"]
t = pa.table({
    "i": nul(pa.array(r.integers(0, 1000, n))),
    "f": pa.array(r.random(n)),
    "d": nul(pa.array([w[k] for k in r.integers(0, 4, n)])),
    "t": nul(pa.array([" ".join(w[k] for k in r.integers(0, 4, 6)) + str(i) for i in range(n)])),
    "l": nul(pa.array([list(range(int(k))) for k in r.integers(0, 4, n)], pa.list_(pa.int64()))),
    "st": pa.array([None if i % 7 == 1 else {"x": i} for i in range(n)], pa.struct([("x", pa.int64())])),
    "v": nul(pa.FixedSizeListArray.from_arrays(pa.array(r.random(n * 80).astype(np.float32)), 80)),
    "c": pa.array([5] * n),
})
with LanceFileWriter(sys.argv[1], t.schema, max_page_bytes=8192) as wr:
    wr.write_batch(t)
"#;
            let ok = std::process::Command::new(py)
                .args(["-c", code])
                .arg(&path)
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "pylance could not write the 2.2 sample");
            out.push(Bytes::from(std::fs::read(&path).unwrap()));
        }
        out
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
    // In this task (a scan decodes on spawned tasks, whose panics would
    // surface as errors).
    r.read_range(0..n, None).await.map_err(|e| e.to_string())?;
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

    #[test]
    fn corrupted_2_2_files_never_panic(which in any::<prop::sample::Index>(), flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), any::<bool>()), 1..6), cut in prop::option::weighted(0.1, any::<prop::sample::Index>())) {
        let samples = samples_v22();
        let good = &samples[which.index(samples.len())];
        let mut v = good.to_vec();
        let n = v.len();
        for (idx, byte, tail) in flips {
            let pos = if tail { n - 1 - idx.index(4096.min(n)) } else { idx.index(n) };
            v[pos] = byte;
        }
        if let Some(c) = cut {
            v.truncate(c.index(n));
        }
        let store = memory();
        // Every sample reads back whole before it is damaged.
        prop_assert!(runtime().block_on(read_all(&memory(), good.clone())).is_ok());
        let _ = runtime().block_on(read_all(&store, Bytes::from(v)));
    }
}
