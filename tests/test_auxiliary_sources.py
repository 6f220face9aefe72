"""Bounded auxiliary CPU source detachment: every rule of issue 4, on real components and loaders.

The components are the tiny Flux pipeline's transformer (with a buffer, a non-contiguous weight
and a frozen bias added) and its T5 encoder (whose two embeddings are tied), loaded through a
real loader that leaves views behind, under real diffusers group offloading on the CPU:

* ``torch_mmap``: ``torch.save`` of the state dict, ``torch.load(mmap=True)``, ``assign=True``;
  every tensor's storage is a slice of one file mapping (tied weights share one slice);
* ``safetensors``: ``save_file``/``load_file``, ``assign=True``; slices of one mapping, and the
  buffers are autograd views (``_base`` set), which keep the mapping alive through ``.data``;
* ``flat_buffer``: one flat byte buffer that every tensor is a view of.
"""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest
import safetensors.torch
import torch
from diffusers.hooks import HookRegistry

from ddo_hooks import InvalidArgumentError, parse_report
from ddo_hooks.offload import apply_offload_runtime
from ddo_hooks.offload.runtimes import (
    OffloadRuntime,
    PayloadInterval,
    get_offload_runtime,
    register_offload_runtime,
    unregister_offload_runtime,
)
from ddo_hooks.reports.auxiliary_sources import AuxiliarySourceDetach
from ddo_hooks.testing.tiny_pipelines import build_pipeline, call_kwargs

LOADERS = ("torch_mmap", "safetensors", "flat_buffer")
COMPONENTS = ("transformer", "text_encoder_2")
TIED = ("text_encoder_2.shared.weight", "text_encoder_2.encoder.embed_tokens.weight")
PROC_MAPS = Path("/proc/self/smaps")
needs_proc = pytest.mark.skipif(not PROC_MAPS.exists(), reason="reads the process's file mappings (Linux)")


# --- loaders -------------------------------------------------------------------------------------


def _unique(state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Drop keys that alias an earlier key (tied weights); return the kept tensors and the aliases."""
    kept, aliases, seen = {}, {}, {}
    for key, tensor in state.items():
        identity = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if identity in seen:
            aliases[key] = seen[identity]
        else:
            seen[identity], kept[key] = key, tensor
    return kept, aliases


class Loader:
    """Loads modules through one loader kind and remembers what shows whether its storage lives."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind, self.tmp_path, self.paths, self.refs = kind, tmp_path, [], []

    def load(self, name: str, module: torch.nn.Module, keep: str | None = None) -> torch.Tensor | None:
        state = module.state_dict()
        kept, aliases = _unique(state)
        if self.kind == "torch_mmap":  # torch.save keeps the sharing of tied weights itself
            self.paths.append(self.tmp_path / f"{name}.pt")
            torch.save(state, self.paths[-1])
            loaded, aliases = torch.load(self.paths[-1], mmap=True, weights_only=True), {}
        elif self.kind == "safetensors":  # save_file refuses shared tensors: tie them again after loading
            self.paths.append(self.tmp_path / f"{name}.safetensors")
            safetensors.torch.save_file({k: v.contiguous() for k, v in kept.items()}, self.paths[-1])
            loaded = safetensors.torch.load_file(self.paths[-1])
        else:  # one flat byte buffer, 64-byte aligned views into it
            sizes = [-(-v.numel() * v.element_size() // 64) * 64 for v in kept.values()]
            flat = torch.empty(sum(sizes), dtype=torch.uint8)
            loaded, offsets = {}, [sum(sizes[:i]) for i in range(len(sizes))]
            for (key, value), offset in zip(kept.items(), offsets, strict=True):
                raw = flat[offset : offset + value.numel() * value.element_size()]
                loaded[key] = raw.view(value.dtype).view(value.shape).copy_(value)
            self.refs.append(weakref.ref(flat.untyped_storage()))
            del flat, raw
        loaded.update({key: loaded[target] for key, target in aliases.items()})
        module.load_state_dict(loaded, assign=True)
        return loaded[keep] if keep else None

    def storage_alive(self) -> bool:
        gc.collect()
        if self.kind == "flat_buffer":
            return any(ref() is not None for ref in self.refs)
        return any(mapped(path)[0] for path in self.paths)


def mapped(path: Path) -> tuple[int, int]:
    """How many mappings of ``path`` this process has, and their resident bytes."""
    count = rss = 0
    current = False
    for line in PROC_MAPS.read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and not head[0].endswith(":"):
            current = line.rstrip().endswith(str(path))
            count += current
        elif current and line.startswith("Rss:"):
            rss += int(head[1]) * 1024
    return count, rss


def loaded_pipeline(kind: str, tmp_path: Path, keep: str | None = None, runtime: str = "diffusers_group_offload"):
    """The tiny Flux pipeline, its transformer and T5 encoder loaded through ``kind``, group-offloaded."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    pipe = build_pipeline("flux")
    transformer = pipe.transformer
    transformer.norm_out.register_buffer("ddo_scale", torch.linspace(0.5, 1.5, 32))
    weight = transformer.proj_out.weight
    transformer.proj_out.weight = torch.nn.Parameter(weight.detach().t().contiguous().t())  # non-contiguous
    transformer.x_embedder.bias.requires_grad_(False)
    loader = Loader(kind, tmp_path)
    escaped = loader.load("transformer", transformer, keep)
    loader.load("text_encoder_2", pipe.text_encoder_2)
    result = apply_offload_runtime(pipe, onload_device="cpu", components=list(COMPONENTS), runtime=runtime)
    return pipe, result, loader, escaped


# --- snapshots -----------------------------------------------------------------------------------


def registered(pipe):
    for component in COMPONENTS:
        module = getattr(pipe, component)
        for name, tensor in (
            *module.named_parameters(remove_duplicate=False),
            *module.named_buffers(remove_duplicate=False),
        ):
            yield f"{component}.{name}", tensor


def snapshot(pipe) -> dict:
    """Every registered tensor: the object, its storage, stride, metadata and raw bytes."""
    shot = {}
    for name, t in registered(pipe):
        dense = t.layout == torch.strided and t.device.type == "cpu" and not t.is_quantized
        shot[name] = {
            "object": t,
            "storage": t.untyped_storage().data_ptr() if dense else None,
            "stride": t.stride() if dense else None,
            "meta": (type(t), t.dtype, t.device, tuple(t.shape), t.requires_grad),
            "bytes": t.detach().reshape(-1).contiguous().view(torch.uint8).clone() if dense else None,
        }
    return shot


def assert_same_values(before: dict, after: dict) -> None:
    assert before.keys() == after.keys()
    for name in before:
        assert after[name]["object"] is before[name]["object"], name
        assert after[name]["meta"] == before[name]["meta"], name
        assert after[name]["stride"] == before[name]["stride"], name
        b, a = before[name]["bytes"], after[name]["bytes"]
        assert (a is None and b is None) or torch.equal(a, b), name


def assert_unchanged(before: dict, after: dict) -> None:
    assert_same_values(before, after)
    for name in before:
        assert after[name]["storage"] == before[name]["storage"], name


def refused(pipe, result, loader: Loader, reason: str, **kwargs: object) -> AuxiliarySourceDetach:
    """Detach, check that it was refused for ``reason`` and that nothing changed; return the fields."""
    before = snapshot(pipe)
    detach = result.detach_auxiliary_cpu_sources(**kwargs).detach
    assert (detach.status, detach.refusal_reason) == ("refused", reason), detach.detail
    assert (detach.copied_bytes, detach.copied_tensors, detach.host_before) == (0, 0, None)
    assert "nothing was copied or changed" in detach.detail
    assert_unchanged(before, snapshot(pipe))
    assert loader.storage_alive()
    return detach


# --- executed: what is copied and what is preserved ----------------------------------------------


@pytest.mark.parametrize("kind", LOADERS)
def test_detaching_copies_every_loader_view_and_preserves_each_registered_object(kind, tmp_path):
    pipe, result, _, _ = loaded_pipeline(kind, tmp_path)
    parameters = list({id(p): p for _, p in registered(pipe) if isinstance(p, torch.nn.Parameter)}.values())
    optimizer = torch.optim.SGD(parameters, lr=0.1)
    held_by_a_hook = [pipe.transformer.norm_out.ddo_scale, pipe.text_encoder_2.shared.weight]
    before = snapshot(pipe)
    report = result.detach_auxiliary_cpu_sources()
    detach = report.detach
    after = snapshot(pipe)
    assert detach.status == "executed", detach.detail
    assert detach.copied_tensors == len({id(s["object"]) for s in before.values()})
    assert detach.alias_groups == 1  # the tied T5 embeddings
    assert detach.copied_bytes <= detach.max_copy_bytes == 16 * 2**20
    assert detach.skipped_tensors == detach.skipped_bytes == {}
    assert detach.host_before is not None
    assert detach.host_after is not None
    assert_same_values(before, after)
    assert all(after[n]["storage"] != before[n]["storage"] for n in before)
    assert after[TIED[0]]["storage"] == after[TIED[1]]["storage"]  # tied weights stay one storage
    parameters_now = list({id(p): p for _, p in registered(pipe) if isinstance(p, torch.nn.Parameter)}.values())
    assert all(o is p for o, p in zip(optimizer.param_groups[0]["params"], parameters_now, strict=True))
    assert held_by_a_hook[0] is pipe.transformer.norm_out.ddo_scale
    assert held_by_a_hook[1] is pipe.text_encoder_2.shared.weight
    assert pipe.transformer.proj_out.weight.is_contiguous() is (kind != "torch_mmap")  # torch.save keeps strides
    assert pipe.transformer.x_embedder.bias.requires_grad is False
    assert pipe.transformer.norm_out.ddo_scale._base is None  # a view buffer was rebound, not just its .data
    [observed_transformer, observed_t5] = detach.components
    assert observed_transformer.runtime == "diffusers_group_offload"
    assert (observed_transformer.native_binding_count, observed_t5.interval_observation) == (0, "reported")
    assert parse_report(report.model_dump(mode="json")) == report


@needs_proc
@pytest.mark.parametrize("kind", LOADERS)
def test_the_loader_storage_is_freed_when_nobody_else_holds_it(kind, tmp_path):
    pipe, result, loader, _ = loaded_pipeline(kind, tmp_path)
    snapshot(pipe)  # reads every byte, so the mapping is resident
    assert loader.storage_alive()
    if kind != "flat_buffer":
        assert mapped(loader.paths[0])[1] > 0  # the mapping is resident
    assert result.detach_auxiliary_cpu_sources().detach.status == "executed"
    assert not loader.storage_alive()
    assert all(mapped(path) == (0, 0) for path in loader.paths)


@needs_proc
@pytest.mark.parametrize("kind", LOADERS)
def test_an_escaped_view_keeps_the_loader_storage_alive(kind, tmp_path):
    """Exclusive ownership is required: a reference held elsewhere cannot be discovered."""
    _, result, loader, escaped = loaded_pipeline(kind, tmp_path, keep="proj_out.bias")
    assert result.detach_auxiliary_cpu_sources().detach.status == "executed"
    assert loader.storage_alive()
    del escaped
    assert not loader.storage_alive()


@pytest.mark.parametrize("kind", LOADERS)
def test_outputs_after_detaching_equal_those_of_an_identical_twin(kind, tmp_path):
    pipe, result, _, _ = loaded_pipeline(kind, tmp_path / "detached")
    twin, _, _, _ = loaded_pipeline(kind, tmp_path / "twin")
    assert result.detach_auxiliary_cpu_sources().detach.status == "executed"
    for _ in range(2):
        images = pipe(**call_kwargs("flux")).images
        expected = twin(**call_kwargs("flux")).images
        assert torch.equal(images.view(torch.uint8), expected.view(torch.uint8))


def test_disabled_is_an_explicit_noop(tmp_path):
    pipe, result, loader, _ = loaded_pipeline("torch_mmap", tmp_path)
    before = snapshot(pipe)
    detach = result.detach_auxiliary_cpu_sources(enabled=False).detach
    assert (detach.status, detach.noop_reason, detach.components) == ("noop", "disabled", ())
    assert_unchanged(before, snapshot(pipe))
    assert loader.storage_alive()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"enabled": "yes"}, r"enabled='yes' must be True or False"),
        ({"max_copy_bytes": -1}, r"max_copy_bytes=-1 must be an int >= 0"),
        ({"max_copy_bytes": 1.5}, r"max_copy_bytes=1.5"),
        ({"max_copy_bytes": True}, r"max_copy_bytes=True"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, match, tmp_path):
    _, result, _, _ = loaded_pipeline("torch_mmap", tmp_path)
    with pytest.raises(InvalidArgumentError, match=match):
        result.detach_auxiliary_cpu_sources(**kwargs)


# --- refused, with nothing changed ---------------------------------------------------------------


def test_refused_without_an_attached_runtime(tmp_path):
    pipe, result, loader, _ = loaded_pipeline("torch_mmap", tmp_path)
    HookRegistry.check_if_exists_or_initialize(pipe.transformer).remove_hook("group_offloading", recurse=True)
    detach = refused(pipe, result, loader, "runtime_not_attached")
    assert detach.offending == ("transformer",)
    assert detach.components[0].attached is False


def test_refused_once_a_forward_ran(tmp_path):
    pipe, result, loader, _ = loaded_pipeline("torch_mmap", tmp_path)
    pipe(**call_kwargs("flux"))
    detach = refused(pipe, result, loader, "execution_started")
    assert detach.components[0].execution_started is True


@pytest.mark.parametrize(
    ("runtime", "count", "intervals", "reason"),
    [
        ("test.older", 3, (), "interval_observation_unsupported"),
        ("test.intervals", 3, None, "intervals_unavailable"),
        ("test.intervals", 3, (PayloadInterval(8, 16),), "interval_count_mismatch"),
        ("test.intervals", 0, (PayloadInterval(8, 16),), "interval_count_mismatch"),
        ("test.intervals", "3", (), "observation_invalid"),
        ("test.intervals", 1, [(8, 16)], "observation_invalid"),
    ],
)
def test_refused_when_native_sources_are_not_all_reported(runtime, count, intervals, reason, scripted, tmp_path):
    pipe, result, loader, _ = loaded_pipeline("torch_mmap", tmp_path, runtime=runtime)
    adapter = result.components["transformer"].adapter
    adapter.count, adapter.intervals = count, intervals
    detach = refused(pipe, result, loader, reason)
    assert detach.offending == ("transformer",)
    assert detach.components[0].adapter.endswith(type(adapter).__qualname__)


@pytest.mark.parametrize(
    ("runtime", "intervals", "observation"),
    [("test.older", (), "unsupported"), ("test.intervals", (), "reported"), ("test.intervals", None, "unavailable")],
)
def test_without_native_cpu_sources_any_interval_observation_will_do(
    runtime, intervals, observation, scripted, tmp_path
):
    """An older adapter (no interval observation) supports the zero-CPU-source case."""
    _, result, loader, _ = loaded_pipeline("torch_mmap", tmp_path, runtime=runtime)
    result.components["transformer"].adapter.intervals = intervals
    detach = result.detach_auxiliary_cpu_sources().detach
    assert detach.status == "executed", detach.detail
    assert detach.components[0].interval_observation == observation
    assert not loader.storage_alive()


def test_refused_when_a_selected_view_overlaps_a_retained_interval(scripted, tmp_path):
    """A runtime that registers the whole loader region as its source: the views inside it overlap."""
    pipe, result, loader, _ = loaded_pipeline("torch_mmap", tmp_path, runtime="test.intervals")
    spans = [PayloadInterval.of_tensor(t) for _, t in pipe.transformer.named_parameters()]
    adapter = result.components["transformer"].adapter
    adapter.count, adapter.intervals = 1, (PayloadInterval(min(s.start for s in spans), max(s.end for s in spans)),)
    detach = refused(pipe, result, loader, "overlaps_retained_interval")
    assert detach.offending
    assert all(name.startswith("transformer.") for name in detach.offending)


def test_refused_when_the_selected_views_exceed_the_ceiling(tmp_path):
    pipe, result, loader, _ = loaded_pipeline("torch_mmap", tmp_path)
    detach = refused(pipe, result, loader, "exceeds_ceiling", max_copy_bytes=1024)
    assert detach.selected_bytes > detach.max_copy_bytes == 1024


@pytest.mark.parametrize("alias", ["slice", "transpose"])
def test_refused_on_a_partial_alias(alias, tmp_path):
    pipe, result, loader, _ = loaded_pipeline("torch_mmap", tmp_path)
    weight = pipe.transformer.norm_out.linear.weight.data
    pipe.transformer.norm_out.register_buffer("alias", weight[:2] if alias == "slice" else weight.t())
    detach = refused(pipe, result, loader, "partial_alias")
    assert set(detach.offending) == {"transformer.norm_out.linear.weight", "transformer.norm_out.alias"}


class Tagged(torch.Tensor):
    """A tensor subclass (as quantized tensor libraries use)."""


UNSUPPORTED = {
    "subclass": lambda: torch.ones(4).as_subclass(Tagged),
    "sparse": lambda: torch.eye(4).to_sparse(),
    "non_cpu": lambda: torch.ones(4, device="meta"),
    "quantized": lambda: torch.quantize_per_tensor(torch.ones(4), 0.1, 0, torch.quint8),
}
DEPRECATED = pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor.*deprecated:UserWarning")


@pytest.mark.parametrize("kind", [pytest.param(k, marks=[DEPRECATED] if k == "quantized" else []) for k in UNSUPPORTED])
def test_refused_on_an_unsupported_tensor(kind, tmp_path):
    pipe, result, loader, _ = loaded_pipeline("torch_mmap", tmp_path)
    pipe.transformer.norm_out.register_buffer("odd", UNSUPPORTED[kind]())
    detach = refused(pipe, result, loader, "unsupported_tensor")
    assert detach.offending == ("transformer.norm_out.odd",)


def test_refused_on_a_view_buffer_that_cannot_be_rebound_in_place(tmp_path):
    pipe, result, loader, _ = loaded_pipeline("flat_buffer", tmp_path)
    watcher = weakref.ref(pipe.transformer.norm_out.ddo_scale)  # swap_tensors refuses weakly referenced tensors
    detach = refused(pipe, result, loader, "unsupported_tensor")
    assert detach.offending == ("transformer.norm_out.ddo_scale",)
    assert watcher() is not None
    assert loader.storage_alive()


# --- third-party adapters ------------------------------------------------------------------------


class OlderAdapter:
    """A third-party adapter from before the interval observation."""

    def __init__(self, module: torch.nn.Module, count: object = 0) -> None:
        self.module, self.count = module, count

    def is_attached(self) -> bool:
        return True

    def execution_started(self) -> bool:
        return False

    def native_binding_count(self) -> object:
        return self.count


class IntervalAdapter(OlderAdapter):
    def __init__(self, module: torch.nn.Module, count: object = 0, intervals: object = ()) -> None:
        super().__init__(module, count)
        self.intervals = intervals

    def retained_cpu_intervals(self) -> object:
        return self.intervals


@pytest.fixture
def scripted():
    """Two registered third-party runtimes: diffusers group offloading observed by the adapters above."""
    builtin = get_offload_runtime("diffusers_group_offload")
    register_offload_runtime(OffloadRuntime("test.intervals", builtin.apply, IntervalAdapter))
    register_offload_runtime(OffloadRuntime("test.older", builtin.apply, OlderAdapter))
    yield
    unregister_offload_runtime("test.intervals")
    unregister_offload_runtime("test.older")
