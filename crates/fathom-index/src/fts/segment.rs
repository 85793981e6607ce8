//! An inverted index segment loaded for search: per partition the token
//! dictionary and the docs file (row addresses and lengths) up front,
//! posting lists read on demand (one row of the invert file per query
//! term) and kept in the [`IndexCache`].

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, UInt32Type, UInt64Type};
use fathom_file::FileReader;
use fathom_table::format::IndexMetadata;
use fathom_table::{RowAddress, RowSet};
use object_store::ObjectStore;
use object_store::path::Path;
use roaring::RoaringBitmap;

use super::analyzer::{Analyzer, FtsParams};
use super::build::{METADATA_FILE, docs_file, invert_file, tokens_file};
use super::posting::{self, BLOCK};
use crate::cache::IndexCache;
use crate::error::{Error, Result};

/// Whether `meta` is an inverted (full-text) index segment.
pub fn is_fts(meta: &IndexMetadata) -> bool {
    meta.index_details
        .as_ref()
        .is_some_and(|d| d.type_url == super::TYPE_URL || d.type_url == super::LEGACY_TYPE_URL)
}

fn corrupt(meta: &IndexMetadata, file: &str, msg: impl std::fmt::Display) -> Error {
    Error::InvalidInput(format!(
        "inverted index '{}' segment {} ({file}): {msg}",
        meta.name, meta.uuid
    ))
}

/// A loaded segment.
#[derive(Debug)]
pub struct FtsSegment {
    pub uuid: uuid::Uuid,
    pub params: FtsParams,
    pub analyzer: Analyzer,
    pub parts: Vec<Partition>,
}

/// One partition: its own doc ids, dictionary and posting lists.
pub struct Partition {
    pub id: u64,
    tokens: fst::Map<Vec<u8>>,
    /// Row address of each doc id.
    pub rowaddrs: Vec<u64>,
    /// Token count of each doc id.
    pub lens: Vec<u32>,
    /// Doc ids of each fragment (docs are in row-address order).
    pub fragments: BTreeMap<u32, Range<u32>>,
    /// Tokens of each fragment's docs.
    pub fragment_tokens: BTreeMap<u32, u64>,
    /// Tokens of all docs.
    pub total_tokens: u64,
    /// The fewest tokens a doc holding any token has (a bound on scores
    /// from term frequencies alone).
    pub min_len: u32,
    invert: FileReader,
    positions: bool,
    cache_key: String,
}

impl std::fmt::Debug for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Partition")
            .field("id", &self.id)
            .field("docs", &self.rowaddrs.len())
            .finish()
    }
}

/// One token's posting list in one partition.
#[derive(Debug)]
pub struct PostingList {
    /// Encoded blocks (all full but the last when `df % 128 != 0`).
    pub blocks: Vec<Vec<u8>>,
    /// First doc id of each block.
    pub first_docs: Vec<u32>,
    /// Block-max score of each block (under the partition's statistics).
    pub block_max: Vec<f32>,
    pub df: u32,
    pub max_score: f32,
    /// Position streams (`with_position`): bytes and each block's offset.
    pub positions: Option<(Vec<u8>, Vec<u32>)>,
}

impl PostingList {
    /// Documents in block `b`.
    pub fn block_len(&self, b: usize) -> usize {
        if b + 1 < self.blocks.len() {
            BLOCK
        } else {
            self.df as usize - BLOCK * (self.blocks.len() - 1)
        }
    }

    /// Decodes block `b`.
    pub fn decode(&self, b: usize, docs: &mut Vec<u32>, freqs: &mut Vec<u32>) -> Result<()> {
        posting::decode_block(&self.blocks[b], self.block_len(b), docs, freqs)
    }

    /// Positions of block `b`'s documents.
    /// Positions of block `b`'s documents, flat (see
    /// [`posting::decode_positions_into`]).
    pub fn block_positions(&self, b: usize, freqs: &[u32], out: &mut Vec<u32>) -> Result<()> {
        let (bytes, offs) = self.positions.as_ref().ok_or_else(|| {
            Error::InvalidInput("phrase queries need an index built with with_position".into())
        })?;
        let start = *offs.get(b).unwrap_or(&0) as usize;
        let end = offs.get(b + 1).map_or(bytes.len(), |e| *e as usize);
        if start > end || end > bytes.len() {
            return Err(Error::InvalidInput(
                "corrupt inverted index: position offsets out of range".into(),
            ));
        }
        posting::decode_positions_into(&bytes[start..end], freqs, out)
    }

    fn bytes(&self) -> usize {
        self.blocks.iter().map(|b| b.len() + 32).sum::<usize>()
            + self
                .positions
                .as_ref()
                .map_or(0, |p| p.0.len() + 4 * p.1.len())
            + 64
    }
}

fn read_u64s(b: &RecordBatch, name: &str) -> Option<Vec<u64>> {
    let c = b.column_by_name(name)?;
    Some(c.as_primitive_opt::<UInt64Type>()?.values().to_vec())
}

impl FtsSegment {
    /// Loads (or finds in `cache`) segment `meta`.
    pub async fn load(
        store: &Arc<dyn ObjectStore>,
        root: &Path,
        meta: &IndexMetadata,
        cache: &IndexCache,
    ) -> Result<Arc<FtsSegment>> {
        let key = format!("fts/{}", meta.uuid);
        if let Some(s) = cache.get::<FtsSegment>(&key) {
            return Ok(s);
        }
        let md = crate::io::open(store, root, meta, METADATA_FILE).await?;
        let smd = md.schema().metadata();
        let params = FtsParams::from_json(
            smd.get("params")
                .ok_or_else(|| corrupt(meta, METADATA_FILE, "no 'params'"))?,
        )?;
        if let Some(v) = smd.get("format_version")
            && v != "2"
        {
            return Err(corrupt(
                meta,
                METADATA_FILE,
                format!("posting format version {v} is not supported (Fathom reads 2)"),
            ));
        }
        if let Some(v) = smd.get("posting_block_size")
            && v != "128"
        {
            return Err(corrupt(
                meta,
                METADATA_FILE,
                format!("posting block size {v} is not supported (Fathom reads 128)"),
            ));
        }
        if let Some(v) = smd.get("token_set_format")
            && v != "fst"
        {
            return Err(corrupt(
                meta,
                METADATA_FILE,
                format!("token set format '{v}' is not supported (Fathom reads fst)"),
            ));
        }
        let part_ids: Vec<u64> = match smd.get("partitions") {
            Some(p) => serde_json::from_str(p)
                .map_err(|e| corrupt(meta, METADATA_FILE, format!("partitions: {e}")))?,
            None => vec![0],
        };
        let analyzer = Analyzer::new(&params)?;
        let mut parts = Vec::with_capacity(part_ids.len());
        let mut bytes = 0usize;
        for id in part_ids {
            let p = Partition::load(store, root, meta, id, params.with_position).await?;
            bytes += p.rowaddrs.len() * 12 + p.tokens.as_fst().as_bytes().len();
            parts.push(p);
        }
        let seg = Arc::new(FtsSegment {
            uuid: meta.uuid,
            params,
            analyzer,
            parts,
        });
        cache.insert(key, seg.clone(), bytes + 1024);
        Ok(seg)
    }

    /// Docs and tokens of the docs in fragments `valid`. Docs whose row is
    /// in `stale` (rows an overlay changed since the build) do not count.
    /// (A segment that predates a deferred-remap compaction is loaded
    /// remapped, see `segment::load_fts`.)
    pub fn counts(&self, valid: &RoaringBitmap, stale: &RowSet) -> (u64, u64) {
        let stale_frags = fragments_of(stale);
        let (mut docs, mut tokens) = (0u64, 0u64);
        for p in &self.parts {
            for (frag, r) in &p.fragments {
                if stale_frags.contains(*frag) {
                    for d in r.clone() {
                        if p.counts_doc(d, valid, stale) {
                            docs += 1;
                            tokens += p.lens[d as usize] as u64;
                        }
                    }
                } else if valid.contains(*frag) {
                    docs += (r.end - r.start) as u64;
                    tokens += p.fragment_tokens.get(frag).copied().unwrap_or(0);
                }
            }
        }
        (docs, tokens)
    }

    /// The dictionary's terms that fuzzy term `f` matches (any
    /// partition; terms of docs outside the fragments searched included:
    /// weigh them by [`FtsSegment::df`]).
    pub fn fuzzy_terms(&self, f: &super::search::Fuzzy) -> Result<Vec<String>> {
        use fst::{IntoStreamer, Streamer};
        let a = f.automaton()?;
        let mut out = std::collections::BTreeSet::new();
        for p in &self.parts {
            let mut st = p.tokens.search(&a).into_stream();
            while let Some((k, _)) = st.next() {
                out.insert(String::from_utf8_lossy(k).into_owned());
            }
        }
        Ok(out.into_iter().collect())
    }

    /// Documents holding `term` in fragments `valid` (`stale` as for
    /// [`Self::counts`]).
    pub async fn df(
        &self,
        term: &str,
        valid: &RoaringBitmap,
        stale: &RowSet,
        cache: &IndexCache,
    ) -> Result<u64> {
        let stale_frags = fragments_of(stale);
        let mut n = 0u64;
        for p in &self.parts {
            let Some(list) = p.posting(term, cache).await? else {
                continue;
            };
            if p.fragments
                .keys()
                .all(|f| valid.contains(*f) && !stale_frags.contains(*f))
            {
                n += list.df as u64;
                continue;
            }
            let (mut docs, mut freqs) = (vec![], vec![]);
            for b in 0..list.blocks.len() {
                list.decode(b, &mut docs, &mut freqs)?;
                n += docs
                    .iter()
                    .filter(|d| p.counts_doc(**d, valid, stale))
                    .count() as u64;
            }
        }
        Ok(n)
    }
}

/// The fragments `rows` has rows in.
fn fragments_of(rows: &RowSet) -> RoaringBitmap {
    rows.fragments().map(|(f, _)| f.0).collect()
}

impl Partition {
    async fn load(
        store: &Arc<dyn ObjectStore>,
        root: &Path,
        meta: &IndexMetadata,
        id: u64,
        positions: bool,
    ) -> Result<Partition> {
        let tf = tokens_file(id);
        let (_, t) = crate::io::read_all(store, root, meta, &tf).await?;
        let fst_bytes = t
            .column_by_name("_token_fst_bytes")
            .and_then(|c| {
                c.as_binary_opt::<i64>()
                    .map(|a| a.value(0).to_vec())
                    .or_else(|| c.as_binary_opt::<i32>().map(|a| a.value(0).to_vec()))
            })
            .filter(|_| t.num_rows() == 1)
            .ok_or_else(|| {
                corrupt(
                    meta,
                    &tf,
                    "no _token_fst_bytes (token sets other than fst are not supported)",
                )
            })?;
        let tokens = fst::Map::new(fst_bytes)
            .map_err(|e| corrupt(meta, &tf, format!("token dictionary: {e}")))?;
        let df = docs_file(id);
        let (_, d) = crate::io::read_all(store, root, meta, &df).await?;
        let rowaddrs = read_u64s(&d, "_rowid").ok_or_else(|| corrupt(meta, &df, "no _rowid"))?;
        let lens = d
            .column_by_name("_num_tokens")
            .and_then(|c| c.as_primitive_opt::<UInt32Type>())
            .map(|a| a.values().to_vec())
            .ok_or_else(|| corrupt(meta, &df, "no _num_tokens"))?;
        if rowaddrs.windows(2).any(|w| w[0] >= w[1]) {
            return Err(corrupt(meta, &df, "row addresses are not ascending"));
        }
        let mut fragments: BTreeMap<u32, Range<u32>> = BTreeMap::new();
        for (i, a) in rowaddrs.iter().enumerate() {
            let f = (a >> 32) as u32;
            let e = fragments.entry(f).or_insert(i as u32..i as u32);
            e.end = i as u32 + 1;
        }
        let mut fragment_tokens = BTreeMap::new();
        for (f, r) in &fragments {
            let t: u64 = lens[r.start as usize..r.end as usize]
                .iter()
                .map(|l| *l as u64)
                .sum();
            fragment_tokens.insert(*f, t);
        }
        let total_tokens = fragment_tokens.values().sum();
        let min_len = lens.iter().copied().filter(|l| *l > 0).min().unwrap_or(1);
        let inf = invert_file(id);
        let invert = crate::io::open(store, root, meta, &inf).await?;
        Ok(Partition {
            id,
            tokens,
            rowaddrs,
            lens,
            fragments,
            fragment_tokens,
            total_tokens,
            min_len,
            invert,
            positions,
            cache_key: format!("fts/{}/{id}/", meta.uuid),
        })
    }

    /// Whether doc `d` is a row of a fragment in `valid` and not in
    /// `stale`.
    fn counts_doc(&self, d: u32, valid: &RoaringBitmap, stale: &RowSet) -> bool {
        let a = self.rowaddrs[d as usize];
        valid.contains((a >> 32) as u32) && !stale.contains(RowAddress::from_u64(a))
    }

    /// Every token of this partition's dictionary, in byte order.
    pub fn terms(&self) -> Vec<String> {
        use fst::Streamer;
        let mut out = Vec::with_capacity(self.tokens.len());
        let mut s = self.tokens.stream();
        while let Some((k, _)) = s.next() {
            out.push(String::from_utf8_lossy(k).into_owned());
        }
        out
    }

    /// The fragment doc `d` is in.
    pub fn fragment_of(&self, d: u32) -> u32 {
        (self.rowaddrs[d as usize] >> 32) as u32
    }

    /// Docs in this partition.
    pub fn num_docs(&self) -> usize {
        self.rowaddrs.len()
    }

    /// The posting list of `term` (`None`: not in this partition).
    pub async fn posting(
        &self,
        term: &str,
        cache: &IndexCache,
    ) -> Result<Option<Arc<PostingList>>> {
        let Some(id) = self.tokens.get(term.as_bytes()) else {
            return Ok(None);
        };
        let key = format!("{}{id}", self.cache_key);
        if let Some(p) = cache.get::<PostingList>(&key) {
            return Ok(Some(p));
        }
        let schema = self.invert.schema().clone();
        let idx = |n: &str| {
            schema
                .index_of(n)
                .map_err(|_| Error::InvalidInput(format!("corrupt inverted index: no {n} column")))
        };
        let mut proj = vec![idx("_posting")?, idx("_max_score")?, idx("_length")?];
        if self.positions {
            proj.push(idx("_compressed_position")?);
            proj.push(idx("_position_block_offset")?);
        }
        if id >= self.invert.num_rows() {
            return Err(Error::InvalidInput(format!(
                "corrupt inverted index: token id {id} past the {} posting lists",
                self.invert.num_rows()
            )));
        }
        let b = self.invert.take(&[id], Some(&proj)).await?;
        let bad =
            || Error::InvalidInput("corrupt inverted index: unexpected posting column type".into());
        let lists = b.column(0).as_list_opt::<i32>().ok_or_else(bad)?;
        let values = lists.value(0);
        let blocks: Vec<Vec<u8>> = match values.as_binary_opt::<i64>() {
            Some(a) => a.iter().map(|v| v.unwrap_or_default().to_vec()).collect(),
            None => values
                .as_binary_opt::<i32>()
                .ok_or_else(bad)?
                .iter()
                .map(|v| v.unwrap_or_default().to_vec())
                .collect(),
        };
        let max_score = b
            .column(1)
            .as_primitive_opt::<Float32Type>()
            .ok_or_else(bad)?
            .value(0);
        let df = b
            .column(2)
            .as_primitive_opt::<UInt32Type>()
            .ok_or_else(bad)?
            .value(0);
        if df == 0 || blocks.len() != (df as usize).div_ceil(BLOCK) {
            return Err(Error::InvalidInput(format!(
                "corrupt inverted index: token '{term}' has {} blocks for {df} documents",
                blocks.len()
            )));
        }
        let mut first_docs = Vec::with_capacity(blocks.len());
        let mut block_max = Vec::with_capacity(blocks.len());
        for (i, blk) in blocks.iter().enumerate() {
            let full = i + 1 < blocks.len() || (df as usize).is_multiple_of(BLOCK);
            let (m, f) = posting::block_header(blk, full)?;
            if f as usize >= self.rowaddrs.len() {
                return Err(Error::InvalidInput(format!(
                    "corrupt inverted index: token '{term}' names doc {f} of {}",
                    self.rowaddrs.len()
                )));
            }
            block_max.push(m);
            first_docs.push(f);
        }
        let positions = if self.positions {
            let bytes = match b.column(3).as_binary_opt::<i64>() {
                Some(a) => a.value(0).to_vec(),
                None => b
                    .column(3)
                    .as_binary_opt::<i32>()
                    .ok_or_else(bad)?
                    .value(0)
                    .to_vec(),
            };
            let offs = b.column(4).as_list_opt::<i32>().ok_or_else(bad)?.value(0);
            let offs = offs
                .as_primitive_opt::<UInt32Type>()
                .ok_or_else(bad)?
                .values()
                .to_vec();
            Some((bytes, offs))
        } else {
            None
        };
        let list = Arc::new(PostingList {
            blocks,
            first_docs,
            block_max,
            df,
            max_score,
            positions,
        });
        let bytes = list.bytes();
        cache.insert(key, list.clone(), bytes);
        Ok(Some(list))
    }
}
