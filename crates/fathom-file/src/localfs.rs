//! Local disk with small reads done in place, and Lance files mapped.
//!
//! object_store's `LocalFileSystem` hands every read to tokio's blocking
//! pool: a thread hand-off or two per request, which costs far more than
//! reading a few KiB from the page cache. An index lookup or a take is a
//! handful of small reads, so that hand-off dominated point queries. This
//! wrapper reads ranges of at most [`INLINE_READ_BYTES`] in total on the
//! calling thread with positioned reads, and lists small directories in
//! place (the latest-version check of every query); everything else goes
//! to `LocalFileSystem`, whose error conventions the in-place paths keep.
//!
//! Lance data and index files (`*.lance`) are memory-mapped instead: a
//! read is then a slice of the page cache, with no copy and no system
//! call, and a take of scattered rows touches only the cache lines it
//! needs rather than copying whole coalesced ranges. These files are
//! immutable once written (their names are unique); each read still checks
//! the file's inode, size and modification time and maps it again if any
//! changed, so a file replaced or removed is seen as such. (A foreign
//! process truncating a file in place while it is being read would fault
//! the reader, as with any memory-mapped reader.)

use std::fmt;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use lru::LruCache;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};

/// Reads up to this many bytes (all ranges of one request) inline.
pub const INLINE_READ_BYTES: u64 = 1024 * 1024;

/// Most mappings kept for reuse, least recently used dropped first (a
/// mapping holds no file descriptor; the kernel allows about 65,000 per
/// process, and bytes handed out keep theirs alive).
const MAX_MAPPED: usize = 4096;

/// Files smaller than this (less than a page) are read in place, not
/// mapped. Larger ones are mapped however small: a file read again (an
/// overlay of a thousand cells, re-read by every query that re-evaluates
/// its rows) then costs a lookup instead of an open, a read and a close
/// each time (measured: the overlaid range query of `sql_updates` 0.86 ->
/// 0.73 ms in its run stage). [`MAX_MAPPED`] bounds the mappings kept.
pub const MAP_MIN_BYTES: u64 = 4 * 1024;

#[derive(Debug)]
struct Mapped {
    ino: u64,
    len: u64,
    mtime: Option<std::time::SystemTime>,
    map: Arc<memmap2::Mmap>,
}

/// `LocalFileSystem` with in-place small reads and mapped Lance files.
#[derive(Debug)]
pub struct LocalStore {
    inner: LocalFileSystem,
    maps: Arc<Mutex<LruCache<PathBuf, Mapped>>>,
}

impl Default for LocalStore {
    fn default() -> Self {
        LocalStore {
            inner: LocalFileSystem::default(),
            maps: Arc::new(Mutex::new(LruCache::new(
                std::num::NonZeroUsize::new(MAX_MAPPED).unwrap(),
            ))),
        }
    }
}

/// A slice of a mapping, owned by the `Bytes` handed out.
struct MapSlice {
    map: Arc<memmap2::Mmap>,
    range: Range<usize>,
}

impl AsRef<[u8]> for MapSlice {
    fn as_ref(&self) -> &[u8] {
        &self.map[self.range.clone()]
    }
}

impl LocalStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// A store whose paths are relative to the directory `root` (as
    /// `LocalFileSystem::new_with_prefix`).
    pub fn new_with_prefix(root: impl AsRef<std::path::Path>) -> Result<Self> {
        Ok(LocalStore {
            inner: LocalFileSystem::new_with_prefix(root)?,
            ..Self::default()
        })
    }

    /// The current mapping of `path` (`None` for a file smaller than
    /// [`MAP_MIN_BYTES`], read in place instead).
    fn mapping(&self, path: &std::path::Path) -> Result<Option<Arc<memmap2::Mmap>>> {
        let meta = match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) => {
                // Gone: let its pages go too.
                self.maps.lock().unwrap().pop(path);
                return Err(io_error(e, path));
            }
        };
        let (ino, len, mtime) = (
            std::os::unix::fs::MetadataExt::ino(&meta),
            meta.len(),
            meta.modified().ok(),
        );
        if len < MAP_MIN_BYTES {
            return Ok(None);
        }
        if let Some(m) = self.maps.lock().unwrap().get(path)
            && m.ino == ino
            && m.len == len
            && m.mtime == mtime
        {
            return Ok(Some(m.map.clone()));
        }
        let file = std::fs::File::open(path).map_err(|e| io_error(e, path))?;
        // SAFETY: Lance data and index files are never modified once
        // written; replacement or removal gives a new inode (checked above).
        let map = Arc::new(unsafe { memmap2::Mmap::map(&file) }.map_err(|e| io_error(e, path))?);
        if map.len() as u64 != len {
            return Err(io_error(
                std::io::Error::other("the file changed while it was being mapped"),
                path,
            ));
        }
        self.maps.lock().unwrap().put(
            path.to_path_buf(),
            Mapped {
                ino,
                len,
                mtime,
                map: map.clone(),
            },
        );
        Ok(Some(map))
    }
}

fn past_end(path: &std::path::Path, r: &Range<u64>) -> object_store::Error {
    object_store::Error::Generic {
        store: "LocalStore",
        source: format!(
            "{}: range {}..{} is past the end of the file",
            path.display(),
            r.start,
            r.end
        )
        .into(),
    }
}

impl fmt::Display for LocalStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LocalStore({})", self.inner)
    }
}

fn io_error(e: std::io::Error, path: &std::path::Path) -> object_store::Error {
    if e.kind() == std::io::ErrorKind::NotFound {
        object_store::Error::NotFound {
            path: path.display().to_string(),
            source: Box::new(e),
        }
    } else {
        object_store::Error::Generic {
            store: "LocalStore",
            source: Box::new(std::io::Error::new(
                e.kind(),
                format!("{}: {e}", path.display()),
            )),
        }
    }
}

fn read_inline(path: &std::path::Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
    let file = std::fs::File::open(path).map_err(|e| io_error(e, path))?;
    ranges
        .iter()
        .map(|r| {
            let mut buf = vec![0u8; (r.end - r.start) as usize];
            file.read_exact_at(&mut buf, r.start).map_err(|e| {
                if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    past_end(path, r)
                } else {
                    io_error(e, path)
                }
            })?;
            Ok(Bytes::from(buf))
        })
        .collect()
}

/// One directory level, as `LocalFileSystem::list_with_delimiter` gives it
/// (symlinks followed; multipart staging files `name#123` skipped); `None`
/// when an entry needs its slower, more general handling.
fn list_inline(prefix: &Path, dir: &std::path::Path) -> Option<Result<ListResult>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Some(Ok(ListResult {
                common_prefixes: vec![],
                objects: vec![],
            }));
        }
        Err(_) => return None,
    };
    let mut common_prefixes = std::collections::BTreeSet::new();
    let mut objects = Vec::new();
    for entry in entries {
        let entry = entry.ok()?;
        let name = entry.file_name().into_string().ok()?;
        let part = object_store::path::PathPart::parse(&name).ok()?;
        let location = prefix.clone().join(part);
        let meta = match std::fs::metadata(entry.path()) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(_) => return None,
        };
        if meta.is_dir() {
            common_prefixes.insert(location);
            continue;
        }
        if name
            .split_once('#')
            .is_some_and(|(_, s)| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        {
            continue;
        }
        let modified = meta.modified().ok()?;
        let micros = modified
            .duration_since(std::time::SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_micros();
        let inode = std::os::unix::fs::MetadataExt::ino(&meta);
        objects.push(ObjectMeta {
            location,
            last_modified: modified.into(),
            size: meta.len(),
            e_tag: Some(format!("{inode:x}-{micros:x}-{:x}", meta.len())),
            version: None,
        });
    }
    Some(Ok(ListResult {
        common_prefixes: common_prefixes.into_iter().collect(),
        objects,
    }))
}

impl LocalStore {
    /// HEAD as `LocalFileSystem` answers it (same metadata and e-tag), by
    /// one `stat` on the calling thread.
    fn head_inline(&self, location: &Path) -> Result<GetResult> {
        let path = self.inner.path_to_filesystem(location)?;
        let not_found = |source: std::io::Error| object_store::Error::NotFound {
            path: path.to_string_lossy().to_string(),
            source: Box::new(source),
        };
        let md = match std::fs::metadata(&path) {
            Ok(md) if md.is_dir() => {
                return Err(not_found(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "is a directory",
                )));
            }
            Ok(md) => md,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(not_found(e)),
            Err(e) => {
                return Err(object_store::Error::Generic {
                    store: "LocalStore",
                    source: Box::new(e),
                });
            }
        };
        let modified = md.modified().unwrap_or(std::time::SystemTime::UNIX_EPOCH);
        let micros = modified
            .duration_since(std::time::SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_micros();
        let inode = std::os::unix::fs::MetadataExt::ino(&md);
        let size = md.len();
        let meta = ObjectMeta {
            location: location.clone(),
            last_modified: chrono::DateTime::<chrono::Utc>::from(modified),
            size,
            e_tag: Some(format!("{inode:x}-{micros:x}-{size:x}")),
            version: None,
        };
        Ok(GetResult {
            payload: object_store::GetResultPayload::Stream(futures::stream::empty().boxed()),
            meta,
            range: 0..size,
            attributes: Default::default(),
        })
    }
}

#[async_trait]
impl ObjectStore for LocalStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        // A plain HEAD (the check for a newer version before every query)
        // is one stat, done here rather than on a blocking thread.
        let plain = options.head
            && options.range.is_none()
            && options.version.is_none()
            && options.if_match.is_none()
            && options.if_none_match.is_none()
            && options.if_modified_since.is_none()
            && options.if_unmodified_since.is_none();
        if plain {
            return self.head_inline(location);
        }
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        if ranges.iter().any(|r| r.start > r.end) {
            return self.inner.get_ranges(location, ranges).await;
        }
        if location.extension() == Some("lance") {
            let path = self.inner.path_to_filesystem(location)?;
            let Some(map) = self.mapping(&path)? else {
                return read_inline(&path, ranges);
            };
            return ranges
                .iter()
                .map(|r| {
                    if r.end > map.len() as u64 {
                        return Err(past_end(&path, r));
                    }
                    Ok(Bytes::from_owner(MapSlice {
                        map: map.clone(),
                        range: r.start as usize..r.end as usize,
                    }))
                })
                .collect();
        }
        let total: u64 = ranges.iter().map(|r| r.end.saturating_sub(r.start)).sum();
        if total > INLINE_READ_BYTES {
            return self.inner.get_ranges(location, ranges).await;
        }
        let path = self.inner.path_to_filesystem(location)?;
        read_inline(&path, ranges)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        // Unmap what is deleted, so its disk space is freed.
        let maps = self.maps.clone();
        let inner = self.inner.clone();
        let locations = locations
            .map(move |p| {
                if let Ok(p) = &p
                    && let Ok(fs) = inner.path_to_filesystem(p)
                {
                    maps.lock().unwrap().pop(&fs);
                }
                p
            })
            .boxed();
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let prefix = prefix.cloned().unwrap_or_default();
        let dir = self.inner.path_to_filesystem(&prefix)?;
        match list_inline(&prefix, &dir) {
            Some(r) => r,
            // Anything unusual (odd names, races): LocalFileSystem's own way.
            None => self.inner.list_with_delimiter(Some(&prefix)).await,
        }
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;

    #[tokio::test]
    async fn head_matches_local_file_system() {
        let dir = tempfile::tempdir().unwrap();
        let root = Path::from_absolute_path(dir.path()).unwrap();
        let store = LocalStore::new();
        let p = root.clone().join("_versions/1.manifest");
        store.put(&p, vec![1u8; 33].into()).await.unwrap();
        let ours = store.head(&p).await.unwrap();
        let theirs = store.inner.head(&p).await.unwrap();
        assert_eq!(ours, theirs);
        for missing in [
            root.clone().join("_versions/2.manifest"),
            root.clone().join("_versions"),
        ] {
            assert!(matches!(
                store.head(&missing).await,
                Err(object_store::Error::NotFound { .. })
            ));
            assert!(matches!(
                store.inner.head(&missing).await,
                Err(object_store::Error::NotFound { .. })
            ));
        }
    }

    #[tokio::test]
    async fn reads_match_local_file_system() {
        let dir = tempfile::tempdir().unwrap();
        let root = Path::from_absolute_path(dir.path()).unwrap();
        let store = LocalStore::new();
        let p = root.clone().join("f.bin");
        let data: Vec<u8> = (0..1_500_000u32).map(|i| (i % 251) as u8).collect();
        store.put(&p, data.clone().into()).await.unwrap();
        let ranges = [0..10u64, 5..17, 100_000..100_001, 199_990..200_000, 7..7];
        let got = store.get_ranges(&p, &ranges).await.unwrap();
        for (r, b) in ranges.iter().zip(&got) {
            assert_eq!(&b[..], &data[r.start as usize..r.end as usize]);
        }
        // Large requests take LocalFileSystem's path and agree.
        let big = store.get_ranges(&p, &[0..1_500_000]).await.unwrap();
        assert_eq!(&big[0][..], &data[..]);
        assert!(store.get_ranges(&p, &[1_499_999..1_500_001]).await.is_err());
        // Lance files are mapped: same bytes, and a replaced file is seen.
        let lp = root.clone().join("f.lance");
        store.put(&lp, data.clone().into()).await.unwrap();
        let got = store.get_ranges(&lp, &ranges).await.unwrap();
        for (r, b) in ranges.iter().zip(&got) {
            assert_eq!(&b[..], &data[r.start as usize..r.end as usize]);
        }
        assert!(
            store
                .get_ranges(&lp, &[1_499_999..1_500_001])
                .await
                .is_err()
        );
        store.put(&lp, vec![7u8; 10].into()).await.unwrap();
        let again = store.get_ranges(&lp, &[0..10]).await.unwrap();
        assert_eq!(&again[0][..], &[7u8; 10]);
        // A small file is read in place, not mapped, with the same errors.
        let path = store.inner.path_to_filesystem(&lp).unwrap();
        assert!(store.mapping(&path).unwrap().is_none());
        assert!(store.get_ranges(&lp, &[5..11]).await.is_err());
        // Bytes handed out earlier stay valid.
        assert_eq!(&got[0][..], &data[0..10]);
        store.delete(&lp).await.unwrap();
        assert!(store.maps.lock().unwrap().is_empty(), "unmapped on delete");
        assert!(matches!(
            store.get_ranges(&lp, &[0..1]).await,
            Err(object_store::Error::NotFound { .. })
        ));
        // Listing agrees with LocalFileSystem's.
        store
            .put(&root.clone().join("d/x"), vec![1u8].into())
            .await
            .unwrap();
        let ours = store.list_with_delimiter(Some(&root)).await.unwrap();
        let theirs = LocalFileSystem::new()
            .list_with_delimiter(Some(&root))
            .await
            .unwrap();
        assert_eq!(ours.common_prefixes, theirs.common_prefixes);
        assert_eq!(ours.objects, theirs.objects);
        let missing = root.clone().join("nope.bin");
        assert!(matches!(
            store.get_ranges(&missing, &[0..1]).await,
            Err(object_store::Error::NotFound { .. })
        ));
    }
}
