"""Host memory observations: process RSS everywhere, which memory it is on Linux, the commit picture on Windows.

On Linux, RSS is split as ``/proc/self/status`` splits it: ``RssAnon`` (the heap, copies of
weights), ``RssFile`` (mmap'd file pages, such as safetensors weights that the kernel can drop
and read again) and ``RssShmem`` (where CUDA's pinned host memory shows). The process's cgroup
adds what a container limit counts: its charged memory and its limit (cgroup v2, else v1).

Pinned memory is committed, locked private memory: on Windows it raises the process's
private bytes and the system commit charge. Besides RSS (psutil), a Windows observation
reads ``PrivateUsage`` (``K32GetProcessMemoryInfo`` with ``PROCESS_MEMORY_COUNTERS_EX``),
and from ``GlobalMemoryStatusEx`` the physical memory available (``ullAvailPhys``) and the
commit the process can still use (``ullAvailPageFile``), never pagefile free disk space.

A field whose call failed is ``None`` and listed in ``unavailable`` with the reason. These
are snapshots, not peaks, and they never affect a policy decision.

Examples:
    >>> obs = observe_host()
    >>> obs.rss_bytes > 0
    True
"""

from __future__ import annotations

import ctypes
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from ddo_hooks.reports.base import HostObservation

__all__ = ["MEMORYSTATUSEX", "PROCESS_MEMORY_COUNTERS_EX", "observe_host"]

_DWORD = ctypes.c_uint32  # wintypes.DWORD has another size off Windows
_STATUS_FIELDS = {"RssAnon": "rss_anon_bytes", "RssFile": "rss_file_bytes", "RssShmem": "rss_shmem_bytes"}
_CGROUP_FIELDS = ("cgroup_memory_bytes", "cgroup_limit_bytes")
_UNLIMITED = 1 << 62  # cgroup v1 writes "no limit" as a page-rounded 2**63 - 1


class MEMORYSTATUSEX(ctypes.Structure):
    """``MEMORYSTATUSEX`` (64 bytes)."""

    _fields_ = [
        ("dwLength", _DWORD),
        ("dwMemoryLoad", _DWORD),
        ("ullTotalPhys", ctypes.c_uint64),
        ("ullAvailPhys", ctypes.c_uint64),
        ("ullTotalPageFile", ctypes.c_uint64),
        ("ullAvailPageFile", ctypes.c_uint64),
        ("ullTotalVirtual", ctypes.c_uint64),
        ("ullAvailVirtual", ctypes.c_uint64),
        ("ullAvailExtendedVirtual", ctypes.c_uint64),
    ]


class PROCESS_MEMORY_COUNTERS_EX(ctypes.Structure):
    """``PROCESS_MEMORY_COUNTERS_EX`` (80 bytes on 64-bit Windows)."""

    _fields_ = [
        ("cb", _DWORD),
        ("PageFaultCount", _DWORD),
        ("PeakWorkingSetSize", ctypes.c_size_t),
        ("WorkingSetSize", ctypes.c_size_t),
        ("QuotaPeakPagedPoolUsage", ctypes.c_size_t),
        ("QuotaPagedPoolUsage", ctypes.c_size_t),
        ("QuotaPeakNonPagedPoolUsage", ctypes.c_size_t),
        ("QuotaNonPagedPoolUsage", ctypes.c_size_t),
        ("PagefileUsage", ctypes.c_size_t),
        ("PeakPagefileUsage", ctypes.c_size_t),
        ("PrivateUsage", ctypes.c_size_t),
    ]


def _platform() -> str:
    if sys.platform == "win32":
        return "windows"
    if sys.platform.startswith("linux"):
        return "linux"
    return "darwin" if sys.platform == "darwin" else "other"


def _last_error() -> int | None:
    get = getattr(ctypes, "get_last_error", None)  # Windows only
    return None if get is None else get()


def _windows_kernel32() -> Any:
    return ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]  # WinDLL exists only on Windows, where this runs


def _windows_call(name: str, call: Callable[[], Any]) -> str | None:
    """Call the Windows function ``name``: ``None`` when it succeeded, else why not (its exception, or GetLastError)."""
    try:
        ok = call()
    except Exception as e:  # a missing export or a ctypes failure
        return f"{name} raised {type(e).__name__}: {e}"
    return None if ok else f"{name} failed (GetLastError={_last_error()})"


def _windows_fields(kernel32: Any, values: dict[str, int | None], unavailable: dict[str, str]) -> None:
    status = MEMORYSTATUSEX()
    status.dwLength = ctypes.sizeof(MEMORYSTATUSEX)
    why = _windows_call("GlobalMemoryStatusEx", lambda: kernel32.GlobalMemoryStatusEx(ctypes.byref(status)))
    if why is None:
        values["physical_available_bytes"] = int(status.ullAvailPhys)
        values["commit_available_bytes"] = int(status.ullAvailPageFile)
    else:
        unavailable["physical_available_bytes"] = unavailable["commit_available_bytes"] = why

    counters = PROCESS_MEMORY_COUNTERS_EX()
    counters.cb = ctypes.sizeof(PROCESS_MEMORY_COUNTERS_EX)
    why = _windows_call(
        "K32GetProcessMemoryInfo",
        lambda: kernel32.K32GetProcessMemoryInfo(kernel32.GetCurrentProcess(), ctypes.byref(counters), counters.cb),
    )
    if why is None:
        values["private_bytes"] = int(counters.PrivateUsage)
    else:
        unavailable["private_bytes"] = why


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None


def _status_fields(proc: Path, values: dict[str, int | None], unavailable: dict[str, str]) -> None:
    text = _read(proc / "status")
    found: dict[str, int] = {}
    for line in (text or "").splitlines():
        key, _, rest = line.partition(":")
        if key in _STATUS_FIELDS and (match := re.fullmatch(r"\s*([0-9]{1,15}) kB\s*", rest)):
            found[_STATUS_FIELDS[key]] = int(match.group(1)) * 1024
    for key, name in _STATUS_FIELDS.items():
        if name in found:
            values[name] = found[name]
        else:
            unavailable[name] = f"{proc / 'status'} " + ("could not be read" if text is None else f"has no {key} line")


def _cgroup_files(proc: Path, cgroups: Path) -> tuple[Path, Path] | None:
    """The usage and limit files of this process's cgroup: v2 when it has them, else v1's memory controller."""
    for line in (_read(proc / "cgroup") or "").splitlines():
        number, controllers, path = [*line.split(":", 2), "", ""][:3]
        relative = path.strip().lstrip("/")
        if number == "0" and not controllers and (cgroups / relative / "memory.current").is_file():
            return cgroups / relative / "memory.current", cgroups / relative / "memory.max"
        if "memory" in controllers.split(","):
            folder = cgroups / "memory" / relative
            if not (folder / "memory.usage_in_bytes").is_file():  # a cgroup namespace mounts its own cgroup as root
                folder = cgroups / "memory"
            if (folder / "memory.usage_in_bytes").is_file():
                return folder / "memory.usage_in_bytes", folder / "memory.limit_in_bytes"
    return None


def _cgroup_fields(proc: Path, cgroups: Path, values: dict[str, int | None], unavailable: dict[str, str]) -> None:
    files = _cgroup_files(proc, cgroups)
    if files is None:
        for name in _CGROUP_FIELDS:
            unavailable[name] = f"no cgroup memory controller for this process ({proc / 'cgroup'}, {cgroups})"
        return
    for name, path in zip(_CGROUP_FIELDS, files, strict=True):
        text = (_read(path) or "").strip()
        if text.isascii() and text.isdigit() and len(text) < 25:
            values[name] = None if name == "cgroup_limit_bytes" and int(text) >= _UNLIMITED else int(text)
        elif name == "cgroup_limit_bytes" and text == "max":
            values[name] = None
        else:
            unavailable[name] = f"{path} could not be read as a number of bytes"


def observe_host(
    *,
    platform: str | None = None,
    kernel32: Any = None,
    proc: str | Path = "/proc/self",
    cgroups: str | Path = "/sys/fs/cgroup",
) -> HostObservation:
    """Observe this process's host memory now.

    Args:
        platform: Override the detected platform (``"windows"``, ``"linux"``, ...); for tests.
        kernel32: The kernel32 functions to call on Windows; loaded with ctypes when ``None``.
            Tests pass an object with ``GlobalMemoryStatusEx``, ``K32GetProcessMemoryInfo``
            and ``GetCurrentProcess``.
        proc: Linux: the process's ``/proc`` folder (``status``, ``cgroup``); for tests.
        cgroups: Linux: where the cgroup file systems are mounted; for tests.

    Returns:
        The observation; fields that could not be read are ``None`` and say why.
    """
    platform = platform or _platform()
    values: dict[str, int | None] = {}
    unavailable: dict[str, str] = {}
    try:
        values["rss_bytes"] = int(psutil.Process().memory_info().rss)
    except (psutil.Error, OSError) as e:
        values["rss_bytes"] = None
        unavailable["rss_bytes"] = f"psutil failed: {type(e).__name__}: {e}"
    if platform == "linux":
        _status_fields(Path(proc), values, unavailable)
        _cgroup_fields(Path(proc), Path(cgroups), values, unavailable)
    if platform == "windows":
        try:
            lib = kernel32 if kernel32 is not None else _windows_kernel32()
        except (OSError, AttributeError) as e:
            for name in ("private_bytes", "physical_available_bytes", "commit_available_bytes"):
                unavailable[name] = f"kernel32 could not be loaded: {e}"
        else:
            _windows_fields(lib, values, unavailable)
    return HostObservation(platform=platform, unavailable=unavailable, **values)  # type: ignore[arg-type]  # the values are the HostObservation's own fields, by name
