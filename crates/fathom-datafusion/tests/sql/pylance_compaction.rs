//! Datasets pylance compacted with scalar indexes: with the indexes
//! remapped (new segments over the new fragments) and with the remap
//! deferred to a fragment reuse index (the user indexes' manifest entries
//! still name the old fragments). Each filter's count here equals the true
//! count (pylance without indexes) and our own full scan's; after a
//! remapping compaction our plan uses the indexes. Skipped without pylance
//! unless FATHOM_REQUIRE_PYLANCE=1.

use std::collections::BTreeMap;
use std::process::Command;

use fathom_datafusion::{TableOptions, new_session, register_dataset};

use super::common::ids;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pylance_compacted_datasets_read_correctly() {
    let Some(py) = fathom_testing::pylance_python() else {
        return;
    };
    for mode in ["remap", "defer"] {
        let dir = tempfile::tempdir().unwrap();
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/interop/pylance_compacted.py");
        let out = Command::new(&py)
            .arg(script)
            .arg(dir.path())
            .arg(mode)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let theirs: BTreeMap<String, (i64, i64)> =
            serde_json::from_slice(out.stdout.trim_ascii()).expect("pylance's counts as JSON");
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
            let scan = ids(
                &ctx,
                &format!(
                    "SELECT count(*)::BIGINT FROM t WHERE ({filter}) OR (id + 0 < -1 AND id IS NOT NULL)"
                ),
            )
            .await;
            assert_eq!(got, vec![*truth], "{mode} {filter}: ours vs the truth");
            assert_eq!(scan, vec![*truth], "{mode} {filter}: our full scan");
            if indexed != truth {
                eprintln!(
                    "{mode} {filter}: pylance with its indexes counts {indexed}, truth {truth}"
                );
            }
            let plan = ctx
                .sql(&format!("EXPLAIN {sql}"))
                .await
                .unwrap()
                .collect()
                .await
                .unwrap();
            let plan = arrow_cast::pretty::pretty_format_batches(&plan)
                .unwrap()
                .to_string();
            let used = plan.contains("IndexCountExec") || plan.contains("ScalarIndexExec");
            if mode == "remap" && !filter.starts_with("ts") {
                assert!(used, "{filter}: remapped index not used\n{plan}");
            }
        }
    }
}
