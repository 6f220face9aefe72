"""The slab plan of a repack: every copy placed once, aligned, inside a power-of-two slab, and few bytes beyond them."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support.file_modules import load_file

from ddo_hooks.release.slabs import (
    ALIGNMENT,
    LARGE_ALIGNMENT,
    LARGE_COPY_BYTES,
    MIN_SLAB_BYTES,
    plan_slabs,
    rounded_size,
)

ROOT = Path(__file__).resolve().parent.parent
MiB = 1 << 20

sizes = st.lists(st.one_of(st.integers(0, 4096), st.integers(1, 4 * MiB), st.integers(4 * MiB, 96 * MiB)), max_size=120)


@settings(max_examples=150, deadline=None)
@given(sizes)
def test_every_copy_is_placed_once_aligned_and_inside_a_power_of_two_slab(copy_sizes: list[int]):
    plan = plan_slabs(copy_sizes)
    placed = plan.placement()
    assert sorted(placed) == [i for i, size in enumerate(copy_sizes) if size > 0]
    for n, slab in enumerate(plan.slabs):
        assert slab.size >= MIN_SLAB_BYTES
        assert slab.size & (slab.size - 1) == 0
        spans = sorted((offset, offset + copy_sizes[i]) for i, offset in slab.placements)
        assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))  # no overlap
        assert all(end <= slab.size for _, end in spans)
        for i, offset in slab.placements:
            assert placed[i] == (n, offset)
            assert offset % (LARGE_ALIGNMENT if copy_sizes[i] >= LARGE_COPY_BYTES else ALIGNMENT) == 0
    assert plan.capacity == sum(slab.size for slab in plan.slabs) >= plan.needed == sum(copy_sizes)
    assert plan.rounded == sum(rounded_size(size) for size in copy_sizes if size > 0)


def test_bad_sizes_and_caps_are_refused():
    with pytest.raises(ValueError, match="negative size"):
        plan_slabs([1, -1])
    with pytest.raises(ValueError, match="max_slab must be a power of two, got 3000"):
        plan_slabs([1], max_slab=3000)


def workload_copy_sizes() -> dict[str, list[int]]:
    """The bf16 tensor sizes of the benchmark's Flux-shaped transformer and T5 (built on the meta device)."""
    from diffusers import FluxTransformer2DModel
    from transformers import T5Config, T5EncoderModel

    workload = load_file(ROOT / "benchmarks" / "pinned_workload.py", "pinned_workload_sizes")
    cfg = workload.SIZES["full"]
    with torch.device("meta"):
        models = {
            "transformer": FluxTransformer2DModel(
                patch_size=1, in_channels=64, guidance_embeds=True, **cfg["transformer"], **cfg["joint"]
            ),
            "t5": T5EncoderModel(T5Config(**cfg["t5"], feed_forward_proj="gated-gelu", is_encoder_decoder=False)),
        }
    return {name: [t.numel() * 2 for t in (*m.parameters(), *m.buffers())] for name, m in models.items()}


def test_the_flux_shaped_workloads_copies_fit_slabs_within_2_percent_of_their_bytes():
    # FACTS: one block each, the transformer's 2.44 GiB of copies own 1.566x and T5's 1.16 GiB 1.596x.
    for name, copy_sizes in workload_copy_sizes().items():
        plan = plan_slabs(copy_sizes)
        assert plan.rounded / plan.needed > 1.5, name
        assert plan.capacity / plan.needed <= 1.02, name
        assert len(plan.slabs) <= 8, name
