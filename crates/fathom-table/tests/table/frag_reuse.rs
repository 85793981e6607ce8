//! Compaction that defers the index remap: the fragment reuse index says
//! where every row of a covering segment went (checked by reading the row
//! at the remapped address), survives a reopen, accumulates a version per
//! compaction, and is trimmed once every segment was built after it.

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;

use fathom_table::frag_reuse::{FRAG_REUSE_INDEX_NAME, is_frag_reuse};
use fathom_table::{CompactionOptions, Dataset, Operation, Projection, WriteMode, WriteParams};

use super::{rows, runtime, segment, unique_uri};

async fn delete_multiples(ds: &Dataset, k: i64) -> Dataset {
    ds.delete_where(&["id"], |b| {
        Ok(b.column(0)
            .as_primitive::<Int64Type>()
            .iter()
            .map(|v| v.map(|v| v % k == 0))
            .collect())
    })
    .await
    .unwrap()
}

/// The id of the row at each address (`None`: no such live row).
async fn id_at(ds: &Dataset, addr: u64) -> Option<i64> {
    let b = ds
        .take_addresses(
            &[addr],
            &Projection::from_names(ds.schema(), &["id"]).unwrap(),
        )
        .await
        .ok()?;
    (b.num_rows() == 1).then(|| b.column(0).as_primitive::<Int64Type>().value(0))
}

/// Every row the segment was built on (id = fragment * 50 + offset):
/// remapped to where that id lives now, or to nothing when deleted.
async fn check_remap(ds: &Dataset, deleted: &dyn Fn(i64) -> bool) {
    let fr = ds.manifest().frag_reuse.clone().expect("a reuse index");
    let dense = fr.dense();
    for f in 0..4u64 {
        for o in 0..50u64 {
            let id = (f * 50 + o) as i64;
            // The tables say what the ranks say.
            assert_eq!(dense.remap((f << 32) | o), fr.remap((f << 32) | o));
            match fr.remap((f << 32) | o) {
                None => assert!(deleted(id), "row {id} lost"),
                Some(a) => {
                    assert!(!deleted(id), "deleted row {id} remapped to {a:#x}");
                    assert_eq!(id_at(ds, a).await, Some(id), "row {id} remapped to {a:#x}");
                }
            }
        }
    }
}

#[test]
fn deferred_remap_compaction() {
    runtime().block_on(async {
        let uri = unique_uri("fri");
        let params = WriteParams {
            max_rows_per_file: 50,
            ..Default::default()
        };
        let ds = Dataset::write(&uri, &[rows(0..200)], WriteMode::Create, params.clone())
            .await
            .unwrap();
        let ds = ds
            .commit(Operation::CreateIndex {
                new: vec![segment("id_idx", 0, 0..4, ds.version())],
                removed: vec![],
            })
            .await
            .unwrap();
        let ds = delete_multiples(&ds, 7).await;
        // A fragment the segment does not cover is compacted without it.
        let ds = ds.append(&[rows(200..230)], &params).await.unwrap();
        let mut opts = CompactionOptions::default();
        opts.set("defer_index_remap", "true").unwrap();
        let (ds, m) = ds.compact_files(&opts, None).await.unwrap();
        assert_eq!(m.fragments_removed, 4, "{m:?}");
        let idx = ds
            .manifest()
            .indices
            .iter()
            .find(|i| i.name == "id_idx")
            .unwrap();
        let new: Vec<u32> = ds
            .fragments()
            .iter()
            .map(|f| f.id as u32)
            .filter(|id| *id > 4)
            .collect();
        assert_eq!(
            idx.fragment_bitmap
                .as_ref()
                .unwrap()
                .iter()
                .collect::<Vec<_>>(),
            new,
            "the segment covers the new fragment instead of the old ones"
        );
        let fri = ds
            .manifest()
            .indices
            .iter()
            .find(|i| is_frag_reuse(i))
            .unwrap();
        assert_eq!(fri.name, FRAG_REUSE_INDEX_NAME);
        assert!(fri.fields.is_empty());
        check_remap(&ds, &|id| id % 7 == 0).await;

        // The same from the bytes on disk.
        let reopened = Dataset::open(&uri).await.unwrap();
        assert_eq!(reopened.manifest().frag_reuse, ds.manifest().frag_reuse);
        check_remap(&reopened, &|id| id % 7 == 0).await;

        // A second compaction adds a version; the first addresses chain.
        let ds = delete_multiples(&reopened, 3).await;
        let mut opts = opts.clone();
        opts.set("materialize_deletions_threshold", "0.05").unwrap();
        let (ds, m) = ds.compact_files(&opts, None).await.unwrap();
        assert!(m.fragments_removed > 0);
        assert_eq!(ds.manifest().frag_reuse.as_ref().unwrap().versions.len(), 2);
        check_remap(&ds, &|id| id % 7 == 0 || id % 3 == 0).await;

        // Other commits keep it; a segment built after both lets it go.
        let ds = ds.append(&[rows(300..310)], &params).await.unwrap();
        assert!(ds.manifest().frag_reuse.is_some());
        let all = ds.fragments().iter().map(|f| f.id as u32).max().unwrap() + 1;
        let old = ds
            .manifest()
            .indices
            .iter()
            .find(|i| i.name == "id_idx")
            .cloned()
            .unwrap();
        let ds = ds
            .commit(Operation::CreateIndex {
                new: vec![segment("id_idx", 0, 0..all, ds.version())],
                removed: vec![old],
            })
            .await
            .unwrap();
        assert!(ds.manifest().frag_reuse.is_none());
        assert!(!ds.manifest().indices.iter().any(is_frag_reuse));
        let reopened = Dataset::open(&uri).await.unwrap();
        assert!(reopened.manifest().frag_reuse.is_none());
        assert_eq!(reopened.count_rows(), ds.count_rows());
    });
}

/// Without a covering segment there is nothing to remap: no reuse index.
#[test]
fn deferred_remap_without_indexes() {
    runtime().block_on(async {
        let uri = unique_uri("fri-none");
        let params = WriteParams {
            max_rows_per_file: 50,
            ..Default::default()
        };
        let ds = Dataset::write(&uri, &[rows(0..200)], WriteMode::Create, params)
            .await
            .unwrap();
        let ds = delete_multiples(&ds, 4).await;
        let opts = CompactionOptions {
            defer_index_remap: true,
            ..Default::default()
        };
        let (ds, _) = ds.compact_files(&opts, None).await.unwrap();
        assert!(ds.manifest().frag_reuse.is_none());
        assert_eq!(ds.count_rows(), 150);
    });
}
