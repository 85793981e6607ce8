//! Interop with the real Lance (pylance, pinned in requirements-interop.txt):
//! pylance writes 2.0 files covering every type and we read them equal to
//! the Arrow IPC copies it wrote beside them; we write files of every type
//! and pylance's `LanceFileReader` reads them equal to our IPC copies.
//!
//! Skipped (with a message) when pylance is not importable, unless
//! `FATHOM_REQUIRE_PYLANCE=1` (set by .ci/run), where it must run.

use std::path::{Path as FsPath, PathBuf};
use std::process::Command;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, Schema};
use fathom_file::{FileReader, FileReaderOptions, FileVersion, FileWriterOptions};
use fathom_testing::generate::{Gen, leaf_types};
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::path::Path;

use super::{runtime, write_file};

fn script() -> PathBuf {
    FsPath::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/interop/pylance_file.py")
}

/// `Some(python)` if pylance can be imported.
pub fn pylance() -> Option<String> {
    let py = std::env::var("FATHOM_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&py)
        .args(["-c", "import lance, pyarrow"])
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return Some(py);
    }
    if std::env::var("FATHOM_REQUIRE_PYLANCE").is_ok_and(|v| v == "1") {
        panic!(
            "FATHOM_REQUIRE_PYLANCE=1 but `{py} -c 'import lance'` fails: pip install -r requirements-interop.txt"
        );
    }
    eprintln!("SKIPPED: pylance not installed (pip install -r requirements-interop.txt)");
    None
}

fn read_ipc(path: &FsPath) -> Vec<RecordBatch> {
    let f = std::fs::File::open(path).unwrap();
    arrow_ipc::reader::FileReader::try_new(f, None)
        .unwrap()
        .map(|b| b.unwrap())
        .collect()
}

fn write_ipc(path: &FsPath, batches: &[RecordBatch]) {
    let f = std::fs::File::create(path).unwrap();
    let mut w = arrow_ipc::writer::FileWriter::try_new(f, &batches[0].schema()).unwrap();
    for b in batches {
        w.write(b).unwrap();
    }
    w.finish().unwrap();
}

#[test]
fn we_read_what_pylance_writes() {
    read_pylance_files("2.0");
}

#[test]
fn we_read_what_pylance_writes_2_1() {
    read_pylance_files("2.1");
}

#[test]
fn we_read_what_pylance_writes_2_2() {
    read_pylance_files("2.2");
}

/// Every type, nulls at every level, written by pylance at `version`, read
/// back whole, by range and by take, equal to pylance's own Arrow copy.
fn read_pylance_files(version: &str) {
    let Some(py) = pylance() else { return };
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new(&py)
        .arg(script())
        .arg("write")
        .arg(dir.path())
        .arg(version)
        .status()
        .unwrap();
    assert!(status.success(), "pylance failed to write its files");
    let store: Arc<dyn ObjectStore> =
        Arc::new(LocalFileSystem::new_with_prefix(dir.path()).unwrap());
    let mut seen = 0;
    runtime().block_on(async {
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let p = entry.unwrap().path();
            if p.extension().is_none_or(|e| e != "lance") {
                continue;
            }
            seen += 1;
            let name = p.file_name().unwrap().to_str().unwrap().to_string();
            let expected = read_ipc(&p.with_extension("arrow"));
            let expected =
                arrow_select::concat::concat_batches(&expected[0].schema(), &expected).unwrap();
            let reader = FileReader::open(
                store.clone(),
                Path::from(name.as_str()),
                None,
                FileReaderOptions::default(),
            )
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
            let n = reader.num_rows();
            let (proj, expected): (Vec<usize>, _) = if std::env::var("SKIPLISTS").is_ok() {
                let p: Vec<usize> = expected
                    .schema()
                    .fields()
                    .iter()
                    .enumerate()
                    .filter(|(_, f)| {
                        !matches!(
                            f.data_type(),
                            arrow_schema::DataType::List(_) | arrow_schema::DataType::LargeList(_)
                        )
                    })
                    .map(|(i, _)| i)
                    .collect();
                (p.clone(), expected.project(&p).unwrap())
            } else {
                ((0..expected.num_columns()).collect(), expected)
            };
            let proj = Some(proj.as_slice());
            let got = reader
                .read_range(0..n, proj)
                .await
                .unwrap_or_else(|e| panic!("{name} ({version}): {e}"));
            assert_eq!(got.schema(), expected.schema(), "{name}: schema");
            for (i, f) in expected.schema().fields().iter().enumerate() {
                assert_eq!(
                    got.column(i),
                    expected.column(i),
                    "{name} ({version}): column {}",
                    f.name()
                );
            }
            let idx = [n - 1, 0, n / 2, n / 3, 1, n - 2, 1025.min(n - 1)];
            let took = reader.take(&idx, proj).await.unwrap();
            same_as_take(&took, &expected, &idx, &format!("{name} ({version}): take"));
            // Many scattered rows (a take that decodes a few chunks of each
            // page, not whole pages), in no order, one twice.
            let mut idx: Vec<u64> = (0..n).step_by(37).collect();
            idx.extend((0..n).rev().step_by(53));
            idx.push(n / 2);
            let took = reader.take(&idx, proj).await.unwrap();
            same_as_take(
                &took,
                &expected,
                &idx,
                &format!("{name} ({version}): scattered take"),
            );
            if name == "long_lists.lance" {
                // A take of a few rows reads the chunks (and repetition
                // index) holding them, not the list pages whole.
                let fresh = FileReader::open(
                    store.clone(),
                    Path::from(name.as_str()),
                    None,
                    FileReaderOptions {
                        keep_whole_max: 0,
                        ..Default::default()
                    },
                )
                .await
                .unwrap();
                let before = fresh.io_stats().1;
                let idx = [5u64, n / 2, n - 3];
                let took = fresh.take(&idx, Some(&[0])).await.unwrap();
                let read = fresh.io_stats().1 - before;
                let pos = arrow_array::UInt32Array::from(vec![5, n as u32 / 2, n as u32 - 3]);
                let want = arrow_select::take::take(expected.column(0), &pos, None).unwrap();
                assert_eq!(took.column(0), &want, "{name} ({version}): small take");
                assert!(
                    read * 10 < fresh.file_size(),
                    "{name} ({version}): a take of 3 rows read {read} of {} bytes",
                    fresh.file_size()
                );
            }
            // Ranges that start and end inside chunks and pages.
            for r in [1..n - 1, n / 3..n / 2, (n - 5).min(1030)..n] {
                let got = reader.read_range(r.clone(), proj).await.unwrap();
                let want = expected.slice(r.start as usize, (r.end - r.start) as usize);
                assert_eq!(got, want, "{name} ({version}): rows {r:?}");
            }
        }
    });
    assert!(seen >= 3, "pylance wrote {seen} files");
}

#[test]
fn pylance_reads_what_we_write() {
    pylance_reads_what_we_write_at(FileVersion::V2_0);
}

#[test]
fn pylance_reads_what_we_write_2_1() {
    pylance_reads_what_we_write_at(FileVersion::V2_1);
}

#[test]
fn pylance_reads_what_we_write_2_2() {
    pylance_reads_what_we_write_at(FileVersion::V2_2);
}

fn has_list(t: &DataType) -> bool {
    match t {
        DataType::List(_) | DataType::LargeList(_) => true,
        DataType::Struct(f) => f.iter().any(|f| has_list(f.data_type())),
        DataType::FixedSizeList(f, _) => has_list(f.data_type()),
        _ => false,
    }
}

/// Every leaf type and nested types (2.1+: structs with nulls; lists at
/// the top level, not inside structs), with and without nulls and with
/// many small pages; pylance and our reader read them equal to the batches.
fn pylance_reads_what_we_write_at(version: FileVersion) {
    let Some(py) = pylance() else { return };
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn ObjectStore> =
        Arc::new(LocalFileSystem::new_with_prefix(dir.path()).unwrap());
    runtime().block_on(async {
        // Every leaf type, then nested types, with small pages (many pages per column).
        let mut fields: Vec<Field> = leaf_types()
            .into_iter()
            .enumerate()
            .map(|(i, t)| Field::new(format!("c{i}"), t, true))
            .collect();
        let mut g = Gen::new(11, 0.25);
        for i in 0..6 {
            let t = loop {
                let t = g.data_type(2);
                let nested = matches!(
                    t,
                    DataType::List(_) | DataType::LargeList(_) | DataType::Struct(_)
                );
                // 2.1+ writes lists at the top level only (not in structs).
                let in_struct = matches!(&t, DataType::Struct(_)) && has_list(&t);
                if nested && (version == FileVersion::V2_0 || !in_struct) {
                    break t;
                }
            };
            fields.push(Field::new(format!("n{i}"), t, true));
        }
        let schema = Arc::new(Schema::new(fields));
        for (name, null_prob, page) in [
            ("ours", 0.25, 8 << 20),
            ("ours_pages", 0.25, 700),
            ("ours_nonull", 0.0, 4096),
            ("ours_allnull", 1.0, 8 << 20),
        ] {
            let mut g = Gen::new(5, null_prob);
            let batches: Vec<RecordBatch> = (0..3).map(|_| g.batch(&schema, 400)).collect();
            let opts = FileWriterOptions {
                page_size_bytes: page,
                version,
                ..Default::default()
            };
            write_file(&store, &format!("{name}.lance"), &batches, opts).await;
            write_ipc(&dir.path().join(format!("{name}.arrow")), &batches);
            // Our reader agrees, by scan and by take.
            let reader = FileReader::open(
                store.clone(),
                Path::from(format!("{name}.lance")),
                None,
                FileReaderOptions::default(),
            )
            .await
            .unwrap();
            let all = arrow_select::concat::concat_batches(&schema, &batches).unwrap();
            let got = reader.read_range(0..reader.num_rows(), None).await.unwrap();
            for i in 0..all.num_columns() {
                assert_eq!(
                    got.column(i),
                    all.column(i),
                    "{name} {version:?}: column {i}"
                );
            }
            let idx = [7u64, 1199, 0, 401, 800, 3];
            let took = reader.take(&idx, None).await.unwrap();
            let pos = arrow_array::UInt32Array::from_iter_values(idx.iter().map(|i| *i as u32));
            for i in 0..all.num_columns() {
                let want = arrow_select::take::take(all.column(i), &pos, None).unwrap();
                assert_eq!(
                    took.column(i),
                    &want,
                    "{name} {version:?}: take of column {i}"
                );
            }
        }
        // Values of 256 bytes and more (full-zip at 2.1+): vectors with
        // null rows and null items, long strings with nulls, in small pages.
        use arrow_array::{
            ArrayRef, FixedSizeListArray, Float32Array, LargeStringArray, StringArray,
        };
        let n = 1500usize;
        let items = Float32Array::from_iter((0..n * 96).map(|i| {
            if i % 1001 == 7 {
                None
            } else {
                Some(i as f32 * 0.5)
            }
        }));
        let item = Arc::new(Field::new("item", DataType::Float32, true));
        let vec = FixedSizeListArray::try_new(
            item,
            96,
            Arc::new(items),
            Some((0..n).map(|i| i % 13 != 5).collect()),
        )
        .unwrap();
        let doc = StringArray::from_iter(
            (0..n).map(|i| (i % 9 != 4).then(|| format!("{i}:").repeat(40 + i % 70))),
        );
        let ldoc = LargeStringArray::from_iter(
            (0..n).map(|i| (i % 7 != 1).then(|| "y".repeat(250 + i % 30))),
        );
        let wide = RecordBatch::try_from_iter(vec![
            ("vec", Arc::new(vec) as ArrayRef),
            ("doc", Arc::new(doc) as ArrayRef),
            ("ldoc", Arc::new(ldoc) as ArrayRef),
        ])
        .unwrap();
        let opts = FileWriterOptions {
            page_size_bytes: 200_000,
            version,
            ..Default::default()
        };
        let parts = [wide.slice(0, 700), wide.slice(700, 800)];
        write_file(&store, "ours_wide.lance", &parts, opts).await;
        write_ipc(&dir.path().join("ours_wide.arrow"), &parts);
        let reader = FileReader::open(
            store.clone(),
            Path::from("ours_wide.lance"),
            None,
            FileReaderOptions::default(),
        )
        .await
        .unwrap();
        let got = reader.read_range(0..n as u64, None).await.unwrap();
        assert_eq!(got.columns(), wide.columns(), "ours_wide {version:?}");
        let took = reader.take(&[1499, 3, 700, 5], None).await.unwrap();
        let pos = arrow_array::UInt32Array::from(vec![1499, 3, 700, 5]);
        for i in 0..3 {
            let want = arrow_select::take::take(wide.column(i), &pos, None).unwrap();
            assert_eq!(
                took.column(i),
                &want,
                "ours_wide {version:?}: take of column {i}"
            );
        }
        if version != FileVersion::V2_0 {
            // Packed structs (one column of packed rows), null structs
            // among them: fixed-width children at 2.1+, and at 2.2 a
            // string and a large binary child too.
            let batches = packed_structs(version == FileVersion::V2_2, 2500);
            let opts = FileWriterOptions {
                page_size_bytes: 30_000,
                version,
                ..Default::default()
            };
            write_file(&store, "ours_packed.lance", &batches, opts).await;
            write_ipc(&dir.path().join("ours_packed.arrow"), &batches);
            let reader = FileReader::open(
                store.clone(),
                Path::from("ours_packed.lance"),
                None,
                FileReaderOptions::default(),
            )
            .await
            .unwrap();
            let all = arrow_select::concat::concat_batches(&batches[0].schema(), &batches).unwrap();
            let got = reader.read_range(0..reader.num_rows(), None).await.unwrap();
            assert_eq!(got, all, "ours_packed {version:?}");
            let idx = [2499u64, 0, 1234, 7, 600];
            let took = reader.take(&idx, None).await.unwrap();
            same_as_take(&took, &all, &idx, &format!("ours_packed {version:?}: take"));
        }
    });
    let out = Command::new(&py)
        .arg(script())
        .arg("check")
        .arg(dir.path())
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "pylance could not read our files:\n{text}"
    );
}

/// Batches of an id and a struct column marked packed (every ninth row a
/// null struct); `variable` adds string and large binary children.
pub fn packed_structs(variable: bool, n: usize) -> Vec<RecordBatch> {
    use arrow_array::{
        Array, ArrayRef, Float64Array, Int32Array, Int64Array, LargeBinaryArray, StringArray,
        StructArray, UInt8Array,
    };
    let mut children: Vec<(Arc<Field>, ArrayRef)> = vec![
        (
            Arc::new(Field::new("a", DataType::Int32, true)),
            Arc::new(Int32Array::from_iter_values((0..n as i32).map(|i| i * 3))),
        ),
        (
            Arc::new(Field::new("b", DataType::Float64, true)),
            Arc::new(Float64Array::from_iter_values(
                (0..n).map(|i| i as f64 / 4.0),
            )),
        ),
        (
            Arc::new(Field::new("c", DataType::UInt8, true)),
            Arc::new(UInt8Array::from_iter_values(
                (0..n).map(|i| (i % 251) as u8),
            )),
        ),
    ];
    if variable {
        children.insert(
            1,
            (
                Arc::new(Field::new("s", DataType::Utf8, true)),
                Arc::new(StringArray::from_iter_values(
                    (0..n).map(|i| format!("name{i} ").repeat(i % 7)),
                )),
            ),
        );
        children.push((
            Arc::new(Field::new("d", DataType::LargeBinary, true)),
            Arc::new(LargeBinaryArray::from_iter_values(
                (0..n).map(|i| vec![(i % 256) as u8; i % 45]),
            )),
        ));
    }
    let valid: arrow_buffer::NullBuffer = (0..n).map(|i| i % 9 != 4).collect();
    let st = StructArray::from((children, valid.into_inner().into_inner()));
    let field = Field::new("p", st.data_type().clone(), true).with_metadata(
        [("packed".to_string(), "true".to_string())]
            .into_iter()
            .collect(),
    );
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        field,
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from_iter_values(0..n as i64)),
            Arc::new(st),
        ],
    )
    .unwrap();
    (0..n)
        .step_by(700)
        .map(|s| batch.slice(s, 700.min(n - s)))
        .collect()
}

/// `took` holds rows `idx` of `expected`, column by column.
fn same_as_take(
    took: &arrow_array::RecordBatch,
    expected: &arrow_array::RecordBatch,
    idx: &[u64],
    what: &str,
) {
    let pos = arrow_array::UInt32Array::from_iter_values(idx.iter().map(|i| *i as u32));
    for i in 0..expected.num_columns() {
        let want = arrow_select::take::take(expected.column(i), &pos, None).unwrap();
        assert_eq!(took.column(i), &want, "{what} of column {i}");
    }
}
