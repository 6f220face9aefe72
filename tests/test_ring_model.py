"""The model of the ring's schedule (``benchmarks/ring_model.py``): the regimes it must tell apart."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "ring_model.py"
_SPEC = importlib.util.spec_from_file_location("ring_model", _PATH)
model = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(model)

BLOCKS = 24


def step(mb: float, compute_ms: float, **kw):
    options = {"link_gbps": 50.0, "issue_s": 1e-4, "lookahead": 2, "slots": 3, **kw}
    return model.simulate([mb * 1e6] * BLOCKS, [compute_ms / 1e3] * BLOCKS, **options)


def test_copies_under_compute_cost_the_larger_of_the_two():
    compute_bound, busy = step(50, 2.0)  # 1 ms of copy under 2 ms of compute, each block
    assert compute_bound == pytest.approx(BLOCKS * 2e-3, rel=1e-6)
    assert busy == pytest.approx(0.5, rel=1e-3)
    copy_bound, busy = step(150, 2.0)  # 3 ms of copy over 2 ms of compute
    assert copy_bound == pytest.approx(BLOCKS * 3e-3, rel=1e-6)
    assert busy == pytest.approx(1.0)


def test_a_cpu_that_issues_slower_than_the_gpu_computes_sets_the_step():
    cpu_bound, _ = step(50, 2.0, issue_s=4e-3)
    assert cpu_bound == pytest.approx(BLOCKS * 4e-3, rel=1e-6)


def test_a_ring_of_one_block_serialises_the_copies_and_the_compute():
    serial, _ = step(50, 2.0, lookahead=1, slots=1)
    assert serial == pytest.approx(BLOCKS * 3e-3, rel=1e-6)  # nothing can be copied while a block computes


def test_the_model_says_the_measured_serial_runtimes_are_copies_plus_compute():
    # The issue's fit of DDO's linear runtime: 37 ms of copies + 30 ms of compute a step, one after the other.
    serial, _ = step(1.92e3 / BLOCKS, 30 / BLOCKS, link_gbps=52, lookahead=1, slots=1)
    assert serial * 1e3 == pytest.approx(66.9, abs=0.5)
    overlapped, _ = step(1.92e3 / BLOCKS, 30 / BLOCKS, link_gbps=52)
    assert overlapped * 1e3 == pytest.approx(36.9, abs=0.5)


def test_fed_the_h100_runs_the_model_comes_within_a_tenth_of_the_measured_step():
    results = _PATH.parent / "results"
    inputs = model.measured_inputs(results / "probe_ring_timeline-h100.json", results / "probe_overlap-h100.json")
    measured_ms, measured_busy = inputs.pop("measured")
    found = {lookahead: model.simulate(**inputs, lookahead=lookahead, slots=lookahead + 1) for lookahead in (2, 3, 4)}
    step, busy = found[2]
    assert (round(step * 1e3, 1), round(busy * 100)) == (47.9, 72)  # the ring page's figures
    assert abs(step * 1e3 - measured_ms) / measured_ms < 0.1
    assert abs(busy - measured_busy) < 0.05
    assert {round(s * 1e3, 1) for s, _ in found.values()} == {47.9}  # the CPU's issue sets it, at any lookahead
    cheap_cpu, _ = model.simulate(**{**inputs, "issue_s": 2e-4}, lookahead=2, slots=3)
    assert round(cheap_cpu * 1e3, 1) == 40.2 == round(sum(inputs["compute_s"]) * 1e3, 1)  # then the compute does
