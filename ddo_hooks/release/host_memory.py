"""Host memory observations: process RSS everywhere, and on Windows the commit picture.

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
import sys
from typing import Any

import psutil

from ddo_hooks.reports.base import HostObservation

__all__ = ["MEMORYSTATUSEX", "PROCESS_MEMORY_COUNTERS_EX", "observe_host"]

_DWORD = ctypes.c_uint32  # wintypes.DWORD has another size off Windows


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
    return ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]


def _windows_fields(kernel32: Any, values: dict[str, int | None], unavailable: dict[str, str]) -> None:
    status = MEMORYSTATUSEX()
    status.dwLength = ctypes.sizeof(MEMORYSTATUSEX)
    try:
        ok = kernel32.GlobalMemoryStatusEx(ctypes.byref(status))
    except Exception as e:  # a missing export or a ctypes failure
        ok, why = 0, f"GlobalMemoryStatusEx raised {type(e).__name__}: {e}"
    else:
        why = f"GlobalMemoryStatusEx failed (GetLastError={_last_error()})"
    if ok:
        values["physical_available_bytes"] = int(status.ullAvailPhys)
        values["commit_available_bytes"] = int(status.ullAvailPageFile)
    else:
        unavailable["physical_available_bytes"] = unavailable["commit_available_bytes"] = why

    counters = PROCESS_MEMORY_COUNTERS_EX()
    counters.cb = ctypes.sizeof(PROCESS_MEMORY_COUNTERS_EX)
    try:
        ok = kernel32.K32GetProcessMemoryInfo(kernel32.GetCurrentProcess(), ctypes.byref(counters), counters.cb)
    except Exception as e:
        ok, why = 0, f"K32GetProcessMemoryInfo raised {type(e).__name__}: {e}"
    else:
        why = f"K32GetProcessMemoryInfo failed (GetLastError={_last_error()})"
    if ok:
        values["private_bytes"] = int(counters.PrivateUsage)
    else:
        unavailable["private_bytes"] = why


def observe_host(*, platform: str | None = None, kernel32: Any = None) -> HostObservation:
    """Observe this process's host memory now.

    Args:
        platform: Override the detected platform (``"windows"``, ``"linux"``, ...); for tests.
        kernel32: The kernel32 functions to call on Windows; loaded with ctypes when ``None``.
            Tests pass an object with ``GlobalMemoryStatusEx``, ``K32GetProcessMemoryInfo``
            and ``GetCurrentProcess``.

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
    if platform == "windows":
        try:
            lib = kernel32 if kernel32 is not None else _windows_kernel32()
        except (OSError, AttributeError) as e:
            for name in ("private_bytes", "physical_available_bytes", "commit_available_bytes"):
                unavailable[name] = f"kernel32 could not be loaded: {e}"
        else:
            _windows_fields(lib, values, unavailable)
    return HostObservation(platform=platform, unavailable=unavailable, **values)  # type: ignore[arg-type]
