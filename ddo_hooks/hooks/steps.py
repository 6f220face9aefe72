"""One rule for attach and detach: the attach work is a list of steps, each with its exact inverse.

:func:`~ddo_hooks.attach` runs a :class:`StepList` in order. When a step raises (any exception: Ctrl-C too), the
steps done are undone in reverse and the error goes on, so the pipeline is left exactly as before attach; a
step that raises leaves nothing of its own. ``detach()`` undoes the same list in reverse: every step, even when
one of them raises, and the first error is raised once all are undone (the others as its notes). At the start of
each top-level call, every step done checks what it made (:meth:`Step.before_call`). The steps of an attachment
are in :mod:`~ddo_hooks.hooks.attach_steps`.

Examples:
    >>> class Say(Step):
    ...     def __init__(self, name, log, fails=False):
    ...         self.name, self.log, self.fails = name, log, fails
    ...     def attach(self, pipeline):
    ...         if self.fails:
    ...             raise RuntimeError(f"{self.name} broke")
    ...         self.log.append(f"+{self.name}")
    ...     def detach(self, pipeline):
    ...         self.log.append(f"-{self.name}")
    >>> log = []
    >>> StepList([Say("a", log), Say("b", log), Say("c", log, fails=True)]).attach(None)
    Traceback (most recent call last):
    ...
    RuntimeError: c broke
    >>> log
    ['+a', '+b', '-b', '-a']
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeAlias

from ddo_hooks.reports.base import RouteReport

__all__ = ["Record", "Step", "StepList"]

Record: TypeAlias = tuple[str, RouteReport]
"""What a step gives to record: the tracker component and the report."""


class Step:
    """One piece of attach work and its exact inverse; the base does nothing, a step overrides what it does."""

    name: str = "step"
    """What the step is, for the note an error of its undo leaves."""

    def attach(self, pipeline: Any) -> Record | None:
        """Do the work on ``pipeline``; what to record, or ``None``.

        Raises:
            BaseException: Whatever stops it; the step leaves nothing of its own then, and the steps done
                before it are undone.
        """
        return None

    def detach(self, pipeline: Any | None) -> Record | None:
        """Undo :meth:`attach` exactly (``pipeline`` is ``None`` once it was collected); what to record, or ``None``."""
        return None

    def before_call(self, pipelines: list[Any]) -> None:
        """Check, at the start of each top-level call, what the step made; raise to stop the call.

        Args:
            pipelines: The attached pipeline and every pipeline it holds.
        """


class StepList:
    """The steps of one attachment: taken in order, undone in reverse.

    Args:
        steps: The steps, in the order they are taken.
    """

    def __init__(self, steps: Iterable[Step] = ()) -> None:
        self.steps: tuple[Step, ...] = tuple(steps)
        self._done: list[Step] = []

    def extend(self, steps: Iterable[Step]) -> None:
        """Add ``steps`` at the end of the list (before it is taken: a step may need the list's own checks)."""
        self.steps += tuple(steps)

    @property
    def done(self) -> tuple[Step, ...]:
        """The steps taken and not undone, in order."""
        return tuple(self._done)

    def attach(self, pipeline: Any) -> list[Record]:
        """Take every step in order; on any exception, undo the steps done in reverse and raise it.

        Returns:
            What the steps gave to record, in order (the caller records it once every step is done).
        """
        records: list[Record] = []
        try:
            for step in self.steps:
                record = step.attach(pipeline)
                self._done.append(step)
                if record is not None:
                    records.append(record)
        except BaseException as error:
            for failure in self._undo(pipeline, None):
                error.add_note(f"ddo_hooks: undoing the attach also failed: {failure!r}")
            raise
        return records

    def detach(self, pipeline: Any | None, record: Callable[[Record], None]) -> None:
        """Undo every step done, in reverse, passing what each gives to ``record``; a second call does nothing.

        Raises:
            BaseException: The first error of an undo, once every step is undone (the others are its notes).
        """
        failures = self._undo(pipeline, record)
        if failures:
            first, *others = failures
            for other in others:
                first.add_note(f"ddo_hooks: undoing another step also failed: {other!r}")
            raise first

    def before_call(self, pipelines: list[Any]) -> None:
        """Each step done checks what it made, in order, at the start of a top-level call."""
        for step in tuple(self._done):
            step.before_call(pipelines)

    def _undo(self, pipeline: Any | None, record: Callable[[Record], None] | None) -> list[BaseException]:
        failures: list[BaseException] = []
        while self._done:
            step = self._done.pop()
            try:
                done = step.detach(pipeline)
                if done is not None and record is not None:
                    record(done)
            except BaseException as e:  # every step is undone; what failed is raised once all are
                e.add_note(f"ddo_hooks: while undoing {step.name}")
                failures.append(e)
        return failures
