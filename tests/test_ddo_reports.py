"""DDO's own reports: the corpus reads as DDO's shape, mutations are refused, the shapes never mix, DDO's real output.

The corpus (``tests/data/ddo``) holds diffusers-dynamic-offloader 0.1.0rc2's payloads. Where DDO is
installed (``pip install -e '.[dev,ddo]'``), the last tests call its functions on the CPU and
check that they still write what the corpus holds; elsewhere they skip, naming the extra.
"""

from __future__ import annotations

import copy
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from support.ddo_payloads import (
    CORPUS,
    DISTRIBUTION,
    HANDWRITTEN,
    corpus_files,
    corpus_name,
    ddo_version,
    key_shape,
    real_payloads,
)
from support.report_corpus import base_reports, mutations, removed, replaced, schema_validator

from ddo_hooks import parse_report
from ddo_hooks.errors import ReportError
from ddo_hooks.reports.ddo.base import DDO_VERSION, DDOHostSnapshot
from ddo_hooks.reports.ddo.host import DDOAllocatorSnapshot, DDOHostCacheReleaseReport
from ddo_hooks.reports.ddo.routes import DDO_REPORT_ADAPTER, DDO_REPORT_TYPES, DDO_ROUTES
from ddo_hooks.reports.parse import REPORT_ADAPTER, REPORT_TYPES, report_shape

FILES = corpus_files()
DDO_REFUSAL = r"^not a valid report of DDO's shape \(it has a top-level "
OURS_REFUSAL = r"^not a valid report of ddo_hooks' shape \(no top-level 'configuration' or 'runtime'\): "


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def by_name(name: str) -> dict[str, Any]:
    """The corpus payload ``<route>.<case>`` (real or hand-written)."""
    return load(next(path for path in FILES if corpus_name(path) == name))


def released() -> dict[str, Any]:
    return by_name("pytorch_host_cache_release.released")


# -- the corpus ----------------------------------------------------------------------------------


def test_the_corpus_names_its_ddo_version_and_covers_every_route():
    assert len(FILES) >= 15
    assert all(path.name.startswith(f"ddo-{DDO_VERSION}-") for path in FILES), [p.name for p in FILES]
    assert f"(diffusers-dynamic-offloader {DDO_VERSION})" in (CORPUS / "README.md").read_text(encoding="utf-8")
    routes = {corpus_name(path).split(".")[0] for path in FILES}
    assert routes == set(DDO_ROUTES)
    statuses = {load(p)["setup"]["host_cache_release"]["status"] for p in FILES if "host_cache_release" in p.name}
    assert statuses == {"disabled", "cuda_not_initialized", "released"}  # unsupported needs CUDA initialized


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_each_corpus_file_parses_as_ddos_shape_and_dumps_back_exactly(path: Path):
    payload = load(path)
    route = corpus_name(path).split(".")[0]
    report = parse_report(payload)
    assert isinstance(report, DDO_REPORT_TYPES)
    assert report.route == route == payload["route"]
    assert report_shape(payload) == "ddo"
    assert report.as_dict() == payload
    assert list(json.loads(report.model_dump_json())) == list(payload)  # DDO's key order at the top
    assert parse_report(path.read_text(encoding="utf-8")) == report  # JSON text: the same
    assert parse_report(report) is not None  # a model revalidates
    summary = report.summary()
    assert summary.action.startswith("ddo.")
    assert summary.kind in ("executed", "noop")


def test_the_handwritten_payloads_are_marked_and_are_the_gpu_statuses():
    handwritten = sorted(corpus_name(p) for p in FILES if HANDWRITTEN in p.name)
    assert handwritten == [
        "diffusers_group_offload.leaf_level-timing-complete",
        "native_vmm_idle_cache_release.completed-cublas",
        "pytorch_host_cache_release.released",
        "pytorch_host_cache_release.released-windows",
        "vmm_auxiliary_source_detachment.detached",
    ]


# -- mutated copies are refused, with the shape and the path ---------------------------------------


@pytest.mark.parametrize(
    ("path", "value", "says"),
    [
        (("setup", "host_cache_release", "status"), "executed", r"status: 'executed' is not one of disabled, "),
        (("setup", "host_cache_release", "status"), "cuda_not_initialized", r"released is true exactly when status"),
        (("setup", "host_cache_release", "released"), 1, r"released: expected true or false, got 1"),
        (("setup", "host_cache_release", "elapsed_seconds"), "0.4", r"elapsed_seconds: expected a number, got '0.4'"),
        (("setup", "host_cache_release", "allocator_bytes_delta"), 1, r"allocator_bytes_delta must be 4294967296"),
        (
            ("setup", "host_cache_release", "before", "allocated_bytes"),
            1.5,
            r"before.allocated_bytes: expected an integer, got 1.5",
        ),
        (
            ("setup", "host_cache_release", "host_after", "process_rss_bytes"),
            -1,
            r"process_rss_bytes: -1 is out of range; expected a value of at least 0",
        ),
        (("setup", "host_cache_release", "host_after"), None, r"host_after is null; DDO leaves this key out"),
        (
            ("setup", "host_cache_release", "extra"),
            1,
            r"host_cache_release.extra: unknown key: this report has no such field",
        ),
        (("configuration", "enabled"), False, r"status is 'disabled' exactly when configuration.enabled is false"),
        (("configuration", "enabled"), "true", r"configuration.enabled: expected true or false, got 'true'"),
        (("runtime",), {"vmm": {}}, r"runtime.vmm: unknown key"),
        (("schema_version",), True, r"schema_version: expected 1, got true"),
        (("bogus",), 1, r"bogus: unknown key: this report has no such field"),
    ],
)
def test_a_mutated_release_is_refused_naming_the_shape_and_the_field(path, value, says):
    with pytest.raises(ReportError, match=DDO_REFUSAL) as info:
        parse_report(replaced(released(), path, value))
    assert __import__("re").search(says, str(info.value)), str(info.value)


def test_an_unread_route_is_refused_listing_the_routes_read():
    with pytest.raises(ReportError, match=DDO_REFUSAL + r".*'dynamic_offload' is not a route whose report ddo_hooks"):
        parse_report(replaced(released(), ("route",), "dynamic_offload"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_the_models_and_the_schema_agree_on_mutations_of_each_payload(path: Path):
    """Every single change of the payload: the schema accepts what the models accept (the models also check rules)."""
    validator = schema_validator()
    documents = list(mutations(load(path)))
    sample = random.Random(path.name).sample(documents, min(len(documents), 300))
    refused = 0
    for document in sample:
        try:
            parse_report(document)
            model = True
        except ReportError as e:
            model, refused = False, refused + 1
            cause = e.__cause__
            kinds = {item["type"] for item in cause.errors()} if isinstance(cause, ValidationError) else {"?"}
        schema = validator.is_valid(document)
        if model:
            assert schema, f"the model accepts what the schema refuses: {json.dumps(document)[:300]}"
        elif schema:  # a rule the schema cannot state (which keys go together, sums, orders)
            assert kinds == {"value_error"}, (kinds, json.dumps(document)[:300])
    assert refused > len(sample) // 2


# -- the two shapes never mix ------------------------------------------------------------------


@pytest.mark.parametrize("document", base_reports(), ids=lambda d: d["route"])
def test_our_reports_are_not_ddos(document: dict[str, Any]):
    assert report_shape(document) == "ddo_hooks"
    assert isinstance(parse_report(document), REPORT_TYPES)
    with pytest.raises(ValidationError):
        DDO_REPORT_ADAPTER.validate_python(document)
    dressed = {**document, "configuration": {}, "runtime": {}}  # our report with DDO's keys is read as DDO's
    with pytest.raises(ReportError, match=DDO_REFUSAL):
        parse_report(dressed)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_ddos_reports_are_not_ours(path: Path):
    payload = load(path)
    with pytest.raises(ValidationError):
        REPORT_ADAPTER.validate_python(payload)
    stripped = {key: value for key, value in payload.items() if key not in ("configuration", "runtime")}
    with pytest.raises(ReportError, match=OURS_REFUSAL):
        parse_report(stripped)


def test_one_marking_key_is_enough_and_is_named():
    with pytest.raises(ReportError, match=r"of DDO's shape \(it has a top-level 'runtime'\): .*configuration"):
        parse_report(removed(released(), ("configuration",)))


def test_a_ddo_metrics_object_is_read_through_its_as_dict():
    class Metrics:  # DDO's DynamicOffloadMetrics, as far as parse_report looks
        def __init__(self, payload: dict[str, Any]) -> None:
            self.payload = payload

        def as_dict(self) -> dict[str, Any]:
            return copy.deepcopy(self.payload)

    assert isinstance(parse_report(Metrics(released())), DDOHostCacheReleaseReport)
    with pytest.raises(ReportError, match=DDO_REFUSAL):
        parse_report(Metrics(replaced(released(), ("setup", "host_cache_release", "released"), False)))


# -- DDO's snapshots, form by form ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("snapshot", "platform"),
    [
        ({"process_rss_bytes": 1}, None),
        ({"process_observation_error": "psutil missing"}, None),
        ({"process_rss_bytes": 1, "process_private_bytes": 2, "available_physical_bytes": 3,
          "available_process_commit_bytes": 4}, "windows"),
        ({"process_rss_bytes": 1, "process_observation_error": "no private", "system_observation_error": "x"},
         "windows"),
    ],
)  # fmt: skip
def test_host_snapshots_as_ddo_writes_them(snapshot: dict[str, Any], platform: str | None):
    parsed = DDOHostSnapshot.model_validate(snapshot)
    assert parsed.platform == platform
    assert parsed.model_dump() == snapshot


@pytest.mark.parametrize(
    ("snapshot", "says"),
    [
        ({}, "DDO writes process_rss_bytes or"),
        ({"process_rss_bytes": 1, "available_physical_bytes": 3}, "available_process_commit_bytes together"),
        ({"process_rss_bytes": 1, "process_private_bytes": 2}, "the available_\\* pair or system_observation_error"),
        ({"process_rss_bytes": 1, "process_observation_error": "x"}, "together happen only on Windows"),
        ({"process_rss_bytes": 1, "system_observation_error": "x"}, "writes process_private_bytes with"),
        ({"process_rss_bytes": True}, "Input should be a valid integer"),
    ],
)
def test_host_snapshots_ddo_cannot_write_are_refused(snapshot: dict[str, Any], says: str):
    with pytest.raises(ValidationError, match=says):
        DDOHostSnapshot.model_validate(snapshot)


@pytest.mark.parametrize(
    ("snapshot", "says"),
    [
        ({"status": "available"}, "a snapshot without counters is 'unavailable'"),
        ({"status": "unavailable", "error": "x", "allocated_bytes": None}, "error is written instead of"),
        ({"status": "available", "allocated_bytes": 8}, "missing reported_active_bytes"),
        ({"status": "unavailable", "allocated_bytes": 8, "reported_active_bytes": 0, "active_bytes": 0,
          "active_counter_consistent": True}, "status is 'available' exactly when"),
        ({"status": "available", "allocated_bytes": 8, "reported_active_bytes": 9, "active_bytes": 9,
          "active_counter_consistent": True}, "active_counter_consistent must be False"),
        ({"status": "available", "allocated_bytes": 8, "reported_active_bytes": -1, "active_bytes": -1,
          "active_counter_consistent": False}, "greater than or equal to 0"),
    ],
)  # fmt: skip
def test_allocator_snapshots_ddo_cannot_write_are_refused(snapshot: dict[str, Any], says: str):
    with pytest.raises(ValidationError, match=says):
        DDOAllocatorSnapshot.model_validate(snapshot)


def test_the_three_allocator_snapshot_forms_dump_back_as_written():
    for snapshot in (
        {"status": "unavailable"},
        {"status": "unavailable", "error": "boom"},
        {"status": "unavailable", "allocated_bytes": None, "reported_active_bytes": None, "active_bytes": None,
         "active_counter_consistent": False},
    ):  # fmt: skip
        assert DDOAllocatorSnapshot.model_validate(snapshot).model_dump() == snapshot


# -- DDO's real functions, where DDO is installed ----------------------------------------------

VERSION = ddo_version()
REQUIRED = os.environ.get("DDO_HOOKS_REQUIRE_DDO") == "1"  # .ci/run's interop step: a skip there is a failure
needs_ddo = pytest.mark.skipif(
    VERSION is None and not REQUIRED,
    reason=f"{DISTRIBUTION} is not installed (pip install -e '.[dev,ddo]' runs DDO's functions)",
)


@needs_ddo
def test_ddos_real_functions_write_what_the_corpus_holds(record_property: Any):
    record_property("ddo_version", VERSION)
    print(f"ran against {DISTRIBUTION} {VERSION}")
    if VERSION != DDO_VERSION and not REQUIRED:
        pytest.skip(f"{DISTRIBUTION} {VERSION} is installed; the corpus and models are of {DDO_VERSION}")
    assert VERSION == DDO_VERSION, f"{DISTRIBUTION} {VERSION} is installed; the corpus and models are of {DDO_VERSION}"
    payloads = real_payloads()
    assert set(payloads) == {corpus_name(p) for p in FILES if HANDWRITTEN not in p.name}
    for name, payload in payloads.items():
        report = parse_report(payload)
        assert isinstance(report, DDO_REPORT_TYPES), name
        assert key_shape(payload) == key_shape(by_name(name)), f"DDO {VERSION} now writes {name} differently"


@needs_ddo
def test_ddos_metrics_objects_are_read_as_they_are(record_property: Any):
    import diffusers_dynamic_offloader as ddo

    record_property("ddo_version", VERSION)
    metrics = ddo.release_pytorch_host_cache(enabled=True, phase="before_transformer", device="cuda:0")
    report = parse_report(metrics)  # no as_dict() by the caller
    assert isinstance(report, DDOHostCacheReleaseReport)
    assert report.release.status in ("cuda_not_initialized", "unsupported", "released")
    assert report.as_dict() == json.loads(json.dumps(metrics.as_dict()))
