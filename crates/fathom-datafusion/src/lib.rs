//! # fathom-datafusion: Lance datasets in DataFusion
//!
//! A thin layer: conversion and delegation to `fathom-table`.
//!
//! - [`FathomTable`]: a dataset as a `TableProvider` (projection, exact
//!   filter and limit pushdown, exact row counts, parallel fragment scans,
//!   `_rowid` / `_rowaddr`, INSERT / DELETE / UPDATE as single commits),
//!   and `count_rows(filter)`, a count without SQL planning.
//! - [`FathomTableFactory`]: `CREATE EXTERNAL TABLE ... STORED AS LANCE`.
//! - [`DirectorySchema`]: a directory of datasets as a schema, so that
//!   `CREATE TABLE` / `CREATE TABLE AS SELECT` / `DROP TABLE` manage datasets.
//! - [`LanceTableFunction`]: `lance_table('<uri>', version)` (time travel).
//! - [`fts`]: `fts('t', 'body', 'quick fox')`, BM25-ranked full-text
//!   search with a `_score` column; `ORDER BY _score DESC LIMIT k` is a
//!   top-k search ([`fts::FtsRule`]).
//! - [`PlanCache`]: a query run again reuses its physical plan while the
//!   tables' versions and the session's options are unchanged.
//! - [`IndexCountRule`]: `COUNT(*)` (grouped by a bitmap-indexed column or
//!   not) from index row sets, no rows read; [`with_fathom_rules`] adds it.
//!
//! Public: the items re-exported here, `sql` (statements DataFusion's
//! parser does not run: CREATE INDEX, CREATE [OR REPLACE] TABLE in a data
//! directory), `plan` (the scan plan value) and `exec` (its nodes, for
//! those who inspect or build physical plans). See ARCHITECTURE.md.
//!
//! ```text
//! TableProvider::scan ─► plan::plan_scan (pure) ─► ScanPlan ─► plan::lower ─► exec nodes
//! ```

mod array_literal;
mod catalog;
mod codec;
mod count_rule;
mod error;
pub mod exec;
mod factory;
pub mod fts;
mod index_expr;
pub mod knn;
pub mod plan;
mod plan_cache;
mod provider;
mod pruning;
pub mod sql;
pub mod udf;
mod udtf;
mod util;

use std::sync::Arc;

use datafusion::error::Result;
use datafusion::execution::context::SessionContext;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::prelude::SessionConfig;

pub use catalog::DirectorySchema;
pub use codec::FathomPhysicalCodec;
pub use count_rule::IndexCountRule;
pub use error::to_df;
pub use factory::{FathomTableFactory, open_table};
pub use index_expr::{ColumnIndex, IndexExpr};
pub use plan_cache::{PlanCache, PlanCacheStats};
pub use provider::{FathomTable, TableOptions, TableState};
pub use udtf::LanceTableFunction;
pub use util::{storage_schema, storage_type, to_storage};

/// A session with Fathom set up: `STORED AS LANCE`, `lance_table(...)`,
/// and, when `data_dir` is given, its datasets as the default schema.
pub fn new_session(data_dir: Option<&std::path::Path>) -> Result<SessionContext> {
    let mut config = SessionConfig::new().with_information_schema(true);
    // Lance 2.0 stores plain strings; VARCHAR maps to Utf8 rather than Utf8View.
    config.options_mut().sql_parser.map_string_types_to_utf8view = false;
    let mut state = with_fathom_rules(
        SessionStateBuilder::new()
            .with_config(config)
            .with_default_features(),
    )
    .build();
    state
        .table_factories_mut()
        .insert("LANCE".to_string(), Arc::new(FathomTableFactory));
    let ctx = SessionContext::new_with_state(state);
    ctx.register_udtf("lance_table", Arc::new(LanceTableFunction));
    ctx.register_udtf("fts", Arc::new(fts::FtsTableFunction));
    add_vector_search(&ctx);
    if let Some(dir) = data_dir {
        let catalog = ctx.catalog("datafusion").expect("default catalog");
        catalog.register_schema("public", Arc::new(DirectorySchema::new(dir)?))?;
    }
    Ok(ctx)
}

/// `builder` with Fathom's physical optimizer rules added after
/// DataFusion's: [`IndexCountRule`] (counts from index row sets). Tables
/// work without them, with the same results, only slower.
pub fn with_fathom_rules(builder: SessionStateBuilder) -> SessionStateBuilder {
    builder
        .with_physical_optimizer_rule(Arc::new(IndexCountRule))
        .with_optimizer_rule(Arc::new(knn::KnnRule))
        .with_optimizer_rule(Arc::new(fts::FtsRule))
}

/// Adds the vector distance functions (`l2_distance`, `cosine_distance`,
/// `dot_distance`) and Fathom's session settings (`SET fathom.nprobes`,
/// ...) to `ctx`. With [`with_fathom_rules`] (the `KnnRule`), `ORDER BY`
/// a distance `LIMIT k` over a Fathom table is then a vector search.
/// [`new_session`] does both.
pub fn add_vector_search(ctx: &SessionContext) {
    array_literal::install(ctx);
    for f in udf::distance_udfs() {
        ctx.register_udf(f);
    }
    ctx.register_udf(fts::text_match_udf());
    let state = ctx.state_ref();
    let mut state = state.write();
    let options = state.config_mut().options_mut();
    if options.extensions.get::<knn::FathomOptions>().is_none() {
        options.extensions.insert(knn::FathomOptions::default());
    }
}

/// Registers the dataset at `uri` as table `name` (latest version).
pub async fn register_dataset(
    ctx: &SessionContext,
    name: &str,
    uri: &str,
    options: TableOptions,
) -> Result<()> {
    let table = factory::open_table(uri, None, None, options).await?;
    ctx.register_table(name, Arc::new(table))?;
    Ok(())
}
