"""Actions another package provides through the ``ddo_hooks.actions`` entry-point group, each with steps at attach.

Each one's steps append to :data:`LOG`, so that a test reads in which order they ran; the tests load them with
:func:`entry_point` as ``support.plugin_actions:<NAME>`` and clear the log themselves.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint
from typing import Any

from ddo_hooks.actions.contract import BoundaryContext, RegisteredAction, ResolvedAction

LOG: list[str] = []
"""What the steps and the actions did, in order: ``"<action> attach"``, ``"<action> detach"``, ``"<action> ran"``."""


def entry_point(name: str, attribute: str) -> EntryPoint:
    """The entry point of the declaration ``attribute`` of this module, under the action name ``name``."""
    return EntryPoint(name, f"support.plugin_actions:{attribute}", "ddo_hooks.actions")


def _ran(ctx: BoundaryContext[Any]) -> None:
    LOG.append(f"{ctx.action} ran")


def _detach(name: str, error: BaseException | None = None) -> Any:
    def detach(pipeline: Any) -> None:
        LOG.append(f"{name} detach")
        if error is not None:
            raise error

    return detach


def _attach(name: str, error: BaseException | None = None) -> Any:
    def attach(pipeline: Any, entries: tuple[ResolvedAction[Any], ...]) -> None:
        LOG.append(f"{name} attach")
        if error is not None:
            raise error

    return attach


STEPS = RegisteredAction(
    "plugin.steps", _ran, "plugin_steps", on_attach=_attach("plugin.steps"), on_detach=_detach("plugin.steps")
)
"""An action whose steps at attach and detach only say that they ran."""

RAISES = RegisteredAction(
    "plugin.raises",
    _ran,
    "plugin_raises",
    on_attach=_attach("plugin.raises", RuntimeError("the plugin's step at attach broke")),
    on_detach=_detach("plugin.raises"),
)
"""An action whose step at attach raises (so its step at detach must never run)."""

INTERRUPTED = RegisteredAction(
    "plugin.interrupted",
    _ran,
    "plugin_interrupted",
    on_attach=_attach("plugin.interrupted", KeyboardInterrupt()),
    on_detach=_detach("plugin.interrupted"),
)
"""An action whose step at attach is interrupted (Ctrl-C)."""

UNDO_RAISES = RegisteredAction(
    "plugin.undo_raises",
    _ran,
    "plugin_undo_raises",
    on_attach=_attach("plugin.undo_raises"),
    on_detach=_detach("plugin.undo_raises", OSError("the plugin's step at detach broke")),
)
"""An action whose step at detach raises (the steps before it must still be undone)."""
