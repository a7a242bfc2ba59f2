"""kimi_k3_rs inside a vLLM-style processor wrapper (``KimiK25Processor`` / ``KimiK3Processor``).

Run: ``python examples/vllm_processor.py`` (needs ``kimi_k3_rs``; with transformers
installed the wrapper is a real ``transformers.processing_utils.ProcessorMixin``).

vLLM wraps the checkpoint's image processor in a small ``ProcessorMixin``
(``vllm/transformers_utils/processors/kimi_k25.py: KimiK25Processor`` and
``kimi_k3.py: KimiK3Processor``): the wrapper takes ``image_processor`` (a
``BaseImageProcessor``) and a tokenizer, calls ``image_processor.preprocess(medias)``
and expands each media placeholder token to ``media_tokens_calculator(media)`` copies.
``kimi_k3_rs.KimiK3VisionProcessor`` is such a ``BaseImageProcessor`` (when transformers
imports), so it goes in as it is::

    image_processor = kimi_k3_rs.KimiK3VisionProcessor.from_pretrained("moonshotai/Kimi-K3")
    processor = KimiK3Processor(image_processor=image_processor, tokenizer=tokenizer)

This script builds a wrapper of that shape (written here, since vLLM's imports torch and
vLLM), with a stand-in tokenizer (one id per whitespace-separated word), runs a
three-image request through it and checks: pixels and grids equal to
``kimi_k3_rs.preprocess``; the placeholder expanded to ``count_image_tokens`` tokens;
the K3 prompt text from ``make_image_prompt``. It exits with status 1 if a check fails.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
from PIL import Image

import kimi_k3_rs

MEDIA_PAD = "<|media_pad|>"

try:  # a real ProcessorMixin when transformers imports, else a stand-in base
    from transformers.image_processing_utils import BaseImageProcessor
    from transformers.processing_utils import ProcessorMixin
except Exception:  # noqa: BLE001 - absent or broken
    ProcessorMixin = object
    BaseImageProcessor = None


class WordTokenizer:
    """Stand-in tokenizer: one id per whitespace-separated word, ``<|media_pad|>`` = 1."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {MEDIA_PAD: 1}

    def encode(self, text: str) -> list[int]:
        spaced = text.replace(MEDIA_PAD, f" {MEDIA_PAD} ")
        return [self.vocab.setdefault(word, len(self.vocab) + 1) for word in spaced.split()]


class KimiProcessorLike(ProcessorMixin):  # type: ignore[misc, valid-type]
    """The shape of vLLM's ``KimiK25Processor`` / ``KimiK3Processor``: media through
    ``image_processor.preprocess``, each placeholder id expanded to the media's token count."""

    attributes = ["image_processor"]

    def __init__(self, image_processor: Any, tokenizer: WordTokenizer, media_token_id: int) -> None:
        # vLLM's wrappers set their parts directly (no ProcessorMixin.__init__ type checks)
        self.image_processor = image_processor
        self.tokenizer = tokenizer
        self.media_token_id = media_token_id

    def __call__(self, text: str, images: list[Any], return_tensors: str | None = "np") -> dict[str, Any]:
        medias = [{"type": "image", "image": image} for image in images]
        mm_inputs = self.image_processor.preprocess(medias, return_tensors=return_tensors)
        counts = [self.image_processor.media_tokens_calculator(media) for media in medias]
        input_ids: list[int] = []
        for token in self.tokenizer.encode(text):
            input_ids.extend([token] * counts.pop(0) if token == self.media_token_id else [token])
        return {"input_ids": np.array([input_ids]), **mm_inputs}


def main() -> int:
    rng = np.random.default_rng(0)
    images = [
        Image.fromarray(rng.integers(0, 256, (480, 640, 3), dtype=np.uint8)),
        Image.fromarray(rng.integers(0, 256, (1200, 900, 4), dtype=np.uint8)),  # alpha: K3's chessboard
        rng.integers(0, 256, (300, 2000, 3), dtype=np.uint8),
    ]
    cfg = kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG
    image_processor = kimi_k3_rs.KimiK3VisionProcessor(cfg)
    is_base = BaseImageProcessor is not None and isinstance(image_processor, BaseImageProcessor)
    print(f"image_processor: {type(image_processor).__module__}.{type(image_processor).__qualname__}, "
          f"a BaseImageProcessor: {is_base}")
    processor = KimiProcessorLike(image_processor=image_processor, tokenizer=WordTokenizer(), media_token_id=1)
    sizes = [(im.size if isinstance(im, Image.Image) else (im.shape[1], im.shape[0])) for im in images]
    text = "describe " + " and ".join(image_processor.make_image_prompt(w, h) for w, h in sizes)
    out = processor(text, images)

    failures = []
    if BaseImageProcessor is not None and not is_base:
        failures.append("not a BaseImageProcessor although transformers imports")
    want = kimi_k3_rs.preprocess(images, cfg)
    if not (np.array_equal(out["pixel_values"].view(np.uint32), want["pixel_values"].view(np.uint32))
            and np.array_equal(out["grid_thws"], want["grid_thws"])):
        failures.append("pixel_values / grid_thws differ from kimi_k3_rs.preprocess")
    tokens = kimi_k3_rs.count_image_tokens(sizes, cfg).tolist()
    expanded = int((out["input_ids"] == 1).sum())
    if expanded != sum(tokens):
        failures.append(f"{expanded} media tokens, expected {sum(tokens)}")
    if "<|media_begin|>image 640x480<|media_content|><|media_pad|><|media_end|>" not in text:
        failures.append("K3 prompt text")
    for (w, h), n in zip(sizes, tokens):
        print(f"image {w}x{h}: {n} tokens")
    print(f"input_ids: {out['input_ids'].shape[1]} ids, {expanded} media tokens; "
          f"pixel_values {tuple(out['pixel_values'].shape)}; output type {type(out['pixel_values']).__name__}")
    for failure in failures:
        print("FAILED:", failure)
    print("example: OK" if not failures else "example: FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
