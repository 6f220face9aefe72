"""The whole pipeline pinned from its files: ``pinned_copies.keep_encoders_pinned`` and components not offloaded yet.

With ``keep_encoders_pinned`` the text encoders are pinned from their files with the denoiser and the VAE and stay
so between calls (``release_done_components`` leaves them). A component that diffusers does not offload has its
weights on the CPU pinned where they lie, so that an offload applied afterwards finds them pinned and pins nothing
of its own. Tiny real pipelines saved and loaded back, pinning through the allocator seam
(``support.fakes.FakeHostAllocator``); the same paths run on the H200 in ``tests/gpu/test_runtimes_gpu.py``.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from diffusers.hooks import apply_group_offloading
from support.fakes import FakeHostAllocator, pin_like_streams
from support.saved_pipelines import loaded

from ddo_hooks import HookPolicy, PolicyError, attach
from ddo_hooks._compat import diffusers as diffusers_compat
from ddo_hooks.errors import InvalidArgumentError, WeightsFileChangedError
from ddo_hooks.release.allocator import use_backend
from ddo_hooks.release.from_files import pin_from_files, pinned_from_files, unpin_from_files
from ddo_hooks.testing.tiny_pipelines import call_kwargs

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="file mappings are read in /proc")

FLUX = ("transformer", "vae", "text_encoder", "text_encoder_2")


@pytest.fixture
def fake() -> Any:
    with use_backend(FakeHostAllocator(cached_bytes=0, live_bytes=0)) as backend:
        yield backend


def offload(pipe: Any, fake: FakeHostAllocator) -> Any:
    """Leaf-level group offloading with the CPU sources that streams keep (``low_cpu_mem_usage=True``)."""
    for module in pipe.components.values():
        if isinstance(module, torch.nn.Module):
            apply_group_offloading(module, onload_device=torch.device("cpu"), offload_type="leaf_level")
            pin_like_streams(module, fake, low_cpu_mem_usage=True)
    return pipe


def sources(module: torch.nn.Module) -> list[torch.Tensor]:
    return [t for g in diffusers_compat.offload_groups(module) for t in diffusers_compat.group_cpu_sources(g).values()]


def statuses(report: Any) -> dict[str, tuple[str, str | None]]:
    return {c.component: (c.status, c.reason) for c in report.repack.components}


def images(pipe: Any, calls: int = 3) -> list[torch.Tensor]:
    return [pipe(**call_kwargs("flux", seed=n)).images for n in range(calls)]


def policy(**pinned: Any) -> HookPolicy:
    preset = HookPolicy.preset("lowest-peak").model_dump(mode="json")
    preset["pinned_copies"].update(pinned)
    return HookPolicy.from_mapping(preset)


def test_kept_encoders_are_pinned_from_their_files_and_stay_pinned_between_calls(saved, fake):
    plain = images(offload(loaded(saved["flux"]), fake))
    pipe = offload(loaded(saved["flux"]), fake)
    before = {name: [t.data_ptr() for t in sources(getattr(pipe, name))] for name in FLUX}
    with attach(pipe, policy(from_files="register", keep_encoders_pinned=True)) as attachment:
        assert statuses(attachment.from_files_report) == dict.fromkeys(FLUX, ("registered", None))
        registered = dict(fake.registered)
        pinned = {name: [t.data_ptr() for t in sources(getattr(pipe, name))] for name in FLUX}
        got = images(pipe)
        for name in ("text_encoder", "text_encoder_2"):  # lowest-peak's release_done_components leaves them pinned
            assert pinned_from_files(getattr(pipe, name)) == "register"
            assert [t.data_ptr() for t in sources(getattr(pipe, name))] == pinned[name]
            weights = {id(w) for w in getattr(pipe, name).parameters()}  # CLIP's position_ids is in no file
            held = [t for g in diffusers_compat.offload_groups(getattr(pipe, name)) for w, t in g.cpu_param_dict.items()
                    if id(w) in weights]  # fmt: skip
            assert held
            assert all(fake.is_pinned(t) for t in held)
        done = [r.release for r in attachment.reports if r.route == "done_components_release"]
        assert len(done) == 3
        assert {(c.component, c.outcome, c.reason) for r in done for c in r.components} == {
            ("text_encoder", "left", "pinned_from_files"),
            ("text_encoder_2", "left", "pinned_from_files"),
        }
        assert fake.registered == registered
    assert all(torch.equal(a, b) for a, b in zip(plain, got, strict=True))
    assert {name: [t.data_ptr() for t in sources(getattr(pipe, name))] for name in FLUX} == before
    assert fake.registered == {}


def test_without_it_the_encoders_are_left_as_loaded(saved, fake):
    pipe = offload(loaded(saved["flux"]), fake)
    with attach(pipe, policy(from_files="register")) as attachment:
        found = statuses(attachment.from_files_report)
    assert set(found) == {"transformer", "vae"}  # the encoders are not even looked at
    assert pinned_from_files(pipe.text_encoder) is None


def test_the_attach_argument_overrides_the_policy_and_needs_from_files(saved, fake):
    pipe = offload(loaded(saved["flux"]), fake)
    with attach(pipe, policy(from_files="stage"), keep_encoders_pinned=True) as attachment:
        assert attachment.policy.pinned_copies.keep_encoders_pinned is True
        assert statuses(attachment.from_files_report) == dict.fromkeys(FLUX, ("repacked", None))
    with attach(pipe, policy(from_files="register", keep_encoders_pinned=True), keep_encoders_pinned=False) as a:
        assert set(statuses(a.from_files_report)) == {"transformer", "vae"}
    with pytest.raises(InvalidArgumentError, match=r"keep_encoders_pinned=True pins the encoders from their files, "
                       r"and the policy's pinned_copies.from_files is null: use a policy that sets it"):  # fmt: skip
        attach(pipe, keep_encoders_pinned=True)
    with pytest.raises(InvalidArgumentError, match="keep_encoders_pinned must be True, False or None, got 'yes'"):
        attach(pipe, policy(from_files="register"), keep_encoders_pinned="yes")  # type: ignore[arg-type]
    assert fake.registered == {}


def test_a_policy_that_keeps_encoders_pinned_without_from_files_is_refused_where_it_says_so():
    text = "version: 1\npinned_copies:\n  keep_encoders_pinned: true\n"
    with pytest.raises(PolicyError) as caught:
        HookPolicy.from_yaml_text(text, source="p.yaml")
    message = str(caught.value)
    assert "p.yaml:3:" in message
    assert "pinned_copies.keep_encoders_pinned" in message
    assert "keep_encoders_pinned pins the encoders from their files: set from_files (register or stage)" in message


def test_a_pipeline_not_offloaded_yet_is_pinned_where_its_weights_lie_and_an_offload_after_pins_nothing(saved, fake):
    plain = images(offload(loaded(saved["flux"]), fake))
    pipe = loaded(saved["flux"])
    views = {name: {n: p.data_ptr() for n, p in getattr(pipe, name).named_parameters()} for name in FLUX}
    with attach(pipe, policy(from_files="register", keep_encoders_pinned=True)) as attachment:
        assert statuses(attachment.from_files_report) == dict.fromkeys(FLUX, ("registered", None))
        for name in FLUX:
            assert all(fake.is_pinned(p) for p in getattr(pipe, name).parameters())
        pinned_before = fake.pinned_total
        offload(pipe, fake)  # diffusers' own _init_cpu_param_dict finds every weight pinned: no copy
        assert fake.pinned_total == pinned_before
        registered = {name: {n: p.data_ptr() for n, p in getattr(pipe, name).named_parameters()} for name in FLUX}
        assert all(s.data_ptr() in registered["transformer"].values() for s in sources(pipe.transformer))
        got = images(pipe)
    assert all(torch.equal(a, b) for a, b in zip(plain, got, strict=True))
    assert fake.registered == {}
    for name in FLUX:  # detach: every weight reads the view it read before attach, its group's source too
        assert {n: p.data_ptr() for n, p in getattr(pipe, name).named_parameters()} == views[name]
        assert {s.data_ptr() for s in sources(getattr(pipe, name))} <= set(views[name].values()) | {
            b.data_ptr() for b in getattr(pipe, name).buffers()
        }


def test_unpinning_leaves_a_weight_that_was_moved_since_where_it_is(saved, fake):
    pipe = loaded(saved["sd"])
    views = {n: p.data_ptr() for n, p in pipe.unet.named_parameters()}
    pin_from_files(pipe, "register")
    moved = pipe.unet.conv_in.weight
    moved.data = moved.data.clone()  # as an offload applied afterwards moves a resident weight to its device
    now = moved.data_ptr()
    unpin_from_files(pipe)
    assert moved.data_ptr() == now
    assert {n: p.data_ptr() for n, p in pipe.unet.named_parameters() if n != "conv_in.weight"} == {
        n: v for n, v in views.items() if n != "conv_in.weight"
    }
    assert fake.registered == {}


def test_a_component_whose_weights_are_all_on_a_device_is_skipped_with_the_reason(saved, fake):
    pipe = loaded(saved["sd"])
    pipe.vae.to("meta")  # nothing of it on the CPU, as after pipe.vae.to("cuda")
    found = {c.component: c for c in pin_from_files(pipe, "register").repack.components}
    vae = found["vae"]
    assert (vae.status, vae.reason) == ("skipped", "on_device")
    assert vae.detail == "vae's weights are on meta, none on the CPU: nothing to pin"
    assert (found["unet"].status, found["unet"].reason) == ("registered", None)
    unpin_from_files(pipe)


def overwrite(path: Path) -> None:
    """Write every tensor byte of the safetensors file ``path`` again, as 0 (in place: the same inode)."""
    with open(path, "r+b") as file:
        header = int.from_bytes(file.read(8), "little")
        file.seek(8 + header)
        file.write(bytes(path.stat().st_size - 8 - header))


def test_a_registered_file_rewritten_in_place_fails_the_next_call_before_any_component_runs(saved, fake, tmp_path):
    # Registered pages are the page cache's own: a rewrite in place changes the weights under the component.
    folder = Path(shutil.copytree(saved["flux"], tmp_path / "flux"))
    pipe = offload(loaded(folder), fake)
    ran: list[str] = []
    pipe.text_encoder.register_forward_pre_hook(lambda *_: ran.append("text_encoder"))
    with attach(pipe, policy(from_files="register", keep_encoders_pinned=True)) as attachment:
        first = images(pipe, 1)
        (path,) = (folder / "transformer").glob("*.safetensors")
        overwrite(path)
        ran.clear()
        expected = (
            r"FluxPipeline did not run this call: transformer's weights are registered in place in "
            r".*diffusion_pytorch_model.safetensors \(rewritten in place since.*load the pipeline again, and leave "
            r"its weights files as they are while it is attached"
        )
        for _ in range(2):  # and every call after it, until the pipeline is loaded again
            with pytest.raises(WeightsFileChangedError, match=expected):
                pipe(**call_kwargs("flux"))
            assert attachment.phase.value == "idle"
        assert ran == []  # refused before the text encoders read anything
    assert first


def test_a_new_file_renamed_over_a_registered_one_is_no_change(saved, fake, tmp_path):
    folder = Path(shutil.copytree(saved["flux"], tmp_path / "flux"))
    plain = images(offload(loaded(folder), fake), 2)
    pipe = offload(loaded(folder), fake)
    with attach(pipe, policy(from_files="register", keep_encoders_pinned=True)):
        got = images(pipe, 1)
        (path,) = (folder / "transformer").glob("*.safetensors")
        replacement = path.with_name("new.tmp")
        shutil.copyfile(path, replacement)
        overwrite(replacement)
        os.replace(replacement, path)  # a new download renamed over it: the registered pages are the old inode's
        got.append(pipe(**call_kwargs("flux", seed=1)).images)
    assert all(torch.equal(a, b) for a, b in zip(plain, got, strict=True))
