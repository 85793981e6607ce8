//! The data directory keeps what was committed: CREATE OR REPLACE is an
//! overwrite commit (history kept, a failing query changes nothing), DROP
//! racing with writers never leaves a table pointing at missing files, and
//! table names cannot escape the directory.

use fathom_datafusion::new_session;
use fathom_datafusion::sql::run_sql;
use fathom_table::Dataset;

use super::common::ids;

async fn run(
    ctx: &datafusion::prelude::SessionContext,
    sql: &str,
) -> datafusion::error::Result<()> {
    run_sql(ctx, sql).await.map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_is_an_overwrite_commit() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = new_session(Some(dir.path())).unwrap();
    run(
        &ctx,
        "CREATE TABLE r AS SELECT CAST(v AS BIGINT) AS id FROM (VALUES (1), (2), (3)) t(v)",
    )
    .await
    .unwrap();
    // Reads the table it replaces.
    run(
        &ctx,
        "CREATE OR REPLACE TABLE r AS SELECT id * 10 AS id FROM r WHERE id > 1",
    )
    .await
    .unwrap();
    assert_eq!(
        ids(&ctx, "SELECT id FROM r ORDER BY id").await,
        vec![20, 30]
    );
    // A query failing at run time leaves the table as it was.
    let err = run(
        &ctx,
        "CREATE OR REPLACE TABLE r AS SELECT CAST(CAST(id AS VARCHAR) || 'x' AS BIGINT) AS id FROM r",
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("Cast"), "{err}");
    assert_eq!(
        ids(&ctx, "SELECT id FROM r ORDER BY id").await,
        vec![20, 30]
    );
    // History: version 1 is still there for time travel.
    let uri = dir.path().join("r.lance");
    let ds = Dataset::open(uri.to_str().unwrap()).await.unwrap();
    assert_eq!(ds.version(), 2);
    let q = format!(
        "SELECT id FROM lance_table('{}', 1) ORDER BY id",
        uri.display()
    );
    assert_eq!(ids(&ctx, &q).await, vec![1, 2, 3]);
    // Without OR REPLACE an existing table is an error, IF NOT EXISTS a no-op.
    assert!(run(&ctx, "CREATE TABLE r AS SELECT 1 AS id").await.is_err());
    run(&ctx, "CREATE TABLE IF NOT EXISTS r AS SELECT 1 AS id")
        .await
        .unwrap();
    assert_eq!(
        Dataset::open(uri.to_str().unwrap())
            .await
            .unwrap()
            .version(),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_names_are_not_paths() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let ctx = new_session(Some(&data)).unwrap();
    for name in [
        "\"/tmp/abs\"",
        "\"a/b\"",
        "\"\"",
        "\"../up\"",
        "\".hidden\"",
    ] {
        let err = run(&ctx, &format!("CREATE TABLE {name} AS SELECT 1 AS x"))
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("invalid table name"),
            "{name}: {err}"
        );
    }
    assert_eq!(std::fs::read_dir(&data).unwrap().count(), 0);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

/// Appends racing with DROP TABLE: afterwards the table is gone, or what
/// is there opens and reads in full (no manifest naming missing files).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_racing_with_inserts_leaves_no_broken_table() {
    for round in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let ctx = new_session(Some(dir.path())).unwrap();
        run(&ctx, "CREATE TABLE r AS SELECT CAST(1 AS BIGINT) AS id")
            .await
            .unwrap();
        let writer = {
            let path = dir.path().to_path_buf();
            tokio::spawn(async move {
                let ctx = new_session(Some(&path)).unwrap();
                for i in 0..30 {
                    let _ = run(&ctx, &format!("INSERT INTO r VALUES ({i})")).await;
                }
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(5 * round)).await;
        run(&ctx, "DROP TABLE r").await.unwrap();
        writer.await.unwrap();
        let uri = dir.path().join("r.lance");
        if uri.join("_versions").exists() {
            // Whatever is left must be a whole table.
            match Dataset::open(uri.to_str().unwrap()).await {
                Ok(ds) => {
                    ds.scan().collect().await.unwrap();
                }
                Err(fathom_table::Error::NotFound { .. }) => {}
                Err(e) => panic!("round {round}: broken table left: {e}"),
            }
        }
    }
}

/// One unreadable dataset does not hide the others from SHOW TABLES, and
/// querying it names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_tables_survives_a_broken_dataset() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = new_session(Some(dir.path())).unwrap();
    run(&ctx, "CREATE TABLE good AS SELECT 1 AS x")
        .await
        .unwrap();
    run(&ctx, "CREATE TABLE bad AS SELECT 1 AS x")
        .await
        .unwrap();
    let versions = dir.path().join("bad.lance/_versions");
    for f in std::fs::read_dir(&versions).unwrap() {
        std::fs::write(f.unwrap().path(), b"not a manifest").unwrap();
    }
    let ctx = new_session(Some(dir.path())).unwrap();
    let out = run_sql(&ctx, "SHOW TABLES").await.unwrap();
    let text = arrow_cast::pretty::pretty_format_batches(&out[0].1)
        .unwrap()
        .to_string();
    assert!(text.contains("good") && text.contains("bad"), "{text}");
    let err = run(&ctx, "SELECT * FROM bad")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("table 'bad' cannot be opened"), "{err}");
    assert_eq!(
        ids(&ctx, "SELECT CAST(x AS BIGINT) FROM good").await,
        vec![1]
    );
}
