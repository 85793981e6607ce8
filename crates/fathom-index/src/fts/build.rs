//! Building an inverted index segment: the column is streamed, each batch
//! tokenized on every core, the postings gathered in memory (the size of
//! the index, not of the column) and written as one partition.

use std::sync::Arc;

use arrow_array::builder::{BinaryBuilder, LargeBinaryBuilder, ListBuilder, UInt32Builder};
use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use arrow_array::{
    Array, ArrayRef, Float32Array, LargeBinaryArray, RecordBatch, UInt32Array, UInt64Array,
};
use arrow_schema::DataType;
use fathom_table::format::{IndexFile, IndexMetadata};
use fathom_table::{Dataset, ROW_ADDR, ROW_ID};
use futures::TryStreamExt;
use rustc_hash::FxHashMap;

use super::analyzer::{Analyzer, FtsParams};
use super::posting::{self, BLOCK};
use super::segment::FtsSegment;
use crate::cache::IndexCache;
use crate::error::{Error, Result};
use crate::io::SegmentDir;
use crate::kind::RemapFn;
use crate::kind::SegmentRef;
use crate::lifecycle::segment_metadata;
use crate::vector::ProgressFn;
use crate::vector::build::cpu;
use crate::vector::kmeans::par_ranges;

pub const METADATA_FILE: &str = "metadata.lance";

pub fn tokens_file(part: u64) -> String {
    format!("part_{part}_tokens.lance")
}
pub fn docs_file(part: u64) -> String {
    format!("part_{part}_docs.lance")
}
pub fn invert_file(part: u64) -> String {
    format!("part_{part}_invert.lance")
}

/// Checks that `column` holds text.
pub fn text_column(ds: &Dataset, column: &str) -> Result<()> {
    let field = ds
        .schema()
        .field_with_name(column)
        .map_err(|_| Error::InvalidInput(format!("no column named '{column}' to index")))?;
    match field.data_type() {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Ok(()),
        t => Err(Error::InvalidInput(format!(
            "an INVERTED index needs a text column; '{column}' is {t}"
        ))),
    }
}

/// One token's postings while building.
#[derive(Default)]
struct Postings {
    docs: Vec<u32>,
    freqs: Vec<u32>,
    /// Every document's positions, one after another (`freqs` apart).
    positions: Vec<u32>,
}

/// The rows of one worker's share of a batch, analyzed: a local token
/// dictionary with each token's postings (documents as row offsets in the
/// batch, ascending) and every row's token count (0: empty or NULL).
struct Local {
    tokens: Vec<String>,
    postings: Vec<Postings>,
    lens: Vec<u32>,
}

fn analyze_rows(
    a: &Analyzer,
    texts: &ArrayRef,
    rows: std::ops::Range<usize>,
    positions: bool,
) -> Local {
    let get = |i: usize| -> Option<&str> {
        if texts.is_null(i) {
            return None;
        }
        Some(match texts.data_type() {
            DataType::LargeUtf8 => texts.as_string::<i64>().value(i),
            DataType::Utf8View => texts.as_string_view().value(i),
            _ => texts.as_string::<i32>().value(i),
        })
    };
    let mut local = Local {
        tokens: Vec::new(),
        postings: Vec::new(),
        lens: Vec::with_capacity(rows.len()),
    };
    let mut ids: FxHashMap<String, u32> = FxHashMap::default();
    for i in rows {
        let row = i as u32;
        let mut len = 0u32;
        if let Some(t) = get(i) {
            a.analyze(t, |tok, pos| {
                len += 1;
                let id = match ids.get(tok) {
                    Some(id) => *id,
                    None => {
                        let id = local.tokens.len() as u32;
                        ids.insert(tok.to_string(), id);
                        local.tokens.push(tok.to_string());
                        local.postings.push(Postings::default());
                        id
                    }
                };
                let p = &mut local.postings[id as usize];
                if p.docs.last() == Some(&row) {
                    *p.freqs.last_mut().expect("one per doc") += 1;
                    if positions {
                        p.positions.push(pos);
                    }
                } else {
                    p.docs.push(row);
                    p.freqs.push(1);
                    if positions {
                        p.positions.push(pos);
                    }
                }
            });
        }
        local.lens.push(len);
    }
    local
}

/// What a built partition holds before it is written.
struct Built {
    tokens: Vec<String>,
    postings: Vec<Postings>,
    rowaddrs: Vec<u64>,
    lens: Vec<u32>,
}

/// Builds one segment of inverted index `name` on `column` over
/// `fragments`.
pub async fn build_fts_segment(
    ds: &Dataset,
    name: &str,
    column: &str,
    params: &FtsParams,
    mut fragments: Vec<u64>,
    progress: Option<&ProgressFn>,
) -> Result<IndexMetadata> {
    text_column(ds, column)?;
    let analyzer = Analyzer::new(params)?;
    let field_id = ds.manifest().schema.fields[ds.schema().index_of(column)?].id;
    let id_column = if ds.manifest().uses_stable_row_ids() {
        ROW_ID
    } else {
        ROW_ADDR
    };
    fragments.sort_unstable();
    let total: u64 = fragments
        .iter()
        .filter_map(|id| ds.fragment(*id))
        .map(|f| f.num_rows())
        .sum();
    let report = |phase: &str, done: u64| {
        if let Some(p) = progress {
            p(phase, done, total)
        }
    };
    // Rows come in row-address order (fragments ascending, offsets
    // ascending), which is the docs file's order.
    let mut stream = Box::pin(
        ds.scan()
            .project(&[column, id_column])?
            .with_fragments(fragments.clone())
            .batch_size(16 * 1024)
            .try_into_stream()
            .await?
            .map_err(Error::from),
    );
    let mut built = Built {
        tokens: Vec::new(),
        postings: Vec::new(),
        rowaddrs: Vec::new(),
        lens: Vec::new(),
    };
    let mut ids: FxHashMap<String, u32> = FxHashMap::default();
    let mut done = 0u64;
    report("tokenizing", 0);
    while let Some(b) = stream.try_next().await? {
        let texts = b.column(0).clone();
        let addrs = b.column(1).as_primitive::<UInt64Type>().clone();
        let n = b.num_rows();
        let positions = params.with_position;
        let locals: Vec<(usize, Local)> = cpu(|| {
            par_ranges(n, |r| {
                (r.start, analyze_rows(&analyzer, &texts, r, positions))
            })
        });
        // Merged in row order, so every token's documents stay ascending;
        // a row without tokens is no document.
        for (start, local) in locals {
            let mut doc_of = Vec::with_capacity(local.lens.len());
            for (i, len) in local.lens.iter().enumerate() {
                doc_of.push(built.rowaddrs.len() as u32);
                if *len > 0 {
                    built.rowaddrs.push(addrs.value(start + i));
                    built.lens.push(*len);
                }
            }
            for (tok, p) in local.tokens.into_iter().zip(local.postings) {
                let id = match ids.get(tok.as_str()) {
                    Some(id) => *id,
                    None => {
                        let id = built.tokens.len() as u32;
                        ids.insert(tok.clone(), id);
                        built.tokens.push(tok);
                        built.postings.push(Postings::default());
                        id
                    }
                };
                let g = &mut built.postings[id as usize];
                g.docs
                    .extend(p.docs.iter().map(|r| doc_of[*r as usize - start]));
                g.freqs.extend_from_slice(&p.freqs);
                g.positions.extend_from_slice(&p.positions);
            }
        }
        done += n as u64;
        report("tokenizing", done);
    }
    report("writing", done);
    let uuid = uuid::Uuid::new_v4();
    let dir = SegmentDir::new(ds.store().clone(), ds.root(), &uuid);
    let files = write_partition(&dir, params, &built, 0).await?;
    let mut all = vec![write_metadata(&dir, params, &[0]).await?];
    all.extend(files);
    Ok(segment_metadata(
        ds,
        name,
        field_id,
        &fragments,
        super::details(params),
        super::INDEX_VERSION,
        all,
        uuid,
    ))
}

/// The files of a copy of inverted segment `seg`, each doc's row address
/// `a` replaced by `map(a)` and docs mapping to `None` left out of the
/// docs and every posting list, written in `dir` without tokenizing the
/// table again (as Lance remaps), and their `index_details`: partitions
/// keep their ids, block maxima are scored again under each partition's
/// new statistics.
pub(crate) async fn remap_fts_files(
    seg: SegmentRef<'_>,
    dir: &SegmentDir,
    map: &RemapFn<'_>,
) -> Result<(Vec<IndexFile>, prost_types::Any)> {
    let cache = IndexCache::new(0);
    let seg = FtsSegment::load(seg.store, seg.root, seg.meta, &cache).await?;
    let mut files = vec![];
    let mut parts = vec![];
    for part in &seg.parts {
        // New doc ids follow the new addresses (the docs file is in
        // row-address order); a compaction may reorder documents.
        let mut kept: Vec<(u64, u32)> = (0..part.num_docs() as u32)
            .filter_map(|d| map(part.rowaddrs[d as usize]).map(|a| (a, d)))
            .collect();
        kept.sort_unstable();
        let mut new_doc = vec![u32::MAX; part.num_docs()];
        for (i, (_, d)) in kept.iter().enumerate() {
            new_doc[*d as usize] = i as u32;
        }
        let mut built = Built {
            tokens: vec![],
            postings: vec![],
            rowaddrs: kept.iter().map(|(a, _)| *a).collect(),
            lens: kept.iter().map(|(_, d)| part.lens[*d as usize]).collect(),
        };
        let (mut docs, mut freqs, mut pos) = (vec![], vec![], vec![]);
        for term in part.terms() {
            let Some(list) = part.posting(&term, &cache).await? else {
                continue;
            };
            // (new doc, freq, positions)
            let mut rows: Vec<(u32, u32, Vec<u32>)> = Vec::with_capacity(list.df as usize);
            for b in 0..list.blocks.len() {
                list.decode(b, &mut docs, &mut freqs)?;
                if seg.params.with_position {
                    list.block_positions(b, &freqs, &mut pos)?;
                }
                let mut at = 0usize;
                for (d, f) in docs.iter().zip(&freqs) {
                    let n = new_doc[*d as usize];
                    if n != u32::MAX {
                        let p = if seg.params.with_position {
                            pos[at..at + *f as usize].to_vec()
                        } else {
                            vec![]
                        };
                        rows.push((n, *f, p));
                    }
                    at += *f as usize;
                }
            }
            // A token whose every document is gone leaves the dictionary.
            if rows.is_empty() {
                continue;
            }
            rows.sort_unstable_by_key(|r| r.0);
            let mut p = Postings::default();
            for (d, f, ps) in rows {
                p.docs.push(d);
                p.freqs.push(f);
                p.positions.extend(ps);
            }
            built.tokens.push(term);
            built.postings.push(p);
        }
        files.extend(write_partition(dir, &seg.params, &built, part.id).await?);
        parts.push(part.id);
    }
    let mut all = vec![write_metadata(dir, &seg.params, &parts).await?];
    all.extend(files);
    Ok((all, super::details(&seg.params)))
}

/// The schema metadata every inverted file of format 2 carries.
fn format_metadata(params: &FtsParams) -> Vec<(&'static str, String)> {
    let mut m = vec![
        ("format_version", "2".to_string()),
        ("posting_tail_codec", "varint_delta_v1".to_string()),
        ("posting_block_size", BLOCK.to_string()),
    ];
    if params.with_position {
        m.push(("positions_codec", "packed_delta_v1".to_string()));
        m.push(("positions_layout", "shared_stream_v2".to_string()));
    }
    m
}

async fn write_metadata(dir: &SegmentDir, params: &FtsParams, parts: &[u64]) -> Result<IndexFile> {
    let mut empty = Vec::new();
    roaring::RoaringBitmap::new()
        .serialize_into(&mut empty)
        .map_err(|e| Error::InvalidInput(e.to_string()))?;
    let mut b = BinaryBuilder::new();
    b.append_value(&empty);
    let batch = batch(vec![(
        "deleted_fragments",
        Arc::new(b.finish()) as ArrayRef,
    )])?;
    let mut meta = vec![
        (
            "partitions",
            serde_json::to_string(parts).unwrap_or_default(),
        ),
        ("params", params.to_json()),
        ("token_set_format", "fst".to_string()),
    ];
    meta.extend(format_metadata(params));
    dir.write(METADATA_FILE, &batch, &meta, vec![]).await
}

fn batch(columns: Vec<(&str, ArrayRef)>) -> Result<RecordBatch> {
    let fields: Vec<arrow_schema::Field> = columns
        .iter()
        .map(|(n, a)| arrow_schema::Field::new(*n, a.data_type().clone(), false))
        .collect();
    Ok(RecordBatch::try_new(
        Arc::new(arrow_schema::Schema::new(fields)),
        columns.into_iter().map(|(_, a)| a).collect(),
    )?)
}

/// One token's posting list, encoded for the `invert` file.
struct EncodedPosting {
    /// Blocks of 128 documents with their block-max scores.
    blocks: Vec<Vec<u8>>,
    /// The list's maximum score.
    max: f32,
    impacts: Vec<Vec<u8>>,
    /// Compressed positions and their per-block offsets.
    positions: Option<(Vec<u8>, Vec<u32>)>,
}

async fn write_partition(
    dir: &SegmentDir,
    params: &FtsParams,
    b: &Built,
    part: u64,
) -> Result<Vec<IndexFile>> {
    // Tokens: an fst map (keys sorted) from token to id.
    let mut order: Vec<usize> = (0..b.tokens.len()).collect();
    order.sort_unstable_by(|x, y| b.tokens[*x].as_bytes().cmp(b.tokens[*y].as_bytes()));
    let mut fst = fst::MapBuilder::memory();
    for i in &order {
        fst.insert(b.tokens[*i].as_bytes(), *i as u64)
            .map_err(|e| Error::InvalidInput(format!("token dictionary: {e}")))?;
    }
    let fst = fst
        .into_inner()
        .map_err(|e| Error::InvalidInput(format!("token dictionary: {e}")))?;
    let total_len: u64 = b.tokens.iter().map(|t| t.len() as u64).sum();
    let tokens = batch(vec![
        (
            "_token_fst_bytes",
            Arc::new(LargeBinaryArray::from_vec(vec![fst.as_slice()])) as ArrayRef,
        ),
        (
            "_token_next_id",
            Arc::new(UInt32Array::from(vec![b.tokens.len() as u32])),
        ),
        (
            "_token_total_length",
            Arc::new(UInt64Array::from(vec![total_len])),
        ),
    ])?;
    let tokens = dir.write(&tokens_file(part), &tokens, &[], vec![]).await?;

    let total_tokens: u64 = b.lens.iter().map(|l| *l as u64).sum();
    let docs = batch(vec![
        (
            "_rowid",
            Arc::new(UInt64Array::from(b.rowaddrs.clone())) as ArrayRef,
        ),
        ("_num_tokens", Arc::new(UInt32Array::from(b.lens.clone()))),
    ])?;
    let docs = dir
        .write(
            &docs_file(part),
            &docs,
            &[("total_tokens", total_tokens.to_string())],
            vec![],
        )
        .await?;

    // Postings, scored with this partition's own statistics (as Lance).
    let n_docs = b.rowaddrs.len() as u64;
    let avgdl = if n_docs == 0 {
        0.0
    } else {
        total_tokens as f32 / n_docs as f32
    };
    let encoded: Vec<EncodedPosting> = cpu(|| {
        par_ranges(b.postings.len(), |r| {
            r.map(|t| {
                let p = &b.postings[t];
                let idf = posting::idf(p.docs.len() as u64, n_docs);
                let mut blocks = Vec::new();
                let mut max = 0f32;
                for (docs, freqs) in p.docs.chunks(BLOCK).zip(p.freqs.chunks(BLOCK)) {
                    let bmax = docs
                        .iter()
                        .zip(freqs)
                        .map(|(d, f)| posting::bm25(idf, *f, b.lens[*d as usize], avgdl))
                        .fold(0f32, f32::max);
                    max = max.max(bmax);
                    let mut out = Vec::new();
                    posting::encode_block(docs, freqs, bmax, &mut out);
                    blocks.push(out);
                }
                let norms: Vec<u32> = p
                    .docs
                    .iter()
                    .map(|d| posting::norm(b.lens[*d as usize]))
                    .collect();
                let impacts = posting::encode_impacts(&p.docs, &p.freqs, &norms);
                let positions = params
                    .with_position
                    .then(|| posting::encode_positions(&p.freqs, &p.positions));
                EncodedPosting {
                    blocks,
                    max,
                    impacts,
                    positions,
                }
            })
            .collect::<Vec<_>>()
        })
        .into_iter()
        .flatten()
        .collect()
    });
    let list_of_binary = |lists: &mut dyn Iterator<Item = &Vec<Vec<u8>>>| {
        let mut lb = ListBuilder::new(LargeBinaryBuilder::new());
        for l in lists {
            for v in l {
                lb.values().append_value(v);
            }
            lb.append(true);
        }
        let a = lb.finish();
        // Lists and their items are never null.
        let item = arrow_schema::Field::new("item", DataType::LargeBinary, false);
        Arc::new(arrow_array::ListArray::new(
            Arc::new(item),
            a.offsets().clone(),
            a.values().clone(),
            None,
        )) as ArrayRef
    };
    let mut columns = vec![
        (
            "_posting",
            list_of_binary(&mut encoded.iter().map(|e| &e.blocks)),
        ),
        (
            "_max_score",
            Arc::new(Float32Array::from_iter_values(
                encoded.iter().map(|e| e.max),
            )) as ArrayRef,
        ),
        (
            "_length",
            Arc::new(UInt32Array::from_iter_values(
                b.postings.iter().map(|p| p.docs.len() as u32),
            )),
        ),
        (
            "_impacts",
            list_of_binary(&mut encoded.iter().map(|e| &e.impacts)),
        ),
    ];
    if params.with_position {
        let pos: Vec<&[u8]> = encoded
            .iter()
            .map(|e| e.positions.as_ref().map_or(&[][..], |p| p.0.as_slice()))
            .collect();
        columns.push((
            "_compressed_position",
            Arc::new(LargeBinaryArray::from_vec(pos)),
        ));
        let mut ob = ListBuilder::new(UInt32Builder::new());
        for e in &encoded {
            if let Some((_, offs)) = &e.positions {
                ob.values().append_slice(offs);
            }
            ob.append(true);
        }
        let a = ob.finish();
        let item = arrow_schema::Field::new("item", DataType::UInt32, false);
        columns.push((
            "_position_block_offset",
            Arc::new(arrow_array::ListArray::new(
                Arc::new(item),
                a.offsets().clone(),
                a.values().clone(),
                None,
            )),
        ));
    }
    let invert = batch(columns)?;
    let invert = dir
        .write(
            &invert_file(part),
            &invert,
            &format_metadata(params),
            vec![],
        )
        .await?;
    Ok(vec![tokens, docs, invert])
}
