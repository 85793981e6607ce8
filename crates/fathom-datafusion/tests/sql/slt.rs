//! The sqllogictest runner: each query's output (or error) is compared
//! with the expected text in the `.slt` file.

use std::path::PathBuf;

use arrow_array::RecordBatch;
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use async_trait::async_trait;
use datafusion::error::DataFusionError;
use datafusion::prelude::SessionContext;
use sqllogictest::{DBOutput, DefaultColumnType};

pub struct FathomDb {
    pub ctx: SessionContext,
    /// `__DATA__`: the session's data directory.
    dir: tempfile::TempDir,
    /// `__TEST_DIR__`: scratch space for external tables.
    scratch: tempfile::TempDir,
}

impl FathomDb {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ctx = fathom_datafusion::new_session(Some(dir.path())).unwrap();
        FathomDb {
            ctx,
            dir,
            scratch: tempfile::tempdir().unwrap(),
        }
    }
}

fn rows(batches: &[RecordBatch]) -> Result<Vec<Vec<String>>, DataFusionError> {
    let opts = FormatOptions::default().with_null("NULL");
    let mut out = Vec::new();
    for b in batches {
        let fmts = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts))
            .collect::<Result<Vec<_>, _>>()?;
        for r in 0..b.num_rows() {
            let row: Vec<String> = fmts
                .iter()
                .map(|f| {
                    let s = f.value(r).to_string().trim_end().to_string();
                    if s.is_empty() {
                        "(empty)".to_string()
                    } else {
                        s
                    }
                })
                .collect();
            if row.iter().any(|c| c.contains('\n')) {
                // Multi-line values (plans): one output line per text line.
                for line in row.join(" ").lines() {
                    out.push(vec![line.trim_end().to_string()]);
                }
            } else {
                out.push(row);
            }
        }
    }
    Ok(out)
}

#[async_trait]
impl sqllogictest::AsyncDB for FathomDb {
    type Error = DataFusionError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<Self::ColumnType>, Self::Error> {
        // `__DATA__` names the session's data directory.
        let sql = sql
            .replace("__DATA__", self.dir.path().to_str().unwrap())
            .replace("__TEST_DIR__", self.scratch.path().to_str().unwrap());
        let (schema, batches) = fathom_datafusion::sql::run_sql(&self.ctx, &sql)
            .await?
            .pop()
            .ok_or_else(|| DataFusionError::Plan("no statement".into()))?;
        let width = schema.fields().len();
        if width == 0 {
            return Ok(DBOutput::StatementComplete(0));
        }
        Ok(DBOutput::Rows {
            types: vec![DefaultColumnType::Any; width],
            rows: rows(&batches)?,
        })
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "fathom"
    }
}

fn slt_files() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/slt");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .collect();
    files.sort();
    files
}

#[test]
fn sqllogictest_files() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut failures = Vec::new();
    let files = slt_files();
    assert!(!files.is_empty());
    for file in files {
        let result = rt.block_on(async {
            let mut runner = sqllogictest::Runner::new(|| async { Ok(FathomDb::new()) });
            runner.with_column_validator(sqllogictest::default_column_validator);
            runner.run_file_async(&file).await
        });
        match result {
            Ok(()) => eprintln!("ok   {}", file.display()),
            Err(e) => failures.push(format!("{}:\n{e}", file.display())),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
