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

mod column;

use column::*;

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
