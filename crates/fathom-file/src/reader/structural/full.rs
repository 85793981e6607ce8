//! Full-zip, constant and blob pages.

use super::super::v21::{self, ConstantPage, FullZip, Layout, Values};
use super::super::*;
use super::*;

impl Inner {
    /// The selected rows of a blob page: each row's description (position
    /// and size, two u64s packed in the inner page) names its bytes in the
    /// file; a size of 0 is an empty value, or a null when the position's
    /// bits 16..32 hold a definition level.
    pub(super) async fn read_blob(
        &self,
        inner: &Layout,
        layers: &[Layer],
        s: &[Range<u64>],
        rows: u64,
        dt: &DataType,
        ctx: &Ctx<'_>,
    ) -> Result<(ArrayRef, Marks)> {
        let large = match dt {
            DataType::LargeBinary => true,
            DataType::Binary => false,
            _ => return Err(ctx.unsupported(format!("blob page for a {dt} column"))),
        };
        let desc_type = DataType::FixedSizeBinary(16);
        let (descs, _) = self.read_flat_page(inner, s, rows, &desc_type, ctx).await?;
        let descs = descs
            .as_any()
            .downcast_ref::<arrow_array::FixedSizeBinaryArray>()
            .ok_or_else(|| ctx.corrupt("blob descriptions are not 16-byte values"))?;
        let word = |b: &[u8], i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        let mut ranges = Vec::new();
        let mut defs: Vec<u16> = Vec::with_capacity(descs.len());
        for i in 0..descs.len() {
            let d = descs.value(i);
            let (pos, size) = (word(d, 0), word(d, 8));
            if size == 0 {
                defs.push(((pos >> 16) & 0xFFFF) as u16);
            } else {
                let end = pos
                    .checked_add(size)
                    .filter(|e| *e <= self.io.size)
                    .ok_or_else(|| ctx.corrupt("a blob past the end of the file"))?;
                ranges.push(pos..end);
                defs.push(0);
            }
        }
        let got = self.io.read_ranges(&ranges).await?;
        let mut data = Vec::with_capacity(got.iter().map(|b| b.len()).sum());
        let mut offsets = Vec::with_capacity(defs.len() + 1);
        offsets.push(0u64);
        let mut blobs = got.iter();
        let descs_sizes = (0..descs.len()).map(|i| word(descs.value(i), 8));
        for size in descs_sizes {
            if size > 0 {
                data.extend_from_slice(blobs.next().expect("one read per blob"));
            }
            offsets.push(data.len() as u64);
        }
        let values = v21::Values::Var {
            offsets,
            data: Bytes::from(data),
        };
        let out_dt = if large {
            DataType::LargeBinary
        } else {
            DataType::Binary
        };
        let array = to_array(&out_dt, values, ctx)?;
        let marks = if defs.iter().any(|d| *d != 0) {
            Some(marks_from_def(&defs, layers, ctx)?)
        } else {
            None
        };
        Ok((array, marks))
    }

    /// The byte ranges of the selected rows of a full-zip page, from its row
    /// offsets (`rows + 1` entries of 1, 2, 4 or 8 bytes; two read per
    /// range).
    pub(super) async fn full_row_ranges(
        &self,
        fz: &FullZip,
        sel: &[Range<u64>],
        rows: u64,
        ctx: &Ctx<'_>,
    ) -> Result<Vec<Range<u64>>> {
        let data = &fz.bufs[0];
        let idx = fz
            .bufs
            .get(1)
            .ok_or_else(|| ctx.corrupt("variable full-zip page without row offsets"))?;
        let w = (idx.end - idx.start) / (rows + 1);
        if !matches!(w, 1 | 2 | 4 | 8) || !(idx.end - idx.start).is_multiple_of(rows + 1) {
            return Err(ctx.corrupt("full-zip row offsets of an odd width"));
        }
        let mut ends = Vec::with_capacity(sel.len() * 2);
        for r in sel {
            ends.push(idx.start + r.start * w..idx.start + (r.start + 1) * w);
            ends.push(idx.start + r.end * w..idx.start + (r.end + 1) * w);
        }
        let got = self.io.read_ranges(&ends).await?;
        let at = |b: &Bytes| {
            let mut x = [0u8; 8];
            x[..b.len()].copy_from_slice(b);
            u64::from_le_bytes(x)
        };
        let mut ranges = Vec::with_capacity(sel.len());
        for pair in got.chunks(2) {
            let (s, e) = (at(&pair[0]), at(&pair[1]));
            if s > e || data.start + e > data.end {
                return Err(ctx.corrupt("full-zip row offsets out of range"));
            }
            ranges.push(data.start + s..data.start + e);
        }
        Ok(ranges)
    }

    /// The bytes of the selected rows of a full-zip page, through its row
    /// offsets (`rows + 1` entries of 1, 2, 4 or 8 bytes), concatenated.
    pub(super) async fn full_rows_bytes(
        &self,
        fz: &FullZip,
        sel: &[Range<u64>],
        rows: u64,
        ctx: &Ctx<'_>,
    ) -> Result<Bytes> {
        let ranges = self.full_row_ranges(fz, sel, rows, ctx).await?;
        let got = self.io.read_ranges(&ranges).await?;
        if got.len() == 1 {
            return Ok(got.into_iter().next().expect("one range"));
        }
        let mut out = Vec::with_capacity(got.iter().map(|b| b.len()).sum());
        for b in &got {
            out.extend_from_slice(b);
        }
        Ok(Bytes::from(out))
    }

    /// Whole rows of a full-zip page with repetition (`b`: their zipped
    /// bytes): values, rep and def levels.
    pub(super) fn full_levels(
        &self,
        fz: &FullZip,
        dt: &DataType,
        b: Bytes,
        ctx: &Ctx<'_>,
    ) -> Result<Decoded> {
        let cw = fz.cw_bytes();
        let max_visible = v21::max_visible_def(&fz.layers);
        let short = || ctx.corrupt("full-zip page ends inside a value");
        let (mut rep, mut def) = (Vec::new(), Vec::new());
        let mut fixed: Vec<u8> = Vec::new();
        let mut offsets = vec![0u64];
        let mut var: Vec<u8> = Vec::new();
        let mut visible = 0usize;
        let mut pos = 0usize;
        while pos < b.len() {
            let (r, d) = fz.levels_of(b.get(pos..pos + cw).ok_or_else(short)?);
            pos += cw;
            rep.push(r);
            def.push(d);
            if d > max_visible {
                continue;
            }
            visible += 1;
            match fz.fixed_bits {
                Some(bits) => {
                    let w = bits as usize / 8;
                    fixed.extend_from_slice(b.get(pos..pos + w).ok_or_else(short)?);
                    pos += w;
                }
                None => {
                    if d == 0 {
                        let lb = fz.length_bits as usize / 8;
                        let v = prefixed(&b, &mut pos, lb, short)?;
                        var.extend_from_slice(&fz.values.decode_value(v, ctx)?);
                    }
                    offsets.push(var.len() as u64);
                }
            }
        }
        let values = match fz.fixed_bits {
            Some(_) => fixed_values(fz, Bytes::from(fixed), visible, ctx)?,
            None => Values::Var {
                offsets,
                data: Bytes::from(var),
            },
        };
        let def = (fz.bits_def > 0).then_some(def);
        Ok((full_array(fz, dt, values, ctx)?, rep, def))
    }

    /// A whole constant page with repetition: values, rep and def levels.
    pub(super) async fn constant_levels(
        &self,
        c: &ConstantPage,
        dt: &DataType,
        _limit: usize,
        ctx: &Ctx<'_>,
    ) -> Result<Decoded> {
        let read_levels = |r: Option<Range<u64>>, comp: Option<v21::Comp>| async move {
            let Some(r) = r else {
                return Ok::<_, Error>(None);
            };
            let b = self.io.read(r).await?;
            Ok(Some(match comp {
                None => b
                    .chunks_exact(2)
                    .map(|c| u16::from_le_bytes([c[0], c[1]]))
                    .collect::<Vec<u16>>(),
                Some(comp) => {
                    // Compressed levels: the count is not stored; raw u16
                    // is all pylance 14 writes here.
                    let _ = comp;
                    return Err(ctx.unsupported("compressed levels in a constant page"));
                }
            }))
        };
        let rep = read_levels(c.rep.clone(), c.rep_comp.clone())
            .await?
            .ok_or_else(|| ctx.corrupt("list page without repetition levels"))?;
        let def = read_levels(c.def.clone(), c.def_comp.clone()).await?;
        if def.as_ref().is_some_and(|d| d.len() != rep.len()) {
            return Err(ctx.corrupt("repetition and definition levels differ in count"));
        }
        let max_visible = v21::max_visible_def(&c.layers);
        let visible = match &def {
            Some(d) => d.iter().filter(|d| **d <= max_visible).count(),
            None => rep.len(),
        };
        let scalar = self.constant_scalar(c, dt, ctx).await?;
        let values = match scalar {
            None => new_null_array(dt, visible),
            Some(d) => {
                let one = make_array(d);
                let idx = arrow_array::UInt32Array::from(vec![0u32; visible]);
                arrow_select::take::take(one.as_ref(), &idx, None)?
            }
        };
        Ok((values, rep, def))
    }

    /// A constant page's value (inline or in its scalar buffer); `None`
    /// for an all-null page.
    pub(super) async fn constant_scalar(
        &self,
        c: &ConstantPage,
        dt: &DataType,
        ctx: &Ctx<'_>,
    ) -> Result<Option<arrow_data::ArrayData>> {
        Ok(match (&c.inline, &c.scalar) {
            (Some(v), _) => Some(
                ArrayDataBuilder::new(dt.clone())
                    .len(1)
                    .add_buffer(Buffer::from(v.clone()))
                    .align_buffers(true)
                    .build()
                    .map_err(|e| ctx.corrupt(format!("inline constant: {e}")))?,
            ),
            (None, Some(r)) => {
                let b = self.io.read(r.clone()).await?;
                Some(scalar_from_buffer(dt, &b, ctx)?)
            }
            (None, None) => None,
        })
    }

    pub(super) async fn read_full(
        &self,
        fz: &FullZip,
        sel: &[Range<u64>],
        rows: u64,
        dt: &DataType,
        ctx: &Ctx<'_>,
    ) -> Result<(ArrayRef, Marks)> {
        if fz.bits_rep > 0 {
            return Err(ctx.unsupported("full-zip pages with repetition levels"));
        }
        let cw = fz.cw_bytes();
        let data = &fz.bufs[0];
        let n = sel_len(sel) as usize;
        let mut defs: Vec<u16> = Vec::with_capacity(if cw > 0 { n } else { 0 });
        let values = match fz.fixed_bits {
            Some(bits) => {
                let vb = bits as usize / 8;
                let per = (cw + vb) as u64;
                let ranges: Vec<Range<u64>> = sel
                    .iter()
                    .map(|r| data.start + r.start * per..data.start + r.end * per)
                    .collect();
                if ranges.iter().any(|r| r.end > data.end) {
                    return Err(ctx.corrupt("full-zip rows past the page's buffer"));
                }
                let fetched = self.io.read_ranges(&ranges).await?;
                let mut out = Vec::with_capacity(n * vb);
                for b in &fetched {
                    for item in b.chunks_exact(cw + vb) {
                        if cw > 0 {
                            defs.push(fz.def_of(&item[..cw]));
                        }
                        out.extend_from_slice(&item[cw..]);
                    }
                }
                fixed_values(fz, Bytes::from(out), n, ctx)?
            }
            None => {
                let ranges = self.full_row_ranges(fz, sel, rows, ctx).await?;
                let fetched = self.io.read_ranges(&ranges).await?;
                let lb = fz.length_bits as usize / 8;
                let mut offsets = Vec::with_capacity(n + 1);
                offsets.push(0u64);
                let mut out: Vec<u8> = Vec::new();
                for (b, r) in fetched.iter().zip(sel) {
                    let mut pos = 0usize;
                    for _ in r.clone() {
                        let short = || ctx.corrupt("full-zip value runs past its row");
                        let def = fz.def_of(b.get(pos..pos + cw).ok_or_else(short)?);
                        pos += cw;
                        if cw > 0 {
                            defs.push(def);
                        }
                        if def == 0 {
                            let v = prefixed(b, &mut pos, lb, short)?;
                            out.extend_from_slice(&fz.values.decode_value(v, ctx)?);
                        }
                        offsets.push(out.len() as u64);
                    }
                    if pos != b.len() {
                        return Err(ctx.corrupt("full-zip row holds bytes past its values"));
                    }
                }
                Values::Var {
                    offsets,
                    data: Bytes::from(out),
                }
            }
        };
        let marks = if cw > 0 {
            Some(marks_from_def(&defs, &fz.layers, ctx)?)
        } else {
            None
        };
        Ok((full_array(fz, dt, values, ctx)?, marks))
    }

    pub(super) async fn read_constant(
        &self,
        c: &ConstantPage,
        sel: &[Range<u64>],
        dt: &DataType,
        ctx: &Ctx<'_>,
    ) -> Result<(ArrayRef, Marks)> {
        let n = sel_len(sel) as usize;
        if c.rep.is_some() || c.rep_comp.is_some() {
            return Err(ctx.unsupported("constant pages with repetition levels"));
        }
        // Definition levels: raw u16 per item unless compressed.
        let marks = match (&c.def, &c.def_comp) {
            (Some(d), None) => {
                let ranges: Vec<Range<u64>> = sel
                    .iter()
                    .map(|r| d.start + 2 * r.start..d.start + 2 * r.end)
                    .collect();
                if ranges.iter().any(|r| r.end > d.end) {
                    return Err(ctx.corrupt("definition levels shorter than the page"));
                }
                let got = self.io.read_ranges(&ranges).await?;
                let def: Vec<u16> = got
                    .iter()
                    .flat_map(|b| b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])))
                    .collect();
                Some(marks_from_def(&def, &c.layers, ctx)?)
            }
            (Some(d), Some(comp)) => {
                let b = self.io.read(d.clone()).await?;
                let total = ((d.end - d.start) as usize).max(1);
                let _ = total;
                let all_rows = sel.last().map_or(0, |r| r.end) as usize;
                let def = v21::levels(comp.decode_block(b, all_rows, ctx)?, all_rows, ctx)?;
                let picked: Vec<u16> = sel
                    .iter()
                    .flat_map(|r| def[r.start as usize..r.end as usize].iter().copied())
                    .collect();
                Some(marks_from_def(&picked, &c.layers, ctx)?)
            }
            (None, _) => None,
        };
        let scalar = self.constant_scalar(c, dt, ctx).await?;
        let array = match scalar {
            None => {
                // All null: the nulls are at the innermost nullable layer.
                let first = c
                    .layers
                    .iter()
                    .position(|l| l.def_levels() > 0)
                    .map_or(mark(0, false), |i| mark(i, false));
                return Ok((
                    new_null_array(dt, n),
                    Some(marks.unwrap_or_else(|| vec![first; n])),
                ));
            }
            Some(d) => {
                let one = make_array(d);
                let idx = arrow_array::UInt32Array::from(vec![0u32; n]);
                arrow_select::take::take(one.as_ref(), &idx, None)?
            }
        };
        Ok((array, marks))
    }
}

/// The value at `*pos` of `b`: a little-endian length of `lb` bytes, then
/// that many bytes; `*pos` moves past it. `short` names a value that runs
/// past `b`.
pub(super) fn prefixed(
    b: &Bytes,
    pos: &mut usize,
    lb: usize,
    short: impl Fn() -> Error,
) -> Result<Bytes> {
    let mut x = [0u8; 8];
    x[..lb].copy_from_slice(b.get(*pos..*pos + lb).ok_or_else(&short)?);
    let start = *pos + lb;
    let end = usize::try_from(u64::from_le_bytes(x))
        .ok()
        .and_then(|len| start.checked_add(len))
        .filter(|e| *e <= b.len())
        .ok_or_else(short)?;
    *pos = end;
    Ok(b.slice(start..end))
}

/// Full-zip values as an array: a variable packed struct's rows are split
/// into its children.
fn full_array(fz: &FullZip, dt: &DataType, values: Values, ctx: &Ctx) -> Result<ArrayRef> {
    match (&fz.values, dt, values) {
        (
            v21::Comp::VarPacked(children),
            DataType::Struct(fields),
            Values::Var { offsets, data },
        ) => var_packed_struct(fields, children, &offsets, &data, ctx),
        (v21::Comp::VarPacked(_), dt, _) => {
            Err(ctx.corrupt(format!("variable packed struct values for a {dt} column")))
        }
        (_, dt, values) => to_array(dt, values, ctx),
    }
}

/// Fixed-width full-zip values (`n` of them, control words removed).
pub(super) fn fixed_values(fz: &FullZip, out: Bytes, n: usize, ctx: &Ctx) -> Result<Values> {
    let bits = fz.fixed_bits.unwrap_or(0) as u64;
    Ok(match &fz.values {
        v21::Comp::Fsl {
            dim,
            has_validity,
            values,
        } => {
            let v21::Comp::Flat {
                bits: item_bits,
                general: None,
            } = values.as_ref()
            else {
                return Err(ctx.unsupported("full-zip lists of compressed items"));
            };
            let d = *dim as usize;
            let item_bytes = (d as u64 * item_bits).div_ceil(8) as usize;
            let (validity, data) = if *has_validity {
                // Per value: a bitmap of its items, then the items.
                let vb = d.div_ceil(8);
                if bits as usize != 8 * (vb + item_bytes) {
                    return Err(ctx.corrupt("full-zip list value of an unexpected width"));
                }
                let mut valid = arrow_buffer::BooleanBufferBuilder::new(n * d);
                let mut data = Vec::with_capacity(n * item_bytes);
                for v in out.chunks_exact(vb + item_bytes) {
                    valid.append_packed_range(0..d, &v[..vb]);
                    data.extend_from_slice(&v[vb..]);
                }
                let valid = valid.finish();
                (
                    Some(Bytes::copy_from_slice(valid.values())),
                    Bytes::from(data),
                )
            } else {
                (None, out)
            };
            Values::Fsl {
                dim: *dim,
                validity,
                child: Box::new(Values::Fixed {
                    bits: *item_bits,
                    data,
                    n: n * d,
                }),
            }
        }
        v21::Comp::Flat { general: None, .. } => Values::Fixed { bits, data: out, n },
        _ => return Err(ctx.unsupported("full-zip fixed values of this compression")),
    })
}

/// A one-value array from Lance's scalar buffer: `u32` buffer count, a
/// `u32` length per buffer, then the Arrow buffers of a length-1 array.
pub(super) fn scalar_from_buffer(
    dt: &DataType,
    b: &[u8],
    ctx: &Ctx,
) -> Result<arrow_data::ArrayData> {
    let bad = || ctx.corrupt("malformed constant value buffer");
    let u32_at = |i: usize| -> Result<usize> {
        Ok(u32::from_le_bytes(b.get(i..i + 4).ok_or_else(bad)?.try_into().unwrap()) as usize)
    };
    let count = u32_at(0)?;
    if count > 8 {
        return Err(bad());
    }
    let mut pos = 4 + 4 * count;
    let mut builder = ArrayDataBuilder::new(dt.clone()).len(1);
    for i in 0..count {
        let len = u32_at(4 + 4 * i)?;
        let bytes = b.get(pos..pos + len).ok_or_else(bad)?;
        builder = builder.add_buffer(Buffer::from(bytes.to_vec()));
        pos += len;
    }
    if pos != b.len() {
        return Err(bad());
    }
    builder
        .align_buffers(true)
        .build()
        .map_err(|e| ctx.corrupt(format!("constant value: {e}")))
}
