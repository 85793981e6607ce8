//! Fields with lists: repetition and definition levels for every leaf,
//! and the pages of each leaf.

use super::*;

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
pub(super) enum Step {
    List,
    Struct(usize),
    Leaf,
}

/// Paths to every leaf, in column order.
pub(super) fn leaf_paths(dt: &DataType, prefix: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
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
pub(super) struct Walk {
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

pub(super) fn list_parts(a: &dyn Array) -> (ArrayRef, Vec<usize>) {
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
pub(super) fn nested_pages(
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

pub(super) fn nested_page(
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
