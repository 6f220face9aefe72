"""The ring's order, proved over the logged transport for thousands of schedules, and a missing edge caught.

Every schedule runs on the CPU with :class:`LoggedTransport` (copies at once, every operation logged);
:func:`check_log` then says whether a GPU, which runs the copy stream beside the compute stream, would
have read each unit's bytes after their copy and copied over them only after their last read.
"""

from __future__ import annotations

import random

import pytest
import torch

from ddo_hooks.errors import InvalidArgumentError
from ddo_hooks.streaming.ordering import check_log
from ddo_hooks.streaming.ring import ALIGNMENT, Ring, aligned
from ddo_hooks.streaming.transport import LoggedTransport

SCHEDULES = 2000


def units_of(ring: Ring, rng: random.Random, count: int, prefix: str = "u") -> list:
    made = []
    for i in range(count):
        sizes = [rng.randint(1, 3000) for _ in range(rng.randint(1, 3))]
        sources = [torch.randint(0, 255, (size,), dtype=torch.uint8, generator=None) for size in sizes]
        made.append(ring.add(f"{prefix}{i}", sources))
    return made


def forwards(rng: random.Random, units: list, count: int) -> list:
    """An order of runs: forwards of the units in order, with blocks skipped (a cache), a forward doubled
    (guidance), a unit run twice, and now and then another order altogether."""
    order = []
    for _ in range(count):
        times = 2 if rng.random() < 0.2 else 1
        for _ in range(times):
            if rng.random() < 0.1:
                order += rng.sample(units, len(units))
                continue
            for unit in units:
                if rng.random() < 0.1:
                    continue  # skipped
                order.append(unit)
                if rng.random() < 0.03:
                    order.append(unit)
    return order


def run(order: list, rings: dict) -> None:
    for unit in order:
        ring = rings[id(unit)]
        views = ring.begin(unit)
        for view, source in zip(views, unit.sources, strict=True):  # the bytes it reads are its own
            assert torch.equal(view, source), unit.key
        ring.end(unit)


def random_schedule(seed: int, ring_class=Ring):
    rng = random.Random(seed)
    transport = LoggedTransport(torch.device("cpu"))
    rings: dict[int, Ring] = {}
    streams = []
    for component in range(1 if rng.random() < 0.7 else 2):  # a second component interleaved
        count = rng.randint(1, 10)
        largest = 3 * aligned(3000)
        ring = ring_class(transport, capacity=rng.randint(largest, largest * (count + 2)), lookahead=rng.randint(1, 4),
                          poison=rng.random() < 0.3)  # fmt: skip
        units = units_of(ring, rng, count, prefix=f"c{component}.")
        rings.update({id(u): ring for u in units})
        streams.append(forwards(rng, units, rng.randint(1, 6)))
    order = []
    while any(streams):  # the components' forwards interleaved, each in its own order
        stream = rng.choice([s for s in streams if s])
        take = rng.randint(1, 5)
        order += stream[:take]
        del stream[:take]
    run(order, rings)
    return transport, {id(ring): ring for ring in rings.values()}.values(), order


def test_every_random_schedule_keeps_the_order_a_gpu_needs():
    began = waited = 0
    for seed in range(SCHEDULES):
        transport, rings, order = random_schedule(seed)
        assert check_log(transport.log) == [], f"seed {seed}"
        began += len(order)
        waited += sum(ring.waited for ring in rings)
    assert waited < began / 2  # most units were copied in ahead, the order of the runs changing as it did


def test_the_steady_state_copies_ahead_and_never_waits():
    transport = LoggedTransport(torch.device("cpu"))
    ring = Ring(transport, capacity=4 * aligned(1024), lookahead=2)
    units = [ring.add(f"b{i}", [torch.full((1024,), i, dtype=torch.uint8)]) for i in range(7)]
    run(units, {id(u): ring for u in units})  # the first forward: each unit copied when it begins
    assert ring.waited == 7
    run(units, {id(u): ring for u in units})  # the second: the first unit is not known to follow the last yet
    assert ring.waited == 8
    for _ in range(5):
        run(units, {id(u): ring for u in units})
    assert ring.waited == 8  # from then on every unit was in the ring before it began, wrapping round
    assert check_log(transport.log) == []


def test_a_ring_large_enough_for_every_unit_copies_each_once():
    transport = LoggedTransport(torch.device("cpu"))
    ring = Ring(transport, capacity=10 * aligned(1024), lookahead=2)
    units = [ring.add(f"b{i}", [torch.full((1024,), i, dtype=torch.uint8)]) for i in range(4)]
    for _ in range(3):
        run(units, {id(u): ring for u in units})
    assert ring.copied_bytes == 4 * aligned(1024)


def test_every_view_in_the_ring_is_aligned():
    transport = LoggedTransport(torch.device("cpu"))
    ring = Ring(transport, capacity=64 * 1024, lookahead=3)
    units = units_of(ring, random.Random(1), 8)
    for unit in units * 3:
        assert all(view.data_ptr() % ALIGNMENT == 0 for view in ring.begin(unit))
        ring.end(unit)


def test_each_view_holds_its_source_in_its_dtype_and_shape_wherever_the_ring_places_it():
    class Offset(LoggedTransport):
        def allocate(self, nbytes: int) -> torch.Tensor:  # a ring that starts 512 bytes into its storage
            return super().allocate(nbytes + ALIGNMENT)[ALIGNMENT:]

    ring = Ring(Offset(torch.device("cpu")), capacity=3 * 4096, lookahead=1)
    assert ring.buffer.storage_offset() > 0
    shapes = [(3, 5), (7,), (2, 3, 4), ()]
    dtypes = [torch.bfloat16, torch.float32, torch.int8, torch.float16]
    units = [
        ring.add(f"b{i}", [(torch.randn(shape) * 100).to(dtype) for shape, dtype in zip(shapes, dtypes, strict=True)])
        for i in range(5)
    ]
    for unit in units * 4:  # the slots wrap: each unit lands at several places
        views = ring.begin(unit)
        for view, source, offset in zip(views, unit.sources, unit.offsets, strict=True):
            assert view.data_ptr() == ring.buffer.data_ptr() + unit.slot + offset  # in its slot, in the ring
            assert (view.dtype, view.shape, view.is_contiguous()) == (source.dtype, source.shape, True)
            assert torch.equal(view, source)
        ring.end(unit)


def test_a_unit_larger_than_the_ring_is_refused_with_the_size_to_give():
    ring = Ring(LoggedTransport(torch.device("cpu")), capacity=1024, lookahead=2)
    with pytest.raises(InvalidArgumentError, match=r"big needs 2,048 bytes in the ring, which holds 1,024: give the "
                       r"ring at least 6,144 bytes \(ring_bytes\)"):  # fmt: skip
        ring.add("big", [torch.zeros(2048, dtype=torch.uint8)])


class EvictsWithoutWaiting(Ring):
    """The bug vLLM shipped (#54975): a copy over a slot that does not wait for the unit that read it."""

    def _evict(self, unit):
        unit.slot, unit.views, unit.read = None, [], False
        self._occupants.remove(unit)


class RunsWithoutWaiting(Ring):
    """A unit that runs without waiting for its copy (ComfyUI #10697: a missing stream edge)."""

    def begin(self, unit):
        transport = self.transport
        wait = transport.wait
        transport.wait = lambda stream, event: None if event is unit.ready else wait(stream, event)
        try:
            return super().begin(unit)
        finally:
            transport.wait = wait


@pytest.mark.parametrize(("broken", "kind"), [(EvictsWithoutWaiting, "overwrite_before_read"),
                                              (RunsWithoutWaiting, "read_before_copy")])  # fmt: skip
def test_a_ring_missing_an_edge_is_caught_by_the_checker(broken, kind):
    caught = 0
    for seed in range(200):
        transport, _, _ = random_schedule(seed, broken)
        kinds = {v.kind for v in check_log(transport.log)}
        assert kinds <= {kind}
        caught += kind in kinds
    # the outputs on the CPU were right in every one; schedules whose ring holds every unit never evict one
    assert caught >= 20


def test_a_log_with_one_wait_taken_out_fails_the_check():
    transport = LoggedTransport(torch.device("cpu"))
    ring = Ring(transport, capacity=3 * aligned(1024), lookahead=1)
    units = [ring.add(f"b{i}", [torch.full((1024,), i, dtype=torch.uint8)]) for i in range(5)]
    for _ in range(3):
        run(units, {id(u): ring for u in units})
    log = transport.log
    assert check_log(log) == []
    waits = [i for i, entry in enumerate(log) if entry[0] == "wait"]
    copy_waits = [i for i in waits if log[i][1] == "copy"]
    compute_waits = [i for i in waits if log[i][1] == "compute"]
    assert copy_waits
    assert compute_waits
    for index in copy_waits:
        assert {v.kind for v in check_log(log[:index] + log[index + 1 :])} == {"overwrite_before_read"}, index
    for index in compute_waits:
        assert {v.kind for v in check_log(log[:index] + log[index + 1 :])} == {"read_before_copy"}, index
