"""Draw docs/benchmarks.png from the JSON written by ``bench_preprocess.py --json``.

Usage (needs matplotlib, which the package itself does not)::

    python benchmarks/bench_preprocess.py --json benchmarks/results.json
    python benchmarks/plot_benchmarks.py benchmarks/results.json docs/benchmarks.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(results: str, png: str) -> int:
    data = json.loads(Path(results).read_text())
    rows = data["end_to_end"]
    labels = [f"{r['case']}\n{r['preset']}" for r in rows]
    series = [("numpy input", "np"), ("PIL input", "pil"), ("out= reused", "out"), ("2 threads", "thr2")]
    width = 0.2
    fig, ax = plt.subplots(figsize=(11, 4.5))
    for k, (name, key) in enumerate(series):
        xs = [i + (k - 1.5) * width for i in range(len(rows))]
        ax.bar(xs, [r["ref"] / r[key] for r in rows], width, label=name)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(rows)), labels, fontsize=8)
    ax.set_ylabel("speed-up over Pillow + numpy (x)")
    machine = data["machine"]
    ax.set_title(
        f"kimi_k3_rs {machine['kimi_k3_rs']} vs the checkpoint pipeline (Pillow {machine['pillow']}, numpy {machine['numpy']}),"
        f" {machine['cpu']}, {machine['simd_path']}; every output bit-exact",
        fontsize=9,
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:3]))
