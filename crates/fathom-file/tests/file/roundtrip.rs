//! Random schemas and data written and read back equal, by scan, by row
//! range and by take.

use std::sync::Arc;

use arrow_array::{Array, RecordBatch, UInt32Array};
use arrow_schema::{DataType, Field, Schema};
use fathom_file::FileWriterOptions;
use fathom_testing::generate::{Gen, leaf_types};
use futures::TryStreamExt;
use proptest::prelude::*;

use super::{memory, open, runtime, write_file};

fn concat(batches: &[RecordBatch]) -> RecordBatch {
    arrow_select::concat::concat_batches(&batches[0].schema(), batches).unwrap()
}

async fn check_roundtrip(seed: u64, null_prob: f64, rows: usize, page_size: usize) {
    let mut g = Gen::new(seed, null_prob);
    let cols = 1 + (seed % 4) as usize;
    let schema = Arc::new(g.schema(cols, 2));
    let batches: Vec<RecordBatch> = (0..3).map(|i| g.batch(&schema, rows / 3 + i)).collect();
    let expected = concat(&batches);
    let store = memory();
    let opts = FileWriterOptions {
        page_size_bytes: page_size,
        ..Default::default()
    };
    let written = write_file(&store, "f.lance", &batches, opts).await;
    assert_eq!(written.num_rows as usize, expected.num_rows());
    let reader = open(&store, "f.lance").await.unwrap();
    assert_eq!(reader.schema().as_ref(), schema.as_ref());

    let scanned: Vec<RecordBatch> = reader
        .scan(0..reader.num_rows(), None, 7)
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(concat(&scanned), expected, "scan, schema {schema:?}");
    // Steps end at page ends; batches still hold 7 rows (the last fewer).
    if let Some((last, full)) = scanned.split_last() {
        assert!(full.iter().all(|b| b.num_rows() == 7) && (1..=7).contains(&last.num_rows()));
    }

    let n = expected.num_rows() as u64;
    if n > 2 {
        let range = reader.read_range(1..n - 1, None).await.unwrap();
        assert_eq!(range, expected.slice(1, n as usize - 2), "range");
    }
    // Take: scattered, unsorted, with repeats.
    let idx: Vec<u64> = (0..n)
        .rev()
        .step_by(3)
        .chain([0, n / 2, n / 2].into_iter().filter(|i| *i < n))
        .collect();
    let took = reader.take(&idx, None).await.unwrap();
    let positions = UInt32Array::from_iter_values(idx.iter().map(|i| *i as u32));
    let want: Vec<_> = expected
        .columns()
        .iter()
        .map(|c| arrow_select::take::take(c, &positions, None).unwrap())
        .collect();
    let want = RecordBatch::try_new(expected.schema(), want).unwrap();
    assert_eq!(took, want, "take");

    // Projection of the last column only.
    let last = schema.fields().len() - 1;
    let proj = reader.take(&idx, Some(&[last])).await.unwrap();
    assert_eq!(proj.column(0), want.column(last));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]
    #[test]
    fn roundtrip_random(seed in any::<u64>(), nulls in prop_oneof![Just(0.0), Just(0.2), Just(1.0)], rows in 0usize..300, page in prop_oneof![Just(64usize), Just(1000), Just(8 << 20)]) {
        runtime().block_on(check_roundtrip(seed, nulls, rows, page));
    }
}

#[test]
fn every_leaf_type_multi_page() {
    runtime().block_on(async {
        let schema = Arc::new(Schema::new(
            leaf_types()
                .into_iter()
                .enumerate()
                .map(|(i, t)| Field::new(format!("c{i}"), t, true))
                .collect::<Vec<_>>(),
        ));
        let mut g = Gen::new(7, 0.3);
        let batches: Vec<RecordBatch> = (0..4).map(|_| g.batch(&schema, 500)).collect();
        let store = memory();
        let opts = FileWriterOptions {
            page_size_bytes: 512,
            ..Default::default()
        };
        write_file(&store, "t.lance", &batches, opts).await;
        let reader = open(&store, "t.lance").await.unwrap();
        let all = reader.read_range(0..2000, None).await.unwrap();
        assert_eq!(all, concat(&batches));
    });
}

#[test]
fn empty_file_and_empty_lists() {
    runtime().block_on(async {
        let schema = Arc::new(Schema::new(vec![
            Field::new_list("l", Field::new("item", DataType::Utf8, true), true),
            Field::new("s", DataType::Utf8, true),
        ]));
        let store = memory();
        let empty = RecordBatch::new_empty(schema.clone());
        write_file(
            &store,
            "e.lance",
            std::slice::from_ref(&empty),
            Default::default(),
        )
        .await;
        let r = open(&store, "e.lance").await.unwrap();
        assert_eq!(r.num_rows(), 0);
        assert_eq!(r.read_range(0..0, None).await.unwrap(), empty);

        let mut g = Gen::new(1, 1.0);
        let allnull = g.batch(&schema, 10);
        write_file(
            &store,
            "n.lance",
            std::slice::from_ref(&allnull),
            Default::default(),
        )
        .await;
        let r = open(&store, "n.lance").await.unwrap();
        assert_eq!(r.read_range(0..10, None).await.unwrap(), allnull);
        assert_eq!(
            r.take(&[9, 0], None).await.unwrap().column(0).null_count(),
            2
        );
    });
}

#[test]
fn struct_nulls_are_refused_clearly() {
    runtime().block_on(async {
        use arrow_array::{Int32Array, StructArray};
        use arrow_buffer::NullBuffer;
        let fields = vec![Field::new("x", DataType::Int32, true)];
        let s = StructArray::new(
            fields.clone().into(),
            vec![Arc::new(Int32Array::from(vec![1, 2]))],
            Some(NullBuffer::from(vec![true, false])),
        );
        let schema = Arc::new(Schema::new(vec![Field::new(
            "s",
            s.data_type().clone(),
            true,
        )]));
        let b = RecordBatch::try_new(schema.clone(), vec![Arc::new(s)]).unwrap();
        let store = memory();
        let mut w =
            fathom_file::FileWriter::try_new(store, "s.lance".into(), &schema, Default::default())
                .unwrap();
        let err = w.write_batch(&b).await.unwrap_err().to_string();
        assert!(
            err.contains("struct column 's'") && err.contains("2.0"),
            "{err}"
        );
    });
}

#[test]
fn writer_rejects_mismatched_batches() {
    runtime().block_on(async {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, false)]));
        let other = Arc::new(Schema::new(vec![Field::new("a", DataType::Utf8, true)]));
        let store = memory();
        let mut w =
            fathom_file::FileWriter::try_new(store, "m.lance".into(), &schema, Default::default())
                .unwrap();
        let b = RecordBatch::try_new(
            other,
            vec![Arc::new(arrow_array::StringArray::from(vec!["x"]))],
        )
        .unwrap();
        let err = w.write_batch(&b).await.unwrap_err().to_string();
        assert!(
            err.contains("'a'") && err.contains("Utf8") && err.contains("Int64"),
            "{err}"
        );
        let b = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)])),
            vec![Arc::new(arrow_array::Int64Array::from(vec![None, Some(1)]))],
        )
        .unwrap();
        let err = w.write_batch(&b).await.unwrap_err().to_string();
        assert!(err.contains("not nullable"), "{err}");
    });
}

/// A take of 1,000 scattered rows from 1,000,000 reads a small fraction of
/// the column, and the writer keeps pages near the target size.
#[test]
fn take_reads_only_what_it_needs() {
    runtime().block_on(async {
        use arrow_array::{Int64Array, StringArray};
        let n = 1_000_000usize;
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("s", DataType::Utf8, false),
        ]));
        let store = memory();
        let batches: Vec<RecordBatch> = (0..10)
            .map(|b| {
                let ids =
                    Int64Array::from_iter_values((b * n / 10..(b + 1) * n / 10).map(|i| i as i64));
                let s = StringArray::from_iter_values(
                    (b * n / 10..(b + 1) * n / 10).map(|i| format!("value-{i}")),
                );
                RecordBatch::try_new(schema.clone(), vec![Arc::new(ids), Arc::new(s)]).unwrap()
            })
            .collect();
        let opts = FileWriterOptions {
            page_size_bytes: 1 << 20,
            ..Default::default()
        };
        let written = write_file(&store, "big.lance", &batches, opts).await;
        let reader = open(&store, "big.lance").await.unwrap();
        let before = reader.io_stats();
        let mut idx: Vec<u64> = (0..1000u64).map(|i| (i * 7919 * 127) % n as u64).collect();
        idx.sort();
        let got = reader.take(&idx, None).await.unwrap();
        let ids = got.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        let s = got
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        for (k, i) in idx.iter().enumerate() {
            assert_eq!(ids.value(k), *i as i64);
            assert_eq!(s.value(k), format!("value-{i}"));
        }
        let (_, bytes) = reader.io_stats();
        let read = bytes - before.1;
        // Default coalescing (ranges < 4 KiB apart merged) reads far less than the file.
        assert!(
            read * 4 < written.size_bytes,
            "take of 1000 rows read {read} bytes of a {} byte file",
            written.size_bytes
        );
        // Without coalescing, a take reads a few bytes around each row: the
        // id, two string offsets and the string's bytes.
        let exact = fathom_file::FileReader::open(
            store.clone(),
            "big.lance".into(),
            Some(written.size_bytes),
            fathom_file::FileReaderOptions {
                coalesce_gap: 0,
                ..Default::default()
            },
        )
        .await
        .unwrap();
        let (r0, b0) = exact.io_stats();
        exact.take(&idx, None).await.unwrap();
        let (r1, b1) = exact.io_stats();
        assert!(b1 - b0 <= 1000 * (8 + 16 + 14), "read {} bytes", b1 - b0);
        assert!(r1 - r0 <= 3000, "{} requests", r1 - r0);
    });
}

/// A small file is kept whole by its reader: reads after opening make no
/// request, and give what a reader that keeps nothing reads from the store.
#[test]
fn small_files_are_read_from_memory() {
    runtime().block_on(async {
        use arrow_array::{Int64Array, StringArray};
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
        ]));
        let ids = Int64Array::from_iter_values(0..300);
        let s = StringArray::from_iter((0..300).map(|i| (i % 7 != 0).then(|| format!("v{i}"))));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(ids), Arc::new(s)]).unwrap();
        let store = memory();
        let written = write_file(
            &store,
            "small.lance",
            std::slice::from_ref(&batch),
            Default::default(),
        )
        .await;
        assert!(written.size_bytes <= fathom_file::KEEP_WHOLE_MAX);
        let open_with = |keep_whole_max| {
            fathom_file::FileReader::open(
                store.clone(),
                "small.lance".into(),
                Some(written.size_bytes),
                fathom_file::FileReaderOptions {
                    keep_whole_max,
                    ..Default::default()
                },
            )
        };
        let kept = open_with(fathom_file::KEEP_WHOLE_MAX).await.unwrap();
        let fetched = open_with(0).await.unwrap();
        let idx = [0u64, 7, 8, 150, 299];
        let (k0, f0) = (kept.io_stats(), fetched.io_stats());
        let a = kept.take(&idx, None).await.unwrap();
        let b = fetched.take(&idx, None).await.unwrap();
        assert_eq!(a, b);
        assert_eq!(
            a,
            arrow_select::take::take_record_batch(
                &batch,
                &arrow_array::UInt64Array::from(idx.to_vec())
            )
            .unwrap()
        );
        assert_eq!(kept.io_stats(), k0, "a kept file makes no request");
        assert!(
            fetched.io_stats().0 > f0.0,
            "a file not kept is read from the store"
        );
    });
}

#[test]
fn global_buffers_and_metadata() {
    runtime().block_on(async {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int32, true)]));
        let store = memory();
        let mut w = fathom_file::FileWriter::try_new(
            store.clone(),
            "g.lance".into(),
            &schema,
            Default::default(),
        )
        .unwrap();
        w.write_batch(
            &RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(arrow_array::Int32Array::from(vec![1, 2]))],
            )
            .unwrap(),
        )
        .await
        .unwrap();
        assert_eq!(w.add_global_buffer(b"hello".to_vec()), 1);
        assert_eq!(w.add_global_buffer(vec![7; 100]), 2);
        w.set_metadata("rows_per_zone", "8192");
        w.finish().await.unwrap();
        let r = open(&store, "g.lance").await.unwrap();
        assert_eq!(r.num_global_buffers(), 3);
        assert_eq!(&r.read_global_buffer(1).await.unwrap()[..], b"hello");
        assert_eq!(r.read_global_buffer(2).await.unwrap().len(), 100);
        assert_eq!(r.schema().metadata().get("rows_per_zone").unwrap(), "8192");
        assert_eq!(r.read_range(0..2, None).await.unwrap().num_rows(), 2);
    });
}

/// Zone statistics hold each zone's min, max and null count.
#[test]
fn zone_statistics() {
    runtime().block_on(async {
        use arrow_array::cast::AsArray;
        use arrow_array::types::{Int64Type, UInt64Type};
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
            Field::new_list("l", Field::new("item", DataType::Int32, true), true),
        ]));
        let mut g = Gen::new(21, 0.2);
        let batches: Vec<RecordBatch> = (0..5).map(|_| g.batch(&schema, 333)).collect();
        let all = concat(&batches);
        let store = memory();
        let opts = FileWriterOptions {
            zone_stats_rows: Some(100),
            ..Default::default()
        };
        write_file(&store, "z.lance", &batches, opts).await;
        let r = open(&store, "z.lance").await.unwrap();
        let z = r.zone_stats().await.unwrap().unwrap();
        assert_eq!(z.num_zones(), 17);
        assert!(z.column("l").is_none(), "lists have no statistics");
        let (mn, mx, nulls) = z.column("a").unwrap();
        let a = all.column(0).as_primitive::<Int64Type>();
        for zone in 0..17 {
            let (s, e) = (zone * 100, ((zone + 1) * 100).min(1665));
            let vals: Vec<i64> = (s..e)
                .filter(|i| a.is_valid(*i))
                .map(|i| a.value(i))
                .collect();
            assert_eq!(
                nulls.as_primitive::<UInt64Type>().value(zone) as usize,
                (e - s) - vals.len()
            );
            assert_eq!(
                mn.as_primitive::<Int64Type>().value(zone),
                *vals.iter().min().unwrap()
            );
            assert_eq!(
                mx.as_primitive::<Int64Type>().value(zone),
                *vals.iter().max().unwrap()
            );
        }
        assert!(z.column("s").is_some());
        // Files without statistics say so.
        write_file(&store, "n.lance", &batches, FileWriterOptions::default()).await;
        assert!(
            open(&store, "n.lance")
                .await
                .unwrap()
                .zone_stats()
                .await
                .unwrap()
                .is_none()
        );
    });
}

/// Packed structs the writer cannot lay out as Lance does are refused
/// with an error naming the column or child: a variable-width child at 2.1
/// (Lance has no such encoding before 2.2), a null child value under a
/// valid row (Lance's packed structs store none), a packed struct in a list.
#[test]
fn packed_structs_lance_cannot_store_are_refused() {
    use arrow_array::{ArrayRef, Int32Array, StructArray};
    let packed = |f: Field| {
        f.with_metadata(
            [("packed".to_string(), "true".to_string())]
                .into_iter()
                .collect(),
        )
    };
    let write = |batch: RecordBatch, version| {
        runtime().block_on(async {
            let mut w = fathom_file::FileWriter::try_new(
                memory(),
                "p.lance".into(),
                &batch.schema(),
                FileWriterOptions {
                    version,
                    ..Default::default()
                },
            )?;
            w.write_batch(&batch).await?;
            w.finish().await.map(|_| ())
        })
    };
    let var = crate::interop::packed_structs(true, 50);
    let err = write(var[0].clone(), fathom_file::FileVersion::V2_1).unwrap_err();
    assert!(err.to_string().contains("2.1"), "{err}");
    write(var[0].clone(), fathom_file::FileVersion::V2_2).unwrap();

    let st = StructArray::from(vec![(
        Arc::new(Field::new("a", DataType::Int32, true)),
        Arc::new(Int32Array::from(vec![Some(1), None, Some(3)])) as ArrayRef,
    )]);
    let schema = Arc::new(Schema::new(vec![packed(Field::new(
        "s",
        st.data_type().clone(),
        true,
    ))]));
    let batch = RecordBatch::try_new(schema, vec![Arc::new(st)]).unwrap();
    let err = write(batch, fathom_file::FileVersion::V2_2).unwrap_err();
    assert!(err.to_string().contains("'a' holds nulls"), "{err}");

    let st = DataType::Struct(vec![Field::new("t", DataType::Utf8, true)].into());
    let list = Field::new(
        "l",
        DataType::List(Arc::new(packed(Field::new("item", st, true)))),
        true,
    );
    let err = fathom_file::FileWriter::try_new(
        memory(),
        "p.lance".into(),
        &Schema::new(vec![list]),
        FileWriterOptions {
            version: fathom_file::FileVersion::V2_2,
            ..Default::default()
        },
    )
    .err()
    .expect("refused");
    assert!(err.to_string().contains("inside a list"), "{err}");
}
