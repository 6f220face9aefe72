"""Where each pipeline call is, and which boundary is due when.

A :class:`CallPhases` machine follows the calls of one attached pipeline. Each call is a
:class:`Call`, kept per thread from the moment the pipeline's ``__call__`` is entered to the moment
it returns or raises, so two calls in two threads never disturb each other. The signals the hooks
observe move a call on::

    __call__ entered               -> the call starts (PREPARING); an ``inference`` guard section opens
    a denoising loop starts        -> DENOISING, a loop section opens; before_transformer is due
      (its progress bar is entered,   once per call, at the first loop of the FINAL stage
      or a denoiser runs outside a known loop)
    the loop's steps are done      -> DECODING (after a loop); nothing is due: another loop may follow
      (its bar is left, or a decode starts once the bar counted all its steps)
    the VAE decoder runs           -> before_vae is due once per call, at the first decode after a
                                      final-stage loop
    __call__ returned or raised    -> after_call is due; the boundaries never reached are reported
                                      as such

Each loop belongs to a :class:`Stage`. An EARLIER stage makes what a later stage of the same call
takes (a prior's image embedding; the first image of a pipeline that refines it in a second
pipeline): its encoders, loop and decode give no boundary, so that ``before_transformer`` comes
after the encoders of the final stage and ``before_vae`` before the final decode. The signals
say which stage a loop is (:mod:`ddo_hooks.hooks.signals`); where the progress bar cannot tell,
the loop's first denoiser forward does, before it runs.

A call's boundaries are never due inside one of its loops. A decode inside a loop's progress
bar before the bar counted all its steps (a preview, or the chunk of a pipeline that denoises
several chunks under one bar) is no quiet point: if no decode follows, ``before_vae`` is reported
as not reached. While a call is DENOISING a ``denoising`` section of :mod:`ddo_hooks.release.guard`
is held, so no release anywhere in the process runs inside a loop; while any call is in progress
its ``inference`` section is held, so no release runs beside it except at the call's own quiet
points (:func:`ddo_hooks.release.guard.quiet_point`).

Examples:
    >>> fired = []
    >>> machine = CallPhases("demo", lambda boundary, call: fired.append(boundary),
    ...                      lambda boundary, call, detail: fired.append(f"{boundary}: not reached"))
    >>> call = machine.call_start()
    >>> _ = machine.loop_enter(); machine.loop_exit(); machine.decode_start(); machine.call_end(call)
    >>> fired
    ['before_transformer', 'before_vae', 'after_call']
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from ddo_hooks.boundaries import AFTER_CALL, BEFORE_TRANSFORMER, BEFORE_VAE
from ddo_hooks.release import guard

__all__ = ["Call", "CallPhases", "Phase", "Stage"]


class Phase(enum.Enum):
    """Where a pipeline call is."""

    IDLE = "idle"
    """No call in progress."""
    PREPARING = "preparing"
    """A call started: inputs checked, prompts encoding, latents preparing."""
    DENOISING = "denoising"
    """Inside a denoising loop."""
    DECODING = "decoding"
    """A loop is over: decoding, post-processing, offloading, or waiting for another loop."""


class Stage(enum.Enum):
    """Which stage of its call a denoising loop belongs to."""

    EARLIER = "earlier"
    """Makes what a later stage of the same call takes: a prior's loop, or the loop of a pipeline
    held before another that holds a denoiser. Its encoders, loop and decode give no boundary."""
    FINAL = "final"
    """Makes the call's output: the call's ``before_transformer`` and ``before_vae`` are this stage's."""


@dataclass(eq=False)
class Call:
    """One top-level call of the pipeline, in the thread that made it.

    Attributes:
        index: 1 for the attachment's first call, then 2, ...
        thread: The thread running it.
        concurrent: It started while another call of the same pipeline was in progress.
        phase: Where it is.
        fired: The boundaries already due in this call.
        loops: How many denoising loops it entered.
        stage: The stage of its current or last loop; ``None`` before any loop, or while the
            loop's first denoiser has yet to say.
        stages: The stages of every loop it ran.
        steps_done: The current loop's progress bar counted all its steps.
        decoded_in_loop: A decode ran inside a loop's progress bar before its steps were done.
        ran: The components that ran a forward in it so far (see :meth:`CallPhases.component_ran`).
        done: The components whose work in it is done: those that ran before its
            ``before_transformer`` was due (its encoders, image encoders, priors), in the order they ran.
        error: What the call raised, once it ended by an exception.
    """

    index: int
    thread: int
    concurrent: bool
    phase: Phase = Phase.PREPARING
    fired: set[str] = field(default_factory=set)
    loops: int = 0
    stage: Stage | None = None
    stages: set[Stage] = field(default_factory=set)
    steps_done: bool = False
    decoded_in_loop: bool = False
    ran: dict[str, None] = field(default_factory=dict)
    done: tuple[str, ...] = ()
    error: BaseException | None = None
    depth: int = 1
    loop_depth: int = 0
    in_bar: bool = False
    loop_bar: object | None = None
    section: guard.Section | None = None
    loop_section: guard.Section | None = None


Fire = Callable[[str, Call], object]
"""``fire(boundary, call)``: a boundary of ``call`` is due now, at a quiet point of it."""
Miss = Callable[[str, Call, str], object]
"""``miss(boundary, call, detail)``: ``call`` ended without reaching ``boundary``; ``detail`` says why."""


class CallPhases:
    """The per-pipeline state machine (see the module docstring).

    Args:
        owner: A name for guard sections and messages (the pipeline class).
        fire: Called when a boundary of a call is due. It runs before the call moves on, so a
            failing boundary leaves the call where it was (and the call's end still comes).
        miss: Called at the end of a call for each boundary it never reached.
        on_start: Called when a top-level call starts, before anything else of it.
    """

    def __init__(self, owner: str, fire: Fire, miss: Miss, *, on_start: Callable[[Call], object] | None = None) -> None:
        self.owner = owner
        self._fire = fire
        self._miss = miss
        self._on_start = on_start
        self._lock = threading.Lock()
        self._calls: dict[int, Call] = {}
        self.call_index = 0
        self.has_decoder = True
        """Whether the pipeline has a VAE decoder at all (set by the signals; only for messages)."""

    # -- reading ---------------------------------------------------------------------------
    def current(self) -> Call | None:
        """The call in progress in the calling thread, or ``None``."""
        return self._calls.get(threading.get_ident())

    def calls(self) -> list[Call]:
        """Every call in progress, oldest first."""
        with self._lock:
            return sorted(self._calls.values(), key=lambda c: c.index)

    @property
    def phase(self) -> Phase:
        """The phase of this thread's call, else of the oldest call in progress, else IDLE."""
        call = self.current()
        if call is None:
            calls = self.calls()
            call = calls[0] if calls else None
        return Phase.IDLE if call is None else call.phase

    # -- signals ---------------------------------------------------------------------------
    def call_start(self) -> Call:
        """The pipeline's ``__call__`` was entered; a nested entry in the same thread joins its call."""
        me = threading.get_ident()
        with self._lock:
            call = self._calls.get(me)
            if call is not None:
                call.depth += 1
                return call
            self.call_index += 1
            call = Call(self.call_index, me, concurrent=bool(self._calls))
            self._calls[me] = call
        try:
            call.section = guard.enter("inference", f"a {self.owner} call")
            if self._on_start is not None:
                self._on_start(call)
        except BaseException:
            if call.section is not None:
                guard.exit(call.section)
            with self._lock:
                del self._calls[me]
            raise
        return call

    def call_end(self, call: Call, error: BaseException | None = None) -> None:
        """The ``__call__`` that started ``call`` returned (``error`` is ``None``) or raised.

        The outermost end reports each boundary never reached, then makes ``after_call`` due,
        and always leaves the thread without a call.
        """
        with self._lock:
            call.depth -= 1
            if call.depth > 0:
                return
        call.error = error
        try:
            self._stop_loop(call)
            for boundary in (BEFORE_TRANSFORMER, BEFORE_VAE):
                if boundary not in call.fired:
                    call.fired.add(boundary)
                    self._miss(boundary, call, self._why_missed(boundary, call))
            self._due(AFTER_CALL, call)
        finally:
            self._stop_loop(call)
            if call.section is not None:
                guard.exit(call.section)
            with self._lock:
                self._calls.pop(call.thread, None)

    def loop_enter(self, *, bar: bool = True, stage: Stage | None = Stage.FINAL, token: object = None) -> Call | None:
        """A denoising loop starts in this thread's call (its progress bar was entered or first iterated).

        Args:
            bar: The signal is a progress bar (``False``: a denoiser ran outside a known loop).
            stage: The loop's stage; ``None`` where its first denoiser forward will say
                (:meth:`denoiser_forward`). ``before_transformer`` is due at the first FINAL loop.
            token: What stands for this loop's progress bar in :meth:`loop_steps_done`.

        Returns:
            The call, to pass back to :meth:`loop_exit`; ``None`` outside a call.
        """
        call = self.current()
        if call is None:
            return None
        if call.phase is Phase.DENOISING:
            call.loop_depth += 1 if bar else 0  # a nested progress bar inside the loop
            return call
        if stage is Stage.FINAL:
            self._due(BEFORE_TRANSFORMER, call)
        call.phase, call.loops, call.loop_depth, call.in_bar = Phase.DENOISING, call.loops + 1, int(bar), bar
        call.stage, call.loop_bar, call.steps_done = None, token, False
        if stage is not None:
            self._stage_known(call, stage)
        return call

    def loop_exit(self, call: Call | None = None) -> None:
        """The loop's progress bar was left; a signal from another call's loop is ignored."""
        current = self.current()
        if current is None or (call is not None and call is not current) or current.phase is not Phase.DENOISING:
            return
        current.loop_depth -= 1
        if current.loop_depth <= 0:
            self._stop_loop(current)

    def loop_steps_done(self, token: object) -> None:
        """The progress bar ``token`` stands for counted all its steps (its ``update()`` reached ``total``).

        The loop is then over but the bar still open: a decode that starts now is the decode after
        the loop (Kandinsky 3 decodes, frees its hooks and returns inside its bar). A bar whose
        steps are counted more than once, or which is not the loop's own, changes nothing.
        """
        call = self.current()
        if call is not None and call.phase is Phase.DENOISING and token is not None and call.loop_bar is token:
            call.steps_done = True

    def denoiser_forward(self, *, earlier: bool = False) -> None:
        """A denoiser is about to run: outside a known loop it starts one; a loop waiting for its stage gets it.

        Args:
            earlier: The denoiser runs an EARLIER stage (a prior whose output a later denoiser of
                the pipeline takes); otherwise its loop is FINAL.
        """
        call = self.current()
        if call is None:
            return
        stage = Stage.EARLIER if earlier else Stage.FINAL
        if call.phase is not Phase.DENOISING:
            self.loop_enter(bar=False, stage=stage)
        elif call.stage is None:
            if stage is Stage.FINAL:
                self._due(BEFORE_TRANSFORMER, call)  # before this forward, and before the loop section opens
            self._stage_known(call, stage)

    def component_ran(self, name: str) -> None:
        """The component ``name`` is about to run a forward in this thread's call."""
        call = self.current()
        if call is not None and name not in call.ran:
            call.ran[name] = None

    def decode_start(self) -> None:
        """A VAE decoder runs in this thread's call."""
        call = self.current()
        if call is None or call.phase is Phase.PREPARING:
            return  # outside a call, or before any loop: not the decode after a loop
        if call.phase is Phase.DENOISING:
            if call.in_bar and not call.steps_done:
                call.decoded_in_loop = True  # inside a progress bar with steps to go: no quiet point
                return
            self._stop_loop(call)  # the loop ends where the decode starts: its steps are done
        if call.stage is Stage.FINAL:
            self._due(BEFORE_VAE, call)

    def after_fork(self) -> None:
        """In a forked child only the forking thread lives: the calls of the others never end there."""
        self._lock = threading.Lock()
        me = threading.get_ident()
        self._calls = {thread: call for thread, call in self._calls.items() if thread == me}

    # -- transitions -------------------------------------------------------------------------
    def _due(self, boundary: str, call: Call) -> None:
        if boundary not in call.fired:
            call.fired.add(boundary)
            if boundary == BEFORE_TRANSFORMER:
                call.done = tuple(call.ran)
            self._fire(boundary, call)

    def _stage_known(self, call: Call, stage: Stage) -> None:
        call.stage = stage
        call.stages.add(stage)
        call.loop_section = guard.enter("denoising", self.owner)

    def _stop_loop(self, call: Call) -> None:
        if call.loop_section is not None:
            guard.exit(call.loop_section)
            call.loop_section = None
        if call.phase is Phase.DENOISING:
            call.phase, call.loop_depth, call.in_bar = Phase.DECODING, 0, False
            call.loop_bar, call.steps_done = None, False

    def _why_missed(self, boundary: str, call: Call) -> str:
        raised = f"the call raised {type(call.error).__name__}" if call.error is not None else ""
        earlier_only = call.loops > 0 and Stage.FINAL not in call.stages
        if boundary == BEFORE_TRANSFORMER:
            if raised:
                return f"{raised} before the denoising loop of its final stage started"
            if earlier_only:
                return (
                    f"this {self.owner} call ran no loop of its final stage, only an earlier stage's (a prior, or a "
                    "pipeline it holds before another that holds a denoiser)"
                )
            return (
                f"no denoising loop was seen in this {self.owner} call: neither a progress bar of the pipeline "
                "(or of a pipeline it calls) nor a known denoiser component ran"
            )
        if raised and not call.decoded_in_loop:
            return f"{raised} before it decoded"
        if call.decoded_in_loop:
            return (
                f"{self.owner} decoded only inside its denoising loop's progress bar before the bar counted all its "
                "steps, where no boundary may run, and not after the loop"
            )
        if not self.has_decoder:
            return f"{self.owner} has no VAE decoder, so nothing decodes after its loop"
        if call.loops == 0:
            return "the call ran no denoising loop, so no decode followed one"
        if earlier_only:
            return "the call ran no loop of its final stage, so no final decode followed one"
        return "the call did not decode after its denoising loop (e.g. output_type='latent')"
