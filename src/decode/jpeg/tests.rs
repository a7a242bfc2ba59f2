//! `route` on JPEG streams built here or committed under `tests/data/jpeg/`,
//! and the libjpeg binding against Debian's libjpeg62-turbo.

use super::*;

/// A marker segment: `FF code`, big-endian length, `body`.
fn seg(code: u8, body: &[u8]) -> Vec<u8> {
    let len = u16::try_from(body.len() + 2).expect("short test segment");
    let mut v = vec![0xFF, code];
    v.extend_from_slice(&len.to_be_bytes());
    v.extend_from_slice(body);
    v
}

/// SOFn body: precision, height, width, then (id, sampling, table) per component.
fn sof(code: u8, precision: u8, height: u16, width: u16, comps: u8) -> Vec<u8> {
    let mut b = vec![precision];
    b.extend_from_slice(&height.to_be_bytes());
    b.extend_from_slice(&width.to_be_bytes());
    b.push(comps);
    for id in 1..=comps {
        b.extend_from_slice(&[id, if id == 1 { 0x22 } else { 0x11 }, 0]);
    }
    seg(code, &b)
}

fn sos() -> Vec<u8> {
    seg(0xDA, &[1, 1, 0x00, 0, 63, 0])
}

/// SOI, `parts`, then entropy bytes and EOI.
fn jpeg(parts: &[Vec<u8>]) -> Vec<u8> {
    let mut v = vec![0xFF, 0xD8];
    for p in parts {
        v.extend_from_slice(p);
    }
    v.extend_from_slice(&[0x12, 0x34, 0xFF, 0x00, 0x56, 0xFF, 0xD9]);
    v
}

fn native(width: usize, height: usize, channels: usize) -> Route {
    Route::Native(Header {
        format: Format::Jpeg,
        width,
        height,
        channels,
    })
}

/// A header fault Pillow fails on: the file goes to Pillow, which raises.
fn pillow_fails(r: Result<Route, KimiError>) -> bool {
    matches!(r, Ok(Route::Pillow(why)) if why.starts_with("Pillow fails: "))
}

#[test]
fn frame_types_precision_and_components() {
    let dqt = seg(0xDB, &[0; 65]);
    for code in [0xC0, 0xC1, 0xC2] {
        let rgb = jpeg(&[dqt.clone(), sof(code, 8, 48, 64, 3), sos()]);
        assert_eq!(route(&rgb, false).unwrap(), native(64, 48, 3));
        let grey = jpeg(&[sof(code, 8, 5, 3, 1), sos()]);
        assert_eq!(route(&grey, false).unwrap(), native(3, 5, 1));
    }
    let cases: [(u8, u8, u8, &str); 8] = [
        (0xC0, 8, 4, "CMYK JPEG"),
        (0xC0, 12, 3, "JPEG precision is not 8 bits"),
        (0xC1, 16, 1, "JPEG precision is not 8 bits"),
        (0xC0, 8, 2, "JPEG with other than 1, 3 or 4 components"),
        (0xC3, 8, 3, "lossless JPEG"),
        (0xC9, 8, 3, "arithmetic-coded JPEG"),
        (0xCA, 8, 1, "arithmetic-coded JPEG"),
        (0xC5, 8, 3, "hierarchical JPEG"),
    ];
    for (code, precision, comps, reason) in cases {
        let data = jpeg(&[sof(code, precision, 8, 8, comps), sos()]);
        assert_eq!(
            route(&data, false).unwrap(),
            Route::Pillow(reason),
            "SOF {code:x}"
        );
    }
    let zero = jpeg(&[sof(0xC0, 8, 0, 8, 3), sos()]);
    assert_eq!(
        route(&zero, false).unwrap(),
        Route::Pillow("JPEG of zero width or height (DNL)")
    );
    let two = jpeg(&[sof(0xC0, 8, 8, 8, 3), sof(0xC0, 8, 8, 8, 1), sos()]);
    assert_eq!(
        route(&two, false).unwrap(),
        Route::Pillow("JPEG with several frame headers")
    );
}

#[test]
fn a_frame_header_listing_fewer_components_than_it_counts_is_routed_without_a_fault() {
    // A SOF of 3 (or 1) components that lists none, or one: the cost model
    // divided by the largest sampling factor of the listed ones, and panicked
    // on none (found by the decoder fuzz, seed of 2026-12-06). Pillow opens
    // such a file (its loop reads what is there) and libjpeg refuses it.
    let dqt = seg(0xDB, &[0; 65]);
    for (comps, listed) in [(3u8, 0usize), (3, 1), (1, 0)] {
        let mut body = vec![8, 0, 48, 0, 64, comps];
        for id in 1..=listed {
            body.extend_from_slice(&[id as u8, 0x22, 0]);
        }
        let data = jpeg(&[dqt.clone(), seg(0xC0, &body), sos()]);
        let routed = route(&data, false);
        assert!(
            matches!(routed, Ok(Route::Native(_))) || pillow_fails(routed.clone()),
            "{comps} components, {listed} listed: {routed:?}"
        );
    }
}

#[test]
fn app_segments() {
    let exif = seg(0xE1, b"Exif\0\0MM\0\x2a\0\0\0\x08\0\0");
    let xmp = seg(0xE1, b"http://ns.adobe.com/xap/1.0/\0<x/>");
    for app1 in [exif, xmp] {
        let data = jpeg(&[app1, sof(0xC0, 8, 8, 8, 3), sos()]);
        assert_eq!(route(&data, false).unwrap(), native(8, 8, 3));
        assert_eq!(
            route(&data, true).unwrap(),
            Route::Pillow("EXIF/XMP orientation")
        );
    }
    // An APP1 after the first SOS is not read by Pillow.
    let mut late = jpeg(&[sof(0xC0, 8, 8, 8, 3), sos()]);
    late.splice(late.len() - 2..late.len() - 2, seg(0xE1, b"Exif\0\0"));
    assert_eq!(route(&late, true).unwrap(), native(8, 8, 3));
    let mpf = jpeg(&[seg(0xE2, b"MPF\0II*\0"), sof(0xC0, 8, 8, 8, 3), sos()]);
    assert_eq!(
        route(&mpf, false).unwrap(),
        Route::Pillow("MPO (JPEG with an MPF segment)")
    );
    let mut icc = b"ICC_PROFILE\0\x01\x01".to_vec();
    icc.extend_from_slice(&[0; 20]);
    let fine = [
        seg(0xE0, b"JFIF\0\x01\x02"),
        seg(0xEE, b"Adobe\0d\0\0\0\0\x01"),
        seg(0xE2, &icc),
    ];
    let data = jpeg(&[
        fine[0].clone(),
        fine[1].clone(),
        fine[2].clone(),
        sof(0xC0, 8, 8, 8, 3),
        sos(),
    ]);
    assert_eq!(route(&data, false).unwrap(), native(8, 8, 3));
    // Photoshop blocks: cut in the size is tolerated, cut at the name length is not.
    let ps = |tail: &[u8]| [b"Photoshop 3.0\0".as_slice(), tail].concat();
    let ok = jpeg(&[
        seg(0xED, &ps(b"8BIM\x04\x04\0\0\0\0\x02ab8BIM\x03\xed")),
        sof(0xC0, 8, 8, 8, 1),
        sos(),
    ]);
    assert_eq!(route(&ok, false).unwrap(), native(8, 8, 1));
    let bad = jpeg(&[
        seg(0xED, &ps(b"8BIM\x04\x04")),
        sof(0xC0, 8, 8, 8, 1),
        sos(),
    ]);
    assert!(pillow_fails(route(&bad, false)));
    for short in [
        seg(0xE0, b"JFIF\0\x01"),
        seg(0xEE, b"Adobe\0"),
        seg(0xE2, b"ICC_PROFILE\0\x01"),
    ] {
        let data = jpeg(&[short, sof(0xC0, 8, 8, 8, 3), sos()]);
        assert!(pillow_fails(route(&data, false)));
    }
}

#[test]
fn marker_walk_like_pillow() {
    // Junk bytes, FFFF padding, FF00, bare RSTn/EOI/SOI and JPGn markers are skipped.
    let skipped = vec![
        0x00, 0x17, 0xFF, 0xFF, 0xFF, 0x00, 0xFF, 0xD3, 0xFF, 0xD9, 0xFF, 0xF1,
    ];
    let data = jpeg(&[seg(0xFE, b"c"), skipped, sof(0xC0, 8, 16, 32, 3), sos()]);
    assert_eq!(route(&data, false).unwrap(), native(32, 16, 3));
    // FF01 (TEM) and FF02..FFBF are not in Pillow's marker table.
    for code in [0x01, 0x02, 0xBF] {
        let data = jpeg(&[vec![0xFF, code], sof(0xC0, 8, 8, 8, 3), sos()]);
        assert!(pillow_fails(route(&data, false)), "FF{code:02X}");
    }
    // A length under 2 reads as an empty segment.
    let data = jpeg(&[vec![0xFF, 0xFE, 0x00, 0x01], sof(0xC0, 8, 8, 8, 1), sos()]);
    assert_eq!(route(&data, false).unwrap(), native(8, 8, 1));
    let bad_dqt = jpeg(&[seg(0xDB, &[0x10; 65]), sof(0xC0, 8, 8, 8, 3), sos()]);
    assert!(pillow_fails(route(&bad_dqt, false)));
    let mut bad_sof = sof(0xC0, 8, 8, 8, 3);
    bad_sof.push(0);
    bad_sof[3] += 1;
    assert!(pillow_fails(route(&jpeg(&[bad_sof, sos()]), false)));
    assert!(pillow_fails(route(&jpeg(&[sos()]), false)), "no SOF");
    assert!(
        pillow_fails(route(&jpeg(&[sof(0xC0, 8, 8, 8, 3)]), false)),
        "no SOS"
    );
}

#[test]
fn truncated_headers() {
    let full = jpeg(&[seg(0xDB, &[0; 65]), sof(0xC0, 8, 8, 8, 3), sos()]);
    let sos_end = full.len() - 7;
    for cut in 3..sos_end {
        assert!(pillow_fails(route(&full[..cut], false)), "cut at {cut}");
    }
    assert_eq!(route(&full[..sos_end], false).unwrap(), native(8, 8, 3));
    assert!(pillow_fails(route(b"\xFF\xD8", false)));
    assert!(pillow_fails(route(b"GIF89a", false)));
}

/// A progressive stream of `scans` scans with stuffed bytes and RST markers.
fn progressive(scans: usize) -> Vec<u8> {
    let mut v = vec![0xFF, 0xD8];
    v.extend(sof(0xC2, 8, 8, 8, 1));
    for i in 0..scans {
        if i % 7 == 3 {
            v.extend(seg(0xC4, &[0x00; 17]));
        }
        v.extend(sos());
        v.extend_from_slice(&[0x01, 0xFF, 0x00, 0xDA, 0xFF, 0xD2, 0xDA, 0xFF, 0xFF, 0x00]);
    }
    v.extend_from_slice(&[0xFF, 0xD9]);
    v
}

/// An 8x8 grey frame (one block), as `progressive` writes it.
fn one_block() -> Frame {
    let mut components = [Component::default(); 4];
    components[0] = Component { id: 1, h: 2, v: 2 };
    Frame {
        code: 0xC2,
        width: 8,
        height: 8,
        layers: 1,
        components,
        listed: 1,
    }
}

#[test]
fn scan_counting() {
    let sos_body = [1, 1, 0x00, 0, 63, 0];
    assert_eq!(
        scan_work(&progressive(7), &sos_body, 0, &one_block(), 100).unwrap(),
        Scans {
            count: 8,
            passes: 8
        }
    );
    assert_eq!(route(&progressive(500), false).unwrap(), native(8, 8, 1));
    let err = route(&progressive(501), false).unwrap_err();
    assert_eq!(
        err,
        KimiError::TooManyScans {
            scans: 501,
            limit: 500
        }
    );
    // Sequential files are not counted; a truncated progressive one still routes.
    let mut seq = progressive(600);
    seq[3] = 0xC0;
    assert_eq!(route(&seq, false).unwrap(), native(8, 8, 1));
    let cut = progressive(20);
    assert_eq!(
        route(&cut[..cut.len() - 30], false).unwrap(),
        native(8, 8, 1)
    );
}

/// A progressive `side` x `side` grey file of `scans` scans (no entropy data),
/// padded with COM segments before EOI to exactly `bytes` bytes.
fn grey_scans(side: u16, scans: usize, bytes: usize) -> Vec<u8> {
    let mut v = vec![0xFF, 0xD8];
    v.extend(sof(0xC2, 8, side, side, 1));
    for _ in 0..scans {
        v.extend(seg(0xDA, &[1, 1, 0x00, 1, 63, 0]));
    }
    while bytes - v.len() - 2 > 65_537 + 4 {
        v.extend(seg(0xFE, &[0x20; 65_533]));
    }
    v.extend(seg(0xFE, &vec![0x20; bytes - v.len() - 2 - 4]));
    v.extend_from_slice(&[0xFF, 0xD9]);
    assert_eq!(v.len(), bytes);
    v
}

#[test]
fn blocks_per_component_as_libjpeg_counts_them() {
    let frame = |width, height, sampling: &[(u8, u8)]| {
        let mut components = [Component::default(); 4];
        for (i, &(h, v)) in sampling.iter().enumerate() {
            components[i] = Component {
                id: i as u8 + 1,
                h,
                v,
            };
        }
        Frame {
            code: 0xC2,
            width,
            height,
            layers: sampling.len() as u8,
            components,
            listed: sampling.len() as u8,
        }
    };
    // 4:2:0 at 61x45: luma 8x6 blocks, chroma ceil(61/16) x ceil(45/16) = 4x3 each.
    assert_eq!(frame(61, 45, &[(2, 2), (1, 1), (1, 1)]).all_blocks(), 72);
    assert_eq!(frame(8192, 8192, &[(1, 1)]).all_blocks(), 1 << 20);
    assert_eq!(
        frame(13377, 13377, &[(1, 1); 3]).all_blocks(),
        3 * 1673 * 1673
    );
    assert_eq!(frame(0, 5, &[(1, 1)]).all_blocks(), 0);
}

#[test]
fn a_file_with_fewer_bytes_than_blocks_over_8_is_refused() {
    // 2048x2048 grey: 65,536 blocks, at least 8,192 bytes of a complete file.
    let at = grey_scans(2048, 1, 8192);
    assert_eq!(route(&at, false).unwrap(), native(2048, 2048, 1));
    let err = route(&grey_scans(2048, 1, 8191), false).unwrap_err();
    assert_eq!(
        err,
        KimiError::JpegDataMissing {
            width: 2048,
            height: 2048,
            blocks: 65_536,
            bytes: 8191
        }
    );
    assert!(err.to_string().starts_with(
        "JPEG of 2048x2048 has 65536 blocks of 8x8 pixels in a file of 8191 bytes: a complete JPEG \
         codes every block in at least one bit, so most of its data is missing"
    ));
    // Sequential files and files Pillow decodes are bounded the same way.
    let mut seq = grey_scans(2048, 1, 8191);
    seq[3] = 0xC0;
    assert!(matches!(
        route(&seq, false),
        Err(KimiError::JpegDataMissing { .. })
    ));
    // Arithmetic-coded (left to Pillow): it can code a flat area in less than
    // a bit a block, so the bound per byte does not apply (the passes do).
    seq[3] = 0xC9;
    assert_eq!(
        route(&seq, false).unwrap(),
        Route::Pillow("arithmetic-coded JPEG")
    );
}

#[test]
fn block_passes_are_bounded_by_the_floor_or_the_size() {
    // 4096x4096 grey: 262,144 blocks a scan; 32 scans are the floor of 2^23 passes.
    let floor = grey_scans(4096, 32, 40_000);
    assert_eq!(route(&floor, false).unwrap(), native(4096, 4096, 1));
    let err = route(&grey_scans(4096, 33, 40_000), false).unwrap_err();
    assert_eq!(
        err,
        KimiError::JpegScanWork {
            width: 4096,
            height: 4096,
            scans: 33,
            passes: 33 * 262_144,
            limit: 1 << 23,
            bytes: 40_000
        }
    );
    assert_eq!(
        err.to_string(),
        "JPEG of 4096x4096 makes 8650752 block passes in its 33 scans, over the limit of \
         8388608 for a file of 40000 bytes (a CPU bomb?)"
    );
    // 200,000 bytes allow 64 passes a byte: 48 scans, not 49.
    assert!(route(&grey_scans(4096, 48, 200_000), false).is_ok());
    assert!(matches!(
        route(&grey_scans(4096, 49, 200_000), false),
        Err(KimiError::JpegScanWork {
            limit: 12_800_000,
            ..
        })
    ));
}

#[test]
fn the_cost_bounds_apply_to_the_jpeg_inside_a_blp1_file() {
    let blp1 = |jpeg: &[u8]| {
        let mut v = b"BLP1".to_vec();
        for word in [0u32, 0, 64, 64, 5, 0] {
            v.extend_from_slice(&word.to_le_bytes());
        }
        let mut offsets = [0u32; 16];
        let mut lengths = [0u32; 16];
        offsets[0] = 160;
        lengths[0] = u32::try_from(jpeg.len()).unwrap();
        for word in offsets.iter().chain(&lengths).chain(&[0]) {
            v.extend_from_slice(&word.to_le_bytes());
        }
        v.extend_from_slice(jpeg);
        v
    };
    assert_eq!(
        super::super::route(&blp1(&grey_scans(2048, 1, 8192)), false),
        Ok(None)
    );
    assert!(matches!(
        super::super::route(&blp1(&grey_scans(2048, 1, 8191)), false),
        Err(KimiError::JpegDataMissing { .. })
    ));
    assert!(matches!(
        super::super::route(&blp1(&grey_scans(4096, 33, 40_000)), false),
        Err(KimiError::JpegScanWork { .. })
    ));
}

fn committed(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/data/jpeg/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn committed_files_route() {
    for name in [
        "s440.jpg",
        "s411.jpg",
        "s410.jpg",
        "s_mixed.jpg",
        "rgb_adobe.jpg",
    ] {
        assert_eq!(
            route(&committed(name), true).unwrap(),
            native(64, 48, 3),
            "{name}"
        );
    }
    for name in [
        "s440_progressive_odd.jpg",
        "s411_odd.jpg",
        "restart_every_block_odd.jpg",
    ] {
        assert_eq!(
            route(&committed(name), false).unwrap(),
            native(61, 45, 3),
            "{name}"
        );
    }
    assert_eq!(
        route(&committed("ycck.jpg"), false).unwrap(),
        Route::Pillow("CMYK JPEG")
    );
    for name in ["arithmetic.jpg", "arithmetic_progressive.jpg"] {
        assert_eq!(
            route(&committed(name), false).unwrap(),
            Route::Pillow("arithmetic-coded JPEG")
        );
    }
    let many = route(&committed("progressive_528_scans.jpg"), false);
    assert_eq!(
        many.unwrap_err(),
        KimiError::TooManyScans {
            scans: 501,
            limit: 500
        }
    );
}

/// A libjpeg-turbo with the 6.2 ABI to test against: `$KIMI_K3_RS_TEST_LIBJPEG`,
/// else Debian's libjpeg62-turbo, else the one the `python3` on `PATH` has in
/// Pillow's wheel (the README's test command runs `cargo test` in the venv where
/// it installed Pillow).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn debian() -> libjpeg::Api {
    const DEBIAN: &str = "/usr/lib/x86_64-linux-gnu/libjpeg.so.62";
    const PILLOWS: &str = "import glob, os, PIL; print(next(iter(sorted(glob.glob(os.path.join(\
        os.path.dirname(PIL.__file__), '..', 'pillow.libs', 'libjpeg*.so*')))), ''))";
    let path = std::env::var("KIMI_K3_RS_TEST_LIBJPEG")
        .ok()
        .or_else(|| Path::new(DEBIAN).exists().then(|| DEBIAN.to_owned()))
        .or_else(|| {
            let out = std::process::Command::new("python3")
                .args(["-c", PILLOWS])
                .output()
                .ok()?;
            let found = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            (!found.is_empty()).then_some(found)
        })
        .expect("no libjpeg-turbo to test against: apt-get install libjpeg62-turbo, or pip install pillow");
    libjpeg::Api::open(Path::new(&path)).expect("the libjpeg-turbo found loads")
}

#[test]
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn struct_size_checked_by_the_library() {
    let api = debian();
    assert!(
        api.description.starts_with("libjpeg-turbo version "),
        "{}",
        api.description
    );
    assert!(
        api.description.contains("(libjpeg API 6.2) at /"),
        "{}",
        api.description
    );
    let size = size_of::<libjpeg::Decompress>();
    api.create_destroy(size)
        .expect("our struct has the library's size");
    let err = api.create_destroy(size + 8).unwrap_err();
    let expected = format!("library thinks size is {size}, caller expects {}", size + 8);
    assert!(err.contains(&expected), "{err}");
    let not_jpeg = libjpeg::Api::open(Path::new("/nonexistent/libjpeg.so"))
        .err()
        .unwrap();
    assert!(
        not_jpeg.starts_with("cannot load /nonexistent/libjpeg.so"),
        "{not_jpeg}"
    );
}

#[test]
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn decode_faults_through_the_library() {
    use libjpeg::{decode, writable, Fault};
    let api = debian();
    let data = committed("s440_progressive_odd.jpg");
    let mut out = vec![0u8; 61 * 45 * 3];
    decode(&api, &data, (61, 45, 3), 500, writable(&mut out)).expect("decodes");
    assert!(out.iter().any(|&b| b != 0));
    // The progress monitor stops a decode past its scan limit.
    assert_eq!(
        decode(&api, &data, (61, 45, 3), 3, writable(&mut out)),
        Err(Fault::TooManyScans(4))
    );
    let many = committed("progressive_528_scans.jpg");
    let mut small = vec![0u8; 64];
    decode(&api, &many, (8, 8, 1), 528, writable(&mut small))
        .expect("528 scans within a limit of 528");
    assert_eq!(
        decode(&api, &many, (8, 8, 1), 500, writable(&mut small)),
        Err(Fault::TooManyScans(501))
    );
    // Truncated data is an error, not libjpeg's fake EOI; a missing EOI alone is fine.
    let base = committed("s440.jpg");
    let mut out = vec![0u8; 64 * 48 * 3];
    assert_eq!(
        decode(
            &api,
            &base[..base.len() / 2],
            (64, 48, 3),
            500,
            writable(&mut out)
        ),
        Err(Fault::Truncated)
    );
    assert_eq!(
        decode(&api, &base[..300], (64, 48, 3), 500, writable(&mut out)),
        Err(Fault::Truncated)
    );
    // libjpeg's own errors arrive as messages, and a wrong header is caught.
    let mut bad = base.clone();
    let sof_at = bad.windows(2).position(|w| w == [0xFF, 0xC0]).unwrap();
    bad[sof_at + 4] = 7; // precision
    match decode(&api, &bad, (64, 48, 3), 500, writable(&mut out)) {
        Err(Fault::Lib(m)) => assert!(m.contains("precision"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        decode(&api, &base, (48, 64, 3), 500, writable(&mut out)),
        Err(Fault::Mismatch(_))
    ));
    assert!(matches!(
        decode(&api, &base, (64, 48, 3), 500, writable(&mut out[1..])),
        Err(Fault::Mismatch(_))
    ));
}

/// A decode into a new vector's spare capacity writes every byte of it: the
/// same bytes as decodes into buffers filled with two other patterns, for
/// every committed native JPEG (grey and colour, every sampling, one scan or
/// several, restart markers); a fault leaves the vector empty.
#[test]
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn a_decode_into_spare_capacity_writes_every_byte() {
    use libjpeg::{decode, decode_to_vec, writable, Fault};
    let api = debian();
    let mut decoded = 0;
    for entry in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/jpeg")).unwrap()
    {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "jpg") {
            continue;
        }
        let data = std::fs::read(&path).unwrap();
        let Ok(Route::Native(h)) = route(&data, false) else {
            continue;
        };
        if h.format != Format::Jpeg {
            continue;
        }
        let shape = (h.width, h.height, h.channels);
        let len = h.decoded_len().unwrap();
        let mut first = vec![0xA5u8; len];
        if decode(&api, &data, shape, 500, writable(&mut first)).is_err() {
            continue;
        }
        let mut second = vec![0x5Au8; len];
        decode(&api, &data, shape, 500, writable(&mut second)).unwrap();
        // Spare capacity that held other bytes (0x3C, then cleared).
        let mut vector = vec![0x3Cu8; len + 5];
        vector.clear();
        decode_to_vec(&api, &data, shape, 500, &mut vector).unwrap();
        assert!(
            first == second && vector == first,
            "{}: unwritten bytes",
            path.display()
        );
        let mut cut = Vec::with_capacity(len);
        assert_eq!(
            decode_to_vec(&api, &data[..data.len() / 2], shape, 500, &mut cut),
            Err(Fault::Truncated),
            "{}",
            path.display()
        );
        assert!(cut.is_empty());
        decoded += 1;
    }
    assert!(
        decoded >= 8,
        "only {decoded} committed JPEGs decode natively"
    );
    // A vector without room, or not empty, is refused before any decode.
    let data = committed("s440.jpg");
    for mut out in [Vec::with_capacity(64 * 48 * 3 - 1), vec![0u8; 1]] {
        assert!(matches!(
            decode_to_vec(&api, &data, (64, 48, 3), 500, &mut out),
            Err(Fault::Mismatch(_))
        ));
    }
}

/// No unit test calls `load`, so the process-wide library stays unset here.
#[test]
fn decode_without_a_loaded_library() {
    let data = committed("s440.jpg");
    let Ok(Route::Native(header)) = route(&data, false) else {
        panic!("native route")
    };
    let mut out = vec![0u8; header.decoded_len().unwrap()];
    let err = decode_into(&data, &header, &Limits::default(), &mut out).unwrap_err();
    assert_eq!(err.to_string(), "cannot decode JPEG: no libjpeg loaded");
}

/// Skipping to any row gives the rows a decode from the first row gives
/// after it, for every sampling of the committed files (one scan or several,
/// restart markers, odd sizes); and on damaged copies (cut short at every
/// 97th byte, or one byte of the scan changed, 40 seeded ones a file),
/// wherever a decode of the rows before the skip and the decode that skipped
/// both succeed, the whole decode succeeds with the same rows: the pipeline's
/// lanes (`pipeline::stream::Lanes`) never give rows the whole decode would
/// not.
#[test]
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn skipped_rows_are_the_rows_a_whole_decode_gives_after_them() {
    use libjpeg::Reader;
    let api = debian();
    let files = [
        ("s440.jpg", true),
        ("s411.jpg", true),
        ("s410.jpg", true),
        ("s_mixed.jpg", true),
        ("s411_odd.jpg", true),
        ("restart_every_block_odd.jpg", true),
        ("rgb_adobe.jpg", true),
        ("s440_progressive_odd.jpg", false),
    ];
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut random = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        usize::try_from(seed % n as u64).expect("below n")
    };
    for (name, single) in files {
        let data = committed(name);
        let Ok(Route::Native(h)) = route(&data, false) else {
            panic!("{name}: native route")
        };
        let shape = (h.width, h.height, h.channels);
        let row = h.width * h.channels;
        let scan = data
            .windows(2)
            .rposition(|w| w == [0xFF, 0xDA])
            .expect("SOS")
            + 16;
        let mut damaged: Vec<Vec<u8>> = (0..data.len())
            .step_by(97)
            .map(|cut| data[..cut].to_vec())
            .collect();
        for _ in 0..40 {
            let mut bad = data.clone();
            bad[scan + random(data.len() - 2 - scan)] = u8::try_from(random(256)).expect("a byte");
            damaged.push(bad);
        }
        let decode = |data: &[u8], skip: usize, out: &mut [u8]| {
            Reader::start(&api, data, shape, 500).and_then(|mut r| {
                assert_eq!(r.single_scan(), single, "{name}");
                if skip > 0 {
                    r.skip(skip)?;
                }
                r.read(libjpeg::writable(out))
            })
        };
        let mut whole = vec![0u8; row * h.height];
        decode(&data, 0, &mut whole).expect("decodes");
        for skip in 1..h.height {
            let mut rest = vec![0u8; row * (h.height - skip)];
            decode(&data, skip, &mut rest).expect("decodes");
            assert!(rest == whole[skip * row..], "{name} skip {skip}");
        }
        for (i, data) in damaged.iter().enumerate() {
            let mut first = vec![0u8; row * h.height];
            let whole = decode(data, 0, &mut first);
            for skip in 1..h.height {
                let mut rest = vec![0u8; row * (h.height - skip)];
                let before = decode(data, 0, &mut vec![0u8; row * skip]);
                if before.is_ok() && decode(data, skip, &mut rest).is_ok() {
                    assert_eq!(whole, Ok(()), "{name} damaged {i} skip {skip}");
                    assert!(
                        rest == first[skip * row..],
                        "{name} damaged {i} skip {skip}"
                    );
                }
            }
        }
    }
}

#[test]
fn an_exif_resolution_is_odd_as_pillow_reads_the_exif() {
    // IFD0 of two entries, ResolutionUnit then XResolution of `kind` x `count`.
    let exif = |prefix: &[u8], head: &[u8; 4], kind: u16, count: u32| {
        let mut tiff = head.to_vec();
        tiff.extend_from_slice(&8u32.to_le_bytes());
        tiff.extend_from_slice(&2u16.to_le_bytes());
        tiff.extend_from_slice(&[0x28, 0x01, 3, 0, 1, 0, 0, 0, 2, 0, 0, 0]);
        tiff.extend_from_slice(&[0x1A, 0x01]);
        tiff.extend_from_slice(&kind.to_le_bytes());
        tiff.extend_from_slice(&count.to_le_bytes());
        tiff.extend_from_slice(&[5, 0, 0, 0, 0, 0, 0, 0]);
        [prefix, &tiff].concat()
    };
    let ii = b"II*\0";
    assert!(!odd_resolution(&exif(b"Exif\0\0", ii, 5, 1)));
    assert!(odd_resolution(&exif(b"Exif\0\0", ii, 1, 1)));
    assert!(odd_resolution(&exif(b"Exif\0\0", ii, 5, 2)));
    // Pillow drops two prefixes at most: a third leaves no TIFF header.
    assert!(odd_resolution(&exif(b"Exif\0\0Exif\0\0", ii, 1, 1)));
    assert!(!odd_resolution(&exif(
        b"Exif\0\0Exif\0\0Exif\0\0",
        ii,
        1,
        1
    )));
    // The other little-endian header Pillow accepts; BigTIFF ones go to Pillow.
    assert!(odd_resolution(&exif(b"Exif\0\0", b"II\0*", 1, 1)));
    assert!(odd_resolution(&exif(b"Exif\0\0", b"II+\0", 5, 1)));
    assert!(!odd_resolution(&exif(b"Exif\0\0", b"XX*\0", 1, 1)));
    // An IFD cut inside the XResolution entry ends before it; no EXIF at all.
    let whole = exif(b"Exif\0\0", ii, 1, 1);
    assert!(!odd_resolution(&whole[..whole.len() - 5]));
    assert!(odd_resolution(&whole[..whole.len() - 4]));
    assert!(!odd_resolution(b""));
}
