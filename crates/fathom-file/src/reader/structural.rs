//! Reading 2.1 and 2.2 files.
//!
//! Only leaf fields have columns; a struct's validity travels in its
//! leaves' definition levels. A leaf read returns its array (leaf nulls
//! applied) and, when any layer is nullable, one *null mark* per row:
//! 0 for a valid item, `k` for "null at layer `k - 1`" (layer 0 is the
//! item, layer 1 the struct around it, ...). Marks are page-independent,
//! unlike raw definition levels, whose numbering skips non-nullable layers
//! and so differs between a page with nulls and one without.
//!
//! Random access: a mini-block page is read chunk by chunk (its chunk
//! metadata and dictionary are read once and kept with the page); a
//! full-zip page reads exactly the rows' bytes (variable-width values look
//! their rows up in the page's row-offset buffer first).

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, UInt64Array, make_array, new_null_array};
use arrow_buffer::{BooleanBuffer, Buffer, NullBuffer};
use arrow_data::ArrayDataBuilder;

use super::v21::{self, ConstantPage, FullZip, Layer, Layout, MiniBlock, Values};
use super::*;

/// Marks of one read: `None` when every row is valid.
type Marks = Option<Vec<u8>>;

/// Null marks from definition levels, given the page's layers.
fn marks_from_def(def: &[u16], layers: &[Layer], ctx: &Ctx) -> Result<Vec<u8>> {
    // The layer index of each definition level (1-based).
    let mut of_level = vec![0u8];
    for (i, l) in layers.iter().enumerate() {
        for _ in 0..l.def_levels() {
            of_level.push(i as u8 + 1);
        }
    }
    def.iter()
        .map(|d| {
            of_level.get(*d as usize).copied().ok_or_else(|| {
                ctx.corrupt(format!(
                    "definition level {d} out of range for {} layers",
                    layers.len()
                ))
            })
        })
        .collect()
}

fn valid_of(marks: &[u8], above: u8) -> NullBuffer {
    NullBuffer::new(BooleanBuffer::from_iter(marks.iter().map(|m| *m <= above)))
}

/// `array` with rows whose mark is non-zero set to null.
fn with_nulls(array: ArrayRef, marks: &Marks) -> Result<ArrayRef> {
    let Some(m) = marks else { return Ok(array) };
    if m.iter().all(|m| *m == 0) {
        return Ok(array);
    }
    let nulls = valid_of(m, 0);
    let nulls = match array.logical_nulls() {
        Some(old) => NullBuffer::new(old.inner() & nulls.inner()),
        None => nulls,
    };
    // A slice's buffers start before it: its null buffer must too.
    let data = array.to_data();
    let off = data.offset();
    let nulls = if off > 0 {
        let mut b = arrow_buffer::BooleanBufferBuilder::new(off + nulls.len());
        b.append_n(off, true);
        b.append_buffer(nulls.inner());
        NullBuffer::new(b.finish()).slice(off, nulls.len())
    } else {
        nulls
    };
    Ok(make_array(data.into_builder().nulls(Some(nulls)).build()?))
}

/// An Arrow array of type `dt` from decoded values.
fn to_array(dt: &DataType, v: Values, ctx: &Ctx) -> Result<ArrayRef> {
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
            ArrayDataBuilder::new(dt.clone())
                .len(n)
                .add_buffer(offs)
                .add_buffer(Buffer::from(data))
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

/// Dictionary indices as u64s.
fn indices_of(v: Values, ctx: &Ctx) -> Result<Vec<u64>> {
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

fn concat_arrays(arrays: Vec<ArrayRef>) -> Result<ArrayRef> {
    if arrays.len() == 1 {
        return Ok(arrays.into_iter().next().unwrap());
    }
    let refs: Vec<&dyn Array> = arrays.iter().map(|a| a.as_ref()).collect();
    Ok(arrow_select::concat::concat(&refs)?)
}

fn concat_marks(parts: Vec<(usize, Marks)>) -> Marks {
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

fn no_lists(layers: &[Layer], ctx: &Ctx) -> Result<()> {
    if layers.iter().any(|l| l.is_list()) {
        return Err(ctx.unsupported(
            "list columns of file format 2.1/2.2 are not readable yet (repetition levels)",
        ));
    }
    Ok(())
}

impl Inner {
    /// Reads a node of a 2.1+ file: its array, null marks, and the layer
    /// index of the node itself (0 for a leaf).
    pub(super) fn read_node21<'a>(
        &'a self,
        node: &'a Node,
        sel: Vec<Range<u64>>,
    ) -> BoxFuture<'a, Result<(ArrayRef, Marks, u8)>> {
        async move {
            let dt = node.field.data_type();
            match dt {
                DataType::Struct(fields) => {
                    let n = sel_len(&sel) as usize;
                    if node.children.is_empty() {
                        let a = StructArray::new_empty_fields(n, None);
                        return Ok((Arc::new(a) as ArrayRef, None, 0));
                    }
                    let kids = try_join_all(
                        node.children
                            .iter()
                            .map(|c| self.read_node21(c, sel.clone())),
                    )
                    .await?;
                    let (_, marks, level) = &kids[0];
                    let level = level + 1;
                    let nulls = marks.as_ref().map(|m| valid_of(m, level));
                    let nulls = nulls.filter(|n| n.null_count() > 0);
                    let marks = marks.clone();
                    let children = kids.into_iter().map(|(a, _, _)| a).collect();
                    let a = StructArray::try_new(fields.clone(), children, nulls)?;
                    Ok((Arc::new(a) as ArrayRef, marks, level))
                }
                DataType::List(_) | DataType::LargeList(_) => Err(self.ctx_named(node).unsupported(
                    "list columns of file format 2.1/2.2 are not readable yet (repetition levels)",
                )),
                _ => {
                    if sel.is_empty() {
                        return Ok((new_empty_array(dt), None, 0));
                    }
                    let (a, m) = self.read_leaf21(node.column, dt, &sel).await?;
                    Ok((a, m, 0))
                }
            }
        }
        .boxed()
    }

    fn ctx_named<'a>(&'a self, node: &'a Node) -> Ctx<'a> {
        Ctx {
            path: self.io.path.as_ref(),
            column: node.field.name(),
        }
    }

    async fn read_leaf21(
        &self,
        column: usize,
        dt: &DataType,
        sel: &[Range<u64>],
    ) -> Result<(ArrayRef, Marks)> {
        let ctx = self.ctx(column);
        let info = &self.columns[column];
        let parts = self.split(column, sel);
        let reads = parts.iter().map(|(p, s)| async {
            let Enc::Structural(page) = &info.pages[*p] else {
                return Err(ctx.corrupt("a 2.0 page in a 2.1+ file"));
            };
            no_lists(page.0.layers(), &ctx)?;
            let rows = info.starts[*p + 1] - info.starts[*p];
            let (a, m) = match page.0.as_ref() {
                Layout::Mini(mb) => self.read_mini(mb, s, dt, &ctx).await?,
                Layout::Full(fz) => self.read_full(fz, s, rows, dt, &ctx).await?,
                Layout::Constant(c) => self.read_constant(c, s, dt, &ctx).await?,
            };
            let a = with_nulls(a, &m)?;
            Ok::<_, Error>((a, m))
        });
        let got = try_join_all(reads).await?;
        let mut arrays = Vec::with_capacity(got.len());
        let mut marks = Vec::with_capacity(got.len());
        for (a, m) in got {
            marks.push((a.len(), m));
            arrays.push(a);
        }
        Ok((concat_arrays(arrays)?, concat_marks(marks)))
    }

    async fn read_mini(
        &self,
        mb: &MiniBlock,
        sel: &[Range<u64>],
        dt: &DataType,
        ctx: &Ctx<'_>,
    ) -> Result<(ArrayRef, Marks)> {
        let index = match mb.index.get() {
            Some(i) => i.clone(),
            None => {
                let meta = self.io.read(mb.bufs[0].clone()).await?;
                let idx = Arc::new(v21::chunk_index(mb, &meta, ctx)?);
                let _ = mb.index.set(idx.clone());
                idx
            }
        };
        let dict = match &mb.dictionary {
            None => None,
            Some((comp, n)) => Some(match mb.dict.get() {
                Some(d) => d.clone(),
                None => {
                    let b = self.io.read(mb.bufs[2].clone()).await?;
                    let d = to_array(dt, comp.decode_block(b, *n as usize, ctx)?, ctx)?;
                    let _ = mb.dict.set(d.clone());
                    d
                }
            }),
        };
        // The chunks the selection touches.
        let mut wanted: Vec<usize> = Vec::new();
        for r in sel {
            let first = index.partition_point(|c| c.items.end <= r.start);
            for (i, c) in index.iter().enumerate().skip(first) {
                if c.items.start >= r.end {
                    break;
                }
                if wanted.last() != Some(&i) {
                    wanted.push(i);
                }
            }
        }
        let ranges: Vec<Range<u64>> = wanted.iter().map(|i| index[*i].bytes.clone()).collect();
        let fetched = self.io.read_ranges(&ranges).await?;
        let value_dt = if dict.is_some() {
            &DataType::UInt64
        } else {
            dt
        };
        let mut decoded: Vec<(Range<u64>, ArrayRef, Marks)> = Vec::with_capacity(wanted.len());
        for (i, bytes) in wanted.iter().zip(fetched) {
            let chunk = &index[*i];
            let n = (chunk.items.end - chunk.items.start) as usize;
            let mut parts = v21::split_chunk(mb, &bytes, ctx)?;
            let marks = match (&mb.def, parts.def.take()) {
                (Some(comp), Some(b)) => {
                    let def = v21::levels(comp.decode_block(b, n, ctx)?, n, ctx)?;
                    Some(marks_from_def(&def, &mb.layers, ctx)?)
                }
                _ => None,
            };
            let values = mb.values.decode_chunk(&mut parts.bufs, n, ctx)?;
            let array = match &dict {
                Some(_) => Arc::new(UInt64Array::from(indices_of(values, ctx)?)) as ArrayRef,
                None => to_array(value_dt, values, ctx)?,
            };
            decoded.push((chunk.items.clone(), array, marks));
        }
        // Slice the selection out of the decoded chunks.
        let mut arrays = Vec::new();
        let mut marks = Vec::new();
        let mut k = 0;
        for r in sel {
            let mut s = r.start;
            while s < r.end {
                while decoded[k].0.end <= s {
                    k += 1;
                }
                let (items, a, m) = &decoded[k];
                let e = r.end.min(items.end);
                let off = (s - items.start) as usize;
                let len = (e - s) as usize;
                arrays.push(a.slice(off, len));
                marks.push((len, m.as_ref().map(|m| m[off..off + len].to_vec())));
                s = e;
            }
        }
        let array = concat_arrays(arrays)?;
        let marks = concat_marks(marks);
        let array = match dict {
            None => array,
            Some(d) => {
                let idx = array.as_any().downcast_ref::<UInt64Array>().unwrap();
                let idx = match &marks {
                    Some(m) => UInt64Array::new(idx.values().clone(), Some(valid_of(m, 0))),
                    None => idx.clone(),
                };
                if idx.iter().flatten().any(|i| i >= d.len() as u64) {
                    return Err(ctx.corrupt(format!(
                        "dictionary index past the {} dictionary items",
                        d.len()
                    )));
                }
                arrow_select::take::take(d.as_ref(), &idx, None)?
            }
        };
        Ok((array, marks))
    }

    async fn read_full(
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
                let out = Bytes::from(out);
                match (&fz.values, dt) {
                    (
                        v21::Comp::Fsl {
                            dim,
                            has_validity: false,
                            values,
                        },
                        _,
                    ) => match values.as_ref() {
                        v21::Comp::Flat {
                            bits,
                            general: None,
                        } => Values::Fsl {
                            dim: *dim,
                            validity: None,
                            child: Box::new(Values::Fixed {
                                bits: *bits,
                                data: out,
                                n: n * *dim as usize,
                            }),
                        },
                        _ => return Err(ctx.unsupported("full-zip lists of compressed items")),
                    },
                    (v21::Comp::Flat { general: None, .. }, _) => Values::Fixed {
                        bits: bits as u64,
                        data: out,
                        n,
                    },
                    _ => return Err(ctx.unsupported("full-zip fixed values of this compression")),
                }
            }
            None => {
                // Row offsets: (rows + 1) entries of 1, 2, 4 or 8 bytes.
                let idx = fz
                    .bufs
                    .get(1)
                    .ok_or_else(|| ctx.corrupt("variable full-zip page without row offsets"))?;
                let w = (idx.end - idx.start) / (rows + 1);
                if !matches!(w, 1 | 2 | 4 | 8) || (idx.end - idx.start) % (rows + 1) != 0 {
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
                            let l = b.get(pos..pos + lb).ok_or_else(short)?;
                            let mut x = [0u8; 8];
                            x[..lb].copy_from_slice(l);
                            let len = u64::from_le_bytes(x) as usize;
                            pos += lb;
                            let v = b.slice(
                                pos..pos
                                    .checked_add(len)
                                    .filter(|e| *e <= b.len())
                                    .ok_or_else(short)?,
                            );
                            pos += len;
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
        Ok((to_array(dt, values, ctx)?, marks))
    }

    async fn read_constant(
        &self,
        c: &ConstantPage,
        sel: &[Range<u64>],
        dt: &DataType,
        ctx: &Ctx<'_>,
    ) -> Result<(ArrayRef, Marks)> {
        let n = sel_len(sel) as usize;
        if c.rep.is_some() || c.has_rep_comp {
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
        let scalar = match (&c.inline, &c.scalar) {
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
        };
        let array = match scalar {
            None => {
                // All null: the nulls are at the innermost nullable layer.
                let first = c
                    .layers
                    .iter()
                    .position(|l| l.def_levels() > 0)
                    .map_or(1, |i| i as u8 + 1);
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

/// A one-value array from Lance's scalar buffer: `u32` buffer count, a
/// `u32` length per buffer, then the Arrow buffers of a length-1 array.
fn scalar_from_buffer(dt: &DataType, b: &[u8], ctx: &Ctx) -> Result<arrow_data::ArrayData> {
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
