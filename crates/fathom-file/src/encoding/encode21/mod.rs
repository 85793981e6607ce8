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

mod packed;
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

// ---------------------------------------------------------------------------
// Fields with lists: repetition and definition levels for every leaf.

/// Does a type hold a list anywhere?
pub fn has_list(dt: &DataType) -> bool {
    match dt {
        DataType::List(_) | DataType::LargeList(_) => true,
        DataType::Struct(f) => f.iter().any(|f| has_list(f.data_type())),
        _ => false,
    }
}

/// Leaf columns of a type (structs and lists have none of their own).
pub fn leaf_count(dt: &DataType) -> usize {
    match dt {
        DataType::List(f) | DataType::LargeList(f) => leaf_count(f.data_type()),
        DataType::Struct(f) => f.iter().map(|f| leaf_count(f.data_type())).sum(),
        _ => 1,
    }
}

/// One step from a field down to a leaf.
#[derive(Clone, Copy)]
enum Step {
    List,
    Struct(usize),
    Leaf,
}

/// Paths to every leaf, in column order.
fn leaf_paths(dt: &DataType, prefix: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    match dt {
        DataType::List(f) | DataType::LargeList(f) => {
            prefix.push(Step::List);
            leaf_paths(f.data_type(), prefix, out);
            prefix.pop();
        }
        DataType::Struct(fields) => {
            for (i, f) in fields.iter().enumerate() {
                prefix.push(Step::Struct(i));
                leaf_paths(f.data_type(), prefix, out);
                prefix.pop();
            }
        }
        _ => {
            let mut p = prefix.clone();
            p.push(Step::Leaf);
            out.push(p);
        }
    }
}

/// Levels of one leaf: per entry a repetition and a definition level,
/// and for visible entries the leaf row holding the value (`None`: a null
/// struct's placeholder).
struct Walk {
    rep: Vec<u16>,
    def: Vec<u16>,
    values: Vec<Option<u64>>,
    /// Entries at which each top-level row starts.
    row_starts: Vec<usize>,
    max_rep: u16,
    /// Per layer (innermost first): its null level (lists: empty is +1).
    null_def: Vec<u16>,
    first_list: usize,
}

fn list_parts(a: &dyn Array) -> (ArrayRef, Vec<usize>) {
    match a.data_type() {
        DataType::List(_) => {
            let l = a.as_list::<i32>();
            (
                l.values().clone(),
                l.value_offsets().iter().map(|o| *o as usize).collect(),
            )
        }
        _ => {
            let l = a.as_list::<i64>();
            (
                l.values().clone(),
                l.value_offsets().iter().map(|o| *o as usize).collect(),
            )
        }
    }
}

impl Walk {
    /// `layer` of the current step (0 = the leaf); `q` lists entered.
    fn go(&mut self, a: &dyn Array, i: usize, path: &[Step], rep: u16, q: u16) {
        let layer = path.len() - 1;
        match path[0] {
            Step::Leaf => {
                self.rep.push(rep);
                self.def
                    .push(if a.is_null(i) { self.null_def[0] } else { 0 });
                self.values.push(Some(i as u64));
            }
            Step::Struct(c) => {
                if a.is_null(i) {
                    self.rep.push(rep);
                    self.def.push(self.null_def[layer]);
                    if layer < self.first_list {
                        self.values.push(None);
                    }
                } else {
                    let child = a.as_struct().column(c).clone();
                    self.go(child.as_ref(), i, &path[1..], rep, q);
                }
            }
            Step::List => {
                if a.is_null(i) {
                    self.rep.push(rep);
                    self.def.push(self.null_def[layer]);
                    return;
                }
                // Lists are sliced views: offsets index the whole values.
                let (values, offsets) = list_parts(a);
                let (s, e) = (offsets[i], offsets[i + 1]);
                if s == e {
                    self.rep.push(rep);
                    self.def.push(self.null_def[layer] + 1);
                    return;
                }
                for j in s..e {
                    let r = if j == s { rep } else { self.max_rep - q - 1 };
                    self.go(values.as_ref(), j, &path[1..], r, q + 1);
                }
            }
        }
    }
}

/// Encodes the pages of every leaf of a field holding lists: each page
/// holds whole rows in one mini-block chunk (so rows never span chunks,
/// and the repetition index is one entry: the page's rows).
pub fn encode_nested21(top: &ArrayRef, large: bool) -> Result<Vec<Vec<EncodedPage>>> {
    let mut paths = Vec::new();
    leaf_paths(top.data_type(), &mut Vec::new(), &mut paths);
    let mut out = Vec::with_capacity(paths.len());
    for path in &paths {
        // Layers innermost first: the leaf, then each step up.
        let kinds: Vec<Step> = path.iter().rev().copied().collect();
        let mut null_def = Vec::with_capacity(kinds.len());
        let mut next = 1u16;
        for k in &kinds {
            null_def.push(next);
            next += if matches!(k, Step::List) { 2 } else { 1 };
        }
        let first_list = kinds
            .iter()
            .position(|k| matches!(k, Step::List))
            .unwrap_or(kinds.len());
        let max_rep = kinds.iter().filter(|k| matches!(k, Step::List)).count() as u16;
        let mut w = Walk {
            rep: vec![],
            def: vec![],
            values: vec![],
            row_starts: vec![],
            max_rep,
            null_def,
            first_list,
        };
        let mut leaf: Option<ArrayRef> = None;
        for r in 0..top.len() {
            w.row_starts.push(w.rep.len());
            w.go(top.as_ref(), r, path, max_rep, 0);
        }
        w.row_starts.push(w.rep.len());
        // The leaf array the value indices point into.
        let mut a = top.clone();
        for s in path {
            match s {
                Step::List => a = list_parts(a.as_ref()).0,
                Step::Struct(c) => a = a.as_struct().column(*c).clone(),
                Step::Leaf => leaf = Some(a.clone()),
            }
        }
        let leaf = leaf.expect("a path ends at a leaf");
        let layers: Vec<i32> = kinds
            .iter()
            .map(|k| match k {
                Step::List => pb::RepDefLayer::RepdefNullAndEmptyList as i32,
                _ => pb::RepDefLayer::RepdefNullableItem as i32,
            })
            .collect();
        out.push(nested_pages(&w, &leaf, layers, large)?);
    }
    Ok(out)
}

/// Splits a leaf's rows into pages of one chunk each.
fn nested_pages(
    w: &Walk,
    leaf: &ArrayRef,
    layers: Vec<i32>,
    large: bool,
) -> Result<Vec<EncodedPage>> {
    // Levels are 2 bytes each and their sizes are u16 in a chunk header.
    const MAX_LEVELS: usize = 32_000;
    let max_bytes = if large { 4 << 20 } else { 24 << 10 };
    let rows = w.row_starts.len() - 1;
    // Value index of each entry.
    let mut before = Vec::with_capacity(w.rep.len() + 1);
    let mut k = 0usize;
    let visible = |d: u16| -> bool {
        // Visible: null below the first list, or valid.
        d == 0 || d < w.null_def.get(w.first_list).copied().unwrap_or(u16::MAX)
    };
    for d in &w.def {
        before.push(k);
        if visible(*d) {
            k += 1;
        }
    }
    before.push(k);
    if k != w.values.len() {
        return Err(Error::invalid("internal: levels and values disagree"));
    }
    let width = |e: usize| -> usize {
        match w.values[e] {
            Some(i) if is_var(leaf.data_type()) && leaf.is_valid(i as usize) => {
                var_value(leaf.as_ref(), i as usize).len() + 8
            }
            _ => 16,
        }
    };
    let mut pages = Vec::new();
    let mut r = 0;
    while r < rows {
        let (mut e_row, mut levels, mut bytes) = (r, 0usize, 0usize);
        while e_row < rows {
            let (s, e) = (w.row_starts[e_row], w.row_starts[e_row + 1]);
            let add_bytes: usize = (before[s]..before[e]).map(width).sum::<usize>() + 4 * (e - s);
            if e_row > r && (levels + e - s > MAX_LEVELS || bytes + add_bytes > max_bytes) {
                break;
            }
            levels += e - s;
            bytes += add_bytes;
            e_row += 1;
        }
        if levels > MAX_LEVELS {
            return Err(Error::invalid(format!(
                "a row with {levels} list entries: at most {MAX_LEVELS} per row are written at 2.1+"
            )));
        }
        let (s, e) = (w.row_starts[r], w.row_starts[e_row]);
        let idx: arrow_array::UInt64Array =
            w.values[before[s]..before[e]].iter().copied().collect();
        let vals = arrow_select::take::take(leaf.as_ref(), &idx, None)?;
        pages.push(nested_page(
            &w.rep[s..e],
            &w.def[s..e],
            &vals,
            (e_row - r) as u64,
            layers.clone(),
            large,
        )?);
        r = e_row;
    }
    Ok(pages)
}

fn nested_page(
    rep: &[u16],
    def: &[u16],
    vals: &ArrayRef,
    rows: u64,
    layers: Vec<i32>,
    large: bool,
) -> Result<EncodedPage> {
    let n = vals.len();
    let item_validity = fsl_parts(vals.as_ref())?.is_some_and(|p| p.validity.is_some());
    let (bufs, c) = chunk_values(vals.as_ref(), 0, n, item_validity)?;
    let mut chunk: Vec<u8> = Vec::new();
    chunk.extend_from_slice(&(rep.len() as u16).to_le_bytes());
    chunk.extend_from_slice(&((2 * rep.len()) as u16).to_le_bytes());
    chunk.extend_from_slice(&((2 * def.len()) as u16).to_le_bytes());
    push_sizes(&mut chunk, &bufs, large)?;
    pad8(&mut chunk);
    for l in [rep, def] {
        for v in l {
            chunk.extend_from_slice(&v.to_le_bytes());
        }
        pad8(&mut chunk);
    }
    for b in &bufs {
        chunk.extend_from_slice(b);
        pad8(&mut chunk);
    }
    let units = chunk.len() / 8 - 1;
    let meta = if large {
        ((units as u32) << 4).to_le_bytes().to_vec()
    } else {
        if units >= 1 << 12 {
            return Err(Error::invalid("a 2.1 mini-block chunk over 32 KiB"));
        }
        ((units as u16) << 4).to_le_bytes().to_vec()
    };
    // Repetition index: rows finished in the chunk, then leftover items.
    let mut rep_index = Vec::with_capacity(16);
    rep_index.extend_from_slice(&rows.to_le_bytes());
    rep_index.extend_from_slice(&0u64.to_le_bytes());
    let layout = pb::MiniBlockLayout {
        rep_compression: Some(flat(16)),
        def_compression: Some(flat(16)),
        value_compression: Some(c),
        dictionary: None,
        num_dictionary_items: 0,
        layers,
        num_buffers: bufs.len() as u64,
        repetition_index_depth: 1,
        num_items: n as u64,
        has_large_chunk: large,
    };
    Ok(EncodedPage {
        buffers: vec![
            Bytes::from(meta),
            Bytes::from(chunk),
            Bytes::from(rep_index),
        ],
        encoding: Default::default(),
        length: rows,
        structural: Some(pb::PageLayout {
            layout: Some(pb::page_layout::Layout::MiniBlockLayout(layout)),
        }),
    })
}
