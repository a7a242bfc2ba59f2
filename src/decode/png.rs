//! PNG decoded where Pillow's result is a plain 8-bit `L`, `LA`, `RGB` or
//! `RGBA` image.
//!
//! [`route`] walks the chunk list the way `PIL/PngImagePlugin.py` reads it
//! (`PngImageFile._open` up to the first `IDAT`, `load_read` over the `IDAT`
//! run, `load_end` up to `IEND`), so that the native decode fails exactly
//! where Pillow's does: Pillow checks the CRC of every chunk before the first
//! `IDAT` and of none after it, and reads no further than `IEND`. Anything the
//! walk cannot vouch for goes to Pillow, and so does a file whose chunk list
//! Pillow fails on (Pillow raises its own error). [`decode_into`] then is
//! `libImaging/ZipDecode.c` as `ImageFile.load` drives it: zlib's inflate
//! (the `zlib-rs` port of it, whose states, checks and error points are
//! zlib's) fed the `IDAT` data in Pillow's reads, asked for one filtered row
//! at a time, each row unfiltered as it completes. Its outcome is Pillow's on
//! every stream: what zlib reads past the last row while it fills it (a bad
//! symbol, block header or Adler-32 there fails), what it never reads (data in
//! a later read), a stream that ends early on a row boundary (the rows below
//! stay zero, as in Pillow's zero-initialised image) or anywhere else (fails).

mod inflate;

pub use inflate::{decode_image, decode_into, Decoder};
use zlib_rs::{Inflate, InflateFlush, Status};

use super::{Format, Header, Route};
use crate::error::KimiError;

/// `PngImagePlugin.MAX_TEXT_CHUNK` (`ImageFile.SAFEBLOCK`): the most bytes a
/// compressed text or ICC chunk may inflate to before Pillow raises.
const MAX_TEXT_CHUNK: usize = 1 << 20;
/// Half of `PngImagePlugin.MAX_TEXT_MEMORY` (64 MiB): above it, Pillow judges.
const TEXT_MEMORY_BOUND: usize = 32 << 20;
/// zlib's window bits for `inflateInit`, as `ZipDecode.c` and Python's
/// `zlib.decompressobj()` call it.
const WINDOW_BITS: u8 = 15;

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

/// What `ImageFile.load` raises when the reads of the `IDAT` run end before the
/// image does: `load_read` reads the next chunk's header at `pos` (past the
/// run's last CRC) with `ChunkStream.read`, whose `i32` of fewer than 4 bytes
/// fails ("image file is truncated"), whose chunk type of other than 4 word
/// characters (a short one too) is "broken PNG file (chunk b'...')", and whose
/// other chunk ends the data ("image file is truncated (N bytes not
/// processed)", without the count here).
fn reads_run_out(data: &[u8], pos: usize) -> String {
    let next = data.get(pos..).unwrap_or_default();
    let next = &next[..next.len().min(8)];
    match next.get(4..) {
        Some(cid) if <&[u8; 4]>::try_from(cid).map_or(true, |c| !is_cid(c)) => {
            format!("broken PNG file (chunk {})", python_bytes(cid))
        }
        _ => "image file is truncated".into(),
    }
}

/// Python's `repr` of a `bytes` value: `b'...'` (in double quotes when it holds
/// a single quote and no double one), printable ASCII as it is, backslash
/// escapes for the quote, the backslash, tab, newline and carriage return,
/// `\xhh` for the rest.
fn python_bytes(b: &[u8]) -> String {
    let quote = if b.contains(&b'\'') && !b.contains(&b'"') {
        b'"'
    } else {
        b'\''
    };
    let mut s = format!("b{}", quote as char);
    for &c in b {
        match c {
            b'\\' => s.push_str("\\\\"),
            b'\t' => s.push_str("\\t"),
            b'\n' => s.push_str("\\n"),
            b'\r' => s.push_str("\\r"),
            _ if c == quote => {
                s.push('\\');
                s.push(c as char);
            }
            0x20..=0x7e => s.push(c as char),
            _ => s.push_str(&format!("\\x{c:02x}")),
        }
    }
    s.push(quote as char);
    s
}

/// Whether zlib `data` inflates to fewer than `MAX_TEXT_CHUNK` bytes or is
/// corrupt (both fine for `_safe_zlib_decompress`'s callers): `Some(len)`;
/// `None` where Pillow raises "Decompressed data too large". That is where
/// `zlib.decompressobj().decompress(data, MAX_TEXT_CHUNK)` stops at its output
/// limit with input left over (`unconsumed_tail`): zlib's inflate, stopped
/// there, neither at the end of the stream nor at an error.
fn inflated_len(data: &[u8]) -> Option<usize> {
    let mut z = Inflate::new(true, WINDOW_BITS);
    let mut out = vec![0u8; 1 << 16];
    let mut input = data;
    loop {
        let room = out.len().min(MAX_TEXT_CHUNK - z.total_out() as usize);
        let (read, written) = (z.total_in(), z.total_out());
        let status = z.decompress(input, &mut out[..room], InflateFlush::NoFlush);
        input = &input[(z.total_in() - read) as usize..];
        // zlib makes progress on every call that returns `Ok` (else `BufError`).
        let progress = z.total_in() > read || z.total_out() > written;
        let len = z.total_out() as usize;
        match status {
            Ok(Status::Ok | Status::BufError) if len == MAX_TEXT_CHUNK => {
                return input.is_empty().then_some(len);
            }
            Ok(Status::Ok) if !input.is_empty() && progress => {}
            _ => return Some(len),
        }
    }
}

/// Text keywords whose values `Image.getexif` reads an orientation from.
fn is_orientation_key(key: &[u8]) -> bool {
    matches!(
        key,
        b"exif" | b"Raw profile type exif" | b"XML:com.adobe.xmp"
    )
}

/// Why a walk stops short of a native decode: the file goes to Pillow, which
/// decodes it, or fails on it (the reason then reads `"Pillow fails: ..."`).
type Stop = &'static str;

fn pillow<T>(why: Stop) -> Result<T, Stop> {
    Err(why)
}

/// Pillow's view of the file, accumulated over the walk.
#[derive(Default)]
struct Walk {
    width: u32,
    height: u32,
    depth: u8,
    color: u8,
    interlaced: bool,
    trns: bool,
    orientation: bool,
    text_memory: usize,
    frames: Option<u32>,
    seq: Option<u32>,
    bbox: bool,
    /// Data ranges of the `IDAT` run, in file order.
    idat: Vec<(usize, usize)>,
    /// Where the `IDAT` run ends: past its last chunk's CRC.
    idat_end: usize,
}

impl Walk {
    /// `chunk_IHDR`, for the first chunk.
    fn ihdr(&mut self, s: &[u8]) -> Result<(), Stop> {
        if s.len() < 13 {
            return pillow("Pillow fails: truncated IHDR chunk");
        }
        (self.width, self.height, self.depth, self.color) = (be32(s), be32(&s[4..]), s[8], s[9]);
        self.interlaced = s[12] == 1;
        if s[11] != 0 {
            return pillow("Pillow fails: unknown filter category");
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
            // `chunk_PLTE` keeps a palette for a "P" image only.
            b"PLTE" => {}
            b"tRNS" if matches!(self.color, 0 | 2) => self.trns = true,
            b"gAMA" if len < 4 => return pillow("Pillow fails: truncated gAMA chunk"),
            b"sRGB" if len < 1 => return pillow("Pillow fails: truncated sRGB chunk"),
            b"pHYs" if len < 9 => return pillow("Pillow fails: truncated pHYs chunk"),
            // Pillow 12 unpacks len / 4 words, Pillow 13 needs 32 bytes or more.
            b"cHRM" if !len.is_multiple_of(4) && len < 32 => {
                return pillow("Pillow fails: bad cHRM chunk")
            }
            b"cHRM" if !len.is_multiple_of(4) || len < 32 => return pillow("unusual cHRM"),
            b"iCCP" => {
                let Some(i) = s.iter().position(|&c| c == 0).filter(|&i| i + 1 < len) else {
                    return pillow("unusual iCCP");
                };
                if s[i + 1] != 0 {
                    return pillow("Pillow fails: unknown iCCP compression method");
                }
                inflated_len(&s[i + 2..]).ok_or("large iCCP")?;
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
            b"acTL" if len < 8 => return pillow("Pillow fails: truncated acTL chunk"),
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
                    return pillow("Pillow fails: APNG contains frame sequence errors");
                }
                if u64::from(x) + u64::from(w) > u64::from(self.width)
                    || u64::from(y) + u64::from(h) > u64::from(self.height)
                {
                    return pillow("Pillow fails: APNG contains invalid frames");
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
            (b"zTXt", _) => return pillow("Pillow fails: unknown zTXt compression method"),
            // Compression flag set, method 0, then language and translated keyword.
            (b"iTXt", [f, 0, rest @ ..]) if *f != 0 => match rest.splitn(3, |&c| c == 0).nth(2) {
                Some(z) => z,
                None => return Ok(0),
            },
            _ => return Ok(0),
        };
        inflated_len(z).ok_or("large compressed text")
    }
}

/// `bytes.split(b"\0", 1)`, the whole as the key when there is no NUL.
fn split_nul(s: &[u8]) -> (&[u8], &[u8]) {
    match s.iter().position(|&c| c == 0) {
        Some(i) => (&s[..i], &s[i + 1..]),
        None => (s, &[]),
    }
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
            return pillow("Pillow fails: truncated before IDAT");
        };
        if !is_cid(&kind) {
            return pillow("Pillow fails: broken PNG file (bad chunk type)");
        }
        // Pillow takes other orders; the walk reads one IHDR, the first chunk.
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
            // `chunk_fdAT` reads 4 bytes of it and ends this walk as `IDAT` does: a
            // body cut short here is Pillow's to judge.
            b"fdAT" => return pillow("fdAT chunk"),
            _ => {}
        }
        let Some(s) = body(data, at, n) else {
            return pillow("Pillow fails: truncated chunk");
        };
        if pos == 8 {
            w.ihdr(s)
        } else {
            w.chunk(&kind, s, true)
        }?;
        match data.get(at + n..at + n + 4) {
            Some(crc) if be32(crc) == crc32fast::hash(&data[pos + 4..at + n]) => {}
            Some(_) => return pillow("Pillow fails: broken PNG file (bad header checksum)"),
            None => return pillow("Pillow fails: broken PNG file (incomplete checksum)"),
        }
        pos = at + n + 4;
    }
    // `ImageFile.__init__`: a mode (`PngImagePlugin._MODES`) and a size.
    let mode = matches!(
        (w.depth, w.color),
        (1 | 2 | 4 | 8 | 16, 0) | (8 | 16, 2 | 4 | 6) | (1 | 2 | 4 | 8, 3)
    );
    if w.width == 0 || w.height == 0 || !mode {
        return pillow("Pillow fails: unsupported PNG header");
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
                w.idat_end = data.len();
                return Ok(w);
            }
            None => return pillow("truncated IDAT run"),
        }
        pos = at + n + 4;
    }
    w.idat_end = pos;
    // `load_end`: up to IEND (or the next frame's fcTL), CRCs unchecked.
    let animated = w
        .frames
        .is_some_and(|n| u64::from(n) + u64::from(!w.bbox) > 1);
    while let Some((kind, n, at)) = header_at(data, pos) {
        if !is_cid(&kind) || &kind == b"IEND" || (&kind == b"fcTL" && animated) {
            break;
        }
        let Some(s) = body(data, at, n) else {
            return pillow("Pillow fails: truncated chunk after IDAT");
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
        (_, color) => {
            let channels = [1, 0, 3, 0, 2, 0, 4][usize::from(color)];
            // `decode.c: _setimage` refuses rows over `INT_MAX` bits (MemoryError).
            if w.height > i32::MAX as u32
                || u64::from(w.width) > i32::MAX as u64 / (8 * channels as u64) - 7
            {
                return Route::Pillow("PNG rows over 2^31 bits");
            }
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
/// A file Pillow fails on for a reason visible in its chunk list goes to
/// Pillow, so that Pillow itself raises its error (the reason reads `"Pillow
/// fails: ..."`): a bad CRC or a cut before the first `IDAT`, a malformed
/// `IHDR`, an invalid bit depth / colour type, a chunk Pillow's handler
/// refuses, a chunk after the `IDAT` data that is cut short. Pillow's own
/// decode then runs under the same bounds as any other file's.
#[must_use]
pub fn route(data: &[u8], exif_transpose: bool) -> Route {
    match walk(data) {
        Ok(w) if exif_transpose && w.orientation => Route::Pillow("EXIF/XMP orientation"),
        Ok(w) => verdict(&w),
        Err(why) => Route::Pillow(why),
    }
}

#[cfg(test)]
mod tests;
