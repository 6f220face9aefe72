"""The release core: ``release_pytorch_host_cache``.

Call it only at a quiescent phase boundary, after dropping completed component references.
With ``enabled=True`` an executed boundary collects Python garbage, waits once for the
selected device's transfers, reads the allocator counters, asks PyTorch to release unused
pinned host blocks, and reads the counters again, all inside ``elapsed_seconds``. Live
blocks and blocks still pending on other devices remain allocator-owned.

It is an explicit no-op (a report that says why) when disabled (the default), when CUDA is
not in use in this process, when the torch build has no host-cache entry point, and in a
forked child. It never initializes CUDA and never creates a CUDA context. It never clears
native source storage, changes budgets or runs inside denoise steps. Synchronization and
release failures propagate as :class:`~ddo_hooks.errors.HostCacheReleaseError`.

Examples:
    >>> report = release_pytorch_host_cache(enabled=True, phase="before_transformer", device="cuda:0")
    >>> r = report.release
    >>> r.status, r.released, r.noop_reason in {"unsupported_build", "cuda_not_initialized"}
    ('noop', False, True)
"""

from __future__ import annotations

import gc
import re
import time
import weakref
from collections.abc import Mapping
from typing import Literal

from ddo_hooks._compat import version_at_least
from ddo_hooks.boundaries import PHASE_PATTERN
from ddo_hooks.errors import BoundaryRefusedError, HostCacheReleaseError, InvalidArgumentError
from ddo_hooks.release import allocator as _allocator
from ddo_hooks.release import guard
from ddo_hooks.release.counters import pinning_between, read_snapshot, snapshot_from_raw
from ddo_hooks.release.devices import DeviceLike, parse_cuda_device
from ddo_hooks.release.host_memory import observe_host
from ddo_hooks.reports.host_cache import (
    AllocatorSnapshot,
    GarbageCollection,
    HostCacheRelease,
    HostCacheReleaseReport,
    HostCacheReleaseSetup,
    NoopReason,
    ReleaseTimings,
    ThresholdDecision,
    noop_release,
    owned_delta,
)

__all__ = ["CollectStrategy", "not_triggered", "release_pytorch_host_cache"]

CollectStrategy = Literal["full", "young", "auto"]
"""``full``: :func:`gc.collect` of every generation (the default; 170-300 ms in a process
holding a loaded pipeline). ``young``: generations 0 and 1 only (well under a millisecond).
``auto``: young, then full only if an object in ``expect_freed`` is still alive."""

_PHASE_RE = re.compile(PHASE_PATTERN)
_TRUSTED_ACTIVE_COUNTER = (2, 13)  # the active counter is wrong before torch 2.13 (docs/reports.md)


def _check_arguments(
    enabled: object,
    phase: object,
    collect: object,
    expect_freed: object,
    min_releasable_bytes: object,
) -> None:
    if not isinstance(enabled, bool):
        raise InvalidArgumentError(f"enabled={enabled!r} must be True or False")
    if not isinstance(phase, str) or not _PHASE_RE.fullmatch(phase):
        raise InvalidArgumentError(
            f"phase={phase!r} is not a phase label: use a lowercase letter then up to 63 of a-z, 0-9, "
            "'_', '.', '-' (e.g. 'before_transformer')"
        )
    if collect not in ("full", "young", "auto"):
        raise InvalidArgumentError(f"collect={collect!r} must be 'full', 'young' or 'auto'")
    if expect_freed is not None:
        if not isinstance(expect_freed, Mapping):
            raise InvalidArgumentError("expect_freed must map names to weakref.ref objects")
        for name, ref in expect_freed.items():
            if not isinstance(name, str) or not name or not isinstance(ref, weakref.ReferenceType):
                raise InvalidArgumentError(
                    f"expect_freed[{name!r}] must be a weakref.ref under a non-empty name; a strong "
                    "reference would keep the object alive"
                )
    if isinstance(min_releasable_bytes, bool) or not isinstance(min_releasable_bytes, int) or min_releasable_bytes < 0:
        raise InvalidArgumentError(f"min_releasable_bytes={min_releasable_bytes!r} must be an int >= 0")


def _allocator_in_use(backend: _allocator.HostAllocatorBackend) -> bool:
    """Whether CUDA is in use here although ``torch.cuda.is_initialized()`` is False.

    Pinning memory initializes CUDA in C++ without setting the Python flag; the raw counters
    (read without a CUDA call) show whether the host allocator ever allocated.
    """
    try:
        raw = backend.raw_host_stats()
    except Exception:
        return False
    if not raw:
        return False
    snapshot = snapshot_from_raw(raw)
    count = raw.get("num_host_alloc", 0)
    return bool(snapshot.allocated_bytes) or (isinstance(count, int) and not isinstance(count, bool) and count > 0)


def _collect(strategy: CollectStrategy, expect_freed: Mapping[str, weakref.ref]) -> GarbageCollection:
    if strategy == "full":
        found, full = gc.collect(), True
    else:
        found, full = gc.collect(1), False
        if strategy == "auto" and any(ref() is not None for ref in expect_freed.values()):
            found, full = found + gc.collect(), True
    return GarbageCollection(
        strategy=strategy,
        full_collection=full,
        unreachable_objects=found,
        expected_freed=tuple(expect_freed),
        survivors=tuple(name for name, ref in expect_freed.items() if ref() is not None),
    )


def _threshold(before: AllocatorSnapshot, minimum: int, torch_version: str) -> ThresholdDecision:
    active, allocated = before.active_bytes, before.allocated_bytes
    if active is None or allocated is None or not version_at_least(torch_version, _TRUSTED_ACTIVE_COUNTER):
        return ThresholdDecision(
            min_releasable_bytes=minimum, releasable_bytes=None, decision="release_counter_untrusted"
        )
    releasable = allocated - active
    decision: Literal["release", "skip_below_threshold"] = (
        "release" if releasable >= minimum else "skip_below_threshold"
    )
    return ThresholdDecision(min_releasable_bytes=minimum, releasable_bytes=releasable, decision=decision)


def _noop(
    phase: str, reason: NoopReason, detail: str, device: str, torch_version: str, started: float
) -> HostCacheReleaseReport:
    """A release that did not run; it still observes the host, so that every row of a run has the process RSS."""
    t = time.perf_counter()
    host = observe_host()  # nothing ran: the RSS before and after is this one reading
    seen = time.perf_counter() - t
    elapsed = time.perf_counter() - started
    return noop_release(
        phase, reason, detail, device=device, torch_version=torch_version, elapsed_seconds=elapsed, host=host,
        snapshot_seconds=seen,
    )  # fmt: skip


def not_triggered(phase: str, detail: str, device: DeviceLike = "cuda") -> HostCacheReleaseReport:
    """The explicit no-op report of a release the policy did not trigger (``noop_reason: not_triggered``).

    Examples:
        >>> not_triggered("before_transformer", "no component left the pipeline").release.noop_reason
        'not_triggered'
    """
    index = parse_cuda_device(device)
    label = "cuda" if index is None else f"cuda:{index}"
    return _noop(phase, "not_triggered", detail, label, _allocator.backend().torch_version(), time.perf_counter())


def release_pytorch_host_cache(
    enabled: bool = False,
    phase: str = "manual",
    device: DeviceLike = "cuda",
    *,
    collect: CollectStrategy = "full",
    expect_freed: Mapping[str, weakref.ref] | None = None,
    min_releasable_bytes: int = 0,
    pinned_since: tuple[str, AllocatorSnapshot] | None = None,
) -> HostCacheReleaseReport:
    """Release PyTorch's unused pinned host blocks at a quiet phase boundary.

    Detach completed prior components and drop caller-owned references first: a block a
    tensor still holds is live and stays allocator-owned.

    Args:
        enabled: Run the boundary. ``False`` (the default) returns an explicit no-op report.
        phase: The phase label recorded in the report (see :data:`~ddo_hooks.boundaries.PHASE_PATTERN`).
        device: The device whose transfers are waited for: ``"cuda"`` (the current device),
            ``"cuda:N"``, a CUDA ``torch.device`` or an int.
        collect: The garbage collection strategy (see :data:`CollectStrategy`).
        expect_freed: Names mapped to weak references of objects that should be dead by now
            (dropped components). With ``collect="auto"`` a full collection runs only when
            one of them is still alive; survivors are named in the report.
        min_releasable_bytes: Skip the release (a ``below_threshold`` no-op) when fewer
            releasable bytes are cached. Decided only from a trustworthy active counter; when
            it is not, the release runs and the report says so.
        pinned_since: The previous boundary's label and its last allocator snapshot; the report
            then says what was pinned in between (``pinned_since_previous``), the cost the
            previous release passed on. Attachments pass it; ``None`` leaves it out.

    Returns:
        The validated report (route ``pytorch_host_cache_release``).

    Raises:
        InvalidArgumentError: A malformed argument, or a device index this machine lacks.
        BoundaryRefusedError: Components are loading, a denoising loop runs, or another
            release is in progress (see :mod:`ddo_hooks.release.guard`).
        HostCacheReleaseError: Synchronizing the device or the release call failed.

    Examples:
        >>> release_pytorch_host_cache().release.noop_reason
        'disabled'
    """
    started = time.perf_counter()
    _check_arguments(enabled, phase, collect, expect_freed, min_releasable_bytes)
    if pinned_since is not None and not (
        isinstance(pinned_since, tuple)
        and len(pinned_since) == 2
        and isinstance(pinned_since[0], str)
        and _PHASE_RE.fullmatch(pinned_since[0])
        and isinstance(pinned_since[1], AllocatorSnapshot)
    ):
        raise InvalidArgumentError("pinned_since must be None or (a phase label, an AllocatorSnapshot)")
    index = parse_cuda_device(device)
    label = "cuda" if index is None else f"cuda:{index}"
    backend = _allocator.backend()
    version = backend.torch_version()
    if not enabled:
        return _noop(phase, "disabled", "release disabled (enabled=False)", label, version, started)
    busy = guard.busy_reason()  # refused wherever it is requested, also where it would be a no-op
    if busy is not None:
        raise BoundaryRefusedError(busy[0], f"host-cache release refused: {busy[1]}")
    cuda_initialized = backend.cuda_initialized()
    entry = backend.entry_point(lazy_init_done=cuda_initialized)
    if isinstance(entry, str):
        return _noop(phase, "unsupported_build", entry, label, version, started)
    if backend.in_bad_fork():
        return _noop(
            phase,
            "forked_child",
            "forked child of a CUDA process: it cannot release its parent's pinned blocks",
            label,
            version,
            started,
        )
    if not cuda_initialized:
        if not _allocator_in_use(backend):
            return _noop(
                phase,
                "cuda_not_initialized",
                "CUDA is not initialized in this process and the host allocator never allocated: nothing is cached",
                label,
                version,
                started,
            )
        if entry.requires_lazy_init:
            return _noop(
                phase,
                "lazy_init_required",
                f"{entry.name} does nothing before torch's lazy CUDA init, which has not run in this process",
                label,
                version,
                started,
            )
    if index is not None:
        count = backend.device_count()
        if index >= count:
            raise InvalidArgumentError(
                f"device={device!r}: this process sees {count} CUDA device(s), so use 0..{count - 1}"
            )
    if cuda_initialized and index is None:
        index = backend.current_device()
    # When memory was pinned but no CUDA tensor was ever made (torch.cuda.is_initialized() is
    # False), torch has issued no transfer to wait for: neither the current device nor a
    # synchronize is asked for, since both would run torch's lazy CUDA init.
    return _execute(
        backend,
        entry,
        phase,
        index,
        cuda_initialized,
        collect,
        expect_freed or {},
        min_releasable_bytes,
        pinned_since,
        started,
    )


def _execute(
    backend: _allocator.HostAllocatorBackend,
    entry: _allocator.EntryPoint,
    phase: str,
    index: int | None,
    may_synchronize: bool,
    collect: CollectStrategy,
    expect_freed: Mapping[str, weakref.ref],
    min_releasable_bytes: int,
    pinned_since: tuple[str, AllocatorSnapshot] | None,
    started: float,
) -> HostCacheReleaseReport:
    version = backend.torch_version()
    with guard.releasing():
        t = time.perf_counter()
        collection = _collect(collect, expect_freed)
        collect_seconds = time.perf_counter() - t

        synchronize_seconds = None
        if may_synchronize and index is not None and backend.has_primary_context(index):
            t = time.perf_counter()
            try:
                backend.synchronize(index)
            except Exception as e:
                raise HostCacheReleaseError(
                    f"synchronizing cuda:{index} before the {phase!r} release failed: {e}"
                ) from e
            synchronize_seconds = time.perf_counter() - t

        t = time.perf_counter()
        before = read_snapshot(backend.raw_host_stats)
        host_before = observe_host()
        snapshot_seconds = time.perf_counter() - t

        threshold = None
        if min_releasable_bytes:
            threshold = _threshold(before, min_releasable_bytes, version)
        release_seconds = after = host_after = None
        if threshold is None or threshold.decision != "skip_below_threshold":
            t = time.perf_counter()
            try:
                entry.call()
            except Exception as e:
                raise HostCacheReleaseError(f"{entry.name}() failed at the {phase!r} boundary: {e}") from e
            release_seconds = time.perf_counter() - t

            t = time.perf_counter()
            after = read_snapshot(backend.raw_host_stats)
            host_after = observe_host()
            snapshot_seconds += time.perf_counter() - t

    executed = release_seconds is not None
    synchronized = synchronize_seconds is not None
    if executed:
        detail = f"released unused pinned host blocks through {entry.name}"
    else:
        detail = (
            f"{threshold.releasable_bytes} releasable bytes cached, below min_releasable_bytes="  # type: ignore[union-attr]  # a skipped release had a threshold: it is what skipped it
            f"{min_releasable_bytes}: not released"
        )
    if not may_synchronize:
        detail += "; no CUDA tensor was ever made in this process, so there were no transfers to wait for"
    elif not synchronized:
        detail += f"; cuda:{index} has no CUDA context, so there were no transfers to wait for"
    delta = owned_delta(before, after)
    since = None
    if pinned_since is not None and before.status == "available" and pinned_since[1].status == "available":
        since = pinning_between(pinned_since[0], pinned_since[1], before)
    return HostCacheReleaseReport(
        setup=HostCacheReleaseSetup(
            host_cache_release=HostCacheRelease(
                phase=phase,
                status="executed" if executed else "noop",
                noop_reason=None if executed else "below_threshold",
                detail=detail,
                released=executed,
                elapsed_seconds=time.perf_counter() - started,
                timings=ReleaseTimings(
                    collect_seconds=collect_seconds,
                    synchronize_seconds=synchronize_seconds,
                    snapshot_seconds=snapshot_seconds,
                    release_seconds=release_seconds,
                ),
                device="cuda" if index is None else f"cuda:{index}",
                synchronized=synchronized,
                entry_point=entry.name,
                torch_version=version,
                collection=collection,
                threshold=threshold,
                before=before,
                after=after,
                allocator_bytes_delta=delta,
                host_before=host_before,
                host_after=host_after,
                pinned_since_previous=since,
                pinned_allocation=_allocator.pinned_allocation(),
            )
        )
    )
