//! Zone map: per zone of 8,192 physical rows of one fragment, the zone's
//! `min`, `max`, `null_count` (`zonemap.lance`, with `fragment_id`,
//! `zone_start`, `zone_length`); the addresses of null rows are a
//! row-address map in global buffer 1. Equality, range and IN return every
//! row of the zones that may match (AtMost, rechecked), and, as certain,
//! the rows of zones that match whole (no nulls, min and max both
//! satisfy the query), which a count need not recheck; IS NULL is exact.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{UInt32Type, UInt64Type};
use arrow_array::{Array, ArrayRef, RecordBatch, UInt32Array, UInt64Array, new_null_array};
use arrow_ord::ord::make_comparator;
use arrow_schema::{DataType, Field, Schema, SortOptions};
use fathom_table::format::{IndexFile, IndexMetadata};
use object_store::ObjectStore;
use object_store::path::Path;
use roaring::RoaringTreemap;

use crate::cache::IndexCache;
use crate::error::Result;
use crate::io::{SegmentDir, read_all};
use crate::kind::{BuildStream, IndexType, SegmentRef, StoredIds};
use crate::pages::{all_match, may_match};
use crate::query::Exactness;
use crate::query::{ScalarQuery, SearchResult};
use crate::rowaddr_map;
use fathom_table::{FragmentId, RowAddress, RowSet};
use futures::TryStreamExt;

pub const FILE: &str = "zonemap.lance";
pub const ROWS_PER_ZONE: u64 = 8192;

/// One zone being summarized: (fragment, zone) and the running min / max
/// (one-value arrays), null count and last live offset.
struct Zone {
    frag: u64,
    zone: u64,
    min: Option<ArrayRef>,
    max: Option<ArrayRef>,
    nulls: u32,
    last: u64,
}

/// The smaller (`want_less`) or larger of two one-value arrays.
fn pick(a: Option<ArrayRef>, b: Option<ArrayRef>, want_less: bool) -> Result<Option<ArrayRef>> {
    Ok(match (a, b) {
        (None, x) | (x, None) => x,
        (Some(a), Some(b)) => {
            let c = make_comparator(a.as_ref(), b.as_ref(), SortOptions::default())?(0, 0);
            if c.is_lt() == want_less {
                Some(a)
            } else {
                Some(b)
            }
        }
    })
}

/// Writes a zone map from batches of (values, row addresses) in address
/// order, streaming: memory holds one zone summary per 8,192 rows, never
/// the column.
pub async fn build(
    dir: &SegmentDir,
    value_type: &DataType,
    mut batches: BuildStream<'_>,
) -> Result<Vec<IndexFile>> {
    let mut nulls = RoaringTreemap::new();
    let mut zones: Vec<Zone> = Vec::new();
    while let Some(batch) = batches.try_next().await? {
        let values = batch.column(0);
        let ids = batch.column(1).as_primitive::<UInt64Type>();
        let cmp = make_comparator(values.as_ref(), values.as_ref(), SortOptions::default())?;
        let mut i = 0;
        while i < ids.len() {
            // The run of rows of this batch in one (fragment, zone).
            let a = RowAddress::from_u64(ids.value(i));
            let (frag, zone) = (a.fragment().as_u64(), a.offset() as u64 / ROWS_PER_ZONE);
            let mut j = i;
            let (mut lo, mut hi): (Option<usize>, Option<usize>) = (None, None);
            let mut nc = 0u32;
            let mut last = 0;
            while j < ids.len() {
                let b = RowAddress::from_u64(ids.value(j));
                if b.fragment().as_u64() != frag || b.offset() as u64 / ROWS_PER_ZONE != zone {
                    break;
                }
                last = b.offset() as u64;
                if values.is_null(j) {
                    nc += 1;
                    nulls.insert(b.as_u64());
                } else {
                    if lo.is_none_or(|l| cmp(j, l).is_lt()) {
                        lo = Some(j);
                    }
                    if hi.is_none_or(|h| cmp(j, h).is_gt()) {
                        hi = Some(j);
                    }
                }
                j += 1;
            }
            let min = lo.map(|k| values.slice(k, 1));
            let max = hi.map(|k| values.slice(k, 1));
            match zones.last_mut() {
                // The zone continues from the previous batch.
                Some(z) if z.frag == frag && z.zone == zone => {
                    z.min = pick(z.min.take(), min, true)?;
                    z.max = pick(z.max.take(), max, false)?;
                    z.nulls += nc;
                    z.last = last;
                }
                _ => zones.push(Zone {
                    frag,
                    zone,
                    min,
                    max,
                    nulls: nc,
                    last,
                }),
            }
            i = j;
        }
    }
    let one = |v: &Option<ArrayRef>| v.clone().unwrap_or_else(|| new_null_array(value_type, 1));
    let mins: Vec<ArrayRef> = zones.iter().map(|z| one(&z.min)).collect();
    let maxs: Vec<ArrayRef> = zones.iter().map(|z| one(&z.max)).collect();
    let concat = |v: &[ArrayRef]| -> Result<ArrayRef> {
        if v.is_empty() {
            return Ok(new_null_array(value_type, 0));
        }
        let refs: Vec<&dyn Array> = v.iter().map(|a| a.as_ref()).collect();
        Ok(arrow_select::concat::concat(&refs)?)
    };
    let (min, max) = (concat(&mins)?, concat(&maxs)?);
    let n = zones.len();
    let schema = Arc::new(Schema::new(vec![
        Field::new("min", value_type.clone(), true),
        Field::new("max", value_type.clone(), true),
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
            Arc::new(UInt32Array::from_iter_values(zones.iter().map(|z| z.nulls))),
            Arc::new(UInt32Array::from(vec![0u32; n])),
            Arc::new(UInt64Array::from_iter_values(zones.iter().map(|z| z.frag))),
            Arc::new(UInt64Array::from_iter_values(
                zones.iter().map(|z| z.zone * ROWS_PER_ZONE),
            )),
            // Rows after the zone's last live row were deleted before the build.
            Arc::new(UInt64Array::from_iter_values(
                zones.iter().map(|z| z.last + 1 - z.zone * ROWS_PER_ZONE),
            )),
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
        return Ok(SearchResult::exact(z.null_rows.clone()));
    }
    let hit = may_match(q, &z.min, &z.max, &z.nulls)?;
    let all = all_match(q, &z.min, &z.max, &z.nulls)?;
    let (mut out, mut certain) = (RowSet::new(), RowSet::new());
    for i in 0..hit.len() {
        if hit.value(i) {
            let f = FragmentId::try_from(z.frags[i])?;
            let start = z.starts[i] as u32;
            let zone = start..start + z.lengths[i] as u32;
            out.insert_range(f, zone.clone());
            if all.value(i) {
                // Offsets in the zone deleted before the build are in the
                // deletion file, which readers subtract from both sets.
                certain.insert_range(f, zone);
            }
        }
    }
    Ok(SearchResult::at_most_with_certain(out, certain))
}

/// The zone-map kind.
#[derive(Debug)]
pub struct ZoneMap;

#[async_trait::async_trait]
impl IndexType for ZoneMap {
    fn name(&self) -> &'static str {
        "ZONEMAP"
    }
    fn type_url(&self) -> &'static str {
        "/lance.table.ZoneMapIndexDetails"
    }
    fn max_version(&self) -> i32 {
        0
    }
    fn stored_ids(&self, _index_version: i32, _stable_row_ids: bool) -> StoredIds {
        // Zones name fragments and offsets, whatever the dataset.
        StoredIds::RowAddress
    }
    fn exactness(&self, q: &ScalarQuery) -> Exactness {
        match q {
            ScalarQuery::IsNull => Exactness::Exact,
            _ => Exactness::AtMost,
        }
    }
    fn preference(&self) -> u8 {
        1
    }
    async fn build(
        &self,
        dir: &SegmentDir,
        value_type: &DataType,
        batches: BuildStream<'_>,
    ) -> Result<Vec<IndexFile>> {
        build(dir, value_type, batches).await
    }
    async fn search(
        &self,
        seg: SegmentRef<'_>,
        cache: &IndexCache,
        q: &ScalarQuery,
        allow: Option<&RowSet>,
    ) -> Result<SearchResult> {
        Ok(search(seg.store, seg.root, seg.meta, cache, q)
            .await?
            .restrict(allow))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Int64Array;
    use futures::StreamExt;
    use object_store::memory::InMemory;

    /// Zones spanning batch boundaries summarize as if built in one batch.
    #[test]
    fn streaming_build_equals_one_batch() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
            let n = 30_000u64;
            // Two fragments, some rows deleted (gaps), nulls, values out of order.
            let ids: Vec<u64> = (0..n)
                .filter(|i| i % 11 != 3)
                .map(|i| {
                    RowAddress::new(FragmentId((i / 20_000) as u32), (i % 20_000) as u32).as_u64()
                })
                .collect();
            let values: ArrayRef =
                Arc::new(Int64Array::from_iter(ids.iter().map(|a| {
                    (a % 7 != 0).then_some(((a * 7919) % 1000) as i64 - 500)
                })));
            let ids = UInt64Array::from(ids);
            let batch = |s: usize, l: usize| -> Result<RecordBatch> {
                Ok(RecordBatch::try_from_iter(vec![
                    ("values", values.slice(s, l)),
                    ("ids", Arc::new(ids.slice(s, l)) as ArrayRef),
                ])?)
            };
            let mut bytes = vec![];
            for (k, step) in [ids.len(), 1000, 8191, 37].into_iter().enumerate() {
                let parts: Vec<Result<RecordBatch>> = (0..ids.len())
                    .step_by(step)
                    .map(|s| batch(s, step.min(ids.len() - s)))
                    .collect();
                let dir = SegmentDir::new(
                    store.clone(),
                    &Path::from("t"),
                    &uuid::Uuid::from_u128(k as u128),
                );
                let files = build(&dir, &DataType::Int64, futures::stream::iter(parts).boxed())
                    .await
                    .unwrap();
                let p = dir.dir.clone().join(files[0].path.as_str());
                let r = fathom_file::FileReader::open(store.clone(), p, None, Default::default())
                    .await
                    .unwrap();
                let nulls = r.read_global_buffer(1).await.unwrap();
                bytes.push((r.read_range(0..r.num_rows(), None).await.unwrap(), nulls));
            }
            assert!(bytes[0].0.num_rows() > 4);
            for b in &bytes[1..] {
                assert_eq!(b, &bytes[0]);
            }
        });
    }
}
