"""Kimi-K2.5 video chunks: the frame plan of a video, its chunk items, and their token counts.

Reproduces ``kimi_k25_vision_processing.py: KimiK25VisionProcessor.split_video_chunks``
(the sampled frame indices, chunks of ``temporal_merge_kernel_size`` frames, the
timestamp and prompt of each chunk, with ``media_utils.py: timestamp_as_str``) and the
chunk sizing of ``KimiK25VisionProcessor.get_resize_config`` / ``media_utils.py:
navit_resize_video`` (in Rust). Decoding a video is left to the caller: the checkpoint
decodes with ``mecord``, which is not on the package index. The pixels of a chunk come
from :func:`kimi_k3_rs.preprocess`, which takes ``{"type": "video_chunk", ...}`` items
mixed with images.

Only configs with the six K2.5 video keys (:data:`kimi_k3_rs.config.VIDEO_KEYS`: the
published K2.5 config) accept chunks; the K3 config does not (the checkpoint's K3
processor is image-only).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from . import _native, errors
from ._input import frame_list
from .config import MediaProcConfig, VideoConfig

__all__ = [
    "VideoChunkPlan",
    "count_video_chunk_tokens",
    "split_video_frames",
    "split_video_plan",
    "timestamp_as_str",
]

#: The text after a chunk's timestamp (``KimiK25VisionProcessor.make_chunk_prompt``).
CHUNK_PROMPT_SUFFIX = "<|media_begin|>video<|media_content|><|media_pad|><|media_end|>"


class VideoChunkPlan(NamedTuple):
    """One chunk of a video's plan (:func:`split_video_plan`): what
    ``kimi_k25_vision_processing.py: KimiK25VisionProcessor.split_video_chunks`` decides
    for one ``VideoChunkInput`` before it decodes the frames (a named tuple).

    Attributes:
        frame_indices: the indices (0-based, into the decoded video) of the chunk's
            frames, 1 to ``temporal_merge_kernel_size`` of them.
        timestamp: the chunk's start, ``timestamp_as_str(frame_indices[0] / avg_fps, mode)``.
        prompt: ``f"{timestamp}<|media_begin|>video<|media_content|><|media_pad|><|media_end|>"``.
    """

    frame_indices: list[int]
    timestamp: str
    prompt: str


def timestamp_as_str(timestamp: float, timestamp_mode: Any = "hh:mm:ss.fff") -> str:
    """Format a time in seconds as the checkpoint's chunk prompts do.

    Reproduces ``media_utils.py: timestamp_as_str``: ``"hh:mm:ss.fff"`` is
    ``%H:%M:%S`` of the UTC time plus ``f".{int((t % 1) * 1000):03d}"`` (float64
    milliseconds, truncated: frame 36 at 30 fps, 1.2 s, prints ``00:00:01.199``; hours
    wrap at 24 h); ``"mm:ss.fff"`` drops the hours; ``"mm:ss"`` also the milliseconds.

    Args:
        timestamp: seconds since the start of the video (float64).
        timestamp_mode: ``"hh:mm:ss.fff"`` (K2.5), ``"mm:ss.fff"`` or ``"mm:ss"``.

    Returns:
        The text, e.g. ``"00:00:02.466"``.

    Raises:
        ValueError: ``Invalid timestamp mode: {mode}`` (the checkpoint's text) for any
            other mode; ``OverflowError`` / ``OSError`` as ``datetime.fromtimestamp``
            for a time it cannot represent.

    Examples:
        >>> from kimi_k3_rs.video import timestamp_as_str
        >>> timestamp_as_str(36 / 30.0)
        '00:00:01.199'
    """
    if timestamp_mode not in ("hh:mm:ss.fff", "mm:ss.fff", "mm:ss"):
        raise errors.invalid_timestamp_mode(timestamp_mode)
    clock = datetime.fromtimestamp(timestamp, tz=timezone.utc)
    if timestamp_mode == "mm:ss":
        return clock.strftime("%M:%S")
    text = clock.strftime("%H:%M:%S" if timestamp_mode == "hh:mm:ss.fff" else "%M:%S")
    return text + f".{int((timestamp % 1) * 1000):03d}"


def _video_config(cfg: MediaProcConfig) -> VideoConfig:
    """The video keys of ``cfg``, or the core's ``ConfigError`` for a config without them."""
    if cfg.video is None:
        _native.count_video_chunk_tokens(np.zeros((0, 3), np.int64), cfg.native)  # raises NoVideoConfig
    assert cfg.video is not None
    return cfg.video


def count_video_chunk_tokens(sizes: Any, media_proc_cfg: Mapping[str, Any] | MediaProcConfig) -> npt.NDArray[np.int64]:
    """LLM token count of every video chunk, from frame 0's size and the frame count.

    Reproduces ``KimiK25VisionProcessor.get_resize_config`` for ``{"type":
    "video_chunk"}`` (``media_utils.py: navit_resize_video``) in Rust with the GIL
    released: frame 0 is sized with ``in_patch_limit_each_frame`` (``in_patch_limit``
    when None), or with ``min(round(in_patch_limit_video / num_frames), that)`` when
    ``in_patch_limit_video`` is set (Python's division and half-to-even ``round``), by
    the image formula; the count is ``(h / 2) * (w / 2)`` in merged patches whatever the
    frame count (the model averages a chunk's frames), or ``fixed_output_tokens``.
    A 1280x720 chunk under K2.5 gives 1075.

    Args:
        sizes: ``[n, 3]`` integers, one ``(width, height, num_frames)`` per row (frame
            0's size in pixels; anything ``np.asarray(sizes, np.int64)`` accepts).
        media_proc_cfg: a ``media_proc_cfg`` dict with the six video keys (K2.5), or a
            :class:`MediaProcConfig`.

    Returns:
        int64 ``[n]``.

    Raises:
        ConfigError: the config has no video keys (K3), or bad config values.
        ImageError: ``sizes`` is not ``[n, 3]``; a side below 1 or over 2**53; a frame
            count below 1.
        TypeError: ``sizes`` are not integers.
        KimiK3Error: the side-limit assertion (see :func:`kimi_k3_rs.navit_resize_config`).

    Examples:
        >>> import kimi_k3_rs
        >>> from kimi_k3_rs.video import count_video_chunk_tokens
        >>> count_video_chunk_tokens([[1280, 720, 4], [1920, 1080, 1]], kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG).tolist()
        [1075, 1032]
    """
    cfg = MediaProcConfig.from_dict(media_proc_cfg)
    given = np.asarray(sizes)
    if given.size == 0 and (given.ndim <= 1 or given.shape[-1] == 3):
        given = given.reshape(-1, 3)
    if given.size and given.dtype.kind not in "iu":
        raise errors.sizes_not_integers(given.dtype)
    if given.dtype.kind == "u" and given.ndim == 2 and given.shape[1] == 3 and given.size:
        # Too large for int64 maybe: the core's own check names the first too-large side;
        # a frame count beyond int64 sizes as int64's largest does (a budget rounding to 0).
        too_large = np.argwhere(given[:, :2] > 2**53)
        if too_large.size:
            row = int(too_large[0][0])
            _native.navit_resize_config(int(given[row, 0]), int(given[row, 1]), cfg.native)
        given = np.minimum(given, np.iinfo(np.int64).max)
    return _native.count_video_chunk_tokens(np.ascontiguousarray(given, dtype=np.int64), cfg.native)


def _positive_int(name: str, value: Any) -> int:
    """``value`` as an int >= 1 (not a bool), or a :class:`KimiK3Error`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < 1:
        raise errors.bad_video_argument(name, "an int >= 1", value)
    return int(value)


def _positive_fps(value: Any) -> float:
    """``float(value)`` for a finite real > 0 (``VideoSpec.fps`` is a float > 0)."""
    fps = float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else math.nan
    if not (math.isfinite(fps) and fps > 0):
        raise errors.bad_video_argument("avg_fps", "a finite number > 0", value)
    return fps


def split_video_plan(
    num_frames: int, avg_fps: float, media_proc_cfg: Mapping[str, Any] | MediaProcConfig
) -> list[VideoChunkPlan]:
    """Plan a decoded video's chunks: which frames, and each chunk's timestamp and prompt.

    Reproduces ``kimi_k25_vision_processing.py: KimiK25VisionProcessor.split_video_chunks``
    without decoding: ``sample_fps = min(cfg["sample_fps"], avg_fps)``; ``sampled =
    max(round(num_frames * sample_fps / avg_fps), 1)`` (Python ``round``, half to even:
    30 frames at 24 fps sample 2); ``np.linspace(0, num_frames - 1,
    sampled).round().astype(int)`` (numpy's half to even: 18.5 -> 18); chunks of
    ``temporal_merge_kernel_size`` indices, the last one partial (1 to T - 1 frames) when
    the count is not a multiple, never padded; each chunk's timestamp is
    ``timestamp_as_str(first_index / float(avg_fps), cfg["timestamp_mode"])``
    (:func:`timestamp_as_str`), its prompt that text +
    ``<|media_begin|>video<|media_content|><|media_pad|><|media_end|>``.
    ``max_num_frames_each_video`` is not applied (as in the checkpoint), so long videos
    are unbounded: 10 minutes at 30 fps (18000 frames, K2.5's 2 fps) give 1200 frames
    in 300 chunks, about 322k tokens at 1280x720 (1075 a chunk).

    Args:
        num_frames: frames in the decoded video (``VideoReader.num_frames``), >= 1.
        avg_fps: its average frame rate (``VideoReader.avg_fps``), a finite number > 0.
        media_proc_cfg: a ``media_proc_cfg`` with the six video keys (K2.5), or a
            :class:`MediaProcConfig`.

    Returns:
        One :class:`VideoChunkPlan` ``(frame_indices, timestamp, prompt)`` per chunk,
        in order; every index is in ``0..num_frames - 1``.

    Raises:
        ConfigError: the config has no video keys (K3), or bad config values.
        ValueError: ``Invalid timestamp mode: {mode}`` (the checkpoint's text).
        KimiK3Error: ``num_frames`` is not an int >= 1, or ``avg_fps`` not a finite
            number > 0 (the checkpoint asserts both).

    Examples:
        >>> import kimi_k3_rs
        >>> from kimi_k3_rs.video import split_video_plan
        >>> [(p.frame_indices, p.timestamp) for p in split_video_plan(75, 30, kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG)]
        [([0, 18, 37, 56], '00:00:00.000'), ([74], '00:00:02.466')]
    """
    cfg = MediaProcConfig.from_dict(media_proc_cfg)
    video = _video_config(cfg)
    frames = _positive_int("num_frames", num_frames)
    fps = _positive_fps(avg_fps)
    sample_fps = min(video.sample_fps, fps)
    sampled = max(round(frames * sample_fps / fps), 1)
    indices: list[int] = np.linspace(0, frames - 1, sampled).round().astype(int).tolist()
    size = video.temporal_merge_kernel_size
    plans = []
    for start in range(0, len(indices), size):
        timestamp = timestamp_as_str(indices[start] / float(fps), video.timestamp_mode)
        plans.append(VideoChunkPlan(indices[start : start + size], timestamp, timestamp + CHUNK_PROMPT_SUFFIX))
    return plans


def split_video_frames(
    frames: Any, avg_fps: float, media_proc_cfg: Mapping[str, Any] | MediaProcConfig
) -> list[dict[str, Any]]:
    """Split a decoded video into the checkpoint's ``video_chunk`` items.

    Reproduces ``KimiK25VisionProcessor.split_video_chunks`` on frames the caller
    decoded: the plan of :func:`split_video_plan` for ``len(frames)`` frames, then
    ``{"type": "video_chunk", "video_chunk": [frames[i] for i in frame_indices],
    "prompt": prompt}`` per chunk. Feed the items to :func:`kimi_k3_rs.preprocess` (with
    images, in any order) and put the prompts, concatenated, where the video's
    ``<|kimi_k25_video_placeholder|>`` is. Unbounded as in the checkpoint: a 10-minute
    30 fps video gives 300 chunks (about 322k tokens at 1280x720).

    Args:
        frames: every decoded frame, in order: a list / tuple of PIL images or uint8
            ``HxWx3`` arrays (any input :func:`kimi_k3_rs.preprocess` takes as a frame),
            or a uint8 ``[T, H, W, C]`` numpy array or torch tensor (a tensor is copied to
            a host array once; the chunks hold views of it).
        avg_fps: the video's average frame rate, a finite number > 0.
        media_proc_cfg: a ``media_proc_cfg`` with the six video keys (K2.5), or a
            :class:`MediaProcConfig`.

    Returns:
        One dict per chunk; the frames are the caller's objects (or views of the array),
        not copies. The checkpoint's chunks hold PIL images (``Image.fromarray``).

    Raises:
        KimiK3Error: ``frames`` is none of the above, or empty; and as
            :func:`split_video_plan` (with its ``ConfigError`` and ``ValueError``).
        ValueError: a tensor that is not ``torch.uint8``.

    Examples:
        >>> import numpy as np, kimi_k3_rs
        >>> from kimi_k3_rs.video import split_video_frames
        >>> video = np.zeros((75, 72, 128, 3), np.uint8)
        >>> chunks = split_video_frames(video, 30.0, kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG)
        >>> [len(c["video_chunk"]) for c in chunks], chunks[1]["prompt"][:12]
        ([4, 1], '00:00:02.466')
        >>> kimi_k3_rs.preprocess(chunks, kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG)["grid_thws"].tolist()
        [[4, 6, 10], [1, 6, 10]]
    """
    cfg = MediaProcConfig.from_dict(media_proc_cfg)
    sequence = frame_list(frames)
    if len(sequence) == 0:
        raise errors.bad_video_argument("frames", "at least one frame", "no frames")
    return [
        {"type": "video_chunk", "video_chunk": [sequence[i] for i in plan.frame_indices], "prompt": plan.prompt}
        for plan in split_video_plan(len(sequence), avg_fps, cfg)
    ]
