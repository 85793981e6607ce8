//! Decompression primitives: general (LZ4/zstd) decompression, bit
//! unpacking (inline and out-of-line widths), fixed and variable value
//! checks.

use super::*;

pub(super) fn general_decompress(scheme: Scheme, b: &[u8], ctx: &Ctx) -> Result<Bytes> {
    match scheme {
        Scheme::Lz4 => lz4_flex::block::decompress_size_prepended(b)
            .map(Bytes::from)
            .map_err(|e| ctx.corrupt(format!("LZ4 buffer: {e}"))),
        Scheme::Zstd => {
            if b.len() < 8 {
                return Err(ctx.corrupt("zstd buffer shorter than its length prefix"));
            }
            let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
            let out = zstd::bulk::decompress(&b[8..], n)
                .map_err(|e| ctx.corrupt(format!("zstd buffer: {e}")))?;
            if out.len() != n {
                return Err(ctx.corrupt("zstd buffer decompressed to the wrong size"));
            }
            Ok(Bytes::from(out))
        }
    }
}

// Words are read and written in the machine's order: Lance files are
// little-endian.
#[cfg(target_endian = "big")]
compile_error!("the 2.1+ decoders assume a little-endian machine");

/// Little-endian words of `bytes` as `T`: borrowed when aligned, else copied.
pub(super) fn words<T: Word>(b: &[u8]) -> std::borrow::Cow<'_, [T]> {
    match bytemuck::try_cast_slice(b) {
        Ok(w) => std::borrow::Cow::Borrowed(w),
        Err(_) => std::borrow::Cow::Owned(bytemuck::pod_collect_to_vec(b)),
    }
}

pub(super) trait Word: Copy + Default + BitPacking + bytemuck::Pod + Send + Sync {
    const BYTES: usize;
    fn as_u64(self) -> u64;
}

macro_rules! word {
    ($t:ty, $n:expr) => {
        impl Word for $t {
            const BYTES: usize = $n;
            fn as_u64(self) -> u64 {
                self as u64
            }
        }
    };
}
word!(u8, 1);
word!(u16, 2);
word!(u32, 4);
word!(u64, 8);

/// Decoded words handed to `Bytes` without a copy.
pub(super) struct OwnedWords<T>(Vec<T>);

impl<T: bytemuck::Pod> AsRef<[u8]> for OwnedWords<T> {
    fn as_ref(&self) -> &[u8] {
        bytemuck::cast_slice(&self.0)
    }
}

pub(super) fn into_bytes<T: Word>(mut v: Vec<T>, n: usize) -> Bytes {
    v.truncate(n);
    Bytes::from_owner(OwnedWords(v))
}

/// Unpacks one block of 1,024 values packed at `width` bits (FastLanes
/// layout, through Lance's own `lance-bitpacking`) into `out`.
pub(super) fn unpack_block<T: Word>(width: usize, packed: &[T], out: &mut [T]) {
    if width == 0 {
        out.fill(T::default());
        return;
    }
    // The kernel's contract, checked: exactly 1024 * width / bits(T) input
    // words and a 1,024-word output.
    assert_eq!(packed.len(), PACK_BLOCK * width / (T::BYTES * 8));
    assert_eq!(out.len(), PACK_BLOCK);
    // SAFETY: the lengths are as the kernel requires (asserted above).
    unsafe { T::unchecked_unpack(width, packed, out) };
}

/// Checks an inline bit-packed chunk of `n` values: its width word and
/// the packed words after it.
pub(super) fn inline_block<'a, T: Word>(
    b: &'a [u8],
    n: usize,
    ctx: &Ctx,
) -> Result<(usize, std::borrow::Cow<'a, [T]>)> {
    if n > PACK_BLOCK || b.len() < T::BYTES || !b.len().is_multiple_of(T::BYTES) {
        return Err(ctx.corrupt(format!(
            "inline bit-packed chunk of {} bytes for {n} values",
            b.len()
        )));
    }
    let w = words::<T>(b);
    let width = w[0].as_u64() as usize;
    if width > T::BYTES * 8 || (w.len() - 1) * T::BYTES * 8 != PACK_BLOCK * width {
        return Err(ctx.corrupt(format!(
            "inline bit-packed chunk of {} bytes does not hold 1024 values of {width} bits",
            b.len()
        )));
    }
    Ok((width, w))
}

pub(super) fn inline_unpack<T: Word>(b: &[u8], n: usize, ctx: &Ctx) -> Result<Bytes> {
    if n == 0 {
        return Ok(Bytes::new());
    }
    let (width, w) = inline_block::<T>(b, n, ctx)?;
    let mut out = vec![T::default(); PACK_BLOCK];
    unpack_block::<T>(width, &w[1..], &mut out);
    Ok(into_bytes(out, n))
}

pub(super) fn out_of_line_unpack<T: Word>(
    b: &[u8],
    n: usize,
    width: usize,
    ctx: &Ctx,
) -> Result<Bytes> {
    if !b.len().is_multiple_of(T::BYTES) {
        return Err(ctx.corrupt("bit-packed buffer of a partial word"));
    }
    let w = words::<T>(b);
    let per_block = (PACK_BLOCK * width).div_ceil(T::BYTES * 8);
    let full = n / PACK_BLOCK;
    let tail = n % PACK_BLOCK;
    let raw_tail = tail > 0 && w.len() == full * per_block + tail;
    let expect = full * per_block
        + if tail == 0 {
            0
        } else if raw_tail {
            tail
        } else {
            per_block
        };
    if w.len() != expect {
        return Err(ctx.corrupt(format!(
            "bit-packed buffer of {} bytes does not hold {n} values of {width} bits",
            b.len()
        )));
    }
    let mut out = vec![T::default(); (full + 1) * PACK_BLOCK];
    for k in 0..full {
        unpack_block::<T>(
            width,
            &w[k * per_block..(k + 1) * per_block],
            &mut out[k * PACK_BLOCK..(k + 1) * PACK_BLOCK],
        );
    }
    if tail > 0 {
        let rest = &w[full * per_block..];
        let dst = &mut out[full * PACK_BLOCK..(full + 1) * PACK_BLOCK];
        if raw_tail {
            dst[..tail].copy_from_slice(rest);
        } else {
            unpack_block::<T>(width, rest, dst);
        }
    }
    Ok(into_bytes(out, n))
}

/// Where each of a block's 1,024 values sits in Lance's FastLanes layout:
/// value `FL_ORDER[row / 8] * 16 + (row % 8) * 128 + lane` is the `row`-th
/// packed value of lane `lane` (lanes = 1024 / bits of the word).
pub(super) fn fl_positions(word_bits: usize) -> &'static [(u16, u16)] {
    static TABLES: [OnceLock<Vec<(u16, u16)>>; 4] = [
        OnceLock::new(),
        OnceLock::new(),
        OnceLock::new(),
        OnceLock::new(),
    ];
    let slot = match word_bits {
        8 => 0,
        16 => 1,
        32 => 2,
        _ => 3,
    };
    TABLES[slot].get_or_init(|| {
        let lanes = PACK_BLOCK / word_bits;
        let mut t = vec![(0u16, 0u16); PACK_BLOCK];
        for row in 0..word_bits {
            for lane in 0..lanes {
                let idx = lance_bitpacking::FL_ORDER[row / 8] * 16 + (row % 8) * 128 + lane;
                t[idx] = (row as u16, lane as u16);
            }
        }
        t
    })
}

/// Value `idx` of one packed block, without unpacking the others.
pub(super) fn unpack_one<T: Word>(packed: &[T], width: usize, idx: usize) -> u64 {
    if width == 0 {
        return 0;
    }
    let tb = T::BYTES * 8;
    let lanes = PACK_BLOCK / tb;
    let (row, lane) = fl_positions(tb)[idx];
    let bit = row as usize * width;
    let (k, shift) = (bit / tb, bit % tb);
    let mut v = packed[lanes * k + lane as usize].as_u64() >> shift;
    if shift + width > tb {
        v |= packed[lanes * (k + 1) + lane as usize].as_u64() << (tb - shift);
    }
    if width >= 64 {
        v
    } else {
        v & ((1u64 << width) - 1)
    }
}

/// The values at `rows` of an inline bit-packed chunk of `n` values.
pub(super) fn inline_rows<T: Word>(b: &[u8], n: usize, rows: &[usize], ctx: &Ctx) -> Result<Bytes> {
    if n == 0 {
        return Err(ctx.corrupt("rows taken from an empty bit-packed chunk"));
    }
    let (width, w) = inline_block::<T>(b, n, ctx)?;
    let mut out = Vec::with_capacity(rows.len() * T::BYTES);
    for r in rows {
        if *r >= n {
            return Err(ctx.corrupt("row past its bit-packed chunk"));
        }
        let v = unpack_one::<T>(&w[1..], width, *r);
        out.extend_from_slice(&v.to_le_bytes()[..T::BYTES]);
    }
    Ok(Bytes::from(out))
}

pub(super) fn by_word<F8, F16, F32, F64>(
    bits: u64,
    f8: F8,
    f16: F16,
    f32: F32,
    f64: F64,
) -> Result<Bytes>
where
    F8: FnOnce() -> Result<Bytes>,
    F16: FnOnce() -> Result<Bytes>,
    F32: FnOnce() -> Result<Bytes>,
    F64: FnOnce() -> Result<Bytes>,
{
    match bits {
        8 => f8(),
        16 => f16(),
        32 => f32(),
        _ => f64(),
    }
}

pub(super) fn fixed_len_check(b: &Bytes, n: usize, bits: u64, ctx: &Ctx) -> Result<()> {
    let need = (n as u64 * bits).div_ceil(8) as usize;
    if b.len() < need {
        return Err(ctx.corrupt(format!(
            "{} bytes hold fewer than {n} values of {bits} bits",
            b.len()
        )));
    }
    Ok(())
}

/// Offsets (`n + 1` of `bits` each) at the front of `b`, absolute within `b`.
pub(super) fn leading_offsets(b: &[u8], n: usize, bits: u64, ctx: &Ctx) -> Result<Vec<u64>> {
    let w = (bits / 8) as usize;
    if b.len() < (n + 1) * w {
        return Err(ctx.corrupt("variable-width chunk shorter than its offsets"));
    }
    Ok(b[..(n + 1) * w]
        .chunks_exact(w)
        .map(|c| {
            if w == 4 {
                u32::from_le_bytes(c.try_into().unwrap()) as u64
            } else {
                u64::from_le_bytes(c.try_into().unwrap())
            }
        })
        .collect())
}

pub(super) fn rebase(offs: Vec<u64>, b: &Bytes, ctx: &Ctx) -> Result<Values> {
    let first = *offs.first().unwrap_or(&0);
    let last = *offs.last().unwrap_or(&0);
    if offs.windows(2).any(|w| w[0] > w[1]) || last as usize > b.len() {
        return Err(ctx.corrupt("variable-width offsets out of order or past their bytes"));
    }
    Ok(Values::Var {
        offsets: offs.iter().map(|o| o - first).collect(),
        data: b.slice(first as usize..last as usize),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Single values read from a packed block equal the whole block's
    /// unpacking, for every word size and width.
    #[test]
    fn single_values_match_block_unpack() {
        fn check<T: Word>(seed: u64) {
            let tb = T::BYTES * 8;
            for width in 0..=tb {
                // Random packed words: any bits are a valid packed block.
                let mut x = seed ^ width as u64;
                let packed: Vec<T> = (0..PACK_BLOCK * width / tb)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        bytemuck::pod_read_unaligned(&x.to_le_bytes()[..T::BYTES])
                    })
                    .collect();
                let mut all = vec![T::default(); PACK_BLOCK];
                unpack_block::<T>(width, &packed, &mut all);
                for (idx, want) in all.iter().enumerate() {
                    assert_eq!(
                        unpack_one::<T>(&packed, width, idx),
                        want.as_u64(),
                        "T={tb} W={width} idx={idx}"
                    );
                }
            }
        }
        check::<u8>(1);
        check::<u16>(2);
        check::<u32>(3);
        check::<u64>(4);
    }
}
