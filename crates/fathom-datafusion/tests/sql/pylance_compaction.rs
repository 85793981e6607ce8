//! Datasets pylance compacted with scalar indexes: with the indexes
//! remapped (new segments over the new fragments) and with the remap
//! deferred to a fragment reuse index (the user indexes' manifest entries
//! still name the old fragments). Each filter's count here equals the true
//! count (pylance without indexes) and our own full scan's; after either
//! compaction our plan uses the indexes (through the reuse index for the
//! deferred one). Skipped without pylance
//! unless FATHOM_REQUIRE_PYLANCE=1.

use std::collections::BTreeMap;

use fathom_datafusion::{TableOptions, new_session, register_dataset};

use super::common::{ids, interop_json, scan_count, text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pylance_compacted_datasets_read_correctly() {
    let Some(py) = fathom_testing::pylance_python() else {
        return;
    };
    for mode in ["remap", "defer"] {
        let dir = tempfile::tempdir().unwrap();
        let theirs: BTreeMap<String, (i64, i64)> = serde_json::from_value(interop_json(
            &py,
            "pylance_compacted.py",
            &[dir.path().as_os_str(), mode.as_ref()],
        ))
        .unwrap();
        let uri = dir
            .path()
            .join(format!("py_compacted_{mode}"))
            .to_str()
            .unwrap()
            .to_string();
        let ctx = new_session(None).unwrap();
        register_dataset(&ctx, "t", &uri, TableOptions::default())
            .await
            .unwrap();
        for (filter, (indexed, truth)) in &theirs {
            let sql = format!("SELECT count(*)::BIGINT FROM t WHERE {filter}");
            let got = ids(&ctx, &sql).await;
            let scan = scan_count(&ctx, filter).await;
            assert_eq!(got, vec![*truth], "{mode} {filter}: ours vs the truth");
            assert_eq!(scan, vec![*truth], "{mode} {filter}: our full scan");
            if indexed != truth {
                eprintln!(
                    "{mode} {filter}: pylance with its indexes counts {indexed}, truth {truth}"
                );
            }
            let plan = text(&ctx, &format!("EXPLAIN {sql}")).await;
            let used = plan.contains("IndexCountExec") || plan.contains("ScalarIndexExec");
            // Remapped segments, or old ones read through pylance's
            // fragment reuse index: the indexes answer either way.
            if !filter.starts_with("ts") {
                assert!(used, "{mode} {filter}: index not used\n{plan}");
            }
        }
    }
}
