"""What an input is, decided once: :func:`classify` (the one ``isinstance`` chain), and
the adapters of each kind: media dicts, torch tensors (duck-typed), EXIF, the frames of a
video chunk.

Torch is never imported: a tensor is recognised by its type's module and read through
``.numpy()``, as sglang's staging helpers (``kimi_k3_image_processing.py:
to_hwc_uint8``) read it.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image, ImageOps

from .. import errors

if TYPE_CHECKING:
    from ..config import MediaProcConfig

#: EXIF orientation values that ``ImageOps.exif_transpose`` acts on; 5..8 swap the sides.
_EXIF_ORIENTATION_TAG = 0x0112
_TRANSPOSING_ORIENTATIONS = frozenset(range(2, 9))
SIDE_SWAPPING_ORIENTATIONS = frozenset(range(5, 9))


class Kind(enum.Enum):
    """The kinds of input the package takes; ``OTHER`` is refused where it is read, with
    the error of the entry point that reads it."""

    ARRAY = "numpy array"
    TENSOR = "torch tensor"
    PIL = "PIL image"
    ENCODED = "encoded file"  # bytes-like, a data URL, or a path
    VIDEO_CHUNK = "video chunk"
    OTHER_MEDIA = "media dict of another type"  # neither an image nor a video chunk
    OTHER = "other"


@dataclass(frozen=True)
class Item:
    """One input with its kind: ``value`` is the array, tensor, PIL image, encoded data
    (bytes-like, ``str`` or ``os.PathLike``), the video chunk dict, or what was given;
    ``content_hash`` is a media dict's (None otherwise)."""

    kind: Kind
    value: Any
    content_hash: Any = None


def kind_of(value: Any) -> Kind:
    """The kind of an image value (not a media dict: a ``Mapping`` is ``OTHER``)."""
    if isinstance(value, np.ndarray):
        return Kind.ARRAY
    if isinstance(value, Image.Image):
        return Kind.PIL
    if isinstance(value, (bytes, bytearray, memoryview, str, os.PathLike)):
        return Kind.ENCODED
    if _is_torch_tensor(value):
        return Kind.TENSOR
    return Kind.OTHER


def classify(item: Any) -> Item:
    """The kind of one batch item: a ``{"type": "video_chunk", ...}`` dict is a
    ``VIDEO_CHUNK``; a ``{"type": "image", "image": ...}`` dict is its image's kind, with
    its ``content_hash``; any other mapping ``OTHER_MEDIA``; any other value
    :func:`kind_of` it. Raises nothing: each reader refuses what it does not take with
    its own error."""
    if isinstance(item, Mapping):
        if item.get("type") == "video_chunk":
            return Item(Kind.VIDEO_CHUNK, item)
        if item.get("type") != "image" or "image" not in item:
            return Item(Kind.OTHER_MEDIA, item)
        image = item["image"]
        return Item(kind_of(image), image, item.get("content_hash"))
    return Item(kind_of(item), item)


def _is_torch_tensor(data: Any) -> bool:
    """Duck-typed ``torch.Tensor`` check that never imports torch."""
    module = type(data).__module__
    return (module == "torch" or module.startswith("torch.")) and hasattr(data, "numpy") and hasattr(data, "dtype")


def tensor_layout(tensor: Any) -> tuple[int, int, int | None, bool]:
    """``(height, width, channels or None, chw)`` of a uint8 tensor, sglang's reading.

    2-D is ``HW``; 3-D with a first dimension of 1, 3 or 4 is ``CHW``, any other 3-D
    is ``HWC`` (``kimi_k3_image_processing.to_hwc_uint8``). Checks dtype and channels
    with sglang's messages.
    """
    dtype = str(tensor.dtype)
    if dtype != "torch.uint8":
        raise errors.tensor_dtype(dtype)
    shape = tuple(int(v) for v in tensor.shape)
    if len(shape) == 2:
        return shape[0], shape[1], None, False
    if len(shape) == 3:
        if shape[0] in (1, 3, 4):
            return shape[1], shape[2], shape[0], True
        if shape[2] not in (1, 2, 3, 4):
            raise errors.channel_count(shape[2])
        return shape[0], shape[1], shape[2], False
    raise errors.tensor_shape(shape)


def tensor_array(tensor: Any) -> np.ndarray:
    """A uint8 ``HxW`` / ``HxWxC`` numpy view of a torch tensor (copied off a GPU only)."""
    _, _, _, chw = tensor_layout(tensor)
    array = _host_array(tensor)
    return array.transpose(1, 2, 0) if chw else array


def _host_array(tensor: Any) -> np.ndarray:
    """The numpy view of a torch tensor, detached, copied to the host if it is on a GPU."""
    if hasattr(tensor, "detach"):
        tensor = tensor.detach()
    if getattr(getattr(tensor, "device", None), "type", "cpu") != "cpu":
        tensor = tensor.cpu()
    return np.asarray(tensor.numpy())


def exif_orientation(image: Image.Image) -> Any:
    """The EXIF Orientation value ``ImageOps.exif_transpose`` reads (1 when absent)."""
    return image.getexif().get(_EXIF_ORIENTATION_TAG, 1)


def apply_exif(image: Image.Image, exif_transpose: bool) -> Image.Image:
    """``ImageOps.exif_transpose(image)`` when asked and the orientation moves pixels."""
    if exif_transpose and exif_orientation(image) in _TRANSPOSING_ORIENTATIONS:
        return ImageOps.exif_transpose(image)
    return image


def as_list(images: Any) -> list[Any]:
    """``images`` as a list: a list or tuple of inputs, or one input."""
    if isinstance(images, (list, tuple)):
        return list(images)
    return [images]


def frame_list(frames: Any) -> Sequence[Any]:
    """The frames of a video as a sequence: a list / tuple as it is, a THWC array or
    torch tensor as its ``HWC`` frames (a tensor is copied once to the host)."""
    if _is_torch_tensor(frames):
        if str(frames.dtype) != "torch.uint8":
            raise errors.tensor_dtype(frames.dtype)
        frames = _host_array(frames)
    if isinstance(frames, np.ndarray):
        if frames.ndim != 4:
            raise errors.bad_video_argument("frames", "a THWC array", frames.shape)
        return list(frames)  # HWC views
    if isinstance(frames, (list, tuple)):
        return frames
    raise errors.bad_video_argument("frames", "a list of frames, or a THWC uint8 array or tensor", type(frames))


def chunk_frames(item: Mapping[str, Any], cfg: MediaProcConfig) -> Sequence[Any]:
    """The frames of a ``video_chunk`` item; sglang's ``Unsupported Kimi-K3 encoder media
    item`` for a config without video keys or an item without frames to read, an
    :class:`ImageError` for an empty chunk (the caller names the item)."""
    if cfg.video is None or "video_chunk" not in item:
        raise errors.unsupported_media_item(item)
    try:
        frames = frame_list(item["video_chunk"])
    except errors.KimiK3Error:
        raise errors.unsupported_media_item(item) from None
    if len(frames) == 0:
        raise errors.empty_video_chunk()
    return frames
