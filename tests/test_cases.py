"""The reported cases R01..R23 (``shared/cases/reported-cases.json``).

Every expected value of every case is checked against ``kimi_k3_rs``; cases
that produce pixels are also compared bit for bit with the reference.  Inputs
follow the README recipe (noise = ``default_rng(seed).integers(0, 256, ...)``).
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from PIL import Image

import kimi_k3_rs
import helpers
from helpers import (
    K3_IMAGE_KEYS,
    K25_IMAGE_KEYS,
    PROFILES,
    REF_COMPAT,
    apply_overrides,
    assert_output_matches,
    bomb_png,
    case_cfg,
    cases_by_id,
    encode,
    grid_rows,
    hgradient,
    noise,
    pixel_at,
    solid,
    split_by_grid,
    vgradient,
)
from reference import navit_resize_image, normalize, reference_preprocess, to_pil

CASES = cases_by_id()


def test_all_cases_present():
    assert sorted(CASES) == [f"R{i:02d}" for i in range(1, 24)]


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def resize_cfg(image_size, media_proc_cfg):
    w, h = image_size
    return kimi_k3_rs.navit_resize_config(
        w, h,
        media_proc_cfg["patch_size"], media_proc_cfg["merge_kernel_size"],
        media_proc_cfg["in_patch_limit"], media_proc_cfg["patch_limit_on_one_side"],
        media_proc_cfg.get("fixed_output_tokens"),
    )


def sizes_of(images):
    return [to_pil(item).size for item in images]


def run_and_check(images, media_proc_cfg, expected, *, parity=True):
    """Run the library on ``images`` and check every key of ``expected`` that it names."""
    if not isinstance(images, list):
        images = [images]
    out = kimi_k3_rs.preprocess(images, media_proc_cfg, pillow_compat=REF_COMPAT)
    pv, grid = out["pixel_values"], out["grid_thws"]
    assert pv.dtype == np.float32 and grid.dtype == np.int64
    sizes = sizes_of(images)
    rcs = [resize_cfg(s, media_proc_cfg) for s in sizes]
    ref_rcs = [
        navit_resize_image(w, h, media_proc_cfg["patch_size"], media_proc_cfg["merge_kernel_size"],
                           media_proc_cfg["in_patch_limit"], media_proc_cfg["patch_limit_on_one_side"],
                           media_proc_cfg.get("fixed_output_tokens"))
        for w, h in sizes
    ]
    assert rcs == ref_rcs

    if "new_size" in expected:
        assert [rcs[0]["new_width"], rcs[0]["new_height"]] == expected["new_size"]
    if "pad" in expected:
        assert [rcs[0]["pad_width"], rcs[0]["pad_height"]] == expected["pad"]
    if "grid_thws" in expected:
        assert grid.tolist() == expected["grid_thws"]
        assert grid.shape == (len(images), 3)
    if "num_tokens" in expected:
        want = expected["num_tokens"]
        want = want if isinstance(want, list) else [want]
        assert [rc["num_tokens"] for rc in rcs] == want
        for value in (rc["num_tokens"] for rc in rcs):
            assert type(value) is int
        enc = kimi_k3_rs.prepare_kimi_k3_encoder_inputs(images, media_proc_cfg, pillow_compat=REF_COMPAT)
        assert list(enc.num_tokens) == want
        assert all(type(v) is int for v in enc.num_tokens)
        assert np.array_equal(enc.grid_thws, grid)
        mats = enc.materialize()
        for got, block in zip(mats, split_by_grid(pv, grid)):
            assert np.array_equal(got.view(np.uint32), block.view(np.uint32))
    if "pixel_values_rows" in expected:
        assert pv.shape[0] == expected["pixel_values_rows"]
    if "pixel_values_shape" in expected:
        assert list(pv.shape) == expected["pixel_values_shape"]
    if "encoder_patches" in expected:
        assert pv.shape[0] == expected["encoder_patches"] == sum(grid_rows(grid))
    for chk in expected.get("pixel_checks", []):
        got = pixel_at(pv, grid, chk["x"], chk["y"])
        want = np.asarray(chk["rgb"], dtype=np.float32)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (chk, got)
    assert pv.shape[0] == sum(grid_rows(grid))
    if parity:
        assert_output_matches(out, reference_preprocess(images, media_proc_cfg))
    return out


# ---------------------------------------------------------------------------
# R01 alpha compositing
# ---------------------------------------------------------------------------


def r01_image():
    a = np.zeros((768, 1024, 4), np.uint8)
    a[100:200, 100:400] = 255
    return Image.fromarray(a)


def test_R01_alpha_composited_on_chessboard():
    case = CASES["R01"]
    media_proc_cfg = case_cfg(case)
    run_and_check(r01_image(), media_proc_cfg, case["expected"])
    # contrast: with the K2.5 profile (no compositing) pixel (0,0) is -1
    out = kimi_k3_rs.preprocess(r01_image(), PROFILES["kimi_k25"])
    assert pixel_at(out["pixel_values"], out["grid_thws"], 0, 0).tolist() == [-1.0, -1.0, -1.0]


# ---------------------------------------------------------------------------
# R02 per-profile budgets
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("profile", ["kimi_k3", "kimi_k25"])
def test_R02_profiles(profile):
    case = CASES["R02"]
    assert profile in case["profile"]
    media_proc_cfg = case_cfg(case, profile)
    exp = case["expected"][profile]
    run_and_check(noise(4000, 3000, "RGB", 0), media_proc_cfg, exp)
    preset = kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG if profile == "kimi_k3" else kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG
    out = kimi_k3_rs.preprocess(noise(4000, 3000, "RGB", 0), preset)
    assert out["grid_thws"].tolist() == exp["grid_thws"]
    for size, also in exp.get("also", {}).items():
        w, h = map(int, size.split("x"))
        run_and_check(noise(w, h, "RGB", 0), media_proc_cfg, also)


# ---------------------------------------------------------------------------
# R03..R05, R08..R13, R16, R17, R22, R23: plain geometry + parity cases
# ---------------------------------------------------------------------------


def test_R03_resampling_is_pillow_bicubic():
    case = CASES["R03"]
    media_proc_cfg = case_cfg(case)
    assert media_proc_cfg["in_patch_limit"] == 314
    run_and_check(noise(512, 512, "RGB", 0), media_proc_cfg, case["expected"])


def batch_images(case):
    images = []
    for item in case["batch"]:
        if "seed" in item:
            images.append(noise(item["w"], item["h"], item["mode"], item["seed"]))
        else:
            images.append(solid(item["w"], item["h"], item["rgb"], item["mode"]))
    return images


def test_R04_mixed_size_batch():
    case = CASES["R04"]
    media_proc_cfg = case_cfg(case)
    images = batch_images(case)
    out = run_and_check(images, media_proc_cfg, case["expected"])
    # invariant: rows split by prod(grid) reproduce each image processed alone
    for item, block in zip(images, split_by_grid(out["pixel_values"], out["grid_thws"])):
        alone = kimi_k3_rs.preprocess(item, media_proc_cfg)["pixel_values"]
        assert np.array_equal(alone.view(np.uint32), block.view(np.uint32))
    # invariant: any permutation permutes grid rows and patch blocks identically
    blocks = split_by_grid(out["pixel_values"], out["grid_thws"])
    for perm in ([1, 2, 0], [2, 1, 0]):
        pout = kimi_k3_rs.preprocess([images[i] for i in perm], media_proc_cfg)
        assert pout["grid_thws"].tolist() == [out["grid_thws"].tolist()[i] for i in perm]
        assert np.array_equal(pout["pixel_values"], np.concatenate([blocks[i] for i in perm]))


def test_R05_mixed_mode_batch():
    case = CASES["R05"]
    media_proc_cfg = case_cfg(case)
    images = batch_images(case)
    assert [im.mode for im in images] == ["L", "RGBA", "RGB"]
    out = run_and_check(images, media_proc_cfg, case["expected"])
    pv, grid = out["pixel_values"], out["grid_thws"]
    # L replicated to 3 equal channels
    block0 = split_by_grid(pv, grid)[0]
    assert np.array_equal(block0[:, 0], block0[:, 1]) and np.array_equal(block0[:, 0], block0[:, 2])
    # 1x1 pixel (0,0) = (10,20,30)/255*2-1, rest of its 28x28 canvas = -1.0
    want = normalize(np.array([[[10, 20, 30]]], np.uint8), [0.5] * 3, [0.5] * 3)[0, 0]
    assert np.array_equal(pixel_at(pv, grid, 0, 0, index=2), want)
    block2 = split_by_grid(pv, grid)[2].copy()
    block2[0, :, 0, 0] = -1.0
    assert np.all(block2 == -1.0)


def test_R08_output_keys_and_shapes():
    case = CASES["R08"]
    media_proc_cfg = case_cfg(case)
    out = run_and_check(noise(448, 448, "RGB", 0), media_proc_cfg, case["expected"])
    assert out["pixel_values"].shape == (1024, 3, 14, 14)
    assert out["pixel_values"].dtype == np.float32
    assert out["grid_thws"].tolist() == [[1, 32, 32]]
    assert out["grid_thws"].shape == (1, 3) and out["grid_thws"].dtype == np.int64
    assert resize_cfg((448, 448), media_proc_cfg)["num_tokens"] == case["expected"]["num_tokens"]
    # any alias keys must hold identical data; no 2-column grid under a 3-column name
    for key in ("image_grid_thw", "grid_thw"):
        if key in out:
            assert np.array_equal(out[key], out["grid_thws"])
    assert "image_grid_hws" not in out


def test_R09_solid():
    case = CASES["R09"]
    run_and_check(solid(224, 224, (127, 127, 127)), case_cfg(case), case["expected"])


def test_R10_pad_up_not_round():
    case = CASES["R10"]
    run_and_check(noise(448, 449, "RGB", 0), case_cfg(case), case["expected"])


def test_R11_gradient_no_interpolation():
    case = CASES["R11"]
    img = hgradient(1000, 700)
    assert img.getpixel((999, 0)) == (255, 255, 255)
    out = run_and_check(img, case_cfg(case), case["expected"])
    # columns 0..999 are the exact source pixels
    row = np.stack([pixel_at(out["pixel_values"], out["grid_thws"], x, 5) for x in range(1000)])
    src = normalize(np.asarray(img)[5:6], [0.5] * 3, [0.5] * 3)[0]
    assert np.array_equal(row, src)


def test_R12_token_count():
    case = CASES["R12"]
    run_and_check(noise(448, 448, "RGB", 0), case_cfg(case), case["expected"])


def test_R13_token_invariant():
    case = CASES["R13"]
    media_proc_cfg = case_cfg(case)
    out = run_and_check(noise(1000, 780, "RGB", 0), media_proc_cfg, case["expected"])
    t, h, w = out["grid_thws"][0].tolist()
    n = case["expected"]["num_tokens"]
    assert n == t * h * w // 4 == out["pixel_values"].shape[0] // 4
    # the count-only API returns the same number without decoding pixels
    assert resize_cfg((1000, 780), media_proc_cfg)["num_tokens"] == n


@pytest.mark.parametrize("size", [None, "13x13", "1x1"])
def test_R16_tiny(size):
    case = CASES["R16"]
    media_proc_cfg = case_cfg(case)
    if size is None:
        run_and_check(noise(257, 27, "RGB", 0), media_proc_cfg, case["expected"])
        return
    w, h = map(int, size.split("x"))
    img = noise(w, h, "RGB", 0)
    out = run_and_check(img, media_proc_cfg, case["expected"]["also"][size])
    if size == "1x1":
        pv = out["pixel_values"]
        src = normalize(np.asarray(img), [0.5] * 3, [0.5] * 3)[0, 0]
        assert np.array_equal(pixel_at(pv, out["grid_thws"], 0, 0), src)
        rest = pv.copy()
        rest[0, :, 0, 0] = -1.0
        assert np.all(rest == -1.0)  # all other 783 pixels per channel


def test_R17_thin():
    case = CASES["R17"]
    run_and_check(noise(332, 27, "RGB", 0), case_cfg(case), case["expected"])


def test_R18_extreme_aspect():
    case = CASES["R18"]
    media_proc_cfg = case_cfg(case)
    run_and_check(hgradient(8000, 200), media_proc_cfg, case["expected"])
    run_and_check(hgradient(200, 6000), media_proc_cfg, case["expected"]["tall_200x6000"])


@pytest.mark.parametrize("fixed", [64, 64.0])
def test_R22_fixed_output_tokens(fixed):
    case = CASES["R22"]
    media_proc_cfg = case_cfg(case)
    media_proc_cfg["fixed_output_tokens"] = fixed
    out = run_and_check(noise(1024, 768, "RGB", 0), media_proc_cfg, case["expected"])
    enc = kimi_k3_rs.prepare_kimi_k3_encoder_inputs([noise(1024, 768, "RGB", 0)], media_proc_cfg)
    assert enc.num_tokens == [64] and type(enc.num_tokens[0]) is int
    assert enc.grid_thws.tolist() == out["grid_thws"].tolist()


def test_R23_no_clamping_after_padding():
    case = CASES["R23"]
    media_proc_cfg = case_cfg(case)
    run_and_check(noise(2048, 2048, "RGB", 0), media_proc_cfg, case["expected"])
    assert case["expected"]["num_tokens"] > media_proc_cfg["in_patch_limit"] // 4


# ---------------------------------------------------------------------------
# R06 / R07 config errors and presets
# ---------------------------------------------------------------------------


def assert_config_error(media_proc_cfg, err, images):
    cls = {"ValueError": ValueError}[err["type"]]
    msg = err["message"]
    with pytest.raises(cls, match=f"^{re.escape(msg)}$"):
        kimi_k3_rs.preprocess(images, media_proc_cfg)
    with pytest.raises(cls, match=f"^{re.escape(msg)}$"):
        kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg=media_proc_cfg)
    with pytest.raises(cls, match=f"^{re.escape(msg)}$"):
        kimi_k3_rs.prepare_kimi_k3_encoder_inputs(images, media_proc_cfg)


def test_R06_missing_key():
    case = CASES["R06"]
    media_proc_cfg = case_cfg(case)
    assert "patch_size" not in media_proc_cfg
    img = solid(64, 64, (128, 128, 128))
    assert_config_error(media_proc_cfg, case["expected"]["error"], [img])
    # raised before any image work: an undecodable image does not change the error
    assert_config_error(media_proc_cfg, case["expected"]["error"], [b"definitely not an image"])
    with pytest.raises(ValueError, match=re.escape(case["expected"]["error"]["message"])):
        kimi_k3_rs.preprocess([], media_proc_cfg)


@pytest.mark.parametrize("profile", ["kimi_k25", "kimi_k3"])
def test_R07_empty_config_and_presets(profile):
    case = CASES["R07"]
    media_proc_cfg = case_cfg(case, profile)
    assert media_proc_cfg == {}
    img = noise(2000, 2000, "RGB", 0)
    assert_config_error(media_proc_cfg, case["expected"]["error"], [img])
    assert_config_error(media_proc_cfg, case["expected"]["error"], [b"junk"])
    # presets: the published values, inspectable
    preset = kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG if profile == "kimi_k3" else kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG
    keys = K3_IMAGE_KEYS if profile == "kimi_k3" else K25_IMAGE_KEYS
    for key, value in keys.items():
        assert preset[key] == value, key
    processor = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg=preset)
    assert processor.media_proc_cfg == preset
    exp = case["expected"]["presets"][profile]
    run_and_check(img, preset, exp)
    wrong = case["expected"]["wrong_defaults_4096_64_would_give"]
    assert kimi_k3_rs.preprocess(img, preset)["grid_thws"].tolist() != wrong["grid_thws"]


# ---------------------------------------------------------------------------
# R14 / R15 EXIF orientation: never transposed by default
# ---------------------------------------------------------------------------


def jpeg_with_orientation(img, orientation, **kw):
    exif = Image.Exif()
    exif[0x0112] = orientation
    return encode(img, "JPEG", exif=exif.tobytes(), **kw)


def r14_bytes():
    a = np.zeros((480, 640, 3), np.uint8)
    a[:, :20] = (255, 0, 0)
    a[-20:, :] = (0, 255, 0)
    return jpeg_with_orientation(Image.fromarray(a), 6, quality=95)


def r15_bytes():
    return jpeg_with_orientation(vgradient(200, 100), 8)


@pytest.mark.parametrize("case_id,builder", [("R14", r14_bytes), ("R15", r15_bytes)])
def test_exif_orientation_not_applied(case_id, builder, tmp_path):
    case = CASES[case_id]
    media_proc_cfg = case_cfg(case)
    raw = builder()
    opened = Image.open(io.BytesIO(raw))
    assert opened.getexif()[0x0112] in (6, 8)
    assert opened.size == (case["width"], case["height"])
    exp = case["expected"]["reference_default"]
    path = tmp_path / "exif.jpg"
    path.write_bytes(raw)
    for item in (raw, str(path), Image.open(io.BytesIO(raw)), {"type": "image", "image": raw}):
        run_and_check(item, media_proc_cfg, exp)
    # the rotated grid is only for an explicit opt-in, which the default must not do
    assert exp["grid_thws"] != case["expected"]["with_opt_in_exif_transpose"]["grid_thws"]


@pytest.mark.parametrize("case_id,builder", [("R14", r14_bytes), ("R15", r15_bytes)])
def test_exif_orientation_opt_in(case_id, builder, tmp_path):
    """``with_opt_in_exif_transpose``: the explicit flag rotates on every decode path."""
    from PIL import ImageOps

    case = CASES[case_id]
    media_proc_cfg = case_cfg(case)
    raw = builder()
    exp = case["expected"]["with_opt_in_exif_transpose"]
    rotated = ImageOps.exif_transpose(Image.open(io.BytesIO(raw)))
    ref = reference_preprocess(rotated, media_proc_cfg)
    assert ref[1].tolist() == exp["grid_thws"]
    path = tmp_path / "exif.jpg"
    path.write_bytes(raw)
    with Image.open(path) as lazy:
        items = [raw, str(path), path, lazy, {"type": "image", "image": raw}]
        for item in items:
            out = kimi_k3_rs.preprocess(item, media_proc_cfg, pillow_compat=REF_COMPAT, exif_transpose=True)
            assert_output_matches(out, ref)
        processor = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg, exif_transpose=True)
        assert_output_matches(processor.preprocess([{"type": "image", "image": raw}]), ref)
        enc = kimi_k3_rs.prepare_kimi_k3_encoder_inputs(items, processor)
        assert enc.grid_thws.tolist() == exp["grid_thws"] * len(items)
        assert enc.num_tokens == [exp["num_tokens"]] * len(items)
        assert enc.original_image_sizes == [[case["height"], case["width"]]] * len(items)
        for got in enc.materialize():
            assert np.array_equal(got.view(np.uint32), ref[0].view(np.uint32))


# ---------------------------------------------------------------------------
# R19 decompression bomb
# ---------------------------------------------------------------------------


BOMB_ERRORS = (ValueError, Image.DecompressionBombError)


def test_R19_bomb_bytes_are_65_bytes():
    raw = bomb_png()
    assert len(raw) == 65
    with pytest.raises(Image.DecompressionBombError):  # what Pillow (the reference) does
        Image.open(io.BytesIO(raw))


def test_R19_decompression_bomb_rejected(tmp_path):
    case = CASES["R19"]
    media_proc_cfg = case_cfg(case)
    raw = bomb_png()
    path = tmp_path / "bomb.png"
    path.write_bytes(raw)
    for item in (raw, str(path), {"type": "image", "image": raw}):
        with pytest.raises(BOMB_ERRORS):
            kimi_k3_rs.preprocess(item, media_proc_cfg)
        with pytest.raises(BOMB_ERRORS):
            kimi_k3_rs.preprocess([noise(30, 30, "RGB", 0), item], media_proc_cfg)
    # the size math alone is fine
    rc = resize_cfg((100000, 100000), media_proc_cfg)
    exp = case["expected"]["size_math_only"]
    grid = [[1, (rc["new_height"] + rc["pad_height"]) // 14, (rc["new_width"] + rc["pad_width"]) // 14]]
    assert grid == exp["grid_thws"]
    assert rc["num_tokens"] == exp["num_tokens"]
    # usable afterwards
    run_and_check(noise(64, 48, "RGB", 1), media_proc_cfg, {})


def test_R19_bomb_peak_memory_stays_small(tmp_path):
    """Rejected from the header: the process never allocates the 30 GB canvas."""
    path = tmp_path / "bomb.png"
    path.write_bytes(bomb_png())
    script = textwrap.dedent(
        f"""
        import resource, sys
        import kimi_k3_rs
        from PIL import Image
        before = int([line for line in open('/proc/self/status') if line.startswith('VmHWM:')][0].split()[1])
        try:
            kimi_k3_rs.preprocess({str(path)!r}, kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG)
        except (ValueError, Image.DecompressionBombError):
            pass
        else:
            sys.exit("no error")
        after = int([line for line in open('/proc/self/status') if line.startswith('VmHWM:')][0].split()[1])
        print(before, after)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    before_kb, after_kb = map(int, proc.stdout.split())
    assert after_kb - before_kb < 256 * 1024, (before_kb, after_kb)


# ---------------------------------------------------------------------------
# R20 batch of eight 2048x2048
# ---------------------------------------------------------------------------


def test_R20_batch_of_eight():
    case = CASES["R20"]
    media_proc_cfg = case_cfg(case)
    images = batch_images(case)
    exp = case["expected"]
    per = exp["per_image"]
    out = run_and_check(images, media_proc_cfg, {"grid_thws": per["grid_thws"] * 8,
                                                 "num_tokens": [per["num_tokens"]] * 8,
                                                 "pixel_values_rows": exp["pixel_values_rows"]})
    for img in images:
        rc = resize_cfg(img.size, media_proc_cfg)
        assert [rc["new_width"], rc["new_height"]] == per["new_size"]
        assert [rc["pad_width"], rc["pad_height"]] == per["pad"]
    assert out["pixel_values"].shape[0] == exp["pixel_values_rows"]


# ---------------------------------------------------------------------------
# R21 PPM bytes, error recovery
# ---------------------------------------------------------------------------


def r21_bytes():
    y, x = np.mgrid[0:48, 0:64]
    a = np.stack([x * 4, y * 5, np.zeros_like(x)], axis=2).astype(np.uint8)
    return b"P6\n64 48\n255\n" + a.tobytes()


def test_R21_ppm_bytes(tmp_path):
    case = CASES["R21"]
    media_proc_cfg = case_cfg(case)
    raw = r21_bytes()
    assert Image.open(io.BytesIO(raw)).size == (64, 48)
    out = run_and_check(raw, media_proc_cfg, case["expected"])
    # R=x*4, G=y*5, B=0 at (x=10, y=7)
    want = normalize(np.array([[[40, 35, 0]]], np.uint8), [0.5] * 3, [0.5] * 3)[0, 0]
    assert np.array_equal(pixel_at(out["pixel_values"], out["grid_thws"], 10, 7), want)
    path = tmp_path / "img.ppm"
    path.write_bytes(raw)
    run_and_check(str(path), media_proc_cfg, case["expected"])


@pytest.mark.parametrize("bad", [b"", b"not an image at all", b"P6\n64 48\n255\n" + b"\x00" * 10,
                                 b"\x89PNG\r\n\x1a\n" + b"\x00" * 30])
def test_R21_undecodable_bytes_raise_and_recover(bad):
    case = CASES["R21"]
    media_proc_cfg = case_cfg(case)
    processor = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg=media_proc_cfg)
    with pytest.raises((ValueError, OSError)) as info:
        kimi_k3_rs.preprocess([r21_bytes(), bad], media_proc_cfg)
    assert "\n" not in str(info.value).strip()  # one clear error
    with pytest.raises((ValueError, OSError)):
        processor.preprocess([{"type": "image", "image": bad}])
    # usable for the next call
    run_and_check(r21_bytes(), media_proc_cfg, case["expected"])
    again = processor.preprocess([{"type": "image", "image": r21_bytes()}])
    assert again["grid_thws"].tolist() == case["expected"]["grid_thws"]


# ---------------------------------------------------------------------------
# every case's config (after overrides) is accepted by the config layer,
# except the error cases
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_case_configs(case_id):
    case = CASES[case_id]
    profiles = case["profile"] if isinstance(case["profile"], list) else [case["profile"]]
    for profile in profiles:
        media_proc_cfg = apply_overrides(PROFILES[profile], case["cfg_overrides"])
        error = case["expected"].get("error")
        if isinstance(error, dict):
            with pytest.raises(ValueError, match=re.escape(error["message"])):
                kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg=media_proc_cfg)
        else:
            processor = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg=media_proc_cfg)
            assert processor.media_proc_cfg["in_patch_limit"] == media_proc_cfg["in_patch_limit"]


def test_vendored_cases_are_the_shared_ones():
    """tests/data holds a copy for plain clones; it must not drift from shared/."""
    vendored = helpers.DATA_DIR / "reported-cases.json"
    data = json.loads(vendored.read_text(encoding="utf-8"))
    assert [c["id"] for c in data] == [f"R{i:02d}" for i in range(1, 24)]
    if helpers._SHARED_CASES.is_file():
        assert data == json.loads(helpers._SHARED_CASES.read_text(encoding="utf-8"))
