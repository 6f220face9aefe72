"""Where the boundaries of issue 20's pipelines run, read from a timeline of their components' work.

Each test records the components' forwards, the VAE's decodes and encodes and the boundaries
that ran (tests/support/timeline.py), and checks the order against the rules of issue 20, not
against the signals ddo_hooks followed: under group offloading, with a video of several chunks,
and where a call runs only an earlier stage; and the checker itself, on the orders issue 20 found.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from support import timeline
from test_structural_pipelines import (
    LIBRARY_WARNINGS,
    TIMELINE_POLICY,
    _equal,
    _outcomes,
    _output,
    check_timeline,
)

from ddo_hooks import attach
from ddo_hooks.policy.model import HookPolicy
from ddo_hooks.testing.structural import STAGED, build_structural, structural_call_kwargs

CPU = torch.device("cpu")
ORDER = ["before_transformer", "before_vae", "after_call"]


@pytest.fixture(scope="module")
def recording():
    timeline.register()
    yield
    timeline.unregister()


def _marks(name: str) -> list[Any]:
    return [pytest.mark.filterwarnings(LIBRARY_WARNINGS[name])] if name in LIBRARY_WARNINGS else []


def _run(
    pipe: Any, calls: list[dict[str, Any]], record: timeline.Timeline | None = None
) -> tuple[timeline.Timeline, Any, list[Any]]:
    """Call ``pipe`` attached once per keyword set, recording the timeline; the outputs of each call."""
    record = record or timeline.Timeline.install(pipe)
    try:
        with attach(pipe, HookPolicy.from_mapping(TIMELINE_POLICY)) as attachment:
            outputs = [pipe(**kwargs) for kwargs in calls]
    finally:
        record.remove()
    return record, attachment, outputs


@pytest.mark.parametrize("name", [pytest.param(n, marks=_marks(n)) for n in STAGED])
def test_under_group_offloading_the_boundaries_run_where_they_do_without_it(name, recording):
    pipe = build_structural(name)
    reference = _output(pipe, name)
    # VQ models (MoVQ) stay put: diffusers cannot group-offload them (tests/gpu/test_structural_gpu.py).
    kept = [n for n, c in pipe.components.items() if type(c).__name__ == "VQModel"]
    record = timeline.Timeline.install(pipe)  # beneath the offloading hooks, as beneath ddo_hooks'
    pipe.enable_group_offload(
        CPU, offload_device=CPU, offload_type="block_level", num_blocks_per_group=1, exclude_modules=kept or None
    )
    record, attachment, outputs = _run(pipe, [structural_call_kwargs(name)] * 2, record)
    assert _outcomes(attachment.reports) == ORDER * 2
    check_timeline(record, name)
    attribute = "frames" if hasattr(outputs[0], "frames") else "images"
    assert _equal(getattr(outputs[0], attribute), reference)


def _denoiser_forwards(events: list[timeline.Event]) -> list[int]:
    return [i for i, e in enumerate(events) if e == timeline.Event("start", "transformer")]


def test_a_video_of_two_chunks_under_one_progress_bar_gets_before_vae_at_the_last_chunks_decode(recording):
    name = "cosmos25_transfer"  # one bar over every chunk's steps: the count says which decode is the last
    controls = [torch.rand((3, 32, 32), generator=torch.Generator().manual_seed(i)) for i in range(9)]
    kwargs = structural_call_kwargs(name) | {"controls": controls, "num_frames": 9, "num_frames_per_chunk": 5}
    record, attachment, _ = _run(build_structural(name), [kwargs])
    assert _outcomes(attachment.reports) == ORDER
    (events,) = record.calls()
    assert [e for e in events if e.kind == "decode"] == [timeline.Event("decode", "vae")] * 2  # two chunks
    check_timeline(record, name, calls=1)  # before_vae after the last denoiser forward, before the last decode


def test_a_video_of_two_chunks_with_a_bar_each_gets_before_vae_at_the_first_chunks_decode(recording):
    # Helios gives each chunk its own progress bar and decodes it inside: at the first chunk's decode
    # nothing says a chunk follows. before_vae comes there, once, at a quiet point: after that chunk's
    # last step, before its decode's first module; the second chunk denoises after it
    # (docs/concepts.md, "The decode, and progress bars that hold it").
    name = "helios"
    record, attachment, _ = _run(build_structural(name), [structural_call_kwargs(name) | {"num_frames": 34}])
    assert _outcomes(attachment.reports) == ORDER
    (events,) = record.calls()
    decodes = [i for i, e in enumerate(events) if e.kind == "decode"]
    assert len(decodes) == 2
    at = events.index(timeline.Event("boundary", "before_vae"))
    first_chunk = [i for i in _denoiser_forwards(events) if i < decodes[0]]
    second_chunk = [i for i in _denoiser_forwards(events) if i > decodes[0]]
    assert first_chunk
    assert second_chunk
    assert first_chunk[-1] < decodes[0] < at < second_chunk[0]
    assert events[at + 1] == timeline.Event("start", "vae.post_quant_conv")  # the first chunk's decode starts
    timeline.check_outside_forwards(events)


def test_a_call_that_runs_only_its_first_stage_reports_both_boundaries_as_not_reached(recording):
    # VisualCloze with upsampling_strength=0 returns its generation pipeline's image and skips the
    # upsampling pipeline it holds after it: at the generation loop, nothing said no stage follows.
    name = "visualcloze"
    record, attachment, _ = _run(build_structural(name), [structural_call_kwargs(name) | {"upsampling_strength": 0}])
    assert _outcomes(attachment.reports) == ["before_transformer:not_reached", "before_vae:not_reached", "after_call"]
    refusals = [r.body for r in attachment.reports if r.route == "phase_boundary_refusal"]
    assert [r.detail for r in refusals if r.action == "host_cache_release"] == [
        "this VisualClozePipeline call ran no loop of its final stage, only an earlier stage's (a prior, or a "
        "pipeline it holds before another that holds a denoiser)",
        "the call ran no loop of its final stage, so no final decode followed one",
    ]
    (events,) = record.calls()
    assert [e.name for e in events if e.kind == "boundary"] == ["after_call"]


# -- the checker itself, on the orders issue 20 found ---------------------------------------------


def _events(text: str) -> list[timeline.Event]:
    return [timeline.Event(*line.split()) for line in text.strip().splitlines()]


RIGHT = """
start prior_text_encoder
end prior_text_encoder
start prior_prior
end prior_prior
start text_encoder
end text_encoder
boundary before_transformer
start unet
end unet
decode movq
boundary before_vae
start movq.decoder
end movq.decoder
boundary after_call
"""


def test_the_checker_takes_the_order_issue_20_asks_for():
    timeline.check_call(_events(RIGHT), final={"unet"})


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        # before_transformer at the prior's loop, the decoder stage's text encoder after it (Kandinsky 2.1)
        (
            RIGHT.replace("boundary before_transformer\n", "").replace(
                "start prior_prior", "boundary before_transformer\nstart prior_prior"
            ),
            "before_transformer at",
        ),
        # before_vae at the first of two decodes, a denoiser forward after it (Helios with two chunks)
        (
            RIGHT.replace(
                "boundary after_call",
                "start unet\nend unet\ndecode movq\nstart movq.decoder\nend movq.decoder\nboundary after_call",
            ),
            "before_vae at",
        ),
        # a boundary inside a forward
        (
            RIGHT.replace("boundary before_vae\nstart movq.decoder", "start movq.decoder\nboundary before_vae"),
            "ran inside the forward of",
        ),
        # no before_vae where the call decoded after its loop (Kandinsky 3 before this change)
        (RIGHT.replace("boundary before_vae\n", ""), "boundaries"),
    ],
)
def test_the_checker_refuses_the_orders_issue_20_found(wrong, message):
    with pytest.raises(AssertionError, match=message):
        timeline.check_call(_events(wrong), final={"unet"})
