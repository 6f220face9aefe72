"""Follow one option from the YAML to the action's argument: the files it crosses and the forms it takes.

Traces the ddo_hooks functions that run while a policy writing ``release: {min_releasable_bytes: 64MiB}``
loads, is attached to a tiny Stable Diffusion pipeline and runs one call, and notes each function
whose locals hold the option: its value as written (``'64MiB'``), as a number (``67108864``), or a
model or mapping that holds it under its name. Prints each file with the forms the option takes
there, then the totals: to the action's options (files met before the action ``host_cache_release`` ran,
and its own), and on to the argument of the release it calls; ``tests/test_option_corridor.py`` holds them.

    python scripts/option_corridor.py
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import Any

import ddo_hooks

OPTION, WRITTEN, NUMBER = "min_releasable_bytes", "64MiB", 64 * 2**20
ACTION = ("ddo_hooks/actions/host_cache_release.py", "host_cache_release")
POLICY = f"version: 1\nrelease: {{{OPTION}: {WRITTEN}}}\n"
PACKAGE = str(Path(ddo_hooks.__file__).parent)


def form_of(value: Any) -> str | None:
    """The form the option takes in ``value``, or ``None`` where it does not hold it."""
    if isinstance(value, str) and value == WRITTEN:
        return "str"
    if type(value) is int and value == NUMBER:
        return "int"
    if isinstance(value, Mapping) and OPTION in value and form_of(value[OPTION]) is not None:
        return f"mapping of {form_of(value[OPTION])}"
    held = getattr(type(value), "model_fields", None)
    if held is not None and OPTION in held and form_of(getattr(value, OPTION, None)) is not None:
        return f"{type(value).__name__} of {form_of(getattr(value, OPTION))}"
    return None


def corridor() -> tuple[dict[str, set[str]], set[str]]:
    """Each ddo_hooks file whose functions held the option, with the forms they held it in; and those past the action.

    A file is past the action where it first held the option after the action's function was called.
    """
    from ddo_hooks import HookPolicy, attach
    from ddo_hooks.testing.tiny_pipelines import build_pipeline, call_kwargs

    pipe = build_pipeline("sd")
    found: dict[str, set[str]] = {}
    past: set[str] = set()
    started = False

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal started
        if not frame.f_code.co_filename.startswith(PACKAGE):
            return None
        name = Path(frame.f_code.co_filename).relative_to(Path(PACKAGE).parent).as_posix()
        started = started or (event == "call" and (name, frame.f_code.co_name) == ACTION)
        if event in ("call", "return"):
            for value in list(frame.f_locals.values()):
                form = form_of(value)
                if form is not None:
                    if started and name not in found and name != ACTION[0]:
                        past.add(name)
                    found.setdefault(name, set()).add(form)
        return tracer

    sys.settrace(tracer)
    try:
        policy = HookPolicy.from_yaml_text(POLICY)
        with attach(pipe, policy):
            pipe(**call_kwargs("sd", steps=1))
    finally:
        sys.settrace(None)
    return found, past


def main() -> int:
    found, past = corridor()
    for name, held in sorted(found.items()):
        print(f"{name}: {', '.join(sorted(held))}{' (past the action)' if name in past else ''}")
    forms = sorted({form for held in found.values() for form in held})
    values = sorted({form.rsplit(" of ", 1)[-1] for form in forms})
    print(f"{len(found) - len(past)} files to the action's options, {len(found)} to the release's argument")
    held = "; ".join(forms)
    print(f"the value in {len(values)} forms ({', '.join(values)}), {len(forms)} with what holds it: {held}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
