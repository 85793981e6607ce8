//! Chunk row accounting and the page layouts resolved from protobuf.

use super::*;

/// The rows of each chunk from a mini-block repetition index: per chunk,
/// `stride` little-endian u64s of which the first two are the rows that
/// end in the chunk and the levels left over after the last row's end.
pub(crate) fn chunk_rows(
    b: &[u8],
    stride: usize,
    chunks: usize,
    rows: u64,
    ctx: &Ctx,
) -> Result<Vec<ChunkRows>> {
    if stride < 2 || b.len() != chunks * stride * 8 {
        return Err(ctx.corrupt(format!(
            "mini-block repetition index of {} bytes for {chunks} chunks of {stride} values",
            b.len()
        )));
    }
    let word = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
    let mut out = Vec::with_capacity(chunks);
    let (mut first, mut preamble) = (0u64, false);
    for c in 0..chunks {
        let (ends, leftover) = (word(c * stride), word(c * stride + 1));
        let trailer = leftover > 0;
        let starts = ends
            .checked_add(u64::from(trailer))
            .and_then(|n| n.checked_sub(u64::from(preamble)))
            .ok_or_else(|| ctx.corrupt(format!("repetition index chunk {c} ends no row")))?;
        out.push(ChunkRows {
            first,
            starts,
            preamble,
            trailer,
        });
        // Corrupt counts can be anything: their sum is checked against
        // the page's rows below.
        first = first.checked_add(starts).ok_or_else(|| {
            ctx.corrupt(format!(
                "the repetition index counts more rows than fit in 64 bits (chunk {c})"
            ))
        })?;
        preamble = trailer;
    }
    if first != rows || preamble {
        return Err(ctx.corrupt(format!(
            "the repetition index starts {first} rows; the page holds {rows}"
        )));
    }
    Ok(out)
}

/// The chunk spans (first and last chunk, inclusive) holding the rows of
/// `sel` (sorted ranges of page rows), adjacent spans merged.
pub(crate) fn chunk_spans(rows: &[ChunkRows], sel: &[Range<u64>]) -> Vec<(usize, usize)> {
    // The chunk in which row `r` starts.
    let start_of = |r: u64| rows.partition_point(|c| c.first + c.starts <= r);
    let mut spans: Vec<(usize, usize)> = Vec::new();
    for s in sel.iter().filter(|s| s.end > s.start) {
        let a = start_of(s.start);
        let mut b = start_of(s.end - 1);
        // The last row may run on into later chunks.
        if b < rows.len() && rows[b].trailer && s.end == rows[b].first + rows[b].starts {
            b += 1;
            while b + 1 < rows.len() && rows[b].starts == 0 && rows[b].trailer {
                b += 1;
            }
        }
        let b = b.min(rows.len().saturating_sub(1));
        match spans.last_mut() {
            Some(last) if a <= last.1 + 1 => last.1 = last.1.max(b),
            _ => spans.push((a, b)),
        }
    }
    spans
}

#[derive(Debug)]
pub(crate) struct FullZip {
    pub bits_rep: u32,
    pub bits_def: u32,
    /// `Some(bits)` for fixed-width values, else the width of lengths.
    pub fixed_bits: Option<u32>,
    pub length_bits: u32,
    pub values: Comp,
    pub layers: Vec<Layer>,
    pub bufs: Vec<Range<u64>>,
}

impl FullZip {
    /// Bytes of each control word.
    pub(crate) fn cw_bytes(&self) -> usize {
        match self.bits_rep + self.bits_def {
            0 => 0,
            1..=8 => 1,
            9..=16 => 2,
            _ => 4,
        }
    }
    /// Repetition and definition levels in a control word.
    pub(crate) fn levels_of(&self, cw: &[u8]) -> (u16, u16) {
        let w = match cw.len() {
            0 => 0u32,
            1 => cw[0] as u32,
            2 => u16::from_le_bytes([cw[0], cw[1]]) as u32,
            _ => u32::from_le_bytes([cw[0], cw[1], cw[2], cw[3]]),
        };
        (
            (w >> self.bits_def) as u16,
            (w & ((1u32 << self.bits_def) - 1)) as u16,
        )
    }

    /// Definition level in a control word.
    pub(crate) fn def_of(&self, cw: &[u8]) -> u16 {
        let w = match cw.len() {
            0 => 0u32,
            1 => cw[0] as u32,
            2 => u16::from_le_bytes([cw[0], cw[1]]) as u32,
            _ => u32::from_le_bytes([cw[0], cw[1], cw[2], cw[3]]),
        };
        (w & ((1u32 << self.bits_def) - 1)) as u16
    }
}

#[derive(Debug)]
pub(crate) struct ConstantPage {
    pub layers: Vec<Layer>,
    pub inline: Option<Bytes>,
    pub scalar: Option<Range<u64>>,
    pub rep: Option<Range<u64>>,
    pub def: Option<Range<u64>>,
    pub def_comp: Option<Comp>,
    pub rep_comp: Option<Comp>,
}

/// The highest definition level of a value that exists below the first
/// list (a null item or struct still takes a value slot; a null or empty
/// list does not).
pub(crate) fn max_visible_def(layers: &[Layer]) -> u16 {
    layers
        .iter()
        .take_while(|l| !l.is_list())
        .map(|l| l.def_levels())
        .sum()
}

impl Layout {
    pub(crate) fn from_pb(pl: &pb::PageLayout, bufs: &[Range<u64>], path: &str) -> Result<Layout> {
        use pb::page_layout::Layout as L;
        let layers = |v: &[i32]| -> Result<Vec<Layer>> {
            v.iter().map(|l| Layer::from_pb(*l, path)).collect()
        };
        let comp = |c: &Option<pb::CompressiveEncoding>| -> Result<Option<Comp>> {
            c.as_ref().map(|c| Comp::from_pb(c, path, 0)).transpose()
        };
        match &pl.layout {
            Some(L::MiniBlockLayout(m)) => {
                let values = comp(&m.value_compression)?
                    .ok_or_else(|| Error::corrupt(path, "mini-block page without values"))?;
                let dictionary = comp(&m.dictionary)?.map(|c| (c, m.num_dictionary_items));
                let need = 2 + usize::from(dictionary.is_some());
                if bufs.len() < need {
                    return Err(Error::corrupt(
                        path,
                        format!("mini-block page has {} buffers, needs {need}", bufs.len()),
                    ));
                }
                let mb = MiniBlock {
                    rep: comp(&m.rep_compression)?,
                    def: comp(&m.def_compression)?,
                    num_buffers: m.num_buffers as usize,
                    values,
                    dictionary,
                    layers: layers(&m.layers)?,
                    num_items: m.num_items,
                    large: m.has_large_chunk,
                    bufs: bufs.to_vec(),
                    rep_index_stride: if m.repetition_index_depth > 0 {
                        m.repetition_index_depth as usize + 1
                    } else {
                        0
                    },
                    index: OnceLock::new(),
                    rows: OnceLock::new(),
                    dict: OnceLock::new(),
                };
                if mb.rep_index_stride > 0 && mb.bufs.len() < need + 1 {
                    return Err(Error::corrupt(
                        path,
                        "mini-block page with a repetition index but no buffer for it",
                    ));
                }
                if mb.values.chunk_buffers() != mb.num_buffers {
                    return Err(Error::corrupt(
                        path,
                        format!(
                            "mini-block page says {} buffers per chunk; its compression has {}",
                            mb.num_buffers,
                            mb.values.chunk_buffers()
                        ),
                    ));
                }
                Ok(Layout::Mini(mb))
            }
            Some(L::FullZipLayout(f)) => {
                use pb::full_zip_layout::Details as D;
                let (fixed_bits, length_bits) = match f.details {
                    Some(D::BitsPerValue(b)) if b % 8 == 0 && b > 0 => (Some(b), 0),
                    Some(D::BitsPerOffset(b @ (32 | 64))) => (None, b),
                    _ => {
                        return Err(Error::corrupt(
                            path,
                            "full-zip page with an unusable value or length width",
                        ));
                    }
                };
                if bufs.is_empty() || (f.bits_rep + f.bits_def) > 32 {
                    return Err(Error::corrupt(path, "malformed full-zip page"));
                }
                Ok(Layout::Full(FullZip {
                    bits_rep: f.bits_rep,
                    bits_def: f.bits_def,
                    fixed_bits,
                    length_bits,
                    values: comp(&f.value_compression)?
                        .ok_or_else(|| Error::corrupt(path, "full-zip page without values"))?,
                    layers: layers(&f.layers)?,
                    bufs: bufs.to_vec(),
                }))
            }
            Some(L::ConstantLayout(c)) => {
                // Buffers: [scalar] (when not inline), repetition, definition;
                // an empty buffer stands for "none".
                let mut it = bufs.iter().cloned();
                let scalar = match (&c.inline_value, bufs.len()) {
                    (None, 3) | (None, 1) => it.next(),
                    _ => None,
                };
                let nonempty = |r: Option<Range<u64>>| r.filter(|r| r.end > r.start);
                let rep = nonempty(it.next());
                let def = nonempty(it.next());
                Ok(Layout::Constant(ConstantPage {
                    layers: layers(&c.layers)?,
                    inline: c.inline_value.clone().map(Bytes::from),
                    scalar,
                    rep,
                    def,
                    def_comp: comp(&c.def_compression)?,
                    rep_comp: comp(&c.rep_compression)?,
                }))
            }
            Some(L::BlobLayout(b)) => {
                let inner = b
                    .inner_layout
                    .as_ref()
                    .ok_or_else(|| Error::corrupt(path, "blob page without descriptions"))?;
                let inner = Layout::from_pb(inner, bufs, path)?;
                let layers = layers(&b.layers)?;
                if matches!(inner, Layout::Blob(..))
                    || inner.layers().iter().any(|l| l.is_list())
                    || layers.iter().any(|l| l.is_list())
                {
                    return Err(Error::unsupported(path, "blob pages of lists"));
                }
                Ok(Layout::Blob(Box::new(inner), layers))
            }
            None => Err(Error::unsupported(
                path,
                "a page layout this reader does not know",
            )),
        }
    }

    pub(crate) fn layers(&self) -> &[Layer] {
        match self {
            Layout::Mini(m) => &m.layers,
            Layout::Full(f) => &f.layers,
            Layout::Constant(c) => &c.layers,
            Layout::Blob(_, layers) => layers,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lance's repetition index (rows ended, levels left over) read as the
    /// rows each chunk starts, and the chunks a row range needs.
    #[test]
    fn repetition_index_rows_and_spans() {
        let ctx = Ctx {
            path: "t.lance",
            column: "l",
            page: None,
        };
        // Chunk 0: rows 0, 1 and the start of row 2; chunk 1: all of row 2;
        // chunk 2: the end of row 2, then rows 3 and 4.
        let words: [u64; 6] = [2, 3, 0, 7, 3, 0];
        let b: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let rows = chunk_rows(&b, 2, 3, 5, &ctx).unwrap();
        let starts: Vec<(u64, u64, bool, bool)> = rows
            .iter()
            .map(|r| (r.first, r.starts, r.preamble, r.trailer))
            .collect();
        assert_eq!(
            starts,
            [(0, 3, false, true), (3, 0, true, true), (3, 2, true, false)]
        );
        assert_eq!(chunk_spans(&rows, &[0..1]), [(0, 0)]);
        assert_eq!(chunk_spans(&rows, &[2..3]), [(0, 2)]);
        assert_eq!(chunk_spans(&rows, &[4..5]), [(2, 2)]);
        assert_eq!(chunk_spans(&rows, &[0..1, 4..5]), [(0, 0), (2, 2)]);
        // A count that disagrees with the page is an error, not a guess.
        assert!(chunk_rows(&b, 2, 3, 6, &ctx).is_err());
        assert!(chunk_rows(&b[..40], 2, 3, 5, &ctx).is_err());
    }
}
