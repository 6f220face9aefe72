"""The per-arm worker of ``bench_box.py`` (no ``bench_`` prefix: not run on its own).

``arm --spec JSON --progress P.jsonl``: load the saved Flux-shaped pipeline, set up the arm, make ``calls`` plain
``pipe(prompt=...)`` calls back to back, and append one JSON line to ``P.jsonl`` at each step (``ready``, each
``call``, ``end``), flushed at once: a process the kernel kills for memory leaves every step it finished. Each
line holds which memory the process held then: RSS and its split (anon / file / shmem), the pinned bytes the
allocator owns, and its cgroup's charge (``memory.current``, ``memory.peak`` and ``memory.stat``'s anon, file and
shmem), read at rest, and what the process holds on the GPU (``torch.cuda``'s allocated and reserved bytes, and their
peaks since the process started:
weights kept resident there make calls faster without costing host memory).

Arms (``spec["arm"]``, offloaded as ``spec["runtime"]`` says, by default at leaf level with streams,
``record_stream=False``, ``low_cpu_mem_usage`` from ``spec["lcmu"]``: see ``floor_workload.RUNTIMES``):
``nothing``; ``delete`` (after the first call the prompt is encoded, the text encoders deleted and the caches
emptied; later calls pass those embeddings); ``diffusers-mm`` (its ``managed`` offloading; a call that raises ends
the arm); ``resident`` (the whole pipeline on the GPU, ``pipe.to("cuda")``: the compute floor, the limit no offload
runtime passes); ``ddo-auto`` (DDO 0.1.0rc2's ``enable_pipeline_offload(pipe, preset="auto")``, no group offloading of
ours); ``ddo-nores`` (the same with nothing resident on the GPU: its budget policy off, no resident patterns, no
resident budget; only tensors of at most 1 MiB stay there); ``ddo-vmm`` (DDO's native VMM route for the
transformer: its PyTorch allocator installed before CUDA starts, the transformer loaded by
``from_pretrained_with_dynamic_offload`` with ``execution_mode="vmm_fast_runtime"``, the other components by
``enable_pipeline_offload``); ``preset:<name>`` with ``floor_workload.preset_policy``'s extras (``+stable``,
``+evict``, ``+register``, ``+stage``, ``+encoders``, ``+without_<action>``);
``policy:<json>`` (any policy mapping). A setup that raises is recorded (``error``, stage ``setup``) and ends the arm.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import done_workload
import floor_workload as floor
import pinned_workload as workload

STAT_KEYS = ("anon", "file", "shmem", "file_mapped", "active_file", "inactive_file")


def own_cgroup() -> Path | None:
    """This process's cgroup v2 folder, or ``None`` (not Linux, or not cgroup v2)."""
    try:
        line = next(x for x in Path("/proc/self/cgroup").read_text().splitlines() if x.startswith("0::"))
    except (OSError, StopIteration):
        return None
    folder = Path("/sys/fs/cgroup") / line[3:].lstrip("/")
    return folder if (folder / "memory.current").is_file() else None


def cgroup_memory(folder: Path | None) -> dict[str, Any] | None:
    """The cgroup's charge now: ``memory.current``, ``memory.peak`` and the kinds of ``memory.stat``, in bytes."""
    if folder is None:
        return None
    found: dict[str, Any] = {}
    for name in ("current", "peak"):
        path = folder / f"memory.{name}"
        found[name] = int(path.read_text()) if path.is_file() else None
    stat = dict(line.split() for line in (folder / "memory.stat").read_text().splitlines())
    found.update({key: int(stat[key]) for key in STAT_KEYS if key in stat})
    return found


def torch_cuda() -> bool:
    """Whether torch sees a CUDA device."""
    import torch

    return bool(torch.cuda.is_available())


def gpu_memory() -> dict[str, int] | None:
    """The CUDA caching allocator's bytes on the current device: allocated and reserved now, allocated at most."""
    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return {
        "allocated": torch.cuda.memory_allocated(),
        "reserved": torch.cuda.memory_reserved(),
        "max_allocated": torch.cuda.max_memory_allocated(),
        "max_reserved": torch.cuda.max_memory_reserved(),
    }


def build(spec: dict[str, Any]) -> tuple[Any, Any]:
    """The arm's pipeline, offloaded, and what it attached (``None`` when nothing)."""
    arm = spec["arm"]
    if arm == "diffusers-mm":
        return done_workload._mm(spec), None
    if arm in ("ddo-auto", "ddo-nores", "ddo-vmm"):
        return _ddo(spec, vmm=arm == "ddo-vmm", resident=arm != "ddo-nores"), None
    if arm == "resident":  # the limit: the whole pipeline on the GPU, nothing offloaded
        pipe = floor.load({**spec, "runtime": "none"})
        return pipe.to("cuda" if torch_cuda() else "cpu"), None
    pipe = floor.load(spec)
    if arm.startswith("preset:"):
        return pipe, floor.attach_preset(pipe, arm.split(":", 1)[1], True)
    if arm.startswith("policy:"):
        from ddo_hooks import HookPolicy, attach

        return pipe, attach(pipe, HookPolicy.from_mapping(json.loads(arm.split(":", 1)[1])))
    if arm not in ("nothing", "delete"):
        raise SystemExit(f"unknown arm {arm!r}")
    return pipe, None


NO_RESIDENT = {"DDO_AUTO_BUDGET_POLICY": "off", "DDO_ALWAYS_RESIDENT_MODULE_PATTERNS": "",
               "DDO_RESIDENT_MODULE_PATTERNS": "", "DDO_RESIDENT_MODULE_BUDGET_GB": "0"}  # fmt: skip
"""DDO's settings (over its ``auto`` preset) that keep nothing resident on the GPU but tensors of at most 1 MiB."""


def _ddo(spec: dict[str, Any], *, vmm: bool, resident: bool = True) -> Any:
    """The pipeline offloaded by DDO 0.1.0rc2 alone: its ``auto`` preset (``resident=False``: with
    :data:`NO_RESIDENT`), or its VMM route for the transformer."""
    import diffusers_dynamic_offloader as ddo
    import torch
    from diffusers import FluxPipeline, FluxTransformer2DModel

    if spec["family"] != "flux":
        raise SystemExit("the DDO arms load a FluxPipeline")
    components: dict[str, Any] = {}
    if vmm:  # its allocator goes in before CUDA starts (nothing before this point touches CUDA)
        import ddo_vmm_allocator
        from ddo_vmm_allocator.torch_allocator import install_pytorch_vmm_allocator
        from diffusers_dynamic_offloader.dynamic_offload import (
            DynamicOffloadConfig,
            from_pretrained_with_dynamic_offload,
        )

        library = Path(ddo_vmm_allocator.__file__).parent / "native" / "linux" / "libddo_vmm.so"
        os.environ["DDO_VMM_LIBRARY_PATH"] = str(library)  # DDO's arena loads the same library by this name
        install_pytorch_vmm_allocator(library)
        config = DynamicOffloadConfig(execution_mode="vmm_fast_runtime", vmm_resident_weight_budget_gb=2.0)
        loaded = from_pretrained_with_dynamic_offload(
            spec["weights_dir"], model_loader=FluxTransformer2DModel, dynamic_offload_config=config,
            apply_dynamic=True, subfolder="transformer", torch_dtype=torch.bfloat16,
        )  # fmt: skip
        components["transformer"] = loaded.module
    pipe = FluxPipeline.from_pretrained(spec["weights_dir"], dtype=torch.bfloat16, **components)
    pipe.set_progress_bar_config(disable=True)
    others = [name for name, m in pipe.components.items() if isinstance(m, torch.nn.Module) and name not in components]
    cuda = torch.cuda.is_available()
    environ = {**({} if resident else NO_RESIDENT), **({} if cuda else floor.NO_STREAM)}
    ddo.enable_pipeline_offload(pipe, components=others, preset="auto", execution_device="cuda:0" if cuda else "cpu",
                                low_cpu_mem_usage=spec["lcmu"], environ=environ)  # fmt: skip
    return pipe


def boundary_clock(attachment: Any) -> dict[str, float]:
    """Seconds spent running each boundary (its actions, the slot, the recording: all the hooks do at a quiet
    point), summed until the caller clears the dict; empty when nothing is attached."""
    spent: dict[str, float] = {}
    if attachment is None:
        return spent
    runner = attachment._runner
    run = runner.run

    def timed(boundary: str, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return run(boundary, *args, **kwargs)
        finally:
            spent[boundary] = spent.get(boundary, 0.0) + time.perf_counter() - started

    runner.run = timed
    return spent


def phase_clock(pipe: Any) -> dict[str, float]:
    """When the call reached its first denoiser forward (``denoise``) and its VAE decoder (``decode``), in
    ``time.perf_counter`` seconds, the device synchronized there (in every arm alike); the caller clears the dict
    between calls. Empty for a pipeline without both modules."""
    import torch

    marks: dict[str, float] = {}
    denoiser = getattr(pipe, "transformer", None) or getattr(pipe, "unet", None)
    decoder = getattr(getattr(pipe, "vae", None), "decoder", None)
    if not isinstance(denoiser, torch.nn.Module) or not isinstance(decoder, torch.nn.Module):
        return marks
    for name, module in (("denoise", denoiser), ("decode", decoder)):

        def mark(_module: Any, _args: Any, _name: str = name) -> None:
            if _name not in marks:
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                marks[_name] = time.perf_counter()

        module.register_forward_pre_hook(mark)
    return marks


def faults() -> tuple[int, int]:
    """The process's minor and major page faults so far."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_minflt, usage.ru_majflt


def run(spec: dict[str, Any], progress: Path) -> None:
    started = time.perf_counter()
    folder = own_cgroup()
    with progress.open("a", encoding="utf-8") as out:

        def emit(event: str, **fields: Any) -> None:
            line = {"event": event, "t": time.perf_counter() - started, **fields}
            out.write(json.dumps(line) + "\n")
            out.flush()
            os.fsync(out.fileno())

        emit("start", pid=os.getpid(), cgroup=str(folder) if folder else None)
        workload._quiet()
        try:
            pipe, attachment = build(spec)
        except Exception as e:  # a peer's setup that cannot run here: say what it raised, measure nothing
            emit("error", stage="setup", error=f"{type(e).__name__}: {e}"[:600])
            raise SystemExit(1) from e
        emit("ready", memory=floor.memory(), cgroup=cgroup_memory(folder))
        pinned = getattr(attachment, "from_files_report", None)
        if pinned is not None:
            body = pinned.repack
            found = {c.component: [c.status, c.reason, c.detail] for c in body.components}
            emit("from_files", components=found, pinned_bytes=body.pinned_bytes_after, seconds=body.elapsed_seconds)
        spent, marks = boundary_clock(attachment), phase_clock(pipe)
        embeds: dict[str, Any] = {}
        for index in range(spec["calls"]):
            kwargs = floor.call_kwargs(spec, index)
            if embeds:
                kwargs.update(prompt=None, **embeds)
            marks.clear()
            before, start = faults(), time.perf_counter()
            try:
                seconds, digest = floor.timed_call(pipe, kwargs)
            except Exception as e:  # diffusers-mm cannot make a second call of a FluxPipeline
                emit("error", call=index, error=f"{type(e).__name__}: {e}"[:400])
                return
            if spec["arm"] == "delete" and index == 0:
                embeds = done_workload._delete_encoders(spec, pipe)
            memory = {"memory": floor.memory(), "cgroup": cgroup_memory(folder), "gpu": gpu_memory()}
            boundaries, phases = dict(spent), {name: at - start for name, at in marks.items()}
            spent.clear()
            faulted = [now - then for now, then in zip(faults(), before, strict=True)]
            timing = {"boundaries": boundaries, "phases": phases, "faults": faulted}
            emit("call", index=index, seconds=seconds, digest=digest, **timing, **memory)
        if attachment is not None:
            emit("reports", routes=[r.route for r in attachment.reports], done=done_workload._done_reports(attachment))
            attachment.detach()
        emit("end", cgroup=cgroup_memory(folder))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("arm",))
    parser.add_argument("--spec", required=True, help="the settings, as JSON")
    parser.add_argument("--progress", type=Path, required=True, help="JSON Lines, appended at each step")
    args = parser.parse_args()
    run(json.loads(args.spec), args.progress)


if __name__ == "__main__":
    main()
