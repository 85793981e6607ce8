//! Decoding a compression tree's buffers into values: mini-block chunks,
//! full-zip blocks and single values; run lengths, levels and chunk
//! splitting.

use super::*;

impl Comp {
    /// Decodes the buffers of one mini-block chunk holding `n` values.
    pub(crate) fn decode_chunk(
        &self,
        bufs: &mut Vec<Bytes>,
        n: usize,
        ctx: &Ctx,
    ) -> Result<Values> {
        let mut take = || -> Result<Bytes> {
            if bufs.is_empty() {
                return Err(ctx.corrupt("mini-block chunk has fewer buffers than its compression"));
            }
            Ok(bufs.remove(0))
        };
        match self {
            Comp::Flat {
                bits,
                general: None,
            } => {
                let b = take()?;
                fixed_len_check(&b, n, *bits, ctx)?;
                Ok(Values::Fixed {
                    bits: *bits,
                    data: b,
                    n,
                })
            }
            Comp::Inline { word_bits } => {
                let b = take()?;
                let data = by_word(
                    *word_bits,
                    || inline_unpack::<u8>(&b, n, ctx),
                    || inline_unpack::<u16>(&b, n, ctx),
                    || inline_unpack::<u32>(&b, n, ctx),
                    || inline_unpack::<u64>(&b, n, ctx),
                )?;
                Ok(Values::Fixed {
                    bits: *word_bits,
                    data,
                    n,
                })
            }
            Comp::Variable {
                offsets,
                general: None,
            } => {
                let b = take()?;
                match offsets.as_ref() {
                    Comp::Flat {
                        bits: bits @ (32 | 64),
                        general: None,
                    } => {
                        let offs = leading_offsets(&b, n, *bits, ctx)?;
                        rebase(offs, &b, ctx)
                    }
                    _ => Err(ctx.unsupported("mini-block strings with compressed offsets")),
                }
            }
            Comp::Fsst { table, values } => {
                let Values::Var { offsets, data } = values.decode_chunk(bufs, n, ctx)? else {
                    return Err(ctx.corrupt("FSST over fixed-width values"));
                };
                let (offsets, data) = table.decode(&offsets, &data, ctx)?;
                Ok(Values::Var { offsets, data })
            }
            Comp::General { scheme, inner } => {
                if bufs.is_empty() {
                    return Err(ctx.corrupt("mini-block chunk without buffers"));
                }
                bufs[0] = general_decompress(*scheme, &bufs[0], ctx)?;
                inner.decode_chunk(bufs, n, ctx)
            }
            Comp::Fsl {
                dim,
                has_validity,
                values,
            } => {
                let validity = if *has_validity { Some(take()?) } else { None };
                let child = values.decode_chunk(bufs, n * *dim as usize, ctx)?;
                if let Some(v) = &validity {
                    fixed_len_check(v, n * *dim as usize, 1, ctx)?;
                }
                Ok(Values::Fsl {
                    dim: *dim,
                    validity,
                    child: Box::new(child),
                })
            }
            Comp::ByteStreamSplit { bits } => {
                let b = take()?;
                let w = (*bits / 8) as usize;
                if b.len() < n * w {
                    return Err(ctx.corrupt("byte-stream split chunk too short"));
                }
                let mut out = vec![0u8; n * w];
                for (k, stream) in b[..n * w].chunks_exact(n.max(1)).enumerate() {
                    for (i, byte) in stream.iter().enumerate() {
                        out[i * w + k] = *byte;
                    }
                }
                Ok(Values::Fixed {
                    bits: *bits,
                    data: Bytes::from(out),
                    n,
                })
            }
            Comp::Constant(Some(v)) => Ok(Values::Fixed {
                bits: v.len() as u64 * 8,
                data: Bytes::from(v.repeat(n)),
                n,
            }),
            Comp::Rle { bits, len_bits } => {
                let values = take()?;
                let lengths = take()?;
                run_lengths(&values, &lengths, *bits, *len_bits, n, ctx)
            }
            other => Err(ctx.unsupported(format!("{} in a mini-block chunk", other.name()))),
        }
    }

    /// FSST strings of one mini-block chunk of `n` values, the rows in
    /// `ranges` expanded straight onto `out` / `ends` (an accumulator's
    /// bytes and end offsets). `false` when this compression is not FSST
    /// over plain offsets (the caller decodes the chunk).
    pub(crate) fn fsst_rows_into(
        &self,
        bufs: &[Bytes],
        n: usize,
        ranges: &[Range<usize>],
        out: &mut Vec<u8>,
        ends: &mut Vec<u64>,
        ctx: &Ctx,
    ) -> Result<bool> {
        let Comp::Fsst { table, values } = self else {
            return Ok(false);
        };
        let Comp::Variable {
            offsets,
            general: None,
        } = values.as_ref()
        else {
            return Ok(false);
        };
        let Comp::Flat {
            bits: bits @ (32 | 64),
            general: None,
        } = offsets.as_ref()
        else {
            return Ok(false);
        };
        let b = bufs
            .first()
            .ok_or_else(|| ctx.corrupt("mini-block chunk without buffers"))?;
        let offs = leading_offsets(b, n, *bits, ctx)?;
        for r in ranges {
            table.decode_into(&offs[r.start..=r.end], b, out, ends, ctx)?;
        }
        Ok(true)
    }

    /// The values at `rows` (sorted) of one mini-block chunk of `n` values,
    /// decoding only those; `None` when this compression has no such path
    /// (the caller decodes the whole chunk).
    pub(crate) fn decode_chunk_rows(
        &self,
        bufs: &[Bytes],
        n: usize,
        rows: &[usize],
        ctx: &Ctx,
    ) -> Result<Option<Values>> {
        let Comp::Inline { word_bits } = self else {
            return Ok(None);
        };
        let b = bufs
            .first()
            .ok_or_else(|| ctx.corrupt("mini-block chunk without buffers"))?;
        let data = by_word(
            *word_bits,
            || inline_rows::<u8>(b, n, rows, ctx),
            || inline_rows::<u16>(b, n, rows, ctx),
            || inline_rows::<u32>(b, n, rows, ctx),
            || inline_rows::<u64>(b, n, rows, ctx),
        )?;
        Ok(Some(Values::Fixed {
            bits: *word_bits,
            data,
            n: rows.len(),
        }))
    }

    /// Decodes a whole buffer of `n` values (levels, dictionaries).
    pub(crate) fn decode_block(&self, b: Bytes, n: usize, ctx: &Ctx) -> Result<Values> {
        match self {
            Comp::Flat { bits, general } => {
                let b = match general {
                    Some(s) => general_decompress(*s, &b, ctx)?,
                    None => b,
                };
                fixed_len_check(&b, n, *bits, ctx)?;
                Ok(Values::Fixed {
                    bits: *bits,
                    data: b,
                    n,
                })
            }
            Comp::Constant(v) => {
                let v = v.clone().unwrap_or_else(|| Bytes::from_static(&[0, 0]));
                Ok(Values::Fixed {
                    bits: v.len() as u64 * 8,
                    data: Bytes::from(v.repeat(n)),
                    n,
                })
            }
            Comp::Inline { .. } => {
                let mut v = vec![b];
                self.decode_chunk(&mut v, n, ctx)
            }
            Comp::OutOfLine {
                word_bits,
                packed_bits,
            } => {
                let w = *packed_bits as usize;
                let data = by_word(
                    *word_bits,
                    || out_of_line_unpack::<u8>(&b, n, w, ctx),
                    || out_of_line_unpack::<u16>(&b, n, w, ctx),
                    || out_of_line_unpack::<u32>(&b, n, w, ctx),
                    || out_of_line_unpack::<u64>(&b, n, w, ctx),
                )?;
                Ok(Values::Fixed {
                    bits: *word_bits,
                    data,
                    n,
                })
            }
            Comp::Variable { .. } => {
                // u32 offset width, then where the bytes start (u32 for
                // 32-bit offsets; u64 at byte 8 for 64-bit ones), offsets
                // from 0, bytes.
                if b.len() < 8 {
                    return Err(ctx.corrupt("variable-width block shorter than its header"));
                }
                let bits = u32::from_le_bytes(b[..4].try_into().unwrap()) as u64;
                let (start, head) = match bits {
                    32 => (u32::from_le_bytes(b[4..8].try_into().unwrap()) as usize, 8),
                    64 if b.len() >= 16 => (
                        u64::from_le_bytes(b[8..16].try_into().unwrap()) as usize,
                        16,
                    ),
                    _ => {
                        return Err(
                            ctx.corrupt(format!("variable-width block with {bits}-bit offsets"))
                        );
                    }
                };
                if start < head || start > b.len() || start - head != (n + 1) * (bits as usize / 8)
                {
                    return Err(ctx.corrupt("variable-width block offsets do not fit"));
                }
                let offs = leading_offsets(&b[head..start], n, bits, ctx)?;
                rebase(offs, &b.slice(start..), ctx)
            }
            Comp::General { scheme, inner } => {
                let b = general_decompress(*scheme, &b, ctx)?;
                inner.decode_block(b, n, ctx)
            }
            Comp::Fsl { .. } | Comp::Fsst { .. } | Comp::ByteStreamSplit { .. } => {
                let mut v = vec![b];
                self.decode_chunk(&mut v, n, ctx)
            }
            Comp::VarPacked(_) => Err(ctx.unsupported("variable packed struct as a block")),
            Comp::Rle { bits, len_bits } => {
                // [u64 bytes of values][values][run lengths]
                let bad = || ctx.corrupt("run-length block shorter than its header");
                let k = u64::from_le_bytes(b.get(..8).ok_or_else(bad)?.try_into().unwrap());
                let k = usize::try_from(k)
                    .ok()
                    .filter(|k| 8 + k <= b.len())
                    .ok_or_else(bad)?;
                run_lengths(
                    &b.slice(8..8 + k),
                    &b.slice(8 + k..),
                    *bits,
                    *len_bits,
                    n,
                    ctx,
                )
            }
        }
    }

    /// Decodes one value stored per-value (full-zip).
    pub(crate) fn decode_value(&self, b: Bytes, ctx: &Ctx) -> Result<Bytes> {
        match self {
            Comp::Flat { general: None, .. }
            | Comp::Fsl { .. }
            | Comp::Variable { general: None, .. }
            | Comp::VarPacked(_) => Ok(b),
            Comp::Fsst { table, .. } => {
                let (_, data) = table.decode(&[0, b.len() as u64], &b, ctx)?;
                Ok(data)
            }
            Comp::General { scheme, .. } => general_decompress(*scheme, &b, ctx),
            other => Err(ctx.unsupported(format!("{} per value", other.name()))),
        }
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            Comp::Flat { .. } => "flat values",
            Comp::Variable { .. } => "variable-width values",
            Comp::Constant(_) => "constant",
            Comp::OutOfLine { .. } => "out-of-line bit-packing",
            Comp::Inline { .. } => "inline bit-packing",
            Comp::Fsst { .. } => "FSST",
            Comp::General { .. } => "general compression",
            Comp::Fsl { .. } => "fixed-size list",
            Comp::ByteStreamSplit { .. } => "byte-stream split",
            Comp::Rle { .. } => "run-length encoding",
            Comp::VarPacked(_) => "variable packed struct",
        }
    }
}

/// Expands runs into `n` values (runs past `n` are cut off).
pub(super) fn run_lengths(
    values: &[u8],
    lengths: &[u8],
    bits: u64,
    len_bits: u64,
    n: usize,
    ctx: &Ctx,
) -> Result<Values> {
    let w = (bits / 8) as usize;
    let lw = (len_bits / 8) as usize;
    let runs = values.len() / w;
    if !values.len().is_multiple_of(w) || lengths.len() != runs * lw {
        return Err(ctx.corrupt("run-length values and lengths do not pair up"));
    }
    let mut out = Vec::with_capacity(n * w);
    for (v, l) in values.chunks_exact(w).zip(lengths.chunks_exact(lw)) {
        let mut x = [0u8; 8];
        x[..lw].copy_from_slice(l);
        let len = u64::from_le_bytes(x) as usize;
        let room = n - out.len() / w;
        for _ in 0..len.min(room) {
            out.extend_from_slice(v);
        }
        if out.len() == n * w {
            break;
        }
    }
    if out.len() != n * w {
        return Err(ctx.corrupt(format!("runs hold {} values; {n} expected", out.len() / w)));
    }
    Ok(Values::Fixed {
        bits,
        data: Bytes::from(out),
        n,
    })
}

/// Definition levels (u16 each) from decoded level values.
pub(crate) fn levels(v: Values, n: usize, ctx: &Ctx) -> Result<Vec<u16>> {
    match v {
        Values::Fixed { bits: 16, data, .. } if data.len() >= 2 * n => Ok(data[..2 * n]
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect()),
        _ => Err(ctx.corrupt("repetition/definition levels are not 16-bit values")),
    }
}

/// Splits one mini-block chunk into levels and value buffers.
pub(crate) struct ChunkParts {
    pub num_levels: usize,
    pub rep: Option<Bytes>,
    pub def: Option<Bytes>,
    pub bufs: Vec<Bytes>,
}

pub(crate) fn split_chunk(mb: &MiniBlock, b: &Bytes, ctx: &Ctx) -> Result<ChunkParts> {
    let short = || ctx.corrupt("mini-block chunk shorter than its header says");
    let mut pos = 0usize;
    let u16_at = |pos: &mut usize| -> Result<usize> {
        let v = b.get(*pos..*pos + 2).ok_or_else(short)?;
        *pos += 2;
        Ok(u16::from_le_bytes([v[0], v[1]]) as usize)
    };
    let num_levels = u16_at(&mut pos)?;
    let rep_len = if mb.rep.is_some() {
        Some(u16_at(&mut pos)?)
    } else {
        None
    };
    let def_len = if mb.def.is_some() {
        Some(u16_at(&mut pos)?)
    } else {
        None
    };
    let mut sizes = Vec::with_capacity(mb.num_buffers);
    for _ in 0..mb.num_buffers {
        if mb.large {
            let v = b.get(pos..pos + 4).ok_or_else(short)?;
            sizes.push(u32::from_le_bytes(v.try_into().unwrap()) as usize);
            pos += 4;
        } else {
            sizes.push(u16_at(&mut pos)?);
        }
    }
    let pad = |p: usize| p.div_ceil(MINIBLOCK_ALIGN) * MINIBLOCK_ALIGN;
    pos = pad(pos);
    let piece = |len: usize, pos: &mut usize| -> Result<Bytes> {
        let end = pos
            .checked_add(len)
            .filter(|e| *e <= b.len())
            .ok_or_else(short)?;
        let out = b.slice(*pos..end);
        *pos = pad(end);
        Ok(out)
    };
    let rep = rep_len.map(|l| piece(l, &mut pos)).transpose()?;
    let def = def_len.map(|l| piece(l, &mut pos)).transpose()?;
    let bufs = sizes
        .into_iter()
        .map(|l| piece(l, &mut pos))
        .collect::<Result<Vec<_>>>()?;
    Ok(ChunkParts {
        num_levels,
        rep,
        def,
        bufs,
    })
}

/// Chunk positions from the metadata words of a mini-block page.
pub(crate) fn chunk_index(mb: &MiniBlock, meta: &[u8], ctx: &Ctx) -> Result<Vec<Chunk>> {
    let words: Vec<u32> = if mb.large {
        meta.chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    } else {
        meta.chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]) as u32)
            .collect()
    };
    let data = &mb.bufs[1];
    let mut out = Vec::with_capacity(words.len());
    let (mut at, mut item) = (data.start, 0u64);
    for (i, w) in words.iter().enumerate() {
        let len = ((w >> 4) as u64 + 1) * MINIBLOCK_ALIGN as u64;
        let log = w & 0xF;
        let items = if i + 1 == words.len() {
            let last = mb
                .num_items
                .checked_sub(item)
                .ok_or_else(|| ctx.corrupt("mini-block chunks hold more items than the page"))?;
            // A last chunk past that means a damaged item count (and
            // buffers would be sized from it).
            if last > MAX_CHUNK_ITEMS {
                return Err(ctx.corrupt(format!(
                    "mini-block last chunk of {last} items (at most {MAX_CHUNK_ITEMS})"
                )));
            }
            last
        } else {
            if log == 0 {
                return Err(ctx.corrupt(format!("mini-block chunk {i} claims 1 value with log 0")));
            }
            1u64 << log
        };
        if at + len > data.end {
            return Err(ctx.corrupt("mini-block chunks run past their buffer"));
        }
        out.push(Chunk {
            bytes: at..at + len,
            items: item..item + items,
        });
        at += len;
        item += items;
    }
    if item != mb.num_items {
        return Err(ctx.corrupt(format!(
            "mini-block chunks hold {item} items; the page says {}",
            mb.num_items
        )));
    }
    Ok(out)
}
