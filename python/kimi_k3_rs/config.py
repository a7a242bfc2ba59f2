"""``media_proc_cfg`` validation, the published presets, and :func:`call_setup` (the
config and options of a call, validated once per set of values).

Reproduces the config handling of the Kimi-K2.5 / Kimi-K3 checkpoint processors
(``kimi_k3_vision_processing.py``: ``KimiK3VisionProcessor.__init__`` and the
``TransparentBgConfig`` dataclass) with sglang's required-key check
(``kimi_k3_image_processing.py``), for the ``media_proc_cfg`` object of a checkpoint's
``preprocessor_config.json``.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import PIL

from . import _files, _native, errors
from ._pickling import ByConstructor
from .options import (
    DEFAULT_MAX_DECODED_BYTES,
    DEFAULT_MAX_IMAGE_PIXELS,
    NUM_THREADS_ENV,
    CallOptions,
    resolve_pillow_compat,
)

__all__ = [
    "REQUIRED_KEYS",
    "TRANSPARENT_BG_DEFAULTS",
    "VIDEO_KEYS",
    "MediaProcConfig",
    "TransparentBgConfig",
    "VideoConfig",
    "call_setup",
    "kimi_k3_media_proc_cfg",
    "kimi_k25_media_proc_cfg",
    "load_media_proc_cfg",
    "resolve_pillow_compat",
]


#: The keys sglang requires, in the order its error message lists them.
REQUIRED_KEYS = (
    "patch_size",
    "merge_kernel_size",
    "in_patch_limit",
    "patch_limit_on_one_side",
    "image_mean",
    "image_std",
)

#: Field defaults of the reference ``TransparentBgConfig`` dataclass, used for
#: keys missing inside ``transparent_bg_config`` (not the published K3 values);
#: the core holds them.
def _background(value: Any) -> dict[str, Any]:
    """``transparent_bg_config`` as the core reads it: all five keys, defaults filled."""
    bg = _native.MediaProcConfig(
        1, 1, 1, 1, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), transparent_bg_config=value, transparent_bg_fill_stage="before_resize"
    )
    read = bg.transparent_bg_config
    assert read is not None  # a mapping always gives a background
    return read


TRANSPARENT_BG_DEFAULTS: dict[str, Any] = _background({})


_KIMI_K25: dict[str, Any] = {
    "patch_size": 14,
    "merge_kernel_size": 2,
    "in_patch_limit": 16384,
    "patch_limit_on_one_side": 512,
    "fixed_output_tokens": None,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "in_patch_limit_each_frame": 4096,
    "in_patch_limit_video": None,
    "sample_fps": 2.0,
    "max_num_frames_each_video": None,
    "temporal_merge_kernel_size": 4,
    "timestamp_mode": "hh:mm:ss.fff",
    "config_type": "media_proc.processors.moonvit.MoonViTMediaProcessorConfig",
}

_KIMI_K3: dict[str, Any] = {
    "patch_size": 14,
    "merge_kernel_size": 2,
    "in_patch_limit": 65536,
    "patch_limit_on_one_side": 512,
    "fixed_output_tokens": None,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "in_patch_limit_each_frame": 16384,
    "sample_fps": 8.0,
    "temporal_merge_kernel_size": 4,
    "transparent_bg_config": {
        "pattern": "chessboard",
        "chessboard_square_size": 8,
        "chessboard_square_on_top_left": True,
        "chessboard_white_value": 255,
        "chessboard_gray_value": 180,
    },
    "transparent_bg_fill_stage": "after_resize",
    "config_type": "media_proc.processors.moonvit.MoonViTMediaProcessorConfig",
}


def kimi_k25_media_proc_cfg() -> dict[str, Any]:
    """Return a fresh copy of the published Kimi-K2.5 ``media_proc_cfg`` (its ``preprocessor_config.json``)."""
    return copy.deepcopy(_KIMI_K25)


def kimi_k3_media_proc_cfg() -> dict[str, Any]:
    """Return a fresh copy of the published Kimi-K3 ``media_proc_cfg`` (its ``preprocessor_config.json``)."""
    return copy.deepcopy(_KIMI_K3)


@dataclass(frozen=True)
class TransparentBgConfig(ByConstructor):
    """``transparent_bg_config``: the background transparent pixels are composited onto.

    Reproduces the reference dataclass ``TransparentBgConfig``
    (``kimi_k3_vision_processing.py``); missing keys take its field defaults.

    Attributes:
        pattern: ``"chessboard"``, ``"white"`` (255), ``"black"`` (0) or ``"gray"`` (128).
        chessboard_square_size: square edge in pixels of the resized image.
        chessboard_square_on_top_left: ``True`` puts a white square at the top left.
        chessboard_white_value: value 0..255 of the white squares.
        chessboard_gray_value: value 0..255 of the gray squares.

    Pickling and copies: the fields, through the constructor (an unknown key raises its
    ``TypeError``). Like the reference dataclass, the constructor keeps the values as
    given; :meth:`from_dict` and :class:`MediaProcConfig` validate them.
    """

    pattern: str = TRANSPARENT_BG_DEFAULTS["pattern"]
    chessboard_square_size: int = TRANSPARENT_BG_DEFAULTS["chessboard_square_size"]
    chessboard_square_on_top_left: bool = TRANSPARENT_BG_DEFAULTS["chessboard_square_on_top_left"]
    chessboard_white_value: int = TRANSPARENT_BG_DEFAULTS["chessboard_white_value"]
    chessboard_gray_value: int = TRANSPARENT_BG_DEFAULTS["chessboard_gray_value"]

    @classmethod
    def from_dict(cls, value: Any) -> TransparentBgConfig:
        """Validate a ``transparent_bg_config`` mapping (the core's rules).

        Raises:
            TypeError: ``value`` is not a mapping, or has a key the reference dataclass
                does not know (same text as the dataclass constructor).
            ConfigError: ``Invalid background pattern: {pattern}`` for an unknown
                pattern (the checkpoint's text); a square size or colour value out of
                range.
        """
        if value is None:
            raise errors.not_a_mapping('media_proc_cfg["transparent_bg_config"]', value)
        return cls(**_background(value))

    def as_dict(self) -> dict[str, Any]:
        """Return the fields as the ``transparent_bg_config`` dict of a ``media_proc_cfg``."""
        return {
            "pattern": self.pattern,
            "chessboard_square_size": self.chessboard_square_size,
            "chessboard_square_on_top_left": self.chessboard_square_on_top_left,
            "chessboard_white_value": self.chessboard_white_value,
            "chessboard_gray_value": self.chessboard_gray_value,
        }


#: The Kimi-K2.5 video keys: a config accepts ``video_chunk`` items only when it has all
#: six (``kimi_k25_vision_processing.py`` reads them with ``[]``; K3's config has three).
VIDEO_KEYS = (
    "in_patch_limit_each_frame",
    "in_patch_limit_video",
    "sample_fps",
    "max_num_frames_each_video",
    "temporal_merge_kernel_size",
    "timestamp_mode",
)


@dataclass(frozen=True)
class VideoConfig(ByConstructor):
    """The six Kimi-K2.5 video keys of a ``media_proc_cfg``, as the core validated them.

    Read by ``kimi_k25_vision_processing.py: KimiK25VisionProcessor.get_resize_config``
    (chunk sizing) and ``split_video_chunks`` (frame plan); see :mod:`kimi_k3_rs.video`.

    Attributes:
        in_patch_limit_each_frame: patch budget of one frame (4096), or None
            (``in_patch_limit`` applies).
        in_patch_limit_video: patch budget of a chunk, divided by its frame count, or None.
        sample_fps: frames sampled per second of video (2.0), > 0.
        max_num_frames_each_video: read but never applied (as in the checkpoint), or None.
        temporal_merge_kernel_size: frames per chunk (4).
        timestamp_mode: ``"hh:mm:ss.fff"``, ``"mm:ss.fff"`` or ``"mm:ss"``; any other
            str, or None, fails where a timestamp is formatted (as in the checkpoint).

    Pickling and copies: the fields, through the constructor; :class:`MediaProcConfig`
    validates the values.
    """

    in_patch_limit_each_frame: int | None
    in_patch_limit_video: int | None
    sample_fps: float
    max_num_frames_each_video: int | None
    temporal_merge_kernel_size: int
    timestamp_mode: str | None

    def as_dict(self) -> dict[str, Any]:
        """Return the six keys as in a ``media_proc_cfg``."""
        return {key: getattr(self, key) for key in VIDEO_KEYS}


def _video_keys(media_proc_cfg: Mapping[str, Any]) -> dict[str, Any] | None:
    """The six video keys of a config that has all of them, else None."""
    if all(key in media_proc_cfg for key in VIDEO_KEYS):
        return {key: media_proc_cfg[key] for key in VIDEO_KEYS}
    return None


@dataclass(frozen=True)
class MediaProcConfig(ByConstructor):
    """A validated ``media_proc_cfg`` (the keys the image path reads).

    Build it once per model with :meth:`from_dict`; it holds the Rust config
    (``native``) used by every call.

    Attributes:
        patch_size: patch edge in pixels (14).
        merge_kernel_size: spatial merge factor (2); images are padded to a multiple
            of ``patch_size * merge_kernel_size`` pixels.
        in_patch_limit: patch budget before merging (16384 K2.5, 65536 K3).
        patch_limit_on_one_side: per-side cap in patches (512).
        image_mean: per-channel mean, ``[0, 1]`` units.
        image_std: per-channel std, ``[0, 1]`` units, non-zero.
        fixed_output_tokens: reported token count override (``int()`` of the value), or None.
        transparent_bg_config: the background, or None (alpha dropped).
        transparent_bg_fill_stage: ``"before_resize"`` (default) or ``"after_resize"``.
        video: the K2.5 video keys (:class:`VideoConfig`, or a mapping of all six), or
            None: ``video_chunk`` items are refused.

    Pickling and copies: the fields, through the constructor (validated again on load,
    with its errors; ``native`` is rebuilt, never pickled).

    Raises:
        TypeError / ConfigError: as :meth:`from_dict`, for a bad field; ``TypeError``
            for a ``video`` mapping without all six keys.
    """

    patch_size: int
    merge_kernel_size: int
    in_patch_limit: int
    patch_limit_on_one_side: int
    image_mean: tuple[float, float, float]
    image_std: tuple[float, float, float]
    fixed_output_tokens: int | None = None
    transparent_bg_config: TransparentBgConfig | None = None
    transparent_bg_fill_stage: str = "before_resize"
    video: VideoConfig | None = None
    native: _native.MediaProcConfig = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        bg = self.transparent_bg_config
        native = _native.MediaProcConfig(
            self.patch_size,
            self.merge_kernel_size,
            self.in_patch_limit,
            self.patch_limit_on_one_side,
            self.image_mean,
            self.image_std,
            fixed_output_tokens=self.fixed_output_tokens,
            transparent_bg_config=bg.as_dict() if isinstance(bg, TransparentBgConfig) else bg,
            transparent_bg_fill_stage=self.transparent_bg_fill_stage,
            video=self.video.as_dict() if isinstance(self.video, VideoConfig) else self.video,
        )
        # The fields as the core read them: ints, float triples, the dataclass.
        native_bg = native.transparent_bg_config
        for name, value in (
            ("patch_size", native.patch_size),
            ("merge_kernel_size", native.merge_kernel_size),
            ("in_patch_limit", native.in_patch_limit),
            ("patch_limit_on_one_side", native.patch_limit_on_one_side),
            ("image_mean", native.image_mean),
            ("image_std", native.image_std),
            ("fixed_output_tokens", native.fixed_output_tokens),
            ("transparent_bg_config", None if native_bg is None else TransparentBgConfig(**native_bg)),
            ("transparent_bg_fill_stage", native.transparent_bg_fill_stage),
            ("video", None if native.video is None else VideoConfig(**native.video)),
            ("native", native),
        ):
            object.__setattr__(self, name, value)

    @classmethod
    def from_dict(cls, media_proc_cfg: Any) -> MediaProcConfig:
        """Validate a ``media_proc_cfg`` dict (the checkpoint's keys, sglang's required ones).

        Args:
            media_proc_cfg: the ``"media_proc_cfg"`` object of ``preprocessor_config.json``,
                or a :class:`MediaProcConfig` (returned unchanged). The six video keys
                (:data:`VIDEO_KEYS`) are read when all are present; unknown keys
                (``config_type``, future keys) are ignored.

        Returns:
            The validated config. A plain ``dict`` is validated once per content: its
            config is kept by a key of its keys and its values with their types
            (``_native.content_key``, which tells ``True``, ``14`` and ``14.0`` apart, as
            validation does; about 1 us for a preset), so a serving loop that passes the
            same dict on every call pays for one validation (a K3 preset: about 50 us).
            Other mappings, and dicts holding other values than ``dict``, ``list``,
            ``tuple``, ``str``, ``int``, ``float``, ``bool`` and ``None`` (numpy values,
            subclasses), are validated on every call; failures are never kept.

        Raises:
            TypeError: ``media_proc_cfg`` is not a mapping; ``transparent_bg_config`` is
                not a mapping, or has a key the reference dataclass does not know.
            ConfigError: ``Kimi-K3 image processor is missing deferred-preprocessing
                config: {keys}`` listing every missing required key (sglang's text);
                ``Invalid background pattern: {pattern}`` (the checkpoint's); the key and
                value for zero, negative, non-integer, NaN or infinite values, a zero std,
                mean/std not three numbers, or an unknown fill stage.

        Examples:
            >>> from kimi_k3_rs.config import MediaProcConfig, kimi_k3_media_proc_cfg
            >>> cfg = MediaProcConfig.from_dict(kimi_k3_media_proc_cfg())
            >>> (cfg.in_patch_limit, cfg.transparent_bg_fill_stage)
            (65536, 'after_resize')
        """
        if isinstance(media_proc_cfg, MediaProcConfig):
            return media_proc_cfg
        return _validated(media_proc_cfg)[1]

    @classmethod
    def _validate(cls, media_proc_cfg: Any) -> MediaProcConfig:
        """:meth:`from_dict` without its cache."""
        if not isinstance(media_proc_cfg, Mapping):
            raise errors.not_a_mapping("media_proc_cfg", media_proc_cfg)
        missing = [k for k in REQUIRED_KEYS if k not in media_proc_cfg]
        if missing:
            raise errors.missing_keys(missing)
        return cls(
            patch_size=media_proc_cfg["patch_size"],
            merge_kernel_size=media_proc_cfg["merge_kernel_size"],
            in_patch_limit=media_proc_cfg["in_patch_limit"],
            patch_limit_on_one_side=media_proc_cfg["patch_limit_on_one_side"],
            image_mean=media_proc_cfg["image_mean"],
            image_std=media_proc_cfg["image_std"],
            fixed_output_tokens=media_proc_cfg.get("fixed_output_tokens"),
            transparent_bg_config=media_proc_cfg.get("transparent_bg_config"),
            transparent_bg_fill_stage=media_proc_cfg.get("transparent_bg_fill_stage", "before_resize"),
            video=_video_keys(media_proc_cfg),  # type: ignore[arg-type]  # validated into a VideoConfig
        )


#: Configs :meth:`MediaProcConfig.from_dict` validated, by their content key
#: (``_native.content_key``); cleared when it reaches :data:`_VALIDATED_MOST` entries (a
#: process serves a few models).
_VALIDATED: dict[bytes, MediaProcConfig] = {}
_VALIDATED_MOST = 64


def _validated(media_proc_cfg: Any) -> tuple[bytes | None, MediaProcConfig]:
    """:meth:`MediaProcConfig.from_dict` of a config that is not a :class:`MediaProcConfig`,
    with the content key it is kept by (None: not kept). A config not yet kept is validated
    from a copy made with its key in one native walk (``_native.content_snapshot``), so
    the config kept under a key is always the one of the content that key names, even
    while another thread changes the dict."""
    key = _native.content_key(media_proc_cfg)
    cfg = _VALIDATED.get(key) if key is not None else None
    if cfg is not None:
        return key, cfg
    kept = _native.content_snapshot(media_proc_cfg) if key is not None else None
    if kept is None:  # not a keyed config (or no longer one: changed meanwhile)
        return None, MediaProcConfig._validate(media_proc_cfg)
    key, snapshot = kept
    cfg = MediaProcConfig._validate(snapshot)
    if len(_VALIDATED) >= _VALIDATED_MOST:
        _VALIDATED.clear()
    _VALIDATED[key] = cfg
    return key, cfg


def _item_types(value: Any) -> Any:
    """The types of the items of a tuple or frozenset (``allowed_formats``; None for
    another value), for :func:`call_setup`'s key: validation tells a ``str`` subclass
    apart from ``str``, though they compare equal."""
    if type(value) is tuple:
        return tuple(map(type, value))
    if type(value) is frozenset:
        return frozenset((type(v), v) for v in value)
    return None


def call_setup(
    media_proc_cfg: Any,
    pillow_compat: Any = "auto",
    exif_transpose: Any = False,
    dtype: Any = "float32",
    num_threads: Any = None,
    max_image_pixels: Any = DEFAULT_MAX_IMAGE_PIXELS,
    max_decoded_bytes: Any = DEFAULT_MAX_DECODED_BYTES,
    allowed_formats: Any = None,
) -> tuple[MediaProcConfig, CallOptions]:
    """The config (:meth:`MediaProcConfig.from_dict`) and options
    (:meth:`kimi_k3_rs.options.CallOptions.make`) of one call of an entry point,
    validated once per set of values: kept by the config's content (its content key, as
    :meth:`MediaProcConfig.from_dict` keeps it; a :class:`MediaProcConfig` by its identity) and
    the options' values with their types (``True`` and ``1`` apart, as validation tells
    them; the items of an ``allowed_formats`` tuple or frozenset with theirs), the
    ``KIMI_K3_RS_NUM_THREADS`` they read and the Pillow version
    ``pillow_compat="auto"`` follows, so that a call with the same config and options as
    an earlier one pays one dict lookup. Configs :meth:`MediaProcConfig.from_dict` does
    not keep, and unhashable options (a list of formats), are validated on every call;
    failures are never kept.

    Raises:
        TypeError / ConfigError / KimiK3Error: as :meth:`MediaProcConfig.from_dict`, then
            as :meth:`~kimi_k3_rs.options.CallOptions.make`, for a bad value.
    """
    args = (pillow_compat, exif_transpose, dtype, num_threads, max_image_pixels, max_decoded_bytes, allowed_formats)
    given = isinstance(media_proc_cfg, MediaProcConfig)
    # a MediaProcConfig by its address: its entry keeps it alive, so no other takes that address
    config_key = id(media_proc_cfg) if given else _native.content_key(media_proc_cfg)
    env = os.environ.get(NUM_THREADS_ENV) if num_threads is None else None
    options = (env, PIL.__version__, *map(type, args), *args, _item_types(allowed_formats))
    try:
        made = _CALLS.get((config_key, *options)) if config_key is not None else None
    except TypeError:  # unhashable options: validated, not kept
        config_key = None
        made = None
    if made is None:
        keep = config_key is not None
        # kept by the key of the content validated (a dict may change meanwhile)
        config_key, config = (config_key, media_proc_cfg) if given else _validated(media_proc_cfg)
        made = config, CallOptions.make(*args)
        if keep and config_key is not None:
            if len(_CALLS) >= _VALIDATED_MOST:
                _CALLS.clear()
            _CALLS[(config_key, *options)] = made
    return made


#: Configs and options :func:`call_setup` validated, by its key; cleared when it reaches
#: :data:`_VALIDATED_MOST` entries.
_CALLS: dict[tuple[Any, ...], tuple[MediaProcConfig, CallOptions]] = {}


#: The largest ``preprocessor_config.json`` :func:`load_media_proc_cfg` reads, in
#: bytes (1 MiB; the published ones are about 1 KB).
MAX_CONFIG_BYTES = 1 << 20


def _read_config_file(path: str) -> bytes:
    """The bytes of the config file ``path``, at most :data:`MAX_CONFIG_BYTES`, read
    without blocking (:func:`_files.open_regular`: anything but a regular file is refused
    before it is opened, a FIFO would wait for a writer, ``/dev/zero`` never ends); a
    file that grows past the bound while read is refused too."""
    try:
        f, info = _files.open_regular(path)
    except _files.NotRegularFileError as exc:
        raise errors.bad_config_file(path, f"is not a regular file ({exc.kind})") from None
    with f:
        if info.st_size > MAX_CONFIG_BYTES:
            raise errors.bad_config_file(path, f"is over {MAX_CONFIG_BYTES} bytes ({info.st_size})")
        data = f.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise errors.bad_config_file(path, f"is over {MAX_CONFIG_BYTES} bytes")
    return data


def load_media_proc_cfg(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read the nested ``media_proc_cfg`` of a ``preprocessor_config.json``.

    Args:
        path: the JSON file, or a checkpoint folder that holds ``preprocessor_config.json``.

    Returns:
        The ``media_proc_cfg`` dict (not yet validated); top-level keys beside it
        (``auto_map``, ...) are ignored.

    Raises:
        OSError: the file cannot be read (``FileNotFoundError`` when missing).
        ConfigError: it is not a regular file (a FIFO, a device: refused before it is
            opened, so nothing blocks) or is over :data:`MAX_CONFIG_BYTES`; the JSON
            has no ``media_proc_cfg`` object.
        ValueError: the file is not UTF-8 JSON (``json.JSONDecodeError``, ``UnicodeDecodeError``).
    """
    inner: dict[str, Any] = load_preprocessor_config(path)["media_proc_cfg"]
    return inner


def load_preprocessor_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a whole ``preprocessor_config.json`` (the file, or the one in a folder).

    Returns:
        Its top-level dict, whose ``media_proc_cfg`` is a dict (not yet validated).

    Raises:
        As :func:`load_media_proc_cfg`.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, "preprocessor_config.json")
    data = json.loads(_read_config_file(path).decode("utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("media_proc_cfg"), dict):
        raise errors.no_media_proc_cfg_in(path)
    return data
