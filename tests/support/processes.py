"""Forked children for tests: run a function in a child and get back what it returned."""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Callable
from typing import Any

import pytest

from support.fakes import HANG_SECONDS


def wait_until(predicate: Callable[[], bool]) -> None:
    """Poll ``predicate`` (a hang guard bounded by counting polls, not a measurement)."""
    for _ in range(int(HANG_SECONDS / 0.005)):
        if predicate():
            return
        time.sleep(0.005)
    pytest.fail("gave up waiting")


def in_child(work: Callable[[], Any]) -> dict[str, Any]:
    """Fork; run ``work()`` in the child; return ``{"ok": result}`` or ``{"error": repr}`` (it runs no pytest)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read)
        try:
            result = {"ok": work()}
        except BaseException as e:  # everything goes back to the parent
            result = {"error": repr(e)}
        os.write(write, pickle.dumps(result))
        os._exit(0)
    os.close(write)
    try:
        wait_until(lambda: os.waitpid(pid, os.WNOHANG) != (0, 0))  # a hung child fails the test
    except BaseException:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        raise
    with os.fdopen(read, "rb") as pipe:
        return pickle.loads(pipe.read())
