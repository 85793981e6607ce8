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

mod bitpack;
mod decompress;
mod layout;

use bitpack::*;
pub(crate) use decompress::*;
pub(crate) use layout::*;

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
