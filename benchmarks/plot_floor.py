"""Draw which memory each arm of ``bench_pinned_floor.py`` held at rest: stacked bars (needs matplotlib).

One bar per arm, in both offload modes of the Flux-shaped pipeline: the RSS split into anonymous,
file-backed and shared memory (where pinned memory shows), read at rest after the last plain call.

Run: ``python benchmarks/plot_floor.py --out docs/img/pinned-floor.png`` (it reads the checked-in
``benchmarks/results/bench_pinned_floor-flux.json`` and ``-flux-first.json``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
GIB = 2**30
BARS = [
    ("flux", "flux/lcmu=false/nothing", "nothing"),
    ("flux", "flux/lcmu=false/delete", "encoders deleted"),
    ("flux", "flux/lcmu=false/lowest-peak", "lowest-peak,\nno repack"),
    ("flux", "flux/lcmu=false/lowest-peak+repack", "lowest-peak\n(repacked)"),
    ("flux-first", "flux/lcmu=true/nothing", "nothing"),
    ("flux-first", "flux/lcmu=true/delete", "encoders deleted"),
    ("flux-first", "flux/lcmu=true/lowest-peak", "lowest-peak"),
]
"""(results file, arm, label) of each bar, left to right."""
PARTS = [("anon", "anonymous", "#888888"), ("file", "file-backed (weights' files)", "#56b4e9"),
         ("shmem", "shared (pinned)", "#d55e00")]  # fmt: skip


def bars(results: Path = RESULTS) -> list[tuple[str, dict[str, float]]]:
    """Each bar's label and its parts in GiB, from the checked-in results."""
    docs = {
        name: json.loads((results / f"bench_pinned_floor-{name}.json").read_text()) for name in ("flux", "flux-first")
    }
    found = []
    for name, arm, label in BARS:
        rest = docs[name]["arms"][arm]["calls"][-1]["rest"]
        found.append((label, {key: rest[key] / GIB for key, _, _ in PARTS}))
    return found


def draw(out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = bars()
    fig, ax = plt.subplots(figsize=(8.6, 3.6))
    xs = [x if x < 4 else x + 0.6 for x in range(len(data))]
    bottom = [0.0] * len(data)
    for key, name, colour in PARTS:
        values = [parts[key] for _, parts in data]
        ax.bar(xs, values, bottom=bottom, color=colour, label=name, width=0.7)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    for x, total in zip(xs, bottom, strict=True):
        ax.text(x, total + 0.1, f"{total:.2f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(xs, [label for label, _ in data], fontsize=8)
    ax.set_ylabel("GiB at rest")
    ax.set_ylim(0, max(bottom) * 1.18)
    ax.text(1.5, max(bottom) * 1.1, "low_cpu_mem_usage=False", ha="center", fontsize=9)
    ax.text(5.6, max(bottom) * 1.1, "low_cpu_mem_usage=True", ha="center", fontsize=9)
    ax.legend(loc="upper right", fontsize=8, frameon=False, bbox_to_anchor=(1.0, 0.93))
    ax.set_title("Which memory a Flux-shaped pipeline (3.99 GiB) held after plain calls, H200", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=100, format="png")
    plt.close(fig)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    print(f"wrote {draw(parser.parse_args().out)}")


if __name__ == "__main__":
    main()
