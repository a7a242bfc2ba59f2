//! Native decoding of encoded JPEG and PNG files into the pipeline's 8-bit
//! input, byte-identical to the installed Pillow's decode.
//!
//! Reproduces what the checkpoint's `_to_pil` (`Image.open(...)`, first frame,
//! no EXIF rotation) and Pillow's `ImageFile.load` give for the files it
//! handles: `PIL/JpegImagePlugin.py` + `libImaging/JpegDecode.c` for JPEG,
//! `PIL/PngImagePlugin.py` + `libImaging/ZipDecode.c` for PNG. Anything else
//! is routed to Pillow ([`Route::Pillow`]): a file is decoded natively only
//! where the result is Pillow's by construction.
//!
//! Laid out by format: `jpeg.rs` (libjpeg-turbo, loaded at run time from the
//! library the installed Pillow links) and `png.rs` (zlib's inflate, the
//! `zlib-rs` port, called as Pillow's `ZipDecode.c` calls it).

pub mod jpeg;
pub mod png;

use crate::buffers::AllocFailed;
use crate::error::KimiError;

/// An encoded format this module may decode natively.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// JPEG (SOI marker `FF D8 FF`).
    Jpeg,
    /// PNG (the 8-byte PNG signature).
    Png,
}

impl Format {
    /// The format of `data` from its magic bytes, as Pillow's plugins accept it
    /// (`JpegImagePlugin._accept`, `PngImagePlugin._accept`); `None` otherwise.
    #[must_use]
    pub fn sniff(data: &[u8]) -> Option<Self> {
        if data.starts_with(&[0xFF, 0xD8, 0xFF]) {
            Some(Self::Jpeg)
        } else if data.starts_with(b"\x89PNG\r\n\x1a\n") {
            Some(Self::Png)
        } else {
            None
        }
    }

    /// Pillow's name of the format: `"JPEG"` or `"PNG"`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Jpeg => "JPEG",
            Self::Png => "PNG",
        }
    }
}

/// What a native decode will produce, read from the file's headers only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The format.
    pub format: Format,
    /// Width in pixels (>= 1).
    pub width: usize,
    /// Height in pixels (>= 1).
    pub height: usize,
    /// Bytes per decoded pixel, as Pillow's mode: 1 `L`, 2 `LA`, 3 `RGB`, 4 `RGBA`.
    pub channels: usize,
}

impl Header {
    /// `width * height * channels`: the bytes [`decode_into`] writes.
    ///
    /// # Errors
    /// `KimiError::Overflow` when the product overflows `usize`.
    pub fn decoded_len(&self) -> Result<usize, KimiError> {
        self.width
            .checked_mul(self.height)
            .and_then(|n| n.checked_mul(self.channels))
            .ok_or(KimiError::Overflow {
                what: "decoded image bytes",
            })
    }
}

impl Header {
    /// `KimiError::DecodeAllocation`: the buffer for the decoded pixels (or
    /// a chunk of their rows) could not be had.
    pub(crate) fn allocation_failed(&self, e: AllocFailed) -> KimiError {
        KimiError::DecodeAllocation {
            width: self.width,
            height: self.height,
            channels: self.channels,
            reason: format!("out of memory ({} bytes)", e.bytes),
        }
    }
}

/// Where a file is decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Natively, into the pixels its header describes.
    Native(Header),
    /// By Pillow, for the reason given (a mode, bit depth or feature the native
    /// path does not reproduce, e.g. `"CMYK JPEG"`, `"palette PNG"`).
    Pillow(&'static str),
}

/// Bounds a native decode must respect, checked from the header before any
/// allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most progressive-JPEG scans a file may have (500 by default).
    pub max_scans: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_scans: MAX_SCANS,
        }
    }
}

/// Default most scans of a progressive JPEG.
pub const MAX_SCANS: usize = 500;

/// Most 8x8 blocks (all components) a JPEG may have per byte of its file. A
/// complete JPEG codes every block in at least one bit, so only a file whose
/// data is mostly missing has more (libjpeg decodes the missing blocks, at
/// full cost: a 146-byte 13377x13377 progressive RGB file took 3 s and 1.5 GB).
pub const MAX_JPEG_BLOCKS_PER_BYTE: u64 = 8;

/// Block passes (a scan passes over every block of its components) any JPEG
/// may make, whatever its size: 2^23, under half a second (a pass of a
/// refinement scan costs up to 50 ns).
pub const JPEG_PASSES: u64 = 1 << 23;

/// Block passes a JPEG may make per byte of its file, where that allows more
/// than [`JPEG_PASSES`]. Real files make a few passes per block (libjpeg's
/// progression 5.3 for 4:2:0, 6 for grey; mozjpeg's fewer) and spend at least
/// one bit on each block, two with libjpeg's DC refinement, so even blank ones
/// stay under 64 a byte; a 500-scan file of 8192x8192 grey (16.6 KB, half a
/// billion passes, 2.6 s) is far over.
pub const JPEG_PASSES_PER_BYTE: u64 = 64;

/// Read `data`'s headers and say where it is decoded.
///
/// `exif_transpose`: the caller will apply `ImageOps.exif_transpose`; a file
/// that may carry an orientation (EXIF or XMP) then goes to Pillow.
///
/// A file of a native format whose headers Pillow fails on (corrupt or
/// truncated) is `Route::Pillow`, its reason `"Pillow fails: ..."`: Pillow
/// then raises its own error. A JPEG's header faults are all found before its
/// first scan, where Pillow's `Image.open` fails (or, without a scan, its
/// `load`), so no decode runs that the JPEG cost bounds would have refused.
///
/// # Errors
/// For a JPEG over the cost model's bounds ([`MAX_SCANS`],
/// [`MAX_JPEG_BLOCKS_PER_BYTE`], [`JPEG_PASSES`], [`JPEG_PASSES_PER_BYTE`]),
/// whichever decoder will run it, `KimiError::TooManyScans`,
/// `KimiError::JpegDataMissing` or `KimiError::JpegScanWork`.
pub fn route(data: &[u8], exif_transpose: bool) -> Result<Option<Route>, KimiError> {
    match Format::sniff(data) {
        Some(Format::Jpeg) => jpeg::route(data, exif_transpose).map(Some),
        Some(Format::Png) => Ok(Some(png::route(data, exif_transpose))),
        None => {
            // Pillow decodes the JPEG inside a BLP1 file with its JPEG plugin:
            // the same cost bounds apply to it (its other faults are Pillow's).
            if let Some(stream) = blp1_jpeg_stream(data) {
                if let Err(
                    e @ (KimiError::TooManyScans { .. }
                    | KimiError::JpegDataMissing { .. }
                    | KimiError::JpegScanWork { .. }),
                ) = jpeg::route(&stream, false)
                {
                    return Err(e);
                }
            }
            Ok(None)
        }
    }
}

/// The JPEG stream that Pillow decodes for a BLP1 file of JPEG compression:
/// the JPEG header stored after the mipmap tables, then the first mipmap's
/// bytes (`PIL/BlpImagePlugin.py: BLP1Decoder._decode_jpeg_stream`, which
/// reads from the header's end when the mipmap offset lies before it, and what
/// is there of a truncated mipmap). `None` for any other file.
fn blp1_jpeg_stream(data: &[u8]) -> Option<Vec<u8>> {
    let u32_at = |at: usize| {
        let bytes = data.get(at..at + 4)?;
        Some(u32::from_le_bytes(<[u8; 4]>::try_from(bytes).ok()?) as usize)
    };
    // magic, compression (0: JPEG), alpha, width, height, encoding, subtype,
    // then 16 mipmap offsets and 16 lengths, then the JPEG header's size.
    if !data.starts_with(b"BLP1") || u32_at(4)? != 0 {
        return None;
    }
    let (offset, length, header_len) = (u32_at(28)?, u32_at(92)?, u32_at(156)?);
    let header_end = 160usize.checked_add(header_len)?;
    let header = data.get(160..header_end)?;
    let start = offset.max(header_end).min(data.len());
    let end = start.saturating_add(length).min(data.len());
    Some([header, &data[start..end]].concat())
}

/// A file whose [`route`] was `Route::Native(header)`, decoded a few rows at
/// a time, in order: [`jpeg::Decoder`] or [`png::Decoder`]. The rows are
/// [`decode_into`]'s.
#[derive(Debug)]
pub enum Decoder<'a> {
    /// A JPEG's rows.
    Jpeg(jpeg::Decoder<'a>),
    /// A PNG's rows (boxed: its inflate state is large).
    Png(Box<png::Decoder<'a>>),
}

impl<'a> Decoder<'a> {
    /// Start decoding `data`, whose route was `Route::Native(header)`.
    ///
    /// # Errors
    /// As [`decode_into`], for the faults met before the first row.
    pub fn new(data: &'a [u8], header: &Header, limits: &Limits) -> Result<Self, KimiError> {
        Ok(match header.format {
            Format::Jpeg => Self::Jpeg(jpeg::Decoder::new(data, header, limits)?),
            Format::Png => Self::Png(Box::new(png::Decoder::new(data, header)?)),
        })
    }

    /// The next `out.len() / (width * channels)` rows into `out` (whole rows,
    /// no more than are left), all written. After an error the decoder must
    /// not be read again.
    ///
    /// # Errors
    /// As [`decode_into`].
    pub fn read(&mut self, out: &mut [u8]) -> Result<(), KimiError> {
        match self {
            Self::Jpeg(d) => d.read(out),
            Self::Png(d) => d.read(out),
        }
    }

    /// A decoder of `data` whose next row is `row` or an earlier one (the row
    /// it returns): a JPEG's skips to `row` ([`jpeg::Decoder::skip`]), a
    /// PNG's starts at the first row (its rows are known only in order).
    ///
    /// # Errors
    /// As [`Decoder::new`]; for a JPEG, as [`jpeg::Decoder::skip`].
    pub fn at_row(
        data: &'a [u8],
        header: &Header,
        limits: &Limits,
        row: usize,
    ) -> Result<(Self, usize), KimiError> {
        Ok(match Self::new(data, header, limits)? {
            Self::Jpeg(mut d) if row > 0 => {
                d.skip(row)?;
                (Self::Jpeg(d), row)
            }
            decoder => (decoder, 0),
        })
    }

    /// Whether starting at a row ([`Decoder::at_row`]) saves most of the
    /// work of the rows before it: a JPEG of one scan, whose rows skipped
    /// are entropy-decoded only. Not a PNG's, nor a JPEG's of several
    /// scans (decoded whole at the start).
    #[must_use]
    pub fn skips_rows(&self) -> bool {
        matches!(self, Self::Jpeg(d) if d.single_scan())
    }
}

/// Decode `data`, whose [`route`] was `Route::Native(header)`, into a new
/// vector of `header.decoded_len()` bytes (HWC): the bytes Pillow's decode
/// gives. A JPEG is decoded into memory not zeroed first
/// ([`jpeg::decode_image`]), a PNG into zeroed memory ([`png::decode_image`]).
///
/// # Errors
/// As [`decode_into`]; `KimiError::DecodeAllocation` when the memory cannot
/// be had.
pub fn decode_image(data: &[u8], header: &Header, limits: &Limits) -> Result<Vec<u8>, KimiError> {
    match header.format {
        Format::Jpeg => jpeg::decode_image(data, header, limits),
        Format::Png => png::decode_image(data, header, limits),
    }
}

/// Decode `data`, whose [`route`] was `Route::Native(header)`, into `out`
/// (`header.decoded_len()` bytes, HWC): the bytes Pillow's decode gives.
///
/// # Errors
/// `KimiError::Decode` for corrupt or truncated data, or a JPEG while no
/// libjpeg is loaded ([`jpeg::load`]); `KimiError::TooManyScans` as for [`route`].
pub fn decode_into(
    data: &[u8],
    header: &Header,
    limits: &Limits,
    out: &mut [u8],
) -> Result<(), KimiError> {
    match header.format {
        Format::Jpeg => jpeg::decode_into(data, header, limits, out),
        Format::Png => png::decode_into(data, header, limits, out),
    }
}
