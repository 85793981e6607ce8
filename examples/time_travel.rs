//! Every write is a new version; older versions stay readable until
//! cleanup. `lance_table(uri, version)` reads one, as does
//! `CREATE EXTERNAL TABLE ... OPTIONS ('version' 'N')`.
//!
//!     cargo run -p fathom-examples --example time_travel

use datafusion::arrow::array::{Array, Int64Array};
use fathom_datafusion::{new_session, sql::run_sql};

async fn count(ctx: &datafusion::prelude::SessionContext, sql: &str) -> i64 {
    let b = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    let c = b[0]
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap();
    assert_eq!(c.len(), 1);
    c.value(0)
}

#[tokio::main]
async fn main() -> datafusion::error::Result<()> {
    let dir = tempfile::tempdir()?;
    let ctx = new_session(Some(dir.path()))?;
    run_sql(
        &ctx,
        "CREATE TABLE t AS SELECT value AS id FROM generate_series(1, 100)",
    )
    .await?; // v1
    run_sql(&ctx, "INSERT INTO t VALUES (101), (102)").await?; // v2
    run_sql(&ctx, "DELETE FROM t WHERE id <= 50").await?; // v3

    let uri = dir.path().join("t.lance");
    let uri = uri.to_str().unwrap();
    for v in 1..=3 {
        let n = count(
            &ctx,
            &format!("SELECT count(*) FROM lance_table('{uri}', {v})"),
        )
        .await;
        println!("version {v}: {n} rows");
    }
    assert_eq!(
        count(
            &ctx,
            &format!("SELECT count(*) FROM lance_table('{uri}', 1)")
        )
        .await,
        100
    );
    assert_eq!(
        count(
            &ctx,
            &format!("SELECT count(*) FROM lance_table('{uri}', 2)")
        )
        .await,
        102
    );
    assert_eq!(count(&ctx, "SELECT count(*) FROM t").await, 52);

    run_sql(
        &ctx,
        &format!(
            "CREATE EXTERNAL TABLE t_v2 STORED AS LANCE LOCATION '{uri}' OPTIONS ('version' '2')"
        ),
    )
    .await?;
    let n = count(&ctx, "SELECT count(*) FROM t_v2 WHERE id > 100").await;
    println!("version 2 rows with id > 100: {n}");
    assert_eq!(n, 2);

    // The history itself, from the dataset.
    let external =
        |e: fathom_table::Error| datafusion::error::DataFusionError::External(Box::new(e));
    let ds = fathom_table::Dataset::open(uri).await.map_err(external)?;
    for v in ds.versions().await.map_err(external)? {
        println!(
            "version {}: {} rows in {} fragments",
            v.version, v.num_rows, v.num_fragments
        );
    }
    Ok(())
}
