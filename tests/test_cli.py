"""The ``kimi-k3-rs preprocess`` command line (run as ``python -m kimi_k3_rs``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import kimi_k3_rs
from helpers import (
    K3_CFG,
    K25_CFG,
    REF_COMPAT,
    ROCKET,
    alpha_pattern_rgba,
    assert_bit_equal,
    cfg,
    noise,
    upscale,
)
from reference import navit_resize_image, reference_preprocess


def run_cli(*args, cwd=None, exe=None):
    cmd = ([exe] if exe else [sys.executable, "-m", "kimi_k3_rs"]) + ["preprocess", *map(str, args)]
    env = dict(os.environ)
    env.pop("PYTHONWARNINGS", None)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=cwd, env=env)


def lines(text):
    return [line for line in text.splitlines() if line.strip()]


def assert_line_describes(line, path, media_proc_cfg):
    with Image.open(path) as img:
        w, h = img.size
    rc = navit_resize_image(w, h, media_proc_cfg["patch_size"], media_proc_cfg["merge_kernel_size"],
                            media_proc_cfg["in_patch_limit"], media_proc_cfg["patch_limit_on_one_side"],
                            media_proc_cfg.get("fixed_output_tokens"))
    gh = (rc["new_height"] + rc["pad_height"]) // media_proc_cfg["patch_size"]
    gw = (rc["new_width"] + rc["pad_width"]) // media_proc_cfg["patch_size"]
    assert str(path) in line, line
    assert f"{w}x{h}" in line, line
    assert f"{rc['new_width']}x{rc['new_height']}" in line, line
    assert f"1x{gh}x{gw}" in line, line
    assert str(rc["num_tokens"]) in line, line
    assert "ms" in line, line


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli")
    big = upscale(Image.open(ROCKET).convert("RGB"), 4)  # 2560x1708: the K2.5 preset resizes it
    paths = {
        "big": folder / "big.png",
        "alpha": folder / "alpha.png",
        "tall": folder / "tall.png",
        "bad": folder / "broken.png",
    }
    big.save(paths["big"])
    alpha_pattern_rgba(500, 400, seed=3).save(paths["alpha"])
    noise(1242, 2688, "RGB", 0).save(paths["tall"])
    paths["bad"].write_bytes(b"\x89PNG\r\n\x1a\nthis is not a png")
    return paths


def test_no_path_runs_on_embedded_photo():
    proc = run_cli()
    assert proc.returncode == 0, proc.stderr
    out = lines(proc.stdout)
    assert len(out) == 1, proc.stdout
    assert "rocket.jpg" in out[0]
    with Image.open(ROCKET) as img:
        w, h = img.size
    assert f"{w}x{h}" in out[0]
    assert proc.stderr.strip() == ""


def test_console_script_installed():
    exe = Path(sys.executable).with_name("kimi-k3-rs")
    assert exe.exists(), f"{exe} missing: the [project.scripts] entry point is not installed"
    proc = run_cli(exe=str(exe))
    assert proc.returncode == 0, proc.stderr
    assert len(lines(proc.stdout)) == 1


def test_output_npz_matches_reference(files, tmp_path):
    out = tmp_path / "x.npz"
    proc = run_cli(files["alpha"], files["big"], "--output", out)
    assert proc.returncode == 0, proc.stderr
    printed = lines(proc.stdout)
    assert len(printed) == 2
    assert_line_describes(printed[0], files["alpha"], K3_CFG)  # default preset: kimi-k3
    assert_line_describes(printed[1], files["big"], K3_CFG)
    with np.load(out) as npz:
        assert set(npz.files) >= {"pixel_values", "grid_thws", "paths"}
        pv, grid, paths = npz["pixel_values"], npz["grid_thws"], npz["paths"]
    assert [str(p) for p in paths.tolist()] == [str(files["alpha"]), str(files["big"])]
    ref_pv, ref_grid = reference_preprocess([str(files["alpha"]), str(files["big"])], K3_CFG)
    assert_bit_equal(grid, ref_grid, "grid_thws")
    assert_bit_equal(pv, ref_pv, "pixel_values")


def test_embedded_photo_npz(tmp_path):
    out = tmp_path / "rocket.npz"
    proc = run_cli("--preset", "kimi-k2.5", "--output", out)
    assert proc.returncode == 0, proc.stderr
    with np.load(out) as npz:
        assert_bit_equal(npz["pixel_values"], reference_preprocess(str(ROCKET), K25_CFG)[0])


def test_unreadable_file_among_good_ones(files, tmp_path):
    missing = tmp_path / "does-not-exist.jpg"
    out = tmp_path / "partial.npz"
    proc = run_cli(files["alpha"], files["bad"], files["big"], missing, "--output", out)
    assert proc.returncode == 1
    printed = lines(proc.stdout)
    assert len(printed) == 2, proc.stdout
    assert_line_describes(printed[0], files["alpha"], K3_CFG)
    assert_line_describes(printed[1], files["big"], K3_CFG)
    errors = lines(proc.stderr)
    assert len(errors) == 2, proc.stderr  # one line per bad file, no traceback
    assert str(files["bad"]) in errors[0] and str(missing) in errors[1]
    assert "Traceback" not in proc.stderr
    with np.load(out) as npz:
        ref_pv, ref_grid = reference_preprocess([str(files["alpha"]), str(files["big"])], K3_CFG)
        assert_bit_equal(npz["grid_thws"], ref_grid, "grid_thws")
        assert_bit_equal(npz["pixel_values"], ref_pv)


def test_only_bad_files(files):
    proc = run_cli(files["bad"])
    assert proc.returncode == 1
    assert lines(proc.stdout) == []
    assert len(lines(proc.stderr)) == 1


@pytest.mark.parametrize("preset,media_proc_cfg", [("kimi-k2.5", K25_CFG), ("kimi-k3", K3_CFG)])
def test_preset(files, tmp_path, preset, media_proc_cfg):
    out = tmp_path / "p.npz"
    proc = run_cli(files["big"], "--preset", preset, "--output", out)
    assert proc.returncode == 0, proc.stderr
    assert_line_describes(lines(proc.stdout)[0], files["big"], media_proc_cfg)
    with np.load(out) as npz:
        assert_bit_equal(npz["pixel_values"], reference_preprocess(str(files["big"]), media_proc_cfg)[0])
    if preset == "kimi-k2.5":
        rc = navit_resize_image(2560, 1708, 14, 2, 16384, 512, None)
        assert (rc["new_width"], rc["new_height"]) != (2560, 1708)  # the preset really resized


@pytest.mark.parametrize("target", ["folder", "file"])
def test_config_checkpoint(files, tmp_path, target):
    media_proc_cfg = cfg("kimi_k3", in_patch_limit=900, transparent_bg_config={"pattern": "white"})
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "preprocessor_config.json").write_text(
        json.dumps({"auto_map": {"AutoImageProcessor": "x.Y"}, "media_proc_cfg": media_proc_cfg}),
        encoding="utf-8")
    out = tmp_path / "c.npz"
    arg = folder if target == "folder" else folder / "preprocessor_config.json"
    proc = run_cli(files["alpha"], "--config", arg, "--output", out)
    assert proc.returncode == 0, proc.stderr
    assert_line_describes(lines(proc.stdout)[0], files["alpha"], media_proc_cfg)
    with np.load(out) as npz:
        assert_bit_equal(npz["pixel_values"], reference_preprocess(str(files["alpha"]), media_proc_cfg)[0])


def test_pillow_compat_option(files, tmp_path):
    results = {}
    for compat in ("12", "13", "auto"):
        out = tmp_path / f"{compat}.npz"
        proc = run_cli(files["tall"], "--preset", "kimi-k2.5", "--pillow-compat", compat, "--output", out)
        assert proc.returncode == 0, proc.stderr
        with np.load(out) as npz:
            results[compat] = npz["pixel_values"]
        want = kimi_k3_rs.preprocess(str(files["tall"]), K25_CFG,
                                     pillow_compat=compat)["pixel_values"]
        assert_bit_equal(results[compat], want)
    assert not np.array_equal(results["12"], results["13"])  # 1242x2688 runs vertical first in 13
    assert_bit_equal(results[REF_COMPAT], reference_preprocess(str(files["tall"]), K25_CFG)[0])
    assert_bit_equal(results["auto"], results[REF_COMPAT])


def test_bad_arguments():
    proc = run_cli("--preset", "kimi-k9")
    assert proc.returncode == 2
    proc = run_cli("--pillow-compat", "14")
    assert proc.returncode == 2


def test_exif_transpose_option_and_other_modes(tmp_path, capsys):
    """``--exif-transpose`` rotates (size and grid follow it); without it nothing rotates.
    Palette, CMYK and 16-bit files go through the same command (run in-process)."""
    from PIL import ImageOps

    from kimi_k3_rs.cli import main

    exif = Image.Exif()
    exif[0x0112] = 6
    rotated_jpg = tmp_path / "rot.jpg"
    with Image.open(ROCKET) as rocket:
        upscale(rocket.convert("RGB"), 2).save(rotated_jpg, exif=exif.tobytes())  # 1280x854
    gif = tmp_path / "pal.gif"
    alpha_pattern_rgba(300, 200, seed=1).convert("P").save(gif)
    cmyk = tmp_path / "cmyk.jpg"
    noise(500, 300, "RGB", 2).convert("CMYK").save(cmyk)
    grey16 = tmp_path / "grey16.png"
    Image.frombytes("I;16", (64, 40), np.arange(64 * 40, dtype="<u2").tobytes()).save(grey16)
    paths = [rotated_jpg, gif, cmyk, grey16]
    media_proc_cfg = cfg("kimi_k25", in_patch_limit=2000)
    config = tmp_path / "preprocessor_config.json"
    config.write_text(json.dumps({"media_proc_cfg": media_proc_cfg}))
    for flag in ([], ["--exif-transpose"]):
        out = tmp_path / f"out{len(flag)}.npz"
        assert main(["preprocess", *map(str, paths), "--config", str(config), "--output", str(out), *flag]) == 0
        printed = lines(capsys.readouterr().out)
        assert len(printed) == 4
        with Image.open(rotated_jpg) as img:
            (w, h) = img.size
        assert (f"{h}x{w}" if flag else f"{w}x{h}") in printed[0]
        refs = []
        for path in paths:
            with Image.open(path) as img:
                refs.append(reference_preprocess(ImageOps.exif_transpose(img) if flag else img, media_proc_cfg))
        with np.load(out) as npz:
            assert_bit_equal(npz["pixel_values"], np.concatenate([r[0] for r in refs]))
            assert_bit_equal(npz["grid_thws"], np.concatenate([r[1] for r in refs]))


# --- folders, batches, parquet, --output checks, progress bar ---------------------------


@pytest.fixture()
def tree(tmp_path):
    """A folder with nested subfolders, mixed-case extensions, a non-image file, a bad
    image, a symlink to a file outside and a symlinked folder (neither followed)."""
    root = tmp_path / "photos"
    (root / "b" / "deeper").mkdir(parents=True)
    (root / "a").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    noise(300, 200, "RGB", 1).save(root / "a" / "one.PNG")
    noise(64, 500, "RGB", 2).save(root / "b" / "two.jpg")
    alpha_pattern_rgba(120, 90, seed=5).save(root / "b" / "deeper" / "three.png")
    noise(20, 20, "RGB", 3).save(root / "tiny.Png")  # 1 token
    (root / "b" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nthis is not a png")
    (root / "notes.txt").write_text("not an image")
    noise(50, 50, "RGB", 4).save(outside / "elsewhere.png")
    (root / "link-out.png").symlink_to(outside / "elsewhere.png")
    (root / "linked-folder").symlink_to(outside, target_is_directory=True)
    (root / "a" / "link-in.png").symlink_to(root / "tiny.Png")
    good = [root / "a" / "link-in.png", root / "a" / "one.PNG", root / "b" / "deeper" / "three.png",
            root / "b" / "two.jpg", root / "tiny.Png"]
    return {"root": root, "good": good, "bad": root / "b" / "broken.png"}


def test_folder_recursive_sorted_with_a_bad_file(tree, tmp_path):
    out = tmp_path / "tree.npz"
    proc = run_cli(tree["root"], "--output", out, "--batch-size", "2", "--num-threads", "2")
    assert proc.returncode == 1, proc.stderr
    printed = lines(proc.stdout)
    assert [line.split("\t")[0] for line in printed] == [str(p) for p in tree["good"]]
    for line, path in zip(printed, tree["good"]):
        assert_line_describes(line, path, K3_CFG)
    errors = lines(proc.stderr)
    assert len(errors) == 1 and errors[0].startswith(f"kimi-k3-rs: {tree['bad']}: "), proc.stderr
    assert "image 0" not in errors[0] and "Traceback" not in proc.stderr
    with np.load(out) as npz:
        assert [str(p) for p in npz["paths"].tolist()] == [str(p) for p in tree["good"]]
        want = kimi_k3_rs.preprocess([str(p) for p in tree["good"]], K3_CFG)
        assert_bit_equal(npz["pixel_values"], want["pixel_values"])
        assert_bit_equal(npz["grid_thws"], want["grid_thws"])
    assert sorted(os.listdir(tmp_path)) == sorted(["outside", "photos", "tree.npz"])  # no temp file left


def test_token_counts_singular_and_plural(tree):
    proc = run_cli(tree["root"] / "tiny.Png", tree["root"] / "a" / "one.PNG")
    assert proc.returncode == 0, proc.stderr
    first, second = lines(proc.stdout)
    assert "\t1 token\t" in first
    assert "\t1 tokens" not in first and " tokens\t" in second


def test_parquet_shards_read_back(tree, tmp_path):
    pa = pytest.importorskip("pyarrow")
    dataset = pytest.importorskip("pyarrow.dataset")
    from kimi_k3_rs.arrow import arrow_schema, pixel_values_from_arrow

    out = tmp_path / "shards"
    proc = run_cli(tree["root"], "--output", out, "--format", "parquet", "--shard-size", "2",
                   "--batch-size", "3", "--dtype", "bfloat16")
    assert proc.returncode == 1, proc.stderr
    assert sorted(os.listdir(out)) == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    table = dataset.dataset(out, format="parquet").to_table()
    assert table.schema.equals(arrow_schema("bfloat16", 14, [pa.field("path", pa.string())]), check_metadata=True)
    everything = sorted([*tree["good"], tree["bad"]], key=str)
    assert table["path"].to_pylist() == [str(p) for p in everything]
    errors = table["error"].to_pylist()
    assert [e is not None for e in errors] == [p == tree["bad"] for p in everything]
    pixels = [p for p in pixel_values_from_arrow(table) if p is not None]
    want = kimi_k3_rs.preprocess([str(p) for p in tree["good"]], K3_CFG, dtype="bfloat16")["pixel_values"]
    assert np.concatenate(pixels).view(np.uint16).tobytes() == want.view(np.uint16).tobytes()


@pytest.mark.parametrize("case", ["no-suffix", "folder", "missing-parent", "parquet-not-empty", "parquet-file"])
def test_bad_output_exits_2_before_reading(tree, tmp_path, case):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    (tmp_path / "plain-file").write_text("")
    target, fmt = {
        "no-suffix": (tmp_path / "out_noext", "npz"),
        "folder": (tmp_path / "full", "npz"),
        "missing-parent": (tmp_path / "nowhere" / "x.npz", "npz"),
        "parquet-not-empty": (tmp_path / "full", "parquet"),
        "parquet-file": (tmp_path / "plain-file", "parquet"),
    }[case]
    before = sorted(os.listdir(tmp_path))
    proc = run_cli(tree["root"], "--output", target, "--format", fmt)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""  # nothing was read
    (line,) = lines(proc.stderr)
    assert line.startswith(f"kimi-k3-rs: --output {target}: "), line
    assert sorted(os.listdir(tmp_path)) == before  # nothing written, no out_noext.npz
    assert sorted(os.listdir(tmp_path / "full")) == ["x"]


def test_npz_written_exactly_at_its_name_and_replaced(tmp_path):
    out = tmp_path / "again.npz"
    out.write_bytes(b"old")
    proc = run_cli("--output", out)
    assert proc.returncode == 0, proc.stderr
    with np.load(out) as npz:
        assert npz["grid_thws"].tolist() == [[1, 32, 46]]
    assert os.listdir(tmp_path) == ["again.npz"]


def test_progress_bar_only_on_a_terminal(tree):
    """Piped stderr: no bar (empty stderr on success). A terminal: tqdm's bar on stderr."""
    pytest.importorskip("tqdm")
    import fcntl
    import pty
    import struct
    import termios

    good = [str(p) for p in tree["good"]]
    proc = run_cli(*good)
    assert proc.returncode == 0 and proc.stderr == ""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a 100-column terminal
    try:
        env = dict(os.environ)
        env.pop("PYTHONWARNINGS", None)
        done = subprocess.run([sys.executable, "-m", "kimi_k3_rs", "preprocess", *good], stdout=subprocess.PIPE,
                              stderr=follower, timeout=300, env=env)
        os.close(follower)
        follower = -1
        chunks = []
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
    finally:
        if follower != -1:
            os.close(follower)
        os.close(leader)
    bar = b"".join(chunks).decode(errors="replace")
    assert done.returncode == 0
    assert f"{len(good)}/{len(good)}" in bar and "image" in bar, bar
    assert len(lines(done.stdout.decode())) == len(good)
