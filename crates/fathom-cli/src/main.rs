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
    /// Create a small dataset in the data directory and query it.
    Demo {
        #[arg(long, default_value = "fathom-data")]
        data_dir: PathBuf,
    },
}

fn main() {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
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
            Command::Demo { data_dir } => shell::demo(&data_dir).await,
        }
    });
    if let Err(e) = result {
        eprintln!("Error: {e}");
        std::process::exit(1);
    }
}
