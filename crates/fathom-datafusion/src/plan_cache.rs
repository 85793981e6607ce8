//! `PlanCache`: a query run again is not planned again.
//!
//! Turning SQL into a physical plan costs DataFusion about half a
//! millisecond per query here (parsing, a copy of the session state,
//! logical and physical optimization), more than an index answers a count
//! or a point lookup in. Services run the same statements over and over,
//! so the cache keeps the physical plan of each query text and executes it
//! again while nothing it depends on changed, as a prepared statement
//! would.
//!
//! A cached plan is used again only when, at that moment:
//! - every table it reads is a Fathom table still registered under the
//!   same name (the same provider), at the same dataset version (a commit
//!   by anyone, this process or another, makes the next run plan again);
//!   a table pinned to a version (time travel) cannot change;
//! - the session's options are the ones it was planned with (`SET`
//!   replaces them: see [`Entry::config`]).
//!
//! A full-text search, `fts('t', ...)`, reads the Fathom table it names:
//! its plan is checked like a scan of that table.
//!
//! What is never cached (it runs as [`crate::sql::run_sql`] would): anything
//! but a single query (DDL, DML, `SET`, `EXPLAIN`, Fathom's own
//! statements); queries reading any other kind of table (their data can
//! change without a version to check); queries calling functions that are
//! not immutable (`now()`, `random()`: planning folds or binds them), with
//! placeholders or variables; and plans holding dynamic filters, which
//! DataFusion cannot reset for a second run.
//!
//! Functions or optimizer rules registered on the session after a plan
//! was cached are not noticed (tables are, by name): call
//! [`PlanCache::clear`] after such changes.
//!
//! Before each run the plan's per-execution state is reset with
//! DataFusion's `reset_plan_states` (hash tables built by joins, top-k
//! state), the same step recursive queries use to run a plan again.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow_schema::SchemaRef;
use datafusion::catalog::TableProvider;
use datafusion::catalog::default_table_source::source_as_provider;
use datafusion::common::TableReference;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::error::Result;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{Expr, LogicalPlan, Volatility};
use datafusion::physical_expr::expressions::DynamicFilterPhysicalExpr;
use datafusion::physical_plan::execution_plan::reset_plan_states;
use datafusion::physical_plan::{ExecutionPlan, collect};
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::{DFParser, Statement as DFStatement};
use datafusion::sql::sqlparser::ast::Statement;

use crate::fts::FtsTable;
use crate::provider::FathomTable;
use crate::sql::{Output, run_sql, special};

/// Physical plans of queries, by their SQL text (see the module
/// documentation for when one is used again).
pub struct PlanCache {
    capacity: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<String, Arc<Entry>>,
    clock: u64,
    hits: u64,
    misses: u64,
}

/// How a cache has been used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanCacheStats {
    /// Runs that used a cached plan.
    pub hits: u64,
    /// Runs that planned (cacheable or not).
    pub misses: u64,
    /// Plans held now.
    pub entries: usize,
}

struct Entry {
    plan: Arc<dyn ExecutionPlan>,
    schema: SchemaRef,
    tables: Vec<Read>,
    /// The session options planned with. `SET` goes through
    /// `Arc::make_mut`, which copies them while this clone is alive, so an
    /// unchanged pointer means unchanged options.
    config: Arc<ConfigOptions>,
    task: Arc<TaskContext>,
    used: AtomicU64,
}

/// A table the plan reads, and the version it was planned at.
struct Read {
    /// The name it is registered under, if it was found by name (a table
    /// made by a table function, `lance_table(...)`, is not).
    name: Option<TableReference>,
    provider: Arc<dyn TableProvider>,
    version: u64,
}

impl std::fmt::Debug for PlanCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PlanCache({:?})", self.stats())
    }
}

impl PlanCache {
    /// A cache holding at most `capacity` plans (the least recently used
    /// is dropped first).
    pub fn new(capacity: usize) -> Self {
        PlanCache {
            capacity: capacity.max(1),
            inner: Mutex::new(Inner::default()),
        }
    }

    pub fn stats(&self) -> PlanCacheStats {
        let inner = self.inner.lock().unwrap();
        PlanCacheStats {
            hits: inner.hits,
            misses: inner.misses,
            entries: inner.entries.len(),
        }
    }

    /// Drops every plan.
    pub fn clear(&self) {
        self.inner.lock().unwrap().entries.clear();
    }

    /// Runs every statement of `sql` as [`run_sql`] does, a single query
    /// through its cached plan when it has a valid one.
    pub async fn sql(&self, ctx: &SessionContext, sql: &str) -> Result<Vec<Output>> {
        let cached = {
            let mut inner = self.inner.lock().unwrap();
            inner.clock += 1;
            let now = inner.clock;
            inner.entries.get(sql).cloned().inspect(|e| {
                e.used.store(now, Ordering::Relaxed);
            })
        };
        if let Some(entry) = cached {
            if entry.still_valid(ctx).await? {
                self.inner.lock().unwrap().hits += 1;
                let plan = reset_plan_states(entry.plan.clone())?;
                let batches = collect(plan, entry.task.clone()).await?;
                return Ok(vec![(entry.schema.clone(), batches)]);
            }
            self.inner.lock().unwrap().entries.remove(sql);
        }
        self.inner.lock().unwrap().misses += 1;
        let (entry, keep) = match plan_query(ctx, sql).await? {
            Planned::Statement => return run_sql(ctx, sql).await,
            Planned::Once(entry) => (entry, false),
            Planned::Cache(entry) => (entry, true),
        };
        let out = collect(entry.plan.clone(), entry.task.clone()).await?;
        let schema = entry.schema.clone();
        if keep {
            self.insert(sql, entry);
        }
        Ok(vec![(schema, out)])
    }

    fn insert(&self, sql: &str, entry: Entry) {
        let mut inner = self.inner.lock().unwrap();
        if inner.entries.len() >= self.capacity
            && let Some(oldest) = inner
                .entries
                .iter()
                .min_by_key(|(_, e)| e.used.load(Ordering::Relaxed))
                .map(|(k, _)| k.clone())
        {
            inner.entries.remove(&oldest);
        }
        entry.used.store(inner.clock, Ordering::Relaxed);
        inner.entries.insert(sql.to_string(), Arc::new(entry));
    }
}

impl Entry {
    async fn still_valid(&self, ctx: &SessionContext) -> Result<bool> {
        let same_config = {
            let state = ctx.state_ref();
            let state = state.read();
            Arc::ptr_eq(state.config().options(), &self.config)
        };
        if !same_config {
            return Ok(false);
        }
        for read in &self.tables {
            if let Some(name) = &read.name {
                match ctx.table_provider(name.clone()).await {
                    Ok(p) if Arc::ptr_eq(&p, &read.provider) => {}
                    _ => return Ok(false),
                }
            }
            let t = read.provider.downcast_ref::<FathomTable>().unwrap();
            if !t.is_pinned() && t.latest().await?.version() != read.version {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// What planning `sql` gave.
enum Planned {
    /// Not a single query: run as `run_sql` does.
    Statement,
    /// A query to run once (planned already, not to be kept).
    Once(Entry),
    /// A query whose plan the cache may keep.
    Cache(Entry),
}

/// Plans `sql` if it is a single query (once: a query that cannot be
/// cached is not planned again by `run_sql`).
async fn plan_query(ctx: &SessionContext, sql: &str) -> Result<Planned> {
    if special(sql).is_some() {
        return Ok(Planned::Statement);
    }
    let mut statements = DFParser::parse_sql(sql)?;
    if statements.len() != 1 {
        return Ok(Planned::Statement);
    }
    let stmt = statements.pop_front().unwrap();
    let DFStatement::Statement(s) = &stmt else {
        return Ok(Planned::Statement);
    };
    if !matches!(s.as_ref(), Statement::Query(_)) {
        return Ok(Planned::Statement);
    }
    let state = ctx.state();
    let logical = state.statement_to_plan(stmt).await?;
    // `SELECT ... INTO` is a query that plans as DDL.
    if matches!(
        logical,
        LogicalPlan::Ddl(_)
            | LogicalPlan::Dml(_)
            | LogicalPlan::Copy(_)
            | LogicalPlan::Statement(_)
            | LogicalPlan::Explain(_)
            | LogicalPlan::Analyze(_)
            | LogicalPlan::DescribeTable(_)
    ) {
        return Ok(Planned::Statement);
    }
    let scans = cacheable_reads(&logical)?;
    let mut cacheable = scans.is_some();
    // Versions are taken before planning: if a commit lands while the
    // plan is made, the plan may read the newer version, and the older
    // number recorded here only makes the next run plan again.
    let mut tables = Vec::new();
    for (name, provider) in scans.into_iter().flatten() {
        let t = provider.downcast_ref::<FathomTable>().unwrap();
        let by_name = matches!(
            ctx.table_provider(name.clone()).await,
            Ok(p) if Arc::ptr_eq(&p, &provider)
        );
        // A table not found under its name is one a table function made:
        // only a pinned one cannot change behind the plan.
        if !by_name && !t.is_pinned() {
            cacheable = false;
            break;
        }
        let version = t.latest().await?.version();
        tables.push(Read {
            name: by_name.then_some(name),
            provider,
            version,
        });
    }
    let schema = Arc::new(logical.schema().as_arrow().clone());
    let plan = state.create_physical_plan(&logical).await?;
    cacheable = cacheable && !holds_dynamic_filter(&plan)?;
    let entry = Entry {
        plan,
        schema,
        tables,
        config: state.config().options().clone(),
        task: state.task_ctx(),
        used: AtomicU64::new(0),
    };
    Ok(if cacheable {
        Planned::Cache(entry)
    } else {
        Planned::Once(entry)
    })
}

/// A table a query scans: the name it was written as, its provider.
type Scanned = (TableReference, Arc<dyn TableProvider>);

/// The tables a query reads, if they are all Fathom tables and the query
/// has nothing that planning binds to the moment (see the module
/// documentation); `None` if it cannot be cached.
fn cacheable_reads(plan: &LogicalPlan) -> Result<Option<Vec<Scanned>>> {
    let mut reads: Vec<Scanned> = Vec::new();
    let mut ok = true;
    plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            let read = match source_as_provider(&scan.source) {
                Ok(p) if p.downcast_ref::<FathomTable>().is_some() => {
                    Some((scan.table_name.clone(), p))
                }
                // `fts(...)` searches a Fathom table it found by name.
                Ok(p) => p.downcast_ref::<FtsTable>().and_then(|f| match f.source() {
                    (Some(name), inner) => Some((name.clone(), inner.clone())),
                    (None, _) => None,
                }),
                Err(_) => None,
            };
            match read {
                Some((name, p)) => {
                    if !reads.iter().any(|(_, q)| Arc::ptr_eq(q, &p)) {
                        reads.push((name, p));
                    }
                }
                None => ok = false,
            }
        }
        if !ok {
            return Ok(TreeNodeRecursion::Stop);
        }
        node.apply_expressions(|e| {
            e.apply(|e| {
                if !immutable(e) {
                    ok = false;
                    return Ok(TreeNodeRecursion::Stop);
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })?;
        Ok(if ok {
            TreeNodeRecursion::Continue
        } else {
            TreeNodeRecursion::Stop
        })
    })?;
    Ok(ok.then_some(reads))
}

/// Whether `e` alone (not its children) gives the same value whenever the
/// plan runs.
fn immutable(e: &Expr) -> bool {
    match e {
        Expr::ScalarFunction(f) => f.func.signature().volatility == Volatility::Immutable,
        Expr::ScalarVariable(..) | Expr::Placeholder(_) => false,
        _ => true,
    }
}

fn holds_dynamic_filter(plan: &Arc<dyn ExecutionPlan>) -> Result<bool> {
    let mut found = false;
    plan.apply(|node| {
        node.apply_expressions(
            &mut |e: &Arc<dyn datafusion::physical_expr::PhysicalExpr>| {
                e.apply(|x| {
                    if x.downcast_ref::<DynamicFilterPhysicalExpr>().is_some() {
                        found = true;
                        return Ok(TreeNodeRecursion::Stop);
                    }
                    Ok(TreeNodeRecursion::Continue)
                })
            },
        )?;
        Ok(if found {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    })?;
    Ok(found)
}
