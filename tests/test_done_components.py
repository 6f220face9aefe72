"""Components whose work in a call is done give back their file-backed pages (``release_done_components``).

The pipelines are tiny real ones, saved once and loaded back with ``from_pretrained``, so that their
weights are views of their safetensors files, as a user's are. Resident pages are counted through
``/proc/self/pagemap``, the same census the action makes.
"""

from __future__ import annotations

import gc
import os
import shutil
import sys
import weakref
from pathlib import Path
from typing import Any

import pytest
import torch
from diffusers import AutoPipelineForImage2Image, DiffusionPipeline
from support.overlap import overlapping_calls
from support.processes import in_child

from ddo_hooks import HookPolicy, attach, register_action, unregister_action
from ddo_hooks._compat import diffusers as diffusers_compat
from ddo_hooks.errors import InvalidArgumentError, PolicyError, WeightsFileChangedError
from ddo_hooks.hooks.phases import Phase
from ddo_hooks.release import file_pages
from ddo_hooks.testing.tiny_pipelines import build_pipeline, call_kwargs

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pagemap and madvise are Linux's")

GIVE_BACK = {
    "version": 1,
    "boundaries": {
        "before_transformer": {"actions": ["release_done_components"]},
        "before_vae": {"enabled": False},
        "after_call": {"enabled": False},
    },
}
STABLE = {**GIVE_BACK, "boundaries": {**GIVE_BACK["boundaries"], "before_transformer": {"actions": [
    {"name": "release_done_components", "options": {"stable_files": True}}]}}}  # fmt: skip
"""GIVE_BACK, with the files declared stable: copies equal to them are freed."""


def load(folder: Path) -> DiffusionPipeline:
    pipe = DiffusionPipeline.from_pretrained(folder)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def resident(module: torch.nn.Module) -> int:
    """Resident pages of the module's file-backed weights, and that none was written."""
    inside = file_pages.in_file_view(file_pages.mappings())
    ranges = [(at, at + size) for at, size in file_pages._storages(module).items() if inside(at, size)]
    pages, written = file_pages._census(file_pages._page_runs(ranges))
    assert written == 0
    return pages


def outputs(pipe: Any, family: str, calls: int) -> list[torch.Tensor]:
    return [pipe(**call_kwargs(family, seed=n)).images for n in range(calls)]


@pytest.mark.parametrize(
    ("family", "encoders"), [("sd", ("text_encoder",)), ("flux", ("text_encoder", "text_encoder_2"))]
)
def test_the_encoders_give_back_every_resident_page_and_the_next_calls_are_bitwise_equal(saved, family, encoders):
    plain = outputs(load(saved[family]), family, 3)
    pipe = load(saved[family])
    with attach(pipe, HookPolicy.from_mapping(GIVE_BACK)) as attachment:
        got = []
        for n in range(3):
            got.append(pipe(**call_kwargs(family, seed=n)).images)
            assert all(resident(getattr(pipe, name)) == 0 for name in encoders)  # given back at every call
        reports = attachment.reports
    assert all(torch.equal(a, b) for a, b in zip(plain, got, strict=True))
    assert [r.release.status for r in reports] == ["executed"] * 3
    for call, report in enumerate(reports):
        body = report.release
        assert [c.component for c in body.components] == list(encoders)
        assert all(c.outcome == "released" and c.released_bytes >= c.file_bytes * 0.95 for c in body.components)
        dropped = body.host_before.rss_file_bytes - body.host_after.rss_file_bytes
        if call:  # RssFile falls by what the census counted. Not in the first call, whose release can fault in
            # code pages of torch's libraries that no earlier test of the session ran (RssFile too: 750 KB seen,
            # against 76 KB of tiny weights)
            assert dropped >= 0.95 * body.released_bytes
    assert reports[0].release.faults_since_previous is None
    since = reports[1].release.faults_since_previous
    assert since.since == "before_transformer"
    assert since.minor_faults > 0


def test_done_is_what_ran_before_the_final_denoiser_and_nothing_outside_a_call():
    seen: list[tuple[str, tuple[str, ...]]] = []

    @register_action("note_done")
    def note_done(ctx):
        seen.append((ctx.boundary, ctx.done))

    try:
        pipe = build_pipeline("flux")
        policy = {
            "version": 1,
            "boundaries": {b: {"actions": ["note_done"]} for b in ("before_transformer", "after_call")},
        }
        with attach(pipe, HookPolicy.from_mapping(policy)) as attachment:
            pipe(**call_kwargs("flux"))
            attachment.boundary("after_call")  # a host request belongs to no call
    finally:
        unregister_action("note_done")
    encoders = ("text_encoder", "text_encoder_2")
    assert seen == [("before_transformer", encoders), ("after_call", encoders), ("after_call", ())]


def test_weights_built_in_memory_are_left_and_say_why():
    pipe = build_pipeline("sd")
    with attach(pipe, HookPolicy.from_mapping(GIVE_BACK)) as attachment:
        pipe(**call_kwargs("sd"))
    body = attachment.reports[0].release
    assert body.status == "noop"
    assert body.noop_reason == "nothing_released"
    (component,) = body.components
    assert component.reason == "not_file_backed"
    assert component.released_bytes == 0
    assert "built in memory" in component.detail


def test_the_census_counts_a_chunk_of_pagemap_entries_as_entry_by_entry():
    """Bits 63 (present), 62 (swapped), 61 (file page or shared) in every combination, and a few pages' frame
    numbers in the low bits: a resident file page counts as resident, a swapped one or a present anonymous one
    (a private file page once written) as written, an absent one as neither."""
    flags = [
        (present << 63) | (swapped << 62) | (file << 61) for present in (0, 1) for swapped in (0, 1) for file in (0, 1)
    ]
    entries = [flag | frame for flag in flags for frame in (0, 7, (1 << 55) - 1)]

    def one(entry: int) -> tuple[int, int]:
        present, swapped, file = entry >> 63 & 1, entry >> 62 & 1, entry >> 61 & 1
        written = swapped or (present and not file)
        return int(bool(present and not written)), int(bool(written))

    expected = tuple(sum(counts) for counts in zip(*map(one, entries), strict=True))
    as_int64 = torch.tensor([e - (1 << 64) if e >> 63 else e for e in entries], dtype=torch.int64)
    assert file_pages._count(as_int64) == expected == (3, 15)


def test_a_written_page_keeps_every_page_of_its_component(saved):
    pipe, plain = load(saved["sd"]), load(saved["sd"])
    for each in (pipe, plain):
        with torch.no_grad():
            each.text_encoder.final_layer_norm.weight.mul_(1.5)  # an in-place edit: copy-on-write
    before = resident(pipe.unet)  # the UNet's pages are not the encoder's: the census of one is unchanged
    with attach(pipe, HookPolicy.from_mapping(GIVE_BACK)) as attachment:
        got = pipe(**call_kwargs("sd")).images
    (component,) = attachment.reports[0].release.components
    assert component.outcome == "left"
    assert component.reason == "modified"
    assert "written" in component.detail
    assert torch.equal(got, plain(**call_kwargs("sd")).images)  # the edit survives
    assert resident(pipe.unet) >= before


def hold_copies(module: torch.nn.Module) -> int:
    """Put every weight of ``module`` in a copy in memory, as a load into memory does; their bytes."""
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            tensor.data = tensor.data.clone()
    return sum(t.numel() * t.element_size() for t in [*module.parameters(), *module.buffers()])


def in_files(module: torch.nn.Module) -> bool:
    inside = file_pages.in_file_view(file_pages.mappings())
    return all(inside(p.data_ptr(), p.numel() * p.element_size()) for p in module.parameters())


def rewrite_in_place(folder: Path, component: str) -> None:
    """Overwrite the tensor bytes of ``component``'s weights file where it is, as an in-place edit or a copy does."""
    (path,) = (folder / component).glob("*.safetensors")
    zero_weights(path)


def zero_weights(path: Path) -> None:
    """Overwrite every tensor byte of the safetensors file ``path`` with 0."""
    with open(path, "r+b") as file:
        header = int.from_bytes(file.read(8), "little")
        file.seek(8 + header)
        size = path.stat().st_size - 8 - header
        file.write(bytes(size))  # every weight 0


@pytest.fixture
def own_copy(saved, tmp_path) -> Path:
    """A copy of the saved SD pipeline that a test may rewrite."""
    return Path(shutil.copytree(saved["sd"], tmp_path / "sd"))


def test_copies_are_kept_without_stable_files_so_a_rewritten_file_changes_nothing(own_copy):
    plain = outputs(load(own_copy), "sd", 2)
    pipe = load(own_copy)
    hold_copies(pipe.text_encoder)
    parameters = list(pipe.text_encoder.parameters())
    held = f"holds its own copies of {len(parameters)} weights ({sum(p.nbytes for p in parameters)} bytes"
    with attach(pipe, HookPolicy.preset("lowest-peak")) as attachment:
        first = outputs(pipe, "sd", 1)
        rewrite_in_place(own_copy, "text_encoder")
        second = pipe(**call_kwargs("sd", seed=1)).images
        assert not in_files(pipe.text_encoder)
    assert torch.equal(first[0], plain[0])
    assert torch.equal(second, plain[1])  # as without ddo_hooks: the pipeline never read that file
    for report in [r.release for r in attachment.reports if r.route == "done_components_release"]:
        (component,) = report.components
        assert (component.outcome, component.reason, component.replaced_bytes) == ("left", "own_copies", 0)
        assert held in component.detail
        assert "stable_files: true frees copies equal to them" in component.detail


def test_with_stable_files_a_rewritten_file_is_caught_before_its_bytes_are_used_again(own_copy):
    pipe = load(own_copy)
    hold_copies(pipe.text_encoder)
    attachment = attach(pipe, HookPolicy.from_mapping(STABLE))
    pipe(**call_kwargs("sd"))
    assert in_files(pipe.text_encoder)
    rewrite_in_place(own_copy, "text_encoder")
    with pytest.raises(WeightsFileChangedError, match=r"text_encoder's weights read .*model\.safetensors \(rewritten"):
        pipe(**call_kwargs("sd"))
    assert attachment.phase is Phase.IDLE  # the call ended, and the attachment is ready for the next one
    with pytest.raises(WeightsFileChangedError, match="load the pipeline again"):
        attachment.detach()  # it does not copy the new bytes back as if they were the weights
    assert attachment.detached


def test_copies_that_differ_from_a_file_replaced_since_attach_say_so_and_are_kept(own_copy):
    plain = outputs(load(own_copy), "sd", 1)
    pipe = load(own_copy)
    hold_copies(pipe.text_encoder)
    with attach(pipe, HookPolicy.from_mapping(STABLE)) as attachment:
        (path,) = (own_copy / "text_encoder").glob("*.safetensors")
        replacement = path.with_name("new.tmp")
        shutil.copyfile(path, replacement)
        zero_weights(replacement)
        os.replace(replacement, path)  # a new download renamed over the old file
        got = pipe(**call_kwargs("sd")).images
    assert torch.equal(got, plain[0])  # its copies, loaded before, are what it runs
    (component,) = attachment.reports[0].release.components
    assert (component.outcome, component.reason) == ("left", "file_changed")
    assert component.detail.startswith(f"text_encoder's {path} was rewritten or replaced since attach")
    assert not in_files(pipe.text_encoder)


def test_with_stable_files_detach_gives_back_copies_so_the_pipeline_no_longer_reads_its_files(own_copy):
    plain = outputs(load(own_copy), "sd", 2)
    pipe = load(own_copy)
    hold_copies(pipe.text_encoder)
    with attach(pipe, HookPolicy.from_mapping(STABLE)):
        pipe(**call_kwargs("sd"))
        assert in_files(pipe.text_encoder)
    assert not in_files(pipe.text_encoder)  # copies again, as before attach
    rewrite_in_place(own_copy, "text_encoder")
    assert torch.equal(pipe(**call_kwargs("sd", seed=1)).images, plain[1])


def test_copies_equal_to_the_files_are_pointed_back_at_them_once_then_given_back_every_call(saved):
    plain = outputs(load(saved["flux"]), "flux", 3)
    pipe = load(saved["flux"])
    held = {name: hold_copies(getattr(pipe, name)) for name in ("text_encoder", "text_encoder_2")}
    assert not in_files(pipe.text_encoder)
    with attach(pipe, HookPolicy.from_mapping(STABLE)) as attachment:
        got = outputs(pipe, "flux", 3)
        assert all(in_files(getattr(pipe, name)) and resident(getattr(pipe, name)) == 0 for name in held)
    assert all(torch.equal(a, b) for a, b in zip(plain, got, strict=True))
    first, *later = [r.release for r in attachment.reports]
    assert {c.component: c.replaced_bytes for c in first.components} == held  # CLIP's position_ids: a plain copy
    assert all(c.outcome == "released" for c in first.components)
    assert "copies of them were freed first" in first.components[0].detail
    assert all(c.replaced_bytes == 0 and c.outcome == "released" for r in later for c in r.components)


def test_copies_that_differ_from_the_files_are_kept_and_compared_once(saved, monkeypatch):
    from ddo_hooks.release import file_copies

    compared = []
    same_bytes = file_copies.same_bytes
    monkeypatch.setattr(file_copies, "same_bytes", lambda a, b: compared.append(1) or same_bytes(a, b))
    pipe, plain = load(saved["sd"]), load(saved["sd"])
    hold_copies(pipe.text_encoder)
    for each in (pipe, plain):
        with torch.no_grad():
            each.text_encoder.final_layer_norm.weight.mul_(1.5)  # a fused LoRA, say
    with attach(pipe, HookPolicy.from_mapping(STABLE)) as attachment:
        pipe(**call_kwargs("sd"))
        after_first = len(compared)
        got = pipe(**call_kwargs("sd", seed=1)).images
    assert len(compared) == after_first > 0  # the second call did not compare again
    assert torch.equal(got, plain(**call_kwargs("sd", seed=1)).images)  # the edit survives
    assert not in_files(pipe.text_encoder)
    for report in attachment.reports:
        (component,) = report.release.components
        assert (component.outcome, component.reason) == ("left", "modified")
        assert "final_layer_norm.weight differs from its weights file" in component.detail
    encoder = weakref.ref(pipe.text_encoder)
    del pipe
    gc.collect()
    assert encoder() is None  # what the attachment remembers of it keeps nothing alive


def test_copies_in_another_dtype_than_the_files_are_kept_and_say_which_weight(saved):
    pipe = load(saved["sd"])
    pipe.to(torch.float64)
    with attach(pipe, HookPolicy.from_mapping(STABLE)) as attachment:
        pipe(**call_kwargs("sd"))
    (component,) = attachment.reports[0].release.components
    assert (component.outcome, component.reason) == ("left", "not_file_backed")
    assert "(torch.float64" in component.detail
    assert "converted to another dtype" in component.detail


def test_pinned_copies_are_pointed_back_at_the_files_then_staged_again_at_the_next_call(saved):
    from diffusers.hooks import apply_group_offloading
    from support.fakes import FakeHostAllocator, pin_like_streams

    from ddo_hooks.release.allocator import use_backend

    plain = outputs(load(saved["flux"]), "flux", 3)
    policy = {"version": 1, "pinned_copies": {"repack": False}, "boundaries": {
        "before_transformer": {"actions": ["stage_done_components"]}, "before_vae": {"enabled": False},
        "after_call": {"actions": [{"name": "release_done_components", "options": {"stable_files": True}}]},
    }}  # fmt: skip
    with use_backend(FakeHostAllocator(cached_bytes=0, live_bytes=0)) as fake:
        pipe = load(saved["flux"])
        for name in ("text_encoder", "text_encoder_2"):
            apply_group_offloading(getattr(pipe, name), onload_device=torch.device("cpu"), offload_type="leaf_level")
            pin_like_streams(getattr(pipe, name), fake)  # the pinned copies streams make, through the fake
        with attach(pipe, HookPolicy.from_mapping(policy)) as attachment:
            got = outputs(pipe, "flux", 3)
            groups = diffusers_compat.offload_groups(pipe.text_encoder_2)
            sources = [t for g in groups for t in diffusers_compat.group_cpu_sources(g).values()]
            assert sources
            assert not any(fake.is_pinned(t) for t in sources)  # given back after the last call
        again = [t for g in groups for t in diffusers_compat.group_cpu_sources(g).values()]
        assert all(fake.is_pinned(t) for t in again)  # detach pinned them again, as they were
        assert outputs(pipe, "flux", 1)[0].equal(plain[0])
        stage = [r for r in attachment.reports if r.route != "done_components_release"]
        release = [r.release for r in attachment.reports if r.route == "done_components_release"]
    assert all(torch.equal(a, b) for a, b in zip(plain, got, strict=True))
    assert [r.route for r in stage] == ["boundary_action"] + ["pinned_copy_repack"] * 3
    assert [r.repack.phase for r in stage[1:]] == ["before_transformer", "before_transformer", "detach"]
    for report in stage[1:]:  # each call after a give-back pins the encoders again, into slabs, and detach
        assert [(c.component, c.status, c.pinned_bytes_before) for c in report.repack.components] == [
            ("text_encoder", "repacked", 0), ("text_encoder_2", "repacked", 0)]  # fmt: skip
    assert all(c.outcome == "released" and c.replaced_bytes > 0 for r in release for c in r.components)


def test_a_staging_that_fails_at_detach_propagates_and_leaves_the_pipeline_detached(saved, monkeypatch):
    from ddo_hooks.release import file_views

    def fails(pipeline, *, phase):
        raise RuntimeError("pinning failed")

    monkeypatch.setattr(file_views, "stage_again", fails)
    pipe = load(saved["sd"])
    attachment = attach(pipe, HookPolicy.from_mapping(GIVE_BACK))
    with pytest.raises(RuntimeError, match="pinning failed"):
        attachment.detach()
    assert attachment.detached
    monkeypatch.undo()
    with attach(pipe):  # nothing was left attached
        pass


def test_a_component_another_attached_pipeline_holds_is_left(saved):
    pipe = load(saved["sd"])
    other = AutoPipelineForImage2Image.from_pipe(pipe)
    with attach(pipe, HookPolicy.from_mapping(GIVE_BACK)) as attachment, attach(other):
        pipe(**call_kwargs("sd"))
    (component,) = attachment.reports[0].release.components
    assert component.reason == "shared"
    assert type(other).__name__ in component.detail


def test_named_components_are_given_back_where_the_policy_says(saved):
    pipe = load(saved["sd"])
    policy = {"version": 1, "boundaries": {
        "before_transformer": {"enabled": False}, "before_vae": {"enabled": False},
        "after_call": {"actions": [{"name": "release_done_components", "options": {"components": ["unet"]}}]},
    }}  # fmt: skip
    with attach(pipe, HookPolicy.from_mapping(policy)) as attachment:
        pipe(**call_kwargs("sd"))
        assert resident(pipe.unet) == 0
    assert [c.component for c in attachment.reports[0].release.components] == ["unet"]


def test_a_component_the_pipeline_does_not_hold_is_refused_at_attach_with_the_names_it_holds():
    pipe = build_pipeline("sd")
    action = {"name": "release_done_components", "options": {"components": ["text_encoder_2"]}}
    policy = HookPolicy.from_mapping({"version": 1, "boundaries": {"after_call": {"actions": [action]}}})
    with pytest.raises(InvalidArgumentError, match=r"names 'text_encoder_2'.*it holds vae, text_encoder, unet"):
        attach(pipe, policy)
    with attach(pipe):  # nothing was left attached
        pass


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"components": "text_encoder"}, "not a list of component names"),
        ({"every": True}, "unknown option.*stable_files and evict"),
        ({"stable_files": "yes"}, "'yes' is not true or false; true declares"),
    ],
)
def test_bad_options_are_refused_where_the_policy_writes_them(options, problem):
    action = {"name": "release_done_components", "options": options}
    with pytest.raises(PolicyError, match=problem):
        HookPolicy.from_mapping({"version": 1, "boundaries": {"after_call": {"actions": [action]}}})


def test_a_call_while_another_threads_call_is_in_progress_gives_back_nothing(saved):
    pipe = load(saved["sd"])
    policy = {"version": 1, "boundaries": {"after_call": {"actions": ["release_done_components"]}}}
    with attach(pipe, HookPolicy.from_mapping(policy)) as attachment:
        overlapping_calls(pipe, call_kwargs("sd"), call_kwargs("sd", seed=1))
    mine = [r for r in attachment.reports if r.summary().action == "release_done_components"]
    first, second = mine  # the first call's after_call came while the second encoded
    assert first.route == "phase_boundary_refusal"
    assert first.body.reason == "concurrent_call"
    assert second.release.status == "executed"


def test_detach_removes_the_forward_hooks_it_added(saved):
    pipe = load(saved["flux"])
    hooks = {name: len(m._forward_pre_hooks) for name, m in pipe.components.items() if isinstance(m, torch.nn.Module)}
    attachment = attach(pipe, HookPolicy.preset("lowest-peak"))
    assert len(pipe.text_encoder._forward_pre_hooks) == hooks["text_encoder"] + 1
    assert len(pipe.transformer._forward_pre_hooks) == hooks["transformer"]  # the final denoiser is not followed
    attachment.detach()
    assert {n: len(m._forward_pre_hooks) for n, m in pipe.components.items() if n in hooks} == hooks


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")
def test_a_child_forked_after_a_call_calls_with_its_own_fault_counts(saved):
    """A pre-fork server: a warm-up call in the parent, then calls in a child, whose fault counters start at 0."""
    pipe = load(saved["sd"])
    with attach(pipe, HookPolicy.preset("lowest-peak")) as attachment:
        pipe(**call_kwargs("sd"))

        def child() -> list[Any]:
            torch.set_num_threads(1)  # torch's OpenMP pool does not survive a fork (a plain pipeline hangs too)
            images = [pipe(**call_kwargs("sd", seed=n)).images for n in range(2)]
            mine = [r.release for r in attachment.reports if r.route == "done_components_release"]  # the child's run
            return [len(images), *[(r.status, r.faults_since_previous) for r in mine]]

        got = in_child(child)
    assert "error" not in got, got
    calls, first, second = got["ok"]
    assert calls == 2
    assert first == ("executed", None)  # the parent's mark is not the child's: unavailable, not negative
    status, since = second
    assert status == "executed"
    assert since is not None
    assert (since.since, since.minor_faults >= 0, since.major_faults >= 0) == ("before_transformer", True, True)


def cached_pages(path: Path) -> int:
    """How many pages of ``path`` are in the page cache (``mincore`` on a mapping that reads nothing)."""
    import ctypes
    import mmap

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype, libc.mmap.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                                             ctypes.c_int, ctypes.c_int, ctypes.c_long]  # fmt: skip
    size = path.stat().st_size
    pages = (ctypes.c_ubyte * -(-size // mmap.PAGESIZE))()
    with open(path, "rb") as file:
        address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, file.fileno(), 0)
        try:
            assert libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(size), pages) == 0, ctypes.get_errno()
        finally:
            libc.munmap(ctypes.c_void_p(address), ctypes.c_size_t(size))
    return sum(page & 1 for page in pages)


def test_evict_takes_the_dropped_pages_out_of_the_page_cache_and_the_report_says_what_left_the_cgroup(own_copy):
    (path,) = (own_copy / "text_encoder").glob("*.safetensors")
    os.sync()  # the copy's pages are written back: the kernel evicts clean pages only, as weights files' are
    evict = {"name": "release_done_components", "options": {"evict": True}}
    policies = {"keep": GIVE_BACK, "evict": {**GIVE_BACK, "boundaries": {
        **GIVE_BACK["boundaries"], "before_transformer": {"actions": [evict]}}}}  # fmt: skip
    cached = {}
    for name, policy in policies.items():
        pipe = load(own_copy)
        with attach(pipe, HookPolicy.from_mapping(policy)) as attachment:
            pipe(**call_kwargs("sd"))
            cached[name] = cached_pages(path)
        (report,) = [r.release for r in attachment.reports]
        assert report.status == "executed"
        charged = report.host_before.cgroup_memory_bytes, report.host_after.cgroup_memory_bytes
        assert report.cgroup_released_bytes == (None if None in charged else charged[0] - charged[1])
        assert ("evicted from the page cache" in report.components[0].detail) == (name == "evict")
        del pipe
        gc.collect()
    assert cached["keep"] > 0  # dropped from the process, still in the page cache
    assert cached["evict"] < cached["keep"]


@pytest.mark.parametrize("stray", ["empty", "garbage", "folder", "fifo"])
def test_a_stray_file_beside_the_weights_file_is_never_read(own_copy, stray):
    pipe = load(own_copy)
    held = hold_copies(pipe.text_encoder)
    path = own_copy / "text_encoder" / "partial.safetensors"  # a cut download, or a folder or FIFO of that name
    if stray == "folder":
        path.mkdir()
    elif stray == "fifo":
        os.mkfifo(path)  # opening it would wait for a writer
    else:
        path.write_bytes(b"" if stray == "empty" else b"\x07not safetensors")
    with attach(pipe, HookPolicy.from_mapping(STABLE)) as attachment:
        pipe(**call_kwargs("sd"))
        pipe(**call_kwargs("sd", seed=1))
    first, second = [r.release.components[0] for r in attachment.reports]
    assert (first.outcome, first.replaced_bytes) == ("released", held)
    assert second.outcome == "released"


def test_a_weights_file_that_cannot_be_read_is_named_once_and_never_fails_a_call(own_copy, monkeypatch):
    from ddo_hooks.release import file_copies

    pipe = load(own_copy)
    hold_copies(pipe.text_encoder)  # copies in memory: the pipeline does not read the file any more
    (weights,) = (own_copy / "text_encoder").glob("*.safetensors")
    weights.write_bytes(b"\x07cut off")  # a download cut short put in its place
    loads = []
    load_one = file_copies.load
    monkeypatch.setattr(file_copies, "load", lambda path: loads.append(path) or load_one(path))
    with attach(pipe, HookPolicy.from_mapping(STABLE)) as attachment:
        images = [pipe(**call_kwargs("sd", seed=n)).images for n in range(2)]
    assert len(images) == 2
    assert loads == [str(weights)]  # read once, then remembered
    for report in attachment.reports:
        (component,) = report.release.components
        assert (component.outcome, component.reason) == ("left", "not_file_backed")
        assert f"{weights} cannot be read as a safetensors file" in component.detail


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_view_of_a_file_deleted_or_replaced_since_the_load_is_still_given_back_and_says_so(own_copy, how):
    plain = load(own_copy)(**call_kwargs("sd")).images
    pipe = load(own_copy)
    (path,) = (own_copy / "text_encoder").glob("*.safetensors")
    if how == "deleted":
        path.unlink()
    else:
        shutil.copy(path, own_copy / "new.safetensors")
        os.replace(own_copy / "new.safetensors", path)  # as a new download over the old one
    with attach(pipe, HookPolicy.from_mapping(GIVE_BACK)) as attachment:
        got = [pipe(**call_kwargs("sd")).images for _ in range(2)]
    assert all(torch.equal(image, plain) for image in got)  # the old file's pages came back
    for report in attachment.reports:
        (component,) = report.release.components
        assert (component.outcome, component.reason) == ("released", None)
        assert "its weights file was deleted or replaced since it was loaded" in component.detail


def bounded_child(work: Any) -> dict[str, Any]:
    """:func:`in_child`, the child's address space capped 2 GiB above what it maps at the fork: a read without
    bound fails there with a MemoryError instead of taking the machine's memory."""
    import resource

    def capped() -> Any:
        with open("/proc/self/statm") as statm:
            mapped = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (mapped + (2 << 30), mapped + (2 << 30)))
        torch.set_num_threads(1)  # torch's OpenMP pool does not survive a fork
        return work()

    return in_child(capped)


@pytest.mark.parametrize("index", ["fifo", "dev_zero", "too_large"])
def test_an_index_that_is_not_a_small_regular_file_is_never_read_and_is_named(own_copy, index):
    # A FIFO of the index's name hung every call of plain lowest-peak (a text encoder holding copies) and attach()
    # with stable_files; a link to /dev/zero was read until memory ran out.
    from ddo_hooks.release.weights_files import MAX_INDEX_BYTES

    pipes = {"plain": load(own_copy), "stable": load(own_copy)}  # loaded first: the load itself reads the index
    for pipe in pipes.values():
        hold_copies(pipe.text_encoder)
    path = own_copy / "text_encoder" / "model.safetensors.index.json"
    if index == "fifo":
        os.mkfifo(path)  # opening it for reading waits for a writer
        why = "is not a regular file (a FIFO)"
    elif index == "dev_zero":
        os.symlink("/dev/zero", path)  # reads without end
        why = "is not a regular file (a character device)"
    else:
        with open(path, "wb") as file:
            file.truncate(MAX_INDEX_BYTES + 1)  # sparse: no disk
        why = f"holds {MAX_INDEX_BYTES + 1:,} bytes, more than an index may ({MAX_INDEX_BYTES:,})"
    policies = {"plain": HookPolicy.preset("lowest-peak"), "stable": HookPolicy.from_mapping(STABLE)}

    def calls() -> dict[str, tuple[str, str | None, str]]:
        found = {}
        for name, pipe in pipes.items():
            with attach(pipe, policies[name]) as attachment:  # stable_files: attach notes the files
                pipe(**call_kwargs("sd", steps=1))
            (report,) = [r.release for r in attachment.reports if r.route == "done_components_release"]
            (component,) = report.components
            found[name] = (component.outcome, component.reason, component.detail)
        return found

    got = bounded_child(calls)
    assert "error" not in got, got
    expected = ("left", "not_file_backed", f"text_encoder's index {path} {why}: it is not read")
    assert got["ok"] == {"plain": expected, "stable": expected}


LATENCY = {"version": 1, "boundaries": {
    "before_transformer": {"actions": ["stage_done_components"]}, "before_vae": {"enabled": False},
    "after_call": {"idle": "2s", "actions": [{"name": "release_done_components", "options": {"stable_files": True}}]},
}}  # fmt: skip
"""lowest-latency's shape, with the files declared stable: copies freed once the pipeline has been idle."""


def test_a_file_rewritten_after_a_deferred_give_back_fails_the_next_call_before_any_component_runs(own_copy):
    # The check ran only at give-back, staging and copy-back: after the encoders of the call had read the new
    # bytes. The second call made another image, and the error only landed in a deferred action_failed report.
    from support.fakes import FakeScheduler

    from ddo_hooks.hooks.idle import use_scheduler

    pipe = load(own_copy)
    hold_copies(pipe.text_encoder)
    ran = []
    pipe.text_encoder.register_forward_pre_hook(lambda module, args: ran.append(1))
    clock = FakeScheduler()
    with use_scheduler(clock):
        attachment = attach(pipe, HookPolicy.from_mapping(LATENCY))
        first = pipe(**call_kwargs("sd")).images
        clock.advance(5)  # idle: the copies are pointed back at the files and freed
        assert in_files(pipe.text_encoder)
        rewrite_in_place(own_copy, "text_encoder")
        ran.clear()
        expected = r"^StableDiffusionPipeline did not run this call: text_encoder's weights read .*model\.safetensors"
        for _ in range(2):  # and the same again until the pipeline is loaded again
            with pytest.raises(WeightsFileChangedError, match=expected + r" \(rewritten.*load the pipeline again"):
                pipe(**call_kwargs("sd"))
            assert ran == []  # no component ran
            assert attachment.phase is Phase.IDLE
            clock.advance(5)
        with pytest.raises(WeightsFileChangedError, match="load the pipeline again"):
            attachment.detach()
    assert first.shape == (1, 3, 32, 32)
    refused = [r.body for r in attachment.reports if r.route == "phase_boundary_refusal"]
    assert [(r.call_index, r.boundary, r.reason) for r in refused if r.boundary == "before_transformer"] == [
        (2, "before_transformer", "not_reached"), (3, "before_transformer", "not_reached")]  # fmt: skip
    assert all("the call raised WeightsFileChangedError" in r.detail for r in refused if r.call_index > 1)


def test_a_file_truncated_under_rebound_weights_fails_the_next_call_instead_of_killing_the_process(own_copy):
    pipe = load(own_copy)
    hold_copies(pipe.text_encoder)
    (path,) = (own_copy / "text_encoder").glob("*.safetensors")

    def calls() -> list[str]:
        attachment = attach(pipe, HookPolicy.from_mapping(STABLE))
        pipe(**call_kwargs("sd", steps=1))  # its copies are freed: it reads the file from now on
        os.truncate(path, path.stat().st_size // 2)  # its views past the new end would raise SIGBUS when read
        failures = []
        for _ in range(2):
            try:
                pipe(**call_kwargs("sd", steps=1))
            except WeightsFileChangedError as e:
                failures.append(str(e))
        try:
            attachment.detach()
        except WeightsFileChangedError as e:
            failures.append(str(e))
        return failures

    got = bounded_child(calls)  # a regression kills the child only
    assert "error" not in got, got
    assert len(got["ok"]) == 3
    assert all(f"text_encoder's weights read {path} (rewritten in place since: it holds " in e for e in got["ok"])


def descriptors_of(path: Path) -> int:
    """How many of the process's descriptors are open on ``path`` (the file it names now, or one renamed over)."""
    target = os.path.realpath(path)
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            found += os.readlink(f"/proc/self/fd/{fd}").removesuffix(" (deleted)") == target
        except OSError:
            continue  # the listing's own descriptor, closed since
    return found


def test_a_new_file_renamed_over_a_rebound_one_is_no_change_since_the_views_read_the_old_one(own_copy):
    # The identity was the path's: detach() raised "the weights now hold other bytes" though the outputs had not
    # changed, the component stayed rebound, and every call of a later plain lowest-peak attachment raised too.
    plain = outputs(load(own_copy), "sd", 3)
    pipe = load(own_copy)
    hold_copies(pipe.text_encoder)
    (path,) = (own_copy / "text_encoder").glob("*.safetensors")
    with attach(pipe, HookPolicy.from_mapping(STABLE)):
        got = outputs(pipe, "sd", 1)  # its copies are freed: it reads the file's inode from now on
        assert in_files(pipe.text_encoder)
        replacement = path.with_name("new.tmp")
        shutil.copyfile(path, replacement)
        zero_weights(replacement)
        os.replace(replacement, path)  # a new download renamed over the old file: other bytes, another inode
        got.append(pipe(**call_kwargs("sd", seed=1)).images)
    assert not in_files(pipe.text_encoder)  # detach gave it its copies back, of the bytes it read
    with attach(pipe, HookPolicy.preset("lowest-peak")):
        got.append(pipe(**call_kwargs("sd", seed=2)).images)
    assert all(torch.equal(a, b) for a, b in zip(plain, got, strict=True))


def test_the_rebound_files_are_held_open_until_detach_or_until_the_component_is_collected(own_copy):
    (path,) = (own_copy / "text_encoder").glob("*.safetensors")
    for ending in ("detach", "collect"):
        pipe = load(own_copy)
        hold_copies(pipe.text_encoder)
        attachment = attach(pipe, HookPolicy.from_mapping(STABLE))
        assert descriptors_of(path) == 0
        pipe(**call_kwargs("sd", steps=1))
        assert descriptors_of(path) == 1  # the inode its views read, once
        pipe(**call_kwargs("sd", steps=1))
        assert descriptors_of(path) == 1
        if ending == "detach":
            attachment.detach()
        else:
            encoder = weakref.ref(pipe.text_encoder)
            del pipe
            gc.collect()
            assert encoder() is None  # the descriptor keeps nothing alive
            attachment.detach()
        assert descriptors_of(path) == 0


def rewrite_keeping_times(folder: Path, component: str) -> None:
    """:func:`rewrite_in_place`, then the file's times set back, as ``cp -p`` or ``rsync -t --inplace`` do."""
    (path,) = (folder / component).glob("*.safetensors")
    before = path.stat()
    rewrite_in_place(folder, component)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)


def test_a_rewrite_that_sets_the_modification_time_back_is_told_by_its_change_time(own_copy):
    # The identity was (device, inode, size, modification time): the rewrite went unnoticed and the next call
    # read the new bytes.
    pipe = load(own_copy)
    hold_copies(pipe.text_encoder)
    attachment = attach(pipe, HookPolicy.from_mapping(STABLE))
    pipe(**call_kwargs("sd"))
    assert in_files(pipe.text_encoder)
    rewrite_keeping_times(own_copy, "text_encoder")
    with pytest.raises(WeightsFileChangedError, match=r"\(rewritten in place since, or its attributes changed: its "
                       r"change time moved\).*load the pipeline again"):  # fmt: skip
        pipe(**call_kwargs("sd"))
    with pytest.raises(WeightsFileChangedError, match="change time moved"):
        attachment.detach()


def test_a_rewrite_after_a_new_hard_link_with_its_times_set_back_is_told_too(own_copy):
    # Issue 51 (A, high): the change time was compared only while the link count was what it was, so a backup
    # link (cp -al) before the rewrite hid it: the next call silently read the new bytes.
    pipe = load(own_copy)
    hold_copies(pipe.text_encoder)
    attachment = attach(pipe, HookPolicy.from_mapping(STABLE))
    pipe(**call_kwargs("sd"))
    (path,) = (own_copy / "text_encoder").glob("*.safetensors")
    os.link(path, path.with_name("backup.bak"))  # cp -al
    rewrite_keeping_times(own_copy, "text_encoder")
    with pytest.raises(WeightsFileChangedError, match=r"change time moved\).*load the pipeline again"):
        pipe(**call_kwargs("sd"))
    with pytest.raises(WeightsFileChangedError, match="change time moved"):
        attachment.detach()


def test_a_file_renamed_away_is_no_change_and_the_calls_go_on_reading_it(own_copy):
    # Issue 51 (A, low): a rename away was told as "the weights now hold other bytes", and every call raised.
    plain = outputs(load(own_copy), "sd", 2)
    pipe = load(own_copy)
    hold_copies(pipe.text_encoder)
    (path,) = (own_copy / "text_encoder").glob("*.safetensors")
    with attach(pipe, HookPolicy.from_mapping(STABLE)):
        got = outputs(pipe, "sd", 1)
        assert in_files(pipe.text_encoder)
        os.rename(path, path.with_name("model.bak"))
        shutil.copyfile(path.with_name("model.bak"), path)
        zero_weights(path)  # other bytes at the path: the views read the old inode
        got.append(pipe(**call_kwargs("sd", seed=1)).images)
    assert all(torch.equal(a, b) for a, b in zip(plain, got, strict=True))


def test_copies_that_differ_from_a_file_rewritten_since_attach_with_its_times_set_back_say_file_changed(own_copy):
    pipe = load(own_copy)
    hold_copies(pipe.text_encoder)
    with attach(pipe, HookPolicy.from_mapping(STABLE)) as attachment:  # attach notes the files' identities
        rewrite_keeping_times(own_copy, "text_encoder")
        pipe(**call_kwargs("sd"))
    (component,) = attachment.reports[0].release.components
    assert (component.outcome, component.reason) == ("left", "file_changed")  # not an edit of its copies
    assert not in_files(pipe.text_encoder)
