"""Running an attachment's boundaries: the actions, in the release slot, and one outcome for each.

:func:`bind_actions` binds each action the policy names to what runs it, once, at attach. The phase
machine says when a boundary of a call is due; :class:`BoundaryRunner` runs the policy's
actions there, all of them in one hold of the process-wide release slot
(:func:`ddo_hooks.release.guard.boundary_slot`), so that no action runs beside a call, a loading
section or a release of another attached pipeline. A boundary that may not run is recorded as a
``phase_boundary_refusal`` for each of its actions. Every call gets exactly one outcome per action
and boundary, also an ``after_call`` deferred until the pipeline has been idle (``idle:``): it runs,
or it is recorded as not reached when the next call starts, the attachment is detached, the pipeline
is collected or the interpreter exits first; one that is running when the attachment is detached
finishes its current action, records the others as not reached, and detach waits for it. A deferred
boundary runs on a timer thread, where no caller can be told of a failure: an action that raises
there is recorded as ``action_failed`` and logged, and a sink failure is kept in ``sink_failures``.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeGuard

from ddo_hooks.actions.contract import BoundaryContext, RegisteredAction, ResolvedAction
from ddo_hooks.actions.registry import REGISTRY, ActionRegistry
from ddo_hooks.boundaries import AFTER_CALL, BOUNDARIES, REFUSAL_REASONS, RefusalReason
from ddo_hooks.errors import BoundaryRefusedError, ReportSinkError
from ddo_hooks.hooks.components import Components
from ddo_hooks.hooks.idle import Handle
from ddo_hooks.hooks.idle import scheduler as idle_scheduler
from ddo_hooks.hooks.phases import Call, CallPhases
from ddo_hooks.hooks.recorder import Recorder
from ddo_hooks.ledger import LEDGER, Settles
from ddo_hooks.policy.model import HookPolicy
from ddo_hooks.release import guard
from ddo_hooks.reports.boundary import (
    ActionReport,
    BoundaryRefusal,
    BoundaryRefusalReport,
    BoundaryRefusalSetup,
    RequestedBy,
)

__all__ = ["BoundActions", "BoundaryRunner", "bind_actions", "each_action"]

_log = logging.getLogger("ddo_hooks")


BoundActions: TypeAlias = dict[str, tuple[tuple[ResolvedAction[Any], RegisteredAction[Any]], ...]]
"""Each boundary's actions as :func:`bind_actions` gives them: the policy's resolved action and what runs it."""


def bind_actions(pipeline: Any, policy: HookPolicy, registry: ActionRegistry = REGISTRY) -> BoundActions:
    """Resolve each boundary's actions by name and run each one's check: the one pass :func:`~ddo_hooks.attach` makes.

    Args:
        pipeline: The pipeline being attached.
        policy: The policy being attached.
        registry: Where each action is found by name (the process's :data:`~ddo_hooks.actions.registry.REGISTRY`
            by default).

    Returns:
        For each boundary, in firing order, its actions in order: each as the policy resolved it
        (:meth:`~ddo_hooks.policy.model.HookPolicy.actions`; validated against the options model of an
        action registered since the policy loaded) with the registered action that runs it.

    Raises:
        PolicyError: An action is not in ``registry`` (as :meth:`~ddo_hooks.actions.registry.ActionRegistry.resolve`),
            its options do not fit its model, or its check refused.
        InvalidArgumentError: An action's check refused the pipeline.

    Examples:
        >>> from ddo_hooks import HookPolicy
        >>> bound = bind_actions(None, HookPolicy.default())
        >>> [(spec.options.collect, action.component("after_call")) for spec, action in bound["after_call"]]
        [('auto', 'host_cache_after_call')]
    """
    bound: BoundActions = {}
    for boundary in BOUNDARIES:
        pairs = []
        for resolved in policy.actions(boundary):
            action = registry.resolve(resolved.name, where=policy.locate(resolved.at))
            spec = policy.fitted(resolved, action)
            if action.check is not None:
                action.check(pipeline, policy, spec)
            pairs.append((spec, action))
        bound[boundary] = tuple(pairs)
    return bound


def each_action(bound: BoundActions) -> list[tuple[RegisteredAction[Any], tuple[ResolvedAction[Any], ...]]]:
    """Each action the policy names, once, in the order it first appears, with its entries in boundary order.

    The attachment takes each one's steps at attach and at detach from it.
    """
    found: dict[str, tuple[RegisteredAction[Any], list[ResolvedAction[Any]]]] = {}
    for pairs in bound.values():
        for spec, action in pairs:
            found.setdefault(action.name, (action, []))[1].append(spec)
    return [(action, tuple(entries)) for action, entries in found.values()]


@dataclass(eq=False)
class _Deferred:
    """A boundary of one call waiting for the idle delay."""

    boundary: str
    call: Call
    handle: Handle | None = None

    @property
    def index(self) -> int:
        return self.call.index


class BoundaryRunner:
    """The boundaries of one attached pipeline.

    Args:
        pipeline: The pipeline, held weakly.
        policy: The attached policy.
        recorder: Where every outcome is recorded.
        components: What left the pipeline between boundaries.
        actions: Each boundary's actions, bound once at attach (:func:`bind_actions`).
        holder: Which other attached pipeline holds a module (see :meth:`BoundaryContext.held_elsewhere`).
    """

    def __init__(
        self,
        pipeline: weakref.ref[Any],
        policy: HookPolicy,
        recorder: Recorder,
        components: Components,
        actions: BoundActions,
        holder: Callable[[Any], str | None] | None = None,
    ) -> None:
        self._pipeline = pipeline
        self.owner = type(pipeline()).__name__
        self.policy = policy
        self.recorder = recorder
        self.components = components
        self.holder = holder
        self.actions = actions
        self.closed = False
        self._state: dict[str, dict[str, Any]] = {}  # each action's own state across boundaries
        self._lock = threading.RLock()
        self._idle = threading.Condition(self._lock)  # notified when a deferred run ends
        self._deferred: dict[int, _Deferred] = {}  # by call index
        self._running: list[int] = []  # the threads running a deferred boundary now
        self.machine = CallPhases(self.owner, self._on_due, self._on_missed, on_start=self._on_start)
        LEDGER.write(self, settles=Settles(BoundaryRunner._after_fork, BoundaryRunner._at_exit))

    # -- from the phase machine --------------------------------------------------------------
    def enabled(self, boundary: str) -> bool:
        """Whether the policy runs ``boundary`` and the attachment is still on."""
        return not self.closed and self.policy.enabled and self.policy.boundary(boundary).enabled

    def _on_due(self, boundary: str, call: Call) -> None:
        """A boundary of ``call`` is due at a quiet point of that call."""
        if not self.enabled(boundary):
            return
        others = [other for other in self.machine.calls() if other is not call]
        if others:
            detail = f"call {others[0].index} of this {self.owner} is running in another thread"
            self.refuse_all(boundary, "concurrent_call", detail, "pipeline", call.index)
            return
        idle = self.policy.boundary(boundary).idle
        if idle is None:
            self.run(boundary, "pipeline", call)
            return
        deferred = _Deferred(boundary, call)  # pending before its timer can fire, however short the delay
        with self._lock:
            self._deferred[call.index] = deferred
        deferred.handle = idle_scheduler().call_later(idle, functools.partial(self._run_deferred, deferred))

    def _on_start(self, call: Call) -> None:
        """A call starts: a deferred boundary still waiting is cancelled (the pipeline was not idle)."""
        if self._deferred:
            idle = self.policy.boundary(AFTER_CALL).idle
            self.cancel_deferred(f"call {call.index} started before {self.owner} had been idle for {idle:g} s")

    def _on_missed(self, boundary: str, call: Call, detail: str) -> None:
        """``call`` ended without reaching ``boundary``."""
        if self.enabled(boundary):
            self.refuse_all(boundary, "not_reached", detail, "pipeline", call.index)

    # -- deferred boundaries -----------------------------------------------------------------
    def cancel_deferred(self, why: str) -> None:
        """Cancel every deferred boundary still waiting, each recorded as not reached because of ``why``.

        Raises:
            ReportSinkError: A record could not be written and the policy says ``raise`` (the
                others are still recorded).
        """
        with self._lock:
            waiting = sorted(self._deferred.values(), key=lambda d: d.index)
            self._deferred.clear()
        failure = None
        for deferred in waiting:
            if deferred.handle is not None:
                deferred.handle.cancel()
            detail = f"the deferred {deferred.boundary} was cancelled: {why}"
            try:
                self.refuse_all(deferred.boundary, "not_reached", detail, "pipeline", deferred.index)
            except ReportSinkError as e:
                failure = failure or e
        if failure is not None:
            raise failure

    def _run_deferred(self, deferred: _Deferred) -> None:
        """The idle delay passed (on a timer thread): run the boundary, and keep whatever fails."""
        with self._lock:
            if self._deferred.get(deferred.index) is not deferred:
                return  # cancelled meanwhile, and recorded as such
            del self._deferred[deferred.index]
            self._running.append(threading.get_ident())
        try:
            if self._pipeline() is None:
                detail = f"the {self.owner} was collected before the idle delay passed"
                self.refuse_all(deferred.boundary, "not_reached", detail, "pipeline", deferred.index)
            else:
                self.run(deferred.boundary, "pipeline", deferred.call, deferred=True)
        except ReportSinkError as e:
            self.recorder.note_sink_failure(e)
        finally:
            with self._idle:
                self._running.remove(threading.get_ident())
                self._idle.notify_all()

    def wait_for_deferred(self, timeout: float) -> bool:
        """Wait until no deferred boundary is running (one that the caller's own thread runs is not waited for).

        Returns:
            Whether none is running now (``False``: one still ran after ``timeout`` seconds).
        """
        me = threading.get_ident()
        with self._idle:
            return self._idle.wait_for(lambda: all(t == me for t in self._running), timeout)

    # -- running -------------------------------------------------------------------------------
    def run(
        self,
        boundary: str,
        requested_by: RequestedBy,
        call: Call | None,
        index: int | None = None,
        *,
        deferred: bool = False,
    ) -> list[Any]:
        """Run ``boundary``'s actions in one hold of the release slot, or refuse them all.

        Args:
            boundary: The boundary.
            requested_by: ``pipeline`` (a call's signal) or ``host`` (a request).
            call: The call whose quiet point this is (``None``: a host request). A deferred run
                passes its call too: with no delay it can start before that call's end has
                closed its section.
            index: The call index to record (default: ``call``'s, else the latest).
            deferred: On a timer thread: an action that raises is recorded as ``action_failed``
                and the next one runs, since no caller could be told.

        Returns:
            The reports produced.
        """
        if index is None:
            index = self.machine.call_index if call is None else call.index
        with guard.quiet_point(None if call is None else call.section), contextlib.ExitStack() as slot:
            try:
                slot.enter_context(guard.boundary_slot())
            except BoundaryRefusedError as e:
                reason = e.reason if _is_reason(e.reason) else "action_refused"
                return self.refuse_all(boundary, reason, str(e), requested_by, index)
            return self._run_actions(boundary, requested_by, index, deferred, () if call is None else call.done)

    def _run_actions(
        self, boundary: str, requested_by: RequestedBy, index: int, deferred: bool, done: tuple[str, ...]
    ) -> list[Any]:
        pipe = self._pipeline()
        dropped = self.components.note(pipe)
        left = self.components.take_left()
        produced: list[Any] = []
        for spec, action in self.actions[boundary]:
            if deferred and self.closed:  # detached meanwhile: what did not start never starts
                detail = f"the attachment was detached while the deferred {boundary} ran, before this action started"
                refused = self._refusal(boundary, action, "not_reached", detail, requested_by, index)
                self.recorder.record(action.component(boundary), refused, boundary, index)
                produced.append(refused)
                continue
            context = BoundaryContext(
                pipeline=pipe,
                boundary=boundary,
                action=action.name,
                call_index=index,
                device=self.policy.device,
                tracker=self.recorder.tracker,
                policy=self.policy,
                options=copy.deepcopy(spec.options) if isinstance(spec.options, Mapping) else spec.options,
                dropped=dropped,
                dropped_names=left,
                done=done,
                state=self._state.setdefault(action.name, {}),
                on_survivors=self.components.forget,
                holder=self.holder,
            )
            started = time.perf_counter()
            try:
                report = action(context)
                if isinstance(report, ActionReport):  # how long the action took, for its row
                    report = report.timed(time.perf_counter() - started)
            except BoundaryRefusedError as e:
                reason: RefusalReason = "action_refused"
                detail = f"{e.reason}: {e}"
                if _is_reason(e.reason):
                    reason, detail = e.reason, str(e)
                report = self._refusal(boundary, action, reason, detail, requested_by, index)
            except Exception as e:
                if not deferred:
                    raise
                _log.warning("ddo_hooks: action %r of the deferred %s failed", action.name, boundary, exc_info=True)
                detail = f"it raised {type(e).__name__}: {e}"
                report = self._refusal(boundary, action, "action_failed", detail, requested_by, index)
            if report is None:
                continue
            self.recorder.record(action.component(boundary), report, boundary, index)
            produced.append(report)
        return produced

    def _refusal(
        self,
        boundary: str,
        action: RegisteredAction[Any],
        reason: RefusalReason,
        detail: str,
        requested_by: RequestedBy,
        index: int,
    ) -> BoundaryRefusalReport:
        refusal = BoundaryRefusal(boundary=boundary, action=action.name, reason=reason, detail=detail,
                                  requested_by=requested_by, call_index=index)  # fmt: skip
        return BoundaryRefusalReport(setup=BoundaryRefusalSetup(boundary_refusal=refusal))

    def refuse_all(
        self, boundary: str, reason: RefusalReason, detail: str, requested_by: RequestedBy, index: int
    ) -> list[Any]:
        """Record a refusal for every action of ``boundary``; return them."""
        produced = []
        for _, action in self.actions[boundary]:
            report = self._refusal(boundary, action, reason, detail, requested_by, index)
            self.recorder.record(action.component(boundary), report, boundary, index)
            produced.append(report)
        return produced

    # -- the process -------------------------------------------------------------------------
    def close(self, why: str) -> None:
        """Run nothing more; the deferred boundaries still waiting are recorded as cancelled because of ``why``.

        A deferred boundary already running finishes the action it is in and starts no other
        (:meth:`wait_for_deferred` waits for it).

        Raises:
            ReportSinkError: As :meth:`cancel_deferred`.
        """
        self.closed = True
        LEDGER.erase(self, "settles")
        self.cancel_deferred(why)

    def _at_exit(self) -> None:
        """The interpreter exits: the deferred boundaries still waiting are recorded as cancelled."""
        self.cancel_deferred("the interpreter exited before the idle delay passed")

    def _after_fork(self) -> None:
        """Start over in a forked child.

        No timer of the parent runs there (the parent records those outcomes), no other thread's call
        goes on, and the child records under a run of its own.
        """
        self._lock = threading.RLock()
        self._idle = threading.Condition(self._lock)
        self._deferred.clear()
        self._running.clear()
        self.machine.after_fork()
        self.recorder.after_fork()


def _is_reason(code: str) -> TypeGuard[RefusalReason]:
    """Whether ``code`` is a refusal reason a report may hold (:data:`~ddo_hooks.boundaries.REFUSAL_REASONS`)."""
    return code in REFUSAL_REASONS
