//! Mini-block pages: chunk metadata, dictionaries, the repetition index,
//! chunk decoding.

use std::sync::Arc;

use super::super::v21::{self, MiniBlock};
use super::super::*;
use super::*;

impl Inner {
    /// The rows each chunk of a mini-block page starts, from its
    /// repetition index (read once per page).
    pub(super) async fn mini_rows(
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

    pub(super) async fn read_mini(
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

    pub(super) async fn mini_dictionary(
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

    pub(super) async fn mini_index(
        &self,
        mb: &MiniBlock,
        ctx: &Ctx<'_>,
    ) -> Result<Arc<Vec<v21::Chunk>>> {
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
    pub(super) async fn mini_levels(
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
}
