"""``KimiK3VisionProcessor``, the class that works without transformers (the package
:mod:`kimi_k3_rs.hf` documents it and what it reproduces).

Its steps live beside it: the outputs (:mod:`kimi_k3_rs.hf.outputs`), ``resize_image``
(:mod:`kimi_k3_rs.hf.resize`), the K2.5 side (:mod:`kimi_k3_rs.hf.video`) and
``preprocessor_config.json`` (:mod:`kimi_k3_rs.hf.hub`). It is named
``kimi_k3_rs.hf.KimiK3VisionProcessor`` (its ``__module__``), the path instances pickle by.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from PIL import Image

from .. import _native, errors
from .._input import as_list, header_size, run_batch
from .._pickling import ByConstructor
from ..config import (
    TransparentBgConfig,
    call_setup,
    load_preprocessor_config,
)
from ..options import (
    DEFAULT_MAX_DECODED_BYTES,
    DEFAULT_MAX_IMAGE_PIXELS,
)
from ..sizing import resize_dict
from .hub import (
    jsonable,
    resolve_config_path,
    write_config,
)
from .outputs import batch_feature, to_tensors
from .resize import resize_and_pad
from .video import (
    CHECKPOINT_CLASSES,
    checkpoint_flavour,
    chunk_resize_config,
    split_video_url,
)

__all__ = ["KimiK3VisionProcessor"]

#: The attributes the processor sets for itself; every other attribute is one the
#: checkpoint's class keeps too (a keyword of the constructor beyond its own, K2.5's
#: ``num_frames_per_chunk``, what transformers sets), written by ``to_dict``.
_OWN_ATTRIBUTES = ("config", "_media_proc_cfg", "options", "checkpoint_flavour")


class _ImageProcessorStandIn:
    """What the checkpoint's class inherits from transformers' ``BaseImageProcessor``,
    for :class:`KimiK3VisionProcessor` without transformers (the public class with
    transformers calls ``BaseImageProcessor``'s own: see
    ``KimiK3VisionProcessor._image_processor_base``).

    As transformers 5's ``ImageProcessingMixin`` / ``BaseImageProcessor``: the
    constructor keeps its keyword arguments as attributes, but ``processor_class`` and
    ``feature_extractor_type``, which it drops; ``to_dict`` is a deep copy of the
    instance's attributes plus ``image_processor_type`` (the class name); a call is
    ``self.preprocess(images, *args, **kwargs)``. Never instantiated: the processor
    calls these functions with itself as ``self``.
    """

    def __init__(self: Any, **kwargs: Any) -> None:
        kwargs.pop("feature_extractor_type", None)
        kwargs.pop("processor_class", None)
        for key, value in kwargs.items():
            setattr(self, key, value)

    def to_dict(self: Any) -> dict[str, Any]:
        output: dict[str, Any] = copy.deepcopy(self.__dict__)
        output["image_processor_type"] = type(self).__name__
        return output

    def __call__(self: Any, images: Any, *args: Any, **kwargs: Any) -> Any:
        return self.preprocess(images, *args, **kwargs)


class KimiK3VisionProcessor(ByConstructor):
    """Drop-in for the checkpoint's ``KimiK3VisionProcessor`` (and K2.5's ``KimiK25VisionProcessor``).

    Reproduces ``kimi_k3_vision_processing.py: KimiK3VisionProcessor`` and
    ``kimi_k25_vision_processing.py: KimiK25VisionProcessor``, every member their
    callers use (``KimiK3Processor``, vLLM's ``KimiK25Processor``, sglang's fast path
    and CPU fallback), with their signatures, return types and values; the pixel work
    runs in the Rust core. It acts as the checkpoint its config belongs to (see the
    module docstring: K2.5 when ``media_proc_cfg`` has K2.5's video keys, else K3).

    ``kimi_k3_rs.KimiK3VisionProcessor`` is, when transformers imports, a subclass of
    this class and of ``transformers.image_processing_utils.BaseImageProcessor``;
    ``isinstance`` checks against this class hold for both.

    The config is validated once, here; ``media_proc_cfg`` returns a fresh copy of it
    on every access, so mutating that copy never changes what the processor does.

    Other keywords are kept as attributes, as the checkpoint's class keeps them
    (transformers' ``BaseImageProcessor.__init__``: so the keys of a
    ``preprocessor_config.json`` or of the checkpoint's ``to_dict()``, such as
    ``auto_map``, ``image_processor_type`` and K2.5's ``num_frames_per_chunk``, load
    through :meth:`from_dict` and :meth:`from_pretrained`), and :meth:`to_dict` writes
    them back. With transformers 4.x, ``processor_class`` is kept as
    ``_processor_class`` (``None`` when not given), as 4.x keeps it; with 5.x and
    without transformers it is dropped. As the K2.5 checkpoint's, a K2.5 processor sets
    ``num_frames_per_chunk`` to the config's ``temporal_merge_kernel_size`` (where the
    checkpoint raises ``KeyError`` for a config without that key, ours sets none).

    Args:
        media_proc_cfg: the checkpoint's ``media_proc_cfg`` dict; validated here.
        pillow_compat: ``"auto"``, ``"12"``, ``"12.2"`` or ``"13"`` (see :func:`preprocess`).
        exif_transpose: apply EXIF orientation to PIL and decoded images (default
            False, as the checkpoint; see :func:`preprocess`).
        dtype, num_threads, max_image_pixels, max_decoded_bytes, allowed_formats: as
            :func:`preprocess`, for every call.
        attributes: kept as attributes (see above); ``image_processor_type`` or
            ``auto_map["AutoImageProcessor"]`` naming one of the two checkpoints'
            classes decides which one the processor acts as.

    Pickling and ``copy.copy``: the constructor's arguments (the ``media_proc_cfg``
    dict, the options and the kept attributes, including those set on the instance
    afterwards, as the checkpoint's pickle holds them), and a load builds the processor
    through the constructor, so a damaged or crafted pickle raises what the
    constructor raises.

    Raises:
        ValueError / TypeError: as :meth:`MediaProcConfig.from_dict` and the options
            of :func:`preprocess`.
        TypeError: an attribute named like one of the processor's own members
            (``config``, ``options``, ``model_type``, a method; where the checkpoint
            would shadow its member, ours refuses):
            ``KimiK3VisionProcessor.__init__() got an unexpected keyword argument 'config'``.
        AttributeError: transformers' own, for an attribute it cannot set (a
            read-only property of ``BaseImageProcessor``), as the checkpoint's.
    """

    #: The public path (:mod:`kimi_k3_rs.hf` re-exports the class): what ``repr(cls)``
    #: shows and what a pickled instance records, so that pickles load by it.
    __module__ = "kimi_k3_rs.hf"

    #: Where the ``__init__`` (keywords kept as attributes), ``to_dict`` and
    #: ``__call__`` that the checkpoint's class inherits come from: transformers'
    #: ``BaseImageProcessor`` in the public class (so they behave as the installed
    #: transformers' do, 4.x or 5.x), :class:`_ImageProcessorStandIn` in this one.
    _image_processor_base: ClassVar[type[Any]] = _ImageProcessorStandIn

    def __init__(
        self,
        media_proc_cfg: Mapping[str, Any],
        *,
        pillow_compat: str = "auto",
        exif_transpose: bool = False,
        dtype: str = "float32",
        num_threads: int | None = None,
        max_image_pixels: int | None = DEFAULT_MAX_IMAGE_PIXELS,
        max_decoded_bytes: int | None = DEFAULT_MAX_DECODED_BYTES,
        allowed_formats: Sequence[str] | None = None,
        **attributes: Any,
    ) -> None:
        for name in attributes:
            if name in _OWN_ATTRIBUTES or hasattr(KimiK3VisionProcessor, name):
                raise errors.own_member_as_attribute(name)
        self.config, self.options = call_setup(
            media_proc_cfg,
            pillow_compat,
            exif_transpose,
            dtype,
            num_threads,
            max_image_pixels,
            max_decoded_bytes,
            allowed_formats,
        )
        self._media_proc_cfg: dict[str, Any] = copy.deepcopy(dict(media_proc_cfg))
        self.checkpoint_flavour = checkpoint_flavour(self._media_proc_cfg, attributes)
        # after the processor's own (transformers' error for an attribute it cannot set
        # shows the processor's repr)
        self._image_processor_base.__init__(self, **attributes)
        if self.checkpoint_flavour == "kimi_k25" and "temporal_merge_kernel_size" in self._media_proc_cfg:
            self.num_frames_per_chunk = copy.deepcopy(self._media_proc_cfg["temporal_merge_kernel_size"])

    def _attributes(self) -> dict[str, Any]:
        """The kept attributes (every one but :data:`_OWN_ATTRIBUTES`), by name."""
        return {key: value for key, value in self.__dict__.items() if key not in _OWN_ATTRIBUTES}

    def _constructor_kwargs(self) -> dict[str, Any]:
        """The constructor's arguments that give this processor (what it pickles as)."""
        return {"media_proc_cfg": self._media_proc_cfg, **self._attributes(), **self.options._constructor_kwargs()}

    def __deepcopy__(self, memo: dict[int, Any]) -> KimiK3VisionProcessor:
        """A deep copy (``ProcessorMixin.to_dict`` / ``__repr__`` deep-copy their parts):
        the validated config and options, immutable, are shared; every other attribute
        is deep-copied."""
        cls = type(self)
        new = cls.__new__(cls)
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            new.__dict__[key] = value if key in ("config", "options") else copy.deepcopy(value, memo)
        return new

    @property
    def media_proc_cfg(self) -> dict[str, Any]:
        """A copy of the ``media_proc_cfg`` dict the processor was built with."""
        return copy.deepcopy(self._media_proc_cfg)

    @property
    def model_type(self) -> str:
        """The checkpoint's ``model_type`` of this flavour: ``"kimi_k3"`` or ``"kimi_k25"``."""
        return self.checkpoint_flavour

    @property
    def pillow_compat(self) -> str:
        """The resolved pass order, ``"12"``, ``"12.2"`` or ``"13"``."""
        return self.options.compat

    @property
    def exif_transpose(self) -> bool:
        """Whether EXIF orientation is applied."""
        return self.options.exif_transpose

    @property
    def _transparent_bg_config(self) -> TransparentBgConfig | None:
        """The background, as ``KimiK3VisionProcessor._transparent_bg_config`` gives it.

        A :class:`TransparentBgConfig` with the fields of the checkpoint's dataclass
        (``media_utils.py: TransparentBgConfig``, missing keys at its defaults), which
        the checkpoint's ``ensure_media_type`` / ``fill_transparent_bg_with`` read; None
        when the config sets none.
        """
        return self.config.transparent_bg_config

    @property
    def _transparent_bg_fill_stage(self) -> str:
        """``"before_resize"`` (the default) or ``"after_resize"``, as
        ``KimiK3VisionProcessor._transparent_bg_fill_stage`` gives it."""
        return self.config.transparent_bg_fill_stage

    # --- prompts -----------------------------------------------------------------------

    @classmethod
    def make_image_prompt(cls, width: int, height: int) -> str:
        """K3's image placeholder with the original size, as
        ``KimiK3VisionProcessor.make_image_prompt``: ``<|media_begin|>image
        {width}x{height}<|media_content|><|media_pad|><|media_end|>`` (no space but the
        one after ``image``). Servers expand the ``<|media_pad|>`` to
        :meth:`media_tokens_calculator` tokens.

        Examples:
            >>> from kimi_k3_rs.hf import KimiK3VisionProcessor
            >>> KimiK3VisionProcessor.make_image_prompt(640, 480)
            '<|media_begin|>image 640x480<|media_content|><|media_pad|><|media_end|>'
        """
        return f"<|media_begin|>image {width}x{height}<|media_content|><|media_pad|><|media_end|>"

    @classmethod
    def make_chunk_prompt(cls, timestamp_text: str) -> str:
        """K2.5's video-chunk placeholder, as ``KimiK25VisionProcessor.make_chunk_prompt``:
        ``{timestamp_text}<|media_begin|>video<|media_content|><|media_pad|><|media_end|>``."""
        return f"{timestamp_text}<|media_begin|>video<|media_content|><|media_pad|><|media_end|>"

    # --- sizing ------------------------------------------------------------------------

    def _check_type(self, kind: Any) -> None:
        """``ensure_media_type``'s check: ``image`` (and ``video_chunk`` for K2.5) only."""
        if kind != "image" and not (kind == "video_chunk" and self.checkpoint_flavour == "kimi_k25"):
            raise errors.unsupported_media_type(kind)

    def get_resize_config(self, media_input: Mapping[str, Any]) -> dict[str, int]:
        """The sizing of one media dict, as the checkpoint's ``get_resize_config``.

        ``{"type": "image", "image": ...}``: ``media_utils.py: navit_resize_image`` of the
        image's size; any image input :func:`preprocess` takes, sized from its header
        (the checkpoint reads a PIL image's ``.size``). K2.5 only,
        ``{"type": "video_chunk", "video_chunk": [frames...]}``: ``navit_resize_video``
        as K2.5 calls it for a chunk: frame 0's size, ``in_patch_limit_each_frame`` (or
        ``in_patch_limit`` when None), capped by ``round(in_patch_limit_video / n)``
        when that is set, ``n = len(frames)``.

        Returns:
            ``{"num_tokens", "new_width", "new_height", "pad_width", "pad_height",
            "sampled_nframes"}`` (ints; pixels; padding right / bottom;
            ``sampled_nframes`` 1 for an image, the frame count for a chunk).

        Raises:
            ValueError: ``Unsupported type: {type}`` for another media type (K3: anything
                but ``image``); the side-limit text (:class:`KimiK3Error`).
            KeyError: no ``"type"`` / ``"image"`` / ``"video_chunk"`` key, as in the
                checkpoint.
            ConfigError: (chunks) the config lacks one of the six K2.5 video keys (the
                checkpoint raises ``KeyError`` for those its sizing reads).
            IndexError: an empty chunk.
            ValueError / TypeError: as :func:`preprocess` for image data it cannot size.
        """
        kind = media_input["type"]
        if kind == "image":
            width, height = header_size(media_input["image"], self.options.exif_transpose, self.options.allowed_formats)
            resize = resize_dict(_native.navit_resize_config(width, height, self.config.native))
            return {**resize, "sampled_nframes": 1}
        if kind == "video_chunk" and self.checkpoint_flavour == "kimi_k25":
            return chunk_resize_config(media_input["video_chunk"], self.config, self.options)
        raise errors.unsupported_type(kind)

    def media_tokens_calculator(self, media: Mapping[str, Any]) -> int:
        """LLM tokens of one media dict, as the checkpoint's ``media_tokens_calculator``.

        ``ensure_media_type``'s type check, then ``get_resize_config(media)["num_tokens"]``
        (:meth:`get_resize_config`). The dict is not changed (the checkpoint replaces
        its ``"image"`` with the opened PIL image); encoded images are sized from their
        header, no pixels decoded.

        Returns:
            ``int``: ``(padded_h / F) * (padded_w / F)``, ``F = patch_size *
            merge_kernel_size``, or ``fixed_output_tokens``.

        Raises:
            ValueError: ``Unsupported media type: {type}`` (K3: anything but ``image``;
                K2.5: but ``image`` / ``video_chunk``); otherwise as
                :meth:`get_resize_config`.
            KeyError: no ``"type"`` key.
        """
        self._check_type(media["type"])
        return int(self.get_resize_config(media)["num_tokens"])

    # --- pixels ------------------------------------------------------------------------

    def resize_image(
        self, image: Image.Image, new_width: int, new_height: int, pad_width: int, pad_height: int
    ) -> np.ndarray:
        """Resize and pad one PIL image, as the checkpoint's ``resize_image``, bit for bit.

        ``image.resize((new_width, new_height), BICUBIC)`` in the image's own mode (the
        8-bit resample in the Rust core, ``pillow_compat`` honoured; RGBA / LA
        premultiplied as Pillow does; ``P`` / ``1`` NEAREST, 16/32-bit modes and
        up-scales by Pillow); then, when ``transparent_bg_fill_stage`` is
        ``"after_resize"`` (K3's ``image_to_np``), ``fill_transparent_bg_with`` onto the
        background; then ``np.asarray`` and ``np.pad(((0, pad_height), (0, pad_width),
        (0, 0)))`` with zeros, as ``media_utils.py: image_to_np`` and ``resize_image``.

        Returns:
            uint8 ``[new_height + pad_height, new_width + pad_width, C]``: ``C`` is 3 for
            RGB (and whatever the background step returns), the mode's band count
            otherwise (an RGBA image without the background step gives 4, as the
            checkpoint's).

        Raises:
            AssertionError: ``image must be a PIL Image``.
            ValueError: numpy's, for a mode whose array is 2-D (``L`` without the
                background step), as the checkpoint's ``np.pad`` fails on it; Pillow's,
                for a zero or negative size; :class:`ImageError` as :func:`preprocess`
                for a 16/32-bit mode whose pass order ``pillow_compat`` cannot give.
        """
        return resize_and_pad(image, new_width, new_height, pad_width, pad_height, self.config, self.options)

    def preprocess(self, medias: Sequence[Any], return_tensors: str | None = None) -> Mapping[str, Any]:
        """Preprocess media dicts or bare images, as the checkpoint processor's ``preprocess``.

        Args:
            medias: one image / media dict, or a list / tuple of
                ``{"type": "image", "image": ...}`` dicts or bare images, in any mix
                (see :func:`preprocess` for the accepted image types).
            return_tensors: ``"np"`` for numpy arrays; ``"pt"`` for torch tensors
                (sharing the arrays' memory, no copy; needs torch); ``None`` (default)
                for torch tensors when torch can be imported, as the checkpoint gives,
                else numpy arrays.

        Returns:
            A ``transformers.image_processing_utils.BatchFeature`` when transformers can
            be imported (what the checkpoint's processor returns), else a plain
            ``dict``; the same keys and values either way: ``"pixel_values"``
            (``[N, 3, ps, ps]`` of the processor's ``dtype``, float32 by default) and
            ``"grid_thws"`` (int64 ``[n, 3]``). An empty list gives an empty mapping, as
            the reference's ``BatchFeature({})``.

        Raises:
            ValueError: ``Unsupported media type: {type}`` (the checkpoint's) for a media
                dict of another type (K3: anything but ``image``); ``return_tensors`` is
                not None, ``"np"`` or ``"pt"``; and as :func:`preprocess`:
                :class:`ImageError` for an input that cannot be read or decoded (naming
                its batch index), :class:`ImageTooLargeError` for an encoded input over
                ``max_image_pixels``.
            TypeError: as :func:`preprocess`.
            ImportError: ``return_tensors="pt"`` without torch.
        """
        medias = as_list(medias)
        for item in medias:
            if isinstance(item, Mapping) and "type" in item:
                self._check_type(item["type"])
        if not medias:
            return batch_feature({})
        pixel_values, grid_thws = run_batch(medias, self.config, self.options)
        return batch_feature(
            to_tensors({"pixel_values": pixel_values, "grid_thws": grid_thws}, return_tensors)
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Mapping[str, Any]:
        """``processor(images, ...)``: transformers' ``BaseImageProcessor.__call__``, which
        the checkpoint's class keeps, so ``processor(images=[image],
        return_tensors="np")`` is ``processor.preprocess([image], return_tensors="np")``.

        The arguments go to the installed transformers' own ``__call__``, which checks
        them: 4.x's ``__call__(images, **kwargs)`` (a second positional argument is a
        ``TypeError``), 5.x's ``__call__(images, *args, **kwargs)``; both call
        ``self.preprocess(images, ...)``. Without transformers, as 5.x. See
        :meth:`preprocess` for the arguments, the result and the errors.

        Raises:
            TypeError: no ``images`` (``medias=`` is :meth:`preprocess`'s name, not the
                call's), or arguments :meth:`preprocess` does not take (transformers'
                messages).
        """
        result: Mapping[str, Any] = self._image_processor_base.__call__(self, *args, **kwargs)
        return result

    # --- video (K2.5) ------------------------------------------------------------------

    def split_video_chunks(self, video_url: str | bytes) -> list[dict[str, Any]]:
        """Sample a whole video into chunk media dicts, as K2.5's ``split_video_chunks``.

        Reproduces ``kimi_k25_vision_processing.py: split_video_chunks`` (with
        ``media_utils.py: get_video_meta`` and ``timestamp_as_str``): ``sample_fps =
        min(cfg["sample_fps"], avg_fps)``; ``max(round(n * sample_fps / avg_fps), 1)``
        frames at ``np.linspace(0, n - 1, ...).round()``; chunks of
        ``temporal_merge_kernel_size`` frames (the last may be shorter), each
        ``{"type": "video_chunk", "video_chunk": [PIL RGB frames], "prompt":
        make_chunk_prompt(timestamp of its first frame)}``. Decoding uses
        ``mecord.VideoReader``, as the checkpoint does.

        Args:
            video_url: the video as bytes, a path, or a ``data:video/mp4;base64,`` URL.

        Raises:
            ImportError: ``mecord`` is not installed (it is not on PyPI); decode with
                ``kimi_k3_rs.split_video_frames`` instead.
            AssertionError: ``Invalid video format.`` when the decoder reports no frames,
                size or frame rate.
            ValueError: ``Invalid timestamp mode: {mode}``.
            KeyError: a video key missing from ``media_proc_cfg``.
        """
        return split_video_url(video_url, self.config)

    # --- config in and out -------------------------------------------------------------

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike[str],
        *,
        revision: str | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        token: str | bool | None = None,
        local_files_only: bool = False,
        subfolder: str | None = None,
        **kwargs: Any,
    ) -> KimiK3VisionProcessor:
        """Load ``preprocessor_config.json`` from a file, a checkpoint folder or the Hub.

        The file's dict goes through :meth:`from_dict` with ``kwargs``, as transformers'
        ``from_pretrained`` hands it to the checkpoint's ``from_dict``: its
        ``media_proc_cfg`` is the config, the keys beside it (``auto_map``, ...) are kept
        as attributes.

        Args:
            path: the JSON file, a folder holding it, or a Hub repo id (``owner/name``,
                resolved through ``huggingface_hub``, which honours ``HF_HUB_OFFLINE``
                and ``HF_HUB_CACHE``).
            revision, cache_dir, token, local_files_only: passed to
                ``huggingface_hub.hf_hub_download`` for a repo id (ignored for a local
                path).
            subfolder: the config's folder inside the repo or local folder.
            kwargs: the keyword options of the constructor, and attributes to keep;
                they win over the file's keys.

        Raises:
            FileNotFoundError: no such file (a local path; or a repo id without
                huggingface_hub installed).
            OSError / ValueError: ``huggingface_hub``'s errors for a repo id (not found,
                offline without a cached copy, an invalid id).
            ConfigError: the file has no ``media_proc_cfg`` object; bad values.
            TypeError: as the constructor, for a key named like one of the
                processor's own members.
        """
        local = resolve_config_path(
            path,
            revision=revision,
            cache_dir=cache_dir,
            token=token,
            local_files_only=local_files_only,
            subfolder=subfolder,
        )
        return cls.from_dict(load_preprocessor_config(local), **kwargs)

    @classmethod
    def from_dict(cls, config_dict: Mapping[str, Any], **kwargs: Any) -> KimiK3VisionProcessor:
        """Build a processor from a ``preprocessor_config.json`` dict, as the checkpoint's ``from_dict``.

        ``config_dict["media_proc_cfg"]`` is the config (``{}`` when absent, which fails
        validation); every other key, and every keyword, goes to the constructor: the
        constructor's options, or attributes kept as the checkpoint's class keeps them
        (``image_processor_type``, ``auto_map``, K2.5's ``num_frames_per_chunk``, 4.x's
        ``_processor_class``, ...), so the checkpoint's ``to_dict()`` loads. A keyword
        given in both wins over the dict's key (the checkpoint raises ``TypeError``
        there).

        Raises:
            ValueError / TypeError: as the constructor.
        """
        config = {**dict(config_dict), **kwargs}
        media_proc_cfg = config.pop("media_proc_cfg", {})
        return cls(media_proc_cfg, **config)

    def to_dict(self) -> dict[str, Any]:
        """The ``preprocessor_config.json`` content of this processor: the checkpoint's keys.

        As the checkpoint's ``to_dict``: transformers' ``to_dict`` (the installed
        version's: a deep copy of the kept attributes, see the class docstring; 5.x
        leaves out those that are ``None``), then ``image_processor_type`` and
        ``media_proc_cfg``. ``image_processor_type`` is the checkpoint's class name of
        this flavour (``"KimiK3VisionProcessor"`` or ``"KimiK25VisionProcessor"``);
        ``media_proc_cfg`` is the one the processor was built with (unknown keys such as
        the video keys and ``config_type`` included), as JSON types: tuples and numpy
        arrays become lists, numpy scalars Python numbers. So a new K3 processor gives
        ``{"image_processor_type", "media_proc_cfg"}`` (and ``"_processor_class":
        None`` with transformers 4.x), a K2.5 one ``"num_frames_per_chunk"`` too. The
        per-call options (``pillow_compat``, ``exif_transpose``, ``dtype``,
        ``num_threads``, ``max_image_pixels``) are this library's runtime choices, not
        part of the checkpoint's config: they are not included; pass them again to
        :meth:`from_pretrained`.

        Returns:
            A new dict; mutating it changes nothing in the processor.

        Examples:
            >>> import kimi_k3_rs
            >>> proc = kimi_k3_rs.KimiK3VisionProcessor(kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)
            >>> proc.to_dict()["media_proc_cfg"]["in_patch_limit"], proc.to_dict()["image_processor_type"]
            (65536, 'KimiK3VisionProcessor')
        """
        output: dict[str, Any] = self._image_processor_base.to_dict(self)
        for name in _OWN_ATTRIBUTES:
            output.pop(name, None)
        output["image_processor_type"] = CHECKPOINT_CLASSES[self.checkpoint_flavour]
        output["media_proc_cfg"] = jsonable(self._media_proc_cfg)
        output.pop("media_processor", None)
        return output

    def to_json_string(self) -> str:
        """:meth:`to_dict` as the checkpoint's ``to_json_string`` writes it: JSON, indent
        2, sorted keys, a final newline; every key as it is (with transformers 4.x,
        ``_processor_class``, which transformers' own ``to_json_string`` would rename),
        numpy arrays and scalars as JSON values.

        Raises:
            TypeError: a value (of an unknown ``media_proc_cfg`` key, or a kept
                attribute) cannot be written as JSON.
        """
        return json.dumps(jsonable(self.to_dict()), indent=2, sort_keys=True) + "\n"

    def __repr__(self) -> str:
        """The checkpoint's ``__repr__``: ``KimiK3VisionProcessor(media_proc_cfg={...})``
        (``KimiK25VisionProcessor(...)`` for the K2.5 flavour)."""
        return f"{CHECKPOINT_CLASSES[self.checkpoint_flavour]}(media_proc_cfg={self._media_proc_cfg})"

    def save_pretrained(self, save_directory: str | os.PathLike[str], **kwargs: Any) -> list[str]:
        """Write ``preprocessor_config.json`` (:meth:`to_json_string`) into a folder.

        ``KimiK3VisionProcessor.from_pretrained(save_directory)`` then builds a
        processor with the same ``media_proc_cfg`` (and so the same outputs, given the
        same options). The file is written to a temporary name and renamed, so a reader
        never sees half a file; an existing ``preprocessor_config.json`` is replaced.

        Args:
            save_directory: the folder; created (with its parents) if missing.
            kwargs: accepted for transformers' callers (``push_to_hub`` and its options)
                and ignored: nothing is pushed.

        Returns:
            ``[path]``: the file written (as transformers' ``save_pretrained`` returns
            the files it wrote).

        Raises:
            OSError: the folder cannot be created (e.g. ``save_directory`` is a file) or
                the file cannot be written.
            TypeError: a value of an unknown ``media_proc_cfg`` key cannot be written
                as JSON.
        """
        text = self.to_json_string()
        return [write_config(os.fspath(save_directory), text)]


#: The class's examples, for doctest: its finder skips a class whose ``__module__`` (the
#: public path, :mod:`kimi_k3_rs.hf`) names another module than the one it scans.
__test__ = {"KimiK3VisionProcessor": KimiK3VisionProcessor}
