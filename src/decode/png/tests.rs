//! Routing and decoding of small PNGs built here: chunk by chunk (CRCs and
//! zlib from `crc32fast` / `miniz_oxide`), and with the `png` crate's encoder.
//! What Pillow gives for each of these is checked in `tests/test_native_png.py`.

use super::*;

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

fn decode(file: &[u8]) -> Result<Vec<u8>, KimiError> {
    let Route::Native(h) = route(file, false)? else {
        panic!("not native")
    };
    let mut out = vec![0xAA; h.decoded_len()?];
    decode_into(file, &h, &Limits::default(), &mut out).map(|()| out)
}

fn reason(file: &[u8], exif_transpose: bool) -> &'static str {
    match route(file, exif_transpose) {
        Ok(Route::Pillow(why)) => why,
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
        assert_eq!(route(&f, false).unwrap(), Route::Native(want));
        let f = png(ihdr(5, 3, depth, color, 1), &[], b"", &[]);
        assert_eq!(route(&f, false).unwrap(), Route::Native(want), "Adam7");
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
        assert!(route(&png(ihdr(5, 3, depth, color, 0), &[], b"", &[]), false).is_err());
    }
    assert!(route(&png(ihdr(0, 3, 8, 2, 0), &[], b"", &[]), false).is_err());
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
    assert!(matches!(route(&f, true), Ok(Route::Native(_))));
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
    assert!(route(&f, false).is_err(), "frame sequence error");
}

#[test]
fn cut_or_corrupt_headers_are_errors() {
    let (f, _) = plain(4, 2, 2, 3, &[chunk(b"gAMA", &[0, 0, 0xB1, 0x8F])], &[]);
    let idat = f.windows(4).position(|w| w == b"IDAT").unwrap() - 4;
    for cut in 0..idat + 8 {
        let r = route(&f[..cut], false);
        assert!(
            matches!(r, Err(KimiError::Decode { format: "PNG", .. })),
            "cut at {cut}: {r:?}"
        );
    }
    for at in [8 + 4, 8 + 9, 8 + 8 + 13, idat - 2] {
        let mut g = f.clone();
        g[at] ^= 0x80; // IHDR type (not a chunk type then) / data / CRC, gAMA CRC
        assert!(route(&g, false).is_err(), "flip at {at}");
    }
    // After the first IDAT Pillow checks no CRC; a cut chunk there fails.
    let (mut g, px) = plain(4, 2, 2, 3, &[], &[chunk(b"tEXt", b"a\0b")]);
    let at = g.len() - 13;
    g[at] ^= 1;
    assert_eq!(decode(&g).unwrap(), px);
    let (g, _) = plain(4, 2, 2, 3, &[], &[chunk(b"tEXt", b"a\0bcd")]);
    assert!(route(&g[..g.len() - 18], false).is_err());
    assert!(
        matches!(route(&g[..g.len() - 16], false), Ok(Route::Native(_))),
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
    // The last IDAT chunk holding only the Adler-32: Pillow may not check it.
    let (w, h) = (5, 4);
    let z = zrows(&pixels(w, h, 3), w, 3);
    let mut f = b"\x89PNG\r\n\x1a\n".to_vec();
    f.extend(ihdr(w as u32, h as u32, 8, 2, 0));
    f.extend(chunk(b"IDAT", &z[..z.len() - 4]));
    f.extend(chunk(b"IDAT", &z[z.len() - 4..]));
    assert_eq!(reason(&f, false), "IDAT split near its end");
}

#[test]
fn a_stream_cut_after_its_last_row_decodes_as_zlib_would() {
    // Cut inside the last deflate bytes, the Adler-32 or the IDAT's CRC: where
    // every row is there ZipDecode.c succeeds (zlib decodes every symbol it
    // has). Some such cuts of Pillow-written files need the slow path (the
    // crate alone cannot finish them): `tests/test_native_png.py` sweeps those.
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
        // Inside the pixel data: an error, never a partial image.
        assert!(decode(&f[..idat_end - 40.min(idat_end / 2)]).is_err());
    }
    assert!(whole > 4 * 5, "{whole}");
}
