//! Stable row id sequences: the row ids of a fragment's rows in physical
//! order, stored compactly as segments (a range, a range with holes, a
//! range with a bitmap, or arrays). Deleting rows does not change a
//! sequence; the deletion file masks positions as it does for data.

use bytes::Bytes;
use prost::Message;

use crate::error::{Error, Result};
use crate::pb;
use crate::pb::encoded_u64_array::Array as EA;
use crate::pb::u64_segment::Segment as S;

/// One segment of a sequence.
#[derive(Debug, Clone, PartialEq)]
pub enum Segment {
    Range(std::ops::Range<u64>),
    RangeWithHoles {
        range: std::ops::Range<u64>,
        holes: Vec<u64>,
    },
    RangeWithBitmap {
        range: std::ops::Range<u64>,
        bitmap: Vec<u8>,
    },
    SortedArray(Vec<u64>),
    Array(Vec<u64>),
}

/// The row ids of one fragment, in physical row order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RowIdSequence(pub Vec<Segment>);

fn decode_array(a: &pb::EncodedU64Array, what: &str) -> Result<Vec<u64>> {
    let bad = || Error::corrupt("row id sequence", format!("{what}: malformed array"));
    Ok(match &a.array {
        Some(EA::U16Array(x)) => x
            .offsets
            .chunks_exact(2)
            .map(|c| x.base + u16::from_le_bytes([c[0], c[1]]) as u64)
            .collect(),
        Some(EA::U32Array(x)) => x
            .offsets
            .chunks_exact(4)
            .map(|c| x.base + u32::from_le_bytes(c.try_into().unwrap()) as u64)
            .collect(),
        Some(EA::U64Array(x)) => x
            .values
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        None => return Err(bad()),
    })
}

fn encode_array(v: &[u64]) -> pb::EncodedU64Array {
    let base = v.iter().copied().min().unwrap_or(0);
    let span = v.iter().copied().max().unwrap_or(0) - base;
    let array = if span <= u16::MAX as u64 {
        EA::U16Array(pb::encoded_u64_array::U16Array {
            base,
            offsets: v
                .iter()
                .flat_map(|x| ((x - base) as u16).to_le_bytes())
                .collect(),
        })
    } else if span <= u32::MAX as u64 {
        EA::U32Array(pb::encoded_u64_array::U32Array {
            base,
            offsets: v
                .iter()
                .flat_map(|x| ((x - base) as u32).to_le_bytes())
                .collect(),
        })
    } else {
        EA::U64Array(pb::encoded_u64_array::U64Array {
            values: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        })
    };
    pb::EncodedU64Array { array: Some(array) }
}

/// Bit `i` of a `RangeWithBitmap` (present ids), least significant bit
/// first: pylance 14, compacting ids 1500..3000 with 2000..2600 deleted,
/// wrote 62 bytes of 0xFF then 0x0F (ids 1996..1999 present, 2000.. not).
fn bit_set(bitmap: &[u8], i: usize) -> bool {
    bitmap.get(i / 8).is_some_and(|b| b & (1 << (i % 8)) != 0)
}

impl RowIdSequence {
    /// A sequence of consecutive ids.
    pub fn from_range(range: std::ops::Range<u64>) -> Self {
        RowIdSequence(vec![Segment::Range(range)])
    }

    /// The sequence of `ids` in this order: one range when they are
    /// consecutive, else a sorted or plain array.
    pub fn from_ids(ids: &[u64]) -> Self {
        match (ids.first(), ids.last()) {
            (None, _) | (_, None) => RowIdSequence(vec![]),
            (Some(&a), Some(&b))
                if b >= a
                    && b - a + 1 == ids.len() as u64
                    && ids.windows(2).all(|w| w[1] == w[0] + 1) =>
            {
                Self::from_range(a..b + 1)
            }
            _ if ids.windows(2).all(|w| w[0] < w[1]) => {
                RowIdSequence(vec![Segment::SortedArray(ids.to_vec())])
            }
            _ => RowIdSequence(vec![Segment::Array(ids.to_vec())]),
        }
    }

    /// Decodes the protobuf bytes stored inline in a fragment.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let seq =
            pb::RowIdSequence::decode(bytes).map_err(|e| Error::corrupt("row id sequence", e))?;
        let mut out = Vec::with_capacity(seq.segments.len());
        for s in seq.segments {
            out.push(match s.segment {
                Some(S::Range(r)) => Segment::Range(r.start..r.end),
                Some(S::RangeWithHoles(r)) => Segment::RangeWithHoles {
                    range: r.start..r.end,
                    holes: r
                        .holes
                        .as_ref()
                        .map(|h| decode_array(h, "holes"))
                        .transpose()?
                        .unwrap_or_default(),
                },
                Some(S::RangeWithBitmap(r)) => Segment::RangeWithBitmap {
                    range: r.start..r.end,
                    bitmap: r.bitmap,
                },
                Some(S::SortedArray(a)) => Segment::SortedArray(decode_array(&a, "sorted array")?),
                Some(S::Array(a)) => Segment::Array(decode_array(&a, "array")?),
                None => return Err(Error::corrupt("row id sequence", "empty segment")),
            });
        }
        Ok(RowIdSequence(out))
    }

    /// Encodes to protobuf bytes.
    pub fn encode(&self) -> Bytes {
        let segments = self
            .0
            .iter()
            .map(|s| pb::U64Segment {
                segment: Some(match s {
                    Segment::Range(r) => S::Range(pb::u64_segment::Range {
                        start: r.start,
                        end: r.end,
                    }),
                    Segment::RangeWithHoles { range, holes } => {
                        S::RangeWithHoles(pb::u64_segment::RangeWithHoles {
                            start: range.start,
                            end: range.end,
                            holes: Some(encode_array(holes)),
                        })
                    }
                    Segment::RangeWithBitmap { range, bitmap } => {
                        S::RangeWithBitmap(pb::u64_segment::RangeWithBitmap {
                            start: range.start,
                            end: range.end,
                            bitmap: bitmap.clone(),
                        })
                    }
                    Segment::SortedArray(v) => S::SortedArray(encode_array(v)),
                    Segment::Array(v) => S::Array(encode_array(v)),
                }),
            })
            .collect();
        Bytes::from(pb::RowIdSequence { segments }.encode_to_vec())
    }

    /// All ids in physical order.
    pub fn to_vec(&self) -> Vec<u64> {
        let mut out = Vec::new();
        for s in &self.0 {
            match s {
                Segment::Range(r) => out.extend(r.clone()),
                Segment::RangeWithHoles { range, holes } => {
                    let holes: std::collections::HashSet<u64> = holes.iter().copied().collect();
                    out.extend(range.clone().filter(|v| !holes.contains(v)))
                }
                Segment::RangeWithBitmap { range, bitmap } => {
                    for (i, v) in range.clone().enumerate() {
                        if bit_set(bitmap, i) {
                            out.push(v)
                        }
                    }
                }
                Segment::SortedArray(v) | Segment::Array(v) => out.extend_from_slice(v),
            }
        }
        out
    }

    /// Number of ids.
    pub fn len(&self) -> u64 {
        self.0
            .iter()
            .map(|s| match s {
                Segment::Range(r) => r.end - r.start,
                Segment::RangeWithHoles { range, holes } => {
                    range.end - range.start - holes.len() as u64
                }
                Segment::RangeWithBitmap { bitmap, range } => {
                    let n = (range.end - range.start) as usize;
                    (0..n).filter(|i| bit_set(bitmap, *i)).count() as u64
                }
                Segment::SortedArray(v) | Segment::Array(v) => v.len() as u64,
            })
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_roundtrip() {
        let seq = RowIdSequence(vec![
            Segment::Range(0..5),
            Segment::RangeWithHoles {
                range: 10..15,
                holes: vec![11, 13],
            },
            Segment::RangeWithBitmap {
                range: 20..28,
                bitmap: vec![0b1010_0001],
            },
            Segment::SortedArray(vec![100, 200, 70_000]),
            Segment::Array(vec![9, 3, 1 << 40]),
        ]);
        let back = RowIdSequence::decode(&seq.encode()).unwrap();
        assert_eq!(back, seq);
        assert_eq!(
            back.to_vec(),
            vec![
                0,
                1,
                2,
                3,
                4,
                10,
                12,
                14,
                20,
                25,
                27,
                100,
                200,
                70_000,
                9,
                3,
                1 << 40
            ]
        );
        assert_eq!(back.len(), 17);
    }

    /// The bit order pylance writes (see `bit_set`).
    #[test]
    fn range_with_bitmap_as_pylance_writes_it() {
        let mut bitmap = vec![0xFF; 62];
        bitmap.push(0x0F);
        bitmap.extend([0u8; 74]);
        bitmap.push(0xF0);
        let seq = RowIdSequence(vec![Segment::RangeWithBitmap {
            range: 1500..2604,
            bitmap,
        }]);
        let ids = seq.to_vec();
        assert_eq!(ids.len(), 504);
        assert_eq!(ids[495..500], [1995, 1996, 1997, 1998, 1999]);
        assert_eq!(ids[500..], [2600, 2601, 2602, 2603]);
        assert_eq!(seq.len(), 504);
    }
}
