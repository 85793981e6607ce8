//! Posting lists as Lance's inverted index stores them (format 2;
//! research: lance-index-bytes.md 3.4 - 3.6): blocks of 128 documents,
//! each with its block-max score; full blocks bit-packed (BitPacker4x:
//! doc-id deltas, then raw term frequencies), the tail block LEB128
//! varints; impacts per block and per 32 blocks; positions per block.

use bitpacking::{BitPacker, BitPacker4x};

use crate::error::{Error, Result};

/// Documents per posting block.
pub const BLOCK: usize = 128;
/// Blocks per impact group.
const GROUP: usize = 32;

pub const K1: f32 = 1.2;
pub const B: f32 = 0.75;

/// BM25 inverse document frequency of a term in `n` of `docs` documents.
pub fn idf(n: u64, docs: u64) -> f32 {
    let (n, docs) = (n as f64, docs as f64);
    (((docs - n + 0.5) / (n + 0.5)) + 1.0).ln() as f32
}

/// BM25 of one term in one document.
pub fn bm25(idf: f32, tf: u32, doc_len: u32, avgdl: f32) -> f32 {
    let tf = tf as f32;
    idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * doc_len as f32 / avgdl))
}

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn get_varint(buf: &[u8], pos: &mut usize) -> Result<u64> {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let b = *buf
            .get(*pos)
            .ok_or_else(|| corrupt("a varint runs past the end of its block"))?;
        *pos += 1;
        if shift >= 64 {
            return Err(corrupt("a varint is longer than 10 bytes"));
        }
        v |= ((b & 0x7f) as u64) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
        shift += 7;
    }
}

fn corrupt(msg: &str) -> Error {
    Error::InvalidInput(format!("corrupt inverted index posting list: {msg}"))
}

/// Lucene's `SmallFloat.longToInt4`: a document length in 4 bits of
/// mantissa (exact below 8).
pub fn norm(len: u32) -> u32 {
    if len < 8 {
        return len;
    }
    let bits = 32 - len.leading_zeros();
    let shift = bits - 4;
    ((len >> shift) & 7) | ((shift + 1) << 3)
}

/// Encodes one block: `docs` ascending, `freqs` beside them.
pub fn encode_block(docs: &[u32], freqs: &[u32], max_score: f32, out: &mut Vec<u8>) {
    out.extend_from_slice(&max_score.to_le_bytes());
    if docs.len() == BLOCK {
        let bp = BitPacker4x::new();
        let first = docs[0];
        out.extend_from_slice(&first.to_le_bytes());
        let bw = bp.num_bits_sorted(first, docs);
        out.push(bw);
        let start = out.len();
        out.resize(start + 16 * bw as usize, 0);
        bp.compress_sorted(first, docs, &mut out[start..], bw);
        let bw = bp.num_bits(freqs);
        out.push(bw);
        let start = out.len();
        out.resize(start + 16 * bw as usize, 0);
        bp.compress(freqs, &mut out[start..], bw);
    } else {
        let mut prev = 0;
        for (i, d) in docs.iter().enumerate() {
            put_varint(out, if i == 0 { *d } else { d - prev } as u64);
            prev = *d;
        }
        for f in freqs {
            put_varint(out, *f as u64);
        }
    }
}

/// A block's max score and first document, read without decoding it.
pub fn block_header(block: &[u8], full: bool) -> Result<(f32, u32)> {
    if block.len() < 4 {
        return Err(corrupt("a block is shorter than its header"));
    }
    let max = f32::from_le_bytes(block[0..4].try_into().unwrap());
    let first = if full {
        u32::from_le_bytes(
            block
                .get(4..8)
                .ok_or_else(|| corrupt("a full block is shorter than its header"))?
                .try_into()
                .unwrap(),
        )
    } else {
        let mut pos = 4;
        get_varint(block, &mut pos)? as u32
    };
    Ok((max, first))
}

/// Decodes a block of `n` documents (`n` = 128 for a full block) into
/// `docs` and `freqs` (their old contents replaced).
pub fn decode_block(
    block: &[u8],
    n: usize,
    docs: &mut Vec<u32>,
    freqs: &mut Vec<u32>,
) -> Result<()> {
    if n != BLOCK {
        docs.clear();
        freqs.clear();
    }
    if n == BLOCK {
        let bp = BitPacker4x::new();
        let take = |pos: usize| -> Result<(u8, usize)> {
            let bw = *block
                .get(pos)
                .ok_or_else(|| corrupt("a full block is truncated"))?;
            if bw > 32 {
                return Err(corrupt("a bit width is over 32"));
            }
            let end = pos + 1 + 16 * bw as usize;
            if end > block.len() {
                return Err(corrupt("a full block is truncated"));
            }
            Ok((bw, end))
        };
        if block.len() < 9 {
            return Err(corrupt("a full block is truncated"));
        }
        let first = u32::from_le_bytes(block[4..8].try_into().unwrap());
        let (bw, end) = take(8)?;
        // Every value is overwritten: a block-sized vector is reused as is.
        docs.resize(BLOCK, 0);
        bp.decompress_sorted(first, &block[9..end], docs, bw);
        let (fbw, fend) = take(end)?;
        freqs.resize(BLOCK, 0);
        bp.decompress(&block[end + 1..fend], freqs, fbw);
    } else {
        let mut pos = 4;
        let mut prev = 0u64;
        for i in 0..n {
            let v = get_varint(block, &mut pos)?;
            let d = if i == 0 { v } else { prev + v };
            if d > u32::MAX as u64 {
                return Err(corrupt("a document id is out of range"));
            }
            docs.push(d as u32);
            prev = d;
        }
        for _ in 0..n {
            freqs.push(get_varint(block, &mut pos)? as u32);
        }
    }
    Ok(())
}

/// The `_impacts` entries of a posting list: one per block, then one per
/// group of 32 blocks; each the Pareto set of (frequency up, norm down).
pub fn encode_impacts(docs: &[u32], freqs: &[u32], norms: &[u32]) -> Vec<Vec<u8>> {
    let blocks = docs.len().div_ceil(BLOCK);
    let mut out = Vec::with_capacity(blocks + blocks.div_ceil(GROUP));
    let entry = |range: std::ops::Range<usize>| {
        let mut pairs: Vec<(u32, u32)> = range.clone().map(|i| (freqs[i], norms[i])).collect();
        // Best first: highest frequency, then lowest norm; keep a pair only
        // when its norm is below every pair with a higher frequency.
        pairs.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut front: Vec<(u32, u32)> = Vec::new();
        for (tf, n) in pairs {
            if front.last().is_none_or(|&(_, best)| n < best) {
                front.push((tf, n));
            }
        }
        front.reverse();
        let mut e = Vec::new();
        put_varint(&mut e, docs[range.end - 1] as u64);
        put_varint(&mut e, front.len() as u64);
        let (mut ptf, mut pn) = (0u32, 0u32);
        for (tf, n) in front {
            let df = (tf - ptf - 1) as u64;
            let dn = n - pn;
            if dn == 1 {
                put_varint(&mut e, df << 1);
            } else {
                put_varint(&mut e, (df << 1) | 1);
                put_varint(&mut e, dn as u64);
            }
            ptf = tf;
            pn = n;
        }
        e
    };
    for b in 0..blocks {
        out.push(entry(b * BLOCK..((b + 1) * BLOCK).min(docs.len())));
    }
    for g in 0..blocks.div_ceil(GROUP) {
        out.push(entry(
            g * GROUP * BLOCK..((g + 1) * GROUP * BLOCK).min(docs.len()),
        ));
    }
    out
}

/// Appends `values` as Lance's position stream: chunks of 128 bit-packed
/// values (a width byte first), the rest as varints.
fn encode_stream(values: &[u32], out: &mut Vec<u8>) {
    let bp = BitPacker4x::new();
    let mut chunks = values.chunks_exact(BLOCK);
    for c in &mut chunks {
        let bw = bp.num_bits(c);
        out.push(bw);
        let start = out.len();
        out.resize(start + 16 * bw as usize, 0);
        bp.compress(c, &mut out[start..], bw);
    }
    for v in chunks.remainder() {
        put_varint(out, *v as u64);
    }
}

/// Positions of a posting list: one stream per block (each document's
/// positions delta-coded, restarting at each document) and the byte
/// offset of each block's stream. `freqs`: each document's position count;
/// `positions`: their positions, one document after another.
pub fn encode_positions(freqs: &[u32], positions: &[u32]) -> (Vec<u8>, Vec<u32>) {
    let mut bytes = Vec::new();
    let mut offsets = Vec::new();
    let mut values = Vec::new();
    let mut at = 0usize;
    for block in freqs.chunks(BLOCK) {
        offsets.push(bytes.len() as u32);
        values.clear();
        for f in block {
            let doc = &positions[at..at + *f as usize];
            at += *f as usize;
            let mut prev = 0;
            for (i, p) in doc.iter().enumerate() {
                values.push(if i == 0 { *p } else { p - prev });
                prev = *p;
            }
        }
        encode_stream(&values, &mut bytes);
    }
    (bytes, offsets)
}

/// Decodes one block's positions: `freqs` gives each document's count.
pub fn decode_positions(stream: &[u8], freqs: &[u32]) -> Result<Vec<Vec<u32>>> {
    let mut flat = Vec::new();
    decode_positions_into(stream, freqs, &mut flat)?;
    let mut out = Vec::with_capacity(freqs.len());
    let mut at = 0;
    for f in freqs {
        out.push(flat[at..at + *f as usize].to_vec());
        at += *f as usize;
    }
    Ok(out)
}

/// As [`decode_positions`], into one buffer: document `i`'s positions
/// are `out[sum(freqs[..i])..][..freqs[i]]`.
pub fn decode_positions_into(stream: &[u8], freqs: &[u32], out: &mut Vec<u32>) -> Result<()> {
    let total: usize = freqs.iter().map(|f| *f as usize).sum();
    let bp = BitPacker4x::new();
    out.clear();
    out.reserve(total);
    let mut pos = 0;
    while total - out.len() >= BLOCK {
        let bw = *stream
            .get(pos)
            .ok_or_else(|| corrupt("a position stream is truncated"))?;
        let end = pos + 1 + 16 * bw as usize;
        if bw > 32 || end > stream.len() {
            return Err(corrupt("a position stream is truncated"));
        }
        let mut chunk = [0u32; BLOCK];
        bp.decompress(&stream[pos + 1..end], &mut chunk, bw);
        out.extend_from_slice(&chunk);
        pos = end;
    }
    while out.len() < total {
        out.push(get_varint(stream, &mut pos)? as u32);
    }
    // Deltas within each document to absolute positions.
    let mut at = 0;
    for f in freqs {
        for i in at + 1..at + *f as usize {
            out[i] = out[i - 1].saturating_add(out[i]);
        }
        at += *f as usize;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn golden_tail_blocks_and_impacts() {
        // research 3.9: "quick" in docs 0 (tf 1, len 3) and 2 (tf 2, len 5)
        let mut b = Vec::new();
        encode_block(&[0, 2], &[1, 2], 0.586_293_2, &mut b);
        assert_eq!(hex(&b), "5017163f00020102");
        let imp = encode_impacts(&[0, 2], &[1, 2], &[3, 5]);
        assert_eq!(
            imp.iter().map(|e| hex(e)).collect::<Vec<_>>(),
            ["020201030102", "020201030102"]
        );
        let (mut d, mut f) = (vec![], vec![]);
        decode_block(&b, 2, &mut d, &mut f).unwrap();
        assert_eq!((d, f), (vec![0, 2], vec![1, 2]));
        // research 3.5: last doc 507, impacts (1,2),(2,3),(3,4)
        let imp = encode_impacts(&[500, 505, 507], &[1, 2, 3], &[2, 3, 4]);
        assert_eq!(hex(&imp[0]), "fb030301020000");
        let (p, o) = encode_positions(&[1, 2], &[1, 0, 1]);
        assert_eq!((hex(&p), o), ("010001".to_string(), vec![0]));
        assert_eq!(
            decode_positions(&p, &[1, 2]).unwrap(),
            vec![vec![1], vec![0, 1]]
        );
    }

    #[test]
    fn norms_match_lucene() {
        for (len, n) in [
            (3, 3),
            (7, 7),
            (18, 17),
            (21, 18),
            (36, 25),
            (64, 32),
            (117, 38),
            (130, 40),
        ] {
            assert_eq!(norm(len), n, "{len}");
        }
    }

    #[test]
    fn full_blocks_round_trip() {
        let docs: Vec<u32> = (0..BLOCK as u32).map(|i| 1000 + i * 7 + (i % 3)).collect();
        let freqs: Vec<u32> = (0..BLOCK as u32).map(|i| 1 + i % 5).collect();
        let mut b = Vec::new();
        encode_block(&docs, &freqs, 2.5, &mut b);
        assert_eq!(block_header(&b, true).unwrap(), (2.5, 1000));
        let (mut d, mut f) = (vec![], vec![]);
        decode_block(&b, BLOCK, &mut d, &mut f).unwrap();
        assert_eq!((d, f), (docs, freqs));
        assert!(decode_block(&b[..20], BLOCK, &mut vec![], &mut vec![]).is_err());
        let pos: Vec<Vec<u32>> = (0..300)
            .map(|i| (0..(i % 4 + 1)).map(|j| j * 3 + i % 2).collect())
            .collect();
        let freqs_all: Vec<u32> = pos.iter().map(|p| p.len() as u32).collect();
        let (bytes, offs) = encode_positions(&freqs_all, &pos.concat());
        assert_eq!(offs.len(), 3);
        for (bi, chunk) in pos.chunks(BLOCK).enumerate() {
            let end = offs.get(bi + 1).map_or(bytes.len(), |e| *e as usize);
            let freqs: Vec<u32> = chunk.iter().map(|p| p.len() as u32).collect();
            assert_eq!(
                decode_positions(&bytes[offs[bi] as usize..end], &freqs).unwrap(),
                chunk
            );
        }
    }
}
