"""Kimi-K2.5 video chunks against a transcription of the checkpoint (``docs/video-spec.md``).

The reference below is written from the checkpoint's definitions (``media_utils.py:
navit_resize_video``, ``timestamp_as_str``; ``kimi_k25_vision_processing.py:
KimiK25VisionProcessor.get_resize_config``, ``split_video_chunks``, ``preprocess``) with
Pillow and numpy only; it never imports ``kimi_k3_rs``. Pixels are compared with zero
tolerance (float32 bits).
"""

from __future__ import annotations

import io
import math
import random
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pytest
from PIL import Image

import kimi_k3_rs
from kimi_k3_rs import video
from reference import navit_patchify, navit_resize_image, normalize

K25 = kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG
K3 = kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG
FPS_VALUES = [24.0, 25.0, 30000 / 1001, 24000 / 1001, 30.0, 29.97]
PROMPT = "<|media_begin|>video<|media_content|><|media_pad|><|media_end|>"


def k25(**changes: Any) -> dict[str, Any]:
    return {**K25, **changes}


# --- the reference (transcribed from the checkpoint's definitions) ---------------------


def ref_timestamp_as_str(timestamp: float, timestamp_mode: str = "hh:mm:ss.fff") -> str:
    """``media_utils.py: timestamp_as_str``."""
    if timestamp_mode == "hh:mm:ss.fff":
        return datetime.fromtimestamp(timestamp, tz=timezone.utc).strftime("%H:%M:%S") + f".{int((timestamp % 1) * 1000):03d}"
    elif timestamp_mode == "mm:ss.fff":
        return datetime.fromtimestamp(timestamp, tz=timezone.utc).strftime("%M:%S") + f".{int((timestamp % 1) * 1000):03d}"
    elif timestamp_mode == "mm:ss":
        return datetime.fromtimestamp(timestamp, tz=timezone.utc).strftime("%M:%S")
    else:
        raise ValueError(f"Invalid timestamp mode: {timestamp_mode}")


def ref_navit_resize_video(width, height, nframes, avg_fps, sample_fps, patch_size, merge_kernel_size,
                           in_patch_limit_each_frame, patch_limit_on_one_side, in_patch_limit_total,
                           max_num_frames_each_video, fixed_output_tokens_each_frame):
    """``media_utils.py: navit_resize_video``."""
    sample_fps = min(sample_fps, avg_fps)
    sampled_nframes = max(round(nframes * sample_fps / avg_fps), 1)
    if max_num_frames_each_video is not None:
        sampled_nframes = min(sampled_nframes, max_num_frames_each_video)
    if in_patch_limit_total is not None:
        in_patch_limit_each_frame = min(round(in_patch_limit_total / sampled_nframes), in_patch_limit_each_frame)
    ret = navit_resize_image(width, height, patch_size, merge_kernel_size, in_patch_limit_each_frame,
                             patch_limit_on_one_side, fixed_output_tokens_each_frame)
    ret["sampled_nframes"] = sampled_nframes
    return ret


def ref_chunk_resize_config(width: int, height: int, num_frames: int, cfg: dict[str, Any]) -> dict[str, int]:
    """``KimiK25VisionProcessor.get_resize_config`` for a ``video_chunk`` (frame 0's size)."""
    sample_fps, max_num_frames_each_video = math.inf, None  # real_sample_fps_and_max_num_frames("video_chunk")
    each = cfg["in_patch_limit_each_frame"]
    if each is None:
        each = cfg["in_patch_limit"]
    return ref_navit_resize_video(width, height, num_frames, 1.0, sample_fps, cfg["patch_size"],
                                  cfg["merge_kernel_size"], each, cfg["patch_limit_on_one_side"],
                                  cfg["in_patch_limit_video"], max_num_frames_each_video, cfg["fixed_output_tokens"])


def ref_split_plan(num_frames: int, fps: float, cfg: dict[str, Any]) -> list[tuple[list[int], str, str]]:
    """``KimiK25VisionProcessor.split_video_chunks`` up to the decode: (frame ids, timestamp, prompt)."""
    sample_fps = min(cfg["sample_fps"], fps)
    sampled_nframes = max(round(num_frames * sample_fps / fps), 1)
    frame_inds = np.linspace(0, num_frames - 1, sampled_nframes).round().astype(int).tolist()
    t = cfg["temporal_merge_kernel_size"]
    out = []
    for i in range(0, len(frame_inds), t):
        text = ref_timestamp_as_str(frame_inds[i] / float(fps), cfg["timestamp_mode"])
        out.append((frame_inds[i:i + t], text, f"{text}<|media_begin|>video<|media_content|><|media_pad|><|media_end|>"))
    return out


def ref_to_pil(frame: Any) -> Image.Image:
    """``_to_pil`` (arrays as the PIL image of their mode, as the test feeds them)."""
    if isinstance(frame, np.ndarray):
        frame = Image.fromarray(frame[:, :, 0] if frame.ndim == 3 and frame.shape[2] == 1 else frame)
    elif isinstance(frame, bytes):
        frame = Image.open(io.BytesIO(frame))
    return frame.convert("RGB")


def ref_preprocess(medias: list[Any], cfg: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """``KimiK25VisionProcessor.preprocess`` for image and video_chunk items."""
    ps = cfg["patch_size"]
    pixel_values = []
    for item in medias:
        if isinstance(item, dict) and item["type"] == "video_chunk":
            frames = [ref_to_pil(f) for f in item["video_chunk"]]
            width, height = frames[0].size
            rc = ref_chunk_resize_config(width, height, len(frames), cfg)
        else:
            frames = [ref_to_pil(item["image"] if isinstance(item, dict) else item)]
            rc = navit_resize_image(*frames[0].size, ps, cfg["merge_kernel_size"], cfg["in_patch_limit"],
                                    cfg["patch_limit_on_one_side"], cfg["fixed_output_tokens"])
        stack = []
        for frame in frames:
            arr = np.asarray(frame.resize((rc["new_width"], rc["new_height"]), Image.Resampling.BICUBIC))
            stack.append(np.pad(arr, ((0, rc["pad_height"]), (0, rc["pad_width"]), (0, 0)), mode="constant", constant_values=0))
        pixel_values.append(np.stack(stack, axis=0))
    pvs, grids = [], []
    for pixels in pixel_values:
        patches, grid = navit_patchify(normalize(pixels, cfg["image_mean"], cfg["image_std"]), ps)
        pvs.append(patches)
        grids.append(grid)
    return np.concatenate(pvs).astype(np.float32), np.array(grids, dtype=np.int64)


def noise(h: int, w: int, seed: int, c: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, c), dtype=np.uint8)


def assert_same(medias: list[Any], cfg: dict[str, Any]) -> np.ndarray:
    expected_pv, expected_grids = ref_preprocess(medias, cfg)
    out = kimi_k3_rs.preprocess(medias, cfg)
    assert out["grid_thws"].tolist() == expected_grids.tolist()
    assert out["pixel_values"].dtype == np.float32
    assert np.array_equal(out["pixel_values"].view(np.uint32), expected_pv.view(np.uint32))
    return out["grid_thws"]


# --- sizing ----------------------------------------------------------------------------


SIZES = [(1, 1), (3, 5), (14, 14), (28, 27), (640, 360), (1280, 720), (1920, 1080), (3840, 2160), (720, 1280),
         (1000, 1000), (333, 1001), (8366, 10), (10, 9000), (4000, 3000), (7681, 4321)]
CONFIGS = [k25(), k25(in_patch_limit_video=8000), k25(in_patch_limit_video=1), k25(in_patch_limit_video=10),
           k25(in_patch_limit_video=6), k25(in_patch_limit_video=14), k25(in_patch_limit_video=12345),
           k25(in_patch_limit_video=10**6), k25(in_patch_limit_each_frame=None),
           k25(in_patch_limit_each_frame=None, in_patch_limit_video=50001), k25(fixed_output_tokens=64),
           k25(in_patch_limit_each_frame=777, in_patch_limit=99)]


@pytest.mark.parametrize("cfg", CONFIGS, ids=range(len(CONFIGS)))
def test_chunk_token_counts_match_the_reference(cfg):
    rng = random.Random(7)
    sizes = SIZES + [(rng.randint(1, 5000), rng.randint(1, 5000)) for _ in range(150)]
    rows = [(w, h, t) for (w, h) in sizes for t in (1, 2, 3, 4, 5, 7, 16, 301)]
    got = video.count_video_chunk_tokens(np.array(rows), cfg)
    assert got.dtype == np.int64 and got.shape == (len(rows),)
    assert got.tolist() == [ref_chunk_resize_config(w, h, t, cfg)["num_tokens"] for (w, h, t) in rows]


@pytest.mark.parametrize("cfg", CONFIGS[:8], ids=range(8))
def test_chunk_grids_match_the_reference_sizing(cfg):
    rng = random.Random(11)
    for _ in range(12):
        w, h, t = rng.randint(1, 700), rng.randint(1, 700), rng.randint(1, 4)
        frame = np.zeros((h, w, 3), np.uint8)
        grid = kimi_k3_rs.preprocess([{"type": "video_chunk", "video_chunk": [frame] * t}], cfg)["grid_thws"]
        rc = ref_chunk_resize_config(w, h, t, cfg)
        assert grid.tolist() == [[t, (rc["new_height"] + rc["pad_height"]) // 14, (rc["new_width"] + rc["pad_width"]) // 14]]


def test_spec_vectors():
    count = video.count_video_chunk_tokens
    assert count([[1280, 720, 4], [1280, 720, 3], [1920, 1080, 4], [3840, 2160, 4], [640, 360, 1]], K25).tolist() == [1075, 1075, 1032, 1032, 299]
    assert count([[1280, 720, 4], [1280, 720, 3], [1280, 720, 1]], k25(in_patch_limit_video=8000)).tolist() == [510, 700, 1075]
    assert count(np.zeros((0, 3), np.int64), K25).tolist() == []
    assert count([], K25).tolist() == []
    # tokens per chunk do not grow with t; the model averages over t
    assert kimi_k3_rs.count_image_tokens([[1280, 720]], K25).tolist() == [1196]


def test_long_videos_are_unbounded():
    plans = video.split_video_plan(18000, 30.0, K25)
    assert len(plans) == 300 and plans[-1].timestamp == "00:09:58.466"
    assert all(len(p.frame_indices) == 4 for p in plans)
    assert int(video.count_video_chunk_tokens([[1280, 720, 4]] * len(plans), K25).sum()) == 322500


# --- planning --------------------------------------------------------------------------


FRAME_COUNTS = list(range(1, 130)) + list(range(130, 18001, 211)) + [299, 300, 7200, 17999, 18000]


@pytest.mark.parametrize("fps", FPS_VALUES)
def test_plans_match_the_reference(fps):
    for n in FRAME_COUNTS:
        got = [(p.frame_indices, p.timestamp, p.prompt) for p in video.split_video_plan(n, fps, K25)]
        assert got == ref_split_plan(n, fps, K25), n


@pytest.mark.parametrize(
    "changes",
    [{"sample_fps": 8.0}, {"sample_fps": 1}, {"sample_fps": 0.5}, {"sample_fps": 1000.0}, {"sample_fps": math.inf},
     {"temporal_merge_kernel_size": 1}, {"temporal_merge_kernel_size": 3}, {"temporal_merge_kernel_size": 7},
     {"timestamp_mode": "mm:ss.fff"}, {"timestamp_mode": "mm:ss"}, {"sample_fps": 2.5, "timestamp_mode": "mm:ss"}],
)
def test_plans_under_other_video_keys(changes):
    cfg = k25(**changes)
    for fps in FPS_VALUES + [1.0, 0.7, 59.94, 120.0]:
        for n in (1, 2, 3, 5, 30, 75, 299, 300, 1001, 4321, 18000):
            got = [(p.frame_indices, p.timestamp, p.prompt) for p in video.split_video_plan(n, fps, cfg)]
            assert got == ref_split_plan(n, fps, cfg), (n, fps)


def test_plan_worked_examples():
    plan = video.split_video_plan
    assert [p.frame_indices for p in plan(75, 30, K25)] == [[0, 18, 37, 56], [74]]
    assert [p.timestamp for p in plan(75, 30, K25)] == ["00:00:00.000", "00:00:02.466"]
    assert [p.frame_indices for p in plan(30, 24, K25)] == [[0, 29]]  # round(2.5) == 2
    assert plan(299, 29.97, K25)[1].frame_indices == [63, 78, 94, 110]
    assert plan(299, 29.97, K25)[-1].timestamp == "00:00:08.375"
    assert plan(300, 30, K25)[1].timestamp == "00:00:02.100"
    first = plan(1, 30, K25)[0]
    assert first == ([0], "00:00:00.000", "00:00:00.000" + PROMPT)
    assert first.prompt == f"{first.timestamp}{PROMPT}"


@pytest.mark.parametrize("fps", FPS_VALUES)
@pytest.mark.parametrize("mode", ["hh:mm:ss.fff", "mm:ss.fff", "mm:ss"])
def test_timestamps_match_the_reference(fps, mode):
    for i in range(20000):
        t = i / float(fps)
        assert video.timestamp_as_str(t, mode) == ref_timestamp_as_str(t, mode)


def test_timestamp_quirks():
    ts = video.timestamp_as_str
    assert ts(36 / 30.0) == "00:00:01.199"  # float64 milliseconds, truncated
    assert ts(86400 + 3661.5) == "01:01:01.500"  # %H wraps at 24 h
    assert ts(3661.25, "mm:ss.fff") == "01:01.250" and ts(3661.25, "mm:ss") == "01:01"
    short = [i for i in range(20000) if ts(i / 30.0).endswith(f".{(i * 1000 // 30) % 1000:03d}") is False]
    assert len(short) == 2661


@pytest.mark.parametrize("mode", ["HH:MM", "", None, "hh:mm:ss"])
def test_invalid_timestamp_mode(mode):
    with pytest.raises(ValueError) as info:
        video.split_video_plan(10, 30.0, k25(timestamp_mode=mode))
    assert type(info.value) is ValueError
    assert str(info.value) == f"Invalid timestamp mode: {mode}"
    with pytest.raises(ValueError, match="^Invalid timestamp mode: "):
        video.timestamp_as_str(1.0, mode)
    # images and chunk pixels do not read the mode
    assert kimi_k3_rs.preprocess([{"type": "video_chunk", "video_chunk": [noise(20, 30, 1)]}], k25(timestamp_mode=mode))


# --- pixels ----------------------------------------------------------------------------


@pytest.mark.parametrize("t", [1, 2, 3, 4])
@pytest.mark.parametrize("size", [(720, 1280), (360, 640), (1080, 1920), (1001, 333), (50, 50), (5, 3)])
def test_chunk_pixels_bit_exact(t, size):
    frames = [noise(*size, seed=10 * t + k) for k in range(t)]
    assert_same([{"type": "video_chunk", "video_chunk": frames}], K25)


@pytest.mark.parametrize("total", [8000, 5, 1, 20000])
def test_chunk_pixels_with_in_patch_limit_video(total):
    cfg = k25(in_patch_limit_video=total)
    chunks = [{"type": "video_chunk", "video_chunk": [noise(720, 1280, seed=t * 7 + k) for k in range(t)]} for t in (4, 3, 1)]
    grids = assert_same(chunks, cfg)
    if total == 8000:  # one video's chunks at different sizes (video-spec §9.4)
        assert grids.tolist() == [[4, 34, 60], [3, 40, 70], [1, 50, 86]]


def test_frames_of_other_sizes_take_frame_zeros_sizing():
    frames = [noise(720, 1280, 1), noise(1000, 1000, 2), noise(30, 40, 3), noise(2160, 3840, 4)]
    grids = assert_same([{"type": "video_chunk", "video_chunk": frames}], K25)
    assert grids.tolist() == [[4, 50, 86]]
    small_first = [noise(40, 60, 5), noise(720, 1280, 6)]  # up-scale of nothing, down-scale of frame 1
    assert_same([{"type": "video_chunk", "video_chunk": small_first}], K25)
    up = [noise(700, 700, 7), noise(20, 30, 8), noise(1, 1, 9)]  # frames 1, 2 up-scaled
    assert_same([{"type": "video_chunk", "video_chunk": up}], k25(in_patch_limit_video=6000))


def test_mixed_images_and_chunks_keep_their_order(photos):
    chunk_a = {"type": "video_chunk", "video_chunk": [noise(360, 640, k) for k in range(4)], "prompt": "x"}
    chunk_b = {"type": "video_chunk", "video_chunk": [noise(200, 300, 9), noise(90, 120, 8)]}
    medias = [noise(100, 200, 20), chunk_a, Image.fromarray(noise(64, 48, 21)), chunk_b, chunk_b,
              {"type": "image", "image": noise(33, 77, 22)}, photos["astronaut.png"]]
    grids = assert_same(medias, K25)
    assert [g[0] for g in grids.tolist()] == [1, 4, 1, 2, 2, 1, 1]


def test_frame_inputs_are_converted_to_rgb():
    rgba = noise(50, 60, 1, c=4)
    rgba[..., 3] = 0  # alpha dropped by convert("RGB"), never composited
    grey = noise(50, 60, 2, c=1)
    la = noise(50, 60, 3, c=2)
    p = Image.fromarray(noise(40, 40, 4)).convert("P")
    png = io.BytesIO()
    Image.fromarray(noise(45, 61, 5)).save(png, format="PNG")
    frames = [Image.fromarray(rgba), rgba, grey, grey[:, :, 0], la, Image.fromarray(la), p, png.getvalue(),
              Image.fromarray(noise(50, 60, 6)).convert("CMYK")]
    cfg = {**K25, "transparent_bg_config": {"pattern": "white"}}  # backgrounds are for images only
    assert_same([{"type": "video_chunk", "video_chunk": frames[:4]}, {"type": "video_chunk", "video_chunk": frames[4:]}], cfg)


def test_chunks_with_threads_dtypes_and_out():
    medias = [noise(50, 70, 1), {"type": "video_chunk", "video_chunk": [noise(300, 500, k) for k in range(3)]}]
    base = kimi_k3_rs.preprocess(medias, K25)
    threaded = kimi_k3_rs.preprocess(medias, K25, num_threads=3)
    assert np.array_equal(base["pixel_values"], threaded["pixel_values"])
    out = np.empty_like(base["pixel_values"])
    assert kimi_k3_rs.preprocess(medias, K25, out=out)["pixel_values"] is out
    assert np.array_equal(out, base["pixel_values"])
    half = kimi_k3_rs.preprocess(medias, K25, dtype="float16")["pixel_values"]
    assert np.array_equal(half, base["pixel_values"].astype(np.float16))


def test_count_takes_unsigned_sizes():
    assert video.count_video_chunk_tokens(np.array([[1280, 720, 2**64 - 1]], np.uint64), K25).tolist() == [1075]
    assert video.count_video_chunk_tokens(np.array([[1280, 720, 4]], np.uint64), k25(in_patch_limit_video=1)).tolist() == [1]
    with pytest.raises(kimi_k3_rs.ImageError, match=f"got {2**64 - 1}x720"):
        video.count_video_chunk_tokens(np.array([[2**64 - 1, 720, 1]], np.uint64), K25)


def test_split_video_frames_items_preprocess_as_the_checkpoint():
    clip = np.stack([noise(72, 128, k) for k in range(75)])
    chunks = video.split_video_frames(clip, 30.0, K25)
    assert [c["type"] for c in chunks] == ["video_chunk", "video_chunk"]
    assert [len(c["video_chunk"]) for c in chunks] == [4, 1]
    assert chunks[1]["prompt"] == "00:00:02.466" + PROMPT
    assert np.shares_memory(chunks[0]["video_chunk"][1], clip) and np.array_equal(chunks[0]["video_chunk"][1], clip[18])
    assert_same(chunks, K25)
    as_pil = [Image.fromarray(f) for f in clip]
    pil_chunks = video.split_video_frames(as_pil, 30.0, K25)
    assert pil_chunks[0]["video_chunk"][2] is as_pil[37]
    out_a = kimi_k3_rs.preprocess(chunks, K25)["pixel_values"]
    out_b = kimi_k3_rs.preprocess(pil_chunks, K25)["pixel_values"]
    assert np.array_equal(out_a, out_b)


def test_split_video_frames_takes_a_torch_tensor():
    torch = pytest.importorskip("torch")
    clip = np.stack([noise(30, 40, k) for k in range(10)])
    chunks = video.split_video_frames(torch.from_numpy(clip), 25.0, K25)
    assert [len(c["video_chunk"]) for c in chunks] == [1]
    assert np.array_equal(chunks[0]["video_chunk"][0], clip[0])


# --- errors ----------------------------------------------------------------------------


def test_k3_refuses_video_chunks():
    item = {"type": "video_chunk", "video_chunk": [noise(20, 20, 1)]}
    with pytest.raises(ValueError) as info:
        kimi_k3_rs.preprocess([noise(28, 28, 2), item], K3)
    assert type(info.value) is ValueError
    assert str(info.value).startswith("Unsupported Kimi-K3 encoder media item: {'type': 'video_chunk'")
    partial = {k: v for k, v in K25.items() if k != "timestamp_mode"}  # five keys are not enough
    with pytest.raises(ValueError, match="^Unsupported Kimi-K3 encoder media item"):
        kimi_k3_rs.preprocess([item], partial)
    with pytest.raises(kimi_k3_rs.ConfigError, match="^media_proc_cfg has no video keys"):
        video.count_video_chunk_tokens([[1, 1, 1]], K3)
    with pytest.raises(kimi_k3_rs.ConfigError, match="^media_proc_cfg has no video keys"):
        video.split_video_plan(10, 30.0, K3)


def test_chunk_item_errors():
    with pytest.raises(kimi_k3_rs.ImageError) as info:
        kimi_k3_rs.preprocess([noise(28, 28, 1), {"type": "video_chunk", "video_chunk": []}], K25)
    assert str(info.value) == "image 1: video_chunk has no frames"
    with pytest.raises(ValueError, match="^Unsupported Kimi-K3 encoder media item"):
        kimi_k3_rs.preprocess([{"type": "video_chunk"}], K25)
    with pytest.raises(ValueError, match="^Unsupported Kimi-K3 encoder media item"):
        kimi_k3_rs.preprocess([{"type": "video_chunk", "video_chunk": "clip.mp4"}], K25)
    with pytest.raises(kimi_k3_rs.ImageError, match="^image 2: "):
        kimi_k3_rs.preprocess([noise(9, 9, 1), noise(9, 9, 2), {"type": "video_chunk", "video_chunk": [noise(9, 9, 3), b"not an image"]}], K25)
    with pytest.raises(ValueError, match="^Unsupported Kimi-K3 image channel count: 5"):
        kimi_k3_rs.preprocess([{"type": "video_chunk", "video_chunk": [noise(9, 9, 1, c=5)]}], K25)


@pytest.mark.parametrize(
    "sizes,kind,text",
    [([[1, 2]], kimi_k3_rs.ImageError, "sizes must have shape [n, 3] (width, height, num_frames), got (1, 2)"),
     ([[10, 10, 0]], kimi_k3_rs.ImageError, "a video_chunk must have at least 1 frame, got 0"),
     ([[0, 10, 1]], kimi_k3_rs.ImageError, "image width and height must be positive, got 0x10"),
     ([[1.5, 10, 1]], TypeError, "sizes must be integers, got dtype float64")],
)
def test_count_errors(sizes, kind, text):
    with pytest.raises(kind) as info:
        video.count_video_chunk_tokens(sizes, K25)
    assert str(info.value) == text


@pytest.mark.parametrize(
    "num_frames,fps,text",
    [(0, 30.0, "num_frames must be an int >= 1, got 0"), (True, 30.0, "num_frames must be an int >= 1, got True"),
     (2.0, 30.0, "num_frames must be an int >= 1, got 2.0"), (10, 0, "avg_fps must be a finite number > 0, got 0"),
     (10, math.nan, "avg_fps must be a finite number > 0, got nan"), (10, "30", "avg_fps must be a finite number > 0, got '30'")],
)
def test_plan_argument_errors(num_frames, fps, text):
    with pytest.raises(kimi_k3_rs.KimiK3Error) as info:
        video.split_video_plan(num_frames, fps, K25)
    assert str(info.value) == text


@pytest.mark.parametrize(
    "key,value,text",
    [("in_patch_limit_each_frame", 0, 'media_proc_cfg["in_patch_limit_each_frame"] must be None or an integer in 1..=2**53, got 0'),
     ("in_patch_limit_video", 2**53 + 1, f'media_proc_cfg["in_patch_limit_video"] must be None or an integer in 1..=2**53, got {2**53 + 1}'),
     ("in_patch_limit_video", 1.5, 'media_proc_cfg["in_patch_limit_video"] must be None or an integer in 1..=2**53, got 1.5'),
     ("sample_fps", 0.0, 'media_proc_cfg["sample_fps"] must be a number > 0, got 0.0'),
     ("sample_fps", None, 'media_proc_cfg["sample_fps"] must be a number > 0, got None'),
     ("temporal_merge_kernel_size", 0, 'media_proc_cfg["temporal_merge_kernel_size"] must be an integer in 1..=2**31-1, got 0'),
     ("max_num_frames_each_video", -1, 'media_proc_cfg["max_num_frames_each_video"] must be None or an integer in 1..=2**53, got -1'),
     ("timestamp_mode", 3, 'media_proc_cfg["timestamp_mode"] must be a str or None, got 3')],
)
def test_video_key_errors(key, value, text):
    with pytest.raises(kimi_k3_rs.ConfigError) as info:
        kimi_k3_rs.MediaProcConfig.from_dict(k25(**{key: value}))
    assert str(info.value) == text


def test_config_reads_the_video_keys():
    cfg = kimi_k3_rs.MediaProcConfig.from_dict(K25)
    assert cfg.video is not None and cfg.video.as_dict() == {k: K25[k] for k in kimi_k3_rs.config.VIDEO_KEYS}
    assert kimi_k3_rs.MediaProcConfig.from_dict(K3).video is None
    assert kimi_k3_rs.MediaProcConfig.from_dict(k25(sample_fps=2)).video.sample_fps == 2.0
    assert cfg == kimi_k3_rs.MediaProcConfig.from_dict(dict(K25)) and hash(cfg) == hash(kimi_k3_rs.MediaProcConfig.from_dict(K25))


# --- the deferred flow: t-frame grids up front, pixels on the owner --------------------


def test_deferred_flow_sizes_chunks_up_front_and_materializes_them(photos):
    chunk_a = {"type": "video_chunk", "video_chunk": [noise(360, 640, k) for k in range(4)], "content_hash": "a"}
    chunk_b = {"type": "video_chunk", "video_chunk": [noise(200, 300, 9), noise(90, 120, 8)]}
    medias = [noise(100, 200, 20), chunk_a, photos["astronaut.png"], chunk_b]
    expected_pv, expected_grids = ref_preprocess(medias, K25)
    for processor in (K25, kimi_k3_rs.KimiK3VisionProcessor(K25)):
        enc = kimi_k3_rs.prepare_kimi_k3_encoder_inputs(medias, processor)
        assert enc.grid_thws.tolist() == expected_grids.tolist()
        assert [g[0] for g in enc.grid_thws.tolist()] == [1, 4, 1, 2]
        rc = ref_chunk_resize_config(640, 360, 4, K25)
        assert enc.num_tokens[1] == rc["num_tokens"] and enc.original_image_sizes[1] == [640, 360]
        assert enc.content_hashes == [None, "a", None, None]
        tokens = [(h // 2) * (w // 2) for _, h, w in expected_grids.tolist()]  # whatever t
        assert enc.num_tokens == tokens
        parts = enc.materialize([3, 1])
        rows = np.cumsum([0, *expected_grids.prod(axis=1).tolist()])
        for part, k in zip(parts, [3, 1]):
            want = expected_pv[rows[k]:rows[k + 1]]
            assert np.array_equal(part.view(np.uint32), want.view(np.uint32))
        whole = np.concatenate(enc.materialize())
        assert np.array_equal(whole.view(np.uint32), expected_pv.view(np.uint32))


def test_deferred_flow_refuses_chunks_without_video_keys():
    item = {"type": "video_chunk", "video_chunk": [noise(20, 20, 1)]}
    with pytest.raises(ValueError, match="^Unsupported Kimi-K3 encoder media item: {'type': 'video_chunk'"):
        kimi_k3_rs.prepare_kimi_k3_encoder_inputs([item], K3)
    with pytest.raises(kimi_k3_rs.ImageError, match="^image 1: video_chunk has no frames"):
        kimi_k3_rs.prepare_kimi_k3_encoder_inputs([noise(28, 28, 2), {"type": "video_chunk", "video_chunk": []}], K25)
