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


def run_cli(*args, cwd=None, exe=None, timeout=300):
    cmd = ([exe] if exe else [sys.executable, "-m", "kimi_k3_rs"]) + ["preprocess", *map(str, args)]
    env = dict(os.environ)
    env.pop("PYTHONWARNINGS", None)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env,
                          errors="surrogateescape")


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



# --- special paths: FIFOs, devices, odd names, outputs that cannot be created, umask (#21 defect 7)


def make_socket(path):
    """A Unix socket file at ``path`` (bound, then closed: the file stays)."""
    import socket

    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))


@pytest.fixture()
def special_tree(tmp_path):
    """A folder of two images beside a FIFO, a socket and a FIFO reached by a symlink,
    all with image extensions (a FIFO has no writer: reading it would wait forever)."""
    root = tmp_path / "special"
    root.mkdir()
    good = [root / "a.png", root / "c.jpg"]
    noise(40, 30, "RGB", 1).save(good[0])
    noise(50, 20, "RGB", 2).save(good[1])
    os.mkfifo(root / "b-fifo.png")
    make_socket(root / "d-socket.png")
    (root / "e-link.png").symlink_to(root / "b-fifo.png")
    return {"root": root, "good": good, "skipped": {"b-fifo.png": "a FIFO", "d-socket.png": "a socket",
                                                    "e-link.png": "a FIFO"}}


def assert_skipped_lines(stderr, root, skipped):
    """One ``kimi-k3-rs: PATH: not a regular file (KIND); skipped`` line per special file."""
    want = {f"kimi-k3-rs: {root / name}: not a regular file ({kind}); skipped" for name, kind in skipped.items()}
    assert set(lines(stderr)) == want, stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fmt", ["npz", "parquet"])
def test_special_files_in_a_folder_are_skipped(special_tree, tmp_path, fmt):
    """A FIFO, a socket and a symlink to a FIFO with image extensions: each is skipped
    with a line on stderr, never opened (the old command line hung on the FIFO); the
    images are processed and written; exit 1."""
    out = tmp_path / ("out.npz" if fmt == "npz" else "shards")
    proc = run_cli(special_tree["root"], "--output", out, "--format", fmt, timeout=90)
    assert proc.returncode == 1, proc.stderr
    assert [line.split("\t")[0] for line in lines(proc.stdout)] == [str(p) for p in special_tree["good"]]
    assert_skipped_lines(proc.stderr, special_tree["root"], special_tree["skipped"])
    want = kimi_k3_rs.preprocess([str(p) for p in special_tree["good"]], K3_CFG)
    if fmt == "npz":
        with np.load(out) as npz:
            assert [str(p) for p in npz["paths"].tolist()] == [str(p) for p in special_tree["good"]]
            assert_bit_equal(npz["pixel_values"], want["pixel_values"])
    else:
        pq = pytest.importorskip("pyarrow.parquet")
        table = pq.read_table(out / "part-00000.parquet")
        assert table["path"].to_pylist() == [str(p) for p in special_tree["good"]]


@pytest.mark.timeout(120)
def test_special_path_arguments_are_skipped(special_tree, tmp_path):
    """A FIFO, a socket or a device named as a PATH is skipped the same way, never
    opened (``/dev/zero`` would never end); the other paths are processed."""
    fifo, socket_file = special_tree["root"] / "b-fifo.png", special_tree["root"] / "d-socket.png"
    good = special_tree["good"][0]
    proc = run_cli(fifo, good, "/dev/zero", socket_file, timeout=90)
    assert proc.returncode == 1, proc.stderr
    assert [line.split("\t")[0] for line in lines(proc.stdout)] == [str(good)]
    assert lines(proc.stderr) == [
        f"kimi-k3-rs: {fifo}: not a regular file (a FIFO); skipped",
        "kimi-k3-rs: /dev/zero: not a regular file (a character device); skipped",
        f"kimi-k3-rs: {socket_file}: not a regular file (a socket); skipped",
    ]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", ["dev-zero", "fifo", "fifo-in-checkpoint", "socket", "over-1-MiB"])
def test_config_that_is_not_a_small_regular_file_exits_2(tmp_path, case):
    """``--config`` is read only from a regular file of at most 1 MiB: ``/dev/zero``, a
    FIFO (also as a checkpoint folder's ``preprocessor_config.json``) and a socket are
    refused before they are opened (the old command line hung or read without end), a
    larger file before it is read; exit 2, one line, nothing processed."""
    target = tmp_path / "preprocessor_config.json"
    if case == "dev-zero":
        target = "/dev/zero"
    elif case == "fifo":
        os.mkfifo(target)
    elif case == "fifo-in-checkpoint":
        os.mkfifo(target)
        target = tmp_path
    elif case == "socket":
        make_socket(target)
    else:
        media = json.dumps({"media_proc_cfg": kimi_k3_rs.kimi_k3_media_proc_cfg()})
        target.write_text(media[:-1] + ', "pad": "' + "x" * (1 << 20) + '"}')
        assert json.loads(target.read_text())["media_proc_cfg"]  # a valid config, only too large
    proc = run_cli("--config", target, timeout=90)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    shown = tmp_path / "preprocessor_config.json" if case == "fifo-in-checkpoint" else target
    kinds = {"dev-zero": "a character device", "socket": "a socket"}
    why = "is over 1048576 bytes" if case == "over-1-MiB" else f"is not a regular file ({kinds.get(case, 'a FIFO')})"
    assert lines(proc.stderr) == [f"kimi-k3-rs: config {target}: {shown} {why}" + (
        f" ({target.stat().st_size})" if case == "over-1-MiB" else "")], proc.stderr


@pytest.mark.timeout(60)
def test_load_media_proc_cfg_never_blocks(tmp_path):
    """The library's reader (the command line's and ``from_pretrained``'s): a FIFO is a
    ConfigError at once, a 1 MiB file is read, one byte more is refused."""
    os.mkfifo(tmp_path / "fifo.json")
    with pytest.raises(kimi_k3_rs.ConfigError, match=r"fifo.json is not a regular file \(a FIFO\)$"):
        kimi_k3_rs.load_media_proc_cfg(tmp_path / "fifo.json")
    media = json.dumps({"media_proc_cfg": {"patch_size": 14}})
    path = tmp_path / "big.json"
    path.write_text(media + " " * ((1 << 20) - len(media)))
    assert kimi_k3_rs.load_media_proc_cfg(path) == {"patch_size": 14}
    path.write_text(media + " " * ((1 << 20) - len(media) + 1))
    with pytest.raises(kimi_k3_rs.ConfigError, match=r"big.json is over 1048576 bytes \(1048577\)$"):
        kimi_k3_rs.load_media_proc_cfg(path)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc (a folder no file can be created in)")
@pytest.mark.parametrize("fmt,target", [("npz", "/proc/x.npz"), ("parquet", "/proc/kimi-k3-rs-shards")])
def test_output_that_cannot_be_created_exits_2_before_reading(tree, fmt, target):
    """The output is created (a temporary file in its folder; the Parquet folder and its
    first shard's file) before any image is read: ``/proc/x.npz`` passes the name
    checks but cannot be created, exit 2 up front (was: every image processed, then
    exit 1)."""
    proc = run_cli(tree["root"], "--output", target, "--format", fmt)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""  # no image was read
    assert lines(proc.stderr) == [f"kimi-k3-rs: --output {target}: cannot be written: No such file or directory"]


ODD_NAMES = {
    # the file's name (bytes): how the command line prints it
    b"new\nline.png": r"new\nline.png",
    b"tab\there.png": r"tab\there.png",
    b"carriage\rreturn.png": r"carriage\rreturn.png",
    b"back\\slash.png": r"back\\slash.png",
    b"escape\x1b[31m.png": r"escape\x1b[31m.png",
    b"not-utf8-\xff.png": r"not-utf8-\xff.png",
    "zero\u200bwidth.png".encode(): r"zero\u200bwidth.png",
    "caf\u00e9 and spaces.png".encode(): "caf\u00e9 and spaces.png",
}


def test_odd_file_names_print_one_line_each(tmp_path):
    """Names with a newline, a tab, a backslash, control, invisible and non-UTF-8
    bytes: one stdout line per image, the path escaped (error lines too); the npz keeps
    the real names; the Parquet path column keeps them too, and skips (with a line) the
    name that is not UTF-8, which an Arrow string cannot hold."""
    folder = tmp_path / "odd"
    folder.mkdir()
    for i, name in enumerate(ODD_NAMES):
        noise(20 + i, 10 + i, "RGB", i).save(os.path.join(os.fsencode(folder), name), "PNG")
    broken = os.path.join(os.fsencode(folder), b"broken\n.png")
    with open(broken, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\nnot a png")
    names = sorted(ODD_NAMES)  # find_images sorts the paths
    paths = [os.fsdecode(os.path.join(os.fsencode(folder), n)) for n in names]
    out = tmp_path / "odd.npz"
    proc = run_cli(folder, "--output", out)
    assert proc.returncode == 1, proc.stderr
    printed = proc.stdout.split("\n")
    assert printed[-1] == "" and len(printed) == len(names) + 1, proc.stdout
    assert [line.split("\t")[0] for line in printed[:-1]] == [f"{folder}/{ODD_NAMES[n]}" for n in names]
    (error,) = proc.stderr.split("\n")[:-1]
    assert error.startswith(f"kimi-k3-rs: {folder}/broken\\n.png: cannot read or decode it"), error
    with np.load(out) as npz:
        assert npz["paths"].tolist() == paths
        assert_bit_equal(npz["pixel_values"], kimi_k3_rs.preprocess(paths, K3_CFG)["pixel_values"])
    pq = pytest.importorskip("pyarrow.parquet")
    proc = run_cli(folder, "--output", tmp_path / "shards", "--format", "parquet")
    assert proc.returncode == 1, proc.stderr
    utf8 = [p for n, p in zip(names, paths) if n != b"not-utf8-\xff.png"]
    assert len(proc.stdout.split("\n")) == len(utf8) + 1, proc.stdout
    assert f"kimi-k3-rs: {folder}/not-utf8-\\xff.png: the name is not UTF-8" in proc.stderr
    table = pq.read_table(tmp_path / "shards" / "part-00000.parquet")
    assert table["path"].to_pylist() == sorted([*utf8, os.fsdecode(broken)])


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_output_files_follow_the_umask(tmp_path, umask):
    """The npz and the Parquet shards get mode 0o666 less the umask, as a plain
    ``open(path, "w")`` would (the npz was 0o600 whatever the umask)."""
    from kimi_k3_rs.cli import main

    pytest.importorskip("pyarrow")
    before = os.umask(umask)
    try:
        assert main(["preprocess", "--output", str(tmp_path / "x.npz")]) == 0
        assert main(["preprocess", "--output", str(tmp_path / "shards"), "--format", "parquet"]) == 0
        with open(tmp_path / "plain", "w"):
            pass
    finally:
        os.umask(before)
    want = 0o666 & ~umask
    assert stat_mode(tmp_path / "plain") == want
    assert stat_mode(tmp_path / "x.npz") == want
    assert stat_mode(tmp_path / "shards" / "part-00000.parquet") == want
    assert sorted(os.listdir(tmp_path)) == ["plain", "shards", "x.npz"]
    assert os.listdir(tmp_path / "shards") == ["part-00000.parquet"]  # no temporary file left


def stat_mode(path):
    return os.stat(path).st_mode & 0o777


@pytest.mark.parametrize("fmt", ["npz", "parquet"])
def test_interrupted_job_leaves_no_temporary_file(tmp_path, monkeypatch, fmt):
    """A job stopped after its output was created (Ctrl-C while an image is read)
    removes the temporary file made up front; nothing is written."""
    from kimi_k3_rs import cli

    if fmt == "parquet":
        pytest.importorskip("pyarrow")

    out = tmp_path / ("x.npz" if fmt == "npz" else "shards")
    folder = tmp_path if fmt == "npz" else out
    created = []

    def interrupted(*args, **kwargs):
        created.extend(n for n in os.listdir(folder) if n.startswith("."))
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_compute_rows", interrupted)
    with pytest.raises(KeyboardInterrupt):
        cli.main(["preprocess", "--output", str(out), "--format", fmt])
    assert len(created) == 1, created  # the temporary file made before any image is read
    assert os.listdir(folder) == []


# --- papercuts (#23): folders without images, options that need another, the npz's dtype, plain --help


def test_help_is_plain_text():
    """``--help`` of the command and of ``preprocess``: plain text (no reStructuredText
    double backticks or roles: the description was the module docstring's first line),
    option names never broken at a hyphen, and the epilog names the npz's entries and
    its loader."""
    for args, columns in ((["--help"], "80"), (["preprocess", "--help"], "80"), (["preprocess", "--help"], "60")):
        env = {**os.environ, "COLUMNS": columns}
        env.pop("PYTHONWARNINGS", None)
        proc = subprocess.run([sys.executable, "-m", "kimi_k3_rs", *args], check=False, capture_output=True,
                              text=True, timeout=120, env=env)
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
        text = proc.stdout
        assert "``" not in text and ":func:" not in text and ":data:" not in text, text
        assert "Preprocess image files and folders as the Kimi-K3 / K2.5 checkpoint does;" in text, text
        assert [line for line in text.splitlines() if line.rstrip().endswith("-")] == [], text
        if args[0] == "preprocess":
            assert "--ray-address or $RAY_ADDRESS" in " ".join(text.split()), text
            assert "pixel_values, grid_thws, paths and dtype" in text and "kimi_k3_rs.cli.load_npz(path)" in text


@pytest.mark.parametrize("given,refused", [
    (["--shard-size", "3"], "argument --shard-size: not allowed without --format parquet"),
    (["--shard-size", "3", "--format", "npz", "--output", "{out}.npz"],
     "argument --shard-size: not allowed without --format parquet"),
    (["--shard-size", "3", "--output", "{out}.npz"], "argument --shard-size: not allowed without --format parquet"),
    (["--format", "parquet"], "argument --format: not allowed without --output"),
    (["--format", "npz"], "argument --format: not allowed without --output"),
    (["--format", "parquet", "--shard-size", "3"], "argument --format: not allowed without --output"),
])
def test_option_without_the_one_it_needs_is_refused(tmp_path, given, refused):
    """``--shard-size`` acts only with ``--format parquet`` and ``--format`` only with
    ``--output``: given without, each is refused as argparse refuses a bad argument
    (usage, then one error line; exit 2; nothing read or written), where the old
    command line ignored it and exited 0."""
    proc = run_cli(*[a.format(out=tmp_path / "x") for a in given])
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.startswith("usage: kimi-k3-rs preprocess "), proc.stderr
    assert proc.stderr.splitlines()[-1] == f"kimi-k3-rs preprocess: error: {refused}", proc.stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("fmt", ["npz", "parquet"])
def test_empty_output_name_is_refused(tmp_path, fmt):
    """``--output ""`` is an output that cannot be written (exit 2, one line), where the
    old command line took it for no ``--output`` and exited 0 without writing."""
    proc = run_cli("--output", "", "--format", fmt, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    why = "an npz file name must end in .npz" if fmt == "npz" else "cannot be written: No such file or directory"
    assert lines(proc.stderr) == [f"kimi-k3-rs: --output : {why}"]
    assert os.listdir(tmp_path) == []


NO_IMAGES = ("no image files found under this folder (searched recursively, symlinked folders not entered, "
             "for the extensions the installed Pillow opens, such as .jpg and .png, in any case)")


@pytest.mark.parametrize("case", ["empty", "no-image-extension", "images-behind-a-symlink", "several", "beside-an-image"])
def test_folder_without_image_files_exits_1(tmp_path, case):
    """A folder under which no image file is found (empty; only files whose extension
    Pillow does not open; images only in a symlinked folder, not entered) is a line on
    stderr naming it and exit 1 (was: exit 0, nothing printed); each such folder has its
    line, and the other paths are still processed and written."""
    empty = tmp_path / "empty"
    (empty / "sub" / "deeper").mkdir(parents=True)
    others = tmp_path / "others"
    others.mkdir()
    (others / "notes.txt").write_text("not an image")
    noise(20, 20, "RGB", 1).save(others / "photo.png.bak", "PNG")  # an image, but not by its extension
    (others / "README").write_text("")
    linked = tmp_path / "linked"
    linked.mkdir()
    noise(20, 20, "RGB", 2).save(tmp_path / "outside.png")
    (tmp_path / "outside").mkdir()
    noise(20, 20, "RGB", 3).save(tmp_path / "outside" / "a.png")
    (linked / "folder").symlink_to(tmp_path / "outside", target_is_directory=True)
    args, silent, good = {
        "empty": ([empty], [empty], []),
        "no-image-extension": ([others], [others], []),
        "images-behind-a-symlink": ([linked], [linked], []),
        "several": ([empty, others, linked], [empty, others, linked], []),
        "beside-an-image": ([empty, tmp_path / "outside.png"], [empty], [tmp_path / "outside.png"]),
    }[case]
    out = tmp_path / "out.npz"
    proc = run_cli(*args, "--output", out)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert lines(proc.stderr) == [f"kimi-k3-rs: {folder}: {NO_IMAGES}" for folder in silent]
    assert [line.split("\t")[0] for line in lines(proc.stdout)] == [str(p) for p in good]
    with np.load(out) as npz:  # written with what was found, as when files cannot be read
        assert npz["paths"].tolist() == [str(p) for p in good]
        assert npz["pixel_values"].shape[0] == int(np.prod(npz["grid_thws"], axis=1).sum())
        assert len(npz["grid_thws"]) == len(good)


@pytest.fixture(scope="module")
def npz_by_dtype(files, tmp_path_factory):
    """The command line's npz of the embedded photo and files["alpha"], for each dtype."""
    folder = tmp_path_factory.mktemp("npz")
    out = {}
    for dtype in ("float32", "float16", "bfloat16"):
        out[dtype] = folder / f"{dtype}.npz"
        proc = run_cli(ROCKET, files["alpha"], "--dtype", dtype, "--output", out[dtype])
        assert proc.returncode == 0, proc.stderr
    return out


def test_npz_names_its_dtype_and_load_npz_reads_it_back(npz_by_dtype):
    """The npz holds ``dtype``, a 0-d string naming pixel_values' dtype (a bfloat16 npz
    was plain uint16, nothing marking it); :func:`kimi_k3_rs.cli.load_npz` gives
    pixel_values in that dtype: the float32 output rounded by ml_dtypes to bfloat16
    (float16 by numpy), bit for bit, widened exactly by ``<< 16``; grids and paths as
    written."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    from kimi_k3_rs.cli import load_npz

    stored = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16}
    for dtype, path in npz_by_dtype.items():
        with np.load(path) as npz:
            assert npz["dtype"].shape == () and npz["dtype"].dtype.kind == "U" and npz["dtype"].item() == dtype
            assert npz["pixel_values"].dtype == stored[dtype]
    f32 = load_npz(npz_by_dtype["float32"])
    want = kimi_k3_rs.preprocess([str(ROCKET), str(f32["paths"][1])], K3_CFG)
    assert f32["dtype"] == "float32" and f32["paths"] == [str(ROCKET), f32["paths"][1]]
    assert f32["paths"][1].endswith("alpha.png")
    assert_bit_equal(f32["pixel_values"], want["pixel_values"])
    assert_bit_equal(f32["grid_thws"], want["grid_thws"])
    for dtype, numpy_type in (("bfloat16", ml_dtypes.bfloat16), ("float16", np.float16)):
        loaded = load_npz(npz_by_dtype[dtype])
        assert loaded["dtype"] == dtype and loaded["paths"] == f32["paths"]
        assert_bit_equal(loaded["grid_thws"], f32["grid_thws"])
        assert loaded["pixel_values"].dtype == numpy_type
        assert_bit_equal(loaded["pixel_values"].view(np.uint16),
                         f32["pixel_values"].astype(numpy_type).view(np.uint16), dtype)
    bits = load_npz(npz_by_dtype["bfloat16"])["pixel_values"].view(np.uint16)
    widened = (bits.astype(np.uint32) << 16).view(np.float32)
    assert_bit_equal(widened, f32["pixel_values"].astype(ml_dtypes.bfloat16).astype(np.float32))


def test_load_npz_without_ml_dtypes_gives_the_bits(npz_by_dtype, monkeypatch):
    """Without ml_dtypes, bfloat16 comes back as its uint16 bits (as preprocess gives
    it), the ``dtype`` entry saying what they are."""
    from kimi_k3_rs.cli import load_npz

    with np.load(npz_by_dtype["bfloat16"]) as npz:
        stored = npz["pixel_values"]
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # import ml_dtypes raises ImportError
    loaded = load_npz(npz_by_dtype["bfloat16"])
    assert loaded["dtype"] == "bfloat16" and loaded["pixel_values"].dtype == np.uint16
    assert_bit_equal(loaded["pixel_values"], stored)


@pytest.mark.parametrize("case,message", [
    (".npy", "not an npz archive (a single .npy array)"),
    ("text", "not an npz archive of arrays"),
    ("no-dtype", "no dtype entry (kimi-k3-rs preprocess --output OUT.npz writes pixel_values, grid_thws, paths, dtype)"),
    ("unknown-dtype", "dtype must be a 0-d string array 'float32', 'float16' or 'bfloat16', got 'int8'"),
    ("dtype-not-a-string", "dtype must be a 0-d string array 'float32', 'float16' or 'bfloat16', got 16"),
    ("dtype-not-0-d", ("dtype must be a 0-d string array 'float32', 'float16' or 'bfloat16', got <numpy.ndarray"
                       " shape=(1,) dtype=<U8>")),
    ("stored-otherwise", "pixel_values of float32 must be stored as float32, not uint16"),
    ("grid-disagrees", "shapes do not agree: pixel_values uint16[1472, 3, 14, 14], grid_thws int64[1, 3], paths [1]"),
    ("paths-disagree", "shapes do not agree: pixel_values uint16[1472, 3, 14, 14], grid_thws int64[1, 3], paths [2]"),
])
def test_load_npz_refuses_what_the_command_line_does_not_write(npz_by_dtype, tmp_path, case, message):
    """A file that is not the command line's npz is a ValueError naming the file and
    what is wrong, never wrong arrays."""
    from kimi_k3_rs.cli import load_npz

    with np.load(npz_by_dtype["bfloat16"]) as npz:
        good = {k: npz[k] for k in npz.files}
    good["paths"], good["grid_thws"] = good["paths"][:1], good["grid_thws"][:1]
    good["pixel_values"] = good["pixel_values"][:int(np.prod(good["grid_thws"][0]))]
    np.savez(tmp_path / "good.npz", **good)
    assert load_npz(tmp_path / "good.npz")["paths"] == [str(ROCKET)]  # the entries below alone are at fault
    path = tmp_path / ("bad.npy" if case == ".npy" else f"bad-{case}.npz")
    if case == ".npy":
        np.save(path, good["pixel_values"])
    elif case == "text":
        path.write_text("pixel_values\n")
    else:
        entries = dict(good)
        if case == "no-dtype":
            del entries["dtype"]
        elif case == "unknown-dtype":
            entries["dtype"] = np.array("int8")
        elif case == "dtype-not-a-string":
            entries["dtype"] = np.array(16)
        elif case == "dtype-not-0-d":
            entries["dtype"] = np.array(["bfloat16"])
        elif case == "stored-otherwise":
            entries["dtype"] = np.array("float32")
        elif case == "grid-disagrees":
            entries["grid_thws"] = entries["grid_thws"] * 2
        else:
            entries["paths"] = np.array(["a", "b"])
        with open(path, "wb") as f:
            np.savez(f, **entries)
    with pytest.raises(ValueError) as raised:
        load_npz(path)
    assert str(raised.value) == f"{path}: {message}"
