//! Domain types of the table format, kept apart from the generated
//! protobuf: conversions (`from_pb` / `to_pb`) happen here and nowhere else.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use fathom_file::LanceSchema;
use roaring::RoaringBitmap;

use crate::error::{Error, Result};
use crate::pb;

/// Reader/writer feature flags (Lance's bit values).
pub mod flags {
    pub const DELETION_FILES: u64 = 1;
    pub const STABLE_ROW_IDS: u64 = 2;
    pub const USE_V2_FORMAT_DEPRECATED: u64 = 4;
    pub const TABLE_CONFIG: u64 = 8;
    pub const BASE_PATHS: u64 = 16;
    pub const DISABLE_TRANSACTION_FILE: u64 = 32;
    pub const DATA_OVERLAY_FILES: u64 = 64;
    /// Flags this implementation understands when reading.
    pub const READ_SUPPORTED: u64 = DELETION_FILES
        | STABLE_ROW_IDS
        | USE_V2_FORMAT_DEPRECATED
        | TABLE_CONFIG
        | DISABLE_TRANSACTION_FILE
        | DATA_OVERLAY_FILES;
    /// Flags this implementation understands when writing.
    pub const WRITE_SUPPORTED: u64 = READ_SUPPORTED;

    /// Names of the set bits, for error messages.
    pub fn describe(bits: u64) -> String {
        let names = [
            (1, "deletion files"),
            (2, "stable row ids"),
            (4, "v2 format (deprecated)"),
            (8, "table config"),
            (16, "base paths"),
            (32, "no transaction file"),
            (64, "data overlay files"),
            (128, "covered index metadata"),
            (256, "mixed data file versions"),
        ];
        let mut out: Vec<String> = names
            .iter()
            .filter(|(b, _)| bits & b != 0)
            .map(|(b, n)| format!("{n} ({b})"))
            .collect();
        let known: u64 = names.iter().map(|(b, _)| b).sum();
        if bits & !known != 0 {
            out.push(format!("unknown bits {:#x}", bits & !known));
        }
        out.join(", ")
    }
}

/// One file holding some columns of a fragment.
#[derive(Debug, Clone, PartialEq)]
pub struct DataFile {
    /// Relative to `data/`.
    pub path: String,
    /// Field ids stored, `-2` = tombstoned.
    pub fields: Vec<i32>,
    pub column_indices: Vec<i32>,
    pub file_major_version: u32,
    pub file_minor_version: u32,
    /// 0 = unknown.
    pub file_size_bytes: u64,
    pub base_id: Option<u32>,
}

impl From<&pb::DataFile> for DataFile {
    fn from(d: &pb::DataFile) -> Self {
        DataFile {
            path: d.path.clone(),
            fields: d.fields.clone(),
            column_indices: d.column_indices.clone(),
            file_major_version: d.file_major_version,
            file_minor_version: d.file_minor_version,
            file_size_bytes: d.file_size_bytes,
            base_id: d.base_id,
        }
    }
}

impl From<&DataFile> for pb::DataFile {
    fn from(d: &DataFile) -> Self {
        pb::DataFile {
            path: d.path.clone(),
            fields: d.fields.clone(),
            column_indices: d.column_indices.clone(),
            file_major_version: d.file_major_version,
            file_minor_version: d.file_minor_version,
            file_size_bytes: d.file_size_bytes,
            base_id: d.base_id,
        }
    }
}

/// Which form a deletion file takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeletionFileKind {
    /// Arrow IPC file, one UInt32 column `row_id` (up to 5,000 rows).
    Arrow,
    /// Portable 32-bit roaring bitmap (above 5,000 rows).
    Bitmap,
}

/// The deleted rows of one fragment.
#[derive(Debug, Clone, PartialEq)]
pub struct DeletionFile {
    pub kind: DeletionFileKind,
    pub read_version: u64,
    pub id: u64,
    pub num_deleted_rows: u64,
    pub base_id: Option<u32>,
}

/// Where a fragment's row id sequence is.
#[derive(Debug, Clone, PartialEq)]
pub enum RowIdMeta {
    Inline(Bytes),
    External {
        path: String,
        offset: u64,
        size: u64,
    },
}

/// A horizontal slice of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Fragment {
    pub id: u64,
    pub files: Vec<DataFile>,
    pub deletion_file: Option<DeletionFile>,
    /// Rows including deleted ones.
    pub physical_rows: u64,
    pub row_id_meta: Option<RowIdMeta>,
    /// Row version sequences and overlays, carried through unchanged.
    pub passthrough: FragmentPassthrough,
}

/// Parts of a fragment this layer does not interpret but must preserve.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FragmentPassthrough {
    pub last_updated: Option<pb::data_fragment::LastUpdatedAtVersionSequence>,
    pub created_at: Option<pb::data_fragment::CreatedAtVersionSequence>,
    pub overlays: Vec<pb::DataOverlayFile>,
}

impl Fragment {
    /// Rows not deleted.
    pub fn num_rows(&self) -> u64 {
        self.physical_rows
            - self
                .deletion_file
                .as_ref()
                .map_or(0, |d| d.num_deleted_rows)
    }

    pub(crate) fn from_pb(f: pb::DataFragment) -> Result<Self> {
        use pb::data_fragment::RowIdSequence as R;
        Ok(Fragment {
            id: f.id,
            files: f.files.into_iter().map(|d| DataFile::from(&d)).collect(),
            deletion_file: f.deletion_file.map(|d| DeletionFile {
                kind: if d.file_type == pb::deletion_file::DeletionFileType::Bitmap as i32 {
                    DeletionFileKind::Bitmap
                } else {
                    DeletionFileKind::Arrow
                },
                read_version: d.read_version,
                id: d.id,
                num_deleted_rows: d.num_deleted_rows,
                base_id: d.base_id,
            }),
            physical_rows: f.physical_rows,
            row_id_meta: match f.row_id_sequence {
                Some(R::InlineRowIds(b)) => Some(RowIdMeta::Inline(Bytes::from(b))),
                Some(R::ExternalRowIds(e)) => Some(RowIdMeta::External {
                    path: e.path,
                    offset: e.offset,
                    size: e.size,
                }),
                None => None,
            },
            passthrough: FragmentPassthrough {
                last_updated: f.last_updated_at_version_sequence,
                created_at: f.created_at_version_sequence,
                overlays: f.overlays,
            },
        })
    }

    pub(crate) fn to_pb(&self) -> pb::DataFragment {
        use pb::data_fragment::RowIdSequence as R;
        pb::DataFragment {
            id: self.id,
            files: self.files.iter().map(pb::DataFile::from).collect(),
            deletion_file: self.deletion_file.as_ref().map(|d| pb::DeletionFile {
                file_type: match d.kind {
                    DeletionFileKind::Arrow => {
                        pb::deletion_file::DeletionFileType::ArrowArray as i32
                    }
                    DeletionFileKind::Bitmap => pb::deletion_file::DeletionFileType::Bitmap as i32,
                },
                read_version: d.read_version,
                id: d.id,
                num_deleted_rows: d.num_deleted_rows,
                base_id: d.base_id,
            }),
            physical_rows: self.physical_rows,
            row_id_sequence: self.row_id_meta.as_ref().map(|m| match m {
                RowIdMeta::Inline(b) => R::InlineRowIds(b.to_vec()),
                RowIdMeta::External { path, offset, size } => R::ExternalRowIds(pb::ExternalFile {
                    path: path.clone(),
                    offset: *offset,
                    size: *size,
                }),
            }),
            last_updated_at_version_sequence: self.passthrough.last_updated.clone(),
            created_at_version_sequence: self.passthrough.created_at.clone(),
            overlays: self.passthrough.overlays.clone(),
        }
    }
}

/// A file of an index segment, relative to its directory.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexFile {
    pub path: String,
    pub size_bytes: u64,
}

/// One index segment.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexMetadata {
    pub uuid: uuid::Uuid,
    pub name: String,
    /// Keyed field first, then covering fields.
    pub fields: Vec<i32>,
    pub dataset_version: u64,
    /// `None` when the stored bitmap was empty ("unknown coverage").
    pub fragment_bitmap: Option<RoaringBitmap>,
    pub index_details: Option<prost_types::Any>,
    pub index_version: Option<i32>,
    pub created_at_ms: Option<u64>,
    pub base_id: Option<u32>,
    pub files: Vec<IndexFile>,
    pub covering_fields: Vec<i32>,
}

impl IndexMetadata {
    pub(crate) fn from_pb(m: pb::IndexMetadata) -> Result<Self> {
        let uuid_bytes = m.uuid.map(|u| u.uuid).unwrap_or_default();
        let uuid = uuid::Uuid::from_slice(&uuid_bytes).map_err(|e| {
            Error::corrupt("index section", format!("index '{}' uuid: {e}", m.name))
        })?;
        let fragment_bitmap = if m.fragment_bitmap.is_empty() {
            None
        } else {
            Some(
                RoaringBitmap::deserialize_from(&m.fragment_bitmap[..]).map_err(|e| {
                    Error::corrupt(
                        "index section",
                        format!("index '{}' fragment bitmap: {e}", m.name),
                    )
                })?,
            )
        };
        Ok(IndexMetadata {
            uuid,
            name: m.name,
            fields: m.fields,
            dataset_version: m.dataset_version,
            fragment_bitmap,
            index_details: m.index_details,
            index_version: m.index_version,
            created_at_ms: m.created_at,
            base_id: m.base_id,
            files: m
                .files
                .into_iter()
                .map(|f| IndexFile {
                    path: f.path,
                    size_bytes: f.size_bytes,
                })
                .collect(),
            covering_fields: m.covering_fields,
        })
    }

    pub(crate) fn to_pb(&self) -> pb::IndexMetadata {
        let mut bitmap = Vec::new();
        if let Some(b) = &self.fragment_bitmap {
            b.serialize_into(&mut bitmap)
                .expect("writing to a Vec cannot fail");
        }
        pb::IndexMetadata {
            uuid: Some(pb::Uuid {
                uuid: self.uuid.as_bytes().to_vec(),
            }),
            fields: self.fields.clone(),
            name: self.name.clone(),
            dataset_version: self.dataset_version,
            fragment_bitmap: bitmap,
            index_details: self.index_details.clone(),
            index_version: self.index_version,
            created_at: self.created_at_ms,
            base_id: self.base_id,
            files: self
                .files
                .iter()
                .map(|f| pb::IndexFile {
                    path: f.path.clone(),
                    size_bytes: f.size_bytes,
                })
                .collect(),
            covering_fields: self.covering_fields.clone(),
        }
    }
}

/// A version of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    pub schema: LanceSchema,
    pub fragments: Vec<Fragment>,
    pub version: u64,
    pub writer: Option<(String, String)>,
    pub timestamp: SystemTime,
    pub tag: String,
    pub reader_feature_flags: u64,
    pub writer_feature_flags: u64,
    pub max_fragment_id: Option<u32>,
    /// Relative to `_transactions/`.
    pub transaction_file: Option<String>,
    pub next_row_id: u64,
    /// `(file_format, version)`, e.g. `("lance", "2.0")`.
    pub data_format: (String, String),
    pub config: HashMap<String, String>,
    pub table_metadata: HashMap<String, String>,
    pub indices: Vec<IndexMetadata>,
    pub base_paths: Vec<pb::BasePath>,
    pub branch: Option<String>,
    /// The decoded fragment reuse index (an entry of `indices`), when
    /// there is one; the other entries' coverage is already remapped.
    pub frag_reuse: Option<std::sync::Arc<crate::frag_reuse::FragReuse>>,
}

/// What queries ask of a version's fragments again and again, found in
/// one walk of them: [`crate::Dataset::facts`] keeps it per version (shared
/// by every clone of the dataset, so by every node of a plan and every
/// query while the version is current), so planning costs no walk of
/// 100,000 fragments per query.
#[derive(Debug, Default)]
pub struct ManifestFacts {
    /// The fragments' ids (as Lance row addresses hold them: 32 bits).
    pub ids: RoaringBitmap,
    /// Positions in `fragments` of those with data overlays.
    with_overlays: Vec<usize>,
    /// Rows not deleted.
    pub live_rows: u64,
    /// Per segment of the manifest (by uuid), the rows overlays changed
    /// since its build (`overlaid_rows`), found once per version.
    overlaid_memo: std::sync::Mutex<HashMap<uuid::Uuid, std::sync::Arc<crate::RowSet>>>,
}

impl ManifestFacts {
    pub fn of(m: &Manifest) -> Self {
        let mut ids = RoaringBitmap::new();
        // Fragments are usually numbered 0, 1, 2, ...: insert runs.
        let mut run: Option<(u32, u32)> = None;
        let mut with_overlays = vec![];
        let mut live_rows = 0;
        for (i, f) in m.fragments.iter().enumerate() {
            let id = f.id as u32;
            run = match run {
                Some((s, e)) if e.checked_add(1) == Some(id) => Some((s, id)),
                Some((s, e)) => {
                    ids.insert_range(s..=e);
                    Some((id, id))
                }
                None => Some((id, id)),
            };
            if f.has_overlays() {
                with_overlays.push(i);
            }
            live_rows += f.num_rows();
        }
        if let Some((s, e)) = run {
            ids.insert_range(s..=e);
        }
        ManifestFacts {
            ids,
            with_overlays,
            live_rows,
            overlaid_memo: Default::default(),
        }
    }

    /// The fragments of `m` (the manifest these facts are of) that have
    /// data overlays.
    pub fn overlaid<'a>(&'a self, m: &'a Manifest) -> impl Iterator<Item = &'a Fragment> + 'a {
        self.with_overlays.iter().map(|&i| &m.fragments[i])
    }

    /// [`crate::overlay::overlaid_rows`] of segment `meta` in `m` (the
    /// manifest these facts are of): found once per version for the
    /// manifest's own entries, since planning asks it of every segment a
    /// query uses, and it decodes and unites overlay coverage bitmaps.
    pub fn overlaid_rows(
        &self,
        m: &Manifest,
        meta: &IndexMetadata,
    ) -> std::sync::Arc<crate::RowSet> {
        if self.with_overlays.is_empty() {
            return Default::default();
        }
        let own = m.indices.iter().any(|i| std::ptr::eq(i, meta));
        if own && let Some(r) = self.overlaid_memo.lock().unwrap().get(&meta.uuid) {
            return r.clone();
        }
        let r = std::sync::Arc::new(crate::overlay::overlaid_rows(self.overlaid(m), meta));
        if own {
            self.overlaid_memo
                .lock()
                .unwrap()
                .insert(meta.uuid, r.clone());
        }
        r
    }
}

impl Manifest {
    /// Rows not deleted, from metadata alone.
    pub fn num_rows(&self) -> u64 {
        self.fragments.iter().map(|f| f.num_rows()).sum()
    }

    /// Rows deleted, from metadata alone.
    pub fn num_deleted_rows(&self) -> u64 {
        self.fragments
            .iter()
            .map(|f| f.deletion_file.as_ref().map_or(0, |d| d.num_deleted_rows))
            .sum()
    }

    pub fn uses_stable_row_ids(&self) -> bool {
        self.reader_feature_flags & flags::STABLE_ROW_IDS != 0
    }

    /// The next fragment id never used by this dataset.
    pub fn next_fragment_id(&self) -> u64 {
        let max_listed = self.fragments.iter().map(|f| f.id).max();
        match (self.max_fragment_id, max_listed) {
            (Some(m), Some(l)) => (m as u64).max(l) + 1,
            (Some(m), None) => m as u64 + 1,
            (None, Some(l)) => l + 1,
            (None, None) => 0,
        }
    }

    /// Recomputes the feature flags from the content.
    pub fn update_feature_flags(&mut self) {
        let mut f = self.reader_feature_flags & flags::STABLE_ROW_IDS;
        if self.fragments.iter().any(|f| f.deletion_file.is_some()) {
            f |= flags::DELETION_FILES;
        }
        if self.fragments.iter().any(|f| f.has_overlays()) {
            f |= flags::DATA_OVERLAY_FILES;
        }
        self.reader_feature_flags = f;
        self.writer_feature_flags = f | if self.config.is_empty() {
            0
        } else {
            flags::TABLE_CONFIG
        };
    }

    pub(crate) fn from_pb(
        m: pb::Manifest,
        indices: Vec<pb::IndexMetadata>,
        path: &str,
    ) -> Result<Self> {
        let schema = LanceSchema::from_pb(&m.fields, &m.schema_metadata)
            .map_err(|e| Error::corrupt(path, e))?;
        let ts = m.timestamp.unwrap_or_default();
        let timestamp =
            UNIX_EPOCH + Duration::new(ts.seconds.max(0) as u64, ts.nanos.max(0) as u32);
        let mut m = Manifest {
            schema,
            fragments: m
                .fragments
                .into_iter()
                .map(Fragment::from_pb)
                .collect::<Result<_>>()?,
            version: m.version,
            writer: m.writer_version.map(|w| (w.library, w.version)),
            timestamp,
            tag: m.tag,
            reader_feature_flags: m.reader_feature_flags,
            writer_feature_flags: m.writer_feature_flags,
            max_fragment_id: m.max_fragment_id,
            transaction_file: (!m.transaction_file.is_empty()).then_some(m.transaction_file),
            next_row_id: m.next_row_id,
            data_format: m
                .data_format
                .map(|d| (d.file_format, d.version))
                .unwrap_or_else(|| ("lance".into(), "2.0".into())),
            config: m.config,
            table_metadata: m.table_metadata,
            indices: indices
                .into_iter()
                .map(IndexMetadata::from_pb)
                .collect::<Result<_>>()?,
            base_paths: m.base_paths,
            branch: m.branch,
            frag_reuse: None,
        };
        crate::frag_reuse::load(&mut m, None)?;
        crate::overlay::exclude_overlaid(&mut m, &roaring::RoaringBitmap::new());
        Ok(m)
    }

    pub(crate) fn to_pb(&self) -> pb::Manifest {
        let d = self
            .timestamp
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        pb::Manifest {
            fields: self.schema.to_pb_fields(),
            schema_metadata: self
                .schema
                .metadata
                .iter()
                .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
                .collect(),
            fragments: self.fragments.iter().map(|f| f.to_pb()).collect(),
            version: self.version,
            version_aux_data: 0,
            writer_version: Some(pb::manifest::WriterVersion {
                library: "fathom".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                prerelease: None,
                build_metadata: None,
            }),
            index_section: None,
            timestamp: Some(prost_types::Timestamp {
                seconds: d.as_secs() as i64,
                nanos: d.subsec_nanos() as i32,
            }),
            tag: self.tag.clone(),
            reader_feature_flags: self.reader_feature_flags,
            writer_feature_flags: self.writer_feature_flags,
            max_fragment_id: self.max_fragment_id,
            transaction_file: self.transaction_file.clone().unwrap_or_default(),
            next_row_id: self.next_row_id,
            data_format: Some(pb::manifest::DataStorageFormat {
                file_format: self.data_format.0.clone(),
                version: self.data_format.1.clone(),
            }),
            config: self.config.clone(),
            base_paths: self.base_paths.clone(),
            table_metadata: self.table_metadata.clone(),
            branch: self.branch.clone(),
            transaction_section: None,
            transaction_section_v14: None,
        }
    }
}
