"""The progress bar that tells the phase machine where a pipeline's denoising loop is.

:class:`~ddo_hooks.hooks.signals.PipelineSignals` wraps ``progress_bar`` of an attached pipeline (and of every
pipeline it holds) so that each bar it gives is a :class:`LoopBar`: the loop's start, its steps and its end
become signals of the machine, whichever way the pipeline uses the bar.

Examples:
    >>> from ddo_hooks.hooks.phases import CallPhases
    >>> machine = CallPhases("sd", print, print)
    >>> bar = LoopBar(range(3), machine)
    >>> len(bar)
    3
"""

from __future__ import annotations

from typing import Any

from ddo_hooks.hooks.phases import Call, CallPhases, Stage

__all__ = ["LoopBar"]


class LoopBar:
    """A pipeline's progress bar, reporting when the denoising loop starts, counts its steps, and ends.

    Used as a context manager (``with self.progress_bar(total=n) as bar``) it signals on enter
    and exit, and gives the ``with`` block itself, so that it counts the ``update()`` calls: once
    they reach ``total`` the loop's steps are done (a disabled tqdm counts nothing, so the bar
    cannot tell). Iterated (``for t in self.progress_bar(timesteps)``) it signals on the first
    step and when the iteration ends (exhausted, or left by ``break``). Everything else goes to
    the wrapped bar.

    Args:
        bar: The pipeline's own progress bar.
        machine: The phase machine.
        stage: The loop's stage, or ``None`` where its first denoiser forward will say.
    """

    def __init__(self, bar: Any, machine: CallPhases, stage: Stage | None = Stage.FINAL) -> None:
        self._bar = bar
        self._machine = machine
        self._stage = stage
        self._call: Call | None = None
        self._counted: float = 0
        self._total = getattr(bar, "total", None)

    def __enter__(self) -> LoopBar:
        self._call = self._machine.loop_enter(stage=self._stage, token=self)
        self._bar.__enter__()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Any:
        try:
            return self._bar.__exit__(exc_type, exc, tb)
        finally:
            self._machine.loop_exit(self._call)

    def __iter__(self) -> Any:
        call = self._machine.loop_enter(stage=self._stage, token=self)
        try:
            yield from self._bar
        finally:
            self._machine.loop_exit(call)

    def update(self, n: float = 1) -> Any:
        """Advance the wrapped bar; once the steps reach its ``total``, tell the machine the loop's steps are done."""
        result = self._bar.update(n)
        self._counted += n
        if self._total is not None and self._counted >= self._total:
            self._machine.loop_steps_done(self)
        return result

    def __len__(self) -> int:
        return len(self._bar)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._bar, name)
