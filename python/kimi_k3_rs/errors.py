"""The exceptions of kimi_k3_rs, and every message only Python can raise.

The hierarchy is defined once, in the compiled core (``src/python/errors.rs``):
``KimiK3Error`` (a ``ValueError``), with ``ConfigError``, ``ImageError`` and its
``ImageTooLargeError``; all four are public as ``kimi_k3_rs.<name>``. The core's
messages come from its error enum (``src/error.rs``). The functions here build the
messages of faults only Python sees (Pillow, torch, media dicts, options of the
Python API); each returns the exception for the caller to ``raise``.

Every caller value embedded in a message goes through :func:`abbreviate`, the
core's one abbreviation (at most 200 characters, on one line). Texts that sglang or
the checkpoint define are kept verbatim, class included, and marked
(:func:`is_verbatim`, set by their builders here and by the core) so that a batch
raises them as they are; any other fault met while an input is read becomes an
:class:`ImageError` naming the input (``kimi_k3_rs._input.naming``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from PIL import UnidentifiedImageError

from ._native import (
    ConfigError,
    ImageError,
    ImageTooLargeError,
    KimiK3Error,
    abbreviate,
)

__all__ = ["ConfigError", "ImageError", "ImageTooLargeError", "KimiK3Error", "abbreviate"]

_P = ParamSpec("_P")
_E = TypeVar("_E", bound=BaseException)

#: The attribute (``True``) that marks an exception of another project's text and
#: class: set by :func:`_verbatim` and by the core (``src/python/errors.rs:
#: VERBATIM_ATTR``, the same name).
_VERBATIM = "_kimi_k3_rs_verbatim"


def _verbatim(build: Callable[_P, _E]) -> Callable[_P, _E]:
    """Mark an error builder whose text and class are another project's (sglang's, the
    checkpoint's): each exception it returns carries the mark that :func:`is_verbatim`
    reads, so that a batch raises it as it is, without the image's index in front, as
    there (``kimi_k3_rs._input.naming``)."""

    @functools.wraps(build)
    def marked(*args: _P.args, **kwargs: _P.kwargs) -> _E:
        exc = build(*args, **kwargs)
        setattr(exc, _VERBATIM, True)
        return exc

    return marked


def is_verbatim(exc: BaseException) -> bool:
    """Whether ``exc`` carries another project's text and class: built by a
    :func:`_verbatim` builder, or by the core (its copies of sglang's texts)."""
    return getattr(exc, _VERBATIM, False) is True


# --- sglang's texts (kimi_k3_image_processing.py), verbatim --------------------------


def missing_keys(names: list[str]) -> ConfigError:
    """``prepare_kimi_k3_encoder_inputs``: required ``media_proc_cfg`` keys are absent."""
    return ConfigError("Kimi-K3 image processor is missing deferred-preprocessing config: " + ", ".join(names))


@_verbatim
def no_media_proc_cfg() -> ValueError:
    """``prepare_kimi_k3_encoder_inputs``: the processor has no ``media_proc_cfg`` dict."""
    return ValueError("Kimi-K3 EPD owner-side preprocessing requires image_processor.media_proc_cfg")


@_verbatim
def unsupported_media_item(item: Any) -> ValueError:
    """A media dict that is not ``{"type": "image", "image": ...}``."""
    return ValueError(f"Unsupported Kimi-K3 encoder media item: {abbreviate(item)}")


@_verbatim
def tensor_dtype(dtype: Any) -> ValueError:
    """``to_hwc_uint8``: a torch tensor that is not ``torch.uint8`` (the core says the same
    of numpy arrays, naming their numpy dtype)."""
    return ValueError(f"Kimi-K3 preprocessing expects raw uint8 pixels, got {abbreviate(str(dtype), quote=False)}")


@_verbatim
def channel_count(channels: int) -> ValueError:
    """``to_hwc_uint8``: an ``HWC`` torch tensor whose channel count is not 1 to 4 (the
    core says the same of arrays)."""
    return ValueError(f"Unsupported Kimi-K3 image channel count: {channels}")


@_verbatim
def wrong_grids() -> ValueError:
    """``materialize``: the grids of the pixels differ from those computed up front."""
    return ValueError("Kimi-K3 deferred CPU preprocessing produced wrong grids")


# --- the checkpoint's texts (kimi_k3_vision_processing.py: _to_pil), verbatim -------


@_verbatim
def unsupported_data_type(data: Any) -> ValueError:
    """``_to_pil``: an input that is neither an image, an array, a tensor nor encoded data."""
    return ValueError(f"Unsupported data type: {abbreviate(type(data))}")


# --- ours: decoding and Pillow ---------------------------------------------------------


def unreadable(exc: BaseException) -> ImageError:
    """Pillow cannot read or decode an input (missing, truncated, not an image)."""
    return ImageError(f"cannot read or decode it: {abbreviate(exc)}")


def memory_at_image(index: int, exc: MemoryError) -> MemoryError:
    """Memory ran out while image ``index`` of a batch was decoded or processed."""
    return MemoryError(f"image {index}: {abbreviate(str(exc) or 'out of memory', quote=False)}")


def at_image(index: int, exc: ImageError) -> ImageError:
    """``exc`` raised for image ``index`` of a batch: its class, the index first."""
    return type(exc)(f"image {index}: {exc}")


def unidentified() -> UnidentifiedImageError:
    """No format plugin accepts the data (Pillow's own text)."""
    return UnidentifiedImageError("cannot identify image file")


def data_url_without_comma(data: str) -> ImageError:
    """A ``data:`` URL with no ``,`` before its payload."""
    return ImageError(f"data: URL without a ',' before its payload: {abbreviate(data[:40])}")


def data_url_not_base64(exc: BaseException) -> ImageError:
    """A ``data:`` URL whose payload is not base64."""
    return ImageError(f"data: URL payload is not base64: {abbreviate(str(exc), quote=False)}")


def too_many_pixels(what: str, width: int, height: int, max_image_pixels: int) -> ImageTooLargeError:
    """A header (``what``: the image, or an ICO entry) claims more than ``max_image_pixels``."""
    return ImageTooLargeError(
        f"{what} of {width}x{height} = {width * height} pixels is over "
        f"max_image_pixels={max_image_pixels} (a decompression bomb?); "
        "pass a larger max_image_pixels, or None, to decode it"
    )


def cannot_convert(mode: str, target: str, exc: BaseException) -> ImageError:
    """Pillow cannot ``convert`` the mode (``La`` to RGB), as in the checkpoint."""
    return ImageError(
        f"cannot convert a mode {abbreviate(mode, quote=False)} image to {target} (Pillow: {abbreviate(str(exc), quote=False)}); "
        "the checkpoint's processor fails on it the same way"
    )


def pass_order(mode: str, version: str, installed: str, compat: str, size: tuple[int, int], new_size: tuple[int, int]) -> ImageError:
    """A mode resized by the installed Pillow, whose pass order is not the one asked for."""
    (width, height), (new_width, new_height) = size, new_size
    return ImageError(
        f"mode {mode} images are resized by the installed Pillow {version} "
        f"(its 16/32-bit resample), whose pass order is pillow_compat={installed!r}, not "
        f"{compat!r}, and the order changes the result for {width}x{height} -> "
        f"{new_width}x{new_height}; use pillow_compat='auto'"
    )


def tensor_shape(shape: tuple[int, ...]) -> ImageError:
    """A torch tensor that is not 2-D or 3-D."""
    return ImageError(f"expected an HW, CHW or HWC uint8 tensor, got shape {list(shape)}")


def empty_tensor(shape: tuple[int, ...]) -> ImageError:
    """A torch tensor with a zero side."""
    return ImageError(f"image width and height must be positive, got shape {list(shape)}")


# --- ours: options and arguments of the Python API -------------------------------------


def not_a_flag(name: str, value: Any) -> TypeError:
    """A keyword that takes ``True`` or ``False`` got something else."""
    return TypeError(f"{name} must be True or False, got {abbreviate(value)}")


def bad_env_threads(variable: str, value: str) -> KimiK3Error:
    """The thread-count environment variable is not an integer in range."""
    return KimiK3Error(f"{variable} must be an integer in 1..=1024, got {abbreviate(value)}")


def bad_decode_env(name: str, value: str) -> KimiK3Error:
    """``KIMI_K3_RS_DECODE`` is set to something other than ``auto`` or ``pillow``."""
    return KimiK3Error(f"{name} must be 'auto' or 'pillow', got {abbreviate(value)}")


def bad_allowed_formats(value: Any) -> TypeError:
    """``allowed_formats`` is not None or a sequence of format names."""
    return TypeError(f"allowed_formats must be None or a list of Pillow format names, got {abbreviate(value)}")


def unknown_formats(unknown: list[str], known: list[str]) -> KimiK3Error:
    """``allowed_formats`` names formats Pillow has no plugin for."""
    return KimiK3Error(f"allowed_formats: Pillow has no format {abbreviate(unknown)} (it reads {abbreviate(known)})")


def format_not_allowed(fmt: str, allowed: frozenset[str]) -> ImageError:
    """An input's format (from its magic bytes, or Pillow's plugin) is not allowed."""
    return ImageError(f"format {fmt} is not in allowed_formats ({', '.join(sorted(allowed))})")


def bad_max_decoded_bytes(value: Any) -> KimiK3Error:
    """``max_decoded_bytes`` is not a positive int or None."""
    return KimiK3Error(f"max_decoded_bytes must be a positive int or None, got {abbreviate(value)}")


def too_many_decoded_bytes(width: int, height: int, nbytes: int, max_decoded_bytes: int) -> ImageTooLargeError:
    """A header's size decodes to more than ``max_decoded_bytes`` bytes."""
    return ImageTooLargeError(
        f"image of {width}x{height} decodes to {nbytes} bytes, over "
        f"max_decoded_bytes={max_decoded_bytes} (a decompression bomb?); "
        "pass a larger max_decoded_bytes, or None, to decode it"
    )


def decodes_beyond_its_size(width: int, height: int, nbytes: int, resize: int, file_bytes: int) -> ImageTooLargeError:
    """An encoded file decodes to more than its size allows, with its resize's ``resize``
    bytes of filter taps and working rows (``kimi_k3_rs._input.encoded.check_header``)."""
    return ImageTooLargeError(
        f"image of {width}x{height} decodes to {nbytes} bytes, and {resize} bytes of resize filter taps and "
        "working rows, "
        f"from a file of {file_bytes} bytes, over what a file of that size may decode to under "
        "max_decoded_bytes (192 MiB, or 2048 bytes per byte of the file; a decompression bomb?); "
        "pass max_decoded_bytes=None to decode it"
    )


def bad_max_image_pixels(value: Any) -> KimiK3Error:
    """``max_image_pixels`` is not a positive int or None."""
    return KimiK3Error(f"max_image_pixels must be a positive int or None, got {abbreviate(value)}")


def bad_return_tensors(value: Any) -> ValueError:
    """``return_tensors`` is not None, ``"np"`` or ``"pt"``."""
    return ValueError(f"return_tensors must be None, 'np' or 'pt', got {abbreviate(value)}")


def no_torch() -> ImportError:
    """``return_tensors="pt"`` without torch installed."""
    return ImportError("return_tensors='pt' needs torch, which is not installed; use return_tensors='np' or install torch")


def not_a_mapping(what: str, value: Any) -> TypeError:
    """``media_proc_cfg`` (or another dict argument) is not a mapping."""
    return TypeError(f"{what} must be a dict, got {abbreviate(type(value).__name__, quote=False)}")


def bad_field(owner: str, name: str, rule: str, value: Any) -> TypeError:
    """A class built, or loaded from a pickle (which goes through its constructor), with
    field ``name`` outside its rule (``KimiK3EncoderInputs``)."""
    return TypeError(f"{owner}.{name} must be {rule}, got {abbreviate(value)}")


def no_media_proc_cfg_in(path: str) -> ConfigError:
    """A ``preprocessor_config.json`` without a ``media_proc_cfg`` object."""
    return ConfigError(f"{abbreviate(path, quote=False)} has no 'media_proc_cfg' object")


def bad_config_file(path: str, why: str) -> ConfigError:
    """A ``preprocessor_config.json`` that is not read: ``why`` says why (not a regular
    file, too large)."""
    return ConfigError(f"{abbreviate(path, quote=False)} {why}")


def sizes_not_integers(dtype: Any) -> TypeError:
    """``count_image_tokens`` given sizes that are not integers."""
    return TypeError(f"sizes must be integers, got dtype {abbreviate(str(dtype), quote=False)}")


# --- sglang's texts (kimi_k25_image_processing.py: prepare_kimi_k25_encoder_inputs), verbatim


@_verbatim
def k25_no_navit_config() -> ValueError:
    """``prepare_kimi_k25_encoder_inputs``: no ``media_proc_cfg`` dict, or a required key absent."""
    return ValueError("Kimi-K2.5 encoder preprocessing needs NaViT media config")


@_verbatim
def k25_unsupported_media_item(item: Any) -> ValueError:
    """``prepare_kimi_k25_encoder_inputs``: a media dict that is not ``{"type": "image", "image": ...}``."""
    return ValueError(f"Unsupported Kimi-K2.5 encoder media item: {abbreviate(item)}")


@_verbatim
def k25_not_pil_or_tensor() -> TypeError:
    """``_to_pil_rgb``: an input of no accepted type, or an array / tensor that is not uint8."""
    return TypeError("Kimi-K2.5 encoder preprocessing expects PIL or uint8 tensors")


@_verbatim
def k25_wrong_grids() -> ValueError:
    """K2.5 ``materialize``: the grids of the pixels differ from those computed up front."""
    return ValueError("Kimi-K2.5 deferred CPU preprocessing produced wrong grids")


# --- video chunks (kimi_k3_rs.video) ----------------------------------------------------


@_verbatim
def invalid_timestamp_mode(mode: Any) -> ValueError:
    """``media_utils.py: timestamp_as_str``: a ``timestamp_mode`` it does not know (its text)."""
    return ValueError(f"Invalid timestamp mode: {abbreviate(mode, quote=False)}")


def empty_video_chunk() -> ImageError:
    """A ``{"type": "video_chunk"}`` item with no frames (the checkpoint fails on ``video_chunk[0]``)."""
    return ImageError("video_chunk has no frames")


def bad_video_argument(name: str, rule: str, value: Any) -> KimiK3Error:
    """An argument of the video planning (``num_frames``, ``avg_fps``, ``frames``) out of its rule."""
    return KimiK3Error(f"{name} must be {rule}, got {abbreviate(value)}")


# --- the checkpoint's texts in the HF surface (kimi_k3_vision_processing.py,
# kimi_k25_vision_processing.py, media_utils.py), verbatim ------------------------------


@_verbatim
def unsupported_media_type(kind: Any) -> ValueError:
    """``ensure_media_type``: a media dict whose ``"type"`` the processor does not take
    (K3: anything but ``image``; K2.5: anything but ``image`` / ``video_chunk``)."""
    return ValueError(f"Unsupported media type: {abbreviate(kind, quote=False)}")


@_verbatim
def unsupported_type(kind: Any) -> ValueError:
    """``get_resize_config``: a media dict of a type the processor cannot size."""
    return ValueError(f"Unsupported type: {abbreviate(kind, quote=False)}")


@_verbatim
def not_a_pil_image() -> AssertionError:
    """``image_to_np`` (``resize_image``): the image is not a ``PIL.Image.Image``."""
    return AssertionError("image must be a PIL Image")


@_verbatim
def invalid_video_format() -> AssertionError:
    """``get_video_meta``: the decoder reports no frames, no size or no frame rate."""
    return AssertionError("Invalid video format.")


# --- ours: the HF surface ----------------------------------------------------------------


def no_mecord() -> ImportError:
    """``split_video_chunks`` without ``mecord`` (the checkpoint's video decoder)."""
    return ImportError(
        "split_video_chunks decodes videos with mecord's VideoReader, as the checkpoint does, and mecord "
        "is not installed (it is not on PyPI); decode and sample the frames with "
        "kimi_k3_rs.split_video_frames instead"
    )


def own_member_as_attribute(name: str) -> TypeError:
    """``KimiK3VisionProcessor(..., **kwargs)`` (and ``from_dict`` / ``from_pretrained``):
    a keyword the checkpoint's class would keep as an attribute, named like one of the
    processor's own members (``config``, ``options``, ``model_type``, a method), which it
    cannot keep; in Python's words for an unknown keyword."""
    return TypeError(f"KimiK3VisionProcessor.__init__() got an unexpected keyword argument {abbreviate(name)}")


def not_found_and_no_hub(path: str) -> FileNotFoundError:
    """``from_pretrained``: neither a local file / folder nor resolvable (no huggingface_hub)."""
    return FileNotFoundError(
        f"{abbreviate(path)} is not a file or folder, and huggingface_hub (which resolves Hub repo ids) "
        "is not installed; pip install 'kimi_k3_rs[hf]'"
    )


# --- ours: datasets (kimi_k3_rs.arrow, kimi_k3_rs.ray) and the command line -------------


def missing_extra(module: str, package: str, extra: str) -> ImportError:
    """An optional dependency (``pyarrow``, ``ray``) that ``module`` needs is not installed."""
    return ImportError(
        f"{module} needs {package}, which is not installed; install it with pip install 'kimi_k3_rs[{extra}]'"
    )


def bad_on_error(value: Any) -> ValueError:
    """``on_error`` is not ``"raise"`` or ``"null"``."""
    return ValueError(f"on_error must be 'raise' or 'null', got {abbreviate(value)}")


def bad_column(name: str, why: str) -> ValueError:
    """A pass-through or input column that cannot be used (``why`` says what is wrong)."""
    return ValueError(f"column {abbreviate(name)}: {why}")


def not_arrow(value: Any) -> TypeError:
    """``pixel_values_from_arrow`` given something that is not an Arrow table, batch or array."""
    return TypeError(
        f"expected a pyarrow Table, RecordBatch, Array or ChunkedArray, got {abbreviate(type(value).__name__, quote=False)}"
    )


def unknown_layout(what: str) -> ValueError:
    """``pixel_values_from_arrow`` cannot tell the dtype or the patch size of a column."""
    return ValueError(f"cannot tell the {what} of the pixel_values column; pass {what.replace(' ', '_')}=")


def bad_output(path: str, why: str) -> ValueError:
    """``--output`` of the command line cannot be written (``why`` says what is wrong)."""
    return ValueError(f"--output {abbreviate(path, quote=False)}: {why}")
