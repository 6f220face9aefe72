"""Messages about report files read as sentences, name the place, show the value written, and stay short."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ddo_hooks import MetricsTracker, parse_report, release_pytorch_host_cache
from ddo_hooks.cli import main
from ddo_hooks.errors import InvalidArgumentError, ReportError
from ddo_hooks.reports.files import iter_report_lines, load_report_file
from ddo_hooks.reports.tracker import MAX_COMPONENT_LENGTH, read_reports


def report() -> dict:
    return release_pytorch_host_cache(phase="after_call").model_dump(mode="json")


def line(component: str = "host_cache_after_call", data: dict | None = None) -> str:
    return json.dumps({"component": component, "report": data or report()})


def error_of(tmp_path: Path, text: str, name: str = "r.jsonl") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ReportError) as info:
        load_report_file(path)
    return str(info.value).removeprefix(str(tmp_path) + "/")


# -- B.4: the component name ---------------------------------------------------------------------


def test_the_component_limit_is_the_real_128_characters():
    tracker, done = MetricsTracker(), release_pytorch_host_cache(phase="after_call")
    tracker.record(done, component="c" * MAX_COMPONENT_LENGTH)
    with pytest.raises(InvalidArgumentError) as info:
        tracker.record(done, component="c" * 20_000)
    message = str(info.value)
    assert "at most 128 characters (e.g. 'host_cache_before_transformer'); it has 20,000 characters" in message
    assert message.endswith("; it has 20,000 characters")
    assert len(message) < 300


def test_a_long_component_in_a_file_is_cut_and_located(tmp_path: Path):
    message = error_of(tmp_path, line("c" * 20_000) + "\n")
    assert message.startswith("r.jsonl:1:2: component: component='ccccccc")
    assert "at most 128 characters" in message
    assert len(message) < 400
    with pytest.raises(
        ReportError,
        match=r"^line 1\.component: 'c+\.\.\. is not a component name: it must be .* at most 128 characters",
    ):
        MetricsTracker.from_jsonl(line("c" * 20_000))


# -- B.5: sentences, places and the values written ---------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": "b', "r.jsonl:1:7: not JSON: a string is not closed (Unterminated string starting at): line 1 is cut"),
        ("{\n", "r.jsonl:2:1: not JSON: a key in double quotes is expected here (Expecting property name"),
        ('{"a" 1}', "r.jsonl:1:6: not JSON: a ':' is expected after the key (Expecting ':' delimiter)"),
        ("{'a': 1}", "r.jsonl:1:2: not JSON: a key in double quotes is expected here"),
    ],
)
def test_a_json_syntax_error_reads_as_a_sentence_with_line_and_column(tmp_path: Path, text: str, expected: str):
    assert error_of(tmp_path, text).startswith(expected)


def test_a_json_lines_syntax_error_is_a_sentence_at_its_line(tmp_path: Path):
    broken = line()[:40]
    message = error_of(tmp_path, line() + "\n" + broken + "\n")
    column = broken.rindex('"') + 1
    assert message == (
        f"r.jsonl:2:{column}: not JSON: a string is not closed (Unterminated string starting at); "
        "each line holds one JSON object"
    )


def test_the_tracker_says_sentences_too():
    with pytest.raises(ReportError, match=r"^not JSON: line 1, column 7: a string is not closed \(Unterminated"):
        MetricsTracker.from_json('{"a": "b')
    with pytest.raises(ReportError, match=r"^line 2, column 1: not JSON: a value is expected here \(Expecting value\)"):
        MetricsTracker.from_jsonl(line() + "\n]\n")


def test_a_bad_enum_value_shows_the_value_written(tmp_path: Path):
    data = report()
    data["setup"]["host_cache_release"]["status"] = "exploded"
    message = error_of(tmp_path, line(data=data) + "\n")
    assert message.startswith("r.jsonl:1:")
    assert message.endswith("report.setup.host_cache_release.status: 'exploded' is not one of executed, noop")
    with pytest.raises(ReportError, match=r"status: 'exploded' is not one of executed, noop"):
        parse_report(data)


def test_a_huge_value_in_a_report_file_gives_a_short_message(tmp_path: Path):
    data = report()
    data["route"] = "r" * 1_000_000
    assert len(error_of(tmp_path, json.dumps(data), "bare.json")) < 600
    with pytest.raises(ReportError) as info:
        parse_report(data)
    assert len(str(info.value)) < 600
    many = {f"k{i}": i for i in range(10_000)}
    assert len(error_of(tmp_path, json.dumps(many) + "\n" + line() + "\n")) < 600


def test_validate_report_says_all_of_it_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "r.jsonl"
    path.write_text('{"a": "b', encoding="utf-8")
    assert main(["validate-report", str(path)]) == 1
    assert capsys.readouterr().err.startswith(f"{path}:1:7: not JSON: a string is not closed")


# -- the policy's care for reports: own words, near misses named, cut last lines ----------------------------------


def test_report_fields_are_explained_in_our_words_and_a_near_miss_is_named(tmp_path: Path):
    data = report()
    body = data["setup"]["host_cache_release"]
    body["elapsed_secs"] = body.pop("elapsed_seconds")
    body["device"] = 5
    message = error_of(tmp_path, line(data=data) + "\n")
    assert "host_cache_release.elapsed_secs: unknown key; did you mean 'elapsed_seconds'?" in message
    assert "host_cache_release.elapsed_seconds: required key is missing; add it" in message
    assert not any(phrase in message for phrase in ("Extra inputs", "Field required", "Input should"))
    with pytest.raises(ReportError, match=r"elapsed_secs: unknown key; did you mean 'elapsed_seconds'\?"):
        parse_report(data)
    body["elapsed_seconds"] = "5"
    with pytest.raises(ReportError, match=r"elapsed_seconds: expected a number, got '5'"):
        parse_report(data)


CUT = r"the line is cut off \(not complete JSON: its writer stopped mid-line, e\.g\. in a crash or on a full disk\); "
CUT += r"its record is left out"


def test_the_tracker_reads_the_records_before_a_last_line_cut_by_a_crash_with_a_warning(tmp_path: Path):
    text = "\n".join([line(), line(), line()[:50]])  # no newline after: its writer stopped mid-line
    with pytest.warns(UserWarning, match=rf"^<jsonl>:3: {CUT}$"):
        tracker = MetricsTracker.from_jsonl(text)
    assert len(tracker.entries()) == 2
    pretty = tmp_path / "bare.json"  # one report over many lines, no newline at the end: not JSON Lines, not cut
    pretty.write_text(json.dumps(report(), indent=2), encoding="utf-8")
    assert load_report_file(pretty, cut_lines=True).warnings == ()


@pytest.mark.parametrize("at", [0, 1, 2], ids=["first", "middle", "last"])
def test_a_line_cut_anywhere_is_left_out_with_a_warning_naming_it(tmp_path: Path, at: int):
    """A full disk cut one writer's line; the sink's next line, of any writer, starts a line of its own."""
    lines = [line(), line(), line()]
    lines[at] = lines[at][:50]
    text = "\n".join(lines) + "\n"
    with pytest.warns(UserWarning, match=rf"^<jsonl>:{at + 1}: {CUT}$"):
        assert len(MetricsTracker.from_jsonl(text).entries()) == 2
    for bare in (False, True):
        path = tmp_path / "r.jsonl"
        path.write_text(text if not bare else "\n".join(json.dumps(report())[: 50 if n == at else None] for n in
                                                        range(3)) + "\n", encoding="utf-8")  # fmt: skip
        loaded = load_report_file(path, cut_lines=True)
        assert loaded.form == ("JSON Lines of bare reports" if bare else "JSON Lines")
        assert len(loaded.entries) == 2
        assert len(loaded.warnings) == 1
        assert re.fullmatch(rf"{re.escape(str(path))}:{at + 1}: {CUT}", loaded.warnings[0])
        with pytest.raises(ReportError, match=rf"r\.jsonl:{at + 1}:\d+: not JSON: "):  # not allowed: an error
            load_report_file(path)


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        ('{"component": "x" "report": {}}', r"^line 2, column 19: not JSON: a ',' is expected"),  # not cut: mangled
        ("]", r"^line 2, column 1: not JSON: a value is expected here"),
        ('{"component": "host_cache_after_call", "report": {}}', r"^line 2\.report: not a valid report of ddo_hooks'"),
        ('{"component": "x", "report": {}} {"', r"^line 2, column 34: not JSON: more text follows"),
    ],
    ids=["mangled", "not-an-object", "valid-json-invalid-record", "text-after-a-record"],
)
def test_a_bad_line_that_is_not_a_cut_one_stays_an_error(tmp_path: Path, bad: str, said: str):
    text = "\n".join([line(), bad, line()]) + "\n"
    with pytest.raises(ReportError, match=said):
        MetricsTracker.from_jsonl(text)
    path = tmp_path / "r.jsonl"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ReportError, match=r"r\.jsonl:2:\d+: "):
        load_report_file(path, cut_lines=True)


def test_read_reports_takes_no_cut_line(tmp_path: Path):
    with pytest.raises(ReportError, match=r"^line 2, column \d+: not JSON: "):  # from_jsonl is the lenient reader
        read_reports("\n".join([line(), line()[:50], line()]))


def test_the_old_keyword_cut_last_line_warns_and_does_what_cut_lines_does(tmp_path: Path):
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join([line(), line()[:50], line()]), encoding="utf-8")
    with pytest.warns(DeprecationWarning, match=r"^load_report_file\(cut_last_line=\.\.\.\) is now .*cut_lines"):
        loaded = load_report_file(path, cut_last_line=True)
    assert len(loaded.entries) == 2


def test_validate_policy_takes_a_presets_name_as_the_policy_option_does(capsys: pytest.CaptureFixture[str]):
    assert main(["validate-policy", "lowest-peak"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("lowest-peak: the packaged preset ")
    assert "lowest-peak: valid policy (version 1, device cuda)" in out
    assert "before_transformer: release_done_components, host_cache_release, malloc_trim" in out
    assert main(["validate-policy", "lowest-peek"]) == 1
    assert "did you mean 'lowest-peak'? check the path, or give a preset" in capsys.readouterr().err


# -- JSON past Python's limits ---------------------------------------------------------------------

BIG = "9" * 5000  # Python converts at most 4,300 digits to an int
DEEP = "[" * 5000 + "]" * 5000  # deeper than json.loads goes
PAST_LIMITS = [
    pytest.param(BIG, 19, r"an integer of 5,000 digits, more than Python reads \(4,300 at most; ", id="digits"),
    pytest.param(DEEP, 5018, r"the JSON nests 5,00\d levels deep, deeper than Python's JSON reader ", id="nesting"),
]


def with_value(value: str) -> str:
    """A record whose report's ``schema_version`` is ``value``, as written."""
    return line().replace('"schema_version": 1', f'"schema_version": {value}', 1)


@pytest.mark.parametrize(("value", "offset", "said"), PAST_LIMITS)  # offset: from the key to the place named
def test_the_trackers_readers_say_which_line_is_past_pythons_limits(value: str, offset: int, said: str):
    record = with_value(value)
    column = record.index('"schema_version"') + offset
    text = "\n".join([line(), record, line()]) + "\n"
    for read in (MetricsTracker.from_jsonl, read_reports):
        with pytest.raises(ReportError, match=rf"^line 2, column {column}: {said}") as info:
            read(text)
        assert isinstance(info.value.__cause__, (ValueError, RecursionError))
    document = json.dumps({"records": [json.loads(line())] * 2}, indent=2)
    document = document.replace('"schema_version": 1', f'"schema_version": {value}', 1)
    row = next(n for n, text in enumerate(document.splitlines(), 1) if '"schema_version"' in text)
    with pytest.raises(ReportError, match=rf"^line {row}, column \d+: {said}"):
        MetricsTracker.from_json(document)


@pytest.mark.parametrize(("value", "offset", "said"), PAST_LIMITS)
@pytest.mark.parametrize("bare", [False, True], ids=["records", "bare-reports"])
def test_the_file_readers_say_which_line_is_past_pythons_limits(tmp_path: Path, value, offset, said, bare: bool):
    first, record = (line(), with_value(value))
    if bare:
        first, record = (json.dumps(json.loads(first)["report"]), record.split('"report": ', 1)[1][:-1])
    column = record.index('"schema_version"') + offset
    message = error_of(tmp_path, f"{first}\n{record}\n")
    assert re.match(rf"r\.jsonl:2:{column}: {said}", message), message
    if bare:
        with pytest.raises(ReportError, match=rf"^line 2, column {column}: {said}"):
            list(iter_report_lines(f"{first}\n{record}\n"))
    assert message.endswith("check that this is the report file you meant") or "check the brackets" in message


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        (("schema_version",), "1", "schema_version: expected 1, got '1' (a string: write 1 without quotes)"),
        (("schema_version",), 2, "schema_version: expected 1, got 2"),
        (("elapsed_seconds",), -1, "elapsed_seconds: -1 is out of range; expected a value of at least 0.0"),
        (("phase",), "Before VAE", "phase: 'Before VAE' is not a phase label: a lowercase letter, then up to 63"),
    ],
)
def test_validate_report_says_a_fixed_value_a_range_and_a_form_in_our_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: tuple[str, ...], value: object, says: str
):
    data = report()
    (data if key == ("schema_version",) else data["setup"]["host_cache_release"])[key[0]] = value
    path = tmp_path / "r.jsonl"
    path.write_text(line(data=data) + "\n", encoding="utf-8")
    assert main(["validate-report", str(path)]) == 1
    err = capsys.readouterr().err
    assert says in err, err
    assert not any(phrase in err for phrase in ("Input should", "should match pattern", "greater than or equal"))


def test_the_first_example_of_the_reports_api_page_shows_our_words_not_pydantics():
    import importlib
    import re

    page = (Path(__file__).resolve().parent.parent / "docs" / "api" / "reports.md").read_text(encoding="utf-8")
    modules = re.findall(r"^::: (\S+)$", page, flags=re.MULTILINE)
    first = next(m for m in modules if ">>>" in (importlib.import_module(m).__doc__ or ""))
    example = (importlib.import_module(first).__doc__ or "").split("Examples:", 1)[1]
    assert "ValidationError" not in example, first
    assert "pydantic_core" not in example, first
    assert "ddo_hooks.errors.ReportError" in example, first
