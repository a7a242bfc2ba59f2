"""sglang's deferred flow: every image's geometry up front, its pixels on demand.

Reproduces sglang's ``kimi_k3_image_processing.py: prepare_kimi_k3_encoder_inputs``
and ``kimi_k25_image_processing.py: prepare_kimi_k25_encoder_inputs`` (one machinery;
the K2.5 entry differs where sglang's does: its messages, and images taken as RGB).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from . import _native, errors
from ._input import (
    Item,
    Kind,
    as_list,
    chunk_frames,
    classify,
    header_size,
    naming,
    run_batch,
)
from ._pickling import ByConstructor
from .config import REQUIRED_KEYS, MediaProcConfig, call_setup
from .options import UNSET, CallOptions, Unset
from .sizing import resize_dict

__all__ = [
    "KimiK3EncoderInputs",
    "KimiK25EncoderInputs",
    "prepare_kimi_k3_encoder_inputs",
    "prepare_kimi_k25_encoder_inputs",
]

@dataclass
class KimiK3EncoderInputs(ByConstructor):
    """Geometry of a batch, computed without touching pixels; pixels on demand.

    Attributes:
        grid_thws: int64 ``[n, 3]``, ``(t, h_patches, w_patches)`` per item: ``t`` is 1
            for an image, the frame count for a K2.5 ``video_chunk``.
        resize_configs: per item, the dict :func:`navit_resize_config` returns (a
            chunk's: the sizing of its frame 0 that every frame is resized to).
        num_tokens: per item, the LLM token count (a chunk's: ``(h/2)*(w/2)``).
        original_image_sizes: per item, ``[width, height]`` in pixels (a chunk's frame
            0; after the EXIF transpose when ``exif_transpose`` was set).
        content_hashes: per image, the ``"content_hash"`` of its media dict, unchanged,
            or None (no media dict, or no such key).

    The constructor takes ``original_image_sizes``, ``content_hashes`` and the items,
    config and options (``_images``, ``_config``, ``_options``); ``grid_thws``,
    ``resize_configs`` and ``num_tokens`` are the core's sizing of the sizes under the
    config (a chunk's frame count from its item).

    Pickling: it pickles (``pickle``, ``copy.copy``, ``copy.deepcopy``), as sglang sends
    its deferred items between processes, as its constructor's arguments; a load goes
    through the constructor (the geometry is sized again, so a damaged or crafted pickle
    raises what the constructor raises). The images travel by their own pickling:
    arrays, tensors, bytes and data URLs with their pixels or data, a path as the path
    (read again wherever ``materialize`` runs; a file that differs there fails the grid
    check), a PIL image as Pillow pickles it (pixels, mode, size, ``info`` and palette,
    loaded on pickling). ``materialize`` after the trip gives the same bits. An image
    that cannot be pickled raises what its own pickling raises.

    Raises (constructor):
        TypeError: ``_config`` is not a :class:`MediaProcConfig`, ``_options`` not the
            options of a call, ``_images`` not a list, ``original_image_sizes`` not one
            ``[width, height]`` pair of ints in ``0..2**64`` per item, ``content_hashes``
            not one entry per item.
        ValueError: a chunk item without frames or video keys in the config
            (:func:`prepare_kimi_k3_encoder_inputs`' message); :class:`ImageError`
            naming the item for a zero side or one over the core's maximum.
    """

    grid_thws: npt.NDArray[np.int64] = field(init=False)
    resize_configs: list[dict[str, int]] = field(init=False)
    num_tokens: list[int] = field(init=False)
    original_image_sizes: list[list[int]]
    content_hashes: list[Any]
    _images: list[Any] = field(repr=False)
    _config: MediaProcConfig = field(repr=False)
    _options: CallOptions = field(repr=False)

    def __post_init__(self) -> None:
        """Check the arguments and size every item (what a load runs too)."""
        owner = type(self).__name__
        if not isinstance(self._config, MediaProcConfig):
            raise errors.bad_field(owner, "_config", "a kimi_k3_rs.MediaProcConfig", self._config)
        if not isinstance(self._options, CallOptions):
            rule = "the options of a call (kimi_k3_rs.options.CallOptions)"
            raise errors.bad_field(owner, "_options", rule, self._options)
        if not isinstance(self._images, list):
            raise errors.bad_field(owner, "_images", "a list", self._images)
        count = len(self._images)
        sizes = self.original_image_sizes
        if not (
            isinstance(sizes, list)
            and len(sizes) == count
            and all(isinstance(s, (list, tuple)) and len(s) == 2 and all(_is_side(v) for v in s) for s in sizes)
        ):
            rule = f"a list of {count} [width, height] pairs of ints in 0..2**64 (one per item)"
            raise errors.bad_field(owner, "original_image_sizes", rule, sizes)
        hashes = self.content_hashes
        if not (isinstance(hashes, list) and len(hashes) == count):
            raise errors.bad_field(owner, "content_hashes", f"a list of {count} entries (one per item)", hashes)
        items = []  # (width, height, frames): 0 frames for an image, a chunk's frame count
        for index, ((width, height), item) in enumerate(zip(sizes, self._images)):
            with naming(index):
                is_chunk = classify(item).kind is Kind.VIDEO_CHUNK
                items.append((width, height, len(chunk_frames(item, self._config)) if is_chunk else 0))
        tuples, self.grid_thws = _native.size_items(items, self._config.native)
        self.resize_configs = [resize_dict(t) for t in tuples]
        self.num_tokens = [r["num_tokens"] for r in self.resize_configs]

    def materialize(self, indices: Sequence[int] | None = None) -> list[npt.NDArray[np.float32]]:
        """Preprocess the images at ``indices`` (all when None), in that order.

        Returns:
            One float32 ``[t * h * w, 3, ps, ps]`` array per index, each equal to
            :func:`preprocess` on that item alone.

        Raises:
            IndexError: an index out of range.
            ValueError: ``Kimi-K3 deferred CPU preprocessing produced wrong grids``
                (sglang's check) when an image no longer has the size read up front
                (e.g. a file replaced in between). Otherwise as :func:`preprocess`.
        """
        positions = range(len(self._images))
        # Python's indexing (negative from the end); IndexError out of range
        order = list(positions) if indices is None else [positions[i] for i in indices]
        chosen = [self._images[i] for i in order]
        if not chosen:
            return []
        pixel_values, grid_thws = run_batch(chosen, self._config, self._options, indices=order)
        if not np.array_equal(grid_thws, self.grid_thws[order]):
            raise self._wrong_grids()
        rows = np.cumsum(grid_thws.prod(axis=1))[:-1]
        return list(np.split(pixel_values, rows))

    @staticmethod
    def _wrong_grids() -> ValueError:
        return errors.wrong_grids()


@dataclass
class KimiK25EncoderInputs(KimiK3EncoderInputs):
    """What :func:`prepare_kimi_k25_encoder_inputs` returns: :class:`KimiK3EncoderInputs`
    with sglang's K2.5 grid message.

    Attributes and pickling as :class:`KimiK3EncoderInputs`. ``materialize`` gives
    float32 ``[h * w, 3, ps, ps]`` per index (the processor's dtype when one was given),
    each image taken as RGB (``convert("RGB")``: alpha dropped, no background), as
    sglang's ``_to_pil_rgb`` does.

    Raises (``materialize``):
        ValueError: ``Kimi-K2.5 deferred CPU preprocessing produced wrong grids`` when an
            image no longer has the size read up front; otherwise as
            :meth:`KimiK3EncoderInputs.materialize`.
    """

    @staticmethod
    def _wrong_grids() -> ValueError:
        return errors.k25_wrong_grids()


def prepare_kimi_k3_encoder_inputs(
    images: Any,
    image_processor_or_media_proc_cfg: Any,
    *,
    pillow_compat: str | None = None,
    exif_transpose: bool | None = None,
    dtype: str | None = None,
    num_threads: int | None = None,
    max_image_pixels: int | None | Unset = UNSET,
    max_decoded_bytes: int | None | Unset = UNSET,
    allowed_formats: Sequence[str] | None | Unset = UNSET,
) -> KimiK3EncoderInputs:
    """Compute every image's geometry up front; defer pixel work to ``materialize``.

    Reproduces sglang's ``prepare_kimi_k3_encoder_inputs``
    (``kimi_k3_image_processing.py``): every rank computes grids and token counts;
    only the rank that owns an image materialises its ``pixel_values``. Files are
    opened lazily (header only) to read their size, whatever their size; tensors are
    not copied. With ``exif_transpose`` the orientation is read too.

    Args:
        images: as :func:`preprocess`; media dicts may carry ``"content_hash"``, kept
            per image in :attr:`KimiK3EncoderInputs.content_hashes`.
        image_processor_or_media_proc_cfg: an object with a ``media_proc_cfg`` dict
            attribute (e.g. :class:`KimiK3VisionProcessor`) or the dict itself. Given a
            :class:`KimiK3VisionProcessor`, its validated config and its options are
            used, so ``materialize`` gives exactly what its ``preprocess`` gives.
        pillow_compat, exif_transpose, dtype, num_threads, max_image_pixels, max_decoded_bytes, allowed_formats: as
            :func:`preprocess`, for ``materialize`` (``allowed_formats`` for the sizing too); when not given, the processor's
            own (a :class:`KimiK3VisionProcessor`), else :func:`preprocess`'s defaults.
            The sizes follow ``exif_transpose`` (orientations 5..8 swap the sides).

    Returns:
        A :class:`KimiK3EncoderInputs`.

    Raises:
        ValueError: ``Kimi-K3 EPD owner-side preprocessing requires
            image_processor.media_proc_cfg`` when there is no ``media_proc_cfg`` dict;
            the missing-keys message; ``Unsupported Kimi-K3 encoder media item: {item}``;
            ``Unsupported data type: {type}``; dtype / channel messages for arrays and
            tensors; :class:`ImageError` for a file that cannot be read.
        TypeError: ``exif_transpose`` is not a bool.
    """
    return _prepare(
        images,
        image_processor_or_media_proc_cfg,
        _K3,
        KimiK3EncoderInputs,
        (pillow_compat, exif_transpose, dtype, num_threads, max_image_pixels, max_decoded_bytes, allowed_formats),
    )


def prepare_kimi_k25_encoder_inputs(
    images: Any,
    image_processor_or_media_proc_cfg: Any,
    *,
    pillow_compat: str | None = None,
    exif_transpose: bool | None = None,
    dtype: str | None = None,
    num_threads: int | None = None,
    max_image_pixels: int | None | Unset = UNSET,
    max_decoded_bytes: int | None | Unset = UNSET,
    allowed_formats: Sequence[str] | None | Unset = UNSET,
) -> KimiK25EncoderInputs:
    """Kimi-K2.5's deferred entry: every image's geometry up front, pixels on demand.

    Reproduces sglang's ``prepare_kimi_k25_encoder_inputs``
    (``kimi_k25_image_processing.py``) on the machinery of
    :func:`prepare_kimi_k3_encoder_inputs`, with the differences of sglang's K2.5
    version: its messages (verbatim, class included), and every image taken as RGB
    (``_to_pil_rgb``: ``convert("RGB")``, so alpha is dropped and
    ``transparent_bg_config`` is not applied, even in a K3 config). The K2.5 preset has
    no background, so there ``materialize`` equals :func:`preprocess`. Like the K3 entry
    (and unlike sglang's, which takes PIL images and uint8 tensors only), every input
    :func:`preprocess` accepts is accepted, sized from headers without decoding.

    Args:
        images: as :func:`prepare_kimi_k3_encoder_inputs` (media dicts may carry
            ``"content_hash"``).
        image_processor_or_media_proc_cfg: an object with a ``media_proc_cfg`` dict
            attribute (e.g. :class:`KimiK3VisionProcessor`, whose config and options are
            used) or the dict itself.
        pillow_compat, exif_transpose, dtype, num_threads, max_image_pixels, max_decoded_bytes, allowed_formats: as
            :func:`prepare_kimi_k3_encoder_inputs`.

    Returns:
        A :class:`KimiK25EncoderInputs`: ``grid_thws`` int64 ``[n, 3]``, per image
        ``resize_configs``, ``num_tokens``, ``original_image_sizes`` ``[width, height]``
        and ``content_hashes``; ``materialize(indices)`` gives float32
        ``[h * w, 3, ps, ps]`` arrays.

    Raises:
        ValueError: ``Kimi-K2.5 encoder preprocessing needs NaViT media config`` when
            there is no ``media_proc_cfg`` dict or it lacks one of ``patch_size``,
            ``merge_kernel_size``, ``in_patch_limit``, ``patch_limit_on_one_side`` (as
            sglang) or ``image_mean``, ``image_std`` (needed for the pixels; sglang fails
            later); ``Unsupported Kimi-K2.5 encoder media item: {value}`` for a media dict
            that is not ``{"type": "image", "image": ...}``; :class:`ConfigError` for a
            bad value; :class:`ImageError` for a file that cannot be read; the channel
            message for a tensor with 5 or more channels.
        TypeError: ``Kimi-K2.5 encoder preprocessing expects PIL or uint8 tensors`` for
            an input of no accepted type or an array / tensor whose dtype is not uint8;
            ``exif_transpose`` is not a bool.
    """
    return _prepare(
        images,
        image_processor_or_media_proc_cfg,
        _K25,
        KimiK25EncoderInputs,
        (pillow_compat, exif_transpose, dtype, num_threads, max_image_pixels, max_decoded_bytes, allowed_formats),
    )


@dataclass(frozen=True)
class _Flavour:
    """What the K3 and K2.5 entries differ in."""

    #: the error for a missing ``media_proc_cfg`` dict
    no_config: Callable[[], ValueError]
    #: whether every required key must be present (else :func:`errors.missing_keys` from
    #: :meth:`MediaProcConfig.from_dict`)
    keys_error: Callable[[], ValueError] | None
    #: the error for a media dict that is not an image
    media_item: Callable[[Any], ValueError]
    #: sglang's ``_to_pil_rgb``: images as RGB, a TypeError for other types
    rgb: bool
    #: whether K2.5 ``video_chunk`` items are taken (under a config with the video keys);
    #: sglang's K2.5 entry takes images only
    chunks: bool


def _is_side(value: Any) -> bool:
    """Whether the core's sizing takes ``value`` as an image side: an int (not a bool) of
    64 unsigned bits (the core refuses 0, and sides over its maximum, naming the item)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**64


_K3 = _Flavour(errors.no_media_proc_cfg, None, errors.unsupported_media_item, False, True)
_K25 = _Flavour(errors.k25_no_navit_config, errors.k25_no_navit_config, errors.k25_unsupported_media_item, True, False)

_Result = TypeVar("_Result", bound=KimiK3EncoderInputs)


def _check_rgb_input(item: Item) -> None:
    """sglang's ``_to_pil_rgb`` check, on every input kind :func:`preprocess` takes."""
    if item.kind is Kind.ARRAY:
        accepted = item.value.dtype == np.uint8
    elif item.kind is Kind.TENSOR:
        accepted = str(item.value.dtype) == "torch.uint8"
    else:
        accepted = item.kind in (Kind.PIL, Kind.ENCODED)
    if not accepted:
        raise errors.k25_not_pil_or_tensor()


def _prepare(
    images: Any,
    processor: Any,
    flavour: _Flavour,
    result: type[_Result],
    overrides: tuple[Any, Any, Any, Any, Any, Any, Any],
) -> _Result:
    """The deferred flow of both entries (see :func:`prepare_kimi_k3_encoder_inputs`);
    ``result``: the class returned (its grid message)."""
    pillow_compat, exif_transpose, dtype, num_threads, max_image_pixels, max_decoded_bytes, allowed_formats = overrides
    # imported here, so that ``import kimi_k3_rs`` imports none of kimi_k3_rs.hf
    from .hf import KimiK3VisionProcessor

    if isinstance(processor, KimiK3VisionProcessor):
        cfg = processor.config
        base = processor.options
    else:
        media_proc_cfg = processor if isinstance(processor, Mapping) else getattr(processor, "media_proc_cfg", None)
        if not isinstance(media_proc_cfg, Mapping):
            raise flavour.no_config()
        if flavour.keys_error is not None and any(key not in media_proc_cfg for key in REQUIRED_KEYS):
            raise flavour.keys_error()
        flag = getattr(processor, "exif_transpose", False)
        cfg, base = call_setup(media_proc_cfg, exif_transpose=flag if isinstance(flag, bool) else False)
    if flavour.rgb and (cfg.transparent_bg_config is not None or cfg.transparent_bg_fill_stage != "before_resize"):
        cfg = dataclasses.replace(cfg, transparent_bg_config=None, transparent_bg_fill_stage="before_resize")
    cfg, opts = call_setup(
        cfg,
        base.compat if pillow_compat is None else pillow_compat,
        base.exif_transpose if exif_transpose is None else exif_transpose,
        base.dtype if dtype is None else dtype,
        base.num_threads if num_threads is None else num_threads,
        base.max_image_pixels if max_image_pixels is UNSET else max_image_pixels,
        base.max_decoded_bytes if max_decoded_bytes is UNSET else max_decoded_bytes,
        base.allowed_formats if allowed_formats is UNSET else allowed_formats,
    )
    # per item: what materialize preprocesses, its content hash, and what it is sized
    # from (the image, or a chunk's frame 0)
    items: list[Any] = []
    hashes: list[Any] = []
    sources: list[Any] = []
    for index, value in enumerate(as_list(images)):
        item = classify(value)
        if item.kind is Kind.VIDEO_CHUNK and flavour.chunks and cfg.video is not None:
            with naming(index):
                chunk = chunk_frames(value, cfg)
            items.append(value)
            hashes.append(value.get("content_hash"))
            sources.append(chunk[0])
            continue
        if item.kind in (Kind.VIDEO_CHUNK, Kind.OTHER_MEDIA):
            raise flavour.media_item(value)
        if flavour.rgb:
            _check_rgb_input(item)
        items.append(item.value)
        hashes.append(item.content_hash)
        sources.append(item.value)
    sizes: list[tuple[int, int]] = []
    for index, source in enumerate(sources):
        with naming(index):  # any fault reading it names the item
            sizes.append(header_size(source, opts.exif_transpose, opts.allowed_formats))  # reads headers only
    return result(
        original_image_sizes=[[w, h] for w, h in sizes],
        content_hashes=hashes,
        _images=items,
        _config=cfg,
        _options=opts,
    )
