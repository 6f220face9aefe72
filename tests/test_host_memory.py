"""Host memory observations: RSS everywhere, its Linux split and cgroup, the Windows commit picture through ctypes.

There is no Windows machine here: the Windows path runs on Linux with an injected kernel32
whose functions fill the ctypes structures through the `byref` argument, as Windows does.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import psutil
import pytest

from ddo_hooks.release import host_memory
from ddo_hooks.release.host_memory import MEMORYSTATUSEX, PROCESS_MEMORY_COUNTERS_EX, observe_host

GiB = 1 << 30
SIXTY_FOUR_BIT = ctypes.sizeof(ctypes.c_void_p) == 8


class FakeKernel32:
    """The three kernel32 functions the observation calls, recording their arguments."""

    def __init__(self, *, memory_status: int = 1, process_info: int = 1) -> None:
        self.memory_status = memory_status
        self.process_info = process_info
        self.calls: list[tuple] = []

    def GlobalMemoryStatusEx(self, ref):
        status = ref._obj
        self.calls.append(("GlobalMemoryStatusEx", status.dwLength))
        status.ullTotalPhys = 64 * GiB
        status.ullAvailPhys = 40 * GiB
        status.ullTotalPageFile = 80 * GiB  # the commit limit
        status.ullAvailPageFile = 30 * GiB  # the commit the process can still use
        return self.memory_status

    def GetCurrentProcess(self):
        return -1  # the pseudo handle

    def K32GetProcessMemoryInfo(self, process, ref, size):
        counters = ref._obj
        self.calls.append(("K32GetProcessMemoryInfo", process, counters.cb, size))
        counters.WorkingSetSize = 3 * GiB
        counters.PagefileUsage = 2 * GiB
        counters.PrivateUsage = 5 * GiB
        return self.process_info


class Raising:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def __call__(self, *args: object) -> int:
        raise self.error


def test_memorystatusex_is_64_bytes_with_the_windows_offsets():
    assert ctypes.sizeof(MEMORYSTATUSEX) == 64
    assert MEMORYSTATUSEX.ullAvailPhys.offset == 16
    assert MEMORYSTATUSEX.ullTotalPageFile.offset == 24
    assert MEMORYSTATUSEX.ullAvailPageFile.offset == 32


@pytest.mark.skipif(not SIXTY_FOUR_BIT, reason="the layout checked is the 64-bit one")
def test_process_memory_counters_ex_is_80_bytes_with_private_usage_last():
    assert ctypes.sizeof(PROCESS_MEMORY_COUNTERS_EX) == 80
    assert PROCESS_MEMORY_COUNTERS_EX.PrivateUsage.offset == 72


def test_dword_fields_are_four_bytes_whatever_the_platform():
    assert MEMORYSTATUSEX.dwMemoryLoad.size == 4
    assert PROCESS_MEMORY_COUNTERS_EX.PageFaultCount.size == 4


def test_windows_observation_reads_available_commit_physical_and_private_bytes():
    kernel32 = FakeKernel32()
    obs = observe_host(platform="windows", kernel32=kernel32)
    assert obs.platform == "windows"
    assert obs.commit_available_bytes == 30 * GiB  # ullAvailPageFile, not ullTotalPageFile
    assert obs.physical_available_bytes == 40 * GiB  # ullAvailPhys
    assert obs.private_bytes == 5 * GiB  # PrivateUsage, not PagefileUsage
    assert obs.rss_bytes > 0
    assert obs.unavailable == {}


def test_windows_observation_passes_the_structure_sizes_windows_requires():
    kernel32 = FakeKernel32()
    observe_host(platform="windows", kernel32=kernel32)
    size = ctypes.sizeof(PROCESS_MEMORY_COUNTERS_EX)
    assert kernel32.calls == [
        ("GlobalMemoryStatusEx", 64),
        ("K32GetProcessMemoryInfo", -1, size, size),
    ]


def test_a_failing_global_memory_status_leaves_its_fields_null_and_says_why():
    obs = observe_host(platform="windows", kernel32=FakeKernel32(memory_status=0))
    assert (obs.physical_available_bytes, obs.commit_available_bytes) == (None, None)
    assert obs.private_bytes == 5 * GiB
    assert set(obs.unavailable) == {"physical_available_bytes", "commit_available_bytes"}
    assert obs.unavailable["commit_available_bytes"].startswith("GlobalMemoryStatusEx failed")


def test_a_failing_process_memory_info_leaves_private_bytes_null_and_says_why():
    obs = observe_host(platform="windows", kernel32=FakeKernel32(process_info=0))
    assert obs.private_bytes is None
    assert obs.commit_available_bytes == 30 * GiB
    assert set(obs.unavailable) == {"private_bytes"}
    assert obs.unavailable["private_bytes"].startswith("K32GetProcessMemoryInfo failed")


def test_a_raising_kernel32_call_leaves_its_fields_null_and_names_the_error():
    kernel32 = FakeKernel32()
    kernel32.GlobalMemoryStatusEx = Raising(OSError("access denied"))
    obs = observe_host(platform="windows", kernel32=kernel32)
    assert (obs.physical_available_bytes, obs.commit_available_bytes) == (None, None)
    assert obs.unavailable["physical_available_bytes"] == "GlobalMemoryStatusEx raised OSError: access denied"
    assert obs.private_bytes == 5 * GiB


def test_a_missing_kernel32_export_leaves_its_field_null():
    kernel32 = FakeKernel32()
    kernel32.K32GetProcessMemoryInfo = None  # not callable, like an export this Windows lacks
    obs = observe_host(platform="windows", kernel32=kernel32)
    assert obs.private_bytes is None
    assert obs.unavailable["private_bytes"].startswith("K32GetProcessMemoryInfo raised TypeError")


def test_kernel32_that_cannot_be_loaded_leaves_every_windows_field_null():
    obs = observe_host(platform="windows")  # there is no kernel32 on Linux
    assert (obs.private_bytes, obs.physical_available_bytes, obs.commit_available_bytes) == (None, None, None)
    assert set(obs.unavailable) == {"private_bytes", "physical_available_bytes", "commit_available_bytes"}
    assert all(why.startswith("kernel32 could not be loaded") for why in obs.unavailable.values())
    assert obs.rss_bytes > 0


def test_a_linux_observation_has_rss_its_split_and_no_windows_fields():
    obs = observe_host()
    assert obs.platform == "linux"
    assert obs.rss_bytes > 0
    assert (obs.private_bytes, obs.physical_available_bytes, obs.commit_available_bytes) == (None, None, None)
    split = (obs.rss_anon_bytes, obs.rss_file_bytes, obs.rss_shmem_bytes)
    assert all(isinstance(part, int) for part in split)
    assert sum(split) == pytest.approx(obs.rss_bytes, rel=0.05)  # read a moment apart
    assert set(obs.unavailable) <= {"cgroup_memory_bytes", "cgroup_limit_bytes"}


STATUS = "Name:\tpython\nVmRSS:\t  30720 kB\nRssAnon:\t  10240 kB\nRssFile:\t  19456 kB\nRssShmem:\t   1024 kB\n"


def fake_proc(tmp_path: Path, status: str = STATUS, cgroup: str = "0::/\n") -> Path:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "status").write_text(status)
    (proc / "cgroup").write_text(cgroup)
    return proc


def write(folder: Path, **files: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("_", ".", 1)).write_text(text)


def test_the_rss_split_comes_from_proc_status_in_bytes(tmp_path: Path):
    obs = observe_host(platform="linux", proc=fake_proc(tmp_path), cgroups=tmp_path / "none")
    assert (obs.rss_anon_bytes, obs.rss_file_bytes, obs.rss_shmem_bytes) == (10 << 20, 19 << 20, 1 << 20)


@pytest.mark.parametrize("status", ["", "RssAnon: lots\n", "RssAnon:\t1 MB\n", "RssAnon:\t" + "9" * 40 + " kB\n"])
def test_a_missing_or_unreadable_rss_line_is_null_and_says_why(tmp_path: Path, status: str):
    obs = observe_host(platform="linux", proc=fake_proc(tmp_path, status), cgroups=tmp_path)
    assert obs.rss_anon_bytes is None
    assert obs.unavailable["rss_anon_bytes"] == f"{tmp_path / 'proc' / 'status'} has no RssAnon line"


def test_an_unreadable_status_file_leaves_the_split_null(tmp_path: Path):
    obs = observe_host(platform="linux", proc=tmp_path / "gone", cgroups=tmp_path)
    assert {obs.unavailable[name] for name in ("rss_anon_bytes", "rss_file_bytes", "rss_shmem_bytes")} == {
        f"{tmp_path / 'gone' / 'status'} could not be read"
    }


def test_cgroup_v2_gives_the_charged_memory_and_the_limit(tmp_path: Path):
    write(tmp_path / "cg" / "user.slice" / "app", memory_current="4096\n", memory_max="8192\n")
    obs = observe_host(
        platform="linux", proc=fake_proc(tmp_path, cgroup="0::/user.slice/app\n"), cgroups=tmp_path / "cg"
    )
    assert (obs.cgroup_memory_bytes, obs.cgroup_limit_bytes) == (4096, 8192)


def test_a_cgroup_without_a_limit_has_a_null_limit_that_is_not_unavailable(tmp_path: Path):
    write(tmp_path / "cg" / "app", memory_current="4096\n", memory_max="max\n")
    obs = observe_host(platform="linux", proc=fake_proc(tmp_path, cgroup="0::/app\n"), cgroups=tmp_path / "cg")
    assert (obs.cgroup_memory_bytes, obs.cgroup_limit_bytes) == (4096, None)
    assert "cgroup_limit_bytes" not in obs.unavailable


def test_cgroup_v1_memory_controller_is_read_where_v2_has_none(tmp_path: Path):
    write(
        tmp_path / "cg" / "memory" / "box",
        memory_usage_in_bytes="2048\n",
        memory_limit_in_bytes="9223372036854771712\n",
    )
    cgroup = "4:memory:/box\n1:cpu:/\n0::/\n"
    obs = observe_host(platform="linux", proc=fake_proc(tmp_path, cgroup=cgroup), cgroups=tmp_path / "cg")
    assert (obs.cgroup_memory_bytes, obs.cgroup_limit_bytes) == (2048, None)  # 2**63 rounded down: no limit


def test_a_cgroup_namespace_reads_its_own_cgroup_at_the_mount_root(tmp_path: Path):
    write(tmp_path / "cg" / "memory", memory_usage_in_bytes="1024\n", memory_limit_in_bytes="65536\n")
    cgroup = "4:memory:/process_api/abc\n0::/\n"
    obs = observe_host(platform="linux", proc=fake_proc(tmp_path, cgroup=cgroup), cgroups=tmp_path / "cg")
    assert (obs.cgroup_memory_bytes, obs.cgroup_limit_bytes) == (1024, 65536)


def test_no_cgroup_memory_controller_leaves_both_fields_null_and_says_why(tmp_path: Path):
    obs = observe_host(platform="linux", proc=fake_proc(tmp_path, cgroup="0::/\n"), cgroups=tmp_path / "cg")
    assert (obs.cgroup_memory_bytes, obs.cgroup_limit_bytes) == (None, None)
    assert obs.unavailable["cgroup_memory_bytes"].startswith("no cgroup memory controller for this process")


def test_a_garbled_cgroup_file_is_unavailable_not_a_crash(tmp_path: Path):
    write(tmp_path / "cg" / "app", memory_current="-1\n", memory_max="lots\n")
    obs = observe_host(platform="linux", proc=fake_proc(tmp_path, cgroup="0::/app\n"), cgroups=tmp_path / "cg")
    assert (obs.cgroup_memory_bytes, obs.cgroup_limit_bytes) == (None, None)
    assert obs.unavailable["cgroup_limit_bytes"].endswith("memory.max could not be read as a number of bytes")


def test_a_report_written_before_the_split_still_validates():
    from ddo_hooks.reports.base import HostObservation

    old = {"platform": "linux", "rss_bytes": 1, "private_bytes": None, "unavailable": {}}
    assert HostObservation.model_validate(old).rss_anon_bytes is None


def test_a_failing_rss_read_is_null_and_says_why(monkeypatch: pytest.MonkeyPatch):
    def denied() -> psutil.Process:
        raise psutil.AccessDenied(pid=1)

    monkeypatch.setattr(host_memory.psutil, "Process", denied)
    obs = observe_host(platform="linux")
    assert obs.rss_bytes is None
    assert obs.unavailable["rss_bytes"].startswith("psutil failed: AccessDenied")
