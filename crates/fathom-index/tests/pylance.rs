//! The real Lance reads our index segments: pylance lists them with their
//! types, uses each (its plan names the index) and returns the same rows as
//! its own full scan. Skipped without pylance unless FATHOM_REQUIRE_PYLANCE=1.

use std::process::Command;
use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use fathom_index::{IndexKind, create_index};
use fathom_table::{Dataset, WriteMode, WriteParams};

#[test]
fn pylance_uses_our_indexes() {
    let Some(py) = fathom_testing::pylance_python() else {
        return;
    };
    // Without and with stable row ids (then our bitmap stores row ids and
    // our B-tree is index_version 1 with addresses, as pylance's are).
    // Then the same after our compaction (one Rewrite commit, the indexes
    // extended over the new fragment): pylance reads the rewritten
    // fragments (with their row id sequences) and our new segments. Last,
    // a compaction that defers the remap: pylance applies our fragment
    // reuse index to our segments; and one that then rewrites the segments
    // with the rows' new addresses (B-tree and bitmap remapped, the zone
    // map built anew): pylance reads the rewritten segments.
    for (stable, compact) in [
        (false, Compact::No),
        (true, Compact::No),
        (false, Compact::Reindex),
        (true, Compact::Reindex),
        (false, Compact::Defer),
        (false, Compact::Remap),
    ] {
        check_dataset(&py, stable, compact);
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Compact {
    No,
    Reindex,
    Defer,
    Remap,
}

fn check_dataset(py: &str, stable: bool, compact: Compact) {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("t.lance").to_str().unwrap().to_string();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let n = 30_000i64;
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("id", DataType::Int64, false),
                Field::new("cat", DataType::Utf8, true),
                Field::new("ts", DataType::Int64, true),
            ])),
            vec![
                Arc::new(Int64Array::from_iter_values(0..n)),
                Arc::new(StringArray::from_iter(
                    (0..n).map(|i| (i % 11 != 0).then(|| format!("c{}", i % 7))),
                )),
                Arc::new(Int64Array::from_iter(
                    (0..n).map(|i| (i % 13 != 0).then_some(i * 10)),
                )),
            ],
        )
        .unwrap();
        let params = WriteParams {
            max_rows_per_file: 12_000,
            enable_stable_row_ids: stable,
            ..Default::default()
        };
        let ds = Dataset::write(&uri, &[batch], WriteMode::Create, params)
            .await
            .unwrap();
        let ds = ds.delete_rows(&[5, 6, 7, (1 << 32) | 100]).await.unwrap();
        // Fragment 1's first row ids are 12,000.. but its addresses 1<<32..:
        // an index mixing the two finds the wrong rows.
        let ds = create_index(&ds, "id_idx", "id", IndexKind::BTREE)
            .await
            .unwrap();
        let ds = create_index(&ds, "cat_idx", "cat", IndexKind::BITMAP)
            .await
            .unwrap();
        let ds = create_index(&ds, "ts_idx", "ts", IndexKind::ZONEMAP)
            .await
            .unwrap();
        if compact != Compact::No {
            let ds = ds.delete_rows(&[(2 << 32) | 7, 40, 41]).await.unwrap();
            let opts = fathom_table::CompactionOptions {
                defer_index_remap: compact == Compact::Defer,
                remap_indexes: compact == Compact::Remap,
                ..Default::default()
            };
            let (ds, report) = fathom_index::compact(&ds, &opts, true, None).await.unwrap();
            assert_eq!(report.metrics.fragments_removed, 3);
            assert_eq!(ds.fragments().len(), 1);
            if compact == Compact::Defer {
                assert!(report.reindexed.is_empty(), "{report:?}");
                assert!(ds.manifest().frag_reuse.is_some());
            } else if compact == Compact::Remap {
                assert!(report.reindexed.is_empty(), "{report:?}");
                assert_eq!(report.remapped, ["cat_idx", "id_idx", "ts_idx"]);
                assert!(ds.manifest().frag_reuse.is_none());
                assert!(
                    ds.manifest().indices.iter().all(|i| i
                        .fragment_bitmap
                        .as_ref()
                        .is_some_and(|b| b.contains(ds.fragments()[0].id as u32))),
                    "{:?}",
                    ds.manifest().indices
                );
            } else {
                assert_eq!(report.reindexed.len(), 3);
            }
        }
    });
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/interop/pylance_index.py");
    let out = Command::new(py)
        .arg(script)
        .arg(&uri)
        .args([
            "id_idx|id = 1234",
            "id_idx|id >= 11990 AND id < 12110",
            "id_idx|id IN (5, 6, 29999)",
            "id_idx|id = 12150",
            "cat_idx|cat = 'c3'",
            "cat_idx|cat IN ('c1', 'c2')",
            "cat_idx|cat IS NULL",
            "ts_idx|ts > 290000",
            "ts_idx|ts IS NULL",
        ])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "pylance and our indexes disagree (stable row ids: {stable}, compacted: {compact:?}):\n{text}"
    );
}
