"""The phase machine: which boundary is due on which signal, per call and per thread."""

import threading

import pytest
from support.fakes import HANG_SECONDS

from ddo_hooks.hooks.phases import CallPhases, Phase, Stage
from ddo_hooks.release import guard


@pytest.fixture
def events():
    return []


@pytest.fixture
def machine(events):
    m = CallPhases(
        "TestPipeline",
        lambda boundary, call: events.append((call.index, boundary)),
        lambda boundary, call, detail: events.append((call.index, f"{boundary} missed: {detail}")),
    )
    yield m
    for call in m.calls():  # a test that left its call open: end it, so no guard section leaks
        call.depth = 1
        m.call_end(call)
    assert guard.busy_reason() is None


def names(events):
    return [name for _, name in events]


def test_a_normal_call_fires_the_three_boundaries_in_order(machine, events):
    call = machine.call_start()
    assert machine.phase is Phase.PREPARING
    machine.loop_enter()
    assert machine.phase is Phase.DENOISING
    machine.loop_exit()
    assert machine.phase is Phase.DECODING
    machine.decode_start()
    machine.call_end(call)
    assert names(events) == ["before_transformer", "before_vae", "after_call"]
    assert machine.phase is Phase.IDLE
    assert machine.call_index == 1


def test_a_call_holds_an_inference_section_and_its_loop_a_denoising_section(machine):
    call = machine.call_start()
    assert guard.busy_reason()[0] == "inference_in_progress"
    machine.loop_enter()
    assert guard.busy_reason()[0] == "denoising"
    machine.loop_exit()
    assert guard.busy_reason()[0] == "inference_in_progress"
    with guard.quiet_point(call.section):  # the call's own quiet point does not count itself
        assert guard.busy_reason() is None
    machine.call_end(call)
    assert guard.busy_reason() is None


def test_each_boundary_is_due_outside_any_loop_section():
    seen = []
    m = CallPhases("P", lambda b, call: seen.append((b, call.loop_section)), lambda b, call, d: None)
    call = m.call_start()
    m.loop_enter()
    m.loop_exit()
    m.decode_start()
    m.call_end(call)
    assert seen == [("before_transformer", None), ("before_vae", None), ("after_call", None)]


def test_denoiser_forwards_inside_the_loop_fire_nothing(machine, events):
    machine.call_start()
    machine.loop_enter()
    for _ in range(5):
        machine.denoiser_forward()
    assert names(events) == ["before_transformer"]


def test_a_loop_without_a_progress_bar_runs_from_the_first_denoiser_forward_to_the_decode(machine, events):
    call = machine.call_start()
    machine.denoiser_forward()
    assert machine.phase is Phase.DENOISING
    assert guard.busy_reason()[0] == "denoising"
    machine.decode_start()
    assert machine.phase is Phase.DECODING
    machine.call_end(call)
    assert names(events) == ["before_transformer", "before_vae", "after_call"]


def test_signals_outside_a_call_are_ignored(machine, events):
    machine.denoiser_forward()
    assert machine.loop_enter() is None
    machine.loop_exit()
    machine.decode_start()
    assert machine.phase is Phase.IDLE
    assert events == []


def test_several_loops_in_one_call_give_one_before_transformer_and_one_before_vae_after_the_last(machine, events):
    call = machine.call_start()
    for _ in range(3):  # e.g. a prior loop then a decoder loop, or FreeInit's iterations
        machine.loop_enter()
        machine.loop_exit()
        assert guard.busy_reason()[0] == "inference_in_progress"  # between loops: still the call's
    machine.decode_start()
    machine.call_end(call)
    assert names(events) == ["before_transformer", "before_vae", "after_call"]
    assert call.loops == 3
    assert machine.call_index == 1


def test_a_call_that_does_not_decode_reports_before_vae_as_not_reached(machine, events):
    call = machine.call_start()
    machine.loop_enter()
    machine.loop_exit()
    machine.call_end(call)
    assert names(events) == [
        "before_transformer",
        "before_vae missed: the call did not decode after its denoising loop (e.g. output_type='latent')",
        "after_call",
    ]


def test_a_decode_inside_the_progress_bar_is_no_quiet_point(machine, events):
    call = machine.call_start()
    machine.loop_enter()
    machine.decode_start()  # e.g. a preview decode from a callback
    assert machine.phase is Phase.DENOISING
    machine.loop_exit()
    machine.call_end(call)
    assert names(events)[1] == (
        "before_vae missed: TestPipeline decoded only inside its denoising loop's progress bar before the bar "
        "counted all its steps, where no boundary may run, and not after the loop"
    )


def test_a_later_decode_after_a_preview_decode_fires_before_vae(machine, events):
    call = machine.call_start()
    machine.loop_enter()
    machine.decode_start()
    machine.loop_exit()
    machine.decode_start()
    machine.call_end(call)
    assert names(events) == ["before_transformer", "before_vae", "after_call"]


def test_a_decode_before_any_loop_is_not_the_decode_after_one(machine, events):
    call = machine.call_start()
    machine.decode_start()
    machine.loop_enter()
    machine.loop_exit()
    machine.decode_start()
    machine.call_end(call)
    assert names(events) == ["before_transformer", "before_vae", "after_call"]


def test_a_call_without_a_loop_reports_why(machine, events):
    call = machine.call_start()
    machine.call_end(call)
    assert names(events)[0].startswith("before_transformer missed: no denoising loop was seen in this TestPipeline")
    assert names(events)[1] == "before_vae missed: the call ran no denoising loop, so no decode followed one"
    assert names(events)[2] == "after_call"


def test_a_call_that_raised_still_ends_with_after_call_and_says_what_it_missed(machine, events):
    call = machine.call_start()
    machine.loop_enter()
    machine.call_end(call, ValueError("step failed"))
    assert names(events) == [
        "before_transformer",
        "before_vae missed: the call raised ValueError before it decoded",
        "after_call",
    ]
    assert machine.phase is Phase.IDLE
    assert guard.busy_reason() is None


def test_a_nested_call_of_the_same_pipeline_in_the_same_thread_joins_the_outer_call(machine, events):
    outer = machine.call_start()
    inner = machine.call_start()
    assert inner is outer
    machine.loop_enter()
    machine.loop_exit()
    machine.decode_start()
    machine.call_end(inner)
    assert names(events) == ["before_transformer", "before_vae"]
    machine.call_end(outer)
    assert names(events)[-1] == "after_call"
    assert machine.call_index == 1


def test_nested_progress_bars_keep_the_loop_open_until_the_outer_exits(machine, events):
    machine.call_start()
    machine.loop_enter()
    machine.loop_enter()
    machine.loop_exit()
    assert machine.phase is Phase.DENOISING
    machine.loop_exit()
    assert machine.phase is Phase.DECODING


def test_a_late_exit_from_an_earlier_calls_loop_is_ignored(machine):
    first = machine.call_start()
    stale = machine.loop_enter()
    machine.call_end(first, RuntimeError("left by an exception"))
    second = machine.call_start()
    machine.loop_enter()
    machine.loop_exit(stale)  # an abandoned iterated progress bar, finalized late
    assert machine.phase is Phase.DENOISING
    machine.call_end(second)


def test_calls_in_two_threads_keep_their_own_phases(machine, events):
    first = machine.call_start()
    machine.loop_enter()
    started, release = threading.Event(), threading.Event()
    seen = {}

    def other_thread():
        call = machine.call_start()
        seen["concurrent"], seen["phase"] = call.concurrent, machine.phase
        started.set()
        release.wait(HANG_SECONDS)
        machine.call_end(call)

    worker = threading.Thread(target=other_thread)
    worker.start()
    assert started.wait(HANG_SECONDS)
    assert seen == {"concurrent": True, "phase": Phase.PREPARING}
    assert machine.phase is Phase.DENOISING  # this thread's call was not reset
    assert [c.index for c in machine.calls()] == [1, 2]
    release.set()
    worker.join(10)
    machine.loop_exit()
    machine.decode_start()
    machine.call_end(first)
    assert [name for index, name in events if index == 1] == ["before_transformer", "before_vae", "after_call"]
    assert [name for index, name in events if index == 2][-1] == "after_call"
    assert machine.calls() == []


def test_a_failing_boundary_leaves_the_call_where_it_was_and_its_end_still_cleans_up():
    def fail(boundary, call):
        raise RuntimeError(f"{boundary} failed")

    m = CallPhases("P", fail, lambda b, c, d: None)
    call = m.call_start()
    with pytest.raises(RuntimeError, match="before_transformer failed"):
        m.loop_enter()
    assert m.phase is Phase.PREPARING
    with pytest.raises(RuntimeError, match="after_call failed"):
        m.call_end(call)
    assert m.phase is Phase.IDLE
    assert m.calls() == []
    assert guard.busy_reason() is None


# -- the loop's steps, counted by its progress bar ------------------------------------------------


def test_a_decode_inside_the_bar_once_it_counted_all_its_steps_fires_before_vae(machine, events):
    bar = object()  # Kandinsky 3: decode, free and return inside the bar, after the last step
    call = machine.call_start()
    machine.loop_enter(token=bar)
    machine.loop_steps_done(bar)
    assert machine.phase is Phase.DENOISING  # steps done, the bar still open
    machine.decode_start()
    assert machine.phase is Phase.DECODING
    assert guard.busy_reason()[0] == "inference_in_progress"  # the loop section closed where the decode started
    machine.loop_exit(call)
    machine.call_end(call)
    assert names(events) == ["before_transformer", "before_vae", "after_call"]


def test_chunks_under_one_bar_give_before_vae_at_the_decode_after_the_last_step(machine, events):
    bar = object()  # Cosmos 2.5 Transfer: one bar over every chunk, each chunk decoded inside it
    call = machine.call_start()
    machine.loop_enter(token=bar)
    machine.decode_start()  # the first chunk: steps to go
    assert names(events) == ["before_transformer"]
    machine.loop_steps_done(bar)
    machine.decode_start()  # the last chunk
    machine.call_end(call)
    assert names(events) == ["before_transformer", "before_vae", "after_call"]


def test_steps_counted_by_another_bar_or_call_change_nothing(machine, events):
    bar, nested = object(), object()
    call = machine.call_start()
    machine.loop_enter(token=bar)
    machine.loop_enter(token=nested)  # a progress bar inside the loop is not the loop's
    machine.loop_steps_done(nested)
    machine.loop_steps_done(None)
    machine.decode_start()
    assert machine.phase is Phase.DENOISING
    assert names(events) == ["before_transformer"]
    machine.call_end(call)


def test_a_bar_per_chunk_gives_before_vae_at_the_first_chunks_decode_and_once(machine, events):
    call = machine.call_start()  # Helios with two chunks: the first decode cannot know a chunk follows
    for _ in range(2):
        bar = object()
        machine.loop_enter(token=bar)
        machine.loop_steps_done(bar)
        machine.decode_start()
        machine.loop_exit(call)
    machine.call_end(call)
    assert names(events) == ["before_transformer", "before_vae", "after_call"]
    assert call.loops == 2


# -- stages ---------------------------------------------------------------------------------------


def test_an_earlier_stage_gives_no_boundary_and_the_final_stage_both(machine, events):
    call = machine.call_start()  # a prior pipeline's loop, then the decoder pipeline's
    machine.loop_enter(stage=Stage.EARLIER)
    assert guard.busy_reason()[0] == "denoising"
    machine.loop_exit()
    machine.decode_start()  # an earlier stage's decode (VisualCloze's first image)
    assert names(events) == []
    machine.loop_enter(stage=Stage.FINAL)
    machine.loop_exit()
    machine.decode_start()
    machine.call_end(call)
    assert names(events) == ["before_transformer", "before_vae", "after_call"]


def test_a_loop_of_unknown_stage_waits_for_its_first_denoiser_forward():
    seen = []
    m = CallPhases("P", lambda b, call: seen.append((b, call.loop_section, guard.busy_reason()[0])), lambda *a: None)
    call = m.call_start()  # Stable unCLIP: the prior's loop, then the unet's, under the same progress bar
    m.loop_enter(stage=None)
    assert m.current().loop_section is None
    m.denoiser_forward(earlier=True)  # the prior
    assert guard.busy_reason()[0] == "denoising"
    m.denoiser_forward(earlier=True)
    m.loop_exit()
    m.loop_enter(stage=None)
    assert seen == []
    m.denoiser_forward()  # the unet: before_transformer before it runs, outside any loop section
    assert seen == [("before_transformer", None, "inference_in_progress")]
    assert guard.busy_reason()[0] == "denoising"
    m.denoiser_forward()
    m.loop_exit()
    m.decode_start()
    m.call_end(call)
    assert [b for b, _, _ in seen] == ["before_transformer", "before_vae", "after_call"]
    assert call.stages == {Stage.EARLIER, Stage.FINAL}


def test_a_prior_outside_a_known_loop_starts_an_earlier_loop(machine, events):
    call = machine.call_start()
    machine.denoiser_forward(earlier=True)
    assert machine.phase is Phase.DENOISING
    machine.decode_start()  # ends the loop without a bar
    machine.denoiser_forward()
    machine.decode_start()
    machine.call_end(call)
    assert names(events) == ["before_transformer", "before_vae", "after_call"]


def test_a_call_that_ran_only_an_earlier_stage_says_so(machine, events):
    call = machine.call_start()  # VisualCloze with upsampling_strength=0 runs only its first pipeline
    machine.loop_enter(stage=Stage.EARLIER)
    machine.loop_exit()
    machine.decode_start()
    machine.call_end(call)
    assert names(events) == [
        "before_transformer missed: this TestPipeline call ran no loop of its final stage, only an earlier "
        "stage's (a prior, or a pipeline it holds before another that holds a denoiser)",
        "before_vae missed: the call ran no loop of its final stage, so no final decode followed one",
        "after_call",
    ]
