"""Repacking group offloading's pinned copies into power-of-two slabs: the decision, the refusals, the report.

Streams need CUDA, so the pipelines here are group-offloaded on the CPU and given the pinned copies
``use_stream=True`` makes through diffusers' own ``_init_cpu_param_dict``, pinned by the fake
allocator (``support.fakes.pin_like_streams``). The same code pins real memory in tests/gpu/test_repack_gpu.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import torch
from diffusers.hooks import apply_group_offloading
from support.fakes import FakeHostAllocator, pin_like_streams

from ddo_hooks import HookPolicy, attach, parse_report
from ddo_hooks._compat import diffusers as diffusers_compat
from ddo_hooks._compat import torch as torch_compat
from ddo_hooks.errors import InvalidArgumentError
from ddo_hooks.release import guard
from ddo_hooks.release import repack as repack_module
from ddo_hooks.release.allocator import use_backend
from ddo_hooks.release.pinned_copies import Left, inspect_component
from ddo_hooks.release.repack import repack_pinned_copies
from ddo_hooks.release.slabs import rounded_size
from ddo_hooks.testing.tiny_pipelines import build_pipeline, call_kwargs

CPU = torch.device("cpu")
LEVELS = {"leaf": {"offload_type": "leaf_level"}, "block": {"offload_type": "block_level", "num_blocks_per_group": 1}}


@pytest.fixture
def fake() -> Iterator[FakeHostAllocator]:
    with use_backend(FakeHostAllocator(cached_bytes=0, live_bytes=0)) as installed:
        yield installed


def offloaded(family: str, fake: FakeHostAllocator, level: str = "leaf", **pin: bool):
    """A tiny pipeline, every model component group-offloaded with the pinned copies streams make."""
    pipe = build_pipeline(family)
    for component in pipe.components.values():
        if isinstance(component, torch.nn.Module):
            apply_group_offloading(component, onload_device=CPU, **LEVELS[level])
            pin_like_streams(component, fake, **pin)
    return pipe


def images(pipe, family: str) -> torch.Tensor:
    return pipe(**call_kwargs(family), return_dict=False)[0]


def copies(module: torch.nn.Module) -> list[torch.Tensor]:
    return [t for g in diffusers_compat.offload_groups(module) for t in diffusers_compat.group_cpu_sources(g).values()]


@pytest.fixture(scope="module")
def references() -> dict[str, torch.Tensor]:
    """Each family's output without offloading (built once: the tests only compare against it)."""
    return {family: images(build_pipeline(family), family) for family in ("flux", "sd", "wan")}


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("family", ["flux", "sd", "wan"])
def test_a_repack_moves_every_copy_into_slabs_and_the_outputs_stay_bitwise_equal(
    family, level, fake: FakeHostAllocator, references
):
    pipe = offloaded(family, fake, level)
    rounded_before, owned_before = fake.live_bytes, fake.live_bytes + fake.cached_bytes
    report = repack_pinned_copies(pipe)
    repack = report.repack
    assert parse_report(report.model_dump_json()) == parse_report(report.model_dump(mode="json")) == report
    assert repack.status == "executed"
    assert {c.status for c in repack.components} <= {"repacked", "skipped"}
    assert all(c.reason == "no_gain" for c in repack.components if c.status == "skipped")
    left = sum(c.pinned_bytes_before for c in repack.components if c.status == "skipped")
    assert repack.pinned_bytes_before + left == rounded_before
    # The rounded blocks were given back: the allocator owns the slabs and what was left as it was.
    assert (fake.live_bytes, fake.cached_bytes) == (repack.pinned_bytes_after + left, 0)
    # diffusers' block level pins some weights twice (a group's modules and its own parameter list), and
    # the first copies wait in the cache: the releases give those back too.
    assert repack.allocator_bytes_delta == owned_before - fake.live_bytes
    assert [r.status for r in repack.releases] == ["executed"] * sum(len(c.slabs) for c in repack.components)
    for _ in range(2):
        assert torch.equal(images(pipe, family), references[family])


def test_each_component_owns_its_slabs_and_its_weights_sit_on_them(fake: FakeHostAllocator):
    pipe = offloaded("flux", fake)
    report = repack_pinned_copies(pipe, components=["transformer"]).repack
    (transformer,) = report.components
    assert transformer.status == "repacked"
    storages = {t.untyped_storage().data_ptr() for t in copies(pipe.transformer)}
    assert sorted(fake.blocks[s] for s in storages) == sorted(transformer.slabs)
    assert transformer.tensor_bytes <= transformer.pinned_bytes_after < transformer.pinned_bytes_before
    assert {p.untyped_storage().data_ptr() for p in pipe.transformer.parameters()} <= storages


def test_while_repacking_the_peak_is_at_most_one_components_rounded_copies_above_the_start(fake: FakeHostAllocator):
    pipe = offloaded("flux", fake)
    start = fake.live_bytes
    owned: list[int] = []
    pin = fake.pinned_empty

    def pinned_empty(nbytes: int) -> torch.Tensor:
        slab = pin(nbytes)
        owned.append(fake.live_bytes + fake.cached_bytes)
        return slab

    fake.pinned_empty = pinned_empty
    report = repack_pinned_copies(pipe).repack
    largest = max(c.pinned_bytes_before for c in report.components)
    assert max(owned) - start <= largest


def test_a_weight_tied_across_groups_keeps_one_copy_in_one_place(fake: FakeHostAllocator):
    # T5's shared embedding at leaf level: the same weight in two groups, pinned once (pin_memory() of a
    # pinned tensor is that tensor), so two copies share one storage.
    embedding, head = torch.nn.Embedding(48, 32), torch.nn.Linear(32, 48, bias=False)
    head.weight = embedding.weight
    module = torch.nn.Sequential(embedding, head, torch.nn.Linear(48, 16))
    tokens = torch.arange(8)
    expected = module(tokens)
    apply_group_offloading(module, onload_device=CPU, offload_type="leaf_level")
    pin_like_streams(module, fake)
    tied = [t for t in copies(module) if t.shape == (48, 32)]
    assert len(tied) == 2
    assert tied[0].untyped_storage().data_ptr() == tied[1].untyped_storage().data_ptr()
    (result,) = repack_pinned_copies(module).repack.components
    assert (result.status, result.tensors, result.tensor_bytes) == ("repacked", 3, (48 * 32 + 48 * 16 + 16) * 4)
    moved = [t for t in copies(module) if t.shape == (48, 32)]
    assert moved[0] is moved[1]
    assert embedding.weight.data_ptr() == moved[0].data_ptr() != tied[0].data_ptr()
    assert torch.equal(module(tokens), expected)


def test_a_second_repack_finds_the_copies_packed_already(fake: FakeHostAllocator):
    pipe = offloaded("sd", fake)
    repack_pinned_copies(pipe)
    again = repack_pinned_copies(pipe).repack
    assert again.noop_reason == "nothing_to_repack"
    assert {c.reason for c in again.components if c.component != "vae"} == {"already_packed"}


# -- what is left as it was, and why ---------------------------------------------------------------


def only(pipe, name: str, fake: FakeHostAllocator):
    """Repack one component; return its result and whether its copies are the very tensors they were."""
    before = [id(t) for t in copies(getattr(pipe, name))]
    owned = (fake.live_bytes, fake.cached_bytes)
    (result,) = repack_pinned_copies(pipe, components=[name]).repack.components
    untouched = [id(t) for t in copies(getattr(pipe, name))] == before and (fake.live_bytes, fake.cached_bytes) == owned
    return result, untouched


def test_copies_that_are_not_pinned_are_skipped(fake: FakeHostAllocator):
    pipe = offloaded("flux", fake, low_cpu_mem_usage=True)
    result, untouched = only(pipe, "transformer", fake)
    assert (result.status, result.reason, untouched) == ("skipped", "not_pinned", True)
    assert "low_cpu_mem_usage=True" in result.detail


def test_a_component_without_streams_or_without_offloading_is_skipped(fake: FakeHostAllocator):
    pipe = build_pipeline("sd")
    apply_group_offloading(pipe.unet, onload_device=CPU, offload_type="leaf_level")
    report = repack_pinned_copies(pipe).repack
    reasons = {c.component: c.reason for c in report.components}
    assert reasons == {"vae": "not_group_offloaded", "text_encoder": "not_group_offloaded", "unet": "no_pinned_copies"}
    assert (report.status, report.noop_reason, report.before) == ("noop", "nothing_to_repack", None)


def test_a_component_offloaded_to_disk_is_refused(fake: FakeHostAllocator, tmp_path):
    pipe = build_pipeline("sd")
    apply_group_offloading(pipe.unet, onload_device=CPU, offload_type="leaf_level", offload_to_disk_path=str(tmp_path))
    (result,) = repack_pinned_copies(pipe, components=["unet"]).repack.components
    assert (result.status, result.reason) == ("refused", "disk_offload")


def test_a_tensor_subclass_is_refused_and_nothing_changes(fake: FakeHostAllocator):
    pipe = offloaded("flux", fake)
    group = diffusers_compat.offload_groups(pipe.transformer)[0]
    key, copy = next(iter(diffusers_compat.group_cpu_sources(group).items()))
    diffusers_compat.set_group_cpu_source(group, key, torch.nn.Parameter(copy, requires_grad=False))
    result, untouched = only(pipe, "transformer", fake)
    assert (result.status, result.reason, untouched) == ("refused", "unsupported_tensor", True)
    assert "Parameter (a tensor subclass" in result.detail


def test_an_onloaded_group_is_refused(fake: FakeHostAllocator):
    pipe = offloaded("flux", fake)
    weight = next(pipe.transformer.parameters())
    weight.data = weight.data.clone()  # as if onloaded to its device: no longer on its pinned copy
    result, untouched = only(pipe, "transformer", fake)
    assert (result.status, result.reason, untouched) == ("refused", "onloaded", True)
    assert "repack before the first call, or between calls" in result.detail


def test_a_copy_held_elsewhere_is_refused_because_a_repack_could_not_free_it(fake: FakeHostAllocator):
    pipe = offloaded("flux", fake)
    kept = copies(pipe.text_encoder)[3][:1]  # a caller's view of one pinned copy
    result, untouched = only(pipe, "text_encoder", fake)
    assert (result.status, result.reason, untouched) == ("refused", "shared_storage", True)
    assert result.detail.startswith("1 other tensor(s) hold the storage of a pinned copy in text_encoder")
    del kept


def test_a_failed_pin_leaves_the_component_as_it_was(fake: FakeHostAllocator):
    pipe = offloaded("flux", fake)
    fake.pin_error = RuntimeError("CUDA error: out of memory\nmore lines")
    result, untouched = only(pipe, "transformer", fake)
    assert (result.status, result.reason, untouched) == ("refused", "pin_failed", True)
    assert result.detail.endswith("failed: CUDA error: out of memory")
    assert torch.equal(images(pipe, "flux"), images(build_pipeline("flux"), "flux"))


def small_slabs(fake: FakeHostAllocator, monkeypatch: pytest.MonkeyPatch) -> torch.nn.Sequential:
    """Twelve copies of 4,900 bytes (8 KiB each, rounded), repacked into slabs of at most 16 KiB."""
    monkeypatch.setattr(repack_module, "REPACK_SLAB_BYTES", 16 * 1024)
    module = torch.nn.Sequential(*[torch.nn.Linear(35, 35, bias=False) for _ in range(12)])
    apply_group_offloading(module, onload_device=CPU, offload_type="leaf_level")
    pin_like_streams(module, fake)
    return module


def test_a_repack_holds_one_slab_at_a_time_beside_the_copies_it_has_not_moved(fake, monkeypatch):
    module = small_slabs(fake, monkeypatch)
    before, fake.owned_peak = fake.live_bytes, fake.live_bytes
    (result,) = repack_pinned_copies(module).repack.components
    assert result.status == "repacked"
    assert len(result.slabs) >= 4
    # each slab's rounded blocks are given back before the next is pinned: never all the slabs beside them
    assert fake.owned_peak == before + max(result.slabs) < before + sum(result.slabs)
    assert (fake.live_bytes, fake.cached_bytes) == (sum(result.slabs), 0)


def test_a_pin_that_fails_after_some_slabs_leaves_the_rest_in_their_rounded_blocks(fake, monkeypatch):
    module = small_slabs(fake, monkeypatch)
    x = torch.randn(3, 35)
    with torch.no_grad():
        expected = module(x)
    fake.pin_error, fake.pins_before_error = RuntimeError("CUDA error: out of memory\nmore lines"), 2
    (result,) = repack_pinned_copies(module).repack.components
    assert (result.status, result.reason, result.slabs) == ("repacked", None, (16384, 16384))
    assert result.detail == (
        "6 pinned copies of Sequential moved into 2 slabs of 6; pinning a slab of 16,384 bytes for Sequential "
        "failed: CUDA error: out of memory: the other 6 keep their rounded blocks"
    )
    assert result.pinned_bytes_after == fake.live_bytes == 2 * 16384 + 6 * 8192
    with torch.no_grad():
        assert torch.equal(module(x), expected)


def test_copies_that_already_own_their_exact_size_are_not_worth_a_repack(fake: FakeHostAllocator):
    module = torch.nn.Sequential(torch.nn.Linear(64, 64, bias=False))  # one 16 KiB copy: a power of two
    apply_group_offloading(module, onload_device=CPU, offload_type="leaf_level")
    pin_like_streams(module, fake)
    (result,) = repack_pinned_copies(module).repack.components
    assert (result.component, result.status, result.reason) == ("Sequential", "skipped", "no_gain")
    assert result.pinned_bytes_before == result.tensor_bytes == 16384


def test_without_a_cuda_host_allocator_nothing_is_looked_at(fake: FakeHostAllocator):
    fake.entry = "absent"
    report = repack_pinned_copies(offloaded("sd", fake)).repack
    assert (report.noop_reason, report.components) == ("unsupported_build", ())


def test_when_a_release_is_refused_the_rounded_blocks_stay_cached_for_the_next_boundary(fake: FakeHostAllocator):
    pipe = offloaded("sd", fake)
    with guard.section("loading", "another_loader"):
        report = repack_pinned_copies(pipe).repack
    assert report.releases == ()
    assert "another_loader is loading components" in report.release_refused
    assert fake.cached_bytes == report.pinned_bytes_before


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"phase": "Before!"}, r"phase='Before!' must be a label such as 'attach'"),
        ({"release": "yes"}, r"release='yes' must be True or False"),
        ({"device": "gpu"}, r"device='gpu' is not a valid device; use 'cuda', 'cuda:N'"),
    ],
)
def test_bad_options_are_refused_before_anything_is_looked_at(options, message, fake: FakeHostAllocator):
    with pytest.raises(InvalidArgumentError, match=message):
        repack_pinned_copies(torch.nn.Linear(2, 2), **options)
    assert fake.calls == []


@pytest.mark.parametrize(
    ("target", "names", "message"),
    [
        (42, None, "needs a diffusers pipeline or a torch module, got int"),
        ("pipe", ["unet", "nope"], "StableDiffusionPipeline has no model component 'nope'; its model components: "),
        ("pipe", ["tokenizer"], "has no model component 'tokenizer'"),
        ("module", ["unet"], "components= names a pipeline's components; a lone module has none"),
    ],
)
def test_bad_arguments_are_refused_with_the_fix(target, names, message, fake: FakeHostAllocator):
    pipe = build_pipeline("sd")
    target = {"pipe": pipe, "module": pipe.unet}.get(target, target)
    with pytest.raises(InvalidArgumentError, match=message):
        repack_pinned_copies(target, components=names)


# -- at attach --------------------------------------------------------------------------------------


def test_attach_repacks_by_default_and_records_the_report(fake: FakeHostAllocator):
    pipe = offloaded("flux", fake)
    owned = fake.live_bytes
    with attach(pipe) as attachment:
        report = attachment.repack_report
        assert report.repack.phase == "attach"
        assert attachment.reports[0] is report
        assert attachment.tracker.components()[0] == "pinned_copy_repack"
        assert fake.live_bytes == owned - report.repack.allocator_bytes_delta
        pipe(**call_kwargs("flux"))
    assert attachment.repack_report.repack.status == "executed"


@pytest.mark.parametrize("policy", [{"pinned_copies": {"repack": False}}, {"enabled": False}])
def test_a_policy_can_keep_the_copies_as_diffusers_made_them(policy, fake: FakeHostAllocator):
    pipe = offloaded("sd", fake)
    before = [id(t) for t in copies(pipe.unet)]
    with attach(pipe, HookPolicy.from_mapping({"version": 1, **policy})) as attachment:
        assert attachment.repack_report is None
        assert attachment.reports == []
    assert [id(t) for t in copies(pipe.unet)] == before


def test_a_repack_that_finds_nothing_is_not_recorded(fake: FakeHostAllocator):
    pipe = build_pipeline("sd")
    with attach(pipe) as attachment:
        assert attachment.repack_report.repack.noop_reason == "nothing_to_repack"
        assert attachment.reports == []


def test_a_dropped_repacked_component_gives_its_slabs_back_at_the_next_boundary(fake: FakeHostAllocator):
    pipe = offloaded("flux", fake)
    with attach(pipe, HookPolicy.preset("lowest-peak")) as attachment:
        slabs = {c.component: sum(c.slabs) for c in attachment.repack_report.repack.components}
        owned = fake.live_bytes
        attachment.drop("text_encoder", "text_encoder_2")
        attachment.boundary("after_call")
        assert fake.live_bytes == owned - slabs["text_encoder"] - slabs["text_encoder_2"]
        assert fake.cached_bytes == 0


def test_after_detach_the_repacked_pipeline_keeps_working(fake: FakeHostAllocator, references):
    pipe = offloaded("flux", fake)
    attach(pipe).detach()
    assert all(fake.is_pinned(t) for t in copies(pipe.transformer))  # the slabs stay: they are the copies now
    assert torch.equal(images(pipe, "flux"), references["flux"])


def test_a_report_repacked_to_more_than_its_slabs_or_without_a_reason_is_refused():
    from ddo_hooks.reports.repack import ComponentRepack

    good = {"component": "t", "status": "repacked", "reason": None, "detail": "", "groups": 1, "tensors": 1,
            "tensor_bytes": 3000, "pinned_bytes_before": 4096, "pinned_bytes_after": 4096, "slabs": [4096],
            "seconds": 0.0}  # fmt: skip
    assert ComponentRepack.model_validate(good).slabs == (4096,)
    for change, message in [
        ({"slabs": [3000], "pinned_bytes_after": 3000}, "each a power of two"),
        ({"pinned_bytes_after": 2048}, r"pinned_bytes_after must be the slabs' sum, .* \(4096 to 8192\)"),
        ({"pinned_bytes_after": 8193}, r"\(4096 to 8192\)"),
        ({"status": "skipped"}, "reason must be null exactly when status is 'repacked'"),
        ({"status": "refused", "reason": "no_gain", "slabs": [], "pinned_bytes_after": 4096}, "refused component"),
        ({"status": "skipped", "reason": "no_gain"}, "a component left as it was has no slabs"),
    ]:
        with pytest.raises(ValueError, match=message):
            ComponentRepack.model_validate({**good, **change})
    assert rounded_size(3000) == 4096


def test_summarize_and_plot_show_the_repack_and_which_memory(fake: FakeHostAllocator, tmp_path, capsys):
    from ddo_hooks.cli import main
    from ddo_hooks.cli.plot_points import release_points
    from ddo_hooks.cli.summarize import collect_runs
    from ddo_hooks.reports.files import load_report_file

    pipe = offloaded("sd", fake)
    with attach(pipe, HookPolicy.preset("lowest-peak")) as attachment:
        pipe(**call_kwargs("sd"))
    saved = attachment.tracker.write_jsonl(tmp_path / "run.jsonl")
    assert main(["summarize", str(saved)]) == 0
    out = capsys.readouterr().out
    repack = attachment.repack_report.repack
    row = next(line for line in out.splitlines() if re.match(r"attach +attach/repack +executed", line))
    assert f"{repack.allocator_bytes_delta / 1024:.1f} KiB" in row  # the bytes the repack gave back
    assert "which memory, after each boundary" in out
    assert re.search(r"^call +boundary +RSS", out, re.MULTILINE)
    (run,) = collect_runs([load_report_file(saved)])[0]
    points = release_points(run)
    assert (points[0].call, points[0].boundary, points[0].row.delta) == (0, "attach", repack.allocator_bytes_delta)


def test_a_release_that_fails_at_attach_propagates_and_leaves_no_hook_behind(fake: FakeHostAllocator):
    from ddo_hooks.errors import HostCacheReleaseError
    from ddo_hooks.hooks.signals import HOOK_NAMES

    pipe = offloaded("sd", fake)
    fake.release_error = RuntimeError("cudaFreeHost failed")
    with pytest.raises(HostCacheReleaseError, match="cudaFreeHost failed"):
        attach(pipe)
    registries = [m._diffusers_hook for m in pipe.unet.modules() if hasattr(m, "_diffusers_hook")]
    assert registries  # group offloading's own hooks stay
    assert not [name for r in registries for name in HOOK_NAMES.values() if r.get_hook(name) is not None]
    fake.release_error = None
    attach(pipe).detach()  # and it can be attached again


@pytest.mark.skipif(torch_compat.is_cuda_build(), reason="what a build of torch without CUDA does")
def test_a_cpu_build_never_asks_a_tensor_whether_it_is_pinned(monkeypatch):
    """On a CPU build ``Tensor.is_pinned()`` may raise (older torch); the real backend answers ``False`` unasked.

    The pipeline's components keep the CPU copies ``use_stream=True`` makes; the real backend is in use (no
    fake), and every tensor's ``is_pinned`` records the call and raises, as on such a build.
    """
    pipe = offloaded("flux", FakeHostAllocator())  # the fake only makes the copies; it is not the backend
    asked: list[tuple[int, ...]] = []

    def is_pinned(self: torch.Tensor, *args: object) -> bool:
        asked.append(tuple(self.shape))
        raise RuntimeError("is_pinned() on a build of torch without CUDA")

    monkeypatch.setattr(torch.Tensor, "is_pinned", is_pinned)
    with pytest.raises(Left) as left:  # where the backend is asked about each copy
        inspect_component("transformer", pipe.transformer)
    assert (left.value.status, left.value.reason) == ("skipped", "not_pinned")
    with attach(pipe) as attachment:  # the repack at attach, and a real release at every boundary
        pipe(**call_kwargs("flux"))
    assert attachment.repack_report.repack.noop_reason == "unsupported_build"
    assert [(r.release.status, r.release.noop_reason) for r in attachment.reports] == [
        ("noop", "unsupported_build")
    ] * 3
    assert asked == []
