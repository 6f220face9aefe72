"""``attach``: put a hook policy on a diffusers pipeline; ``Attachment``: the handle.

Every top-level call of an attached pipeline gives one outcome per boundary the policy enables
and per action: a report of the action (executed or an explicit no-op), or a refusal report
(route ``phase_boundary_refusal``) saying why it did not run: refused where it would not be
safe, or not reached by the call. Nothing is silent, and nothing keeps the pipeline alive:
the attachment holds it weakly, and a dropped pipeline is collected with its attachment.

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

import collections
import contextlib
import functools
import json
import os
import threading
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ddo_hooks.boundaries import AFTER_CALL, BOUNDARIES, REFUSAL_REASONS
from ddo_hooks.errors import BoundaryRefusedError, InvalidArgumentError, PolicyError, ReportSinkError
from ddo_hooks.hooks.actions import BoundaryContext, RegisteredAction, resolve_action
from ddo_hooks.hooks.components import Components
from ddo_hooks.hooks.idle import Handle
from ddo_hooks.hooks.idle import scheduler as idle_scheduler
from ddo_hooks.hooks.phases import Call, CallPhases, Phase
from ddo_hooks.hooks.sink import ReportSink
from ddo_hooks.policy.model import HookPolicy
from ddo_hooks.release import guard
from ddo_hooks.reports.boundary import BoundaryRefusal, BoundaryRefusalReport, BoundaryRefusalSetup
from ddo_hooks.reports.envelope import RecordEnvelope, new_run_id
from ddo_hooks.reports.tracker import MetricsTracker

if TYPE_CHECKING:
    from diffusers import DiffusionPipeline

    from ddo_hooks.reports.repack import PinnedCopyRepackReport

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
        tracker: Where reports are recorded (when ``None``, a new tracker that keeps the
            policy's ``keep_reports``).

    Returns:
        The :class:`Attachment` handle; also a context manager that detaches on exit.

    Raises:
        InvalidArgumentError: Not a pipeline, or already attached.
        PolicyError: The policy is invalid, names an unknown action, or its ``report_sink``
            cannot be written.
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
    loaded = _load_policy(policy)
    attachment = Attachment(pipeline, loaded, tracker or MetricsTracker(max_records=loaded.keep_reports))
    _ATTACHED[pipeline] = attachment
    return attachment


class Attachment:
    """The handle of a policy attached to a pipeline. Create it with :func:`attach`."""

    def __init__(self, pipeline: DiffusionPipeline, policy: HookPolicy, tracker: MetricsTracker) -> None:
        self._pipeline = weakref.ref(pipeline)
        self.policy = policy
        self.tracker = tracker
        self._owner = type(pipeline).__name__
        self.run_id = new_run_id()
        """This attachment's run id, in the envelope of every record it makes."""
        self._reports: collections.deque[Any] = collections.deque(maxlen=policy.keep_reports)
        self._lock = threading.RLock()
        self._detached = False
        self._actions = self._resolve_actions()
        self._sink = self._prepare_sink()
        self._components = Components(pipeline)
        self._state: dict[str, dict[str, Any]] = {}  # each action's own state across boundaries
        self._pending: tuple[Handle, int] | None = None  # a deferred after_call, and its call
        self.machine = CallPhases(self._owner, self._on_due, self._on_missed, on_start=self._on_start)
        from ddo_hooks.hooks.signals import PipelineSignals  # imports diffusers' hook registry

        self._signals = PipelineSignals(pipeline, self.machine)
        self._signals.install()
        self.repack_report: PinnedCopyRepackReport | None = None
        """What the policy's ``pinned_copies.repack`` did at attach (``None`` when it is off); recorded with the
        other reports when it repacked or refused a component."""
        if policy.enabled and policy.pinned_copies.repack:
            self.repack_report = self._repack(pipeline)

    # -- public ---------------------------------------------------------------------------
    @property
    def pipeline(self) -> DiffusionPipeline | None:
        """The pipeline, or ``None`` once it was collected (the attachment never keeps it alive)."""
        return self._pipeline()

    @property
    def reports(self) -> list[Any]:
        """The reports this attachment recorded, in order (refusals included); at most ``keep_reports``."""
        with self._lock:
            return list(self._reports)

    def drain_reports(self) -> list[Any]:
        """Return the reports kept in memory, in order, and forget them."""
        with self._lock:
            drained = list(self._reports)
            self._reports.clear()
            return drained

    @property
    def sink_failures(self) -> list[str]:
        """The last failures to write to ``report_sink`` (empty when every write succeeded)."""
        return [] if self._sink is None else list(self._sink.failures)

    @property
    def phase(self) -> Phase:
        """Where the pipeline call is: this thread's call, else the oldest in progress, else IDLE."""
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

        It runs only at a quiet point of the process: never while a call of this pipeline is in
        progress (also not from a hook or callback inside one), beside a call of another attached
        pipeline, while components load, or during another release. A refused request is
        recorded as a ``phase_boundary_refusal`` report, never executed.

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
        index = self.machine.call_index
        own = self.machine.current()
        running = own if own is not None else next(iter(self.machine.calls()), None)
        if running is not None:
            where = "in this thread (from a hook or callback of the call)" if running is own else "in another thread"
            if running.phase is Phase.DENOISING:
                detail = f"{self._owner} is inside its denoising loop (call {running.index}, {where})"
                return self._refuse_all(name, "denoising", detail, "host", index)
            detail = f"call {running.index} of {self._owner} is running {where}"
            return self._refuse_all(name, "inference_in_progress", detail, "host", index)
        return self._run(name, "host", None)

    def drop(self, *names: str) -> None:
        """Take components off the pipeline so that the next boundary frees them, at once and cheaply.

        Each named component is set to ``None`` on the pipeline and loses every diffusers and
        accelerate hook, and the cycles removed hooks leave are broken (offloading hooks hold a
        component in reference cycles, which only a full garbage collection, 200-400 ms in a
        loaded process, would free). A component nobody else holds is then freed at once, its
        pinned copies go back to the cache, and the next boundary's release gives them back with a
        young collection. Hooks diffusers removed on its own before the drop (under streams, the
        first forward removes the lazy-prefetch hook and the layers' execution trackers) are cleared
        too when the component was already offloaded at :func:`attach`; one still alive at that
        boundary costs a full collection there, and one still held elsewhere is named as a
        survivor in that boundary's report.

        Args:
            names: Component names, e.g. ``"text_encoder", "text_encoder_2"``.

        Raises:
            InvalidArgumentError: No name, a name that is not a component of the pipeline, or the
                attachment is detached or its pipeline gone.
            BoundaryRefusedError: A call of the pipeline is in progress (``inference_in_progress``).
        """
        pipe = self.pipeline
        if self._detached or pipe is None:
            raise InvalidArgumentError(
                "drop() needs an attached pipeline; this attachment is detached or its pipeline gone"
            )
        if not names:
            raise InvalidArgumentError("drop() needs at least one component name, e.g. drop('text_encoder')")
        components = pipe.components
        unknown = [name for name in names if name not in components]
        if unknown:
            raise InvalidArgumentError(
                f"{self._owner} has no component {unknown[0]!r}; its components: {', '.join(components)}"
            )
        running = self.machine.calls()
        if running:
            raise BoundaryRefusedError(
                "inference_in_progress",
                f"cannot drop components while call {running[0].index} of {self._owner} is in progress",
            )
        self._components.note(pipe)  # so that what left earlier is not mistaken for these
        with guard.section("loading", f"{self._owner}.drop({', '.join(names)})"):
            self._components.drop(pipe, names)

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
        self._cancel_pending("the attachment was detached before the idle delay passed")
        self._detached = True
        self._signals.remove()
        pipe = self.pipeline
        if pipe is not None and _ATTACHED.get(pipe) is self:
            del _ATTACHED[pipe]

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

    def _repack(self, pipeline: DiffusionPipeline) -> PinnedCopyRepackReport:
        """Repack group offloading's pinned copies to their exact size, once, before the first call."""
        from ddo_hooks.release.repack import repack_pinned_copies

        try:
            report = repack_pinned_copies(pipeline, device=self.policy.device, phase="attach")
        except BaseException:
            self.detach()
            raise
        if report.repack.status == "executed" or any(c.status == "refused" for c in report.repack.components):
            self._record("pinned_copy_repack", report, None, 0)
        return report

    def _prepare_sink(self) -> ReportSink | None:
        """Resolve the policy's report sink and write to it once now, so a bad path fails here, not mid-call."""
        if self.policy.report_sink is None:
            return None
        sink = ReportSink(self.policy.resolve_path(self.policy.report_sink), on_failure=self.policy.report_sink_failure)
        try:
            sink.probe()
        except ReportSinkError as e:
            raise PolicyError(f"{self.policy.locate(('report_sink',))}: {e}") from e
        return sink

    # -- boundaries -----------------------------------------------------------------------
    def _enabled(self, boundary: str) -> bool:
        return not self._detached and self.policy.enabled and self.policy.boundary(boundary).enabled

    def _on_due(self, boundary: str, call: Call) -> None:
        """A boundary of ``call`` is due at a quiet point of that call."""
        if not self._enabled(boundary):
            return
        idle = self.policy.boundary(boundary).idle
        if idle is not None:  # after_call, deferred until the pipeline has been idle this long
            handle = idle_scheduler().call_later(idle, functools.partial(self._run_deferred, boundary, call.index))
            with self._lock:
                self._pending = (handle, call.index)
            return
        others = [other for other in self.machine.calls() if other is not call]
        if others:
            detail = f"call {others[0].index} of this {self._owner} is running in another thread"
            self._refuse_all(boundary, "concurrent_call", detail, "pipeline", call.index)
            return
        self._run(boundary, "pipeline", call)

    def _on_start(self, call: Call) -> None:
        """A call starts: a deferred boundary still waiting is cancelled (the pipeline was not idle)."""
        if self._pending is not None:
            idle = self.policy.boundary(AFTER_CALL).idle
            self._cancel_pending(f"call {call.index} started before {self._owner} had been idle for {idle:g} s")

    def _cancel_pending(self, why: str) -> None:
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is not None:
            handle, index = pending
            handle.cancel()
            self._refuse_all(
                AFTER_CALL, "not_reached", f"the deferred after_call was cancelled: {why}", "pipeline", index
            )

    def _run_deferred(self, boundary: str, index: int) -> None:
        """The idle delay passed: run the deferred boundary now, at a quiet point of the process."""
        with self._lock:
            if self._pending is None or self._pending[1] != index or self._detached:
                return  # cancelled meanwhile
            self._pending = None
        self._run(boundary, "pipeline", None, index)

    def _on_missed(self, boundary: str, call: Call, detail: str) -> None:
        """``call`` ended without reaching ``boundary``."""
        if self._enabled(boundary):
            self._refuse_all(boundary, "not_reached", detail, "pipeline", call.index)

    def _run(self, boundary: str, requested_by: str, call: Call | None, index: int | None = None) -> list[Any]:
        if index is None:
            index = self.machine.call_index if call is None else call.index
        with guard.quiet_point(None if call is None else call.section):
            busy = guard.busy_reason()
            if busy is not None:
                return self._refuse_all(boundary, busy[0], busy[1], requested_by, index)
            pipe = self.pipeline
            dropped = self._components.note(pipe)
            left = self._components.take_left()
            produced = []
            for spec, action in self._actions[boundary]:
                context = BoundaryContext(
                    pipeline=pipe,
                    boundary=boundary,
                    action=action.name,
                    call_index=index,
                    device=self.policy.device,
                    tracker=self.tracker,
                    policy=self.policy,
                    options=dict(spec.options),
                    dropped=dropped,
                    left=left,
                    state=self._state.setdefault(action.name, {}),
                    on_survivors=self._components.forget,
                )
                try:
                    report = action(context)
                except BoundaryRefusedError as e:
                    reason, detail = e.reason, str(e)
                    if reason not in REFUSAL_REASONS:
                        reason, detail = "action_refused", f"{e.reason}: {e}"
                    report = self._refusal(boundary, action, reason, detail, requested_by, index)
                if report is None:
                    continue
                self._record(action.component(boundary), report, boundary, index)
                produced.append(report)
        return produced

    def _refusal(
        self, boundary: str, action: RegisteredAction, reason: str, detail: str, requested_by: str, index: int
    ) -> BoundaryRefusalReport:
        refusal = BoundaryRefusal(
            boundary=boundary,
            action=action.name,
            reason=reason,  # type: ignore[arg-type]
            detail=detail,
            requested_by=requested_by,  # type: ignore[arg-type]
            call_index=index,
        )
        return BoundaryRefusalReport(setup=BoundaryRefusalSetup(boundary_refusal=refusal))

    def _refuse_all(self, boundary: str, reason: str, detail: str, requested_by: str, index: int) -> list[Any]:
        produced = []
        for _, action in self._actions[boundary]:
            report = self._refusal(boundary, action, reason, detail, requested_by, index)
            self._record(action.component(boundary), report, boundary, index)
            produced.append(report)
        return produced

    def record(self, report: Any, *, component: str, boundary: str | None = None) -> None:
        """Record a report with this attachment's envelope: in the tracker, in memory and in the sink.

        The boundaries record their own reports; use this for a report made elsewhere (e.g. the
        auxiliary source detachment of ``apply_dynamic_offload``).
        """
        self._record(component, report, boundary, self.machine.call_index)

    def _record(self, component: str, report: Any, boundary: str | None, index: int) -> None:
        envelope = RecordEnvelope.now(run_id=self.run_id, call_index=index, boundary=boundary)
        self.tracker.record_ddo_metrics(report, component=component, envelope=envelope)
        with self._lock:
            self._reports.append(report)
        if self._sink is not None:
            line = {"component": component, "report": report.model_dump(mode="json")}
            self._sink.write(json.dumps({**line, "envelope": envelope.model_dump(mode="json")}))
