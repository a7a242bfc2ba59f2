//! JPEG through the libjpeg-turbo that the installed Pillow links, loaded at
//! run time ([`load`]), decoded as Pillow's `ImageFile.load` does.
//!
//! [`route`] reads the markers up to the first SOS the way
//! `PIL/JpegImagePlugin.py` (`JpegImageFile._open` and its `SOF`, `DQT`,
//! `APP` handlers) does, so a file Pillow cannot open goes to Pillow (which
//! raises its own error), and the native header is the size and mode Pillow
//! gives. [`decode_into`] runs
//! the library with the settings of `libImaging/JpegDecode.c` (see
//! `libjpeg.rs`), so the pixels are Pillow's by construction.

mod libjpeg;

use std::path::Path;
use std::sync::OnceLock;

use super::{
    Format, Header, Limits, Route, JPEG_PASSES, JPEG_PASSES_PER_BYTE, MAX_JPEG_BLOCKS_PER_BYTE,
    MAX_SCANS,
};
use crate::buffers::try_unwritten;
use crate::error::{abbreviate, KimiError};

/// The library [`load`] opened first, or why it could not.
static LIB: OnceLock<Result<libjpeg::Api, String>> = OnceLock::new();

/// Load the libjpeg at `path` (the one the installed Pillow links) for this
/// process; later calls return the first result, whatever their `path`.
/// Returns a description of the library, e.g. `"libjpeg-turbo version 3.2.0
/// (build 20261016) (libjpeg API 6.2) at /.../libjpeg-6dc8d115.so.62.4.0"`.
///
/// The library is checked by creating and destroying one decompress object
/// (`jpeg_CreateDecompress` refuses another API version or struct size).
///
/// # Errors
/// Why it cannot be used: not loadable, not libjpeg (a `jpeg_*` entry point is
/// missing), not libjpeg-turbo (no `jpeg_skip_scanlines`), without unwind
/// tables (`.eh_frame`, which its error exit needs), not API 6.2.
pub fn load(path: &Path) -> Result<String, String> {
    match LIB.get_or_init(|| libjpeg::Api::open(path)) {
        Ok(api) => Ok(api.description.clone()),
        Err(e) => Err(e.clone()),
    }
}

fn corrupt(detail: &str) -> KimiError {
    KimiError::Decode {
        format: "JPEG",
        detail: abbreviate(detail),
    }
}

/// The frame header (SOFn, or DHP, which Pillow reads with the same handler).
#[derive(Clone, Copy)]
struct Frame {
    code: u8,
    width: usize,
    height: usize,
    layers: u8,
    /// The first `layers` components the segment lists, of which `listed` are
    /// there (fewer when it is short: libjpeg then refuses the file, Pillow
    /// opens it; the cost model counts the listed ones).
    components: [Component; 4],
    listed: u8,
}

/// A frame component: its id and sampling factors (clamped to libjpeg's 1..=4).
#[derive(Clone, Copy, Default)]
struct Component {
    id: u8,
    h: u8,
    v: u8,
}

impl Frame {
    fn components(&self) -> impl Iterator<Item = &Component> {
        self.components.iter().take(usize::from(self.listed))
    }

    /// The 8x8 blocks of component `c`: libjpeg's `width_in_blocks *
    /// height_in_blocks` (`jdinput.c: initial_setup`), the blocks a scan of it
    /// alone passes over.
    fn blocks(&self, c: &Component) -> u64 {
        let max = |f: fn(&Component) -> u8| u64::from(self.components().map(f).max().unwrap_or(1));
        let side =
            |pixels: usize, f: u8, fmax: u64| (pixels as u64 * u64::from(f)).div_ceil(fmax * 8);
        side(self.width, c.h, max(|c| c.h)) * side(self.height, c.v, max(|c| c.v))
    }

    /// The blocks of every component.
    fn all_blocks(&self) -> u64 {
        self.components().map(|c| self.blocks(c)).sum()
    }
}

/// Read a JPEG's headers: see [`super::route`].
///
/// Walks the markers from SOI to the first SOS as `JpegImageFile._open` does
/// (`headers`); a file Pillow cannot open or load from its headers goes to
/// Pillow there, so that Pillow itself raises its error. Then
/// reads the scans over the whole file and bounds what decoding them costs
/// (`check_cost`), whichever decoder will run it. Native only for one
/// SOF0/SOF1/SOF2 frame of 8 bits with 1 (`L`) or 3 (`RGB`) components and a
/// non-zero size, no MPF (MPO) segment, and, when `exif_transpose`, no APP1.
///
/// # Errors
/// `KimiError::TooManyScans` for a progressive file of more than [`MAX_SCANS`]
/// scans; `KimiError::JpegDataMissing` / `KimiError::JpegScanWork` for a file
/// over the cost model's bounds. A header fault is no error here: the file goes
/// to Pillow, which raises its own (its decode is never reached, so the cost
/// bounds need not apply).
pub fn route(data: &[u8], exif_transpose: bool) -> Result<Route, KimiError> {
    let walked = match headers(data) {
        Ok(walked) => walked,
        Err(reason) => return Ok(Route::Pillow(reason)),
    };
    let frame = walked.frame;
    let progressive = matches!(frame.code, 0xC2 | 0xC6 | 0xCA | 0xCE);
    let limit = if progressive { MAX_SCANS } else { usize::MAX };
    let scans = scan_work(data, walked.first_scan, walked.scan_start, &frame, limit)?;
    check_cost(&frame, &scans, data.len())?;
    Ok(match pillow_reason(&walked, exif_transpose) {
        Some(reason) => Route::Pillow(reason),
        None => Route::Native(Header {
            format: Format::Jpeg,
            width: frame.width,
            height: frame.height,
            channels: usize::from(frame.layers),
        }),
    })
}

/// What [`headers`] read up to the first SOS.
struct Walked<'a> {
    /// The last frame header.
    frame: Frame,
    /// How many frame headers there were.
    frames: usize,
    /// An APP1 segment (EXIF or XMP) was seen.
    app1: bool,
    /// An MPF segment was seen.
    mpo: bool,
    /// The EXIF has a resolution Pillow may fail to read ([`odd_resolution`]).
    odd_resolution: bool,
    /// The first SOS segment's body, and where its entropy-coded data starts.
    first_scan: &'a [u8],
    scan_start: usize,
}

/// Walk the markers from SOI to the first SOS as `JpegImageFile._open` does
/// (junk bytes skipped, `FFFF` padding, `FF00`, bare markers).
///
/// # Errors
/// Why the file goes to Pillow before its scans are read: where Pillow's
/// `Image.open` fails (`FF01`..`FFBF`: "no marker found"; a cut in a marker's
/// length, a short JFIF/Adobe/ICC/SOF/DQT segment, a malformed Photoshop block,
/// no SOF before SOS, a frame precision other than 8 bits or a component count
/// other than 1, 3 or 4: `UnidentifiedImageError`; a cut inside a segment:
/// "Truncated File Read"), and where it opens the file but cannot load it (no
/// SOS: "cannot load this image"). The reason of a fault reads
/// `"Pillow fails: ..."`; a frame precision or component count Pillow refuses
/// keeps the reason it has for a native decoder ("JPEG precision is not 8
/// bits").
fn headers(data: &[u8]) -> Result<Walked<'_>, &'static str> {
    if !data.starts_with(&[0xFF, 0xD8, 0xFF]) {
        return Err("Pillow fails: not a JPEG file");
    }
    let mut pos = 3;
    let mut byte = Some(0xFF);
    let next = |pos: &mut usize| {
        let b = data.get(*pos).copied();
        *pos += 1;
        b
    };
    let (mut frame, mut frames) = (None::<Frame>, 0usize);
    let (mut app1, mut mpo) = (false, false);
    let mut icc: Vec<&[u8]> = Vec::new();
    let mut exif: Vec<u8> = Vec::new();
    let (first_scan, scan_start) = loop {
        let Some(b) = byte else {
            return Err("Pillow fails: no SOS marker before the end of the data");
        };
        if b != 0xFF {
            byte = next(&mut pos);
            continue;
        }
        let Some(code) = next(&mut pos) else {
            return Err("Pillow fails: no SOS marker before the end of the data");
        };
        match code {
            0xFF => continue,
            0x01..=0xBF => return Err("Pillow fails: no marker found"),
            0x00 | 0xC8 | 0xD0..=0xD9 | 0xF0..=0xFD => {
                byte = next(&mut pos);
                continue;
            }
            _ => {}
        }
        let len = data
            .get(pos..pos + 2)
            .ok_or("Pillow fails: truncated marker length")?;
        pos += 2;
        let n = usize::from(u16::from_be_bytes([len[0], len[1]])).saturating_sub(2);
        let s = data
            .get(pos..pos + n)
            .ok_or("Pillow fails: truncated marker segment")?;
        pos += n;
        match code {
            0xDA => break (s, pos),
            0xDB => dqt(s)?,
            0xE0 if s.starts_with(b"JFIF") && s.len() < 7 => {
                return Err("Pillow fails: short JFIF segment")
            }
            0xE1 => {
                app1 = true;
                // Pillow's `info["exif"]`: the first Exif segment, then the others' bodies.
                if let Some(body) = s.strip_prefix(b"Exif\0\0") {
                    exif.extend_from_slice(if exif.is_empty() { s } else { body });
                }
            }
            0xE2 if s.starts_with(b"MPF\0") => mpo = true,
            0xE2 if s.starts_with(b"ICC_PROFILE\0") => icc.push(s),
            0xED if s.starts_with(b"Photoshop 3.0\0") => photoshop(s)?,
            0xEE if s.starts_with(b"Adobe") && s.len() < 7 => {
                return Err("Pillow fails: short Adobe segment")
            }
            0xC0..=0xC3 | 0xC5..=0xC7 | 0xC9..=0xCB | 0xCD..=0xCF | 0xDE => {
                if s.len() < 5 {
                    return Err("Pillow fails: short SOF segment");
                }
                if s[0] != 8 {
                    return Err("JPEG precision is not 8 bits");
                }
                let &layers = s.get(5).ok_or("Pillow fails: short SOF segment")?;
                if !matches!(layers, 1 | 3 | 4) {
                    return Err("JPEG with other than 1, 3 or 4 components");
                }
                // Pillow's ICC fix-up reads byte 13 of the smallest fragment.
                if icc.iter().min().is_some_and(|first| first.len() < 14) {
                    return Err("Pillow fails: short ICC profile fragment");
                }
                icc.clear();
                if (s.len() - 6) % 3 != 0 {
                    return Err("Pillow fails: bad SOF component list");
                }
                let be = |i: usize| usize::from(u16::from_be_bytes([s[i], s[i + 1]]));
                let mut components = [Component::default(); 4];
                let mut listed = 0;
                for (c, t) in components.iter_mut().zip(s[6..].chunks_exact(3)) {
                    *c = Component {
                        id: t[0],
                        h: (t[1] >> 4).clamp(1, 4),
                        v: (t[1] & 15).clamp(1, 4),
                    };
                    listed += 1;
                }
                frame = Some(Frame {
                    code,
                    width: be(3),
                    height: be(1),
                    layers,
                    components,
                    listed: listed.min(layers),
                });
                frames += 1;
            }
            _ => {}
        }
        byte = next(&mut pos);
    };
    Ok(Walked {
        frame: frame.ok_or("Pillow fails: no SOF marker before SOS")?,
        frames,
        app1,
        mpo,
        odd_resolution: odd_resolution(&exif),
        first_scan,
        scan_start,
    })
}

/// Why a file whose headers Pillow reads is left to Pillow, if it is (with
/// `exif_transpose`, every file with an APP1 segment: its orientation).
fn pillow_reason(walked: &Walked<'_>, exif_transpose: bool) -> Option<&'static str> {
    let frame = walked.frame;
    Some(match frame.code {
        _ if walked.frames > 1 => "JPEG with several frame headers",
        0xC3 | 0xC7 | 0xCB | 0xCF => "lossless JPEG",
        0xC9..=0xCF => "arithmetic-coded JPEG",
        0xC5 | 0xC6 | 0xDE => "hierarchical JPEG",
        _ if frame.layers == 4 => "CMYK JPEG",
        _ if frame.width == 0 || frame.height == 0 => "JPEG of zero width or height (DNL)",
        _ if walked.mpo => "MPO (JPEG with an MPF segment)",
        _ if exif_transpose && walked.app1 => "EXIF/XMP orientation",
        _ if walked.odd_resolution => "EXIF resolution other than one rational",
        _ => return None,
    })
}

/// Whether `exif` (Pillow's `info["exif"]`: the first Exif APP1 segment, then
/// the others' bodies) may make Pillow's `Image.open` fail: when no JFIF
/// density gives the dpi, `JpegImageFile._read_dpi_from_exif` reads IFD0's
/// XResolution (tag `0x011A`) and divides its items 0 and 1; one that is not a
/// single RATIONAL is read as a number (a `TypeError` Pillow catches), or as
/// bytes or a string (BYTE, UNDEFINED, ASCII), where fewer than two items raise
/// an `IndexError` it does not catch ("cannot identify image file"). Such a
/// file goes to Pillow, which opens it or fails itself.
///
/// Reads as `Image.Exif.load` and `TiffImagePlugin.ImageFileDirectory_v2.load`
/// do: up to two `Exif\0\0` prefixes dropped, a classic TIFF header (a header
/// Pillow refuses or an IFD0 cut short ends the reading, as Pillow catches
/// those), then IFD0's 12-byte entries; a header Pillow may read as BigTIFF
/// goes to Pillow too.
fn odd_resolution(exif: &[u8]) -> bool {
    let mut data = exif;
    for _ in 0..2 {
        data = data.strip_prefix(b"Exif\0\0").unwrap_or(data);
    }
    let big_endian = match data.get(..4) {
        Some(b"MM\x00\x2a" | b"MM\x2a\x00") => true,
        Some(b"II\x2a\x00" | b"II\x00\x2a") => false,
        Some(b"MM\x00\x2b" | b"II\x2b\x00") => return true,
        _ => return false,
    };
    // The unsigned integer of `N` bytes at `at`, in the header's byte order.
    let int = |at: usize, n: usize| {
        let bytes = data.get(at..at + n)?;
        let fold = |v: usize, &b: &u8| v << 8 | usize::from(b);
        Some(if big_endian {
            bytes.iter().fold(0, fold)
        } else {
            bytes.iter().rev().fold(0, fold)
        })
    };
    let Some(ifd) = int(4, 4) else {
        return false;
    };
    let entries = int(ifd, 2).unwrap_or(0);
    (0..entries)
        .map_while(|i| {
            let at = ifd + 2 + 12 * i;
            // tag, type, count; an entry cut short ends the IFD
            int(at + 11, 1)?;
            Some((int(at, 2)?, int(at + 2, 2)?, int(at + 4, 4)?))
        })
        .any(|(tag, kind, count)| tag == 0x011A && (kind, count) != (5, 1))
}

/// `JpegImagePlugin.DQT`: every table must be complete (else Pillow fails).
fn dqt(mut s: &[u8]) -> Result<(), &'static str> {
    while let Some(&v) = s.first() {
        let table = 1 + if v >> 4 == 0 { 64 } else { 128 };
        s = s
            .get(table..)
            .ok_or("Pillow fails: bad quantization table marker")?;
    }
    Ok(())
}

/// `JpegImagePlugin.APP` on a Photoshop APP13: a block cut inside its name
/// length is an `IndexError` (Pillow fails to open), other cuts end the parse.
fn photoshop(s: &[u8]) -> Result<(), &'static str> {
    let mut at = 14usize;
    while s.get(at..at + 4) == Some(b"8BIM") {
        let Some(code) = s.get(at + 4..at + 6) else {
            return Ok(());
        };
        let &name = s
            .get(at + 6)
            .ok_or("Pillow fails: malformed Photoshop segment")?;
        at += 7 + usize::from(name);
        at += at & 1;
        let Some(size) = s.get(at..at + 4) else {
            return Ok(());
        };
        let size = u32::from_be_bytes([size[0], size[1], size[2], size[3]]) as usize;
        at += 4;
        let block = s.get(at..).unwrap_or_default();
        if code == [0x03, 0xED] && block.len().min(size) < 14 {
            return Ok(());
        }
        at = at.saturating_add(size).min(s.len() + 1);
        at += at & 1;
    }
    Ok(())
}

/// What a JPEG's scans cost: their number, and the block passes they make
/// (each scan passes over every block of the components it lists).
#[derive(Debug, PartialEq, Eq)]
struct Scans {
    count: usize,
    passes: u64,
}

/// The scans of `frame`: the first SOS segment's body `first`, then every SOS
/// from `pos` (just past the first) to EOI or the end of the data, skipping
/// entropy-coded bytes (`FF00` stuffing, RSTn) and the segments between scans,
/// as libjpeg's marker reader does.
///
/// # Errors
/// `KimiError::TooManyScans` on the scan after the `limit`th.
fn scan_work(
    data: &[u8],
    first: &[u8],
    mut pos: usize,
    frame: &Frame,
    limit: usize,
) -> Result<Scans, KimiError> {
    // SOS: Ns, then (component id, tables) per component.
    let passes = |body: &[u8]| -> u64 {
        let listed = body.get(1..).unwrap_or_default();
        let ids = listed
            .chunks_exact(2)
            .take(usize::from(body.first().copied().unwrap_or(0)));
        ids.filter_map(|pair| frame.components().find(|c| c.id == pair[0]))
            .map(|c| frame.blocks(c))
            .sum()
    };
    let mut scans = Scans {
        count: 1,
        passes: passes(first),
    };
    while let Some(rest) = data.get(pos..) {
        let Some(i) = memchr::memchr(0xFF, rest) else {
            break;
        };
        let at = pos + i;
        match data.get(at + 1) {
            None | Some(0xD9) => break,
            Some(0xFF) => pos = at + 1,
            Some(0x00 | 0x01 | 0xD0..=0xD8) => pos = at + 2,
            Some(&code) => {
                let Some(len) = data.get(at + 2..at + 4) else {
                    break;
                };
                let end = at + 2 + usize::from(u16::from_be_bytes([len[0], len[1]]));
                if code == 0xDA {
                    scans.count += 1;
                    if scans.count > limit {
                        return Err(KimiError::TooManyScans {
                            scans: scans.count,
                            limit,
                        });
                    }
                    scans.passes +=
                        passes(data.get(at + 4..end.min(data.len())).unwrap_or_default());
                }
                pos = end;
            }
        }
    }
    Ok(scans)
}

/// The JPEG cost model's bounds, against the file's `bytes`:
/// - at most [`MAX_JPEG_BLOCKS_PER_BYTE`] blocks per byte: a complete file
///   codes every block in at least one bit (its DC, in a Huffman code of one
///   bit or more), so a file with more blocks is mostly missing data, which
///   libjpeg decodes at full cost (a buffer of every block's coefficients for
///   a progressive file, then every pixel). Huffman-coded files only: an
///   arithmetic-coded one (SOF9..SOF15) codes a flat area in less than a bit a
///   block (a blank 512x512 page in 302 bytes), so only the bound below and
///   the decoded-bytes bound (Python's `_check_header`) apply to it;
/// - at most [`JPEG_PASSES`] block passes, or [`JPEG_PASSES_PER_BYTE`] per
///   byte where that allows more: a scan costs a pass over each of its blocks
///   (up to 50 ns each: a refinement scan checks the band's coefficients of
///   every block) however few bytes it holds, and real files make a few
///   passes per block (libjpeg's progression 6 for luma, mozjpeg's 5).
///
/// # Errors
/// `KimiError::JpegDataMissing`, `KimiError::JpegScanWork`.
fn check_cost(frame: &Frame, scans: &Scans, bytes: usize) -> Result<(), KimiError> {
    let blocks = frame.all_blocks();
    let size = bytes as u64;
    let arithmetic = matches!(frame.code, 0xC9..=0xCB | 0xCD..=0xCF);
    if !arithmetic && blocks > size.saturating_mul(MAX_JPEG_BLOCKS_PER_BYTE) {
        return Err(KimiError::JpegDataMissing {
            width: frame.width,
            height: frame.height,
            blocks,
            bytes,
        });
    }
    let limit = JPEG_PASSES.max(size.saturating_mul(JPEG_PASSES_PER_BYTE));
    if scans.passes > limit {
        return Err(KimiError::JpegScanWork {
            width: frame.width,
            height: frame.height,
            scans: scans.count,
            passes: scans.passes,
            limit,
            bytes,
        });
    }
    Ok(())
}

/// A JPEG whose [`route`] was `Route::Native(header)`, decoded a few rows at a
/// time, in order ([`Decoder::read`]): the rows of `np.asarray(Image.open(BytesIO(data)))`
/// (`L` or `RGB`, `width * channels` bytes each), so that a caller can use
/// each band as it comes and never hold the image whole. [`decode_into`]
/// reads all the rows at once.
pub struct Decoder<'a> {
    reader: libjpeg::Reader<'a>,
    limits: Limits,
    shape: (usize, usize, usize),
}

impl std::fmt::Debug for Decoder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder")
            .field("shape", &self.shape)
            .finish()
    }
}

impl<'a> Decoder<'a> {
    /// Read the headers and start the decompression (a progressive file's
    /// scans are all read here).
    ///
    /// # Errors
    /// As [`decode_into`], for the faults met before the first row.
    pub fn new(data: &'a [u8], header: &Header, limits: &Limits) -> Result<Self, KimiError> {
        let (api, shape) = library_for(header)?;
        let reader = libjpeg::Reader::start(api, data, shape, limits.max_scans)
            .map_err(|fault| error(fault, limits, shape))?;
        Ok(Self {
            reader,
            limits: *limits,
            shape,
        })
    }

    /// The next `out.len() / (width * channels)` rows into `out` (whole rows,
    /// no more than are left), all written. After an error the decoder must
    /// not be read again.
    ///
    /// # Errors
    /// As [`decode_into`]; `KimiError::Decode` when `out` is not whole rows
    /// or asks past the last row.
    pub fn read(&mut self, out: &mut [u8]) -> Result<(), KimiError> {
        self.reader
            .read(libjpeg::writable(out))
            .map_err(|fault| error(fault, &self.limits, self.shape))
    }

    /// Go past the next `rows` rows (fewer than are left) without decoding
    /// them whole (`jpeg_skip_scanlines`: their entropy-coded data is read,
    /// nothing else done): the rows read after are the ones [`Decoder::read`]
    /// gives after reading these. Costs a little over half a read of them
    /// for a [`single_scan`](Self::single_scan) file, next to nothing for
    /// another (decoded whole when the decoder was made).
    ///
    /// # Errors
    /// As [`Decoder::read`] (data that runs out on the way: "image file is
    /// truncated"); `KimiError::Decode` when `rows` are not fewer than are left.
    pub fn skip(&mut self, rows: usize) -> Result<(), KimiError> {
        self.reader
            .skip(rows)
            .map_err(|fault| error(fault, &self.limits, self.shape))
    }

    /// Whether the file is one scan of every component, entropy-decoded as
    /// its rows are read (a progressive or non-interleaved file was decoded
    /// whole when the decoder was made).
    #[must_use]
    pub fn single_scan(&self) -> bool {
        self.reader.single_scan()
    }
}

/// The error of a library fault met decoding a file of `shape` (width,
/// height, channels) under `limits`: Pillow's message where Pillow's decode
/// fails too (`libImaging/JpegDecode.c` turns libjpeg's `error_exit` into
/// `IMAGING_CODEC_BROKEN`, which `ImageFile.load` raises as "broken data
/// stream when reading image file"; libjpeg's own message is not shown).
fn error(fault: libjpeg::Fault, limits: &Limits, shape: (usize, usize, usize)) -> KimiError {
    match fault {
        libjpeg::Fault::Lib(_) => corrupt("broken data stream when reading image file"),
        libjpeg::Fault::Truncated => corrupt("image file is truncated"),
        libjpeg::Fault::TooManyScans(scans) => KimiError::TooManyScans {
            scans,
            limit: limits.max_scans,
        },
        libjpeg::Fault::Mismatch(seen) => corrupt(&format!(
            "libjpeg reads (width, height, components) {seen}, the headers {shape:?}"
        )),
    }
}

/// Decode a JPEG whose [`route`] was `Route::Native(header)` into `out`
/// (`header.decoded_len()` bytes, rows of `width * channels`, `L` or `RGB`):
/// the bytes of `np.asarray(Image.open(BytesIO(data)))`, written row by row
/// straight into `out`.
///
/// # Errors
/// `KimiError::Decode` when no libjpeg is loaded, for data libjpeg refuses
/// ("broken data stream when reading image file", Pillow's), for data that ends before the last row ("image file is truncated",
/// where Pillow raises too; data missing after the last row, e.g. EOI, is fine,
/// as in Pillow), or when the library's header disagrees with `header`;
/// `KimiError::TooManyScans` when the decode passes `limits.max_scans` scans.
pub fn decode_into(
    data: &[u8],
    header: &Header,
    limits: &Limits,
    out: &mut [u8],
) -> Result<(), KimiError> {
    let (api, shape) = library_for(header)?;
    libjpeg::decode(api, data, shape, limits.max_scans, libjpeg::writable(out))
        .map_err(|fault| error(fault, limits, shape))
}

/// [`decode_into`] a new vector of `header.decoded_len()` bytes, which are
/// not zeroed first (libjpeg writes every one before this returns them:
/// zeroing the 144 MB of an 8000x6000 photo would add a tenth to its decode).
///
/// # Errors
/// As [`decode_into`]; `KimiError::DecodeAllocation` when the memory cannot
/// be had.
pub fn decode_image(data: &[u8], header: &Header, limits: &Limits) -> Result<Vec<u8>, KimiError> {
    let (api, shape) = library_for(header)?;
    let mut out = try_unwritten(header.decoded_len()?).map_err(|e| header.allocation_failed(e))?;
    libjpeg::decode_to_vec(api, data, shape, limits.max_scans, &mut out)
        .map_err(|fault| error(fault, limits, shape))?;
    Ok(out)
}

/// The loaded library and the `(width, height, channels)` of `header`.
///
/// # Errors
/// `KimiError::Decode` when no libjpeg is loaded, or `header` is not a JPEG's
/// of `L` or `RGB` pixels.
fn library_for(
    header: &Header,
) -> Result<(&'static libjpeg::Api, (usize, usize, usize)), KimiError> {
    let Some(Ok(api)) = LIB.get() else {
        return Err(corrupt("no libjpeg loaded"));
    };
    if header.format != Format::Jpeg || !matches!(header.channels, 1 | 3) {
        return Err(corrupt("native JPEG decoding gives L or RGB only"));
    }
    Ok((api, (header.width, header.height, header.channels)))
}

#[cfg(test)]
mod tests;
