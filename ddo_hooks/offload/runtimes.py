"""Offload runtimes and their source-observation adapters.

An *offload runtime* is an existing offload engine that :func:`~ddo_hooks.offload.apply_offload_runtime`
applies to a pipeline component; diffusers group offloading is the built-in one
(:data:`DIFFUSERS_GROUP_OFFLOAD`). Each runtime comes with a *source-observation adapter*: a
small object that answers, for one component, the questions the auxiliary-source detachment
must ask before it copies anything (:class:`SourceObservationAdapter`):

* ``is_attached()``: is the component attached to the runtime?
* ``execution_started()``: has any forward run under it?
* ``native_binding_count()``: how many CPU source tensors does the runtime itself keep?
* ``retained_cpu_intervals()``: the byte ranges of CPU memory those sources occupy, one
  :class:`PayloadInterval` per binding, or ``None`` for "unavailable" (only
  :class:`IntervalObservingAdapter` has it; an older adapter without it supports only the
  zero-CPU-source case).

Third-party runtimes register themselves with :func:`register_offload_runtime`.

Examples:
    >>> import torch
    >>> from diffusers.models import FluxTransformer2DModel
    >>> model = FluxTransformer2DModel(num_layers=1, num_single_layers=1, attention_head_dim=8,
    ...     num_attention_heads=2, joint_attention_dim=16, pooled_projection_dim=16,
    ...     axes_dims_rope=(2, 2, 4))
    >>> runtime = get_offload_runtime("diffusers_group_offload")
    >>> runtime.apply(model, torch.device("cpu"), {})
    >>> adapter = runtime.adapter(model)
    >>> adapter.is_attached(), adapter.execution_started(), adapter.native_binding_count()
    (True, False, 0)
    >>> adapter.retained_cpu_intervals()  # no stream: diffusers keeps no CPU copies of its own
    ()
    >>> isinstance(adapter, IntervalObservingAdapter)
    True
    >>> adapter.close()
"""

from __future__ import annotations

import inspect
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast, runtime_checkable

import torch
from diffusers.hooks import ModelHook, apply_group_offloading
from diffusers.models import ModelMixin

from ddo_hooks._compat import accelerate as accelerate_compat
from ddo_hooks._compat import diffusers as diffusers_compat
from ddo_hooks.boundaries import ACTION_NAME_PATTERN, ACTION_NAME_RULE
from ddo_hooks.errors import InvalidArgumentError
from ddo_hooks.hooks.mechanics import InstalledHook, install_hook

__all__ = [
    "DIFFUSERS_GROUP_OFFLOAD",
    "GROUP_OFFLOAD_OPTIONS",
    "OBSERVER_HOOK",
    "AdapterFactory",
    "ApplyFunction",
    "DiffusersGroupOffloadAdapter",
    "IntervalObservingAdapter",
    "OffloadRuntime",
    "PayloadInterval",
    "SourceObservationAdapter",
    "available_runtimes",
    "get_offload_runtime",
    "register_offload_runtime",
    "unregister_offload_runtime",
]

DIFFUSERS_GROUP_OFFLOAD = "diffusers_group_offload"
"""The built-in runtime: diffusers group offloading (``apply_group_offloading``)."""

OBSERVER_HOOK = "ddo_hooks.execution_observer"
"""The name of the diffusers hook the built-in adapter uses to see the first forward."""

GROUP_OFFLOAD_OPTIONS = frozenset(inspect.signature(apply_group_offloading).parameters) - {"module", "onload_device"}
"""The ``runtime_options`` the built-in runtime accepts: ``apply_group_offloading``'s keywords."""

_NAME_RE = re.compile(ACTION_NAME_PATTERN)  # runtime names follow the action-name rule


@dataclass(frozen=True)
class PayloadInterval:
    """A byte range ``[start, end)`` of host memory, as absolute addresses.

    Examples:
        >>> a = PayloadInterval(100, 164)
        >>> a.nbytes, a.overlaps(PayloadInterval(160, 200)), a.overlaps(PayloadInterval(164, 200))
        (64, True, False)
        >>> t = torch.zeros(4, 4)
        >>> PayloadInterval.of_tensor(t[1]).nbytes, PayloadInterval.of_tensor(t[:, 0]).nbytes
        (16, 52)
    """

    start: int
    end: int

    def __post_init__(self) -> None:
        for name in ("start", "end"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidArgumentError(f"PayloadInterval {name}={value!r} must be an int >= 0")
        if self.end < self.start:
            raise InvalidArgumentError(f"PayloadInterval end={self.end} is before start={self.start}")

    @property
    def nbytes(self) -> int:
        """The length of the range in bytes."""
        return self.end - self.start

    def overlaps(self, other: PayloadInterval) -> bool:
        """Whether the two ranges share a byte (an empty range overlaps nothing)."""
        return self.start < other.end and other.start < self.end

    @classmethod
    def of_tensor(cls, tensor: torch.Tensor) -> PayloadInterval:
        """The bytes a dense CPU tensor reaches in its storage, from its first to its last element.

        Raises:
            InvalidArgumentError: Not a dense (strided) CPU tensor.
        """
        if tensor.layout != torch.strided or tensor.device.type != "cpu" or tensor.is_quantized:
            raise InvalidArgumentError(
                f"only dense CPU tensors have a payload interval, got {tensor.layout} on {tensor.device}"
            )
        itemsize = tensor.element_size()
        start = cast(int, tensor.untyped_storage().data_ptr() + tensor.storage_offset() * itemsize)  # an int on CPU
        if tensor.numel() == 0:
            return cls(start, start)
        last = sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride(), strict=True))
        return cls(start, start + (last + 1) * itemsize)


@runtime_checkable
class SourceObservationAdapter(Protocol):
    """What a runtime tells about one component; the minimum an (older) adapter implements.

    Observations are read before anything is copied; an adapter must answer without side effects.
    """

    def is_attached(self) -> bool:
        """Whether the component is attached to the runtime (the runtime manages its weights)."""
        ...

    def execution_started(self) -> bool:
        """Whether any forward has run under the runtime."""
        ...

    def native_binding_count(self) -> int:
        """How many CPU source tensors the runtime itself keeps for the component."""
        ...


@runtime_checkable
class IntervalObservingAdapter(SourceObservationAdapter, Protocol):
    """An adapter that can also report where its retained CPU sources lie."""

    def retained_cpu_intervals(self) -> Sequence[PayloadInterval] | None:
        """One interval per native binding (duplicates allowed), or ``None`` when unavailable."""
        ...


ApplyFunction = Callable[[torch.nn.Module, torch.device, Mapping[str, Any]], None]
"""``apply(module, onload_device, options)``: applies the engine to one component."""

AdapterFactory = Callable[[torch.nn.Module], SourceObservationAdapter]
"""``adapter(module)``: the adapter of a component the runtime was just applied to (before any forward)."""


@dataclass(frozen=True)
class OffloadRuntime:
    """An offload engine that :func:`~ddo_hooks.offload.apply_offload_runtime` can apply.

    Attributes:
        name: Its registered name: a lowercase letter, then ``a-z 0-9 _ . -``.
        apply: Applies the engine to one component (``apply(module, onload_device, options)``).
        adapter: Builds the component's source-observation adapter right after ``apply``. If the
            adapter has a ``close()`` method, it is called when the apply result's hooks are detached.
        validate: Optional; checks a component and the options before anything is applied
            (``validate(module, onload_device, options)``), raising
            :class:`~ddo_hooks.errors.InvalidArgumentError`.
    """

    name: str
    apply: ApplyFunction
    adapter: AdapterFactory
    validate: ApplyFunction | None = None


class _ExecutionObserver(ModelHook):
    """Notes that a forward ran under the runtime (a flag set in ``pre_forward``)."""

    def __init__(self, adapter: DiffusersGroupOffloadAdapter) -> None:
        super().__init__()
        self.adapter = adapter

    def pre_forward(self, module: torch.nn.Module, *args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict]:
        self.adapter._started = True
        return args, kwargs


class DiffusersGroupOffloadAdapter:
    """The built-in adapter: observes diffusers group offloading on one component.

    * attached: some submodule carries diffusers' ``group_offloading`` hook;
    * execution started: a forward of a hooked module ran since the adapter was made (it
      registers an observer hook, :data:`OBSERVER_HOOK`), or, with streams, diffusers' lazy
      prefetch hook is gone (diffusers removes it after the first forward);
    * native bindings: the entries of every group's ``cpu_param_dict``, the CPU copies diffusers
      keeps with ``use_stream=True`` (pinned copies; with ``low_cpu_mem_usage=True`` the loader
      tensors themselves); without streams or on disk there are none;
    * retained intervals: one per entry; unavailable when an entry is not a dense CPU tensor
      (e.g. a torchao subclass).
    """

    runtime = DIFFUSERS_GROUP_OFFLOAD

    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module
        self._started = False
        self._prefetch_pending = self._lazy_prefetch_present()
        self._observers: list[InstalledHook] = [
            install_hook(m, _ExecutionObserver(self), OBSERVER_HOOK) for m in self._hooked_modules()
        ]

    def _lazy_prefetch_present(self) -> bool:
        return any(diffusers_compat.has_hook(m, diffusers_compat.LAZY_PREFETCH_HOOK) for m in self.module.modules())

    def _hooked_modules(self) -> list[torch.nn.Module]:
        return [m for m in self.module.modules() if diffusers_compat.group_offload_group(m) is not None]

    def _groups(self) -> list[Any]:
        groups: dict[int, Any] = {}
        for m in self._hooked_modules():
            group = diffusers_compat.group_offload_group(m)
            groups.setdefault(id(group), group)
        return list(groups.values())

    def is_attached(self) -> bool:
        """Whether diffusers group offloading is applied to the component."""
        return bool(self._hooked_modules())

    def execution_started(self) -> bool:
        """Whether a forward ran under group offloading."""
        # diffusers removes its lazy prefetch hook (streams only) after the first forward.
        return self._started or (self._prefetch_pending and not self._lazy_prefetch_present())

    def native_binding_count(self) -> int:
        """The CPU copies diffusers keeps (``cpu_param_dict`` entries of every group)."""
        return sum(len(diffusers_compat.group_cpu_sources(g)) for g in self._groups())

    def retained_cpu_intervals(self) -> tuple[PayloadInterval, ...] | None:
        """One interval per ``cpu_param_dict`` entry, or ``None`` when one is not a dense CPU tensor."""
        intervals = []
        for group in self._groups():
            for source in diffusers_compat.group_cpu_sources(group).values():
                plain = type(source) in (torch.Tensor, torch.nn.Parameter)
                if not plain or source.layout != torch.strided or source.device.type != "cpu" or source.is_quantized:
                    return None
                intervals.append(PayloadInterval.of_tensor(source))
        return tuple(intervals)

    def close(self) -> None:
        """Remove the observer hooks (a second call does nothing)."""
        while self._observers:
            self._observers.pop().remove()


def _validate_group_offload(module: torch.nn.Module, onload_device: torch.device, options: Mapping[str, Any]) -> None:
    unknown = sorted(set(options) - GROUP_OFFLOAD_OPTIONS)
    if unknown:
        raise InvalidArgumentError(
            f"runtime_options has unknown key(s) {unknown} for {DIFFUSERS_GROUP_OFFLOAD!r}; "
            f"accepted: {sorted(GROUP_OFFLOAD_OPTIONS)}"
        )
    if any(diffusers_compat.group_offload_group(m) is not None for m in module.modules()):
        raise InvalidArgumentError(
            f"{type(module).__name__} already has diffusers group offloading applied; "
            "pass a component that is not offloaded yet"
        )
    if any(accelerate_compat.has_hook(m) for m in module.modules()):
        raise InvalidArgumentError(
            f"{type(module).__name__} carries accelerate offload hooks; remove them (pipe.remove_all_hooks()) first"
        )
    if isinstance(module, ModelMixin) and not diffusers_compat.supports_group_offloading(module):
        raise InvalidArgumentError(f"{type(module).__name__} does not support diffusers group offloading")


def _apply_group_offload(module: torch.nn.Module, onload_device: torch.device, options: Mapping[str, Any]) -> None:
    kwargs: dict[str, Any] = {"offload_type": "block_level", **options}
    if str(kwargs["offload_type"]) in ("block_level", "GroupOffloadingType.BLOCK_LEVEL"):
        kwargs.setdefault("num_blocks_per_group", 1)
    if isinstance(module, ModelMixin):
        module.enable_group_offload(onload_device=onload_device, **kwargs)
    else:
        apply_group_offloading(module, onload_device=onload_device, **kwargs)


_BUILTIN = OffloadRuntime(
    DIFFUSERS_GROUP_OFFLOAD, _apply_group_offload, DiffusersGroupOffloadAdapter, _validate_group_offload
)
_lock = threading.Lock()
_RUNTIMES: dict[str, OffloadRuntime] = {DIFFUSERS_GROUP_OFFLOAD: _BUILTIN}


def register_offload_runtime(runtime: OffloadRuntime, *, replace: bool = False) -> OffloadRuntime:
    """Register a third-party offload runtime and its adapter factory.

    Args:
        runtime: The runtime (name, ``apply``, ``adapter`` and optional ``validate``).
        replace: Allow replacing a runtime registered under the same name (not the built-in).

    Returns:
        ``runtime``, so it can be kept as a module constant.

    Raises:
        InvalidArgumentError: Not an :class:`OffloadRuntime`, a malformed name, a part that is not
            callable, or the name is taken and ``replace`` is False.

    Examples:
        >>> builtin = get_offload_runtime("diffusers_group_offload")
        >>> runtime = OffloadRuntime("my.runtime", builtin.apply, DiffusersGroupOffloadAdapter)
        >>> _ = register_offload_runtime(runtime)
        >>> "my.runtime" in available_runtimes()
        True
        >>> unregister_offload_runtime("my.runtime")
    """
    if not isinstance(runtime, OffloadRuntime):
        raise InvalidArgumentError(f"runtime must be an OffloadRuntime, got {type(runtime).__name__}")
    if not isinstance(runtime.name, str) or not _NAME_RE.match(runtime.name):
        raise InvalidArgumentError(f"{runtime.name!r} is not a runtime name; use {ACTION_NAME_RULE}")
    for part in ("apply", "adapter", "validate"):
        value = getattr(runtime, part)
        if not callable(value) and not (part == "validate" and value is None):
            raise InvalidArgumentError(f"runtime {runtime.name!r}: {part} must be callable, got {type(value).__name__}")
    with _lock:
        if runtime.name == DIFFUSERS_GROUP_OFFLOAD:
            raise InvalidArgumentError(f"{DIFFUSERS_GROUP_OFFLOAD!r} is built in and cannot be replaced")
        if runtime.name in _RUNTIMES and not replace:
            raise InvalidArgumentError(
                f"an offload runtime named {runtime.name!r} is already registered; pass replace=True to replace it"
            )
        _RUNTIMES[runtime.name] = runtime
    return runtime


def unregister_offload_runtime(name: str) -> None:
    """Remove a registered runtime.

    Raises:
        InvalidArgumentError: ``name`` is the built-in runtime or not registered.
    """
    with _lock:
        if name == DIFFUSERS_GROUP_OFFLOAD:
            raise InvalidArgumentError(f"the built-in runtime {DIFFUSERS_GROUP_OFFLOAD!r} cannot be unregistered")
        if name not in _RUNTIMES:
            raise InvalidArgumentError(f"no offload runtime named {name!r} is registered ({available_runtimes()})")
        del _RUNTIMES[name]


def available_runtimes() -> tuple[str, ...]:
    """The registered runtime names, sorted.

    Examples:
        >>> "diffusers_group_offload" in available_runtimes()
        True
    """
    return tuple(sorted(_RUNTIMES))


def get_offload_runtime(name: str) -> OffloadRuntime:
    """The runtime registered under ``name``.

    Raises:
        InvalidArgumentError: No such runtime; the message lists the registered ones.
    """
    runtime = _RUNTIMES.get(name) if isinstance(name, str) else None
    if runtime is None:
        raise InvalidArgumentError(
            f"runtime={name!r} is not a registered offload runtime; registered: {', '.join(available_runtimes())} "
            "(register one with ddo_hooks.register_offload_runtime)"
        )
    return runtime
