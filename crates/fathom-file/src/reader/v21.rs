//! Structural pages of file formats 2.1 and 2.2: layouts and decompression.
//!
//! A 2.1+ page is a *layout* (how values and their repetition/definition
//! levels are arranged in the page's buffers) over a *compression tree*
//! (how a run of values is turned into bytes). Parsing resolves both into
//! the types here; the read path in `structural/` plans byte ranges from
//! them and calls the decoders below.
//!
//! | layout | page buffers | random access |
//! |---|---|---|
//! | MiniBlock | chunk metadata words, chunks, [dictionary], [repetition index] | whole chunks (≤ 32 Ki values) |
//! | FullZip | zipped `[control word][length][bytes]` per value, [row offsets] | the rows' bytes |
//! | Constant | [scalar], [rep levels], [def levels] | no data reads |
//!
//! Definition levels number the nullable layers from the inside: 0 is a
//! valid item, `k` means "null at the k-th nullable layer".

use std::ops::Range;
use std::sync::{Arc, OnceLock};

use arrow_array::ArrayRef;
use bytes::Bytes;
use lance_bitpacking::BitPacking;

use crate::encoding::decode::Ctx;
use crate::error::{Error, Result};
use crate::pb::encodings21 as pb;

/// Lance pads the parts of a mini-block chunk to 8 bytes.
const MINIBLOCK_ALIGN: usize = 8;
/// Most items a mini-block chunk holds: Lance logs chunk sizes in four
/// bits (up to 2^15), and a chunk's levels are counted in 16 bits.
const MAX_CHUNK_ITEMS: u64 = 1 << 16;
/// Values per bit-packing block.
const PACK_BLOCK: usize = 1024;

/// One structural layer of a column, innermost first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layer {
    AllValidItem,
    NullableItem,
    AllValidList,
    NullableList,
    EmptyableList,
    NullAndEmptyList,
}

impl Layer {
    fn from_pb(v: i32, path: &str) -> Result<Layer> {
        use pb::RepDefLayer as L;
        Ok(match L::try_from(v) {
            Ok(L::RepdefAllValidItem) => Layer::AllValidItem,
            Ok(L::RepdefNullableItem) => Layer::NullableItem,
            Ok(L::RepdefAllValidList) => Layer::AllValidList,
            Ok(L::RepdefNullableList) => Layer::NullableList,
            Ok(L::RepdefEmptyableList) => Layer::EmptyableList,
            Ok(L::RepdefNullAndEmptyList) => Layer::NullAndEmptyList,
            _ => {
                return Err(Error::corrupt(
                    path,
                    format!("unknown repetition/definition layer {v}"),
                ));
            }
        })
    }
    pub(crate) fn is_list(self) -> bool {
        !matches!(self, Layer::AllValidItem | Layer::NullableItem)
    }
    /// Definition levels this layer adds (null, and for lists empty).
    pub(crate) fn def_levels(self) -> u16 {
        match self {
            Layer::AllValidItem | Layer::AllValidList => 0,
            Layer::NullableItem | Layer::NullableList | Layer::EmptyableList => 1,
            Layer::NullAndEmptyList => 2,
        }
    }
}

/// General-purpose compression of one buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scheme {
    Lz4,
    Zstd,
}

/// A compression tree.
#[derive(Debug, Clone)]
pub(crate) enum Comp {
    Flat {
        bits: u64,
        general: Option<Scheme>,
    },
    /// Offsets then bytes; in a mini-block chunk the offsets (Flat 32/64)
    /// lead the chunk's one buffer.
    Variable {
        offsets: Box<Comp>,
        general: Option<Scheme>,
    },
    Constant(Option<Bytes>),
    OutOfLine {
        word_bits: u64,
        packed_bits: u64,
    },
    Inline {
        word_bits: u64,
    },
    Fsst {
        table: Arc<SymbolTable>,
        values: Box<Comp>,
    },
    General {
        scheme: Scheme,
        inner: Box<Comp>,
    },
    Fsl {
        dim: u64,
        has_validity: bool,
        values: Box<Comp>,
    },
    ByteStreamSplit {
        bits: u64,
    },
    /// Runs: `bits`-wide values and `len_bits`-wide run lengths.
    Rle {
        bits: u64,
        len_bits: u64,
    },
    /// A struct's children side by side in each full-zip value (2.2's
    /// variable packed struct); the reader splits the rows.
    VarPacked(Vec<PackedChild>),
}

/// One child of a variable packed struct: its per-value compression and
/// how its bytes sit in the row.
#[derive(Debug, Clone)]
pub(crate) struct PackedChild {
    pub(crate) comp: Comp,
    pub(crate) width: PackedWidth,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum PackedWidth {
    /// A fixed number of bytes.
    Fixed(usize),
    /// A little-endian length of this many bytes, then the value.
    Prefixed(usize),
}

fn scheme(b: &pb::BufferCompression, path: &str) -> Result<Scheme> {
    match pb::CompressionScheme::try_from(b.scheme) {
        Ok(pb::CompressionScheme::CompressionAlgorithmLz4) => Ok(Scheme::Lz4),
        Ok(pb::CompressionScheme::CompressionAlgorithmZstd) => Ok(Scheme::Zstd),
        _ => Err(Error::unsupported(
            path,
            format!("buffer compression scheme {}", b.scheme),
        )),
    }
}

impl Comp {
    pub(crate) fn from_pb(e: &pb::CompressiveEncoding, path: &str, depth: u32) -> Result<Comp> {
        use pb::compressive_encoding::Compression as C;
        if depth > 16 {
            return Err(Error::corrupt(
                path,
                "compression tree nested deeper than 16",
            ));
        }
        let child = |c: &Option<Box<pb::CompressiveEncoding>>, what: &str| -> Result<Box<Comp>> {
            match c {
                Some(c) => Ok(Box::new(Comp::from_pb(c, path, depth + 1)?)),
                None => Err(Error::corrupt(
                    path,
                    format!("compression lacks its {what}"),
                )),
            }
        };
        let Some(c) = &e.compression else {
            return Err(Error::unsupported(
                path,
                "a compression this reader does not know (newer than pylance 14?)",
            ));
        };
        Ok(match c {
            C::Flat(f) => {
                if f.bits_per_value == 0 || f.bits_per_value > 1 << 20 {
                    return Err(Error::corrupt(
                        path,
                        format!("flat values of {} bits", f.bits_per_value),
                    ));
                }
                Comp::Flat {
                    bits: f.bits_per_value,
                    general: f.data.as_ref().map(|b| scheme(b, path)).transpose()?,
                }
            }
            C::Variable(v) => Comp::Variable {
                offsets: child(&v.offsets, "offsets")?,
                general: v.values.as_ref().map(|b| scheme(b, path)).transpose()?,
            },
            C::Constant(c) => Comp::Constant(c.value.clone().map(Bytes::from)),
            C::OutOfLineBitpacking(o) => {
                // Values that are all zero pack into 0 bits: Lance writes
                // them as flat values of width 0 with no bytes (pylance 14
                // does so for the definition levels of a list page without
                // empty lists). Flat values of width 0 mean nothing alone.
                let zero_width = matches!(
                    o.values.as_deref().and_then(|v| v.compression.as_ref()),
                    Some(C::Flat(pb::Flat {
                        bits_per_value: 0,
                        data: None,
                    }))
                );
                let packed_bits = match zero_width {
                    true => 0,
                    false => match child(&o.values, "values")?.as_ref() {
                        Comp::Flat {
                            bits,
                            general: None,
                        } => *bits,
                        _ => {
                            return Err(Error::unsupported(
                                path,
                                "out-of-line bit-packing over anything but flat values",
                            ));
                        }
                    },
                };
                let word_bits = o.uncompressed_bits_per_value;
                if !matches!(word_bits, 8 | 16 | 32 | 64) || packed_bits > word_bits {
                    return Err(Error::corrupt(
                        path,
                        format!("bit-packing of {word_bits}-bit words into {packed_bits} bits"),
                    ));
                }
                Comp::OutOfLine {
                    word_bits,
                    packed_bits,
                }
            }
            C::InlineBitpacking(i) => {
                if i.values.is_some() {
                    return Err(Error::unsupported(path, "compressed inline bit-packing"));
                }
                if !matches!(i.uncompressed_bits_per_value, 8 | 16 | 32 | 64) {
                    return Err(Error::corrupt(
                        path,
                        format!(
                            "inline bit-packing of {}-bit words",
                            i.uncompressed_bits_per_value
                        ),
                    ));
                }
                Comp::Inline {
                    word_bits: i.uncompressed_bits_per_value,
                }
            }
            C::Fsst(f) => Comp::Fsst {
                table: Arc::new(SymbolTable::parse(&f.symbol_table, path)?),
                values: child(&f.values, "values")?,
            },
            C::General(g) => Comp::General {
                scheme: scheme(
                    g.compression.as_ref().ok_or_else(|| {
                        Error::corrupt(path, "general compression lacks a scheme")
                    })?,
                    path,
                )?,
                inner: child(&g.values, "values")?,
            },
            C::PackedStruct(ps) => {
                // Rows of the children's bits side by side: decoded as the
                // packed fixed-width values; the reader splits them.
                let inner = child(&ps.values, "values")?;
                let total: u64 = ps.bits_per_value.iter().sum();
                match inner.as_ref() {
                    Comp::Flat { bits, .. } if *bits == total => {}
                    Comp::Flat { bits, .. } => {
                        return Err(Error::corrupt(
                            path,
                            format!("packed struct of {total} bits stored in {bits}-bit values"),
                        ));
                    }
                    _ => {
                        return Err(Error::unsupported(
                            path,
                            "packed struct over a compression other than flat values",
                        ));
                    }
                }
                *inner
            }
            C::FixedSizeList(f) => {
                if f.items_per_value == 0 {
                    return Err(Error::corrupt(path, "fixed-size list of dimension 0"));
                }
                Comp::Fsl {
                    dim: f.items_per_value,
                    has_validity: f.has_validity,
                    values: child(&f.values, "values")?,
                }
            }
            C::ByteStreamSplit(b) => match child(&b.values, "values")?.as_ref() {
                Comp::Flat {
                    bits: bits @ (32 | 64),
                    general: None,
                } => Comp::ByteStreamSplit { bits: *bits },
                _ => return Err(Error::unsupported(path, "byte-stream split of this width")),
            },
            C::Dictionary(_) => {
                return Err(Error::unsupported(path, "dictionary as a compression step"));
            }
            C::Rle(r) => {
                let flat = |c: &Comp| match c {
                    Comp::Flat {
                        bits: b @ (8 | 16 | 32 | 64),
                        general: None,
                    } => Some(*b),
                    _ => None,
                };
                let values = Comp::from_pb(
                    r.values
                        .as_ref()
                        .ok_or_else(|| Error::corrupt(path, "run-length encoding lacks values"))?,
                    path,
                    depth + 1,
                )?;
                let lengths = Comp::from_pb(
                    r.run_lengths
                        .as_ref()
                        .ok_or_else(|| Error::corrupt(path, "run-length encoding lacks lengths"))?,
                    path,
                    depth + 1,
                )?;
                match (flat(&values), flat(&lengths)) {
                    (Some(bits), Some(len_bits @ (8 | 16 | 32))) => Comp::Rle { bits, len_bits },
                    _ => {
                        return Err(Error::unsupported(
                            path,
                            "run-length encoding over compressed values or lengths",
                        ));
                    }
                }
            }
            C::VariablePackedStruct(v) => {
                use pb::variable_packed_struct::field_encoding::Layout;
                let mut fields = Vec::with_capacity(v.fields.len());
                for (i, f) in v.fields.iter().enumerate() {
                    let comp = match &f.value {
                        Some(c) => Comp::from_pb(c, path, depth + 1)?,
                        None => {
                            return Err(Error::corrupt(
                                path,
                                format!("packed struct child {i} lacks its compression"),
                            ));
                        }
                    };
                    let width = match f.layout {
                        Some(Layout::BitsPerValue(b)) if b > 0 && b % 8 == 0 && b <= 1 << 20 => {
                            PackedWidth::Fixed((b / 8) as usize)
                        }
                        Some(Layout::BitsPerLength(b @ (32 | 64))) => {
                            PackedWidth::Prefixed((b / 8) as usize)
                        }
                        other => {
                            return Err(Error::corrupt(
                                path,
                                format!("packed struct child {i} has layout {other:?}"),
                            ));
                        }
                    };
                    fields.push(PackedChild { comp, width });
                }
                if fields.is_empty() {
                    return Err(Error::corrupt(path, "packed struct without children"));
                }
                Comp::VarPacked(fields)
            }
        })
    }

    /// Buffers one mini-block chunk holds for this compression.
    fn chunk_buffers(&self) -> usize {
        match self {
            Comp::Fsl {
                has_validity,
                values,
                ..
            } => values.chunk_buffers() + usize::from(*has_validity),
            Comp::Fsst { values, .. } | Comp::General { inner: values, .. } => {
                values.chunk_buffers()
            }
            Comp::Rle { .. } => 2,
            _ => 1,
        }
    }
}

/// Decoded values of a run: fixed-width words, or offsets and bytes.
#[derive(Debug, Clone)]
pub(crate) enum Values {
    /// `n` values of `bits` each (1 = a bitmap, LSB first).
    Fixed { bits: u64, data: Bytes, n: usize },
    /// `offsets` has `n + 1` entries into `data`, starting at 0.
    Var { offsets: Vec<u64>, data: Bytes },
    /// `dim` child values per value; `validity` is a bitmap of child values.
    Fsl {
        dim: u64,
        validity: Option<Bytes>,
        child: Box<Values>,
    },
}

impl Values {
    pub(crate) fn len(&self) -> usize {
        match self {
            Values::Fixed { n, .. } => *n,
            Values::Var { offsets, .. } => offsets.len().saturating_sub(1),
            Values::Fsl { dim, child, .. } => child.len() / (*dim as usize).max(1),
        }
    }
}

/// Lance's FSST symbol table: a header word (symbol count in the low byte,
/// bit 24 set when the data is compressed at all), the symbols as 8-byte
/// little-endian words, then one length byte per symbol.
#[derive(Debug)]
pub(crate) struct SymbolTable {
    enabled: bool,
    symbols: Vec<[u8; 8]>,
    lens: Vec<u8>,
}

impl SymbolTable {
    fn parse(b: &[u8], path: &str) -> Result<SymbolTable> {
        let bad = |m: &str| Error::corrupt(path, format!("FSST symbol table: {m}"));
        if b.len() < 8 {
            return Err(bad("shorter than its 8-byte header"));
        }
        let head = u64::from_le_bytes(b[..8].try_into().unwrap());
        if head >> 32 != 0x4653_5354 {
            return Err(bad("missing the FSST magic"));
        }
        let n = (head & 0xFF) as usize;
        let enabled = head & (1 << 24) != 0;
        if b.len() < 8 + 9 * n {
            return Err(bad("shorter than its symbols"));
        }
        let symbols = (0..n)
            .map(|i| b[8 + 8 * i..16 + 8 * i].try_into().unwrap())
            .collect();
        let lens: Vec<u8> = b[8 + 8 * n..8 + 9 * n].to_vec();
        if lens.iter().any(|l| !(1..=8).contains(l)) {
            return Err(bad("a symbol length outside 1..=8"));
        }
        Ok(SymbolTable {
            enabled,
            symbols,
            lens,
        })
    }

    /// Expands compressed strings (offsets into `data`) into plain ones.
    fn decode(&self, offsets: &[u64], data: &[u8], ctx: &Ctx) -> Result<(Vec<u64>, Bytes)> {
        let mut out = Vec::new();
        let mut outs = vec![0u64];
        self.decode_into(offsets, data, &mut out, &mut outs, ctx)?;
        Ok((outs, Bytes::from(out)))
    }

    /// Appends the strings between consecutive `offsets` (into `data`) to
    /// `out`, pushing each one's end onto `ends`.
    pub(crate) fn decode_into(
        &self,
        offsets: &[u64],
        data: &[u8],
        out: &mut Vec<u8>,
        ends: &mut Vec<u64>,
        ctx: &Ctx,
    ) -> Result<()> {
        let (first, last) = match (offsets.first(), offsets.last()) {
            (Some(f), Some(l)) if f <= l && *l as usize <= data.len() => (*f as usize, *l as usize),
            (None, _) => return Ok(()),
            _ => return Err(ctx.corrupt("FSST offsets past their bytes")),
        };
        if !self.enabled {
            for w in offsets.windows(2) {
                if w[0] > w[1] || w[1] as usize > data.len() {
                    return Err(ctx.corrupt("FSST offsets out of order or past their bytes"));
                }
                out.extend_from_slice(&data[w[0] as usize..w[1] as usize]);
                ends.push(out.len() as u64);
            }
            return Ok(());
        }
        // Codes index 256-entry tables (a length of 0 marks a code with no
        // symbol). A code expands to at most 8 bytes, so 8 bytes per input
        // byte (plus a word of slack) of spare room holds every string, and
        // each symbol is written as a whole 8-byte word, moving on by its
        // length.
        let mut syms = [0u64; 256];
        let mut lens = [0u8; 256];
        for (i, (s, l)) in self.symbols.iter().zip(&self.lens).enumerate() {
            syms[i] = u64::from_le_bytes(*s);
            lens[i] = *l;
        }
        let _ = first;
        let mut dst = out.as_mut_ptr();
        let mut o = out.len();
        let mut bad = false;
        for w in offsets.windows(2) {
            let (mut i, end) = (w[0] as usize, w[1] as usize);
            if i > end || end > data.len() {
                return Err(ctx.corrupt("FSST offsets out of order or past their bytes"));
            }
            // Room for this string's worst case (8 bytes per code, plus a
            // word of slack), growing the buffer only when it lacks it.
            let need = (end - i) * 8 + 8;
            if out.capacity() - o < need {
                // SAFETY: bytes up to o were written below.
                unsafe { out.set_len(o) };
                out.reserve(need.max((last - i) * 2));
                dst = out.as_mut_ptr();
            }
            // Four codes at a time while none of them is an escape.
            while i + 4 <= end {
                let w = u32::from_le_bytes(data[i..i + 4].try_into().unwrap());
                let x = !w; // an escape (0xFF) byte is a zero byte of x
                if x.wrapping_sub(0x0101_0101) & !x & 0x8080_8080 != 0 {
                    break;
                }
                for k in 0..4 {
                    let code = ((w >> (8 * k)) & 0xFF) as usize;
                    // SAFETY: o + 8 <= capacity: each input byte adds at
                    // most 8 output bytes and 8 bytes of slack were reserved.
                    unsafe { (dst.add(o) as *mut u64).write_unaligned(syms[code].to_le()) };
                    bad |= lens[code] == 0;
                    o += lens[code] as usize;
                }
                i += 4;
            }
            while i < end {
                let code = data[i] as usize;
                if code == 255 {
                    let Some(b) = data.get(i + 1).filter(|_| i + 1 < end) else {
                        return Err(ctx.corrupt("FSST escape at the end of a string"));
                    };
                    // SAFETY: as above.
                    unsafe { dst.add(o).write(*b) };
                    o += 1;
                    i += 2;
                } else {
                    // SAFETY: as above; the write is unaligned by design.
                    unsafe { (dst.add(o) as *mut u64).write_unaligned(syms[code].to_le()) };
                    bad |= lens[code] == 0;
                    o += lens[code] as usize;
                    i += 1;
                }
            }
            ends.push(o as u64);
        }
        if bad {
            return Err(ctx.corrupt("FSST code without a symbol"));
        }
        // SAFETY: bytes base..o were written above, within the capacity.
        unsafe { out.set_len(o) };
        Ok(())
    }
}

/// A parsed 2.1+ page.
#[derive(Debug)]
pub(crate) enum Layout {
    Mini(MiniBlock),
    Full(FullZip),
    Constant(ConstantPage),
    /// Values stored out of line: the inner layout holds a description per
    /// row (position and size, packed), `layers` the column's own layers.
    Blob(Box<Layout>, Vec<Layer>),
}

#[derive(Debug)]
pub(crate) struct MiniBlock {
    pub rep: Option<Comp>,
    pub def: Option<Comp>,
    pub values: Comp,
    pub dictionary: Option<(Comp, u64)>,
    pub layers: Vec<Layer>,
    pub num_buffers: usize,
    pub num_items: u64,
    pub large: bool,
    pub bufs: Vec<Range<u64>>,
    /// Values per chunk in the repetition index (`depth + 1`; 0: none).
    pub rep_index_stride: usize,
    /// Chunk positions, loaded on first use.
    pub index: OnceLock<Arc<Vec<Chunk>>>,
    /// The rows each chunk starts, from the repetition index, loaded on
    /// first use.
    pub rows: OnceLock<Arc<Vec<ChunkRows>>>,
    /// The decoded dictionary, loaded on first use.
    pub dict: OnceLock<ArrayRef>,
}

/// One mini-block chunk: its bytes in the file and the items it holds.
#[derive(Debug, Clone)]
pub(crate) struct Chunk {
    pub bytes: Range<u64>,
    pub items: Range<u64>,
}

/// The rows of one mini-block chunk, from the page's repetition index.
///
/// A row *starts* in the chunk holding its first level. A chunk may open
/// with the end of a row started earlier (a preamble) and close with the
/// start of a row that continues (a trailer); a long row can leave whole
/// chunks that are all preamble.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkRows {
    /// The first row starting in this chunk (or, when none does, the next
    /// row to start).
    pub first: u64,
    /// Rows starting in this chunk, the trailer included.
    pub starts: u64,
    pub preamble: bool,
    pub trailer: bool,
}

/// The rows of each chunk from a mini-block repetition index: per chunk,
/// `stride` little-endian u64s of which the first two are the rows that
/// end in the chunk and the levels left over after the last row's end.
pub(crate) fn chunk_rows(
    b: &[u8],
    stride: usize,
    chunks: usize,
    rows: u64,
    ctx: &Ctx,
) -> Result<Vec<ChunkRows>> {
    if stride < 2 || b.len() != chunks * stride * 8 {
        return Err(ctx.corrupt(format!(
            "mini-block repetition index of {} bytes for {chunks} chunks of {stride} values",
            b.len()
        )));
    }
    let word = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
    let mut out = Vec::with_capacity(chunks);
    let (mut first, mut preamble) = (0u64, false);
    for c in 0..chunks {
        let (ends, leftover) = (word(c * stride), word(c * stride + 1));
        let trailer = leftover > 0;
        let starts = ends
            .checked_add(u64::from(trailer))
            .and_then(|n| n.checked_sub(u64::from(preamble)))
            .ok_or_else(|| ctx.corrupt(format!("repetition index chunk {c} ends no row")))?;
        out.push(ChunkRows {
            first,
            starts,
            preamble,
            trailer,
        });
        // Corrupt counts can be anything: their sum is checked against
        // the page's rows below.
        first = first.checked_add(starts).ok_or_else(|| {
            ctx.corrupt(format!(
                "the repetition index counts more rows than fit in 64 bits (chunk {c})"
            ))
        })?;
        preamble = trailer;
    }
    if first != rows || preamble {
        return Err(ctx.corrupt(format!(
            "the repetition index starts {first} rows; the page holds {rows}"
        )));
    }
    Ok(out)
}

/// The chunk spans (first and last chunk, inclusive) holding the rows of
/// `sel` (sorted ranges of page rows), adjacent spans merged.
pub(crate) fn chunk_spans(rows: &[ChunkRows], sel: &[Range<u64>]) -> Vec<(usize, usize)> {
    // The chunk in which row `r` starts.
    let start_of = |r: u64| rows.partition_point(|c| c.first + c.starts <= r);
    let mut spans: Vec<(usize, usize)> = Vec::new();
    for s in sel.iter().filter(|s| s.end > s.start) {
        let a = start_of(s.start);
        let mut b = start_of(s.end - 1);
        // The last row may run on into later chunks.
        if b < rows.len() && rows[b].trailer && s.end == rows[b].first + rows[b].starts {
            b += 1;
            while b + 1 < rows.len() && rows[b].starts == 0 && rows[b].trailer {
                b += 1;
            }
        }
        let b = b.min(rows.len().saturating_sub(1));
        match spans.last_mut() {
            Some(last) if a <= last.1 + 1 => last.1 = last.1.max(b),
            _ => spans.push((a, b)),
        }
    }
    spans
}

#[derive(Debug)]
pub(crate) struct FullZip {
    pub bits_rep: u32,
    pub bits_def: u32,
    /// `Some(bits)` for fixed-width values, else the width of lengths.
    pub fixed_bits: Option<u32>,
    pub length_bits: u32,
    pub values: Comp,
    pub layers: Vec<Layer>,
    pub bufs: Vec<Range<u64>>,
}

impl FullZip {
    /// Bytes of each control word.
    pub(crate) fn cw_bytes(&self) -> usize {
        match self.bits_rep + self.bits_def {
            0 => 0,
            1..=8 => 1,
            9..=16 => 2,
            _ => 4,
        }
    }
    /// Repetition and definition levels in a control word.
    pub(crate) fn levels_of(&self, cw: &[u8]) -> (u16, u16) {
        let w = match cw.len() {
            0 => 0u32,
            1 => cw[0] as u32,
            2 => u16::from_le_bytes([cw[0], cw[1]]) as u32,
            _ => u32::from_le_bytes([cw[0], cw[1], cw[2], cw[3]]),
        };
        (
            (w >> self.bits_def) as u16,
            (w & ((1u32 << self.bits_def) - 1)) as u16,
        )
    }

    /// Definition level in a control word.
    pub(crate) fn def_of(&self, cw: &[u8]) -> u16 {
        let w = match cw.len() {
            0 => 0u32,
            1 => cw[0] as u32,
            2 => u16::from_le_bytes([cw[0], cw[1]]) as u32,
            _ => u32::from_le_bytes([cw[0], cw[1], cw[2], cw[3]]),
        };
        (w & ((1u32 << self.bits_def) - 1)) as u16
    }
}

#[derive(Debug)]
pub(crate) struct ConstantPage {
    pub layers: Vec<Layer>,
    pub inline: Option<Bytes>,
    pub scalar: Option<Range<u64>>,
    pub rep: Option<Range<u64>>,
    pub def: Option<Range<u64>>,
    pub def_comp: Option<Comp>,
    pub rep_comp: Option<Comp>,
}

/// The highest definition level of a value that exists below the first
/// list (a null item or struct still takes a value slot; a null or empty
/// list does not).
pub(crate) fn max_visible_def(layers: &[Layer]) -> u16 {
    layers
        .iter()
        .take_while(|l| !l.is_list())
        .map(|l| l.def_levels())
        .sum()
}

impl Layout {
    pub(crate) fn from_pb(pl: &pb::PageLayout, bufs: &[Range<u64>], path: &str) -> Result<Layout> {
        use pb::page_layout::Layout as L;
        let layers = |v: &[i32]| -> Result<Vec<Layer>> {
            v.iter().map(|l| Layer::from_pb(*l, path)).collect()
        };
        let comp = |c: &Option<pb::CompressiveEncoding>| -> Result<Option<Comp>> {
            c.as_ref().map(|c| Comp::from_pb(c, path, 0)).transpose()
        };
        match &pl.layout {
            Some(L::MiniBlockLayout(m)) => {
                let values = comp(&m.value_compression)?
                    .ok_or_else(|| Error::corrupt(path, "mini-block page without values"))?;
                let dictionary = comp(&m.dictionary)?.map(|c| (c, m.num_dictionary_items));
                let need = 2 + usize::from(dictionary.is_some());
                if bufs.len() < need {
                    return Err(Error::corrupt(
                        path,
                        format!("mini-block page has {} buffers, needs {need}", bufs.len()),
                    ));
                }
                let mb = MiniBlock {
                    rep: comp(&m.rep_compression)?,
                    def: comp(&m.def_compression)?,
                    num_buffers: m.num_buffers as usize,
                    values,
                    dictionary,
                    layers: layers(&m.layers)?,
                    num_items: m.num_items,
                    large: m.has_large_chunk,
                    bufs: bufs.to_vec(),
                    rep_index_stride: if m.repetition_index_depth > 0 {
                        m.repetition_index_depth as usize + 1
                    } else {
                        0
                    },
                    index: OnceLock::new(),
                    rows: OnceLock::new(),
                    dict: OnceLock::new(),
                };
                if mb.rep_index_stride > 0 && mb.bufs.len() < need + 1 {
                    return Err(Error::corrupt(
                        path,
                        "mini-block page with a repetition index but no buffer for it",
                    ));
                }
                if mb.values.chunk_buffers() != mb.num_buffers {
                    return Err(Error::corrupt(
                        path,
                        format!(
                            "mini-block page says {} buffers per chunk; its compression has {}",
                            mb.num_buffers,
                            mb.values.chunk_buffers()
                        ),
                    ));
                }
                Ok(Layout::Mini(mb))
            }
            Some(L::FullZipLayout(f)) => {
                use pb::full_zip_layout::Details as D;
                let (fixed_bits, length_bits) = match f.details {
                    Some(D::BitsPerValue(b)) if b % 8 == 0 && b > 0 => (Some(b), 0),
                    Some(D::BitsPerOffset(b @ (32 | 64))) => (None, b),
                    _ => {
                        return Err(Error::corrupt(
                            path,
                            "full-zip page with an unusable value or length width",
                        ));
                    }
                };
                if bufs.is_empty() || (f.bits_rep + f.bits_def) > 32 {
                    return Err(Error::corrupt(path, "malformed full-zip page"));
                }
                Ok(Layout::Full(FullZip {
                    bits_rep: f.bits_rep,
                    bits_def: f.bits_def,
                    fixed_bits,
                    length_bits,
                    values: comp(&f.value_compression)?
                        .ok_or_else(|| Error::corrupt(path, "full-zip page without values"))?,
                    layers: layers(&f.layers)?,
                    bufs: bufs.to_vec(),
                }))
            }
            Some(L::ConstantLayout(c)) => {
                // Buffers: [scalar] (when not inline), repetition, definition;
                // an empty buffer stands for "none".
                let mut it = bufs.iter().cloned();
                let scalar = match (&c.inline_value, bufs.len()) {
                    (None, 3) | (None, 1) => it.next(),
                    _ => None,
                };
                let nonempty = |r: Option<Range<u64>>| r.filter(|r| r.end > r.start);
                let rep = nonempty(it.next());
                let def = nonempty(it.next());
                Ok(Layout::Constant(ConstantPage {
                    layers: layers(&c.layers)?,
                    inline: c.inline_value.clone().map(Bytes::from),
                    scalar,
                    rep,
                    def,
                    def_comp: comp(&c.def_compression)?,
                    rep_comp: comp(&c.rep_compression)?,
                }))
            }
            Some(L::BlobLayout(b)) => {
                let inner = b
                    .inner_layout
                    .as_ref()
                    .ok_or_else(|| Error::corrupt(path, "blob page without descriptions"))?;
                let inner = Layout::from_pb(inner, bufs, path)?;
                let layers = layers(&b.layers)?;
                if matches!(inner, Layout::Blob(..))
                    || inner.layers().iter().any(|l| l.is_list())
                    || layers.iter().any(|l| l.is_list())
                {
                    return Err(Error::unsupported(path, "blob pages of lists"));
                }
                Ok(Layout::Blob(Box::new(inner), layers))
            }
            None => Err(Error::unsupported(
                path,
                "a page layout this reader does not know",
            )),
        }
    }

    pub(crate) fn layers(&self) -> &[Layer] {
        match self {
            Layout::Mini(m) => &m.layers,
            Layout::Full(f) => &f.layers,
            Layout::Constant(c) => &c.layers,
            Layout::Blob(_, layers) => layers,
        }
    }
}

// ---------------------------------------------------------------------------
// Decompression.

fn general_decompress(scheme: Scheme, b: &[u8], ctx: &Ctx) -> Result<Bytes> {
    match scheme {
        Scheme::Lz4 => lz4_flex::block::decompress_size_prepended(b)
            .map(Bytes::from)
            .map_err(|e| ctx.corrupt(format!("LZ4 buffer: {e}"))),
        Scheme::Zstd => {
            if b.len() < 8 {
                return Err(ctx.corrupt("zstd buffer shorter than its length prefix"));
            }
            let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
            let out = zstd::bulk::decompress(&b[8..], n)
                .map_err(|e| ctx.corrupt(format!("zstd buffer: {e}")))?;
            if out.len() != n {
                return Err(ctx.corrupt("zstd buffer decompressed to the wrong size"));
            }
            Ok(Bytes::from(out))
        }
    }
}

// Words are read and written in the machine's order: Lance files are
// little-endian.
#[cfg(target_endian = "big")]
compile_error!("the 2.1+ decoders assume a little-endian machine");

/// Little-endian words of `bytes` as `T`: borrowed when aligned, else copied.
fn words<T: Word>(b: &[u8]) -> std::borrow::Cow<'_, [T]> {
    match bytemuck::try_cast_slice(b) {
        Ok(w) => std::borrow::Cow::Borrowed(w),
        Err(_) => std::borrow::Cow::Owned(bytemuck::pod_collect_to_vec(b)),
    }
}

trait Word: Copy + Default + BitPacking + bytemuck::Pod + Send + Sync {
    const BYTES: usize;
    fn as_u64(self) -> u64;
}

macro_rules! word {
    ($t:ty, $n:expr) => {
        impl Word for $t {
            const BYTES: usize = $n;
            fn as_u64(self) -> u64 {
                self as u64
            }
        }
    };
}
word!(u8, 1);
word!(u16, 2);
word!(u32, 4);
word!(u64, 8);

/// Decoded words handed to `Bytes` without a copy.
struct OwnedWords<T>(Vec<T>);

impl<T: bytemuck::Pod> AsRef<[u8]> for OwnedWords<T> {
    fn as_ref(&self) -> &[u8] {
        bytemuck::cast_slice(&self.0)
    }
}

fn into_bytes<T: Word>(mut v: Vec<T>, n: usize) -> Bytes {
    v.truncate(n);
    Bytes::from_owner(OwnedWords(v))
}

/// Unpacks one block of 1,024 values packed at `width` bits (FastLanes
/// layout, through Lance's own `lance-bitpacking`) into `out`.
fn unpack_block<T: Word>(width: usize, packed: &[T], out: &mut [T]) {
    if width == 0 {
        out.fill(T::default());
        return;
    }
    // The kernel's contract, checked: exactly 1024 * width / bits(T) input
    // words and a 1,024-word output.
    assert_eq!(packed.len(), PACK_BLOCK * width / (T::BYTES * 8));
    assert_eq!(out.len(), PACK_BLOCK);
    // SAFETY: the lengths are as the kernel requires (asserted above).
    unsafe { T::unchecked_unpack(width, packed, out) };
}

/// Checks an inline bit-packed chunk of `n` values: its width word and
/// the packed words after it.
fn inline_block<'a, T: Word>(
    b: &'a [u8],
    n: usize,
    ctx: &Ctx,
) -> Result<(usize, std::borrow::Cow<'a, [T]>)> {
    if n > PACK_BLOCK || b.len() < T::BYTES || !b.len().is_multiple_of(T::BYTES) {
        return Err(ctx.corrupt(format!(
            "inline bit-packed chunk of {} bytes for {n} values",
            b.len()
        )));
    }
    let w = words::<T>(b);
    let width = w[0].as_u64() as usize;
    if width > T::BYTES * 8 || (w.len() - 1) * T::BYTES * 8 != PACK_BLOCK * width {
        return Err(ctx.corrupt(format!(
            "inline bit-packed chunk of {} bytes does not hold 1024 values of {width} bits",
            b.len()
        )));
    }
    Ok((width, w))
}

fn inline_unpack<T: Word>(b: &[u8], n: usize, ctx: &Ctx) -> Result<Bytes> {
    if n == 0 {
        return Ok(Bytes::new());
    }
    let (width, w) = inline_block::<T>(b, n, ctx)?;
    let mut out = vec![T::default(); PACK_BLOCK];
    unpack_block::<T>(width, &w[1..], &mut out);
    Ok(into_bytes(out, n))
}

fn out_of_line_unpack<T: Word>(b: &[u8], n: usize, width: usize, ctx: &Ctx) -> Result<Bytes> {
    if !b.len().is_multiple_of(T::BYTES) {
        return Err(ctx.corrupt("bit-packed buffer of a partial word"));
    }
    let w = words::<T>(b);
    let per_block = (PACK_BLOCK * width).div_ceil(T::BYTES * 8);
    let full = n / PACK_BLOCK;
    let tail = n % PACK_BLOCK;
    let raw_tail = tail > 0 && w.len() == full * per_block + tail;
    let expect = full * per_block
        + if tail == 0 {
            0
        } else if raw_tail {
            tail
        } else {
            per_block
        };
    if w.len() != expect {
        return Err(ctx.corrupt(format!(
            "bit-packed buffer of {} bytes does not hold {n} values of {width} bits",
            b.len()
        )));
    }
    let mut out = vec![T::default(); (full + 1) * PACK_BLOCK];
    for k in 0..full {
        unpack_block::<T>(
            width,
            &w[k * per_block..(k + 1) * per_block],
            &mut out[k * PACK_BLOCK..(k + 1) * PACK_BLOCK],
        );
    }
    if tail > 0 {
        let rest = &w[full * per_block..];
        let dst = &mut out[full * PACK_BLOCK..(full + 1) * PACK_BLOCK];
        if raw_tail {
            dst[..tail].copy_from_slice(rest);
        } else {
            unpack_block::<T>(width, rest, dst);
        }
    }
    Ok(into_bytes(out, n))
}

/// Where each of a block's 1,024 values sits in Lance's FastLanes layout:
/// value `FL_ORDER[row / 8] * 16 + (row % 8) * 128 + lane` is the `row`-th
/// packed value of lane `lane` (lanes = 1024 / bits of the word).
fn fl_positions(word_bits: usize) -> &'static [(u16, u16)] {
    static TABLES: [OnceLock<Vec<(u16, u16)>>; 4] = [
        OnceLock::new(),
        OnceLock::new(),
        OnceLock::new(),
        OnceLock::new(),
    ];
    let slot = match word_bits {
        8 => 0,
        16 => 1,
        32 => 2,
        _ => 3,
    };
    TABLES[slot].get_or_init(|| {
        let lanes = PACK_BLOCK / word_bits;
        let mut t = vec![(0u16, 0u16); PACK_BLOCK];
        for row in 0..word_bits {
            for lane in 0..lanes {
                let idx = lance_bitpacking::FL_ORDER[row / 8] * 16 + (row % 8) * 128 + lane;
                t[idx] = (row as u16, lane as u16);
            }
        }
        t
    })
}

/// Value `idx` of one packed block, without unpacking the others.
fn unpack_one<T: Word>(packed: &[T], width: usize, idx: usize) -> u64 {
    if width == 0 {
        return 0;
    }
    let tb = T::BYTES * 8;
    let lanes = PACK_BLOCK / tb;
    let (row, lane) = fl_positions(tb)[idx];
    let bit = row as usize * width;
    let (k, shift) = (bit / tb, bit % tb);
    let mut v = packed[lanes * k + lane as usize].as_u64() >> shift;
    if shift + width > tb {
        v |= packed[lanes * (k + 1) + lane as usize].as_u64() << (tb - shift);
    }
    if width >= 64 {
        v
    } else {
        v & ((1u64 << width) - 1)
    }
}

/// The values at `rows` of an inline bit-packed chunk of `n` values.
fn inline_rows<T: Word>(b: &[u8], n: usize, rows: &[usize], ctx: &Ctx) -> Result<Bytes> {
    if n == 0 {
        return Err(ctx.corrupt("rows taken from an empty bit-packed chunk"));
    }
    let (width, w) = inline_block::<T>(b, n, ctx)?;
    let mut out = Vec::with_capacity(rows.len() * T::BYTES);
    for r in rows {
        if *r >= n {
            return Err(ctx.corrupt("row past its bit-packed chunk"));
        }
        let v = unpack_one::<T>(&w[1..], width, *r);
        out.extend_from_slice(&v.to_le_bytes()[..T::BYTES]);
    }
    Ok(Bytes::from(out))
}

fn by_word<F8, F16, F32, F64>(bits: u64, f8: F8, f16: F16, f32: F32, f64: F64) -> Result<Bytes>
where
    F8: FnOnce() -> Result<Bytes>,
    F16: FnOnce() -> Result<Bytes>,
    F32: FnOnce() -> Result<Bytes>,
    F64: FnOnce() -> Result<Bytes>,
{
    match bits {
        8 => f8(),
        16 => f16(),
        32 => f32(),
        _ => f64(),
    }
}

fn fixed_len_check(b: &Bytes, n: usize, bits: u64, ctx: &Ctx) -> Result<()> {
    let need = (n as u64 * bits).div_ceil(8) as usize;
    if b.len() < need {
        return Err(ctx.corrupt(format!(
            "{} bytes hold fewer than {n} values of {bits} bits",
            b.len()
        )));
    }
    Ok(())
}

/// Offsets (`n + 1` of `bits` each) at the front of `b`, absolute within `b`.
fn leading_offsets(b: &[u8], n: usize, bits: u64, ctx: &Ctx) -> Result<Vec<u64>> {
    let w = (bits / 8) as usize;
    if b.len() < (n + 1) * w {
        return Err(ctx.corrupt("variable-width chunk shorter than its offsets"));
    }
    Ok(b[..(n + 1) * w]
        .chunks_exact(w)
        .map(|c| {
            if w == 4 {
                u32::from_le_bytes(c.try_into().unwrap()) as u64
            } else {
                u64::from_le_bytes(c.try_into().unwrap())
            }
        })
        .collect())
}

fn rebase(offs: Vec<u64>, b: &Bytes, ctx: &Ctx) -> Result<Values> {
    let first = *offs.first().unwrap_or(&0);
    let last = *offs.last().unwrap_or(&0);
    if offs.windows(2).any(|w| w[0] > w[1]) || last as usize > b.len() {
        return Err(ctx.corrupt("variable-width offsets out of order or past their bytes"));
    }
    Ok(Values::Var {
        offsets: offs.iter().map(|o| o - first).collect(),
        data: b.slice(first as usize..last as usize),
    })
}

impl Comp {
    /// Decodes the buffers of one mini-block chunk holding `n` values.
    pub(crate) fn decode_chunk(
        &self,
        bufs: &mut Vec<Bytes>,
        n: usize,
        ctx: &Ctx,
    ) -> Result<Values> {
        let mut take = || -> Result<Bytes> {
            if bufs.is_empty() {
                return Err(ctx.corrupt("mini-block chunk has fewer buffers than its compression"));
            }
            Ok(bufs.remove(0))
        };
        match self {
            Comp::Flat {
                bits,
                general: None,
            } => {
                let b = take()?;
                fixed_len_check(&b, n, *bits, ctx)?;
                Ok(Values::Fixed {
                    bits: *bits,
                    data: b,
                    n,
                })
            }
            Comp::Inline { word_bits } => {
                let b = take()?;
                let data = by_word(
                    *word_bits,
                    || inline_unpack::<u8>(&b, n, ctx),
                    || inline_unpack::<u16>(&b, n, ctx),
                    || inline_unpack::<u32>(&b, n, ctx),
                    || inline_unpack::<u64>(&b, n, ctx),
                )?;
                Ok(Values::Fixed {
                    bits: *word_bits,
                    data,
                    n,
                })
            }
            Comp::Variable {
                offsets,
                general: None,
            } => {
                let b = take()?;
                match offsets.as_ref() {
                    Comp::Flat {
                        bits: bits @ (32 | 64),
                        general: None,
                    } => {
                        let offs = leading_offsets(&b, n, *bits, ctx)?;
                        rebase(offs, &b, ctx)
                    }
                    _ => Err(ctx.unsupported("mini-block strings with compressed offsets")),
                }
            }
            Comp::Fsst { table, values } => {
                let Values::Var { offsets, data } = values.decode_chunk(bufs, n, ctx)? else {
                    return Err(ctx.corrupt("FSST over fixed-width values"));
                };
                let (offsets, data) = table.decode(&offsets, &data, ctx)?;
                Ok(Values::Var { offsets, data })
            }
            Comp::General { scheme, inner } => {
                if bufs.is_empty() {
                    return Err(ctx.corrupt("mini-block chunk without buffers"));
                }
                bufs[0] = general_decompress(*scheme, &bufs[0], ctx)?;
                inner.decode_chunk(bufs, n, ctx)
            }
            Comp::Fsl {
                dim,
                has_validity,
                values,
            } => {
                let validity = if *has_validity { Some(take()?) } else { None };
                let child = values.decode_chunk(bufs, n * *dim as usize, ctx)?;
                if let Some(v) = &validity {
                    fixed_len_check(v, n * *dim as usize, 1, ctx)?;
                }
                Ok(Values::Fsl {
                    dim: *dim,
                    validity,
                    child: Box::new(child),
                })
            }
            Comp::ByteStreamSplit { bits } => {
                let b = take()?;
                let w = (*bits / 8) as usize;
                if b.len() < n * w {
                    return Err(ctx.corrupt("byte-stream split chunk too short"));
                }
                let mut out = vec![0u8; n * w];
                for (k, stream) in b[..n * w].chunks_exact(n.max(1)).enumerate() {
                    for (i, byte) in stream.iter().enumerate() {
                        out[i * w + k] = *byte;
                    }
                }
                Ok(Values::Fixed {
                    bits: *bits,
                    data: Bytes::from(out),
                    n,
                })
            }
            Comp::Constant(Some(v)) => Ok(Values::Fixed {
                bits: v.len() as u64 * 8,
                data: Bytes::from(v.repeat(n)),
                n,
            }),
            Comp::Rle { bits, len_bits } => {
                let values = take()?;
                let lengths = take()?;
                run_lengths(&values, &lengths, *bits, *len_bits, n, ctx)
            }
            other => Err(ctx.unsupported(format!("{} in a mini-block chunk", other.name()))),
        }
    }

    /// FSST strings of one mini-block chunk of `n` values, the rows in
    /// `ranges` expanded straight onto `out` / `ends` (an accumulator's
    /// bytes and end offsets). `false` when this compression is not FSST
    /// over plain offsets (the caller decodes the chunk).
    pub(crate) fn fsst_rows_into(
        &self,
        bufs: &[Bytes],
        n: usize,
        ranges: &[Range<usize>],
        out: &mut Vec<u8>,
        ends: &mut Vec<u64>,
        ctx: &Ctx,
    ) -> Result<bool> {
        let Comp::Fsst { table, values } = self else {
            return Ok(false);
        };
        let Comp::Variable {
            offsets,
            general: None,
        } = values.as_ref()
        else {
            return Ok(false);
        };
        let Comp::Flat {
            bits: bits @ (32 | 64),
            general: None,
        } = offsets.as_ref()
        else {
            return Ok(false);
        };
        let b = bufs
            .first()
            .ok_or_else(|| ctx.corrupt("mini-block chunk without buffers"))?;
        let offs = leading_offsets(b, n, *bits, ctx)?;
        for r in ranges {
            table.decode_into(&offs[r.start..=r.end], b, out, ends, ctx)?;
        }
        Ok(true)
    }

    /// The values at `rows` (sorted) of one mini-block chunk of `n` values,
    /// decoding only those; `None` when this compression has no such path
    /// (the caller decodes the whole chunk).
    pub(crate) fn decode_chunk_rows(
        &self,
        bufs: &[Bytes],
        n: usize,
        rows: &[usize],
        ctx: &Ctx,
    ) -> Result<Option<Values>> {
        let Comp::Inline { word_bits } = self else {
            return Ok(None);
        };
        let b = bufs
            .first()
            .ok_or_else(|| ctx.corrupt("mini-block chunk without buffers"))?;
        let data = by_word(
            *word_bits,
            || inline_rows::<u8>(b, n, rows, ctx),
            || inline_rows::<u16>(b, n, rows, ctx),
            || inline_rows::<u32>(b, n, rows, ctx),
            || inline_rows::<u64>(b, n, rows, ctx),
        )?;
        Ok(Some(Values::Fixed {
            bits: *word_bits,
            data,
            n: rows.len(),
        }))
    }

    /// Decodes a whole buffer of `n` values (levels, dictionaries).
    pub(crate) fn decode_block(&self, b: Bytes, n: usize, ctx: &Ctx) -> Result<Values> {
        match self {
            Comp::Flat { bits, general } => {
                let b = match general {
                    Some(s) => general_decompress(*s, &b, ctx)?,
                    None => b,
                };
                fixed_len_check(&b, n, *bits, ctx)?;
                Ok(Values::Fixed {
                    bits: *bits,
                    data: b,
                    n,
                })
            }
            Comp::Constant(v) => {
                let v = v.clone().unwrap_or_else(|| Bytes::from_static(&[0, 0]));
                Ok(Values::Fixed {
                    bits: v.len() as u64 * 8,
                    data: Bytes::from(v.repeat(n)),
                    n,
                })
            }
            Comp::Inline { .. } => {
                let mut v = vec![b];
                self.decode_chunk(&mut v, n, ctx)
            }
            Comp::OutOfLine {
                word_bits,
                packed_bits,
            } => {
                let w = *packed_bits as usize;
                let data = by_word(
                    *word_bits,
                    || out_of_line_unpack::<u8>(&b, n, w, ctx),
                    || out_of_line_unpack::<u16>(&b, n, w, ctx),
                    || out_of_line_unpack::<u32>(&b, n, w, ctx),
                    || out_of_line_unpack::<u64>(&b, n, w, ctx),
                )?;
                Ok(Values::Fixed {
                    bits: *word_bits,
                    data,
                    n,
                })
            }
            Comp::Variable { .. } => {
                // u32 offset width, then where the bytes start (u32 for
                // 32-bit offsets; u64 at byte 8 for 64-bit ones), offsets
                // from 0, bytes.
                if b.len() < 8 {
                    return Err(ctx.corrupt("variable-width block shorter than its header"));
                }
                let bits = u32::from_le_bytes(b[..4].try_into().unwrap()) as u64;
                let (start, head) = match bits {
                    32 => (u32::from_le_bytes(b[4..8].try_into().unwrap()) as usize, 8),
                    64 if b.len() >= 16 => (
                        u64::from_le_bytes(b[8..16].try_into().unwrap()) as usize,
                        16,
                    ),
                    _ => {
                        return Err(
                            ctx.corrupt(format!("variable-width block with {bits}-bit offsets"))
                        );
                    }
                };
                if start < head || start > b.len() || start - head != (n + 1) * (bits as usize / 8)
                {
                    return Err(ctx.corrupt("variable-width block offsets do not fit"));
                }
                let offs = leading_offsets(&b[head..start], n, bits, ctx)?;
                rebase(offs, &b.slice(start..), ctx)
            }
            Comp::General { scheme, inner } => {
                let b = general_decompress(*scheme, &b, ctx)?;
                inner.decode_block(b, n, ctx)
            }
            Comp::Fsl { .. } | Comp::Fsst { .. } | Comp::ByteStreamSplit { .. } => {
                let mut v = vec![b];
                self.decode_chunk(&mut v, n, ctx)
            }
            Comp::VarPacked(_) => Err(ctx.unsupported("variable packed struct as a block")),
            Comp::Rle { bits, len_bits } => {
                // [u64 bytes of values][values][run lengths]
                let bad = || ctx.corrupt("run-length block shorter than its header");
                let k = u64::from_le_bytes(b.get(..8).ok_or_else(bad)?.try_into().unwrap());
                let k = usize::try_from(k)
                    .ok()
                    .filter(|k| 8 + k <= b.len())
                    .ok_or_else(bad)?;
                run_lengths(
                    &b.slice(8..8 + k),
                    &b.slice(8 + k..),
                    *bits,
                    *len_bits,
                    n,
                    ctx,
                )
            }
        }
    }

    /// Decodes one value stored per-value (full-zip).
    pub(crate) fn decode_value(&self, b: Bytes, ctx: &Ctx) -> Result<Bytes> {
        match self {
            Comp::Flat { general: None, .. }
            | Comp::Fsl { .. }
            | Comp::Variable { general: None, .. }
            | Comp::VarPacked(_) => Ok(b),
            Comp::Fsst { table, .. } => {
                let (_, data) = table.decode(&[0, b.len() as u64], &b, ctx)?;
                Ok(data)
            }
            Comp::General { scheme, .. } => general_decompress(*scheme, &b, ctx),
            other => Err(ctx.unsupported(format!("{} per value", other.name()))),
        }
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            Comp::Flat { .. } => "flat values",
            Comp::Variable { .. } => "variable-width values",
            Comp::Constant(_) => "constant",
            Comp::OutOfLine { .. } => "out-of-line bit-packing",
            Comp::Inline { .. } => "inline bit-packing",
            Comp::Fsst { .. } => "FSST",
            Comp::General { .. } => "general compression",
            Comp::Fsl { .. } => "fixed-size list",
            Comp::ByteStreamSplit { .. } => "byte-stream split",
            Comp::Rle { .. } => "run-length encoding",
            Comp::VarPacked(_) => "variable packed struct",
        }
    }
}

/// Expands runs into `n` values (runs past `n` are cut off).
fn run_lengths(
    values: &[u8],
    lengths: &[u8],
    bits: u64,
    len_bits: u64,
    n: usize,
    ctx: &Ctx,
) -> Result<Values> {
    let w = (bits / 8) as usize;
    let lw = (len_bits / 8) as usize;
    let runs = values.len() / w;
    if !values.len().is_multiple_of(w) || lengths.len() != runs * lw {
        return Err(ctx.corrupt("run-length values and lengths do not pair up"));
    }
    let mut out = Vec::with_capacity(n * w);
    for (v, l) in values.chunks_exact(w).zip(lengths.chunks_exact(lw)) {
        let mut x = [0u8; 8];
        x[..lw].copy_from_slice(l);
        let len = u64::from_le_bytes(x) as usize;
        let room = n - out.len() / w;
        for _ in 0..len.min(room) {
            out.extend_from_slice(v);
        }
        if out.len() == n * w {
            break;
        }
    }
    if out.len() != n * w {
        return Err(ctx.corrupt(format!("runs hold {} values; {n} expected", out.len() / w)));
    }
    Ok(Values::Fixed {
        bits,
        data: Bytes::from(out),
        n,
    })
}

/// Definition levels (u16 each) from decoded level values.
pub(crate) fn levels(v: Values, n: usize, ctx: &Ctx) -> Result<Vec<u16>> {
    match v {
        Values::Fixed { bits: 16, data, .. } if data.len() >= 2 * n => Ok(data[..2 * n]
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect()),
        _ => Err(ctx.corrupt("repetition/definition levels are not 16-bit values")),
    }
}

/// Splits one mini-block chunk into levels and value buffers.
pub(crate) struct ChunkParts {
    pub num_levels: usize,
    pub rep: Option<Bytes>,
    pub def: Option<Bytes>,
    pub bufs: Vec<Bytes>,
}

pub(crate) fn split_chunk(mb: &MiniBlock, b: &Bytes, ctx: &Ctx) -> Result<ChunkParts> {
    let short = || ctx.corrupt("mini-block chunk shorter than its header says");
    let mut pos = 0usize;
    let u16_at = |pos: &mut usize| -> Result<usize> {
        let v = b.get(*pos..*pos + 2).ok_or_else(short)?;
        *pos += 2;
        Ok(u16::from_le_bytes([v[0], v[1]]) as usize)
    };
    let num_levels = u16_at(&mut pos)?;
    let rep_len = if mb.rep.is_some() {
        Some(u16_at(&mut pos)?)
    } else {
        None
    };
    let def_len = if mb.def.is_some() {
        Some(u16_at(&mut pos)?)
    } else {
        None
    };
    let mut sizes = Vec::with_capacity(mb.num_buffers);
    for _ in 0..mb.num_buffers {
        if mb.large {
            let v = b.get(pos..pos + 4).ok_or_else(short)?;
            sizes.push(u32::from_le_bytes(v.try_into().unwrap()) as usize);
            pos += 4;
        } else {
            sizes.push(u16_at(&mut pos)?);
        }
    }
    let pad = |p: usize| p.div_ceil(MINIBLOCK_ALIGN) * MINIBLOCK_ALIGN;
    pos = pad(pos);
    let piece = |len: usize, pos: &mut usize| -> Result<Bytes> {
        let end = pos
            .checked_add(len)
            .filter(|e| *e <= b.len())
            .ok_or_else(short)?;
        let out = b.slice(*pos..end);
        *pos = pad(end);
        Ok(out)
    };
    let rep = rep_len.map(|l| piece(l, &mut pos)).transpose()?;
    let def = def_len.map(|l| piece(l, &mut pos)).transpose()?;
    let bufs = sizes
        .into_iter()
        .map(|l| piece(l, &mut pos))
        .collect::<Result<Vec<_>>>()?;
    Ok(ChunkParts {
        num_levels,
        rep,
        def,
        bufs,
    })
}

/// Chunk positions from the metadata words of a mini-block page.
pub(crate) fn chunk_index(mb: &MiniBlock, meta: &[u8], ctx: &Ctx) -> Result<Vec<Chunk>> {
    let words: Vec<u32> = if mb.large {
        meta.chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    } else {
        meta.chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]) as u32)
            .collect()
    };
    let data = &mb.bufs[1];
    let mut out = Vec::with_capacity(words.len());
    let (mut at, mut item) = (data.start, 0u64);
    for (i, w) in words.iter().enumerate() {
        let len = ((w >> 4) as u64 + 1) * MINIBLOCK_ALIGN as u64;
        let log = w & 0xF;
        let items = if i + 1 == words.len() {
            let last = mb
                .num_items
                .checked_sub(item)
                .ok_or_else(|| ctx.corrupt("mini-block chunks hold more items than the page"))?;
            // A last chunk past that means a damaged item count (and
            // buffers would be sized from it).
            if last > MAX_CHUNK_ITEMS {
                return Err(ctx.corrupt(format!(
                    "mini-block last chunk of {last} items (at most {MAX_CHUNK_ITEMS})"
                )));
            }
            last
        } else {
            if log == 0 {
                return Err(ctx.corrupt(format!("mini-block chunk {i} claims 1 value with log 0")));
            }
            1u64 << log
        };
        if at + len > data.end {
            return Err(ctx.corrupt("mini-block chunks run past their buffer"));
        }
        out.push(Chunk {
            bytes: at..at + len,
            items: item..item + items,
        });
        at += len;
        item += items;
    }
    if item != mb.num_items {
        return Err(ctx.corrupt(format!(
            "mini-block chunks hold {item} items; the page says {}",
            mb.num_items
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lance's repetition index (rows ended, levels left over) read as the
    /// rows each chunk starts, and the chunks a row range needs.
    #[test]
    fn repetition_index_rows_and_spans() {
        let ctx = Ctx {
            path: "t.lance",
            column: "l",
            page: None,
        };
        // Chunk 0: rows 0, 1 and the start of row 2; chunk 1: all of row 2;
        // chunk 2: the end of row 2, then rows 3 and 4.
        let words: [u64; 6] = [2, 3, 0, 7, 3, 0];
        let b: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let rows = chunk_rows(&b, 2, 3, 5, &ctx).unwrap();
        let starts: Vec<(u64, u64, bool, bool)> = rows
            .iter()
            .map(|r| (r.first, r.starts, r.preamble, r.trailer))
            .collect();
        assert_eq!(
            starts,
            [(0, 3, false, true), (3, 0, true, true), (3, 2, true, false)]
        );
        assert_eq!(chunk_spans(&rows, &[0..1]), [(0, 0)]);
        assert_eq!(chunk_spans(&rows, &[2..3]), [(0, 2)]);
        assert_eq!(chunk_spans(&rows, &[4..5]), [(2, 2)]);
        assert_eq!(chunk_spans(&rows, &[0..1, 4..5]), [(0, 0), (2, 2)]);
        // A count that disagrees with the page is an error, not a guess.
        assert!(chunk_rows(&b, 2, 3, 6, &ctx).is_err());
        assert!(chunk_rows(&b[..40], 2, 3, 5, &ctx).is_err());
    }

    /// Single values read from a packed block equal the whole block's
    /// unpacking, for every word size and width.
    #[test]
    fn single_values_match_block_unpack() {
        fn check<T: Word>(seed: u64) {
            let tb = T::BYTES * 8;
            for width in 0..=tb {
                // Random packed words: any bits are a valid packed block.
                let mut x = seed ^ width as u64;
                let packed: Vec<T> = (0..PACK_BLOCK * width / tb)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        bytemuck::pod_read_unaligned(&x.to_le_bytes()[..T::BYTES])
                    })
                    .collect();
                let mut all = vec![T::default(); PACK_BLOCK];
                unpack_block::<T>(width, &packed, &mut all);
                for (idx, want) in all.iter().enumerate() {
                    assert_eq!(
                        unpack_one::<T>(&packed, width, idx),
                        want.as_u64(),
                        "T={tb} W={width} idx={idx}"
                    );
                }
            }
        }
        check::<u8>(1);
        check::<u16>(2);
        check::<u32>(3);
        check::<u64>(4);
    }
}
