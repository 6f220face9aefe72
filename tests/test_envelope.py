"""Every record says where it came from: run, call, boundary, time, process, host, rank."""

from __future__ import annotations

import json
import logging
import os
import re
from datetime import datetime, timedelta, timezone

import pytest

from ddo_hooks import InvalidArgumentError, MetricsTracker, ReportError, attach, release_pytorch_host_cache
from ddo_hooks._diagnostics import show_repr
from ddo_hooks.policy.model import HookPolicy
from ddo_hooks.reports import envelope as envelope_module
from ddo_hooks.reports.envelope import RecordEnvelope, process_rank
from ddo_hooks.reports.files import load_report_file
from ddo_hooks.testing.tiny_pipelines import build_pipeline, call_kwargs


def test_each_record_of_an_attachment_carries_its_run_call_boundary_time_and_process(tmp_path):
    sink = tmp_path / "r.jsonl"
    pipe = build_pipeline("sd")
    started = datetime.now(timezone.utc)
    with attach(pipe, HookPolicy.from_mapping({"version": 1, "report_sink": str(sink)})) as attachment:
        pipe(**call_kwargs("sd", steps=1))
        pipe(**call_kwargs("sd", steps=1))
    entries = attachment.tracker.entries()
    envelopes = [entry.envelope for entry in entries]
    assert {e.run_id for e in envelopes} == {attachment.run_id}
    assert [(e.call_index, e.boundary) for e in envelopes] == [
        (call, boundary) for call in (1, 2) for boundary in ("before_transformer", "before_vae", "after_call")
    ]
    assert all(started - timedelta(seconds=1) <= e.timestamp <= datetime.now(timezone.utc) for e in envelopes)
    assert {(e.pid, e.host) for e in envelopes} == {(os.getpid(), os.uname().nodename)}
    saved = load_report_file(sink)  # the sink carries the same envelopes
    assert [entry.envelope for entry in saved.entries] == envelopes


def test_two_attachments_are_two_runs():
    first, second = attach(build_pipeline("sd")), attach(build_pipeline("sd", seed=1))
    assert first.run_id != second.run_id
    first.detach()
    second.detach()


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({}, (None, None)),
        ({"RANK": "1", "WORLD_SIZE": "2"}, (1, 2)),
        ({"LOCAL_RANK": "3"}, (3, None)),
        ({"WORLD_SIZE": "4"}, (None, 4)),
        ({"RANK": "", "WORLD_SIZE": "2"}, (None, 2)),  # set but empty: as if unset
        ({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}, (0, 1)),
    ],
)
def test_the_rank_comes_from_the_launcher_variables(monkeypatch, caplog, variables, expected):
    launch(monkeypatch, **variables)
    with caplog.at_level(logging.WARNING, logger="ddo_hooks"):
        assert process_rank() == expected
        envelope = RecordEnvelope.now(run_id="0" * 32, call_index=0, boundary=None)
    assert (envelope.rank, envelope.world_size) == expected
    assert caplog.records == []


LAUNCHER_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE")


def launch(monkeypatch, **variables: str) -> None:
    """Set the launcher variables to ``variables`` (the others unset), with no warning given yet."""
    for name in LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    envelope_module._warn_once.cache_clear()


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "ddo_hooks" and r.levelno == logging.WARNING]


RANK_RULE = "a whole number from 0 to 2147483646, in ASCII digits"
SIZE_RULE = "a whole number from 1 to 2147483647, in ASCII digits"


@pytest.mark.parametrize(
    ("name", "value", "shown", "rule"),
    [
        ("RANK", "\u00b2", "'\u00b2'", RANK_RULE),  # superscript two: str.isdigit() is true, int() fails
        ("RANK", "\u2460", "'\u2460'", RANK_RULE),  # circled one
        ("WORLD_SIZE", "\u2075", "'\u2075'", SIZE_RULE),  # superscript five
        ("WORLD_SIZE", "0", "'0'", SIZE_RULE),
        ("LOCAL_RANK", "\u00b2", "'\u00b2'", RANK_RULE),
        ("RANK", "x", "'x'", RANK_RULE),
        ("RANK", "-1", "'-1'", RANK_RULE),
        ("RANK", " 1", "' 1'", RANK_RULE),
        ("RANK", "2147483647", "'2147483647'", RANK_RULE),
        ("WORLD_SIZE", "9" * 5000, "'" + "9" * 56 + "...", SIZE_RULE),  # int() refuses over 4,300 digits
    ],
)
def test_an_unusable_launcher_variable_leaves_rank_and_world_size_unset_and_warns_once(
    monkeypatch, caplog, name, value, shown, rule
):
    others = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"}
    launch(monkeypatch, **{**others, name: value})
    with caplog.at_level(logging.WARNING, logger="ddo_hooks"):
        for _ in range(3):
            assert process_rank() == (None, None)
            envelope = RecordEnvelope.now(run_id="0" * 32, call_index=0, boundary=None)
            assert (envelope.rank, envelope.world_size) == (None, None)
    (warning,) = warnings_of(caplog)
    assert warning.startswith(f"the launcher variable {name}={shown} is not usable: ")
    assert f"{name} must be {rule}" in warning
    assert "records carry no rank or world size until it is fixed or unset" in warning
    assert len(warning) < 400


def test_each_unusable_value_warns_once_per_process(monkeypatch, caplog):
    launch(monkeypatch, RANK="x")
    with caplog.at_level(logging.WARNING, logger="ddo_hooks"):
        process_rank()
        process_rank()
        monkeypatch.setenv("RANK", "y")
        process_rank()
        monkeypatch.setenv("RANK", "x")
        process_rank()
    assert [w.split(" is not")[0] for w in warnings_of(caplog)] == [
        "the launcher variable RANK='x'",
        "the launcher variable RANK='y'",
    ]


@pytest.mark.parametrize(("rank_name", "rank"), [("RANK", "2"), ("RANK", "7"), ("LOCAL_RANK", "2")])
def test_a_rank_not_below_the_world_size_leaves_both_unset_and_warns_once(monkeypatch, caplog, rank_name, rank):
    launch(monkeypatch, **{rank_name: rank, "WORLD_SIZE": "2"})
    with caplog.at_level(logging.WARNING, logger="ddo_hooks"):
        assert process_rank() == (None, None)
        assert process_rank() == (None, None)
    assert warnings_of(caplog) == [
        f"the launcher variables {rank_name}={rank} and WORLD_SIZE=2 disagree: a rank counts from 0 and stays below "
        "the world size; records carry no rank or world size until they agree"
    ]


def test_a_bad_launcher_variable_never_costs_a_call(monkeypatch, caplog, tmp_path):
    launch(monkeypatch, RANK="\u00b2", WORLD_SIZE="0")
    sink = tmp_path / "r.jsonl"
    pipe = build_pipeline("sd")
    policy = HookPolicy.from_mapping({"version": 1, "report_sink": str(sink)})
    with caplog.at_level(logging.WARNING, logger="ddo_hooks"), attach(pipe, policy) as attachment:
        pipe(**call_kwargs("sd", steps=1))
        pipe(**call_kwargs("sd", steps=1))
    envelopes = [entry.envelope for entry in load_report_file(sink).entries]
    assert len(envelopes) == len(attachment.reports) == 6
    assert {(e.rank, e.world_size) for e in envelopes} == {(None, None)}
    assert [w.split(" is not")[0] for w in warnings_of(caplog)] == [
        "the launcher variable RANK='\u00b2'",
        "the launcher variable WORLD_SIZE='0'",
    ]


def test_files_without_envelopes_still_load(tmp_path):
    report = release_pytorch_host_cache(phase="after_call")
    old = tmp_path / "old.jsonl"
    old.write_text(json.dumps({"component": "host_cache_after_call", "report": report.model_dump(mode="json")}) + "\n")
    loaded = load_report_file(old)
    assert [(entry.component, entry.envelope) for entry in loaded.entries] == [("host_cache_after_call", None)]


def test_an_invalid_envelope_is_located(tmp_path):
    tracker = MetricsTracker()
    envelope = RecordEnvelope.now(run_id="0" * 32, call_index=1, boundary="after_call")
    tracker.record(release_pytorch_host_cache(), component="host_cache_after_call", envelope=envelope)
    record = json.loads(tracker.to_jsonl())
    record["envelope"]["call_index"] = -1
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(record) + "\n")
    with pytest.raises(ReportError, match=r"bad\.jsonl:1:\d+: envelope\.call_index: "):
        load_report_file(bad)


@pytest.mark.parametrize("bad", ["Bad!", "before-vae", "", 5, "x" * 10_000])
def test_a_record_at_an_unknown_boundary_is_refused_with_the_argument_and_the_boundaries(tmp_path, bad):
    expected = (
        rf"^boundary={re.escape(show_repr(bad))} is not a boundary; pass one of before_transformer, before_vae, "
        r"after_call, or None for a report made outside a boundary$"
    )
    with pytest.raises(InvalidArgumentError, match=expected):
        RecordEnvelope.now(run_id="0" * 32, call_index=0, boundary=bad)
    sink = tmp_path / "r.jsonl"
    pipe = build_pipeline("sd")
    with attach(pipe, HookPolicy.from_mapping({"version": 1, "report_sink": str(sink)})) as attachment:
        report = release_pytorch_host_cache(phase="after_call")
        with pytest.raises(InvalidArgumentError, match=expected):
            attachment.record(report, component="mine", boundary=bad)
        attachment.record(report, component="mine", boundary="after_call")
        attachment.record(report, component="mine")
    assert [e.envelope.boundary for e in attachment.tracker.entries()] == ["after_call", None]
    assert len(attachment.reports) == len(sink.read_text().splitlines()) == 2  # nothing of the refused one
