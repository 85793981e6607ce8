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
    /// The whole file, when the reader keeps it (small files): reads are
    /// slices of it, not requests.
    pub(crate) resident: Option<Bytes>,
}

impl FileIo {
    pub(crate) fn path_str(&self) -> String {
        shown(self.store.as_ref(), &self.path)
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
        if let Some(all) = &self.resident {
            // Ranges were checked against the file's size.
            return Ok(merged
                .iter()
                .map(|r| all.slice(r.start as usize..r.end as usize))
                .collect());
        }
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
            out[i] = fetched[m].slice(local(&merged[m], r));
        }
        Ok(out)
    }

    /// Reads `ranges` and returns their bytes concatenated in the order
    /// given: one allocation and no handle per range, for gathering many
    /// small runs (a take of scattered fixed-width values).
    pub async fn read_concat(&self, ranges: &[Range<u64>]) -> Result<MutableBuffer> {
        let total: u64 = ranges.iter().map(|r| r.end.saturating_sub(r.start)).sum();
        let (_, merged) = self.coalesce(ranges)?;
        let mut out = MutableBuffer::with_capacity(total as usize);
        if merged.is_empty() {
            return Ok(out);
        }
        let fetched = self.fetch(&merged).await?;
        let mut m = 0;
        for r in ranges.iter().filter(|r| r.start < r.end) {
            // Sorted ranges mostly stay in the current request.
            if !(merged[m].start <= r.start && r.end <= merged[m].end) {
                m = merged.partition_point(|q| q.end < r.end);
            }
            // A take's ranges are mostly one value each: copied as one
            // load and store, not a call to `memcpy` per value.
            let src = &fetched[m][local(&merged[m], r)];
            match src.len() {
                8 => out.push(u64::from_ne_bytes(src.try_into().unwrap())),
                4 => out.push(u32::from_ne_bytes(src.try_into().unwrap())),
                _ => out.extend_from_slice(src),
            }
        }
        Ok(out)
    }

    /// Reads one range.
    pub async fn read(&self, range: Range<u64>) -> Result<Bytes> {
        Ok(self.read_ranges(&[range]).await?.pop().unwrap())
    }
}

/// Where range `r` lies inside the fetched request `within`.
fn local(within: &Range<u64>, r: &Range<u64>) -> Range<usize> {
    (r.start - within.start) as usize..(r.end - within.start) as usize
}

/// `path` as a user would write it: object-store paths are relative to
/// their store, so a local one loses its leading `/` and an S3 key its
/// bucket; put them back (`/tmp/ds/...`, `s3://bucket/key`, `memory://...`).
pub fn shown(store: &dyn ObjectStore, path: &Path) -> String {
    let name = store.to_string();
    if name.starts_with("LocalStore") || name.starts_with("LocalFileSystem") {
        format!("/{path}")
    } else if let Some(bucket) = name.strip_prefix("AmazonS3(") {
        format!("s3://{}/{path}", bucket.trim_end_matches(')'))
    } else if name.starts_with("InMemory") {
        format!("memory://{path}")
    } else {
        path.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;

    /// `read_concat` equals reading each range and concatenating, for
    /// ranges in any order, overlapping, empty, near and far apart.
    #[tokio::test]
    async fn read_concat_matches_read_ranges() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let path = Path::from("f");
        store.put(&path, data.clone().into()).await.unwrap();
        let io = FileIo {
            store,
            path,
            size: data.len() as u64,
            coalesce_gap: DEFAULT_COALESCE_GAP,
            stats: Default::default(),
            resident: None,
        };
        let cases: [&[Range<u64>]; 3] = [
            &[0..8, 16..24, 50_000..50_008, 99_992..100_000],
            &[90_000..90_010, 5..9, 5..7, 7..7, 40_000..41_000, 0..3],
            &[],
        ];
        for ranges in cases {
            let want: Vec<u8> = ranges
                .iter()
                .flat_map(|r| data[r.start as usize..r.end as usize].iter().copied())
                .collect();
            let got = io.read_concat(ranges).await.unwrap();
            assert_eq!(got.as_slice(), &want[..], "{ranges:?}");
            let parts = io.read_ranges(ranges).await.unwrap();
            assert_eq!(parts.concat(), want, "{ranges:?}");
        }
        assert!(io.read_concat(&[99_999..100_001]).await.is_err());
    }
}
