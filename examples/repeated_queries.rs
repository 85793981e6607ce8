//! A service runs the same statements again and again. `PlanCache` keeps
//! each query's physical plan and runs it again while the tables it reads
//! are at the same version, so a repeated count costs the index lookup,
//! not DataFusion's planning. Any commit (here an INSERT) makes the next
//! run plan again.
//!
//!     cargo run -p fathom-examples --example repeated_queries

use std::time::Instant;

use datafusion::arrow::array::{Array, Int64Array};
use fathom_datafusion::sql::{Output, run_sql};
use fathom_datafusion::{PlanCache, new_session};

fn count(out: &[Output]) -> i64 {
    let (_, batches) = out.last().unwrap();
    let c = batches[0]
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
        "CREATE TABLE events AS SELECT value AS id, value % 40 AS kind FROM generate_series(1, 200000)",
    )
    .await?;
    run_sql(&ctx, "CREATE INDEX kind_idx ON events USING BITMAP (kind)").await?;

    let cache = PlanCache::new(128);
    let q = "SELECT count(*) FROM events WHERE kind = 7";
    let mut times = vec![];
    for _ in 0..20 {
        let t = Instant::now();
        assert_eq!(count(&cache.sql(&ctx, q).await?), 5000);
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let s = cache.stats();
    println!(
        "{q}: first run {:.2} ms (planned), then {:.2} ms (median, plan reused); {} hits, {} misses",
        times[0],
        {
            let mut t = times[1..].to_vec();
            t.sort_by(f64::total_cmp);
            t[t.len() / 2]
        },
        s.hits,
        s.misses
    );
    assert_eq!((s.hits, s.misses), (19, 1));

    // A commit: the next run sees it (planned again), the one after reuses.
    run_sql(&ctx, "INSERT INTO events VALUES (200001, 7)").await?;
    assert_eq!(count(&cache.sql(&ctx, q).await?), 5001);
    assert_eq!(count(&cache.sql(&ctx, q).await?), 5001);
    let s = cache.stats();
    println!("after an INSERT: {} hits, {} misses", s.hits, s.misses);
    assert_eq!((s.hits, s.misses), (20, 2));
    Ok(())
}
