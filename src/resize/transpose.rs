//! 16-row byte transposes between pixel rows and the column bands of the horizontal pass.

/// Rows handled together by the horizontal pass. A band of `ROWS` rows is
/// transposed so that byte `b` of every row becomes the contiguous column
/// `columns[b * ROWS..(b + 1) * ROWS]`; then one output pixel is a weighted sum
/// of contiguous `C * ROWS`-byte input pixel columns (the shape of the vertical
/// pass), and the output columns are transposed back into rows.
pub(super) const ROWS: usize = 16;

/// Transpose a 16 x 16 byte block: `dst(j)[i] = src(i)[j]`, from 16 bytes at
/// each `src(i)` to 16 bytes at each `dst(j)`.
///
/// # Safety
/// `src(i) + [0, 16)` and `dst(j) + [0, 16)` must be valid for `i, j < 16`
/// (SSE2 is part of the x86-64 baseline).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::cast_ptr_alignment, clippy::many_single_char_names)]
unsafe fn transpose16(src: impl Fn(usize) -> *const u8, dst: impl Fn(usize) -> *mut u8) {
    use std::arch::x86_64::{
        __m128i, _mm_loadu_si128, _mm_storeu_si128, _mm_unpackhi_epi16, _mm_unpackhi_epi32,
        _mm_unpackhi_epi64, _mm_unpackhi_epi8, _mm_unpacklo_epi16, _mm_unpacklo_epi32,
        _mm_unpacklo_epi64, _mm_unpacklo_epi8,
    };
    let ld = |i: usize| _mm_loadu_si128(src(i).cast::<__m128i>());
    let (a0, a1, a2, a3, a4, a5, a6, a7) = (ld(0), ld(1), ld(2), ld(3), ld(4), ld(5), ld(6), ld(7));
    let (a8, a9, a10, a11) = (ld(8), ld(9), ld(10), ld(11));
    let (a12, a13, a14, a15) = (ld(12), ld(13), ld(14), ld(15));
    // Interleave bytes of row pairs, then 16-, 32- and 64-bit units.
    let (b0, b1) = (_mm_unpacklo_epi8(a0, a1), _mm_unpackhi_epi8(a0, a1));
    let (b2, b3) = (_mm_unpacklo_epi8(a2, a3), _mm_unpackhi_epi8(a2, a3));
    let (b4, b5) = (_mm_unpacklo_epi8(a4, a5), _mm_unpackhi_epi8(a4, a5));
    let (b6, b7) = (_mm_unpacklo_epi8(a6, a7), _mm_unpackhi_epi8(a6, a7));
    let (b8, b9) = (_mm_unpacklo_epi8(a8, a9), _mm_unpackhi_epi8(a8, a9));
    let (b10, b11) = (_mm_unpacklo_epi8(a10, a11), _mm_unpackhi_epi8(a10, a11));
    let (b12, b13) = (_mm_unpacklo_epi8(a12, a13), _mm_unpackhi_epi8(a12, a13));
    let (b14, b15) = (_mm_unpacklo_epi8(a14, a15), _mm_unpackhi_epi8(a14, a15));
    let (c0, c1) = (_mm_unpacklo_epi16(b0, b2), _mm_unpackhi_epi16(b0, b2));
    let (c2, c3) = (_mm_unpacklo_epi16(b1, b3), _mm_unpackhi_epi16(b1, b3));
    let (c4, c5) = (_mm_unpacklo_epi16(b4, b6), _mm_unpackhi_epi16(b4, b6));
    let (c6, c7) = (_mm_unpacklo_epi16(b5, b7), _mm_unpackhi_epi16(b5, b7));
    let (c8, c9) = (_mm_unpacklo_epi16(b8, b10), _mm_unpackhi_epi16(b8, b10));
    let (c10, c11) = (_mm_unpacklo_epi16(b9, b11), _mm_unpackhi_epi16(b9, b11));
    let (c12, c13) = (_mm_unpacklo_epi16(b12, b14), _mm_unpackhi_epi16(b12, b14));
    let (c14, c15) = (_mm_unpacklo_epi16(b13, b15), _mm_unpackhi_epi16(b13, b15));
    let (d0, d1) = (_mm_unpacklo_epi32(c0, c4), _mm_unpackhi_epi32(c0, c4));
    let (d2, d3) = (_mm_unpacklo_epi32(c1, c5), _mm_unpackhi_epi32(c1, c5));
    let (d4, d5) = (_mm_unpacklo_epi32(c2, c6), _mm_unpackhi_epi32(c2, c6));
    let (d6, d7) = (_mm_unpacklo_epi32(c3, c7), _mm_unpackhi_epi32(c3, c7));
    let (d8, d9) = (_mm_unpacklo_epi32(c8, c12), _mm_unpackhi_epi32(c8, c12));
    let (d10, d11) = (_mm_unpacklo_epi32(c9, c13), _mm_unpackhi_epi32(c9, c13));
    let (d12, d13) = (_mm_unpacklo_epi32(c10, c14), _mm_unpackhi_epi32(c10, c14));
    let (d14, d15) = (_mm_unpacklo_epi32(c11, c15), _mm_unpackhi_epi32(c11, c15));
    let st = |j: usize, v: __m128i| _mm_storeu_si128(dst(j).cast::<__m128i>(), v);
    for (j, (lo, hi)) in [
        (d0, d8),
        (d1, d9),
        (d2, d10),
        (d3, d11),
        (d4, d12),
        (d5, d13),
        (d6, d14),
        (d7, d15),
    ]
    .into_iter()
    .enumerate()
    {
        st(2 * j, _mm_unpacklo_epi64(lo, hi));
        st(2 * j + 1, _mm_unpackhi_epi64(lo, hi));
    }
}

/// `dst[j][i] = rows[i][j]` for `i < 16`, `j < len`: the 16 rows' bytes `[0, len)`
/// become `len` columns of 16 bytes, `dst` holding `len * 16` bytes.
pub(super) fn rows_to_columns(rows: &[&[u8]; ROWS], len: usize, dst: &mut [u8]) {
    assert!(rows.iter().all(|r| r.len() >= len) && dst.len() >= len * ROWS);
    let mut j = 0;
    #[cfg(target_arch = "x86_64")]
    while j + 16 <= len {
        let out = dst[j * ROWS..(j + 16) * ROWS].as_mut_ptr();
        // SAFETY: every row holds `len >= j + 16` bytes, and `out` 256.
        unsafe { transpose16(|i| rows[i][j..].as_ptr(), |c| out.add(c * ROWS)) };
        j += 16;
    }
    for jj in j..len {
        for (i, row) in rows.iter().enumerate() {
            dst[jj * ROWS + i] = row[jj];
        }
    }
}

/// The inverse of [`rows_to_columns`], from byte `at` of the rows:
/// `rows[i][at + j] = src[j * 16 + i]` for `i < rows.len()` (at most 16) and
/// `j < len`.
pub(super) fn columns_to_rows(src: &[u8], len: usize, rows: &mut [&mut [u8]], at: usize) {
    assert!(src.len() >= len * ROWS && rows.len() <= ROWS);
    let mut j = 0;
    #[cfg(target_arch = "x86_64")]
    while j + 16 <= len {
        let columns = src[j * ROWS..(j + 16) * ROWS].as_ptr();
        // The columns' bytes of rows past `rows` (a last band) go to `sink`.
        let mut sink = [0u8; 16];
        let out: [*mut u8; ROWS] = std::array::from_fn(|i| match rows.get_mut(i) {
            Some(row) => row[at + j..at + j + 16].as_mut_ptr(),
            None => sink.as_mut_ptr(),
        });
        // SAFETY: `columns` holds 256 bytes, each of `out` 16.
        unsafe { transpose16(|c| columns.add(c * ROWS), |i| out[i]) };
        j += 16;
    }
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
        for len in [0, 5, 16, 37, 64] {
            let data = noise(len * ROWS, len as u64 + 3);
            let rows: [&[u8]; ROWS] = std::array::from_fn(|i| &data[i * len..(i + 1) * len]);
            let mut columns = vec![0u8; len * ROWS];
            rows_to_columns(&rows, len, &mut columns);
            for j in 0..len {
                for i in 0..ROWS {
                    assert_eq!(columns[j * ROWS + i], data[i * len + j]);
                }
            }
            let mut back = vec![0u8; len * ROWS];
            let mut outs: Vec<&mut [u8]> = back.chunks_exact_mut(len.max(1)).take(ROWS).collect();
            if len > 0 {
                columns_to_rows(&columns, len, &mut outs, 0);
                assert_eq!(back, data);
            }
        }
    }
}
