"""The signals: which stage each pipeline's loops are, and a progress bar that counts its steps."""

from __future__ import annotations

import pytest
from tqdm.auto import tqdm

from ddo_hooks.hooks.loop_bar import LoopBar
from ddo_hooks.hooks.phases import CallPhases, Phase, Stage
from ddo_hooks.hooks.signals import PipelineSignals
from ddo_hooks.release import guard
from ddo_hooks.testing.structural import build_structural
from ddo_hooks.testing.tiny_pipelines import build_pipeline


def signals_of(pipe):
    return PipelineSignals(pipe, CallPhases(type(pipe).__name__, lambda *a: None, lambda *a: None))


def test_a_plain_pipelines_loops_are_final():
    pipe = build_pipeline("sd")
    assert signals_of(pipe).stage_of(pipe) is Stage.FINAL


@pytest.mark.parametrize("name", ["kandinsky21_combined", "kandinsky22_combined"])
def test_a_combined_pipelines_prior_pipeline_is_earlier_and_its_decoder_pipeline_final(name):
    pipe = build_structural(name)
    signals = signals_of(pipe)
    assert signals.stage_of(pipe.prior_pipe) is Stage.EARLIER
    assert signals.stage_of(pipe.decoder_pipe) is Stage.FINAL
    assert signals.denoiser_stages() == {id(pipe.prior_prior): Stage.EARLIER, id(pipe.unet): Stage.FINAL}


def test_a_pipeline_held_before_another_with_a_denoiser_is_earlier():
    pipe = build_structural("visualcloze")  # both hold the same transformer
    signals = signals_of(pipe)
    assert signals.stage_of(pipe.generation_pipe) is Stage.EARLIER
    assert signals.stage_of(pipe.upsampling_pipe) is Stage.FINAL


def test_a_pipeline_holding_a_prior_and_another_denoiser_lets_each_loops_first_denoiser_say():
    pipe = build_structural("stable_unclip")
    signals = signals_of(pipe)
    assert signals.stage_of(pipe) is None
    assert signals.denoiser_stages() == {id(pipe.prior): Stage.EARLIER, id(pipe.unet): Stage.FINAL}


def test_a_bar_used_as_a_context_counts_its_updates_and_says_when_the_steps_are_done():
    fired = []
    machine = CallPhases("P", lambda boundary, call: fired.append(boundary), lambda *a: None)
    call = machine.call_start()
    bar = LoopBar(tqdm(total=2, disable=True), machine)
    with bar as entered:
        assert entered is bar  # the block gets the wrapper, whose update() counts
        entered.update()
        machine.decode_start()  # one step to go: a preview
        assert call.decoded_in_loop
        entered.update()
        assert call.steps_done
        machine.decode_start()
        assert machine.phase is Phase.DECODING
        assert entered.n == 0  # everything else is the bar's own: a disabled tqdm counts nothing
    machine.call_end(call)
    assert fired == ["before_transformer", "before_vae", "after_call"]
    assert guard.busy_reason() is None
