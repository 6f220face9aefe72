"""Files of DDO's reports: JSON Lines of bare reports, one report alone, and what is refused with a reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.ddo_payloads import corpus_files

from ddo_hooks import MetricsTracker, release_pytorch_host_cache
from ddo_hooks.cli import main
from ddo_hooks.cli.rows import boundary_rows
from ddo_hooks.errors import InvalidArgumentError, ReportError
from ddo_hooks.reports.ddo.routes import DDO_REPORT_TYPES
from ddo_hooks.reports.files import load_report_file

PAYLOADS = [json.loads(path.read_text(encoding="utf-8")) for path in corpus_files()]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def lines(*documents: Any) -> str:
    return "".join(json.dumps(document) + "\n" for document in documents)


def ours() -> dict[str, Any]:
    return release_pytorch_host_cache(phase="after_call").model_dump(mode="json")


def test_json_lines_of_ddos_reports_load_in_order(tmp_path: Path):
    loaded = load_report_file(write(tmp_path, "ddo.jsonl", lines(*PAYLOADS)))
    assert loaded.form == "JSON Lines of bare reports"
    assert [component for component, _ in loaded.records] == [None] * len(PAYLOADS)
    assert [report.as_dict() for _, report in loaded.records] == PAYLOADS
    assert all(isinstance(report, DDO_REPORT_TYPES) for _, report in loaded.records)


def test_a_bare_line_of_either_shape_is_read_by_its_own_keys(tmp_path: Path):
    loaded = load_report_file(write(tmp_path, "mixed.jsonl", lines(PAYLOADS[0], ours(), PAYLOADS[1])))
    kinds = [type(report).__name__ for _, report in loaded.records]
    assert kinds[1] == "HostCacheReleaseReport"
    assert kinds[0].startswith("DDO")
    assert kinds[2].startswith("DDO")


def test_one_ddo_report_alone_is_a_report_json_file(tmp_path: Path):
    loaded = load_report_file(write(tmp_path, "one.json", json.dumps(PAYLOADS[0], indent=2)))
    assert loaded.form == "report JSON"
    assert loaded.records[0][1].as_dict() == PAYLOADS[0]


def test_an_invalid_ddo_line_is_located_and_read_as_ddos_shape(tmp_path: Path):
    bad = json.loads(json.dumps(PAYLOADS[0]))
    bad["setup"][next(iter(bad["setup"]))] = {"status": "exploded"} if bad["route"] != "diffusers_group_offload" else 1
    path = write(tmp_path, "ddo.jsonl", lines(PAYLOADS[1], bad))
    with pytest.raises(ReportError) as info:
        load_report_file(path)
    message = str(info.value).removeprefix(str(tmp_path) + "/")
    assert message.startswith("ddo.jsonl:2:")
    assert all(line.endswith("(of DDO's shape)") for line in message.splitlines()), message


def test_a_record_holds_a_report_of_either_shape(tmp_path: Path):
    """Records of both shapes in one file: each report read by its own keys, and written back unchanged."""
    records = [{"component": "c", "report": ours()}, *({"component": "ddo", "report": p} for p in PAYLOADS)]
    path = write(tmp_path, "records.jsonl", lines(*records))
    loaded = load_report_file(path)
    assert loaded.form == "JSON Lines"
    assert [report.model_dump(mode="json") for _, report in loaded.records] == [r["report"] for r in records]
    tracker = MetricsTracker.from_jsonl(lines(*records))
    assert MetricsTracker.from_json(tracker.to_json()).reports() == tracker.reports() == [r for _, r in loaded.records]


def test_an_invalid_ddo_report_in_a_record_is_located_and_read_as_ddos_shape(tmp_path: Path):
    bad = json.loads(json.dumps(PAYLOADS[0]))
    bad["setup"][next(iter(bad["setup"]))] = {"status": "exploded"} if bad["route"] != "diffusers_group_offload" else 1
    text = lines({"component": "c", "report": ours()}, {"component": "ddo", "report": bad})
    with pytest.raises(ReportError, match=r"records\.jsonl:2:\d+: report\.setup\..*\(of DDO's shape\)"):
        load_report_file(write(tmp_path, "records.jsonl", text))
    with pytest.raises(ReportError, match=r"^line 2\.report: not a valid report of DDO's shape \(it has"):
        MetricsTracker.from_jsonl(text)


def test_a_tracker_keeps_ddos_reports_too():
    from ddo_hooks import parse_report

    tracker = MetricsTracker()
    tracker.record(parse_report(PAYLOADS[0]), component="ddo")
    assert tracker.reports()[0].as_dict() == PAYLOADS[0]
    with pytest.raises(InvalidArgumentError, match=r"expects a report model \(of either shape\), got dict"):
        tracker.record(PAYLOADS[0], component="ddo")  # type: ignore[arg-type]


def test_a_ddo_metrics_journal_record_is_refused_saying_what_it_is(tmp_path: Path):
    journal = {
        "schema_version": 1, "observation": "partial_host_step_boundary", "step_index": 3,
        "host_elapsed_seconds": 1.5, "gpu_completion_proven": False, "completion_collection_requested": False,
        "metrics": PAYLOADS[0],
    }  # fmt: skip
    path = write(tmp_path, "step_0003.json", json.dumps(journal, indent=2))
    with pytest.raises(ReportError, match=r"a record of DDO's metrics journal .*reads the report under its 'metrics'"):
        load_report_file(path)


def test_validate_report_reads_ddo_json_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = write(tmp_path, "ddo.jsonl", lines(*PAYLOADS))
    assert main(["validate-report", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"valid JSON Lines of bare reports, {len(PAYLOADS)} reports" in out
    assert "pytorch_host_cache_release x4" in out


def test_ddo_reports_become_table_rows():
    """What ``ddo-hooks summarize`` shows needs only each report's summary(): DDO's reports give one."""
    from ddo_hooks import parse_report

    reports = [parse_report(payload) for payload in PAYLOADS]
    rows = boundary_rows([(None, report) for report in reports])
    assert len(rows) == len(reports)
    measured = [row for row, report in zip(rows, reports, strict=True) if report.summary().delta is not None]
    assert len(measured) == 1  # the Linux release (Windows' has no allocator counters)
    released = measured[0]
    assert (released.kind, released.delta, released.action) == ("executed", 4 << 30, "ddo.host_cache_release")
    assert {row.status for row in rows} >= {"executed", "no-op: disabled", "no-op: cuda_not_initialized"}
