//! B-tree: values sorted (nulls first) in `page_data.lance` (`values`,
//! `ids`), read in pages of 4,096 rows; `page_lookup.lance` holds each
//! page's `min`, `max`, `null_count` and `page_idx`. A query loads the
//! small lookup first, then only the pages whose range it hits. Exact.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{UInt32Type, UInt64Type};
use arrow_array::{Array, ArrayRef, RecordBatch, UInt32Array, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use fathom_table::format::{IndexFile, IndexMetadata};
use object_store::ObjectStore;
use object_store::path::Path;
use roaring::RoaringTreemap;

use crate::cache::IndexCache;
use crate::error::Result;
use crate::io::{SegmentDir, open, read_all};
use crate::kind::{BuildStream, IndexType, RemapFn, SegmentRef, StoredIds};
use crate::pages::{may_match, sort_indices};
use crate::query::{ScalarQuery, SearchResult};

pub const PAGE_DATA: &str = "page_data.lance";
pub const PAGE_LOOKUP: &str = "page_lookup.lance";
pub const BATCH_SIZE: usize = 4096;

/// Writes a B-tree over `values` at row addresses `ids`.
pub async fn build(
    dir: &SegmentDir,
    values: &ArrayRef,
    ids: &UInt64Array,
) -> Result<Vec<IndexFile>> {
    let order = sort_indices(values.as_ref())?;
    let sorted = arrow_select::take::take(values.as_ref(), &order, None)?;
    let sorted_ids = arrow_select::take::take(ids, &order, None)?;
    let n = sorted.len();
    let data_schema = Arc::new(Schema::new(vec![
        Field::new("values", values.data_type().clone(), true),
        Field::new("ids", DataType::UInt64, false),
    ]));
    let data = RecordBatch::try_new(data_schema, vec![sorted.clone(), sorted_ids])?;
    let pages = n.div_ceil(BATCH_SIZE);
    let (mut min_idx, mut max_idx, mut nulls) = (Vec::new(), Vec::new(), Vec::new());
    for p in 0..pages {
        let (s, e) = (p * BATCH_SIZE, ((p + 1) * BATCH_SIZE).min(n));
        let nc = sorted.slice(s, e - s).null_count();
        nulls.push(nc as u32);
        // Nulls sort first: the page's non-null values are s+nc..e.
        if s + nc < e {
            min_idx.push(Some((s + nc) as u32));
            max_idx.push(Some((e - 1) as u32));
        } else {
            min_idx.push(None);
            max_idx.push(None);
        }
    }
    let min = arrow_select::take::take(sorted.as_ref(), &UInt32Array::from(min_idx), None)?;
    let max = arrow_select::take::take(sorted.as_ref(), &UInt32Array::from(max_idx), None)?;
    let lookup_schema = Arc::new(Schema::new(vec![
        Field::new("min", values.data_type().clone(), true),
        Field::new("max", values.data_type().clone(), true),
        Field::new("null_count", DataType::UInt32, false),
        Field::new("page_idx", DataType::UInt32, false),
    ]));
    let lookup = RecordBatch::try_new(
        lookup_schema,
        vec![
            min,
            max,
            Arc::new(UInt32Array::from(nulls)),
            Arc::new(UInt32Array::from_iter_values(0..pages as u32)),
        ],
    )?;
    let bs = [("batch_size", BATCH_SIZE.to_string())];
    Ok(vec![
        dir.write(PAGE_DATA, &data, &[], vec![]).await?,
        dir.write(PAGE_LOOKUP, &lookup, &bs, vec![]).await?,
    ])
}

struct Lookup {
    min: ArrayRef,
    max: ArrayRef,
    nulls: Vec<u64>,
    batch_size: u64,
}

struct Page {
    values: ArrayRef,
    ids: UInt64Array,
}

/// Searches one B-tree segment.
pub async fn search(
    store: &Arc<dyn ObjectStore>,
    root: &Path,
    meta: &IndexMetadata,
    cache: &IndexCache,
    q: &ScalarQuery,
) -> Result<SearchResult> {
    let key = format!("{}/lookup", meta.uuid);
    let lookup = match cache.get::<Lookup>(&key) {
        Some(l) => l,
        None => {
            let (r, b) = read_all(store, root, meta, PAGE_LOOKUP).await?;
            let batch_size = r
                .schema()
                .metadata()
                .get("batch_size")
                .and_then(|v| v.parse().ok())
                .unwrap_or(BATCH_SIZE as u64);
            let l = Arc::new(Lookup {
                min: b.column(0).clone(),
                max: b.column(1).clone(),
                nulls: b
                    .column(2)
                    .as_primitive::<UInt32Type>()
                    .values()
                    .iter()
                    .map(|v| *v as u64)
                    .collect(),
                batch_size,
            });
            cache.insert(key, l.clone(), b.get_array_memory_size());
            l
        }
    };
    let hit = may_match(q, &lookup.min, &lookup.max, &lookup.nulls)?;
    // An IN list is sorted once here, not once per page it touches.
    let sorted_in = match q {
        ScalarQuery::IsIn(list) => Some(crate::query::sorted_distinct(list.as_ref())?),
        _ => None,
    };
    // Matching ids gathered, then sorted once: one bulk build of the row
    // set instead of a treemap insert per id.
    let mut out: Vec<u64> = Vec::new();
    let mut data = None;
    for p in 0..hit.len() {
        if !hit.value(p) {
            continue;
        }
        let key = format!("{}/page/{p}", meta.uuid);
        let page = match cache.get::<Page>(&key) {
            Some(pg) => pg,
            None => {
                if data.is_none() {
                    data = Some(open(store, root, meta, PAGE_DATA).await?);
                }
                let r = data.as_ref().unwrap();
                let s = p as u64 * lookup.batch_size;
                let e = (s + lookup.batch_size).min(r.num_rows());
                let b = r.read_range(s..e, None).await?;
                let pg = Arc::new(Page {
                    values: b.column(0).clone(),
                    ids: b.column(1).as_primitive::<UInt64Type>().clone(),
                });
                cache.insert(key, pg.clone(), b.get_array_memory_size());
                pg
            }
        };
        if let Some(list) = &sorted_in {
            let ranges = crate::query::in_ranges_of_sorted(list.as_ref(), page.values.as_ref())?;
            for r in ranges {
                out.extend(page.ids.values()[r].iter().copied());
            }
            continue;
        }
        // Values are sorted: equality and ranges match one run of the page.
        if let Some(r) = q.range_sorted(page.values.as_ref())? {
            out.extend(page.ids.values()[r].iter().copied());
            continue;
        }
        let m = q.matches(page.values.as_ref())?;
        out.extend(
            m.values()
                .set_indices()
                .filter(|&i| m.is_valid(i))
                .map(|i| page.ids.value(i)),
        );
    }
    if !out.is_sorted() {
        out.sort_unstable();
    }
    out.dedup();
    let out = RoaringTreemap::from_sorted_iter(out).expect("sorted and distinct");
    Ok(SearchResult::exact(out))
}

/// The B-tree kind.
#[derive(Debug)]
pub struct BTree;

#[async_trait::async_trait]
impl IndexType for BTree {
    fn name(&self) -> &'static str {
        "BTREE"
    }
    fn type_url(&self) -> &'static str {
        "/lance.table.BTreeIndexDetails"
    }
    fn max_version(&self) -> i32 {
        1
    }
    fn write_version(&self, stable_row_ids: bool) -> i32 {
        // pylance 14 writes version 1 (addresses) on stable-row-id datasets.
        if stable_row_ids { 1 } else { 0 }
    }
    fn stored_ids(&self, index_version: i32, stable_row_ids: bool) -> StoredIds {
        let _ = index_version;
        match () {
            _ if !stable_row_ids => StoredIds::RowAddress,
            _ if index_version >= 1 => StoredIds::RowAddress,
            _ => StoredIds::RowId,
        }
    }
    fn preference(&self) -> u8 {
        2
    }
    async fn build(
        &self,
        dir: &SegmentDir,
        value_type: &DataType,
        batches: BuildStream<'_>,
    ) -> Result<Vec<IndexFile>> {
        let (values, ids) = super::collect(value_type, batches).await?;
        build(dir, &values, &ids).await
    }
    async fn search(
        &self,
        seg: SegmentRef<'_>,
        cache: &IndexCache,
        q: &ScalarQuery,
        allow: Option<&fathom_table::RowSet>,
    ) -> Result<SearchResult> {
        Ok(search(seg.store, seg.root, seg.meta, cache, q)
            .await?
            .restrict(allow))
    }
    async fn remap(
        &self,
        seg: SegmentRef<'_>,
        dir: &SegmentDir,
        map: &RemapFn<'_>,
    ) -> Result<Option<Vec<IndexFile>>> {
        let (_, data) = read_all(seg.store, seg.root, seg.meta, PAGE_DATA).await?;
        let ids = data.column(1).as_primitive::<UInt64Type>();
        let (mut keep, mut new) = (Vec::with_capacity(ids.len()), Vec::with_capacity(ids.len()));
        for (i, id) in ids.values().iter().enumerate() {
            if let Some(n) = map(*id) {
                keep.push(i as u32);
                new.push(n);
            }
        }
        // (Re-sorted by the build; equal values keep their order.)
        let values = arrow_select::take::take(data.column(0), &UInt32Array::from(keep), None)?;
        Ok(Some(build(dir, &values, &UInt64Array::from(new)).await?))
    }
}
