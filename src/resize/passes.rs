//! The horizontal and vertical passes, and the banded two-pass resize built from them.
//!
//! Integer sums are associative, so the loop order and the grouping of rows
//! into bands are free: every arrangement gives Pillow's bytes.

use super::coefficients::Coefficients;
use super::transpose::{columns_to_rows, rows_to_columns, ROWS};
use super::{vertical_first, weighted_sum};
use crate::buffers::zeroed_bytes;
use crate::config::PillowCompat;
use crate::par::for_each_chunk;
use crate::simd::Execution;

/// Horizontal pass over rows `[row0, row0 + rows)` of `src` (`width` px of
/// `S` bytes, whose first `C` are the channels) into `out`, which holds `rows`
/// output rows of packed `C`-byte pixels.
///
/// A band's transpose takes whole `S`-byte pixels, so the columns of pixel `x`
/// are `columns[x * S * ROWS..]`, channel `c` at `+ c * ROWS`: the weighted sum
/// of an output pixel reads the `C * ROWS` bytes of its channels at a column
/// stride of `S * ROWS`, and never the pad bytes of `S > C` (RGB in 4-byte
/// pixels is resampled without a packing copy).
fn horizontal_into<const S: usize, const C: usize>(
    src: &[u8],
    width: usize,
    row0: usize,
    coeffs: &Coefficients,
    run: Execution,
    out: &mut [u8],
) {
    const { assert!(C >= 1 && C <= S) };
    let out_w = coeffs.bounds.len();
    let (in_row_len, out_row_len) = (width * S, out_w * C);
    let scratch = || (vec![0u8; in_row_len * ROWS], vec![0u8; out_row_len * ROWS]);
    for_each_chunk(
        out,
        out_row_len * ROWS,
        run.parallel,
        scratch,
        |(columns, out_columns), band, out_band| {
            let y0 = row0 + band * ROWS;
            let rows = out_band.len() / out_row_len;
            // Rows past the image end (last band) repeat its first row; their
            // outputs are not written.
            let inputs: [&[u8]; ROWS] = std::array::from_fn(|i| {
                let y = y0 + if i < rows { i } else { 0 };
                &src[y * in_row_len..(y + 1) * in_row_len]
            });
            rows_to_columns(&inputs, in_row_len, columns);
            for (xx, column) in out_columns.chunks_exact_mut(C * ROWS).enumerate() {
                let (start, k) = coeffs.taps(xx);
                weighted_sum(columns, S * ROWS, start, k, column, run.path);
            }
            let mut outputs: Vec<&mut [u8]> = out_band.chunks_exact_mut(out_row_len).collect();
            columns_to_rows(out_columns, out_row_len, &mut outputs);
        },
    );
}

/// Vertical pass into `out` (whole output rows of `row_len` bytes, the first
/// being output row `yy0`): every output row is a weighted sum of whole input
/// rows of `src`, whose row `i` is image row `i + row_offset`.
fn vertical_into(
    src: &[u8],
    row_len: usize,
    coeffs: &Coefficients,
    row_offset: usize,
    yy0: usize,
    run: Execution,
    out: &mut [u8],
) {
    for_each_chunk(
        out,
        row_len,
        run.parallel,
        || (),
        |(), yy, out_row| {
            let (start, k) = coeffs.taps(yy0 + yy);
            weighted_sum(src, row_len, start - row_offset, k, out_row, run.path);
        },
    );
}

/// Output rows per band of the two-pass resize: each band runs both passes on
/// its own, so the intermediate image is never whole (a few hundred KB to a few
/// MB per band instead of up to `width * height`).
const BAND_ROWS: usize = 64;

/// The vertical pass alone from `S`-byte pixels to packed `C`-byte ones: each
/// output row is summed at full stride into a scratch row, then packed (the
/// pass is byte-agnostic; a pad byte is resampled and dropped).
fn vertical_packed<const S: usize, const C: usize>(
    src: &[u8],
    width: usize,
    coeffs: &Coefficients,
    run: Execution,
    out: &mut [u8],
) {
    if S == C {
        vertical_into(src, width * S, coeffs, 0, 0, run, out);
        return;
    }
    for_each_chunk(
        out,
        width * C,
        run.parallel,
        || vec![0u8; width * S],
        |row: &mut Vec<u8>, yy, out_row| {
            let (start, k) = coeffs.taps(yy);
            weighted_sum(src, width * S, start, k, row, run.path);
            pack::<S, C>(row, out_row);
        },
    );
}

/// The first `C` bytes of every `S`-byte pixel of `src`, packed into `dst`.
fn pack<const S: usize, const C: usize>(src: &[u8], dst: &mut [u8]) {
    for (d, s) in dst.chunks_exact_mut(C).zip(src.chunks_exact(S)) {
        d.copy_from_slice(&s[..C]);
    }
}

/// Both passes, band by band of `BAND_ROWS` output rows (bands in parallel when
/// `run.parallel`; each band runs its passes on one thread). Horizontal first:
/// a band resamples horizontally the input rows its vertical taps read (rows
/// shared with the next band are resampled by both, with the same result).
/// Vertical first: a band resamples vertically its own rows at full width, then
/// horizontally. Pillow's integer passes give the same bytes however the rows
/// are grouped. The input has `S`-byte pixels (`S > C`: pad bytes after the
/// channels), the output packed `C`-byte ones; the vertical-first band keeps
/// the `S`-byte pixels (the vertical pass is byte-agnostic) until the
/// horizontal pass drops the pad.
fn two_pass<const S: usize, const C: usize>(
    src: &[u8],
    width: usize,
    ch: &Coefficients,
    cv: &Coefficients,
    vertical_first: bool,
    run: Execution,
) -> Vec<u8> {
    let (new_w, new_h) = (ch.bounds.len(), cv.bounds.len());
    let out_row_len = new_w * C;
    let mut out = zeroed_bytes(new_h * out_row_len);
    let serial = Execution {
        parallel: false,
        ..run
    };
    for_each_chunk(
        &mut out,
        out_row_len * BAND_ROWS,
        run.parallel,
        Vec::new,
        |tmp: &mut Vec<u8>, band, out_band| {
            let yy0 = band * BAND_ROWS;
            let rows = out_band.len() / out_row_len;
            if vertical_first {
                tmp.resize(rows * width * S, 0);
                vertical_into(src, width * S, cv, 0, yy0, serial, tmp);
                horizontal_into::<S, C>(tmp, width, 0, ch, serial, out_band);
            } else {
                let taps = cv.bounds[yy0..yy0 + rows].iter();
                let first = taps.clone().map(|&(start, _)| start).min().unwrap_or(0);
                let end = taps.map(|&(start, n)| start + n).max().unwrap_or(first);
                tmp.resize((end - first) * out_row_len, 0);
                horizontal_into::<S, C>(src, width, first, ch, serial, tmp);
                vertical_into(tmp, out_row_len, cv, first, yy0, serial, out_band);
            }
        },
    );
    out
}

/// The resize of `src` (`S`-byte pixels whose first `C` bytes are the
/// channels) into packed `C`-byte pixels; see [`super::resize_bicubic_strided`].
pub(super) fn resize_c<const S: usize, const C: usize>(
    src: &[u8],
    width: usize,
    height: usize,
    new_width: usize,
    new_height: usize,
    compat: PillowCompat,
    run: Execution,
) -> Vec<u8> {
    let need_h = new_width != width;
    let need_v = new_height != height;
    match (need_h, need_v) {
        (false, false) if S == C => src.to_vec(),
        (false, false) => {
            let mut out = zeroed_bytes(height * width * C);
            pack::<S, C>(src, &mut out);
            out
        }
        (true, false) => {
            let ch = Coefficients::new(width, new_width);
            let mut out = zeroed_bytes(height * new_width * C);
            horizontal_into::<S, C>(src, width, 0, &ch, run, &mut out);
            out
        }
        (false, true) => {
            let cv = Coefficients::new(height, new_height);
            let mut out = zeroed_bytes(new_height * width * C);
            vertical_packed::<S, C>(src, width, &cv, run, &mut out);
            out
        }
        (true, true) => two_pass::<S, C>(
            src,
            width,
            &Coefficients::new(width, new_width),
            &Coefficients::new(height, new_height),
            vertical_first(compat, width, height, new_width, new_height),
            run,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simd::SimdPath;
    use crate::test_util::noise;

    #[test]
    fn banded_passes_equal_whole_image_passes() {
        // Several bands of output rows, both pass orders, last band partial.
        for (c, w, h, nw, nh) in [
            (3, 301, 700, 150, 333),
            (1, 90, 1000, 80, 140),
            (4, 200, 150, 60, 149),
        ] {
            let src = noise(w * h * c, (w + h) as u64);
            let (ch, cv) = (Coefficients::new(w, nw), Coefficients::new(h, nh));
            let run = Execution {
                path: SimdPath::Scalar,
                parallel: false,
            };
            for vertical_first in [false, true] {
                let want = if vertical_first {
                    let mut tmp = vec![0u8; nh * w * c];
                    vertical_into(&src, w * c, &cv, 0, 0, run, &mut tmp);
                    let mut out = vec![0u8; nh * nw * c];
                    horizontal_resize_whole(c, &tmp, w, &ch, run, &mut out);
                    out
                } else {
                    let mut tmp = vec![0u8; h * nw * c];
                    horizontal_resize_whole(c, &src, w, &ch, run, &mut tmp);
                    let mut out = vec![0u8; nh * nw * c];
                    vertical_into(&tmp, nw * c, &cv, 0, 0, run, &mut out);
                    out
                };
                for parallel in [false, true] {
                    let run = Execution { parallel, ..run };
                    let got = match c {
                        1 => two_pass::<1, 1>(&src, w, &ch, &cv, vertical_first, run),
                        3 => two_pass::<3, 3>(&src, w, &ch, &cv, vertical_first, run),
                        _ => two_pass::<4, 4>(&src, w, &ch, &cv, vertical_first, run),
                    };
                    assert_eq!(
                        got, want,
                        "{c}x{w}x{h}->{nw}x{nh} vertical first {vertical_first}"
                    );
                }
            }
        }
    }

    fn horizontal_resize_whole(
        c: usize,
        src: &[u8],
        w: usize,
        ch: &Coefficients,
        run: Execution,
        out: &mut [u8],
    ) {
        match c {
            1 => horizontal_into::<1, 1>(src, w, 0, ch, run, out),
            3 => horizontal_into::<3, 3>(src, w, 0, ch, run, out),
            _ => horizontal_into::<4, 4>(src, w, 0, ch, run, out),
        }
    }
}
