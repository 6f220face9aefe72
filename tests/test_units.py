"""A size of 2^30 bytes says GiB, in the docs, the README and the package's docstrings and messages.

GB stays where the figure is 10^9 bytes and the reader needs it so: beside a GB/s rate, a download
size as PyPI shows it, a card's size as its vendor sells it, an argument that diffusers reads in
GB. Each such place is listed below with its reason; any other ``<number> GB`` is a mistake (the
figures of memory are measured in bytes and shown in GiB: KiB, MiB and GiB are powers of 1024).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLACES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "ddo_hooks").rglob("*.py"))]

GB = re.compile(r"(?:\d[\d.,]*\s?|per )GB\b(?!/s)")
"""A figure in GB (a rate, ``GB/s``, is 10^9 bytes a second wherever it is written)."""

DECIMAL = {
    "(2.74 GB in 29 files": "a download size, as PyPI shows it",
    "build of 2.74 GB in 29 files": "a download size, as PyPI shows it",
    "CPU build is at hand (0.2 GB)": "a download size",
    "(a 24 GB card has room": "a card's size as its vendor sells it",
    "as 5 GB safetensors shards": "diffusers' max_shard_size='5GB', which it reads as 5 * 10^9 bytes",
    "the transformer's 2.62 GB (2.44 GiB) cross in 48 ms": "beside the 54 GB/s rate it is divided by",
    "NVIDIA H100 80GB HBM3": "the card's name, as nvidia-smi gives it",
    "(4.28 GB of bf16 weights": "the Flux-shaped pipeline's size as the benchmarks page gives it, beside GB/s links",
    "216 block weights (2.59 GB)": "bytes over the link, beside the GB/s they copy at",
    "so the bound is about 1.2 GB": "12 KB (10^3) a record times 100,000 records",
    "is about 1.2 GB of reports": "12 KB (10^3) a record times 100,000 records",
    "`1.5GiB` or `2GB`": "the unit itself, on the policy page",
    'parse_size("2GB")': "the unit itself, in the size parser's examples",
    "'16 MiB', '2GB' or '1.5GiB'": "the unit itself, in the size parser's message",
    '``"16 MiB"``, ``"2GB"``': "the unit itself, in the size parser's docstring",
}
"""Where a figure in GB is 10^9 bytes on purpose: a piece of the (whitespace-flattened) text, and why."""


def test_a_size_in_gb_is_one_of_the_places_where_it_is_ten_to_the_ninth_bytes():
    found = []
    for path in PLACES:
        text = " ".join(path.read_text(encoding="utf-8").split())
        allowed = [m.span() for piece in DECIMAL for m in re.finditer(re.escape(piece), text)]
        for match in GB.finditer(text):
            if not any(start <= match.start() < end for start, end in allowed):
                found.append(f"{path.relative_to(ROOT)}: ...{text[max(match.start() - 50, 0) : match.end() + 10]}...")
    assert not found, "a size of 2^30 bytes says GiB (or list a 10^9 one in DECIMAL, with why):\n" + "\n".join(found)


def test_each_place_of_a_decimal_figure_is_still_there():
    text = " ".join(" ".join(path.read_text(encoding="utf-8").split()) for path in PLACES)
    gone = [piece for piece in DECIMAL if piece not in text]
    assert not gone, f"no longer in the docs or the package (take them out of DECIMAL): {gone}"
