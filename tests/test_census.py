"""A CPU user sees what ``pinned_copies.from_files`` would pin: the census, where torch has no CUDA host allocator.

Registering a file's pages needs CUDA; finding them does not. These tests run the real backend of this CPU-only
torch (no fake): attach pins nothing, and its report says per component what it would register or stage from which
file, or why it would be left, with the totals. The same pipeline pinned through the allocator seam's fake
(``support.fakes.FakeHostAllocator``) registers exactly what the census said it would.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from support.fakes import FakeHostAllocator
from support.saved_pipelines import loaded

from ddo_hooks import HookPolicy, attach
from ddo_hooks._compat import torch as torch_compat
from ddo_hooks.release.allocator import use_backend
from ddo_hooks.release.from_files import pin_from_files, unpin_from_files
from ddo_hooks.reports.repack import PinnedCopyRepackReport
from ddo_hooks.sizes import format_size

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="file mappings are read in /proc"),
    pytest.mark.skipif(torch_compat.is_cuda_build(), reason="the census is what a torch without CUDA reports"),
]

FLUX = ("vae", "text_encoder", "text_encoder_2", "transformer")


def components(report: PinnedCopyRepackReport) -> dict[str, Any]:
    return {c.component: c for c in report.repack.components}


def weights(pipe: Any) -> dict[str, list[int]]:
    return {n: [p.data_ptr() for p in m.parameters()] for n, m in pipe.components.items() if hasattr(m, "parameters")}


def test_attach_smallest_box_on_a_cpu_says_what_it_would_register_from_which_file(saved):
    pipe = loaded(saved["flux"])
    before = weights(pipe)
    with attach(pipe, "smallest-box") as attachment:
        report = attachment.from_files_report
        assert weights(pipe) == before  # nothing was pinned, nothing moved
    repack = report.repack
    assert (repack.status, repack.noop_reason, repack.step) == ("noop", "unsupported_build", "register")
    assert report.summary().action == "register"  # the step is named for what it does: attach/register
    found = components(report)
    assert sorted(found) == sorted(FLUX)  # keep_encoders_pinned: the text encoders too
    for name, component in found.items():
        module = getattr(pipe, name)
        saved_tensors = {id(t) for t in module.state_dict(keep_vars=True).values()}
        in_files = {p.data_ptr(): p.numel() * p.element_size() for p in module.state_dict().values()}
        assert component.status == "would_register", component.detail
        assert component.tensor_bytes == sum(in_files.values())  # each weight in its file, once
        assert saved_tensors  # the module has weights the state dict names
        (path,) = component.files
        assert Path(path).parent == saved["flux"] / name  # its own file
        assert component.detail.startswith(f"would register {format_size(component.tensor_bytes)} in place from {path}")
        assert (component.pinned_bytes_before, component.pinned_bytes_after) == (0, 0)
    total = format_size(sum(c.tensor_bytes for c in found.values()))
    assert f"With CUDA, attach would register {total} in place from 4 files (" in repack.detail
    assert repack.detail.endswith("and leave no component as it is")
    recorded = [component for component, r in attachment.tracker.records() if r is report]
    assert recorded == ["pinned_from_files"]


def test_what_the_census_says_is_what_registering_through_the_allocator_seam_does(saved):
    census = components(pin_from_files(loaded(saved["flux"]), "register", encoders=True))
    pipe = loaded(saved["flux"])
    with use_backend(FakeHostAllocator(cached_bytes=0, live_bytes=0)):
        registered = components(pin_from_files(pipe, "register", encoders=True))
        unpin_from_files(pipe)
    assert {n: c.status for n, c in registered.items()} == dict.fromkeys(FLUX, "registered")
    for name in FLUX:
        assert census[name].status == "would_register"
        assert (census[name].tensor_bytes, census[name].tensors) == (
            registered[name].tensor_bytes,
            registered[name].tensors,
        )
        assert census[name].files == registered[name].files
        pinned = int(re.search(r"\(([\d,]+) bytes pinned\)", census[name].detail).group(1).replace(",", ""))
        assert pinned == registered[name].pinned_bytes_after  # the page-rounded bytes registering pins


def test_stage_says_what_it_would_copy_into_slabs(saved):
    policy = HookPolicy.from_mapping({"version": 1, "pinned_copies": {"from_files": "stage"}})
    with attach(loaded(saved["sd"]), policy) as attachment:
        found = components(attachment.from_files_report)
    assert attachment.from_files_report.repack.step == "stage"
    assert {n: c.status for n, c in found.items()} == {"unet": "would_stage", "vae": "would_stage"}  # no encoders
    assert all(" into exact-size slabs from " in c.detail for c in found.values())


def test_the_census_names_what_it_would_refuse_and_why(saved, tmp_path):
    folder = tmp_path / "flux"
    shutil.copytree(saved["flux"], folder)
    pipe = loaded(folder)
    pipe.vae.to(torch.float16)  # converted: no longer views of its file
    os.truncate(folder / "text_encoder" / "model.safetensors", 1024)  # truncated since the load
    with attach(pipe, "smallest-box") as attachment:
        repack = attachment.from_files_report.repack
    found = {c.component: c for c in repack.components}
    assert (found["vae"].status, found["vae"].reason) == ("refused", "not_file_backed")
    assert "load it with the files' dtype" in found["vae"].detail
    assert (found["text_encoder"].status, found["text_encoder"].reason) == ("refused", "file_changed")
    assert "was truncated since it was loaded" in found["text_encoder"].detail
    assert [found[n].status for n in ("text_encoder_2", "transformer")] == ["would_register"] * 2
    said = repack.detail.split("With CUDA, attach ", 1)[1]
    assert said.startswith("would register ")
    assert " in place from 2 files (" in said
    refused = said.split(", and refuse ", 1)[1].split(", ")
    assert sorted(refused) == ["text_encoder (file_changed)", "vae (not_file_backed)"]


def test_a_pipeline_built_in_memory_would_be_refused_whole(tmp_path):
    from ddo_hooks.testing.tiny_pipelines import build_pipeline

    with attach(build_pipeline("sd"), "smallest-box") as attachment:
        repack = attachment.from_files_report.repack
    assert {c.reason for c in repack.components} == {"not_file_backed"}
    assert "With CUDA, attach would pin nothing, and refuse " in repack.detail


def test_the_demo_saves_its_pipeline_and_prints_the_census(tmp_path):
    from ddo_hooks.cli.demo import run_demo
    from ddo_hooks.cli.demo_view import format_result

    log = io.StringIO()
    result = run_demo(family="flux", device=torch.device("cpu"), steps=1, calls=1, report=tmp_path / "r.jsonl",
                      progress=False, log=log)  # fmt: skip
    text = format_result(result)
    census = text.split("what attach/register would do on a CUDA machine", 1)[1].split("\n\n", 1)[0]
    folder = re.search(r"\(in (/\S+)\):", " ".join(census.split())).group(1)
    assert not Path(folder).exists()  # the demo's weights files are gone with the run
    flat = " ".join(census.split())  # long lines wrap
    for name in FLUX:
        assert re.search(rf" {name} would register \d+\.\d KiB in place from {name}/\S+\.safetensors ", flat), name
    assert re.search(r"total: would register \d+\.\d KiB in place from 4 files \(4 of 4 components\)", flat)
    assert "saved to " in log.getvalue()
    assert "and loaded back" in log.getvalue()


def test_a_census_component_belongs_to_a_noop_that_pinned_nothing(saved):
    from pydantic import ValidationError

    report = pin_from_files(loaded(saved["sd"]), "register")
    data = report.model_dump(mode="json")
    section = data["setup"]["pinned_copy_repack"]
    with pytest.raises(ValidationError, match="belongs to a census: a no-op of noop_reason unsupported_build"):
        PinnedCopyRepackReport.model_validate(
            {**data, "setup": {"pinned_copy_repack": {**section, "noop_reason": "nothing_to_repack"}}}
        )
    component = {**section["components"][0], "files": []}
    with pytest.raises(ValidationError, match="names the files it would be pinned from"):
        PinnedCopyRepackReport.model_validate(
            {**data, "setup": {"pinned_copy_repack": {**section, "components": [component]}}}
        )
    assert PinnedCopyRepackReport.model_validate(data) == report  # as written, it reads back
