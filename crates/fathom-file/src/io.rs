//! Byte-range reads over an object store, with coalescing and counters.
//!
//! Every read of the file goes through [`FileIo::read_ranges`]: requested
//! ranges are sorted, ranges closer than `coalesce_gap` are merged into one
//! request, and the results are sliced back in request order. The counters
//! let tests and benchmarks check what a query really read.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow_buffer::MutableBuffer;
use bytes::Bytes;
use object_store::ObjectStore;
use object_store::path::Path;

use crate::error::{Error, Result};

/// Requests and bytes read, shared by everything that reads one file.
#[derive(Debug, Default)]
pub struct IoStats {
    pub requests: AtomicU64,
    pub bytes: AtomicU64,
}

impl IoStats {
    /// (requests, bytes) so far.
    pub fn snapshot(&self) -> (u64, u64) {
        (
            self.requests.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }
}

/// Default gap below which two ranges are read in one request.
pub const DEFAULT_COALESCE_GAP: u64 = 4 * 1024;

/// Ranged reads of one file.
#[derive(Debug, Clone)]
pub struct FileIo {
    pub(crate) store: Arc<dyn ObjectStore>,
    pub(crate) path: Path,
    pub(crate) size: u64,
    pub(crate) coalesce_gap: u64,
    pub(crate) stats: Arc<IoStats>,
}

impl FileIo {
    pub(crate) fn path_str(&self) -> String {
        self.path.to_string()
    }

    /// Checks `ranges` against the file, and merges the non-empty ones
    /// (in start order) into requests: (order of the non-empty ranges,
    /// merged requests).
    fn coalesce(&self, ranges: &[Range<u64>]) -> Result<(Vec<usize>, Vec<Range<u64>>)> {
        for r in ranges {
            if r.start > r.end || r.end > self.size {
                return Err(Error::corrupt(
                    self.path_str(),
                    format!(
                        "buffer range {}..{} lies outside the file ({} bytes): truncated or corrupt",
                        r.start, r.end, self.size
                    ),
                ));
            }
        }
        // Empty ranges need no request.
        let mut order: Vec<usize> = (0..ranges.len())
            .filter(|&i| ranges[i].start < ranges[i].end)
            .collect();
        if !ranges.is_sorted_by_key(|r| (r.start, r.end)) {
            order.sort_by_key(|&i| (ranges[i].start, ranges[i].end));
        }
        let mut merged: Vec<Range<u64>> = Vec::new();
        for &i in &order {
            let r = &ranges[i];
            match merged.last_mut() {
                Some(m) if r.start <= m.end.saturating_add(self.coalesce_gap) => {
                    m.end = m.end.max(r.end)
                }
                _ => merged.push(r.clone()),
            }
        }
        Ok((order, merged))
    }

    async fn fetch(&self, merged: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let fetched = self
            .store
            .get_ranges(&self.path, merged)
            .await
            .map_err(|source| Error::Io {
                path: self.path_str(),
                source,
            })?;
        self.stats
            .requests
            .fetch_add(merged.len() as u64, Ordering::Relaxed);
        self.stats.bytes.fetch_add(
            merged.iter().map(|r| r.end - r.start).sum::<u64>(),
            Ordering::Relaxed,
        );
        Ok(fetched)
    }

    /// Reads `ranges` (any order, may overlap); returns one `Bytes` per range.
    pub async fn read_ranges(&self, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let (order, merged) = self.coalesce(ranges)?;
        if merged.is_empty() {
            return Ok(vec![Bytes::new(); ranges.len()]);
        }
        let fetched = self.fetch(&merged).await?;
        let mut out = vec![Bytes::new(); ranges.len()];
        let mut m = 0;
        for &i in &order {
            let r = &ranges[i];
            while merged[m].end < r.end {
                m += 1;
            }
            let base = merged[m].start;
            out[i] = fetched[m].slice((r.start - base) as usize..(r.end - base) as usize);
        }
        Ok(out)
    }

    /// Reads `ranges` and returns their bytes concatenated in the order
    /// given: one allocation and no handle per range, for gathering many
    /// small runs (a take of scattered fixed-width values).
    pub async fn read_concat(&self, ranges: &[Range<u64>]) -> Result<MutableBuffer> {
        let total: u64 = ranges.iter().map(|r| r.end.saturating_sub(r.start)).sum();
        let (order, merged) = self.coalesce(ranges)?;
        let mut out = MutableBuffer::with_capacity(total as usize);
        if merged.is_empty() {
            return Ok(out);
        }
        let fetched = self.fetch(&merged).await?;
        if ranges.is_sorted_by_key(|r| (r.start, r.end)) {
            let mut m = 0;
            for &i in &order {
                let r = &ranges[i];
                while merged[m].end < r.end {
                    m += 1;
                }
                let base = merged[m].start;
                out.extend_from_slice(
                    &fetched[m][(r.start - base) as usize..(r.end - base) as usize],
                );
            }
        } else {
            // Out of order: find each range's request by binary search.
            for r in ranges.iter().filter(|r| r.start < r.end) {
                let m = merged.partition_point(|q| q.end < r.end);
                let base = merged[m].start;
                out.extend_from_slice(
                    &fetched[m][(r.start - base) as usize..(r.end - base) as usize],
                );
            }
        }
        Ok(out)
    }

    /// Reads one range.
    pub async fn read(&self, range: Range<u64>) -> Result<Bytes> {
        Ok(self.read_ranges(&[range]).await?.pop().unwrap())
    }
}
