//! Page encodings of the 2.0 format as a domain tree.
//!
//! A page's protobuf `ArrayEncoding` refers to its buffers by index; parsing
//! resolves every reference to an absolute byte range of the file, so the
//! decoders work on [`Enc`] alone and never see protobuf.
//!
//! | variant | stores | used for |
//! |---|---|---|
//! | `Flat` | `bits` per value, back to back (1 bit = a bitmap) | numbers, dates, bools, validity, offsets |
//! | `Nullable` | optional validity bitmap + values; or all null | every fixed-width column |
//! | `Fsl` | `dim` items per value | embedding vectors |
//! | `Binary` | end offsets (no leading 0) + bytes; null = offset + `null_adj` | strings, binary |
//! | `Dictionary` | 1-based indices (0 = null) + Binary items | low-cardinality strings |
//! | `List` | end offsets (no leading 0, seed 002) + `num_items` | list offsets column |
//! | `Struct` | nothing: children are their own columns | struct |
//! | `Constant` | one value, repeated | read only |

pub mod decode;
pub mod encode;
pub mod encode21;

use std::ops::Range;

use bytes::Bytes;
use prost::Message;

use crate::error::{Error, Result};
use crate::format::{ARRAY_ENCODING_URL, PAGE_LAYOUT_URL, type_url_is};
use crate::pb::encodings as pbe;

/// A page encoding with buffers resolved to absolute file ranges.
#[derive(Debug, Clone, PartialEq)]
pub enum Enc {
    Flat {
        bits: u64,
        buf: Range<u64>,
    },
    AllNull,
    /// `validity` is `None` when the page has no nulls.
    Nullable {
        validity: Option<Box<Enc>>,
        values: Box<Enc>,
    },
    Fsl {
        dim: u64,
        items: Box<Enc>,
    },
    FixedSizeBinary {
        width: u64,
        bytes: Box<Enc>,
    },
    Binary {
        indices: Box<Enc>,
        bytes: Box<Enc>,
        null_adj: u64,
    },
    Dictionary {
        indices: Box<Enc>,
        items: Box<Enc>,
        num_items: u64,
    },
    List {
        offsets: Box<Enc>,
        null_adj: u64,
        num_items: u64,
    },
    Struct,
    Constant(Bytes),
    /// A page of a 2.1+ file: a structural layout over a compression tree.
    Structural(StructPage),
}

/// A parsed 2.1+ page, shared (its chunk index and dictionary are loaded
/// once and kept with it). Pages compare by identity.
#[derive(Debug, Clone)]
pub struct StructPage(pub(crate) std::sync::Arc<crate::reader::v21::Layout>);

impl PartialEq for StructPage {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

/// Where a page's buffers are.
pub struct BufferTable<'a> {
    pub page: &'a [Range<u64>],
    pub column: &'a [Range<u64>],
}

impl Enc {
    /// Decodes the serialized `Any` of a page and resolves its buffers.
    pub fn from_any_bytes(path: &str, any: &[u8], bufs: &BufferTable) -> Result<Enc> {
        let any = prost_types::Any::decode(any).map_err(|e| {
            Error::corrupt(path, format!("page encoding is not a protobuf Any: {e}"))
        })?;
        if type_url_is(&any.type_url, PAGE_LAYOUT_URL) {
            let pl = crate::pb::encodings21::PageLayout::decode(any.value.as_slice())
                .map_err(|e| Error::corrupt(path, format!("bad PageLayout protobuf: {e}")))?;
            let layout = crate::reader::v21::Layout::from_pb(&pl, bufs.page, path)?;
            return Ok(Enc::Structural(StructPage(std::sync::Arc::new(layout))));
        }
        if !type_url_is(&any.type_url, ARRAY_ENCODING_URL) {
            return Err(Error::unsupported(
                path,
                format!(
                    "page encoding '{}' (2.0 reader expects {ARRAY_ENCODING_URL})",
                    any.type_url
                ),
            ));
        }
        let enc = pbe::ArrayEncoding::decode(any.value.as_slice())
            .map_err(|e| Error::corrupt(path, format!("bad ArrayEncoding protobuf: {e}")))?;
        Enc::from_pb(path, &enc, bufs, 0)
    }

    fn from_pb(path: &str, e: &pbe::ArrayEncoding, bufs: &BufferTable, depth: u32) -> Result<Enc> {
        use pbe::array_encoding::ArrayEncoding as A;
        if depth > 32 {
            return Err(Error::corrupt(path, "page encoding nested deeper than 32"));
        }
        let child = |c: &Option<Box<pbe::ArrayEncoding>>, what: &str| -> Result<Box<Enc>> {
            match c {
                Some(c) => Ok(Box::new(Enc::from_pb(path, c, bufs, depth + 1)?)),
                None => Err(Error::corrupt(path, format!("encoding lacks its {what}"))),
            }
        };
        let Some(inner) = &e.array_encoding else {
            return Err(Error::unsupported(
                path,
                "page uses an array encoding this reader does not know",
            ));
        };
        Ok(match inner {
            A::Flat(f) => {
                if let Some(c) = &f.compression
                    && !c.scheme.is_empty()
                {
                    return Err(Error::unsupported(
                        path,
                        format!("compressed flat buffer (scheme '{}')", c.scheme),
                    ));
                }
                let b = f
                    .buffer
                    .as_ref()
                    .ok_or_else(|| Error::corrupt(path, "flat encoding without a buffer"))?;
                let table = match b.buffer_type() {
                    pbe::buffer::BufferType::Page => bufs.page,
                    pbe::buffer::BufferType::Column => bufs.column,
                    pbe::buffer::BufferType::File => {
                        return Err(Error::unsupported(path, "file-level buffer in a page"));
                    }
                };
                let buf = table.get(b.buffer_index as usize).cloned().ok_or_else(|| {
                    Error::corrupt(
                        path,
                        format!(
                            "encoding refers to buffer {} but the page has {}",
                            b.buffer_index,
                            table.len()
                        ),
                    )
                })?;
                if f.bits_per_value == 0 || f.bits_per_value > 1024 {
                    return Err(Error::corrupt(
                        path,
                        format!("flat encoding with {} bits per value", f.bits_per_value),
                    ));
                }
                Enc::Flat {
                    bits: f.bits_per_value,
                    buf,
                }
            }
            A::Nullable(n) => {
                use pbe::nullable::Nullability as N;
                match &n.nullability {
                    Some(N::NoNulls(v)) => Enc::Nullable {
                        validity: None,
                        values: child(&v.values, "values")?,
                    },
                    Some(N::SomeNulls(v)) => Enc::Nullable {
                        validity: Some(child(&v.validity, "validity")?),
                        values: child(&v.values, "values")?,
                    },
                    Some(N::AllNulls(_)) => Enc::AllNull,
                    None => return Err(Error::corrupt(path, "nullable encoding without a kind")),
                }
            }
            A::FixedSizeList(f) => {
                if f.has_validity {
                    return Err(Error::unsupported(
                        path,
                        "fixed-size list with item validity in the list encoding",
                    ));
                }
                if f.dimension == 0 {
                    return Err(Error::corrupt(path, "fixed-size list of dimension 0"));
                }
                Enc::Fsl {
                    dim: f.dimension as u64,
                    items: child(&f.items, "items")?,
                }
            }
            A::FixedSizeBinary(f) => Enc::FixedSizeBinary {
                width: f.byte_width as u64,
                bytes: child(&f.bytes, "bytes")?,
            },
            A::Binary(b) => Enc::Binary {
                indices: child(&b.indices, "indices")?,
                bytes: child(&b.bytes, "bytes")?,
                null_adj: b.null_adjustment,
            },
            A::Dictionary(d) => Enc::Dictionary {
                indices: child(&d.indices, "indices")?,
                items: child(&d.items, "items")?,
                num_items: d.num_dictionary_items as u64,
            },
            A::List(l) => Enc::List {
                offsets: child(&l.offsets, "offsets")?,
                null_adj: l.null_offset_adjustment,
                num_items: l.num_items,
            },
            A::Struct(_) => Enc::Struct,
            A::Constant(c) => Enc::Constant(Bytes::from(c.value.clone())),
        })
    }
}
