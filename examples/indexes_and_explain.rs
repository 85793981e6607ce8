//! Create indexes with SQL and read how a query uses them.
//!
//! A B-tree on `id`, a bitmap on `category`; after an append the new
//! fragment is not covered yet, so EXPLAIN shows the index branch over the
//! old fragments and a flat scan of the new one, with the same rows as a
//! full scan. `CREATE INDEX IF NOT EXISTS` then extends the index.
//!
//!     cargo run -p fathom-examples --example indexes_and_explain

use datafusion::arrow::array::RecordBatch;
use fathom_datafusion::{new_session, sql::run_sql};

fn show(batches: &[RecordBatch]) -> String {
    arrow_cast::pretty::pretty_format_batches(batches)
        .unwrap()
        .to_string()
}

#[tokio::main]
async fn main() -> datafusion::error::Result<()> {
    let dir = tempfile::tempdir()?;
    let ctx = new_session(Some(dir.path()))?;
    run_sql(
        &ctx,
        "CREATE TABLE items AS
           SELECT value AS id,
                  CASE value % 4 WHEN 0 THEN 'red' WHEN 1 THEN 'green'
                                 WHEN 2 THEN 'blue' ELSE 'black' END AS category,
                  value * 0.5 AS price
           FROM generate_series(1, 100000)",
    )
    .await?;
    run_sql(&ctx, "CREATE INDEX id_idx ON items USING BTREE (id)").await?;
    run_sql(
        &ctx,
        "CREATE INDEX cat_idx ON items USING BITMAP (category)",
    )
    .await?;
    run_sql(
        &ctx,
        "INSERT INTO items VALUES (100001, 'red', 1.0), (100002, 'blue', 2.0)",
    )
    .await?;

    for (_, b) in run_sql(&ctx, "SHOW INDEXES FROM items").await? {
        println!("{}", show(&b));
    }

    let query = "SELECT id, price FROM items WHERE id BETWEEN 99990 AND 100001 AND category = 'red' ORDER BY id";
    let plan = ctx
        .sql(&format!("EXPLAIN {query}"))
        .await?
        .collect()
        .await?;
    println!("{}", show(&plan));
    let text = show(&plan);
    assert!(text.contains("ScalarIndexExec"), "the index branch is used");
    assert!(
        text.contains("FragmentScanExec"),
        "the appended fragment is scanned"
    );

    let indexed = ctx.sql(query).await?.collect().await?;
    println!("{}", show(&indexed));
    // Oracle: the same query with indexes ignored (a full scan of a copy).
    run_sql(&ctx, "CREATE TABLE items_copy AS SELECT * FROM items").await?;
    let scanned = ctx
        .sql(&query.replace("FROM items", "FROM items_copy"))
        .await?
        .collect()
        .await?;
    assert_eq!(
        show(&indexed),
        show(&scanned),
        "index path equals a full scan"
    );

    // Cover the appended fragment: the flat branch goes away.
    run_sql(
        &ctx,
        "CREATE INDEX IF NOT EXISTS id_idx ON items USING BTREE (id)",
    )
    .await?;
    run_sql(
        &ctx,
        "CREATE INDEX IF NOT EXISTS cat_idx ON items USING BITMAP (category)",
    )
    .await?;
    let plan = show(
        &ctx.sql(&format!("EXPLAIN {query}"))
            .await?
            .collect()
            .await?,
    );
    println!("{plan}");
    assert!(
        !plan.contains("FragmentScanExec"),
        "every fragment is covered"
    );
    Ok(())
}
