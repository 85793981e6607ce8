//! Interop with pylance: datasets it writes (format 2.0, stable row ids,
//! several fragments, both kinds of deletion file, several versions) read
//! back equal here, every version; datasets written here open in pylance
//! with equal rows, counts, versions and time travel; pylance can append to
//! and delete from them (in-place column updates included), and we read
//! the result.

use std::path::{Path as FsPath, PathBuf};
use std::process::Command;
use std::sync::Arc;

use arrow_array::RecordBatch;
use fathom_table::{Dataset, WriteMode, WriteParams};

use super::{rows, runtime};

fn script() -> PathBuf {
    FsPath::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/interop/pylance_dataset.py")
}

fn pylance() -> Option<String> {
    let py = std::env::var("FATHOM_PYTHON").unwrap_or_else(|_| "python3".into());
    if Command::new(&py)
        .args(["-c", "import lance"])
        .status()
        .is_ok_and(|s| s.success())
    {
        return Some(py);
    }
    if std::env::var("FATHOM_REQUIRE_PYLANCE").is_ok_and(|v| v == "1") {
        panic!("FATHOM_REQUIRE_PYLANCE=1 but pylance cannot be imported");
    }
    eprintln!("SKIPPED: pylance not installed (pip install -r requirements-interop.txt)");
    None
}

fn run(py: &str, cmd: &str, dir: &FsPath) -> String {
    let out = Command::new(py)
        .arg(script())
        .arg(cmd)
        .arg(dir)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "pylance_dataset.py {cmd} failed:\n{text}"
    );
    text
}

fn read_ipc(path: &FsPath) -> RecordBatch {
    let f = std::fs::File::open(path).unwrap();
    let r = arrow_ipc::reader::FileReader::try_new(f, None).unwrap();
    let schema = r.schema();
    let batches: Vec<RecordBatch> = r.map(|b| b.unwrap()).collect();
    arrow_select::concat::concat_batches(&schema, &batches).unwrap()
}

fn write_ipc(path: &FsPath, b: &RecordBatch) {
    let f = std::fs::File::create(path).unwrap();
    let mut w = arrow_ipc::writer::FileWriter::try_new(f, &b.schema()).unwrap();
    w.write(b).unwrap();
    w.finish().unwrap();
}

#[test]
fn we_read_every_version_pylance_writes() {
    let Some(py) = pylance() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = run(&py, "write", dir.path());
    assert!(
        out.contains("\"arrow\"") && out.contains("\"bin\""),
        "both deletion kinds: {out}"
    );
    runtime().block_on(async {
        let uri = dir.path().join("py_ds").to_str().unwrap().to_string();
        let ds = Dataset::open(&uri).await.unwrap();
        assert!(ds.manifest().uses_stable_row_ids());
        let versions = ds.versions().await.unwrap();
        assert!(versions.len() >= 5);
        assert_eq!(
            ds.schema().fields().last().unwrap().name(),
            "extra",
            "added column"
        );
        for v in versions {
            let want = read_ipc(&dir.path().join(format!("py_v{}.arrow", v.version)));
            let old = ds.checkout(v.version).await.unwrap();
            let mut names: Vec<String> = old
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect();
            names.push("_rowid".into());
            let got = old.scan().project(&names).unwrap().collect().await.unwrap();
            assert_eq!(got.num_rows(), want.num_rows(), "version {}", v.version);
            for (i, f) in want.schema().fields().iter().enumerate() {
                assert_eq!(
                    got.column(i),
                    want.column(i),
                    "version {} column {}",
                    v.version,
                    f.name()
                );
            }
            assert_eq!(old.count_rows() as usize, want.num_rows());
        }
    });
}

/// pylance's default data storage version (2.2 in pylance 14): every
/// version reads equal to pylance; a delete by us and rows we add (with a
/// list column) are read back by pylance.
#[test]
fn pylance_default_version_dataset() {
    let Some(py) = pylance() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(&py)
        .arg(script())
        .args(["write", dir.path().to_str().unwrap(), "default"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("\"data_storage_version\": \"2.2\""), "{text}");
    runtime().block_on(async {
        let uri = dir.path().join("py_ds").to_str().unwrap().to_string();
        let ds = Dataset::open(&uri).await.unwrap();
        assert_eq!(ds.manifest().data_format.1, "2.2");
        for v in ds.versions().await.unwrap() {
            let want = read_ipc(&dir.path().join(format!("py_v{}.arrow", v.version)));
            let old = ds.checkout(v.version).await.unwrap();
            let mut names: Vec<String> = old
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect();
            names.push("_rowid".into());
            let got = old.scan().project(&names).unwrap().collect().await.unwrap();
            assert_eq!(got.num_rows(), want.num_rows(), "version {}", v.version);
            for (i, f) in want.schema().fields().iter().enumerate() {
                assert_eq!(
                    got.column(i),
                    want.column(i),
                    "version {} column {}",
                    v.version,
                    f.name()
                );
            }
        }
        // Delete ids divisible by 3; pylance must see exactly the rest.
        let ds = ds
            .delete_where(&["id"], |b| {
                let id = b
                    .column(0)
                    .as_any()
                    .downcast_ref::<arrow_array::Int64Array>()
                    .unwrap();
                Ok(id.iter().map(|v| v.map(|v| v % 3 == 0)).collect())
            })
            .await
            .unwrap();
        let mine = ds
            .scan()
            .project(&["id", "name", "score", "tags", "extra", "_rowid"])
            .unwrap()
            .collect()
            .await
            .unwrap();
        let out = run(&py, "dump_latest", dir.path());
        assert!(out.contains("\"rows\""), "{out}");
        let theirs = read_ipc(&dir.path().join("py_latest.arrow"));
        assert_eq!(
            mine.num_rows(),
            theirs.num_rows(),
            "pylance reads our delete"
        );
        for i in 0..theirs.num_columns() {
            assert_eq!(mine.column(i), theirs.column(i), "pylance reads our delete");
        }
        // Rows we add (a list column among them) are 2.2 files that
        // pylance reads back.
        let some = mine.project(&[0, 1, 2, 3, 4]).unwrap().slice(0, 50);
        let ds = ds.append(&[some], &WriteParams::default()).await.unwrap();
        let last = ds.manifest().fragments.last().unwrap();
        assert_eq!(
            (
                last.files[0].file_major_version,
                last.files[0].file_minor_version
            ),
            (2, 2)
        );
        let mine = ds
            .scan()
            .project(&["id", "name", "score", "tags", "extra", "_rowid"])
            .unwrap()
            .collect()
            .await
            .unwrap();
        run(&py, "dump_latest", dir.path());
        let theirs = read_ipc(&dir.path().join("py_latest.arrow"));
        assert_eq!(
            mine.num_rows(),
            theirs.num_rows(),
            "pylance reads our append"
        );
        for i in 0..theirs.num_columns() {
            assert_eq!(mine.column(i), theirs.column(i), "pylance reads our append");
        }
    });
}

/// Rows we add to a pylance-default (2.2) dataset are 2.2 files pylance
/// reads back equal, beside its own, after a delete of ours.
#[test]
fn we_append_to_a_pylance_default_dataset() {
    let Some(py) = pylance() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = run(&py, "write_flat", dir.path());
    assert!(out.contains("2.2"), "{out}");
    runtime().block_on(async {
        let uri = dir.path().join("py_flat").to_str().unwrap().to_string();
        let ds = Dataset::open(&uri).await.unwrap();
        let theirs = read_ipc(&dir.path().join("py_flat.arrow"));
        let mine = ds.scan().collect().await.unwrap();
        assert_eq!(mine.columns(), theirs.columns());
        // Append pylance's own rows again (ids shifted), then delete some.
        let shifted = {
            let id = arrow_array::Int64Array::from_iter_values((0..5000).map(|i| i + 10_000));
            let mut cols = theirs.columns().to_vec();
            cols[0] = Arc::new(id);
            RecordBatch::try_new(theirs.schema(), cols).unwrap()
        };
        let params = WriteParams {
            max_rows_per_file: 3000,
            ..Default::default()
        };
        let ds = ds.append(&[shifted], &params).await.unwrap();
        for f in &ds.manifest().fragments[3..] {
            assert_eq!(
                (f.files[0].file_major_version, f.files[0].file_minor_version),
                (2, 2)
            );
        }
        let ds = ds
            .delete_where(&["id"], |b| {
                let id = b
                    .column(0)
                    .as_any()
                    .downcast_ref::<arrow_array::Int64Array>()
                    .unwrap();
                Ok(id.iter().map(|v| v.map(|v| v % 10 == 3)).collect())
            })
            .await
            .unwrap();
        let mine = ds
            .scan()
            .project(&["id", "name", "score", "emb", "st", "_rowid"])
            .unwrap()
            .collect()
            .await
            .unwrap();
        assert_eq!(mine.num_rows(), 9000);
        let out = Command::new(&py)
            .arg(script())
            .args(["dump_latest", dir.path().to_str().unwrap(), "py_flat"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let theirs = read_ipc(&dir.path().join("py_latest.arrow"));
        assert_eq!(mine.num_rows(), theirs.num_rows());
        for i in 0..theirs.num_columns() {
            assert_eq!(mine.column(i), theirs.column(i), "column {i}");
        }
    });
}

#[test]
fn pylance_reads_and_changes_what_we_write() {
    let Some(py) = pylance() else { return };
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("rs_ds").to_str().unwrap().to_string();
    runtime().block_on(async {
        let params = WriteParams {
            max_rows_per_file: 3000,
            ..Default::default()
        };
        let ds = Dataset::write(&uri, &[rows(0..10_000)], WriteMode::Create, params.clone())
            .await
            .unwrap();
        // > 5,000 deletions in fragment 0 is impossible with 3,000 rows; use a bigger append.
        let ds = ds
            .append(
                &[rows(10_000..20_000)],
                &WriteParams {
                    max_rows_per_file: 10_000,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let ds = ds
            .delete_where(&["id"], |b| {
                use arrow_array::cast::AsArray;
                Ok(b.column(0)
                    .as_primitive::<arrow_array::types::Int64Type>()
                    .iter()
                    .map(|v| v.map(|v| v % 3 == 0 || (11_000..17_000).contains(&v)))
                    .collect())
            })
            .await
            .unwrap();
        let ds = ds.delete_rows(&[1, 2]).await.unwrap();
        // In-place column updates (tombstoned field ids), twice over the
        // same fragments: the first update's file is then dropped whole.
        let mut ds = ds;
        for (m, tag) in [(7, "u"), (14, "w")] {
            use arrow_array::cast::AsArray;
            let all = ds
                .scan()
                .project(&["id", "_rowaddr"])
                .unwrap()
                .collect()
                .await
                .unwrap();
            let ids = all
                .column(0)
                .as_primitive::<arrow_array::types::Int64Type>();
            let addrs = all
                .column(1)
                .as_primitive::<arrow_array::types::UInt64Type>();
            let (mut hit, mut vals) = (vec![], vec![]);
            for i in 0..all.num_rows() {
                if ids.value(i) % m == 1 {
                    hit.push(addrs.value(i));
                    vals.push((ids.value(i) % 4 != 1).then(|| format!("{tag}{}", ids.value(i))));
                }
            }
            let values = RecordBatch::try_new(
                Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
                    "value",
                    arrow_schema::DataType::Utf8,
                    true,
                )])),
                vec![Arc::new(arrow_array::StringArray::from(vals))],
            )
            .unwrap();
            ds = ds
                .update_columns(&["value"], &hit, &values, None)
                .await
                .unwrap();
        }
        assert!(
            ds.fragments()
                .iter()
                .any(|f| f.files.len() == 2 && f.files[0].fields.contains(&-2))
        );
        let kinds: Vec<_> = ds
            .fragments()
            .iter()
            .filter_map(|f| f.deletion_file.as_ref().map(|d| d.kind))
            .collect();
        assert!(kinds.contains(&fathom_table::format::DeletionFileKind::Bitmap));
        assert!(kinds.contains(&fathom_table::format::DeletionFileKind::Arrow));
        for v in ds.versions().await.unwrap() {
            let b = ds
                .checkout(v.version)
                .await
                .unwrap()
                .scan()
                .collect()
                .await
                .unwrap();
            write_ipc(&dir.path().join(format!("rs_v{}.arrow", v.version)), &b);
        }
    });
    run(&py, "check", dir.path());
    run(&py, "mutate", dir.path());
    runtime().block_on(async {
        let ds = Dataset::open(&uri).await.unwrap();
        let want = read_ipc(&dir.path().join("rs_after.arrow"));
        let got = ds.scan().collect().await.unwrap();
        assert_eq!(got.num_rows(), want.num_rows());
        for i in 0..want.num_columns() {
            assert_eq!(got.column(i), want.column(i));
        }
    });
}

/// Dictionary-encoded strings and null-typed columns: pylance's open here
/// with their types, and a dictionary column written here reads in
/// pylance with the same values (Lance's `dict:` logical type).
#[test]
fn dictionary_and_null_columns_both_ways() {
    use arrow_array::cast::AsArray;
    use arrow_schema::DataType;
    let Some(py) = pylance() else { return };
    let dir = tempfile::tempdir().unwrap();
    run(&py, "write_dict", dir.path());
    let expected = read_ipc(&dir.path().join("py_dict.arrow"));
    let rt = runtime();
    let uri = dir.path().join("py_dict");
    let ds = rt.block_on(Dataset::open(uri.to_str().unwrap())).unwrap();
    let dict = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
    assert_eq!(ds.schema().field(1).data_type(), &dict);
    assert_eq!(ds.schema().field(2).data_type(), &DataType::Null);
    let got = rt.block_on(ds.scan().collect()).unwrap();
    assert_eq!(got.num_rows(), 3000);
    let values = |b: &RecordBatch| -> Vec<Option<String>> {
        let c = arrow_cast::cast(b.column(1), &DataType::Utf8).unwrap();
        c.as_string::<i32>()
            .iter()
            .map(|v| v.map(String::from))
            .collect()
    };
    assert!(
        values(&got) == values(&expected),
        "dictionary values differ"
    );
    assert_eq!(got.column(1).data_type(), &dict);
    assert_eq!(got.column(2).logical_null_count(), 3000);

    // Appending to a dictionary column is refused, naming it; nothing
    // is committed.
    let err = rt
        .block_on(ds.append(&[got.slice(0, 10)], &WriteParams::default()))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("'color'") && err.contains("dictionary"),
        "{err}"
    );
    let again = rt.block_on(Dataset::open(uri.to_str().unwrap())).unwrap();
    assert_eq!(again.version(), ds.version());

    // Dictionary input is stored as its values (as the SQL layer and the
    // importer do); pylance reads them back, and filters on them.
    let as_strings = arrow_cast::cast(got.column(1), &DataType::Utf8).unwrap();
    let ours = RecordBatch::try_new(
        std::sync::Arc::new(arrow_schema::Schema::new(vec![
            ds.schema().field(0).clone(),
            arrow_schema::Field::new("color", DataType::Utf8, true),
        ])),
        vec![got.column(0).clone(), as_strings],
    )
    .unwrap();
    let out = dir.path().join("rs_dict");
    rt.block_on(Dataset::write(
        out.to_str().unwrap(),
        std::slice::from_ref(&ours),
        WriteMode::Create,
        WriteParams::default(),
    ))
    .unwrap();
    let text = run(&py, "read_dict", dir.path());
    let back = read_ipc(&dir.path().join("rs_dict_read.arrow"));
    assert!(
        values(&back) == values(&ours),
        "pylance read other values\n{text}"
    );
    let reds = values(&ours)
        .iter()
        .filter(|v| v.as_deref() == Some("red"))
        .count();
    assert!(text.contains(&format!("red {reds}")), "{text}");
}

/// A dataset of pylance's unstable format 2.3 (a new page layout, planar)
/// is refused at open with an error naming its version, not misread.
#[test]
fn an_unstable_2_3_dataset_is_refused_by_name() {
    let Some(py) = pylance() else { return };
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("v23").to_str().unwrap().to_string();
    let out = Command::new(&py)
        .args([
            "-c",
            "import sys, lance, pyarrow as pa; \
             lance.write_dataset(pa.table({'id': list(range(100))}), sys.argv[1], \
             data_storage_version='2.3')",
            &uri,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = runtime()
        .block_on(Dataset::open(&uri))
        .expect_err("refused")
        .to_string();
    assert!(err.contains("2.3") && err.contains("v23"), "{err}");
}
