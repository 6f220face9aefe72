"""Each route's typed summary: what the tables show of it, read from the model's fields, never guessed."""

from __future__ import annotations

from typing import Literal

import pytest
from support.report_corpus import base_reports

from ddo_hooks import parse_report
from ddo_hooks.reports.base import ReportSummary, RouteReport
from ddo_hooks.reports.boundary import ActionReport, ActionResult, ActionResultSetup
from ddo_hooks.reports.parse import ROUTES

REPORTS = [parse_report(document) for document in base_reports()]


def test_every_route_writes_its_summary_from_its_own_fields():
    assert {report.route for report in REPORTS} == set(ROUTES)  # the corpus holds every route
    for report in REPORTS:
        summary = report.summary()
        assert isinstance(summary, ReportSummary)
        assert summary.kind in ("executed", "noop", "refused")
        assert (summary.reason is None) == (summary.kind == "executed") or report.route == "boundary_action"
        assert summary.detail == report.body.detail


def test_the_repack_summary_carries_its_owned_bytes_and_rss():
    executed = next(r for r in REPORTS if r.route == "pinned_copy_repack" and r.repack.status == "executed")
    summary = executed.summary()
    assert (summary.boundary, summary.action, summary.kind) == ("attach", "repack", "executed")
    assert (summary.owned_before, summary.owned_after) == (6 << 20, (3 << 20) + (1 << 18))
    assert summary.delta == executed.repack.allocator_bytes_delta
    assert summary.memory_after == executed.repack.host_after


def test_a_route_without_a_summary_cannot_be_made():
    class Unfinished(RouteReport):
        route: Literal["unfinished"] = "unfinished"

    with pytest.raises(TypeError, match="abstract"):
        Unfinished()


def action(data: dict) -> ActionReport:
    result = ActionResult(action="my.watch", boundary="after_call", status="executed", data=data)
    return ActionReport(setup=ActionResultSetup(boundary_action=result))


def test_an_actions_summary_reads_what_it_observed_under_the_documented_names():
    summary = action(
        {"rss_before": 10, "rss_after": 8, "seconds": 0.5, "rss_anon_bytes": 3, "rss_file_bytes": 5}
    ).summary()
    assert (summary.rss_before, summary.rss_after, summary.elapsed_seconds) == (10, 8, 0.5)
    assert (summary.memory_after.rss_anon_bytes, summary.memory_after.rss_file_bytes) == (3, 5)
    assert action({"rss_bytes": 7}).summary().rss_after == 7  # one observation is shown after


@pytest.mark.parametrize("value", [-1, True, "8", 1.5, None, [8]])
def test_an_actions_data_that_is_not_a_byte_count_is_not_shown_as_one(value):
    summary = action({"rss_before": value, "rss_after": value, "seconds": value if value != 1.5 else -1.0}).summary()
    assert (summary.rss_before, summary.rss_after, summary.elapsed_seconds) == (None, None, None)
