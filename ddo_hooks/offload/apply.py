"""``apply_offload_runtime``: put an offload runtime on pipeline components and attach the phase hooks.

The runtime is an existing offload engine, diffusers group offloading by default (no home-made
engine). The result, :class:`OffloadRuntimeApplication`, records for each component the runtime
and its source-observation adapter, keeps the :class:`~ddo_hooks.hooks.attachment.Attachment` of the
policy's phase hooks, is a handle like it (``detach()``, and a context manager that detaches on
exit), and offers the bounded auxiliary CPU source detachment
(:meth:`OffloadRuntimeApplication.detach_auxiliary_cpu_sources`). When the policy enables
``auxiliary_sources``, that detachment runs once right after the runtime is applied, before
the first forward, and its report is recorded in the tracker under ``auxiliary_cpu_sources``.

Examples:
    >>> from ddo_hooks import HookPolicy
    >>> from ddo_hooks.testing.tiny_pipelines import build_pipeline, call_kwargs
    >>> pipe = build_pipeline("flux")
    >>> policy = HookPolicy.from_mapping({"version": 1, "auxiliary_sources": {"enabled": True}})
    >>> result = apply_offload_runtime(pipe, policy, onload_device="cpu", components=["transformer"])
    >>> {name: c.runtime for name, c in result.components.items()}
    {'transformer': 'diffusers_group_offload'}
    >>> result.tracker.reports("auxiliary_cpu_sources")[0].detach.status
    'executed'
    >>> _ = pipe(**call_kwargs("flux"))
    >>> result.detach_auxiliary_cpu_sources().detach.refusal_reason
    'execution_started'
    >>> result.detach_auxiliary_cpu_sources(enabled=False).detach.status
    'noop'
    >>> result.detach()
"""

from __future__ import annotations

import os
import types
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from diffusers import DiffusionPipeline

from ddo_hooks.errors import DdoHooksError, InvalidArgumentError
from ddo_hooks.hooks.attachment import Attachment, attach
from ddo_hooks.offload.runtimes import DIFFUSERS_GROUP_OFFLOAD, SourceObservationAdapter, get_offload_runtime
from ddo_hooks.offload.source_detachment import DEFAULT_MAX_COPY_BYTES, OffloadedComponent, detach_auxiliary_cpu_sources
from ddo_hooks.policy.model import HookPolicy
from ddo_hooks.reports.auxiliary_sources import AuxiliarySourceDetachReport
from ddo_hooks.reports.tracker import MetricsTracker

__all__ = ["AUXILIARY_COMPONENT", "OffloadRuntimeApplication", "OffloadedComponent", "apply_offload_runtime"]

AUXILIARY_COMPONENT = "auxiliary_cpu_sources"
"""The tracker component of the detachment report that the policy runs at apply time."""


class OffloadRuntimeApplication:
    """What :func:`apply_offload_runtime` applied: the components, their runtimes and adapters, the hooks.

    Attributes:
        pipeline: The pipeline.
        attachment: The phase hooks of the policy (see :func:`~ddo_hooks.attach`).
        components: Component name to :class:`~ddo_hooks.offload.source_detachment.OffloadedComponent`
            (module, runtime name, adapter), in the order they were applied (read-only).
        auxiliary_report: The detachment report made at apply time when the policy enabled
            ``auxiliary_sources``, else ``None``.
    """

    def __init__(
        self, pipeline: DiffusionPipeline, attachment: Attachment, components: Mapping[str, OffloadedComponent]
    ) -> None:
        self.pipeline = pipeline
        self.attachment = attachment
        self.components: Mapping[str, OffloadedComponent] = types.MappingProxyType(dict(components))
        self.auxiliary_report: AuxiliarySourceDetachReport | None = None
        self._detached = False

    @property
    def policy(self) -> HookPolicy:
        """The attached policy."""
        return self.attachment.policy

    @property
    def tracker(self) -> MetricsTracker:
        """The tracker the reports are recorded in."""
        return self.attachment.tracker

    def detach_auxiliary_cpu_sources(
        self, *, enabled: bool = True, max_copy_bytes: int = DEFAULT_MAX_COPY_BYTES
    ) -> AuxiliarySourceDetachReport:
        """Copy small residual CPU loader views of the components into storage of their own.

        A separate diagnostic opt-in, not a host-cache flush; see :mod:`ddo_hooks.offload.source_detachment`
        for what is selected, preserved and refused. Call it before the first forward. Exclusive
        ownership of the components is required: a view into a loader storage held elsewhere
        cannot be discovered and keeps that storage alive. The report is returned, not recorded;
        record it with ``result.tracker.record(report, component=...)``.

        Args:
            enabled: ``False`` returns an explicit no-op report and touches nothing.
            max_copy_bytes: The ceiling for the selected views' total, in bytes (default 16 MiB).

        Returns:
            A validated report (route ``auxiliary_cpu_source_detach``); a refusal changed nothing.

        Raises:
            InvalidArgumentError: ``enabled`` is not a bool or ``max_copy_bytes`` is not an int >= 0.
        """
        return detach_auxiliary_cpu_sources(
            list(self.components.values()), enabled=enabled, max_copy_bytes=max_copy_bytes
        )

    @property
    def detached(self) -> bool:
        """Whether :meth:`detach` ran."""
        return self._detached

    def detach(self) -> None:
        """Detach the phase hooks and close the adapters (removing their observers).

        The offload runtime stays applied: it is the engine's to undo. A second call does nothing.
        """
        if self._detached:
            return
        self._detached = True
        self.attachment.detach()
        _close(self.components.values())

    def __enter__(self) -> OffloadRuntimeApplication:
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()

    def __repr__(self) -> str:
        parts = ", ".join(f"{n}={c.runtime}" for n, c in self.components.items())
        return f"<OffloadRuntimeApplication {type(self.pipeline).__name__} {parts}>"


def _close(components: Any) -> None:
    for component in components:
        close = getattr(component.adapter, "close", None)
        if callable(close):
            close()


def _device(onload_device: object) -> torch.device:
    if isinstance(onload_device, torch.device):
        return onload_device
    if isinstance(onload_device, str):
        try:
            return torch.device(onload_device)
        except (RuntimeError, ValueError) as e:
            raise InvalidArgumentError(f"onload_device={onload_device!r} is not a device: {e}") from e
    raise InvalidArgumentError(f"onload_device={onload_device!r} must be a str such as 'cuda:0' or a torch.device")


def _component_names(pipe: DiffusionPipeline, components: object) -> list[str]:
    modules = [n for n, m in pipe.components.items() if isinstance(m, torch.nn.Module)]  # type: ignore[attr-defined]  # diffusers ships no types: mypy sees no components on a pipeline
    if components is None:
        if not modules:
            raise InvalidArgumentError(f"{type(pipe).__name__} has no torch.nn.Module components to offload")
        return modules
    if isinstance(components, str) or not isinstance(components, Sequence) or not components:
        raise InvalidArgumentError(f"components={components!r} must be a non-empty list of component names or None")
    names = list(components)
    for name in names:
        if name not in modules:
            raise InvalidArgumentError(
                f"components names {name!r}, which is not a module component of {type(pipe).__name__}; "
                f"choose from {modules}"
            )
    if len(set(names)) != len(names):
        raise InvalidArgumentError(f"components={names!r} lists a component twice")
    return names


def apply_offload_runtime(
    pipe: DiffusionPipeline,
    policy: HookPolicy | str | os.PathLike[str] | None = None,
    *,
    onload_device: str | torch.device,
    components: Sequence[str] | None = None,
    runtime: str = DIFFUSERS_GROUP_OFFLOAD,
    runtime_options: Mapping[str, Any] | None = None,
    tracker: MetricsTracker | None = None,
) -> OffloadRuntimeApplication:
    """Apply an offload runtime to pipeline components and attach the policy's phase hooks.

    Everything is checked before anything changes. The phase hooks are attached first (as
    :func:`~ddo_hooks.attach` does); then, inside a loading section, the runtime is applied to
    each component and its adapter made. If that fails, the hooks and adapters are removed again
    (components already offloaded stay so). With ``auxiliary_sources.enabled`` in the policy, the
    detachment runs once with the policy's ``max_copy_bytes``, before any forward, and its report
    is recorded under :data:`AUXILIARY_COMPONENT`.

    Args:
        pipe: A diffusers pipeline.
        policy: A :class:`~ddo_hooks.policy.model.HookPolicy`, the path of a YAML policy, or ``None``
            for the packaged default.
        onload_device: Where the runtime runs the components (``"cuda:0"``; ``"cpu"`` for tests).
        components: The components to offload; ``None``: every ``torch.nn.Module`` component.
        runtime: A registered runtime (:func:`~ddo_hooks.offload.runtimes.available_runtimes`).
        runtime_options: Options for the runtime; for diffusers group offloading the keywords of
            ``apply_group_offloading`` (default ``offload_type="block_level"``, ``num_blocks_per_group=1``).
        tracker: Where reports are recorded (a new tracker when ``None``).

    Returns:
        The :class:`OffloadRuntimeApplication`.

    Raises:
        InvalidArgumentError: A malformed argument (named in the message), a component already
            offloaded, or options the runtime rejects.
        PolicyError: The policy is invalid.
    """
    if not isinstance(pipe, DiffusionPipeline):
        raise InvalidArgumentError(f"pipe must be a diffusers DiffusionPipeline, got {type(pipe).__name__}")
    device = _device(onload_device)
    engine = get_offload_runtime(runtime)
    if runtime_options is None:
        runtime_options = {}
    if not isinstance(runtime_options, Mapping) or not all(isinstance(k, str) for k in runtime_options):
        raise InvalidArgumentError(
            f"runtime_options must be a mapping of option names to values, got {runtime_options!r}"
        )
    options = dict(runtime_options)
    names = _component_names(pipe, components)
    for name in names:
        if engine.validate is not None:
            engine.validate(getattr(pipe, name), device, options)
    attachment = attach(pipe, policy, tracker=tracker)
    applied: dict[str, OffloadedComponent] = {}
    try:
        with attachment.loading(f"apply_offload_runtime({engine.name})"):
            for name in names:
                module = getattr(pipe, name)
                try:
                    engine.apply(module, device, options)
                except (ValueError, TypeError) as e:
                    if isinstance(e, DdoHooksError):
                        raise
                    raise InvalidArgumentError(
                        f"runtime {engine.name!r} rejected runtime_options={options!r} for {name!r}: {e}"
                    ) from e
                adapter = engine.adapter(module)
                if not isinstance(adapter, SourceObservationAdapter):
                    raise InvalidArgumentError(
                        f"runtime {engine.name!r} made a {type(adapter).__name__} for {name!r}, which does not "
                        "implement SourceObservationAdapter (is_attached, execution_started, native_binding_count)"
                    )
                applied[name] = OffloadedComponent(name, module, engine.name, adapter)
    except BaseException:
        _close(applied.values())
        attachment.detach()
        raise
    result = OffloadRuntimeApplication(pipe, attachment, applied)
    settings = attachment.policy.auxiliary_sources
    if settings.enabled:
        report = result.detach_auxiliary_cpu_sources(enabled=True, max_copy_bytes=settings.max_copy_bytes)
        attachment.record(report, component=AUXILIARY_COMPONENT)
        result.auxiliary_report = report
    return result
