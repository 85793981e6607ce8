//! Planner tests on the plan value itself (no I/O: segments are
//! synthetic metadata over a real manifest of four fragments).

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow_array::{Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use datafusion::logical_expr::{Expr, col, lit};
use fathom_index::segment::Unusable;
use fathom_index::{Exactness, IndexKind};
use fathom_table::format::IndexMetadata;
use fathom_table::{Dataset, Manifest, WriteMode, WriteParams};
use roaring::RoaringBitmap;

use super::*;

/// A manifest of 4 fragments of 100 rows: id (0), cat (1), x (2); the
/// table schema adds `_rowaddr` (3).
fn manifest() -> (Manifest, Arc<Schema>, Arc<Schema>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("cat", DataType::Utf8, true),
        Field::new("x", DataType::Float64, true),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from_iter_values(0..400)),
            Arc::new(StringArray::from_iter_values(
                (0..400).map(|i| format!("c{}", i % 5)),
            )),
            Arc::new(Float64Array::from_iter_values((0..400).map(|i| i as f64))),
        ],
    )
    .unwrap();
    let ds = rt
        .block_on(Dataset::write(
            &format!("memory://plan-{}", rand::random::<u64>()),
            &[batch],
            WriteMode::Create,
            WriteParams {
                max_rows_per_file: 100,
                ..Default::default()
            },
        ))
        .unwrap();
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new("_rowaddr", DataType::UInt64, true));
    (
        ds.manifest().clone(),
        ds.schema().clone(),
        Arc::new(Schema::new(fields)),
    )
}

/// A segment of `kind` on `column` covering `frags`.
fn segment(
    m: &Manifest,
    name: &str,
    column: &str,
    kind: IndexKind,
    frags: &[u32],
) -> IndexMetadata {
    let field = m.schema.fields.iter().find(|f| f.name == column).unwrap();
    IndexMetadata {
        uuid: uuid::Uuid::new_v4(),
        name: name.into(),
        fields: vec![field.id],
        dataset_version: m.version,
        fragment_bitmap: Some(frags.iter().copied().collect::<RoaringBitmap>()),
        index_details: Some(kind.details()),
        index_version: Some(0),
        created_at_ms: None,
        base_id: None,
        files: vec![],
        covering_fields: vec![],
    }
}

fn request(output: &[usize], filters: Vec<Expr>, limit: Option<usize>) -> ScanRequest {
    ScanRequest {
        output: output.to_vec(),
        filters,
        limit,
        target_partitions: 2,
        min_rows_per_partition: 1,
        zone_pruning: true,
        whole_fragment_overlays: false,
    }
}

fn plan(m: &Manifest, schema: &Schema, table: &Schema, req: &ScanRequest) -> ScanPlan {
    plan_scan(
        Snapshot {
            manifest: m,
            facts: &fathom_table::ManifestFacts::of(m),
            schema,
            table_schema: table,
        },
        req,
    )
    .unwrap()
}

fn index_branch(p: &ScanPlan) -> &IndexBranch {
    p.branches
        .iter()
        .find_map(|b| match b {
            Branch::Index(i) => Some(i),
            _ => None,
        })
        .expect("an index branch")
}

fn flat_fragments(p: &ScanPlan) -> Option<BTreeSet<u64>> {
    p.branches.iter().find_map(|b| match b {
        Branch::Flat(f) => Some(
            f.partitions
                .partitions
                .iter()
                .flatten()
                .map(|u| u.fragment)
                .collect(),
        ),
        _ => None,
    })
}

fn ids(b: &RoaringBitmap) -> Vec<u64> {
    b.iter().map(u64::from).collect()
}

fn set(v: &[u64]) -> BTreeSet<u64> {
    v.iter().copied().collect()
}

#[test]
fn no_index_is_one_flat_branch() {
    let (m, s, t) = manifest();
    let p = plan(
        &m,
        &s,
        &t,
        &request(&[0, 2], vec![col("id").eq(lit(5i64))], Some(3)),
    );
    assert_eq!(p.branches.len(), 1);
    let Branch::Flat(f) = &p.branches[0] else {
        panic!("flat expected")
    };
    assert_eq!(
        f.read,
        set(&[0, 2]).into_iter().map(|c| c as usize).collect()
    );
    assert_eq!(f.limit, Some(3));
    assert!(f.zone_pruning);
    // The output needs x, which the filter does not read: late materialization.
    assert_eq!(f.read_first, Some([0usize].into_iter().collect()));
    assert_eq!(flat_fragments(&p), Some(set(&[0, 1, 2, 3])));
}

#[test]
fn fully_covered_exact_index_has_no_flat_branch_and_takes_the_limit() {
    let (mut m, s, t) = manifest();
    m.indices
        .push(segment(&m, "id_idx", "id", IndexKind::BTREE, &[0, 1, 2, 3]));
    let p = plan(
        &m,
        &s,
        &t,
        &request(&[0, 1], vec![col("id").eq(lit(5i64))], Some(1)),
    );
    assert_eq!(p.branches.len(), 1);
    let b = index_branch(&p);
    assert_eq!(b.exactness, Exactness::Exact);
    assert!(b.recheck.is_none());
    assert_eq!(b.limit, Some(1));
    assert_eq!(ids(&b.covered), vec![0, 1, 2, 3]);
    assert_eq!(b.segments.len(), 1);
    assert_eq!(
        b.exclusions,
        vec![
            ExclusionSource::OutsideFragments(Arc::new([0u32, 1, 2, 3].into_iter().collect())),
            ExclusionSource::DeletedRows
        ]
    );
    assert_eq!(b.take, [0usize, 1].into_iter().collect());
}

#[test]
fn partially_covered_index_scans_the_rest_flat() {
    let (mut m, s, t) = manifest();
    m.indices
        .push(segment(&m, "id_idx", "id", IndexKind::BTREE, &[0, 1]));
    let p = plan(
        &m,
        &s,
        &t,
        &request(&[0], vec![col("id").gt(lit(5i64))], None),
    );
    assert_eq!(p.branches.len(), 2);
    assert_eq!(ids(&index_branch(&p).covered), vec![0, 1]);
    assert_eq!(flat_fragments(&p), Some(set(&[2, 3])));
    assert_eq!(p.merge, Merge::Union);
}

#[test]
fn two_indexes_cover_their_intersection() {
    let (mut m, s, t) = manifest();
    m.indices
        .push(segment(&m, "id_idx", "id", IndexKind::BTREE, &[0, 1, 2]));
    m.indices
        .push(segment(&m, "cat_idx", "cat", IndexKind::BITMAP, &[1, 2, 3]));
    let filters = vec![col("id").lt(lit(50i64)), col("cat").eq(lit("c1"))];
    let p = plan(&m, &s, &t, &request(&[0, 1], filters, None));
    let b = index_branch(&p);
    assert_eq!(ids(&b.covered), vec![1, 2]);
    assert_eq!(b.segments.len(), 2);
    assert!(b.recheck.is_none(), "both filters answered exactly");
    assert_eq!(flat_fragments(&p), Some(set(&[0, 3])));
    // Only one filter on an indexed column: the other is rechecked.
    let p = plan(
        &m,
        &s,
        &t,
        &request(
            &[0],
            vec![col("id").lt(lit(50i64)), col("x").gt(lit(1.0))],
            None,
        ),
    );
    let b = index_branch(&p);
    assert_eq!(ids(&b.covered), vec![0, 1, 2]);
    let r = b.recheck.as_ref().expect("residual recheck");
    assert_eq!(r.filters, vec![col("x").gt(lit(1.0))]);
    assert_eq!(r.columns, [2usize].into_iter().collect());
    // The output (id) is not among the recheck columns: narrow take first.
    assert!(r.narrow);
    assert_eq!(b.limit, None);
}

#[test]
fn unusable_segments_are_skipped_with_their_reason() {
    let (mut m, s, t) = manifest();
    let mut unknown = segment(&m, "vec_idx", "x", IndexKind::BTREE, &[0, 1, 2, 3]);
    unknown.index_details = Some(prost_types::Any {
        type_url: "/lance.index.pb.SomethingNew".into(),
        value: vec![],
    });
    let mut future = segment(&m, "id_idx", "id", IndexKind::BTREE, &[0, 1]);
    future.index_version = Some(99);
    let current = segment(&m, "id_idx", "id", IndexKind::BTREE, &[2]);
    m.indices.extend([unknown, future, current]);
    let p = plan(
        &m,
        &s,
        &t,
        &request(&[0], vec![col("id").eq(lit(7i64))], None),
    );
    let reasons: Vec<&Unusable> = p.skipped.iter().map(|s| &s.reason).collect();
    assert_eq!(
        reasons,
        vec![
            &Unusable::UnknownType("/lance.index.pb.SomethingNew".into()),
            &Unusable::UnknownVersion(99)
        ]
    );
    // The usable segment answers its fragment; the skipped ones' are scanned.
    assert_eq!(ids(&index_branch(&p).covered), vec![2]);
    assert_eq!(flat_fragments(&p), Some(set(&[0, 1, 3])));
    assert!(p.skipped[0].to_string().contains("vec_idx"));
}

#[test]
fn not_or_in_is_null_convert() {
    let (mut m, s, t) = manifest();
    m.indices
        .push(segment(&m, "id_idx", "id", IndexKind::BTREE, &[0, 1, 2, 3]));
    let cases: Vec<(Expr, &str)> = vec![
        (
            Expr::Not(Box::new(col("id").lt(lit(5i64)))),
            "id_idx(5 <= id)",
        ),
        (
            col("id").eq(lit(1i64)).or(col("id").eq(lit(9i64))),
            "(id_idx(id = 1) OR id_idx(id = 9))",
        ),
        (
            col("id").in_list(vec![lit(3i64), lit(1i64)], false),
            "id_idx(id IN [3, 1])",
        ),
        (col("id").is_null(), "id_idx(id IS NULL)"),
        (
            col("id").not_eq(lit(4i64)),
            "(id_idx(id < 4) OR id_idx(4 < id))",
        ),
        (
            Expr::Not(Box::new(
                col("id").gt(lit(1i64)).and(col("id").lt(lit(9i64))),
            )),
            "(id_idx(id <= 1) OR id_idx(9 <= id))",
        ),
    ];
    for (filter, want) in cases {
        let p = plan(&m, &s, &t, &request(&[0], vec![filter.clone()], None));
        let b = index_branch(&p);
        assert_eq!(b.expr.to_string(), want, "{filter}");
        assert_eq!(b.exactness, Exactness::Exact);
        assert!(b.recheck.is_none(), "{filter}");
    }
    // A filter with an unindexed part of an OR cannot use the index at all.
    let p = plan(
        &m,
        &s,
        &t,
        &request(
            &[0],
            vec![col("id").eq(lit(1i64)).or(col("x").gt(lit(2.0)))],
            None,
        ),
    );
    assert!(p.branches.iter().all(|b| matches!(b, Branch::Flat(_))));
}

#[test]
fn zone_map_results_are_rechecked_except_is_null() {
    let (mut m, s, t) = manifest();
    m.indices
        .push(segment(&m, "x_zm", "x", IndexKind::ZONEMAP, &[0, 1, 2, 3]));
    let p = plan(
        &m,
        &s,
        &t,
        &request(&[0, 2], vec![col("x").gt(lit(10.0))], Some(5)),
    );
    let b = index_branch(&p);
    assert_eq!(b.exactness, Exactness::AtMost);
    let r = b.recheck.as_ref().expect("AtMost is rechecked");
    assert_eq!(r.filters, vec![col("x").gt(lit(10.0))]);
    assert!(r.narrow, "output needs id, the recheck only x");
    assert_eq!(b.limit, None, "no limit on addresses before a recheck");
    // Output within the recheck columns: one take, rechecked in place.
    let p = plan(
        &m,
        &s,
        &t,
        &request(&[2], vec![col("x").gt(lit(10.0))], None),
    );
    let b = index_branch(&p);
    assert!(!b.recheck.as_ref().unwrap().narrow);
    assert_eq!(b.take, [2usize].into_iter().collect());
    // IS NULL is exact for a zone map.
    let p = plan(
        &m,
        &s,
        &t,
        &request(&[0], vec![col("x").is_null()], Some(2)),
    );
    let b = index_branch(&p);
    assert_eq!(b.exactness, Exactness::Exact);
    assert!(b.recheck.is_none());
    assert_eq!(b.limit, Some(2));
}

#[test]
fn exact_kinds_are_preferred_over_zone_maps() {
    let (mut m, s, t) = manifest();
    m.indices
        .push(segment(&m, "x_zm", "x", IndexKind::ZONEMAP, &[0, 1, 2, 3]));
    m.indices
        .push(segment(&m, "x_bt", "x", IndexKind::BTREE, &[0, 1]));
    let p = plan(
        &m,
        &s,
        &t,
        &request(&[2], vec![col("x").eq(lit(3.0))], None),
    );
    let b = index_branch(&p);
    assert!(b.expr.to_string().starts_with("x_bt("), "{}", b.expr);
    assert_eq!(b.exactness, Exactness::Exact);
}

#[test]
fn virtual_columns_disable_zone_pruning() {
    let (m, s, t) = manifest();
    let p = plan(
        &m,
        &s,
        &t,
        &request(&[0], vec![col("_rowaddr").gt(lit(3u64))], None),
    );
    let Branch::Flat(f) = &p.branches[0] else {
        panic!()
    };
    assert!(!f.zone_pruning);
    assert_eq!(f.read, [0usize, 3].into_iter().collect());
}
