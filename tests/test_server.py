"""A process that stays up: overlapping calls, requests from inside a call, failures, memory, the sink.

Concurrency tests synchronize with events (with timeouts), never with sleeps.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import re
import threading
import weakref
from pathlib import Path

import pytest
import torch
from support.fakes import HANG_SECONDS
from support.overlap import overlapping_calls

from ddo_hooks import (
    BoundaryRefusedError,
    HostCacheReleaseReport,
    MetricsTracker,
    PolicyError,
    ReportSinkError,
    attach,
    register_action,
    release_pytorch_host_cache,
    unregister_action,
)
from ddo_hooks.hooks.phases import Phase
from ddo_hooks.hooks.sink import ReportSink
from ddo_hooks.policy.model import HookPolicy
from ddo_hooks.release import guard
from ddo_hooks.testing.tiny_pipelines import build_pipeline, call_kwargs

ORDER = ["before_transformer", "before_vae", "after_call"]
WAIT = HANG_SECONDS


def outcome(report) -> tuple[int | None, str, str]:
    """``(call, boundary, what happened)`` for a release or a refusal."""
    if isinstance(report, HostCacheReleaseReport):
        return None, report.release.phase, report.release.status
    body = report.body
    return body.call_index, body.boundary, body.reason


def test_two_overlapping_calls_give_six_outcomes_and_no_release_inside_any_loop(fake):
    pipe = build_pipeline("sd")
    attachment = attach(pipe)
    phases_at_release = []
    real_release = fake._release

    def release_and_look():  # what every call of this pipeline was doing when a release ran
        phases_at_release.append([call.phase for call in attachment.machine.calls()])
        real_release()

    fake._release = release_and_look
    first, second = (out.images for out in overlapping_calls(pipe, call_kwargs("sd"), call_kwargs("sd", seed=1)))
    attachment.detach()
    outcomes = [outcome(r) for r in attachment.reports]
    assert len(outcomes) == 6
    # the first call: its start was quiet; its later boundaries came while the second call was in progress
    assert outcomes[0] == (None, "before_transformer", "executed")
    assert (1, "before_vae", "concurrent_call") in outcomes
    assert (1, "after_call", "concurrent_call") in outcomes
    # the second call ran alone once the first had ended: each boundary executed, none was reset or lost
    assert [o for o in outcomes if o[0] is None][1:] == [(None, b, "executed") for b in ORDER]
    assert all(Phase.DENOISING not in phases for phases in phases_at_release)
    assert attachment.call_index == 2
    assert second.shape == first.shape
    assert guard.busy_reason() is None


@pytest.mark.parametrize("where", ["text_encoder", "decoder"])
def test_a_manual_boundary_from_inside_the_call_is_refused_and_the_calls_own_boundaries_are_unchanged(where):
    pipe = build_pipeline("sd")
    answers = []
    module = pipe.text_encoder if where == "text_encoder" else pipe.vae.decoder
    handle = module.register_forward_pre_hook(lambda m, a: answers.extend(attachment.boundary("after_call")))
    with attach(pipe) as attachment:
        pipe(**call_kwargs("sd"))
    handle.remove()
    assert {outcome(r)[2] for r in answers} == {"inference_in_progress"}
    assert "in this thread (from a hook or callback of the call)" in answers[0].body.detail
    own = [r.release.phase for r in attachment.reports if isinstance(r, HostCacheReleaseReport)]
    assert own == ORDER
    assert attachment.phase is Phase.IDLE


def test_a_direct_release_or_another_pipelines_boundary_beside_a_call_is_refused():
    pipe, other = build_pipeline("sd"), build_pipeline("sd", seed=1)
    seen = {}

    def during_encoding(module, args):
        def elsewhere():
            try:
                release_pytorch_host_cache(enabled=True, phase="manual")
            except BoundaryRefusedError as e:
                seen["direct"] = e.reason
            seen["other"] = [outcome(r)[2] for r in other_attachment.boundary("after_call")]

        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join(WAIT)

    handle = pipe.text_encoder.register_forward_pre_hook(during_encoding)
    with attach(pipe), attach(other) as other_attachment:
        pipe(**call_kwargs("sd"))
    handle.remove()
    assert seen == {"direct": "inference_in_progress", "other": ["inference_in_progress"]}


def failing_vae(pipe):
    def decode(*args, **kwargs):
        raise RuntimeError("decode failed")

    pipe.vae.decode = decode


def interrupting_encoder(pipe):
    def interrupt(module, args):
        raise KeyboardInterrupt

    pipe.text_encoder.register_forward_pre_hook(interrupt)


@pytest.mark.parametrize(
    ("break_it", "raised"),
    [(failing_vae, RuntimeError), (interrupting_encoder, KeyboardInterrupt)],
    ids=["vae-raises", "keyboard-interrupt-while-encoding"],
)
def test_a_call_that_failed_leaves_the_attachment_idle_for_every_thread(break_it, raised):
    pipe = build_pipeline("sd")
    with attach(pipe) as attachment:
        break_it(pipe)
        with pytest.raises(raised):
            pipe(**call_kwargs("sd"))
        assert attachment.phase is Phase.IDLE
        assert guard.busy_reason() is None
        answers = []
        thread = threading.Thread(target=lambda: answers.extend(attachment.boundary("after_call")))
        thread.start()
        thread.join(WAIT)
    assert isinstance(answers[0], HostCacheReleaseReport)  # not refused as if the call were still running


def test_a_raising_action_ends_the_call_cleanly():
    @register_action("explodes")
    def explodes(ctx):
        raise RuntimeError("the action broke")

    try:
        policy = HookPolicy.from_mapping({"version": 1, "boundaries": {"before_vae": {"actions": ["explodes"]}}})
        pipe = build_pipeline("sd")
        with attach(pipe, policy) as attachment:
            with pytest.raises(RuntimeError, match="the action broke"):
                pipe(**call_kwargs("sd"))
            assert attachment.phase is Phase.IDLE
            assert guard.busy_reason() is None
            pipe(**call_kwargs("sd", output_type="latent"))  # the next call works
    finally:
        unregister_action("explodes")


def test_a_refusal_by_an_action_with_its_own_reason_code_is_recorded():
    @register_action("picky")
    def picky(ctx):
        raise BoundaryRefusedError("gpu_busy", "the GPU is busy with another job")

    try:
        policy = HookPolicy.from_mapping({"version": 1, "boundaries": {"after_call": {"actions": ["picky"]}}})
        pipe = build_pipeline("sd")
        with attach(pipe, policy) as attachment:
            pipe(**call_kwargs("sd"))
        refusal = attachment.reports[-1].body
        assert (refusal.reason, refusal.detail) == ("action_refused", "gpu_busy: the GPU is busy with another job")
    finally:
        unregister_action("picky")


# -- memory --------------------------------------------------------------------------------------


def collect() -> None:
    """Collect until nothing more is found (a finalizer, such as tqdm's, can free more on a next pass)."""
    while gc.collect():
        pass


def test_attached_pipelines_that_are_dropped_are_collected_with_their_attachments():
    pipes, attachments = [], []
    for seed in range(20):
        pipe = build_pipeline("sd", seed=seed)
        attachment = attach(pipe)
        pipe(**call_kwargs("sd", steps=1))
        pipes.append(weakref.ref(pipe))
        attachments.append(weakref.ref(attachment))
        del pipe, attachment
    collect()
    assert [ref() for ref in pipes] == [None] * 20
    assert [ref() for ref in attachments] == [None] * 20


def test_an_attachment_kept_by_the_user_does_not_keep_its_pipeline_or_components_alive():
    pipe = build_pipeline("sd")
    attachment = attach(pipe)
    pipe(**call_kwargs("sd", steps=1))
    pipe_ref, unet_ref = weakref.ref(pipe), weakref.ref(pipe.unet)
    del pipe
    collect()
    assert (pipe_ref(), unet_ref(), attachment.pipeline) == (None, None, None)
    attachment.detach()  # nothing left to undo, and no error


def test_reports_in_memory_are_bounded_by_the_policy_and_can_be_drained(tmp_path):
    pipe = build_pipeline("sd")
    policy = HookPolicy.from_mapping({"version": 1, "keep_reports": 4})
    with attach(pipe, policy) as attachment:
        for _ in range(3):
            pipe(**call_kwargs("sd", steps=1))
        assert len(attachment.reports) == 4
        assert len(attachment.tracker.records()) == 4
        assert attachment.tracker.evicted == 5
        drained = attachment.drain_reports()
        assert [r.release.phase for r in drained] == ["after_call", *ORDER]
        assert attachment.reports == []


def test_with_a_sink_nothing_needs_to_stay_in_memory(tmp_path):
    pipe = build_pipeline("sd")
    sink = tmp_path / "reports.jsonl"
    policy = HookPolicy.from_mapping({"version": 1, "keep_reports": 0, "report_sink": str(sink)})
    with attach(pipe, policy) as attachment:
        pipe(**call_kwargs("sd", steps=1))
        pipe(**call_kwargs("sd", steps=1))
    assert attachment.reports == []
    assert attachment.tracker.records() == []
    assert len(MetricsTracker.from_jsonl(sink.read_text()).records()) == 6


# -- the report sink -------------------------------------------------------------------------------


def test_a_sink_on_a_full_disk_is_refused_at_attach_time_without_a_write(tmp_path, monkeypatch):
    full = tmp_path / "full.jsonl"
    pipe = build_pipeline("sd")
    policy = HookPolicy.from_mapping({"version": 1, "report_sink": str(full)})
    writes = []
    monkeypatch.setattr(os, "write", lambda fd, data: writes.append(data) or len(data))
    monkeypatch.setattr(os, "fstatvfs", lambda fd: os.statvfs_result((4096,) * 3 + (0,) * 7))  # no free block
    with pytest.raises(PolicyError, match=r"report_sink '.*full\.jsonl' cannot be written: the disk holding it has no"):
        attach(pipe, policy)
    monkeypatch.undo()
    assert (writes, full.read_bytes()) == ([], b"")


def sink_policy(path, failure="continue"):
    return HookPolicy.from_mapping({"version": 1, "report_sink": str(path), "report_sink_failure": failure})


def test_a_sink_that_fails_mid_run_costs_the_user_nothing_and_is_reported_once(tmp_path, caplog):
    folder = tmp_path / "logs"
    folder.mkdir()
    pipe = build_pipeline("sd")
    with attach(pipe, sink_policy(folder / "r.jsonl")) as attachment:
        (folder / "r.jsonl").unlink()
        folder.rmdir()  # e.g. a log folder cleaned up under a running service
        with caplog.at_level(logging.WARNING, logger="ddo_hooks"):
            images = pipe(**call_kwargs("sd")).images
            pipe(**call_kwargs("sd"))
    assert images.shape == (1, 3, 32, 32)
    assert len(attachment.sink_failures) == 6
    assert (
        "r.jsonl' cannot be opened: No such file or directory; free space or point report_sink"
        in (attachment.sink_failures[0])
    )
    assert len([r for r in caplog.records if "report_sink" in r.getMessage()]) == 1
    assert len(attachment.reports) == 6  # nothing lost from memory


def test_a_sink_failure_can_end_the_call_instead(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    pipe = build_pipeline("sd")
    with attach(pipe, sink_policy(folder / "r.jsonl", failure="raise")) as attachment:
        (folder / "r.jsonl").unlink()
        folder.rmdir()
        with pytest.raises(ReportSinkError, match=r"r\.jsonl' cannot be opened"):
            pipe(**call_kwargs("sd"))
        assert attachment.phase is Phase.IDLE
        assert guard.busy_reason() is None


def test_a_short_write_leaves_the_file_as_it_is_and_the_next_line_starts_a_line_of_its_own(tmp_path, monkeypatch):
    path = tmp_path / "r.jsonl"
    sink = ReportSink(path, on_failure="continue")
    sink.write(json.dumps({"n": 1}))
    real_write = os.write

    def half_then_full_disk(fd, data):  # what write(2) does when the disk fills mid-line
        return real_write(fd, data[: len(data) // 2])

    monkeypatch.setattr(os, "write", half_then_full_disk)
    assert sink.write(json.dumps({"n": 2})) is False
    monkeypatch.setattr(os, "write", real_write)
    assert sink.write(json.dumps({"n": 3})) is True
    assert sink.write(json.dumps({"n": 4})) is True
    assert path.read_text().splitlines() == ['{"n": 1}', '{"n"', '{"n": 3}', '{"n": 4}']  # nothing truncated
    assert "only 4 of 9 bytes were written (is the disk full?); the cut line is left" in sink.failures[0]


def test_two_processes_sharing_a_sink_lose_no_line_while_one_attaches_in_a_loop(tmp_path):
    """A worker writes lines while another attaches (each attach probes the sink): every line is kept."""
    path = tmp_path / "shared.jsonl"
    policy = HookPolicy.from_mapping({"version": 1, "report_sink": str(path)})
    pipe = build_pipeline("sd")
    attach(pipe, policy).detach()  # the file exists before the writer starts
    lines = 4000

    def writer() -> int:
        sink = ReportSink(path, on_failure="raise")
        for n in range(lines):
            sink.write(json.dumps({"n": n}))
        return lines

    pid = os.fork()
    if pid == 0:  # the writer
        status = 0
        try:
            writer()
        except BaseException:
            status = 1
        os._exit(status)
    attaches = 0
    while (done := os.waitpid(pid, os.WNOHANG)) == (0, 0):
        attach(pipe, policy).detach()
        attaches += 1
        assert attaches < 1_000_000
    assert os.waitstatus_to_exitcode(done[1]) == 0  # the writer was never refused
    written = [json.loads(line)["n"] for line in path.read_text().splitlines() if line.strip()]
    assert attaches > 0
    assert sorted(written) == list(range(lines))


posix_only = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")

NOT_REGULAR = "not a regular file; point report_sink at a regular file (a missing one is created), or set it to null"


def without_blocking(fifo, run):
    """``run()`` in a thread, whose result or error it returns; if it blocks on ``fifo``, unblock it and fail.

    A writer that opens a FIFO without O_NONBLOCK waits for a reader: after the hang guard a reader is
    opened, which lets the writer go on, and the test fails instead of hanging the suite.
    """
    outcome = {}

    def target():
        try:
            outcome["value"] = run()
        except BaseException as e:  # handed to the test's thread
            outcome["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(WAIT)
    if thread.is_alive():
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        thread.join(WAIT)
        os.close(reader)
        pytest.fail(f"blocked opening the FIFO {fifo}, which has no reader")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def special_file(tmp_path, kind: str):
    path = tmp_path / kind
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        return Path("/dev/null")
    return path


@posix_only
@pytest.mark.parametrize(
    ("kind", "what"),
    [("fifo", "a FIFO (named pipe)"), ("directory", "a directory"), ("dev-null", "a character device")],
)
def test_a_sink_that_is_not_a_regular_file_is_refused_at_attach_naming_the_policy_line(tmp_path, kind, what):
    path = special_file(tmp_path, kind)
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(f"version: 1\nreport_sink: {path}\n")
    pipe = build_pipeline("sd")
    expected = (
        rf"^.*policy\.yaml:2:1: report_sink '{re.escape(str(path))}' is {re.escape(what)}, {re.escape(NOT_REGULAR)}"
    )
    with pytest.raises(PolicyError, match=expected):
        without_blocking(path, lambda: attach(pipe, policy_file))
    attach(pipe).detach()  # nothing was left attached


@pytest.mark.parametrize("target", ["real.jsonl", "missing.jsonl"])
def test_a_symlinked_sink_is_refused_at_attach_naming_the_real_path_and_its_target_is_untouched(tmp_path, target):
    real = tmp_path / "elsewhere" / target
    real.parent.mkdir()
    if target == "real.jsonl":
        real.write_text("someone else's file\n")
    link = tmp_path / "reports.jsonl"
    link.symlink_to(real)  # e.g. planted in a shared folder such as /tmp by another user
    pipe = build_pipeline("sd")
    with pytest.raises(PolicyError, match=rf"is a symbolic link .*set report_sink to '{re.escape(str(real))}' itself"):
        attach(pipe, HookPolicy.from_mapping({"version": 1, "report_sink": str(link)}))
    with attach(pipe, sink_policy(real)) as attachment:  # the real path works, and a link put in its place since
        real.rename(tmp_path / "moved.jsonl")
        real.symlink_to(tmp_path / "moved.jsonl")
        pipe(**call_kwargs("sd"))
    assert len(attachment.sink_failures) == 3
    assert "is a symbolic link" in attachment.sink_failures[0]
    assert (tmp_path / "moved.jsonl").read_text() == ("someone else's file\n" if target == "real.jsonl" else "")


@posix_only
@pytest.mark.parametrize("failure", ["continue", "raise"])
def test_a_sink_replaced_by_a_fifo_mid_run_never_blocks_the_call(tmp_path, caplog, failure):
    path = tmp_path / "r.jsonl"
    pipe = build_pipeline("sd")
    with attach(pipe, sink_policy(path, failure)) as attachment:
        path.unlink()
        os.mkfifo(path)  # e.g. a log reader's pipe put in its place, the reader since gone
        with caplog.at_level(logging.WARNING, logger="ddo_hooks"):
            if failure == "raise":
                with pytest.raises(ReportSinkError, match=re.escape(f"is a FIFO (named pipe), {NOT_REGULAR}")):
                    without_blocking(path, lambda: pipe(**call_kwargs("sd")))
                return
            images = without_blocking(path, lambda: pipe(**call_kwargs("sd")).images)
    assert images.shape == (1, 3, 32, 32)
    assert len(attachment.sink_failures) == 3
    assert f"r.jsonl' is a FIFO (named pipe), {NOT_REGULAR}" in attachment.sink_failures[0]
    assert len([r for r in caplog.records if "report_sink" in r.getMessage()]) == 1


@posix_only
def test_a_sink_replaced_by_a_fifo_with_a_reader_still_gets_no_line(tmp_path):
    path = tmp_path / "r.jsonl"
    pipe = build_pipeline("sd")
    with attach(pipe, sink_policy(path)) as attachment:
        path.unlink()
        os.mkfifo(path)
        reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a writer could open it now without waiting
        try:
            without_blocking(path, lambda: pipe(**call_kwargs("sd")))
            assert os.read(reader, 4096) == b""  # no writer has it open, and none wrote a byte
        finally:
            os.close(reader)
    assert len(attachment.sink_failures) == 3


def test_write_jsonl_never_leaves_a_truncated_file_where_a_valid_one_was(tmp_path, monkeypatch):
    tracker = MetricsTracker()
    tracker.record(release_pytorch_host_cache(phase="after_call"), component="host_cache_after_call")
    target = tracker.write_jsonl(tmp_path / "run.jsonl")
    before = target.read_text()
    tracker.record(release_pytorch_host_cache(phase="after_call"), component="host_cache_after_call")

    def fail_to_replace(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail_to_replace)
    with pytest.raises(OSError, match="No space left"):
        tracker.write_jsonl(target)
    assert target.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl"]


def test_report_sink_and_demo_report_refuse_a_missing_folder_alike(tmp_path):
    from ddo_hooks.cli.demo import run_demo
    from ddo_hooks.errors import InvalidArgumentError

    missing = tmp_path / "nope" / "r.jsonl"
    with pytest.raises(PolicyError, match=r"the folder .*nope does not exist; create it first$"):
        attach(build_pipeline("sd"), HookPolicy.from_mapping({"version": 1, "report_sink": str(missing)}))
    with pytest.raises(InvalidArgumentError, match=r"the folder .*nope does not exist; create it first$"):
        run_demo(family="sd", device=torch.device("cpu"), report=missing)
    assert not missing.parent.exists()
