"""Where an attachment's reports go: its tracker, under this run's envelope, and the policy's sink.

The tracker is the one store in memory: :attr:`Recorder.reports` are the tracker's records of this
run, so an attachment keeps no second copy. Each process has its own run: a child forked after
:func:`~ddo_hooks.attach` records under a new run id, so that ``summarize`` never merges the two.

Examples:
    >>> from ddo_hooks import HookPolicy, MetricsTracker
    >>> from ddo_hooks import release_pytorch_host_cache
    >>> recorder = Recorder(HookPolicy.default(), MetricsTracker())
    >>> report = release_pytorch_host_cache(phase="after_call")
    >>> recorder.record("host_cache_after_call", report, "after_call", 1)
    >>> [r.release.phase for r in recorder.reports()]
    ['after_call']
    >>> len(recorder.drain()), recorder.reports()
    (1, [])
"""

from __future__ import annotations

import json
from typing import Any

from ddo_hooks.errors import PolicyError, ReportSinkError
from ddo_hooks.hooks.sink import ReportSink
from ddo_hooks.policy.model import HookPolicy
from ddo_hooks.reports.envelope import RecordEnvelope, new_run_id
from ddo_hooks.reports.tracker import MetricsTracker

__all__ = ["Recorder"]


class Recorder:
    """Records reports with one run's envelope.

    Args:
        policy: The attached policy (its ``report_sink`` is opened and probed here).
        tracker: Where the reports are kept.

    Raises:
        PolicyError: The policy's ``report_sink`` cannot be written.
    """

    def __init__(self, policy: HookPolicy, tracker: MetricsTracker) -> None:
        self.tracker = tracker
        self.run_id = new_run_id()
        self.sink = _open_sink(policy)

    def record(self, component: str, report: Any, boundary: str | None, index: int) -> None:
        """Record ``report`` in the tracker and append it to the sink.

        Raises:
            ReportSinkError: The sink write failed and the policy says ``report_sink_failure: raise``.
        """
        envelope = RecordEnvelope.now(run_id=self.run_id, call_index=index, boundary=boundary)
        self.tracker.record(report, component=component, envelope=envelope)
        if self.sink is not None:
            line = {"component": component, "report": report.model_dump(mode="json")}
            self.sink.write(json.dumps({**line, "envelope": envelope.model_dump(mode="json")}))

    def reports(self) -> list[Any]:
        """This run's reports that the tracker keeps, in order."""
        return [e.report for e in self.tracker.entries() if e.envelope is not None and e.envelope.run_id == self.run_id]

    def drain(self) -> list[Any]:
        """This run's reports, in order, taken out of the tracker."""
        return [e.report for e in self.tracker.drain(run_id=self.run_id)]

    def failures(self) -> list[str]:
        """The last sink failures (empty without a sink)."""
        return [] if self.sink is None else list(self.sink.failures)

    def note_sink_failure(self, error: ReportSinkError) -> None:
        """Keep a sink failure that no caller can be told of (a deferred boundary's)."""
        if self.sink is not None:
            self.sink.note(error)

    def after_fork(self) -> None:
        """In a forked child: a run of its own, and a sink lock no thread of the parent holds."""
        self.run_id = new_run_id()
        if self.sink is not None:
            self.sink.after_fork()


def _open_sink(policy: HookPolicy) -> ReportSink | None:
    """The policy's report sink, written to once now, so that a bad path fails at attach, not mid-call."""
    if policy.report_sink is None:
        return None
    sink = ReportSink(policy.resolve_path(policy.report_sink), on_failure=policy.report_sink_failure)
    try:
        sink.probe()
    except ReportSinkError as e:
        raise PolicyError(f"{policy.locate(('report_sink',))}: {e}") from e
    return sink
