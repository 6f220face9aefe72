"""Fuzzing: bad input of any shape ends in the package's own errors, and no YAML tag runs code.

Each test tries a few hundred inputs by default; set ``DDO_FUZZ_EXAMPLES`` (e.g. 100000) for more.
The long campaign is ``scripts/fuzz_campaign.py``; it also prints the slowest input (the
suite bounds hostile input by size and by counting work, never by the clock). Targets: the policy loader
(``HookPolicy.from_yaml_text``), the report parser (``parse_report``, ``load_report_file``) and the
file commands in process (``main(["validate-policy", path])``, ``validate-report``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.fuzz_inputs import PYTHON_TAGS, SEED_POLICIES, mutate_json_text, mutate_text, random_policy_text
from support.report_corpus import base_reports, random_mutant
from test_policy import documents, valid_documents

from ddo_hooks import HookPolicy, MetricsTracker, parse_report
from ddo_hooks.cli import main
from ddo_hooks.errors import DdoHooksError
from ddo_hooks.reports.envelope import RecordEnvelope
from ddo_hooks.reports.files import iter_report_lines, load_report_file
from ddo_hooks.reports.json_lines import text_lines
from ddo_hooks.reports.records import _checked_entry, iter_entries, record_from_json

EXAMPLES = int(os.environ.get("DDO_FUZZ_EXAMPLES", "150"))
fuzz = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
BASES = base_reports()


def only_own_errors(call: Callable[[], Any]) -> Any:
    """Call; return the result or the DdoHooksError. Any other exception fails the test."""
    try:
        result: Any = call()
    except DdoHooksError as e:
        result = e
    assert not isinstance(result, DdoHooksError) or str(result).strip(), "an error without a message"
    return result


def no_python_object_was_built() -> None:
    assert "fuzz_sentinel" not in sys.modules, "a !!python tag was honoured (conftest.py keeps doctests off it)"


# -- the policy loader ------------------------------------------------------------------------------

seeds = st.sampled_from(SEED_POLICIES)
policy_texts = st.one_of(
    st.randoms(use_true_random=False).map(random_policy_text),
    st.tuples(st.randoms(use_true_random=False), seeds).map(lambda pair: mutate_text(*pair, edits=8)),
    documents.map(lambda data: yaml.safe_dump(data, allow_unicode=True)),
    valid_documents.map(yaml.safe_dump),
    st.text(max_size=300),
)


@fuzz
@given(policy_texts)
def test_fuzz_any_policy_text_gives_a_policy_or_a_policy_error(text: str):
    result = only_own_errors(lambda: HookPolicy.from_yaml_text(text))
    if isinstance(result, HookPolicy):
        json.dumps(result.model_dump(mode="json"), allow_nan=False)  # plain JSON data, nothing else
    no_python_object_was_built()


@fuzz
@given(st.tuples(st.randoms(use_true_random=False), seeds, st.sampled_from(PYTHON_TAGS)))
def test_fuzz_python_tags_are_never_honoured(case: tuple[random.Random, str, str]):
    rng, seed, tag = case
    lines = seed.splitlines()
    at = rng.randint(0, len(lines))
    text = "\n".join([*lines[:at], f"inserted: {tag}", *lines[at:]]) + "\n"
    result = only_own_errors(lambda: HookPolicy.from_yaml_text(text, source="p.yaml"))
    assert isinstance(result, DdoHooksError)
    no_python_object_was_built()


# -- the report parser -------------------------------------------------------------------------------

report_documents = st.one_of(
    st.tuples(st.randoms(use_true_random=False), st.sampled_from(BASES)).map(lambda pair: random_mutant(*pair)),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
        max_leaves=20,
    ),
)


@fuzz
@given(report_documents)
def test_fuzz_any_report_document_gives_a_report_or_a_report_error(document: Any):
    for data in (document, json.dumps(document)):
        result = only_own_errors(lambda data=data: parse_report(data))
        if not isinstance(result, DdoHooksError):
            assert json.loads(result.model_dump_json()) == json.loads(json.dumps(result.model_dump(mode="json")))


report_texts = st.one_of(
    st.tuples(st.randoms(use_true_random=False), st.sampled_from(BASES)).map(lambda pair: mutate_json_text(*pair)),
    st.sampled_from(BASES).map(lambda d: json.dumps({"component": "host_cache_after_call", "report": d})),
    st.binary(max_size=300).map(lambda raw: raw.decode("utf-8", "replace")),
)


@settings(fuzz, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(report_texts, min_size=1, max_size=3), st.binary(max_size=20))
def test_fuzz_any_report_file_gives_records_or_a_report_error(tmp_path: Path, lines: list[str], tail: bytes):
    path = tmp_path / "reports.jsonl"
    path.write_bytes("\n".join(lines).encode("utf-8", "surrogatepass") + tail)
    result = only_own_errors(lambda: load_report_file(path))
    assert isinstance(result, DdoHooksError) or result.records


ENVELOPE = RecordEnvelope.now(run_id="ab" * 16, call_index=1, boundary="after_call").model_dump(mode="json")
record_lines = st.one_of(
    report_texts,
    st.tuples(st.randoms(use_true_random=False), st.sampled_from(BASES)).map(
        lambda pair: mutate_json_text(pair[0], {"component": "c", "report": pair[1], "envelope": ENVELOPE})
    ),
)


@fuzz
@given(record_lines)
def test_fuzz_a_line_the_fast_reader_takes_reads_the_same_the_careful_way(line: str):
    """iter_entries tries pydantic_core's parser first and skips a check it proved; json.loads must agree."""
    fast = _checked_entry(line)
    if fast is not None:
        assert record_from_json(json.loads(line), "line 1") == fast


@fuzz
@given(st.lists(st.sampled_from(["a", " ", "{}", "\n", "\r", "\r\n", "\x0b", "\x1e", "\x85", "\u2028"])).map("".join))
def test_fuzz_text_lines_are_splitlines_one_at_a_time(text: str):
    assert list(text_lines(text)) == text.splitlines()


# -- the file commands, in process ------------------------------------------------------------------


def run_cli(*argv: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        status = only_own_errors(lambda: main(list(argv)))
    return status, err.getvalue()


@settings(fuzz, max_examples=max(EXAMPLES // 3, 20))
@given(st.one_of(policy_texts, report_texts))
def test_fuzz_the_file_commands_exit_0_or_1_without_a_traceback(text: str):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "input.yaml"
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
        for command in ("validate-policy", "validate-report"):
            status, err = run_cli(command, str(path))
            assert status in (0, 1), (command, status, err)
            assert "Traceback" not in err
            assert status == 0 or err.removeprefix("warning: ").startswith(str(path))  # a line cut off: warned first
    no_python_object_was_built()


# -- text that UTF-8 cannot encode -----------------------------------------------------------------

lone_surrogates = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)


@fuzz
@given(record_lines, st.lists(st.tuples(st.integers(min_value=0), lone_surrogates), min_size=1, max_size=3))
def test_fuzz_report_text_with_a_lone_surrogate_gives_a_report_error(line: str, inserted: list[tuple[int, str]]):
    """Issue 51 found 249 of 218,456 such lines letting a TypeError out of parse_report."""
    for at, character in inserted:
        at %= len(line) + 1
        line = line[:at] + character + line[at:]
    readers: list[Callable[[str], Any]] = [
        parse_report,
        MetricsTracker.from_jsonl,
        MetricsTracker.from_json,
        lambda text: list(iter_entries(text)),
        lambda text: list(iter_report_lines(text)),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a line cut off is left out with a warning
        for read in readers:
            only_own_errors(lambda read=read: read(line))
