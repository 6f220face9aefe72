"""Every record says where it came from: run, call, boundary, time, process, host, rank."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

import pytest

from ddo_hooks import MetricsTracker, ReportError, attach, release_pytorch_host_cache
from ddo_hooks.policy.model import HookPolicy
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
        ({"RANK": "x", "WORLD_SIZE": "2"}, (None, 2)),
    ],
)
def test_the_rank_comes_from_the_launcher_variables(monkeypatch, variables, expected):
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert process_rank() == expected
    envelope = RecordEnvelope.now(run_id="0" * 32, call_index=0, boundary=None)
    assert (envelope.rank, envelope.world_size) == expected


def test_files_without_envelopes_still_load(tmp_path):
    report = release_pytorch_host_cache(phase="after_call")
    old = tmp_path / "old.jsonl"
    old.write_text(json.dumps({"component": "host_cache_after_call", "report": report.model_dump(mode="json")}) + "\n")
    loaded = load_report_file(old)
    assert [(entry.component, entry.envelope) for entry in loaded.entries] == [("host_cache_after_call", None)]


def test_an_invalid_envelope_is_located(tmp_path):
    tracker = MetricsTracker()
    envelope = RecordEnvelope.now(run_id="0" * 32, call_index=1, boundary="after_call")
    tracker.record_ddo_metrics(release_pytorch_host_cache(), component="host_cache_after_call", envelope=envelope)
    record = json.loads(tracker.to_jsonl())
    record["envelope"]["call_index"] = -1
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(record) + "\n")
    with pytest.raises(ReportError, match=r"bad\.jsonl:1:\d+: envelope\.call_index: "):
        load_report_file(bad)
