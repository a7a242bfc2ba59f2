"""Input adapters: media dicts, torch tensors (duck-typed), numpy array checks, EXIF.

Torch is never imported: a tensor is recognised by its type's module and read through
``.numpy()``, as sglang's staging helpers (``kimi_k3_image_processing.py:
to_hwc_uint8``) read it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Union

import numpy as np
import numpy.typing as npt
from PIL import Image, ImageOps

from . import errors

#: EXIF orientation values that ``ImageOps.exif_transpose`` acts on; 5..8 swap the sides.
_EXIF_ORIENTATION_TAG = 0x0112
_TRANSPOSING_ORIENTATIONS = frozenset(range(2, 9))
_SIDE_SWAPPING_ORIENTATIONS = frozenset(range(5, 9))

ImageInput = Union[Image.Image, npt.NDArray[np.uint8], bytes, str, "os.PathLike[str]", Mapping[str, Any]]


def _split_media(item: Any) -> tuple[Any, Any]:
    """``(image, content_hash)`` of a ``{"type": "image", "image": ...}`` dict, or ``(item, None)``."""
    if isinstance(item, Mapping):
        if item.get("type") != "image" or "image" not in item:
            raise errors.unsupported_media_item(item)
        return item["image"], item.get("content_hash")
    return item, None


def _unwrap_media(item: Any) -> Any:
    """Return the image of a ``{"type": "image", "image": ...}`` media dict, or ``item``."""
    return _split_media(item)[0]


def _is_torch_tensor(data: Any) -> bool:
    """Duck-typed ``torch.Tensor`` check that never imports torch."""
    module = type(data).__module__
    return (module == "torch" or module.startswith("torch.")) and hasattr(data, "numpy") and hasattr(data, "dtype")


def _tensor_layout(tensor: Any) -> tuple[int, int, int | None, bool]:
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


def _tensor_array(tensor: Any) -> np.ndarray:
    """A uint8 ``HxW`` / ``HxWxC`` numpy view of a torch tensor (copied off a GPU only)."""
    _, _, _, chw = _tensor_layout(tensor)
    if hasattr(tensor, "detach"):
        tensor = tensor.detach()
    device = getattr(tensor, "device", None)
    if device is not None and getattr(device, "type", "cpu") != "cpu":
        tensor = tensor.cpu()
    array = np.asarray(tensor.numpy())
    return array.transpose(1, 2, 0) if chw else array


def _exif_orientation(image: Image.Image) -> Any:
    """The EXIF Orientation value ``ImageOps.exif_transpose`` reads (1 when absent)."""
    return image.getexif().get(_EXIF_ORIENTATION_TAG, 1)


def _apply_exif(image: Image.Image, exif_transpose: bool) -> Image.Image:
    """``ImageOps.exif_transpose(image)`` when asked and the orientation moves pixels."""
    if exif_transpose and _exif_orientation(image) in _TRANSPOSING_ORIENTATIONS:
        return ImageOps.exif_transpose(image)
    return image


def _as_list(images: Any) -> list[Any]:
    if isinstance(images, (list, tuple)):
        return list(images)
    return [images]
