#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod common;
use datafusion::physical_plan::collect;
use datafusion::prelude::SessionContext;
use fathom_datafusion::{FathomTable, TableOptions};
use fathom_index::{IndexKind, create_index};
use fathom_table::{Dataset, WriteMode, WriteParams};
use std::sync::Arc;
use std::time::Instant;

#[tokio::main]
async fn main() {
    let uri = "/tmp/probe/t.lance";
    let ds = match Dataset::open(uri).await {
        Ok(d) => d,
        Err(_) => {
            let batches = common::table(1_000_000);
            let mut ds = Dataset::write(uri, &batches, WriteMode::Create, WriteParams::default())
                .await
                .unwrap();
            for (name, col, kind) in [
                ("id_idx", "id", IndexKind::BTree),
                ("cat_idx", "cat", IndexKind::Bitmap),
                ("ts_idx", "ts", IndexKind::ZoneMap),
            ] {
                ds = create_index(&ds, name, col, kind).await.unwrap();
            }
            ds
        }
    };
    let ctx = SessionContext::new();
    let pinned = std::env::var("PINNED").is_ok();
    let t = if pinned {
        FathomTable::pinned(ds, TableOptions::default())
    } else {
        FathomTable::new(ds, TableOptions::default())
    };
    let base = t.dataset().checkout(1).await.unwrap();
    ctx.register_table("t", Arc::new(t)).unwrap();
    ctx.register_table(
        "full",
        Arc::new(FathomTable::pinned(
            base,
            TableOptions {
                zone_pruning: false,
                ..Default::default()
            },
        )),
    )
    .unwrap();
    let qs: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let n: usize = std::env::var("N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    for q in qs {
        let (mut tp, mut tl, mut te) = (vec![], vec![], vec![]);
        for _ in 0..n {
            let t0 = Instant::now();
            let df = ctx.sql(&q).await.unwrap();
            let t1 = Instant::now();
            let plan = df.create_physical_plan().await.unwrap();
            let t2 = Instant::now();
            let b = collect(plan, ctx.task_ctx()).await.unwrap();
            let t3 = Instant::now();
            std::hint::black_box(b);
            if let Ok(fq) = std::env::var("INTERLEAVE") {
                let _ = ctx.sql(&fq).await.unwrap().collect().await.unwrap();
            }
            tl.push((t1 - t0).as_secs_f64() * 1e3);
            tp.push((t2 - t1).as_secs_f64() * 1e3);
            te.push((t3 - t2).as_secs_f64() * 1e3);
        }
        println!(
            "{q}\n  logical {:.3} physical {:.3} exec {:.3}",
            common::median(tl),
            common::median(tp),
            common::median(te)
        );
    }
}
