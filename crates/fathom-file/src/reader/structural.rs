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

/// The mark of "null at layer `i`" (or, with `empty`, "empty list at layer `i`").
fn mark(i: usize, empty: bool) -> u8 {
    ((i as u8 + 1) << 1) | u8::from(empty)
}

/// The layer a non-zero mark is null (or empty) at.
fn layer_of(m: u8) -> usize {
    (m >> 1) as usize - 1
}

/// Is an entry with mark `m` a value of a node below layer `limit`?
fn below(m: u8, limit: usize) -> bool {
    m == 0 || layer_of(m) < limit
}

/// The first list layer above layer `j`, or the number of layers.
fn next_list(layers: &[Layer], j: usize) -> usize {
    (j + 1..layers.len())
        .find(|i| layers[*i].is_list())
        .unwrap_or(layers.len())
}

/// Null marks from definition levels, given the page's layers.
fn marks_from_def(def: &[u16], layers: &[Layer], ctx: &Ctx) -> Result<Vec<u8>> {
    // The mark of each definition level: a nullable-and-emptyable list has
    // two, null then empty.
    let mut of_level = vec![0u8];
    for (i, l) in layers.iter().enumerate() {
        match l {
            Layer::AllValidItem | Layer::AllValidList => {}
            Layer::NullableItem | Layer::NullableList => of_level.push(mark(i, false)),
            Layer::EmptyableList => of_level.push(mark(i, true)),
            Layer::NullAndEmptyList => {
                of_level.push(mark(i, false));
                of_level.push(mark(i, true));
            }
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

/// Validity of a node at layer `j`: valid unless null at `j` or above.
fn valid_of(marks: &[u8], j: usize) -> NullBuffer {
    NullBuffer::new(BooleanBuffer::from_iter(marks.iter().map(|m| below(*m, j))))
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
fn packed_struct(
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

/// Checks variable-width values before they become an array: `n + 1`
/// non-decreasing offsets within `data` and, for strings, UTF-8 (checked
/// once over all values, SIMD) cut only at character boundaries.
fn check_var(offsets: &[u64], data: &[u8], n: usize, dt: &DataType, ctx: &Ctx) -> Result<()> {
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

/// Decoded values gathered from several chunks.
enum Acc {
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
    fn like(v: &Values) -> Acc {
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
    fn reserve(&mut self, v: &Values, rows: usize) {
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

    fn append(&mut self, v: &Values, r: Range<usize>, ctx: &Ctx) -> Result<()> {
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

    fn finish(self) -> Values {
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

/// The levels of a node's entries. Without lists an entry is a row;
/// with lists, entries are the leaf's level entries that reach this node
/// (each list layer keeps only the entries that start one of its lists).
#[derive(Debug, Clone)]
struct Levels {
    rep: Option<Vec<u16>>,
    marks: Marks,
    layers: Arc<[Layer]>,
}

/// A node read from a 2.1+ file.
struct Read21 {
    array: ArrayRef,
    levels: Levels,
    /// The node's own layer (0 for a leaf).
    level: usize,
}

/// Entry ranges of the rows in `sel`, from repetition levels (a row starts
/// where the level is the maximum).
fn row_entries(
    rep: &[u16],
    max_rep: u16,
    rows: u64,
    sel: &[Range<u64>],
    ctx: &Ctx,
) -> Result<Vec<Range<usize>>> {
    let mut starts: Vec<usize> = rep
        .iter()
        .enumerate()
        .filter(|(_, r)| **r == max_rep)
        .map(|(i, _)| i)
        .collect();
    if starts.first().is_some_and(|s| *s != 0) {
        return Err(ctx.corrupt("repetition levels do not begin with a row"));
    }
    if starts.len() as u64 != rows {
        return Err(ctx.corrupt(format!(
            "repetition levels start {} rows; the page holds {rows}",
            starts.len()
        )));
    }
    starts.push(rep.len());
    Ok(sel
        .iter()
        .map(|r| starts[r.start as usize]..starts[r.end as usize])
        .collect())
}

/// Decoded items of a page: values, repetition levels, definition levels
/// (absent when nothing is null).
type Decoded = (ArrayRef, Vec<u16>, Option<Vec<u16>>);

/// Cuts the rows `sel` out of decoded levels and values: their entries'
/// levels and marks and their values. `rows`, when known, is the number of
/// rows the levels must start; a leading `preamble` (the end of a row begun
/// before the levels) is dropped first.
#[allow(clippy::too_many_arguments)]
fn cut_rows(
    values: ArrayRef,
    mut rep: Vec<u16>,
    def: Option<Vec<u16>>,
    layers: &[Layer],
    max_rep: u16,
    limit: usize,
    rows: Option<u64>,
    preamble: bool,
    sel: &[Range<u64>],
    ctx: &Ctx,
) -> Result<(ArrayRef, Option<Vec<u16>>, Marks)> {
    let mut marks = match def {
        Some(d) => Some(marks_from_def(&d, layers, ctx)?),
        None => None,
    };
    let mut values = values;
    if preamble {
        let skip = rep.iter().position(|r| *r == max_rep).unwrap_or(rep.len());
        let skipped = match &marks {
            Some(m) => m[..skip].iter().filter(|m| below(**m, limit)).count(),
            None => skip,
        };
        if skipped > values.len() {
            return Err(ctx.corrupt("a chunk's preamble holds more values than the chunk"));
        }
        values = values.slice(skipped, values.len() - skipped);
        rep.drain(..skip);
        if let Some(m) = marks.as_mut() {
            m.drain(..skip);
        }
    }
    let rows = match rows {
        Some(r) => r,
        None => rep.iter().filter(|r| **r == max_rep).count() as u64,
    };
    if sel.iter().any(|r| r.end > rows) {
        return Err(ctx.corrupt(format!(
            "rows asked for past the {rows} the repetition levels start"
        )));
    }
    let entries = row_entries(&rep, max_rep, rows, sel, ctx)?;
    // Values before each entry.
    let mut before = Vec::with_capacity(rep.len() + 1);
    let mut k = 0usize;
    for e in 0..rep.len() {
        before.push(k);
        if marks.as_ref().is_none_or(|m| below(m[e], limit)) {
            k += 1;
        }
    }
    before.push(k);
    if k != values.len() {
        return Err(ctx.corrupt(format!(
            "levels describe {k} values; the page decoded {}",
            values.len()
        )));
    }
    let mut arrays = Vec::with_capacity(entries.len());
    let mut out_rep = Vec::new();
    let mut out_marks = Vec::new();
    for r in &entries {
        arrays.push(values.slice(before[r.start], before[r.end] - before[r.start]));
        out_rep.extend_from_slice(&rep[r.clone()]);
        if let Some(m) = &marks {
            out_marks.extend_from_slice(&m[r.clone()]);
        }
    }
    let values = if arrays.len() == 1 {
        arrays.pop().expect("one")
    } else if arrays.is_empty() {
        values.slice(0, 0)
    } else {
        concat_arrays(arrays)?
    };
    Ok((values, Some(out_rep), marks.map(|_| out_marks)))
}

impl Inner {
    /// Reads a node of a 2.1+ file.
    fn read_node21_inner<'a>(
        &'a self,
        node: &'a Node,
        sel: Vec<Range<u64>>,
    ) -> BoxFuture<'a, Result<Read21>> {
        async move {
            let dt = node.field.data_type();
            let ctx = self.ctx_named(node);
            match dt {
                DataType::Struct(fields) if node.column == NO_COLUMN => {
                    if node.children.is_empty() {
                        let n = sel_len(&sel) as usize;
                        let a = StructArray::new_empty_fields(n, None);
                        return Ok(Read21 {
                            array: Arc::new(a),
                            levels: Levels {
                                rep: None,
                                marks: None,
                                layers: Arc::from(vec![]),
                            },
                            level: 0,
                        });
                    }
                    let kids = try_join_all(
                        node.children
                            .iter()
                            .map(|c| self.read_node21_inner(c, sel.clone())),
                    )
                    .await?;
                    let level = kids[0].level + 1;
                    let levels = kids[0].levels.clone();
                    if levels.layers.len() <= level || levels.layers[level].is_list() {
                        return Err(ctx.corrupt("struct layer missing from its leaves' levels"));
                    }
                    let limit = next_list(&levels.layers, level);
                    let nulls = levels.marks.as_ref().map(|m| {
                        let visible: Vec<u8> =
                            m.iter().copied().filter(|m| below(*m, limit)).collect();
                        valid_of(&visible, level)
                    });
                    let nulls = nulls.filter(|n| n.null_count() > 0);
                    let children = kids.into_iter().map(|k| k.array).collect();
                    let a = StructArray::try_new(fields.clone(), children, nulls)?;
                    Ok(Read21 {
                        array: Arc::new(a),
                        levels,
                        level,
                    })
                }
                DataType::List(item) | DataType::LargeList(item) => {
                    let kid = self.read_node21_inner(&node.children[0], sel).await?;
                    let level = kid.level + 1;
                    let Levels { rep, marks, layers } = kid.levels;
                    if layers.len() <= level || !layers[level].is_list() {
                        return Err(ctx.corrupt("list layer missing from its leaves' levels"));
                    }
                    let Some(rep) = rep else {
                        return Err(ctx.corrupt("list column without repetition levels"));
                    };
                    let limit = next_list(&layers, level);
                    let n = rep.len();
                    let mut offsets: Vec<usize> = Vec::new();
                    let mut valid: Vec<bool> = Vec::new();
                    let mut out_rep = Vec::new();
                    let mut out_marks = Vec::new();
                    let mut len = 0usize;
                    for e in 0..n {
                        let m = marks.as_ref().map_or(0, |m| m[e]);
                        if rep[e] == 0 {
                            len += 1;
                            continue;
                        }
                        out_rep.push(rep[e] - 1);
                        out_marks.push(m);
                        if !below(m, limit) {
                            continue; // null or empty further out: no list here
                        }
                        offsets.push(len);
                        if m == 0 || layer_of(m) < level {
                            len += 1;
                            valid.push(true);
                        } else {
                            // Null or empty here, or null at a struct above.
                            valid.push(layer_of(m) == level && m & 1 == 1);
                        }
                    }
                    offsets.push(len);
                    if len != kid.array.len() {
                        return Err(ctx.corrupt(format!(
                            "levels describe {len} list items; {} were decoded",
                            kid.array.len()
                        )));
                    }
                    let nulls = NullBuffer::new(BooleanBuffer::from(valid));
                    let nulls = (nulls.null_count() > 0).then_some(nulls);
                    let array: ArrayRef = if matches!(dt, DataType::List(_)) {
                        if len > i32::MAX as usize {
                            return Err(Error::invalid("list items exceed i32 offsets"));
                        }
                        let o = OffsetBuffer::new(ScalarBuffer::from(
                            offsets.iter().map(|o| *o as i32).collect::<Vec<_>>(),
                        ));
                        Arc::new(ListArray::try_new(item.clone(), o, kid.array, nulls)?)
                    } else {
                        let o = OffsetBuffer::new(ScalarBuffer::from(
                            offsets.iter().map(|o| *o as i64).collect::<Vec<_>>(),
                        ));
                        Arc::new(LargeListArray::try_new(item.clone(), o, kid.array, nulls)?)
                    };
                    let marks = marks.map(|_| out_marks);
                    Ok(Read21 {
                        array,
                        levels: Levels {
                            rep: Some(out_rep),
                            marks,
                            layers,
                        },
                        level,
                    })
                }
                _ => {
                    let (values, levels) = self.read_leaf21(node.column, dt, &sel).await?;
                    // The leaf's values are its entries below the first list.
                    let limit = next_list(&levels.layers, 0);
                    let array = match &levels.marks {
                        Some(m) => {
                            let visible: Vec<u8> =
                                m.iter().copied().filter(|m| below(*m, limit)).collect();
                            if visible.len() != values.len() {
                                return Err(ctx.corrupt(format!(
                                    "levels describe {} values; {} were decoded",
                                    visible.len(),
                                    values.len()
                                )));
                            }
                            with_nulls(values, &Some(visible))?
                        }
                        None => values,
                    };
                    Ok(Read21 {
                        array,
                        levels,
                        level: 0,
                    })
                }
            }
        }
        .boxed()
    }

    /// Reads a node of a 2.1+ file as an array of the selected rows.
    pub(super) async fn read_node21(&self, node: &Node, sel: Vec<Range<u64>>) -> Result<ArrayRef> {
        let rows = sel_len(&sel) as usize;
        let got = self.read_node21_inner(node, sel).await?;
        if got.array.len() != rows {
            return Err(self.ctx_named(node).corrupt(format!(
                "levels describe {} rows; {rows} were asked for",
                got.array.len()
            )));
        }
        Ok(got.array)
    }

    fn ctx_named<'a>(&'a self, node: &'a Node) -> Ctx<'a> {
        Ctx {
            path: self.io.path.as_ref(),
            column: node.field.name(),
            page: None,
        }
    }

    /// A leaf's values (entries below its first list, nulls not applied)
    /// and the levels of the selected rows' entries.
    async fn read_leaf21(
        &self,
        column: usize,
        dt: &DataType,
        sel: &[Range<u64>],
    ) -> Result<(ArrayRef, Levels)> {
        let ctx = self.ctx(column);
        let info = &self.columns[column];
        let parts = self.split(column, sel);
        let mut layers: Option<Arc<[Layer]>> = None;
        for (p, _) in &parts {
            let Enc::Structural(page) = &info.pages[*p] else {
                return Err(ctx.corrupt("a 2.0 page in a 2.1+ file"));
            };
            let l = page.0.layers();
            match &layers {
                None => layers = Some(Arc::from(l.to_vec())),
                Some(have) => {
                    if have.len() != l.len()
                        || have.iter().zip(l).any(|(a, b)| a.is_list() != b.is_list())
                    {
                        return Err(ctx.corrupt("pages of one column disagree on its layers"));
                    }
                }
            }
        }
        let layers = layers.unwrap_or_else(|| Arc::from(vec![Layer::AllValidItem]));
        let nested = layers.iter().any(|l| l.is_list());
        let reads = parts.iter().map(|(p, s)| async {
            let Enc::Structural(page) = &info.pages[*p] else {
                unreachable!("checked above")
            };
            let rows = info.starts[*p + 1] - info.starts[*p];
            let ctx = ctx.at_page(*p);
            if nested {
                return self.read_nested_page(&page.0, s, rows, dt, &ctx).await;
            }
            let (a, m) = match page.0.as_ref() {
                Layout::Blob(inner, layers) => {
                    self.read_blob(inner, layers, s, rows, dt, &ctx).await?
                }
                page => self.read_flat_page(page, s, rows, dt, &ctx).await?,
            };
            Ok::<_, Error>((a, None, m))
        });
        let got = try_join_all(reads).await?;
        let mut arrays = Vec::with_capacity(got.len());
        let mut marks = Vec::with_capacity(got.len());
        let mut reps: Vec<u16> = Vec::new();
        for (a, r, m) in got {
            let entries = r.as_ref().map_or(a.len(), |r| r.len());
            marks.push((entries, m));
            if let Some(r) = r {
                reps.extend_from_slice(&r);
            }
            arrays.push(a);
        }
        let levels = Levels {
            rep: nested.then_some(reps),
            marks: concat_marks(marks),
            layers,
        };
        Ok((concat_arrays(arrays)?, levels))
    }

    /// Reads the selected rows of a page with repetition levels. A
    /// mini-block page with a repetition index decodes only the chunks
    /// holding the rows (rows may span chunks); a full-zip page reads the
    /// rows' bytes through its row offsets; otherwise the page's levels and
    /// values are decoded whole. The rows' entries and values are then cut
    /// out.
    async fn read_nested_page(
        &self,
        page: &Layout,
        sel: &[Range<u64>],
        rows: u64,
        dt: &DataType,
        ctx: &Ctx<'_>,
    ) -> Result<(ArrayRef, Option<Vec<u16>>, Marks)> {
        let layers = page.layers();
        let max_rep = layers.iter().filter(|l| l.is_list()).count() as u16;
        let limit = next_list(layers, 0);
        let sorted = sel.windows(2).all(|w| w[0].end <= w[1].start);
        let whole = sel_len(sel) == rows;
        // Cuts rows out of decoded (values, repetition, definition) levels.
        let cut = |levels: Decoded, rows: Option<u64>, preamble: bool, sel: &[Range<u64>]| {
            let (values, rep, def) = levels;
            cut_rows(
                values, rep, def, layers, max_rep, limit, rows, preamble, sel, ctx,
            )
        };
        let mut parts = Vec::new();
        match page {
            Layout::Mini(mb) if mb.rep_index_stride > 0 && sorted && !whole => {
                let index = self.mini_index(mb, ctx).await?;
                let chunk_rows = self.mini_rows(mb, index.len(), rows, ctx).await?;
                let spans = v21::chunk_spans(&chunk_rows, sel);
                let decoded = try_join_all(
                    spans
                        .iter()
                        .map(|(a, b)| self.mini_levels(mb, dt, *a..*b + 1, ctx)),
                )
                .await?;
                let mut rest = sel;
                for ((a, b), levels) in spans.iter().zip(decoded) {
                    let first = chunk_rows[*a].first;
                    let end = chunk_rows[*b].first + chunk_rows[*b].starts;
                    let n = rest.partition_point(|r| r.end <= end);
                    let here: Vec<Range<u64>> = rest[..n]
                        .iter()
                        .map(|r| r.start - first..r.end - first)
                        .collect();
                    rest = &rest[n..];
                    let preamble = chunk_rows[*a].preamble;
                    parts.push(cut(levels, None, preamble, &here)?);
                }
            }
            Layout::Full(fz) if fz.bufs.len() > 1 && !whole => {
                let bytes = self.full_rows_bytes(fz, sel, rows, ctx).await?;
                let levels = self.full_levels(fz, dt, bytes, ctx)?;
                let n = sel_len(sel);
                parts.push(cut(levels, Some(n), false, &[0..n])?);
            }
            _ => {
                let levels = match page {
                    Layout::Mini(mb) => {
                        let chunks = self.mini_index(mb, ctx).await?.len();
                        self.mini_levels(mb, dt, 0..chunks, ctx).await?
                    }
                    Layout::Full(fz) => {
                        let b = self.io.read(fz.bufs[0].clone()).await?;
                        self.full_levels(fz, dt, b, ctx)?
                    }
                    Layout::Constant(c) => self.constant_levels(c, dt, limit, ctx).await?,
                    Layout::Blob(..) => return Err(ctx.unsupported("blob pages of lists")),
                };
                parts.push(cut(levels, Some(rows), false, sel)?);
            }
        }
        if parts.len() == 1 {
            return Ok(parts.pop().expect("one part"));
        }
        let mut arrays = Vec::with_capacity(parts.len());
        let mut out_rep = Vec::new();
        let mut marks = Vec::with_capacity(parts.len());
        for (a, r, m) in parts {
            let r = r.expect("nested parts have levels");
            marks.push((r.len(), m));
            out_rep.extend_from_slice(&r);
            arrays.push(a);
        }
        let values = if arrays.is_empty() {
            new_empty_array(dt)
        } else {
            concat_arrays(arrays)?
        };
        Ok((values, Some(out_rep), concat_marks(marks)))
    }

    /// The selected rows of a page without repetition: values and marks.
    async fn read_flat_page(
        &self,
        page: &Layout,
        s: &[Range<u64>],
        rows: u64,
        dt: &DataType,
        ctx: &Ctx<'_>,
    ) -> Result<(ArrayRef, Marks)> {
        match page {
            Layout::Mini(mb) => self.read_mini(mb, s, dt, ctx).await,
            Layout::Full(fz) => self.read_full(fz, s, rows, dt, ctx).await,
            Layout::Constant(c) => self.read_constant(c, s, dt, ctx).await,
            Layout::Blob(..) => Err(ctx.corrupt("a blob page inside a blob page")),
        }
    }

    /// The selected rows of a blob page: each row's description (position
    /// and size, two u64s packed in the inner page) names its bytes in the
    /// file; a size of 0 is an empty value, or a null when the position's
    /// bits 16..32 hold a definition level.
    async fn read_blob(
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

    /// The rows each chunk of a mini-block page starts, from its
    /// repetition index (read once per page).
    async fn mini_rows(
        &self,
        mb: &MiniBlock,
        chunks: usize,
        rows: u64,
        ctx: &Ctx<'_>,
    ) -> Result<Arc<Vec<v21::ChunkRows>>> {
        if let Some(r) = mb.rows.get() {
            return Ok(r.clone());
        }
        let buf = mb.bufs.last().expect("checked at parse").clone();
        let b = self.io.read(buf).await?;
        let r = Arc::new(v21::chunk_rows(&b, mb.rep_index_stride, chunks, rows, ctx)?);
        let _ = mb.rows.set(r.clone());
        Ok(r)
    }

    /// The byte ranges of the selected rows of a full-zip page, from its row
    /// offsets (`rows + 1` entries of 1, 2, 4 or 8 bytes; two read per
    /// range).
    async fn full_row_ranges(
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
    async fn full_rows_bytes(
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

    async fn read_mini(
        &self,
        mb: &MiniBlock,
        sel: &[Range<u64>],
        dt: &DataType,
        ctx: &Ctx<'_>,
    ) -> Result<(ArrayRef, Marks)> {
        let index = self.mini_index(mb, ctx).await?;
        let dict = self.mini_dictionary(mb, dt, ctx).await?;
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
        // Per chunk: decode, then copy the selected rows' values straight
        // into one accumulator (no per-chunk arrays).
        let mut acc: Option<Acc> = None;
        let mut marks: Vec<u8> = Vec::new();
        let mut any_marks = false;
        let mut r_i = 0usize;
        let mut pos = sel.first().map_or(0, |r| r.start);
        for (i, bytes) in wanted.iter().zip(fetched) {
            let chunk = &index[*i];
            let n = (chunk.items.end - chunk.items.start) as usize;
            let mut parts = v21::split_chunk(mb, &bytes, ctx)?;
            let chunk_marks = match (&mb.def, parts.def.take()) {
                (Some(comp), Some(b)) => {
                    let def = v21::levels(comp.decode_block(b, n, ctx)?, n, ctx)?;
                    Some(marks_from_def(&def, &mb.layers, ctx)?)
                }
                _ => None,
            };
            // The selected rows inside this chunk, as local ranges.
            let mut local: Vec<Range<usize>> = Vec::new();
            while r_i < sel.len() && pos < chunk.items.end {
                let r = &sel[r_i];
                let s = pos.max(r.start).max(chunk.items.start);
                let e = r.end.min(chunk.items.end);
                if s < e {
                    local.push((s - chunk.items.start) as usize..(e - chunk.items.start) as usize);
                }
                if r.end <= chunk.items.end {
                    r_i += 1;
                    pos = sel.get(r_i).map_or(u64::MAX, |r| r.start);
                } else {
                    pos = chunk.items.end;
                    break;
                }
            }
            let picked: usize = local.iter().map(|r| r.len()).sum();
            // FSST strings expand straight into the accumulator.
            let mut done = false;
            if dict.is_none() && matches!(mb.values, v21::Comp::Fsst { .. }) {
                let a = acc.get_or_insert_with(|| {
                    let mut offsets = Vec::with_capacity(sel_len(sel) as usize + 1);
                    offsets.push(0);
                    Acc::Var {
                        offsets,
                        data: Vec::new(),
                    }
                });
                if let Acc::Var { offsets, data } = a {
                    let was = data.len();
                    done = mb
                        .values
                        .fsst_rows_into(&parts.bufs, n, &local, data, offsets, ctx)?;
                    // After the first chunk, room for the rest at its
                    // expansion (one allocation instead of a doubling per
                    // step of growth).
                    if done && was == 0 && !data.is_empty() {
                        let rest: u64 = ranges[1..].iter().map(|r| r.end - r.start).sum();
                        let per = data.len() as f64 / bytes.len().max(1) as f64;
                        let want = data.len() + (rest as f64 * per * 1.1) as usize;
                        data.reserve(want.saturating_sub(data.len()));
                    }
                }
            }
            // A few rows of a big chunk: decode just those values.
            let sparse = if done {
                None
            } else if picked * 16 < n {
                let rows: Vec<usize> = local.iter().flat_map(|r| r.clone()).collect();
                mb.values
                    .decode_chunk_rows(&parts.bufs, n, &rows, ctx)?
                    .map(|v| (v, rows))
            } else {
                None
            };
            let mut rows = None;
            if !done {
                let (values, ranges) = match sparse {
                    Some((v, r)) => {
                        let k = v.len();
                        rows = Some(r);
                        (v, vec![0..k])
                    }
                    None => (
                        mb.values.decode_chunk(&mut parts.bufs, n, ctx)?,
                        local.clone(),
                    ),
                };
                let acc = acc.get_or_insert_with(|| {
                    // Room for every selected row at this chunk's width.
                    let mut a = Acc::like(&values);
                    a.reserve(&values, sel_len(sel) as usize);
                    a
                });
                for r in ranges {
                    acc.append(&values, r, ctx)?;
                }
            }
            match (&chunk_marks, rows) {
                (Some(m), Some(rows)) => {
                    any_marks = true;
                    marks.extend(rows.iter().map(|r| m[*r]));
                }
                (Some(m), None) => {
                    any_marks = true;
                    for r in &local {
                        marks.extend_from_slice(&m[r.clone()]);
                    }
                }
                (None, _) => marks.extend(std::iter::repeat_n(0, picked)),
            }
        }
        let marks = any_marks.then_some(marks);
        let values = acc
            .map(Acc::finish)
            .ok_or_else(|| ctx.corrupt("no mini-block chunk for the selected rows"))?;
        let array = match &dict {
            Some(_) => Arc::new(UInt64Array::from(indices_of(values, ctx)?)) as ArrayRef,
            None => to_array(dt, values, ctx)?,
        };
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

    async fn mini_dictionary(
        &self,
        mb: &MiniBlock,
        dt: &DataType,
        ctx: &Ctx<'_>,
    ) -> Result<Option<ArrayRef>> {
        let Some((comp, n)) = &mb.dictionary else {
            return Ok(None);
        };
        if let Some(d) = mb.dict.get() {
            return Ok(Some(d.clone()));
        }
        let b = self.io.read(mb.bufs[2].clone()).await?;
        let d = to_array(dt, comp.decode_block(b, *n as usize, ctx)?, ctx)?;
        let _ = mb.dict.set(d.clone());
        Ok(Some(d))
    }

    async fn mini_index(&self, mb: &MiniBlock, ctx: &Ctx<'_>) -> Result<Arc<Vec<v21::Chunk>>> {
        if let Some(i) = mb.index.get() {
            return Ok(i.clone());
        }
        let meta = self.io.read(mb.bufs[0].clone()).await?;
        let idx = Arc::new(v21::chunk_index(mb, &meta, ctx)?);
        let _ = mb.index.set(idx.clone());
        Ok(idx)
    }

    /// Chunks `chunks` of a mini-block page with repetition: values, rep
    /// and def levels.
    async fn mini_levels(
        &self,
        mb: &MiniBlock,
        dt: &DataType,
        chunks: Range<usize>,
        ctx: &Ctx<'_>,
    ) -> Result<Decoded> {
        let index = self.mini_index(mb, ctx).await?;
        let index = index
            .get(chunks)
            .ok_or_else(|| ctx.corrupt("repetition index names chunks the page lacks"))?;
        let dict = self.mini_dictionary(mb, dt, ctx).await?;
        let ranges: Vec<Range<u64>> = index.iter().map(|c| c.bytes.clone()).collect();
        let fetched = self.io.read_ranges(&ranges).await?;
        let mut arrays = Vec::with_capacity(index.len());
        let mut rep = Vec::new();
        let mut def = mb.def.as_ref().map(|_| Vec::new());
        for (chunk, bytes) in index.iter().zip(fetched) {
            let n = (chunk.items.end - chunk.items.start) as usize;
            let mut parts = v21::split_chunk(mb, &bytes, ctx)?;
            let levels = parts.num_levels;
            match (&mb.rep, parts.rep.take()) {
                (Some(comp), Some(b)) => rep.extend(v21::levels(
                    comp.decode_block(b, levels, ctx)?,
                    levels,
                    ctx,
                )?),
                _ => return Err(ctx.corrupt("list page chunk without repetition levels")),
            }
            if let (Some(comp), Some(b), Some(d)) = (&mb.def, parts.def.take(), def.as_mut()) {
                d.extend(v21::levels(
                    comp.decode_block(b, levels, ctx)?,
                    levels,
                    ctx,
                )?);
            }
            let values = mb.values.decode_chunk(&mut parts.bufs, n, ctx)?;
            arrays.push(match &dict {
                Some(d) => {
                    let idx = UInt64Array::from(indices_of(values, ctx)?);
                    if idx.values().iter().any(|i| *i >= d.len() as u64) && !idx.is_empty() {
                        // Null slots may hold any index: clamp them later.
                        let clamped: Vec<u64> = idx
                            .values()
                            .iter()
                            .map(|i| (*i).min(d.len().saturating_sub(1) as u64))
                            .collect();
                        arrow_select::take::take(d.as_ref(), &UInt64Array::from(clamped), None)?
                    } else {
                        arrow_select::take::take(d.as_ref(), &idx, None)?
                    }
                }
                None => to_array(dt, values, ctx)?,
            });
        }
        if def.as_ref().is_some_and(|d| d.len() != rep.len()) {
            return Err(ctx.corrupt("repetition and definition levels differ in count"));
        }
        let values = if arrays.is_empty() {
            new_empty_array(dt)
        } else {
            concat_arrays(arrays)?
        };
        Ok((values, rep, def))
    }

    /// Whole rows of a full-zip page with repetition (`b`: their zipped
    /// bytes): values, rep and def levels.
    fn full_levels(&self, fz: &FullZip, dt: &DataType, b: Bytes, ctx: &Ctx<'_>) -> Result<Decoded> {
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
                        let mut x = [0u8; 8];
                        x[..lb].copy_from_slice(b.get(pos..pos + lb).ok_or_else(short)?);
                        pos += lb;
                        let len = u64::from_le_bytes(x) as usize;
                        let v = b.slice(
                            pos..pos
                                .checked_add(len)
                                .filter(|e| *e <= b.len())
                                .ok_or_else(short)?,
                        );
                        pos += len;
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
        Ok((to_array(dt, values, ctx)?, rep, def))
    }

    /// A whole constant page with repetition: values, rep and def levels.
    async fn constant_levels(
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
    async fn constant_scalar(
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

/// Fixed-width full-zip values (`n` of them, control words removed).
fn fixed_values(fz: &FullZip, out: Bytes, n: usize, ctx: &Ctx) -> Result<Values> {
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
