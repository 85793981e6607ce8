//! Fathom inside your own DataFusion `SessionContext`.
//!
//! Writes a dataset with plain SQL into a data directory, then registers
//! the same dataset in a second, ordinary session (your application's),
//! next to an in-memory table, and joins the two.
//!
//!     cargo run -p fathom-examples --example embed

use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::prelude::SessionContext;
use fathom_datafusion::{TableOptions, new_session, register_dataset, sql::run_sql};

#[tokio::main]
async fn main() -> datafusion::error::Result<()> {
    let dir = tempfile::tempdir()?;

    // 1. A session whose default schema is a directory of datasets:
    //    CREATE TABLE writes a Lance dataset `<dir>/orders.lance`.
    let fathom = new_session(Some(dir.path()))?;
    run_sql(
        &fathom,
        "CREATE TABLE orders AS
           SELECT value AS id, value % 3 AS customer, value * 10 AS amount
           FROM generate_series(1, 1000)",
    )
    .await?;

    // 2. Your own session: register the dataset as a table by URI.
    let ctx = SessionContext::new();
    let uri = dir.path().join("orders.lance");
    register_dataset(
        &ctx,
        "orders",
        uri.to_str().unwrap(),
        TableOptions::default(),
    )
    .await?;
    let customers = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("customer", DataType::Int64, false),
            Field::new("name", DataType::Utf8, false),
        ])),
        vec![
            Arc::new(Int64Array::from(vec![0, 1, 2])),
            Arc::new(StringArray::from(vec!["Ada", "Grace", "Edsger"])),
        ],
    )?;
    ctx.register_batch("customers", customers)?;

    let batches = ctx
        .sql(
            "SELECT c.name, count(*) AS orders, sum(o.amount) AS total
             FROM orders o JOIN customers c ON o.customer = c.customer
             GROUP BY c.name ORDER BY c.name",
        )
        .await?
        .collect()
        .await?;
    println!("{}", arrow_cast::pretty::pretty_format_batches(&batches)?);

    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    assert_eq!(rows, 3, "one row per customer");
    Ok(())
}
