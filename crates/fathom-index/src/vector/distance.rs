//! Distance metrics, with the values Lance reports as `_distance`:
//! `l2` is the squared Euclidean distance, `cosine` is 1 - cos(a, b),
//! `dot` is 1 - a·b.

use crate::error::{Error, Result};

/// A vector distance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Metric {
    L2,
    Cosine,
    Dot,
}

impl Metric {
    /// `l2` / `euclidean`, `cosine`, `dot` (case-insensitive).
    pub fn parse(s: &str) -> Result<Metric> {
        match s.to_ascii_lowercase().as_str() {
            "l2" | "euclidean" => Ok(Metric::L2),
            "cosine" => Ok(Metric::Cosine),
            "dot" => Ok(Metric::Dot),
            other => Err(Error::InvalidInput(format!(
                "unknown distance metric '{other}' (supported: l2, cosine, dot)"
            ))),
        }
    }

    /// The name Lance writes (`l2`, `cosine`, `dot`).
    pub fn name(self) -> &'static str {
        match self {
            Metric::L2 => "l2",
            Metric::Cosine => "cosine",
            Metric::Dot => "dot",
        }
    }

    /// The `metric_type` enum value of `VectorIndexDetails`.
    pub fn proto(self) -> i32 {
        match self {
            Metric::L2 => 0,
            Metric::Cosine => 1,
            Metric::Dot => 2,
        }
    }

    pub fn from_proto(v: i32) -> Result<Metric> {
        match v {
            0 => Ok(Metric::L2),
            1 => Ok(Metric::Cosine),
            2 => Ok(Metric::Dot),
            other => Err(Error::InvalidInput(format!(
                "vector index metric {other} is not supported (l2, cosine, dot are)"
            ))),
        }
    }

    /// The distance between `a` and `b` (same length), with AVX2 where
    /// the CPU has it.
    #[inline]
    pub fn distance(self, a: &[f32], b: &[f32]) -> f32 {
        distance_dispatched(self, a, b)
    }
}

/// Defines a function twice over one body: compiled for the baseline
/// target, and compiled with AVX2 enabled, which is chosen at run time
/// when the CPU has it (std caches the check). The body is the same code,
/// so both give the same bits: no fused multiply-add is introduced (Rust
/// never contracts `a * b + c`), and lane order is the body's own.
/// Kernels called from the body are `#[inline(always)]` so they are
/// compiled into each version.
macro_rules! avx2_dispatch {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty $body:block) => {
        $(#[$m])*
        $vis fn $name($($arg: $ty),*) -> $ret {
            #[inline(always)]
            fn body($($arg: $ty),*) -> $ret $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2")]
                fn avx2($($arg: $ty),*) -> $ret {
                    body($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: the running CPU has AVX2, checked just above.
                    return unsafe { avx2($($arg),*) };
                }
            }
            body($($arg),*)
        }
    };
}
pub(crate) use avx2_dispatch;

avx2_dispatch! {
    fn distance_dispatched(m: Metric, a: &[f32], b: &[f32]) -> f32 {
        match m {
            Metric::L2 => l2_squared(a, b),
            Metric::Cosine => cosine_distance(a, b),
            Metric::Dot => 1.0 - dot(a, b),
        }
    }
}

avx2_dispatch! {
    /// Σ (a - b)² over 8-bit codes (SQ distances in code space), with
    /// AVX2 where the CPU has it.
    pub fn code_l2(a: &[u8], b: &[u8]) -> f32 {
        code_l2_kernel(a, b)
    }
}

/// Σ (a - b)² over 8-bit codes: differences as i16, squares summed in
/// i32 lanes (a multiply-add the compiler maps to `pmaddwd`), in runs
/// short enough that an i32 cannot overflow (65,025 · 32,768 < 2³¹).
#[inline(always)]
pub fn code_l2_kernel(a: &[u8], b: &[u8]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let mut total = 0u64;
    for (a, b) in a.chunks(32_768).zip(b.chunks(32_768)) {
        let mut s = 0i32;
        for (x, y) in a.iter().zip(b) {
            let d = *x as i16 - *y as i16;
            s += d as i32 * d as i32;
        }
        total += s as u64;
    }
    total as f32
}

/// a·b, in eight lanes so the compiler vectorizes it.
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let mut acc = [0f32; 8];
    let (ca, ra) = a.as_chunks::<8>();
    let (cb, rb) = b.as_chunks::<8>();
    for (x, y) in ca.iter().zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

/// Σ (a - b)².
#[inline(always)]
pub fn l2_squared(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let mut acc = [0f32; 8];
    let (ca, ra) = a.as_chunks::<8>();
    let (cb, rb) = b.as_chunks::<8>();
    for (x, y) in ca.iter().zip(cb) {
        for i in 0..8 {
            let d = x[i] - y[i];
            acc[i] += d * d;
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ra.iter().zip(rb) {
        let d = x - y;
        s += d * d;
    }
    s
}

/// 1 - cos(a, b); 1 when either vector is zero (as Lance returns).
#[inline(always)]
pub fn cosine_distance(a: &[f32], b: &[f32]) -> f32 {
    let (ab, aa, bb) = (dot(a, b), dot(a, a), dot(b, b));
    let n = (aa * bb).sqrt();
    if n == 0.0 { 1.0 } else { 1.0 - ab / n }
}

/// `v` scaled to unit length (unchanged when zero).
pub fn normalize(v: &mut [f32]) {
    let n = dot(v, v).sqrt();
    if n > 0.0 {
        for x in v {
            *x /= n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values() {
        let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0];
        let b = [0.5, -1.0, 3.0, 0.0, 2.0, 6.5, 1.0, 0.0, -9.0];
        let naive_l2: f32 = a.iter().zip(&b).map(|(x, y)| (x - y) * (x - y)).sum();
        let naive_dot: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!((l2_squared(&a, &b) - naive_l2).abs() < 1e-3);
        assert!((Metric::Dot.distance(&a, &b) - (1.0 - naive_dot)).abs() < 1e-3);
        let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
        let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
        let c = 1.0 - naive_dot / (na * nb);
        assert!((Metric::Cosine.distance(&a, &b) - c).abs() < 1e-5);
        assert_eq!(Metric::Cosine.distance(&a, &[0.0; 9]), 1.0);
        assert_eq!(Metric::parse("Euclidean").unwrap(), Metric::L2);
        assert!(
            Metric::parse("hamming")
                .unwrap_err()
                .to_string()
                .contains("hamming")
        );
    }
}
