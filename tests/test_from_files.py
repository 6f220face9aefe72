"""Each weight once: ``pinned_copies.from_files`` pins the denoiser's and the VAE's weights from their files.

Tiny real pipelines are saved and loaded back (their weights views of the files), offloaded at leaf level with
``low_cpu_mem_usage=True``, and given the CPU sources group offloading makes with streams; pinning goes through
the allocator seam (``support.fakes.FakeHostAllocator``), the one part that needs CUDA. The same path runs for
real on the GPU machine (``tests/gpu/test_from_files_gpu.py``).
"""

from __future__ import annotations

import functools
import gc
import os
import shutil
import sys
import weakref
from pathlib import Path
from typing import Any

import pytest
import torch
from diffusers import DiffusionPipeline
from diffusers.hooks import apply_group_offloading
from support.fakes import FakeHostAllocator, pin_like_streams
from support.processes import in_child

from ddo_hooks import HookPolicy, attach
from ddo_hooks._compat import diffusers as diffusers_compat
from ddo_hooks.ledger import LEDGER
from ddo_hooks.release import file_pages
from ddo_hooks.release.allocator import use_backend
from ddo_hooks.release.from_files import pin_from_files, pinned_from_files, unpin_from_files
from ddo_hooks.testing.tiny_pipelines import build_pipeline, call_kwargs

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="file mappings are read in /proc")

KEPT = {"flux": ["transformer", "vae"], "sd": ["unet", "vae"]}


@pytest.fixture
def fake() -> Any:
    with use_backend(FakeHostAllocator(cached_bytes=0, live_bytes=0)) as backend:
        yield backend


def offload(pipe: Any, fake: FakeHostAllocator) -> Any:
    """Leaf-level group offloading with the CPU sources streams keep (``low_cpu_mem_usage=True``: file views)."""
    pipe.set_progress_bar_config(disable=True)
    for module in pipe.components.values():
        if isinstance(module, torch.nn.Module):
            apply_group_offloading(module, onload_device=torch.device("cpu"), offload_type="leaf_level")
            pin_like_streams(module, fake, low_cpu_mem_usage=True)
    return pipe


def load(folder: Path, fake: FakeHostAllocator, **kwargs: Any) -> Any:
    return offload(DiffusionPipeline.from_pretrained(folder, **kwargs), fake)


def sources(module: torch.nn.Module) -> list[torch.Tensor]:
    return [t for g in diffusers_compat.offload_groups(module) for t in diffusers_compat.group_cpu_sources(g).values()]


def outputs(pipe: Any, family: str, calls: int = 2) -> list[torch.Tensor]:
    return [pipe(**call_kwargs(family, seed=n)).images for n in range(calls)]


def modules(pipe: Any) -> list[tuple[str, torch.nn.Module]]:
    return [(n, m) for n, m in pipe.components.items() if isinstance(m, torch.nn.Module)]


def all_sources(pipe: Any) -> dict[str, list[int]]:
    """Each model component's CPU sources, by address."""
    return {name: [t.data_ptr() for t in sources(module)] for name, module in modules(pipe)}


def statuses(report: Any) -> dict[str, tuple[str, str | None]]:
    return {c.component: (c.status, c.reason) for c in report.repack.components}


# Every weight keeps its bytes. Here the groups onload onto the CPU, so the forwards read the weights where they
# lie: slabs place them at other alignments than the files, and the CPU's float32 kernels may then sum in another
# order (outputs within 1e-6). On CUDA each weight is copied to the device first: the GPU test holds the outputs
# bitwise equal for both modes.
@pytest.mark.parametrize("family", ["flux", "sd"])
@pytest.mark.parametrize("mode", ["register", "stage"])
def test_pinned_from_files_the_outputs_stay_equal_and_unpinning_is_exact(saved, fake, family, mode):
    plain = outputs(load(saved[family], fake), family)
    pipe = load(saved[family], fake)
    before = all_sources(pipe)
    weights = {n: {k: v.detach().clone() for k, v in module.state_dict().items()} for n, module in modules(pipe)}
    report = pin_from_files(pipe, mode)
    status = "registered" if mode == "register" else "repacked"
    assert statuses(report) == dict.fromkeys(KEPT[family], (status, None))
    for name in KEPT[family]:
        module = getattr(pipe, name)
        assert pinned_from_files(module) == mode
        assert all(fake.is_pinned(t) for t in sources(module))  # diffusers onloads them without a copy
        assert all(p.data_ptr() in {t.data_ptr() for t in sources(module)} for p in module.parameters())
    assert pinned_from_files(pipe.text_encoder) is None  # runs once per call: left file-backed
    if mode == "register":
        assert fake.registered  # the files' pages, in place
        assert sum(fake.registered.values()) == report.repack.pinned_bytes_after
    else:
        assert not fake.registered
        assert report.repack.pinned_bytes_after >= report.repack.tensor_bytes
    assert {n: m.state_dict().keys() for n, m in modules(pipe)} == {n: w.keys() for n, w in weights.items()}
    assert all(torch.equal(v, weights[n][k]) for n, m in modules(pipe) for k, v in m.state_dict().items())
    same = torch.equal if mode == "register" else functools.partial(torch.allclose, rtol=0, atol=1e-5)
    assert all(same(a, b) for a, b in zip(plain, outputs(pipe, family), strict=True))  # see below
    unpin_from_files(pipe)
    assert fake.registered == {}
    assert all_sources(pipe) == before
    assert all(pinned_from_files(getattr(pipe, name)) is None for name in KEPT[family])
    assert all(torch.equal(a, b) for a, b in zip(plain, outputs(pipe, family), strict=True))


def test_registered_pages_are_the_files_own_and_read_only(saved, fake):
    pipe = load(saved["sd"], fake)
    pin_from_files(pipe, "register")
    at = file_pages.mapping_at(file_pages.mappings())
    for tensor in sources(pipe.unet):
        assert at(tensor.data_ptr(), tensor.numel() * tensor.element_size()) is None  # not a private mapping
    with open("/proc/self/maps") as maps:
        shared = [line for line in maps if "unet" in line and line.split()[1] == "r--s"]
    assert shared  # mapped again, shared and read-only: the page cache's pages, no copy
    unpin_from_files(pipe)


def test_attach_pins_from_the_files_records_it_and_detach_gives_the_views_back(saved, fake):
    pipe = load(saved["flux"], fake)
    before = [t.data_ptr() for t in sources(pipe.transformer)]
    policy = HookPolicy.from_mapping({"version": 1, "pinned_copies": {"from_files": "register"}})
    with attach(pipe, policy) as attachment:
        assert attachment.from_files_report is not None
        assert statuses(attachment.from_files_report)["transformer"] == ("registered", None)
        assert attachment.reports[0].route == "pinned_copy_repack"
        assert statuses(attachment.repack_report)["transformer"] == ("skipped", "already_packed")
        pipe(**call_kwargs("flux"))
    assert [t.data_ptr() for t in sources(pipe.transformer)] == before
    assert fake.registered == {}


@pytest.mark.parametrize("stable_files", [False, True])
def test_release_done_components_leaves_a_component_pinned_from_its_files(saved, fake, stable_files):
    # Named in release_done_components, a registered transformer was reported as holding "own copies", and with
    # stable_files: true its registered sources were swapped back for file views: every onload then pinned again.
    pipe = load(saved["flux"], fake)
    options = {"components": ["transformer", "text_encoder"], "stable_files": stable_files}
    action = {"name": "release_done_components", "options": options}
    policy = {
        "version": 1,
        "pinned_copies": {"from_files": "register"},
        "boundaries": {"after_call": {"actions": [action]}},
    }
    with attach(pipe, HookPolicy.from_mapping(policy)) as attachment:
        registered = dict(fake.registered)
        pinned = [t.data_ptr() for t in sources(pipe.transformer)]
        first = outputs(pipe, "flux", calls=1)
        done = [r.release for r in attachment.reports if r.route == "done_components_release"]
        found = {c.component: c for c in done[-1].components}
        transformer, encoder = found["transformer"], found["text_encoder"]
        assert (transformer.outcome, transformer.reason, transformer.released_bytes) == ("left", "pinned_from_files", 0)
        assert transformer.detail.startswith("its weights were pinned from its files at attach (registered in place)")
        assert encoder.outcome == "released"  # a view of its files: given back as before
        assert [t.data_ptr() for t in sources(pipe.transformer)] == pinned  # still the registered pages
        assert all(fake.is_pinned(t) for t in sources(pipe.transformer))
        assert fake.registered == registered
        assert all(torch.equal(a, b) for a, b in zip(first, outputs(pipe, "flux", calls=1), strict=True))
    assert fake.registered == {}


def test_a_dropped_component_unregisters_its_pages_when_it_is_collected(saved, fake):
    pipe = load(saved["sd"], fake)
    pin_from_files(pipe, "register")
    unet = weakref.ref(pipe.unet)
    assert len(fake.registered) >= 2
    with attach(pipe, HookPolicy.from_mapping({"version": 1})) as attachment:
        attachment.drop("unet", "vae")
    gc.collect()
    assert unet() is None
    assert fake.registered == {}


# -- refusals: each component is left exactly as it was, with the reason ----------------------------------


def refused(pipe: Any, name: str, mode: str = "register") -> tuple[str, str, str]:
    before = [t.data_ptr() for t in sources(getattr(pipe, name))]
    (component,) = [c for c in pin_from_files(pipe, mode).repack.components if c.component == name]
    assert [t.data_ptr() for t in sources(getattr(pipe, name))] == before  # left exactly as it was
    assert pinned_from_files(getattr(pipe, name)) is None
    unpin_from_files(pipe)
    return component.status, component.reason, component.detail


@pytest.mark.parametrize("how", ["replaced", "deleted"])
def test_a_file_changed_on_disk_since_the_load_is_refused(saved, fake, tmp_path, how):
    folder = Path(shutil.copytree(saved["sd"], tmp_path / "sd"))
    pipe = load(folder, fake)
    (path,) = (folder / "unet").glob("*.safetensors")
    if how == "replaced":
        shutil.copy(path, tmp_path / "new.safetensors")
        os.replace(tmp_path / "new.safetensors", path)  # as a new download over the old one does
    else:
        path.unlink()
    status, reason, detail = refused(pipe, "unet")
    assert (status, reason) == ("refused", "file_changed")
    assert f"{path} was deleted or replaced since it was loaded" in detail
    assert fake.registered == {}


@pytest.mark.parametrize("size", ["empty", "half"])
@pytest.mark.parametrize("mode", ["register", "stage"])
def test_a_file_truncated_since_the_load_is_refused_at_attach_with_the_fix(saved, fake, tmp_path, mode, size):
    # register raised a raw ValueError out of attach() (cannot mmap an empty file; frombuffer's offset), and stage
    # died of SIGBUS inside it, reading the views past the file's new end.
    folder = Path(shutil.copytree(saved["sd"], tmp_path / "sd"))
    pipe = load(folder, fake)  # from here on nothing may read the unet's weights: their file is cut short
    (path,) = (folder / "unet").glob("*.safetensors")
    os.truncate(path, 0 if size == "empty" else path.stat().st_size // 2)
    policy = HookPolicy.from_mapping({"version": 1, "pinned_copies": {"from_files": mode}})

    def attached() -> dict[str, tuple[str, str | None, str]]:
        with attach(pipe, policy) as attachment:
            components = attachment.from_files_report.repack.components
        return {c.component: (c.status, c.reason, c.detail) for c in components}

    got = in_child(attached)  # a SIGBUS kills the child only; a traceback's repr would read the views too
    assert "error" not in got, got
    status, reason, detail = got["ok"]["unet"]
    assert (status, reason) == ("refused", "file_changed")
    assert detail.startswith(f"unet's weights file {path} was truncated since it was loaded: it holds ")
    assert detail.endswith("; load the pipeline again")
    assert got["ok"]["vae"][:2] == ("registered" if mode == "register" else "repacked", None)  # its file is whole


def test_weights_not_in_files_are_refused(fake):
    pipe = offload(build_pipeline("sd"), fake)  # built in memory
    status, reason, detail = refused(pipe, "unet", "stage")
    assert (status, reason) == ("refused", "not_file_backed")
    assert "is not a view of its weights file" in detail


def test_weights_converted_to_another_dtype_are_refused(saved, fake):
    pipe = load(saved["sd"], fake, dtype=torch.float64)
    status, reason, detail = refused(pipe, "unet")
    assert (status, reason) == ("refused", "not_file_backed")
    assert "converted to another dtype; load it with the files' dtype" in detail


def test_a_weight_shared_with_another_component_is_refused(saved, fake):
    pipe = DiffusionPipeline.from_pretrained(saved["sd"])
    pipe.vae.register_parameter("borrowed", pipe.unet.conv_out.bias)  # one weight, two components
    offload(pipe, fake)
    status, reason, detail = refused(pipe, "unet")
    assert (status, reason) == ("refused", "shared_storage")
    assert "conv_out.bias is a weight of another component too" in detail


def test_a_written_page_is_refused(saved, fake):
    pipe = load(saved["sd"], fake)
    with torch.no_grad():
        pipe.unet.conv_out.weight.mul_(1.0)  # an in-place edit: the page is a private copy now
    status, reason, detail = refused(pipe, "unet", "stage")
    assert (status, reason) == ("refused", "modified")
    assert "were written since they were loaded" in detail


def test_a_failed_registration_is_refused_and_leaves_nothing_registered(saved, fake):
    pipe = load(saved["sd"], fake)
    fake.register_error = RuntimeError("cudaHostRegister failed: out of memory")
    status, reason, detail = refused(pipe, "unet")
    assert (status, reason) == ("refused", "pin_failed")
    assert "out of memory" in detail
    assert fake.registered == {}


def test_pinned_copies_from_low_cpu_mem_usage_false_are_refused_with_the_fix(saved, fake):
    pipe = DiffusionPipeline.from_pretrained(saved["sd"])
    apply_group_offloading(pipe.unet, onload_device=torch.device("cpu"), offload_type="leaf_level")
    pin_like_streams(pipe.unet, fake)  # low_cpu_mem_usage=False: pinned copies
    status, reason, detail = refused(pipe, "unet")
    assert (status, reason) == ("refused", "not_file_backed")
    assert "(a pinned copy: low_cpu_mem_usage=False)" in detail


@pytest.fixture(scope="module")
def saved_wan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Wan 2.2 (two transformers), saved once: its rotary tables are buffers built at init, in no file."""
    from ddo_hooks.testing.structural import build_structural

    folder = tmp_path_factory.mktemp("wan22")
    build_structural("wan22").save_pretrained(folder)
    return folder


@pytest.mark.parametrize("mode", ["register", "stage"])
def test_buffers_built_at_init_are_left_and_the_rest_of_the_component_is_pinned(saved_wan, fake, mode):
    from ddo_hooks.testing.structural import structural_call_kwargs

    def call(pipe: Any) -> Any:
        return pipe(**structural_call_kwargs("wan22")).frames

    plain = call(load(saved_wan, fake))
    pipe = load(saved_wan, fake)
    before = all_sources(pipe)
    tables = {n: getattr(pipe, n).rope.freqs_cos for n in ("transformer", "transformer_2")}
    report = pin_from_files(pipe, mode)
    status = "registered" if mode == "register" else "repacked"
    assert statuses(report) == dict.fromkeys(["vae", "transformer", "transformer_2"], (status, None))
    for name, table in tables.items():
        (found,) = [c for c in report.repack.components if c.component == name]
        assert found.detail.endswith("; 2 buffer(s) built at init, not in its files, left as they were (3,072 bytes)")
        assert not fake.is_pinned(table)  # left as it was: diffusers pins it at each onload
        assert table.data_ptr() in {t.data_ptr() for t in sources(getattr(pipe, name))}
    same = torch.equal if mode == "register" else functools.partial(torch.allclose, rtol=0, atol=1e-5)
    assert same(plain, call(pipe))
    unpin_from_files(pipe)
    assert all_sources(pipe) == before
    assert fake.registered == {}
    assert not any(LEDGER.read(g).repacked for _, m in modules(pipe) for g in diffusers_compat.offload_groups(m))
