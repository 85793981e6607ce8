//! Reading rows by address or by row id: one implementation, used by DML,
//! index builds and the query engine's take node alike.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchOptions, UInt32Array};
use arrow_schema::SchemaRef;
use tokio::sync::Mutex;

use crate::address::{FragmentId, RowAddress};
use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::scan::{FragmentReader, Projection, Rows};

/// Takes rows of one version by address, opening each fragment once.
///
/// `take_sorted` reads addresses grouped by fragment (ascending, as index
/// results and row sets are), per fragment only the pages those rows need.
/// It does not skip deleted rows: callers exclude them first (the query
/// engine's exclusion node, or [`Dataset::take_addresses`]).
#[derive(Debug)]
pub struct Taker {
    ds: Dataset,
    projection: Projection,
    schema: SchemaRef,
    readers: Mutex<HashMap<FragmentId, Arc<FragmentReader>>>,
}

impl std::fmt::Debug for FragmentReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FragmentReader")
            .field("fragment", &self.fragment.id)
            .finish()
    }
}

impl Taker {
    pub fn new(ds: &Dataset, projection: Projection) -> Self {
        Taker {
            schema: projection.schema(ds.schema()),
            ds: ds.clone(),
            projection,
            readers: Mutex::default(),
        }
    }

    /// The schema of the batches taken.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The fragment's reader, opened on first use.
    async fn reader(&self, f: FragmentId) -> Result<Arc<FragmentReader>> {
        let mut g = self.readers.lock().await;
        if let Some(r) = g.get(&f) {
            return Ok(r.clone());
        }
        let frag = self.ds.fragment(f.as_u64()).ok_or_else(|| {
            Error::invalid(format!(
                "fragment {f} is not in version {}",
                self.ds.version()
            ))
        })?;
        let r = self
            .ds
            .fragment_reader(frag, self.projection.with_row_id)
            .await?;
        g.insert(f, r.clone());
        Ok(r)
    }

    /// The rows of fragment `f` at `offsets` (ascending). When each
    /// projected column's newest overlay covers exactly these offsets (the
    /// rows an update changed, re-evaluated), that overlay's file is the
    /// column: read whole, no offset looked up.
    pub async fn take_fragment(
        &self,
        f: FragmentId,
        offsets: &roaring::RoaringBitmap,
    ) -> Result<RecordBatch> {
        let reader = self.reader(f).await?;
        if let Some(b) = reader.read_overlaid(&self.projection, offsets).await? {
            return Ok(b);
        }
        let offs: Vec<u64> = offsets.iter().map(u64::from).collect();
        if let Some(o) = offs.last().filter(|o| **o >= reader.fragment.physical_rows) {
            return Err(Error::invalid(format!(
                "row address {}: offset {o} beyond the {} rows of fragment {f}",
                RowAddress::new(f, *o as u32).as_u64(),
                reader.fragment.physical_rows
            )));
        }
        reader.read(&self.projection, Rows::Take(&offs)).await
    }

    /// Rows at `addrs`, which are grouped by fragment (runs of one
    /// fragment are read together), in the given order.
    pub async fn take_sorted(&self, addrs: &[RowAddress]) -> Result<RecordBatch> {
        if self.projection.is_empty() {
            return Ok(RecordBatch::try_new_with_options(
                self.schema.clone(),
                vec![],
                &RecordBatchOptions::new().with_row_count(Some(addrs.len())),
            )?);
        }
        let mut parts = Vec::new();
        let mut i = 0;
        while i < addrs.len() {
            let f = addrs[i].fragment();
            let mut j = i;
            while j < addrs.len() && addrs[j].fragment() == f {
                j += 1;
            }
            let reader = self.reader(f).await?;
            let rows = reader.fragment.physical_rows;
            let offsets: Vec<u64> = addrs[i..j].iter().map(|a| a.offset() as u64).collect();
            if let Some(o) = offsets.iter().find(|o| **o >= rows) {
                return Err(Error::invalid(format!(
                    "row address {}: offset {o} beyond the {rows} rows of fragment {f}",
                    RowAddress::new(f, *o as u32).as_u64()
                )));
            }
            parts.push(reader.read(&self.projection, Rows::Take(&offsets)).await?);
            i = j;
        }
        match parts.len() {
            0 => Ok(RecordBatch::new_empty(self.schema.clone())),
            1 => Ok(parts.pop().unwrap()),
            _ => Ok(arrow_select::concat::concat_batches(&self.schema, &parts)?),
        }
    }
}

impl Dataset {
    /// Rows at the given addresses, in the given order. Deleted rows are
    /// skipped; an address outside every fragment is an error.
    pub async fn take_addresses(
        &self,
        addresses: &[u64],
        projection: &Projection,
    ) -> Result<RecordBatch> {
        let taker = Taker::new(self, projection.clone());
        // Live addresses with their request positions, grouped by fragment.
        let mut live: Vec<(RowAddress, usize)> = Vec::with_capacity(addresses.len());
        let mut last: Option<(FragmentId, Option<Arc<roaring::RoaringBitmap>>)> = None;
        for (pos, &a) in addresses.iter().enumerate() {
            let addr = RowAddress::from_u64(a);
            let f = addr.fragment();
            let frag = self.fragment(f.as_u64()).ok_or_else(|| {
                Error::invalid(format!(
                    "row address {a}: fragment {f} is not in version {}",
                    self.version()
                ))
            })?;
            if addr.offset() as u64 >= frag.physical_rows {
                return Err(Error::invalid(format!(
                    "row address {a}: offset {} beyond the {} rows of fragment {f}",
                    addr.offset(),
                    frag.physical_rows
                )));
            }
            // Deletions looked up once per run of one fragment.
            if last.as_ref().is_none_or(|(lf, _)| *lf != f) {
                last = Some((f, self.deleted_rows(frag).await?));
            }
            let deleted = last.as_ref().and_then(|(_, d)| d.as_ref());
            if !deleted.is_some_and(|d| d.contains(addr.offset())) {
                live.push((addr, pos));
            }
        }
        // Stable sort by fragment only: offsets keep request order (repeats allowed).
        live.sort_by_key(|(a, _)| a.fragment());
        let sorted: Vec<RowAddress> = live.iter().map(|(a, _)| *a).collect();
        let all = taker.take_sorted(&sorted).await?;
        // Restore request order.
        let mut order: Vec<u32> = (0..live.len() as u32).collect();
        order.sort_by_key(|&i| live[i as usize].1);
        let idx = UInt32Array::from(order);
        let cols = all
            .columns()
            .iter()
            .map(|c| arrow_select::take::take(c, &idx, None))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(RecordBatch::try_new_with_options(
            all.schema(),
            cols,
            &RecordBatchOptions::new().with_row_count(Some(idx.len())),
        )?)
    }

    /// Row id -> address of every live row (stable row ids): built once
    /// per version, one decode of each fragment's row-id sequence.
    async fn row_id_index(&self) -> Result<&HashMap<u64, u64>> {
        if self.row_id_index.get().is_none() {
            let mut map = HashMap::with_capacity(self.count_rows() as usize);
            for f in &self.manifest.fragments {
                let r = self.fragment_reader(f, true).await?;
                let fid = FragmentId::try_from(f.id)?;
                for o in r.live_runs().into_iter().flatten() {
                    map.insert(r.row_id(o), RowAddress::new(fid, o as u32).as_u64());
                }
            }
            let _ = self.row_id_index.set(map);
        }
        Ok(self.row_id_index.get().unwrap())
    }

    /// The current addresses of `row_ids` (stable row ids); ids of deleted
    /// rows are dropped. Without stable row ids, ids are addresses already.
    pub async fn row_ids_to_addresses(
        &self,
        row_ids: &roaring::RoaringTreemap,
    ) -> Result<roaring::RoaringTreemap> {
        if !self.manifest.uses_stable_row_ids() {
            return Ok(row_ids.clone());
        }
        let index = self.row_id_index().await?;
        Ok(row_ids
            .iter()
            .filter_map(|id| index.get(&id).copied())
            .collect())
    }

    /// Rows by row id (stable ids, or addresses when stable ids are off).
    pub async fn take_row_ids(
        &self,
        row_ids: &[u64],
        projection: &Projection,
    ) -> Result<RecordBatch> {
        if !self.manifest.uses_stable_row_ids() {
            return self.take_addresses(row_ids, projection).await;
        }
        let index = self.row_id_index().await?;
        let addrs: Vec<u64> = row_ids
            .iter()
            .filter_map(|id| index.get(id).copied())
            .collect();
        self.take_addresses(&addrs, projection).await
    }
}
