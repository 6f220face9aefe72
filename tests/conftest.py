"""Shared test configuration: CPU by default, `gpu`-marked tests only on a CUDA machine; the built docs site."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# One CPU thread for torch here and in every process a test starts (set before torch is imported). The models are
# tiny: a second thread buys nothing, and on a machine with other work the threads of a parallel region spin-wait
# for each other (on 2 busy cores, tests/test_ring_runtime.py and test_attach_offload.py took 161 s with 2 threads
# and 11 s with 1, 2026-12-07).
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
import torch
from support.fakes import FakeHostAllocator, MiB

from ddo_hooks.release.allocator import use_backend

torch.set_num_threads(1)  # where torch was imported before this file (a doctest of the package, a plugin)

# Nothing in the suite may reach a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# Named by the fuzz tests' !!python tags, which must never import it: not even for doctests.
collect_ignore = ["fuzz_sentinel.py"]

ROOT = Path(__file__).resolve().parent.parent
MKDOCS_TOOLS = ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python")


@dataclass(frozen=True)
class BuiltSite:
    """The documentation site, built once per session with ``mkdocs build --strict``."""

    path: Path
    returncode: int
    output: str


@pytest.fixture(scope="session")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> BuiltSite:
    missing = [name for name in MKDOCS_TOOLS if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"the docs tooling is not installed ({', '.join(missing)}); pip install -e '.[dev]' adds it")
    site = tmp_path_factory.mktemp("docs") / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    return BuiltSite(site, proc.returncode, proc.stdout[-6000:] + proc.stderr[-6000:])


@pytest.fixture
def fake() -> Iterator[FakeHostAllocator]:
    """The allocator seam's fake installed for the test (8 MiB cached, 1 MiB live); a module may override it."""
    with use_backend(FakeHostAllocator(cached_bytes=8 * MiB, live_bytes=MiB)) as installed:
        yield installed


@pytest.fixture(scope="session")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny SD and Flux pipelines, saved once per session (tests that change files copy them first)."""
    from ddo_hooks.testing.tiny_pipelines import build_pipeline

    folders = {}
    for family in ("sd", "flux"):
        folder = tmp_path_factory.mktemp(family)
        build_pipeline(family).save_pretrained(folder)
        folders[family] = folder
    return folders
