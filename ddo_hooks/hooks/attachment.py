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
    >>> records = tracker.records()
    >>> [(c, r.release.phase, r.release.status) for c, r in records]  # doctest: +NORMALIZE_WHITESPACE
    [('host_cache_before_transformer', 'before_transformer', 'noop'),
     ('host_cache_before_vae', 'before_vae', 'noop'),
     ('host_cache_after_call', 'after_call', 'noop')]
"""

from __future__ import annotations

import contextlib
import functools
import os
import typing
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ddo_hooks import _moved
from ddo_hooks.actions.registry import ActionRegistry, chosen_registry
from ddo_hooks.boundaries import BOUNDARIES
from ddo_hooks.errors import BoundaryRefusedError, DetachTimeoutError, InvalidArgumentError, ReportSinkError
from ddo_hooks.hooks.attach_inputs import chosen_policy, with_encoders
from ddo_hooks.hooks.attach_steps import FromFiles, Repack, Ring, attach_steps, other_holder, other_holder_of
from ddo_hooks.hooks.components import Components, check_drop
from ddo_hooks.hooks.phases import CallPhases, Phase
from ddo_hooks.hooks.recorder import Recorder
from ddo_hooks.hooks.runner import BoundActions, BoundaryRunner, bind_actions
from ddo_hooks.hooks.steps import Record, Step, StepList
from ddo_hooks.ledger import LEDGER
from ddo_hooks.policy.model import HookPolicy
from ddo_hooks.release import guard
from ddo_hooks.reports.tracker import MetricsTracker

if TYPE_CHECKING:
    from diffusers import DiffusionPipeline

    from ddo_hooks.reports.repack import PinnedCopyRepackReport
    from ddo_hooks.reports.ring import RingOffloadReport
    from ddo_hooks.streaming.runtime import StreamedPipeline

__all__ = ["DETACH_WAIT_S", "Attachment", "attach"]


DETACH_WAIT_S = 300.0
"""How long :meth:`Attachment.detach` waits for a deferred boundary that is running (seconds): pointing
1,490 weights files back at their pages took 8.8 s on a CPU."""


def attach(
    pipeline: DiffusionPipeline,
    policy: HookPolicy | str | os.PathLike[str] | None = None,
    *,
    tracker: MetricsTracker | None = None,
    keep_encoders_pinned: bool | None = None,
    registry: ActionRegistry | None = None,
) -> Attachment:
    """Attach phase-boundary hooks to ``pipeline`` as ``policy`` says.

    Args:
        pipeline: A diffusers pipeline (any ``DiffusionPipeline``).
        policy: A :class:`~ddo_hooks.policy.model.HookPolicy`, the path of a YAML policy, or
            ``None`` for the packaged default (all three boundaries release the host cache).
        tracker: Where reports are recorded (when ``None``, a new tracker that keeps the
            policy's ``keep_reports``).
        keep_encoders_pinned: Overrides the policy's ``pinned_copies.keep_encoders_pinned`` (``None``: the
            policy's): pin the text and image encoders and priors from their files too, and keep them pinned
            between calls. Needs the policy's ``pinned_copies.from_files``.
        registry: Where the policy's actions are found by name (``None``: the registry the policy was loaded
            with, :attr:`~ddo_hooks.policy.model.HookPolicy.registry`; the process's
            :data:`~ddo_hooks.actions.registry.REGISTRY` unless it was given one): an
            :class:`~ddo_hooks.actions.registry.ActionRegistry` of your own keeps the actions you register in it to
            the policies and attachments you give it.

    Returns:
        The :class:`Attachment` handle; also a context manager that detaches on exit.

    Raises:
        InvalidArgumentError: Not a pipeline, or already attached; or, with ``pinned_copies.from_files``, DDO's
            runtime pins copies of its own of a component (unless ``pinned_copies.on_ddo_pinning: warn``).
        PolicyError: The policy is invalid, names an unknown action, its ``report_sink``
            cannot be written, or it chooses DDO's release core (``core: ddo``) where that core
            cannot run (DDO missing or not at 0.1.0rc2, or a torch before 2.12).
    """
    from diffusers import DiffusionPipeline  # imported when the first attachment is made

    if not isinstance(pipeline, DiffusionPipeline):
        raise InvalidArgumentError(f"attach() needs a diffusers DiffusionPipeline, got {type(pipeline).__name__}")
    if tracker is not None and not isinstance(tracker, MetricsTracker):
        raise InvalidArgumentError(f"tracker must be a ddo_hooks.MetricsTracker, got {type(tracker).__name__}")
    if LEDGER.read(pipeline).attached is not None:
        raise InvalidArgumentError(
            f"this {type(pipeline).__name__} already has ddo_hooks attached; call detach() on that attachment first"
        )
    loaded = with_encoders(chosen_policy(policy, registry), keep_encoders_pinned)
    found_in = loaded.registry if registry is None else chosen_registry(registry)
    actions = bind_actions(pipeline, loaded, found_in)  # every action known, each check passed
    return Attachment(pipeline, loaded, tracker or MetricsTracker(max_records=loaded.keep_reports), actions)


class Attachment:
    """The handle of a policy attached to a pipeline. Create it with :func:`attach`."""

    def __init__(
        self, pipeline: DiffusionPipeline, policy: HookPolicy, tracker: MetricsTracker, actions: BoundActions
    ) -> None:
        self._pipeline = weakref.ref(pipeline)
        self.policy = policy
        self.tracker = tracker
        self._owner = type(pipeline).__name__
        self._detached = False
        self._recorder = Recorder(policy, tracker)
        self._components = Components(pipeline)
        holder = functools.partial(other_holder_of, self._pipeline)
        self._runner = BoundaryRunner(self._pipeline, policy, self._recorder, self._components, actions, holder)
        self.machine: CallPhases = self._runner.machine
        self._steps = steps = StepList()  # its checks run at each call's start (see attach_steps)
        steps.extend(attach_steps(self, policy, actions, self.machine, steps.before_call))
        try:
            records = self._steps.attach(pipeline)  # on any exception, the steps done are undone in reverse
        except BaseException:
            self._runner.close("the attach failed")  # nothing was deferred: it only leaves the table of runners
            raise
        for component, report in records:
            self._recorder.record(component, report, None, 0)

    # -- public ---------------------------------------------------------------------------
    @property
    def pipeline(self) -> DiffusionPipeline | None:
        """The pipeline, or ``None`` once it was collected (the attachment never keeps it alive)."""
        return self._pipeline()

    @property
    def run_id(self) -> str:
        """This attachment's run id in this process, in the envelope of every record it makes.

        A child forked after :func:`attach` records under a run id of its own.
        """
        return self._recorder.run_id

    @property
    def reports(self) -> list[Any]:
        """The reports this attachment recorded that its tracker keeps, in order (refusals included).

        The tracker is the one store; the one :func:`attach` makes keeps the policy's ``keep_reports``.
        """
        return self._recorder.reports()

    def drain_reports(self) -> list[Any]:
        """Return this attachment's reports the tracker keeps, in order, and take them out of it."""
        return self._recorder.drain()

    @property
    def sink_failures(self) -> list[str]:
        """The last failures to write to ``report_sink`` (empty when every write succeeded)."""
        return self._recorder.failures()

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
            from ddo_hooks.boundaries import boundary_hint

            raise InvalidArgumentError(
                f"unknown boundary {name!r}; {boundary_hint(name)}boundaries are {', '.join(BOUNDARIES)}"
            )
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
                return self._runner.refuse_all(name, "denoising", detail, "host", index)
            detail = f"call {running.index} of {self._owner} is running {where}"
            return self._runner.refuse_all(name, "inference_in_progress", detail, "host", index)
        return self._runner.run(name, "host", None)

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
        check_drop(pipe, names, functools.partial(other_holder, pipe))
        running = self.machine.calls()
        if running:
            raise BoundaryRefusedError(
                "inference_in_progress",
                f"cannot drop components while call {running[0].index} of {self._owner} is in progress",
            )
        self._components.note(pipe)  # so that what left earlier is not mistaken for these
        with guard.section("loading", f"{self._owner}.drop({', '.join(names)})"):
            ring = self._ring
            if ring is not None:
                for name in names:
                    ring.forget(name)  # its weights back on their host sources, off the device
            self._components.drop(pipe, names)

    @contextlib.contextmanager
    def loading(self, what: str = "host loading") -> Iterator[None]:
        """Mark a loading section (e.g. ``from_pretrained`` of a replacement component).

        Boundaries anywhere in the process are refused while it is open.
        """
        with guard.section("loading", f"{self._owner} ({what})"):
            yield

    def detach(self) -> None:
        """Remove every hook, wrapper and attribute this attachment added; a second call does nothing.

        It undoes the steps of attach in reverse (:mod:`~ddo_hooks.hooks.attach_steps`): the ring runtime
        first (it copies from the pages the next step gives back); then weights pinned from their files
        (``pinned_copies.from_files``) read the views they read before; then each action the policy names
        takes its own step at detach, once, recording what it returns: the components whose copies
        ``release_done_components`` (``stable_files: true``) pointed back at their weights files get their
        own copies again, so that the detached pipeline depends on its files exactly as before attach:
        pinned ones are staged into slabs (recorded as a ``pinned_copy_repack`` at phase ``detach``), the
        others copied into memory; last, the signal hooks and wrappers go. Every step is undone even when
        one raises; the first error is raised once all are.

        A deferred ``after_call`` still waiting is recorded as cancelled; one already running (on its
        timer thread) finishes the action it is in, records the others as not reached, and detach waits
        for it, at most :data:`DETACH_WAIT_S` seconds, so that nothing it does lands after detach.
        Detaching then always completes; if that record could not be written and the policy says
        ``report_sink_failure: raise``, the :class:`~ddo_hooks.errors.ReportSinkError` is raised
        afterwards, as is a :class:`~ddo_hooks.errors.WeightsFileChangedError` where a file such weights
        read changed.

        Raises:
            DetachTimeoutError: The running boundary did not end within the bound; nothing more runs,
                and ``detach()`` may be called again.
        """
        if self._detached:
            return
        failure = None
        try:
            self._runner.close("the attachment was detached before the idle delay passed")
        except ReportSinkError as e:
            failure = e
        if not self._runner.wait_for_deferred(DETACH_WAIT_S):
            raise DetachTimeoutError(
                f"detach() of this {self._owner} waited {DETACH_WAIT_S:g} s for its deferred after_call, which is "
                "still running on its timer thread (its action has not returned); no boundary runs any more: call "
                "detach() again once it ends"
            ) from failure
        self._detached = True
        try:
            self._steps.detach(self.pipeline, self._record_at_detach)  # the steps of attach, undone in reverse
        except BaseException as error:
            if failure is not None:
                error.add_note(f"ddo_hooks: a report of this detach could not be written either: {failure}")
            raise
        if failure is not None:
            raise failure

    def __enter__(self) -> Attachment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()

    def __repr__(self) -> str:
        state = "detached" if self._detached else self.machine.phase.value
        return f"<Attachment {self._owner} {state} calls={self.call_index} reports={len(self.reports)}>"

    # -- the steps ---------------------------------------------------------------------------
    def _record_at_detach(self, record: Record) -> None:
        component, report = record
        self._recorder.record(component, report, None, self.machine.call_index)

    def _held(self, kind: type[Step], what: str) -> Any:
        """``what`` of this attachment's step of type ``kind`` (``None`` where the policy takes none)."""
        step = next((step for step in self._steps.steps if isinstance(step, kind)), None)
        return None if step is None else getattr(step, what)

    @property
    def from_files_report(self) -> PinnedCopyRepackReport | None:
        """What the policy's ``pinned_copies.from_files`` did at attach (``None`` when it is ``null``)."""
        return typing.cast("PinnedCopyRepackReport | None", self._held(FromFiles, "report"))

    @property
    def repack_report(self) -> PinnedCopyRepackReport | None:
        """What the policy's ``pinned_copies.repack`` did at attach (``None`` when it is off).

        It is recorded with the other reports when it repacked or refused a component.
        """
        return typing.cast("PinnedCopyRepackReport | None", self._held(Repack, "report"))

    @property
    def ring_report(self) -> RingOffloadReport | None:
        """What the policy's ``offload.runtime`` did at attach (``None`` when it names none)."""
        return typing.cast("RingOffloadReport | None", self._held(Ring, "report"))

    @property
    def _ring(self) -> StreamedPipeline | None:
        return typing.cast("StreamedPipeline | None", self._held(Ring, "streamed"))

    # -- records ----------------------------------------------------------------------------
    def record(self, report: Any, *, component: str, boundary: str | None = None) -> None:
        """Record a report with this attachment's envelope: in the tracker, in memory and in the sink.

        The boundaries record their own reports; use this for a report made elsewhere (e.g. the
        auxiliary source detachment of ``apply_offload_runtime``).
        """
        self._recorder.record(component, report, boundary, self.machine.call_index)


def __getattr__(name: str) -> Any:
    return _moved.old_attribute(__name__, name)
