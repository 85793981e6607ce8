//! Encoding arrays into 2.0 pages, the way Lance 2.0 itself lays them out
//! (so the real Lance reads what we write):
//!
//! - fixed width: `Nullable(NoNulls | SomeNulls(validity, Flat) | AllNulls)`,
//!   validity first in buffer order;
//! - fixed-size list: `Nullable(FixedSizeList { items: Nullable(Flat) })`;
//! - strings/binary: `Binary { indices: Flat64 end offsets, bytes: Flat8,
//!   null_adjustment = bytes + 1 }`, or, for utf8 only (Lance's 2.0
//!   reader decodes dictionaries as utf8), `Dictionary` (1-based u8
//!   indices, 0 = null) when a page of at least 100 values has fewer than
//!   100 distinct values;
//! - list offsets: `List { offsets: Flat64, null_offset_adjustment =
//!   num_items + 1, num_items }` (seed 002);
//! - struct: `SimpleStruct`, no buffers.

use std::collections::HashMap;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, GenericByteArray, types::ByteArrayType};
use arrow_data::ArrayData;
use arrow_schema::DataType;
use bytes::Bytes;
use prost::Message;

use crate::error::{Error, Result};
use crate::format::ARRAY_ENCODING_URL;
use crate::pb::encodings as pbe;
use pbe::array_encoding::ArrayEncoding as A;

/// One encoded page, ready to write.
#[derive(Debug, Clone)]
pub struct EncodedPage {
    pub buffers: Vec<Bytes>,
    pub encoding: pbe::ArrayEncoding,
    /// Values in the page (rows, or items for an item column).
    pub length: u64,
    /// A 2.1+ page: its layout (then `encoding` is unused).
    pub structural: Option<crate::pb::encodings21::PageLayout>,
}

impl EncodedPage {
    /// The page encoding as a serialized `Any`.
    pub fn any_bytes(&self) -> Vec<u8> {
        if let Some(l) = &self.structural {
            return prost_types::Any {
                type_url: crate::format::PAGE_LAYOUT_URL.to_string(),
                value: l.encode_to_vec(),
            }
            .encode_to_vec();
        }
        prost_types::Any {
            type_url: ARRAY_ENCODING_URL.to_string(),
            value: self.encoding.encode_to_vec(),
        }
        .encode_to_vec()
    }
}

/// Minimum rows before a string page considers a dictionary.
pub const DICT_MIN_ROWS: usize = 100;
/// A dictionary is used when a page has fewer distinct values than this.
pub const DICT_MAX_DISTINCT: usize = 100;

fn wrap(a: A) -> pbe::ArrayEncoding {
    pbe::ArrayEncoding {
        array_encoding: Some(a),
    }
}

#[derive(Default)]
struct Buffers(Vec<Bytes>);

impl Buffers {
    fn flat(&mut self, bits: u64, data: Bytes) -> pbe::ArrayEncoding {
        let idx = self.0.len() as u32;
        self.0.push(data);
        wrap(A::Flat(pbe::Flat {
            bits_per_value: bits,
            buffer: Some(pbe::Buffer {
                buffer_index: idx,
                buffer_type: pbe::buffer::BufferType::Page as i32,
            }),
            compression: None,
        }))
    }
}

fn no_nulls(values: pbe::ArrayEncoding) -> pbe::ArrayEncoding {
    wrap(A::Nullable(Box::new(pbe::Nullable {
        nullability: Some(pbe::nullable::Nullability::NoNulls(Box::new(
            pbe::nullable::NoNull {
                values: Some(Box::new(values)),
            },
        ))),
    })))
}

fn all_nulls() -> pbe::ArrayEncoding {
    wrap(A::Nullable(Box::new(pbe::Nullable {
        nullability: Some(pbe::nullable::Nullability::AllNulls(
            pbe::nullable::AllNull {},
        )),
    })))
}

fn le_u64s(vals: impl Iterator<Item = u64>, n: usize) -> Bytes {
    let mut v = Vec::with_capacity(n * 8);
    for x in vals {
        v.extend_from_slice(&x.to_le_bytes());
    }
    Bytes::from(v)
}

/// Encodes a fixed-width array (bool, numbers, temporal, fixed-size binary,
/// fixed-size list of those).
fn encode_fixed(data: &ArrayData, bufs: &mut Buffers) -> Result<pbe::ArrayEncoding> {
    let n = data.len();
    if n > 0 && data.null_count() == n {
        return Ok(all_nulls());
    }
    let validity = data
        .nulls()
        .filter(|nb| nb.null_count() > 0)
        .map(|nb| bufs.flat(1, Bytes::from(nb.inner().sliced().as_slice().to_vec())));
    let values = match data.data_type() {
        DataType::Boolean => {
            let b = arrow_buffer::BooleanBuffer::new(data.buffers()[0].clone(), data.offset(), n);
            bufs.flat(1, Bytes::from(b.sliced().as_slice().to_vec()))
        }
        DataType::FixedSizeList(_, dim) => {
            let dim = *dim as usize;
            let child = data.child_data()[0].slice(data.offset() * dim, n * dim);
            wrap(A::FixedSizeList(Box::new(pbe::FixedSizeList {
                dimension: dim as u32,
                items: Some(Box::new(encode_fixed(&child, bufs)?)),
                has_validity: false,
            })))
        }
        dt => {
            let w = crate::encoding::decode::byte_width(dt)
                .ok_or_else(|| Error::invalid(format!("cannot encode {dt} as fixed width")))?
                as usize;
            let start = data.offset() * w;
            let bytes = &data.buffers()[0].as_slice()[start..start + n * w];
            bufs.flat(w as u64 * 8, Bytes::copy_from_slice(bytes))
        }
    };
    Ok(match validity {
        None => no_nulls(values),
        Some(validity) => wrap(A::Nullable(Box::new(pbe::Nullable {
            nullability: Some(pbe::nullable::Nullability::SomeNulls(Box::new(
                pbe::nullable::SomeNull {
                    validity: Some(Box::new(validity)),
                    values: Some(Box::new(values)),
                },
            ))),
        }))),
    })
}

/// `Binary` over the given values (`None` = null): end offsets + bytes.
fn encode_binary_values<'a>(
    values: impl Iterator<Item = Option<&'a [u8]>> + Clone,
    n: usize,
    bufs: &mut Buffers,
) -> pbe::ArrayEncoding {
    let total: usize = values.clone().map(|v| v.map_or(0, |v| v.len())).sum();
    let adj = total as u64 + 1;
    let mut bytes = Vec::with_capacity(total);
    let mut end = 0u64;
    let offsets = le_u64s(
        values.clone().map(|v| match v {
            Some(v) => {
                end += v.len() as u64;
                end
            }
            None => end + adj,
        }),
        n,
    );
    for v in values.flatten() {
        bytes.extend_from_slice(v);
    }
    let indices = bufs.flat(64, offsets);
    let bytes = bufs.flat(8, Bytes::from(bytes));
    wrap(A::Binary(Box::new(pbe::Binary {
        indices: Some(Box::new(no_nulls(indices))),
        bytes: Some(Box::new(bytes)),
        null_adjustment: adj,
    })))
}

fn encode_bytes<T: ByteArrayType>(
    arr: &GenericByteArray<T>,
    dictionary: bool,
    bufs: &mut Buffers,
) -> pbe::ArrayEncoding {
    let n = arr.len();
    let values = (0..n).map(|i| arr.is_valid(i).then(|| arr.value(i).as_ref()));
    if dictionary && n >= DICT_MIN_ROWS {
        let mut dict: HashMap<&[u8], u8> = HashMap::new();
        let mut order: Vec<&[u8]> = Vec::new();
        let mut ok = true;
        for v in values.clone().flatten() {
            if !dict.contains_key(v) {
                if order.len() + 1 >= DICT_MAX_DISTINCT {
                    ok = false;
                    break;
                }
                dict.insert(v, order.len() as u8 + 1);
                order.push(v);
            }
        }
        if ok {
            let idx: Vec<u8> = values.map(|v| v.map_or(0, |v| dict[v])).collect();
            let indices = bufs.flat(8, Bytes::from(idx));
            let k = order.len();
            let items = encode_binary_values(order.into_iter().map(Some), k, bufs);
            return wrap(A::Dictionary(Box::new(pbe::Dictionary {
                indices: Some(Box::new(no_nulls(indices))),
                items: Some(Box::new(items)),
                num_dictionary_items: k as u32,
            })));
        }
    }
    encode_binary_values(values, n, bufs)
}

/// Encodes a leaf array (anything but struct and variable-size list) as one page.
pub fn encode_leaf(arr: &ArrayRef, dictionary: bool) -> Result<EncodedPage> {
    let mut bufs = Buffers::default();
    let n = arr.len();
    let encoding = if n > 0 && arr.null_count() == n {
        all_nulls()
    } else {
        match arr.data_type() {
            DataType::Utf8 => encode_bytes(arr.as_string::<i32>(), dictionary, &mut bufs),
            // Lance's 2.0 reader decodes dictionary pages as Utf8 only.
            DataType::LargeUtf8 => encode_bytes(arr.as_string::<i64>(), false, &mut bufs),
            DataType::Binary => encode_bytes(arr.as_binary::<i32>(), false, &mut bufs),
            DataType::LargeBinary => encode_bytes(arr.as_binary::<i64>(), false, &mut bufs),
            _ => encode_fixed(&arr.to_data(), &mut bufs)?,
        }
    };
    Ok(EncodedPage {
        buffers: bufs.0,
        encoding,
        length: n as u64,
        structural: None,
    })
}

/// Encodes the offsets page of a list column from row lengths and validity.
pub fn encode_list_offsets(lengths: &[u64], validity: &[bool]) -> EncodedPage {
    let num_items: u64 = lengths.iter().sum();
    encode_list_offsets_with_adjustment(lengths, validity, num_items + 1)
}

/// As [`encode_list_offsets`] with a chosen adjustment (must exceed the
/// number of items; seed 002 explains why items + 1 is the best choice).
pub fn encode_list_offsets_with_adjustment(
    lengths: &[u64],
    validity: &[bool],
    adj: u64,
) -> EncodedPage {
    let num_items: u64 = lengths.iter().sum();
    assert!(
        adj > num_items,
        "null_offset_adjustment must exceed the item count"
    );
    let mut end = 0u64;
    let offsets = le_u64s(
        lengths.iter().zip(validity).map(|(len, valid)| {
            end += len;
            if *valid { end } else { end + adj }
        }),
        lengths.len(),
    );
    let mut bufs = Buffers::default();
    let offsets = bufs.flat(64, offsets);
    EncodedPage {
        buffers: bufs.0,
        encoding: wrap(A::List(Box::new(pbe::List {
            offsets: Some(Box::new(no_nulls(offsets))),
            null_offset_adjustment: adj,
            num_items,
        }))),
        length: lengths.len() as u64,
        structural: None,
    }
}

/// The page of a struct column: no buffers, just a row count.
pub fn encode_struct(rows: u64) -> EncodedPage {
    EncodedPage {
        buffers: vec![],
        encoding: wrap(A::Struct(pbe::SimpleStruct {})),
        length: rows,
        structural: None,
    }
}

/// An empty page for a leaf column that received no values.
pub fn encode_empty_leaf() -> EncodedPage {
    EncodedPage {
        buffers: vec![],
        encoding: all_nulls(),
        length: 0,
        structural: None,
    }
}
