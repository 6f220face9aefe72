"""The ``ddo-hooks`` command line (also ``python -m ddo_hooks``).

Commands: ``demo`` (run a tiny real pipeline with the policy attached and show what each
boundary did), ``validate-policy``, ``validate-report``, ``schema``, ``summarize`` and ``plot``. Exit
status: 0 on success (also when the reader of the output goes away, as ``| head`` does), 1 for
a user error (a missing, unreadable or invalid file; the message names the file, the line and
column, the key and the fix, or the command that reads a file of the other kind), 2 for a usage
error.

This module parses the arguments; :mod:`~ddo_hooks.cli.commands` runs the command they name.
:func:`main` is the last line of defence: whatever goes wrong writing the command's own output is
one line on stderr and exit status 1, never a traceback. A standard output that is closed
(``>&-``) is refused before anything runs; a name the output's encoding cannot write (a file name
that is not UTF-8, with ``PYTHONIOENCODING=utf-8``) ends the command with a line that says how to
write it; and a message on stderr that its encoding cannot write is written with backslash escapes.

Examples:
    >>> import contextlib, io
    >>> from importlib import resources
    >>> policy = resources.files("ddo_hooks.policy") / "presets" / "default.yaml"
    >>> with contextlib.redirect_stdout(io.StringIO()) as out:
    ...     status = main(["validate-policy", str(policy)])
    >>> status, out.getvalue().splitlines()[:2]  # doctest: +ELLIPSIS +NORMALIZE_WHITESPACE
    (0, ['...default.yaml: valid policy (version 1, device cuda)',
         '  before_transformer: host_cache_release'])
    >>> main(["schema", "drawing"])
    2
    >>> main(["schema"])
    2
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from ddo_hooks import __version__
from ddo_hooks.cli.commands import (
    SCHEMA_NAMES,
    demo_command,
    plot_command,
    schema_command,
    summarize_command,
    validate_policy_command,
    validate_report_command,
)
from ddo_hooks.cli.demo import DEFAULT_REPORT, DEMO_POLICY, FAMILIES
from ddo_hooks.errors import DdoHooksError, InvalidArgumentError
from ddo_hooks.policy import PRESETS
from ddo_hooks.reports import REPORT_FILE_FORMS

__all__ = ["PITCH", "SCHEMA_NAMES", "build_parser", "main"]

PITCH = (
    "For people who run large diffusion models through diffusers with the weights offloaded to host memory: "
    'attach(pipe, "smallest-box") keeps each weight once in host memory, its file\'s own pages pinned in place, and '
    "hands back a validated report of what each step did."
)
"""What ddo-hooks is, in one sentence: the CLI's help says it, and the README, the docs' home, ``mkdocs.yml``'s
``site_description`` and the package's description say it word for word (``tests/test_pitch.py``)."""

# -- the parser ----------------------------------------------------------------------------------


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value


def _family(text: str) -> str:
    if text not in FAMILIES:
        from ddo_hooks._diagnostics import did_you_mean_hint

        hint = did_you_mean_hint(text, FAMILIES)
        raise argparse.ArgumentTypeError(f"{text!r} is not a demo pipeline; {hint}use one of {', '.join(FAMILIES)}")
    return text


def _device(text: str) -> Any:
    from ddo_hooks.cli.demo import parse_demo_device

    try:
        return parse_demo_device(text)
    except InvalidArgumentError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def _command(
    commands: Any, name: str, handler: Any, summary: str, description: str, *, reads: str | None = "file"
) -> argparse.ArgumentParser:
    """A command's sub-parser; ``reads``: ``"file"`` (one file), ``"files"`` (saved runs: report files) or ``None``."""
    parser = commands.add_parser(name, help=summary, description=description)
    if reads == "file":
        parser.add_argument("file", metavar="FILE", help="the file to read")
    elif reads == "files":
        parser.add_argument("files", nargs="+", metavar="FILE", help="report files (JSON Lines or tracker JSON)")
    parser.set_defaults(handler=handler)
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The ``ddo-hooks`` argument parser, with one sub-parser per command."""
    parser = argparse.ArgumentParser(
        prog="ddo-hooks",
        description=PITCH,
        epilog="Start with: ddo-hooks demo. Run 'ddo-hooks COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = _command(
        commands,
        "demo",
        demo_command,
        "run a tiny real pipeline with the policy attached and show what each boundary did",
        f"Build a tiny real diffusers pipeline (random weights, nothing downloaded), attach the policy "
        f"({DEMO_POLICY} unless --policy names another), run one call with the prompt, drop the text encoders, run "
        "the remaining calls with prompt embeddings, then print one row per report and write the reports as JSON "
        "Lines. A policy that pins the weights from their files gets the pipeline saved through safetensors and "
        "loaded back. On CUDA the model components use group offloading, so pinned host memory exists; on the CPU "
        "the table shows why each boundary was a no-op, and attach says what it would pin on a CUDA machine.",
        reads=None,
    )
    demo.add_argument(
        "--policy",
        metavar="FILE|PRESET",
        help=f"a YAML hook policy, or a preset: {', '.join(PRESETS)} (default: {DEMO_POLICY})",
    )
    demo.add_argument(
        "--device", type=_device, metavar="DEV", help="cpu, cuda or cuda:N (default: cuda when available, else cpu)"
    )
    demo.add_argument(
        "--family",
        type=_family,
        default="flux",
        metavar="FAMILY",
        help=f"the pipeline to build: {', '.join(FAMILIES)} (default: flux)",
    )
    demo.add_argument("--steps", type=_positive, default=2, metavar="N", help="denoising steps per call (default: 2)")
    demo.add_argument("--calls", type=_positive, default=2, metavar="N", help="pipeline calls in total (default: 2)")
    demo.add_argument(
        "--report", default=DEFAULT_REPORT, metavar="FILE", help=f"JSON Lines output (default: {DEFAULT_REPORT})"
    )

    checked = "Exit 0 with a one-line summary, or 1 with file:line:col: key: problem."
    validate = _command(
        commands,
        "validate-policy",
        validate_policy_command,
        "check a YAML hook policy, or a preset",
        f"Check a policy: a YAML file, or a preset's name ({', '.join(PRESETS)}) where no file of that name exists. "
        f"{checked} An action that no code in this Python environment registers is refused too (exit 1), as "
        "attach() would refuse it.",
    )
    validate.add_argument(
        "--allow-unregistered",
        action="store_true",
        help="accept actions not registered here, for a host that registers them before attach() (exit 0)",
    )
    _command(
        commands,
        "validate-report",
        validate_report_command,
        "check a file of reports (JSON Lines or JSON)",
        f"Check a file of reports: {REPORT_FILE_FORMS}. {checked} A line cut off mid-record (its writer crashed, "
        "or the disk filled) is left out with a warning naming it, and the other lines are checked.",
    )
    schema = _command(
        commands,
        "schema",
        schema_command,
        "print the JSON Schema of a policy or a report",
        "Print the JSON Schema of a hook policy, a report (of either shape), or a record of a report file (a report "
        "with its envelope: run, call, boundary, time, process, rank): the files in ddo_hooks/schemas/.",
        reads=None,
    )
    schema.add_argument("which", nargs="?", metavar="SCHEMA", help="which schema to print: policy, report or record")
    schema.set_defaults(usage_error=schema.error)
    _command(
        commands,
        "summarize",
        summarize_command,
        "show saved runs as tables, with totals per boundary",
        "Show the reports of saved runs (e.g. the demo's JSON Lines, or one file per worker or rank) as one "
        "table per run (from the records' envelopes: run id, call, host, pid, rank), then totals per boundary "
        "across calls: per run, per rank and in total. Calls of records without an envelope are inferred from "
        "the boundary order.",
        reads="files",
    )
    plot = _command(
        commands,
        "plot",
        plot_command,
        "draw the pinned bytes and the process RSS at each boundary of saved runs (needs matplotlib)",
        "Draw, from the host_cache_release reports of saved runs, the pinned bytes the allocator owned and "
        "the process RSS before and after each release, per call and boundary, one series per run (or "
        "rank), with the bytes released marked; where no release read anything (a CPU run), the RSS that actions "
        "observed at each boundary (as the demo records it). Needs matplotlib (the plot extra).",
        reads="files",
    )
    plot.add_argument("-o", "--output", required=True, metavar="PNG", help="the image to write, e.g. run.png")
    return parser


COMMANDS = ("demo", "validate-policy", "validate-report", "schema", "summarize", "plot")
"""The commands, in the order the help lists them."""


def _refuse_unknown_command(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """A first word that names no command is a usage error in this project's words, with the nearest command."""
    if not argv or argv[0].startswith("-") or argv[0] in COMMANDS:
        return
    from ddo_hooks._diagnostics import did_you_mean_hint

    hint = did_you_mean_hint(argv[0], COMMANDS)
    parser.error(f"{argv[0]!r} is not a command; {hint}the commands: {', '.join(COMMANDS)}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``ddo-hooks`` command line.

    Args:
        argv: The arguments after the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit status: 0 on success, 1 for a user error, 2 for a usage error.
    """
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if sys.stdout is None or getattr(sys.stdout, "closed", False):  # `>&-`: nowhere to say what was done
        command = f"ddo-hooks {argv[0]}" if argv and argv[0] in COMMANDS else "ddo-hooks"
        _say(f"{command}: standard output is closed; give the output somewhere to go (e.g. >/dev/null)")
        return 1
    try:
        _refuse_unknown_command(parser, argv)
        args = parser.parse_args(argv)
        if args.command == "schema" and args.which not in SCHEMA_NAMES:  # missing or unknown: a usage error
            return schema_command(args)
    except SystemExit as e:  # argparse exits after --help/--version (0) and on usage errors (2)
        return e.code if isinstance(e.code, int) else 2
    try:
        status = int(args.handler(args))
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return status
    except DdoHooksError as e:
        _say(str(e))
    except BrokenPipeError:  # e.g. `ddo-hooks schema report | head -1`: the reader has what it wanted
        with contextlib.suppress(OSError, ValueError):  # the final flush goes nowhere
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except UnicodeEncodeError as e:  # a name the output's encoding cannot write (not UTF-8, as a file name may be)
        bad = e.object[e.start : e.end] if isinstance(e.object, str) else ""
        _say(
            f"ddo-hooks {args.command}: cannot write the output: {e.encoding} cannot encode {bad!r} (a name that is "
            f"not {e.encoding}?); set PYTHONIOENCODING={e.encoding}:surrogateescape to write such names as their bytes"
        )
    except (OSError, UnicodeDecodeError) as e:
        filename = getattr(e, "filename", None)
        where = f"{filename}: " if filename else ""
        _say(f"ddo-hooks {args.command}: {where}{getattr(e, 'strerror', None) or e}")
    except KeyboardInterrupt:
        _say(f"ddo-hooks {args.command}: interrupted")
        return 130
    return 1


def _say(line: str) -> None:
    """Write one line on stderr: what its encoding cannot write as backslash escapes; nothing where it is closed."""
    stream = sys.stderr
    with contextlib.suppress(OSError, ValueError, AttributeError):  # nowhere left to say it
        try:
            print(line, file=stream)
        except UnicodeEncodeError:
            encoding = getattr(stream, "encoding", None) or "utf-8"
            print(line.encode(encoding, "backslashreplace").decode(encoding), file=stream)
