//! Zone map: per zone of 8,192 physical rows of one fragment, the zone's
//! `min`, `max`, `null_count` (`zonemap.lance`, with `fragment_id`,
//! `zone_start`, `zone_length`); the addresses of null rows are a
//! row-address map in global buffer 1. Equality, range and IN return every
//! row of the zones that may match (AtMost, rechecked); IS NULL is exact.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{UInt32Type, UInt64Type};
use arrow_array::{Array, ArrayRef, RecordBatch, UInt32Array, UInt64Array};
use arrow_ord::ord::make_comparator;
use arrow_schema::{DataType, Field, Schema, SortOptions};
use fathom_table::format::{IndexFile, IndexMetadata};
use object_store::ObjectStore;
use object_store::path::Path;
use roaring::RoaringTreemap;

use crate::cache::IndexCache;
use crate::error::Result;
use crate::io::{SegmentDir, read_all};
use crate::pages::may_match;
use crate::query::{ScalarQuery, SearchResult};
use crate::rowaddr_map;

pub const FILE: &str = "zonemap.lance";
pub const ROWS_PER_ZONE: u64 = 8192;

/// Writes a zone map over `values` at row addresses `ids` (sorted by address).
pub async fn build(
    dir: &SegmentDir,
    values: &ArrayRef,
    ids: &UInt64Array,
) -> Result<Vec<IndexFile>> {
    let mut nulls = RoaringTreemap::new();
    // Group rows by (fragment, zone): consecutive rows of `values`.
    let mut zones: Vec<(u64, u64, std::ops::Range<usize>)> = Vec::new();
    let mut last_offset: Vec<u64> = Vec::new();
    for i in 0..ids.len() {
        let a = ids.value(i);
        let (frag, off) = (a >> 32, a & 0xFFFF_FFFF);
        let zone = off / ROWS_PER_ZONE;
        match zones.last_mut() {
            Some((f, z, rows)) if *f == frag && *z == zone => {
                rows.end = i + 1;
                *last_offset.last_mut().unwrap() = off;
            }
            _ => {
                zones.push((frag, zone, i..i + 1));
                last_offset.push(off);
            }
        }
        if values.is_null(i) {
            nulls.insert(a);
        }
    }
    let (mut min_idx, mut max_idx) = (Vec::new(), Vec::new());
    let (mut null_count, mut frag_ids, mut starts, mut lengths) = (vec![], vec![], vec![], vec![]);
    let cmp = make_comparator(values.as_ref(), values.as_ref(), SortOptions::default())?;
    for ((frag, zone, rows), last) in zones.iter().zip(&last_offset) {
        // One pass for the zone's smallest and largest non-null values.
        let (mut lo, mut hi): (Option<usize>, Option<usize>) = (None, None);
        let mut nc = 0u32;
        for i in rows.clone() {
            if values.is_null(i) {
                nc += 1;
                continue;
            }
            if lo.is_none_or(|l| cmp(i, l).is_lt()) {
                lo = Some(i);
            }
            if hi.is_none_or(|h| cmp(i, h).is_gt()) {
                hi = Some(i);
            }
        }
        min_idx.push(lo.map(|i| i as u32));
        max_idx.push(hi.map(|i| i as u32));
        null_count.push(nc);
        frag_ids.push(*frag);
        starts.push(zone * ROWS_PER_ZONE);
        // Rows after the zone's last live row were deleted before the build.
        lengths.push(last + 1 - zone * ROWS_PER_ZONE);
    }
    let min = arrow_select::take::take(values.as_ref(), &UInt32Array::from(min_idx), None)?;
    let max = arrow_select::take::take(values.as_ref(), &UInt32Array::from(max_idx), None)?;
    let n = zones.len();
    let schema = Arc::new(Schema::new(vec![
        Field::new("min", values.data_type().clone(), true),
        Field::new("max", values.data_type().clone(), true),
        Field::new("null_count", DataType::UInt32, false),
        Field::new("nan_count", DataType::UInt32, false),
        Field::new("fragment_id", DataType::UInt64, false),
        Field::new("zone_start", DataType::UInt64, false),
        Field::new("zone_length", DataType::UInt64, false),
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            min,
            max,
            Arc::new(UInt32Array::from(null_count)),
            Arc::new(UInt32Array::from(vec![0u32; n])),
            Arc::new(UInt64Array::from(frag_ids)),
            Arc::new(UInt64Array::from(starts)),
            Arc::new(UInt64Array::from(lengths)),
        ],
    )?;
    let md = [
        ("rows_per_zone", ROWS_PER_ZONE.to_string()),
        ("null_bitmap", "1".to_string()),
    ];
    Ok(vec![
        dir.write(FILE, &batch, &md, vec![rowaddr_map::serialize(&nulls)])
            .await?,
    ])
}

struct Loaded {
    min: ArrayRef,
    max: ArrayRef,
    nulls: Vec<u64>,
    frags: Vec<u64>,
    starts: Vec<u64>,
    lengths: Vec<u64>,
    null_rows: RoaringTreemap,
}

pub async fn search(
    store: &Arc<dyn ObjectStore>,
    root: &Path,
    meta: &IndexMetadata,
    cache: &IndexCache,
    q: &ScalarQuery,
) -> Result<SearchResult> {
    let key = format!("{}/zones", meta.uuid);
    let z = match cache.get::<Loaded>(&key) {
        Some(z) => z,
        None => {
            let (r, b) = read_all(store, root, meta, FILE).await?;
            let null_rows = rowaddr_map::deserialize(&r.read_global_buffer(1).await?, &meta.name)?;
            let u64s = |i: usize| b.column(i).as_primitive::<UInt64Type>().values().to_vec();
            let z = Arc::new(Loaded {
                min: b.column(0).clone(),
                max: b.column(1).clone(),
                nulls: b
                    .column(2)
                    .as_primitive::<UInt32Type>()
                    .values()
                    .iter()
                    .map(|v| *v as u64)
                    .collect(),
                frags: u64s(4),
                starts: u64s(5),
                lengths: u64s(6),
                null_rows,
            });
            cache.insert(
                key,
                z.clone(),
                b.get_array_memory_size() + z.null_rows.serialized_size(),
            );
            z
        }
    };
    if let ScalarQuery::IsNull = q {
        return Ok(SearchResult::Exact(z.null_rows.clone()));
    }
    let hit = may_match(q, &z.min, &z.max, &z.nulls)?;
    let mut out = RoaringTreemap::new();
    for i in 0..hit.len() {
        if hit.value(i) {
            let base = z.frags[i] << 32;
            out.insert_range(base + z.starts[i]..base + z.starts[i] + z.lengths[i]);
        }
    }
    Ok(SearchResult::AtMost(out))
}
