"""The steps of an attachment, in the order :func:`~ddo_hooks.attach` takes them; ``detach()`` undoes them in reverse.

:func:`attach_steps` builds the list from the policy (the rule that runs it: :mod:`~ddo_hooks.hooks.steps`):

1. :class:`Attached`: the pipeline is recorded as attached (its ``attached`` in the
   :data:`~ddo_hooks.ledger.LEDGER`), so that a second attach is refused.
2. :class:`Signals`: the hooks and wrappers that tell the phase machine where a call is
   (:class:`~ddo_hooks.hooks.signals.PipelineSignals`); at each call's start they run every step's check.
3. :class:`ActionSteps`, one per action the policy names, in the order it first names them: the steps of the
   action's declaration (``on_attach``, ``on_detach``, ``before_call``).
4. :class:`FromFiles`: ``pinned_copies.from_files`` pins the weights from their files; at each call's start, a
   file whose pages are registered is checked unchanged.
5. :class:`Repack`: ``pinned_copies.repack`` repacks group offloading's pinned copies into slabs.
6. :class:`Ring`: ``offload.runtime: ring`` applies the ring runtime; undone before the weights are unpinned,
   since it copies from their pages.

Steps 3 to 6 are taken only when the policy is enabled. Each records its report (``pinned_from_files``,
``pinned_copy_repack``, ``ring_offload``) once every step is done: a failed attach records nothing.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from ddo_hooks.actions.contract import RegisteredAction, ResolvedAction
from ddo_hooks.hooks.phases import CallPhases
from ddo_hooks.hooks.runner import BoundActions, each_action
from ddo_hooks.hooks.steps import Record, Step
from ddo_hooks.ledger import LEDGER
from ddo_hooks.policy.model import HookPolicy

if TYPE_CHECKING:
    from collections.abc import Callable

    from ddo_hooks.hooks.signals import PipelineSignals
    from ddo_hooks.release.from_files import FromFilesMode
    from ddo_hooks.reports.repack import PinnedCopyRepackReport
    from ddo_hooks.reports.ring import RingOffloadReport
    from ddo_hooks.streaming.runtime import StreamedPipeline

__all__ = [
    "ActionSteps",
    "Attached",
    "FromFiles",
    "Repack",
    "Ring",
    "Signals",
    "attach_steps",
    "check_weights_files",
    "other_holder",
]


def other_holder(pipeline: Any, module: Any) -> str | None:
    """The class name of another attached pipeline that holds ``module`` as a component, or ``None``."""
    if module is None:
        return None
    for other, _ in LEDGER.holders("attached"):
        if other is not pipeline and any(value is module for value in other.components.values()):
            return type(other).__name__
    return None


def other_holder_of(pipeline: weakref.ref[Any], module: Any) -> str | None:
    """:func:`other_holder` for a pipeline held weakly (``None`` once it is collected)."""
    pipe = pipeline()
    return None if pipe is None else other_holder(pipe, module)


class Attached(Step):
    """The pipeline recorded as attached to ``attachment`` (held weakly) in the ledger."""

    name = "the record of the attachment"

    def __init__(self, attachment: object) -> None:
        self._attachment = weakref.ref(attachment)

    def attach(self, pipeline: Any) -> None:
        """Record the pipeline as attached."""
        LEDGER.write(pipeline, attached=self._attachment())

    def detach(self, pipeline: Any | None) -> None:
        """Take it out of the record, where it is still this attachment's."""
        if pipeline is not None and LEDGER.read(pipeline).attached is self._attachment():
            LEDGER.erase(pipeline, "attached")


class Signals(Step):
    """The signal hooks and wrappers that drive ``machine``; ``checks`` runs at each top-level call's start."""

    name = "the signal hooks"

    def __init__(self, machine: CallPhases, checks: Callable[[list[Any]], object]) -> None:
        self._machine = machine
        self._checks = checks
        self.signals: PipelineSignals | None = None

    def attach(self, pipeline: Any) -> None:
        """Install the signals (they remove what they installed before raising)."""
        from ddo_hooks.hooks.signals import PipelineSignals  # imports diffusers' hook registry

        signals = PipelineSignals(pipeline, self._machine, before_call=self._checks)
        signals.install()
        self.signals = signals

    def detach(self, pipeline: Any | None) -> None:
        """Remove them."""
        if self.signals is not None:
            self.signals.remove()
            self.signals = None


class ActionSteps(Step):
    """The steps of one action's declaration, given each of its entries in the policy, in boundary order."""

    def __init__(self, action: RegisteredAction[Any], entries: tuple[ResolvedAction[Any], ...]) -> None:
        self.action = action
        self.entries = entries
        self.name = f"the steps of the action {action.name!r}"

    def attach(self, pipeline: Any) -> None:
        """The action's ``on_attach``, given its entries."""
        if self.action.on_attach is not None:
            self.action.on_attach(pipeline, self.entries)

    def detach(self, pipeline: Any | None) -> Record | None:
        """The action's ``on_detach``; what it returns to record."""
        if pipeline is None or self.action.on_detach is None:
            return None
        return self.action.on_detach(pipeline)

    def before_call(self, pipelines: list[Any]) -> None:
        """The action's ``before_call``, on each pipeline."""
        if self.action.before_call is not None:
            for pipe in pipelines:
                self.action.before_call(pipe)


class FromFiles(Step):
    """The weights pinned from their files (``pinned_copies.from_files``), and their files checked at each call."""

    name = "pinned_copies.from_files"

    def __init__(self, mode: FromFilesMode, encoders: bool, policy: HookPolicy) -> None:
        self.mode = mode
        self.encoders = encoders
        self.policy = policy
        self.report: PinnedCopyRepackReport | None = None

    def attach(self, pipeline: Any) -> Record:
        """Check that DDO pins no copies of its own of them, pin the weights from their files; unpin if it stops."""
        from ddo_hooks.release.from_files import check_ddo_pinning, pin_from_files, unpin_from_files

        on, source = self.policy.pinned_copies.on_ddo_pinning, self.policy.source
        check_ddo_pinning(pipeline, encoders=self.encoders, on=on, source=source)
        try:
            self.report = pin_from_files(pipeline, self.mode, encoders=self.encoders, phase="attach")
        except BaseException:
            unpin_from_files(pipeline)
            raise
        return "pinned_from_files", self.report

    def detach(self, pipeline: Any | None) -> None:
        """Point the weights back at the views they were, and unpin."""
        if pipeline is not None:
            from ddo_hooks.release.from_files import unpin_from_files

            unpin_from_files(pipeline)

    def before_call(self, pipelines: list[Any]) -> None:
        """Raise where a file whose pages a component registered was rewritten since."""
        from ddo_hooks.release.from_files import check_registered

        for pipe in pipelines:
            check_registered(pipe)


class Repack(Step):
    """Group offloading's pinned copies repacked into slabs (``pinned_copies.repack``).

    Its inverse is nothing: the copies are the same bytes at their exact size, and stay so after detach.
    """

    name = "pinned_copies.repack"

    def __init__(self, device: str) -> None:
        self.device = device
        self.report: PinnedCopyRepackReport | None = None

    def attach(self, pipeline: Any) -> Record | None:
        """Repack the copies; recorded when it repacked or refused a component."""
        from ddo_hooks.release.repack import repack_pinned_copies

        self.report = report = repack_pinned_copies(pipeline, device=self.device, phase="attach")
        if report.repack.status == "executed" or any(c.status == "refused" for c in report.repack.components):
            return "pinned_copy_repack", report
        return None


class Ring(Step):
    """The ring runtime applied to the pipeline's components (``offload.runtime: ring``)."""

    name = "offload.runtime"

    def __init__(self, policy: HookPolicy) -> None:
        self.policy = policy
        self.report: RingOffloadReport | None = None
        self.streamed: StreamedPipeline | None = None

    def attach(self, pipeline: Any) -> Record:
        """Apply the ring runtime (it undoes what it applied before raising)."""
        from ddo_hooks.streaming.runtime import stream_pipeline

        self.streamed, self.report = stream_pipeline(pipeline, self.policy.offload.stream_options(), self.policy.device)
        return "ring_offload", self.report

    def detach(self, pipeline: Any | None) -> None:
        """Undo it on every component and free the ring."""
        if self.streamed is not None:
            self.streamed.close()
            self.streamed = None


def check_weights_files(pipelines: list[Any]) -> None:
    """Both checks of weights that read their files, on any pipelines: what the old names of the check give.

    An attachment runs each as the ``before_call`` of the step that made what it checks
    (``release_done_components``' and :class:`FromFiles`).

    Raises:
        WeightsFileChangedError: A file such weights read was rewritten since.
    """
    from ddo_hooks.release.file_views import check_rebound
    from ddo_hooks.release.from_files import check_registered

    for pipe in pipelines:
        check_rebound(pipe)
        check_registered(pipe)


def attach_steps(
    attachment: object,
    policy: HookPolicy,
    actions: BoundActions,
    machine: CallPhases,
    checks: Callable[[list[Any]], object],
) -> list[Step]:
    """The steps of ``attachment`` of ``policy``, in the order attach takes them (see the module).

    Args:
        attachment: The attachment being made (held weakly).
        policy: Its policy.
        actions: Each boundary's actions, bound (:func:`~ddo_hooks.hooks.runner.bind_actions`).
        machine: The phase machine its signals drive.
        checks: What runs at each top-level call's start (the step list's own ``before_call``).
    """
    steps: list[Step] = [Attached(attachment), Signals(machine, checks)]
    if not policy.enabled:
        return steps
    steps += [ActionSteps(action, entries) for action, entries in each_action(actions)]
    pinned = policy.pinned_copies
    if pinned.from_files is not None:
        steps.append(FromFiles(pinned.from_files, pinned.keep_encoders_pinned, policy))
    if pinned.repack:
        steps.append(Repack(policy.device))
    if policy.offload.runtime is not None:
        steps.append(Ring(policy))
    return steps
