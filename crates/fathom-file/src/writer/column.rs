//! One column's encoder: buffered values cut into pages at the size
//! target, encoded as 2.0 or 2.1+ pages, and written as they fill.

use super::*;

/// Bytes a slice of an array would take once encoded (roughly).
pub(super) fn encoded_size(arr: &dyn Array) -> usize {
    let n = arr.len();
    let validity = if arr.null_count() > 0 {
        n.div_ceil(8)
    } else {
        0
    };
    let data = match arr.data_type() {
        DataType::Utf8 | DataType::Binary => {
            let o = arr.to_data().buffers()[0].typed_data::<i32>()[arr.offset()..=arr.offset() + n]
                .to_vec();
            (o[n] - o[0]) as usize + 8 * n
        }
        DataType::LargeUtf8 | DataType::LargeBinary => {
            let d = arr.to_data();
            let o = &d.buffers()[0].typed_data::<i64>()[arr.offset()..=arr.offset() + n];
            (o[n] - o[0]) as usize + 8 * n
        }
        DataType::Boolean => n.div_ceil(8),
        DataType::Struct(_) => arr
            .as_struct()
            .columns()
            .iter()
            .map(|c| encoded_size(c.as_ref()))
            .sum(),
        dt => fixed_row_bytes(dt) * n,
    };
    validity + data
}

pub(super) fn fixed_row_bytes(dt: &DataType) -> usize {
    match dt {
        DataType::FixedSizeList(f, d) => fixed_row_bytes(f.data_type()) * *d as usize,
        DataType::FixedSizeBinary(w) => *w as usize,
        dt => dt.primitive_width().unwrap_or(1),
    }
}

/// A deep copy of an array slice, so the caller's buffers are not retained.
pub(super) fn compact(arr: &ArrayRef) -> ArrayRef {
    let data = arr.to_data();
    let mut m = MutableArrayData::new(vec![&data], false, arr.len());
    m.try_extend(0, 0, arr.len())
        .expect("copying a slice of itself cannot overflow");
    make_array(m.freeze())
}

/// Per-column encoder state, a tree mirroring the schema.
pub(super) enum ColumnEncoder {
    Leaf {
        column: usize,
        name: String,
        pending: Vec<ArrayRef>,
        pending_bytes: usize,
        /// 2.1+: definition levels of the pending rows, and the number of
        /// structs around the leaf.
        defs: Vec<u16>,
        depth: Option<usize>,
    },
    List {
        column: usize,
        lengths: Vec<u64>,
        validity: Vec<bool>,
        child: Box<ColumnEncoder>,
    },
    Struct {
        column: usize,
        name: String,
        rows: u64,
        children: Vec<ColumnEncoder>,
        /// 2.1+: structs around this one, plus one.
        depth: Option<usize>,
    },
    /// 2.1+: a top-level field holding lists (columns `first..first + leaves`).
    Nested21 {
        first: usize,
        leaves: usize,
        name: String,
        pending: Vec<ArrayRef>,
        pending_bytes: usize,
    },
}

/// Column number of a struct in a 2.1+ file (only leaves have columns).
const NO_COLUMN: usize = usize::MAX;

pub(super) type Out = Vec<(usize, EncodedPage)>;

impl ColumnEncoder {
    /// `depth`: `Some(structs around the field)` when writing 2.1+.
    pub(super) fn new(
        field: &LanceField,
        next_column: &mut usize,
        depth: Option<usize>,
    ) -> Result<Self> {
        let dt = field.data_type()?;
        if depth == Some(0) && encode21::has_list(&dt) {
            // A top-level field holding lists: its leaves' levels are
            // computed from whole rows.
            let first = *next_column;
            *next_column += encode21::leaf_count(&dt);
            return Ok(ColumnEncoder::Nested21 {
                first,
                leaves: encode21::leaf_count(&dt),
                name: field.name.clone(),
                pending: vec![],
                pending_bytes: 0,
            });
        }
        // 2.1+: a struct marked packed is one leaf column of packed rows.
        let packed = depth.is_some() && crate::reader::is_packed_struct(&field.to_arrow()?);
        let column = if depth.is_some() && matches!(dt, DataType::Struct(_)) && !packed {
            NO_COLUMN
        } else {
            *next_column += 1;
            *next_column - 1
        };
        if depth.is_some() && encode21::has_list(&dt) {
            return Err(Error::invalid(format!(
                "column '{}': lists inside structs are not written to 2.1/2.2 files",
                field.name
            )));
        }
        if let DataType::Dictionary(..) = dt {
            return Err(Error::invalid(format!(
                "column '{}' is dictionary-typed (dataset written by pylance): \
                     writing dictionary columns is not implemented; rewrite the table \
                     with the column cast to its value type",
                field.name
            )));
        }
        Ok(match dt {
            DataType::Struct(_) if !packed => ColumnEncoder::Struct {
                column,
                name: field.name.clone(),
                rows: 0,
                children: field
                    .children
                    .iter()
                    .map(|c| ColumnEncoder::new(c, next_column, depth.map(|d| d + 1)))
                    .collect::<Result<_>>()?,
                depth: depth.map(|d| d + 1),
            },
            DataType::List(_) | DataType::LargeList(_) => ColumnEncoder::List {
                column,
                lengths: vec![],
                validity: vec![],
                child: Box::new(ColumnEncoder::new(&field.children[0], next_column, None)?),
            },
            _ => ColumnEncoder::Leaf {
                column,
                name: field.name.clone(),
                pending: vec![],
                pending_bytes: 0,
                defs: vec![],
                depth,
            },
        })
    }

    /// `top_null` (2.1+): per row, the depth (1 = outermost) of the
    /// outermost null struct around this field, 0 for none.
    pub(super) fn push(
        &mut self,
        arr: &ArrayRef,
        top_null: Option<&[u16]>,
        opts: &FileWriterOptions,
        out: &mut Out,
    ) -> Result<()> {
        match self {
            ColumnEncoder::Leaf { depth, .. } => {
                // 2.1+: definition levels (every layer nullable: item null
                // is 1, the struct k layers out is k + 1).
                let mut level = depth.map(|d| {
                    (0..arr.len())
                        .map(|i| match top_null.map_or(0, |t| t[i]) {
                            0 => u16::from(arr.is_null(i)),
                            t => (d as u16 - t + 1) + 1,
                        })
                        .collect::<Vec<u16>>()
                });
                let mut rest = arr.clone();
                while !rest.is_empty() {
                    let ColumnEncoder::Leaf {
                        pending,
                        pending_bytes,
                        defs,
                        ..
                    } = self
                    else {
                        unreachable!()
                    };
                    let size = encoded_size(rest.as_ref()).max(1);
                    let room = opts.page_size_bytes.saturating_sub(*pending_bytes).max(1);
                    let take = if size <= room {
                        rest.len()
                    } else {
                        // Rows that fit the room left, at the slice's average width.
                        ((room as u128 * rest.len() as u128 / size as u128) as usize).max(1)
                    };
                    let piece = rest.slice(0, take);
                    *pending_bytes += encoded_size(piece.as_ref());
                    pending.push(compact(&piece));
                    if let Some(l) = &mut level {
                        defs.extend(l.drain(..take));
                    }
                    rest = rest.slice(take, rest.len() - take);
                    if *pending_bytes >= opts.page_size_bytes {
                        self.flush(opts, out)?;
                    }
                }
            }
            ColumnEncoder::Nested21 {
                pending,
                pending_bytes,
                ..
            } => {
                *pending_bytes += arr.get_array_memory_size();
                pending.push(compact(arr));
                if *pending_bytes >= opts.page_size_bytes {
                    self.flush(opts, out)?;
                }
            }
            ColumnEncoder::List {
                lengths,
                validity,
                child,
                ..
            } => {
                let (offsets, values): (Vec<u64>, ArrayRef) = match arr.data_type() {
                    DataType::List(_) => {
                        let l = arr.as_list::<i32>();
                        (
                            l.value_offsets().iter().map(|o| *o as u64).collect(),
                            l.values().clone(),
                        )
                    }
                    _ => {
                        let l = arr.as_list::<i64>();
                        (
                            l.value_offsets().iter().map(|o| *o as u64).collect(),
                            l.values().clone(),
                        )
                    }
                };
                for i in 0..arr.len() {
                    lengths.push(offsets[i + 1] - offsets[i]);
                    validity.push(arr.is_valid(i));
                }
                let (first, last) = (offsets[0] as usize, offsets[arr.len()] as usize);
                child.push(&values.slice(first, last - first), None, opts, out)?;
                if lengths.len() * 8 >= opts.page_size_bytes {
                    self.flush(opts, out)?;
                }
            }
            ColumnEncoder::Struct {
                rows,
                children,
                depth: Some(depth),
                ..
            } => {
                let s = arr.as_struct();
                let nulls = s.logical_nulls();
                let mine: Option<Vec<u16>> = (top_null.is_some() || nulls.is_some()).then(|| {
                    (0..s.len())
                        .map(|i| match top_null.map_or(0, |t| t[i]) {
                            0 => {
                                if nulls.as_ref().is_some_and(|n| n.is_null(i)) {
                                    *depth as u16
                                } else {
                                    0
                                }
                            }
                            t => t,
                        })
                        .collect()
                });
                *rows += s.len() as u64;
                for (c, col) in children.iter_mut().zip(s.columns()) {
                    c.push(col, mine.as_deref(), opts, out)?;
                }
            }
            ColumnEncoder::Struct {
                rows,
                children,
                name,
                ..
            } => {
                if arr.null_count() > 0 {
                    return Err(Error::invalid(format!(
                        "struct column '{name}' has {} null rows; Lance file format 2.0 does not \
                         store struct validity (make the struct's fields null instead)",
                        arr.null_count()
                    )));
                }
                let s = arr.as_struct();
                *rows += s.len() as u64;
                for (c, col) in children.iter_mut().zip(s.columns()) {
                    c.push(col, None, opts, out)?;
                }
            }
        }
        Ok(())
    }

    /// Writes what is pending as a page (not recursing into children).
    pub(super) fn flush(&mut self, opts: &FileWriterOptions, out: &mut Out) -> Result<()> {
        match self {
            ColumnEncoder::Leaf {
                column,
                pending,
                pending_bytes,
                name,
                defs,
                depth,
            } => {
                if pending.is_empty() {
                    return Ok(());
                }
                let arr = if pending.len() == 1 {
                    pending.pop().unwrap()
                } else {
                    let refs: Vec<&dyn Array> = pending.iter().map(|a| a.as_ref()).collect();
                    let a = arrow_select::concat::concat(&refs)?;
                    pending.clear();
                    a
                };
                *pending_bytes = 0;
                let page = match depth {
                    Some(depth) => {
                        let levels = std::mem::take(defs);
                        let any = levels.iter().any(|d| *d != 0);
                        encode21::encode_leaf21(
                            &arr,
                            any.then_some(levels.as_slice()),
                            *depth,
                            opts.version == FileVersion::V2_2,
                        )
                    }
                    None => encode::encode_leaf(&arr, opts.dictionary),
                }
                .map_err(|e| Error::invalid(format!("column '{name}': {e}")))?;
                out.push((*column, page));
            }
            ColumnEncoder::List {
                column,
                lengths,
                validity,
                ..
            } => {
                if !lengths.is_empty() {
                    out.push((*column, encode::encode_list_offsets(lengths, validity)));
                    lengths.clear();
                    validity.clear();
                }
            }
            ColumnEncoder::Struct { .. } => {}
            ColumnEncoder::Nested21 {
                first,
                name,
                pending,
                pending_bytes,
                ..
            } => {
                if pending.is_empty() {
                    return Ok(());
                }
                let refs: Vec<&dyn Array> = pending.iter().map(|a| a.as_ref()).collect();
                let arr = arrow_select::concat::concat(&refs)?;
                pending.clear();
                *pending_bytes = 0;
                let pages = encode21::encode_nested21(&arr, opts.version == FileVersion::V2_2)
                    .map_err(|e| Error::invalid(format!("column '{name}': {e}")))?;
                for (k, leaf_pages) in pages.into_iter().enumerate() {
                    for p in leaf_pages {
                        out.push((*first + k, p));
                    }
                }
            }
        }
        Ok(())
    }

    pub(super) fn finish(&mut self, opts: &FileWriterOptions, out: &mut Out) -> Result<()> {
        self.flush(opts, out)?;
        match self {
            ColumnEncoder::Leaf { .. } | ColumnEncoder::Nested21 { .. } => {}
            ColumnEncoder::List { child, .. } => child.finish(opts, out)?,
            ColumnEncoder::Struct {
                column,
                rows,
                children,
                ..
            } => {
                if *column != NO_COLUMN {
                    out.push((*column, encode::encode_struct(*rows)));
                }
                for c in children {
                    c.finish(opts, out)?;
                }
            }
        }
        Ok(())
    }

    pub(super) fn empty_page(&self) -> EncodedPage {
        match self {
            ColumnEncoder::Leaf { depth: Some(d), .. } => encode21::encode_leaf21(
                &arrow_array::new_null_array(&DataType::Int32, 0),
                None,
                *d,
                false,
            )
            .expect("an empty page encodes"),
            ColumnEncoder::Leaf { .. } => encode::encode_empty_leaf(),
            ColumnEncoder::Nested21 { .. } => encode21::encode_leaf21(
                &arrow_array::new_null_array(&DataType::Int32, 0),
                None,
                0,
                false,
            )
            .expect("an empty page encodes"),
            ColumnEncoder::List { .. } => encode::encode_list_offsets(&[], &[]),
            ColumnEncoder::Struct { .. } => encode::encode_struct(0),
        }
    }

    pub(super) fn visit<'a>(&'a self, out: &mut Vec<&'a ColumnEncoder>) {
        let column = match self {
            ColumnEncoder::Leaf { column, .. }
            | ColumnEncoder::List { column, .. }
            | ColumnEncoder::Struct { column, .. } => *column,
            ColumnEncoder::Nested21 { leaves, .. } => {
                // One entry per leaf column.
                for _ in 0..*leaves {
                    out.push(self);
                }
                return;
            }
        };
        if column != NO_COLUMN {
            out.push(self);
        }
        match self {
            ColumnEncoder::List { child, .. } => child.visit(out),
            ColumnEncoder::Struct { children, .. } => children.iter().for_each(|c| c.visit(out)),
            ColumnEncoder::Leaf { .. } | ColumnEncoder::Nested21 { .. } => {}
        }
    }
}
