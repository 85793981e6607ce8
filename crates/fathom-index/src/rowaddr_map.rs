//! Lance's serialized row-address map: `u32 n_entries`, then per fragment
//! `u32 fragment_id, u32 nbytes, nbytes of portable 32-bit roaring`
//! (`nbytes = 0` = the whole fragment; we never write that form).

use roaring::{RoaringBitmap, RoaringTreemap};

use crate::error::{Error, Result};

pub fn serialize(map: &RoaringTreemap) -> Vec<u8> {
    let parts: Vec<(u32, &RoaringBitmap)> = map.bitmaps().collect();
    let mut out = Vec::new();
    out.extend_from_slice(&(parts.len() as u32).to_le_bytes());
    for (frag, bm) in parts {
        let mut b = Vec::with_capacity(bm.serialized_size());
        bm.serialize_into(&mut b)
            .expect("writing to a Vec cannot fail");
        out.extend_from_slice(&frag.to_le_bytes());
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(&b);
    }
    out
}

pub fn deserialize(bytes: &[u8], what: &str) -> Result<RoaringTreemap> {
    let bad = |m: &str| Error::Corrupt {
        path: what.to_string(),
        message: format!("row address map: {m}"),
    };
    let u32_at = |i: usize| -> Result<u32> {
        bytes
            .get(i..i + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
            .ok_or_else(|| bad("truncated"))
    };
    let n = u32_at(0)? as usize;
    let mut pos = 4;
    let mut parts: Vec<(u32, RoaringBitmap)> = Vec::with_capacity(n);
    for _ in 0..n {
        let frag = u32_at(pos)?;
        let len = u32_at(pos + 4)? as usize;
        pos += 8;
        if len == 0 {
            return Err(bad("whole-fragment entries are not supported"));
        }
        let bm = RoaringBitmap::deserialize_from(
            bytes.get(pos..pos + len).ok_or_else(|| bad("truncated"))?,
        )
        .map_err(|e| bad(&e.to_string()))?;
        pos += len;
        parts.push((frag, bm));
    }
    // Whole bitmaps per fragment, merged where a fragment repeats.
    parts.sort_by_key(|(f, _)| *f);
    let mut merged: Vec<(u32, RoaringBitmap)> = Vec::with_capacity(parts.len());
    for (f, bm) in parts {
        match merged.last_mut() {
            Some((g, acc)) if *g == f => *acc |= bm,
            _ => merged.push((f, bm)),
        }
    }
    Ok(RoaringTreemap::from_bitmaps(merged))
}

#[cfg(test)]
mod tests {
    #[test]
    fn roundtrip() {
        let m: roaring::RoaringTreemap = [1u64, 5, (3 << 32) | 7, (3 << 32) | 8]
            .into_iter()
            .collect();
        assert_eq!(super::deserialize(&super::serialize(&m), "t").unwrap(), m);
    }

    #[test]
    fn repeated_fragments_merge() {
        let one = |f: u32, v: u32| {
            let m: roaring::RoaringTreemap = [((f as u64) << 32) | v as u64].into_iter().collect();
            super::serialize(&m)
        };
        // Two entries for fragment 2, written out of order around fragment 1.
        let (a, b, c) = (one(2, 9), one(1, 4), one(2, 3));
        let mut bytes = 3u32.to_le_bytes().to_vec();
        for part in [&a, &b, &c] {
            bytes.extend_from_slice(&part[4..]);
        }
        let got: Vec<u64> = super::deserialize(&bytes, "t").unwrap().iter().collect();
        assert_eq!(got, vec![(1 << 32) | 4, (2 << 32) | 3, (2 << 32) | 9]);
    }
}
