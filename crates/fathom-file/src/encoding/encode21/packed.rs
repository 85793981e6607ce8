//! Packed struct pages (a struct column marked `packed`).

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;

use super::*;

/// A packed struct's page (a struct column marked packed), laid out as
/// pylance lays it: fixed-width children side by side in each row, in a
/// mini-block page (`PackedStruct`); with a variable-width child (2.2
/// only), each row's children (a variable one as a length and its bytes)
/// as one full-zip value (`VariablePackedStruct`). Lance stores no nulls
/// inside a packed struct, so a child null under a valid row is refused.
pub(super) fn packed_struct(
    arr: &ArrayRef,
    defs: Option<&[u16]>,
    depth: usize,
    large: bool,
) -> Result<Encoded> {
    use pb::compressive_encoding::Compression as C;
    use pb::variable_packed_struct::{FieldEncoding, field_encoding::Layout as PackedLayout};
    let s = arr.as_struct();
    let n = s.len();
    let DataType::Struct(fields) = arr.data_type() else {
        unreachable!()
    };
    if fields.is_empty() {
        return Err(Error::invalid("a packed struct without children"));
    }
    let mut fixed = Vec::with_capacity(fields.len());
    for (f, c) in fields.iter().zip(s.columns()) {
        if (0..n).any(|i| s.is_valid(i) && c.is_null(i)) {
            return Err(Error::invalid(format!(
                "packed struct child '{}' holds nulls; Lance's packed structs cannot store them",
                f.name()
            )));
        }
        let width = match c.data_type() {
            DataType::Boolean | DataType::Struct(_) | DataType::FixedSizeList(..) => None,
            dt if is_var(dt) => Some(None),
            DataType::FixedSizeBinary(w) => Some(Some(*w as usize)),
            dt => dt.primitive_width().map(Some),
        }
        .ok_or_else(|| {
            Error::invalid(format!(
                "packed struct child '{}' of type {} is not written",
                f.name(),
                c.data_type()
            ))
        })?;
        fixed.push(width);
    }
    if fixed.iter().all(|w| w.is_some()) {
        // Rows of the children's bytes: fixed-size binary values, then the
        // compression says they are a packed struct.
        let row: usize = fixed.iter().flatten().sum();
        let bytes: Vec<Vec<u8>> = s
            .columns()
            .iter()
            .map(|c| fixed_bytes(c.as_ref()).map(|(_, b)| b))
            .collect::<Option<_>>()
            .ok_or_else(|| Error::invalid("a packed struct child without fixed-width values"))?;
        let mut rows = Vec::with_capacity(n * row);
        for i in 0..n {
            for (b, w) in bytes.iter().zip(fixed.iter().flatten()) {
                rows.extend_from_slice(&b[i * w..(i + 1) * w]);
            }
        }
        let packed: ArrayRef = Arc::new(arrow_array::FixedSizeBinaryArray::new(
            row as i32,
            rows.into(),
            None,
        ));
        let (mut layout, bufs) = mini_block(&packed, defs, depth, large)?;
        if let Some(pb::page_layout::Layout::MiniBlockLayout(m)) = &mut layout.layout {
            m.value_compression = Some(comp(C::PackedStruct(Box::new(pb::PackedStruct {
                bits_per_value: fixed.iter().flatten().map(|w| 8 * *w as u64).collect(),
                values: Some(Box::new(flat(8 * row as u64))),
            }))));
        }
        return Ok((layout, bufs));
    }
    if !large {
        return Err(Error::invalid(
            "a packed struct with a variable-width child is not written to 2.1 files \
             (Lance has no encoding for it before 2.2)",
        ));
    }
    let mut encodings = Vec::with_capacity(fields.len());
    for (c, w) in s.columns().iter().zip(&fixed) {
        encodings.push(match w {
            Some(w) => FieldEncoding {
                value: Some(flat(8 * *w as u64)),
                layout: Some(PackedLayout::BitsPerValue(8 * *w as u64)),
            },
            None => {
                let ow = 8 * offset_bytes(c.data_type()) as u64;
                FieldEncoding {
                    value: Some(comp(C::Variable(Box::new(pb::Variable {
                        offsets: Some(Box::new(flat(ow))),
                        values: None,
                    })))),
                    layout: Some(PackedLayout::BitsPerLength(ow)),
                }
            }
        });
    }
    let bytes: Vec<Option<Vec<u8>>> = s
        .columns()
        .iter()
        .zip(&fixed)
        .map(|(c, w)| w.and_then(|_| fixed_bytes(c.as_ref()).map(|(_, b)| b)))
        .collect();
    let mut rows: Vec<Option<Vec<u8>>> = Vec::with_capacity(n);
    for i in 0..n {
        if s.is_null(i) {
            rows.push(None);
            continue;
        }
        let mut row = Vec::new();
        for ((c, w), b) in s.columns().iter().zip(&fixed).zip(&bytes) {
            match (w, b) {
                (Some(w), Some(b)) => row.extend_from_slice(&b[i * w..(i + 1) * w]),
                _ => {
                    let v = var_value(c.as_ref(), i);
                    if offset_bytes(c.data_type()) == 8 {
                        row.extend_from_slice(&(v.len() as u64).to_le_bytes());
                    } else {
                        row.extend_from_slice(&(v.len() as u32).to_le_bytes());
                    }
                    row.extend_from_slice(v);
                }
            }
        }
        rows.push(Some(row));
    }
    // 32-bit row lengths, as pylance writes, unless the page is too big.
    let total: usize = rows.iter().flatten().map(|r| r.len()).sum();
    let rows: ArrayRef = if total <= i32::MAX as usize {
        Arc::new(arrow_array::BinaryArray::from_iter(rows))
    } else {
        Arc::new(arrow_array::LargeBinaryArray::from_iter(rows))
    };
    let (mut layout, bufs) = full_zip(&rows, defs, depth, def_bits(defs))?;
    if let Some(pb::page_layout::Layout::FullZipLayout(z)) = &mut layout.layout {
        z.value_compression = Some(comp(C::VariablePackedStruct(pb::VariablePackedStruct {
            fields: encodings,
        })));
    }
    Ok((layout, bufs))
}
