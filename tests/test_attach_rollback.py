"""One rule for attach and detach: the steps done are undone in reverse when one raises, and detach undoes them all.

A step that raises during :func:`~ddo_hooks.attach` (a plugin's ``on_attach``, Ctrl-C in it, pinning from the
files) leaves the pipeline exactly as before attach: its class, its attributes and every module's, no hook, no
signal, no table of ddo_hooks holding it, nothing recorded, and not attached (issue 51, B medium).
"""

from __future__ import annotations

import pytest
import torch
from support.plugin_actions import LOG, entry_point

from ddo_hooks import HookPolicy, MetricsTracker, attach
from ddo_hooks._compat.diffusers import offload_groups
from ddo_hooks.actions import registry
from ddo_hooks.hooks.runner import BoundaryRunner
from ddo_hooks.ledger import LEDGER
from ddo_hooks.release import from_files
from ddo_hooks.testing.tiny_pipelines import build_pipeline, call_kwargs

PLUGINS = {
    "plugin.steps": "STEPS",
    "plugin.raises": "RAISES",
    "plugin.interrupted": "INTERRUPTED",
    "plugin.undo_raises": "UNDO_RAISES",
}


@pytest.fixture(autouse=True)
def plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plugin actions installed as entry points; what loading them registers goes with the test."""
    monkeypatch.setattr(registry, "entry_points", lambda group: [entry_point(n, a) for n, a in PLUGINS.items()])
    monkeypatch.setattr(registry.REGISTRY, "_actions", dict(registry.REGISTRY._actions))
    LOG.clear()


def policy(*actions: object, tmp_path=None, **extra: object) -> HookPolicy:
    sink = {} if tmp_path is None else {"report_sink": str(tmp_path / "reports.jsonl")}
    boundaries = {"after_call": {"actions": list(actions)}}
    return HookPolicy.from_mapping({"version": 1, "boundaries": boundaries, **sink, **extra})


def modules_of(pipe):
    for name, component in pipe.components.items():
        if isinstance(component, torch.nn.Module):
            for sub, module in component.named_modules():
                yield f"{name}.{sub}".rstrip("."), module


def everything(pipe) -> dict[str, object]:
    """What an attachment may change: the pipeline's class and attributes, each module's, and ddo_hooks' tables."""
    modules = dict(modules_of(pipe))
    return {
        "class": type(pipe),
        "pipeline": {k: id(v) for k, v in vars(pipe).items()},
        "modules": {path: {k: id(v) for k, v in vars(m).items()} for path, m in modules.items()},
        "hooks": {path: (len(m._forward_pre_hooks), len(m._forward_hooks)) for path, m in modules.items()},
        "attached": LEDGER.read(pipe).attached is not None,
        "signals": LEDGER.read(pipe).signals is not None,
        "runners": [r for r, _ in LEDGER.holders("settles") if isinstance(r, BoundaryRunner) and r._pipeline() is pipe],
        "pinned": [p for p, m in modules.items() if LEDGER.read(m).pinned is not None],
        "rebound": [p for p, m in modules.items() if LEDGER.read(m).rebound is not None],
        "repacked": [p for p, m in modules.items() for g in offload_groups(m) if LEDGER.read(g).repacked],
    }


@pytest.mark.parametrize("raising", ["plugin.raises", "plugin.interrupted"])
def test_an_on_attach_that_raises_leaves_the_pipeline_exactly_as_before_attach(raising, tmp_path):
    pipe = build_pipeline("sd")
    before = everything(pipe)
    tracker = MetricsTracker()
    error = RuntimeError if raising == "plugin.raises" else KeyboardInterrupt
    with pytest.raises(error):
        attach(pipe, policy("host_cache_release", "plugin.steps", raising, tmp_path=tmp_path), tracker=tracker)
    assert list(LOG) == ["plugin.steps attach", f"{raising} attach", "plugin.steps detach"]  # the one done, undone
    assert everything(pipe) == before
    pipe(**call_kwargs("sd"))  # nothing of the failed attachment runs any more
    assert list(LOG) == ["plugin.steps attach", f"{raising} attach", "plugin.steps detach"]
    assert tracker.records() == []
    assert (tmp_path / "reports.jsonl").read_text() == ""  # probed at attach, as a sink is, and never written
    with attach(pipe, policy("host_cache_release")) as again:  # nothing is in the way of the next attach
        pipe(**call_kwargs("sd"))
    assert len(again.reports) == 3  # one per boundary: the next attach runs as any first one


def test_a_step_that_raises_after_the_actions_undoes_their_steps_in_reverse(monkeypatch: pytest.MonkeyPatch):
    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("pinning broke")

    monkeypatch.setattr(from_files, "pin_from_files", broken)
    pipe = build_pipeline("sd")
    before = everything(pipe)
    written = policy("plugin.steps", {"name": "release_done_components", "options": {"stable_files": True}},
                     pinned_copies={"from_files": "register"})  # fmt: skip
    with pytest.raises(OSError, match="pinning broke"):
        attach(pipe, written)
    assert list(LOG) == ["plugin.steps attach", "plugin.steps detach"]
    assert everything(pipe) == before


def test_detach_runs_the_steps_at_detach_in_the_reverse_order_of_attach():
    pipe = build_pipeline("sd")
    attachment = attach(pipe, policy("plugin.steps", "host_cache_release"))
    assert list(LOG) == ["plugin.steps attach"]
    pipe(**call_kwargs("sd"))
    attachment.detach()
    attachment.detach()  # a second detach does nothing
    assert list(LOG) == ["plugin.steps attach", "plugin.steps ran", "plugin.steps detach"]
    assert not everything(pipe)["attached"]


def test_a_step_at_detach_that_raises_is_raised_once_every_other_step_is_undone():
    pipe = build_pipeline("sd")
    before = everything(pipe)
    attachment = attach(pipe, policy("plugin.steps", "plugin.undo_raises"))
    with pytest.raises(OSError, match="the plugin's step at detach broke") as raised:
        attachment.detach()
    assert raised.value.__notes__ == ["ddo_hooks: while undoing the steps of the action 'plugin.undo_raises'"]
    assert list(LOG) == ["plugin.steps attach", "plugin.undo_raises attach", "plugin.undo_raises detach",
                         "plugin.steps detach"]  # fmt: skip
    assert attachment.detached
    assert everything(pipe) == before  # the signals too, undone after the step that raised
    attachment.detach()  # and nothing is left to undo
    assert list(LOG)[-1] == "plugin.steps detach"


def test_an_action_registered_with_its_steps_takes_them_as_an_entry_points_declaration_does():
    from ddo_hooks import register_action, unregister_action

    done: list[str] = []
    register_action(
        "plugin.registered",
        lambda ctx: None,
        on_attach=lambda pipe, entries: done.append(f"attach {len(entries)}"),
        on_detach=lambda pipe: done.append("detach"),
        before_call=lambda pipe: done.append(f"call {type(pipe).__name__}"),
    )
    try:
        pipe = build_pipeline("sd")
        with attach(pipe, policy("plugin.registered", "host_cache_release")):
            pipe(**call_kwargs("sd"))
    finally:
        unregister_action("plugin.registered")
    assert done == ["attach 1", "call StableDiffusionPipeline", "detach"]
