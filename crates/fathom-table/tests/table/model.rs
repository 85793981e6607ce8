//! Property test: random sequences of create/append/delete/overwrite/
//! restore/compact/in-place column update against an in-memory model;
//! every version reads back equal to the model's rows for that version.

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use fathom_table::{Dataset, WriteMode, WriteParams};
use proptest::prelude::*;

use super::{ids, rows, runtime, unique_uri};

#[derive(Debug, Clone)]
enum Op {
    Append(i64),
    /// Delete ids with id % m == r.
    Delete(i64, i64),
    Overwrite(i64),
    /// Restore the version at this index (mod the number of versions).
    Restore(usize),
    /// Compact toward fragments of this many rows.
    Compact(u64),
    /// Set `value` of ids with id % m == r to "u{tag}-{id}" (NULL when
    /// tag is 0), rewriting the column in place or (true) as overlays.
    UpdateColumn(i64, i64, u8, bool),
}

/// A row as the model keeps it: id and value.
type Row = (i64, Option<String>);

fn model_rows(ids: impl IntoIterator<Item = i64>) -> Vec<Row> {
    ids.into_iter()
        .map(|i| (i, (i % 5 != 0).then(|| format!("v{i}"))))
        .collect()
}

fn read_rows(b: &arrow_array::RecordBatch) -> Vec<Row> {
    let v = b.column_by_name("value").unwrap().as_string::<i32>();
    ids(b)
        .into_iter()
        .zip(v.iter().map(|x| x.map(String::from)))
        .collect()
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1i64..60).prop_map(Op::Append),
        4 => (2i64..6, 0i64..6).prop_map(|(m, r)| Op::Delete(m, r % m)),
        1 => (1i64..40).prop_map(Op::Overwrite),
        1 => any::<usize>().prop_map(Op::Restore),
        2 => (5u64..80).prop_map(Op::Compact),
        3 => (1i64..6, 0i64..6, 0u8..4, any::<bool>())
            .prop_map(|(m, r, t, o)| Op::UpdateColumn(m, r % m, t, o)),
    ]
}

async fn run(ops: Vec<Op>, stable: bool) {
    let uri = unique_uri("model");
    let params = WriteParams {
        max_rows_per_file: 17,
        enable_stable_row_ids: stable,
        ..Default::default()
    };
    let mut next = 30i64;
    let mut ds = Dataset::write(&uri, &[rows(0..30)], WriteMode::Create, params.clone())
        .await
        .unwrap();
    let mut model: Vec<Vec<Row>> = vec![model_rows(0..30)]; // model[i] = version i + 1
    for op in ops {
        let cur = model.last().unwrap().clone();
        let (new_ds, new_rows) = match op {
            Op::Append(n) => {
                let d = ds.append(&[rows(next..next + n)], &params).await.unwrap();
                let mut r = cur.clone();
                r.extend(model_rows(next..next + n));
                next += n;
                (d, r)
            }
            Op::Delete(m, rem) => {
                let d = ds
                    .delete_where(&["id"], |b| {
                        Ok(b.column(0)
                            .as_primitive::<Int64Type>()
                            .iter()
                            .map(|v| v.map(|v| v % m == rem))
                            .collect())
                    })
                    .await
                    .unwrap();
                (d, cur.iter().filter(|v| v.0 % m != rem).cloned().collect())
            }
            Op::Overwrite(n) => {
                let d = ds
                    .overwrite(&[rows(next..next + n)], &params)
                    .await
                    .unwrap();
                let r = model_rows(next..next + n);
                next += n;
                (d, r)
            }
            Op::Compact(target) => {
                let opts = fathom_table::CompactionOptions {
                    target_rows_per_fragment: target,
                    max_rows_per_group: 7,
                    ..Default::default()
                };
                let before = id_to_rowid(&ds).await;
                let (d, m) = ds.compact_files(&opts, None).await.unwrap();
                // Compaction never changes rows or their order; with stable
                // row ids every row keeps its id.
                assert_eq!(
                    m.rows_rewritten + m.deleted_rows_dropped > 0,
                    d.version() != ds.version()
                );
                // Every fragment with more than 10% of its rows deleted was rewritten.
                for f in d.fragments() {
                    let del = f.deletion_file.as_ref().map_or(0, |x| x.num_deleted_rows);
                    assert!(
                        del * 10 <= f.physical_rows,
                        "fragment {} kept {del} deleted rows",
                        f.id
                    );
                }
                if stable {
                    assert_eq!(id_to_rowid(&d).await, before);
                }
                (d, cur.clone())
            }
            Op::UpdateColumn(m, rem, tag, overlay) => {
                let all = ds
                    .scan()
                    .project(&["id", "_rowaddr"])
                    .unwrap()
                    .collect()
                    .await
                    .unwrap();
                let addrs = all
                    .column(1)
                    .as_primitive::<arrow_array::types::UInt64Type>();
                let (mut hit, mut vals) = (vec![], vec![]);
                for (id, a) in ids(&all).into_iter().zip(addrs.values()) {
                    if id % m == rem {
                        hit.push(*a);
                        vals.push((tag != 0).then(|| format!("u{tag}-{id}")));
                    }
                }
                let values =
                    arrow_array::RecordBatch::try_new(
                        std::sync::Arc::new(arrow_schema::Schema::new(vec![
                            arrow_schema::Field::new("value", arrow_schema::DataType::Utf8, true),
                        ])),
                        vec![std::sync::Arc::new(arrow_array::StringArray::from(vals))],
                    )
                    .unwrap();
                let before = id_to_rowid(&ds).await;
                let d = if overlay {
                    ds.update_overlay(&["value"], &hit, &values, None).await
                } else {
                    ds.update_columns(&["value"], &hit, &values, None).await
                }
                .unwrap();
                // Rows stay where they are, with their ids.
                assert_eq!(id_to_rowid(&d).await, before);
                let r = cur
                    .iter()
                    .map(|(id, v)| match id % m == rem {
                        true => (*id, (tag != 0).then(|| format!("u{tag}-{id}"))),
                        false => (*id, v.clone()),
                    })
                    .collect();
                (d, r)
            }
            Op::Restore(i) => {
                let v = i % model.len();
                let d = ds
                    .checkout(v as u64 + 1)
                    .await
                    .unwrap()
                    .restore()
                    .await
                    .unwrap();
                (d, model[v].clone())
            }
        };
        // A delete that matched nothing commits nothing.
        if new_ds.version() as usize == model.len() {
            assert_eq!(new_rows, cur);
        } else {
            assert_eq!(new_ds.version() as usize, model.len() + 1);
            model.push(new_rows);
        }
        ds = new_ds;
    }
    let latest = Dataset::open(&uri).await.unwrap();
    for (i, want) in model.iter().enumerate() {
        let v = latest.checkout(i as u64 + 1).await.unwrap();
        assert_eq!(
            &read_rows(&v.scan().collect().await.unwrap()),
            want,
            "version {}",
            i + 1
        );
        assert_eq!(
            v.count_rows() as usize,
            want.len(),
            "count of version {}",
            i + 1
        );
    }
}

/// (id, _rowid) of every row, in scan order.
async fn id_to_rowid(ds: &Dataset) -> Vec<(i64, u64)> {
    let b = ds
        .scan()
        .project(&["id", "_rowid"])
        .unwrap()
        .collect()
        .await
        .unwrap();
    let r = b.column(1).as_primitive::<arrow_array::types::UInt64Type>();
    ids(&b)
        .into_iter()
        .zip(r.values().iter().copied())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]
    #[test]
    fn versions_match_the_model(ops in prop::collection::vec(op(), 1..10), stable in any::<bool>()) {
        runtime().block_on(run(ops, stable));
    }
}
