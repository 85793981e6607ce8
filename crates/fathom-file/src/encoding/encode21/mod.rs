//! Writing pages of file formats 2.1 and 2.2: a simple, uncompressed subset
//! that Lance reads.
//!
//! | values | layout | compression |
//! |---|---|---|
//! | fixed width under 256 bytes (numbers, bools, short vectors) | mini-block | flat (fixed-size list of flat) |
//! | strings and binary under 256 bytes | mini-block | variable, 32-bit offsets |
//! | fixed width of 256 bytes and more (vectors) | full-zip | fixed-size list of flat |
//! | longer strings and binary | full-zip + row offsets | variable |
//! | packed structs of fixed-width children | mini-block | packed struct of flat |
//! | packed structs with a variable-width child (2.2) | full-zip + row offsets | variable packed struct |
//!
//! Nulls are definition levels (16-bit, uncompressed): every layer (the
//! item, then each enclosing struct) is declared nullable when the page
//! has any null, so level `k` means "null at layer `k - 1`".

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use bytes::Bytes;

use crate::encoding::encode::EncodedPage;
use crate::error::{Error, Result};
use crate::pb::encodings21 as pb;

mod nested;
mod packed;
pub use nested::{encode_nested21, has_list, leaf_count};
use packed::packed_struct;

/// Values up to this many bytes go in mini-blocks.
const NARROW: usize = 256;
/// Target value bytes per mini-block chunk.
const CHUNK_BYTES: usize = 16 * 1024;
/// Most values per mini-block chunk.
const CHUNK_VALUES: usize = 4096;

fn comp(c: pb::compressive_encoding::Compression) -> pb::CompressiveEncoding {
    pb::CompressiveEncoding {
        compression: Some(c),
    }
}

fn flat(bits: u64) -> pb::CompressiveEncoding {
    comp(pb::compressive_encoding::Compression::Flat(pb::Flat {
        bits_per_value: bits,
        data: None,
    }))
}

fn pad8(v: &mut Vec<u8>) {
    while !v.len().is_multiple_of(8) {
        v.push(0);
    }
}

/// The fixed-width bytes of an array's values (nulls hold zeros or
/// whatever the array holds: definition levels say they are null).
fn fixed_bytes(a: &dyn Array) -> Option<(u64, Vec<u8>)> {
    let data = a.to_data();
    match a.data_type() {
        DataType::Boolean => {
            let b = a.as_boolean().values();
            let mut out = vec![0u8; a.len().div_ceil(8)];
            for (i, v) in b.iter().enumerate() {
                if v {
                    out[i / 8] |= 1 << (i % 8);
                }
            }
            Some((1, out))
        }
        DataType::FixedSizeBinary(w) => {
            let w = *w as usize;
            let buf = &data.buffers()[0];
            let s = data.offset() * w;
            Some(((w * 8) as u64, buf[s..s + a.len() * w].to_vec()))
        }
        dt => {
            let w = dt.primitive_width()?;
            let buf = &data.buffers()[0];
            let s = data.offset() * w;
            Some(((w * 8) as u64, buf[s..s + a.len() * w].to_vec()))
        }
    }
}

/// A fixed-size list's item bytes and, when items have nulls, their bitmap.
struct FslParts {
    dim: usize,
    item_bits: u64,
    items: Vec<u8>,
    validity: Option<Vec<u8>>,
}

fn fsl_parts(a: &dyn Array) -> Result<Option<FslParts>> {
    let DataType::FixedSizeList(_, dim) = a.data_type() else {
        return Ok(None);
    };
    let l = a.as_fixed_size_list();
    let dim = *dim as usize;
    let start = if a.is_empty() {
        0
    } else {
        l.value_offset(0) as usize
    };
    let child = l.values().slice(start, a.len() * dim);
    let Some((item_bits, items)) = fixed_bytes(child.as_ref()) else {
        return Err(Error::invalid(format!(
            "fixed-size lists of {} are not written to 2.1+ files",
            child.data_type()
        )));
    };
    let validity = child
        .logical_nulls()
        .filter(|n| n.null_count() > 0)
        .map(|n| {
            let mut out = vec![0u8; child.len().div_ceil(8)];
            for (i, v) in n.iter().enumerate() {
                if v {
                    out[i / 8] |= 1 << (i % 8);
                }
            }
            out
        });
    Ok(Some(FslParts {
        dim,
        item_bits,
        items,
        validity,
    }))
}

/// Bytes of each offset (and full-zip length) of a variable-width type.
fn offset_bytes(dt: &DataType) -> usize {
    if matches!(dt, DataType::LargeUtf8 | DataType::LargeBinary) {
        8
    } else {
        4
    }
}

fn is_var(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Binary | DataType::LargeBinary
    )
}

/// The bytes of value `i` of a string/binary array.
fn var_value(a: &dyn Array, i: usize) -> &[u8] {
    match a.data_type() {
        DataType::Utf8 => a.as_string::<i32>().value(i).as_bytes(),
        DataType::LargeUtf8 => a.as_string::<i64>().value(i).as_bytes(),
        DataType::Binary => a.as_binary::<i32>().value(i),
        _ => a.as_binary::<i64>().value(i),
    }
}

fn layers(depth: usize, nullable: bool) -> Vec<i32> {
    let l = if nullable {
        pb::RepDefLayer::RepdefNullableItem
    } else {
        pb::RepDefLayer::RepdefAllValidItem
    };
    vec![l as i32; depth + 1]
}

/// Encodes one page of a leaf column: `arr` holds its values, `defs` its
/// definition levels (`None` when no row is null at any layer), `depth`
/// the number of structs around it; `large` selects 2.2's 32-bit chunk
/// words.
pub fn encode_leaf21(
    arr: &ArrayRef,
    defs: Option<&[u16]>,
    depth: usize,
    large: bool,
) -> Result<EncodedPage> {
    let n = arr.len();
    let dt = arr.data_type();
    if let DataType::Struct(_) = dt {
        let layout = packed_struct(arr, defs, depth, large)?;
        return Ok(EncodedPage {
            buffers: layout.1,
            encoding: Default::default(),
            length: n as u64,
            structural: Some(layout.0),
        });
    }
    let width = if is_var(dt) {
        (0..n)
            .filter(|i| arr.is_valid(*i))
            .map(|i| var_value(arr.as_ref(), i).len())
            .max()
            .unwrap_or(0)
    } else {
        match dt {
            DataType::FixedSizeList(f, d) => {
                f.data_type().primitive_width().unwrap_or(1) * *d as usize
            }
            DataType::FixedSizeBinary(w) => *w as usize,
            dt => dt.primitive_width().unwrap_or(1),
        }
    };
    let layout = if width < NARROW {
        mini_block(arr, defs, depth, large)?
    } else {
        full_zip(arr, defs, depth, def_bits(defs))?
    };
    Ok(EncodedPage {
        buffers: layout.1,
        encoding: Default::default(),
        length: n as u64,
        structural: Some(layout.0),
    })
}

type Encoded = (pb::PageLayout, Vec<Bytes>);

/// Value buffers of rows `s..e` in a mini-block chunk, and the compression.
/// `item_validity`: the page's list items have nulls somewhere, so every
/// chunk carries their bitmap.
fn chunk_values(
    arr: &dyn Array,
    s: usize,
    e: usize,
    item_validity: bool,
) -> Result<(Vec<Vec<u8>>, pb::CompressiveEncoding)> {
    let part = arr.slice(s, e - s);
    if let Some(p) = fsl_parts(part.as_ref())? {
        let mut bufs = Vec::new();
        if item_validity {
            bufs.push(
                p.validity
                    .unwrap_or_else(|| vec![0xFF; (part.len() * p.dim).div_ceil(8)]),
            );
        }
        bufs.push(p.items);
        return Ok((bufs, fsl_comp(&p.dim, p.item_bits, item_validity)));
    }
    if is_var(arr.data_type()) {
        let k = e - s;
        let mut offs = Vec::with_capacity(k + 1);
        let mut bytes = Vec::new();
        for i in 0..k {
            offs.push(bytes.len());
            if part.is_valid(i) {
                bytes.extend_from_slice(var_value(part.as_ref(), i));
            }
        }
        offs.push(bytes.len());
        // Large types take 64-bit offsets.
        let ow = offset_bytes(arr.data_type());
        let base = ow * (k + 1);
        let mut buf = Vec::with_capacity(base + bytes.len());
        for o in offs {
            if ow == 8 {
                buf.extend_from_slice(&((base + o) as u64).to_le_bytes());
            } else {
                buf.extend_from_slice(&((base + o) as u32).to_le_bytes());
            }
        }
        buf.extend_from_slice(&bytes);
        // Lance reads the chunk as whole offset words.
        while !buf.len().is_multiple_of(ow) {
            buf.push(0);
        }
        let c = comp(pb::compressive_encoding::Compression::Variable(Box::new(
            pb::Variable {
                offsets: Some(Box::new(flat(8 * ow as u64))),
                values: None,
            },
        )));
        return Ok((vec![buf], c));
    }
    let (bits, bytes) = fixed_bytes(part.as_ref()).ok_or_else(|| {
        Error::invalid(format!(
            "values of type {} are not written to 2.1+ files",
            arr.data_type()
        ))
    })?;
    Ok((vec![bytes], flat(bits)))
}

fn fsl_comp(dim: &usize, item_bits: u64, has_validity: bool) -> pb::CompressiveEncoding {
    comp(pb::compressive_encoding::Compression::FixedSizeList(
        Box::new(pb::FixedSizeList {
            items_per_value: *dim as u64,
            has_validity,
            values: Some(Box::new(flat(item_bits))),
        }),
    ))
}

/// Rows per chunk: a power of two (at least 8, so bitmaps stay whole
/// bytes) keeping a chunk near `CHUNK_BYTES`.
fn chunk_rows(arr: &dyn Array, start: usize) -> usize {
    let n = arr.len() - start;
    let mut k = CHUNK_VALUES;
    let bytes = |k: usize| -> usize {
        let e = (start + k).min(arr.len());
        if is_var(arr.data_type()) {
            (start..e)
                .filter(|i| arr.is_valid(*i))
                .map(|i| var_value(arr, i).len() + 4)
                .sum()
        } else {
            let w = match arr.data_type() {
                DataType::FixedSizeList(f, d) => {
                    f.data_type().primitive_width().unwrap_or(1) * *d as usize
                }
                DataType::FixedSizeBinary(w) => *w as usize,
                DataType::Boolean => 1,
                dt => dt.primitive_width().unwrap_or(1),
            };
            (e - start) * w
        }
    };
    while k > 8 && bytes(k) > CHUNK_BYTES {
        k /= 2;
    }
    if k >= n { n } else { k }
}

/// A chunk header's buffer sizes: u32 in 2.2, u16 in 2.1.
fn push_sizes(chunk: &mut Vec<u8>, bufs: &[Vec<u8>], large: bool) -> Result<()> {
    for b in bufs {
        if large {
            chunk.extend_from_slice(&(b.len() as u32).to_le_bytes());
        } else if b.len() > u16::MAX as usize {
            return Err(Error::invalid("a 2.1 mini-block buffer over 64 KiB"));
        } else {
            chunk.extend_from_slice(&(b.len() as u16).to_le_bytes());
        }
    }
    Ok(())
}

fn mini_block(arr: &ArrayRef, defs: Option<&[u16]>, depth: usize, large: bool) -> Result<Encoded> {
    let n = arr.len();
    let mut meta: Vec<u8> = Vec::new();
    let mut chunks: Vec<u8> = Vec::new();
    let mut value_comp = None;
    let mut num_buffers = 0;
    let item_validity = fsl_parts(arr.as_ref())?.is_some_and(|p| p.validity.is_some());
    let mut s = 0;
    while s < n {
        let k = chunk_rows(arr.as_ref(), s);
        let e = s + k;
        let last = e == n;
        let (bufs, c) = chunk_values(arr.as_ref(), s, e, item_validity)?;
        num_buffers = bufs.len();
        value_comp.get_or_insert(c);
        let mut chunk: Vec<u8> = Vec::new();
        let levels = defs.map(|d| &d[s..e]);
        chunk.extend_from_slice(&(if levels.is_some() { k as u16 } else { 0 }).to_le_bytes());
        if levels.is_some() {
            chunk.extend_from_slice(&((2 * k) as u16).to_le_bytes());
        }
        push_sizes(&mut chunk, &bufs, large)?;
        pad8(&mut chunk);
        if let Some(l) = levels {
            for v in l {
                chunk.extend_from_slice(&v.to_le_bytes());
            }
            pad8(&mut chunk);
        }
        for b in &bufs {
            chunk.extend_from_slice(b);
            pad8(&mut chunk);
        }
        let log = if last { 0 } else { k.trailing_zeros() };
        let units = chunk.len() / 8 - 1;
        if large {
            meta.extend_from_slice(&(((units as u32) << 4) | log).to_le_bytes());
        } else {
            if units >= 1 << 12 {
                return Err(Error::invalid("a 2.1 mini-block chunk over 32 KiB"));
            }
            meta.extend_from_slice(&(((units as u16) << 4) | log as u16).to_le_bytes());
        }
        chunks.extend_from_slice(&chunk);
        s = e;
    }
    let layout = pb::MiniBlockLayout {
        rep_compression: None,
        def_compression: defs.map(|_| flat(16)),
        value_compression: value_comp,
        dictionary: None,
        num_dictionary_items: 0,
        layers: layers(depth, defs.is_some()),
        num_buffers: num_buffers as u64,
        repetition_index_depth: 0,
        num_items: n as u64,
        has_large_chunk: large,
    };
    Ok((
        pb::PageLayout {
            layout: Some(pb::page_layout::Layout::MiniBlockLayout(layout)),
        },
        vec![Bytes::from(meta), Bytes::from(chunks)],
    ))
}

fn full_zip(arr: &ArrayRef, defs: Option<&[u16]>, depth: usize, bits_def: u32) -> Result<Encoded> {
    let n = arr.len();
    let cw = |out: &mut Vec<u8>, i: usize| {
        if let Some(d) = defs {
            // One byte holds levels up to 255 (structs nested that deep
            // are not written).
            out.push(d[i] as u8);
        }
    };
    if bits_def > 8 {
        return Err(Error::invalid("structs nested over 255 deep"));
    }
    let mut data = Vec::new();
    let (details, value_compression, buffers) = if let Some(p) = fsl_parts(arr.as_ref())? {
        let vb = p.validity.as_ref().map(|_| p.dim.div_ceil(8));
        let item_bytes = (p.dim as u64 * p.item_bits).div_ceil(8) as usize;
        for i in 0..n {
            cw(&mut data, i);
            if let (Some(vb), Some(v)) = (vb, &p.validity) {
                // This value's item bits, from bit i * dim of the page's.
                let mut bits = vec![0u8; vb];
                for j in 0..p.dim {
                    let b = i * p.dim + j;
                    if v[b / 8] >> (b % 8) & 1 == 1 {
                        bits[j / 8] |= 1 << (j % 8);
                    }
                }
                data.extend_from_slice(&bits);
            }
            data.extend_from_slice(&p.items[i * item_bytes..(i + 1) * item_bytes]);
        }
        let bits = (8 * (vb.unwrap_or(0) + item_bytes)) as u32;
        (
            pb::full_zip_layout::Details::BitsPerValue(bits),
            fsl_comp(&p.dim, p.item_bits, vb.is_some()),
            vec![],
        )
    } else if is_var(arr.data_type()) {
        let ow = offset_bytes(arr.data_type());
        let mut starts: Vec<u64> = Vec::with_capacity(n + 1);
        for i in 0..n {
            starts.push(data.len() as u64);
            cw(&mut data, i);
            if defs.is_none_or(|d| d[i] == 0) {
                let v = var_value(arr.as_ref(), i);
                if ow == 8 {
                    data.extend_from_slice(&(v.len() as u64).to_le_bytes());
                } else {
                    data.extend_from_slice(&(v.len() as u32).to_le_bytes());
                }
                data.extend_from_slice(v);
            }
        }
        starts.push(data.len() as u64);
        let mut index = Vec::with_capacity(8 * (n + 1));
        for s in starts {
            index.extend_from_slice(&s.to_le_bytes());
        }
        let c = comp(pb::compressive_encoding::Compression::Variable(Box::new(
            pb::Variable {
                offsets: Some(Box::new(flat(8 * ow as u64))),
                values: None,
            },
        )));
        (
            pb::full_zip_layout::Details::BitsPerOffset(8 * ow as u32),
            c,
            vec![Bytes::from(index)],
        )
    } else {
        let (bits, bytes) = fixed_bytes(arr.as_ref()).ok_or_else(|| {
            Error::invalid(format!(
                "values of type {} are not written to 2.1+ files",
                arr.data_type()
            ))
        })?;
        let w = bits as usize / 8;
        for i in 0..n {
            cw(&mut data, i);
            data.extend_from_slice(&bytes[i * w..(i + 1) * w]);
        }
        (
            pb::full_zip_layout::Details::BitsPerValue(bits as u32),
            flat(bits),
            vec![],
        )
    };
    let layout = pb::FullZipLayout {
        bits_rep: 0,
        bits_def,
        details: Some(details),
        num_items: n as u32,
        num_visible_items: n as u32,
        value_compression: Some(value_compression),
        layers: layers(depth, defs.is_some()),
    };
    let mut bufs = vec![Bytes::from(data)];
    bufs.extend(buffers);
    Ok((
        pb::PageLayout {
            layout: Some(pb::page_layout::Layout::FullZipLayout(layout)),
        },
        bufs,
    ))
}

/// Bits of a full-zip control word for these definition levels.
fn def_bits(defs: Option<&[u16]>) -> u32 {
    defs.map_or(0, |d| {
        let max = d.iter().copied().max().unwrap_or(0).max(1) as u32;
        32 - max.leading_zeros()
    })
}
