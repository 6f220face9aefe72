"""A weights file's identity is the inode the pipeline reads: a rewrite of it is always a change, a new name never.

Issue 51, class A: a file given a new hard link, then rewritten in place with its modification time set back
(``cp -al`` backups, then ``cp -p`` or ``rsync -t --inplace``) was not told, since the change time was compared
only while the link count was what it was; a file renamed away was told as a rewrite, and every call raised.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import pytest

from ddo_hooks.release import file_watch
from ddo_hooks.release.weights_files import HeldFile

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify and link counts: Linux")


@pytest.fixture
def held(tmp_path: Path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"w" * 4096)
    file = HeldFile(str(path))
    assert file._events is not None, "inotify is there on every Linux this project runs on"
    yield path, file
    file.close()


def rewrite_keeping_times(path: Path) -> None:
    """Other bytes at the same place, the modification time set back: what ``cp -p`` or ``rsync -t --inplace`` do."""
    before = path.stat()
    with open(path, "r+b") as f:
        f.write(b"x" * 16)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)


def test_a_rewrite_after_a_new_hard_link_with_its_time_set_back_is_a_change(held):
    path, file = held
    os.link(path, path.with_name("backup.safetensors"))  # cp -al
    rewrite_keeping_times(path)
    assert "change time moved" in file.changed()


def test_a_rewrite_through_the_new_link_is_a_change_too(held):
    path, file = held
    link = path.with_name("backup.safetensors")
    os.link(path, link)
    assert file.changed() is None  # a new name only
    rewrite_keeping_times(link)
    assert "change time moved" in file.changed()


def test_a_rewrite_after_the_file_was_renamed_away_is_a_change(held):
    path, file = held
    away = path.with_name("model.bak")
    os.rename(path, away)
    rewrite_keeping_times(away)
    assert "change time moved" in file.changed()


@pytest.mark.parametrize("how", ["rename away", "rename away, new file in its place", "new file renamed over",
                                 "new hard link", "link made and removed", "folder in its place"])  # fmt: skip
def test_a_new_name_is_no_change_and_the_file_keeps_being_watched(held, how, caplog):
    path, file = held
    if how.startswith("rename away"):
        os.rename(path, path.with_name("model.bak"))
        if how.endswith("in its place"):
            path.write_bytes(b"n" * 4096)
    elif how == "new file renamed over":
        path.with_name("new.tmp").write_bytes(b"n" * 4096)
        os.replace(path.with_name("new.tmp"), path)
    elif how == "new hard link":
        os.link(path, path.with_name("backup.safetensors"))
    elif how == "link made and removed":
        os.link(path, path.with_name("backup.safetensors"))
        assert file.changed() is None
        os.unlink(path.with_name("backup.safetensors"))
    else:
        os.rename(path, path.with_name("model.bak"))
        path.mkdir()
    with caplog.at_level(logging.WARNING, logger="ddo_hooks"):
        assert file.changed() is None
        assert file.changed() is None
    moved = file.moved()
    if how in ("new hard link", "link made and removed"):
        assert moved is None
        assert not caplog.records
    else:
        assert "the weights keep reading the file opened at attach" in moved
        assert [r.getMessage() for r in caplog.records] == [f"ddo_hooks: {moved}: no change of the weights, nothing "
                                                            "to do"]  # said once, not at every call  # fmt: skip
    # and a rewrite of the file the weights read is told after it, wherever it is now
    descriptor = os.open(f"/proc/self/fd/{file.fileno()}", os.O_WRONLY)  # the held inode, whatever its names
    try:
        os.pwrite(descriptor, b"x", 0)
    finally:
        os.close(descriptor)
    assert "rewritten in place since" in file.changed()


def test_attributes_set_with_every_name_as_it_was_are_taken_as_a_change(held):
    # A write through another process's shared mapping raises no inotify event; setting its time back after it
    # leaves only IN_ATTRIB, as a chmod or a touch -r does: the change time moved and nothing explains it.
    path, file = held
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert "change time moved" in file.changed()


def test_where_the_kernel_cannot_tell_a_moved_change_time_is_a_change(held, monkeypatch):
    path, file = held
    monkeypatch.setattr(file, "_events", None)  # no inotify here, or events lost
    os.rename(path, path.with_name("model.bak"))
    assert "change time moved" in file.changed()


def test_events_lost_to_a_full_queue_count_as_a_change(held):
    path, file = held
    file._events._note(0x4000)  # IN_Q_OVERFLOW, as the kernel sends it when its queue is full
    os.rename(path, path.with_name("model.bak"))
    assert file._events.seen() is None
    assert "change time moved" in file.changed()


def test_two_files_held_on_one_inode_each_see_its_events_and_closing_one_keeps_the_other(tmp_path):
    path = tmp_path / "w.safetensors"
    path.write_bytes(b"w" * 64)
    first, second = HeldFile(str(path)), HeldFile(str(path))
    first.close()
    rewrite_keeping_times(path)
    assert "change time moved" in second.changed()
    second.close()


def test_a_closed_watch_is_forgotten(tmp_path):
    path = tmp_path / "w.safetensors"
    path.write_bytes(b"w" * 64)
    files = [HeldFile(str(path)) for _ in range(3)]
    watcher = file_watch._watcher()
    (wd,) = {file._events._wd for file in files}  # one watch of the kernel's for one inode
    assert len(watcher._listeners[wd]) == 3
    for file in files:
        file.close()
    assert wd not in watcher._listeners
