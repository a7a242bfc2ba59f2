"""Numpy arrays and torch tensors as the core reads them, and the frames of a video.

Torch is never imported: a tensor is recognised by its type's module and read through
``.numpy()``, as sglang's staging helpers (``kimi_k3_image_processing.py:
to_hwc_uint8``) read it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import errors


def is_torch_tensor(data: Any) -> bool:
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


def _read_in_place(array: np.ndarray) -> bool:
    """Whether the core reads ``array`` as it is: C-contiguous, or the RGB view
    ``a[..., :3]`` of a C-contiguous uint8 ``HxWx4`` array ``a`` (RGBX / RGBA pixels,
    whose colour bytes the core reads at a pixel stride of 4: ``borrow.rs:
    rgb_of_four_byte_pixels``)."""
    if array.flags.c_contiguous:
        return True
    base = array.base
    return (
        isinstance(base, np.ndarray)
        and array.ndim == 3
        and base.shape == (*array.shape[:2], 4)
        and array.shape[2] == 3
        and base.dtype == np.uint8
        and base.flags.c_contiguous
        and array.strides == (4 * array.shape[1], 4, 1)
        and array.ctypes.data == base.ctypes.data
    )


def core_array(array: np.ndarray) -> np.ndarray:
    """An array as the core takes it: read in place where it can be
    (:func:`_read_in_place`), else copied once (``np.ascontiguousarray``); the core
    checks dtype, shape and channels."""
    return array if _read_in_place(array) else np.ascontiguousarray(array)


def frame_list(frames: Any) -> Sequence[Any]:
    """The frames of a video as a sequence: a list / tuple as it is, a THWC array or
    torch tensor as its ``HWC`` frames (a tensor is copied once to the host)."""
    if is_torch_tensor(frames):
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
