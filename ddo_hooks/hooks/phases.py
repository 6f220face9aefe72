"""Where a pipeline call is, and which boundary fires when.

A :class:`CallPhases` machine turns the signals the hooks observe into boundaries::

    check_inputs()            -> call starts                      (IDLE -> PREPARING)
    progress bar entered      -> fire before_transformer          (-> DENOISING, loop section open)
    denoiser forward          -> only if the loop was not seen: as above
    progress bar left         -> fire before_vae                  (-> DECODING, loop section closed)
    VAE decoder forward       -> only if the loop end was not seen: as above
    maybe_free_model_hooks()  -> fire after_call                  (-> IDLE)

An exception leaving the loop aborts the call: its remaining boundaries never fire and the
machine returns to IDLE, so the next call starts clean. While the machine is DENOISING a
``denoising`` section of :mod:`ddo_hooks.release.guard` is held, so no release anywhere in the
process runs inside a loop.

Examples:
    >>> fired = []
    >>> machine = CallPhases("demo", fired.append)
    >>> machine.call_start(); _ = machine.loop_enter(); machine.loop_exit(error=False); machine.call_end()
    >>> fired
    ['before_transformer', 'before_vae', 'after_call']
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable

from ddo_hooks.boundaries import AFTER_CALL, BEFORE_TRANSFORMER, BEFORE_VAE
from ddo_hooks.release import guard

__all__ = ["CallPhases", "Phase"]


class Phase(enum.Enum):
    """Where the pipeline call is."""

    IDLE = "idle"
    """No call in progress."""
    PREPARING = "preparing"
    """A call started: inputs checked, prompts encoding, latents preparing."""
    DENOISING = "denoising"
    """Inside the denoising loop."""
    DECODING = "decoding"
    """The loop is over: decoding, post-processing, offloading."""


class CallPhases:
    """The per-pipeline state machine (see the module docstring).

    Args:
        owner: A name for guard sections and messages (the pipeline class).
        fire: Called with a boundary name when it is due. It runs before the state moves on,
            so a failing boundary leaves the call where it was.
    """

    def __init__(self, owner: str, fire: Callable[[str], object]) -> None:
        self.owner = owner
        self._fire = fire
        self._lock = threading.RLock()
        self.phase = Phase.IDLE
        self.call_index = 0
        self.thread: int | None = None
        self._fired: set[str] = set()
        self._loop_depth = 0
        self._section: guard.Section | None = None

    # -- signals -------------------------------------------------------------------------
    def call_start(self) -> None:
        """A pipeline call begins; a call left half-done by an exception is dropped."""
        with self._lock:
            self.reset()
            self.phase = Phase.PREPARING
            self.call_index += 1
            self.thread = threading.get_ident()

    def loop_enter(self) -> int:
        """The denoising loop starts (its progress bar was entered or first iterated).

        Returns:
            The call index, to pass back to :meth:`loop_exit`.
        """
        with self._lock:
            if self.phase is Phase.DENOISING:
                self._loop_depth += 1  # a nested progress bar inside the loop
                return self.call_index
            if self.phase is not Phase.PREPARING:
                self.call_start()  # a pipeline without check_inputs, or a stale half-done call
            self._start_denoising()
            return self.call_index

    def loop_exit(self, *, error: bool, call: int | None = None) -> None:
        """The loop's progress bar was left; ``error`` when an exception is leaving it.

        A signal from the loop of an earlier call (``call`` differs) is ignored.
        """
        with self._lock:
            if self.phase is not Phase.DENOISING or (call is not None and call != self.call_index):
                return
            self._loop_depth -= 1
            if self._loop_depth > 0 and not error:
                return
            if error:
                self.reset()
                return
            self._stop_denoising()

    def denoiser_forward(self) -> None:
        """The denoiser runs outside a known loop (the hooks' slow path)."""
        with self._lock:
            if self.phase is Phase.PREPARING:
                self._start_denoising()

    def decode_start(self) -> None:
        """The VAE starts decoding."""
        with self._lock:
            if self.phase is Phase.DENOISING:
                self._stop_denoising()

    def call_end(self) -> None:
        """The call returned its components to rest (``maybe_free_model_hooks`` returned)."""
        with self._lock:
            if self.phase is Phase.IDLE:
                return  # called outside a pipeline call
            if self.phase is Phase.DENOISING:
                self._stop_denoising()
            self._once(AFTER_CALL)
            self.reset()

    def refusal_for_host(self) -> tuple[str, str] | None:
        """Why a host's boundary request must be refused now, as ``(reason, sentence)``, or ``None``.

        A call this same thread left through an exception is over (the host is running, not
        the pipeline): it is reset and the request may run.
        """
        with self._lock:
            if self.phase is Phase.DENOISING:
                return "denoising", f"{self.owner} is inside its denoising loop"
            if self.phase is not Phase.IDLE:
                if self.thread != threading.get_ident():
                    return "inference_in_progress", f"a {self.owner} call is running in another thread"
                self.reset()
            return None

    def reset(self) -> None:
        """Return to IDLE, closing an open loop section; the call's remaining boundaries never fire."""
        with self._lock:
            if self._section is not None:
                guard.exit(self._section)
                self._section = None
            self.phase = Phase.IDLE
            self.thread = None
            self._fired = set()
            self._loop_depth = 0

    # -- transitions ---------------------------------------------------------------------
    def _once(self, boundary: str) -> None:
        if boundary not in self._fired:
            self._fired.add(boundary)
            self._fire(boundary)

    def _start_denoising(self) -> None:
        self._once(BEFORE_TRANSFORMER)
        self._section = guard.enter("denoising", self.owner)
        self.phase = Phase.DENOISING
        self._loop_depth = 1

    def _stop_denoising(self) -> None:
        if self._section is not None:
            guard.exit(self._section)
            self._section = None
        self.phase = Phase.DECODING
        self._loop_depth = 0
        self._once(BEFORE_VAE)
