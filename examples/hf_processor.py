"""Replace the Kimi-K3 checkpoint's image processor with kimi_k3_rs in an HF-style pipeline.

Run: ``python examples/hf_processor.py`` (needs only ``kimi_k3_rs``; transformers is optional).

A serving stack that loads the checkpoint with ``trust_remote_code=True`` gets
``kimi_k3_vision_processing.KimiK3VisionProcessor`` from ``preprocessor_config.json``.
``kimi_k3_rs.KimiK3VisionProcessor`` reads the same file and answers the same call,
``preprocess(medias, return_tensors=...)``, with the same ``pixel_values`` bits and
``grid_thws``, and has the checkpoint's other members (``media_tokens_calculator``,
``make_image_prompt``, ``get_resize_config``, ``resize_image``, ...). With transformers
installed it is a ``BaseImageProcessor``, so the checkpoint's wrapper takes it through its
constructor, ``KimiK3Processor(image_processor=ours, tokenizer=tokenizer)``; or swap it
into a loaded HF processor::

    processor = AutoProcessor.from_pretrained(ckpt, trust_remote_code=True)
    processor.image_processor = kimi_k3_rs.KimiK3VisionProcessor.from_pretrained(ckpt)

This script builds a checkpoint-like folder holding the published Kimi-K3
``preprocessor_config.json``, loads it, preprocesses a few media dicts (a JPEG file,
encoded PNG bytes, a PIL image, a numpy array), prints shapes and token counts, checks
them against ``navit_resize_config``, and round-trips ``save_pretrained``. It exits
with status 1 if a check fails.
"""

from __future__ import annotations

import io
import json
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path

import numpy as np
from PIL import Image

import kimi_k3_rs

CHECKPOINT_PRE_CONFIG = {
    # what the Kimi-K3 checkpoint's preprocessor_config.json ships; only media_proc_cfg is read
    # (KimiK3VisionProcessor.__init__ in kimi_k3_vision_processing.py takes it)
    "auto_map": {"AutoImageProcessor": "kimi_k3_vision_processing.KimiK3VisionProcessor",
                 "AutoProcessor": "kimi_k3_processor.KimiK3Processor"},
    "media_proc_cfg": kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG,
}


def make_medias() -> list[dict]:
    """Four images, one per input kind, wrapped as the chat template's media dicts."""
    rocket = Path(str(resources.files("kimi_k3_rs") / "data" / "rocket.jpg"))  # 640x427 JPEG, public domain
    rng = np.random.default_rng(0)
    rgba = Image.fromarray(rng.integers(0, 256, (900, 1500, 4), dtype=np.uint8))  # alpha: chessboard (K3)
    buf = io.BytesIO()
    rgba.save(buf, "PNG")
    tall = rng.integers(0, 256, (7600, 300, 3), dtype=np.uint8)  # over the 7168 px side cap: resized
    with Image.open(rocket) as im:
        grey = im.convert("L")
    return [
        {"type": "image", "image": str(rocket)},
        {"type": "image", "image": buf.getvalue(), "content_hash": "rgba-png"},
        {"type": "image", "image": grey},
        {"type": "image", "image": tall},
    ]


def image_size(media: dict) -> tuple[int, int]:
    image = media["image"]
    if isinstance(image, np.ndarray):
        return image.shape[1], image.shape[0]
    if isinstance(image, Image.Image):
        return image.size
    with Image.open(io.BytesIO(image) if isinstance(image, bytes) else image) as im:
        return im.size


def main() -> int:
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / "Kimi-K3"
        ckpt.mkdir()
        (ckpt / "preprocessor_config.json").write_text(json.dumps(CHECKPOINT_PRE_CONFIG, indent=2), "utf-8")

        processor = kimi_k3_rs.KimiK3VisionProcessor.from_pretrained(ckpt)
        cfg = processor.media_proc_cfg
        medias = make_medias()

        processor.preprocess([np.zeros((28, 28, 3), np.uint8)])  # warm-up (imports transformers if present)
        start = time.perf_counter()
        batch = processor.preprocess(medias, return_tensors="np")
        elapsed = (time.perf_counter() - start) * 1000
        pixel_values, grid_thws = batch["pixel_values"], batch["grid_thws"]
        print(f"output: {type(batch).__module__}.{type(batch).__name__} with keys {sorted(batch.keys())}")
        print(f"pixel_values {pixel_values.dtype} {list(pixel_values.shape)}, "
              f"grid_thws {grid_thws.dtype} {list(grid_thws.shape)}, {elapsed:.1f} ms")

        m = cfg["merge_kernel_size"]
        sizes = [image_size(media) for media in medias]
        counts = kimi_k3_rs.count_image_tokens(sizes, cfg)
        for i, ((w, h), (t, gh, gw)) in enumerate(zip(sizes, grid_thws.tolist())):
            rc = kimi_k3_rs.navit_resize_config(w, h, cfg["patch_size"], m, cfg["in_patch_limit"],
                                                cfg["patch_limit_on_one_side"], cfg["fixed_output_tokens"])
            tokens = gh * gw // (m * m)
            print(f"image {i}: {w}x{h} -> resized {rc['new_width']}x{rc['new_height']}, "
                  f"grid {t}x{gh}x{gw}, {tokens} tokens")
            want_grid = [1, (rc["new_height"] + rc["pad_height"]) // cfg["patch_size"],
                         (rc["new_width"] + rc["pad_width"]) // cfg["patch_size"]]
            if tokens != processor.media_tokens_calculator(medias[i]):
                failures.append(f"image {i}: media_tokens_calculator disagrees with the grid")
            if not processor.make_image_prompt(w, h).startswith(f"<|media_begin|>image {w}x{h}<|media_content|>"):
                failures.append(f"image {i}: make_image_prompt")
            if [t, gh, gw] != want_grid or tokens != rc["num_tokens"] or tokens != counts[i]:
                failures.append(f"image {i}: grid {[t, gh, gw]} / {tokens} tokens, "
                                f"navit_resize_config says {want_grid} / {rc['num_tokens']}")
        if pixel_values.shape != (int(grid_thws.prod(axis=1).sum()), 3, 14, 14):
            failures.append(f"pixel_values rows {pixel_values.shape[0]} != sum of grid products")
        if not (pixel_values.min() >= -1.0 and pixel_values.max() <= 1.0):
            failures.append("pixel_values outside [-1, 1] (published mean = std = 0.5)")

        # save_pretrained / from_pretrained round trip: same config, same bits
        saved = Path(tmp) / "saved"
        written = processor.save_pretrained(saved)
        again = kimi_k3_rs.KimiK3VisionProcessor.from_pretrained(saved).preprocess(medias, return_tensors="np")
        print(f"save_pretrained wrote {[Path(p).name for p in written]}; reloaded output identical: "
              f"{np.array_equal(again['pixel_values'].view(np.uint32), pixel_values.view(np.uint32))}")
        if not np.array_equal(again["pixel_values"].view(np.uint32), pixel_values.view(np.uint32)):
            failures.append("save_pretrained / from_pretrained changed the output")

    for failure in failures:
        print("FAILED:", failure, file=sys.stderr)
    print("hf_processor example: " + ("FAILED" if failures else "OK"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
