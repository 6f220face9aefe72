"""``pinned_copies.from_files`` on a pipeline that DDO offloads: its linear runtime copies from the files' pages.

DDO 0.1.0rc2's ``enable_pipeline_offload(pipe, preset="auto")`` puts the transformer and T5 under its linear
runtime, which copies each Linear's and Embedding's weight from where it lies at each use, and the other components
under diffusers group offloading. Told not to pin copies of its own (``DDO_PIN_CPU_MEMORY=0``), it leaves the
weights as views of their files, and attach then pins those in place: DDO copies from the registered pages. Attached
first, the weights are pinned before DDO looks, and DDO skips what is pinned. Here on the CPU (DDO's execution
device ``cpu``, its text encoder's group offloading without a stream, pinning through the allocator seam); on the
H200 in ``tests/gpu/test_runtimes_gpu.py``. Skipped where DDO is not installed, failed instead where
``DDO_HOOKS_REQUIRE_DDO=1`` (``.ci/run``'s interop step).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest
import torch
from support.ddo_payloads import DISTRIBUTION, ddo_version
from support.fakes import FakeHostAllocator
from support.saved_pipelines import loaded

from ddo_hooks import HookPolicy, attach
from ddo_hooks._compat import diffusers as diffusers_compat
from ddo_hooks.errors import InvalidArgumentError
from ddo_hooks.release.allocator import use_backend
from ddo_hooks.release.from_files import DDO_HOOK, pin_from_files, unpin_from_files
from ddo_hooks.testing.tiny_pipelines import call_kwargs

pytestmark = [
    pytest.mark.skipif(
        ddo_version() is None and os.environ.get("DDO_HOOKS_REQUIRE_DDO") != "1",
        reason=f"{DISTRIBUTION} is not installed (pip install -e '.[dev,ddo]' runs these)",
    ),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="file mappings are read in /proc"),
]

NO_PINNING = {"DDO_PIN_CPU_MEMORY": "0", "DDO_RUNNER_TEXT_ENCODER_OFFLOAD_STREAM": "0"}
"""DDO's ``auto`` preset, told not to pin (and, on the CPU, to offload CLIP without a stream)."""
RUNTIME = ("transformer", "text_encoder_2")
"""The components DDO's ``auto`` preset puts under its linear runtime."""


@pytest.fixture
def fake() -> Any:
    with use_backend(FakeHostAllocator(cached_bytes=0, live_bytes=0)) as backend:
        yield backend


def ddo_offload(pipe: Any, **environ: str) -> Any:
    from diffusers_dynamic_offloader import enable_pipeline_offload

    enable_pipeline_offload(pipe, preset="auto", execution_device="cpu", environ={**NO_PINNING, **environ})
    return pipe


def images(pipe: Any, calls: int = 3) -> list[torch.Tensor]:
    return [pipe(**call_kwargs("flux", seed=n)).images for n in range(calls)]


def weights(pipe: Any) -> dict[str, list[int]]:
    return {
        n: [p.data_ptr() for p in m.parameters()] for n, m in pipe.components.items() if isinstance(m, torch.nn.Module)
    }


def policy() -> HookPolicy:
    return HookPolicy.from_mapping(
        {"version": 1, "pinned_copies": {"from_files": "register", "keep_encoders_pinned": True}}
    )


def test_ddo_offloads_first_then_attach_registers_what_its_runtime_copies_from(saved, fake):
    plain = images(ddo_offload(loaded(saved["flux"])))
    pipe = ddo_offload(loaded(saved["flux"]))
    before = weights(pipe)
    hooks = {name: diffusers_compat.has_hook(getattr(pipe, name), DDO_HOOK) for name in RUNTIME}
    assert hooks == dict.fromkeys(RUNTIME, True)
    with attach(pipe, policy()) as attachment:
        found = {c.component: (c.status, c.reason) for c in attachment.from_files_report.repack.components}
        # here DDO group-offloads CLIP and the VAE without a stream: they keep no CPU sources to pin
        registered, skipped = ("registered", None), ("skipped", "no_pinned_copies")
        assert found == {
            "transformer": registered,
            "text_encoder_2": registered,
            "text_encoder": skipped,
            "vae": skipped,
        }
        for name in RUNTIME:  # the weights DDO's runtime reads at each use are the registered pages
            assert all(fake.is_pinned(p) for p in getattr(pipe, name).parameters())
        got = images(pipe)
    assert all(torch.equal(a, b) for a, b in zip(plain, got, strict=True))
    assert weights(pipe) == before  # detach: the views they were
    assert fake.registered == {}
    assert all(diffusers_compat.has_hook(getattr(pipe, name), DDO_HOOK) for name in RUNTIME)  # DDO's hooks stay
    assert torch.equal(images(pipe, 1)[0], plain[0])  # and still work


def test_attached_first_the_weights_are_pinned_before_ddo_looks(saved, fake):
    plain = images(ddo_offload(loaded(saved["flux"])))
    pipe = loaded(saved["flux"])
    views = weights(pipe)
    with attach(pipe, policy()) as attachment:
        found = {c.component: (c.status, c.reason) for c in attachment.from_files_report.repack.components}
        assert set(found.values()) == {("registered", None)}
        registered = weights(pipe)
        ddo_offload(pipe)
        assert {n: registered[n] for n in RUNTIME} == {n: weights(pipe)[n] for n in RUNTIME}  # DDO kept them
        got = images(pipe)
    assert all(torch.equal(a, b) for a, b in zip(plain, got, strict=True))
    assert {n: views[n] for n in RUNTIME} == {n: weights(pipe)[n] for n in RUNTIME}
    assert fake.registered == {}


def test_copies_ddo_pinned_are_refused_with_the_setting_that_avoids_them(saved, fake):
    pipe = ddo_offload(loaded(saved["flux"]))
    for weight in pipe.transformer.parameters():  # what DDO's pinning does on CUDA: a pinned copy of each weight
        weight.data = fake.pin_copy(weight.data)
    found = {c.component: c for c in pin_from_files(pipe, "register").repack.components}
    transformer = found["transformer"]
    assert (transformer.status, transformer.reason) == ("refused", "not_file_backed")
    assert transformer.detail.endswith(
        "is not a view of its weights file (a copy DDO pinned: offload it with DDO_PIN_CPU_MEMORY=0, or attach before "
        "DDO): built or loaded into memory, or converted to another dtype; load it with the files' dtype and offload "
        "with low_cpu_mem_usage=True"
    )
    unpin_from_files(pipe)


def warn_policy() -> HookPolicy:
    pinned = {"from_files": "register", "keep_encoders_pinned": True, "on_ddo_pinning": "warn"}
    return HookPolicy.from_mapping({"version": 1, "pinned_copies": pinned})


@pytest.mark.parametrize(
    "environ",
    [
        {"DDO_PIN_CPU_MEMROY": "0"},  # misspelt: DDO does not check, its preset's 1 stays
        {"DDO_PIN_CPU_MEMORY": "1"},  # set otherwise
        {},  # missing
    ],
    ids=["misspelt", "set-otherwise", "missing"],
)
def test_a_ddo_runtime_that_pins_its_own_copies_is_refused_at_attach_with_the_fix(saved, fake, monkeypatch, environ):
    monkeypatch.delenv("DDO_PIN_CPU_MEMORY", raising=False)
    plain = {k: v for k, v in NO_PINNING.items() if k != "DDO_PIN_CPU_MEMORY"}
    pipe = loaded(saved["flux"])
    from diffusers_dynamic_offloader import enable_pipeline_offload

    enable_pipeline_offload(pipe, preset="auto", execution_device="cpu", environ={**plain, **environ})
    before = weights(pipe)
    with pytest.raises(InvalidArgumentError) as raised:
        attach(pipe, policy())
    message = str(raised.value)
    assert message.startswith(
        "attach(): text_encoder_2 and transformer are offloaded by DDO's runtime with pin_cpu_memory on, so DDO pins "
        "a copy of each weight it streams: DDO_PIN_CPU_MEMORY was not '0' where DDO read it (missing, misspelt, or "
        "set otherwise"
    )
    assert "enable_pipeline_offload(pipe, ..., environ={'DDO_PIN_CPU_MEMORY': '0'}), or attach before DDO" in message
    assert message.endswith("set pinned_copies.on_ddo_pinning: warn")
    assert weights(pipe) == before  # nothing was pinned
    assert fake.registered == {}
    with pytest.warns(UserWarning, match="on_ddo_pinning: warn"), attach(pipe, warn_policy()):
        pass  # the refused attach left nothing attached: the pipeline attaches again


def test_on_ddo_pinning_warn_warns_in_the_reports_words_and_leaves_those_components(saved, fake, monkeypatch):
    monkeypatch.delenv("DDO_PIN_CPU_MEMORY", raising=False)
    pipe = ddo_offload(loaded(saved["flux"]), DDO_PIN_CPU_MEMORY="1")
    warn = HookPolicy.from_mapping(
        {
            "version": 1,
            "pinned_copies": {"from_files": "register", "keep_encoders_pinned": True, "on_ddo_pinning": "warn"},
        }
    )
    with pytest.warns(UserWarning, match=r"on, so DDO pins a copy of each weight it streams") as caught:
        attachment = attach(pipe, warn)
    with attachment:
        found = {c.component: c for c in attachment.from_files_report.repack.components}
    for name in RUNTIME:
        assert (found[name].status, found[name].reason) == ("refused", "ddo_pins_copies")
        said = found[name].detail.split(" is offloaded by ", 1)[1]
        assert said in str(caught[0].message)  # the same words
    assert str(caught[0].message).endswith("; left as they are (pinned_copies.on_ddo_pinning: warn)")
    assert caught[0].filename == __file__  # the warning names the caller's line
