"""The live objects a fork and the interpreter's exit settle: held weakly, each settled even where another fails."""

from __future__ import annotations

import gc
import logging

from ddo_hooks._process import LIVE, Live


class Held:
    def __init__(self, live: Live, *, fails: bool = False) -> None:
        self.settled: list[str] = []
        self.fails = fails
        live.join(self, after_fork=Held.forked, at_exit=Held.exits)

    def forked(self) -> None:
        self.settled.append("after_fork")
        if self.fails:
            raise RuntimeError("cannot settle")

    def exits(self) -> None:
        self.settled.append("at_exit")


def test_each_object_settles_as_it_joined_and_one_that_fails_is_logged_while_the_others_settle(caplog):
    live = Live()
    first, failing, last = Held(live), Held(live, fails=True), Held(live)
    with caplog.at_level(logging.WARNING, logger="ddo_hooks"):
        live.settle("after_fork")
    assert [first.settled, failing.settled, last.settled] == [["after_fork"]] * 3
    assert any("cannot settle" in str(r.exc_info[1]) for r in caplog.records if r.exc_info)
    live.leave(first)
    live.settle("at_exit")
    assert first.settled == ["after_fork"]
    assert last.settled == ["after_fork", "at_exit"]


def test_a_dropped_object_is_not_kept_alive():
    live = Live()
    held = Held(live)
    assert held in live
    del held
    gc.collect()
    assert list(live) == []


def test_the_process_settles_the_boundary_runners_trackers_scheduler_and_file_watcher(tmp_path):
    from ddo_hooks import MetricsTracker
    from ddo_hooks.hooks.idle import scheduler
    from ddo_hooks.release import file_watch

    tracker = MetricsTracker()
    path = tmp_path / "w.bin"
    path.write_bytes(b"w")
    with open(path, "rb") as f:
        file_watch.watch(f.fileno())
    assert tracker in LIVE
    assert scheduler() in LIVE
    assert file_watch._watcher() in LIVE  # inotify: Linux, as here and on CI
