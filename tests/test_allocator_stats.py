"""Raw host-allocator counters of every supported torch, normalized into snapshots."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ddo_hooks.release.counters import snapshot_from_raw, unavailable_snapshot
from ddo_hooks.reports.allocator import AllocatorSnapshot

MiB = 1 << 20


def stat(current: object) -> dict[str, object]:
    return {"current": current, "peak": 0, "allocated": 0, "freed": 0}


def test_torch_2_10_and_later_nested_counters():
    s = snapshot_from_raw({"allocated_bytes": stat(8 * MiB), "active_bytes": stat(2 * MiB), "num_host_alloc": 3})
    assert (s.status, s.counter_layout) == ("available", "torch>=2.10")
    assert (s.allocated_bytes, s.reported_active_bytes, s.active_bytes) == (8 * MiB, 2 * MiB, 2 * MiB)
    assert s.active_counter_consistent is True
    assert s.unavailable_reason is None


def test_torch_2_10_and_later_flat_counters():
    s = snapshot_from_raw({"allocated_bytes.current": 8 * MiB, "active_bytes.current": 2 * MiB})
    assert (s.counter_layout, s.allocated_bytes, s.active_bytes) == ("torch>=2.10", 8 * MiB, 2 * MiB)


def test_torch_2_7_to_2_9_owned_bytes_are_reserved_bytes_and_active_is_allocated_bytes():
    s = snapshot_from_raw({"reserved_bytes": stat(8 * MiB), "allocated_bytes": stat(2 * MiB), "segment": stat(2)})
    assert s.counter_layout == "torch2.7-2.9"
    assert (s.allocated_bytes, s.reported_active_bytes, s.active_bytes) == (8 * MiB, 2 * MiB, 2 * MiB)


def test_torch_2_7_to_2_9_flat_counters():
    s = snapshot_from_raw({"reserved_bytes.current": 4096, "allocated_bytes.current": 1024})
    assert (s.counter_layout, s.allocated_bytes, s.active_bytes) == ("torch2.7-2.9", 4096, 1024)


def test_the_torch_2_11_counters_seen_after_a_release_keep_the_reported_value_and_mark_it_inconsistent():
    s = snapshot_from_raw({"allocated_bytes": stat(0), "active_bytes": stat(3_904_897_030)})
    assert (s.status, s.allocated_bytes) == ("available", 0)
    assert s.reported_active_bytes == 3_904_897_030
    assert s.active_bytes is None
    assert s.active_counter_consistent is False


@pytest.mark.parametrize("active", [-1, -4096])
def test_a_negative_active_counter_is_reported_but_not_validated(active: int):
    s = snapshot_from_raw({"allocated_bytes": stat(4096), "active_bytes": stat(active)})
    assert (s.reported_active_bytes, s.active_bytes, s.active_counter_consistent) == (active, None, False)


def test_a_non_integer_active_counter_is_reported_but_not_validated():
    s = snapshot_from_raw({"allocated_bytes": stat(4096), "active_bytes": stat(1024.0)})
    assert (s.reported_active_bytes, s.active_bytes, s.active_counter_consistent) == (1024.0, None, False)


@pytest.mark.parametrize("active", [math.nan, math.inf, -math.inf, "1024", True, None, [1]])
def test_an_active_counter_that_is_not_a_finite_number_is_absent(active: object):
    s = snapshot_from_raw({"allocated_bytes": stat(4096), "active_bytes": stat(active)})
    assert (s.status, s.reported_active_bytes, s.active_bytes) == ("available", None, None)


def test_an_absent_active_counter_leaves_the_owned_bytes_available():
    s = snapshot_from_raw({"allocated_bytes": stat(4096), "active_bytes": {}})
    assert (s.allocated_bytes, s.reported_active_bytes, s.active_bytes) == (4096, None, None)
    assert s.active_counter_consistent is False


def test_no_counters_from_this_torch_is_unavailable_not_zero():
    s = snapshot_from_raw(None)
    assert s.status == "unavailable"
    assert s.unavailable_reason == "this torch cannot read the host allocator counters (torch >= 2.7 can)"
    assert (s.allocated_bytes, s.reported_active_bytes, s.active_bytes) == (None, None, None)


@pytest.mark.parametrize("raw", [{}, {"segment": stat(1), "num_host_alloc": 1}])
def test_unrecognized_keys_are_unavailable_and_named(raw: dict):
    s = snapshot_from_raw(raw)
    assert s.status == "unavailable"
    assert s.unavailable_reason == f"unrecognized host allocator stats keys: {sorted(raw)}"


@pytest.mark.parametrize("owned", [-1, 1.5, 4096.0, "4096", True, None])
def test_owned_bytes_that_are_not_a_byte_count_make_the_snapshot_unavailable(owned: object):
    s = snapshot_from_raw({"allocated_bytes": stat(owned), "active_bytes": stat(0)})
    assert s.status == "unavailable"
    assert s.unavailable_reason == f"host allocator reported allocated_bytes.current={owned!r}, not a byte count"
    assert s.allocated_bytes is None


def test_an_unavailable_snapshot_carries_no_counters():
    s = unavailable_snapshot("reading failed")
    assert s == AllocatorSnapshot(
        status="unavailable",
        unavailable_reason="reading failed",
        allocated_bytes=None,
        reported_active_bytes=None,
        active_bytes=None,
        active_counter_consistent=False,
    )


KNOWN_KEYS = st.sampled_from(
    [
        "allocated_bytes",
        "active_bytes",
        "reserved_bytes",
        "allocated_bytes.current",
        "active_bytes.current",
        "reserved_bytes.current",
        "current",
        "num_host_alloc",
    ]
)
LEAVES = st.one_of(
    st.integers(),
    st.integers(min_value=0, max_value=1 << 40),
    st.floats(),
    st.text(max_size=8),
    st.booleans(),
    st.none(),
)
RAW = st.recursive(
    LEAVES,
    lambda children: st.dictionaries(KNOWN_KEYS | st.text(max_size=8), children, max_size=6),
    max_leaves=20,
)


@given(st.dictionaries(KNOWN_KEYS | st.text(max_size=8), RAW, max_size=6))
def test_snapshot_from_raw_never_raises_and_never_invents_counters(raw: dict):
    s = snapshot_from_raw(raw)
    assert isinstance(s, AllocatorSnapshot)
    if s.status == "available":
        assert isinstance(s.allocated_bytes, int)
        assert s.allocated_bytes >= 0
        assert s.active_counter_consistent is (s.active_bytes is not None)
    else:
        assert (s.allocated_bytes, s.reported_active_bytes, s.active_bytes) == (None, None, None)
        assert s.unavailable_reason
