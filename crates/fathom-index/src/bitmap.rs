//! Bitmap: `bitmap_page_lookup.lance` holds each distinct value (`keys`,
//! a null key for null rows) and the serialized row-address map of its
//! rows (`bitmaps`). For low-cardinality columns. Exact.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, BinaryArray, RecordBatch, UInt32Array, UInt64Array};
use arrow_ord::ord::make_comparator;
use arrow_schema::{DataType, Field, Schema, SortOptions};
use fathom_table::format::{IndexFile, IndexMetadata};
use object_store::ObjectStore;
use object_store::path::Path;
use roaring::RoaringTreemap;

use crate::cache::IndexCache;
use crate::error::Result;
use crate::io::{SegmentDir, read_all};
use crate::pages::sort_indices;
use crate::query::{ScalarQuery, SearchResult};
use crate::rowaddr_map;

pub const LOOKUP: &str = "bitmap_page_lookup.lance";

/// Writes a bitmap index over `values` at row addresses `ids`.
pub async fn build(
    dir: &SegmentDir,
    values: &ArrayRef,
    ids: &UInt64Array,
) -> Result<Vec<IndexFile>> {
    let order = sort_indices(values.as_ref())?;
    let sorted = arrow_select::take::take(values.as_ref(), &order, None)?;
    let cmp = make_comparator(sorted.as_ref(), sorted.as_ref(), SortOptions::default())?;
    let mut keys: Vec<u32> = Vec::new();
    let mut maps: Vec<RoaringTreemap> = Vec::new();
    for (i, &row) in order.values().iter().enumerate() {
        let new = match keys.last() {
            None => true,
            Some(&k) => cmp(k as usize, i) != std::cmp::Ordering::Equal,
        };
        if new {
            keys.push(i as u32);
            maps.push(RoaringTreemap::new());
        }
        maps.last_mut().unwrap().insert(ids.value(row as usize));
    }
    let key_values = arrow_select::take::take(sorted.as_ref(), &UInt32Array::from(keys), None)?;
    let bitmaps = BinaryArray::from_iter_values(maps.iter().map(rowaddr_map::serialize));
    let schema = Arc::new(Schema::new(vec![
        Field::new("keys", values.data_type().clone(), true),
        Field::new("bitmaps", DataType::Binary, false),
    ]));
    let batch = RecordBatch::try_new(schema, vec![key_values, Arc::new(bitmaps)])?;
    Ok(vec![dir.write(LOOKUP, &batch, &[], vec![]).await?])
}

struct Loaded {
    keys: ArrayRef,
    bitmaps: BinaryArray,
}

pub async fn search(
    store: &Arc<dyn ObjectStore>,
    root: &Path,
    meta: &IndexMetadata,
    cache: &IndexCache,
    q: &ScalarQuery,
) -> Result<SearchResult> {
    let key = format!("{}/bitmap", meta.uuid);
    let loaded = match cache.get::<Loaded>(&key) {
        Some(l) => l,
        None => {
            let (_, b) = read_all(store, root, meta, LOOKUP).await?;
            let l = Arc::new(Loaded {
                keys: b.column(0).clone(),
                bitmaps: b.column(1).as_binary::<i32>().clone(),
            });
            cache.insert(key, l.clone(), b.get_array_memory_size());
            l
        }
    };
    let m = q.matches(loaded.keys.as_ref())?;
    let mut out = RoaringTreemap::new();
    for i in 0..m.len() {
        if m.value(i) {
            out |= rowaddr_map::deserialize(loaded.bitmaps.value(i), &meta.name)?;
        }
    }
    Ok(SearchResult::Exact(out))
}
