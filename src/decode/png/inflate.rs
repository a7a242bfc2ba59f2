//! The decode of a PNG whose [`route`](super::route) was native:
//! `libImaging/ZipDecode.c` as `ImageFile.load` drives it (see the module
//! above): [`decode_into`] all the rows at once, [`Decoder`] a few at a time,
//! both through the resumable [`Inflater`], which calls zlib-rs's inflate as
//! Pillow calls zlib's.

use zlib_rs::{Inflate, InflateError, InflateFlush, Status};

use super::{fail, reads_run_out, verdict, walk, WINDOW_BITS};
use crate::buffers::try_buffer;
use crate::decode::{Format, Header, Limits, Route};
use crate::error::KimiError;

/// `ImageFile.decodermaxblock`: Pillow hands the zlib decoder at most this
/// many bytes of one `IDAT` chunk at a time.
const READ_BLOCK: usize = 65536;
/// Bytes of filtered rows inflated by one call in bulk (see [`decode_into`]).
const BULK: usize = 1 << 16;

/// The Adam7 passes as (first column, first row, column step, row step).
#[rustfmt::skip]
pub(super) const ADAM7: [(usize, usize, usize, usize); 7] =
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
    /// The decode of `data`, a PNG whose [`route`](super::route) was `Route::Native(header)`.
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
        let own_call = !broken && self.bulk.is_some() && !stream_end;
        let filled = self.filled;
        let mut at = 0;
        while let Some(&r) = self.rows.peek().filter(|r| filled - at > r.len) {
            let ends_here = at + r.len + 1 == filled;
            if ends_here && (own_call || broken && !self.error_needs_room()) {
                break;
            }
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

    /// zlib met the last call's error only with room to write: a match's
    /// distance too far back, which it checks in `MATCH` once it has room (it
    /// meets every other error reading on with none). zlib-rs gives an error
    /// met in its `inflate_fast` (entered with 260 bytes of room or more and
    /// 15 of input) the message "repeated call with bad state" (its mode
    /// loop, seeing `BAD`, writes over zlib's), so such an error is met again
    /// here, in the stream inflated from its start 256 bytes a call, which
    /// `inflate_fast` never takes.
    fn error_needs_room(&self) -> bool {
        const TOO_FAR: &str = "invalid distance too far back";
        if self.z.error_message() != Some("repeated call with bad state") {
            return self.z.error_message() == Some(TOO_FAR);
        }
        let mut z = Inflate::new(true, WINDOW_BITS);
        let mut out = [0u8; 256];
        for &(start, end) in &self.idat {
            let mut input = &self.data[start..end];
            loop {
                let read = z.total_in();
                let status = z.decompress(input, &mut out, InflateFlush::NoFlush);
                input = &input[(z.total_in() - read) as usize..];
                match status {
                    Ok(Status::Ok) => {}
                    // Nothing more from this chunk.
                    Ok(Status::BufError) => break,
                    Err(InflateError::DataError) => return z.error_message() == Some(TOO_FAR),
                    Ok(Status::StreamEnd) | Err(_) => return false,
                }
            }
        }
        false
    }
}

/// Decode a PNG whose [`route`](super::route) was `Route::Native(header)` into `out`
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

/// [`decode_into`] a new vector of `header.decoded_len()` bytes (zeroed
/// first: rows are unfiltered in place, through a `&mut [u8]`).
///
/// # Errors
/// As [`decode_into`]; `KimiError::DecodeAllocation` when the memory cannot
/// be had.
pub fn decode_image(data: &[u8], header: &Header, limits: &Limits) -> Result<Vec<u8>, KimiError> {
    let mut out = try_buffer(header.decoded_len()?).map_err(|e| header.allocation_failed(e))?;
    decode_into(data, header, limits, &mut out)?;
    Ok(out)
}

/// A PNG whose [`route`](super::route) was `Route::Native(header)`, decoded a few rows at a
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
            decoder.ready = decode_image(data, header, &Limits::default())?;
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
pub(super) fn unfilter(filter: u8, raw: &[u8], above: &[u8], dst: &mut [u8], bpp: usize) -> bool {
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
pub(super) fn paeth(a: i16, b: i16, c: i16) -> i16 {
    let threshold = 3 * c - (a + b);
    let (lo, hi) = (a.min(b), a.max(b));
    let t = if hi <= threshold { lo } else { c };
    if threshold <= lo {
        hi
    } else {
        t
    }
}
