//! Decoded values to arrow arrays: leaf types, packed structs, value
//! accumulation across chunks and pages.

use std::sync::Arc;

use super::super::v21::Values;
use super::super::*;
use super::*;

/// An Arrow array of type `dt` from decoded values.
pub(super) fn to_array(dt: &DataType, v: Values, ctx: &Ctx) -> Result<ArrayRef> {
    let n = v.len();
    let data = match (dt, v) {
        (DataType::Boolean, Values::Fixed { bits: 1, data, .. }) => {
            ArrayDataBuilder::new(dt.clone())
                .len(n)
                .add_buffer(Buffer::from(data))
        }
        (
            DataType::FixedSizeList(item, d),
            Values::Fsl {
                dim,
                validity,
                child,
            },
        ) => {
            if *d as u64 != dim {
                return Err(ctx.corrupt(format!("fixed-size list of {dim} items; schema says {d}")));
            }
            let mut c = to_array(item.data_type(), *child, ctx)?;
            if let Some(v) = validity {
                let bits = BooleanBuffer::new(Buffer::from(v), 0, c.len());
                let data = c
                    .to_data()
                    .into_builder()
                    .nulls(Some(NullBuffer::new(bits)));
                c = make_array(data.build()?);
            }
            ArrayDataBuilder::new(dt.clone())
                .len(n)
                .child_data(vec![c.to_data()])
        }
        (
            DataType::Utf8 | DataType::Binary | DataType::LargeUtf8 | DataType::LargeBinary,
            Values::Var { offsets, data },
        ) => {
            let large = matches!(dt, DataType::LargeUtf8 | DataType::LargeBinary);
            let offs = if large {
                Buffer::from_vec(offsets.iter().map(|o| *o as i64).collect::<Vec<_>>())
            } else {
                if offsets.last().is_some_and(|l| *l > i32::MAX as u64) {
                    return Err(Error::invalid(
                        "string page exceeds 2 GiB of 32-bit offsets",
                    ));
                }
                Buffer::from_vec(offsets.iter().map(|o| *o as i32).collect::<Vec<_>>())
            };
            check_var(&offsets, data.as_ref(), n, dt, ctx)?;
            let b = ArrayDataBuilder::new(dt.clone())
                .len(n)
                .add_buffer(offs)
                .add_buffer(Buffer::from(data));
            // SAFETY: `check_var` checked what arrow's validation checks:
            // n + 1 non-decreasing offsets within the data, and for strings
            // valid UTF-8 split only at character boundaries.
            return Ok(make_array(unsafe { b.build_unchecked() }));
        }
        (
            DataType::Struct(fields),
            Values::Fixed {
                bits,
                data,
                n: count,
            },
        ) => {
            return packed_struct(fields, bits, &data, count.min(n), ctx);
        }
        (dt, Values::Fixed { bits, data, .. })
            if byte_width(dt).is_some_and(|w| w * 8 == bits) && *dt != DataType::Boolean =>
        {
            ArrayDataBuilder::new(dt.clone())
                .len(n)
                .add_buffer(Buffer::from(data))
        }
        (dt, v) => {
            return Err(ctx.unsupported(format!(
                "values decoded as {} for a {dt} column",
                match v {
                    Values::Fixed { bits, .. } => format!("{bits}-bit words"),
                    Values::Var { .. } => "variable-width bytes".into(),
                    Values::Fsl { dim, .. } => format!("lists of {dim}"),
                }
            )));
        }
    };
    let data = data
        .align_buffers(true)
        .build()
        .map_err(|e| ctx.corrupt(format!("decoded values do not form a valid array: {e}")))?;
    Ok(make_array(data))
}

/// A packed struct's rows (`bits` each: the children's fixed-width values
/// side by side) split into its children.
pub(super) fn packed_struct(
    fields: &arrow_schema::Fields,
    bits: u64,
    data: &[u8],
    n: usize,
    ctx: &Ctx,
) -> Result<ArrayRef> {
    let widths: Vec<usize> = fields
        .iter()
        .map(|f| match f.data_type() {
            DataType::Boolean => None,
            dt => byte_width(dt).map(|w| w as usize),
        })
        .collect::<Option<_>>()
        .ok_or_else(|| ctx.unsupported("packed struct with a child that is not fixed-width"))?;
    let row: usize = widths.iter().sum();
    if row as u64 * 8 != bits || data.len() < row * n {
        return Err(ctx.corrupt(format!(
            "packed struct rows of {bits} bits; its children take {} bits",
            row * 8
        )));
    }
    let mut children: Vec<ArrayRef> = Vec::with_capacity(fields.len());
    let mut at = 0usize;
    for (f, w) in fields.iter().zip(&widths) {
        let mut buf = Vec::with_capacity(n * w);
        for r in 0..n {
            buf.extend_from_slice(&data[r * row + at..r * row + at + w]);
        }
        at += w;
        let child = ArrayDataBuilder::new(f.data_type().clone())
            .len(n)
            .add_buffer(Buffer::from_vec(buf))
            .align_buffers(true)
            .build()
            .map_err(|e| ctx.corrupt(format!("packed struct child '{}': {e}", f.name())))?;
        children.push(make_array(child));
    }
    Ok(Arc::new(StructArray::try_new(
        fields.clone(),
        children,
        None,
    )?))
}

/// A variable packed struct's rows (`offsets` into `data`, one per row)
/// split into its children: each child takes its fixed width, or a
/// little-endian length and that many bytes (compressed per value). An
/// empty row is a null struct (it has no bytes); its children get
/// placeholder values under the struct's null.
pub(super) fn var_packed_struct(
    fields: &arrow_schema::Fields,
    children: &[v21::PackedChild],
    offsets: &[u64],
    data: &Bytes,
    ctx: &Ctx,
) -> Result<ArrayRef> {
    use v21::PackedWidth;
    if fields.len() != children.len() {
        return Err(ctx.corrupt(format!(
            "packed struct of {} children; the schema has {}",
            children.len(),
            fields.len()
        )));
    }
    let n = offsets.len().saturating_sub(1);
    // Per child: fixed bytes, or (end offsets, bytes).
    let mut fixed: Vec<Vec<u8>> = vec![Vec::new(); children.len()];
    let mut var: Vec<(Vec<u64>, Vec<u8>)> = vec![(vec![0], Vec::new()); children.len()];
    let short = || ctx.corrupt("packed struct child runs past its row");
    for w in offsets.windows(2) {
        let (s, e) = (w[0] as usize, w[1] as usize);
        if s > e || e > data.len() {
            return Err(ctx.corrupt("packed struct row past its page's bytes"));
        }
        let row = data.slice(s..e);
        let mut pos = 0usize;
        for (i, c) in children.iter().enumerate() {
            match c.width {
                PackedWidth::Fixed(w) if row.is_empty() => {
                    let len = fixed[i].len();
                    fixed[i].resize(len + w, 0)
                }
                PackedWidth::Fixed(w) => {
                    fixed[i].extend_from_slice(row.get(pos..pos + w).ok_or_else(short)?);
                    pos += w;
                }
                PackedWidth::Prefixed(_) if row.is_empty() => {
                    let (ends, bytes) = &mut var[i];
                    ends.push(bytes.len() as u64);
                }
                PackedWidth::Prefixed(lb) => {
                    let value = super::full::prefixed(&row, &mut pos, lb, short)?;
                    let value = c.comp.decode_value(value, ctx)?;
                    let (ends, bytes) = &mut var[i];
                    bytes.extend_from_slice(&value);
                    ends.push(bytes.len() as u64);
                }
            }
        }
        if pos != row.len() {
            return Err(ctx.corrupt("packed struct row holds bytes past its children"));
        }
    }
    let mut arrays: Vec<ArrayRef> = Vec::with_capacity(fields.len());
    for (i, (f, c)) in fields.iter().zip(children).enumerate() {
        let values = match c.width {
            PackedWidth::Fixed(w) => {
                if !matches!(c.comp, v21::Comp::Flat { general: None, .. }) {
                    return Err(ctx.unsupported(format!(
                        "packed struct child '{}' compressed as {}",
                        f.name(),
                        c.comp.name()
                    )));
                }
                Values::Fixed {
                    bits: w as u64 * 8,
                    data: Bytes::from(std::mem::take(&mut fixed[i])),
                    n,
                }
            }
            PackedWidth::Prefixed(_) => {
                let (ends, bytes) = std::mem::take(&mut var[i]);
                Values::Var {
                    offsets: ends,
                    data: Bytes::from(bytes),
                }
            }
        };
        let child = to_array(f.data_type(), values, ctx)
            .map_err(|e| ctx.corrupt(format!("packed struct child '{}': {e}", f.name())))?;
        arrays.push(child);
    }
    Ok(Arc::new(StructArray::try_new(
        fields.clone(),
        arrays,
        None,
    )?))
}

/// Checks variable-width values before they become an array: `n + 1`
/// non-decreasing offsets within `data` and, for strings, UTF-8 (checked
/// once over all values, SIMD) cut only at character boundaries.
pub(super) fn check_var(
    offsets: &[u64],
    data: &[u8],
    n: usize,
    dt: &DataType,
    ctx: &Ctx,
) -> Result<()> {
    let bad = |what: &str| ctx.corrupt(format!("decoded {dt} values: {what}"));
    if offsets.len() != n + 1 {
        return Err(bad("offsets do not match the value count"));
    }
    let (first, last) = (offsets[0] as usize, offsets[n] as usize);
    if first > last || last > data.len() {
        return Err(bad("offsets past the values"));
    }
    let text = matches!(dt, DataType::Utf8 | DataType::LargeUtf8);
    if text && simdutf8::basic::from_utf8(&data[first..last]).is_err() {
        return Err(bad("invalid UTF-8"));
    }
    // Non-decreasing, and (strings) no value starts inside a character.
    let mut ok = true;
    let mut prev = first as u64;
    for o in &offsets[1..] {
        ok &= *o >= prev;
        prev = *o;
    }
    if text {
        for o in &offsets[..n] {
            // A UTF-8 continuation byte is 0b10xx_xxxx.
            ok &= data.get(*o as usize).is_none_or(|b| (*b as i8) >= -0x40);
        }
    }
    if !ok {
        return Err(bad("offsets out of order or inside a character"));
    }
    Ok(())
}

/// Dictionary indices as u64s.
pub(super) fn indices_of(v: Values, ctx: &Ctx) -> Result<Vec<u64>> {
    match v {
        Values::Fixed {
            bits: bits @ (8 | 16 | 32 | 64),
            data,
            n,
        } => {
            let w = bits as usize / 8;
            Ok(data[..n * w]
                .chunks_exact(w)
                .map(|c| {
                    let mut b = [0u8; 8];
                    b[..w].copy_from_slice(c);
                    u64::from_le_bytes(b)
                })
                .collect())
        }
        _ => Err(ctx.corrupt("dictionary indices are not whole-byte integers")),
    }
}

/// Decoded values gathered from several chunks.
pub(super) enum Acc {
    Bits(arrow_buffer::BooleanBufferBuilder),
    Fixed {
        bits: u64,
        data: Vec<u8>,
        n: usize,
    },
    Var {
        offsets: Vec<u64>,
        data: Vec<u8>,
    },
    Fsl {
        dim: u64,
        /// Item validity, started at the first chunk that has one.
        validity: Option<arrow_buffer::BooleanBufferBuilder>,
        items: usize,
        child: Box<Acc>,
    },
}

impl Acc {
    pub(super) fn like(v: &Values) -> Acc {
        match v {
            Values::Fixed { bits: 1, .. } => Acc::Bits(arrow_buffer::BooleanBufferBuilder::new(0)),
            Values::Fixed { bits, .. } => Acc::Fixed {
                bits: *bits,
                data: Vec::new(),
                n: 0,
            },
            Values::Var { .. } => Acc::Var {
                offsets: vec![0],
                data: Vec::new(),
            },
            Values::Fsl { dim, child, .. } => Acc::Fsl {
                dim: *dim,
                validity: None,
                items: 0,
                child: Box::new(Acc::like(child)),
            },
        }
    }

    /// Reserves room for `rows` values as wide as those of `v`.
    pub(super) fn reserve(&mut self, v: &Values, rows: usize) {
        let per = |bytes: usize, n: usize| bytes.div_ceil(n.max(1));
        match (self, v) {
            (Acc::Fixed { data, .. }, Values::Fixed { data: d, n, .. }) => {
                data.reserve(per(d.len(), *n) * rows)
            }
            (
                Acc::Var { offsets, data },
                Values::Var {
                    offsets: o,
                    data: d,
                },
            ) => {
                offsets.reserve(rows);
                // A little over the average, so one reservation usually holds.
                data.reserve(per(d.len(), o.len() - 1) * rows / 8 * 9);
            }
            (Acc::Fsl { child, dim, .. }, Values::Fsl { child: c, .. }) => {
                child.reserve(c, rows * *dim as usize)
            }
            _ => {}
        }
    }

    pub(super) fn append(&mut self, v: &Values, r: Range<usize>, ctx: &Ctx) -> Result<()> {
        let mismatch = || ctx.corrupt("chunks of one page decode to different shapes");
        match (self, v) {
            (Acc::Bits(b), Values::Fixed { bits: 1, data, .. }) => {
                b.append_packed_range(r, data);
            }
            (
                Acc::Fixed { bits, data, n },
                Values::Fixed {
                    bits: b2, data: d, ..
                },
            ) if bits == b2 => {
                let w = (*bits / 8) as usize;
                data.extend_from_slice(&d[r.start * w..r.end * w]);
                *n += r.len();
            }
            (
                Acc::Var { offsets, data },
                Values::Var {
                    offsets: o,
                    data: d,
                },
            ) => {
                let (at, first) = (data.len() as u64, o[r.start]);
                data.extend_from_slice(&d[first as usize..o[r.end] as usize]);
                offsets.extend(o[r.start + 1..=r.end].iter().map(|x| x - first + at));
            }
            (
                Acc::Fsl {
                    dim,
                    validity,
                    items,
                    child,
                },
                Values::Fsl {
                    dim: d2,
                    validity: v2,
                    child: c2,
                },
            ) if dim == d2 => {
                let d = *dim as usize;
                let ir = r.start * d..r.end * d;
                match (validity.as_mut(), v2) {
                    (Some(b), Some(v)) => b.append_packed_range(ir.clone(), v),
                    (Some(b), None) => b.append_n(ir.len(), true),
                    (None, Some(v)) => {
                        let mut b = arrow_buffer::BooleanBufferBuilder::new(*items + ir.len());
                        b.append_n(*items, true);
                        b.append_packed_range(ir.clone(), v);
                        *validity = Some(b);
                    }
                    (None, None) => {}
                }
                *items += ir.len();
                child.append(c2, ir, ctx)?;
            }
            _ => return Err(mismatch()),
        }
        Ok(())
    }

    pub(super) fn finish(self) -> Values {
        match self {
            Acc::Bits(mut b) => {
                let n = b.len();
                Values::Fixed {
                    bits: 1,
                    data: Bytes::copy_from_slice(b.finish().values()),
                    n,
                }
            }
            Acc::Fixed { bits, data, n } => Values::Fixed {
                bits,
                data: Bytes::from(data),
                n,
            },
            Acc::Var { offsets, data } => Values::Var {
                offsets,
                data: Bytes::from(data),
            },
            Acc::Fsl {
                dim,
                validity,
                child,
                ..
            } => Values::Fsl {
                dim,
                validity: validity.map(|mut b| Bytes::copy_from_slice(b.finish().values())),
                child: Box::new(child.finish()),
            },
        }
    }
}

pub(super) fn concat_arrays(arrays: Vec<ArrayRef>) -> Result<ArrayRef> {
    if arrays.len() == 1 {
        return Ok(arrays.into_iter().next().unwrap());
    }
    let refs: Vec<&dyn Array> = arrays.iter().map(|a| a.as_ref()).collect();
    Ok(arrow_select::concat::concat(&refs)?)
}

pub(super) fn concat_marks(parts: Vec<(usize, Marks)>) -> Marks {
    if parts.iter().all(|(_, m)| m.is_none()) {
        return None;
    }
    let mut out = Vec::new();
    for (n, m) in parts {
        match m {
            Some(m) => out.extend_from_slice(&m),
            None => out.extend(std::iter::repeat_n(0, n)),
        }
    }
    Some(out)
}
