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

use super::v21::{self, Layer, Layout};
use super::*;

mod arrays;
mod full;
mod mini;

use arrays::*;

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
    if let Some(st) = array.as_any().downcast_ref::<StructArray>() {
        // A packed struct (a leaf column): its children are null where it
        // is, as a struct stored child by child reads.
        let children = st
            .columns()
            .iter()
            .map(|c| with_nulls(c.clone(), marks))
            .collect::<Result<Vec<_>>>()?;
        let valid = valid_of(m, 0);
        let nulls = match st.nulls() {
            Some(old) => NullBuffer::new(old.inner() & valid.inner()),
            None => valid,
        };
        let DataType::Struct(fields) = st.data_type() else {
            unreachable!()
        };
        return Ok(Arc::new(StructArray::try_new(
            fields.clone(),
            children,
            Some(nulls),
        )?));
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
}
