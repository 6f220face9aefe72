"""The one ledger of what was done to each object: three verbs, nothing kept of a dropped module, and what a fork and
the exit settle (each object on its own, even where another fails)."""

from __future__ import annotations

import gc
import logging
import weakref

import pytest
import torch
from support.saved_pipelines import loaded

from ddo_hooks.ledger import LEDGER, Ledger, Settles
from ddo_hooks.release.weights_files import note_files


def test_read_write_erase_and_an_entry_gone_once_it_holds_nothing():
    ledger, module = Ledger(), torch.nn.Linear(2, 2)
    assert ledger.read(module).pinned is None
    assert len(ledger) == 0  # reading keeps nothing
    ledger.write(module, pinned="pinned", noted={})
    assert (ledger.read(module).pinned, ledger.read(module).noted) == ("pinned", {})
    assert ledger.erase(module, "pinned") == "pinned"
    assert len(ledger) == 1  # still noted
    assert ledger.erase(module, "noted") == {}
    assert len(ledger) == 0
    assert ledger.erase(module, "rebound") is None


def test_a_field_it_does_not_have_is_refused_by_name():
    with pytest.raises(TypeError, match="no field 'staged': noted, rebound, pinned, repacked"):
        Ledger().write(torch.nn.Linear(2, 2), staged=True)


def test_what_cannot_be_weakly_referenced_reads_as_nothing_done():
    assert Ledger().read(1).rebound is None
    assert Ledger().erase(1, "pinned") is None


def test_the_ledger_keeps_no_dropped_component(saved):
    pipe = loaded(saved["sd"])
    held = {name: module for name, module in pipe.components.items() if isinstance(module, torch.nn.Module)}
    note_files(pipe)  # what attach does where the policy declares the files stable
    assert all(LEDGER.read(module).noted for module in held.values())
    refs = [weakref.ref(module) for module in held.values()]
    before = len(LEDGER)
    del pipe, held
    gc.collect()
    assert all(ref() is None for ref in refs)  # the ledger kept none of them alive
    assert len(LEDGER) <= before - len(refs)  # and their entries went with them (others' may have gone too)


class Held:
    def __init__(self, ledger: Ledger, *, fails: bool = False) -> None:
        self.settled: list[str] = []
        self.fails = fails
        ledger.write(self, settles=Settles(Held.forked, Held.exits))

    def forked(self) -> None:
        self.settled.append("after_fork")
        if self.fails:
            raise RuntimeError("cannot settle")

    def exits(self) -> None:
        self.settled.append("at_exit")


def test_each_object_settles_as_it_wrote_and_one_that_fails_is_logged_while_the_others_settle(caplog):
    ledger = Ledger()
    first, failing, last = Held(ledger), Held(ledger, fails=True), Held(ledger)
    with caplog.at_level(logging.WARNING, logger="ddo_hooks"):
        ledger.settle("after_fork")
    assert [first.settled, failing.settled, last.settled] == [["after_fork"]] * 3
    assert any("cannot settle" in str(r.exc_info[1]) for r in caplog.records if r.exc_info)
    ledger.erase(first, "settles")
    ledger.settle("at_exit")
    assert first.settled == ["after_fork"]
    assert last.settled == ["after_fork", "at_exit"]


def test_an_object_that_settles_is_not_kept_alive():
    ledger = Ledger()
    held = Held(ledger)
    assert [thing for thing, _ in ledger.holders("settles")] == [held]
    del held
    gc.collect()
    assert ledger.holders("settles") == []
    assert len(ledger) == 0


def test_the_process_settles_the_trackers_and_file_watcher(tmp_path):
    from ddo_hooks import MetricsTracker
    from ddo_hooks.release import file_watch

    tracker = MetricsTracker()
    path = tmp_path / "w.bin"
    path.write_bytes(b"w")
    with open(path, "rb") as f:
        file_watch.watch(f.fileno())
    settling = [thing for thing, _ in LEDGER.holders("settles")]
    assert tracker in settling
    assert file_watch._watcher() in settling  # inotify: Linux, as here and on CI
