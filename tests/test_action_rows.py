"""What ``summarize`` shows of a user's own run: the RSS at every boundary, and each action's detail and time.

A no-op release (every release on a CPU-only torch) observes the host once, so a run without the demo's own RSS
action still has the process RSS at each boundary; an action of the user's is timed by the attachment around its
function, and its row says how long it took, with what it said it did below the table.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from ddo_hooks import BoundaryContext, HookPolicy, MetricsTracker, attach, register_action, unregister_action
from ddo_hooks.cli.inputs import read_reports
from ddo_hooks.cli.summarize import summary_lines
from ddo_hooks.release.host_cache import not_triggered, release_pytorch_host_cache
from ddo_hooks.sizes import format_size
from ddo_hooks.testing.tiny_pipelines import build_pipeline, call_kwargs

ACTION = "tests.note_something"


@pytest.fixture
def noting() -> Iterator[None]:
    @register_action(ACTION)
    def note(ctx: BoundaryContext) -> object:
        return ctx.action_report("executed", detail=f"noted call {ctx.call_index} at {ctx.boundary}")

    try:
        yield
    finally:
        unregister_action(ACTION)


@pytest.mark.parametrize(
    "report",
    [
        release_pytorch_host_cache(),  # disabled
        not_triggered("after_call", "no component left the pipeline"),
    ],
    ids=["disabled", "not_triggered"],
)
def test_a_noop_release_records_the_rss_once(report):
    release = report.release
    assert release.status == "noop"
    assert release.host_before is not None
    assert release.host_before == release.host_after  # one reading: nothing ran between them
    assert release.host_before.rss_bytes > 0
    summary = report.summary()
    assert (summary.rss_before, summary.rss_after) == (None, release.host_after.rss_bytes)  # shown once


def test_summarize_shows_a_user_action_with_its_time_and_detail_and_the_rss_of_every_row(noting, tmp_path):
    actions = {"after_call": {"actions": ["host_cache_release", ACTION]}}
    policy = HookPolicy.from_mapping({"version": 1, "boundaries": actions})
    pipe, tracker = build_pipeline("sd"), MetricsTracker()
    with attach(pipe, policy, tracker=tracker):
        for seed in range(2):
            pipe(**call_kwargs("sd", steps=1, seed=seed))
    timed = [r.setup.boundary_action for c, r in tracker.records() if c.startswith(ACTION)]
    assert len(timed) == 2
    assert all(result.elapsed_seconds is not None for result in timed)  # the attachment timed the action
    tracker.write_jsonl(tmp_path / "run.jsonl")
    text = "\n".join(summary_lines(read_reports([str(tmp_path / "run.jsonl")])))
    rows = re.findall(r"^(\d) +(\S+(?: \S+)?) +(executed|no-op: \w+) +- +- +(\S+ [KMG]iB|-) +(\S+ ms)$", text, re.M)
    labels = ("before_transformer", "before_vae", "after_call", f"+ {ACTION}")
    assert [(call, label) for call, label, *_ in rows] == [(str(call), label) for call in (1, 2) for label in labels]
    releases = [r.release for c, r in tracker.records() if c.startswith("host_cache_")]
    assert [rss for _, label, _, rss, _ in rows if not label.startswith("+")] == [
        format_size(r.host_after.rss_bytes) for r in releases
    ]  # every release row has the RSS, and every row its time (the action's too)
    assert f"{ACTION} (call 2, after_call): noted call 2 at after_call" in text  # its detail, in its words
