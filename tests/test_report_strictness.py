"""The report models are as strict as the checked-in JSON Schema, and every report is valid JSON."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest
from pydantic import ValidationError
from support.report_corpus import base_reports, corpus, replaced, schema_validator

from ddo_hooks import MetricsTracker, parse_report, release_pytorch_host_cache
from ddo_hooks.actions.contract import BoundaryContext
from ddo_hooks.errors import InvalidArgumentError, ReportError
from ddo_hooks.policy.model import HookPolicy
from ddo_hooks.reports.boundary import ActionResult

RELEASE = ("setup", "host_cache_release")


def noop() -> dict[str, Any]:
    return release_pytorch_host_cache(phase="after_call").model_dump(mode="json")


def model_errors(document: Any) -> set[str] | None:
    """The kinds of pydantic error the model finds in ``document``; ``None`` when it accepts it."""
    try:
        parse_report(document)
    except ReportError as e:
        cause = e.__cause__
        return {item["type"] for item in cause.errors()} if isinstance(cause, ValidationError) else {"?"}
    return None


# -- B.1: no coercion where the schema refuses ---------------------------------------------------


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ((*RELEASE, "elapsed_seconds"), "5"),
        ((*RELEASE, "elapsed_seconds"), True),
        (("schema_version",), True),
        (("schema_version",), 1.0),
        (("schema_version",), "1"),
        ((*RELEASE, "timings", "collect_seconds"), "0.5"),
        ((*RELEASE, "released"), 0),
        ((*RELEASE, "released"), "false"),
        ((*RELEASE, "detail"), 5),
        ((*RELEASE, "phase"), ["after_call"]),
    ],
)
def test_a_value_of_the_wrong_json_type_is_refused_by_the_model_and_the_schema(path, value):
    document = replaced(noop(), path, value)
    assert not schema_validator().is_valid(document)
    with pytest.raises(ReportError):
        parse_report(document)
    with pytest.raises(ReportError):
        parse_report(json.dumps(document))


def test_whole_seconds_are_seconds_in_python_and_in_json_text():
    document = replaced(noop(), (*RELEASE, "elapsed_seconds"), 0)
    document = replaced(document, (*RELEASE, "timings", "collect_seconds"), 0)
    document = replaced(document, (*RELEASE, "timings", "snapshot_seconds"), 0)  # a no-op reads the host
    assert schema_validator().is_valid(document)
    assert parse_report(document).release.elapsed_seconds == 0.0
    assert parse_report(json.dumps(document)).release.elapsed_seconds == 0.0


def test_names_are_json_arrays_of_strings():
    executed = base_reports()[1]
    body = executed["setup"]["host_cache_release"]["collection"]
    body["expected_freed"], body["survivors"] = ["text_encoder"], ["text_encoder"]
    assert parse_report(executed).release.collection.survivors == ("text_encoder",)
    body["expected_freed"] = [1]
    with pytest.raises(ReportError, match=r"expected_freed\[0\]: expected a string, got 1"):
        parse_report(executed)


def test_the_models_and_the_schema_accept_the_same_documents():
    """Over real reports of every route and ~2,500 single mutations of them (all are in the fuzz campaign).

    The schema cannot state the rules that tie fields together (``released`` exactly when
    ``status`` is ``executed``, the timings adding up, ...): a document broken only there is
    accepted by the schema and refused by the model with that rule's sentence, which this checks.
    """
    documents = corpus()
    sample = documents[:9] + random.Random(0).sample(documents[9:], 2500)
    validator = schema_validator()
    accepted = rule_only = 0
    for document in sample:
        kinds = model_errors(document)
        model, schema = kinds is None, validator.is_valid(document)
        if model == schema:
            accepted += model
            continue
        assert schema, f"the model accepts what the schema refuses: {json.dumps(document)[:300]}"
        assert kinds == {"value_error"}, f"the model refuses a type the schema accepts ({kinds}): {document}"
        rule_only += 1
    assert accepted > 200
    assert rule_only < len(sample) // 10


# -- B.2: never NaN or infinity, always valid JSON ------------------------------------------------


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_action_data_with_nan_or_infinity_is_refused_naming_the_path(bad: float):
    with pytest.raises(ReportError, match=r"^the boundary_action report of 'log' is invalid: data: .* at data\.a\[1\]"):
        ActionResult(action="log", boundary="after_call", status="executed", data={"a": [1, {"b": 2}, bad][::2]})
    context = BoundaryContext(
        pipeline=None,
        boundary="after_call",
        action="log",
        call_index=1,
        device="cuda",
        tracker=MetricsTracker(),
        policy=HookPolicy.default(),
    )
    with pytest.raises(InvalidArgumentError, match=r"is not a JSON number; store a finite number, a string or null"):
        context.action_report("executed", data={"ratio": bad})  # the argument the action passed is what is wrong
    document = base_reports()[4]
    document["setup"]["boundary_action"]["data"]["ratio"] = bad
    with pytest.raises(ReportError, match=r"data: .* at data\.ratio is not a JSON number"):
        parse_report(document)


@pytest.mark.parametrize("bad", [10**4300, -(10**4300), 10**5000], ids=["10**4300", "-10**4300", "10**5000"])
def test_action_data_with_an_int_json_cannot_write_is_refused_naming_the_path(bad: int):
    with pytest.raises(ReportError, match=r"at data\.a\[1\] has more than 4,300 digits, which Python's json refuses"):
        ActionResult(action="log", boundary="after_call", status="executed", data={"a": [1, bad]})
    context = BoundaryContext(
        pipeline=None,
        boundary="after_call",
        action="log",
        call_index=1,
        device="cuda",
        tracker=MetricsTracker(),
        policy=HookPolicy.default(),
    )
    with pytest.raises(InvalidArgumentError, match=r"has more than 4,300 digits.*; store it as a string"):
        context.action_report("executed", data={"big": bad})
    largest = ActionResult(action="log", boundary="after_call", status="executed", data={"a": 10**4300 - 1})
    assert json.loads(json.dumps(largest.model_dump(mode="json")))["data"]["a"] == 10**4300 - 1


def test_a_string_json_cannot_hold_is_refused():
    document = replaced(noop(), (*RELEASE, "detail"), "half a pair \ud800")
    with pytest.raises(
        ReportError,
        match=r"pytorch_host_cache_release: Value error, the report cannot be written as JSON: a string holds half",
    ):
        parse_report(document)


def test_every_report_the_models_accept_is_valid_json():
    for document in corpus()[::7]:
        try:
            report = parse_report(document)
        except ReportError:
            continue
        assert json.loads(report.model_dump_json()) == document or report.model_dump(mode="json") != document
        json.dumps(report.model_dump(mode="json"), allow_nan=False)
        assert parse_report(report.model_dump_json()) == report


def test_a_saved_record_with_half_a_surrogate_pair_is_refused_at_its_line(tmp_path):
    """The fast reader skips writing a report out to check its strings only when its parser proved them whole."""
    from ddo_hooks.reports.files import load_report_file

    good = json.dumps({"component": "host_cache_after_call", "report": noop()})
    bad = good.replace('"detail": "', '"detail": "half a pair \\ud800 ', 1)
    assert "\\ud800" in bad
    path = tmp_path / "r.jsonl"
    path.write_text(f"{good}\n{bad}\n", encoding="utf-8")
    with pytest.raises(ReportError, match=r"r\.jsonl:2:\d+: report: .*cannot be written as JSON: a string holds half"):
        load_report_file(path)
