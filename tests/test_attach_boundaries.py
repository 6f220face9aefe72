"""Boundaries on real tiny pipelines: order, once per call, consecutive calls, exceptions, latents."""

from __future__ import annotations

import pytest
import torch
from diffusers.callbacks import MultiPipelineCallbacks, PipelineCallback

from ddo_hooks import HostCacheReleaseReport, MetricsTracker, attach
from ddo_hooks.hooks.phases import Phase
from ddo_hooks.policy.model import HookPolicy
from ddo_hooks.release import guard
from ddo_hooks.testing.tiny_pipelines import FAMILIES, build_pipeline, call_kwargs, embed_prompt

ORDER = ["before_transformer", "before_vae", "after_call"]


def phases(reports) -> list[str]:
    """Each report's boundary; a refusal's with its reason (``before_vae:not_reached``)."""
    return [
        f"{r.body.boundary}:{r.body.reason}" if r.route == "phase_boundary_refusal" else r.release.phase
        for r in reports
    ]


@pytest.mark.parametrize("family", FAMILIES)
def test_each_boundary_fires_once_per_call_in_order(family):
    pipe = build_pipeline(family)
    tracker = MetricsTracker()
    with attach(pipe, tracker=tracker) as attachment:
        pipe(**call_kwargs(family))
        assert phases(attachment.reports) == ORDER
        assert attachment.call_index == 1
        assert attachment.phase is Phase.IDLE
    assert tracker.components() == (
        "host_cache_before_transformer",
        "host_cache_before_vae",
        "host_cache_after_call",
    )
    assert all(isinstance(r, HostCacheReleaseReport) for r in tracker.reports())


@pytest.mark.parametrize("family", FAMILIES)
def test_boundaries_fire_again_on_the_next_call(family):
    pipe = build_pipeline(family)
    with attach(pipe) as attachment:
        pipe(**call_kwargs(family))
        pipe(**call_kwargs(family))
        assert phases(attachment.reports) == ORDER * 2
        assert attachment.call_index == 2


@pytest.mark.parametrize("family", FAMILIES)
def test_latent_output_reports_before_vae_as_not_reached_with_the_reason(family):
    pipe = build_pipeline(family)
    with attach(pipe) as attachment:
        pipe(**call_kwargs(family, output_type="latent"))
        assert phases(attachment.reports) == ["before_transformer", "before_vae:not_reached", "after_call"]
        assert "did not decode" in attachment.reports[1].body.detail


@pytest.mark.parametrize("family", FAMILIES)
def test_an_exception_inside_a_step_ends_the_call_and_the_next_call_works(family):
    pipe = build_pipeline(family)

    def explode(pipeline, step, timestep, kwargs):
        if step == 1:
            raise RuntimeError("step 1 failed")
        return kwargs

    with attach(pipe) as attachment:
        with pytest.raises(RuntimeError, match="step 1 failed"):
            pipe(**call_kwargs(family, steps=3), callback_on_step_end=explode)
        # the call that raised still ends with after_call; before_vae says why it never came
        assert phases(attachment.reports) == ["before_transformer", "before_vae:not_reached", "after_call"]
        assert attachment.reports[1].body.detail == "the call raised RuntimeError before it decoded"
        assert attachment.phase is Phase.IDLE
        assert guard.busy_reason() is None
        pipe(**call_kwargs(family))
        assert phases(attachment.reports)[3:] == ORDER


@pytest.mark.parametrize("family", FAMILIES)
def test_the_users_step_callback_still_runs_every_step_inside_the_loop(family):
    pipe = build_pipeline(family)
    seen = []

    def callback(pipeline, step, timestep, kwargs):
        seen.append((step, attachment.phase, guard.busy_reason()[0]))
        return kwargs

    with attach(pipe) as attachment:
        pipe(**call_kwargs(family, steps=3), callback_on_step_end=callback)
    assert seen == [(i, Phase.DENOISING, "denoising") for i in range(3)]


def test_multi_pipeline_callbacks_work_together_with_the_attachment():
    pipe = build_pipeline("flux")
    steps = []

    class Record(PipelineCallback):
        tensor_inputs = ["latents"]  # noqa: RUF012 - diffusers' declared interface

        def callback_fn(self, pipeline, step_index, timestep, callback_kwargs):
            steps.append((self.config.cutoff_step_index, step_index))
            return callback_kwargs

    callbacks = MultiPipelineCallbacks(
        [Record(cutoff_step_ratio=None, cutoff_step_index=1), Record(cutoff_step_ratio=None, cutoff_step_index=2)]
    )
    with attach(pipe) as attachment:
        pipe(**call_kwargs("flux", steps=2), callback_on_step_end=callbacks)
        assert phases(attachment.reports) == ORDER
    assert steps == [(1, 0), (2, 0), (1, 1), (2, 1)]


def test_output_is_bit_identical_with_and_without_the_attachment():
    attached, bare = build_pipeline("sd"), build_pipeline("sd")
    with attach(attached):
        with_hooks = attached(**call_kwargs("sd")).images
    without = bare(**call_kwargs("sd")).images
    assert torch.equal(with_hooks, without)


def test_dropped_text_encoders_are_offered_to_the_release_as_expected_freed(monkeypatch):
    pipe = build_pipeline("flux")
    embeds = embed_prompt(pipe, "flux")
    seen = []
    from ddo_hooks.actions import registry as actions

    @actions.register_action("record_dropped")
    def record_dropped(ctx):
        seen.append((ctx.boundary, sorted(ctx.dropped)))

    try:
        policy = HookPolicy.from_mapping(
            {"version": 1, "boundaries": {"before_transformer": {"actions": ["record_dropped"]}}}
        )
        with attach(pipe, policy):
            pipe.text_encoder = pipe.text_encoder_2 = None
            pipe.tokenizer = pipe.tokenizer_2 = None
            pipe(**{**call_kwargs("flux"), "prompt": None, **embeds})
    finally:
        actions.unregister_action("record_dropped")
    # Not referenced anywhere else, the encoders died by refcount before the boundary ran.
    assert seen == [("before_transformer", [])]


def test_a_dropped_component_still_alive_is_named_in_the_context():
    pipe = build_pipeline("flux")
    embeds = embed_prompt(pipe, "flux")
    seen = []
    from ddo_hooks.actions import registry as actions

    @actions.register_action("record_dropped")
    def record_dropped(ctx):
        seen.append(sorted(ctx.dropped))

    try:
        policy = HookPolicy.from_mapping(
            {"version": 1, "boundaries": {"before_transformer": {"actions": ["record_dropped"]}}}
        )
        with attach(pipe, policy):
            kept = pipe.text_encoder_2  # a caller-owned reference keeps it alive
            pipe.text_encoder_2 = None
            pipe(**{**call_kwargs("flux"), **embeds, "prompt": None})
            del kept
    finally:
        actions.unregister_action("record_dropped")
    assert seen == [["text_encoder_2"]]
