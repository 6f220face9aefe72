"""What each ``ddo-hooks`` command does, given its parsed arguments (:mod:`~ddo_hooks.cli.main` parses them).

Each returns the command's exit status, or raises :class:`~ddo_hooks.errors.DdoHooksError` for a user error
(:func:`~ddo_hooks.cli.main.main` prints it). Each imports what it needs when it runs, so that ``--help``
imports no model.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from ddo_hooks.cli.inputs import cycle_collector_off, other_kind, read_reports
from ddo_hooks.errors import DdoHooksError, InvalidArgumentError

__all__ = [
    "SCHEMA_NAMES",
    "demo_command",
    "plot_command",
    "schema_command",
    "summarize_command",
    "validate_policy_command",
    "validate_report_command",
]

SCHEMA_NAMES = ("policy", "report", "record")
"""What ``ddo-hooks schema`` prints: the schema of a policy, a report, or a record of a report file."""


def demo_command(args: argparse.Namespace) -> int:
    """``ddo-hooks demo``: run a tiny real pipeline with the policy attached and show what each boundary did."""
    from ddo_hooks.cli import demo
    from ddo_hooks.cli.demo_view import format_result
    from ddo_hooks.cli.policies import policy_or_preset
    from ddo_hooks.cli.table import arrow_for

    policy = policy_or_preset(args.policy) if args.policy else None
    result = demo.run_demo(
        family=args.family, policy=policy, device=args.device, steps=args.steps, calls=args.calls, report=args.report
    )
    print(format_result(result, arrow=arrow_for(sys.stdout)))
    return 0


def validate_policy_command(args: argparse.Namespace) -> int:
    """``ddo-hooks validate-policy FILE``: check a policy file or a preset, and say what it does at each boundary."""
    from ddo_hooks.boundaries import BOUNDARIES
    from ddo_hooks.cli import policies
    from ddo_hooks.cli.layout import wrap_text

    path = policies.preset_path(args.file) or args.file
    try:
        policy = policies.policy_or_preset(args.file)
    except DdoHooksError as e:
        raise other_kind(e, args.file, "report", "validate-report") from e
    if path != args.file:
        print(f"{args.file}: the packaged preset {path}")
    if not policy.enabled:
        print(f"{args.file}: valid policy (version {policy.version}), disabled (enabled: false): no boundary acts")
        return 0
    missing = policies.unregistered(policy)
    names = ", ".join(dict.fromkeys(name for name, _ in missing))
    valid = f"valid policy (version {policy.version}, device {policy.device})"
    first = f"{args.file}: {valid}"
    if missing and not args.allow_unregistered:
        first = f"{args.file}: attach() would refuse it: {names} is not registered here (otherwise a {valid})"
    elif missing:
        first += f"; {names} to be registered by the host before attach() (--allow-unregistered)"
    print(wrap_text(first) if missing else first)  # a valid policy's line stays whole, however long its path
    for name in BOUNDARIES:
        boundary = policy.boundary(name)
        actions = ", ".join(map(policies.action_text, boundary.actions)) if boundary.enabled else "off"
        print(wrap_text(f"  {name}: {actions}", indent="    "))
    for line in [*policies.size_lines(policy, path), *policies.setting_lines(policy)]:
        print(f"  {line}")
    if missing and not args.allow_unregistered:
        from ddo_hooks.actions.registry import ENTRY_POINT_GROUP

        for name, where in missing:
            print(f"{where}: action {name!r} is not registered here", file=sys.stderr)
        hint = (
            f"  attach() refuses an action no code registered: install the package that provides it (with "
            f"@ddo_hooks.register_action or a {ENTRY_POINT_GROUP!r} entry point), remove it from the policy, or, "
            "where the host registers it before attach(), pass --allow-unregistered"
        )
        print(wrap_text(hint, indent="    "), file=sys.stderr)
        return 1
    return 0


def validate_report_command(args: argparse.Namespace) -> int:
    """``ddo-hooks validate-report FILE``: check a file of reports, and count its routes and components."""
    opened = next(read_reports([args.file]))  # a line cut off: left out, with a warning printed as it is passed
    records = [(entry.component, entry.report) for entry in opened.entries]
    routes = Counter(report.route for _, report in records)
    components = list(dict.fromkeys(c for c, _ in records if c is not None))
    route_text = ", ".join(f"{route} x{n}" for route, n in routes.items())
    component_text = ", ".join(components) if components else "none (a bare report)"
    count = len(records)
    noun = "report" if count == 1 else "reports"
    from ddo_hooks.cli.layout import wrap_text

    cut = len(opened.warnings)  # each names a line cut off mid-record, left out
    left_out = "" if not cut else f"; {cut} cut line{'s' * (cut > 1)} left out (see the warning{'s' * (cut > 1)})"
    print(f"{args.file}: valid {opened.form}, {count} {noun}{left_out}")
    print(wrap_text(f"  routes: {route_text}", indent="    "))
    print(wrap_text(f"  components: {component_text}", indent="    "))
    return 0


def schema_command(args: argparse.Namespace) -> int:
    """``ddo-hooks schema SCHEMA``: print the JSON Schema of a policy, a report or a record."""
    from ddo_hooks.cli import schema

    if args.which is None:
        args.usage_error("say which schema to print: policy, report or record (e.g. ddo-hooks schema report)")
    if args.which not in SCHEMA_NAMES:
        from ddo_hooks._diagnostics import did_you_mean_hint

        hint = did_you_mean_hint(args.which, SCHEMA_NAMES)
        args.usage_error(f"{args.which!r} is not a schema; {hint}print one of policy, report or record")

    sys.stdout.write(schema.render(schema.generated_schema(args.which)))
    return 0


def summarize_command(args: argparse.Namespace) -> int:
    """``ddo-hooks summarize FILE...``: show saved runs as tables, with totals per boundary."""
    with cycle_collector_off():  # from the imports on: building the report models leaves a few hundred objects
        from ddo_hooks.cli.summarize import summary_lines
        from ddo_hooks.cli.table import arrow_for

        for piece in summary_lines(read_reports(args.files, rotated=True), arrow=arrow_for(sys.stdout)):
            print(piece)
    return 0


def plot_command(args: argparse.Namespace) -> int:
    """``ddo-hooks plot FILE... -o PNG``: draw saved runs."""
    from pathlib import Path

    from ddo_hooks.cli.plot import draw_runs
    from ddo_hooks.hooks.sink import missing_folder
    from ddo_hooks.reports.atomic_file import NotRegularFile, check_target

    out = Path(args.output)
    if out.is_dir() and not out.is_symlink():
        raise InvalidArgumentError(f"-o {out}: is a directory; give a file path such as {out / 'run.png'}")
    if out.suffix.lower() != ".png":
        raise InvalidArgumentError(f"-o {out}: the plot is a PNG image; give a name ending in .png (e.g. run.png)")
    problem = missing_folder(out)
    if problem is not None:
        raise InvalidArgumentError(f"-o {out}: {problem}")
    try:  # before drawing: the rule every file the project writes follows
        check_target(out)
    except NotRegularFile as e:
        raise InvalidArgumentError(f"-o {e}") from None
    written = draw_runs(read_reports(args.files, rotated=True), out)
    print(f"wrote {written}")
    return 0
