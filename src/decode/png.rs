//! PNG decoded where Pillow's result is a plain 8-bit `L`, `LA`, `RGB` or
//! `RGBA` image.
//!
//! [`route`] walks the chunk list the way `PIL/PngImagePlugin.py` reads it
//! (`PngImageFile._open` up to the first `IDAT`, `load_read` over the `IDAT`
//! run, `load_end` up to `IEND`), so that the native decode fails exactly
//! where Pillow's does: Pillow checks the CRC of every chunk before the first
//! `IDAT` and of none after it, and reads no further than `IEND`. Anything the
//! walk cannot vouch for goes to Pillow. [`decode_into`] then is
//! `libImaging/ZipDecode.c` as `ImageFile.load` drives it: zlib's inflate
//! (the `zlib-rs` port of it, whose states, checks and error points are
//! zlib's) fed the `IDAT` data in Pillow's reads, asked for one filtered row
//! at a time, each row unfiltered as it completes. Its outcome is Pillow's on
//! every stream: what zlib reads past the last row while it fills it (a bad
//! symbol, block header or Adler-32 there fails), what it never reads (data in
//! a later read), a stream that ends early on a row boundary (the rows below
//! stay zero, as in Pillow's zero-initialised image) or anywhere else (fails).

use zlib_rs::{Inflate, InflateError, InflateFlush, Status};

use super::{Format, Header, Limits, Route};
use crate::buffers::try_buffer;
use crate::error::KimiError;

/// `PngImagePlugin.MAX_TEXT_CHUNK` (`ImageFile.SAFEBLOCK`): the most bytes a
/// compressed text or ICC chunk may inflate to before Pillow raises.
const MAX_TEXT_CHUNK: usize = 1 << 20;
/// Half of `PngImagePlugin.MAX_TEXT_MEMORY` (64 MiB): above it, Pillow judges.
const TEXT_MEMORY_BOUND: usize = 32 << 20;
/// `ImageFile.decodermaxblock`: Pillow hands the zlib decoder at most this
/// many bytes of one `IDAT` chunk at a time.
const READ_BLOCK: usize = 65536;
/// zlib's window bits for `inflateInit`, as `ZipDecode.c` and Python's
/// `zlib.decompressobj()` call it.
const WINDOW_BITS: u8 = 15;
/// Bytes of filtered rows inflated by one call in bulk (see [`decode_into`]).
const BULK: usize = 1 << 16;

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
            return broken("truncated IHDR chunk");
        }
        (self.width, self.height, self.depth, self.color) = (be32(s), be32(&s[4..]), s[8], s[9]);
        self.interlaced = s[12] == 1;
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
            // `chunk_PLTE` keeps a palette for a "P" image only.
            b"PLTE" => {}
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

/// One filtered row of the zlib stream: its image row, first column and
/// column step, and its pixels' bytes (the filter byte not counted).
#[derive(Clone, Copy)]
struct RawRow {
    y: usize,
    x0: usize,
    dx: usize,
    len: usize,
    /// The first row of its pass (the row above it reads as zeros).
    first: bool,
}

/// The rows of the image in zlib stream order, as `ZipDecode.c` walks them:
/// `height` rows, or the rows of each non-empty Adam7 pass.
#[derive(Clone)]
struct RawRows {
    width: usize,
    height: usize,
    channels: usize,
    interlaced: bool,
    /// The pass (0 when not interlaced) and the row of it next.
    pass: usize,
    k: usize,
}

impl RawRows {
    fn new(h: &Header, interlaced: bool) -> Self {
        Self {
            width: h.width,
            height: h.height,
            channels: h.channels,
            interlaced,
            pass: 0,
            k: 0,
        }
    }
}

impl Iterator for RawRows {
    type Item = RawRow;

    fn next(&mut self) -> Option<RawRow> {
        let passes: &[_] = if self.interlaced {
            &ADAM7
        } else {
            &[(0, 0, 1, 1)]
        };
        while let Some(&(x0, y0, dx, dy)) = passes.get(self.pass) {
            let cols = self.width.saturating_sub(x0).div_ceil(dx);
            let y = y0 + self.k * dy;
            if cols == 0 || y >= self.height {
                (self.pass, self.k) = (self.pass + 1, 0);
                continue;
            }
            self.k += 1;
            return Some(RawRow {
                y,
                x0,
                dx,
                len: cols * self.channels,
                first: y == y0,
            });
        }
        None
    }
}

/// Pillow's reads of the `IDAT` run (`ImageFile.load` through
/// `PngImageFile.load_read`): each chunk's data from its start in pieces of
/// at most [`READ_BLOCK`] bytes; an empty chunk gives none.
#[derive(Default)]
struct Reads {
    /// The chunk of the next read, and where in the file it starts (0: at
    /// the chunk's start).
    chunk: usize,
    at: usize,
}

impl Reads {
    /// The next read of `idat` (the run's data ranges), as a range of the file.
    fn next(&mut self, idat: &[(usize, usize)]) -> Option<(usize, usize)> {
        while let Some(&(start, end)) = idat.get(self.chunk) {
            let at = self.at.max(start);
            if at < end {
                self.at = end.min(at + READ_BLOCK);
                return Some((at, self.at));
            }
            (self.chunk, self.at) = (self.chunk + 1, 0);
        }
        None
    }
}

/// The end of the room for one bulk inflate call in a buffer of `cap` bytes
/// whose first row is the next of `rows`: whole rows (filter byte included)
/// that fit, short of the image's last; `None` where no row qualifies.
fn bulk_room(rows: impl Iterator<Item = RawRow>, cap: usize) -> Option<usize> {
    let mut rows = rows.peekable();
    let mut end = 0;
    while let Some(r) = rows.next() {
        if rows.peek().is_none() || end + r.len + 1 > cap {
            break;
        }
        end += r.len + 1;
    }
    (end > 0).then_some(end)
}

/// The decode of a PNG as `ZipDecode.c` runs it under `ImageFile.load`
/// (see [`decode_into`]), one inflate call at a time ([`Inflater::step`]), so
/// that a caller can take the rows as they complete.
struct Inflater<'a> {
    data: &'a [u8],
    /// The `IDAT` run's data ranges.
    idat: Vec<(usize, usize)>,
    /// The image is interlaced (Adam7).
    interlaced: bool,
    /// The failure when the reads run out first ([`reads_run_out`]).
    ran_out: String,
    reads: Reads,
    /// What is left of the current read, a range of `data` (empty: the next
    /// call starts the next read).
    input: (usize, usize),
    /// A row completed in the current read.
    completed: bool,
    /// The rows not yet complete.
    rows: std::iter::Peekable<RawRows>,
    /// Filtered rows, the first from the buffer's start: `filled` bytes so far.
    buf: Vec<u8>,
    filled: usize,
    z: Inflate,
    /// The room of the current call, when it is a bulk one.
    bulk: Option<usize>,
    /// The last call was a bulk one that ended on the end of a row it wrote:
    /// that row waits in `buf` for the call with no room that reads on.
    row_end: bool,
}

impl<'a> Inflater<'a> {
    /// The decode of `data`, a PNG whose [`route`] was `Route::Native(header)`.
    ///
    /// # Errors
    /// `KimiError::Decode` when the file does not match `header`.
    fn new(data: &'a [u8], header: &Header) -> Result<Self, KimiError> {
        let w = match walk(data) {
            Ok(w) if header.format == Format::Png && verdict(&w) == Route::Native(*header) => w,
            _ => return Err(fail("file does not match the header")),
        };
        let rows = RawRows::new(header, w.interlaced);
        Ok(Self {
            data,
            ran_out: reads_run_out(data, w.idat_end),
            idat: w.idat,
            interlaced: w.interlaced,
            reads: Reads::default(),
            input: (0, 0),
            completed: false,
            rows: rows.peekable(),
            buf: vec![0u8; BULK.max(header.width * header.channels + 1)],
            filled: 0,
            z: Inflate::new(true, WINDOW_BITS),
            bulk: None,
            row_end: false,
        })
    }

    /// One inflate call, each row it completes handed to `sink` (its filter
    /// byte, then its bytes; `sink` says false for an unknown filter type):
    /// `true` when the decode has ended well (the rows still in `self.rows`
    /// are zero, as in Pillow's zero-initialised image), `false` to go on.
    ///
    /// # Errors
    /// `KimiError::Decode` where `ZipDecode.c` fails: a zlib error, an
    /// unknown filter type, or the reads running out first.
    fn step(&mut self, sink: &mut impl FnMut(&RawRow, &[u8]) -> bool) -> Result<bool, KimiError> {
        if self.input.0 == self.input.1 {
            let Some(read) = self.reads.next(&self.idat) else {
                return Err(fail(self.ran_out.as_str()));
            };
            (self.input, self.completed) = (read, false);
        }
        let Some(&r) = self.rows.peek() else {
            return Ok(true);
        };
        let data = self.data;
        let input = &data[self.input.0..self.input.1];
        // After a bulk call that ended on the end of a row it wrote, read on
        // with no room first, as Pillow's call that filled the row would (a
        // bulk call that wrote no whole row is Pillow's call of its row: the
        // next one goes on with room for the row).
        let lookahead = self.row_end;
        self.bulk = (input.len() > 1 && !lookahead)
            .then(|| bulk_room(self.rows.clone(), self.buf.len()))
            .flatten();
        let (given, room) = match self.bulk {
            Some(room) => (input.len() - 1, room),
            None if lookahead => (input.len(), self.filled),
            None => (input.len(), r.len + 1),
        };
        let (read, written) = (self.z.total_in(), self.z.total_out());
        let status = self.z.decompress(
            &input[..given],
            &mut self.buf[self.filled..room],
            InflateFlush::NoFlush,
        );
        self.input.0 += (self.z.total_in() - read) as usize;
        self.filled += (self.z.total_out() - written) as usize;
        let (stream_end, broken) = match status {
            Ok(Status::Ok) => (false, false),
            Ok(Status::StreamEnd) => (true, false),
            // Nothing to read with no room (a symbol already waits for it).
            Ok(Status::BufError) if lookahead => (false, false),
            // zlib's `Z_NEED_DICT` (2) is no error to `ZipDecode.c`: no
            // row ever completes, so the reads run out.
            Err(InflateError::NeedDict { .. }) => {
                self.input.0 = self.input.1;
                return Ok(false);
            }
            Ok(Status::BufError) | Err(_) => (false, true),
        };
        // The rows this call completed that Pillow's calls of one row each
        // would have unfiltered (and checked the filter type of) by now.
        // `ZipDecode.c` unfilters a row only once `inflate` has returned from
        // the call that filled it, and zlib reads on in that call after the
        // row, with no room, to the next byte it must write, the end of the
        // read, the end of the stream or an error (`if (err < 0) ... return
        // -1` comes before `Apply predictor`): every row zlib wrote a byte
        // past is unfiltered; one that ends where this call stopped is not
        // when its own call meets an error there, unless zlib meets that
        // error only with room to write (a match's distance too far back: the
        // next row's call). Nor is it yet after a bulk call, given all but the
        // read's last byte, that stopped there short of the stream's end: it
        // waits for the call with no room that reads on (`row_end`), whose
        // error would be the failure, not its filter type.
        let own_call = if broken {
            self.z.error_message() != Some("invalid distance too far back")
        } else {
            self.bulk.is_some() && !stream_end
        };
        let done = if own_call {
            self.filled.saturating_sub(1)
        } else {
            self.filled
        };
        let mut at = 0;
        while let Some(&r) = self.rows.peek().filter(|r| done - at > r.len) {
            if !sink(&r, &self.buf[at..=at + r.len]) {
                return Err(fail(
                    "unrecognized data stream contents when reading image file",
                ));
            }
            (at, self.completed) = (at + r.len + 1, true);
            self.rows.next();
        }
        if broken {
            return Err(fail("broken data stream when reading image file"));
        }
        self.buf.copy_within(at..self.filled, 0);
        self.filled -= at;
        self.row_end = own_call && self.rows.peek().is_some_and(|r| self.filled == r.len + 1);
        if self.rows.peek().is_none() || (stream_end && self.filled == 0 && self.completed) {
            return Ok(true);
        }
        if stream_end || (self.bulk.is_none() && !lookahead && at == 0) {
            // `ZipDecode.c`: a call of one row that did not complete it (it
            // wrote nothing, or ran out of input) ends the read; what is left
            // of it is never read. A call that completed its row goes on
            // while the read lasts, even when zlib completed the row from bits
            // it held and left the read's byte unread.
            self.input.0 = self.input.1;
        }
        Ok(false)
    }
}

/// Decode a PNG whose [`route`] was `Route::Native(header)` into `out`
/// (`header.decoded_len()` bytes, HWC, rows top to bottom): the bytes of
/// `np.asarray(Image.open(...))`.
///
/// `ZipDecode.c` as `ImageFile.load` drives it: zlib's inflate is called with
/// each of Pillow's reads of the `IDAT` data and room for the rest of one
/// filtered row, again while the read lasts; a row that completes is
/// unfiltered (Adam7 rows scattered into place). Decoding ends well when the
/// last row completes, or when the call that completes a row also reaches the
/// end of the zlib stream (the rows below stay zero); it fails at any zlib
/// error (including one zlib meets after the last row's bytes, in the symbols
/// it reads while it fills the row), at an unknown filter type, or when the
/// reads run out first. Chunk CRCs after the first `IDAT` are not checked, as
/// Pillow checks none.
///
/// Room for one row at a time matters only at the end of a read (zlib stops
/// at a row's end with a decoded symbol waiting when the read is used up, so
/// the next row completes in the next read, or never) and for the last row
/// (zlib reads on after it only as far as the read goes). Elsewhere, before
/// the last byte of a read and short of the last row, a call gets room for
/// up to 64 KiB of rows: zlib decodes the same symbols from the same
/// bits whatever the room, so the same rows complete in the same reads and the
/// same errors are met. Where such a call ends on a row's end, a call with no
/// room reads on first, as Pillow's call that filled the row would, and the
/// row is unfiltered after it (an error it meets comes first). A stream
/// end then counts where a row completed in the same read with nothing written
/// since (the call that completes a row reads on to the end of the stream
/// while its read lasts). `limits` has nothing for PNG; memory: 64 KiB
/// (or a row), two rows for Adam7, and zlib's 32 KiB window.
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
    let mut inflater = Inflater::new(data, header)?;
    let mut sink = Sink::new(out, header, inflater.interlaced);
    while !inflater.step(&mut |r, filtered| sink.row(r, filtered))? {}
    // The rows not decoded stay zero, as in Pillow's zero-initialised image.
    inflater.rows.for_each(|r| sink.zero(&r));
    Ok(())
}

/// A PNG whose [`route`] was `Route::Native(header)`, decoded a few rows at a
/// time, in order ([`Decoder::read`]): the rows of `np.asarray(Image.open(...))`
/// (`width * channels` bytes each), each as its inflate call completes it
/// ([`decode_into`]'s calls), so that a caller can use each band as it comes.
/// An interlaced file's rows are known only once its last pass is in: it is
/// decoded whole first.
pub struct Decoder<'a> {
    inflater: Inflater<'a>,
    /// Bytes of a row.
    stride: usize,
    channels: usize,
    /// The last row unfiltered (zeros before the first): the row above the
    /// next; kept up to date at the end of each inflate call.
    above: Vec<u8>,
    /// Rows unfiltered past the end of a read, not yet read, from byte `taken` on.
    ready: Vec<u8>,
    taken: usize,
    /// The decode has ended: the rows not unfiltered are zero.
    ended: bool,
}

impl std::fmt::Debug for Decoder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder").finish_non_exhaustive()
    }
}

impl<'a> Decoder<'a> {
    /// Walk the chunks; an interlaced file is decoded whole here.
    ///
    /// # Errors
    /// As [`decode_into`]: `KimiError::Decode` when the file does not match
    /// `header`; interlaced, for its decode's errors, and
    /// `KimiError::DecodeAllocation` when its pixels cannot be allocated.
    pub fn new(data: &'a [u8], header: &Header) -> Result<Self, KimiError> {
        let inflater = Inflater::new(data, header)?;
        let stride = header.width * header.channels;
        let mut decoder = Self {
            stride,
            channels: header.channels,
            above: vec![0; stride],
            ready: Vec::new(),
            taken: 0,
            ended: false,
            inflater,
        };
        if decoder.inflater.interlaced {
            decoder.ready =
                try_buffer(header.decoded_len()?).map_err(|e| header.allocation_failed(e))?;
            decode_into(data, header, &Limits::default(), &mut decoder.ready)?;
            decoder.ended = true;
        }
        Ok(decoder)
    }

    /// The next `out.len() / (width * channels)` rows into `out` (whole rows,
    /// no more than are left), all written. After an error the decoder must
    /// not be read again.
    ///
    /// # Errors
    /// As [`decode_into`].
    pub fn read(&mut self, out: &mut [u8]) -> Result<(), KimiError> {
        let mut at = 0;
        while at < out.len() {
            if self.taken < self.ready.len() {
                let n = (out.len() - at).min(self.ready.len() - self.taken);
                out[at..at + n].copy_from_slice(&self.ready[self.taken..self.taken + n]);
                (at, self.taken) = (at + n, self.taken + n);
            } else if self.ended {
                out[at..].fill(0);
                break;
            } else {
                // The rows of one inflate call: straight into `out` while it has
                // room, the rest into `ready`; each unfiltered against the row
                // before it, wherever that is.
                self.ready.clear();
                self.taken = 0;
                let (stride, c, first) = (self.stride, self.channels, at);
                let (ready, above) = (&mut self.ready, &self.above);
                self.ended = self.inflater.step(&mut |_, filtered| {
                    let (filter, raw) = (filtered[0], &filtered[1..]);
                    if at < out.len() {
                        let (before, rest) = out.split_at_mut(at);
                        let up = if at > first {
                            &before[at - stride..]
                        } else {
                            &above[..]
                        };
                        at += stride;
                        return unfilter(filter, raw, up, &mut rest[..stride], c);
                    }
                    let start = ready.len();
                    ready.resize(start + stride, 0);
                    let (before, row) = ready.split_at_mut(start);
                    let up = match start {
                        0 if at > first => &out[at - stride..at],
                        0 => &above[..],
                        _ => &before[start - stride..],
                    };
                    unfilter(filter, raw, up, row, c)
                })?;
                // The last row unfiltered is the row above the next.
                match self.ready.len() {
                    0 if at > first => self.above.copy_from_slice(&out[at - stride..at]),
                    0 => {}
                    n => self.above.copy_from_slice(&self.ready[n - stride..]),
                }
            }
        }
        Ok(())
    }
}

/// Where `decode_into` puts each row it unfilters: straight into the image
/// (the row above is the image row before it), or for Adam7 into a row of its
/// pass (the row above is the pass's row before it), then into place.
struct Sink<'a> {
    out: &'a mut [u8],
    c: usize,
    stride: usize,
    interlaced: bool,
    /// The row above a pass's first.
    zeros: Vec<u8>,
    /// Adam7: this row of the pass, and the one before it.
    cur: Vec<u8>,
    prev: Vec<u8>,
}

impl<'a> Sink<'a> {
    fn new(out: &'a mut [u8], header: &Header, interlaced: bool) -> Self {
        let stride = header.width * header.channels;
        let pass_row = if interlaced { stride } else { 0 };
        Self {
            out,
            c: header.channels,
            stride,
            interlaced,
            zeros: vec![0; stride],
            cur: vec![0; pass_row],
            prev: vec![0; pass_row],
        }
    }

    /// Unfilter row `r` (`filtered`: its filter byte, then its bytes) into
    /// place; false for an unknown filter type.
    fn row(&mut self, r: &RawRow, filtered: &[u8]) -> bool {
        let (filter, raw) = (filtered[0], &filtered[1..]);
        if !self.interlaced {
            let (before, rest) = self.out.split_at_mut(r.y * self.stride);
            let above = if r.first {
                &self.zeros[..]
            } else {
                &before[before.len() - self.stride..]
            };
            return unfilter(filter, raw, above, &mut rest[..self.stride], self.c);
        }
        let above = if r.first {
            &self.zeros[..r.len]
        } else {
            &self.prev[..r.len]
        };
        if !unfilter(filter, raw, above, &mut self.cur[..r.len], self.c) {
            return false;
        }
        let line = &mut self.out[r.y * self.stride..][..self.stride];
        place(line, r, self.c, Some(&self.cur[..r.len]));
        std::mem::swap(&mut self.cur, &mut self.prev);
        true
    }

    /// Zeros where row `r`'s pixels go.
    fn zero(&mut self, r: &RawRow) {
        place(
            &mut self.out[r.y * self.stride..][..self.stride],
            r,
            self.c,
            None,
        );
    }
}

/// Put the pixels of row `r` (`bytes`, or zeros for `None`) into `line`, the
/// image row it belongs to (`c` bytes a pixel).
fn place(line: &mut [u8], r: &RawRow, c: usize, bytes: Option<&[u8]>) {
    match bytes {
        Some(bytes) if r.dx == 1 => line.copy_from_slice(bytes),
        None if r.dx == 1 => line.fill(0),
        _ => {
            let pixels = line[r.x0 * c..].chunks_mut(r.dx * c).take(r.len / c);
            for (j, px) in pixels.enumerate() {
                match bytes {
                    Some(bytes) => px[..c].copy_from_slice(&bytes[j * c..][..c]),
                    None => px[..c].fill(0),
                }
            }
        }
    }
}

/// Undo PNG filter `filter` on `raw` into `dst` given the row above, as
/// `ZipDecode.c`'s predictors do (`bpp` bytes a pixel, 1 to 4); false for an
/// unknown filter type.
fn unfilter(filter: u8, raw: &[u8], above: &[u8], dst: &mut [u8], bpp: usize) -> bool {
    match bpp {
        1 => unfilter_pixels::<1, 1>(filter, raw, above, dst),
        2 => unfilter_pixels::<2, 2>(filter, raw, above, dst),
        3 => unfilter_pixels::<3, 4>(filter, raw, above, dst),
        4 => unfilter_pixels::<4, 4>(filter, raw, above, dst),
        _ => false,
    }
}

/// [`unfilter`] for `B` bytes a pixel (lengths multiples of `B`).
fn unfilter_pixels<const B: usize, const L: usize>(
    filter: u8,
    raw: &[u8],
    above: &[u8],
    dst: &mut [u8],
) -> bool {
    match filter {
        0 => dst.copy_from_slice(raw),
        1 => predict::<B, L>(raw, above, dst, |a, _, _| a),
        2 => {
            for ((d, &x), &b) in dst.iter_mut().zip(raw).zip(above) {
                *d = x.wrapping_add(b);
            }
        }
        3 => predict::<B, L>(raw, above, dst, |a, b, _| (a + b) / 2),
        4 => predict::<B, L>(raw, above, dst, paeth),
        _ => return false,
    }
    true
}

/// `dst` = `raw` plus `predictor(a, b, c)`, one pixel of `B` bytes at a time,
/// from the byte to its left (`a`, in `dst`), above (`b`) and above-left
/// (`c`). A pixel is held in `L >= B` lanes (those past `B` stay zero) so that
/// its arithmetic fits one vector register.
fn predict<const B: usize, const L: usize>(
    raw: &[u8],
    above: &[u8],
    dst: &mut [u8],
    predictor: impl Fn(i16, i16, i16) -> i16,
) {
    let pixels = dst.as_chunks_mut::<B>().0.iter_mut();
    let pixels = pixels
        .zip(raw.as_chunks::<B>().0)
        .zip(above.as_chunks::<B>().0);
    let (mut a, mut c) = ([0i16; L], [0i16; L]);
    for ((px, x), up) in pixels {
        let mut b = [0i16; L];
        for k in 0..B {
            b[k] = i16::from(up[k]);
        }
        let mut pred = [0i16; L];
        for k in 0..L {
            pred[k] = predictor(a[k], b[k], c[k]);
        }
        for k in 0..B {
            px[k] = x[k].wrapping_add(pred[k] as u8);
            a[k] = i16::from(px[k]);
        }
        c = b;
    }
}

/// `ZipDecode.c`'s Paeth predictor: the one of `a`, `b`, `c` closest to
/// `a + b - c`, ties to `a`, then `b`. Computed as stb_image does, without
/// branches: `a + b - c` is nearest the smaller of `a` and `b` below
/// `3c - (a + b)`, the larger above it, else `c` (the test checks every
/// triple against the definition).
fn paeth(a: i16, b: i16, c: i16) -> i16 {
    let threshold = 3 * c - (a + b);
    let (lo, hi) = (a.min(b), a.max(b));
    let t = if hi <= threshold { lo } else { c };
    if threshold <= lo {
        hi
    } else {
        t
    }
}

#[cfg(test)]
mod tests;
