"""The phase machine: which boundary fires on which signal, and what refuses."""

import threading

import pytest

from ddo_hooks.hooks.phases import CallPhases, Phase
from ddo_hooks.release import guard


@pytest.fixture
def fired():
    return []


@pytest.fixture
def machine(fired):
    m = CallPhases("TestPipeline", fired.append)
    yield m
    m.reset()


def test_a_normal_call_fires_the_three_boundaries_in_order(machine, fired):
    machine.call_start()
    assert machine.phase is Phase.PREPARING
    machine.loop_enter()
    assert machine.phase is Phase.DENOISING
    machine.loop_exit(error=False)
    assert machine.phase is Phase.DECODING
    machine.call_end()
    assert fired == ["before_transformer", "before_vae", "after_call"]
    assert machine.phase is Phase.IDLE
    assert machine.call_index == 1


def test_the_loop_holds_a_denoising_section_that_refuses_releases(machine):
    machine.call_start()
    machine.loop_enter()
    assert guard.busy_reason()[0] == "denoising"
    machine.loop_exit(error=False)
    assert guard.busy_reason() is None


def test_before_transformer_fires_before_the_section_opens(fired):
    seen = []
    m = CallPhases("P", lambda b: seen.append((b, guard.busy_reason())))
    m.call_start()
    m.loop_enter()
    m.loop_exit(error=False)
    m.call_end()
    assert seen == [("before_transformer", None), ("before_vae", None), ("after_call", None)]


def test_denoiser_forwards_inside_the_loop_fire_nothing(machine, fired):
    machine.call_start()
    machine.loop_enter()
    for _ in range(5):
        machine.denoiser_forward()
    assert fired == ["before_transformer"]


def test_a_denoiser_forward_before_a_seen_loop_starts_denoising(machine, fired):
    machine.call_start()
    machine.denoiser_forward()
    assert machine.phase is Phase.DENOISING
    machine.decode_start()
    machine.call_end()
    assert fired == ["before_transformer", "before_vae", "after_call"]


def test_a_denoiser_forward_outside_a_call_is_ignored(machine, fired):
    machine.denoiser_forward()
    assert machine.phase is Phase.IDLE
    assert fired == []


def test_decode_ends_a_loop_whose_end_was_not_seen(machine, fired):
    machine.call_start()
    machine.loop_enter()
    machine.decode_start()
    assert machine.phase is Phase.DECODING
    assert guard.busy_reason() is None
    machine.loop_exit(error=False)  # the late exit changes nothing
    machine.call_end()
    assert fired == ["before_transformer", "before_vae", "after_call"]


def test_an_exception_leaving_the_loop_aborts_the_call(machine, fired):
    machine.call_start()
    machine.loop_enter()
    machine.loop_exit(error=True)
    assert machine.phase is Phase.IDLE
    assert guard.busy_reason() is None
    machine.call_end()  # a later maybe_free_model_hooks outside a call fires nothing
    assert fired == ["before_transformer"]


def test_the_next_call_after_an_abort_fires_everything_again(machine, fired):
    machine.call_start()
    machine.loop_enter()
    machine.loop_exit(error=True)
    machine.call_start()
    machine.loop_enter()
    machine.loop_exit(error=False)
    machine.call_end()
    assert fired == ["before_transformer", "before_transformer", "before_vae", "after_call"]
    assert machine.call_index == 2


def test_a_call_start_drops_a_call_left_half_done(machine, fired):
    machine.call_start()
    machine.loop_enter()  # e.g. an iterated progress bar abandoned by an exception
    machine.call_start()
    assert machine.phase is Phase.PREPARING
    assert guard.busy_reason() is None


def test_a_loop_without_check_inputs_starts_a_call(machine, fired):
    machine.loop_enter()
    assert machine.call_index == 1
    assert fired == ["before_transformer"]


def test_nested_progress_bars_keep_the_loop_open_until_the_outer_exits(machine, fired):
    machine.call_start()
    machine.loop_enter()
    machine.loop_enter()
    machine.loop_exit(error=False)
    assert machine.phase is Phase.DENOISING
    machine.loop_exit(error=False)
    assert fired == ["before_transformer", "before_vae"]


def test_a_late_exit_from_an_earlier_calls_loop_is_ignored(machine, fired):
    first = machine.loop_enter()
    machine.loop_exit(error=True, call=first)
    second = machine.loop_enter()
    machine.loop_exit(error=True, call=first)
    assert machine.phase is Phase.DENOISING
    assert second != first


def test_call_end_outside_a_call_fires_nothing(machine, fired):
    machine.call_end()
    assert fired == []


def test_a_failing_boundary_leaves_the_call_where_it_was():
    def fail(boundary):
        raise RuntimeError(f"{boundary} failed")

    m = CallPhases("P", fail)
    m.call_start()
    with pytest.raises(RuntimeError, match="before_transformer failed"):
        m.loop_enter()
    assert m.phase is Phase.PREPARING
    assert guard.busy_reason() is None


def test_host_requests_are_refused_inside_the_loop(machine):
    machine.call_start()
    machine.loop_enter()
    assert machine.refusal_for_host()[0] == "denoising"


def test_host_requests_from_another_thread_during_a_call_are_refused(machine):
    machine.call_start()
    answers = []
    worker = threading.Thread(target=lambda: answers.append(machine.refusal_for_host()))
    worker.start()
    worker.join()
    assert answers[0][0] == "inference_in_progress"
    assert machine.phase is Phase.PREPARING


def test_a_host_request_in_the_calls_own_thread_ends_a_call_left_by_an_exception(machine):
    machine.call_start()
    machine.loop_enter()
    machine.loop_exit(error=False)  # then the VAE decode raised: no after_call came
    assert machine.refusal_for_host() is None
    assert machine.phase is Phase.IDLE
