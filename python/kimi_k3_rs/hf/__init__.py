"""The Hugging Face processor: ``KimiK3VisionProcessor``, a drop-in for the checkpoint's.

Reproduces the whole interface of ``kimi_k3_vision_processing.py: KimiK3VisionProcessor``
and of K2.5's ``kimi_k25_vision_processing.py: KimiK25VisionProcessor`` (their helpers in
``media_utils.py``): ``media_proc_cfg``, ``preprocess``, ``media_tokens_calculator``,
``get_resize_config``, ``resize_image``, ``make_image_prompt``, ``make_chunk_prompt``,
``split_video_chunks``, ``_transparent_bg_config`` / ``_transparent_bg_fill_stage``,
``to_dict`` / ``to_json_string`` / ``from_dict`` / ``from_pretrained`` /
``save_pretrained`` and ``__repr__``.

Two classes share that code. The one of :mod:`kimi_k3_rs.hf.processor` works without
transformers. When transformers can be imported, ``kimi_k3_rs.KimiK3VisionProcessor`` is a
subclass of it and of ``transformers.image_processing_utils.BaseImageProcessor``, built on
first access (:func:`kimi_k3_rs.hf.public.public_class`), so that ``import kimi_k3_rs``
never imports transformers and a ``ProcessorMixin`` wrapper (the checkpoint's
``KimiK3Processor``, vLLM's) accepts it. ``import kimi_k3_rs`` imports none of this
package; its first use does.

One class serves both checkpoints; which one it acts as (its *flavour*) follows the
config: K2.5 when ``media_proc_cfg`` has every key K2.5's chunk sizing reads and no
background key, else K3 (:func:`kimi_k3_rs.hf.video.checkpoint_flavour`). The flavour decides what
the checkpoint decides per class: whether ``video_chunk`` media are taken, and the names in
``repr`` and ``to_dict``.
"""

from __future__ import annotations

from .hub import PREPROCESSOR_CONFIG_NAME
from .processor import KimiK3VisionProcessor

__all__ = ["PREPROCESSOR_CONFIG_NAME", "KimiK3VisionProcessor"]
