"""The ring runtime on a pipeline's components: units hooked, the rest on the device, copies under the compute.

:class:`StreamedPipeline` applies it (see :mod:`~ddo_hooks.streaming.plan` for what streams): the
tensors that stay on the device are copied there once; the ones that stream keep their CPU sources
(where ``pinned_copies.from_files: register`` left them: the files' registered pages) and are pointed,
for each run of their unit, at their views in the one ring of :mod:`~ddo_hooks.streaming.ring`, then
back at their sources. The runtime pins nothing and adds no host memory; a source the device could
not copy from without the host waiting (pageable memory: a ``non_blocking`` copy from it silently
synchronizes) is refused. Each unit's module gets two PyTorch module hooks (a forward pre-hook, and a
forward hook that runs also when the forward raises); each component's root gets two more, which
trace its first forward: the rows each ``Linear`` of a unit multiplies, so that the residency budget
(``resident_bytes``) keeps on the device the weights with the least compute per byte (the modulation
linears, which multiply one row each), chosen when a component's second forward begins.

:meth:`StreamedPipeline.close` is the exact inverse: every hook removed, every tensor back on its
source, the ring freed after its last copy. A component that is collected (``Attachment.drop``)
leaves the ring with its units.

Examples:
    >>> import torch
    >>> from ddo_hooks.streaming.transport import LoggedTransport
    >>> from ddo_hooks.streaming.ordering import check_log
    >>> model = torch.nn.Sequential(torch.nn.ModuleList([torch.nn.Linear(1024, 1024) for _ in "abcd"]))
    >>> def forward(x):
    ...     for block in model[0]:
    ...         x = block(x)
    ...     return x
    >>> x = torch.randn(2, 1024)
    >>> expected = forward(x)
    >>> transport = LoggedTransport(torch.device("cpu"))
    >>> options = StreamOptions(resident_bytes=0, stream_above=0, min_streamed_bytes=0)
    >>> streamed = StreamedPipeline({"model": model}, options, transport=transport)
    >>> all(torch.equal(forward(x), expected) for _ in range(3)), check_log(transport.log)
    (True, [])
    >>> streamed.close()
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ddo_hooks._compat import accelerate as accelerate_compat
from ddo_hooks._compat import diffusers as diffusers_compat
from ddo_hooks.errors import InvalidArgumentError
from ddo_hooks.reports.ring import RingComponent, RingOffload, RingOffloadReport, RingOffloadSetup
from ddo_hooks.sizes import format_size
from ddo_hooks.streaming.plan import MIN_STREAMED_BYTES, PlannedUnit, find_units, nbytes, tensors_of
from ddo_hooks.streaming.ring import Ring, Unit, slot_layout
from ddo_hooks.streaming.transport import Transport, overridden, transport_for

__all__ = ["StreamOptions", "StreamedPipeline", "stream_pipeline"]


@dataclass(frozen=True)
class StreamOptions:
    """How the ring runtime runs (the policy's ``offload`` section gives them)."""

    resident_bytes: int = 768 << 20
    """The residency budget: the most bytes of the units' weights kept on the device, those with the least
    compute per byte first (``0``: every weight of at least 1 MiB of a unit streams)."""
    ring_bytes: int | None = None
    """The ring's size; ``None``: ``lookahead + 1`` of the largest unit."""
    lookahead: int = 2
    """How many units ahead of the running one are copied in."""
    stream_above: int = 128 << 20
    """A component whose units would stream fewer bytes than this stays on the device whole."""
    poison: bool = False
    """Fill each slot with NaN before it is copied into: any missing order then changes the outputs."""
    min_streamed_bytes: int = MIN_STREAMED_BYTES
    """A unit's tensor under this size stays on the device."""


@dataclass(eq=False)
class _Streamed:
    """A unit as hooked: its ring unit and its tensors (the module's parameters and buffers that stream)."""

    component: str
    unit: Unit
    tensors: list[torch.Tensor]


class StreamedPipeline:
    """The ring runtime applied to ``components`` (name to module), on ``device``.

    Args:
        components: The components to run, by name; each must not be offloaded by another runtime.
        options: How.
        device: Where they run (default: CUDA's current device).
        transport: The streams and events (default: the device's own; tests pass a
            :class:`~ddo_hooks.streaming.transport.LoggedTransport`).

    Raises:
        InvalidArgumentError: A component is offloaded by something else, or a weight that would
            stream is not in memory the device can copy from without the host waiting.
    """

    def __init__(
        self,
        components: Mapping[str, torch.nn.Module],
        options: StreamOptions | None = None,
        *,
        device: torch.device | str | None = None,
        transport: Transport | None = None,
    ) -> None:
        self.options = options = options or StreamOptions()
        if transport is None:
            transport = transport_for(torch.device(device if device is not None else "cuda"))
        self.transport = transport
        self.device = transport.device
        planned = {name: _planned(name, module, options) for name, module in components.items()}
        _check_sources(planned, transport)
        largest = max((slot_layout(u.streamed)[1] for units in planned.values() for u in units), default=0)
        capacity = options.ring_bytes if options.ring_bytes is not None else largest * (options.lookahead + 1)
        self.ring = Ring(transport, max(capacity, 512), options.lookahead, poison=options.poison)
        self._originals: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {}
        self._handles: dict[str, list[Any]] = {}
        self._streamed: dict[str, list[_Streamed]] = {}
        self._entries: dict[int, _Streamed] = {}  # by id of its ring unit
        self._rows: dict[int, int] = {}  # id of a streamed Linear weight -> the most rows it multiplied
        self._traces: list[Any] = []  # the hooks that note them, until the budget is chosen
        self._forwards: dict[str, int] = {}
        self._resident_chosen = options.resident_bytes == 0
        self.resident_weights = 0
        """Bytes of the units' weights the residency budget kept on the device."""
        self.parts: list[RingComponent] = []
        """What became of each component at attach, as its report says it."""
        try:
            for name, module in components.items():
                self._apply(name, module, planned[name])
        except BaseException:
            self.close()
            raise

    # -- setting up ------------------------------------------------------------------------------
    def _apply(self, name: str, module: torch.nn.Module, units: list[PlannedUnit]) -> None:
        streamed = {id(t) for unit in units for t in unit.streamed}
        originals = self._originals.setdefault(name, [])
        handles = self._handles.setdefault(name, [])
        hooked = self._streamed.setdefault(name, [])
        with torch.inference_mode(False):
            for tensor in tensors_of(module):
                if id(tensor) not in streamed:
                    originals.append((tensor, tensor.data))
                    tensor.data = tensor.data.to(self.device)
        on_device = sum(nbytes(t) for t, _ in originals)
        streaming = sum(unit.streamed_bytes for unit in units)
        self.parts.append(RingComponent(component=name, status="streamed" if units else "on_device", units=len(units),
                                        streamed_bytes=streaming, device_bytes=on_device))  # fmt: skip
        for planned in units:
            unit = self.ring.add(f"{name}.{planned.name}", [t.data for t in planned.streamed])
            entry = _Streamed(name, unit, list(planned.streamed))
            hooked.append(entry)
            self._entries[id(unit)] = entry
            handles.append(planned.module.register_forward_pre_hook(self._begin(entry)))
            handles.append(planned.module.register_forward_hook(self._end(entry), always_call=True))
            if not self._resident_chosen:
                for sub in planned.module.modules():
                    if isinstance(sub, torch.nn.Linear) and id(sub.weight) in streamed:
                        self._traces.append(sub.register_forward_pre_hook(self._trace(sub)))
        if hooked:
            handles.append(module.register_forward_pre_hook(self._root(name)))
            handles.append(module.register_forward_hook(self._root_done(name), always_call=True))
            handles.append(weakref.finalize(module, _forget, weakref.ref(self), name))

    # -- the hooks -------------------------------------------------------------------------------
    def _begin(self, entry: _Streamed) -> Callable[..., None]:
        ring = self.ring

        def begin(module: torch.nn.Module, args: Any) -> None:
            for stale in ring.running():  # units never nest: one still running was cut short (Ctrl-C) before its end
                self._end(self._entries[id(stale)])(module, args, None)
            for tensor, view in zip(entry.tensors, ring.begin(entry.unit), strict=True):
                tensor.data = view

        return begin

    def _end(self, entry: _Streamed) -> Callable[..., None]:
        ring = self.ring

        def end(module: torch.nn.Module, args: Any, output: Any) -> None:
            for tensor, source in zip(entry.tensors, entry.unit.sources, strict=True):
                tensor.data = source
            ring.end(entry.unit)

        return end

    def _trace(self, linear: torch.nn.Linear) -> Callable[..., None]:
        rows, key = self._rows, id(linear.weight)

        def trace(module: torch.nn.Module, args: Any) -> None:
            if args and isinstance(args[0], torch.Tensor) and linear.in_features:
                rows[key] = max(rows.get(key, 0), args[0].numel() // linear.in_features)

        return trace

    def _root(self, name: str) -> Callable[..., None]:
        def root(module: torch.nn.Module, args: Any) -> None:
            if not self._resident_chosen and self._forwards.get(name, 0) >= 1:
                self._choose_resident()

        return root

    def _root_done(self, name: str) -> Callable[..., None]:
        def done(module: torch.nn.Module, args: Any, output: Any) -> None:
            self._forwards[name] = self._forwards.get(name, 0) + 1

        return done

    # -- the residency budget ----------------------------------------------------------------------
    def _choose_resident(self) -> None:
        """Keep on the device the traced weights with the fewest rows per byte, up to ``resident_bytes``."""
        self._resident_chosen = True
        budget = self.options.resident_bytes
        candidates = [
            (self._rows[id(t)], -nbytes(t), entry, t)
            for entries in self._streamed.values()
            for entry in entries
            for t in entry.tensors
            if id(t) in self._rows
        ]
        chosen: dict[int, list[torch.Tensor]] = {}
        for _, size, entry, tensor in sorted(candidates, key=lambda c: c[:2]):
            if -size <= budget:
                budget += size
                chosen.setdefault(id(entry), []).append(tensor)
        with torch.inference_mode(False):
            for entries in self._streamed.values():
                for entry in entries:
                    keep = {id(t) for t in chosen.get(id(entry), ())}
                    if not keep:
                        continue
                    kept = [(t, s) for t, s in zip(entry.tensors, entry.unit.sources, strict=True) if id(t) not in keep]
                    for tensor, source in zip(entry.tensors, entry.unit.sources, strict=True):
                        if id(tensor) in keep:
                            self._originals[entry.component].append((tensor, source))
                            tensor.data = source.to(self.device)
                            self.resident_weights += nbytes(source)
                    entry.tensors = [t for t, _ in kept]
                    self.ring.relayout(entry.unit, [s for _, s in kept])
        self._rows.clear()
        while self._traces:  # the first forwards were traced: nothing more to note
            self._traces.pop().remove()

    # -- undoing -----------------------------------------------------------------------------------
    def forget(self, name: str) -> None:
        """Undo the runtime on the component ``name`` alone (it leaves the pipeline: collected, or dropped).

        Its hooks are removed, its tensors put back on their sources, its units taken out of the ring.
        """
        self.transport.drain()  # no copy from its sources is in flight when they go (unregistered, unmapped)
        for handle in reversed(self._handles.pop(name, [])):
            if isinstance(handle, weakref.finalize):
                handle.detach()
            else:
                handle.remove()
        for entry in self._streamed.pop(name, []):
            for tensor, source in zip(entry.tensors, entry.unit.sources, strict=True):
                tensor.data = source
            self.ring.remove(entry.unit)
            self._entries.pop(id(entry.unit), None)
        for tensor, original in reversed(self._originals.pop(name, [])):
            tensor.data = original

    def close(self) -> None:
        """Undo the runtime on every component (:meth:`forget`) and free the ring after its last copy."""
        while self._traces:
            self._traces.pop().remove()
        for name in list({*self._handles, *self._streamed, *self._originals}):
            self.forget(name)
        if hasattr(self, "ring"):
            self.ring.close()

    def report(self, *, phase: str, elapsed_seconds: float) -> RingOffloadReport:
        """The report of the runtime as applied (route ``ring_offload``)."""
        streaming = [part for part in self.parts if part.status == "streamed"]
        names = ", ".join(p.component for p in streaming) or "no component"
        detail = (
            f"{sum(p.units for p in streaming)} blocks of {names} stream "
            f"{format_size(sum(p.streamed_bytes for p in streaming))} a pass through a ring of "
            f"{format_size(self.ring.capacity)} on {self.device}; "
            f"{format_size(sum(p.device_bytes for p in self.parts))} stay there"
        )
        body = RingOffload(
            phase=phase, status="executed", noop_reason=None, detail=detail, device=str(self.device),
            components=tuple(self.parts), ring_bytes=self.ring.capacity, lookahead=self.ring.lookahead,
            resident_budget_bytes=self.options.resident_bytes, elapsed_seconds=elapsed_seconds,
        )  # fmt: skip
        return RingOffloadReport(setup=RingOffloadSetup(ring_offload=body))


def _forget(ring: weakref.ref[StreamedPipeline], name: str) -> None:
    streamed = ring()
    if streamed is not None:
        streamed.forget(name)


def _planned(name: str, module: torch.nn.Module, options: StreamOptions) -> list[PlannedUnit]:
    if not isinstance(module, torch.nn.Module):
        raise InvalidArgumentError(f"the ring runtime runs torch modules; {name} is a {type(module).__name__}")
    for sub in module.modules():
        if diffusers_compat.group_offload_group(sub) is not None or accelerate_compat.has_hook(sub):
            raise InvalidArgumentError(
                f"{name} is offloaded already (diffusers group offloading or an accelerate hook on "
                f"{type(sub).__name__}); load it without offloading to run it under the ring runtime"
            )
    units = find_units(module, options.min_streamed_bytes)
    if sum(unit.streamed_bytes for unit in units) < options.stream_above:
        return []  # small enough to stay on the device whole
    return units


def _check_sources(planned: Mapping[str, list[PlannedUnit]], transport: Transport) -> None:
    unpinned = [
        (name, unit.name, tensor)
        for name, units in planned.items()
        for unit in units
        for tensor in unit.streamed
        if not transport.pinned(tensor.data)
    ]
    if unpinned:
        name, unit, tensor = unpinned[0]
        raise InvalidArgumentError(
            f"{len(unpinned)} weight(s) the ring would stream are in pageable memory, e.g. one of {name}.{unit} "
            f"({tuple(tensor.shape)}): a copy from it makes the host wait, so nothing would overlap. Pin them "
            "first: pinned_copies.from_files: register (the smallest-box preset) registers the files' pages in place"
        )


def stream_pipeline(
    pipeline: Any, options: StreamOptions, device: str = "cuda"
) -> tuple[StreamedPipeline | None, RingOffloadReport]:
    """Apply the ring runtime to every model component of ``pipeline`` on ``device``, with its report.

    Where this process has no CUDA device, nothing is applied (a ``no_cuda`` no-op report): the
    pipeline runs as loaded.

    Raises:
        InvalidArgumentError: As :class:`StreamedPipeline`.
    """
    started = time.perf_counter()
    if not overridden() and not torch.cuda.is_available():
        detail = "the ring runtime runs on a CUDA device and this process has none: the pipeline runs as loaded"
        body = RingOffload(phase="attach", status="noop", noop_reason="no_cuda", detail=detail, device=device,
                           components=(), ring_bytes=0, lookahead=options.lookahead,
                           resident_budget_bytes=options.resident_bytes, elapsed_seconds=0.0)  # fmt: skip
        return None, RingOffloadReport(setup=RingOffloadSetup(ring_offload=body))
    where = torch.device(device)
    if where.index is None and not overridden():
        where = torch.device("cuda", torch.cuda.current_device())
    components = {n: m for n, m in getattr(pipeline, "components", {}).items() if isinstance(m, torch.nn.Module)}
    streamed = StreamedPipeline(components, options, device=where)
    return streamed, streamed.report(phase="attach", elapsed_seconds=time.perf_counter() - started)
