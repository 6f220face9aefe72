"""DDO's release core behind the built-in release (``core: ddo``): refused at attach where it cannot run, else recorded.

The refusals and the failure paths replace DDO through the import seam (``ddo_core.load_ddo``) or
put a stand-in module where DDO would be imported, so they run everywhere. The tests that call
DDO itself run where it is installed (skipped otherwise, naming the package; failed instead where
``DDO_HOOKS_REQUIRE_DDO=1``, ``.ci/run``'s interop step): on this CPU, DDO's release answers
``cuda_not_initialized`` at every boundary of a real tiny pipeline call.
"""

from __future__ import annotations

import json
import os
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from support.ddo_payloads import CORPUS, DISTRIBUTION, ddo_version

from ddo_hooks import (
    HookPolicy,
    HostCacheReleaseError,
    HostCacheReleaseReport,
    MetricsTracker,
    PolicyError,
    ReportError,
    attach,
)
from ddo_hooks.cli.summarize import format_summary
from ddo_hooks.release import ddo_core
from ddo_hooks.reports.ddo.host import DDOHostCacheReleaseReport
from ddo_hooks.reports.files import load_report_file
from ddo_hooks.testing.tiny_pipelines import build_pipeline, call_kwargs

BOUNDARIES = ["before_transformer", "before_vae", "after_call"]
DDO_CORE = "version: 1\nrelease: {core: ddo}\n"
HAS_ENTRY_POINT = callable(getattr(torch._C, "_accelerator_emptyHostCache", None))  # torch >= 2.12
VERSION = ddo_version()
REQUIRED = os.environ.get("DDO_HOOKS_REQUIRE_DDO") == "1"  # .ci/run's interop step: a skip there is a failure
needs_ddo = pytest.mark.skipif(
    VERSION is None and not REQUIRED,
    reason=f"{DISTRIBUTION} is not installed (pip install -e '.[dev,ddo]' runs DDO's release core)",
)


@pytest.fixture(scope="module")
def sd() -> Any:
    """One tiny SD pipeline for the module: every attachment here is detached (or refused) before the next."""
    return build_pipeline("sd")


def policy(text: str = DDO_CORE) -> HookPolicy:
    return HookPolicy.from_yaml_text(text, source="ddo-core.yaml")


def payload(status: str = "cuda_not_initialized", phase: str = "before_transformer") -> dict[str, Any]:
    name = "released.handwritten-from-source" if status == "released" else status
    data = json.loads((CORPUS / f"ddo-0.1.0rc2-pytorch_host_cache_release.{name}.json").read_text(encoding="utf-8"))
    data["setup"]["host_cache_release"]["phase"] = phase
    return data


class _Metrics:
    """What DDO's release returns, as far as ddo_hooks reads it: an object with ``as_dict()``."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def as_dict(self) -> dict[str, Any]:
        return self.data


def stand_in(monkeypatch: pytest.MonkeyPatch, release: Callable[..., Any], version: str = "0.1.0rc2") -> list[dict]:
    """Put a stand-in for DDO where ddo_hooks imports it; return the calls its release receives."""
    calls: list[dict] = []

    def recorded(**kwargs: Any) -> Any:
        calls.append(kwargs)
        return release(**kwargs)

    module = types.ModuleType(ddo_core.IMPORT_NAME)
    module.release_pytorch_host_cache = recorded  # type: ignore[attr-defined]
    monkeypatch.setitem(__import__("sys").modules, ddo_core.IMPORT_NAME, module)
    monkeypatch.setattr(ddo_core, "load_ddo", lambda: ddo_core.LoadedDDO(module, version))
    monkeypatch.setattr("ddo_hooks._compat.torch.accelerator_empty_host_cache", lambda: lambda: None)
    return calls


def assert_not_attached(pipe: Any) -> None:
    """A refused attach leaves nothing behind: the default policy attaches, and records its own report."""
    with attach(pipe) as attachment:
        pipe(**call_kwargs("sd"))
    assert [type(r) for r in attachment.reports] == [HostCacheReleaseReport] * 3


# -- refused at attach, with the setting and the fix ------------------------------------------------


def test_attach_refuses_ddos_core_when_ddo_is_missing(sd: Any, monkeypatch: pytest.MonkeyPatch):
    def missing() -> ddo_core.LoadedDDO:
        raise ModuleNotFoundError("No module named 'diffusers_dynamic_offloader'")

    monkeypatch.setattr(ddo_core, "load_ddo", missing)
    with pytest.raises(PolicyError) as info:
        attach(sd, policy())
    assert str(info.value) == (
        "ddo-core.yaml:2:11: release.core: ddo (DDO's release core) cannot run here: diffusers-dynamic-offloader "
        "is not importable here (No module named 'diffusers_dynamic_offloader'); install it: pip install "
        "'diffusers-dynamic-offloader==0.1.0rc2' (the ddo extra: pip install 'ddo-hooks[ddo]'); or set "
        "core: ddo_hooks (the default), which runs wherever ddo_hooks does"
    )
    assert_not_attached(sd)


def test_attach_refuses_an_untested_ddo_naming_the_version_found(sd: Any, monkeypatch: pytest.MonkeyPatch):
    stand_in(monkeypatch, lambda **_: _Metrics(payload()), version="0.2.0")
    text = DDO_CORE.replace("release: {core: ddo}\n", "boundaries:\n  before_vae:\n    actions:\n") + (
        "      - {name: host_cache_release, options: {core: ddo}}\n"
    )
    with pytest.raises(PolicyError) as info:
        attach(sd, policy(text))
    message = str(info.value)
    assert message.startswith(
        "ddo-core.yaml:5:46: boundaries.before_vae.actions[0].options.core: ddo (DDO's release core) cannot run "
        "here: diffusers-dynamic-offloader 0.2.0 is installed, and ddo_hooks calls and validates the release of "
        "0.1.0rc2 only"
    ), message
    assert message.endswith("or set core: ddo_hooks (the default), which runs wherever ddo_hooks does")


def test_attach_refuses_ddos_core_on_a_torch_without_its_entry_point(sd: Any, monkeypatch: pytest.MonkeyPatch):
    stand_in(monkeypatch, lambda **_: _Metrics(payload()))
    monkeypatch.setattr("ddo_hooks._compat.torch.accelerator_empty_host_cache", lambda: None)  # torch < 2.12
    with pytest.raises(PolicyError) as info:
        attach(sd, policy())
    message = str(info.value)
    assert f"release.core: ddo (DDO's release core) cannot run here: torch {torch.__version__} has no " in message
    assert "torch._C._accelerator_emptyHostCache (torch >= 2.12)" in message
    assert "upgrade torch to 2.12 or later" in message


def test_a_policy_that_would_not_run_ddos_core_is_not_refused(sd: Any, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(ddo_core, "load_ddo", lambda: pytest.fail("DDO is looked for only where its core would run"))
    off = "version: 1\nenabled: false\nrelease: {core: ddo}\n"
    on_a_disabled_boundary = (
        "version: 1\nboundaries:\n  after_call:\n    enabled: false\n"
        "    actions: [{name: host_cache_release, options: {core: ddo}}]\n"
    )
    for text in (off, on_a_disabled_boundary, "version: 1\n"):
        attach(sd, policy(text)).detach()


def test_the_seam_decides_whether_ddos_core_can_run(monkeypatch: pytest.MonkeyPatch):
    stand_in(monkeypatch, lambda **_: _Metrics(payload()))
    assert ddo_core.core_problem() is None
    monkeypatch.setattr(ddo_core, "load_ddo", lambda: ddo_core.LoadedDDO(types.ModuleType("x"), "0.1.0rc2"))
    assert ddo_core.core_problem() == (
        "diffusers-dynamic-offloader 0.1.0rc2 has no release_pytorch_host_cache; reinstall it: pip install "
        "'diffusers-dynamic-offloader==0.1.0rc2' (the ddo extra: pip install 'ddo-hooks[ddo]')"
    )

    def broken() -> ddo_core.LoadedDDO:
        raise AttributeError("module 'torch' has no attribute 'compiler'")

    monkeypatch.setattr(ddo_core, "load_ddo", broken)
    assert ddo_core.core_problem().startswith(
        "importing diffusers-dynamic-offloader failed (AttributeError: module 'torch' has no attribute 'compiler')"
    )


# -- the action on DDO's core: what DDO reports is recorded; a failure is raised, never recorded as a release --


def test_the_action_calls_ddos_release_and_records_its_report(sd: Any, monkeypatch: pytest.MonkeyPatch):
    calls = stand_in(monkeypatch, lambda **kw: _Metrics(payload("released", kw["phase"])))
    tracker = MetricsTracker()
    text = DDO_CORE.replace("version: 1\n", "version: 1\ndevice: cuda:1\n")
    with attach(sd, policy(text), tracker=tracker):
        sd(**call_kwargs("sd"))
    assert calls == [{"enabled": True, "phase": boundary, "device": "cuda:1"} for boundary in BOUNDARIES]
    assert [c for c, _ in tracker.records()] == [f"host_cache_{b}" for b in BOUNDARIES]
    reports = tracker.reports()
    assert all(isinstance(r, DDOHostCacheReleaseReport) for r in reports)
    assert [r.as_dict() for r in reports] == [payload("released", b) for b in BOUNDARIES]


def test_trigger_dropped_still_decides_before_ddos_core_is_called(sd: Any, monkeypatch: pytest.MonkeyPatch):
    calls = stand_in(monkeypatch, lambda **kw: _Metrics(payload(phase=kw["phase"])))
    with attach(sd, policy("version: 1\nrelease: {core: ddo, trigger: dropped}\n")) as attachment:
        sd(**call_kwargs("sd"))
    assert calls == []
    assert {(type(r).__name__, r.release.noop_reason) for r in attachment.reports} == {
        ("HostCacheReleaseReport", "not_triggered")
    }


def test_a_failed_ddo_release_is_raised_and_not_recorded(sd: Any, monkeypatch: pytest.MonkeyPatch):
    def fails(**_: Any) -> Any:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    stand_in(monkeypatch, fails)
    tracker = MetricsTracker()
    attachment = attach(sd, policy(), tracker=tracker)
    try:
        with pytest.raises(HostCacheReleaseError) as info:
            sd(**call_kwargs("sd"))
    finally:
        attachment.detach()
    assert str(info.value) == (
        "DDO's release_pytorch_host_cache at before_transformer on cuda raised RuntimeError: CUDA error: an illegal "
        "memory access was encountered; the release failed (core: ddo)"
    )
    assert isinstance(info.value.__cause__, RuntimeError)
    assert not [r for r in tracker.reports() if isinstance(r, DDOHostCacheReleaseReport)]


def test_a_report_ddo_did_not_write_so_is_refused(sd: Any, monkeypatch: pytest.MonkeyPatch):
    wrong = payload()
    wrong["setup"]["host_cache_release"]["status"] = "executed"  # ddo_hooks' word, not DDO's
    stand_in(monkeypatch, lambda **_: _Metrics(wrong))
    attachment = attach(sd, policy())
    try:
        with pytest.raises(ReportError, match=r"returned a report that is not DDO 0\.1\.0rc2's release report: .*"
                           r"status: 'executed' is not one of disabled, cuda_not_initialized"):  # fmt: skip
            sd(**call_kwargs("sd"))
    finally:
        attachment.detach()


# -- DDO itself, where it is installed ------------------------------------------------------------------


def _real_ddo() -> None:
    if VERSION != ddo_core.TESTED_VERSION and not REQUIRED:
        pytest.skip(f"{DISTRIBUTION} {VERSION} is installed; ddo_hooks' core: ddo is of {ddo_core.TESTED_VERSION}")
    assert VERSION == ddo_core.TESTED_VERSION, f"{DISTRIBUTION} {VERSION} is installed"


@needs_ddo
def test_on_this_torch_ddos_core_can_run_or_attach_names_torch(sd: Any):
    _real_ddo()
    problem = ddo_core.core_problem()
    if HAS_ENTRY_POINT:
        assert problem is None
        attach(sd, policy()).detach()
    else:
        assert problem is not None
        assert f"torch {torch.__version__} has no torch._C._accelerator_emptyHostCache" in problem
        with pytest.raises(PolicyError, match=r"release\.core: ddo \(DDO's release core\) cannot run here: torch "):
            attach(sd, policy())


@needs_ddo
def test_ddos_release_on_a_real_call_is_recorded_and_read_back(sd: Any, tmp_path: Path):
    """DDO's real ``cuda_not_initialized`` beside ddo_hooks' own no-op: the tracker, its files and summarize."""
    _real_ddo()
    if not HAS_ENTRY_POINT:
        pytest.skip(f"torch {torch.__version__} has no _accelerator_emptyHostCache: attach refuses core: ddo here")
    sink = tmp_path / "sink.jsonl"
    text = (
        f"version: 1\nreport_sink: {json.dumps(str(sink))}\nrelease: {{core: ddo}}\nboundaries:\n"
        "  after_call: {actions: [{name: host_cache_release, options: {core: ddo_hooks}}]}\n"
    )
    with attach(sd, policy(text)) as attachment:
        sd(**call_kwargs("sd"))
    tracker = attachment.tracker
    ddo, ours = tracker.reports()[:2], tracker.reports()[2]
    assert [(r.release.phase, r.release.status, r.release.released) for r in ddo] == [
        ("before_transformer", "cuda_not_initialized", False),
        ("before_vae", "cuda_not_initialized", False),
    ]
    assert all(type(r) is DDOHostCacheReleaseReport and r.configuration.enabled for r in ddo)
    assert (type(ours), ours.release.status) == (HostCacheReleaseReport, "noop")  # this boundary's own core

    # the tracker's JSON, its JSON Lines, a file of them and the policy's sink all give the same records back
    assert MetricsTracker.from_json(tracker.to_json()).entries() == tracker.entries()
    assert MetricsTracker.from_jsonl(tracker.to_jsonl()).entries() == tracker.entries()
    saved = load_report_file(tracker.write_jsonl(tmp_path / "run.jsonl"))
    assert saved.form == "JSON Lines"
    assert saved.entries == tracker.entries() == load_report_file(sink).entries
    assert json.loads(tracker.to_jsonl().splitlines()[0])["report"] == ddo[0].as_dict()

    summary = format_summary([saved])  # a row per report, each labelled with its action: DDO's is named
    assert summary.count("no-op: cuda_not_initialized") == 2, summary
    assert summary.count("ddo.host_cache_release") == 2 + 2, summary  # the call's table, then the totals
    assert "DDO's release: cuda_not_initialized" in summary
