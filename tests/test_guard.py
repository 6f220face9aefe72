"""The process-wide phase guard: no release while loading, denoising or releasing."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from support.fakes import HANG_SECONDS, FakeHostAllocator

from ddo_hooks import release_pytorch_host_cache
from ddo_hooks.errors import BoundaryRefusedError, InvalidArgumentError
from ddo_hooks.release import guard

WAIT = HANG_SECONDS


@pytest.fixture(autouse=True)
def quiet_guard() -> Iterator[None]:
    """Every test starts and ends with no open section and no release running."""
    assert guard.busy_reason() is None
    yield
    assert guard.busy_reason() is None


def release():
    return release_pytorch_host_cache(enabled=True, phase="before_transformer", device="cuda:0")


def start_held_release(fake: FakeHostAllocator) -> tuple[threading.Thread, threading.Event, list]:
    """Start a release in another thread and return once it is inside the release call."""
    gate = threading.Event()
    fake.release_gate = gate
    results: list = []
    worker = threading.Thread(target=lambda: results.append(release()))
    worker.start()
    assert fake.release_entered.wait(WAIT)
    return worker, gate, results


@pytest.mark.parametrize(
    ("kind", "sentence"),
    [("loading", "my_loader is loading components"), ("denoising", "my_loader is inside a denoising loop")],
)
def test_a_release_inside_a_section_is_refused_with_the_reason(fake: FakeHostAllocator, kind: str, sentence: str):
    with (
        guard.section(kind, "my_loader"),
        pytest.raises(BoundaryRefusedError, match=f"refused: {sentence}$") as e,
    ):
        release()
    assert e.value.reason == kind
    assert "release" not in fake.calls
    assert not any(c.startswith("synchronize") for c in fake.calls)


def test_a_release_inside_a_section_is_refused_even_where_it_would_be_a_noop():
    with guard.section("loading", "my_loader"), pytest.raises(BoundaryRefusedError) as e:
        release()  # the real backend of this CPU build has no entry point
    assert e.value.reason == "loading"


def test_a_disabled_release_inside_a_section_is_still_a_noop():
    with guard.section("denoising", "pipe"):
        assert release_pytorch_host_cache(enabled=False).release.noop_reason == "disabled"


def test_a_release_after_the_section_closed_runs(fake: FakeHostAllocator):
    with guard.section("loading", "my_loader"):
        pass
    assert release().release.status == "executed"


def test_a_concurrent_release_from_another_thread_is_refused(fake: FakeHostAllocator):
    worker, gate, results = start_held_release(fake)
    try:
        with pytest.raises(BoundaryRefusedError, match="another host-cache release is running") as e:
            release()
        assert e.value.reason == "release_in_progress"
    finally:
        gate.set()
        worker.join(WAIT)
    assert fake.calls.count("release") == 1
    assert results[0].release.status == "executed"


def test_a_section_opened_during_a_release_waits_until_the_release_finishes(fake: FakeHostAllocator):
    worker, gate, _ = start_held_release(fake)
    entered = threading.Event()

    def load() -> None:
        with guard.section("loading", "late_loader"):
            fake.calls.append("section entered")
            entered.set()

    loader = threading.Thread(target=load)
    try:
        loader.start()
        assert not entered.wait(0.2)  # still waiting for the release
    finally:
        gate.set()
        worker.join(WAIT)
        loader.join(WAIT)
    assert entered.is_set()
    assert fake.calls.index("section entered") > fake.calls.index("release")
    assert fake.calls[-1] == "section entered"


def test_a_section_cannot_be_opened_by_the_releasing_thread():
    with guard.releasing(), pytest.raises(BoundaryRefusedError, match="inside a host-cache release") as e:
        guard.enter("loading", "action")
    assert e.value.reason == "release_in_progress"


def test_a_section_closes_when_its_block_raises():
    with pytest.raises(RuntimeError, match="load failed"), guard.section("loading", "my_loader"):
        raise RuntimeError("load failed")
    assert guard.busy_reason() is None


def test_exit_twice_is_a_noop():
    held = guard.enter("denoising", "pipe")
    assert guard.busy_reason() == ("denoising", "pipe is inside a denoising loop")
    guard.exit(held)
    guard.exit(held)
    assert held.closed is True


def test_busy_reason_names_the_first_open_section():
    with guard.section("loading", "first"), guard.section("denoising", "second"):
        assert guard.busy_reason() == ("loading", "first is loading components")


def test_an_unknown_section_kind_is_refused():
    with pytest.raises(
        InvalidArgumentError, match=r"^guard section kind must be 'loading', 'denoising' or 'inference', got 'x'$"
    ):
        guard.enter("x", "owner")


def test_releasing_refuses_while_a_section_is_open():
    with guard.section("loading", "my_loader"), pytest.raises(BoundaryRefusedError) as e, guard.releasing():
        pass
    assert e.value.reason == "loading"
