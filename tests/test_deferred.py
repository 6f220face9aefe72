"""Deferred boundaries, the release slot and forks: one outcome per call, nothing lost, nothing stuck."""

from __future__ import annotations

import gc
import json
import os
import threading

import pytest
from support.fakes import HANG_SECONDS, FakeScheduler
from support.overlap import overlapping_calls
from support.processes import in_child, wait_until

from ddo_hooks import (
    DetachTimeoutError,
    HookPolicy,
    InvalidArgumentError,
    ReportSinkError,
    attach,
    register_action,
    unregister_action,
)
from ddo_hooks.hooks.idle import use_scheduler
from ddo_hooks.hooks.sink import ReportSink
from ddo_hooks.release import guard
from ddo_hooks.testing.tiny_pipelines import build_pipeline, call_kwargs

WAIT = HANG_SECONDS


def outcome(report) -> str:
    if report.route == "phase_boundary_refusal":
        return f"{report.body.boundary}:{report.body.reason}"
    if report.route == "boundary_action":
        return f"{report.body.boundary}/{report.body.action}:{report.body.status}"
    return f"{report.release.phase}:{report.release.status}"


def after_calls(attachment) -> dict[int, list[str]]:
    """Each call's ``after_call`` outcomes, by call index (from the envelopes)."""
    found: dict[int, list[str]] = {}
    for entry in attachment.tracker.entries():
        if entry.envelope is not None and entry.envelope.boundary == "after_call":
            found.setdefault(entry.envelope.call_index, []).append(outcome(entry.report))
    return found


def idle_policy(idle, actions=("host_cache_release",), **extra) -> HookPolicy:
    after_call = {"idle": idle, "actions": list(actions)}
    return HookPolicy.from_mapping({"version": 1, "boundaries": {"after_call": after_call}, **extra})


@pytest.fixture(scope="module")
def sd():
    return build_pipeline("sd")


@pytest.fixture
def boom():
    @register_action("boom")
    def boom(ctx):
        raise RuntimeError("the action broke")

    yield "boom"
    unregister_action("boom")


@pytest.mark.parametrize("idle", [0, "1ms"])
def test_a_short_idle_delay_runs_every_calls_after_call_on_the_real_timer(fake, sd, idle):
    calls = 5  # before the fix, idle 0 lost every call's after_call
    with attach(sd, idle_policy(idle)) as attachment:
        for _ in range(calls):
            sd(**call_kwargs("sd", steps=1))
            wait_until(lambda: attachment.call_index in after_calls(attachment))
    assert after_calls(attachment) == {i: ["after_call:executed"] for i in range(1, calls + 1)}


def test_overlapping_calls_each_get_exactly_one_after_call_outcome(fake, sd):
    clock = FakeScheduler()
    with use_scheduler(clock), attach(sd, idle_policy("1s")) as attachment:
        overlapping_calls(sd, call_kwargs("sd", steps=1), call_kwargs("sd", steps=1))
        clock.advance(5)
    assert after_calls(attachment) == {1: ["after_call:concurrent_call"], 2: ["after_call:executed"]}


def test_a_deferred_action_that_raises_is_recorded_and_the_next_action_still_runs(fake, sd, boom, caplog):
    clock = FakeScheduler()
    with use_scheduler(clock), attach(sd, idle_policy("1s", actions=(boom, "host_cache_release"))) as attachment:
        sd(**call_kwargs("sd", steps=1))
        clock.advance(5)  # on a timer thread nothing may escape: it would reach only threading.excepthook
    assert after_calls(attachment) == {1: ["after_call:action_failed", "after_call:executed"]}
    failed = next(r for r in attachment.reports if outcome(r) == "after_call:action_failed")
    assert failed.body.detail == "it raised RuntimeError: the action broke"
    assert "action 'boom' of the deferred after_call failed" in caplog.text


def failing_writes(monkeypatch) -> None:
    def full_disk(self, data):
        raise ReportSinkError(f"report_sink {str(self.path)!r} cannot be written: No space left on device")

    monkeypatch.setattr(ReportSink, "_append", full_disk)


def test_a_sink_failure_in_a_deferred_after_call_is_kept_even_in_raise_mode(fake, sd, tmp_path, monkeypatch):
    clock = FakeScheduler()
    policy = idle_policy("1s", report_sink=str(tmp_path / "r.jsonl"), report_sink_failure="raise")
    with use_scheduler(clock), attach(sd, policy) as attachment:
        sd(**call_kwargs("sd", steps=1))
        failing_writes(monkeypatch)
        clock.advance(5)
        monkeypatch.undo()
    assert after_calls(attachment) == {1: ["after_call:executed"]}  # recorded in the tracker all the same
    assert len(attachment.sink_failures) == 1
    assert "No space left on device" in attachment.sink_failures[0]


def test_detach_always_completes_and_then_raises_what_it_could_not_write(fake, sd, tmp_path, monkeypatch):
    clock = FakeScheduler()
    original = type(sd)
    policy = idle_policy("1s", report_sink=str(tmp_path / "r.jsonl"), report_sink_failure="raise")
    with use_scheduler(clock):
        attachment = attach(sd, policy)
        sd(**call_kwargs("sd", steps=1))
        failing_writes(monkeypatch)
        with pytest.raises(ReportSinkError, match="No space left"):
            attachment.detach()
        monkeypatch.undo()
    assert attachment.detached
    assert type(sd) is original  # the class swap is undone
    assert after_calls(attachment) == {1: ["after_call:not_reached"]}
    attach(sd).detach()  # nothing of the first attachment is left in the way


@pytest.fixture
def slow_pair():
    """Two actions: ``slow`` blocks until ``release`` is set, ``later`` notes that it ran."""
    started, release, ran = threading.Event(), threading.Event(), []

    @register_action("slow")
    def slow(ctx):
        started.set()
        assert release.wait(WAIT)
        ran.append("slow")

    @register_action("later")
    def later(ctx):
        ran.append("later")

    yield started, release, ran
    release.set()
    unregister_action("slow")
    unregister_action("later")


def test_detach_waits_for_a_deferred_after_call_that_is_running_and_the_rest_of_it_never_starts(fake, sd, slow_pair):
    # Issue 51 (B, high): detach() returned while the timer thread was still in the boundary, which then went on
    # (freeing copies, under stable_files, after detach had copied them back) and ran its later actions.
    started, release, ran = slow_pair
    attachment = attach(sd, idle_policy("1ms", actions=("slow", "later")))
    sd(**call_kwargs("sd", steps=1))
    assert started.wait(WAIT)  # the deferred after_call is in its first action, on the timer thread
    detaching = threading.Thread(target=attachment.detach)
    detaching.start()
    detaching.join(0.2)
    assert detaching.is_alive()
    assert not attachment.detached
    release.set()
    detaching.join(WAIT)
    assert not detaching.is_alive()
    assert attachment.detached
    assert ran == ["slow"]  # the second action never started
    later = next(r.body for r in attachment.reports if r.route == "phase_boundary_refusal")
    assert (later.action, later.reason) == ("later", "not_reached")
    assert later.detail == "the attachment was detached while the deferred after_call ran, before this action started"


def test_detach_past_its_bound_says_so_runs_nothing_more_and_completes_when_called_again(
    fake, sd, slow_pair, monkeypatch
):
    from ddo_hooks.hooks import attachment as attachment_module

    started, release, ran = slow_pair
    original = type(sd)
    attachment = attach(sd, idle_policy("1ms", actions=("slow", "later")))
    sd(**call_kwargs("sd", steps=1))
    assert started.wait(WAIT)
    monkeypatch.setattr(attachment_module, "DETACH_WAIT_S", 0.01)
    with pytest.raises(DetachTimeoutError, match=r"waited 0.01 s for its deferred after_call.*call detach\(\) again"):
        attachment.detach()
    assert not attachment.detached
    assert type(sd) is not original
    release.set()
    monkeypatch.setattr(attachment_module, "DETACH_WAIT_S", WAIT)
    attachment.detach()
    assert attachment.detached
    assert type(sd) is original
    assert ran == ["slow"]
    attach(sd).detach()


def test_a_deferred_after_call_whose_pipeline_was_collected_is_refused_with_a_reason(fake):
    clock = FakeScheduler()
    pipe = build_pipeline("sd")
    with use_scheduler(clock):
        attachment = attach(pipe, idle_policy("1s"))
        pipe(**call_kwargs("sd", steps=1))
        del pipe
        gc.collect()
        assert attachment.pipeline is None
        clock.advance(5)
    (refused,) = [r for r in attachment.reports if r.route == "phase_boundary_refusal"]
    assert outcome(refused) == "after_call:not_reached"
    assert "StableDiffusionPipeline was collected before the idle delay passed" in refused.body.detail


def test_every_action_of_a_boundary_runs_in_one_hold_of_the_release_slot(fake, sd):
    """A later action (malloc_trim, or any) never runs beside another attached pipeline's call."""
    other = build_pipeline("sd", seed=1)
    events: list[str] = []
    other_runs = threading.Event()
    worker = threading.Thread(target=lambda: other(**call_kwargs("sd", steps=1)))

    @register_action("start_the_other")
    def start_the_other(ctx):
        events.append("action starts")
        worker.start()
        other_runs.wait(1.0)  # the other call cannot start while the slot is held: this times out
        events.append("action ends")
        return ctx.action_report("executed")

    def forward(module, args):
        events.append("other pipeline's denoiser")
        other_runs.set()

    handle = other.unet.register_forward_pre_hook(forward)
    policy = HookPolicy.from_mapping(
        {"version": 1, "boundaries": {"after_call": {"actions": ["host_cache_release", "start_the_other"]}}}
    )
    try:
        with attach(sd, policy) as attachment, attach(other):
            sd(**call_kwargs("sd", steps=1))
            worker.join(WAIT)
    finally:
        handle.remove()
        unregister_action("start_the_other")
    assert events[:3] == ["action starts", "action ends", "other pipeline's denoiser"]
    assert after_calls(attachment) == {1: ["after_call:executed", "after_call/start_the_other:executed"]}


def test_a_boundary_requested_inside_a_boundary_is_refused(fake, sd):
    inner = []

    @register_action("ask_again")
    def ask_again(ctx):
        inner.extend(attachment.boundary("before_vae"))

    policy = HookPolicy.from_mapping({"version": 1, "boundaries": {"after_call": {"actions": ["ask_again"]}}})
    try:
        with attach(sd, policy) as attachment:
            attachment.boundary("after_call")
    finally:
        unregister_action("ask_again")
    assert [outcome(r) for r in inner] == ["before_vae:release_in_progress"]


def test_drop_names_the_fix_for_a_list(sd):
    with attach(sd) as attachment, pytest.raises(InvalidArgumentError, match=r"drop\(\*\['text_encoder'\]\)"):
        attachment.drop(["text_encoder"])


# -- fork ------------------------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")
def test_a_child_forked_while_a_release_held_the_slot_starts_free_and_records_as_a_run_of_its_own(fake, sd, tmp_path):
    sink = tmp_path / "r.jsonl"
    held, done = threading.Event(), threading.Event()

    def hold_the_slot_and_the_locks():  # as a deferred release does on its timer thread
        with guard.boundary_slot():
            held.set()
            done.wait(WAIT)

    with attach(sd, HookPolicy.from_mapping({"version": 1, "report_sink": str(sink)})) as attachment:
        sd(**call_kwargs("sd", steps=1))
        holder = threading.Thread(target=hold_the_slot_and_the_locks)
        holder.start()
        assert held.wait(WAIT)

        def child():
            produced = attachment.boundary("after_call")
            return attachment.run_id, [outcome(r) for r in produced], guard.busy_reason()

        got = in_child(child)
        done.set()
        holder.join(WAIT)
    assert "error" not in got, got
    child_run, produced, busy = got["ok"]
    assert produced == ["after_call:executed"]
    assert busy is None
    assert child_run != attachment.run_id
    envelopes = [json.loads(line)["envelope"] for line in sink.read_text().splitlines() if line]
    runs = {(e["run_id"], e["pid"]) for e in envelopes}
    assert {run for run, _ in runs} == {attachment.run_id, child_run}
    assert len({pid for _, pid in runs}) == 2


def test_a_deferred_after_call_still_waiting_at_interpreter_exit_is_recorded(fake, sd):
    from ddo_hooks.ledger import LEDGER

    clock = FakeScheduler()
    with use_scheduler(clock), attach(sd, idle_policy("60s")) as attachment:
        sd(**call_kwargs("sd", steps=1))
        LEDGER.settle("at_exit")  # what atexit runs
        clock.advance(7200)  # its timer was cancelled: nothing more happens
    assert after_calls(attachment) == {1: ["after_call:not_reached"]}
    assert "the interpreter exited before the idle delay passed" in attachment.reports[-1].body.detail


def test_at_interpreter_exit_the_runner_cancels_the_timer_thread_of_its_waiting_deferred(fake, sd):
    from ddo_hooks.ledger import LEDGER

    before = set(threading.enumerate())
    with attach(sd, idle_policy("60min")) as attachment:  # the real scheduler: a daemon timer thread
        sd(**call_kwargs("sd", steps=1))
        (timer,) = [t for t in set(threading.enumerate()) - before if isinstance(t, threading.Timer)]
        LEDGER.settle("at_exit")
        assert timer.finished.is_set()  # cancelled (Timer.cancel sets it): the thread ends without running anything
        timer.join(WAIT)
    assert after_calls(attachment) == {1: ["after_call:not_reached"]}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")
def test_a_child_forked_while_a_deferred_waits_neither_runs_nor_cancels_it_and_the_parent_still_runs_it(fake, sd):
    clock = FakeScheduler()
    with use_scheduler(clock), attach(sd, idle_policy("60s")) as attachment:
        sd(**call_kwargs("sd", steps=1))

        def child():
            clock.advance(7200)  # the parent's waiting timer, copied into the child: its runner forgot it
            sd(**call_kwargs("sd", steps=1))  # and a call of the child's own cancels nothing of the parent's
            clock.advance(7200)
            return after_calls(attachment)

        got = in_child(child)
        assert got == {"ok": {2: ["after_call:executed"]}}, got
        clock.advance(7200)
        assert after_calls(attachment) == {1: ["after_call:executed"]}
