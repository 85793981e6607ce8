//! Indexes pylance built on a dataset with stable row ids (after
//! deletions, a compaction, an append and an update that moved rows): each
//! filter's count through our index path equals pylance's own count and
//! our full scan's, and the plan really uses the index. Skipped without
//! pylance unless FATHOM_REQUIRE_PYLANCE=1.

use std::collections::BTreeMap;

use fathom_datafusion::{TableOptions, new_session, register_dataset};

use super::common::{ids, interop_json, scan_count, text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pylance_indexes_on_stable_row_ids() {
    pylance_indexes("2.0").await;
}

/// The same on a dataset of pylance's default data storage version (2.2
/// in pylance 14): its data files use the structural encodings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pylance_indexes_on_a_default_version_dataset() {
    pylance_indexes("default").await;
}

async fn pylance_indexes(version: &str) {
    let Some(py) = fathom_testing::pylance_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let theirs: BTreeMap<String, i64> = serde_json::from_value(interop_json(
        &py,
        "pylance_stable_index.py",
        &[dir.path().as_os_str(), version.as_ref()],
    ))
    .unwrap();
    let uri = dir.path().join("py_stable").to_str().unwrap().to_string();
    let ctx = new_session(None).unwrap();
    register_dataset(&ctx, "t", &uri, TableOptions::default())
        .await
        .unwrap();
    // The oracle: the same table without indexes (version before the first
    // index build would drop rows added since, so scan via a filter no
    // index can answer: `(filter) AND id + 0 >= -1`).
    for (filter, count) in &theirs {
        let sql = format!("SELECT count(*)::BIGINT FROM t WHERE {filter}");
        let plan = text(&ctx, &format!("EXPLAIN {sql}")).await;
        // Counted from the index's row set, or its rows streamed.
        assert!(
            plan.contains("IndexCountExec") || plan.contains("ScalarIndexExec"),
            "{filter}: no index used\n{plan}"
        );
        let got = ids(&ctx, &sql).await;
        let scan = scan_count(&ctx, filter).await;
        assert_eq!(got, vec![*count], "{filter}: ours vs pylance");
        assert_eq!(scan, vec![*count], "{filter}: our full scan vs pylance");
    }
}
