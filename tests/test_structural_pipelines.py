"""Structural tiny pipelines (sub-pipelines, several loops, odd call ends): build, call, determinism."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from support import timeline

from ddo_hooks.boundaries import BOUNDARY_NOTES
from ddo_hooks.policy.model import HookPolicy
from ddo_hooks.testing.structural import (
    CLASS_NAMES,
    STRUCTURAL,
    build_structural,
    structural_call_kwargs,
    sub_pipelines,
)

# (output attribute, shape): images are (batch, channels, height, width) except LDM's numpy
# (batch, height, width, channels); frames add the frame axis; audios are (batch, samples).
OUTPUTS = {
    "kandinsky21_combined": ("images", (1, 3, 32, 32)),
    "kandinsky21_img2img_combined": ("images", (1, 3, 32, 32)),
    "kandinsky21_inpaint_combined": ("images", (1, 3, 32, 32)),
    "kandinsky22_combined": ("images", (1, 3, 32, 32)),
    "kandinsky22_img2img_combined": ("images", (1, 3, 32, 32)),
    "kandinsky22_inpaint_combined": ("images", (1, 3, 32, 32)),
    "visualcloze": ("images", (1, 3, 16, 16)),
    "stable_unclip": ("images", (1, 3, 32, 32)),
    "skyreels_v2_df_v2v": ("frames", (1, 14, 3, 16, 16)),  # the 5 input frames, then 9 generated
    "animatediff_freeinit": ("frames", (1, 2, 3, 32, 32)),
    "sd_image_variation": ("images", (1, 3, 32, 32)),
    "audioldm2": ("audios", (1, 256)),
    "musicldm": ("audios", (1, 256)),
    "paint_by_example": ("images", (1, 3, 32, 32)),
    "ldm_text2img": ("images", (1, 16, 16, 3)),
    "kandinsky3": ("images", (1, 3, 16, 16)),
    "kandinsky3_img2img": ("images", (1, 3, 32, 32)),
    "helios": ("frames", (1, 33, 3, 16, 16)),  # one chunk of 9 latent frames
    "cosmos25_transfer": ("frames", (1, 3, 3, 32, 32)),
    "anyflow_far": ("frames", (1, 5, 3, 16, 16)),
    "wan22": ("frames", (1, 5, 3, 16, 16)),
}

# Warnings the libraries themselves raise on every call of these pipelines (the suite makes warnings errors).
LIBRARY_WARNINGS = {
    # KandinskyV22CombinedPipeline and its image-to-image twin pass callback_steps on to their decoder pipeline.
    "kandinsky22_combined": "ignore:`callback_steps` is deprecated:FutureWarning",
    "kandinsky22_img2img_combined": "ignore:`callback_steps` is deprecated:FutureWarning",
    # AudioLDM 2 drives GPT-2 generation with past_key_values (transformers 5 deprecates the name).
    "audioldm2": "ignore:`past_key_values` is deprecated:FutureWarning",
    # AnyFlow's FAR attention is flex_attention, unfused without torch.compile.
    "anyflow_far": "ignore:flex_attention called without torch.compile:UserWarning",
}


def _params() -> list[Any]:
    return [
        pytest.param(
            name, marks=[pytest.mark.filterwarnings(LIBRARY_WARNINGS[name])] if name in LIBRARY_WARNINGS else []
        )
        for name in STRUCTURAL
    ]


def _output(pipe: Any, name: str) -> torch.Tensor | np.ndarray:
    attribute, _ = OUTPUTS[name]
    return getattr(pipe(**structural_call_kwargs(name)), attribute)


def _equal(a: torch.Tensor | np.ndarray, b: torch.Tensor | np.ndarray) -> bool:
    return bool(np.array_equal(a, b)) if isinstance(a, np.ndarray) else torch.equal(a, b)


def test_every_structural_pipeline_is_covered():
    assert set(STRUCTURAL) == set(CLASS_NAMES) == set(OUTPUTS)
    assert all(isinstance(line, str) and line and "\n" not in line for line in STRUCTURAL.values())


@pytest.mark.parametrize("name", _params())
def test_build_call_and_rebuild_bitwise(name):
    rng_before = torch.get_rng_state()
    pipe = build_structural(name, seed=0)
    assert torch.equal(torch.get_rng_state(), rng_before)  # the global RNG is left alone
    assert type(pipe).__name__ == CLASS_NAMES[name]
    modules = [c for c in pipe.components.values() if isinstance(c, torch.nn.Module)]
    assert modules
    assert all(not m.training for m in modules)

    first = _output(pipe, name)
    assert tuple(first.shape) == OUTPUTS[name][1]
    assert np.isfinite(np.asarray(first)).all()

    again = _output(build_structural(name, seed=0), name)
    assert _equal(first, again), f"{name}: a second build with the same seed gave a different output"


def test_the_structures_are_really_there():
    combined = build_structural("kandinsky21_combined")
    assert sorted(sub_pipelines(combined)) == ["decoder_pipe", "prior_pipe"]
    assert combined.decoder_pipe.unet is combined.unet  # the sub-pipelines share the combined's models
    assert combined.prior_pipe.prior is combined.prior_prior

    animatediff = build_structural("animatediff_freeinit")
    assert animatediff.free_init_enabled

    wan = build_structural("wan22")
    assert wan.transformer_2 is not None
    assert wan.transformer is not wan.transformer_2
    assert wan.config.boundary_ratio == 0.875


def test_different_seeds_give_different_weights():
    a, b = build_structural("ldm_text2img", seed=0), build_structural("ldm_text2img", seed=1)
    assert not torch.equal(a.unet.conv_in.weight, b.unet.conv_in.weight)


def test_unknown_names_are_refused():
    with pytest.raises(ValueError, match="name must be one of"):
        build_structural("nope")
    with pytest.raises(ValueError, match="name must be one of"):
        structural_call_kwargs("nope")


# -- the boundaries of each structure -----------------------------------------------------------

ORDER = ["before_transformer", "before_vae", "after_call"]
# What each call of each structure gives: the three boundaries in order (a structure that left
# no quiet point would list the boundary it reports as not reached, "before_vae:not_reached").
EXPECTED = {name: ORDER for name in STRUCTURAL}

# What the timeline needs to know of each structure (tests/support/timeline.py): the denoisers of
# its final stage, and what runs inside that stage's loop beside them.
FINAL = (
    {name: {"unet"} for name in STRUCTURAL}
    | {
        name: {"transformer"}
        for name in ("visualcloze", "skyreels_v2_df_v2v", "anyflow_far", "helios", "cosmos25_transfer")
    }
    | {"wan22": {"transformer", "transformer_2"}}
)
HELPERS = {
    # Cosmos 2.5 Transfer encodes each chunk's controls with the VAE inside its progress bar, and
    # runs its controlnet beside the transformer at every step.
    "cosmos25_transfer": frozenset({"controlnet", "encode vae"}),
}

TIMELINE_POLICY = {"version": 1, "boundaries": {b: {"actions": ["host_cache_release", timeline.ACTION]} for b in ORDER}}
"""Each boundary releases, then notes itself in the timeline."""


def _outcomes(reports: list[Any]) -> list[str]:
    """The release of each boundary, or why it did not run (the timeline's own reports left out)."""
    found = []
    for r in reports:
        if r.route == "phase_boundary_refusal" and r.body.action == "host_cache_release":
            found.append(f"{r.body.boundary}:{r.body.reason}")
        elif r.route == "pytorch_host_cache_release":
            found.append(r.release.phase)
    return found


def _state(pipe: Any) -> list[Any]:
    """What an attachment may change: the class, the instance attributes and the hook registries."""
    pipes = [pipe, *sub_pipelines(pipe).values()]
    modules = [m for p in pipes for c in p.components.values() if isinstance(c, torch.nn.Module) for m in c.modules()]
    registries = [sorted(m._diffusers_hook.hooks) for m in modules if hasattr(m, "_diffusers_hook")]
    return [type(pipe), *(sorted(vars(p)) for p in pipes), registries]


@pytest.fixture(scope="module")
def recording():
    """The timeline's action, registered for this module's tests."""
    timeline.register()
    yield
    timeline.unregister()


def check_timeline(record: timeline.Timeline, name: str, calls: int = 2) -> None:
    """Each recorded call of structure ``name`` ran its boundaries where issue 20 says (see ``check_call``)."""
    found = record.calls()
    assert len(found) == calls
    missed = {b.split(":")[0] for b in EXPECTED[name] if b.endswith(":not_reached")}
    for events in found:
        timeline.check_call(events, final=FINAL[name], helpers=HELPERS.get(name, frozenset()), missed=missed)


@pytest.mark.parametrize("name", _params())
def test_each_call_gives_each_boundary_once_in_order_with_the_same_output(name, recording):
    from ddo_hooks import attach

    pipe = build_structural(name)
    reference = _output(pipe, name)  # a call without the attachment sets the pipeline's own call state
    record = timeline.Timeline.install(pipe)
    before = _state(pipe)
    with attach(pipe, HookPolicy.from_mapping(TIMELINE_POLICY)) as attachment:
        first = _output(pipe, name)
        _output(pipe, name)
        assert _outcomes(attachment.reports) == EXPECTED[name] * 2
        assert attachment.call_index == 2
    assert _equal(first, reference)
    assert _state(pipe) == before  # detach left nothing behind
    record.remove()
    check_timeline(record, name)


def test_a_call_that_returns_latents_reports_before_vae_as_not_reached_with_the_reason():
    from ddo_hooks import attach

    pipe = build_structural("kandinsky3")  # decodes inside its progress bar, unless asked for latents
    with attach(pipe) as attachment:
        pipe(**{**structural_call_kwargs("kandinsky3"), "output_type": "latent"})
    assert _outcomes(attachment.reports) == ["before_transformer", "before_vae:not_reached", "after_call"]
    assert attachment.reports[1].body.detail == (
        "the call did not decode after its denoising loop (e.g. output_type='latent')"
    )
    assert '`not_reached` when nothing decodes (`output_type="latent"`)' in BOUNDARY_NOTES["before_vae"][0]  # the docs
