//! `fathom`: SQL over Lance datasets from the command line.
//!
//! ```text
//! fathom sql    [--data-dir DIR] [--table NAME=URI]... [-c SQL]... [-f FILE] [--format table|csv|json]
//! fathom import SRC DATASET [--mode create|append|overwrite] [--format auto|parquet|csv|json]
//! fathom info   DATASET
//! fathom demo   [--data-dir DIR]
//! ```
//! Datasets are local directories (`file://` or plain paths) or
//! `memory://` stores; in `fathom sql`, every dataset of the data
//! directory (default `./fathom-data`) is a table.

mod import;
mod info;
mod output;
mod shell;

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "fathom",
    version,
    about = "SQL with indexes over Lance datasets, on DataFusion"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    Csv,
    Json,
}

#[derive(Clone, Copy, ValueEnum, Debug, PartialEq, Eq)]
pub enum ImportMode {
    Create,
    Append,
    Overwrite,
}

#[derive(Clone, Copy, ValueEnum, Debug, PartialEq, Eq)]
pub enum SourceFormat {
    Auto,
    Parquet,
    Csv,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run SQL: interactively, or from -c / -f.
    Sql {
        /// Directory whose datasets are tables (created if missing).
        #[arg(long, default_value = "fathom-data")]
        data_dir: PathBuf,
        /// Register a dataset as a table: NAME=URI.
        #[arg(long = "table", value_name = "NAME=URI")]
        tables: Vec<String>,
        /// SQL to run (repeatable; each may hold several statements).
        #[arg(short = 'c', long = "command")]
        commands: Vec<String>,
        /// A file of SQL statements.
        #[arg(short = 'f', long = "file")]
        file: Option<PathBuf>,
        /// How results are printed.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Import Parquet, CSV or JSON (lines) into a dataset.
    Import {
        source: PathBuf,
        dataset: String,
        #[arg(long, value_enum, default_value_t = ImportMode::Create)]
        mode: ImportMode,
        #[arg(long, value_enum, default_value_t = SourceFormat::Auto)]
        format: SourceFormat,
        /// Rows per data file.
        #[arg(long, default_value_t = 1 << 20)]
        max_rows_per_file: usize,
    },
    /// Versions, fragments, rows, deletions, indexes and sizes of a dataset.
    Info { dataset: String },
    /// Rows of a dataset matching a SQL filter (all rows without one),
    /// answered from its indexes where they can, without SQL planning.
    Count {
        dataset: String,
        /// A SQL boolean expression over the dataset's columns.
        filter: Option<String>,
    },
    /// Compact a dataset: merge small fragments, drop deleted rows, and
    /// extend its indexes over the new fragments (Lance's defaults).
    Compact {
        dataset: String,
        /// Rows a compacted fragment aims for.
        #[arg(long, default_value_t = 1 << 20)]
        target_rows_per_fragment: u64,
        /// Rewrite a fragment alone when more than this share of its rows is deleted.
        #[arg(long, default_value_t = 0.1)]
        materialize_deletions_threshold: f64,
        /// Leave the new fragments unindexed (scanned flat until CREATE INDEX IF NOT EXISTS).
        #[arg(long)]
        no_reindex: bool,
        /// Keep the indexes answering for the moved rows through a fragment
        /// reuse index (Lance's defer_index_remap) instead of re-indexing them.
        #[arg(long)]
        defer_index_remap: bool,
        /// Rewrite the index segments with the moved rows' new addresses
        /// (no table reads for B-tree, bitmap and vector indexes) instead of
        /// re-indexing the new fragments.
        #[arg(long)]
        remap_indexes: bool,
    },
    /// Create a small dataset in the data directory and query it.
    Demo {
        #[arg(long, default_value = "fathom-data")]
        data_dir: PathBuf,
    },
}

/// Stack of the thread that plans queries and of each runtime worker:
/// DataFusion plans and rewrites expressions recursively, so a filter of
/// thousands of OR terms needs far more than the default 8 MiB / 2 MiB.
/// (Only touched pages are committed; this is address space.)
const STACK_BYTES: usize = 512 << 20;

/// mimalloc, as DataFusion's own CLI uses: glibc's allocator slows down
/// as the heap fills with cached readers (measured: a third of a point
/// lookup over 10,000 fragments was spent in `malloc`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    // Writing to a closed pipe (`fathom info ds | head -3`) ends the
    // process quietly, as it does for other command-line tools, instead of
    // a panic in `println!`.
    #[cfg(unix)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    let worker = std::thread::Builder::new()
        .name("fathom-main".into())
        .stack_size(STACK_BYTES)
        .spawn(move || run(cli))
        .expect("main thread");
    let code = worker.join().unwrap_or(101);
    std::process::exit(code);
}

fn run(cli: Cli) -> i32 {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(STACK_BYTES / 4)
        .build()
        .expect("tokio runtime");
    let result = rt.block_on(async {
        match cli.command {
            Command::Sql {
                data_dir,
                tables,
                commands,
                file,
                format,
            } => shell::run(&data_dir, &tables, &commands, file.as_deref(), format).await,
            Command::Import {
                source,
                dataset,
                mode,
                format,
                max_rows_per_file,
            } => import::run(&source, &dataset, mode, format, max_rows_per_file).await,
            Command::Info { dataset } => info::run(&dataset).await,
            Command::Count { dataset, filter } => info::count(&dataset, filter.as_deref()).await,
            Command::Compact {
                dataset,
                target_rows_per_fragment,
                materialize_deletions_threshold,
                no_reindex,
                defer_index_remap,
                remap_indexes,
            } => {
                let sql = format!(
                    "OPTIMIZE t WITH (target_rows_per_fragment = {target_rows_per_fragment}, \
                     materialize_deletions_threshold = {materialize_deletions_threshold}, \
                     reindex = {}, defer_index_remap = {defer_index_remap}, \
                     remap_indexes = {remap_indexes})",
                    !no_reindex
                );
                shell::run_on_dataset(&dataset, &sql).await
            }
            Command::Demo { data_dir } => shell::demo(&data_dir).await,
        }
    });
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("Error: {e}");
            1
        }
    }
}
