//! The horizontal and vertical passes, and the banded two-pass resize built from them.
//!
//! Integer sums are associative, so the loop order and the grouping of rows
//! into bands are free: every arrangement gives Pillow's bytes.

#[cfg(target_arch = "x86_64")]
use super::ahead::Ahead;
use super::coefficients::Coefficients;
use super::pairs::{self, PairTaps, PAIR_BYTES};
#[cfg(target_arch = "x86_64")]
use super::pairs::{columns_to_pairs, pair_sums};
use super::quads::{self, QuadTaps, QUAD_BYTES};
#[cfg(target_arch = "x86_64")]
use super::quads::{columns_to_planes, quad_sums, rows_to_quads};
use super::transpose::{columns_to_rows, rows_to_columns, ROWS};
use super::{vertical_first, weighted_sums, Pixels, ResizeFailed};

use std::sync::{Mutex, PoisonError};

use rayon::prelude::*;

use crate::buffers::{poison, AllocFailed};
use crate::composite::{muldiv255, premultiply, unpremultiply, Compositor};
use crate::config::PillowCompat;
use crate::par::for_each_chunk;
use crate::simd::{Execution, SimdPath};

/// Horizontal pass over the first `rows` rows of `src` (`width` px of `S`
/// bytes, whose first `C` are the channels) into `out`, which holds `rows`
/// output rows of packed `C`-byte pixels. With `premultiply`, the colour bytes
/// of each transposed band are premultiplied by its alpha (the last channel,
/// `S == C`) before they are summed, as Pillow resizes `RGBa` / `La`: the
/// input is never copied for it. Runs on the calling thread (the resize's
/// bands are its parallel unit), in `columns`, a tile of `taps` at a time.
///
/// # Errors
/// [`AllocFailed`] when `columns` cannot grow to the band's size.
///
/// A band's transpose takes whole `S`-byte pixels, so the columns of pixel `x`
/// are `columns[x * S * ROWS..]`, channel `c` at `+ c * ROWS`: the weighted sum
/// of an output pixel reads the `C * ROWS` bytes of its channels at a column
/// stride of `S * ROWS`, and never the pad bytes of `S > C` (RGB in 4-byte
/// pixels is resampled without a packing copy). Where `taps` have quads
/// (AVX-512 VNNI + VBMI), the band is laid out in quads of its `C` channels
/// instead, and summed there (see [`quads`]); where they have pairs (AVX2),
/// the byte columns are laid out once more in pairs of 16-bit pixels, and
/// summed there (see [`pairs`]). The output columns are the same, written
/// into rows or, for the vertical pass on quads, planes of four rows (`out`).
/// With `fetch_ahead` (`src` not in the caches), the sums of each tile on
/// quads fetch the input of the next one ([`Ahead`]).
#[allow(clippy::too_many_arguments)]
fn horizontal_into<const S: usize, const C: usize>(
    src: &[u8],
    width: usize,
    taps: &HorizontalTaps<'_>,
    premultiply: bool,
    fetch_ahead: bool,
    path: SimdPath,
    columns: &mut Columns,
    mut out: HorizontalOut<'_>,
) -> Result<(), AllocFailed> {
    const { assert!(C >= 1 && C <= S) };
    let HorizontalTaps {
        coeffs,
        tiles,
        layout,
    } = taps;
    let out_w = coeffs.bounds.len();
    let (in_row_len, out_row_len) = (width * S, out_w * C);
    let (most, most_pairs) = match layout {
        Layout::Quads(_, tile_quads) => (
            tile_quads.iter().map(|q| q.len() * C * QUAD_BYTES).max(),
            None,
        ),
        Layout::Pairs(_, tile_pairs) => (
            tile_pairs.iter().map(|p| 2 * p.len() * S * ROWS).max(),
            tile_pairs.iter().map(|p| p.len() * C * PAIR_BYTES).max(),
        ),
        Layout::Columns => (tiles.iter().map(|t| t.inputs.len() * S * ROWS).max(), None),
    };
    grow(&mut columns.input, most.unwrap_or(0))?;
    grow(&mut columns.pairs, most_pairs.unwrap_or(0))?;
    let most = tiles.iter().map(|t| t.outputs.len()).max().unwrap_or(0);
    grow(&mut columns.output, most * C * ROWS)?;
    let avx2 = matches!(path, SimdPath::Avx2 | SimdPath::Avx512);
    let all_rows = match &out {
        HorizontalOut::Rows(rows) => rows.len() / out_row_len,
        HorizontalOut::Planes { rows, .. } => *rows,
    };
    for band in 0..all_rows.div_ceil(ROWS) {
        let y0 = band * ROWS;
        let rows = (all_rows - y0).min(ROWS);
        // Rows past the image end (last band) repeat its first row; their
        // outputs are not written (their bytes go to the planes of rows).
        let inputs: [&[u8]; ROWS] = std::array::from_fn(|i| {
            let y = y0 + if i < rows { i } else { 0 };
            &src[y * in_row_len..(y + 1) * in_row_len]
        });
        // The band's output rows, or its planes and their length.
        let (mut outputs, mut band_planes): (Vec<&mut [u8]>, _) = match &mut out {
            HorizontalOut::Rows(out) => {
                let rows = &mut out[y0 * out_row_len..(y0 + rows) * out_row_len];
                (rows.chunks_exact_mut(out_row_len).collect(), None)
            }
            HorizontalOut::Planes {
                planes, plane_len, ..
            } => (
                Vec::new(),
                Some((&mut planes[4 * band * *plane_len..], *plane_len)),
            ),
        };
        // What the sums of tile `i` fetch: the input of the tile after it, or
        // of the next band's first.
        #[cfg(target_arch = "x86_64")]
        let ahead = |i: usize| {
            if !fetch_ahead {
                return Ahead::none();
            }
            let (next, y) = if i + 1 < tiles.len() {
                (i + 1, y0)
            } else {
                (0, y0 + ROWS)
            };
            let rows = all_rows.saturating_sub(y).min(ROWS);
            if rows == 0 {
                return Ahead::none();
            }
            let pixels = taps.pixels(next, width);
            let next_rows = std::array::from_fn(|r| {
                let at = (y + r.min(rows - 1)) * in_row_len;
                &src[at + pixels.start * S..at + pixels.end * S]
            });
            Ahead::new(next_rows, tiles[i].outputs.len())
        };
        for (
            i,
            Tile {
                inputs: x,
                outputs: xx,
            },
        ) in tiles.iter().enumerate()
        {
            let out_len = xx.len() * C;
            let output = &mut columns.output[..out_len * ROWS];
            match layout {
                #[cfg(target_arch = "x86_64")]
                Layout::Quads(quad_taps, tile_quads) => {
                    let q = &tile_quads[i];
                    let pixels = taps.pixels(i, width);
                    let tile_inputs = inputs.map(|row| &row[pixels.start * S..pixels.end * S]);
                    let input = &mut columns.input[..q.len() * C * QUAD_BYTES];
                    // SAFETY: `quads` are made only where `quads::available`.
                    unsafe { rows_to_quads::<S, C>(&tile_inputs, q.len(), input) };
                    if premultiply {
                        premultiply_channels::<C>(input, QUAD_BYTES);
                    }
                    let quads = (q.start, C * QUAD_BYTES);
                    // SAFETY: as just above.
                    unsafe {
                        let ahead = &mut ahead(i);
                        quad_sums::<C>(
                            quad_taps,
                            xx.clone(),
                            input,
                            quads,
                            C * ROWS,
                            output,
                            ahead,
                        );
                    };
                }
                #[cfg(target_arch = "x86_64")]
                Layout::Pairs(pair_taps, tile_pairs) => {
                    let p = &tile_pairs[i];
                    let pixels = taps.pixels(i, width);
                    let input = byte_columns::<S>(
                        &inputs,
                        pixels.clone(),
                        premultiply,
                        avx2,
                        &mut columns.input,
                    );
                    let pairs = &mut columns.pairs[..p.len() * C * PAIR_BYTES];
                    // SAFETY: pairs are made only where `pairs::available`.
                    unsafe {
                        columns_to_pairs::<S, C>(input, pixels.len(), p.len(), pairs);
                        pair_sums::<C>(pair_taps, xx.clone(), pairs, p.start, output);
                    }
                }
                _ => {
                    let input = byte_columns::<S>(
                        &inputs,
                        x.clone(),
                        premultiply,
                        avx2,
                        &mut columns.input,
                    );
                    let (stride, lanes) = (S * ROWS, C * ROWS);
                    weighted_sums(
                        input,
                        stride,
                        coeffs,
                        xx.clone(),
                        x.start,
                        lanes,
                        output,
                        path,
                    );
                }
            }
            match &mut band_planes {
                None => columns_to_rows(output, out_len, &mut outputs, xx.start * C, avx2),
                #[cfg(target_arch = "x86_64")]
                Some((planes, plane_len)) => {
                    let shape = (*plane_len, rows.div_ceil(4));
                    // SAFETY: planes are asked for only where `quads::available`.
                    unsafe { columns_to_planes(output, planes, shape, xx.start * C) };
                }
                #[cfg(not(target_arch = "x86_64"))]
                Some(_) => unreachable!("planes are asked for on x86-64 only"),
            }
        }
    }
    Ok(())
}

/// The byte columns of `pixels` of a band's `rows` ([`rows_to_columns`] of
/// their `S`-byte pixels) into the start of `input`, premultiplied by their
/// alpha where `premultiply`: the bytes written.
fn byte_columns<'i, const S: usize>(
    rows: &[&[u8]; ROWS],
    pixels: std::ops::Range<usize>,
    premultiply: bool,
    avx2: bool,
    input: &'i mut [u8],
) -> &'i mut [u8] {
    let len = pixels.len() * S;
    let tile = rows.map(|row| &row[pixels.start * S..pixels.end * S]);
    let input = &mut input[..len * ROWS];
    rows_to_columns(&tile, len, input, avx2);
    if premultiply {
        premultiply_channels::<S>(input, ROWS);
    }
    input
}

/// Where [`horizontal_into`] writes its rows: packed rows of `C`-byte pixels,
/// or (for the vertical pass on quads) planes of four rows, `rows` rows into
/// planes of `plane_len` bytes as [`quads::columns_to_planes`] lays them out,
/// the last plane's rows past `rows` holding the band's repeated first row.
enum HorizontalOut<'o> {
    Rows(&'o mut [u8]),
    Planes {
        planes: &'o mut [u8],
        plane_len: usize,
        rows: usize,
    },
}

/// Most input row bytes a tile of the horizontal pass transposes at once
/// (`ROWS` times this in [`Columns`]): a row of up to 32 KiB (8,192 RGBA
/// pixels) is one tile, and the working memory of a wider row stays bounded
/// by its widest output pixel's taps, however many input pixels it has (a
/// 25,000,000 x 1 image held 16 times its 75 MB row).
const TILE_BYTES: usize = 32 << 10;

/// The taps of a horizontal pass, its [`tiles`] and the [`Layout`] it sums
/// them on: made once per resize.
struct HorizontalTaps<'a> {
    coeffs: &'a Coefficients,
    tiles: Vec<Tile>,
    layout: Layout,
}

/// What a horizontal pass lays each tile of a band out in and sums: quads
/// ([`quads::available`]: their taps, and the quads of each tile), pairs
/// ([`pairs::available`]: their taps, and the pairs of each tile), or the
/// byte columns alone.
enum Layout {
    Quads(QuadTaps, Vec<std::ops::Range<usize>>),
    Pairs(PairTaps, Vec<std::ops::Range<usize>>),
    Columns,
}

impl<'a> HorizontalTaps<'a> {
    /// The taps of `coeffs` for input pixels of `pixel_bytes` bytes, summed on
    /// the kernels of `path`.
    fn new(coeffs: &'a Coefficients, pixel_bytes: usize, path: SimdPath) -> Self {
        let tiles = tiles(coeffs, TILE_BYTES / pixel_bytes);
        let outputs = || tiles.iter().map(|t| t.outputs.clone());
        let quads = || QuadTaps::new(coeffs, 0);
        let layout = if let Some(taps) = quads::available(path).then(quads).flatten() {
            let tile_quads = outputs().map(|o| taps.quads(o)).collect();
            Layout::Quads(taps, tile_quads)
        } else if let Some(taps) = pairs::available(path)
            .then(|| PairTaps::new(coeffs))
            .flatten()
        {
            let tile_pairs = outputs().map(|o| taps.pairs(o)).collect();
            Layout::Pairs(taps, tile_pairs)
        } else {
            Layout::Columns
        };
        Self {
            coeffs,
            tiles,
            layout,
        }
    }

    /// The input pixels tile `i` lays out: those of its quads or pairs (up to
    /// `width`), or of its taps.
    fn pixels(&self, i: usize, width: usize) -> std::ops::Range<usize> {
        match &self.layout {
            Layout::Quads(_, quads) => 4 * quads[i].start..(4 * quads[i].end).min(width),
            Layout::Pairs(_, pairs) => 2 * pairs[i].start..(2 * pairs[i].end).min(width),
            Layout::Columns => self.tiles[i].inputs.clone(),
        }
    }
}

/// A run of output pixels of the horizontal pass and the input pixels their
/// taps read.
struct Tile {
    inputs: std::ops::Range<usize>,
    outputs: std::ops::Range<usize>,
}

/// The output pixels of `coeffs` in runs whose taps span at most `most` input
/// pixels, or one output pixel where its own taps span more. Pillow's taps
/// start and end at non-decreasing inputs, so a run's inputs are from its
/// first output's start to its last output's end. Made once per resize.
fn tiles(coeffs: &Coefficients, most: usize) -> Vec<Tile> {
    let end = |xx: usize| {
        let (start, n) = coeffs.bounds[xx];
        start + n
    };
    let mut tiles = Vec::new();
    let mut xx0 = 0;
    while xx0 < coeffs.bounds.len() {
        let first = coeffs.bounds[xx0].0;
        let mut xx1 = xx0 + 1;
        while xx1 < coeffs.bounds.len() && end(xx1) - first <= most {
            xx1 += 1;
        }
        tiles.push(Tile {
            inputs: first..end(xx1 - 1),
            outputs: xx0..xx1,
        });
        xx0 = xx1;
    }
    tiles
}

/// The working memory of [`horizontal_into`]: `ROWS` transposed input rows,
/// their pairs (AVX2) and their resampled columns, grown (fallibly) as a band
/// needs.
#[derive(Debug, Default)]
struct Columns {
    input: Vec<u8>,
    pairs: Vec<u8>,
    output: Vec<u8>,
}

/// [`premultiply`] of a transposed band, in blocks of `S` channels of `unit`
/// bytes (a pixel's byte columns, `ROWS` bytes each, or a quad's channels,
/// `QUAD_BYTES` each), the alpha last: each colour byte by the alpha byte at
/// its place in the alpha channel.
fn premultiply_channels<const S: usize>(columns: &mut [u8], unit: usize) {
    for pixel in columns.chunks_exact_mut(S * unit) {
        let (colour, alpha) = pixel.split_at_mut((S - 1) * unit);
        for channel in colour.chunks_exact_mut(unit) {
            for (c, &a) in channel.iter_mut().zip(alpha.iter()) {
                *c = muldiv255(*c, a);
            }
        }
    }
}

/// Vertical pass into `out` (whole output rows of `row_len` bytes, the first
/// being output row `yy0`): every output row is a weighted sum of whole input
/// rows of `src`, whose row `i` is image row `i + row_offset`. Runs on the
/// calling thread.
fn vertical_into(
    src: &[u8],
    row_len: usize,
    coeffs: &Coefficients,
    row_offset: usize,
    yy0: usize,
    path: SimdPath,
    out: &mut [u8],
) {
    let outputs = yy0..yy0 + out.len() / row_len;
    weighted_sums(
        src, row_len, coeffs, outputs, row_offset, row_len, out, path,
    );
}

/// The smallest image whose horizontal pass on quads fetches each tile's input
/// ahead ([`Ahead`]). On the host it was measured on (a 2-core share of a
/// Xeon whose last-level cache serves about 100 MB at 29 GB/s, memory at 16
/// GB/s), it gains where the rows come from memory (8000x8000 -> 1793x1793
/// 0.89-0.92x the time, 6000x4000 -> 2196x1464 0.87-1.0x) and costs 1-6 %
/// where they come from the cache (5000x3750 and smaller).
const FETCH_AHEAD_BYTES: usize = 64 << 20;

/// Most output rows per band of the resize: each band runs its passes on its
/// own, so the intermediate image is never whole (a few hundred KB to a few MB
/// per band instead of up to `width * height`).
const BAND_ROWS: usize = 64;

/// Most bytes of working memory the bands in flight hold together: a band of
/// a pool of `n` threads is made shorter (down to one row) to hold at most
/// `1 / n` of it, so the threads never add more than this.
const BANDS_BYTES: usize = 8 << 20;

/// Where a resize composites pixels whose last channel is alpha onto a
/// background: not at all, each band's input rows before its passes (the
/// passes then read the colour channels), or each finished band of the result.
#[derive(Clone, Copy)]
pub(super) enum Fill<'a> {
    /// No compositing.
    None,
    /// Before the resize (Kimi-K3's `before_resize`).
    Before(&'a Compositor),
    /// After the resize (`after_resize`).
    After(&'a Compositor),
}

/// The working memory of the bands of [`banded`] that one thread runs, kept
/// from band to band: its window onto a row source (the rows `window_rows`,
/// read ahead), a band's copied input rows, the intermediate rows, the
/// transposed columns, the resized rows before they are composited.
#[derive(Default)]
struct Band {
    window: Vec<u8>,
    window_rows: std::ops::Range<usize>,
    copy: Vec<u8>,
    tmp: Vec<u8>,
    columns: Columns,
    resized: Vec<u8>,
}

/// Where the bands of [`banded`] read their input rows, and what a band does
/// to them before its passes.
#[derive(Clone, Copy)]
struct Inputs<'a> {
    src: Pixels<'a>,
    height: usize,
    /// Bytes of a stored row (with alpha when composited before).
    src_row_len: usize,
    /// Bytes of a row as the passes read it.
    in_row_len: usize,
    /// Rows a window onto a row source reads ahead.
    window_len: usize,
    before: Option<&'a Compositor>,
    /// The rows are premultiplied in a copy (for a vertical pass).
    premultiply_copy: bool,
    /// Bytes of a pixel.
    stride: usize,
}

impl<'a> Inputs<'a> {
    /// The input rows `a..b` as the passes read them: stored (in place, or in
    /// the thread's `window` onto the source, read ahead so that a read, which
    /// may wait for a lock such as Python's GIL, serves several bands), then
    /// composited or premultiplied in `copy` where the band copies them.
    fn rows<'b>(
        &self,
        window: &'b mut Vec<u8>,
        window_rows: &mut std::ops::Range<usize>,
        copy: &'b mut Vec<u8>,
        a: usize,
        b: usize,
    ) -> Result<&'b [u8], ResizeFailed>
    where
        'a: 'b,
    {
        let stored: &[u8] = match self.src {
            Pixels::Slice(src) => &src[a * self.src_row_len..b * self.src_row_len],
            Pixels::Rows(source) => {
                if !(window_rows.start <= a && b <= window_rows.end) {
                    let ahead = (a + self.window_len).min(self.height).max(b);
                    // The rows the window held from `a` on move to the front
                    // and are not read again: bands that read a source in
                    // order (the decoder's) read each row once.
                    let len = self.src_row_len;
                    let kept = if window_rows.start <= a && a < window_rows.end {
                        let (from, to) = (a - window_rows.start, window_rows.len());
                        window.copy_within(from * len..to * len, 0);
                        window_rows.end - a
                    } else {
                        0
                    };
                    *window_rows = 0..0;
                    grow_keeping(window, (ahead - a) * len, kept * len)?;
                    source
                        .read_rows(a + kept, ahead, &mut window[kept * len..])
                        .map_err(ResizeFailed::Rows)?;
                    *window_rows = a..ahead;
                }
                let offset = window_rows.start;
                &window[(a - offset) * self.src_row_len..(b - offset) * self.src_row_len]
            }
        };
        Ok(match self.before {
            Some(compositor) => {
                grow(copy, (b - a) * self.in_row_len)?;
                let colour = copy.chunks_exact_mut(self.in_row_len);
                for (y, (row, out)) in stored
                    .chunks_exact(self.src_row_len)
                    .zip(colour)
                    .enumerate()
                {
                    compositor.row(a + y, row, out);
                }
                copy
            }
            None if self.premultiply_copy => {
                grow(copy, (b - a) * self.in_row_len)?;
                copy.copy_from_slice(stored);
                premultiply(copy, self.stride);
                copy
            }
            None => stored,
        })
    }
}

/// `v` resized to `len` bytes of unspecified contents (an earlier band's
/// bytes, new ones zero; all [`POISON_BYTE`](crate::buffers::POISON_BYTE)
/// while the poison mode is on), or [`AllocFailed`]: its user writes every
/// byte it reads.
fn grow(v: &mut Vec<u8>, len: usize) -> Result<(), AllocFailed> {
    grow_keeping(v, len, 0)
}

/// [`grow`], keeping the first `keep` bytes (`keep <= v.len()`, `len`):
/// only the bytes after them start as garbage in the poison mode.
fn grow_keeping(v: &mut Vec<u8>, len: usize, keep: usize) -> Result<(), AllocFailed> {
    if len > v.len() {
        v.try_reserve_exact(len - v.len())
            .map_err(|_| AllocFailed { bytes: len })?;
    }
    v.resize(len, 0);
    poison(&mut v[keep..]);
    Ok(())
}

/// The first `C` bytes of every `S`-byte pixel of `src`, packed into `dst`.
fn pack<const S: usize, const C: usize>(src: &[u8], dst: &mut [u8]) {
    for (d, s) in dst.chunks_exact_mut(C).zip(src.chunks_exact(S)) {
        d.copy_from_slice(&s[..C]);
    }
}

/// How [`banded`] resizes, as `fast_image_resize`'s `ResizeOptions` tells its
/// `Resizer::resize`: the passes, their order, the alpha handling, the
/// compositing and the execution.
#[derive(Clone, Copy)]
struct ResizeOptions<'a> {
    /// The horizontal pass's coefficients; `None` keeps the width.
    horizontal: Option<&'a Coefficients>,
    /// The vertical pass's coefficients; `None` keeps the height.
    vertical: Option<&'a Coefficients>,
    /// The vertical pass runs first (Pillow's order for the size, [`vertical_first`]).
    vertical_first: bool,
    /// The pixels (alpha last, `S == C`) are premultiplied where a pass first
    /// reads them and unpremultiplied in each finished band, as Pillow's
    /// `Image.resize` converts `RGBA -> RGBa -> RGBA` around its resize.
    premultiplied: bool,
    /// Where the pixels are composited onto the background, if at all.
    fill: Fill<'a>,
    /// The kernel path, and whether bands run in parallel.
    run: Execution,
}

/// The resize of `src` (`S`-byte pixels whose first `C` are the channels,
/// `width x height` px, in one buffer or read band by band from a
/// [`RowSource`](crate::image::RowSource)) into `out`, packed `C`-byte pixels,
/// as `options` asks: the horizontal pass with its coefficients `ch`, the
/// vertical with `cv` (an axis without coefficients keeps its size), band by
/// band of output rows (bands in parallel when `run.parallel`, unless the
/// source makes its rows in order, [`RowSource::in_order`](crate::image::RowSource::in_order):
/// then one after another, each releasing the rows before its own, or, from a
/// source with several readers, [`RowSource::lanes`](crate::image::RowSource::lanes),
/// a run of bands after another from each reader, the runs at once (their
/// lengths from [`lane_starts`]); each band runs its passes on one thread),
/// premultiplied around the passes when
/// asked. With `Fill::After`, each finished band (alpha last) is composited onto the
/// background into `out`, which then holds `C - 1` bytes a pixel (Kimi-K3's
/// `fill_transparent_bg_with` after the resize, row by row as the reference
/// computes it whole).
///
/// Horizontal first: a band resamples horizontally the input rows its
/// vertical taps read (rows shared with the next band are resampled by both,
/// with the same result). Vertical first: a band resamples vertically its own
/// rows at full width (the vertical pass is byte-agnostic, so `S`-byte pixels
/// are kept), then horizontally. Pillow's integer passes give the same bytes
/// however the rows are grouped. Rows from a row source are read into the
/// thread's window (a quarter of its share), ahead of the bands that read them; a band copies the input
/// rows it reads to composite them (`Fill::Before`), or to premultiply them
/// for a vertical pass that reads them first; it is made shorter for its
/// working memory to fit its share of [`BANDS_BYTES`], and, from a source,
/// for its input rows to fit the thread's share (a band has at least one
/// output row, whose taps alone may be more under an extreme downscale).
///
/// # Errors
/// [`ResizeFailed`] when a band's working memory cannot be had or its rows
/// cannot be read (then `out` is partly written).
fn banded<const S: usize, const C: usize>(
    src: Pixels<'_>,
    width: usize,
    height: usize,
    options: &ResizeOptions<'_>,
    out: &mut [u8],
) -> Result<(), ResizeFailed> {
    let &ResizeOptions {
        horizontal: ch,
        vertical: cv,
        vertical_first,
        premultiplied,
        fill,
        run,
    } = options;
    let (before, composite) = match fill {
        Fill::Before(c) => (Some(c), None),
        Fill::After(c) => (None, Some(c)),
        Fill::None => (None, None),
    };
    assert!(before.is_none() || (S == C && !premultiplied));
    let new_w = ch.map_or(width, |c| c.bounds.len());
    let (in_row_len, out_row_len) = (width * S, new_w * C);
    // Bytes of a row of the stored input: composited before, a pixel has alpha too.
    let src_row_len = width * (S + usize::from(before.is_some()));
    // Bytes of a row of `out`: composited rows drop the alpha.
    let final_row_len = if composite.is_some() {
        new_w * (C - 1)
    } else {
        out_row_len
    };
    // The vertical pass reads the input rows itself (not a horizontal result).
    let vertical_reads_input = cv.is_some() && (ch.is_none() || vertical_first);
    // A band copies its input rows to composite them, or to premultiply them
    // for a vertical pass (a horizontal pass premultiplies its transposed
    // columns).
    let premultiply_copy = premultiplied && vertical_reads_input;
    let copies = before.is_some() || premultiply_copy;
    // A horizontal pass on a large image read in place fetches ahead.
    let fetch_ahead = !copies && matches!(src, Pixels::Slice(s) if s.len() >= FETCH_AHEAD_BYTES);
    // A thread's share of the budget; with a source, a quarter of it is the
    // thread's window of rows read ahead, a quarter (or two, converted) the
    // source's copies of them while it reads, a quarter the band's.
    // A source that makes its rows in order is read band after band.
    let parallel = run.parallel && !src.in_order();
    // An in-order source with several readers ([`RowSource::lanes`]): runs
    // of bands, one a reader, at once.
    let lanes = match src {
        Pixels::Rows(source) if run.parallel && source.lanes().0 > 1 => Some(source),
        _ => None,
    };
    let threads = match lanes {
        Some(source) => source.lanes().0.min(rayon::current_num_threads()),
        None if parallel => rayon::current_num_threads(),
        None => 1,
    };
    let share = BANDS_BYTES / threads;
    let (band_share, window_len) = match src {
        Pixels::Rows(_) => (share / 4, (share / 4 / src_row_len).max(1)),
        Pixels::Slice(_) => (share, 0),
    };
    // Bytes a band holds per output row: its copied input rows, the
    // intermediate rows, the result's rows.
    let in_rows_per_out = cv.map_or(1, |cv| height / cv.bounds.len() + 1);
    let copied = if copies {
        in_rows_per_out * in_row_len
    } else {
        0
    };
    let per_row = copied + in_rows_per_out * out_row_len + in_row_len + out_row_len;
    let band_rows = (band_share / per_row).clamp(1, BAND_ROWS);
    // A band reads its input rows from a source into the thread's window: no
    // more of them than the thread's share holds (at least one output row's).
    let band_rows = match src {
        Pixels::Rows(_) => band_rows.min((share / (in_rows_per_out * src_row_len)).max(1)),
        Pixels::Slice(_) => band_rows,
    };
    // Input rows a horizontal pass reads at once: as many as a quarter of the
    // share holds, in whole transposed bands of `ROWS` (at least one).
    let chunk_rows = ((share / 4 / src_row_len) / ROWS * ROWS).max(ROWS);
    let lanes = lanes.map(|source| {
        let bands = out.len().div_ceil(final_row_len * band_rows);
        (source, lane_starts(threads, source.lanes().1, bands))
    });
    let h_taps = ch.map(|ch| HorizontalTaps::new(ch, S, run.path));
    // The vertical pass on quads of rows (see `quads::columns_to_planes`),
    // after a horizontal pass: its taps on quads of each phase, as a band's
    // first input row falls (`first % 4`).
    let v_quads: Vec<QuadTaps> = match cv {
        Some(cv) if ch.is_some() && !vertical_first && quads::available(run.path) => {
            (0..4).map_while(|phase| QuadTaps::new(cv, phase)).collect()
        }
        _ => Vec::new(),
    };
    let v_quads = (v_quads.len() == 4).then_some(v_quads);
    let inputs = Inputs {
        src,
        height,
        src_row_len,
        in_row_len,
        window_len,
        before,
        premultiply_copy,
        stride: S,
    };
    let path = run.path;
    let failed: Mutex<Option<ResizeFailed>> = Mutex::new(None);
    // Band `band` of the output, `final_band`, from the rows of `inputs`.
    let run_band = |Band {
                        window,
                        window_rows,
                        copy,
                        tmp,
                        columns,
                        resized,
                    }: &mut Band,
                    inputs: &Inputs<'_>,
                    band: usize,
                    final_band: &mut [u8]| {
        let yy0 = band * band_rows;
        let rows = final_band.len() / final_row_len;
        // The input rows this band reads: its vertical taps, or its own rows.
        let (first, end) = match cv {
            Some(cv) => {
                let taps = cv.bounds[yy0..yy0 + rows].iter();
                let first = taps.clone().map(|&(start, _)| start).min().unwrap_or(0);
                let end = taps.map(|&(start, n)| start + n).max().unwrap_or(first);
                (first, end)
            }
            None => (yy0, yy0 + rows),
        };
        if !parallel {
            // The bands after this one read from `first` on.
            inputs.src.release(first);
        }
        // The band's passes into `out_band` (its resized rows, `C` bytes a pixel).
        let mut passes = |out_band: &mut [u8]| -> Result<(), ResizeFailed> {
            let premultiply_h = premultiplied && !premultiply_copy;
            // A horizontal pass on the input rows `first..end` into `out`
            // (their resized rows, or with `plane_len` their planes of four
            // rows), `chunk_rows` input rows at a time: a band of wide rows
            // whose vertical taps span many of them never holds them all.
            let mut horizontal_rows = |taps, out: &mut [u8], plane_len: Option<usize>| {
                let mut a = first;
                while a < end {
                    let b = (a + chunk_rows).min(end);
                    let input = inputs.rows(window, window_rows, copy, a, b)?;
                    let (from, to) = (a - first, b - first);
                    let out = match plane_len {
                        None => HorizontalOut::Rows(&mut out[from * out_row_len..to * out_row_len]),
                        // `from` is a multiple of `chunk_rows`, so of 4
                        Some(plane_len) => HorizontalOut::Planes {
                            planes: &mut out[from / 4 * plane_len..to.div_ceil(4) * plane_len],
                            plane_len,
                            rows: b - a,
                        },
                    };
                    horizontal_into::<S, C>(
                        input,
                        width,
                        taps,
                        premultiply_h,
                        fetch_ahead,
                        path,
                        columns,
                        out,
                    )?;
                    a = b;
                }
                Ok::<(), ResizeFailed>(())
            };
            match (&h_taps, cv, &v_quads) {
                (Some(taps), Some(cv), _) if vertical_first => {
                    let input = inputs.rows(window, window_rows, copy, first, end)?;
                    grow(tmp, rows * in_row_len)?;
                    vertical_into(input, in_row_len, cv, first, yy0, path, tmp);
                    let out = HorizontalOut::Rows(out_band);
                    horizontal_into::<S, C>(tmp, width, taps, false, false, path, columns, out)?;
                }
                #[cfg(target_arch = "x86_64")]
                (Some(taps), Some(_), Some(v_quads)) => {
                    // The horizontal pass's rows as planes of four, summed there.
                    let plane_len = 4 * out_row_len;
                    grow(tmp, (end - first).div_ceil(4) * plane_len)?;
                    horizontal_rows(taps, tmp, Some(plane_len))?;
                    let phase = first % 4;
                    let (planes, outputs) = (&v_quads[phase], yy0..yy0 + rows);
                    let quads = ((first - phase) / 4, plane_len);
                    // SAFETY: `v_quads` are made only where `quads::available`.
                    unsafe {
                        let none = &mut Ahead::none();
                        quad_sums::<4>(planes, outputs, tmp, quads, out_row_len, out_band, none);
                    };
                }
                (Some(taps), Some(cv), _) => {
                    grow(tmp, (end - first) * out_row_len)?;
                    horizontal_rows(taps, tmp, None)?;
                    vertical_into(tmp, out_row_len, cv, first, yy0, path, out_band);
                }
                (Some(taps), None, _) => horizontal_rows(taps, out_band, None)?,
                (None, Some(cv), _) if S == C => {
                    let input = inputs.rows(window, window_rows, copy, first, end)?;
                    vertical_into(input, in_row_len, cv, first, yy0, path, out_band);
                }
                (None, Some(cv), _) => {
                    let input = inputs.rows(window, window_rows, copy, first, end)?;
                    grow(tmp, rows * in_row_len)?;
                    vertical_into(input, in_row_len, cv, first, yy0, path, tmp);
                    pack::<S, C>(tmp, out_band);
                }
                (None, None, _) => pack::<S, C>(
                    inputs.rows(window, window_rows, copy, first, end)?,
                    out_band,
                ),
            }
            if premultiplied {
                unpremultiply(out_band, C);
            }
            Ok(())
        };
        let mut step = || -> Result<(), ResizeFailed> {
            let Some(compositor) = composite else {
                return passes(final_band);
            };
            grow(resized, rows * out_row_len)?;
            passes(resized)?;
            let rows = resized.chunks_exact(out_row_len);
            for (r, (row, out_row)) in rows
                .zip(final_band.chunks_exact_mut(final_row_len))
                .enumerate()
            {
                compositor.row(yy0 + r, row, out_row);
            }
            Ok(())
        };
        if let Err(e) = step() {
            *failed.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
        }
    };
    let band_len = final_row_len * band_rows;
    match lanes {
        Some((source, starts)) => {
            // Each lane's run of bands in order, from its own reader, the
            // lanes at once.
            let mut rest = out;
            let mut runs = Vec::with_capacity(starts.len());
            for (i, pair) in starts.windows(2).enumerate() {
                let (run, after) =
                    rest.split_at_mut(((pair[1] - pair[0]) * band_len).min(rest.len()));
                runs.push((i, pair[0], run));
                rest = after;
            }
            runs.into_par_iter().for_each(|(i, first_band, run)| {
                let inputs = Inputs {
                    src: Pixels::Rows(source.lane(i).unwrap_or(source)),
                    ..inputs
                };
                for_each_chunk(
                    run,
                    band_len,
                    false,
                    Band::default,
                    |state, band, final_band| {
                        run_band(state, &inputs, first_band + band, final_band);
                    },
                );
            });
        }
        None => for_each_chunk(
            out,
            band_len,
            parallel,
            Band::default,
            |state, band, final_band| {
                run_band(state, &inputs, band, final_band);
            },
        ),
    }
    match failed.into_inner().unwrap_or_else(PoisonError::into_inner) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The first band of each of `lanes` runs of `bands` bands, and `bands`
/// after the last: runs that take about as long, where a run's work is its
/// bands plus `cost` a band before its first (the rows its reader skips to
/// start there, [`RowSource::lanes`](crate::image::RowSource::lanes)). With
/// `t` each run's work as a fraction of all the bands, the run starting at
/// fraction `s_k` has `t - cost * s_k`, so `s_{k+1} = t + (1 - cost) s_k` and
/// `t = cost / (1 - (1 - cost)^lanes)` (`1 / lanes` at no cost). Empty runs
/// are left out.
fn lane_starts(lanes: usize, cost: f64, bands: usize) -> Vec<usize> {
    let lanes = lanes.clamp(1, bands.max(1));
    let keep = 1.0 - cost;
    let t = if cost > 0.0 {
        cost / (1.0 - keep.powi(i32::try_from(lanes).unwrap_or(i32::MAX)))
    } else {
        1.0 / lanes as f64
    };
    let mut starts = vec![0];
    let mut s = 0.0;
    for _ in 1..lanes {
        s = t + keep * s;
        let band = ((s * bands as f64).round() as usize).min(bands);
        if band > *starts.last().unwrap_or(&0) && band < bands {
            starts.push(band);
        }
    }
    starts.push(bands);
    starts
}

/// The resize of `src` (`S`-byte pixels whose first `C` bytes are the
/// channels) into `out`, packed `C`-byte pixels; see
/// [`super::resize_bicubic_strided`]. An axis whose size is unchanged is not
/// resampled; with both unchanged, the pixels are copied (packed) and not
/// premultiplied, as `Image.resize` returns a copy at the same size.
///
/// # Errors
/// [`ResizeFailed`] as [`banded`].
#[allow(clippy::too_many_arguments)]
pub(super) fn resize_c<const S: usize, const C: usize>(
    src: Pixels<'_>,
    width: usize,
    height: usize,
    new_width: usize,
    new_height: usize,
    premultiplied: bool,
    fill: Fill<'_>,
    compat: PillowCompat,
    run: Execution,
    out: &mut [u8],
) -> Result<(), ResizeFailed> {
    let ch = (new_width != width).then(|| Coefficients::new(width, new_width));
    let cv = (new_height != height).then(|| Coefficients::new(height, new_height));
    let premultiplied = premultiplied && (ch.is_some() || cv.is_some());
    let options = ResizeOptions {
        horizontal: ch.as_ref(),
        vertical: cv.as_ref(),
        vertical_first: vertical_first(compat, width, height, new_width, new_height),
        premultiplied,
        fill,
        run,
    };
    banded::<S, C>(src, width, height, &options, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::RowSource;
    use crate::test_util::noise;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn lane_runs_take_about_as_long() {
        // Run 2 starts 62.5 % down: 63 bands, against 37 and 0.4 x 63 skipped.
        assert_eq!(lane_starts(2, 0.4, 100), [0, 63, 100]);
        assert_eq!(lane_starts(3, 0.4, 1000), [0, 510, 816, 1000]);
        assert_eq!(lane_starts(3, 0.0, 10), [0, 3, 7, 10]);
        // No more runs than bands, none empty.
        assert_eq!(lane_starts(4, 0.4, 2), [0, 1, 2]);
        assert_eq!(lane_starts(2, 0.4, 1), [0, 1]);
        // Starting further down costs more than it saves: one run.
        assert_eq!(lane_starts(8, 0.9, 3), [0, 3]);
    }

    /// A row source over `src` (rows of `row_len` bytes) that records the
    /// most rows one read asked for, the reads and the rows read, and fails
    /// reads past row `fail_from`.
    struct Rows<'a> {
        src: &'a [u8],
        row_len: usize,
        fail_from: usize,
        most: AtomicUsize,
        reads: AtomicUsize,
        rows: AtomicUsize,
    }

    impl<'a> Rows<'a> {
        fn new(src: &'a [u8], row_len: usize) -> Self {
            Self {
                src,
                row_len,
                fail_from: usize::MAX,
                most: AtomicUsize::new(0),
                reads: AtomicUsize::new(0),
                rows: AtomicUsize::new(0),
            }
        }
    }

    impl std::fmt::Debug for Rows<'_> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Rows")
        }
    }

    impl RowSource for Rows<'_> {
        fn read_rows(&self, first: usize, end: usize, out: &mut [u8]) -> Result<(), String> {
            if end > self.fail_from {
                return Err(format!("rows {first}..{end} are gone"));
            }
            self.most.fetch_max(end - first, Ordering::Relaxed);
            self.reads.fetch_add(1, Ordering::Relaxed);
            self.rows.fetch_add(end - first, Ordering::Relaxed);
            out.copy_from_slice(&self.src[first * self.row_len..end * self.row_len]);
            Ok(())
        }
    }

    /// The whole-image passes of `options`, in Pillow's order, without bands:
    /// what [`banded`] must equal (premultiplied around them when asked).
    fn whole(c: usize, src: &[u8], w: usize, h: usize, options: &ResizeOptions<'_>) -> Vec<u8> {
        let &ResizeOptions {
            horizontal: ch,
            vertical: cv,
            vertical_first,
            premultiplied,
            ..
        } = options;
        let mut image = src.to_vec();
        if premultiplied {
            premultiply(&mut image, c);
        }
        let (mut w, mut h) = (w, h);
        let horizontal = |image: &[u8], w: usize, h: usize, ch: &Coefficients| {
            let mut out = vec![0u8; h * ch.bounds.len() * c];
            let mut columns = Columns::default();
            let f = match c {
                1 => horizontal_into::<1, 1>,
                2 => horizontal_into::<2, 2>,
                3 => horizontal_into::<3, 3>,
                _ => horizontal_into::<4, 4>,
            };
            f(
                image,
                w,
                &HorizontalTaps::new(ch, c, SimdPath::Scalar),
                false,
                false,
                SimdPath::Scalar,
                &mut columns,
                HorizontalOut::Rows(&mut out),
            )
            .unwrap();
            out
        };
        let vertical = |image: &[u8], w: usize, cv: &Coefficients| {
            let mut out = vec![0u8; cv.bounds.len() * w * c];
            vertical_into(image, w * c, cv, 0, 0, SimdPath::Scalar, &mut out);
            out
        };
        let mut passes: Vec<bool> = Vec::new(); // true: horizontal
        if vertical_first {
            passes.extend(cv.map(|_| false));
            passes.extend(ch.map(|_| true));
        } else {
            passes.extend(ch.map(|_| true));
            passes.extend(cv.map(|_| false));
        }
        for is_h in passes {
            if is_h {
                let ch = ch.unwrap();
                image = horizontal(&image, w, h, ch);
                w = ch.bounds.len();
            } else {
                let cv = cv.unwrap();
                image = vertical(&image, w, cv);
                h = cv.bounds.len();
            }
        }
        if premultiplied {
            unpremultiply(&mut image, c);
        }
        image
    }

    #[test]
    fn a_row_source_is_read_ahead_in_windows_and_its_failure_returned() {
        // 2000 px RGBA rows (8,000 bytes), 4x down, one thread: its window is
        // a quarter of the 8 MiB budget, 262 rows, so the 1,200 rows take
        // five reads, each serving many bands, and each row is read once
        // (the rows a window shares with the next move over); the last rows
        // fail to read.
        let (w, h) = (2000, 1200);
        let src = noise(w * h * 4, 3);
        let (ch, cv) = (Coefficients::new(w, 500), Coefficients::new(h, 300));
        let run = Execution {
            path: SimdPath::Scalar,
            parallel: false,
        };
        let mut got = vec![0u8; 300 * 500 * 4];
        let rows = Rows::new(&src, w * 4);
        let options = ResizeOptions {
            horizontal: Some(&ch),
            vertical: Some(&cv),
            vertical_first: false,
            premultiplied: true,
            fill: Fill::None,
            run,
        };
        let resize = |pixels, got: &mut [u8]| banded::<4, 4>(pixels, w, h, &options, got);
        resize(Pixels::Rows(&rows), &mut got).unwrap();
        let mut want = vec![0u8; got.len()];
        resize(Pixels::Slice(&src), &mut want).unwrap();
        assert!(got == want);
        let most = rows.most.load(Ordering::Relaxed);
        let reads = rows.reads.load(Ordering::Relaxed);
        assert_eq!((most, reads), (BANDS_BYTES / 4 / 8000, 5));
        assert_eq!(rows.rows.load(Ordering::Relaxed), h);
        let failing = Rows {
            fail_from: 1100,
            ..Rows::new(&src, w * 4)
        };
        match resize(Pixels::Rows(&failing), &mut got) {
            Err(ResizeFailed::Rows(reason)) => assert!(reason.ends_with("are gone"), "{reason}"),
            other => panic!("expected the source's failure, got {other:?}"),
        }
    }

    #[test]
    fn a_band_of_wide_rows_reads_its_input_rows_a_chunk_at_a_time() {
        // 140,000 px LA rows (280,000 bytes), 70 rows down to 1 (all 70 are its
        // taps), horizontal pass first: the band reads and resizes its rows 16
        // at a time (a quarter of the budget holds 14), never all 70 at once,
        // and gives the whole-image passes' bytes, premultiplied or not.
        let (w, h, nw) = (140_000, 70, 1_000);
        let src = noise(w * h * 2, 17);
        let (ch, cv) = (Coefficients::new(w, nw), Coefficients::new(h, 1));
        for premultiplied in [false, true] {
            for parallel in [false, true] {
                let options = ResizeOptions {
                    horizontal: Some(&ch),
                    vertical: Some(&cv),
                    vertical_first: false,
                    premultiplied,
                    fill: Fill::None,
                    run: Execution {
                        path: SimdPath::Scalar,
                        parallel,
                    },
                };
                let want = whole(2, &src, w, h, &options);
                let rows = Rows::new(&src, w * 2);
                for pixels in [Pixels::Slice(&src), Pixels::Rows(&rows)] {
                    let mut got = vec![0u8; nw * 2];
                    banded::<2, 2>(pixels, w, h, &options, &mut got).unwrap();
                    assert!(got == want, "premultiplied {premultiplied}, {pixels:?}");
                }
                assert_eq!(rows.most.load(Ordering::Relaxed), 16);
            }
        }
    }

    /// [`horizontal_into`] of `h` rows of `src` through `ch`, on `path`, on
    /// its layout (quads or pairs, where `laid_out` and the CPU has them) or
    /// byte columns.
    fn horizontal<const S: usize, const C: usize>(
        src: &[u8],
        w: usize,
        ch: &Coefficients,
        premultiply: bool,
        path: SimdPath,
        laid_out: bool,
    ) -> Vec<u8> {
        let mut taps = HorizontalTaps::new(ch, S, path);
        if !laid_out {
            taps.layout = Layout::Columns;
        }
        let h = src.len() / (w * S);
        let mut out = vec![0u8; h * ch.bounds.len() * C];
        let mut columns = Columns::default();
        let rows = HorizontalOut::Rows(&mut out);
        horizontal_into::<S, C>(src, w, &taps, premultiply, true, path, &mut columns, rows)
            .unwrap();
        out
    }

    #[test]
    fn the_horizontal_pass_on_quads_and_pairs_equals_it_on_byte_columns() {
        // Both routes of the AVX-512 pass (quads) and of the AVX2 pass (pairs)
        // against the scalar one, where the CPU has them: downscales (every
        // lead of a quad or pair), upscales, rows of several tiles, a last
        // band of fewer than 16 rows, RGB in 4-byte pixels, premultiplied alpha.
        let paths: Vec<SimdPath> = [SimdPath::Avx512, SimdPath::Avx2]
            .into_iter()
            .filter(|&p| quads::available(p) || pairs::available(p))
            .collect();
        let check = |name: &str, got: &dyn Fn(SimdPath, bool) -> Vec<u8>| {
            let want = got(SimdPath::Scalar, false);
            for &path in &paths {
                let path_name = path.name();
                assert!(got(path, true) == want, "{name}: {path_name}, laid out");
                assert!(
                    got(path, false) == want,
                    "{name}: {path_name}, byte columns"
                );
            }
        };
        for (w, h, nw) in [
            (301, 37, 150),
            (1000, 20, 123),
            (50, 16, 170),
            (9000, 17, 2000),
        ] {
            let ch = Coefficients::new(w, nw);
            let name = format!("{w}x{h} -> {nw}");
            let rgb = noise(w * h * 3, (w + h) as u64);
            check(&name, &|path, q| {
                horizontal::<3, 3>(&rgb, w, &ch, false, path, q)
            });
            let rgbx = noise(w * h * 4, (w + h) as u64);
            check(&name, &|path, q| {
                horizontal::<4, 3>(&rgbx, w, &ch, false, path, q)
            });
            check(&name, &|path, q| {
                horizontal::<4, 4>(&rgbx, w, &ch, true, path, q)
            });
            let la = noise(w * h * 2, (w * h) as u64);
            check(&name, &|path, q| {
                horizontal::<2, 2>(&la, w, &ch, true, path, q)
            });
            check(&name, &|path, q| {
                horizontal::<2, 1>(&la, w, &ch, false, path, q)
            });
            let l = noise(w * h, (w * h) as u64 + 1);
            check(&name, &|path, q| {
                horizontal::<1, 1>(&l, w, &ch, false, path, q)
            });
        }
    }

    #[test]
    fn banded_passes_equal_whole_image_passes() {
        // Several bands of output rows, both pass orders, one axis alone, last
        // band partial; with alpha, premultiplied (in the transposed band or in
        // the copied rows, with bands shortened for wide rows).
        for (c, w, h, nw, nh) in [
            (3, 301, 700, 150, 333),
            (1, 90, 1000, 80, 140),
            (4, 200, 150, 60, 149),
            (4, 3000, 900, 2990, 200),
            (2, 130, 610, 129, 77),
            (4, 77, 300, 77, 100),
            (2, 300, 99, 101, 99),
        ] {
            let src = noise(w * h * c, (w + h) as u64);
            let (ch, cv) = (Coefficients::new(w, nw), Coefficients::new(h, nh));
            let axes = [(Some(&ch), Some(&cv)), (Some(&ch), None), (None, Some(&cv))];
            for (ch, cv) in axes {
                let new_w = ch.map_or(w, |c| c.bounds.len());
                let new_h = cv.map_or(h, |c| c.bounds.len());
                for vertical_first in [false, true] {
                    for premultiplied in [false, c % 2 == 0] {
                        let serial = ResizeOptions {
                            horizontal: ch,
                            vertical: cv,
                            vertical_first,
                            premultiplied,
                            fill: Fill::None,
                            run: Execution {
                                path: SimdPath::Scalar,
                                parallel: false,
                            },
                        };
                        let want = whole(c, &src, w, h, &serial);
                        // The scalar kernels, the AVX2 ones (the horizontal pass
                        // on pairs) and the AVX-512 ones (on quads of columns and
                        // of rows where the CPU has VNNI and VBMI).
                        let paths = [SimdPath::Scalar, SimdPath::Avx2, SimdPath::Avx512];
                        let runs = paths.into_iter().filter(|p| p.is_supported());
                        let runs = runs.flat_map(|path| {
                            [false, true].map(|parallel| Execution { path, parallel })
                        });
                        for run in runs {
                            let options = ResizeOptions { run, ..serial };
                            let mut got = vec![0u8; new_h * new_w * c];
                            let f = match c {
                                1 => banded::<1, 1>,
                                2 => banded::<2, 2>,
                                3 => banded::<3, 3>,
                                _ => banded::<4, 4>,
                            };
                            let rows = Rows::new(&src, w * c);
                            for pixels in [Pixels::Slice(&src), Pixels::Rows(&rows)] {
                                got.fill(0);
                                f(pixels, w, h, &options, &mut got).unwrap();
                                assert!(
                                    got == want,
                                    "{c}x{w}x{h}->{new_w}x{new_h} vertical first {vertical_first}, premultiplied {premultiplied}, {pixels:?}, {run:?}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
