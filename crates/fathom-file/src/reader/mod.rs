//! Random-access reader.
//!
//! Opening reads the tail of the file once (footer, offset tables, column
//! metadata and the schema usually fit in it) and parses every page's
//! encoding; after that, any read is planned from metadata alone.
//!
//! Every read is a *selection*: sorted row ranges. Per column the selection
//! is split by page, the byte ranges each page needs are listed, fetched in
//! one coalesced request set, and decoded; strings and lists need a second
//! round for their bytes or items. A `take` of scattered rows therefore
//! reads a few bytes around each row, never whole columns.

use std::ops::Range;
use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, LargeListArray, ListArray, RecordBatch, RecordBatchOptions, StructArray,
    UInt32Array, make_array, new_empty_array,
};
use arrow_buffer::{BooleanBuffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, FieldRef, Schema, SchemaRef};
use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt, try_join_all};
use futures::stream::{self, Stream, StreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use prost::Message;

use crate::encoding::BufferTable;
use crate::encoding::Enc;
use crate::encoding::decode::{
    Ctx, OffsetRun, apply_dictionary, build_binary, byte_width, decode_fixed, decode_u64s,
    fixed_ranges, interpret_offsets, offset_runs, sel_len,
};
use crate::error::{Error, Result};
use crate::format::{FOOTER_LEN, Footer, KEEP_WHOLE_MAX, TAIL_READ};
use crate::io::{DEFAULT_COALESCE_GAP, FileIo, IoStats};
use crate::pb::file as pbf;
use crate::pb::file::v2 as pb2;
use crate::schema::{LanceField, LanceSchema};

mod columns;
mod open;
mod structural;
pub(crate) mod v21;

/// Column number of a node that has no column of its own (a struct or a
/// list in a 2.1+ file, where only leaves have columns).
const NO_COLUMN: usize = usize::MAX;

/// Reader settings.
#[derive(Debug, Clone)]
pub struct FileReaderOptions {
    /// Ranges closer than this are fetched in one request (default 4 KiB).
    pub coalesce_gap: u64,
    /// Bytes a scan reads per step (default 2 MiB).
    pub scan_chunk_bytes: u64,
    /// A file of at most this many bytes is kept whole with the open
    /// reader and its pages read from memory (default
    /// [`KEEP_WHOLE_MAX`], 16 KiB; 0 keeps none).
    pub keep_whole_max: u64,
}

impl Default for FileReaderOptions {
    fn default() -> Self {
        Self {
            coalesce_gap: DEFAULT_COALESCE_GAP,
            scan_chunk_bytes: 2 * 1024 * 1024,
            keep_whole_max: KEEP_WHOLE_MAX,
        }
    }
}

#[derive(Debug)]
struct ColumnInfo {
    name: String,
    pages: Vec<Enc>,
    /// Row (value) index where each page starts, plus the total at the end.
    starts: Vec<u64>,
    /// For list columns: item index where each page's items start, plus total.
    item_starts: Vec<u64>,
    /// Bytes of all page buffers.
    data_bytes: u64,
}

#[derive(Debug, Clone)]
struct Node {
    column: usize,
    field: FieldRef,
    children: Vec<Node>,
}

#[derive(Debug)]
struct Inner {
    io: FileIo,
    schema: LanceSchema,
    arrow_schema: SchemaRef,
    num_rows: u64,
    columns: Vec<ColumnInfo>,
    nodes: Vec<Node>,
    global_buffers: Vec<Range<u64>>,
    opts: FileReaderOptions,
    zone_stats: tokio::sync::OnceCell<Option<crate::stats::ZoneStats>>,
    /// 2.1+ file: structural pages, columns for leaves only.
    structural: bool,
}

/// An open Lance 2.0 file. Cheap to clone.
#[derive(Debug, Clone)]
pub struct FileReader {
    inner: Arc<Inner>,
}

/// A struct field stored packed (pylance's field metadata `packed` or
/// `lance-encoding:packed` set to true).
pub(crate) fn is_packed_struct(field: &Field) -> bool {
    matches!(field.data_type(), DataType::Struct(_))
        && crate::schema::marked_packed(field.metadata())
}

fn merge_runs(mut runs: Vec<Range<u64>>) -> Vec<Range<u64>> {
    runs.retain(|r| r.start < r.end);
    let mut out: Vec<Range<u64>> = Vec::with_capacity(runs.len());
    for r in runs {
        match out.last_mut() {
            Some(last) if last.end == r.start => last.end = r.end,
            _ => out.push(r),
        }
    }
    out
}

/// The values of a page without nulls: the page itself, or the values of
/// a nullable page that has none. `None` for anything else.
fn plain(enc: &Enc) -> Option<&Enc> {
    match enc {
        Enc::Nullable {
            validity: None,
            values,
        } => Some(values),
        Enc::Nullable { .. } => None,
        e => Some(e),
    }
}

/// Sorted, de-duplicated row indices as runs of consecutive rows.
pub fn indices_to_runs(sorted: &[u64]) -> Vec<Range<u64>> {
    let mut out: Vec<Range<u64>> = Vec::new();
    for &i in sorted {
        match out.last_mut() {
            Some(last) if last.end == i => last.end += 1,
            _ => out.push(i..i + 1),
        }
    }
    out
}

impl FileReader {
    /// Rows in the file.
    pub fn num_rows(&self) -> u64 {
        self.inner.num_rows
    }

    /// The file's Arrow schema.
    pub fn schema(&self) -> &SchemaRef {
        &self.inner.arrow_schema
    }

    /// The file's Lance schema (with field ids).
    pub fn lance_schema(&self) -> &LanceSchema {
        &self.inner.schema
    }

    /// Requests and bytes read through this reader so far.
    pub fn io_stats(&self) -> (u64, u64) {
        self.inner.io.stats.snapshot()
    }

    /// Size of the file in bytes.
    pub fn file_size(&self) -> u64 {
        self.inner.io.size
    }

    /// Reads global buffer `i` (0 is the file descriptor).
    pub async fn read_global_buffer(&self, i: usize) -> Result<Bytes> {
        let r = self.inner.global_buffers.get(i).cloned().ok_or_else(|| {
            Error::invalid(format!(
                "global buffer {i} requested; the file has {}",
                self.inner.global_buffers.len()
            ))
        })?;
        self.inner.io.read(r).await
    }

    /// The file's zone statistics, if it was written with them (loaded once).
    pub async fn zone_stats(&self) -> Result<Option<crate::stats::ZoneStats>> {
        self.inner
            .zone_stats
            .get_or_try_init(|| self.load_zone_stats())
            .await
            .cloned()
    }

    async fn load_zone_stats(&self) -> Result<Option<crate::stats::ZoneStats>> {
        let md = self.inner.arrow_schema.metadata();
        let (Some(idx), Some(rows)) = (
            md.get(crate::stats::STATS_KEY),
            md.get(crate::stats::ZONE_ROWS_KEY),
        ) else {
            return Ok(None);
        };
        let path = self.inner.io.path_str();
        let (Ok(idx), Ok(rows)) = (idx.parse::<usize>(), rows.parse::<u64>()) else {
            return Err(Error::corrupt(&path, "malformed zone statistics metadata"));
        };
        let bytes = self.read_global_buffer(idx).await?;
        Ok(Some(crate::stats::ZoneStats::decode(&bytes, rows, &path)?))
    }

    /// Number of global buffers.
    pub fn num_global_buffers(&self) -> usize {
        self.inner.global_buffers.len()
    }

    /// Page data bytes of each top-level column.
    pub fn column_data_bytes(&self, field: usize) -> u64 {
        fn sum(inner: &Inner, n: &Node) -> u64 {
            inner.columns.get(n.column).map_or(0, |c| c.data_bytes)
                + n.children.iter().map(|c| sum(inner, c)).sum::<u64>()
        }
        self.inner
            .nodes
            .get(field)
            .map_or(0, |n| sum(&self.inner, n))
    }

    fn projected(&self, projection: Option<&[usize]>) -> Result<(Vec<Node>, SchemaRef)> {
        let all: Vec<usize>;
        let proj = match projection {
            Some(p) => p,
            None => {
                all = (0..self.inner.nodes.len()).collect();
                &all
            }
        };
        let mut nodes = Vec::with_capacity(proj.len());
        for &i in proj {
            nodes.push(self.inner.nodes.get(i).cloned().ok_or_else(|| {
                Error::invalid(format!(
                    "projection names field {i}; the file has {}",
                    self.inner.nodes.len()
                ))
            })?);
        }
        let schema = Arc::new(Schema::new_with_metadata(
            nodes.iter().map(|n| n.field.clone()).collect::<Vec<_>>(),
            self.inner.arrow_schema.metadata().clone(),
        ));
        Ok((nodes, schema))
    }

    /// Reads the rows in `sel` (sorted, disjoint ranges) as one batch.
    pub async fn read_selection(
        &self,
        sel: &[Range<u64>],
        projection: Option<&[usize]>,
    ) -> Result<RecordBatch> {
        for w in sel.windows(2) {
            if w[0].end > w[1].start {
                return Err(Error::invalid(
                    "selection ranges must be sorted and disjoint",
                ));
            }
        }
        if let Some(last) = sel.last()
            && last.end > self.inner.num_rows
        {
            return Err(Error::invalid(format!(
                "rows up to {} requested from a file of {} rows",
                last.end, self.inner.num_rows
            )));
        }
        let sel = merge_runs(sel.to_vec());
        let (nodes, schema) = self.projected(projection)?;
        let inner = &self.inner;
        let arrays = try_join_all(nodes.iter().map(|n| inner.read_node(n, sel.clone()))).await?;
        Ok(RecordBatch::try_new_with_options(
            schema,
            arrays,
            &RecordBatchOptions::new().with_row_count(Some(sel_len(&sel) as usize)),
        )?)
    }

    /// Reads a contiguous row range as one batch.
    pub async fn read_range(
        &self,
        rows: Range<u64>,
        projection: Option<&[usize]>,
    ) -> Result<RecordBatch> {
        self.read_selection(&[rows], projection).await
    }

    /// Takes rows by index (any order, repeats allowed), decoding only the
    /// pages and byte ranges those rows need.
    pub async fn take(&self, indices: &[u64], projection: Option<&[usize]>) -> Result<RecordBatch> {
        let mut sorted = indices.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        if let Some(&last) = sorted.last()
            && last >= self.inner.num_rows
        {
            return Err(Error::invalid(format!(
                "row {last} requested from a file of {} rows",
                self.inner.num_rows
            )));
        }
        let batch = self
            .read_selection(&indices_to_runs(&sorted), projection)
            .await?;
        if sorted.as_slice() == indices {
            return Ok(batch);
        }
        let positions = UInt32Array::from_iter_values(
            indices
                .iter()
                .map(|i| sorted.binary_search(i).unwrap() as u32),
        );
        let columns = batch
            .columns()
            .iter()
            .map(|c| arrow_select::take::take(c, &positions, None))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(RecordBatch::try_new_with_options(
            batch.schema(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(indices.len())),
        )?)
    }

    /// Scans `rows` as a stream of batches of `batch_size` rows (the last
    /// may be shorter). Each step reads about `scan_chunk_bytes` with one
    /// request per page buffer; the next step is fetched while the current
    /// one is consumed. Steps end where a page of the widest projected
    /// column ends, so no step decodes two of its pages and copies them
    /// into one array; the batches are cut from the steps' rows regardless.
    pub fn scan(
        &self,
        rows: Range<u64>,
        projection: Option<&[usize]>,
        batch_size: usize,
    ) -> Result<impl Stream<Item = Result<RecordBatch>> + Send + 'static> {
        let batch_size = batch_size.max(1);
        let (nodes, _) = self.projected(projection)?;
        let proj: Vec<usize> = match projection {
            Some(p) => p.to_vec(),
            None => (0..self.inner.nodes.len()).collect(),
        };
        if rows.end > self.inner.num_rows || rows.start > rows.end {
            return Err(Error::invalid(format!(
                "scan of rows {}..{} from a file of {} rows",
                rows.start, rows.end, self.inner.num_rows
            )));
        }
        let sizes: Vec<u64> = nodes
            .iter()
            .map(|n| {
                self.column_data_bytes(
                    proj[nodes.iter().position(|m| m.column == n.column).unwrap()],
                )
            })
            .collect();
        let bytes: u64 = sizes.iter().sum();
        let row_bytes = (bytes / self.inner.num_rows.max(1)).max(1);
        let chunk = (self.inner.opts.scan_chunk_bytes / row_bytes).max(batch_size as u64);
        let chunk = chunk / batch_size as u64 * batch_size as u64;
        // Page starts of the widest projected column, when it is a column
        // of its own (a leaf: its pages start at rows).
        let widest = sizes
            .iter()
            .enumerate()
            .max_by_key(|(_, b)| **b)
            .map(|(i, _)| &nodes[i]);
        let cuts: &[u64] = match widest {
            Some(n) if n.children.is_empty() => self
                .inner
                .columns
                .get(n.column)
                .map_or(&[], |c| c.starts.as_slice()),
            _ => &[],
        };
        // Between cuts, steps of equal size (two steps decode at a time: a
        // short one beside a long one would leave a core idle).
        let mut chunks: Vec<Range<u64>> = Vec::new();
        let mut bounds: Vec<u64> = vec![rows.start];
        bounds.extend(
            cuts.iter()
                .copied()
                .filter(|c| *c > rows.start && *c < rows.end),
        );
        bounds.push(rows.end);
        for w in bounds.windows(2) {
            let (a, b) = (w[0], w[1]);
            let parts = (b - a).div_ceil(chunk).max(1);
            let each = (b - a).div_ceil(parts);
            let mut s = a;
            while s < b {
                let e = (s + each).min(b);
                chunks.push(s..e);
                s = e;
            }
        }
        let reader = self.clone();
        let steps = stream::iter(chunks)
            .map(move |r| {
                let reader = reader.clone();
                let proj = proj.clone();
                let step = async move { reader.read_selection(&[r], Some(&proj)).await };
                // Decoding is CPU work: run each step as its own task so the
                // next step decodes on another core while this one is used.
                async move {
                    match tokio::runtime::Handle::try_current() {
                        Ok(h) => h
                            .spawn(step)
                            .await
                            .map_err(|e| Error::invalid(format!("scan step failed: {e}")))?,
                        Err(_) => step.await,
                    }
                }
            })
            .buffered(2)
            .boxed();
        Ok(rebatch(steps, batch_size))
    }
}

/// Cuts a stream of batches of any size into batches of `size` rows (the
/// last may be shorter): rows left over at the end of one input batch are
/// joined with the start of the next.
fn rebatch(
    input: futures::stream::BoxStream<'static, Result<RecordBatch>>,
    size: usize,
) -> impl Stream<Item = Result<RecordBatch>> + Send + 'static {
    struct State {
        input: futures::stream::BoxStream<'static, Result<RecordBatch>>,
        carry: Option<RecordBatch>,
        ready: std::collections::VecDeque<Result<RecordBatch>>,
        done: bool,
    }
    fn cut(b: RecordBatch, st: &mut State, size: usize) -> Result<()> {
        let (n, mut at) = (b.num_rows(), 0usize);
        if let Some(c) = st.carry.take() {
            let take = (size - c.num_rows()).min(n);
            let joined =
                arrow_select::concat::concat_batches(&c.schema(), [&c, &b.slice(0, take)])?;
            at = take;
            if joined.num_rows() < size {
                st.carry = Some(joined);
                return Ok(());
            }
            st.ready.push_back(Ok(joined));
        }
        while at + size <= n {
            st.ready.push_back(Ok(b.slice(at, size)));
            at += size;
        }
        if at < n {
            st.carry = Some(b.slice(at, n - at));
        }
        Ok(())
    }
    let st = State {
        input,
        carry: None,
        ready: Default::default(),
        done: false,
    };
    stream::unfold(st, move |mut st| async move {
        loop {
            if let Some(b) = st.ready.pop_front() {
                return Some((b, st));
            }
            if st.done {
                return None;
            }
            match st.input.next().await {
                None => {
                    st.done = true;
                    if let Some(c) = st.carry.take() {
                        st.ready.push_back(Ok(c));
                    }
                }
                Some(Err(e)) => {
                    st.done = true;
                    st.ready.push_back(Err(e));
                }
                Some(Ok(b)) => {
                    if let Err(e) = cut(b, &mut st, size) {
                        st.done = true;
                        st.ready.push_back(Err(e));
                    }
                }
            }
        }
    })
}

fn relabel(e: Error, path: &str) -> Error {
    match e {
        Error::Corrupt { message, .. } => Error::corrupt(path, message),
        Error::Unsupported { message, .. } => Error::unsupported(path, message),
        e => e,
    }
}

/// An error while parsing a page, naming its file, column and page.
fn relabel_page(e: Error, path: &str, column: &str, page: usize) -> Error {
    match e {
        Error::Corrupt { message, .. } => {
            Error::corrupt(path, format!("column '{column}', page {page}: {message}"))
        }
        Error::Unsupported { message, .. } => {
            Error::unsupported(path, format!("column '{column}', page {page}: {message}"))
        }
        e => e,
    }
}

#[allow(dead_code)]
fn _assert_send() {
    fn is_send<T: Send + Sync>() {}
    is_send::<FileReader>();
    let _ = ScalarBuffer::<u8>::from(vec![]);
}
