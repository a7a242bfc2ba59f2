//! The portable weighted-sum kernel, and the tail every SIMD kernel hands down to.

use super::{PRECISION_BITS, ROUND_BIAS};

/// A fixed-point sum back to a byte: `clamp(acc >> PRECISION_BITS, 0, 255)`.
#[inline]
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub(super) fn clip8(acc: i32) -> u8 {
    (acc >> PRECISION_BITS).clamp(0, 255) as u8
}

/// `out[l] = clip8(2^21 + sum_t k[t] * src[(start + t) * stride + lane0 + l])` for
/// every lane `l` of `out`: one output row of the vertical pass, or one output
/// column of a transposed band of the horizontal pass. Scalar version.
pub(super) fn weighted_sum(
    src: &[u8],
    stride: usize,
    start: usize,
    lane0: usize,
    k: &[i32],
    out: &mut [u8],
) {
    for (l, o) in out.iter_mut().enumerate() {
        let mut acc = ROUND_BIAS;
        for (t, &kv) in k.iter().enumerate() {
            acc += i32::from(src[(start + t) * stride + lane0 + l]) * kv;
        }
        *o = clip8(acc);
    }
}
