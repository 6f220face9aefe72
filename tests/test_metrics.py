"""`MetricsTracker`: validated reports by component, in order, through JSON and JSON Lines."""

from __future__ import annotations

import json
import os
import re
import secrets
import stat

import pytest
from support.fakes import FakeHostAllocator

from ddo_hooks import HostCacheReleaseReport, MetricsTracker, release_pytorch_host_cache
from ddo_hooks.errors import InvalidArgumentError, ReportError
from ddo_hooks.release.allocator import use_backend
from ddo_hooks.reports.atomic_file import NotRegularFile
from ddo_hooks.reports.tracker import MAX_RECORDS, read_reports


def noop(phase: str = "before_transformer") -> HostCacheReleaseReport:
    return release_pytorch_host_cache(phase=phase)


def executed(phase: str = "after_call") -> HostCacheReleaseReport:
    with use_backend(FakeHostAllocator()):
        return release_pytorch_host_cache(enabled=True, phase=phase, device="cuda:0")


@pytest.fixture
def tracker() -> MetricsTracker:
    """Three reports under two components, recorded in this order."""
    t = MetricsTracker()
    t.record(noop("before_transformer"), component="host_cache_before_transformer")
    t.record(executed("after_call"), component="host_cache_after_call")
    t.record(noop("before_vae"), component="host_cache_before_transformer")
    return t


def test_reports_are_kept_in_recording_order(tracker: MetricsTracker):
    phases = [r.release.phase for r in tracker.reports()]
    assert phases == ["before_transformer", "after_call", "before_vae"]


def test_records_pair_each_report_with_its_component(tracker: MetricsTracker):
    assert [c for c, _ in tracker.records()] == [
        "host_cache_before_transformer",
        "host_cache_after_call",
        "host_cache_before_transformer",
    ]


def test_components_are_listed_once_in_order_of_first_appearance(tracker: MetricsTracker):
    assert tracker.components() == ("host_cache_before_transformer", "host_cache_after_call")


def test_reports_of_one_component(tracker: MetricsTracker):
    phases = [r.release.phase for r in tracker.reports("host_cache_before_transformer")]
    assert phases == ["before_transformer", "before_vae"]
    assert tracker.reports("unknown") == []


def test_a_new_tracker_is_empty():
    t = MetricsTracker()
    assert (t.records(), t.components(), t.to_jsonl()) == ([], (), "")
    assert MetricsTracker.from_json(t.to_json()).records() == []


def test_json_round_trips_with_validation(tracker: MetricsTracker):
    assert MetricsTracker.from_json(tracker.to_json()).records() == tracker.records()


def test_json_is_one_document_of_records(tracker: MetricsTracker):
    data = json.loads(tracker.to_json())
    assert [r["component"] for r in data["records"]] == [c for c, _ in tracker.records()]
    assert data["records"][1]["report"]["setup"]["host_cache_release"]["status"] == "executed"


def test_json_lines_round_trip_with_validation(tracker: MetricsTracker):
    text = tracker.to_jsonl()
    assert len(text.splitlines()) == 3
    assert MetricsTracker.from_jsonl(text).records() == tracker.records()


def test_blank_lines_are_skipped(tracker: MetricsTracker):
    text = "\n" + tracker.to_jsonl().replace("\n", "\n\n")
    assert MetricsTracker.from_jsonl(text).records() == tracker.records()


def test_write_jsonl_writes_a_file_that_reads_back(tracker: MetricsTracker, tmp_path):
    path = tracker.write_jsonl(tmp_path / "metrics.jsonl")
    assert path == tmp_path / "metrics.jsonl"
    assert read_reports(path.read_text(encoding="utf-8")) == tracker.records()


def test_read_jsonl_reads_back_what_write_jsonl_wrote(tracker: MetricsTracker, tmp_path):
    path = tracker.write_jsonl(tmp_path / "run.jsonl")
    assert MetricsTracker.read_jsonl(path).entries() == tracker.entries()
    assert MetricsTracker.read_jsonl(str(path)).records() == tracker.records()
    assert MetricsTracker.read_jsonl(MetricsTracker().write_jsonl(tmp_path / "none.jsonl")).entries() == []


def test_read_jsonl_leaves_out_a_cut_line_naming_the_file_and_line(tracker: MetricsTracker, tmp_path):
    lines = tracker.to_jsonl().splitlines()
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join([lines[0], lines[1][:40], lines[2]]) + "\n", encoding="utf-8")
    with pytest.warns(UserWarning, match=r"run\.jsonl:2: the line is cut off"):
        read = MetricsTracker.read_jsonl(path)
    assert read.records() == [tracker.records()[0], tracker.records()[2]]


def test_read_jsonl_names_the_file_the_line_and_the_key_of_an_invalid_record(tracker: MetricsTracker, tmp_path):
    lines = tracker.to_jsonl().splitlines()
    record = json.loads(lines[1])
    record["report"]["setup"]["host_cache_release"]["status"] = "exploded"
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join([lines[0], json.dumps(record)]) + "\n", encoding="utf-8")
    with pytest.raises(ReportError, match=r"run\.jsonl:2:\d+: report\.setup\.host_cache_release\.status: "):
        MetricsTracker.read_jsonl(path)
    with pytest.raises(ReportError, match=r"no such report file"):
        MetricsTracker.read_jsonl(tmp_path / "missing.jsonl")


def test_read_jsonl_refuses_another_form_of_report_file_naming_its_reader(tracker: MetricsTracker, tmp_path):
    path = tmp_path / "run.json"
    path.write_text(tracker.to_json(), encoding="utf-8")
    with pytest.raises(ReportError, match=r"run\.json: holds tracker JSON, not JSON Lines .*load_report_file"):
        MetricsTracker.read_jsonl(path)


@pytest.mark.parametrize("given", ["run.jsonl", "  results/run.json\n", "EXISTING"])
def test_from_jsonl_given_a_path_says_to_use_read_jsonl(given: str, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reports.txt").write_text("", encoding="utf-8")
    given = given.replace("EXISTING", "reports.txt")
    with pytest.raises(ReportError, match=r"looks like a file's path; read the file with MetricsTracker\.read_jsonl\("):
        MetricsTracker.from_jsonl(given)
    with pytest.raises(ReportError, match=r"looks like a file's path; read the file with MetricsTracker\.from_json\("):
        MetricsTracker.from_json(given)


def test_from_jsonl_given_a_path_object_says_to_use_read_jsonl(tmp_path):
    with pytest.raises(ReportError, match=r"read the file with MetricsTracker\.read_jsonl\("):
        MetricsTracker.from_jsonl(tmp_path / "run.jsonl")  # type: ignore[arg-type]


def test_text_that_is_not_json_and_not_a_path_is_still_refused_as_not_json():
    with pytest.raises(ReportError, match=r"^line 1, column 1: not JSON"):
        MetricsTracker.from_jsonl("not json at all")


@pytest.mark.parametrize("report", [{"schema_version": 1}, "report", None])
def test_recording_something_that_is_not_a_report_is_refused(report: object):
    with pytest.raises(InvalidArgumentError, match=r"^record expects a report model \(of either shape\), got \w+"):
        MetricsTracker().record(report, component="host_cache_after_call")  # type: ignore[arg-type]


@pytest.mark.parametrize("component", ["", "_leading", "with space", "x" * 129, "abc\n", None, 3])
def test_recording_under_a_malformed_component_is_refused(component: object):
    with pytest.raises(InvalidArgumentError, match=r"^component=.* must be a non-empty name of letters, digits"):
        MetricsTracker().record(noop(), component=component)  # type: ignore[arg-type]


def test_a_refused_record_leaves_the_tracker_unchanged(tracker: MetricsTracker):
    before = tracker.records()
    with pytest.raises(InvalidArgumentError):
        tracker.record(noop(), component="")
    assert tracker.records() == before


def test_a_line_that_is_not_json_is_refused_naming_the_line(tracker: MetricsTracker):
    lines = tracker.to_jsonl().splitlines()
    lines[1] = "{" + lines[1]  # mangled, not a line cut off (which from_jsonl leaves out with a warning)
    with pytest.raises(ReportError, match=r"^line 2, column \d+: not JSON: "):
        MetricsTracker.from_jsonl("\n".join(lines))


def test_a_line_with_an_invalid_report_is_refused_naming_the_line_and_field(tracker: MetricsTracker):
    lines = tracker.to_jsonl().splitlines()
    record = json.loads(lines[2])
    record["report"]["setup"]["host_cache_release"]["released"] = True
    lines[2] = json.dumps(record)
    refused = r"^line 3\.report: not a valid report of ddo_hooks' shape .*released must be true"
    with pytest.raises(ReportError, match=refused):
        MetricsTracker.from_jsonl("\n".join(lines))


def test_a_line_that_is_not_a_record_is_refused_naming_the_line(tracker: MetricsTracker):
    text = tracker.to_jsonl() + '{"report": {}}\n'
    with pytest.raises(
        ReportError, match=r"^line 4: expected an object with 'component', 'report' and \(optionally\) 'envelope'$"
    ):
        MetricsTracker.from_jsonl(text)


@pytest.mark.parametrize("component", ["", 5, "with space"])
def test_a_line_with_a_malformed_component_is_refused_naming_the_line(tracker: MetricsTracker, component: object):
    record = json.loads(tracker.to_jsonl().splitlines()[0])
    record["component"] = component
    with pytest.raises(ReportError, match=r"^line 1\.component: .* is not a component name"):
        read_reports(json.dumps(record))


def test_a_json_document_that_is_not_json_is_refused():
    with pytest.raises(ReportError, match=r"^not JSON: line 1, column 2: "):
        MetricsTracker.from_json("{oops")


@pytest.mark.parametrize("document", ["[]", "{}", '{"records": {}}'])
def test_a_json_document_of_another_shape_is_refused(document: str):
    with pytest.raises(ReportError, match=r'^expected a JSON object \{"records": \[\.\.\.\]\}$'):
        MetricsTracker.from_json(document)


def test_an_invalid_record_in_a_json_document_is_refused_naming_its_index(tracker: MetricsTracker):
    data = json.loads(tracker.to_json())
    data["records"][1]["report"]["schema_version"] = 2
    refused = r"^records\[1\]\.report: not a valid report of ddo_hooks' shape .*schema_version"
    with pytest.raises(ReportError, match=refused):
        MetricsTracker.from_json(json.dumps(data))


@pytest.mark.parametrize("bad", [-1, 100_001, 2**63, True, 1.0, "300"])
def test_max_records_is_none_or_an_int_from_0_to_the_bound(bad):
    with pytest.raises(
        InvalidArgumentError,
        match=rf"^max_records={re.escape(repr(bad))} must be None \(keep every record\) or an int from 0 to 100,000; "
        r"keep fewer in memory, or keep them all with None",
    ):
        MetricsTracker(max_records=bad)


def test_max_records_at_the_bound_keeps_that_many():
    tracker = MetricsTracker(max_records=MAX_RECORDS)
    tracker.record(noop(), component="c")
    assert (tracker.max_records, len(tracker.records())) == (MAX_RECORDS, 1)


# -- write_jsonl: whole or not at all, never through a link -----------------------------------------

SOMEONE_ELSES = "someone else's file\n"


def test_write_jsonl_never_writes_through_a_link_planted_at_its_old_temporary_name(tracker: MetricsTracker, tmp_path):
    victim = tmp_path / "elsewhere" / "victim.txt"
    victim.parent.mkdir()
    victim.write_text(SOMEONE_ELSES)
    planted = tmp_path / f".run.jsonl.{os.getpid()}.tmp"  # the name it used to write to: predictable, followed
    planted.symlink_to(victim)
    target = tracker.write_jsonl(tmp_path / "run.jsonl")
    assert victim.read_text() == SOMEONE_ELSES
    assert not target.is_symlink()
    assert MetricsTracker.from_jsonl(target.read_text()).records() == tracker.records()
    assert planted.is_symlink()  # left as it was, and no temporary file is left
    assert sorted(p.name for p in tmp_path.iterdir()) == [planted.name, "elsewhere", "run.jsonl"]


def test_write_jsonl_takes_another_name_when_its_temporary_one_is_taken(tracker, tmp_path, monkeypatch):
    victim = tmp_path / "victim.txt"
    victim.write_text(SOMEONE_ELSES)
    names = iter(["taken", "free"])
    monkeypatch.setattr(secrets, "token_hex", lambda n: next(names))  # as if someone guessed the first name
    (tmp_path / ".run.jsonl.taken.tmp").symlink_to(victim)
    tracker.write_jsonl(tmp_path / "run.jsonl")
    assert victim.read_text() == SOMEONE_ELSES
    assert MetricsTracker.from_jsonl((tmp_path / "run.jsonl").read_text()).records() == tracker.records()


def test_write_jsonl_to_a_symbolic_link_is_refused_and_both_are_left_as_they_were(tracker, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text(SOMEONE_ELSES)
    link = tmp_path / "run.jsonl"
    link.symlink_to(victim)
    with pytest.raises(NotRegularFile, match=r"run.jsonl is a symbolic link \(to .*victim.txt\), which is never "
                       "written through; give the path it points to"):  # fmt: skip
        tracker.write_jsonl(link)
    assert victim.read_text() == SOMEONE_ELSES
    assert link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl", "victim.txt"]  # no temporary file left


@pytest.mark.parametrize("kind", ["FIFO", "folder"])
def test_write_jsonl_over_anything_but_a_regular_file_is_refused_and_it_is_left_as_it_was(tracker, tmp_path, kind):
    # Issue 51 (C, high): the temporary file was renamed over whatever the path named; run as root,
    # --report /dev/full replaced the device node with a regular file. A FIFO stands for every special file.
    target = tmp_path / "run.jsonl"
    os.mkfifo(target) if kind == "FIFO" else target.mkdir()
    what = "a FIFO (named pipe)" if kind == "FIFO" else "a folder"
    with pytest.raises(NotRegularFile, match=f"run.jsonl is {re.escape(what)}, not a regular file"):
        tracker.write_jsonl(target)
    assert stat.S_ISFIFO(target.lstat().st_mode) if kind == "FIFO" else target.is_dir()
    assert [p.name for p in tmp_path.iterdir()] == ["run.jsonl"]
