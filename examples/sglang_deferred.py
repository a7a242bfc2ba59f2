"""sglang's deferred (owner-side) Kimi-K3 image preprocessing with kimi_k3_rs.

Run: ``python examples/sglang_deferred.py`` (needs only ``kimi_k3_rs``).

sglang's encoder disaggregation (``kimi_k3_image_processing.prepare_kimi_k3_encoder_inputs``)
splits preprocessing in two:

1. every rank computes the geometry of every image of a request, from the sizes alone
   (file headers, array shapes): ``grid_thws`` for the vision tower and ``num_tokens``
   to expand each ``<|media_pad|>`` placeholder, so all ranks agree on the prompt;
2. only the rank that owns an image builds its ``pixel_values``
   (``materialize(indices)``); the features are then gathered in the original order.

Here three "ranks" run as threads (the pixel work releases the GIL), each owning the
images ``i % 3 == rank``. The gathered features are checked against
``processor.preprocess`` on the whole batch, bit for bit. Exits with status 1 if a
check fails.
"""

from __future__ import annotations

import io
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path

import numpy as np
from PIL import Image

import kimi_k3_rs

WORLD_SIZE = 3


def request_images(folder: Path) -> list:
    """One request's images, in every input kind a server meets."""
    rng = np.random.default_rng(0)
    png = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (500, 800, 4), dtype=np.uint8)).save(png, "PNG")
    path = folder / "upload.jpg"
    Image.fromarray(rng.integers(0, 256, (7300, 200, 3), dtype=np.uint8)).save(path, quality=90)
    return [
        str(resources.files("kimi_k3_rs") / "data" / "rocket.jpg"),  # a file path
        {"type": "image", "image": png.getvalue(), "content_hash": "a1b2"},  # encoded bytes
        rng.integers(0, 256, (300, 400, 3), dtype=np.uint8),  # a decoded HWC uint8 array
        Image.fromarray(rng.integers(0, 256, (64, 64), dtype=np.uint8)),  # a PIL image (L)
        path,  # a tall file over the 7168 px side cap: resized
        {"type": "image", "image": rng.integers(0, 256, (28, 28, 4), dtype=np.uint8)},
    ]


def main() -> int:
    processor = kimi_k3_rs.KimiK3VisionProcessor(kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)
    merge = processor.media_proc_cfg["merge_kernel_size"]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        images = request_images(Path(tmp))

        # 1. every rank: geometry only (no pixel is decoded); all ranks agree
        per_rank = [kimi_k3_rs.prepare_kimi_k3_encoder_inputs(images, processor) for _ in range(WORLD_SIZE)]
        enc = per_rank[0]
        for other in per_rank[1:]:
            if not (np.array_equal(other.grid_thws, enc.grid_thws) and other.num_tokens == enc.num_tokens):
                failures.append("ranks disagree on the geometry")
        for i, ((w, h), grid, tokens) in enumerate(zip(enc.original_image_sizes, enc.grid_thws.tolist(),
                                                        enc.num_tokens)):
            # the K3 prompt: "<|media_begin|>image {W}x{H}<|media_content|>" + tokens x <|media_pad|>
            print(f"image {i}: {w}x{h}, grid {grid}, {tokens} x <|media_pad|>, "
                  f"content_hash {enc.content_hashes[i]!r}")
        if enc.num_tokens != kimi_k3_rs.count_image_tokens(enc.original_image_sizes, processor.media_proc_cfg).tolist():
            failures.append("num_tokens != count_image_tokens")

        # 2. owners: rank r materializes the images i with i % WORLD_SIZE == r
        owned = {rank: [i for i in range(len(images)) if i % WORLD_SIZE == rank] for rank in range(WORLD_SIZE)}
        with ThreadPoolExecutor(WORLD_SIZE) as pool:
            results = dict(zip(owned, pool.map(lambda r: per_rank[r].materialize(owned[r]), owned)))
        for rank, indices in owned.items():
            rows = sum(len(f) for f in results[rank])
            print(f"rank {rank}: materialized images {indices}, {rows} patches")

        # 3. gather in the original order; check against the whole batch at once
        features = [None] * len(images)
        for rank, indices in owned.items():
            for i, feature in zip(indices, results[rank]):
                features[i] = feature
        batch = processor.preprocess(images, return_tensors="np")
        expected = np.split(batch["pixel_values"], np.cumsum(batch["grid_thws"].prod(axis=1))[:-1])
        if not np.array_equal(batch["grid_thws"], enc.grid_thws):
            failures.append("grid_thws differ")
        for i, (got, want) in enumerate(zip(features, expected)):
            t, h, w = enc.grid_thws[i].tolist()
            if got.shape != (t * h * w, 3, 14, 14) or h * w // merge**2 != enc.num_tokens[i]:
                failures.append(f"image {i}: shape {got.shape} does not follow grid {[t, h, w]}")
            elif not np.array_equal(got.view(np.uint32), want.view(np.uint32)):
                failures.append(f"image {i}: features differ from preprocess")
        print(f"gathered {sum(len(f) for f in features)} patches for {len(images)} images; "
              f"identical to preprocess(): {not failures}")

    for failure in failures:
        print("FAILED:", failure, file=sys.stderr)
    print("sglang_deferred example: " + ("FAILED" if failures else "OK"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
