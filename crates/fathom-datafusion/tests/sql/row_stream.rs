//! The row-stream contract between index-branch nodes: `_rowaddr` first,
//! then optional `_score` / `_distance` columns that exclusion and take
//! carry along, row for row, with the rows they keep.

use std::sync::Arc;

use arrow_array::{Array, Float32Array, Int64Array, RecordBatch, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::physical_plan::{ExecutionPlan, collect};
use datafusion::prelude::SessionContext;
use fathom_datafusion::exec::exclusion::ExclusionExec;
use fathom_datafusion::exec::take::TakeExec;
use fathom_datafusion::plan::ExclusionSource;
use fathom_table::scan::Projection;
use fathom_table::{Dataset, FragmentId, RowAddress, WriteMode, WriteParams};

fn ids(n: i64) -> RecordBatch {
    RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)])),
        vec![Arc::new(Int64Array::from_iter_values(0..n))],
    )
    .unwrap()
}

fn addresses_with(extra: &str, addrs: &[u64], values: &[f32]) -> Arc<dyn ExecutionPlan> {
    let schema = Arc::new(Schema::new(vec![
        Field::new(fathom_table::ROW_ADDR, DataType::UInt64, false),
        Field::new(extra, DataType::Float32, false),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(UInt64Array::from(addrs.to_vec())),
            Arc::new(Float32Array::from(values.to_vec())),
        ],
    )
    .unwrap();
    MemorySourceConfig::try_new_exec(&[vec![batch]], schema, None).unwrap()
}

#[tokio::test]
async fn scores_and_distances_survive_exclusion_and_take() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("t.lance");
    let params = WriteParams {
        max_rows_per_file: 10,
        ..Default::default()
    };
    // Three fragments of 10 rows: ids 0..30; fragment f holds ids 10f..10f+9.
    let ds = Dataset::write(uri.to_str().unwrap(), &[ids(30)], WriteMode::Create, params)
        .await
        .unwrap();
    let ds = ds
        .delete_where(&["id"], |b| {
            let c = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            Ok(arrow_array::BooleanArray::from_iter(
                c.iter().map(|v| Some(v == Some(3) || v == Some(14))),
            ))
        })
        .await
        .unwrap();
    let frag_ids: Vec<u64> = ds.fragments().iter().map(|f| f.id).collect();
    assert_eq!(frag_ids.len(), 3);
    let addr = |f: usize, off: u32| RowAddress::new(FragmentId(frag_ids[f] as u32), off).as_u64();
    // Row (fragment, offset) -> id 10 * fragment + offset.
    let input = [
        (addr(0, 1), 0.5),
        (addr(0, 3), 0.25), // deleted: id 3
        (addr(1, 2), 1.5),
        (addr(1, 4), 2.5), // deleted: id 14
        (addr(1, 9), 3.5),
        (addr(2, 0), 4.5),  // fragment outside the covered set
        (addr(1, 40), 9.0), // beyond the fragment's rows
    ];
    let addrs: Vec<u64> = input.iter().map(|x| x.0).collect();
    let values: Vec<f32> = input.iter().map(|x| x.1).collect();
    let ctx = SessionContext::new();
    for extra in ["_score", "_distance"] {
        let src = addresses_with(extra, &addrs, &values);
        let excl: Arc<dyn ExecutionPlan> = Arc::new(ExclusionExec::new(
            src,
            ds.clone(),
            vec![
                ExclusionSource::DeletedRows,
                ExclusionSource::OutsideFragments(Arc::new(
                    [frag_ids[0] as u32, frag_ids[1] as u32]
                        .into_iter()
                        .collect(),
                )),
            ],
        ));
        assert_eq!(excl.schema().fields().len(), 2);
        let take = Arc::new(
            TakeExec::new(
                excl,
                ds.clone(),
                Projection::from_names(ds.schema(), &["id"]).unwrap(),
                None,
            )
            .unwrap(),
        );
        let names: Vec<String> = take
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, vec!["id".to_string(), extra.to_string()]);
        let out = collect(take, ctx.task_ctx()).await.unwrap();
        let mut got = vec![];
        for b in &out {
            let id = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            let v = b.column(1).as_any().downcast_ref::<Float32Array>().unwrap();
            for i in 0..b.num_rows() {
                got.push((id.value(i), v.value(i)));
            }
        }
        assert_eq!(got, vec![(1, 0.5), (12, 1.5), (19, 3.5)], "{extra}");
    }
}

#[tokio::test]
async fn a_stream_without_addresses_first_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("t.lance");
    let ds = Dataset::write(
        uri.to_str().unwrap(),
        &[ids(5)],
        WriteMode::Create,
        WriteParams::default(),
    )
    .await
    .unwrap();
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Float32, false)]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(Float32Array::from(vec![1.0f32])) as Arc<dyn Array>],
    )
    .unwrap();
    let src = MemorySourceConfig::try_new_exec(&[vec![batch]], schema, None).unwrap();
    let err = TakeExec::new(src, ds.clone(), Projection::all(ds.schema()), None).unwrap_err();
    assert!(err.to_string().contains("not a row stream"), "{err}");
}
