"""A corpus of report documents, valid and invalid: real reports of every route, and their mutations.

Used by the tests that compare the report models with the checked-in JSON Schema, by the fuzz
tests and by ``scripts/fuzz_campaign.py``. Every document is JSON data (what ``json.loads``
returns); nothing here holds NaN, infinity or a lone surrogate, which JSON text cannot carry.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema

from ddo_hooks import release_pytorch_host_cache
from ddo_hooks.release.allocator import use_backend
from ddo_hooks.release.counters import snapshot_from_raw
from ddo_hooks.reports.auxiliary_sources import (
    AuxiliarySourceDetach,
    AuxiliarySourceDetachReport,
    AuxiliarySourceDetachSetup,
    ComponentSourceObservation,
)
from ddo_hooks.reports.base import HostObservation
from ddo_hooks.reports.boundary import (
    ActionReport,
    ActionResult,
    ActionResultSetup,
    BoundaryRefusal,
    BoundaryRefusalReport,
    BoundaryRefusalSetup,
)
from ddo_hooks.reports.done_components import (
    ComponentPages,
    DoneComponentsRelease,
    DoneComponentsReleaseReport,
    DoneComponentsReleaseSetup,
    FaultsSince,
)
from ddo_hooks.reports.repack import ComponentRepack, PinnedCopyRepack, PinnedCopyRepackReport, PinnedCopyRepackSetup
from ddo_hooks.reports.ring import RingComponent, RingOffload, RingOffloadReport, RingOffloadSetup
from support.fakes import FakeHostAllocator

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "ddo_hooks" / "schemas" / "ddo-report.schema.json"

# A JSON integer is a number written without a fraction: the models count bytes and versions in
# them and refuse 1.0. (JSON Schema's own data model calls 1.0 an integer; the documents here
# are JSON text as written, where 1 and 1.0 differ.)
_TYPES = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
    "integer", lambda _, value: isinstance(value, int) and not isinstance(value, bool)
)
SchemaValidator = jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=_TYPES)

REPLACEMENTS: list[Any] = [None, True, False, 0, 1, -1, 1.0, 0.5, -2.5, 2**64, "", "x", "5", "1", [], {}, ["x"]]
"""What a value is replaced with: every JSON type, in and out of range."""


def schema_validator() -> jsonschema.protocols.Validator:
    """A validator of the checked-in report schema."""
    return SchemaValidator(json.loads(SCHEMA_FILE.read_text(encoding="utf-8")))


def _host() -> HostObservation:
    return HostObservation(platform="linux", rss_bytes=512 << 20, unavailable={"private_bytes": "not on linux"})


def base_reports() -> list[dict[str, Any]]:
    """Valid reports of every route and status, as ``model_dump(mode="json")`` writes them."""
    reports: list[Any] = [release_pytorch_host_cache(phase="after_call")]
    with use_backend(FakeHostAllocator()):
        reports.append(release_pytorch_host_cache(enabled=True, phase="before_vae", device="cuda:0", collect="full"))
    with use_backend(FakeHostAllocator(version="2.11.0", reported_active=3_904_897_030)):
        reports.append(release_pytorch_host_cache(enabled=True, phase="after_call", min_releasable_bytes=1 << 30))
    refusal = BoundaryRefusal(
        boundary="before_vae", action="host_cache_release", reason="denoising", detail="inside the loop",
        requested_by="host", call_index=3,
    )  # fmt: skip
    reports.append(BoundaryRefusalReport(setup=BoundaryRefusalSetup(boundary_refusal=refusal)))
    data = {"n": 1, "ratio": 0.25, "items": [1, "a", None, True], "nested": {"x": {"y": []}}}
    result = ActionResult(action="my.log", boundary="after_call", status="executed", detail="logged", data=data)
    reports.append(ActionReport(setup=ActionResultSetup(boundary_action=result)))
    observation = ComponentSourceObservation(
        component="transformer", runtime="diffusers_group_offload", adapter="pkg.Adapter", attached=True,
        execution_started=False, native_binding_count=2, interval_observation="reported", retained_intervals=2,
        retained_bytes=4096,
    )  # fmt: skip
    detaches = [
        AuxiliarySourceDetach(
            status="noop", noop_reason="disabled", detail="disabled", max_copy_bytes=16, elapsed_seconds=0
        ),
        AuxiliarySourceDetach(
            status="refused", refusal_reason="exceeds_ceiling", detail="too much", offending=["text_encoder.w"],
            max_copy_bytes=16, selected_tensors=1, selected_bytes=32, components=[observation], elapsed_seconds=0.5,
        ),
        AuxiliarySourceDetach(
            status="executed", detail="copied", max_copy_bytes=64, selected_tensors=2, selected_bytes=48,
            copied_tensors=2, copied_bytes=48, alias_groups=1, skipped_tensors={"pinned": 1},
            skipped_bytes={"pinned": 8}, components=[observation], elapsed_seconds=1, host_before=_host(),
            host_after=_host(),
        ),
    ]  # fmt: skip
    reports += [
        AuxiliarySourceDetachReport(setup=AuxiliarySourceDetachSetup(auxiliary_cpu_source_detach=d)) for d in detaches
    ]
    reports += [PinnedCopyRepackReport(setup=PinnedCopyRepackSetup(pinned_copy_repack=r)) for r in _repacks()]
    reports += [RingOffloadReport(setup=RingOffloadSetup(ring_offload=r)) for r in _rings()]
    reports += [DoneComponentsReleaseReport(setup=DoneComponentsReleaseSetup(done_components_release=r))
                for r in _done_releases()]  # fmt: skip
    return [json.loads(report.model_dump_json()) for report in reports]


def _rings() -> list[RingOffload]:
    streamed = RingComponent(component="transformer", status="streamed", units=24, streamed_bytes=2_590_000_000,
                             device_bytes=40_000_000)  # fmt: skip
    whole = RingComponent(component="vae", status="on_device", units=0, streamed_bytes=0, device_bytes=167_000_000)
    executed = RingOffload(phase="attach", status="executed", noop_reason=None, detail="24 blocks stream",
                           device="cuda:0", components=(streamed, whole), ring_bytes=510_000_000, lookahead=2,
                           resident_budget_bytes=768 << 20, elapsed_seconds=0.8)  # fmt: skip
    noop = RingOffload(phase="attach", status="noop", noop_reason="no_cuda", detail="no CUDA device",
                       device="cuda", components=(), ring_bytes=0, lookahead=2, resident_budget_bytes=0,
                       elapsed_seconds=0.0)  # fmt: skip
    return [executed, noop]


def _done_releases() -> list[DoneComponentsRelease]:
    """Done components: none yet; one given back and one left (modified), with the faults since the previous."""
    released = ComponentPages(
        component="text_encoder_2", outcome="released", reason=None, detail="dropped", file_bytes=3 << 20,
        other_bytes=616, resident_bytes=3 << 20, released_bytes=3 << 20, seconds=0.01,
    )  # fmt: skip
    left = ComponentPages(
        component="text_encoder", outcome="left", reason="modified", detail="a page was written", file_bytes=1 << 20,
        other_bytes=0, resident_bytes=None, released_bytes=0, seconds=0.001,
    )  # fmt: skip
    since = FaultsSince(since="before_transformer", minor_faults=768, major_faults=2, rss_file_growth_bytes=3 << 20)
    return [
        DoneComponentsRelease(
            boundary="before_transformer", status="noop", noop_reason="nothing_done", detail="none yet",
            components=(), released_bytes=0, host_before=_host(), host_after=_host(), faults_since_previous=None,
            elapsed_seconds=0.0,
        ),
        DoneComponentsRelease(
            boundary="before_transformer", status="executed", noop_reason=None, detail="gave back",
            components=(left, released), released_bytes=3 << 20, host_before=_host(), host_after=_host(),
            faults_since_previous=since, elapsed_seconds=0.02,
        ),
    ]  # fmt: skip


def _repacks() -> list[PinnedCopyRepack]:
    """A repack that found nothing to do, and one that repacked a component and refused another."""
    skipped = ComponentRepack(
        component="vae", status="skipped", reason="not_pinned", detail="low_cpu_mem_usage=True", groups=3, tensors=9,
        tensor_bytes=3000, pinned_bytes_before=0, pinned_bytes_after=0, slabs=(), seconds=0.0,
    )  # fmt: skip
    repacked = ComponentRepack(
        component="transformer", status="repacked", reason=None, detail="moved", groups=2, tensors=5,
        tensor_bytes=3 << 20, pinned_bytes_before=4 << 20, pinned_bytes_after=(3 << 20) + (1 << 18),
        slabs=(2 << 20, 1 << 20, 1 << 18), seconds=0.25,
    )  # fmt: skip
    refused = ComponentRepack(
        component="text_encoder", status="refused", reason="shared_storage", detail="held elsewhere", groups=1,
        tensors=2, tensor_bytes=96, pinned_bytes_before=256, pinned_bytes_after=256, slabs=(), seconds=0.0,
    )  # fmt: skip
    before, after = snapshot_from_raw(_raw(6 << 20)), snapshot_from_raw(_raw((3 << 20) + (1 << 18)))
    with use_backend(FakeHostAllocator()):
        release = release_pytorch_host_cache(enabled=True, phase="attach", device="cuda:0", collect="young").release
    common = {"before": None, "after": None, "allocator_bytes_delta": None, "releases": (), "release_refused": None,
              "host_before": None, "host_after": None}  # fmt: skip
    return [
        PinnedCopyRepack(
            phase="attach", status="noop", noop_reason="nothing_to_repack", detail="nothing pinned",
            components=(skipped,), tensor_bytes=0, pinned_bytes_before=0, pinned_bytes_after=0, elapsed_seconds=0.0,
            **common,
        ),
        PinnedCopyRepack(
            phase="attach", status="executed", noop_reason=None, detail="repacked transformer",
            components=(repacked, refused), tensor_bytes=3 << 20, pinned_bytes_before=4 << 20,
            pinned_bytes_after=(3 << 20) + (1 << 18), elapsed_seconds=0.5,
            **{**common, "before": before, "after": after, "releases": (release,), "host_before": _host(),
               "host_after": _host(), "allocator_bytes_delta": (6 << 20) - (3 << 20) - (1 << 18)},
        ),
    ]  # fmt: skip


def _raw(owned: int) -> dict[str, Any]:
    """The host allocator's raw counters (torch >= 2.10 layout) with ``owned`` bytes and none active."""
    return {"allocated_bytes": {"current": owned}, "active_bytes": {"current": 0}}


def _paths(document: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(document, dict):
        for key, value in document.items():
            yield from _paths(value, (*path, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            yield from _paths(value, (*path, index))


def replaced(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    """A copy of ``document`` with ``value`` at ``path`` (the whole document when ``path`` is empty)."""
    if not path:
        return copy.deepcopy(value)
    changed = copy.deepcopy(document)
    parent = changed
    for part in path[:-1]:
        parent = parent[part]
    parent[path[-1]] = copy.deepcopy(value)
    return changed


def removed(document: Any, path: tuple[Any, ...]) -> Any:
    """A copy of ``document`` without the key or item at ``path``."""
    changed = copy.deepcopy(document)
    parent = changed
    for part in path[:-1]:
        parent = parent[part]
    del parent[path[-1]]
    return changed


def mutations(document: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every single change of a document: each value replaced, each key removed, a key added to each object."""
    for path in _paths(document):
        for value in REPLACEMENTS:
            yield replaced(document, path, value)
        target = document
        for part in path:
            target = target[part]
        if isinstance(target, dict):
            yield replaced(document, path, {**target, "bogus": 1})
        if path and isinstance(path[-1], str):
            yield removed(document, path)


def corpus() -> list[Any]:
    """The valid reports and every single mutation of each."""
    documents: list[Any] = []
    for document in base_reports():
        documents.append(document)
        documents.extend(mutations(document))
    return documents


def random_mutant(rng: random.Random, document: Any, changes: int = 3) -> Any:
    """``document`` with up to ``changes`` random single changes (for fuzzing)."""
    for _ in range(rng.randint(1, changes)):
        paths = list(_paths(document))
        path = rng.choice(paths)
        value = rng.choice([*REPLACEMENTS, rng.randint(-(2**70), 2**70), rng.random() * 1e6, "x" * rng.randint(0, 300)])
        document = replaced(document, path, value)
    return document
