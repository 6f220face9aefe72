"""The per-arm worker of ``bench_pinned_floor.py`` (no ``bench_`` prefix: not run on its own).

* ``setup --family sd --dir DIR --size full --result R.json``: draw and save an SD 1.5-shaped pipeline (UNet
  0.86 B, CLIP-L text encoder, SD VAE, random bf16 weights) once; the Flux-shaped one is ``pinned_workload.py``'s.
* ``arm --spec JSON --result R.json``: load the saved pipeline, offload it at leaf level with streams
  (``record_stream=False``), run the arm's plain ``pipe(prompt=...)`` calls and write what each call left behind:
  RSS split into anon / file / shmem, the pinned bytes the allocator owns, what each component's copies need and
  own, the output's digest (bitwise equality across arms), and the repack report when there is one.
* ``twins --spec JSON --result R.json``: two copies of the pipeline in one process under the same preset, one
  repacked and one not, their calls interleaved (ABBA): call times and digests, for the steady-state call time.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import pinned_workload as workload
import torch

SD_SIZES: dict[str, dict[str, Any]] = {
    "full": {
        "unet": {"block_out_channels": (320, 640, 1280, 1280), "attention_head_dim": 8, "cross_attention_dim": 768},
        "clip": {"vocab_size": 49408, "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12},
        "heads": 12,
        "vae": (128, 256, 512, 512),
    },
    "tiny": {
        "unet": {"block_out_channels": (32, 64, 64, 64), "attention_head_dim": 8, "cross_attention_dim": 32},
        "clip": {"vocab_size": len(workload.VOCAB), "hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 2},
        "heads": 4,
        "vae": (8, 8, 8, 8),
    },
}
"""SD 1.5 shapes per ``--size`` (``tiny``: the same classes at toy sizes, for a CPU run)."""

ENCODERS = {"flux": ("text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2"), "sd": ("text_encoder", "tokenizer")}


def setup_sd(directory: Path, size: str, seed: int) -> dict[str, Any]:
    """Draw and save the SD-shaped pipeline once; reuse it when the manifest matches size and seed."""
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    path = directory / workload.MANIFEST
    if path.is_file():
        manifest = json.loads(path.read_text())
        if (manifest.get("family"), manifest.get("size"), manifest.get("seed")) == ("sd", size, seed):
            return {**manifest, "reused": True}
    cfg = SD_SIZES[size]
    down = ("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",)
    up = ("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3
    ids = {"pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 3}
    with torch.device("meta"):
        models = {
            "unet": UNet2DConditionModel(down_block_types=down, up_block_types=up, layers_per_block=2, **cfg["unet"]),
            "text_encoder": CLIPTextModel(
                CLIPTextConfig(**cfg["clip"], num_attention_heads=cfg["heads"], max_position_embeddings=77, **ids)
            ),
            "vae": AutoencoderKL(
                block_out_channels=cfg["vae"],
                down_block_types=("DownEncoderBlock2D",) * 4,
                up_block_types=("UpDecoderBlock2D",) * 4,
                latent_channels=4,
                layers_per_block=2,
                norm_num_groups=min(32, cfg["vae"][0]),
            ),
        }
    generator = torch.Generator().manual_seed(seed)
    for model in models.values():
        workload._materialize(model, torch.bfloat16, generator)
    pipe = StableDiffusionPipeline(
        **models,
        tokenizer=workload._tokenizer(bos=True, model_max_length=77),
        scheduler=DDIMScheduler(),
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    directory.mkdir(parents=True, exist_ok=True)
    pipe.save_pretrained(directory, safe_serialization=True)
    counts = {n: {"parameters": sum(p.numel() for p in m.parameters())} for n, m in models.items()}
    manifest = {"format": workload.MANIFEST_FORMAT, "family": "sd", "size": size, "seed": seed, "models": counts}
    path.write_text(json.dumps(manifest, indent=1))
    return {**manifest, "reused": False}


# -- instruments -------------------------------------------------------------------------------------


def memory() -> dict[str, Any]:
    """Which memory the process holds now: RSS and its split, the cgroup's charge, the pinned bytes owned."""
    from ddo_hooks.release.host_memory import observe_host

    seen = observe_host()
    return {
        "rss": seen.rss_bytes,
        "anon": seen.rss_anon_bytes,
        "file": seen.rss_file_bytes,
        "shmem": seen.rss_shmem_bytes,
        "cgroup": seen.cgroup_memory_bytes,
        "pinned_owned": workload.owned_pinned(),
    }


def pinned_peak() -> int | None:
    read = getattr(torch._C, "_cuda_hostMemoryStats", None)
    return None if read is None else read()["allocated_bytes"]["peak"]


def copies(pipe: Any) -> dict[str, dict[str, int]]:
    """Per component: its groups' CPU copies, their bytes, what they own (distinct storages, each rounded up to a
    power of two: a block each, or the slabs they share) and the bytes of its largest group."""
    from ddo_hooks._compat import diffusers as diffusers_compat

    found = {}
    for name, module in pipe.components.items():
        if not isinstance(module, torch.nn.Module):
            continue
        groups = [list(diffusers_compat.group_cpu_sources(g).values()) for g in diffusers_compat.offload_groups(module)]
        tensors = list({t.data_ptr(): t for group in groups for t in group}.values())  # a tied weight's copy once
        storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
        found[name] = {
            "tensors": len(tensors),
            "tensor_bytes": sum(t.numel() * t.element_size() for t in tensors),
            "owned": sum(1 << (n - 1).bit_length() for n in storages.values() if n),
            "largest_group_bytes": max((sum(t.numel() * t.element_size() for t in g) for g in groups), default=0),
            "pinned": bool(tensors) and all(t.is_pinned() for t in tensors) if torch.cuda.is_available() else False,
        }
    return found


def digest(output: Any) -> str:
    tensor = output[0] if isinstance(output, tuple) else output
    return hashlib.sha256(tensor.detach().float().cpu().contiguous().numpy().tobytes()).hexdigest()[:16]


# -- one arm -----------------------------------------------------------------------------------------


RUNTIMES = ("leaf", "leaf-rs", "block", "block-rs", "ddo", "none")
"""How ``load`` offloads (``spec["runtime"]``): diffusers group offloading with streams at leaf level (``leaf``, the
default) or block level, one block a group (``block``), each with ``record_stream=False`` or ``True`` (``-rs``);
``ddo``: DDO 0.1.0rc2's ``enable_pipeline_offload(pipe, preset="auto")`` told not to pin copies of its own
(``DDO_PIN_CPU_MEMORY=0``), for arms that pin from the files (DDO alone is ``box_workload``'s ``ddo-auto``);
``none``: not offloaded (the ``streamed-box`` preset applies its own runtime at attach)."""


NO_STREAM = {"DDO_RUNNER_TEXT_ENCODER_OFFLOAD_STREAM": "0"}
"""On a CPU (a smoke run), DDO's ``auto`` preset offloads the text encoder without a stream: there is none."""


def load(spec: dict[str, Any]) -> Any:
    from diffusers import FluxPipeline, StableDiffusionPipeline

    cls = FluxPipeline if spec["family"] == "flux" else StableDiffusionPipeline
    pipe = cls.from_pretrained(spec["weights_dir"], dtype=torch.bfloat16)
    pipe.set_progress_bar_config(disable=True)
    offload(pipe, spec.get("runtime", "leaf"), spec["lcmu"])
    return pipe


def offload(pipe: Any, runtime: str, lcmu: bool) -> None:
    """Offload ``pipe`` as the arm's ``runtime`` says (:data:`RUNTIMES`), onto the process's current CUDA device
    (``cuda:0`` unless it chose another, as a rank of ``bench_ranks.py`` chooses its own)."""
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    if runtime == "none":
        return
    if runtime == "ddo":
        import diffusers_dynamic_offloader as ddo

        environ = {"DDO_PIN_CPU_MEMORY": "0", **({} if cuda else NO_STREAM)}
        ddo.enable_pipeline_offload(pipe, preset="auto", execution_device=device, low_cpu_mem_usage=lcmu,
                                    environ=environ)  # fmt: skip
        return
    if runtime not in RUNTIMES:
        raise SystemExit(f"unknown runtime {runtime!r}: one of {', '.join(RUNTIMES)}")
    level = "block_level" if runtime.startswith("block") else "leaf_level"
    pipe.enable_group_offload(device, offload_device=torch.device("cpu"), offload_type=level,
                              num_blocks_per_group=1 if level == "block_level" else None, use_stream=cuda,
                              record_stream=cuda and runtime.endswith("-rs"), low_cpu_mem_usage=lcmu)  # fmt: skip


def call_kwargs(spec: dict[str, Any], index: int) -> dict[str, Any]:
    kwargs = {"prompt": workload.PROMPT, "num_inference_steps": spec["steps"], "output_type": "pt"}
    kwargs.update(height=spec["height"], width=spec["width"], return_dict=False)
    kwargs["generator"] = torch.Generator("cpu").manual_seed(spec["seed"] + index)
    if spec["family"] == "flux":
        kwargs.update(guidance_scale=3.5, max_sequence_length=spec.get("max_sequence_length", 512))
    return kwargs


def preset_policy(preset: str) -> dict[str, Any]:
    """The preset as a mapping, with extras after ``+``: ``stable`` declares the weights files stable
    (``stable_files: true``); ``evict`` evicts the done components' file pages (``evict: true``); ``register`` and
    ``stage`` pin from the files (``pinned_copies.from_files``); ``encoders`` pins the text encoders from their files
    too and keeps them so (``keep_encoders_pinned: true``); ``nores``: the ring runtime keeps no block weight on the
    GPU (``offload.resident_bytes: 0``); ``poison``: its slots filled with NaN before each copy (a check); ``la<N>``:
    its lookahead N units; ``ring<N>``: its ring N MiB;
    ``register_all``, the name of earlier runs for
    ``register+encoders``; ``without_<action>`` takes that action out of every boundary (which of a preset's actions
    costs the time), and disables a boundary it leaves with none."""
    from ddo_hooks import HookPolicy

    name, *extras = preset.split("+")
    policy = HookPolicy.preset(name).model_dump(mode="json")
    for extra in extras:
        if extra in ("register", "stage"):
            policy["pinned_copies"]["from_files"] = extra
        elif extra in ("stable", "evict"):
            for boundary in policy["boundaries"].values():
                for action in boundary["actions"]:
                    if action["name"] == "release_done_components":
                        action["options"]["stable_files" if extra == "stable" else "evict"] = True
        elif extra in ("encoders", "register_all"):
            policy["pinned_copies"]["keep_encoders_pinned"] = True
            if extra == "register_all":
                policy["pinned_copies"]["from_files"] = "register"
        elif extra in ("nores", "poison"):
            policy["offload"].update({"resident_bytes": 0} if extra == "nores" else {"poison": True})
        elif extra[:2] == "la" and extra[2:].isdigit():
            policy["offload"]["lookahead"] = int(extra[2:])
        elif extra[:4] == "ring" and extra[4:].isdigit():
            policy["offload"]["ring_bytes"] = f"{extra[4:]}MiB"
        elif extra.startswith("without_"):  # a boundary left with no action is disabled (a policy needs one)
            for boundary in policy["boundaries"].values():
                boundary["actions"] = [a for a in boundary["actions"] if a["name"] != extra.removeprefix("without_")]
                boundary["enabled"] = boundary["enabled"] and bool(boundary["actions"])
        else:
            raise SystemExit(
                f"unknown preset extra {extra!r} in {preset!r}: stable, evict, register, stage, encoders, "
                "register_all, nores, poison, la<N>, ring<N> or without_<action>"
            )
    return policy


def attach_preset(pipe: Any, preset: str, repack: bool) -> Any:
    """Attach the preset with its extras."""
    from ddo_hooks import HookPolicy, attach

    policy = preset_policy(preset)
    policy["pinned_copies"]["repack"] = repack
    return attach(pipe, HookPolicy.from_mapping(policy))


def timed_call(pipe: Any, kwargs: dict[str, Any]) -> tuple[float, str]:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    started = time.perf_counter()
    output = pipe(**kwargs)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - started, digest(output[0])


def run_arm(spec: dict[str, Any]) -> dict[str, Any]:
    """Load, offload, maybe attach a preset, then the plain calls; what each left behind at rest."""
    workload._quiet()
    arm = spec["arm"]
    pipe = load(spec)
    result: dict[str, Any] = {"spec": spec, "loaded": memory(), "copies_loaded": copies(pipe)}
    attachment = None
    if arm.startswith("preset:"):
        peak_before = pinned_peak()
        attachment = attach_preset(pipe, arm.split(":", 1)[1], spec["repack"])
        if attachment.repack_report is not None:
            result["repack"] = attachment.repack_report.model_dump(mode="json")["setup"]["pinned_copy_repack"]
            result["repack_peak_above_start"] = (pinned_peak() or 0) - (peak_before or 0)
    result["attached"] = memory()
    calls, embeds = [], {}
    for index in range(spec["calls"]):
        kwargs = call_kwargs(spec, index)
        if arm == "delete" and index > 0:  # the user deleted the encoders after the first call
            kwargs.update(prompt=None, **embeds)
        seconds, output = timed_call(pipe, kwargs)
        if arm == "delete" and index == 0:
            embeds = delete_encoders(spec, pipe)
        time.sleep(spec["rest_s"])  # lowest-latency releases after_call once idle
        calls.append({"seconds": seconds, "digest": output, "rest": memory()})
    result.update(calls=calls, copies_end=copies(pipe))
    if attachment is not None:
        result["boundaries"] = [
            {k: v for k, v in r.model_dump(mode="json")["setup"]["host_cache_release"].items() if k in KEPT}
            for r in attachment.reports
            if r.route == "pytorch_host_cache_release"
        ]
        attachment.detach()
    return result


KEPT = ("phase", "status", "noop_reason", "allocator_bytes_delta", "elapsed_seconds", "pinned_since_previous")


def delete_encoders(spec: dict[str, Any], pipe: Any) -> dict[str, Any]:
    """What a user does by hand: encode the prompt once, delete the text encoders and collect; the embeddings."""
    with torch.no_grad():
        embeds = prompt_embeds(spec, pipe.encode_prompt(workload.PROMPT, **encode_kwargs(spec, pipe)))
    for name in ENCODERS[spec["family"]]:
        setattr(pipe, name, None)
    gc.collect()
    return embeds


def encode_kwargs(spec: dict[str, Any], pipe: Any) -> dict[str, Any]:
    device = pipe._execution_device
    if spec["family"] == "flux":
        return {"prompt_2": None, "device": device, "max_sequence_length": spec.get("max_sequence_length", 512)}
    return {"device": device, "num_images_per_prompt": 1, "do_classifier_free_guidance": True}


def prompt_embeds(spec: dict[str, Any], encoded: tuple[Any, ...]) -> dict[str, Any]:
    if spec["family"] == "flux":
        return {"prompt_embeds": encoded[0], "pooled_prompt_embeds": encoded[1]}
    return {"prompt_embeds": encoded[0], "negative_prompt_embeds": encoded[1]}


def component_clock(pipe: Any) -> dict[str, float]:
    """Seconds spent in each component's forwards (onload included: the hooks run inside ``__call__``), summed
    over a call; the caller clears the dict between calls. Synchronizes around each forward, in both twins."""
    spent: dict[str, float] = {}
    for name, module in pipe.components.items():
        if isinstance(module, torch.nn.Module):
            started: list[float] = []

            def pre(_module: Any, _args: Any, _started: list[float] = started) -> None:
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                _started.append(time.perf_counter())

            def post(_module: Any, _args: Any, _out: Any, _name: str = name, _started: list[float] = started) -> None:
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                spent[_name] = spent.get(_name, 0.0) + time.perf_counter() - _started.pop()

            module.register_forward_pre_hook(pre)
            module.register_forward_hook(post)
    return spent


def run_twins(spec: dict[str, Any]) -> dict[str, Any]:
    """The same preset on two copies of the pipeline, one repacked: interleaved calls (ABBA), times and digests,
    and the seconds of each component's forwards in each call."""
    workload._quiet()
    pipes = {"plain": load(spec), "repacked": load(spec)}
    attachments = {name: attach_preset(pipe, spec["preset"], name == "repacked") for name, pipe in pipes.items()}
    clocks = {name: component_clock(pipe) for name, pipe in pipes.items()}
    result: dict[str, Any] = {"spec": spec, "calls": {name: [] for name in pipes}}
    for rep in range(spec["reps"]):
        order = ("plain", "repacked") if rep % 2 == 0 else ("repacked", "plain")
        for name in order:
            clocks[name].clear()
            seconds, output = timed_call(pipes[name], call_kwargs(spec, rep))
            call = {"rep": rep, "seconds": seconds, "digest": output, "components": dict(clocks[name])}
            result["calls"][name].append(call)
    result["copies"] = {name: copies(pipe) for name, pipe in pipes.items()}
    if torch.cuda.is_available():
        result["h2d"] = h2d_rounds(pipes, spec.get("h2d_rounds", 10))
    for attachment in attachments.values():
        attachment.detach()
    return result


def h2d_rounds(pipes: dict[str, Any], rounds: int) -> dict[str, list[float]]:
    """Seconds to copy the denoiser's pinned copies to the GPU, non-blocking on a side stream (CUDA events), for
    each pipeline, the pipelines alternating round by round: the transfers a call makes, without the compute."""
    from ddo_hooks._compat import diffusers as diffusers_compat

    def sources(pipe: Any) -> list[torch.Tensor]:
        denoiser = getattr(pipe, "transformer", None) or pipe.unet
        found = {t.data_ptr(): t for g in diffusers_compat.offload_groups(denoiser)
                 for t in diffusers_compat.group_cpu_sources(g).values()}  # fmt: skip
        return list(found.values())

    stream, seconds = torch.cuda.Stream(), {name: [] for name in pipes}
    for index in range(rounds):
        for name in sorted(pipes, reverse=index % 2 == 1):
            copies_ = sources(pipes[name])
            targets = [torch.empty_like(t, device="cuda") for t in copies_]
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.cuda.stream(stream):
                start.record()
                for target, source in zip(targets, copies_, strict=True):
                    target.copy_(source, non_blocking=True)
                end.record()
            end.synchronize()
            seconds[name].append(start.elapsed_time(end) / 1e3)
            del targets
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("setup", "arm", "twins"))
    parser.add_argument("--result", type=Path, required=True)
    parser.add_argument("--spec", help="arm, twins: the settings, as JSON")
    parser.add_argument("--dir", type=Path, help="setup: the weights' directory")
    parser.add_argument("--size", choices=sorted(SD_SIZES), default="full")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.command == "setup":
        found = setup_sd(args.dir, args.size, args.seed)
    else:
        found = (run_arm if args.command == "arm" else run_twins)(json.loads(args.spec))
    args.result.write_text(json.dumps(found))


if __name__ == "__main__":
    main()
