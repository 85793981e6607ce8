//! Bitmap: `bitmap_page_lookup.lance` holds each distinct value (`keys`,
//! a null key for null rows) and the serialized row-address map of its
//! rows (`bitmaps`). For low-cardinality columns. Exact. Its keys and
//! their rows also answer grouped counts (`GROUP BY` the column).

use std::sync::{Arc, OnceLock};

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
use crate::kind::{BuildStream, Groups, IndexType, RemapFn, SegmentRef, StoredIds};
use crate::pages::sort_indices;
use crate::query::{ScalarQuery, SearchResult};
use crate::rowaddr_map;

pub const LOOKUP: &str = "bitmap_page_lookup.lance";

/// Groups rows by value: (a row holding each distinct value, the row
/// addresses of its rows), distinct values in ascending order, null first.
fn group(values: &ArrayRef, ids: &UInt64Array) -> Result<(UInt32Array, Vec<RoaringTreemap>)> {
    // Strings (the usual bitmap column) are grouped by hashing: linear,
    // where sorting a million strings first is not.
    fn hashed<'a>(
        keys: impl Iterator<Item = Option<&'a str>>,
        ids: &UInt64Array,
    ) -> (Vec<u32>, Vec<Vec<u64>>) {
        let mut slot: std::collections::HashMap<Option<&str>, usize> = Default::default();
        let (mut firsts, mut rows): (Vec<u32>, Vec<Vec<u64>>) = (vec![], vec![]);
        for (i, k) in keys.enumerate() {
            let g = *slot.entry(k).or_insert_with(|| {
                firsts.push(i as u32);
                rows.push(Vec::new());
                firsts.len() - 1
            });
            rows[g].push(ids.value(i));
        }
        (firsts, rows)
    }
    let grouped = match values.data_type() {
        DataType::Utf8 => Some(hashed(values.as_string::<i32>().iter(), ids)),
        DataType::LargeUtf8 => Some(hashed(values.as_string::<i64>().iter(), ids)),
        _ => None,
    };
    if let Some((firsts, rows)) = grouped {
        let firsts = UInt32Array::from(firsts);
        let reps = arrow_select::take::take(values.as_ref(), &firsts, None)?;
        let order = sort_indices(reps.as_ref())?;
        let mut maps = Vec::with_capacity(rows.len());
        let mut rows: Vec<Option<Vec<u64>>> = rows.into_iter().map(Some).collect();
        for &g in order.values() {
            let mut r = rows[g as usize].take().unwrap_or_default();
            if !r.is_sorted() {
                r.sort_unstable();
            }
            maps.push(
                RoaringTreemap::from_sorted_iter(r).expect("addresses were sorted just above"),
            );
        }
        let firsts = arrow_select::take::take(&firsts, &order, None)?;
        return Ok((
            firsts
                .as_primitive::<arrow_array::types::UInt32Type>()
                .clone(),
            maps,
        ));
    }
    // Anything else: sort, then cut the sorted run at each new value.
    let order = sort_indices(values.as_ref())?;
    let sorted = arrow_select::take::take(values.as_ref(), &order, None)?;
    let cmp = make_comparator(sorted.as_ref(), sorted.as_ref(), SortOptions::default())?;
    let mut firsts: Vec<u32> = Vec::new();
    let mut maps: Vec<RoaringTreemap> = Vec::new();
    let mut last: Option<usize> = None;
    for (i, &row) in order.values().iter().enumerate() {
        if last.is_none_or(|l| cmp(l, i) != std::cmp::Ordering::Equal) {
            last = Some(i);
            firsts.push(row);
            maps.push(RoaringTreemap::new());
        }
        maps.last_mut().unwrap().insert(ids.value(row as usize));
    }
    Ok((UInt32Array::from(firsts), maps))
}

/// Writes a bitmap index over `values` at row addresses `ids`.
pub async fn build(
    dir: &SegmentDir,
    values: &ArrayRef,
    ids: &UInt64Array,
) -> Result<Vec<IndexFile>> {
    let (firsts, maps) = group(values, ids)?;
    let key_values = arrow_select::take::take(values.as_ref(), &firsts, None)?;
    write(dir, key_values, &maps).await
}

/// Writes the lookup file: distinct `keys` (sorted, null first) and each
/// one's rows.
async fn write(
    dir: &SegmentDir,
    key_values: ArrayRef,
    maps: &[RoaringTreemap],
) -> Result<Vec<IndexFile>> {
    let bitmaps = BinaryArray::from_iter_values(maps.iter().map(rowaddr_map::serialize));
    let schema = Arc::new(Schema::new(vec![
        Field::new("keys", key_values.data_type().clone(), true),
        Field::new("bitmaps", DataType::Binary, false),
    ]));
    let batch = RecordBatch::try_new(schema, vec![key_values, Arc::new(bitmaps)])?;
    Ok(vec![dir.write(LOOKUP, &batch, &[], vec![]).await?])
}

struct Loaded {
    keys: ArrayRef,
    bitmaps: BinaryArray,
    /// Each key's rows, deserialized on first use.
    maps: Vec<OnceLock<RoaringTreemap>>,
}

impl Loaded {
    fn map(&self, i: usize, index: &str) -> Result<&RoaringTreemap> {
        if let Some(m) = self.maps[i].get() {
            return Ok(m);
        }
        let m = rowaddr_map::deserialize(self.bitmaps.value(i), index)?;
        Ok(self.maps[i].get_or_init(|| m))
    }
}

async fn load(
    store: &Arc<dyn ObjectStore>,
    root: &Path,
    meta: &IndexMetadata,
    cache: &IndexCache,
) -> Result<Arc<Loaded>> {
    let key = format!("{}/bitmap", meta.uuid);
    if let Some(l) = cache.get::<Loaded>(&key) {
        return Ok(l);
    }
    let (_, b) = read_all(store, root, meta, LOOKUP).await?;
    let bitmaps = b.column(1).as_binary::<i32>().clone();
    let l = Arc::new(Loaded {
        keys: b.column(0).clone(),
        maps: (0..bitmaps.len()).map(|_| OnceLock::new()).collect(),
        bitmaps,
    });
    // Deserialized maps take about what their bytes do.
    cache.insert(key, l.clone(), 2 * b.get_array_memory_size());
    Ok(l)
}

pub async fn search(
    store: &Arc<dyn ObjectStore>,
    root: &Path,
    meta: &IndexMetadata,
    cache: &IndexCache,
    q: &ScalarQuery,
) -> Result<SearchResult> {
    let loaded = load(store, root, meta, cache).await?;
    // Keys are distinct and sorted (null first): an IN list is found by
    // binary searches, anything else by one vectorized pass over the keys.
    let hits: Vec<usize> = match q.in_ranges_sorted(loaded.keys.as_ref())? {
        Some(ranges) => ranges.into_iter().flatten().collect(),
        None => {
            let m = q.matches(loaded.keys.as_ref())?;
            (0..m.len()).filter(|&i| m.value(i)).collect()
        }
    };
    // The maps are OR-ed as bitmaps (never expanded to addresses here), all
    // at once: roaring's multi-way union turns each chunk into a dense
    // bitmap first, where OR-ing sorted arrays one pair at a time re-merges
    // the growing result for every key.
    let maps = hits
        .into_iter()
        .map(|i| loaded.map(i, &meta.name))
        .collect::<Result<Vec<&RoaringTreemap>>>()?;
    let out = match maps.as_slice() {
        [] => RoaringTreemap::new(),
        [one] => (*one).clone(),
        _ => roaring::MultiOps::union(maps),
    };
    Ok(SearchResult::exact(out))
}

/// Every key (null first, if any row is null) with its rows.
pub async fn groups(
    store: &Arc<dyn ObjectStore>,
    root: &Path,
    meta: &IndexMetadata,
    cache: &IndexCache,
) -> Result<Groups> {
    let loaded = load(store, root, meta, cache).await?;
    let rows = (0..loaded.keys.len())
        .map(|i| Ok(loaded.map(i, &meta.name)?.clone().into()))
        .collect::<Result<Vec<_>>>()?;
    Ok(Groups {
        keys: loaded.keys.clone(),
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int32Array, StringArray};

    /// Hashing (strings) and sorting (other types) group alike: distinct
    /// values ascending, null first, each with its rows.
    #[test]
    fn grouping_matches_brute_force() {
        let strs: Vec<Option<&str>> = (0..500)
            .map(|i| (i % 7 != 3).then_some(["b", "a", "c", "ab", ""][i % 5]))
            .collect();
        let ints: Vec<Option<i32>> = (0..500)
            .map(|i| (i % 7 != 3).then_some([5, -1, 9, 0, 5][i % 5]))
            .collect();
        let ids = UInt64Array::from_iter_values((0..500u64).map(|i| ((i / 200) << 32) | (i % 200)));
        for values in [
            Arc::new(StringArray::from(strs)) as ArrayRef,
            Arc::new(Int32Array::from(ints)) as ArrayRef,
        ] {
            let (firsts, maps) = group(&values, &ids).unwrap();
            let keys = arrow_select::take::take(values.as_ref(), &firsts, None).unwrap();
            assert_eq!(keys.null_count(), 1);
            assert!(keys.is_null(0), "null first");
            let cmp =
                make_comparator(keys.as_ref(), keys.as_ref(), SortOptions::default()).unwrap();
            for k in 1..keys.len() {
                assert_eq!(
                    cmp(k - 1, k),
                    std::cmp::Ordering::Less,
                    "ascending, distinct"
                );
            }
            let vcmp =
                make_comparator(values.as_ref(), keys.as_ref(), SortOptions::default()).unwrap();
            for (k, m) in maps.iter().enumerate() {
                let want: Vec<u64> = (0..values.len())
                    .filter(|&i| {
                        if keys.is_null(k) {
                            values.is_null(i)
                        } else {
                            values.is_valid(i) && vcmp(i, k) == std::cmp::Ordering::Equal
                        }
                    })
                    .map(|i| ids.value(i))
                    .collect();
                assert_eq!(m.iter().collect::<Vec<_>>(), want);
            }
        }
    }
}

/// The bitmap kind.
#[derive(Debug)]
pub struct Bitmap;

#[async_trait::async_trait]
impl IndexType for Bitmap {
    fn name(&self) -> &'static str {
        "BITMAP"
    }
    fn type_url(&self) -> &'static str {
        "/lance.table.BitmapIndexDetails"
    }
    fn max_version(&self) -> i32 {
        0
    }
    fn stored_ids(&self, index_version: i32, stable_row_ids: bool) -> StoredIds {
        let _ = index_version;
        if stable_row_ids {
            StoredIds::RowId
        } else {
            StoredIds::RowAddress
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
    fn keeps_groups(&self) -> bool {
        true
    }
    async fn groups(&self, seg: SegmentRef<'_>, cache: &IndexCache) -> Result<Option<Groups>> {
        Ok(Some(groups(seg.store, seg.root, seg.meta, cache).await?))
    }
    async fn remap(
        &self,
        seg: SegmentRef<'_>,
        dir: &SegmentDir,
        map: &RemapFn<'_>,
    ) -> Result<Option<Vec<IndexFile>>> {
        let loaded = load(seg.store, seg.root, seg.meta, &IndexCache::new(0)).await?;
        let (mut keep, mut maps) = (Vec::new(), Vec::new());
        for i in 0..loaded.keys.len() {
            let mut ids: Vec<u64> = loaded
                .map(i, &seg.meta.name)?
                .iter()
                .filter_map(map)
                .collect();
            // A value whose rows are all gone is no longer a key.
            if !ids.is_empty() {
                ids.sort_unstable();
                keep.push(i as u32);
                maps.push(RoaringTreemap::from_sorted_iter(ids).expect("sorted"));
            }
        }
        let keys = arrow_select::take::take(loaded.keys.as_ref(), &UInt32Array::from(keep), None)?;
        Ok(Some(write(dir, keys, &maps).await?))
    }
}
