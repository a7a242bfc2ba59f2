//! PNG through the `png` crate, decoded where Pillow's result is a plain 8-bit
//! `L`, `LA`, `RGB` or `RGBA` image.
//!
//! [`route`] walks the chunk list the way `PIL/PngImagePlugin.py` reads it
//! (`PngImageFile._open` up to the first `IDAT`, `load_read` over the `IDAT`
//! run, `load_end` up to `IEND`), so that the native decode fails exactly
//! where Pillow's does: Pillow checks the CRC of every chunk before the first
//! `IDAT` and of none after it, and reads no further than `IEND`. Anything the
//! walk cannot vouch for goes to Pillow. [`decode_into`] then reproduces
//! `libImaging/ZipDecode.c`: rows unfiltered in order, the zlib Adler-32
//! checked, and a zlib stream that ends early on a row boundary giving zero
//! rows below it, as Pillow's zero-initialised image does. Where the `png`
//! crate fails (corrupt or cut data), a slow exact path decides: the stream
//! inflated as zlib would and unfiltered here (`zipdecode`).

use std::io::Cursor;

use png::{ColorType, DecodeOptions, Decoder, InterlaceInfo, Transformations};

use super::{Format, Header, Limits, Route};
use crate::error::KimiError;

/// `PngImagePlugin.MAX_TEXT_CHUNK` (`ImageFile.SAFEBLOCK`): the most bytes a
/// compressed text or ICC chunk may inflate to before Pillow raises.
const MAX_TEXT_CHUNK: usize = 1 << 20;
/// Half of `PngImagePlugin.MAX_TEXT_MEMORY` (64 MiB): above it, Pillow judges.
const TEXT_MEMORY_BOUND: usize = 32 << 20;
/// `ImageFile.decodermaxblock`: Pillow hands the zlib decoder at most this
/// many bytes of one `IDAT` chunk at a time.
const READ_BLOCK: usize = 65536;
/// Pillow checks the Adler-32 only if the end of the zlib stream reaches it in
/// the same read as the last row; a read boundary this close to the end of the
/// `IDAT` data makes that uncertain, so such files go to Pillow.
const TAIL_GUARD: usize = 64;

fn fail(detail: impl Into<String>) -> KimiError {
    KimiError::Decode {
        format: "PNG",
        detail: detail.into(),
    }
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// A chunk header at `pos`: (type, declared length, data offset); `None`
/// where fewer than 8 bytes remain (Pillow's `struct.error`).
fn header_at(data: &[u8], pos: usize) -> Option<([u8; 4], usize, usize)> {
    let h = data.get(pos..pos.checked_add(8)?)?;
    Some(([h[4], h[5], h[6], h[7]], be32(h) as usize, pos + 8))
}

/// `PngImagePlugin.is_cid`: four ASCII word characters.
fn is_cid(kind: &[u8; 4]) -> bool {
    kind.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'_')
}

/// Whether zlib `data` inflates to fewer than `MAX_TEXT_CHUNK` bytes or is
/// corrupt (both fine for `_safe_zlib_decompress`'s callers): `Some(len)`;
/// `None` where Pillow may raise "Decompressed data too large".
fn inflated_len(data: &[u8]) -> Option<usize> {
    use miniz_oxide::inflate::{decompress_to_vec_zlib_with_limit, TINFLStatus};
    match decompress_to_vec_zlib_with_limit(data, MAX_TEXT_CHUNK - 1) {
        Ok(v) => Some(v.len()),
        Err(e) if e.status == TINFLStatus::HasMoreOutput => None,
        Err(e) => Some(e.output.len()),
    }
}

/// Text keywords whose values `Image.getexif` reads an orientation from.
fn is_orientation_key(key: &[u8]) -> bool {
    matches!(
        key,
        b"exif" | b"Raw profile type exif" | b"XML:com.adobe.xmp"
    )
}

/// Why a walk stops short of a native decode.
enum Stop {
    /// Pillow decodes the file, for this reason.
    Pillow(&'static str),
    /// Pillow fails on the file.
    Fail(KimiError),
}

impl From<KimiError> for Stop {
    fn from(e: KimiError) -> Self {
        Self::Fail(e)
    }
}

fn pillow<T>(why: &'static str) -> Result<T, Stop> {
    Err(Stop::Pillow(why))
}

fn broken<T>(why: &str) -> Result<T, Stop> {
    Err(Stop::Fail(fail(why)))
}

/// Pillow's view of the file, accumulated over the walk.
#[derive(Default)]
struct Walk {
    width: u32,
    height: u32,
    depth: u8,
    color: u8,
    trns: bool,
    plte: bool,
    orientation: bool,
    text_memory: usize,
    frames: Option<u32>,
    seq: Option<u32>,
    bbox: bool,
    /// Data ranges of the `IDAT` run, in file order.
    idat: Vec<(usize, usize)>,
}

impl Walk {
    /// `chunk_IHDR`, for the first chunk.
    fn ihdr(&mut self, s: &[u8]) -> Result<(), Stop> {
        if s.len() < 13 {
            return broken("truncated IHDR chunk");
        }
        (self.width, self.height, self.depth, self.color) = (be32(s), be32(&s[4..]), s[8], s[9]);
        if s[11] != 0 {
            return broken("unknown filter category");
        }
        if s.len() != 13 || s[10] != 0 || s[12] > 1 {
            return pillow("unusual IHDR");
        }
        Ok(())
    }

    /// One complete chunk other than the first, as `PngStream.chunk_*` reads it.
    fn chunk(&mut self, kind: &[u8; 4], s: &[u8], before_idat: bool) -> Result<(), Stop> {
        let len = s.len();
        match kind {
            b"IHDR" => return pillow("repeated IHDR"),
            // The png crate takes one PLTE of 3..=768 bytes (Pillow ignores it for RGB).
            b"PLTE" if self.plte || !(3..=768).contains(&len) => return pillow("unusual PLTE"),
            b"PLTE" => self.plte = true,
            b"tRNS" if matches!(self.color, 0 | 2) => self.trns = true,
            b"gAMA" if len < 4 => return broken("truncated gAMA chunk"),
            b"sRGB" if len < 1 => return broken("truncated sRGB chunk"),
            b"pHYs" if len < 9 => return broken("truncated pHYs chunk"),
            // Pillow 12 unpacks len / 4 words, Pillow 13 needs 32 bytes or more.
            b"cHRM" if !len.is_multiple_of(4) && len < 32 => return broken("bad cHRM chunk"),
            b"cHRM" if !len.is_multiple_of(4) || len < 32 => return pillow("unusual cHRM"),
            b"iCCP" => {
                let Some(i) = s.iter().position(|&c| c == 0).filter(|&i| i + 1 < len) else {
                    return pillow("unusual iCCP");
                };
                if s[i + 1] != 0 {
                    return broken("unknown iCCP compression method");
                }
                inflated_len(&s[i + 2..]).ok_or(Stop::Pillow("large iCCP"))?;
            }
            b"tEXt" | b"zTXt" | b"iTXt" => {
                let (key, value) = split_nul(s);
                self.orientation |= is_orientation_key(key);
                self.text_memory += value.len() + self.inflated_text(kind, value)?;
                if self.text_memory > TEXT_MEMORY_BOUND {
                    return pillow("large text chunks");
                }
            }
            b"eXIf" => self.orientation = true,
            b"acTL" | b"fcTL" if !before_idat => return pillow("acTL or fcTL after IDAT"),
            b"acTL" if len < 8 => return broken("truncated acTL chunk"),
            b"acTL" if len > 8 => return pillow("unusual acTL"),
            b"acTL" => {
                let n = be32(s);
                self.frames = match self.frames {
                    Some(_) => None, // Pillow: "Invalid APNG, will use default PNG image"
                    None if n == 0 || n > 0x8000_0000 => None,
                    None => Some(n),
                };
            }
            b"fcTL" if len != 26 => return pillow("unusual fcTL"),
            b"fcTL" => {
                let [seq, w, h, x, y] = [0, 4, 8, 12, 16].map(|i| be32(&s[i..]));
                if self
                    .seq
                    .map_or(seq != 0, |prev| prev.checked_add(1) != Some(seq))
                {
                    return broken("APNG contains frame sequence errors");
                }
                if u64::from(x) + u64::from(w) > u64::from(self.width)
                    || u64::from(y) + u64::from(h) > u64::from(self.height)
                {
                    return broken("APNG contains invalid frames");
                }
                if (x, y, w, h) != (0, 0, self.width, self.height) {
                    return pillow("APNG frame 0 smaller than the image");
                }
                (self.seq, self.bbox) = (Some(seq), true);
            }
            b"fdAT" => return pillow("fdAT chunk"),
            _ if kind[0].is_ascii_uppercase() && kind != b"IDAT" => {
                return pillow("unknown critical chunk")
            }
            _ => {}
        }
        Ok(())
    }

    /// The inflated size of a `zTXt` / compressed `iTXt` value (after the
    /// keyword): `chunk_zTXt` / `chunk_iTXt` raise above `MAX_TEXT_CHUNK`.
    fn inflated_text(&self, kind: &[u8; 4], value: &[u8]) -> Result<usize, Stop> {
        let z = match (kind, value) {
            (b"zTXt", [0, z @ ..]) | (b"zTXt", z @ []) => z,
            (b"zTXt", _) => return broken("unknown zTXt compression method"),
            // Compression flag set, method 0, then language and translated keyword.
            (b"iTXt", [f, 0, rest @ ..]) if *f != 0 => match rest.splitn(3, |&c| c == 0).nth(2) {
                Some(z) => z,
                None => return Ok(0),
            },
            _ => return Ok(0),
        };
        inflated_len(z).ok_or(Stop::Pillow("large compressed text"))
    }
}

/// `bytes.split(b"\0", 1)`, the whole as the key when there is no NUL.
fn split_nul(s: &[u8]) -> (&[u8], &[u8]) {
    match s.iter().position(|&c| c == 0) {
        Some(i) => (&s[..i], &s[i + 1..]),
        None => (s, &[]),
    }
}

/// Whether a Pillow read boundary (an `IDAT` chunk's end, or every
/// `READ_BLOCK` bytes within one) lies within `TAIL_GUARD` bytes before the
/// end of the `IDAT` data `idat` (data ranges in file order).
fn boundary_near_end(idat: &[(usize, usize)]) -> bool {
    let mut tail = 0; // bytes of IDAT data after the current chunk
    for &(start, end) in idat.iter().rev().filter(|(s, e)| e > s) {
        let len = end - start;
        let last_block = (len - 1) / READ_BLOCK * READ_BLOCK;
        if (tail > 0 && tail < TAIL_GUARD)
            || (last_block > 0 && tail + len - last_block < TAIL_GUARD)
        {
            return true;
        }
        tail += len;
        if tail >= TAIL_GUARD {
            break;
        }
    }
    false
}

/// The body of the chunk whose data starts at `at`, `n` bytes, if all there.
fn body(data: &[u8], at: usize, n: usize) -> Option<&[u8]> {
    data.get(at..at.checked_add(n)?)
}

/// Walk the chunk list as Pillow reads it (see the module docs).
fn walk(data: &[u8]) -> Result<Walk, Stop> {
    let mut w = Walk::default();
    let mut pos = 8;
    // `PngImageFile._open`: up to the first IDAT, each chunk's CRC checked.
    loop {
        let Some((kind, n, at)) = header_at(data, pos) else {
            return broken("truncated before IDAT");
        };
        if !is_cid(&kind) {
            return broken("broken PNG file (bad chunk type)");
        }
        // Pillow takes other orders; the png crate wants IHDR first, once.
        if (pos == 8) != (&kind == b"IHDR") {
            return pillow(if pos == 8 {
                "IHDR not first"
            } else {
                "repeated IHDR"
            });
        }
        match &kind {
            b"IDAT" => break,
            b"IEND" => return pillow("no IDAT before IEND"),
            _ => {}
        }
        let Some(s) = body(data, at, n) else {
            return broken("truncated chunk");
        };
        if pos == 8 {
            w.ihdr(s)
        } else {
            w.chunk(&kind, s, true)
        }?;
        match data.get(at + n..at + n + 4) {
            Some(crc) if be32(crc) == crc32fast::hash(&data[pos + 4..at + n]) => {}
            Some(_) => return broken("broken PNG file (bad header checksum)"),
            None => return broken("broken PNG file (incomplete checksum)"),
        }
        pos = at + n + 4;
    }
    // `ImageFile.__init__`: a mode (`PngImagePlugin._MODES`) and a size.
    let mode = matches!(
        (w.depth, w.color),
        (1 | 2 | 4 | 8 | 16, 0) | (8 | 16, 2 | 4 | 6) | (1 | 2 | 4 | 8, 3)
    );
    if w.width == 0 || w.height == 0 || !mode {
        return broken("unsupported PNG header");
    }
    // `load_read`: the run of IDAT chunks.
    while let Some((kind, n, at)) = header_at(data, pos) {
        match &kind {
            b"IDAT" => {}
            b"DDAT" | b"fdAT" => return pillow("DDAT or fdAT in the IDAT run"),
            _ => break,
        }
        match body(data, at, n) {
            Some(_) => w.idat.push((at, at + n)),
            // Cut inside the only IDAT: Pillow decodes what there is.
            None if w.idat.is_empty() => {
                w.idat.push((at, data.len()));
                return Ok(w);
            }
            None => return pillow("truncated IDAT run"),
        }
        pos = at + n + 4;
    }
    // `load_end`: up to IEND (or the next frame's fcTL), CRCs unchecked.
    let animated = w
        .frames
        .is_some_and(|n| u64::from(n) + u64::from(!w.bbox) > 1);
    while let Some((kind, n, at)) = header_at(data, pos) {
        if !is_cid(&kind) || &kind == b"IEND" || (&kind == b"fcTL" && animated) {
            break;
        }
        let Some(s) = body(data, at, n) else {
            return broken("truncated chunk after IDAT");
        };
        w.chunk(&kind, s, false)?;
        pos = at + n + 4;
    }
    Ok(w)
}

/// The route of a walked file.
fn verdict(w: &Walk) -> Route {
    Route::Pillow(match (w.depth, w.color) {
        (_, 3) => "palette PNG",
        (16, _) => "16-bit PNG",
        (1 | 2 | 4, _) => "1/2/4-bit grey PNG",
        (8, 0 | 2) if w.trns => "tRNS",
        _ if w.width > i32::MAX as u32 || w.height > i32::MAX as u32 => {
            "PNG over 2^31 pixels a side"
        }
        _ if boundary_near_end(&w.idat) => "IDAT split near its end",
        (_, color) => {
            let channels = [1, 0, 3, 0, 2, 0, 4][usize::from(color)];
            let (width, height) = (w.width as usize, w.height as usize);
            return Route::Native(Header {
                format: Format::Png,
                width,
                height,
                channels,
            });
        }
    })
}

/// Read a PNG's chunk list and say where it is decoded: see [`super::route`].
///
/// Natively only 8-bit grey (`L`), grey + alpha (`LA`), RGB and RGBA, Adam7
/// or not, without `tRNS` for grey / RGB, whose every chunk Pillow reads is
/// one whose handling here is Pillow's (`PngImagePlugin.PngStream.chunk_*`);
/// an APNG natively only where its frame 0 is the plain `IDAT` image. With
/// `exif_transpose`, a file with an `eXIf` chunk or an EXIF / XMP text chunk
/// Pillow reads goes to Pillow. Cost: one pass over the chunk headers, CRCs
/// of the chunks before the first `IDAT`, and the inflate of any `iCCP` /
/// compressed text chunk (at most 1 MiB each); nothing sized by the header.
///
/// # Errors
/// `KimiError::Decode` where Pillow fails on the file for a reason visible in
/// its chunk list: a bad CRC or a cut before the first `IDAT`, a malformed
/// `IHDR`, an invalid bit depth / colour type, a chunk after the `IDAT` data
/// that is cut short.
pub fn route(data: &[u8], exif_transpose: bool) -> Result<Route, KimiError> {
    match walk(data) {
        Ok(w) if exif_transpose && w.orientation => Ok(Route::Pillow("EXIF/XMP orientation")),
        Ok(w) => Ok(verdict(&w)),
        Err(Stop::Pillow(why)) => Ok(Route::Pillow(why)),
        Err(Stop::Fail(e)) => Err(e),
    }
}

/// The Adam7 passes as (first column, first row, column step, row step).
#[rustfmt::skip]
const ADAM7: [(usize, usize, usize, usize); 7] =
    [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)];

/// The filtered row lengths (filter byte included) of the image in zlib
/// stream order: `height` rows, or the rows of the non-empty Adam7 passes.
fn raw_rows(h: &Header, interlaced: bool) -> impl Iterator<Item = usize> {
    let (w, ht, c) = (h.width, h.height, h.channels);
    let passes: &[_] = if interlaced { &ADAM7 } else { &[(0, 0, 1, 1)] };
    passes.iter().flat_map(move |&(x0, y0, dx, dy)| {
        let cols = w.saturating_sub(x0).div_ceil(dx);
        let rows = if cols == 0 {
            0
        } else {
            ht.saturating_sub(y0).div_ceil(dy)
        };
        std::iter::repeat_n(1 + cols * c, rows)
    })
}

/// Decode a PNG whose [`route`] was `Route::Native(header)` into `out`
/// (`header.decoded_len()` bytes, HWC, rows top to bottom): the bytes of
/// `np.asarray(Image.open(...))`.
///
/// The `png` crate with no transformations, each row straight into `out`
/// (Adam7 rows scattered into place). As `ZipDecode.c`: chunk CRCs after the
/// first `IDAT` are not checked, the Adler-32 is, data after the last row is
/// ignored, and a zlib stream that ends on a row boundary leaves the rows
/// below it zero. `limits` has nothing for PNG; the crate's own allocations
/// are capped at one row plus the file's size. Only after the crate fails,
/// the exact slow path allocates the `IDAT` data and the filtered image once.
///
/// # Errors
/// `KimiError::Decode` for corrupt or truncated data, or a header that does
/// not match the file; `KimiError::Overflow` as [`Header::decoded_len`].
pub fn decode_into(
    data: &[u8],
    header: &Header,
    limits: &Limits,
    out: &mut [u8],
) -> Result<(), KimiError> {
    let _ = limits;
    if out.len() != header.decoded_len()? || header.format != Format::Png {
        return Err(fail("output buffer does not match the header"));
    }
    let mut options = DecodeOptions::default();
    options.set_ignore_crc(true);
    options.set_ignore_adler32(false);
    options.set_ignore_text_chunk(true);
    options.set_ignore_iccp_chunk(true);
    let mut decoder = Decoder::new_with_options(Cursor::new(data), options);
    let stride = header.width * header.channels;
    decoder.set_limits(png::Limits {
        bytes: stride.saturating_add(data.len()).saturating_add(1 << 16),
    });
    decoder.set_transformations(Transformations::IDENTITY);
    let mut reader = decoder.read_info().map_err(|e| fail(e.to_string()))?;
    let info = reader.info();
    let interlaced = info.interlaced;
    let color = [
        ColorType::Grayscale,
        ColorType::GrayscaleAlpha,
        ColorType::Rgb,
        ColorType::Rgba,
    ]
    .get(header.channels.wrapping_sub(1));
    let found = (
        info.width as usize,
        info.height as usize,
        Some(&info.color_type),
    );
    if found != (header.width, header.height, color) || info.bit_depth != png::BitDepth::Eight {
        return Err(fail("file does not match the header"));
    }
    let rows = raw_rows(header, interlaced).count();
    if interlaced {
        out.fill(0);
    }
    for done in 0..rows {
        let row = if interlaced {
            reader
                .next_interlaced_row()
                .map(|r| match r.map(|r| (r.data(), *r.interlace())) {
                    Some((px, InterlaceInfo::Adam7(pass))) => {
                        png::expand_interlaced_row(
                            out,
                            stride,
                            px,
                            &pass,
                            8 * header.channels as u8,
                        );
                        true
                    }
                    _ => false,
                })
        } else {
            reader
                .read_row(&mut out[done * stride..][..stride])
                .map(|r| r.is_some())
        };
        match row {
            Ok(true) => {}
            Ok(false) => return Err(fail("fewer rows than the header says")),
            Err(e) => {
                // Running out of data is Pillow's "image file is truncated" (`ImageFile.load`).
                let text = match &e {
                    png::DecodingError::IoError(io)
                        if io.kind() == std::io::ErrorKind::UnexpectedEof =>
                    {
                        "image file is truncated".to_owned()
                    }
                    _ => e.to_string(),
                };
                return zipdecode(data, header, interlaced, out).ok_or_else(|| fail(text));
            }
        }
    }
    Ok(())
}

/// After the crate failed (it inflates with some lookahead, so it cannot
/// finish every cut stream zlib can): `ZipDecode.c`'s own
/// result, by inflating what there is (`miniz_oxide`, as zlib: every symbol
/// the input holds) and unfiltering here. Pillow succeeds where all rows
/// inflate, or where the stream ends cleanly on a row boundary after at least
/// one row (the rows below stay zero); `None` where it fails.
fn zipdecode(data: &[u8], header: &Header, interlaced: bool, out: &mut [u8]) -> Option<()> {
    use miniz_oxide::inflate::stream::{inflate, InflateState};
    use miniz_oxide::{DataFormat, MZError, MZFlush, MZStatus};
    let w = walk(data).ok()?;
    let stream: Vec<u8> = w
        .idat
        .iter()
        .flat_map(|&(s, e)| &data[s..e])
        .copied()
        .collect();
    let total: usize = raw_rows(header, interlaced).sum();
    // One byte spare, so that a full image is not a full buffer: zlib reads on.
    let mut raw = vec![0u8; total.checked_add(1)?];
    let mut state = InflateState::new_boxed(DataFormat::Zlib);
    let r = inflate(&mut state, &stream, &mut raw, MZFlush::None);
    let mut rows = 0;
    let mut at = 0;
    for len in raw_rows(header, interlaced) {
        if at + len > r.bytes_written {
            break;
        }
        (rows, at) = (rows + 1, at + len);
    }
    let whole =
        at == total || (r.status == Ok(MZStatus::StreamEnd) && at == r.bytes_written && rows > 0);
    if r.status == Err(MZError::Data) || !whole {
        return None;
    }
    out.fill(0);
    let (c, stride) = (header.channels, header.width * header.channels);
    let passes: &[_] = if interlaced { &ADAM7 } else { &[(0, 0, 1, 1)] };
    let (mut row, mut prev) = (Vec::new(), Vec::new());
    let mut lines = raw[..at].iter();
    for &(x0, y0, dx, dy) in passes {
        let cols = header.width.saturating_sub(x0).div_ceil(dx);
        prev.clear();
        prev.resize(cols * c, 0);
        for y in (y0..header.height)
            .step_by(dy)
            .take(if cols == 0 { 0 } else { usize::MAX })
        {
            let Some(&filter) = lines.next() else {
                return Some(());
            };
            row.clear();
            row.extend(lines.by_ref().take(cols * c));
            unfilter(filter, &mut row, &prev, c)?;
            for (j, px) in row.chunks_exact(c).enumerate() {
                out[y * stride + (x0 + j * dx) * c..][..c].copy_from_slice(px);
            }
            std::mem::swap(&mut row, &mut prev);
        }
    }
    Some(())
}

/// Undo PNG filter `f` on `row` given the row above (`ZipDecode.c`'s
/// predictors, `bpp` bytes per pixel); `None` for an unknown filter type.
fn unfilter(f: u8, row: &mut [u8], prev: &[u8], bpp: usize) -> Option<()> {
    for i in 0..row.len() {
        let (a, b) = (if i >= bpp { row[i - bpp] } else { 0 }, prev[i]);
        let c = if i >= bpp { prev[i - bpp] } else { 0 };
        row[i] = row[i].wrapping_add(match f {
            0 => 0,
            1 => a,
            2 => b,
            3 => ((u16::from(a) + u16::from(b)) / 2) as u8,
            4 => {
                let (ia, ib, ic) = (i16::from(a), i16::from(b), i16::from(c));
                let (pa, pb, pc) = ((ib - ic).abs(), (ia - ic).abs(), (ia + ib - 2 * ic).abs());
                if pa <= pb && pa <= pc {
                    a
                } else if pb <= pc {
                    b
                } else {
                    c
                }
            }
            _ => return None,
        });
    }
    Some(())
}

#[cfg(test)]
mod tests;
