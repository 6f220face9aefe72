"""The one ledger of what was done to each module: three verbs, and nothing kept of a dropped module."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from support.saved_pipelines import loaded

from ddo_hooks.release.ledger import LEDGER, Ledger
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
