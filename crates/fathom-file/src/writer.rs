//! Streaming writer: RecordBatches in, one Lance 2.0 file out.
//!
//! Each column buffers its values until they reach the page size target
//! (8 MiB by default), then encodes a page and writes its buffers at once,
//! so memory stays at about one page per column whatever the row count.
//! Pending values are copied out of the caller's batches, so holding a few
//! rows never pins a whole batch. `finish` writes the file descriptor
//! (global buffer 0), the column metadata, the offset tables and the footer.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch, make_array};
use arrow_data::transform::MutableArrayData;
use arrow_schema::{DataType, Schema, SchemaRef};
use object_store::ObjectStore;
use object_store::buffered::BufWriter;
use object_store::path::Path;
use prost::Message;
use tokio::io::AsyncWriteExt;

use crate::encoding::encode::{self, EncodedPage};
use crate::encoding::encode21;
use crate::error::{Error, Result};
use crate::format::{COLUMN_ENCODING_URL, Footer, PAD_BYTE, PAGE_ALIGN, V2_0_FOOTER};
use crate::pb::encodings as pbe;
use crate::pb::file as pbf;
use crate::pb::file::v2 as pb2;
use crate::schema::{LanceField, LanceSchema};

/// Writer settings.
#[derive(Debug, Clone)]
pub struct FileWriterOptions {
    /// Target bytes per page and column (default 8 MiB).
    pub page_size_bytes: usize,
    /// Write low-cardinality string pages as dictionaries (default true).
    pub dictionary: bool,
    /// Record min/max/null count per zone of this many rows for eligible
    /// top-level columns (default off; datasets turn it on).
    pub zone_stats_rows: Option<u64>,
    /// File format version to write (default 2.0).
    pub version: FileVersion,
}

/// A Lance file format version this writer writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FileVersion {
    #[default]
    V2_0,
    /// Structural encodings, 16-bit mini-block chunk words.
    V2_1,
    /// Structural encodings, 32-bit mini-block chunk words.
    V2_2,
}

impl FileVersion {
    /// The version a dataset's `data_storage_version` names, if written here.
    pub fn parse(s: &str) -> Option<FileVersion> {
        match s {
            "2.0" => Some(FileVersion::V2_0),
            "2.1" => Some(FileVersion::V2_1),
            "2.2" => Some(FileVersion::V2_2),
            _ => None,
        }
    }
    /// Major and minor as a manifest's data file records them.
    pub fn numbers(self) -> (u32, u32) {
        match self {
            FileVersion::V2_0 => (2, 0),
            FileVersion::V2_1 => (2, 1),
            FileVersion::V2_2 => (2, 2),
        }
    }
    fn structural(self) -> bool {
        self != FileVersion::V2_0
    }
}

impl Default for FileWriterOptions {
    fn default() -> Self {
        Self {
            page_size_bytes: 8 * 1024 * 1024,
            dictionary: true,
            zone_stats_rows: None,
            version: FileVersion::V2_0,
        }
    }
}

/// What `finish` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrittenFile {
    pub num_rows: u64,
    pub size_bytes: u64,
}

/// Bytes a slice of an array would take once encoded (roughly).
fn encoded_size(arr: &dyn Array) -> usize {
    let n = arr.len();
    let validity = if arr.null_count() > 0 {
        n.div_ceil(8)
    } else {
        0
    };
    let data = match arr.data_type() {
        DataType::Utf8 | DataType::Binary => {
            let o = arr.to_data().buffers()[0].typed_data::<i32>()[arr.offset()..=arr.offset() + n]
                .to_vec();
            (o[n] - o[0]) as usize + 8 * n
        }
        DataType::LargeUtf8 | DataType::LargeBinary => {
            let d = arr.to_data();
            let o = &d.buffers()[0].typed_data::<i64>()[arr.offset()..=arr.offset() + n];
            (o[n] - o[0]) as usize + 8 * n
        }
        DataType::Boolean => n.div_ceil(8),
        DataType::Struct(_) => arr
            .as_struct()
            .columns()
            .iter()
            .map(|c| encoded_size(c.as_ref()))
            .sum(),
        dt => fixed_row_bytes(dt) * n,
    };
    validity + data
}

fn fixed_row_bytes(dt: &DataType) -> usize {
    match dt {
        DataType::FixedSizeList(f, d) => fixed_row_bytes(f.data_type()) * *d as usize,
        DataType::FixedSizeBinary(w) => *w as usize,
        dt => dt.primitive_width().unwrap_or(1),
    }
}

/// A deep copy of an array slice, so the caller's buffers are not retained.
fn compact(arr: &ArrayRef) -> ArrayRef {
    let data = arr.to_data();
    let mut m = MutableArrayData::new(vec![&data], false, arr.len());
    m.try_extend(0, 0, arr.len())
        .expect("copying a slice of itself cannot overflow");
    make_array(m.freeze())
}

/// Per-column encoder state, a tree mirroring the schema.
enum ColumnEncoder {
    Leaf {
        column: usize,
        name: String,
        pending: Vec<ArrayRef>,
        pending_bytes: usize,
        /// 2.1+: definition levels of the pending rows, and the number of
        /// structs around the leaf.
        defs: Vec<u16>,
        depth: Option<usize>,
    },
    List {
        column: usize,
        lengths: Vec<u64>,
        validity: Vec<bool>,
        child: Box<ColumnEncoder>,
    },
    Struct {
        column: usize,
        name: String,
        rows: u64,
        children: Vec<ColumnEncoder>,
        /// 2.1+: structs around this one, plus one.
        depth: Option<usize>,
    },
    /// 2.1+: a top-level field holding lists (columns `first..first + leaves`).
    Nested21 {
        first: usize,
        leaves: usize,
        name: String,
        pending: Vec<ArrayRef>,
        pending_bytes: usize,
    },
}

/// Column number of a struct in a 2.1+ file (only leaves have columns).
const NO_COLUMN: usize = usize::MAX;

type Out = Vec<(usize, EncodedPage)>;

impl ColumnEncoder {
    /// `depth`: `Some(structs around the field)` when writing 2.1+.
    fn new(field: &LanceField, next_column: &mut usize, depth: Option<usize>) -> Result<Self> {
        let dt = field.data_type()?;
        if depth == Some(0) && encode21::has_list(&dt) {
            // A top-level field holding lists: its leaves' levels are
            // computed from whole rows.
            let first = *next_column;
            *next_column += encode21::leaf_count(&dt);
            return Ok(ColumnEncoder::Nested21 {
                first,
                leaves: encode21::leaf_count(&dt),
                name: field.name.clone(),
                pending: vec![],
                pending_bytes: 0,
            });
        }
        // 2.1+: a struct marked packed is one leaf column of packed rows.
        let packed = depth.is_some() && crate::reader::is_packed_struct(&field.to_arrow()?);
        let column = if depth.is_some() && matches!(dt, DataType::Struct(_)) && !packed {
            NO_COLUMN
        } else {
            *next_column += 1;
            *next_column - 1
        };
        if depth.is_some() && encode21::has_list(&dt) {
            return Err(Error::invalid(format!(
                "column '{}': lists inside structs are not written to 2.1/2.2 files",
                field.name
            )));
        }
        if let DataType::Dictionary(..) = dt {
            return Err(Error::invalid(format!(
                "column '{}' is dictionary-typed (dataset written by pylance): \
                     writing dictionary columns is not implemented; rewrite the table \
                     with the column cast to its value type",
                field.name
            )));
        }
        Ok(match dt {
            DataType::Struct(_) if !packed => ColumnEncoder::Struct {
                column,
                name: field.name.clone(),
                rows: 0,
                children: field
                    .children
                    .iter()
                    .map(|c| ColumnEncoder::new(c, next_column, depth.map(|d| d + 1)))
                    .collect::<Result<_>>()?,
                depth: depth.map(|d| d + 1),
            },
            DataType::List(_) | DataType::LargeList(_) => ColumnEncoder::List {
                column,
                lengths: vec![],
                validity: vec![],
                child: Box::new(ColumnEncoder::new(&field.children[0], next_column, None)?),
            },
            _ => ColumnEncoder::Leaf {
                column,
                name: field.name.clone(),
                pending: vec![],
                pending_bytes: 0,
                defs: vec![],
                depth,
            },
        })
    }

    /// `top_null` (2.1+): per row, the depth (1 = outermost) of the
    /// outermost null struct around this field, 0 for none.
    fn push(
        &mut self,
        arr: &ArrayRef,
        top_null: Option<&[u16]>,
        opts: &FileWriterOptions,
        out: &mut Out,
    ) -> Result<()> {
        match self {
            ColumnEncoder::Leaf { depth, .. } => {
                // 2.1+: definition levels (every layer nullable: item null
                // is 1, the struct k layers out is k + 1).
                let mut level = depth.map(|d| {
                    (0..arr.len())
                        .map(|i| match top_null.map_or(0, |t| t[i]) {
                            0 => u16::from(arr.is_null(i)),
                            t => (d as u16 - t + 1) + 1,
                        })
                        .collect::<Vec<u16>>()
                });
                let mut rest = arr.clone();
                while !rest.is_empty() {
                    let ColumnEncoder::Leaf {
                        pending,
                        pending_bytes,
                        defs,
                        ..
                    } = self
                    else {
                        unreachable!()
                    };
                    let size = encoded_size(rest.as_ref()).max(1);
                    let room = opts.page_size_bytes.saturating_sub(*pending_bytes).max(1);
                    let take = if size <= room {
                        rest.len()
                    } else {
                        // Rows that fit the room left, at the slice's average width.
                        ((room as u128 * rest.len() as u128 / size as u128) as usize).max(1)
                    };
                    let piece = rest.slice(0, take);
                    *pending_bytes += encoded_size(piece.as_ref());
                    pending.push(compact(&piece));
                    if let Some(l) = &mut level {
                        defs.extend(l.drain(..take));
                    }
                    rest = rest.slice(take, rest.len() - take);
                    if *pending_bytes >= opts.page_size_bytes {
                        self.flush(opts, out)?;
                    }
                }
            }
            ColumnEncoder::Nested21 {
                pending,
                pending_bytes,
                ..
            } => {
                *pending_bytes += arr.get_array_memory_size();
                pending.push(compact(arr));
                if *pending_bytes >= opts.page_size_bytes {
                    self.flush(opts, out)?;
                }
            }
            ColumnEncoder::List {
                lengths,
                validity,
                child,
                ..
            } => {
                let (offsets, values): (Vec<u64>, ArrayRef) = match arr.data_type() {
                    DataType::List(_) => {
                        let l = arr.as_list::<i32>();
                        (
                            l.value_offsets().iter().map(|o| *o as u64).collect(),
                            l.values().clone(),
                        )
                    }
                    _ => {
                        let l = arr.as_list::<i64>();
                        (
                            l.value_offsets().iter().map(|o| *o as u64).collect(),
                            l.values().clone(),
                        )
                    }
                };
                for i in 0..arr.len() {
                    lengths.push(offsets[i + 1] - offsets[i]);
                    validity.push(arr.is_valid(i));
                }
                let (first, last) = (offsets[0] as usize, offsets[arr.len()] as usize);
                child.push(&values.slice(first, last - first), None, opts, out)?;
                if lengths.len() * 8 >= opts.page_size_bytes {
                    self.flush(opts, out)?;
                }
            }
            ColumnEncoder::Struct {
                rows,
                children,
                depth: Some(depth),
                ..
            } => {
                let s = arr.as_struct();
                let nulls = s.logical_nulls();
                let mine: Option<Vec<u16>> = (top_null.is_some() || nulls.is_some()).then(|| {
                    (0..s.len())
                        .map(|i| match top_null.map_or(0, |t| t[i]) {
                            0 => {
                                if nulls.as_ref().is_some_and(|n| n.is_null(i)) {
                                    *depth as u16
                                } else {
                                    0
                                }
                            }
                            t => t,
                        })
                        .collect()
                });
                *rows += s.len() as u64;
                for (c, col) in children.iter_mut().zip(s.columns()) {
                    c.push(col, mine.as_deref(), opts, out)?;
                }
            }
            ColumnEncoder::Struct {
                rows,
                children,
                name,
                ..
            } => {
                if arr.null_count() > 0 {
                    return Err(Error::invalid(format!(
                        "struct column '{name}' has {} null rows; Lance file format 2.0 does not \
                         store struct validity (make the struct's fields null instead)",
                        arr.null_count()
                    )));
                }
                let s = arr.as_struct();
                *rows += s.len() as u64;
                for (c, col) in children.iter_mut().zip(s.columns()) {
                    c.push(col, None, opts, out)?;
                }
            }
        }
        Ok(())
    }

    /// Writes what is pending as a page (not recursing into children).
    fn flush(&mut self, opts: &FileWriterOptions, out: &mut Out) -> Result<()> {
        match self {
            ColumnEncoder::Leaf {
                column,
                pending,
                pending_bytes,
                name,
                defs,
                depth,
            } => {
                if pending.is_empty() {
                    return Ok(());
                }
                let arr = if pending.len() == 1 {
                    pending.pop().unwrap()
                } else {
                    let refs: Vec<&dyn Array> = pending.iter().map(|a| a.as_ref()).collect();
                    let a = arrow_select::concat::concat(&refs)?;
                    pending.clear();
                    a
                };
                *pending_bytes = 0;
                let page = match depth {
                    Some(depth) => {
                        let levels = std::mem::take(defs);
                        let any = levels.iter().any(|d| *d != 0);
                        encode21::encode_leaf21(
                            &arr,
                            any.then_some(levels.as_slice()),
                            *depth,
                            opts.version == FileVersion::V2_2,
                        )
                    }
                    None => encode::encode_leaf(&arr, opts.dictionary),
                }
                .map_err(|e| Error::invalid(format!("column '{name}': {e}")))?;
                out.push((*column, page));
            }
            ColumnEncoder::List {
                column,
                lengths,
                validity,
                ..
            } => {
                if !lengths.is_empty() {
                    out.push((*column, encode::encode_list_offsets(lengths, validity)));
                    lengths.clear();
                    validity.clear();
                }
            }
            ColumnEncoder::Struct { .. } => {}
            ColumnEncoder::Nested21 {
                first,
                name,
                pending,
                pending_bytes,
                ..
            } => {
                if pending.is_empty() {
                    return Ok(());
                }
                let refs: Vec<&dyn Array> = pending.iter().map(|a| a.as_ref()).collect();
                let arr = arrow_select::concat::concat(&refs)?;
                pending.clear();
                *pending_bytes = 0;
                let pages = encode21::encode_nested21(&arr, opts.version == FileVersion::V2_2)
                    .map_err(|e| Error::invalid(format!("column '{name}': {e}")))?;
                for (k, leaf_pages) in pages.into_iter().enumerate() {
                    for p in leaf_pages {
                        out.push((*first + k, p));
                    }
                }
            }
        }
        Ok(())
    }

    fn finish(&mut self, opts: &FileWriterOptions, out: &mut Out) -> Result<()> {
        self.flush(opts, out)?;
        match self {
            ColumnEncoder::Leaf { .. } | ColumnEncoder::Nested21 { .. } => {}
            ColumnEncoder::List { child, .. } => child.finish(opts, out)?,
            ColumnEncoder::Struct {
                column,
                rows,
                children,
                ..
            } => {
                if *column != NO_COLUMN {
                    out.push((*column, encode::encode_struct(*rows)));
                }
                for c in children {
                    c.finish(opts, out)?;
                }
            }
        }
        Ok(())
    }

    fn empty_page(&self) -> EncodedPage {
        match self {
            ColumnEncoder::Leaf { depth: Some(d), .. } => encode21::encode_leaf21(
                &arrow_array::new_null_array(&DataType::Int32, 0),
                None,
                *d,
                false,
            )
            .expect("an empty page encodes"),
            ColumnEncoder::Leaf { .. } => encode::encode_empty_leaf(),
            ColumnEncoder::Nested21 { .. } => encode21::encode_leaf21(
                &arrow_array::new_null_array(&DataType::Int32, 0),
                None,
                0,
                false,
            )
            .expect("an empty page encodes"),
            ColumnEncoder::List { .. } => encode::encode_list_offsets(&[], &[]),
            ColumnEncoder::Struct { .. } => encode::encode_struct(0),
        }
    }

    fn visit<'a>(&'a self, out: &mut Vec<&'a ColumnEncoder>) {
        let column = match self {
            ColumnEncoder::Leaf { column, .. }
            | ColumnEncoder::List { column, .. }
            | ColumnEncoder::Struct { column, .. } => *column,
            ColumnEncoder::Nested21 { leaves, .. } => {
                // One entry per leaf column.
                for _ in 0..*leaves {
                    out.push(self);
                }
                return;
            }
        };
        if column != NO_COLUMN {
            out.push(self);
        }
        match self {
            ColumnEncoder::List { child, .. } => child.visit(out),
            ColumnEncoder::Struct { children, .. } => children.iter().for_each(|c| c.visit(out)),
            ColumnEncoder::Leaf { .. } | ColumnEncoder::Nested21 { .. } => {}
        }
    }
}

/// Writes one Lance 2.0 file.
pub struct FileWriter {
    out: BufWriter,
    /// The path as shown in errors (whole, see `io::shown`).
    path: String,
    pos: u64,
    schema: LanceSchema,
    arrow_schema: SchemaRef,
    encoders: Vec<ColumnEncoder>,
    pages: Vec<Vec<pb2::column_metadata::Page>>,
    rows: u64,
    opts: FileWriterOptions,
    /// Global buffers after the descriptor (index 1, 2, ...).
    extra_global_buffers: Vec<Vec<u8>>,
    zone_stats: Option<crate::stats::ZoneStatsBuilder>,
}

impl FileWriter {
    /// A writer for `schema`, field ids assigned 0, 1, 2... in pre-order.
    pub fn try_new(
        store: Arc<dyn ObjectStore>,
        path: Path,
        schema: &Schema,
        opts: FileWriterOptions,
    ) -> Result<Self> {
        Self::with_lance_schema(store, path, LanceSchema::from_arrow(schema)?, opts)
    }

    /// A writer whose file schema carries the given field ids (a dataset's).
    pub fn with_lance_schema(
        store: Arc<dyn ObjectStore>,
        path: Path,
        schema: LanceSchema,
        opts: FileWriterOptions,
    ) -> Result<Self> {
        let arrow_schema = Arc::new(schema.to_arrow()?);
        // A struct marked packed is one column of packed rows (2.1+). Inside
        // a list it would be written child by child, which readers of a
        // packed struct misread: refused.
        fn packed_in_list(f: &arrow_schema::Field, in_list: bool) -> Option<String> {
            if in_list && crate::reader::is_packed_struct(f) {
                return Some(f.name().clone());
            }
            match f.data_type() {
                DataType::Struct(fs) => fs.iter().find_map(|c| packed_in_list(c, in_list)),
                DataType::List(c) | DataType::LargeList(c) | DataType::FixedSizeList(c, _) => {
                    packed_in_list(c, true)
                }
                _ => None,
            }
        }
        if opts.version.structural()
            && let Some(name) = arrow_schema
                .fields()
                .iter()
                .find_map(|f| packed_in_list(f, false))
        {
            return Err(Error::invalid(format!(
                "column '{name}' is a packed struct (field metadata 'packed') inside a list; \
                 writing those is not supported"
            )));
        }
        let zone_stats = opts
            .zone_stats_rows
            .map(|n| crate::stats::ZoneStatsBuilder::new(&arrow_schema, n));
        let mut next_column = 0;
        let encoders = schema
            .fields
            .iter()
            .map(|f| {
                ColumnEncoder::new(f, &mut next_column, opts.version.structural().then_some(0))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(FileWriter {
            path: crate::io::shown(store.as_ref(), &path),
            out: BufWriter::new(store, path),
            pos: 0,
            pages: vec![vec![]; next_column],
            schema,
            arrow_schema,
            encoders,
            rows: 0,
            zone_stats,
            opts,
            extra_global_buffers: vec![],
        })
    }

    /// The Arrow schema batches must have.
    pub fn schema(&self) -> &SchemaRef {
        &self.arrow_schema
    }

    /// Adds a global buffer (indexes keep auxiliary data there); returns
    /// its index (1, 2, ...; 0 is the file descriptor).
    pub fn add_global_buffer(&mut self, bytes: Vec<u8>) -> u32 {
        self.extra_global_buffers.push(bytes);
        self.extra_global_buffers.len() as u32
    }

    /// Sets a schema metadata entry (stored in the file descriptor).
    pub fn set_metadata(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.schema.metadata.insert(key.into(), value.into());
    }

    /// Rows written so far.
    pub fn num_rows(&self) -> u64 {
        self.rows
    }

    /// Bytes written so far (page data only; the metadata comes at `finish`).
    pub fn bytes_written(&self) -> u64 {
        self.pos
    }

    fn check_batch(&self, batch: &RecordBatch) -> Result<()> {
        let want = self.arrow_schema.fields();
        let got = batch.schema();
        if got.fields().len() != want.len() {
            return Err(Error::invalid(format!(
                "batch has {} columns, the file schema {}",
                got.fields().len(),
                want.len()
            )));
        }
        for (w, g) in want.iter().zip(got.fields()) {
            if !w.data_type().equals_datatype(g.data_type()) || w.name() != g.name() {
                return Err(Error::invalid(format!(
                    "batch column '{}' of type {} does not match the file's column '{}' of type {}",
                    g.name(),
                    g.data_type(),
                    w.name(),
                    w.data_type()
                )));
            }
            if !w.is_nullable() && g.is_nullable() {
                // Allowed if the values have no nulls; checked below.
            }
        }
        for (i, w) in want.iter().enumerate() {
            if !w.is_nullable() && batch.column(i).null_count() > 0 {
                return Err(Error::invalid(format!(
                    "column '{}' is not nullable but the batch has {} nulls in it",
                    w.name(),
                    batch.column(i).null_count()
                )));
            }
        }
        Ok(())
    }

    /// Appends a batch.
    pub async fn write_batch(&mut self, batch: &RecordBatch) -> Result<()> {
        self.check_batch(batch)?;
        if let Some(z) = &mut self.zone_stats {
            z.push(batch)?;
        }
        let mut out = Vec::new();
        for (enc, col) in self.encoders.iter_mut().zip(batch.columns()) {
            enc.push(col, None, &self.opts, &mut out)?;
        }
        self.rows += batch.num_rows() as u64;
        self.write_pages(out).await
    }

    async fn write_bytes(&mut self, b: &[u8]) -> Result<()> {
        self.out.write_all(b).await.map_err(|e| Error::Io {
            path: self.path.clone(),
            source: object_store::Error::Generic {
                store: "writer",
                source: Box::new(e),
            },
        })?;
        self.pos += b.len() as u64;
        Ok(())
    }

    async fn write_pages(&mut self, pages: Out) -> Result<()> {
        for (column, page) in pages {
            let mut offsets = Vec::with_capacity(page.buffers.len());
            let mut sizes = Vec::with_capacity(page.buffers.len());
            for b in &page.buffers {
                offsets.push(self.pos);
                sizes.push(b.len() as u64);
                self.write_bytes(b).await?;
                let pad = (PAGE_ALIGN - self.pos % PAGE_ALIGN) % PAGE_ALIGN;
                if pad > 0 {
                    self.write_bytes(&vec![PAD_BYTE; pad as usize]).await?;
                }
            }
            let encoding = pb2::Encoding {
                location: Some(pb2::encoding::Location::Direct(pb2::DirectEncoding {
                    encoding: page.any_bytes(),
                })),
            };
            // 2.1+: the page's first row (readers schedule by it).
            let priority = if self.opts.version.structural() {
                self.pages[column].iter().map(|p| p.length).sum()
            } else {
                0
            };
            self.pages[column].push(pb2::column_metadata::Page {
                buffer_offsets: offsets,
                buffer_sizes: sizes,
                length: page.length,
                encoding: Some(encoding),
                priority,
            });
        }
        Ok(())
    }

    /// Flushes every column and writes metadata and footer.
    pub async fn finish(mut self) -> Result<WrittenFile> {
        let mut out = Vec::new();
        for enc in self.encoders.iter_mut() {
            enc.finish(&self.opts, &mut out)?;
        }
        self.write_pages(out).await?;
        // Every column gets at least one page, as Lance writes them.
        let mut flat = Vec::new();
        for e in &self.encoders {
            e.visit(&mut flat);
        }
        let empties: Out = flat
            .iter()
            .enumerate()
            .filter(|(i, _)| self.pages[*i].is_empty())
            .map(|(i, e)| (i, e.empty_page()))
            .collect();
        self.write_pages(empties).await?;

        if let Some(z) = self.zone_stats.take() {
            let rows = z.rows_per_zone();
            if let Some(bytes) = z.finish(&self.arrow_schema)? {
                let idx = self.add_global_buffer(bytes);
                self.set_metadata(crate::stats::STATS_KEY, idx.to_string());
                self.set_metadata(crate::stats::ZONE_ROWS_KEY, rows.to_string());
            }
        }
        // Global buffer 0: the file descriptor.
        let descriptor = pbf::FileDescriptor {
            schema: Some(self.schema.to_pb()),
            length: self.rows,
        }
        .encode_to_vec();
        let mut globals = vec![(self.pos, descriptor.len() as u64)];
        self.write_bytes(&descriptor).await?;
        for b in std::mem::take(&mut self.extra_global_buffers) {
            let pad = (PAGE_ALIGN - self.pos % PAGE_ALIGN) % PAGE_ALIGN;
            if pad > 0 {
                self.write_bytes(&vec![0u8; pad as usize]).await?;
            }
            globals.push((self.pos, b.len() as u64));
            self.write_bytes(&b).await?;
        }

        let column_encoding = pb2::Encoding {
            location: Some(pb2::encoding::Location::Direct(pb2::DirectEncoding {
                encoding: prost_types::Any {
                    type_url: COLUMN_ENCODING_URL.to_string(),
                    value: pbe::ColumnEncoding {
                        column_encoding: Some(pbe::column_encoding::ColumnEncoding::Values(
                            pbe::column_encoding::Values {},
                        )),
                    }
                    .encode_to_vec(),
                }
                .encode_to_vec(),
            })),
        };
        let column_meta_start = self.pos;
        let mut cmo = Vec::new();
        for pages in std::mem::take(&mut self.pages) {
            let meta = pb2::ColumnMetadata {
                encoding: Some(column_encoding.clone()),
                pages,
                buffer_offsets: vec![],
                buffer_sizes: vec![],
            }
            .encode_to_vec();
            cmo.push((self.pos, meta.len() as u64));
            self.write_bytes(&meta).await?;
        }
        let cmo_table_start = self.pos;
        let mut table = Vec::with_capacity(cmo.len() * 16);
        for (p, s) in &cmo {
            table.extend_from_slice(&p.to_le_bytes());
            table.extend_from_slice(&s.to_le_bytes());
        }
        self.write_bytes(&table).await?;
        let gbo_table_start = self.pos;
        let mut gbo = Vec::with_capacity(16 * globals.len());
        for (p, s) in &globals {
            gbo.extend_from_slice(&p.to_le_bytes());
            gbo.extend_from_slice(&s.to_le_bytes());
        }
        self.write_bytes(&gbo).await?;
        let footer = Footer {
            column_meta_start,
            cmo_table_start,
            gbo_table_start,
            num_global_buffers: globals.len() as u32,
            num_columns: cmo.len() as u32,
            major: match self.opts.version {
                FileVersion::V2_0 => V2_0_FOOTER.0,
                _ => 2,
            },
            minor: match self.opts.version {
                FileVersion::V2_0 => V2_0_FOOTER.1,
                FileVersion::V2_1 => 1,
                FileVersion::V2_2 => 2,
            },
        };
        self.write_bytes(&footer.to_bytes()).await?;
        self.out.shutdown().await.map_err(|e| Error::Io {
            path: self.path.clone(),
            source: object_store::Error::Generic {
                store: "writer",
                source: Box::new(e),
            },
        })?;
        Ok(WrittenFile {
            num_rows: self.rows,
            size_bytes: self.pos,
        })
    }

    /// Abandons the file: nothing becomes visible at the path.
    pub async fn abort(mut self) -> Result<()> {
        self.out.abort().await.map_err(|source| Error::Io {
            path: self.path.clone(),
            source,
        })
    }
}
