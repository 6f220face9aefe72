"""Pluggable boundary actions: registration, entry points, context, results, refusals."""

from __future__ import annotations

import json
import textwrap
from importlib.metadata import entry_points

import pytest
import torch
from diffusers import DDPMPipeline, DDPMScheduler, PNDMPipeline, PNDMScheduler, UNet2DModel
from support.fakes import FakeHostAllocator, MiB

from ddo_hooks import (
    ActionReport,
    BoundaryRefusalReport,
    BoundaryRefusedError,
    HostCacheReleaseReport,
    InvalidArgumentError,
    MetricsTracker,
    PolicyError,
    attach,
    register_action,
    unregister_action,
)
from ddo_hooks.actions.contract import ActionOptions, BoundaryContext
from ddo_hooks.actions.registry import ENTRY_POINT_GROUP, available_actions, resolve_action
from ddo_hooks.hooks.runner import bind_actions
from ddo_hooks.policy.model import HookPolicy
from ddo_hooks.release.allocator import use_backend
from ddo_hooks.testing.tiny_pipelines import build_pipeline, call_kwargs, embed_prompt


@pytest.fixture
def registered():
    names = []

    def register(name, function, **kwargs):
        register_action(name, **kwargs)(function)
        names.append(name)

    yield register
    for name in names:
        unregister_action(name)


def policy_with(actions, **extra):
    boundaries = {b: {"actions": actions} for b in ("before_transformer", "before_vae", "after_call")}
    return HookPolicy.from_mapping({"version": 1, "boundaries": boundaries, **extra})


def test_a_registered_action_runs_at_every_boundary_in_policy_order(registered):
    seen = []

    def note(ctx):
        seen.append((ctx.boundary, ctx.action, ctx.call_index, ctx.device, dict(ctx.options)))
        return ctx.action_report("executed", detail="noted", data={"call": ctx.call_index})

    registered("note", note)
    pipe = build_pipeline("sd")
    policy = policy_with(["host_cache_release", {"name": "note", "options": {"label": "x"}}], device="cuda:1")
    with attach(pipe, policy) as attachment:
        pipe(**call_kwargs("sd"))
    assert seen == [
        ("before_transformer", "note", 1, "cuda:1", {"label": "x"}),
        ("before_vae", "note", 1, "cuda:1", {"label": "x"}),
        ("after_call", "note", 1, "cuda:1", {"label": "x"}),
    ]
    kinds = [type(r).__name__ for r in attachment.reports]
    assert kinds == ["HostCacheReleaseReport", "ActionReport"] * 3
    assert attachment.tracker.components() == (
        "host_cache_before_transformer",
        "note_before_transformer",
        "host_cache_before_vae",
        "note_before_vae",
        "host_cache_after_call",
        "note_after_call",
    )
    note_report = attachment.reports[1]
    assert isinstance(note_report, ActionReport)
    assert note_report.setup.boundary_action.data == {"call": 1}


def test_an_action_returning_nothing_records_nothing(registered):
    registered("silent", lambda ctx: None)
    pipe = build_pipeline("sd")
    with attach(pipe, policy_with(["silent"])) as attachment:
        pipe(**call_kwargs("sd"))
    assert attachment.reports == []


def test_an_action_returning_something_else_is_an_error_naming_it(registered):
    registered("sloppy", lambda ctx: {"ok": True})
    pipe = build_pipeline("sd")
    with (
        attach(pipe, policy_with(["sloppy"])),
        pytest.raises(InvalidArgumentError, match="action 'sloppy' returned dict"),
    ):
        pipe(**call_kwargs("sd"))


def a_context(action: str = "note", boundary: str = "after_call") -> BoundaryContext:
    return BoundaryContext(
        pipeline=None,
        boundary=boundary,
        action=action,
        call_index=1,
        device="cuda",
        tracker=MetricsTracker(),
        policy=HookPolicy.default(),
    )


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"status": "exploded"}, "status: 'exploded' is not one of executed, noop"),
        ({"status": "executed", "detail": 5}, "detail: expected a string, got 5"),
        ({"status": "executed", "data": {1, 2}}, "data: expected an object, got a set"),
        ({"status": "executed", "data": []}, "data: expected an object, got a list"),
        ({"status": "executed", "data": {"ratio": float("nan")}}, "nan at data.ratio is not a JSON number"),
        ({"status": "executed", "data": {1: 2}}, "[key]: expected a string, got 1"),
        ({"status": "executed", "detail": "half \ud800"}, "a string holds half of a surrogate pair"),
    ],
    ids=["status", "detail", "set", "empty-list", "nan", "int-key", "surrogate"],
)
def test_action_report_raises_the_documented_invalid_argument_error_naming_the_action(arguments, problem):
    with pytest.raises(InvalidArgumentError) as caught:
        a_context().action_report(**arguments)
    message = str(caught.value)
    assert message.startswith("action 'note' at after_call: its report is not valid (")
    assert problem in message
    assert message.endswith(
        "pass status 'executed' or 'noop', a str detail and JSON data (a dict of str keys to dicts, lists, str, "
        "finite numbers, bools and None)"
    )


def test_action_report_keeps_a_valid_report_and_takes_no_data_as_an_empty_dict():
    report = a_context().action_report("noop", detail="nothing to do")
    assert (report.body.status, report.body.detail, report.body.data) == ("noop", "nothing to do", {})


def test_an_action_that_refuses_is_recorded_as_a_refusal(registered):
    def busy(ctx):
        raise BoundaryRefusedError("loading", "my loader is still busy")

    registered("busy", busy)
    pipe = build_pipeline("sd")
    with attach(pipe, policy_with(["busy"])) as attachment:
        pipe(**call_kwargs("sd"))
    assert all(isinstance(r, BoundaryRefusalReport) for r in attachment.reports)
    assert [r.setup.boundary_refusal.detail for r in attachment.reports] == ["my loader is still busy"] * 3


def test_custom_actions_obey_the_same_refusals(registered):
    calls = []
    registered("count", lambda ctx: calls.append(ctx.boundary))
    pipe = build_pipeline("sd")
    with attach(pipe, policy_with(["count"])) as attachment, attachment.loading():
        pipe(**call_kwargs("sd"))
    assert calls == []
    assert [r.setup.boundary_refusal.reason for r in attachment.reports] == ["loading"] * 3
    assert attachment.tracker.components() == ("count_before_transformer", "count_before_vae", "count_after_call")


def test_an_unknown_action_is_a_policy_error_at_its_line_with_a_suggestion(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text(
        textwrap.dedent(
            """\
            version: 1
            boundaries:
              after_call:
                actions:
                  - host_cache_release
                  - host_cache_relase
            """
        )
    )
    with pytest.raises(PolicyError, match=r"policy\.yaml:6:\d+: unknown action 'host_cache_relase'; did you mean"):
        attach(build_pipeline("sd"), path)


def test_register_action_refuses_bad_names_duplicates_and_non_callables(registered):
    with pytest.raises(InvalidArgumentError, match=r"is not an action name; use a lowercase letter, then a-z"):
        register_action("Bad Name")
    registered("once", lambda ctx: None)
    with pytest.raises(InvalidArgumentError, match="already registered; pass replace=True"):
        register_action("once")
    with pytest.raises(InvalidArgumentError, match="must be callable"):
        register_action("not-callable")(42)


class LabelOptions(ActionOptions):
    label: str = "none"
    """The label of the report."""
    repeat: int = 1
    """How many times."""


PLUGIN_POLICY = textwrap.dedent(
    """\
    version: 1
    boundaries:
      after_call:
        actions:
          - host_cache_release
          - {name: my_pkg.label, options: {label: x, repaet: 2}}
    """
)


def test_a_plugins_options_model_validates_its_options_where_the_policy_loads_as_a_built_ins(registered):
    seen = []

    def label(ctx: BoundaryContext[LabelOptions]):
        seen.append(ctx.options)
        return ctx.action_report("executed", detail=ctx.options.label)

    registered("my_pkg.label", label, options=LabelOptions)
    with pytest.raises(PolicyError) as refused:
        HookPolicy.from_yaml_text(PLUGIN_POLICY, source="policy.yaml")
    assert str(refused.value) == (
        "policy.yaml:6:50: boundaries.after_call.actions[1].options.repaet: unknown option of my_pkg.label; "
        "it takes label, repeat"
    )
    with pytest.raises(
        PolicyError, match=r"policy\.yaml:6:\d+: boundaries\.after_call\.actions\[1\]\.options\.repeat: "
    ):
        HookPolicy.from_yaml_text(PLUGIN_POLICY.replace("repaet: 2", "repeat: two"), source="policy.yaml")
    policy = HookPolicy.from_yaml_text(PLUGIN_POLICY.replace("repaet", "repeat"))
    assert policy.actions("after_call")[1].options == LabelOptions(label="x", repeat=2)  # resolved once, typed
    pipe = build_pipeline("sd")
    with attach(pipe, policy):
        pipe(**call_kwargs("sd"))
    assert seen == [LabelOptions(label="x", repeat=2)]


def test_a_plugin_registered_after_the_policy_loaded_has_its_options_validated_at_attach_in_the_same_words(
    registered,
):
    early = HookPolicy.from_yaml_text(PLUGIN_POLICY, source="policy.yaml")  # not registered yet: as written
    assert early.actions("after_call")[1].options == {"label": "x", "repaet": 2}
    registered("my_pkg.label", lambda ctx: None, options=LabelOptions)
    with pytest.raises(PolicyError) as at_load:
        HookPolicy.from_yaml_text(PLUGIN_POLICY, source="policy.yaml")
    with pytest.raises(PolicyError) as at_attach:
        attach(build_pipeline("sd"), early)
    assert str(at_attach.value) == str(at_load.value)
    fine = HookPolicy.from_yaml_text(PLUGIN_POLICY.replace("repaet", "repeat"))
    unregister_action("my_pkg.label")
    register_action("my_pkg.label", lambda ctx: None, options=LabelOptions)
    bound = bind_actions(build_pipeline("sd"), fine)
    assert bound["after_call"][1][0].options == LabelOptions(label="x", repeat=2)


def test_register_action_takes_the_function_or_decorates_and_refuses_what_is_no_options_model(registered):
    def act(ctx):
        return None

    assert register_action("my_pkg.direct", act, options=LabelOptions) is act
    unregister_action("my_pkg.direct")
    with pytest.raises(InvalidArgumentError, match=r"must be a subclass of ddo_hooks\.actions\.contract\.ActionOpt"):
        register_action("my_pkg.bad", act, options=dict)


def test_unregister_refuses_unknown_and_built_in_actions():
    with pytest.raises(InvalidArgumentError, match="no action named 'never' is registered"):
        unregister_action("never")
    with pytest.raises(InvalidArgumentError, match="cannot be unregistered"):
        unregister_action("host_cache_release")


def test_an_action_from_an_installed_entry_point_is_found(tmp_path, monkeypatch):
    (tmp_path / "ddo_plugin_demo.py").write_text(
        "def mark(ctx):\n    return ctx.action_report('noop', detail='from a plugin')\n"
    )
    dist = tmp_path / "ddo_plugin_demo-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ddo-plugin-demo\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nplugin-mark = ddo_plugin_demo:mark\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "plugin-mark" in {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
    assert "plugin-mark" in available_actions()
    pipe = build_pipeline("sd")
    try:
        with attach(pipe, policy_with(["plugin-mark"])) as attachment:
            pipe(**call_kwargs("sd"))
        assert [r.setup.boundary_action.detail for r in attachment.reports] == ["from a plugin"] * 3
    finally:
        unregister_action("plugin-mark")


def test_a_broken_entry_point_is_a_policy_error_naming_it(tmp_path, monkeypatch):
    dist = tmp_path / "broken-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nbroken-action = no_such_module:thing\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PolicyError, match="loading entry point 'no_such_module:thing' failed"):
        resolve_action("broken-action", where="p.yaml:3:7")


def test_reports_are_appended_to_the_policys_sink_whose_folder_must_exist(tmp_path):
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text("version: 1\nreport_sink: out/reports.jsonl\n")
    pipe = build_pipeline("sd")
    with pytest.raises(
        PolicyError,
        match=r"policy\.yaml:2:1: report_sink '.*out/reports\.jsonl': the folder .*out "
        r"does not exist; create it first",
    ):
        attach(pipe, policy_file)
    assert not (tmp_path / "out").exists()  # no folder is created where a typo points
    (tmp_path / "out").mkdir()
    with attach(pipe, policy_file) as attachment:
        pipe(**call_kwargs("sd"))
        pipe(**call_kwargs("sd"))
    text = (tmp_path / "out" / "reports.jsonl").read_text()
    assert MetricsTracker.from_jsonl(text).records() == attachment.tracker.records()
    assert [json.loads(line)["component"] for line in text.splitlines()][:3] == [
        "host_cache_before_transformer",
        "host_cache_before_vae",
        "host_cache_after_call",
    ]


def test_an_unwritable_sink_is_a_policy_error_at_attach_time_not_mid_call(tmp_path):
    (tmp_path / "taken").write_text("a file where the sink's folder should be")
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text("version: 1\nreport_sink: taken/reports.jsonl\n")
    pipe = build_pipeline("sd")
    with pytest.raises(
        PolicyError, match=r"policy\.yaml:2:\d+: report_sink '.*taken/reports\.jsonl' cannot be opened: Not a directory"
    ):
        attach(pipe, policy_file)
    attach(pipe).detach()  # nothing was left attached


def test_the_built_in_action_passes_the_policys_release_settings():
    fake = FakeHostAllocator(cached_bytes=8 * MiB, live_bytes=MiB)
    pipe = build_pipeline("flux")
    embeds = embed_prompt(pipe, "flux")
    policy = HookPolicy.from_mapping(
        {"version": 1, "device": "cuda:1", "release": {"collect": "auto", "min_releasable_bytes": "4MiB"}}
    )
    with use_backend(fake), attach(pipe, policy) as attachment:
        kept = pipe.text_encoder_2
        pipe.text_encoder_2 = None
        pipe(**{**call_kwargs("flux"), **embeds, "prompt": None})
    first, second = (r.release for r in attachment.reports[:2])
    assert isinstance(attachment.reports[0], HostCacheReleaseReport)
    assert first.status == "executed"
    assert first.device == "cuda:1"
    assert first.collection.strategy == "auto"
    assert first.collection.expected_freed == ("text_encoder_2",)
    assert first.collection.survivors == ("text_encoder_2",)  # `kept` holds it
    assert first.collection.full_collection
    assert first.threshold.decision == "release"
    assert first.threshold.min_releasable_bytes == 4 * MiB
    # once named as a survivor it is not collected for again
    assert second.collection.expected_freed == ()
    assert not second.collection.full_collection
    assert second.noop_reason == "below_threshold"
    del kept


def test_each_boundary_runs_the_built_in_action_with_its_own_options():
    fake = FakeHostAllocator(cached_bytes=8 * MiB, live_bytes=MiB)
    pipe = build_pipeline("sd")
    policy = HookPolicy.from_mapping(
        {
            "version": 1,
            "release": {"collect": "young"},
            "boundaries": {
                "before_vae": {
                    "actions": [{"name": "host_cache_release", "options": {"min_releasable_bytes": "64MiB"}}]
                },
                "after_call": {"actions": [{"name": "host_cache_release", "options": {"collect": "full"}}]},
            },
        }
    )
    with use_backend(fake), attach(pipe, policy) as attachment:
        pipe(**call_kwargs("sd"))
    before_transformer, before_vae, after_call = (r.release for r in attachment.reports)
    assert (before_transformer.collection.strategy, before_transformer.status) == ("young", "executed")
    assert (before_vae.collection.strategy, before_vae.noop_reason) == ("young", "below_threshold")
    assert before_vae.threshold.min_releasable_bytes == 64 * MiB
    assert (after_call.collection.strategy, after_call.collection.full_collection) == ("full", True)


def tiny_unet2d():
    return UNet2DModel(
        sample_size=8,
        in_channels=3,
        out_channels=3,
        block_out_channels=(8, 8),
        layers_per_block=1,
        norm_num_groups=4,
        down_block_types=("DownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "UpBlock2D"),
    )


def outcomes(reports):
    return [
        f"{r.body.boundary}:{r.body.reason}" if r.route == "phase_boundary_refusal" else r.release.phase
        for r in reports
    ]


def test_a_pipeline_without_maybe_free_model_hooks_still_ends_its_calls_with_after_call():
    pipe = PNDMPipeline(unet=tiny_unet2d(), scheduler=PNDMScheduler(num_train_timesteps=20, skip_prk_steps=True))
    pipe.set_progress_bar_config(disable=True)
    with attach(pipe) as attachment:
        pipe(num_inference_steps=2, generator=torch.Generator().manual_seed(0), output_type="np")
        attachment.boundary("before_vae")  # the host can still request one by hand
    # a pixel-space pipeline has no VAE: before_vae is never reached, and the report says so
    assert outcomes(attachment.reports) == ["before_transformer", "before_vae:not_reached", "after_call", "before_vae"]
    assert attachment.reports[1].body.detail == "PNDMPipeline has no VAE decoder, so nothing decodes after its loop"


def test_an_iterated_progress_bar_loop_fires_the_boundaries():
    pipe = DDPMPipeline(unet=tiny_unet2d(), scheduler=DDPMScheduler(num_train_timesteps=10))
    pipe.set_progress_bar_config(disable=True)
    with attach(pipe) as attachment:
        pipe(num_inference_steps=3, generator=torch.Generator().manual_seed(0), output_type="np")
        pipe(num_inference_steps=3, generator=torch.Generator().manual_seed(0), output_type="np")
    assert outcomes(attachment.reports) == ["before_transformer", "before_vae:not_reached", "after_call"] * 2
