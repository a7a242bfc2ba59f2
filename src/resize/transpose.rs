//! 16-row byte transposes between pixel rows and the column bands of the horizontal pass.

/// Rows handled together by the horizontal pass. A band of `ROWS` rows is
/// transposed so that byte `b` of every row becomes the contiguous column
/// `columns[b * ROWS..(b + 1) * ROWS]`; then one output pixel is a weighted sum
/// of contiguous `C * ROWS`-byte input pixel columns (the shape of the vertical
/// pass), and the output columns are transposed back into rows.
pub(super) const ROWS: usize = 16;

/// The byte interleaves of the transpose network, on 128-bit vectors or
/// within each 128-bit lane of a 256-bit one.
#[cfg(target_arch = "x86_64")]
trait Unpack: Copy {
    /// `(unpacklo, unpackhi)` of `a` and `b` in units of `BITS` bits.
    ///
    /// # Safety
    /// The CPU must support the vector's instructions (SSE2, AVX2).
    unsafe fn unpack<const BITS: u32>(a: Self, b: Self) -> (Self, Self);
}

#[cfg(target_arch = "x86_64")]
impl Unpack for std::arch::x86_64::__m128i {
    #[inline(always)]
    unsafe fn unpack<const BITS: u32>(a: Self, b: Self) -> (Self, Self) {
        use std::arch::x86_64::{
            _mm_unpackhi_epi16, _mm_unpackhi_epi32, _mm_unpackhi_epi64, _mm_unpackhi_epi8,
            _mm_unpacklo_epi16, _mm_unpacklo_epi32, _mm_unpacklo_epi64, _mm_unpacklo_epi8,
        };
        match BITS {
            8 => (_mm_unpacklo_epi8(a, b), _mm_unpackhi_epi8(a, b)),
            16 => (_mm_unpacklo_epi16(a, b), _mm_unpackhi_epi16(a, b)),
            32 => (_mm_unpacklo_epi32(a, b), _mm_unpackhi_epi32(a, b)),
            _ => (_mm_unpacklo_epi64(a, b), _mm_unpackhi_epi64(a, b)),
        }
    }
}

#[cfg(target_arch = "x86_64")]
impl Unpack for std::arch::x86_64::__m256i {
    #[inline(always)]
    unsafe fn unpack<const BITS: u32>(a: Self, b: Self) -> (Self, Self) {
        use std::arch::x86_64::{
            _mm256_unpackhi_epi16, _mm256_unpackhi_epi32, _mm256_unpackhi_epi64,
            _mm256_unpackhi_epi8, _mm256_unpacklo_epi16, _mm256_unpacklo_epi32,
            _mm256_unpacklo_epi64, _mm256_unpacklo_epi8,
        };
        match BITS {
            8 => (_mm256_unpacklo_epi8(a, b), _mm256_unpackhi_epi8(a, b)),
            16 => (_mm256_unpacklo_epi16(a, b), _mm256_unpackhi_epi16(a, b)),
            32 => (_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b)),
            _ => (_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b)),
        }
    }
}

/// One step of the transpose network: outputs `2 * o` and `2 * o + 1` are the
/// low and high interleaves, in `BITS`-bit units, of inputs `pairs[o]`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn step<V: Unpack, const BITS: u32>(x: [V; 16], pairs: [(usize, usize); 8]) -> [V; 16] {
    let mut y = x;
    for (o, (i, j)) in pairs.into_iter().enumerate() {
        (y[2 * o], y[2 * o + 1]) = V::unpack::<BITS>(x[i], x[j]);
    }
    y
}

/// The 16 x 16 byte transpose within each 128-bit lane: lane byte `j` of
/// input `i` becomes lane byte `i` of output `j`. Interleaves the bytes of row
/// pairs, then 16-, 32- and 64-bit units.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn transpose_lanes<V: Unpack>(a: [V; 16]) -> [V; 16] {
    let b = step::<V, 8>(
        a,
        [
            (0, 1),
            (2, 3),
            (4, 5),
            (6, 7),
            (8, 9),
            (10, 11),
            (12, 13),
            (14, 15),
        ],
    );
    let c = step::<V, 16>(
        b,
        [
            (0, 2),
            (1, 3),
            (4, 6),
            (5, 7),
            (8, 10),
            (9, 11),
            (12, 14),
            (13, 15),
        ],
    );
    let d = step::<V, 32>(
        c,
        [
            (0, 4),
            (1, 5),
            (2, 6),
            (3, 7),
            (8, 12),
            (9, 13),
            (10, 14),
            (11, 15),
        ],
    );
    step::<V, 64>(
        d,
        [
            (0, 8),
            (1, 9),
            (2, 10),
            (3, 11),
            (4, 12),
            (5, 13),
            (6, 14),
            (7, 15),
        ],
    )
}

/// Transpose a 16 x 16 byte block: `dst(j)[i] = src(i)[j]`, from 16 bytes at
/// each `src(i)` to 16 bytes at each `dst(j)`.
///
/// # Safety
/// `src(i) + [0, 16)` and `dst(j) + [0, 16)` must be valid for `i, j < 16`
/// (SSE2 is part of the x86-64 baseline).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::cast_ptr_alignment)]
unsafe fn transpose16(src: impl Fn(usize) -> *const u8, dst: impl Fn(usize) -> *mut u8) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_storeu_si128};
    let a = std::array::from_fn(|i| _mm_loadu_si128(src(i).cast::<__m128i>()));
    for (j, v) in transpose_lanes(a).into_iter().enumerate() {
        _mm_storeu_si128(dst(j).cast::<__m128i>(), v);
    }
}

/// Transpose a 16 x 32 byte block: `dst(j)[i] = src(i)[j]`, from 32 bytes at
/// each `src(i)` to 16 bytes at each `dst(j)` (`j < 32`): two 16 x 16 blocks
/// at once, one in each 128-bit lane.
///
/// # Safety
/// The CPU must support AVX2; `src(i) + [0, 32)` and `dst(j) + [0, 16)` must
/// be valid for `i < 16`, `j < 32`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(clippy::cast_ptr_alignment)]
unsafe fn transpose16x32(src: impl Fn(usize) -> *const u8, dst: impl Fn(usize) -> *mut u8) {
    use std::arch::x86_64::{
        __m128i, __m256i, _mm256_castsi256_si128, _mm256_extracti128_si256, _mm256_loadu_si256,
        _mm_storeu_si128,
    };
    let a = std::array::from_fn(|i| _mm256_loadu_si256(src(i).cast::<__m256i>()));
    for (j, v) in transpose_lanes(a).into_iter().enumerate() {
        _mm_storeu_si128(dst(j).cast::<__m128i>(), _mm256_castsi256_si128(v));
        _mm_storeu_si128(
            dst(16 + j).cast::<__m128i>(),
            _mm256_extracti128_si256::<1>(v),
        );
    }
}

/// `dst[j][i] = rows[i][j]` for `i < 16`, `j < len`: the 16 rows' bytes `[0, len)`
/// become `len` columns of 16 bytes, `dst` holding `len * 16` bytes: 32 bytes
/// of each row at a time where `avx2` (the caller's path runs AVX2), else 16.
pub(super) fn rows_to_columns(rows: &[&[u8]; ROWS], len: usize, dst: &mut [u8], avx2: bool) {
    assert!(rows.iter().all(|r| r.len() >= len) && dst.len() >= len * ROWS);
    let mut j = 0;
    #[cfg(target_arch = "x86_64")]
    {
        while avx2 && j + 32 <= len {
            let out = dst[j * ROWS..(j + 32) * ROWS].as_mut_ptr();
            // SAFETY: the caller's path runs AVX2; every row holds
            // `len >= j + 32` bytes, and `out` 512.
            unsafe { transpose16x32(|i| rows[i][j..].as_ptr(), |c| out.add(c * ROWS)) };
            j += 32;
        }
        while j + 16 <= len {
            let out = dst[j * ROWS..(j + 16) * ROWS].as_mut_ptr();
            // SAFETY: every row holds `len >= j + 16` bytes, and `out` 256.
            unsafe { transpose16(|i| rows[i][j..].as_ptr(), |c| out.add(c * ROWS)) };
            j += 16;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = avx2;
    for jj in j..len {
        for (i, row) in rows.iter().enumerate() {
            dst[jj * ROWS + i] = row[jj];
        }
    }
}

/// Transpose a 32 x 16 byte block: `dst(i)[j] = src(j)[i]`, from 16 bytes at
/// each `src(j)` (`j < 32`) to 32 bytes at each `dst(i)` (`i < 16`): two
/// 16 x 16 blocks at once, one in each 128-bit lane.
///
/// # Safety
/// The CPU must support AVX2; `src(j) + [0, 16)` and `dst(i) + [0, 32)` must
/// be valid for `j < 32`, `i < 16`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(clippy::cast_ptr_alignment)]
unsafe fn transpose32x16(src: impl Fn(usize) -> *const u8, dst: impl Fn(usize) -> *mut u8) {
    use std::arch::x86_64::{
        __m128i, __m256i, _mm256_castsi128_si256, _mm256_inserti128_si256, _mm256_storeu_si256,
        _mm_loadu_si128,
    };
    let a = std::array::from_fn(|j| {
        let lo = _mm256_castsi128_si256(_mm_loadu_si128(src(j).cast::<__m128i>()));
        _mm256_inserti128_si256::<1>(lo, _mm_loadu_si128(src(16 + j).cast::<__m128i>()))
    });
    for (i, v) in transpose_lanes(a).into_iter().enumerate() {
        _mm256_storeu_si256(dst(i).cast::<__m256i>(), v);
    }
}

/// The inverse of [`rows_to_columns`], from byte `at` of the rows:
/// `rows[i][at + j] = src[j * 16 + i]` for `i < rows.len()` (at most 16) and
/// `j < len`; 32 columns at a time where `avx2` (the caller's path runs
/// AVX2), else 16.
pub(super) fn columns_to_rows(
    src: &[u8],
    len: usize,
    rows: &mut [&mut [u8]],
    at: usize,
    avx2: bool,
) {
    assert!(src.len() >= len * ROWS && rows.len() <= ROWS);
    let mut j = 0;
    // The columns' bytes of rows past `rows` (a last band) go to `sink`.
    #[cfg(target_arch = "x86_64")]
    let mut sink = [0u8; 32];
    #[cfg(target_arch = "x86_64")]
    {
        while avx2 && j + 32 <= len {
            let columns = src[j * ROWS..(j + 32) * ROWS].as_ptr();
            let out: [*mut u8; ROWS] = std::array::from_fn(|i| match rows.get_mut(i) {
                Some(row) => row[at + j..at + j + 32].as_mut_ptr(),
                None => sink.as_mut_ptr(),
            });
            // SAFETY: the caller's path runs AVX2; `columns` holds 512 bytes,
            // each of `out` 32.
            unsafe { transpose32x16(|c| columns.add(c * ROWS), |i| out[i]) };
            j += 32;
        }
        while j + 16 <= len {
            let columns = src[j * ROWS..(j + 16) * ROWS].as_ptr();
            let out: [*mut u8; ROWS] = std::array::from_fn(|i| match rows.get_mut(i) {
                Some(row) => row[at + j..at + j + 16].as_mut_ptr(),
                None => sink.as_mut_ptr(),
            });
            // SAFETY: `columns` holds 256 bytes, each of `out` 16.
            unsafe { transpose16(|c| columns.add(c * ROWS), |i| out[i]) };
            j += 16;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = avx2;
    for jj in j..len {
        for (i, row) in rows.iter_mut().enumerate() {
            row[at + jj] = src[jj * ROWS + i];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::noise;

    #[test]
    fn band_transposes_round_trip() {
        // 32-byte steps (AVX2), 16-byte steps and single bytes, alone and mixed.
        let avx2 = [false, crate::simd::SimdPath::Avx2.is_supported()];
        for len in [0, 5, 16, 37, 64, 79, 100] {
            for avx2 in avx2 {
                let data = noise(len * ROWS, len as u64 + 3);
                let rows: [&[u8]; ROWS] = std::array::from_fn(|i| &data[i * len..(i + 1) * len]);
                let mut columns = vec![0u8; len * ROWS];
                rows_to_columns(&rows, len, &mut columns, avx2);
                for j in 0..len {
                    for i in 0..ROWS {
                        assert_eq!(columns[j * ROWS + i], data[i * len + j], "{len} {avx2}");
                    }
                }
                let mut back = vec![0u8; len * ROWS];
                let mut outs: Vec<&mut [u8]> =
                    back.chunks_exact_mut(len.max(1)).take(ROWS).collect();
                if len > 0 {
                    columns_to_rows(&columns, len, &mut outs, 0, avx2);
                    assert_eq!(back, data, "{len} {avx2}");
                    // A last band of 5 rows: the others' bytes go nowhere.
                    let mut short = vec![0u8; len * 5];
                    let mut outs: Vec<&mut [u8]> = short.chunks_exact_mut(len).collect();
                    columns_to_rows(&columns, len, &mut outs, 0, avx2);
                    assert_eq!(short, data[..len * 5], "{len} {avx2}");
                }
            }
        }
    }
}
