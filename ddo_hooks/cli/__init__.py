"""The command-line layer: ``ddo-hooks`` and its commands, the demo, and the tables they print.

Modules: :mod:`~ddo_hooks.cli.main` (the parser and :func:`~ddo_hooks.cli.main.main`),
:mod:`~ddo_hooks.cli.commands` (what each command does),
:mod:`~ddo_hooks.cli.policies` (the policy files and presets the commands read),
:mod:`~ddo_hooks.cli.demo` (the demo run), :mod:`~ddo_hooks.cli.demo_view` (what it prints),
:mod:`~ddo_hooks.cli.demo_files` (its pipeline saved and loaded back, for a policy that pins from the files),
:mod:`~ddo_hooks.cli.demo_rss` (its own observation of the RSS on a CPU),
:mod:`~ddo_hooks.cli.table` (reports as tables), :mod:`~ddo_hooks.cli.rows` (a report's row in
them), :mod:`~ddo_hooks.cli.cells` (the text of their cells), :mod:`~ddo_hooks.cli.totals` (their
totals per boundary), :mod:`~ddo_hooks.cli.layout` (text tables that fit 100 columns),
:mod:`~ddo_hooks.cli.inputs` (the report files the commands read),
:mod:`~ddo_hooks.cli.summarize` (saved runs, one table per run), :mod:`~ddo_hooks.cli.plot` (saved
runs, drawn), :mod:`~ddo_hooks.cli.plot_points` (what it draws, where) and :mod:`~ddo_hooks.cli.schema` (the
JSON Schema files). A command imports what it needs when it runs: ``--help``, ``schema``,
``validate-policy``, ``validate-report`` and ``summarize`` never import torch, diffusers or transformers.
May import every layer.
"""

from ddo_hooks.cli.main import main

__all__ = ["main"]
