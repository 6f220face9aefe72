"""The report layer: the report models of every route, of both shapes, parsing and schema, the tracker, report files.

Modules: :mod:`~ddo_hooks.reports.base` (the strict base, the shared field types and the route
shape), :mod:`~ddo_hooks.reports.allocator` (the pinned host allocator's counters, which several reports hold),
:mod:`~ddo_hooks.reports.host_cache`, :mod:`~ddo_hooks.reports.boundary`,
:mod:`~ddo_hooks.reports.auxiliary_sources`, :mod:`~ddo_hooks.reports.repack`,
:mod:`~ddo_hooks.reports.done_components` and :mod:`~ddo_hooks.reports.ring` (one per route
family), :mod:`ddo_hooks.reports.ddo` (DDO's
own report shape), :mod:`~ddo_hooks.reports.parse` (any report, of either shape),
:mod:`~ddo_hooks.reports.envelope` (where a recorded report came from),
:mod:`~ddo_hooks.reports.records` (a report under its component, read from JSON Lines),
:mod:`~ddo_hooks.reports.tracker` (:class:`~ddo_hooks.reports.tracker.MetricsTracker`), which
writes its files through :mod:`~ddo_hooks.reports.atomic_file` (whole or not at all),
:mod:`~ddo_hooks.reports.json_lines` (the lines of JSON Lines text),
:mod:`~ddo_hooks.reports.sink_files` (a report sink's file and those it rotated away),
:mod:`~ddo_hooks.reports.files` (reading a saved run) and :mod:`~ddo_hooks.reports.file_problems`
(where an invalid one is wrong). Imports only the foundation modules.
"""

__all__ = ["REPORT_FILE_FORMS"]

REPORT_FILE_FORMS = (
    "JSON Lines of {component, report} records (as `ddo-hooks demo` writes), JSON Lines of bare reports (one "
    "report per line, DDO's own shape too), a tracker JSON document or one report"
)
"""What a report file may hold, as messages and help texts say it (here, so the CLI can say it cheaply)."""
