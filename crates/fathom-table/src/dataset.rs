//! A dataset: one version of a table on an object store, and the
//! operations that read it or commit new versions.

use fathom_file::FileVersion;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use arrow_array::{BooleanArray, RecordBatch};
use arrow_schema::SchemaRef;
use fathom_file::LanceSchema;
use futures::stream::{self, TryStreamExt};
use object_store::ObjectStore;
use object_store::path::Path;
use roaring::RoaringBitmap;

use crate::address::RowAddress;
use crate::commit::{CommitTarget, commit};
use crate::deletion::write_deletions;
use crate::error::{Error, Result};
use crate::format::{Fragment, Manifest, ManifestFacts, flags};
use crate::manifest_io::read_manifest;
use crate::naming::{ManifestNaming, manifest_path};
use crate::scan::{FragmentReader, ReadCache};
use crate::scanner::Scanner;
use crate::store::store_for_uri;
use crate::transaction::Operation;
use crate::versions::list_versions;
use crate::write::{WriteMode, WriteParams, write_fragments};

/// One version of a dataset. Cheap to clone.
#[derive(Clone)]
pub struct Dataset {
    pub(crate) store: Arc<dyn ObjectStore>,
    pub(crate) root: Path,
    pub(crate) uri: String,
    pub(crate) manifest: Arc<Manifest>,
    pub(crate) naming: ManifestNaming,
    pub(crate) schema: SchemaRef,
    pub(crate) cache: Arc<ReadCache>,
    pub(crate) row_id_index: Arc<OnceLock<HashMap<u64, u64>>>,
    /// Fragment id -> position in the manifest, built once per version
    /// and shared by every clone (and so by every node of a plan).
    fragment_positions: Arc<OnceLock<HashMap<u64, usize>>>,
    /// Facts of the manifest's fragments, found once per version.
    facts: Arc<OnceLock<ManifestFacts>>,
    /// Field ids of the schema's fields, in order.
    field_ids: Arc<[i32]>,
    /// Fragment readers opened for this version, by fragment id and
    /// whether they carry row ids (see `fragment_reader`).
    readers: Arc<std::sync::Mutex<OpenReaders>>,
}

/// Open fragment readers by fragment id and whether they carry row ids.
type OpenReaders = HashMap<(u64, bool), Arc<FragmentReader>>;

/// Most fragment readers a version keeps open for reuse (the map is
/// emptied when it would hold more).
const MAX_CACHED_READERS: usize = 4096;

impl std::fmt::Debug for Dataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dataset")
            .field("uri", &self.uri)
            .field("version", &self.manifest.version)
            .finish()
    }
}

fn check_flags(m: &Manifest, uri: &str, writing: bool) -> Result<()> {
    let unknown = m.reader_feature_flags & !flags::READ_SUPPORTED;
    if unknown != 0 {
        return Err(Error::Unsupported {
            uri: uri.to_string(),
            message: format!(
                "it needs reader features this library lacks: {}",
                flags::describe(unknown)
            ),
        });
    }
    if writing {
        let unknown = m.writer_feature_flags & !flags::WRITE_SUPPORTED;
        if unknown != 0 {
            return Err(Error::Unsupported {
                uri: uri.to_string(),
                message: format!(
                    "writing needs features this library lacks: {}",
                    flags::describe(unknown)
                ),
            });
        }
    }
    if !READABLE_VERSIONS.contains(&m.data_format.1.as_str()) {
        return Err(Error::Unsupported {
            uri: uri.to_string(),
            message: format!(
                "data storage version {} (2.0, 2.1 and 2.2 are implemented)",
                m.data_format.1
            ),
        });
    }
    Ok(())
}

/// Data storage versions whose files this library reads.
const READABLE_VERSIONS: [&str; 3] = ["2.0", "2.1", "2.2"];

/// `params` writing data files of the dataset's own version (new files
/// must match it); a version this library cannot write is refused.
pub(crate) fn params_for(m: &Manifest, uri: &str, mut params: WriteParams) -> Result<WriteParams> {
    match FileVersion::parse(&m.data_format.1) {
        Some(v) => {
            params.file.version = v;
            Ok(params)
        }
        None => Err(Error::Unsupported {
            uri: uri.to_string(),
            message: format!(
                "adding rows to a dataset of data storage version {} (2.0, 2.1 and 2.2 are written)",
                m.data_format.1
            ),
        }),
    }
}

impl Dataset {
    /// Opens the latest version of the dataset at `uri`.
    pub async fn open(uri: &str) -> Result<Self> {
        let (store, root) = store_for_uri(uri)?;
        Self::open_with_store(store, root, uri).await
    }

    /// Opens the latest version in `store` under `root`.
    pub async fn open_with_store(
        store: Arc<dyn ObjectStore>,
        root: Path,
        uri: &str,
    ) -> Result<Self> {
        let (versions, scheme) = list_versions(store.as_ref(), &root, uri).await?;
        let Some(&latest) = versions.last() else {
            return Err(Error::NotFound {
                uri: uri.to_string(),
                message: "no _versions/*.manifest".into(),
            });
        };
        Self::load(
            store,
            root,
            uri,
            latest,
            scheme.unwrap_or(ManifestNaming::V2),
            Arc::new(ReadCache::default()),
        )
        .await
    }

    pub(crate) async fn load(
        store: Arc<dyn ObjectStore>,
        root: Path,
        uri: &str,
        version: u64,
        naming: ManifestNaming,
        cache: Arc<ReadCache>,
    ) -> Result<Self> {
        let path = manifest_path(&root, version, naming);
        let manifest = match read_manifest(store.as_ref(), &path).await {
            Err(Error::Io {
                source: object_store::Error::NotFound { .. },
                ..
            }) => {
                return Err(Error::VersionNotFound {
                    uri: uri.to_string(),
                    version,
                });
            }
            r => r?,
        };
        Self::from_manifest(store, root, uri, manifest, naming, cache)
    }

    pub(crate) fn from_manifest(
        store: Arc<dyn ObjectStore>,
        root: Path,
        uri: &str,
        manifest: Manifest,
        naming: ManifestNaming,
        cache: Arc<ReadCache>,
    ) -> Result<Self> {
        check_flags(&manifest, uri, false)?;
        let schema = Arc::new(manifest.schema.to_arrow()?);
        Ok(Dataset {
            store,
            root,
            uri: uri.to_string(),
            naming,
            schema,
            cache,
            row_id_index: Arc::new(OnceLock::new()),
            readers: Arc::default(),
            fragment_positions: Arc::new(OnceLock::new()),
            facts: Arc::new(OnceLock::new()),
            field_ids: manifest.schema.fields.iter().map(|f| f.id).collect(),
            manifest: Arc::new(manifest),
        })
    }

    /// Creates a dataset (error if one exists), or appends / overwrites.
    pub async fn write(
        uri: &str,
        batches: &[RecordBatch],
        mode: WriteMode,
        params: WriteParams,
    ) -> Result<Self> {
        let (store, root) = store_for_uri(uri)?;
        Self::write_with_store(store, root, uri, batches, mode, params).await
    }

    pub async fn write_with_store(
        store: Arc<dyn ObjectStore>,
        root: Path,
        uri: &str,
        batches: &[RecordBatch],
        mode: WriteMode,
        params: WriteParams,
    ) -> Result<Self> {
        let first = batches.first().ok_or_else(|| {
            Error::invalid("writing a dataset needs at least one batch (for its schema)")
        })?;
        let schema = first.schema();
        let stream = stream::iter(batches.iter().cloned().map(Ok));
        Self::write_stream_with_store(store, root, uri, schema, stream, mode, params, |_| {}).await
    }

    /// Writes a stream of batches with bounded memory; `progress` is told
    /// the rows written so far after every batch.
    #[allow(clippy::too_many_arguments)]
    pub async fn write_stream(
        uri: &str,
        schema: SchemaRef,
        batches: impl futures::Stream<Item = Result<RecordBatch>>,
        mode: WriteMode,
        params: WriteParams,
        progress: impl FnMut(u64),
    ) -> Result<Self> {
        let (store, root) = store_for_uri(uri)?;
        Self::write_stream_with_store(store, root, uri, schema, batches, mode, params, progress)
            .await
    }

    #[allow(clippy::too_many_arguments)]
    pub async fn write_stream_with_store(
        store: Arc<dyn ObjectStore>,
        root: Path,
        uri: &str,
        schema: SchemaRef,
        batches: impl futures::Stream<Item = Result<RecordBatch>>,
        mode: WriteMode,
        params: WriteParams,
        mut progress: impl FnMut(u64),
    ) -> Result<Self> {
        let existing = match Self::open_with_store(store.clone(), root.clone(), uri).await {
            Ok(d) => Some(d),
            Err(Error::NotFound { .. }) => None,
            Err(e) => return Err(e),
        };
        if mode == WriteMode::Create && existing.is_some() {
            return Err(Error::AlreadyExists {
                uri: uri.to_string(),
            });
        }
        let append = mode == WriteMode::Append && existing.is_some();
        let params = match &existing {
            Some(d) => params_for(&d.manifest, uri, params)?,
            None => params,
        };
        let lance_schema = match (&existing, append) {
            (Some(d), true) => d.manifest.schema.clone(),
            _ => LanceSchema::from_arrow(&schema)?,
        };
        let mut writer = crate::write::FragmentWriter::new(
            store.clone(),
            root.clone(),
            lance_schema.clone(),
            params.clone(),
        )?;
        futures::pin_mut!(batches);
        while let Some(b) = batches.try_next().await? {
            writer.write(&b).await?;
            progress(writer.rows_written());
        }
        let fragments = writer.finish().await?;
        if let (Some(d), true) = (&existing, append) {
            if fragments.is_empty() {
                return Ok(d.clone());
            }
            return d.commit(Operation::Append { fragments }).await;
        }
        let op = Operation::Overwrite {
            fragments,
            schema: lance_schema.clone(),
            config_upsert: HashMap::new(),
        };
        if let Some(d) = existing {
            return d.commit(op).await;
        }
        let mut empty = Manifest {
            schema: lance_schema,
            fragments: vec![],
            version: 0,
            writer: None,
            timestamp: SystemTime::now(),
            tag: String::new(),
            reader_feature_flags: 0,
            writer_feature_flags: 0,
            max_fragment_id: None,
            transaction_file: None,
            next_row_id: 0,
            data_format: ("lance".into(), {
                let (major, minor) = params.file.version.numbers();
                format!("{major}.{minor}")
            }),
            config: HashMap::new(),
            table_metadata: HashMap::new(),
            indices: vec![],
            base_paths: vec![],
            branch: None,
            frag_reuse: None,
        };
        if params.enable_stable_row_ids {
            empty.reader_feature_flags |= flags::STABLE_ROW_IDS;
        }
        let target = CommitTarget {
            store: store.as_ref(),
            root: &root,
            uri,
            naming: ManifestNaming::V2,
        };
        let m = commit(&target, &empty, op, None)
            .await
            .map_err(|e| match e {
                Error::Conflict { .. } => Error::AlreadyExists {
                    uri: uri.to_string(),
                },
                e => e,
            })?;
        Self::from_manifest(
            store,
            root,
            uri,
            m,
            ManifestNaming::V2,
            Arc::new(ReadCache::default()),
        )
    }

    /// Commits an operation read from this version; returns the new version.
    pub async fn commit(&self, op: Operation) -> Result<Self> {
        check_flags(&self.manifest, &self.uri, true)?;
        // New data files must be of the dataset's version.
        let added: Vec<&Fragment> = match &op {
            Operation::Append { fragments } => fragments.iter().collect(),
            Operation::Update { new, .. } => new.iter().collect(),
            Operation::Overwrite { fragments, .. } => fragments.iter().collect(),
            Operation::Rewrite { groups } => groups.iter().flat_map(|g| &g.new).collect(),
            _ => vec![],
        };
        if let Some(f) = added.iter().flat_map(|f| &f.files).find(|f| {
            format!("{}.{}", f.file_major_version, f.file_minor_version)
                != self.manifest.data_format.1
        }) {
            return Err(Error::Unsupported {
                uri: self.uri.clone(),
                message: format!(
                    "data file {} is format {}.{}; the dataset's data storage version is {}",
                    f.path, f.file_major_version, f.file_minor_version, self.manifest.data_format.1
                ),
            });
        }
        let target = self.target();
        let m = commit(&target, &self.manifest, op, None).await?;
        self.with_manifest(m)
    }

    pub(crate) fn target(&self) -> CommitTarget<'_> {
        CommitTarget {
            store: self.store.as_ref(),
            root: &self.root,
            uri: &self.uri,
            naming: self.naming,
        }
    }

    pub(crate) fn with_manifest(&self, m: Manifest) -> Result<Self> {
        Self::from_manifest(
            self.store.clone(),
            self.root.clone(),
            &self.uri,
            m,
            self.naming,
            self.cache.clone(),
        )
    }

    /// Appends rows (new fragments).
    pub async fn append(&self, batches: &[RecordBatch], params: &WriteParams) -> Result<Self> {
        if batches.iter().all(|b| b.num_rows() == 0) {
            return Ok(self.clone());
        }
        let params = params_for(&self.manifest, &self.uri, params.clone())?;
        let fragments = write_fragments(
            &self.store,
            &self.root,
            &self.manifest.schema,
            batches,
            &params,
        )
        .await?;
        self.commit(Operation::Append { fragments }).await
    }

    /// Replaces the table's schema and rows.
    pub async fn overwrite(&self, batches: &[RecordBatch], params: &WriteParams) -> Result<Self> {
        let first = batches
            .first()
            .ok_or_else(|| Error::invalid("overwrite needs at least one batch (for its schema)"))?;
        let schema = LanceSchema::from_arrow(&first.schema())?;
        let params = params_for(&self.manifest, &self.uri, params.clone())?;
        let fragments = write_fragments(&self.store, &self.root, &schema, batches, &params).await?;
        self.commit(Operation::Overwrite {
            fragments,
            schema,
            config_upsert: HashMap::new(),
        })
        .await
    }

    /// Writes deletion files for `addresses`; returns the fragments updated,
    /// those now fully deleted, and the offsets newly deleted per fragment.
    async fn prepare_deletes(&self, addresses: &[u64]) -> Result<PreparedDelete> {
        let mut by_frag: HashMap<u64, RoaringBitmap> = HashMap::new();
        for &a in addresses {
            let a = RowAddress::from_u64(a);
            by_frag
                .entry(a.fragment().as_u64())
                .or_default()
                .insert(a.offset());
        }
        let mut out = PreparedDelete::default();
        let mut ids: Vec<u64> = by_frag.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let offsets = &by_frag[&id];
            let frag = self.fragment(id).ok_or_else(|| {
                Error::invalid(format!(
                    "row address in fragment {id}, which is not in version {}",
                    self.version()
                ))
            })?;
            if let Some(max) = offsets.max()
                && max as u64 >= frag.physical_rows
            {
                return Err(Error::invalid(format!(
                    "row offset {max} beyond the {} rows of fragment {id}",
                    frag.physical_rows
                )));
            }
            let existing = self
                .cache
                .deletions(self.store.as_ref(), &self.root, frag)
                .await?;
            let mut all = existing.as_deref().cloned().unwrap_or_default();
            let before = all.len();
            all |= offsets;
            if all.len() == before {
                continue;
            }
            let mut fresh = offsets.clone();
            if let Some(e) = &existing {
                fresh -= e.as_ref();
            }
            out.count += fresh.len();
            out.new_deletions.insert(id, fresh);
            if all.len() >= frag.physical_rows {
                out.deleted_ids.push(id);
            } else {
                let mut f = frag.clone();
                f.deletion_file = Some(
                    write_deletions(self.store.as_ref(), &self.root, id, self.version(), &all)
                        .await?,
                );
                out.updated.push(f);
            }
        }
        Ok(out)
    }

    /// Deletes rows by row address. Addresses of rows already deleted are ignored.
    pub async fn delete_rows(&self, addresses: &[u64]) -> Result<Self> {
        Ok(self.delete_rows_counted(addresses).await?.0)
    }

    /// As [`Dataset::delete_rows`], also returning how many rows were deleted.
    pub async fn delete_rows_counted(&self, addresses: &[u64]) -> Result<(Self, u64)> {
        let p = self.prepare_deletes(addresses).await?;
        if p.updated.is_empty() && p.deleted_ids.is_empty() {
            return Ok((self.clone(), 0));
        }
        let ds = self
            .commit(Operation::Delete {
                updated: p.updated,
                deleted_ids: p.deleted_ids,
                predicate: String::new(),
                new_deletions: p.new_deletions,
            })
            .await?;
        Ok((ds, p.count))
    }

    /// Replaces rows in one commit: the rows at `addresses` are deleted and
    /// `new_fragments` (their new values, written with a `FragmentWriter`)
    /// are added.
    pub async fn update_rows(
        &self,
        addresses: &[u64],
        new_fragments: Vec<Fragment>,
    ) -> Result<Self> {
        let p = self.prepare_deletes(addresses).await?;
        self.commit(Operation::Update {
            removed_ids: p.deleted_ids,
            updated: p.updated,
            new: new_fragments,
            fields_modified: vec![],
            mode: crate::transaction::UpdateMode::RewriteRows,
        })
        .await
    }

    /// A writer for new fragments of this table.
    pub fn fragment_writer(&self, params: WriteParams) -> Result<crate::write::FragmentWriter> {
        let params = params_for(&self.manifest, &self.uri, params)?;
        crate::write::FragmentWriter::new(
            self.store.clone(),
            self.root.clone(),
            self.manifest.schema.clone(),
            params,
        )
    }

    /// Deletes the rows for which `predicate` (evaluated by the caller on
    /// batches of `columns`) is true.
    pub async fn delete_where<F>(&self, columns: &[&str], mut predicate: F) -> Result<Self>
    where
        F: FnMut(&RecordBatch) -> Result<BooleanArray>,
    {
        let mut names: Vec<&str> = columns.to_vec();
        names.push(crate::scan::ROW_ADDR);
        let mut stream = self.scan().project(&names)?.try_into_stream().await?;
        let mut addrs = Vec::new();
        while let Some(batch) = stream.try_next().await? {
            let mask = predicate(&batch)?;
            let a = batch.column(batch.num_columns() - 1);
            let a = a
                .as_any()
                .downcast_ref::<arrow_array::UInt64Array>()
                .unwrap();
            for i in 0..batch.num_rows() {
                if arrow_array::Array::is_valid(&mask, i) && mask.value(i) {
                    addrs.push(a.value(i));
                }
            }
        }
        self.delete_rows(&addrs).await
    }

    pub fn uri(&self) -> &str {
        &self.uri
    }
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }
    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }
    pub fn version(&self) -> u64 {
        self.manifest.version
    }
    /// The Arrow schema (without virtual columns).
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }
    pub fn fragments(&self) -> &[Fragment] {
        &self.manifest.fragments
    }
    /// The fragment with id `id`, if it is in this version: a lookup in
    /// a map built once per version (shared by clones), not a search.
    pub fn fragment(&self, id: u64) -> Option<&Fragment> {
        let positions = self.fragment_positions.get_or_init(|| {
            self.manifest
                .fragments
                .iter()
                .enumerate()
                .map(|(i, f)| (f.id, i))
                .collect()
        });
        positions.get(&id).map(|&i| &self.manifest.fragments[i])
    }
    /// The version's fragment ids, overlaid fragments and live rows,
    /// found in one walk of the manifest and kept with the version.
    pub fn facts(&self) -> &ManifestFacts {
        self.facts.get_or_init(|| ManifestFacts::of(&self.manifest))
    }
    /// The version's fragments that have data overlays.
    pub fn overlaid(&self) -> impl Iterator<Item = &Fragment> {
        self.facts().overlaid(&self.manifest)
    }
    /// The rows of segment `meta` (an index entry of this version) that
    /// overlays changed since its build, found once per version (see
    /// [`crate::overlay::overlaid_rows`]).
    pub fn overlaid_rows(&self, meta: &crate::format::IndexMetadata) -> Arc<crate::RowSet> {
        self.facts().overlaid_rows(&self.manifest, meta)
    }
    /// Exact row count from metadata alone.
    pub fn count_rows(&self) -> u64 {
        self.facts().live_rows
    }

    /// A scan builder over this version.
    pub fn scan(&self) -> Scanner {
        Scanner::new(self.clone())
    }

    /// The deletion vector of a fragment (cached), if it has one.
    pub async fn deleted_rows(&self, fragment: &Fragment) -> Result<Option<Arc<RoaringBitmap>>> {
        self.cache
            .deletions(self.store.as_ref(), &self.root, fragment)
            .await
    }

    /// Opens a fragment for reading. A fragment of this version (the
    /// manifest's own entry) is opened once and its reader shared by
    /// every later call on any clone of this `Dataset`: its files,
    /// deletions, overlays and row ids are fixed for the version, and
    /// opening (overlays decoded, coverage united, files looked up) would
    /// otherwise be paid again by every query and take.
    pub async fn fragment_reader(
        &self,
        fragment: &Fragment,
        need_row_ids: bool,
    ) -> Result<Arc<FragmentReader>> {
        let need_row_ids = need_row_ids && self.manifest.uses_stable_row_ids();
        let key = (fragment.id, need_row_ids);
        let own = self
            .fragment(fragment.id)
            .is_some_and(|f| std::ptr::eq(f, fragment));
        if own && let Some(r) = self.readers.lock().unwrap().get(&key) {
            return Ok(r.clone());
        }
        let r = Arc::new(
            FragmentReader::open(
                &self.store,
                &self.root,
                &self.cache,
                fragment,
                self.schema.clone(),
                self.field_ids.clone(),
                need_row_ids,
            )
            .await?,
        );
        if own {
            let mut g = self.readers.lock().unwrap();
            if g.len() >= MAX_CACHED_READERS {
                g.clear();
            }
            g.insert(key, r.clone());
        }
        Ok(r)
    }
}

#[derive(Default)]
struct PreparedDelete {
    updated: Vec<Fragment>,
    deleted_ids: Vec<u64>,
    new_deletions: HashMap<u64, RoaringBitmap>,
    count: u64,
}
