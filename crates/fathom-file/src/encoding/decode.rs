//! Decoding selected rows of a page.
//!
//! A *selection* is a sorted list of disjoint page-local row ranges. Reading
//! is split in two steps so that the I/O for many pages and columns can be
//! issued at once:
//!
//! 1. `*_ranges` functions list the byte ranges a selection needs;
//! 2. `decode_*` functions consume the fetched bytes, in the same order.
//!
//! Fixed-width trees need one round trip. Variable-width data (Binary,
//! List) needs two: first the end offsets around each run (offsets `a-1`
//! and `b-1` bound run `a..b`, seed 002), then the bytes or items between them.

use std::ops::Range;

use arrow_array::{ArrayRef, UInt32Array, make_array, new_null_array};
use arrow_buffer::{
    BooleanBuffer, BooleanBufferBuilder, Buffer, MutableBuffer, NullBuffer, ScalarBuffer,
};
use arrow_data::ArrayData;
use arrow_schema::DataType;
use bytes::Bytes;

use super::Enc;
use crate::error::{Error, Result};

/// Total rows of a selection.
pub fn sel_len(sel: &[Range<u64>]) -> u64 {
    sel.iter().map(|r| r.end - r.start).sum()
}

/// Error context: which file, column and (when known) page is being
/// decoded.
#[derive(Debug, Clone)]
pub struct Ctx<'a> {
    pub path: &'a str,
    pub column: &'a str,
    pub page: Option<usize>,
}

impl Ctx<'_> {
    fn place(&self) -> String {
        match self.page {
            Some(p) => format!("column '{}', page {p}", self.column),
            None => format!("column '{}'", self.column),
        }
    }
    pub fn corrupt(&self, msg: impl std::fmt::Display) -> Error {
        Error::corrupt(self.path, format!("{}: {msg}", self.place()))
    }
    pub fn unsupported(&self, msg: impl std::fmt::Display) -> Error {
        Error::unsupported(self.path, format!("{}: {msg}", self.place()))
    }
    /// The same context at page `page`.
    pub fn at_page(&self, page: usize) -> Self {
        Ctx {
            page: Some(page),
            ..self.clone()
        }
    }
}

/// Bytes of a value of a fixed-width type.
pub fn byte_width(dt: &DataType) -> Option<u64> {
    match dt {
        DataType::FixedSizeBinary(w) => Some(*w as u64),
        dt => dt.primitive_width().map(|w| w as u64),
    }
}

fn next(it: &mut impl Iterator<Item = Bytes>, ctx: &Ctx) -> Result<Bytes> {
    it.next()
        .ok_or_else(|| ctx.corrupt("internal: fewer buffers fetched than planned"))
}

fn scale(sel: &[Range<u64>], k: u64) -> Vec<Range<u64>> {
    sel.iter().map(|r| r.start * k..r.end * k).collect()
}

/// Byte ranges needed to decode `sel` from a fixed-width tree.
pub fn fixed_ranges(
    enc: &Enc,
    sel: &[Range<u64>],
    ctx: &Ctx,
    out: &mut Vec<Range<u64>>,
) -> Result<()> {
    match enc {
        Enc::Flat { bits, buf } => {
            for r in sel {
                let lo = r.start.checked_mul(*bits).map(|v| v / 8);
                let hi = r.end.checked_mul(*bits).map(|v| v.div_ceil(8));
                match (lo, hi) {
                    (Some(lo), Some(hi)) if buf.start + hi <= buf.end => {
                        out.push(buf.start + lo..buf.start + hi)
                    }
                    _ => {
                        return Err(ctx.corrupt(format!(
                            "rows {}..{} at {bits} bits need more than the buffer's {} bytes",
                            r.start,
                            r.end,
                            buf.end - buf.start
                        )));
                    }
                }
            }
        }
        Enc::AllNull | Enc::Constant(_) => {}
        Enc::Nullable { validity, values } => {
            if let Some(v) = validity {
                fixed_ranges(v, sel, ctx, out)?;
            }
            fixed_ranges(values, sel, ctx, out)?;
        }
        Enc::Fsl { dim, items } => fixed_ranges(items, &scale(sel, *dim), ctx, out)?,
        Enc::FixedSizeBinary { width, bytes } => {
            fixed_ranges(bytes, &scale(sel, *width), ctx, out)?
        }
        other => {
            return Err(ctx.corrupt(format!(
                "expected a fixed-width encoding, found {}",
                enc_name(other)
            )));
        }
    }
    Ok(())
}

pub(crate) fn enc_name(e: &Enc) -> &'static str {
    match e {
        Enc::Flat { .. } => "Flat",
        Enc::AllNull => "Nullable(all nulls)",
        Enc::Nullable { .. } => "Nullable",
        Enc::Fsl { .. } => "FixedSizeList",
        Enc::FixedSizeBinary { .. } => "FixedSizeBinary",
        Enc::Binary { .. } => "Binary",
        Enc::Dictionary { .. } => "Dictionary",
        Enc::List { .. } => "List",
        Enc::Struct => "SimpleStruct",
        Enc::Constant(_) => "Constant",
        Enc::Structural(_) => "a 2.1+ page layout",
    }
}

/// `bytes` as an Arrow buffer, zero-copy when aligned for `width`-byte values.
fn aligned(bytes: Bytes, width: usize) -> Buffer {
    let align = width.next_power_of_two().min(16);
    if (bytes.as_ptr() as usize).is_multiple_of(align) {
        Buffer::from(bytes)
    } else {
        Buffer::from(bytes.as_ref())
    }
}

/// Decodes a 1-bit flat tree into a bitmap.
fn decode_bits(
    enc: &Enc,
    sel: &[Range<u64>],
    ctx: &Ctx,
    it: &mut impl Iterator<Item = Bytes>,
) -> Result<BooleanBuffer> {
    let Enc::Flat { bits: 1, .. } = enc else {
        return Err(ctx.corrupt(format!(
            "a bitmap must be Flat(1 bit), found {}",
            enc_name(enc)
        )));
    };
    let mut b = BooleanBufferBuilder::new(sel_len(sel) as usize);
    for r in sel {
        let bytes = next(it, ctx)?;
        let off = (r.start % 8) as usize;
        let n = (r.end - r.start) as usize;
        if bytes.len() * 8 < off + n {
            return Err(ctx.corrupt("bitmap shorter than its rows"));
        }
        b.append_packed_range(off..off + n, &bytes);
    }
    Ok(b.finish())
}

/// Decodes a fixed-width tree into an array of type `dt`.
pub fn decode_fixed(
    enc: &Enc,
    sel: &[Range<u64>],
    dt: &DataType,
    ctx: &Ctx,
    it: &mut impl Iterator<Item = Bytes>,
) -> Result<ArrayData> {
    let n = sel_len(sel) as usize;
    match enc {
        Enc::AllNull => Ok(new_null_array(dt, n).to_data()),
        Enc::Flat { bits: 1, .. } if *dt == DataType::Boolean => {
            let values = decode_bits(enc, sel, ctx, it)?;
            Ok(ArrayData::builder(DataType::Boolean)
                .len(n)
                .add_buffer(values.into_inner())
                .build()?)
        }
        Enc::Flat { bits, .. } => {
            let w = byte_width(dt).filter(|w| w * 8 == *bits).ok_or_else(|| {
                ctx.corrupt(format!(
                    "page stores {bits}-bit values but the column is {dt}"
                ))
            })?;
            let buf = if sel.len() == 1 {
                // One run: hand the fetched bytes to Arrow without copying,
                // unless they are misaligned for the type.
                aligned(next(it, ctx)?, w as usize)
            } else {
                let mut buf = MutableBuffer::with_capacity(n * w as usize);
                for _ in sel {
                    buf.extend_from_slice(&next(it, ctx)?);
                }
                buf.into()
            };
            if buf.len() != n * w as usize {
                return Err(ctx.corrupt("flat buffer size does not match its rows"));
            }
            Ok(ArrayData::builder(dt.clone())
                .len(n)
                .add_buffer(buf)
                .build()?)
        }
        Enc::Constant(v) => {
            if *dt == DataType::Boolean {
                let set = v.first().is_some_and(|b| *b != 0);
                let bits = if set {
                    BooleanBuffer::new_set(n)
                } else {
                    BooleanBuffer::new_unset(n)
                };
                return Ok(ArrayData::builder(DataType::Boolean)
                    .len(n)
                    .add_buffer(bits.into_inner())
                    .build()?);
            }
            let w = byte_width(dt)
                .ok_or_else(|| ctx.unsupported(format!("constant page of type {dt}")))?;
            if v.len() as u64 != w {
                return Err(ctx.corrupt(format!(
                    "constant of {} bytes for a column of {w}-byte values",
                    v.len()
                )));
            }
            let mut buf = MutableBuffer::with_capacity(n * w as usize);
            for _ in 0..n {
                buf.extend_from_slice(v);
            }
            Ok(ArrayData::builder(dt.clone())
                .len(n)
                .add_buffer(buf.into())
                .build()?)
        }
        Enc::Nullable { validity, values } => {
            let validity = match validity {
                Some(v) => Some(decode_bits(v, sel, ctx, it)?),
                None => None,
            };
            let data = decode_fixed(values, sel, dt, ctx, it)?;
            match validity {
                None => Ok(data),
                Some(v) => {
                    let nulls = match data.nulls() {
                        Some(inner) => NullBuffer::new(&v & inner.inner()),
                        None => NullBuffer::new(v),
                    };
                    Ok(data.into_builder().nulls(Some(nulls)).build()?)
                }
            }
        }
        Enc::Fsl { dim, items } => {
            let DataType::FixedSizeList(field, d) = dt else {
                return Err(ctx.corrupt(format!("fixed-size list page for a column of type {dt}")));
            };
            if *d as u64 != *dim {
                return Err(ctx.corrupt(format!("list dimension {dim} but the column has {d}")));
            }
            let child = decode_fixed(items, &scale(sel, *dim), field.data_type(), ctx, it)?;
            Ok(ArrayData::builder(dt.clone())
                .len(n)
                .add_child_data(child)
                .build()?)
        }
        Enc::FixedSizeBinary { width, bytes } => {
            let DataType::FixedSizeBinary(w) = dt else {
                return Err(
                    ctx.corrupt(format!("fixed-size binary page for a column of type {dt}"))
                );
            };
            if *w as u64 != *width {
                return Err(ctx.corrupt("fixed-size binary width differs from the column's"));
            }
            let raw = decode_fixed(bytes, &scale(sel, *width), &DataType::UInt8, ctx, it)?;
            Ok(ArrayData::builder(dt.clone())
                .len(n)
                .add_buffer(raw.buffers()[0].clone())
                .build()?)
        }
        other => Err(ctx.corrupt(format!(
            "expected a fixed-width encoding, found {}",
            enc_name(other)
        ))),
    }
}

/// The stored integer type of an offsets/indices tree (`Flat` of 8..64 bits,
/// possibly wrapped in a no-null `Nullable`).
fn offsets_type(enc: &Enc, ctx: &Ctx) -> Result<DataType> {
    match enc {
        Enc::Flat { bits: 8, .. } => Ok(DataType::UInt8),
        Enc::Flat { bits: 16, .. } => Ok(DataType::UInt16),
        Enc::Flat { bits: 32, .. } => Ok(DataType::UInt32),
        Enc::Flat { bits: 64, .. } => Ok(DataType::UInt64),
        Enc::Nullable {
            validity: None,
            values,
        } => offsets_type(values, ctx),
        other => Err(ctx.unsupported(format!("offsets stored as {}", enc_name(other)))),
    }
}

/// Decodes an integer tree into u64 values (zero-copy for 64-bit offsets).
pub fn decode_u64s(
    enc: &Enc,
    sel: &[Range<u64>],
    ctx: &Ctx,
    it: &mut impl Iterator<Item = Bytes>,
) -> Result<ScalarBuffer<u64>> {
    let dt = offsets_type(enc, ctx)?;
    let data = decode_fixed(enc, sel, &dt, ctx, it)?;
    let b = &data.buffers()[0];
    Ok(match dt {
        DataType::UInt8 => b.as_slice().iter().map(|v| *v as u64).collect(),
        DataType::UInt16 => b.typed_data::<u16>().iter().map(|v| *v as u64).collect(),
        DataType::UInt32 => b.typed_data::<u32>().iter().map(|v| *v as u64).collect(),
        _ => ScalarBuffer::new(b.clone(), 0, data.len()),
    })
}

/// The runs `a-1..b` (or `0..b`) whose end offsets bound each run `a..b`.
pub fn offset_runs(sel: &[Range<u64>]) -> Vec<Range<u64>> {
    sel.iter()
        .map(|r| r.start.saturating_sub(1)..r.end)
        .collect()
}

/// What the end offsets of one run say.
#[derive(Debug, Default, Clone)]
pub struct OffsetRun {
    /// Item (or byte) range the run covers, page-local.
    pub items: Range<u64>,
    /// Length of each row.
    pub lengths: Vec<u64>,
    /// Validity of each row (`None` = no nulls in this run).
    pub validity: Option<Vec<bool>>,
}

/// Interprets end offsets (no leading 0) with a null adjustment, seed 002:
/// `offsets[i] = base + len (+ adj if null)`, `base = offsets[i-1] % adj`.
pub fn interpret_offsets(
    sel: &[Range<u64>],
    values: &[u64],
    null_adj: u64,
    limit: u64,
    ctx: &Ctx,
) -> Result<Vec<OffsetRun>> {
    let strip = |v: u64| {
        if null_adj > 0 && v >= null_adj {
            v - null_adj
        } else {
            v
        }
    };
    let mut pos = 0usize;
    let mut runs = Vec::with_capacity(sel.len());
    for r in sel {
        let n = (r.end - r.start) as usize;
        let (mut prev, vals) = if r.start == 0 {
            (0u64, values.get(pos..pos + n))
        } else {
            let p = values.get(pos).copied().unwrap_or(0);
            pos += 1;
            (strip(p), values.get(pos..pos + n))
        };
        let vals = vals.ok_or_else(|| ctx.corrupt("offsets shorter than the page"))?;
        pos += n;
        let start = prev;
        let mut lengths = Vec::with_capacity(n);
        let mut validity: Option<Vec<bool>> = None;
        for (i, &v) in vals.iter().enumerate() {
            let null = null_adj > 0 && v >= null_adj;
            let end = strip(v);
            if end < prev || end > limit {
                return Err(ctx.corrupt(format!(
                    "offset {end} at row {} is out of order or beyond the {limit} items/bytes of the page",
                    r.start + i as u64
                )));
            }
            lengths.push(end - prev);
            if null {
                validity.get_or_insert_with(|| vec![true; n])[i] = false;
            }
            prev = end;
        }
        runs.push(OffsetRun {
            items: start..prev,
            lengths,
            validity,
        });
    }
    Ok(runs)
}

/// Builds a utf8/binary array (any offset width) from runs and their bytes.
pub fn build_binary(dt: &DataType, runs: &[OffsetRun], bytes: &[Bytes]) -> Result<ArrayData> {
    let n: usize = runs.iter().map(|r| r.lengths.len()).sum();
    let large = matches!(dt, DataType::LargeUtf8 | DataType::LargeBinary);
    let total: u64 = runs.iter().map(|r| r.items.end - r.items.start).sum();
    if !large && total > i32::MAX as u64 {
        return Err(Error::invalid(format!(
            "{total} bytes of {dt} in one read exceed 2 GiB; use large types or smaller reads"
        )));
    }
    let mut offsets = MutableBuffer::with_capacity((n + 1) * if large { 8 } else { 4 });
    let mut values =
        MutableBuffer::with_capacity(if bytes.len() == 1 { 0 } else { total as usize });
    let mut any_null = false;
    let mut validity = BooleanBufferBuilder::new(n);
    let mut cur = 0u64;
    let push = |offsets: &mut MutableBuffer, v: u64| {
        if large {
            offsets.push(v as i64)
        } else {
            offsets.push(v as i32)
        }
    };
    push(&mut offsets, 0);
    let single = bytes.len() == 1;
    for (run, b) in runs.iter().zip(bytes) {
        if !single {
            values.extend_from_slice(b);
        }
        for (i, len) in run.lengths.iter().enumerate() {
            cur += len;
            push(&mut offsets, cur);
            let valid = run.validity.as_ref().is_none_or(|v| v[i]);
            any_null |= !valid;
            validity.append(valid);
        }
    }
    let values: Buffer = if single {
        Buffer::from(bytes[0].clone())
    } else {
        values.into()
    };
    let mut builder = ArrayData::builder(dt.clone())
        .len(n)
        .add_buffer(offsets.into())
        .add_buffer(values);
    if any_null {
        builder = builder.nulls(Some(NullBuffer::new(validity.finish())));
    }
    Ok(builder.build()?)
}

/// Applies 1-based dictionary indices (0 = null) to decoded items.
pub fn apply_dictionary(items: ArrayRef, indices: &[u64], ctx: &Ctx) -> Result<ArrayData> {
    let n_items = items.len() as u64;
    let mut idx = Vec::with_capacity(indices.len());
    for &i in indices {
        if i > n_items {
            return Err(ctx.corrupt(format!("dictionary index {i} beyond its {n_items} items")));
        }
        idx.push(if i == 0 { None } else { Some((i - 1) as u32) });
    }
    let idx = UInt32Array::from(idx);
    Ok(arrow_select::take::take(&items, &idx, None)?.to_data())
}

/// Shorthand used by callers that want an `ArrayRef`.
pub fn to_array(data: ArrayData) -> ArrayRef {
    make_array(data)
}
