"""Two calls of one pipeline that overlap in two threads, in a fixed order."""

from __future__ import annotations

import threading
from typing import Any

from support.fakes import HANG_SECONDS


def overlapping_calls(pipe: Any, first: dict[str, Any], second: dict[str, Any]) -> tuple[Any, Any]:
    """Call ``pipe(**first)``; at its first step's end, start ``pipe(**second)`` in another thread.

    The second call is held in its prompt encoding until the first has returned, so the first
    call's later boundaries come while the second is in progress, and the second runs alone after.

    Returns:
        Both outputs, the first call's then the second's.
    """
    second_encoding, first_done = threading.Event(), threading.Event()
    results: dict[str, Any] = {}

    def second_call() -> None:
        def encoding(module: Any, args: Any) -> None:
            if threading.current_thread() is worker:
                second_encoding.set()
                assert first_done.wait(HANG_SECONDS)

        handle = pipe.text_encoder.register_forward_pre_hook(encoding)
        try:
            results["second"] = pipe(**second)
        finally:
            handle.remove()

    worker = threading.Thread(target=second_call)

    def start_second(pipeline: Any, step: int, timestep: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
        if step == 0:
            worker.start()
            assert second_encoding.wait(HANG_SECONDS)  # the second call is in progress, encoding its prompt
        return kwargs

    try:
        output = pipe(**first, callback_on_step_end=start_second)
    finally:
        first_done.set()
        if worker.ident is not None:  # started
            worker.join(HANG_SECONDS)
    assert not worker.is_alive()
    return output, results["second"]
