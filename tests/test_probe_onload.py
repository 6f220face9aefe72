"""``benchmarks/probe_onload.py``: the onload pass it times, on the CPU (its figures come from the GPU machine)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from support.fakes import FakeHostAllocator, pin_like_streams
from support.file_modules import load_file

from ddo_hooks._compat import diffusers as diffusers_compat
from ddo_hooks.release.allocator import use_backend

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def probe():
    return load_file(BENCH / "probe_onload.py", "probe_onload_under_test", beside=True)


def test_without_cuda_it_says_so_and_measures_nothing(probe, saved, tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here")
    assert probe.main(["--folder", str(saved["flux"] / "transformer"), "--out", str(tmp_path)]) == 2
    assert "no CUDA device here; nothing measured" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="file mappings are read in /proc")
def test_each_pass_onloads_every_group_from_both_arms_and_the_same_bytes_arrive(probe, saved):
    folder = saved["flux"] / "transformer"
    with use_backend(FakeHostAllocator(cached_bytes=0, live_bytes=0)) as fake:
        copies, registered = (probe.load(folder, lcmu, torch.device("cpu"), torch.float32) for lcmu in (False, True))
        pin_like_streams(copies, fake)
        pin_like_streams(registered, fake, low_cpu_mem_usage=True)
        status, reason, detail = probe.register(registered)
        assert (status, reason) == ("registered", None)
        assert "weights registered in place" in detail
        assert fake.registered
        result = probe.measure(copies, registered, reps=2)
    assert result["same_bytes"] is True
    assert {name: len(s) for name, s in result["seconds"].items()} == {"copies": 2, "registered": 2}
    assert {name: len(s) for name, s in result["is_pinned_seconds"].items()} == {"copies": 2, "registered": 2}
    assert result["groups"] == len(diffusers_compat.offload_groups(copies)) > 1
    assert result["bytes"] == sum(t.numel() * t.element_size() for t in copies.parameters())
    lines = probe.table(result)
    assert lines[0].split() == ["arm", "pass", "s", "(min-max,", "n)", "GB/s", "x", "copies", "is_pinned", "s"]
    assert lines[1].split()[0] == "copies"
    assert lines[1].split()[-2] == "1.000"  # the ratio to itself
    assert lines[2].startswith("registered")
