"""K2.5 in the HF processor: which configs are K2.5's, ``video_chunk`` sizing, ``split_video_chunks``.

Whether :class:`kimi_k3_rs.hf.KimiK3VisionProcessor` acts as K2.5's processor
(:func:`checkpoint_flavour`: the class its config file names, else whether the config has the keys
K2.5's chunk sizing reads), what its ``get_resize_config`` does for a ``video_chunk``
(:func:`chunk_resize_config`), and how its ``split_video_chunks`` reads a video through
``mecord`` (imported only then) into chunk media dicts (:func:`split_video_url`; the
frame plan is :func:`kimi_k3_rs.video.split_video_plan`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from PIL import Image

from .. import _native, errors
from .._input import header_size
from ..config import MediaProcConfig
from ..options import CallOptions
from ..sizing import resize_dict
from ..video import split_video_plan

#: The ``media_proc_cfg`` keys K2.5's ``get_resize_config`` reads for a ``video_chunk``
#: (with ``[]``, so a config without them cannot size chunks there).
_K25_CHUNK_KEYS = ("sample_fps", "max_num_frames_each_video", "in_patch_limit_each_frame", "in_patch_limit_video")

#: The keys only K3's processor reads.
_K3_KEYS = ("transparent_bg_config", "transparent_bg_fill_stage")


#: Per flavour: the checkpoint's class name (its ``model_type`` is the flavour).
CHECKPOINT_CLASSES = {"kimi_k3": "KimiK3VisionProcessor", "kimi_k25": "KimiK25VisionProcessor"}


def checkpoint_flavour(media_proc_cfg: Mapping[str, Any], attributes: Mapping[str, Any]) -> str:
    """Which checkpoint's processor to act as: ``"kimi_k25"`` or ``"kimi_k3"``.

    The class a ``preprocessor_config.json`` names, read as transformers'
    ``AutoImageProcessor`` reads it, when that is one of the two checkpoints' classes:
    ``image_processor_type`` (what a checkpoint class's ``to_dict`` writes), else the
    class of ``auto_map["AutoImageProcessor"]`` (the published files:
    ``"kimi_k25_vision_processing.KimiK25VisionProcessor"``). ``attributes`` are the
    file's keys beside ``media_proc_cfg`` (the processor's extra attributes). Else the
    config's keys: K2.5 when it has every key of K2.5's chunk sizing and no key only K3
    reads, else K3 (the published configs give their own checkpoint).
    """
    auto_map = attributes.get("auto_map")
    auto_class = auto_map.get("AutoImageProcessor") if isinstance(auto_map, Mapping) else None
    for named in (attributes.get("image_processor_type"), auto_class):
        if isinstance(named, str):
            for flavour, name in CHECKPOINT_CLASSES.items():
                if named.rsplit(".", 1)[-1] == name:
                    return flavour
    if any(key in media_proc_cfg for key in _K3_KEYS):
        return "kimi_k3"
    return "kimi_k25" if all(key in media_proc_cfg for key in _K25_CHUNK_KEYS) else "kimi_k3"


def chunk_resize_config(frames: Sequence[Any], cfg: MediaProcConfig, options: CallOptions) -> dict[str, int]:
    """K2.5 ``get_resize_config`` of a ``video_chunk``: ``navit_resize_video(w, h, n,
    avg_fps=1.0, sample_fps=min(inf, 1.0), ...)``, so ``n`` frames sampled; sized by
    the core (frame 0's size, the per-frame budget of the chunk)."""
    width, height = header_size(frames[0], options.exif_transpose, options.allowed_formats)
    sizing = _native.navit_resize_video_chunk(width, height, len(frames), cfg.native)
    return {**resize_dict(sizing), "sampled_nframes": len(frames)}


def split_video_url(video_url: str | bytes, cfg: MediaProcConfig) -> list[dict[str, Any]]:
    """K2.5's ``split_video_chunks(video_url)`` (see
    :meth:`kimi_k3_rs.hf.KimiK3VisionProcessor.split_video_chunks` for the steps and errors)."""
    try:
        from mecord import VideoReader
    except ImportError as exc:
        raise errors.no_mecord() from exc
    source: Any = os.fspath(video_url) if isinstance(video_url, os.PathLike) else video_url
    if isinstance(source, str) and source.startswith("data:video/mp4;base64,"):
        import base64

        source = base64.b64decode(source.split(",")[1])
    meta = VideoReader(source, auto_init=True, num_threads=1)
    if not (meta.num_frames > 0 and meta.original_width > 0 and meta.original_height > 0 and meta.avg_fps > 0):
        raise errors.invalid_video_format()
    plans = split_video_plan(int(meta.num_frames), float(meta.avg_fps), cfg)
    indices = [index for plan in plans for index in plan.frame_indices]
    # the checkpoint's ``resampling``: the original ``video_url``, four threads
    reader = VideoReader(video_url, num_threads=4, frame_time_info=None, key_indices=None)
    frames = iter([Image.fromarray(frame) for frame in reader[indices]])
    return [
        {"type": "video_chunk", "video_chunk": [next(frames) for _ in plan.frame_indices], "prompt": plan.prompt}
        for plan in plans
    ]
