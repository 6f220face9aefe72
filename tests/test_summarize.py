"""`ddo-hooks summarize FILE...`: one table per run from the envelopes, totals per run, rank and in total."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from support.report_runs import GiB, MiB, gpu_run

from ddo_hooks import MetricsTracker, release_pytorch_host_cache
from ddo_hooks.cli import main
from ddo_hooks.cli.layout import TABLE_WIDTH
from ddo_hooks.cli.rows import BoundaryRow
from ddo_hooks.reports.base import ReportSummary
from ddo_hooks.sizes import format_size

RELEASED_BEFORE_TRANSFORMER = int(3.6 * GiB)  # each executed before_transformer release of gpu_run
RELEASED_BEFORE_VAE = 272 * MiB


def _summarize(capsys: pytest.CaptureFixture[str], *paths: Path) -> str:
    status = main(["summarize", *map(str, paths)])
    out, err = capsys.readouterr()
    assert (status, err) == (0, "")
    return out


def _flat(text: str) -> str:
    """The text with its line wrapping undone (file names are long: the notes wrap at 100 columns)."""
    return " ".join(text.split())


def _section(out: str, heading: str) -> str:
    """The lines after ``heading`` up to the next blank line."""
    return out.split(f"\n{heading}\n", 1)[1].split("\n\n", 1)[0]


@pytest.fixture
def ranks(tmp_path: Path) -> list[Path]:
    """Two workers' files: rank 0 made two runs (one file), rank 1 one run on calls 5 and 7."""
    rank0 = MetricsTracker.from_records(
        [*gpu_run("a1", rank=0, world=2).entries(), *gpu_run("b2", rank=0, world=2, calls=(1,), start=50).entries()]
    )
    rank1 = gpu_run("c3", rank=1, world=2, calls=(5, 7), host="gpu-node-2", pid=777)
    return [rank0.write_jsonl(tmp_path / "rank0.jsonl"), rank1.write_jsonl(tmp_path / "rank1.jsonl")]


def test_one_table_per_run_headed_by_its_run_host_pid_and_rank(capsys, ranks):
    out = _summarize(capsys, *ranks)
    assert _flat(out).startswith(
        f"{ranks[0]}: 18 reports (JSON Lines) from 2 runs {ranks[1]}: 12 reports (JSON Lines) from 1 run "
    )
    headings = re.findall(r"^run .*$", out, flags=re.MULTILINE)
    assert headings == [
        "run a1a1a1a1, host gpu-node-1, pid 4242, rank 0 of 2, 2 calls, 12 reports",
        "run b2b2b2b2, host gpu-node-1, pid 4242, rank 0 of 2, 1 call, 6 reports",
        "run c3c3c3c3, host gpu-node-2, pid 777, rank 1 of 2, 2 calls, 12 reports",
    ]
    table = _section(out, headings[2])
    calls = re.findall(r"^(\d+) +before_transformer ", table, flags=re.MULTILINE)
    assert calls == ["5", "7"]  # the envelope's call index, not calls inferred from the order
    assert "inferred" not in out


def test_totals_per_run_per_rank_and_in_total(capsys, ranks):
    out = _summarize(capsys, *ranks)
    headings = re.findall(r"^totals .*$", out, flags=re.MULTILINE)
    assert headings == [
        "totals per boundary across calls, run a1a1a1a1 (rank 0 of 2):",
        "totals per boundary across calls, run b2b2b2b2 (rank 0 of 2):",
        "totals per boundary across calls, run c3c3c3c3 (rank 1 of 2):",
        "totals per boundary across calls, rank 0 (2 runs):",  # rank 1's would repeat run c3c3c3c3's
        "totals per boundary across calls, all 3 runs:",
    ]
    rank0, everything = _section(out, headings[3]), _section(out, headings[4])
    assert re.search(
        rf"^before_transformer +3 +3 +0 +0 +{re.escape(format_size(3 * RELEASED_BEFORE_TRANSFORMER))} ",
        rank0,
        re.MULTILINE,
    )
    # executed 5, refused 5 (inference_in_progress); released counts only the positive deltas
    assert re.search(
        rf"^before_vae +5 +5 +0 +5 +{re.escape(format_size(5 * RELEASED_BEFORE_VAE))} ", everything, re.MULTILINE
    )
    # no-op below_threshold 5 and refused not_reached 5: nothing released
    assert re.search(r"^after_call +5 +0 +5 +5 +- ", everything, re.MULTILINE)
    # an action after its boundary's row is "+ action"; a long name wraps in the boundary column
    assert re.search(r"^\+ +5 +5 +0 +0 +- +- +- +-\nmy_pkg\.log_memory_in", everything, re.MULTILINE)


def test_records_without_an_envelope_have_their_calls_inferred_and_the_output_says_so(capsys, tmp_path, ranks):
    report = release_pytorch_host_cache(phase="after_call")
    line = json.dumps({"component": "host_cache_after_call", "report": report.model_dump(mode="json")})
    old = tmp_path / "old.jsonl"
    old.write_text(f"{line}\n{line}\n", encoding="utf-8")
    out = _summarize(capsys, old, ranks[1])
    assert _flat(out).startswith(
        f"{old}: 2 reports (JSON Lines); 2 without an envelope (written before envelopes existed): calls "
        "inferred from the boundary order "
    )
    heading = (
        f"{old}: records without an envelope (no run id, host, pid or rank), 2 calls, 2 reports; calls inferred "
        "from the boundary order"
    )
    assert _flat(out).count(heading) == 1
    assert re.findall(r"^(\d) +after_call +no-op: disabled ", out, flags=re.MULTILINE) == ["1", "2"]
    assert f"totals per boundary across calls, {old} (no envelope):" in _flat(out)  # wrapped to 100 columns
    assert "totals per boundary across calls, all 2 runs:" in out


def test_a_record_in_two_files_is_counted_once(capsys, tmp_path, ranks):
    copy = tmp_path / "sink-copy.jsonl"  # the sink's records, and one more the other file lacks
    more = gpu_run("c3", rank=1, world=2, calls=(9,), host="gpu-node-2", pid=777, start=90).to_jsonl()
    copy.write_text(ranks[1].read_text(encoding="utf-8") + more, encoding="utf-8")
    out = _summarize(capsys, ranks[1], copy)
    assert "left out 12 records seen twice" in out
    assert re.findall(r"^run .*$", out, flags=re.MULTILINE) == [
        "run c3c3c3c3, host gpu-node-2, pid 777, rank 1 of 2, 3 calls, 18 reports"
    ]


def _without_envelopes(tmp_path: Path, name: str) -> Path:
    """An old file: two calls' records, no envelope."""
    lines = [json.dumps({"component": e.component, "report": e.report.model_dump(mode="json")})
             for e in gpu_run("a1").entries()]  # fmt: skip
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("again", ["the same path", "another path to it", "a copy"])
def test_a_file_given_twice_or_copied_is_read_once_with_a_warning(capsys, tmp_path, again):
    """Records without an envelope cannot be told apart: only the file can, by its bytes."""
    old = _without_envelopes(tmp_path, "old.jsonl")
    if again == "the same path":
        second, said = old, f"the same file as {old}, given twice"
    elif again == "another path to it":
        second, said = tmp_path / "link.jsonl", f"the same file as {old}, given twice"
        second.symlink_to(old)
    else:
        second, said = tmp_path / "copy.jsonl", f"the same bytes as {old} (a copy)"
        second.write_bytes(old.read_bytes())
    assert main(["summarize", str(old), str(second)]) == 0
    out, err = capsys.readouterr()
    assert err == f"warning: {second}: {said}; read once, so that its records count once\n"
    assert re.findall(r"^totals .*$", out, flags=re.MULTILINE) == ["totals per boundary across calls:"]
    assert re.search(r"^before_transformer +2 +2 +0 +0 ", out, re.MULTILINE)  # 2 calls, not 4
    assert str(second) not in out.replace(str(old), "")


def test_a_process_forked_after_attach_is_a_run_of_its_own(capsys, tmp_path):
    """Older files: a child forked after attach recorded its parent's run id, with its own pid and call indexes."""
    parent = gpu_run("f6", calls=(1,), pid=100)
    child = gpu_run("f6", calls=(1,), pid=101, start=20)
    path = MetricsTracker.from_records([*parent.entries(), *child.entries()]).write_jsonl(tmp_path / "fork.jsonl")
    out = _summarize(capsys, path)
    assert re.findall(r"^run .*$", out, flags=re.MULTILINE) == [
        "run f6f6f6f6, host gpu-node-1, pid 100, 1 call, 6 reports",
        "run f6f6f6f6, host gpu-node-1, pid 101, 1 call, 6 reports",
    ]
    assert f"{path}: 12 reports (JSON Lines) from 2 runs" in _flat(out)
    assert (
        "2 processes recorded run f6f6f6f6 (pids 100, 101; a process forked after attach keeps its parent's run "
        "id): each is shown as a run of its own"
    ) in _flat(out)
    assert "totals per boundary across calls, run f6f6f6f6 pid 100:" in out
    assert "totals per boundary across calls, run f6f6f6f6 pid 101:" in out
    everything = _section(out, "totals per boundary across calls, all 2 runs:")
    assert re.search(r"^before_transformer +2 +2 +0 +0 ", everything, re.MULTILINE)  # two calls, not one


def test_every_line_fits_100_columns(capsys, tmp_path):
    """A realistic GPU run (releases of GiBs, no-ops, long refusal reasons, a user action, a long host name)."""
    host = "gpu-node-17.a-rather-long-cluster-domain.example.org"
    tracker = gpu_run("d4", rank=3, world=8, calls=(1, 2, 3), host=host, pid=1234567)
    out = _summarize(capsys, tracker.write_jsonl(tmp_path / "rank3.jsonl"))
    widths = [len(line) for line in out.splitlines()]
    assert max(widths) <= TABLE_WIDTH, "\n".join(line for line in out.splitlines() if len(line) > TABLE_WIDTH)
    assert "refused:" in out
    assert "inference_in_progress" in out  # wrapped, never cut
    heading = next(line for line in out.splitlines() if line.startswith("run "))
    assert re.fullmatch(r"run d4d4d4d4, host gpu-node-17\.a-rather-long-\S*…, pid 1234567, rank 3 of 8, .*", heading)
    assert "rank 3 of 8, 3 calls, 18 reports" in out


def test_absurd_numbers_keep_every_line_within_100_columns(capsys, tmp_path):
    """Any integer and any finite number is valid in a report: the cells write long ones as 1.00e30."""
    from support.report_runs import envelope, executed

    release = executed("before_vae", 272 * MiB).model_dump(mode="json")
    section = release["setup"]["host_cache_release"]
    section["elapsed_seconds"] = 1e300
    section["before"]["allocated_bytes"] = 10**400
    section["allocator_bytes_delta"] = 10**400 - section["after"]["allocated_bytes"]
    section["host_before"]["rss_bytes"] = 10**30
    section["host_after"]["cgroup_memory_bytes"] = 10**300
    huge = envelope("ab", 10**30, "before_vae", n=1, rank=10**30, world=10**31, pid=10**30).model_dump(mode="json")
    record = {"component": "host_cache_before_vae", "report": release, "envelope": huge}
    path = tmp_path / "absurd.jsonl"
    path.write_text(f"{json.dumps(record)}\n", encoding="utf-8")
    out = _summarize(capsys, path)
    wide = [line for line in out.splitlines() if len(line) > TABLE_WIDTH]
    assert not wide, "\n".join(wide)
    assert re.search(r"^1\.00e30 +before_vae +executed +1\.00e400 B → +", out, re.MULTILINE)
    assert "1.00e+303 ms" in out  # elapsed, in the table and in the totals
    assert "run abababab, host gpu-node-1, pid 1.00e30, rank 1.00e30 of 1.00e31, 1 call, 1 report" in _flat(out)


def test_a_table_too_wide_wraps_its_cells_and_keeps_the_boundary_names():
    from ddo_hooks.cli.table import boundary_rows, format_table

    entries = gpu_run("e5", calls=(1,)).entries()
    rows = boundary_rows([(e.component, e.report) for e in entries], [e.envelope.call_index for e in entries])
    text = format_table(rows)
    assert max(len(line) for line in text.splitlines()) <= TABLE_WIDTH
    assert re.search(r"^ +my_pkg\.log_memory_\w*…$", text, re.MULTILINE)  # a user action's name is cut, last
    for boundary in ("before_transformer", "before_vae", "after_call"):
        assert re.search(rf"^1 +{boundary} ", text, re.MULTILINE)


def test_summarize_needs_at_least_one_file(capsys):
    assert main(["summarize"]) == 2
    assert "the following arguments are required: FILE" in capsys.readouterr().err


def test_a_table_row_is_its_call_and_the_fields_of_the_reports_summary_in_order():
    """``BoundaryRow`` keeps ``ReportSummary``'s fields (a slotted row of its own, made 100,000 times a
    summary); they cannot drift apart."""
    assert [f.name for f in dataclasses.fields(BoundaryRow)] == ["call", *ReportSummary._fields]


# -- what attach did, before the first call ---------------------------------------------------------


@pytest.fixture
def with_attach(tmp_path: Path) -> Path:
    """A run whose attach repacked (no-op on a CPU build: it still records), then two calls; without envelopes too."""
    import torch
    from support.report_runs import envelope

    from ddo_hooks import repack_pinned_copies

    run = gpu_run("d4", calls=(1, 2))
    repack = repack_pinned_copies(torch.nn.Module(), phase="attach")
    at_attach = envelope("d4", 0, "after_call", n=0).model_copy(update={"boundary": None})
    tracker = MetricsTracker.from_records([("pinned_copy_repack", repack, at_attach), *run.entries()])
    (tmp_path / "bare.jsonl").write_text(
        "".join(json.dumps({k: v for k, v in json.loads(line).items() if k != "envelope"}) + "\n"
                for line in tracker.to_jsonl().splitlines()),
        encoding="utf-8",
    )  # fmt: skip
    return tracker.write_jsonl(tmp_path / "attach.jsonl")


def test_what_attach_did_is_labelled_attach_and_not_counted_as_a_call(capsys, with_attach):
    out = _summarize(capsys, with_attach)
    heading = re.findall(r"^run .*$", out, flags=re.MULTILINE)[0]
    assert heading.endswith("2 calls, 13 reports (1 at attach)")
    table = _section(out, heading)
    assert re.search(r"^attach +attach/repack +no-op: ", table, flags=re.MULTILINE)
    assert not re.search(r"^0 ", table, flags=re.MULTILINE)
    totals = _section(out, "totals per boundary across calls:")
    assert re.search(r"^attach/repack +- +0 +1 +0 ", totals, flags=re.MULTILINE)  # no call: "-"
    assert re.search(r"^before_transformer +2 ", totals, flags=re.MULTILINE)
    assert "attach: what attach() did before the first call" in _flat(out)


def test_what_attach_did_is_told_apart_in_records_without_an_envelope(capsys, with_attach):
    out = _summarize(capsys, with_attach.parent / "bare.jsonl")
    assert re.search(
        r"records without an envelope \(no run id, host, pid or rank\), \d+ calls, 13 reports \(1 at attach\)",
        _flat(out),
    )
    assert re.search(r"^attach +attach/repack +no-op: ", out, flags=re.MULTILINE)
    assert re.findall(r"^(\d+) +before_transformer ", out, flags=re.MULTILINE)[0] == "1"  # the first call is 1


def test_two_observations_at_one_boundary_are_told_apart_in_the_memory_table():
    from ddo_hooks.cli.table import format_memory_table

    memory = {"rss": 8 << 30, "anon": 1 << 30, "file": 3 << 29, "shmem": 5 << 29}
    rows = [
        BoundaryRow(1, "before_transformer", "release_done_components", "noop", "x", "", memory_after=memory),
        BoundaryRow(1, "before_transformer", "ddo_demo.rss", "executed", None, "", memory_after=memory),
        BoundaryRow(1, "before_vae", "ddo_demo.rss", "executed", None, "", memory_after=memory),
    ]
    lines = (format_memory_table(rows) or "").splitlines()[3:]
    assert [re.split(r"  +", line)[1] for line in lines] == [
        "before_transformer/release_done_components",
        "+ ddo_demo.rss",
        "before_vae",  # alone at its boundary: the boundary, as before
    ]
