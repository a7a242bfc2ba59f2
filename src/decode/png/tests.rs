//! Routing and decoding of small PNGs built here: chunk by chunk (CRCs and
//! zlib from `crc32fast` / `miniz_oxide`, deflate bits written here), and
//! with the `png` crate's encoder.
//! What Pillow gives for each of these is checked in `tests/test_native_png.py`.

use super::inflate::{paeth, unfilter, ADAM7};
use super::*;
use crate::decode::Limits;

fn chunk(kind: &[u8; 4], body: &[u8]) -> Vec<u8> {
    let mut c = (body.len() as u32).to_be_bytes().to_vec();
    c.extend_from_slice(kind);
    c.extend_from_slice(body);
    c.extend_from_slice(&crc32fast::hash(&c[4..]).to_be_bytes());
    c
}

fn ihdr(w: u32, h: u32, depth: u8, color: u8, interlace: u8) -> Vec<u8> {
    let mut s = w.to_be_bytes().to_vec();
    s.extend_from_slice(&h.to_be_bytes());
    s.extend_from_slice(&[depth, color, 0, 0, interlace]);
    chunk(b"IHDR", &s)
}

/// A PNG of `pre` chunks, the zlib stream `z` in one IDAT, `post` chunks, IEND.
fn png(head: Vec<u8>, pre: &[Vec<u8>], z: &[u8], post: &[Vec<u8>]) -> Vec<u8> {
    let mut f = b"\x89PNG\r\n\x1a\n".to_vec();
    f.extend(head);
    pre.iter().for_each(|c| f.extend(c));
    f.extend(chunk(b"IDAT", z));
    post.iter().for_each(|c| f.extend(c));
    f.extend(chunk(b"IEND", b""));
    f
}

/// Pixels with every byte distinct-ish, `w * h * c` bytes.
fn pixels(w: usize, h: usize, c: usize) -> Vec<u8> {
    (0..w * h * c).map(|i| (i * 7 + i / 5) as u8).collect()
}

/// Filter-0 rows of `px` (`w * c` bytes each), zlib-compressed.
fn zrows(px: &[u8], w: usize, c: usize) -> Vec<u8> {
    let raw: Vec<u8> = px
        .chunks(w * c)
        .flat_map(|r| std::iter::once(0).chain(r.iter().copied()))
        .collect();
    miniz_oxide::deflate::compress_to_vec_zlib(&raw, 6)
}

/// An 8-bit PNG of `px` (colour type `color`, `c` channels), not interlaced.
fn plain(
    w: usize,
    h: usize,
    color: u8,
    c: usize,
    pre: &[Vec<u8>],
    post: &[Vec<u8>],
) -> (Vec<u8>, Vec<u8>) {
    let px = pixels(w, h, c);
    (
        png(
            ihdr(w as u32, h as u32, 8, color, 0),
            pre,
            &zrows(&px, w, c),
            post,
        ),
        px,
    )
}

/// `decode_into` of a native file; checked against the same file read by a
/// [`Decoder`] 1, 3 and 64 rows at a time (the same bytes, or the same error).
fn decode(file: &[u8]) -> Result<Vec<u8>, KimiError> {
    let Route::Native(h) = route(file, false) else {
        panic!("not native")
    };
    let mut out = vec![0xAA; h.decoded_len()?];
    let whole = decode_into(file, &h, &Limits::default(), &mut out).map(|()| out);
    for rows in [1, 3, 64] {
        let read = || -> Result<Vec<u8>, KimiError> {
            let mut decoder = Decoder::new(file, &h)?;
            let mut got = vec![0x55; h.decoded_len()?];
            for piece in got.chunks_mut(rows * h.width * h.channels) {
                decoder.read(piece)?;
            }
            Ok(got)
        };
        assert_eq!(read(), whole, "{rows} rows a read");
    }
    whole
}

/// Pillow fails on `file`'s chunk list: it goes to Pillow, which raises.
fn pillow_fails(file: &[u8]) -> bool {
    matches!(route(file, false), Route::Pillow(why) if why.starts_with("Pillow fails: "))
}

fn reason(file: &[u8], exif_transpose: bool) -> &'static str {
    match route(file, exif_transpose) {
        Route::Pillow(why) => why,
        other => panic!("expected a Pillow route, got {other:?}"),
    }
}

#[test]
fn every_colour_type_and_depth_routes_as_pillow_reads_it() {
    let native = [((8, 0), 1), ((8, 4), 2), ((8, 2), 3), ((8, 6), 4)];
    for ((depth, color), channels) in native {
        let f = png(ihdr(5, 3, depth, color, 0), &[], b"", &[]);
        let want = Header {
            format: Format::Png,
            width: 5,
            height: 3,
            channels,
        };
        assert_eq!(route(&f, false), Route::Native(want));
        let f = png(ihdr(5, 3, depth, color, 1), &[], b"", &[]);
        assert_eq!(route(&f, false), Route::Native(want), "Adam7");
    }
    let pillow = [
        ((1, 0), "1/2/4-bit grey PNG"),
        ((2, 0), "1/2/4-bit grey PNG"),
        ((4, 0), "1/2/4-bit grey PNG"),
        ((16, 0), "16-bit PNG"),
        ((16, 2), "16-bit PNG"),
        ((16, 4), "16-bit PNG"),
        ((16, 6), "16-bit PNG"),
        ((1, 3), "palette PNG"),
        ((2, 3), "palette PNG"),
        ((4, 3), "palette PNG"),
        ((8, 3), "palette PNG"),
    ];
    for ((depth, color), why) in pillow {
        assert_eq!(
            reason(&png(ihdr(5, 3, depth, color, 0), &[], b"", &[]), false),
            why
        );
    }
    // Not in PngImagePlugin._MODES: Pillow cannot open these.
    for (depth, color) in [(3, 0), (4, 2), (8, 1), (16, 3), (2, 4), (8, 7)] {
        assert!(pillow_fails(&png(
            ihdr(5, 3, depth, color, 0),
            &[],
            b"",
            &[]
        )));
    }
    assert!(pillow_fails(&png(ihdr(0, 3, 8, 2, 0), &[], b"", &[])));
}

#[test]
fn trns_goes_to_pillow_for_grey_and_rgb_only() {
    let t = [chunk(b"tRNS", &[0, 0, 0, 1, 0, 2])];
    assert_eq!(reason(&plain(4, 2, 2, 3, &t, &[]).0, false), "tRNS");
    assert_eq!(reason(&plain(4, 2, 0, 1, &t[..], &[]).0, false), "tRNS");
    assert_eq!(
        reason(&plain(4, 2, 2, 3, &[], &t).0, false),
        "tRNS",
        "after IDAT"
    );
    // Pillow ignores tRNS for LA / RGBA.
    let (f, px) = plain(4, 2, 6, 4, &t, &[]);
    assert_eq!(decode(&f).unwrap(), px);
}

#[test]
fn orientation_chunks_go_to_pillow_only_with_exif_transpose() {
    let exif = chunk(b"eXIf", b"MM\0*\0\0\0\x08\0\0");
    let xmp = chunk(
        b"iTXt",
        b"XML:com.adobe.xmp\0\0\0\0\0<x tiff:Orientation=\"6\"/>",
    );
    let raw = chunk(
        b"zTXt",
        &[
            b"Raw profile type exif\0\0".as_slice(),
            &miniz_oxide::deflate::compress_to_vec_zlib(b"x", 6),
        ]
        .concat(),
    );
    for c in [
        &exif,
        &xmp,
        &raw,
        &chunk(b"tEXt", b"XML:com.adobe.xmp\0<x/>"),
    ] {
        for (pre, post) in [
            (std::slice::from_ref(c), &[][..]),
            (&[][..], std::slice::from_ref(c)),
        ] {
            let (f, px) = plain(3, 2, 2, 3, pre, post);
            assert_eq!(reason(&f, true), "EXIF/XMP orientation");
            assert_eq!(decode(&f).unwrap(), px);
        }
    }
    let (f, _) = plain(3, 2, 2, 3, &[chunk(b"tEXt", b"Comment\0hi")], &[]);
    assert!(matches!(route(&f, true), Route::Native(_)));
}

#[test]
fn apng_frame_zero_is_native_when_it_is_the_whole_idat_image() {
    let actl = chunk(b"acTL", &[0, 0, 0, 2, 0, 0, 0, 0]);
    let fctl = |seq: u32, w: u32, h: u32, x: u32| {
        let mut s = [seq, w, h, x, 0]
            .iter()
            .flat_map(|v| v.to_be_bytes())
            .collect::<Vec<u8>>();
        s.extend_from_slice(&[0, 1, 0, 100, 0, 0]);
        chunk(b"fcTL", &s)
    };
    let next = [fctl(1, 4, 2, 0), chunk(b"fdAT", &[0, 0, 0, 2, 1, 2, 3])];
    // The IDAT is the default image (no fcTL before it) or frame 0 (a full fcTL).
    for pre in [vec![actl.clone()], vec![actl.clone(), fctl(0, 4, 2, 0)]] {
        let (f, px) = plain(4, 2, 6, 4, &pre, &next);
        assert_eq!(decode(&f).unwrap(), px);
    }
    let (f, _) = plain(4, 2, 6, 4, &[actl.clone(), fctl(0, 2, 2, 1)], &next);
    assert_eq!(reason(&f, false), "APNG frame 0 smaller than the image");
    let (f, _) = plain(4, 2, 6, 4, &[actl, fctl(1, 4, 2, 0)], &[]);
    assert!(pillow_fails(&f), "frame sequence error");
}

#[test]
fn cut_or_corrupt_headers_go_to_pillow_which_fails() {
    let (f, _) = plain(4, 2, 2, 3, &[chunk(b"gAMA", &[0, 0, 0xB1, 0x8F])], &[]);
    let idat = f.windows(4).position(|w| w == b"IDAT").unwrap() - 4;
    for cut in 0..idat + 8 {
        assert!(pillow_fails(&f[..cut]), "cut at {cut}");
    }
    for at in [8 + 4, 8 + 9, 8 + 8 + 13, idat - 2] {
        let mut g = f.clone();
        g[at] ^= 0x80; // IHDR type (not a chunk type then) / data / CRC, gAMA CRC
        assert!(pillow_fails(&g), "flip at {at}");
    }
    // After the first IDAT Pillow checks no CRC; a cut chunk there fails.
    let (mut g, px) = plain(4, 2, 2, 3, &[], &[chunk(b"tEXt", b"a\0b")]);
    let at = g.len() - 13;
    g[at] ^= 1;
    assert_eq!(decode(&g).unwrap(), px);
    let (g, _) = plain(4, 2, 2, 3, &[], &[chunk(b"tEXt", b"a\0bcd")]);
    assert!(pillow_fails(&g[..g.len() - 18]));
    assert!(
        matches!(route(&g[..g.len() - 16], false), Route::Native(_)),
        "only the CRC cut"
    );
}

#[test]
fn decode_matches_zipdecode_on_checksums_and_early_ends() {
    let (w, h) = (5, 4);
    let px = pixels(w, h, 3);
    let z = zrows(&px, w, 3);
    let file = |z: &[u8]| png(ihdr(w as u32, h as u32, 8, 2, 0), &[], z, &[]);
    assert_eq!(decode(&file(&z)).unwrap(), px);
    // Adler-32 wrong: zlib reports it with the last row.
    let mut bad = z.clone();
    *bad.last_mut().unwrap() ^= 1;
    assert!(decode(&file(&bad)).is_err());
    // A stream ending on a row boundary: the rows below are zero.
    let two = zrows(&px[..2 * w * 3], w, 3);
    let mut want = px[..2 * w * 3].to_vec();
    want.resize(px.len(), 0);
    assert_eq!(decode(&file(&two)).unwrap(), want);
    // ... but not inside a row, and not before the first row.
    let mut raw: Vec<u8> = px[..2 * w * 3]
        .chunks(w * 3)
        .flat_map(|r| [&[0u8][..], r].concat())
        .collect();
    raw.extend_from_slice(&[0, 1, 2, 3]);
    assert!(decode(&file(&miniz_oxide::deflate::compress_to_vec_zlib(&raw, 6))).is_err());
    assert!(decode(&file(&miniz_oxide::deflate::compress_to_vec_zlib(b"", 6))).is_err());
    // A header that does not match the file.
    let f = file(&z);
    let lie = Header {
        format: Format::Png,
        width: w,
        height: h,
        channels: 4,
    };
    assert!(decode_into(&f, &lie, &Limits::default(), &mut vec![0; w * h * 4]).is_err());
}

#[test]
fn encoder_written_files_round_trip() {
    for (color, c) in [
        (png::ColorType::Grayscale, 1),
        (png::ColorType::GrayscaleAlpha, 2),
        (png::ColorType::Rgb, 3),
        (png::ColorType::Rgba, 4),
    ] {
        let (w, h) = (33, 17);
        let px = pixels(w, h, c);
        let mut f = Vec::new();
        let mut enc = png::Encoder::new(&mut f, w as u32, h as u32);
        enc.set_color(color);
        enc.set_depth(png::BitDepth::Eight);
        enc.set_filter(png::Filter::Paeth);
        let mut writer = enc.write_header().unwrap();
        writer.write_image_data(&px).unwrap();
        writer.finish().unwrap();
        assert_eq!(decode(&f).unwrap(), px, "{color:?}");
    }
}

#[test]
fn adam7_rows_land_in_place() {
    let (w, h, c) = (11, 9, 3);
    let px = pixels(w, h, c);
    let mut raw = Vec::new();
    for &(x0, y0, dx, dy) in &ADAM7 {
        for y in (y0..h).step_by(dy) {
            if x0 < w {
                raw.push(0);
                (x0..w)
                    .step_by(dx)
                    .for_each(|x| raw.extend_from_slice(&px[(y * w + x) * c..][..c]));
            }
        }
    }
    let f = png(
        ihdr(w as u32, h as u32, 8, 2, 1),
        &[],
        &miniz_oxide::deflate::compress_to_vec_zlib(&raw, 6),
        &[],
    );
    assert_eq!(decode(&f).unwrap(), px);
}

#[test]
fn odd_chunks_go_to_pillow() {
    let cases: [(Vec<u8>, &str); 4] = [
        (chunk(b"cHRM", &[0; 28]), "unusual cHRM"),
        (chunk(b"ABCd", b"x"), "unknown critical chunk"),
        (
            chunk(
                b"iCCP",
                &[
                    b"p\0\0".as_slice(),
                    &miniz_oxide::deflate::compress_to_vec_zlib(&vec![0; 2 << 20], 6),
                ]
                .concat(),
            ),
            "large iCCP",
        ),
        (chunk(b"IHDR", &[0; 13]), "repeated IHDR"),
    ];
    for (c, why) in cases {
        assert_eq!(reason(&plain(3, 2, 2, 3, &[c], &[]).0, false), why);
    }
}

#[test]
fn a_stream_cut_after_its_last_row_decodes_as_zlib_would() {
    // Cut inside the last deflate bytes, the Adler-32 or the IDAT's CRC: where
    // every row is there ZipDecode.c succeeds (zlib decodes every symbol it
    // has, and fails only on what it reads): `tests/test_native_png.py` sweeps
    // the cuts of Pillow-written files against Pillow.
    let mut whole = 0;
    for (w, h, c, color) in [(41, 29, 3, 2), (7, 3, 1, 0), (30, 20, 4, 6), (13, 11, 2, 4)] {
        let (f, px) = plain(w, h, color, c, &[], &[]);
        let idat_end = f.len() - 12 - 4;
        for cut in idat_end - 8..=idat_end {
            match decode(&f[..cut]) {
                Ok(got) => {
                    assert_eq!(got, px);
                    whole += 1;
                }
                Err(e) => assert!(cut < idat_end - 4, "cut in the Adler-32 failed: {e}"),
            }
        }
        // Inside the pixel data (or, for a small file, before it: to Pillow,
        // which fails): an error, never a partial image.
        let cut = &f[..idat_end - 40.min(idat_end / 2)];
        assert!(pillow_fails(cut) || decode(cut).is_err());
    }
    assert!(whole > 4 * 5, "{whole}");
}

/// Deflate bits, least significant first (RFC 1951 3.1.1).
#[derive(Default)]
struct Bits {
    out: Vec<u8>,
    used: u32,
}

impl Bits {
    fn bit(&mut self, b: u32) {
        if self.used.is_multiple_of(8) {
            self.out.push(0);
        }
        if let Some(last) = self.out.last_mut() {
            *last |= ((b & 1) as u8) << (self.used % 8);
        }
        self.used += 1;
    }

    /// The low `n` bits of `v` (header fields, extra bits).
    fn bits(mut self, v: u32, n: u32) -> Self {
        (0..n).for_each(|i| self.bit(v >> i));
        self
    }

    /// A Huffman code of `n` bits, its most significant bit first.
    fn code(mut self, v: u32, n: u32) -> Self {
        (0..n).rev().for_each(|i| self.bit(v >> i));
        self
    }

    /// A symbol of the fixed literal/length code (RFC 1951 3.2.6).
    fn fixed(self, sym: u32) -> Self {
        match sym {
            0..=143 => self.code(0x30 + sym, 8),
            144..=255 => self.code(0x190 + sym - 144, 9),
            256..=279 => self.code(sym - 256, 7),
            _ => self.code(0xC0 + sym - 280, 8),
        }
    }

    /// Zero bits up to the next byte (a stored block's header).
    fn align(mut self) -> Self {
        while !self.used.is_multiple_of(8) {
            self.bit(0);
        }
        self
    }

    /// A block header: the last-block bit and the block type.
    fn block(self, last: bool, kind: u32) -> Self {
        self.bits(u32::from(last), 1).bits(kind, 2)
    }

    /// Literals `raw` in a fixed-code block, not the last.
    fn literals(self, raw: &[u8]) -> Self {
        raw.iter()
            .fold(self.block(false, 1), |b, &x| b.fixed(u32::from(x)))
    }
}

/// A zlib stream: header, the deflate bytes, then the Adler-32 of `raw`.
fn zlib(deflate: Bits, raw: &[u8]) -> Vec<u8> {
    let mut z = vec![0x78, 0x01];
    z.extend(deflate.out);
    z.extend(zlib_rs::adler32::adler32(1, raw).to_be_bytes());
    z
}

/// A 1x1 `LA` PNG of the zlib stream `z` cut into IDAT chunks at `cuts`.
fn la_pixel(z: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut f = b"\x89PNG\r\n\x1a\n".to_vec();
    f.extend(ihdr(1, 1, 8, 4, 0));
    let mut from = 0;
    for &to in cuts.iter().chain([z.len()].iter()) {
        f.extend(chunk(b"IDAT", &z[from..to]));
        from = to;
    }
    f.extend(chunk(b"IEND", b""));
    f
}

#[test]
fn the_issue_21_file_fails_as_zlib_reads_past_the_last_row() {
    // A 1x1 LA pixel, then a length code whose distance code is invalid: zlib
    // decodes that symbol while it fills the row; Pillow raises.
    let z = [
        0x78, 0x9c, 0x63, 0x98, 0x50, 0x06, 0x7f, 0x01, 0x99, 0x01, 0x07,
    ];
    let err = decode(&la_pixel(&z, &[])).unwrap_err();
    assert!(err.to_string().contains("broken data stream"), "{err}");
}

#[test]
fn what_follows_the_last_row_fails_where_zlib_reads_it() {
    let raw = [0u8, 200, 100]; // filter 0, grey 200, alpha 100
    let row = || Bits::default().literals(&raw);
    let end = |b: Bits| b.fixed(256).block(true, 1).fixed(256);
    // (deflate bits after the row, decodes): zlib reads on until a symbol needs
    // room for output, a block needs data copied, the stream ends, or the read ends.
    let cases: [(Bits, bool); 10] = [
        (end(row()), true),
        // A literal waits for room; nothing after it is read.
        (row().fixed(7).block(true, 3), true),
        // A match waits too, its distance unchecked (too far back here).
        (
            row().fixed(257).code(29, 5).bits(0, 13).block(true, 3),
            true,
        ),
        // An invalid distance or literal/length symbol is read.
        (row().fixed(257).code(30, 5), false),
        (row().fixed(286), false),
        // A block header is read: an invalid type, bad stored lengths, too many codes.
        (row().fixed(256).block(false, 3), false),
        (
            row()
                .fixed(256)
                .block(false, 0)
                .align()
                .bits(5, 16)
                .bits(5, 16),
            false,
        ),
        (row().fixed(256).block(false, 2).bits(30, 5), false),
        // An empty stored block is passed through.
        (
            row()
                .fixed(256)
                .block(false, 0)
                .align()
                .bits(0, 16)
                .bits(0xFFFF, 16)
                .block(true, 1)
                .fixed(256),
            true,
        ),
        // A data block waits for room.
        (
            row()
                .fixed(256)
                .block(false, 0)
                .align()
                .bits(1, 16)
                .bits(0xFFFE, 16)
                .bits(0xFF, 8)
                .block(true, 3),
            true,
        ),
    ];
    for (i, (bits, ok)) in cases.into_iter().enumerate() {
        let got = decode(&la_pixel(&zlib(bits, &raw), &[]));
        assert_eq!(got.is_ok(), ok, "case {i}: {got:?}");
        if let Ok(px) = got {
            assert_eq!(px, [200, 100], "case {i}");
        }
    }
}

#[test]
fn the_adler_32_counts_only_in_the_read_that_completes_the_last_row() {
    let raw = [0u8, 200, 100];
    let z = zlib(
        Bits::default()
            .literals(&raw)
            .fixed(256)
            .block(true, 1)
            .fixed(256),
        &raw,
    );
    let mut bad = z.clone();
    *bad.last_mut().unwrap() ^= 1;
    assert!(decode(&la_pixel(&bad, &[])).is_err());
    // The checksum in an IDAT chunk of its own: Pillow's read of the row's
    // chunk ends before it, and it stops at the last row.
    for f in [&z, &bad] {
        assert_eq!(decode(&la_pixel(f, &[z.len() - 4])).unwrap(), [200, 100]);
    }
    // Pillow's reads stop at chunk boundaries, empty chunks included.
    assert_eq!(decode(&la_pixel(&z, &[0, 2, 2, 5])).unwrap(), [200, 100]);
}

#[test]
fn a_stream_ending_on_a_row_boundary_ends_well_only_in_the_same_read() {
    // Two rows of a 1x2 L image; the stream ends after the first.
    let (head, raw) = (ihdr(1, 2, 8, 0, 0), [0u8, 77]);
    let z = zlib(
        Bits::default()
            .literals(&raw)
            .fixed(256)
            .block(true, 1)
            .fixed(256),
        &raw,
    );
    let file = |cuts: &[usize]| {
        let mut f = b"\x89PNG\r\n\x1a\n".to_vec();
        f.extend(head.clone());
        let mut from = 0;
        for &to in cuts.iter().chain([z.len()].iter()) {
            f.extend(chunk(b"IDAT", &z[from..to]));
            from = to;
        }
        f.extend(chunk(b"IEND", b""));
        f
    };
    assert_eq!(decode(&file(&[])).unwrap(), [77, 0]);
    // The stream's end in a later read than the row: zlib reports it with no
    // row completed, and the reads run out.
    let err = decode(&file(&[z.len() - 4])).unwrap_err();
    assert!(err.to_string().contains("image file is truncated"), "{err}");
}

#[test]
fn pillow_reads_of_64_kib_bound_what_zlib_reads_after_the_last_row() {
    // 81 rows of 808 grey pixels in a stored block ending at byte 65536 of the
    // IDAT data (2 header bytes + 5 block header bytes + 65529), then an
    // invalid block type. Pillow's first read ends with the last row; the
    // invalid block is in its second. One empty stored block in front moves
    // the last row into the second read: zlib then reads the bad block.
    let (w, h) = (808usize, 81usize);
    let raw: Vec<u8> = (0..h * (w + 1))
        .map(|i| if i % (w + 1) == 0 { 0 } else { (i % 251) as u8 })
        .collect();
    assert_eq!(raw.len(), 65529);
    let stored = |b: Bits, data: &[u8]| {
        let n = data.len() as u32;
        let mut b = b.block(false, 0).align().bits(n, 16).bits(!n & 0xFFFF, 16);
        b.out.extend_from_slice(data);
        b.used += 8 * n;
        b
    };
    for empty_first in [false, true] {
        let mut bits = Bits::default();
        if empty_first {
            bits = stored(bits, &[]);
        }
        let z = zlib(stored(bits, &raw).block(true, 3), &raw);
        let f = png(ihdr(w as u32, h as u32, 8, 0, 0), &[], &z, &[]);
        let got = decode(&f);
        assert_eq!(got.is_ok(), !empty_first, "{got:?}");
        if let Ok(px) = got {
            let want: Vec<u8> = raw.chunks(w + 1).flat_map(|r| r[1..].to_vec()).collect();
            assert_eq!(px, want);
        }
    }
}

#[test]
fn unknown_filter_types_fail_in_any_row() {
    // A 2x2 L image: row 0 unfiltered, row 1 "Up".
    let file = |raw: &[u8]| {
        let bits = Bits::default()
            .literals(raw)
            .fixed(256)
            .block(true, 1)
            .fixed(256);
        png(ihdr(2, 2, 8, 0, 0), &[], &zlib(bits, raw), &[])
    };
    assert_eq!(decode(&file(&[0, 1, 2, 2, 3, 4])).unwrap(), [1, 2, 4, 6]);
    for bad in [[5, 1, 2, 2, 3, 4], [0, 1, 2, 5, 3, 4]] {
        let err = decode(&file(&bad)).unwrap_err();
        assert!(
            err.to_string().contains("unrecognized data stream"),
            "{err}"
        );
    }
}

#[test]
fn a_rows_filter_type_is_checked_once_its_call_has_read_to_the_end_of_the_read() {
    // The first row(s) of a 3x5 L image (Adam7: 3x23), the last of filter type
    // 7, then an empty stored block and, in the read's last byte, a block
    // header: zlib reads it in the call that fills that row, before
    // `ZipDecode.c` checks the row's filter type. Of an invalid type it is the
    // failure (decoder fuzz, seed 260740027, cases PNG:25875 and PNG:20024).
    for (h, interlace, raw) in [(5, 0, &[0, 1, 2, 3, 7, 4, 5, 6][..]), (23, 1, &[7, 1][..])] {
        for (kind, message) in [(3, "broken data stream"), (0, "unrecognized data stream")] {
            let bits = Bits::default()
                .literals(raw)
                .fixed(256)
                .block(false, 0)
                .align()
                .bits(0, 16)
                .bits(0xFFFF, 16)
                .block(kind == 3, kind)
                .align();
            let mut z = vec![0x78, 0x01];
            z.extend(bits.out);
            let err = decode(&png(ihdr(3, h, 8, 0, interlace), &[], &z, &[])).unwrap_err();
            assert!(err.to_string().contains(message), "{h} {kind}: {err}");
        }
    }
}

#[test]
fn a_match_right_after_a_row_fails_as_with_room_for_one_row_in_zlibs_fast_path_too() {
    // The second filtered row of a 39x19 LA Adam7 image (decoder fuzz, seed 1,
    // case PNG:9928) or of a 40x20 L, of filter type 7, then a match whose
    // distance reaches back past the start (code 29) or whose distance code is
    // invalid (30), then 32 bytes zlib never decodes. Called with no room
    // after the row, zlib decodes the distance code but checks the distance
    // only with room: the row's filter type is the failure. A call of many
    // rows meets both in zlib-rs's `inflate_fast`, which gives both the same
    // message.
    for (w, h, color, c, interlace) in [(39usize, 19, 4, 2, 1), (40, 20, 0, 1, 0)] {
        let passes: &[_] = if interlace == 1 {
            &ADAM7
        } else {
            &[(0, 0, 1, 1)]
        };
        let lengths: Vec<usize> = passes
            .iter()
            .flat_map(|&(x0, y0, dx, dy)| {
                let n = w.saturating_sub(x0).div_ceil(dx) * c;
                (y0..h).step_by(dy).map(move |_| n)
            })
            .filter(|&n| n > 0)
            .collect();
        let mut raw = vec![0];
        raw.extend(pixels(lengths[0], 1, 1));
        raw.push(7);
        raw.extend(pixels(lengths[1], 1, 1));
        for (code, message) in [(29, "unrecognized data stream"), (30, "broken data stream")] {
            let bits = Bits::default()
                .literals(&raw)
                .fixed(257)
                .code(code, 5)
                .bits(0, 13);
            let z = zlib((0..32).fold(bits, |b, _| b.bits(0, 8)), &raw);
            let file = png(ihdr(w as u32, h as u32, 8, color, interlace), &[], &z, &[]);
            let err = decode(&file).unwrap_err();
            assert!(err.to_string().contains(message), "{w}x{h} {code}: {err}");
        }
    }
}

#[test]
fn compressed_text_is_too_large_where_pythons_zlib_leaves_input_over() {
    let z = |n: usize| miniz_oxide::deflate::compress_to_vec_zlib(&vec![b'x'; n], 6);
    // Exactly the limit: zlib reads the end of the stream while it fills the output.
    assert_eq!(inflated_len(&z(MAX_TEXT_CHUNK)), Some(MAX_TEXT_CHUNK));
    assert_eq!(inflated_len(&z(MAX_TEXT_CHUNK + 1)), None);
    assert_eq!(inflated_len(&z(100)), Some(100));
    // Corrupt: Pillow ignores the chunk (zlib.error).
    let mut bad = z(100);
    bad[2] ^= 0x06;
    assert!(inflated_len(&bad).is_some_and(|n| n < MAX_TEXT_CHUNK));
    assert_eq!(inflated_len(b""), Some(0));
}

#[test]
fn an_adam7_stream_ending_on_a_row_boundary_leaves_the_other_pixels_zero() {
    let (w, h, c) = (7, 6, 2);
    let px = pixels(w, h, c);
    let rows: Vec<(usize, Vec<usize>)> = ADAM7
        .iter()
        .filter(|&&(x0, ..)| x0 < w)
        .flat_map(|&(x0, y0, dx, dy)| {
            (y0..h)
                .step_by(dy)
                .map(move |y| (y, (x0..w).step_by(dx).collect()))
        })
        .collect();
    for done in 1..rows.len() {
        let mut raw = Vec::new();
        let mut want = vec![0u8; w * h * c];
        for (y, xs) in &rows[..done] {
            raw.push(0);
            for &x in xs {
                let at = (y * w + x) * c;
                raw.extend_from_slice(&px[at..at + c]);
                want[at..at + c].copy_from_slice(&px[at..at + c]);
            }
        }
        let z = miniz_oxide::deflate::compress_to_vec_zlib(&raw, 6);
        let f = png(ihdr(w as u32, h as u32, 8, 4, 1), &[], &z, &[]);
        assert_eq!(decode(&f).unwrap(), want, "{done} rows");
    }
}

#[test]
fn paeth_is_the_png_predictor_on_every_triple() {
    // `ZipDecode.c` (and the PNG specification): the nearest of a, b, c to
    // a + b - c, ties to a, then b.
    for a in 0..=255i16 {
        for b in 0..=255i16 {
            for c in 0..=255i16 {
                let (pa, pb, pc) = ((b - c).abs(), (a - c).abs(), (a + b - 2 * c).abs());
                let want = if pa <= pb && pa <= pc {
                    a
                } else if pb <= pc {
                    b
                } else {
                    c
                };
                assert_eq!(paeth(a, b, c), want, "{a} {b} {c}");
            }
        }
    }
}

#[test]
fn every_filter_type_and_pixel_size_unfilters_as_zipdecode() {
    // Rows of random bytes filtered with each type (the encoder's side written
    // out here, byte by byte), for 1 to 4 bytes a pixel.
    let mut seed = 0x2545_F491u32;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        seed as u8
    };
    for bpp in 1..=4 {
        let len = 13 * bpp;
        let (above, row): (Vec<u8>, Vec<u8>) = (
            (0..len).map(|_| next()).collect(),
            (0..len).map(|_| next()).collect(),
        );
        for filter in 0..=4u8 {
            let mut coded = row.clone();
            for i in 0..len {
                let a = if i >= bpp { row[i - bpp] } else { 0 };
                let c = if i >= bpp { above[i - bpp] } else { 0 };
                let (a16, b16, c16) = (i16::from(a), i16::from(above[i]), i16::from(c));
                let pred = match filter {
                    0 => 0,
                    1 => a,
                    2 => above[i],
                    3 => ((u16::from(a) + u16::from(above[i])) / 2) as u8,
                    _ => paeth(a16, b16, c16) as u8,
                };
                coded[i] = row[i].wrapping_sub(pred);
            }
            let mut got = vec![0xA5; len];
            assert!(unfilter(filter, &coded, &above, &mut got, bpp));
            assert_eq!(got, row, "filter {filter}, {bpp} bytes a pixel");
        }
        assert!(!unfilter(5, &row, &above, &mut vec![0; len], bpp));
    }
}

#[test]
fn a_row_that_zlib_holds_back_at_the_end_of_a_read_completes_in_the_next() {
    // A 2x3 L image: row 0 in literals, row 1 a match whose bits end the
    // first IDAT chunk, then the end of the stream in the second. Pillow's
    // call that fills row 0 reads the match with no room left for it; its read
    // is then over, so row 1 completes in the second read, in the call that
    // also reads the end of the stream: row 2 stays zero, no error.
    let raw = [0u8, 5, 6, 0, 5, 6];
    let bits = Bits::default().literals(&raw[..3]).fixed(257).code(2, 5);
    assert_eq!(bits.used, 39);
    let z = zlib(bits.fixed(256).block(true, 1).fixed(256), &raw);
    let mut f = b"\x89PNG\r\n\x1a\n".to_vec();
    f.extend(ihdr(2, 3, 8, 0, 0));
    f.extend(chunk(b"IDAT", &z[..7]));
    f.extend(chunk(b"IDAT", &z[7..]));
    f.extend(chunk(b"IEND", b""));
    assert_eq!(decode(&f).unwrap(), [5, 6, 5, 6, 0, 0]);
}

#[test]
fn python_bytes_is_pythons_repr() {
    for (bytes, repr) in [
        (&b""[..], "b''"),
        (b"IEND", "b'IEND'"),
        (b"I\xc5ND", "b'I\\xc5ND'"),
        (b"\t\n\r\\", "b'\\t\\n\\r\\\\'"),
        (b"a'b", "b\"a'b\""),
        (b"a'\"", "b'a\\'\"'"),
        (b"\x00\x7f ~", "b'\\x00\\x7f ~'"),
    ] {
        assert_eq!(python_bytes(bytes), repr);
    }
}

#[test]
fn reads_running_out_fail_as_pillows_chunk_reader() {
    let file = b"....IDATxyzw\0\0\0\0IEND\0\0\0\0";
    // A chunk (IEND): the data ends.
    assert_eq!(reads_run_out(file, 12), "image file is truncated");
    assert_eq!(
        reads_run_out(file, 13),
        "broken PNG file (chunk b'END\\x00')"
    );
    // 4 bytes left: a length and no type; fewer: no length.
    assert_eq!(reads_run_out(file, 20), "broken PNG file (chunk b'')");
    assert_eq!(reads_run_out(file, 21), "image file is truncated");
    assert_eq!(reads_run_out(file, 99), "image file is truncated");
}
