"""`ddo-hooks plot FILE... -o run.png`: pinned bytes and RSS per call and boundary, drawn with matplotlib."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest
from support.report_runs import ddo_run, gpu_run

from ddo_hooks import MetricsTracker
from ddo_hooks.cli import main
from ddo_hooks.reports.host_cache import noop_release

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _png_size(path: Path) -> tuple[int, int]:
    """(width, height) from the IHDR chunk, after checking the signature and the chunk's type."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert (length, kind) == (13, b"IHDR")
    width, height = struct.unpack(">II", data[16:24])
    assert data.endswith(b"\x00\x00\x00\x00IEND\xaeB`\x82"), f"{path} does not end with its IEND chunk"
    return width, height


@pytest.fixture
def runs(tmp_path: Path) -> list[Path]:
    rank0 = gpu_run("a1", rank=0, world=2)
    rank1 = gpu_run("c3", rank=1, world=2, calls=(1, 2), host="gpu-node-2", pid=777)
    return [rank0.write_jsonl(tmp_path / "rank0.jsonl"), rank1.write_jsonl(tmp_path / "rank1.jsonl")]


def test_plot_draws_a_png_of_the_runs(tmp_path: Path, runs: list[Path], capsys: pytest.CaptureFixture[str]):
    pytest.importorskip("matplotlib", reason="the plot extra is not installed (pip install -e '.[dev]' adds it)")
    out = tmp_path / "run.png"
    assert main(["plot", *map(str, runs), "-o", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {out}\n"
    width, height = _png_size(out)
    assert 900 <= width <= 3500
    assert 800 <= height <= 1200
    assert out.stat().st_size > 20_000  # two panels of points, lines, labels and a legend, not an empty canvas


def test_the_series_are_the_runs_and_the_axis_is_each_call_and_boundary(runs: list[Path]):
    from ddo_hooks.cli.plot_points import positions, release_points, series_label
    from ddo_hooks.cli.summarize import collect_runs
    from ddo_hooks.reports.files import load_report_file

    found, _ = collect_runs([load_report_file(path) for path in runs])
    points = [release_points(run) for run in found]
    assert [series_label(run) for run in found] == [
        "run a1a1a1a1 (rank 0 of 2; gpu-node-1)",
        "run c3c3c3c3 (rank 1 of 2; gpu-node-2)",
    ]
    # refusals hold no reading; the before_vae refusal does not add a position
    assert positions(points) == [
        (call, boundary, 1) for call in (1, 2) for boundary in ("before_transformer", "before_vae", "after_call")
    ]
    released = [p.row.delta for p in points[0] if p.row.delta and p.row.delta > 0]
    assert len(released) == 4  # before_transformer and before_vae of both calls are annotated


def test_a_process_forked_after_attach_is_a_series_of_its_own(tmp_path: Path):
    from ddo_hooks.cli.plot_points import release_points, series_label
    from ddo_hooks.cli.summarize import collect_runs
    from ddo_hooks.reports.files import load_report_file

    records = [*gpu_run("f6", calls=(1,), pid=100).entries(), *gpu_run("f6", calls=(1,), pid=101).entries()]
    path = MetricsTracker.from_records(records).write_jsonl(tmp_path / "fork.jsonl")
    found, _ = collect_runs([load_report_file(path)])
    assert [series_label(run, hosts=False) for run in found] == ["run f6f6f6f6 pid 100", "run f6f6f6f6 pid 101"]
    assert [len(release_points(run)) for run in found] == [3, 3]  # each its own call 1, not one call of 6


def test_releases_on_ddos_core_are_drawn_beside_ddo_hooks_own(tmp_path: Path):
    """A run with ``core: ddo`` records DDO's reports (rows ``ddo.host_cache_release``): the same readings, drawn."""
    from ddo_hooks.cli.plot_points import positions, release_points
    from ddo_hooks.cli.summarize import collect_runs
    from ddo_hooks.reports.files import load_report_file

    ours = gpu_run("a1").write_jsonl(tmp_path / "ours.jsonl")
    theirs = ddo_run("d2").write_jsonl(tmp_path / "ddo.jsonl")
    found, _ = collect_runs([load_report_file(ours), load_report_file(theirs)])
    points = {run.run_id[:2]: release_points(run) for run in found}
    assert {p.row.action for p in points["d2"]} == {"ddo.host_cache_release"}
    # the released ones hold DDO's readings; its cuda_not_initialized no-ops hold none and are left out
    assert [(p.call, p.boundary) for p in points["d2"]] == [
        (call, boundary) for call in (1, 2) for boundary in ("before_transformer", "before_vae")
    ]
    row = points["d2"][0].row
    assert (row.owned_before, row.owned_after, row.delta) == (4 << 30, 0, 4 << 30)
    assert (row.rss_before, row.rss_after) == (13_958_643_712, 9_663_676_416)
    assert positions(list(points.values())) == [
        (call, boundary, 1) for call in (1, 2) for boundary in ("before_transformer", "before_vae", "after_call")
    ]
    pytest.importorskip("matplotlib", reason="the plot extra is not installed (pip install -e '.[dev]' adds it)")
    out = tmp_path / "both.png"
    assert main(["plot", str(ours), str(theirs), "-o", str(out)]) == 0
    assert _png_size(out)[0] >= 900
    alone = tmp_path / "ddo.png"
    assert main(["plot", str(theirs), "-o", str(alone)]) == 0  # DDO's releases alone have something to draw
    assert alone.stat().st_size > 20_000


@pytest.mark.parametrize("calls", [2, 25])
def test_many_releases_are_a_few_artists_not_a_few_per_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, calls: int
):
    pytest.importorskip("matplotlib", reason="the plot extra is not installed (pip install -e '.[dev]' adds it)")
    from matplotlib.figure import Figure

    from ddo_hooks.cli.plot import MARKED_POSITIONS

    drawn: dict[str, list[int]] = {}
    save = Figure.savefig

    def count_then_save(figure: Figure, *args: object, **kwargs: object) -> None:
        drawn["lines"] = [len(ax.get_lines()) for ax in figure.axes]
        drawn["texts"] = [len(ax.texts) for ax in figure.axes]
        drawn["ticks"] = [len(ax.get_xticks()) for ax in figure.axes]
        save(figure, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", count_then_save)
    path = gpu_run("a1", calls=range(1, calls + 1)).write_jsonl(tmp_path / "run.jsonl")
    assert main(["plot", str(path), "-o", str(tmp_path / "run.png")]) == 0
    if 3 * calls <= MARKED_POSITIONS:  # each boundary labelled, each call named, each release marked
        assert drawn["lines"] == [3 + calls - 1] * 2  # before, after, the line through them; a line between calls
        assert drawn["texts"][0] == calls + 2 * 2 * calls  # "call N"; an arrow and the bytes of 2 releases a call
        assert drawn["ticks"][1] == 3 * calls
    else:  # the same artists for 75 boundaries as for 30,000
        assert drawn["lines"] == [2, 2]  # before and after
        assert drawn["texts"] == [0, 0]
        assert drawn["ticks"][1] == calls


def test_a_reading_beyond_a_float_is_refused_with_where_it_is(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    import json

    entry = gpu_run("a1", calls=(3,)).entries()[0]
    report = entry.report.model_dump(mode="json")
    section = report["setup"]["host_cache_release"]
    section["before"]["allocated_bytes"] = 10**400  # a valid Bytes value: any integer >= 0
    section["allocator_bytes_delta"] = 10**400 - section["after"]["allocated_bytes"]
    record = {"component": entry.component, "report": report, "envelope": entry.envelope.model_dump(mode="json")}
    path = tmp_path / "absurd.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    assert main(["plot", str(path), "-o", str(tmp_path / "run.png")]) == 1
    assert capsys.readouterr().err == (
        "run a1a1a1a1, call 3, before_transformer: 1.00e400 B is too large to draw (more than a float holds); "
        "ddo-hooks summarize shows it\n"
    )


def test_without_matplotlib_plot_says_how_to_install_it(
    tmp_path: Path, runs: list[Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    out = tmp_path / "run.png"
    assert main(["plot", str(runs[0]), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err == (
        "ddo-hooks plot needs matplotlib, which is not installed here; install it with: "
        "pip install 'matplotlib>=3.8' (the plot extra: pip install -e '.[plot]' in a checkout)\n"
    )
    assert not out.exists()


def test_a_run_without_readings_has_nothing_to_plot_and_plot_says_what_it_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    tracker = MetricsTracker()
    bare = noop_release("after_call", "disabled", "off", device="cuda", torch_version="2.13.0", elapsed_seconds=0.0)
    tracker.record(bare, component="host_cache_after_call")  # as written before no-ops read the RSS
    cpu = tracker.write_jsonl(tmp_path / "cpu.jsonl")
    assert main(["plot", str(cpu), "-o", str(tmp_path / "run.png")]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert err.startswith(f"{cpu}: no report holds a reading of pinned bytes or of the process RSS")
    assert "host_cache_release reports that read the allocator (a run on a CUDA machine)" in err
    assert "or an action's report that observed the RSS (data.rss_bytes, as ddo-hooks demo's ddo_demo.rss" in err


@pytest.fixture(scope="module")
def cpu_demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What `ddo-hooks demo` writes on a CPU: no-op releases, and the RSS its own action observed at each boundary."""
    import io

    import torch

    from ddo_hooks.cli.demo import run_demo
    from ddo_hooks.policy.model import HookPolicy

    folder = tmp_path_factory.mktemp("cpu-demo")
    result = run_demo(
        family="sd",
        policy=HookPolicy.preset("lowest-peak"),  # malloc_trim observes the RSS before and after too
        device=torch.device("cpu"),
        steps=1,
        calls=2,
        report=folder / "run.jsonl",
        progress=False,
        log=io.StringIO(),
    )
    return result.report_path


def test_the_cpu_demos_reports_are_drawn_as_the_rss_its_actions_observed(
    tmp_path: Path, cpu_demo: Path, capsys: pytest.CaptureFixture[str]
):
    pytest.importorskip("matplotlib", reason="the plot extra is not installed (pip install -e '.[dev]' adds it)")
    out = tmp_path / "cpu.png"
    assert main(["plot", str(cpu_demo), "-o", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {out}\n"
    width, height = _png_size(out)
    assert 900 <= width <= 3500
    assert 400 <= height <= 700  # one panel: the RSS (no pinned memory was read)
    assert out.stat().st_size > 15_000


def test_observed_points_are_the_first_and_last_rss_reading_at_each_boundary(cpu_demo: Path):
    from ddo_hooks.cli.plot_points import observed_points, positions, release_points
    from ddo_hooks.cli.summarize import collect_runs
    from ddo_hooks.reports.files import load_report_file

    (run,), _ = collect_runs([load_report_file(cpu_demo)])
    assert release_points(run) == []  # a CPU run's releases read nothing
    points = observed_points(run)
    assert positions([points]) == [
        (call, boundary, 1) for call in (1, 2) for boundary in ("before_transformer", "before_vae", "after_call")
    ]
    rows = [row for row in run.rows() if row.call == 1 and row.boundary == "before_vae"]
    observed = [v for row in rows for v in (row.rss_before, row.rss_after) if v is not None]
    first = next(p.row for p in points if (p.call, p.boundary) == (1, "before_vae"))
    assert (first.rss_before, first.rss_after) == (observed[0], observed[-1])


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("run.svg", "the plot is a PNG image; give a name ending in .png"),
        ("missing/run.png", "missing does not exist; create it first"),
        (".", "is a directory; give a file path such as"),
    ],
)
def test_the_output_is_checked_before_drawing(
    tmp_path: Path, runs: list[Path], capsys: pytest.CaptureFixture[str], output: str, expected: str
):
    target = tmp_path / output
    assert main(["plot", str(runs[0]), "-o", str(target)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"-o {target}: ")
    assert expected in err


def test_plot_needs_files_and_an_output(capsys: pytest.CaptureFixture[str]):
    assert main(["plot", "-o", "run.png"]) == 2
    assert "the following arguments are required: FILE" in capsys.readouterr().err
    assert main(["plot", "run.jsonl"]) == 2
    assert "the following arguments are required: -o/--output" in capsys.readouterr().err
