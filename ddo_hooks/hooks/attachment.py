"""``attach``: put a hook policy on a diffusers pipeline; ``Attachment``: the handle.

Examples:
    >>> from ddo_hooks import attach, MetricsTracker
    >>> from ddo_hooks.testing.tiny_pipelines import build_pipeline, call_kwargs
    >>> pipe = build_pipeline("sd")
    >>> tracker = MetricsTracker()
    >>> with attach(pipe, tracker=tracker) as attachment:
    ...     _ = pipe(**call_kwargs("sd"))
    >>> [(c, r.release.phase, r.release.status) for c, r in tracker.records()]  # doctest: +NORMALIZE_WHITESPACE
    [('host_cache_before_transformer', 'before_transformer', 'noop'),
     ('host_cache_before_vae', 'before_vae', 'noop'),
     ('host_cache_after_call', 'after_call', 'noop')]
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import weakref
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ddo_hooks.boundaries import BOUNDARIES
from ddo_hooks.errors import BoundaryRefusedError, InvalidArgumentError, PolicyError
from ddo_hooks.hooks.actions import BoundaryContext, RegisteredAction, resolve_action
from ddo_hooks.hooks.phases import CallPhases, Phase
from ddo_hooks.policy.model import HookPolicy
from ddo_hooks.release import guard
from ddo_hooks.reports.boundary import BoundaryRefusal, BoundaryRefusalReport, BoundaryRefusalSetup
from ddo_hooks.reports.tracker import MetricsTracker

if TYPE_CHECKING:
    from diffusers import DiffusionPipeline

__all__ = ["Attachment", "attach"]

_ATTACHED: weakref.WeakKeyDictionary[Any, Attachment] = weakref.WeakKeyDictionary()


def _load_policy(policy: HookPolicy | str | os.PathLike[str] | None) -> HookPolicy:
    if policy is None:
        return HookPolicy.default()
    if isinstance(policy, HookPolicy):
        return policy
    if isinstance(policy, (str, os.PathLike)):
        return HookPolicy.from_yaml(policy)
    raise InvalidArgumentError(
        f"policy must be a HookPolicy, a path to a YAML policy or None (the default policy), "
        f"got {type(policy).__name__}"
    )


def attach(
    pipeline: DiffusionPipeline,
    policy: HookPolicy | str | os.PathLike[str] | None = None,
    *,
    tracker: MetricsTracker | None = None,
) -> Attachment:
    """Attach phase-boundary hooks to ``pipeline`` as ``policy`` says.

    Args:
        pipeline: A diffusers pipeline (any ``DiffusionPipeline``).
        policy: A :class:`~ddo_hooks.policy.model.HookPolicy`, the path of a YAML policy, or
            ``None`` for the packaged default (all three boundaries release the host cache).
        tracker: Where reports are recorded (a new tracker when ``None``).

    Returns:
        The :class:`Attachment` handle; also a context manager that detaches on exit.

    Raises:
        InvalidArgumentError: Not a pipeline, already attached, or the pipeline gives no
            signal for a boundary the policy enables (the message says how to fix it).
        PolicyError: The policy is invalid or names an unknown action.
    """
    from diffusers import DiffusionPipeline  # imported when the first attachment is made

    if not isinstance(pipeline, DiffusionPipeline):
        raise InvalidArgumentError(f"attach() needs a diffusers DiffusionPipeline, got {type(pipeline).__name__}")
    if tracker is not None and not isinstance(tracker, MetricsTracker):
        raise InvalidArgumentError(f"tracker must be a ddo_hooks.MetricsTracker, got {type(tracker).__name__}")
    if pipeline in _ATTACHED:
        raise InvalidArgumentError(
            f"this {type(pipeline).__name__} already has ddo_hooks attached; call detach() on that attachment first"
        )
    attachment = Attachment(pipeline, _load_policy(policy), tracker or MetricsTracker())
    _ATTACHED[pipeline] = attachment
    return attachment


class Attachment:
    """The handle of a policy attached to a pipeline. Create it with :func:`attach`."""

    def __init__(self, pipeline: DiffusionPipeline, policy: HookPolicy, tracker: MetricsTracker) -> None:
        self.pipeline = pipeline
        self.policy = policy
        self.tracker = tracker
        self._owner = type(pipeline).__name__
        self._reports: list[Any] = []
        self._lock = threading.Lock()
        self._detached = False
        self._actions = self._resolve_actions()
        self._sink = self._prepare_sink()
        self._known: dict[str, weakref.ref] = {}
        self._dropped: dict[str, weakref.ref] = {}
        self._note_components()
        self.machine = CallPhases(self._owner, lambda boundary: self._fire(boundary, "pipeline"))
        from ddo_hooks.hooks.signals import PipelineSignals  # imports diffusers' hook registry

        self._signals = PipelineSignals(pipeline, self.machine)
        self._signals.check(policy.enabled_boundaries() if policy.enabled else ())
        self._signals.install()

    # -- public ---------------------------------------------------------------------------
    @property
    def reports(self) -> list[Any]:
        """The reports this attachment recorded, in order (refusals included)."""
        with self._lock:
            return list(self._reports)

    @property
    def phase(self) -> Phase:
        """Where the pipeline call is now."""
        return self.machine.phase

    @property
    def call_index(self) -> int:
        """How many pipeline calls the attachment has seen."""
        return self.machine.call_index

    @property
    def detached(self) -> bool:
        """Whether :meth:`detach` ran."""
        return self._detached

    def boundary(self, name: str) -> list[Any]:
        """Run a boundary now, on the host's request.

        It runs only at a quiet point: never inside the denoising loop, while components
        load, during another release, or while a call runs in another thread; a refused
        request is recorded as a ``phase_boundary_refusal`` report, never executed.

        Args:
            name: ``before_transformer``, ``before_vae`` or ``after_call``.

        Returns:
            The reports the boundary produced.

        Raises:
            InvalidArgumentError: Unknown or disabled boundary, or the attachment is detached.
        """
        if name not in BOUNDARIES:
            raise InvalidArgumentError(f"unknown boundary {name!r}; boundaries are {', '.join(BOUNDARIES)}")
        if self._detached:
            raise InvalidArgumentError("this attachment is detached; attach() again to request boundaries")
        if not (self.policy.enabled and self.policy.boundary(name).enabled):
            raise InvalidArgumentError(
                f"boundary {name!r} is disabled by the policy ({self.policy.source}); enable it there to request it"
            )
        refusal = self.machine.refusal_for_host()
        if refusal is not None:
            return self._refuse_all(name, *refusal, "host")
        return self._fire(name, "host")

    @contextlib.contextmanager
    def loading(self, what: str = "host loading") -> Iterator[None]:
        """Mark a loading section (e.g. ``from_pretrained`` of a replacement component).

        Boundaries anywhere in the process are refused while it is open.
        """
        with guard.section("loading", f"{self._owner} ({what})"):
            yield

    def detach(self) -> None:
        """Remove every hook, wrapper and attribute this attachment added; a second call does nothing."""
        if self._detached:
            return
        self._detached = True
        self.machine.reset()
        self._signals.remove()
        if _ATTACHED.get(self.pipeline) is self:
            del _ATTACHED[self.pipeline]

    def __enter__(self) -> Attachment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()

    def __repr__(self) -> str:
        state = "detached" if self._detached else self.machine.phase.value
        return f"<Attachment {self._owner} {state} calls={self.call_index} reports={len(self._reports)}>"

    # -- setup ----------------------------------------------------------------------------
    def _resolve_actions(self) -> dict[str, list[tuple[Any, RegisteredAction]]]:
        resolved: dict[str, list[tuple[Any, RegisteredAction]]] = {}
        for boundary in BOUNDARIES:
            specs = self.policy.actions(boundary)
            resolved[boundary] = [
                (
                    spec,
                    resolve_action(spec.name, where=self.policy.locate(("boundaries", boundary, "actions", i))),
                )
                for i, spec in enumerate(specs)
            ]
        return resolved

    # -- boundaries -----------------------------------------------------------------------
    def _note_components(self) -> dict[str, weakref.ref]:
        """Update which components left the pipeline since last seen; return those to be freed."""
        current = {
            name: module for name, module in self.pipeline.components.items() if isinstance(module, torch.nn.Module)
        }
        current_ids = {id(m) for m in current.values()}
        for name, ref in list(self._known.items()):
            module = ref()
            if module is None:
                del self._known[name]
            elif id(module) not in current_ids:
                del self._known[name]
                key, n = name, 2
                while key in self._dropped and self._dropped[key]() is not None:
                    key, n = f"{name}#{n}", n + 1
                self._dropped[key] = ref
        for name, module in current.items():
            if name not in self._known or self._known[name]() is not module:
                self._known[name] = weakref.ref(module)
        self._dropped = {k: r for k, r in self._dropped.items() if r() is not None}
        return dict(self._dropped)

    def _fire(self, boundary: str, requested_by: str) -> list[Any]:
        if self._detached or not (self.policy.enabled and self.policy.boundary(boundary).enabled):
            return []
        busy = guard.busy_reason()
        if busy is not None:
            return self._refuse_all(boundary, busy[0], busy[1], requested_by)
        dropped = self._note_components()
        produced = []
        for spec, action in self._actions[boundary]:
            context = BoundaryContext(
                pipeline=self.pipeline,
                boundary=boundary,
                action=action.name,
                call_index=self.machine.call_index,
                device=self.policy.device,
                tracker=self.tracker,
                policy=self.policy,
                options=dict(spec.options),
                dropped=dropped,
                on_survivors=self._forget_dropped,
            )
            try:
                report = action(context)
            except BoundaryRefusedError as e:
                report = self._refusal(boundary, action, e.reason, str(e), requested_by)
            if report is None:
                continue
            self._record(action.component(boundary), report)
            produced.append(report)
        return produced

    def _forget_dropped(self, names: Iterable[str]) -> None:
        """Dropped components referenced elsewhere: do not collect fully for them again."""
        for name in names:
            self._dropped.pop(name, None)

    def _refusal(
        self, boundary: str, action: RegisteredAction, reason: str, detail: str, requested_by: str
    ) -> BoundaryRefusalReport:
        refusal = BoundaryRefusal(
            boundary=boundary,
            action=action.name,
            reason=reason,  # type: ignore[arg-type]
            detail=detail,
            requested_by=requested_by,  # type: ignore[arg-type]
            call_index=self.machine.call_index,
        )
        return BoundaryRefusalReport(setup=BoundaryRefusalSetup(boundary_refusal=refusal))

    def _refuse_all(self, boundary: str, reason: str, detail: str, requested_by: str) -> list[Any]:
        produced = []
        for _, action in self._actions[boundary]:
            report = self._refusal(boundary, action, reason, detail, requested_by)
            self._record(action.component(boundary), report)
            produced.append(report)
        return produced

    def _record(self, component: str, report: Any) -> None:
        self.tracker.record_ddo_metrics(report, component=component)
        with self._lock:
            self._reports.append(report)
        if self._sink is not None:
            with self._sink.open("a", encoding="utf-8") as sink:
                sink.write(json.dumps({"component": component, "report": report.model_dump(mode="json")}) + "\n")

    def _prepare_sink(self) -> Path | None:
        """Resolve the policy's report sink now, creating its folder, so a bad path fails here, not mid-call."""
        if self.policy.report_sink is None:
            return None
        path = self.policy.resolve_path(self.policy.report_sink)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.open("a", encoding="utf-8").close()
        except OSError as e:
            raise PolicyError(
                f"{self.policy.locate(('report_sink',))}: report_sink {str(path)!r} cannot be written: "
                f"{e.strerror or e}; point it at a writable file"
            ) from e
        return path
