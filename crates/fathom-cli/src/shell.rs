//! `fathom sql` and `fathom demo`: statements are parsed with DataFusion's
//! parser (so `;` inside strings is fine) and run one at a time; an error
//! stops a script with one clear line.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use fathom_datafusion::sql::BuildProgress;
use indicatif::{ProgressBar, ProgressStyle};

use datafusion::prelude::SessionContext;
use datafusion::sql::parser::DFParser;
use fathom_datafusion::{PlanCache, TableOptions, new_session, register_dataset};
use rustyline::DefaultEditor;
use rustyline::error::ReadlineError;

use crate::{Format, output};

async fn session(data_dir: &Path, tables: &[String]) -> Result<SessionContext, String> {
    let ctx = new_session(Some(data_dir)).map_err(|e| e.to_string())?;
    ctx.state_ref()
        .write()
        .config_mut()
        .set_extension(Arc::new(build_progress()));
    for t in tables {
        let (name, uri) = t
            .split_once('=')
            .ok_or_else(|| format!("--table expects NAME=URI, got '{t}'"))?;
        register_dataset(&ctx, name, uri, TableOptions::default())
            .await
            .map_err(|e| format!("table {name}: {e}"))?;
    }
    Ok(ctx)
}

/// A progress bar per phase of a long index build, on stderr.
fn build_progress() -> BuildProgress {
    let current: Mutex<Option<(String, ProgressBar)>> = Mutex::new(None);
    BuildProgress(Arc::new(move |phase: &str, done: u64, total: u64| {
        let mut g = current.lock().unwrap();
        if g.as_ref().is_none_or(|(p, _)| p != phase) {
            if let Some((_, bar)) = g.take() {
                bar.finish();
            }
            let bar = ProgressBar::new(total).with_style(
                ProgressStyle::with_template(&format!(
                    "{{spinner}} {phase:<9} [{{bar:40}}] {{pos}}/{{len}} rows ({{per_sec}}, eta {{eta}})"
                ))
                .unwrap()
                .progress_chars("=> "),
            );
            *g = Some((phase.to_string(), bar));
        }
        let bar = &g.as_ref().unwrap().1;
        bar.set_position(done.min(total));
        if phase == "writing" {
            bar.finish_and_clear();
        } else if done >= total {
            bar.finish();
        }
    }))
}

/// Runs `sql` with the dataset at `uri` registered as `t`, printing results
/// and showing progress.
pub async fn run_on_dataset(uri: &str, sql: &str) -> Result<(), String> {
    let ctx = new_session(None).map_err(|e| e.to_string())?;
    ctx.state_ref()
        .write()
        .config_mut()
        .set_extension(Arc::new(build_progress()));
    register_dataset(&ctx, "t", uri, TableOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    run_script(&ctx, sql, Format::Table, false, None).await
}

/// Runs every statement of `sql`, printing results. A single query goes
/// through `cache` when one is given (the interactive shell's: a query
/// typed again is not planned again while its tables are unchanged).
pub async fn run_script(
    ctx: &SessionContext,
    sql: &str,
    format: Format,
    timing: bool,
    cache: Option<&PlanCache>,
) -> Result<(), String> {
    if fathom_datafusion::sql::special(sql).is_some() {
        for (schema, batches) in fathom_datafusion::sql::run_sql(ctx, sql)
            .await
            .map_err(|e| e.to_string())?
        {
            output::print(&schema, &batches, format, &mut std::io::stdout())?;
        }
        return Ok(());
    }
    let statements = DFParser::parse_sql(sql).map_err(|e| e.to_string())?;
    let mut out = std::io::stdout();
    if let Some(cache) = cache
        && statements.len() == 1
    {
        let start = Instant::now();
        let outputs = cache.sql(ctx, sql).await.map_err(|e| e.to_string())?;
        for (schema, batches) in &outputs {
            output::print(schema, batches, format, &mut out)?;
            if timing {
                let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
                eprintln!("{rows} row(s) in {:.3}s", start.elapsed().as_secs_f64());
            }
        }
        return Ok(());
    }
    for stmt in statements {
        let start = Instant::now();
        // Fathom's own statements (CREATE/DROP INDEX) first, then DataFusion.
        let (schema, batches) = fathom_datafusion::sql::run_statement(ctx, stmt)
            .await
            .map_err(|e| e.to_string())?;
        output::print(&schema, &batches, format, &mut out)?;
        if timing {
            let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
            eprintln!("{rows} row(s) in {:.3}s", start.elapsed().as_secs_f64());
        }
    }
    Ok(())
}

pub async fn run(
    data_dir: &Path,
    tables: &[String],
    commands: &[String],
    file: Option<&Path>,
    format: Format,
) -> Result<(), String> {
    let ctx = session(data_dir, tables).await?;
    let mut ran = false;
    for c in commands {
        run_script(&ctx, c, format, false, None).await?;
        ran = true;
    }
    if let Some(f) = file {
        let sql =
            std::fs::read_to_string(f).map_err(|e| format!("cannot read {}: {e}", f.display()))?;
        run_script(&ctx, &sql, format, false, None).await?;
        ran = true;
    }
    if ran {
        return Ok(());
    }
    use std::io::IsTerminal;
    if !std::io::stdin().is_terminal() {
        // A script on standard input: run it as a file, stopping (and
        // exiting non-zero) at the first failing statement.
        let mut sql = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut sql)
            .map_err(|e| format!("cannot read standard input: {e}"))?;
        return run_script(&ctx, &sql, format, false, None).await;
    }
    interactive(&ctx, data_dir, format).await
}

async fn interactive(ctx: &SessionContext, data_dir: &Path, format: Format) -> Result<(), String> {
    let mut rl = DefaultEditor::new().map_err(|e| e.to_string())?;
    let history = std::env::var_os("HOME").map(|h| Path::new(&h).join(".fathom_history"));
    if let Some(h) = &history {
        let _ = rl.load_history(h);
    }
    println!(
        "fathom SQL shell; tables are the datasets in {}. End statements with ';', \\q quits.",
        data_dir.display()
    );
    let cache = PlanCache::new(256);
    let mut buf = String::new();
    loop {
        let prompt = if buf.is_empty() {
            "fathom> "
        } else {
            "   ...> "
        };
        match rl.readline(prompt) {
            Ok(line) => {
                let t = line.trim();
                if buf.is_empty() && matches!(t, "\\q" | "quit" | "exit") {
                    break;
                }
                buf.push_str(&line);
                buf.push('\n');
                if t.ends_with(';') {
                    let _ = rl.add_history_entry(buf.trim());
                    if let Err(e) = run_script(ctx, &buf, format, true, Some(&cache)).await {
                        eprintln!("Error: {e}");
                    }
                    buf.clear();
                }
            }
            Err(ReadlineError::Interrupted) => buf.clear(),
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(e.to_string()),
        }
    }
    if let Some(h) = &history {
        let _ = rl.save_history(h);
    }
    Ok(())
}

/// Creates `demo` in the data directory and shows what Fathom is for:
/// SQL over a Lance dataset, indexes that the scan uses (EXPLAIN shows the
/// index branch unioned with a flat scan of rows appended after the index
/// was built), the same query timed with and without its index, and
/// deletes, updates and time travel.
pub async fn demo(data_dir: &Path) -> Result<(), String> {
    let ctx = session(data_dir, &[]).await?;
    let steps = [
        "DROP TABLE IF EXISTS demo",
        "CREATE TABLE demo AS SELECT value AS id, value % 50 AS category, 'item-' || CAST(value AS VARCHAR) AS name, \
         CAST(value % 997 AS DOUBLE) / 10.0 AS score FROM generate_series(1, 100000)",
        "SELECT count(*) AS rows FROM demo",
        "SELECT category, count(*) AS n, round(avg(score), 2) AS avg_score FROM demo WHERE category < 3 GROUP BY category ORDER BY category",
        "CREATE INDEX demo_id ON demo USING BTREE (id)",
        "CREATE INDEX demo_category ON demo USING BITMAP (category)",
        "INSERT INTO demo SELECT value AS id, value % 50, 'new-' || CAST(value AS VARCHAR), 0.0 FROM generate_series(100001, 101000)",
        "SHOW INDEXES FROM demo",
        "EXPLAIN SELECT * FROM demo WHERE id IN (7, 4242, 100500)",
        "SELECT * FROM demo WHERE id IN (7, 4242, 100500) ORDER BY id",
        "DELETE FROM demo WHERE category = 0",
        "UPDATE demo SET score = score + 1000 WHERE id = 7",
        "SELECT * FROM demo WHERE id BETWEEN 5 AND 9 ORDER BY id",
        "SELECT count(*) AS rows_now, (SELECT count(*) FROM lance_table('DATA/demo.lance', 1)) AS rows_in_version_1 FROM demo",
        // Vector search: an IVF_PQ index, a prefiltered nearest-neighbour query.
        "DROP TABLE IF EXISTS docs",
        "CREATE TABLE docs AS SELECT value AS id, 'topic-' || CAST(value % 10 AS VARCHAR) AS topic, \
         arrow_cast(make_array(sin(value), cos(value), sin(value / 2), cos(value / 2), \
         sin(value / 4), cos(value / 4), sin(value / 8), cos(value / 8)), 'FixedSizeList(8, Float32)') AS emb \
         FROM generate_series(1, 20000)",
        "CREATE INDEX docs_emb ON docs USING IVF_PQ (emb) WITH (num_partitions = 16, num_sub_vectors = 4)",
        "EXPLAIN SELECT id, topic, l2_distance(emb, [0.5, 0.8, 0.1, 0.9, 0.3, 0.9, 0.2, 0.95]) AS d \
         FROM docs WHERE topic = 'topic-3' ORDER BY d LIMIT 5",
        "SELECT id, topic, l2_distance(emb, [0.5, 0.8, 0.1, 0.9, 0.3, 0.9, 0.2, 0.95]) AS d \
         FROM docs WHERE topic = 'topic-3' ORDER BY d LIMIT 5",
        // Full-text search: an inverted index, BM25-ranked matches.
        "DROP TABLE IF EXISTS notes",
        "CREATE TABLE notes AS SELECT value AS id, \
         concat_ws(' ', arrow_cast(['The', 'A', 'Every'][value % 3 + 1], 'Utf8'), \
         arrow_cast(['quick', 'lazy', 'sleepy', 'clever'][value % 4 + 1], 'Utf8'), \
         arrow_cast(['brown', 'grey', 'red'][value % 7 % 3 + 1], 'Utf8'), \
         arrow_cast(['fox', 'dog', 'cat', 'owl', 'hen'][value % 5 + 1], 'Utf8'), \
         arrow_cast(['jumps', 'runs', 'sleeps'][value % 11 % 3 + 1], 'Utf8'), \
         'note ' || CAST(value AS VARCHAR)) AS body FROM generate_series(1, 20000)",
        "CREATE INDEX notes_body ON notes USING INVERTED (body) WITH (with_position = true)",
        "EXPLAIN SELECT id, body, _score FROM fts('notes', 'body', 'clever foxes jumping') \
         ORDER BY _score DESC LIMIT 5",
        "SELECT id, body, _score FROM fts('notes', 'body', 'clever foxes jumping') \
         WHERE id > 10000 ORDER BY _score DESC LIMIT 5",
        "SELECT count(*) AS phrase_hits FROM fts('notes', 'body', '\"red owl\"')",
    ];
    let dir = std::fs::canonicalize(data_dir).map_err(|e| e.to_string())?;
    let data = dir.to_str().unwrap();
    for s in steps {
        let s = s.replace("DATA", data);
        println!("fathom> {s};");
        run_script(&ctx, &s, Format::Table, true, None).await?;
    }
    // The same lookup through the index and as a full scan (version 1 of
    // the table, before any index existed), each the median of 9 runs.
    let with_index = "SELECT * FROM demo WHERE id = 54321".to_string();
    let full_scan = format!("SELECT * FROM lance_table('{data}/demo.lance', 1) WHERE id = 54321");
    let a = median_ms(&ctx, &with_index, None).await?;
    let cache = PlanCache::new(8);
    let c = median_ms(&ctx, &with_index, Some(&cache)).await?;
    let b = median_ms(&ctx, &full_scan, None).await?;
    println!("timing (median of 9 runs):");
    println!("  {a:8.2} ms  {with_index}   (B-tree index)");
    println!("  {c:8.2} ms  {with_index}   (B-tree index, plan cached as the shell does)");
    println!("  {b:8.2} ms  {full_scan}   (full scan)");
    if cfg!(debug_assertions) {
        println!(
            "  (a debug build: all three are dominated by unoptimised planning and decoding; \
             `cargo run --release -p fathom-cli -- demo` or the benchmarks in the README \
             give representative numbers)"
        );
    }
    println!(
        "The dataset is in {}; try: fathom info {}/demo.lance",
        dir.display(),
        dir.display()
    );
    Ok(())
}

async fn median_ms(
    ctx: &SessionContext,
    sql: &str,
    cache: Option<&PlanCache>,
) -> Result<f64, String> {
    let mut times = Vec::new();
    for _ in 0..9 {
        let start = Instant::now();
        match cache {
            Some(c) => c.sql(ctx, sql).await,
            None => fathom_datafusion::sql::run_sql(ctx, sql).await,
        }
        .map_err(|e| e.to_string())?;
        times.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}
