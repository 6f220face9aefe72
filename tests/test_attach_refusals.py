"""Refusals: never inside the loop, never while loading, never beside another release or call."""

from __future__ import annotations

import threading

import pytest

from ddo_hooks import BoundaryRefusalReport, HostCacheReleaseReport, InvalidArgumentError, attach
from ddo_hooks.policy.model import HookPolicy
from ddo_hooks.release import guard
from ddo_hooks.testing.tiny_pipelines import build_pipeline, call_kwargs


def refusal(report):
    assert isinstance(report, BoundaryRefusalReport)
    return report.setup.boundary_refusal


@pytest.fixture
def sd():
    return build_pipeline("sd")


def test_a_manual_boundary_at_a_quiet_point_runs(sd):
    with attach(sd) as attachment:
        sd(**call_kwargs("sd"))
        produced = attachment.boundary("before_vae")
    assert len(produced) == 1
    assert isinstance(produced[0], HostCacheReleaseReport)
    assert produced[0].release.phase == "before_vae"
    assert attachment.reports[-1] is produced[0]


def test_a_manual_boundary_inside_the_loop_is_refused_and_recorded(sd):
    answers = []

    def callback(pipeline, step, timestep, kwargs):
        answers.extend(attachment.boundary("before_vae"))
        return kwargs

    with attach(sd) as attachment:
        sd(**call_kwargs("sd", steps=2), callback_on_step_end=callback)
    assert [refusal(r).reason for r in answers] == ["denoising", "denoising"]
    assert refusal(answers[0]).requested_by == "host"
    assert refusal(answers[0]).boundary == "before_vae"
    assert refusal(answers[0]).call_index == 1
    tracked = [c for c, r in attachment.tracker.records() if isinstance(r, BoundaryRefusalReport)]
    assert tracked == ["host_cache_before_vae", "host_cache_before_vae"]
    # the pipeline's own boundaries still ran, each once
    executed = [r.release.phase for r in attachment.reports if isinstance(r, HostCacheReleaseReport)]
    assert executed == ["before_transformer", "before_vae", "after_call"]


def test_a_request_from_another_thread_inside_the_loop_is_refused(sd):
    answers = []

    def callback(pipeline, step, timestep, kwargs):
        if step == 0:
            worker = threading.Thread(target=lambda: answers.extend(attachment.boundary("after_call")))
            worker.start()
            worker.join()
        return kwargs

    with attach(sd) as attachment:
        sd(**call_kwargs("sd"), callback_on_step_end=callback)
    assert [refusal(r).reason for r in answers] == ["denoising"]


def test_a_request_from_another_thread_while_prompts_encode_is_refused(sd):
    answers = []

    def during_encoding(module, args):
        worker = threading.Thread(target=lambda: answers.extend(attachment.boundary("after_call")))
        worker.start()
        worker.join()

    handle = sd.text_encoder.register_forward_pre_hook(during_encoding)
    with attach(sd) as attachment:
        sd(**call_kwargs("sd"))
    handle.remove()
    assert [refusal(r).reason for r in answers] == ["inference_in_progress", "inference_in_progress"]


def test_a_host_loading_section_refuses_every_boundary_of_a_call(sd):
    with attach(sd) as attachment, attachment.loading("swapping the unet"):
        sd(**call_kwargs("sd"))
        manual = attachment.boundary("after_call")
    reasons = [refusal(r).reason for r in attachment.reports]
    assert reasons == ["loading"] * 4
    assert [refusal(r).boundary for r in attachment.reports] == [
        "before_transformer",
        "before_vae",
        "after_call",
        "after_call",
    ]
    assert "swapping the unet" in refusal(manual[0]).detail


def test_the_pipelines_own_loading_methods_are_marked(sd, monkeypatch):
    seen = []
    real_to = sd.vae.to

    def spy(*args, **kwargs):
        seen.append(guard.busy_reason())
        return real_to(*args, **kwargs)

    monkeypatch.setattr(sd.vae, "to", spy)
    with attach(sd):
        sd.to("cpu")
    assert seen == [("loading", "StableDiffusionPipeline.to() is loading components")]


def test_the_loading_marks_go_away_after_detach(sd, monkeypatch):
    seen = []
    real_to = sd.vae.to
    monkeypatch.setattr(sd.vae, "to", lambda *a, **k: (seen.append(guard.busy_reason()), real_to(*a, **k))[1])
    attach(sd).detach()
    sd.to("cpu")
    assert seen == [None]


def test_a_request_during_another_release_is_refused(sd):
    with attach(sd) as attachment, guard.releasing():
        produced = attachment.boundary("before_transformer")
    assert refusal(produced[0]).reason == "release_in_progress"


def test_another_attached_pipelines_loop_refuses_this_pipelines_boundaries(sd):
    other = build_pipeline("flux")
    inside = []

    def callback(pipeline, step, timestep, kwargs):
        if step == 0:
            inside.extend(attachment.boundary("after_call"))
        return kwargs

    with attach(sd) as attachment, attach(other):
        other(**call_kwargs("flux"), callback_on_step_end=callback)
    assert refusal(inside[0]).reason == "denoising"
    assert "FluxPipeline" in refusal(inside[0]).detail


def test_an_unknown_boundary_request_is_an_error(sd):
    with attach(sd) as attachment, pytest.raises(InvalidArgumentError, match="unknown boundary 'before_unet'"):
        attachment.boundary("before_unet")


def test_a_request_for_a_boundary_the_policy_disables_is_an_error(sd):
    policy = HookPolicy.from_mapping({"version": 1, "boundaries": {"before_vae": {"enabled": False}}})
    with attach(sd, policy) as attachment, pytest.raises(InvalidArgumentError, match="'before_vae' is disabled"):
        attachment.boundary("before_vae")


def test_a_detached_attachment_refuses_requests_with_an_error(sd):
    attachment = attach(sd)
    attachment.detach()
    with pytest.raises(InvalidArgumentError, match="detached"):
        attachment.boundary("after_call")


def test_a_host_request_after_a_call_that_raised_in_decode_runs(sd, monkeypatch):
    def broken_decode(*args, **kwargs):
        raise RuntimeError("decode failed")

    with attach(sd) as attachment:
        monkeypatch.setattr(sd.vae, "decode", broken_decode)
        with pytest.raises(RuntimeError, match="decode failed"):
            sd(**call_kwargs("sd"))
        produced = attachment.boundary("after_call")
    assert isinstance(produced[0], HostCacheReleaseReport)
