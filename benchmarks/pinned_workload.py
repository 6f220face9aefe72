"""The workload and the per-arm worker of ``bench_pinned_memory.py`` (no ``bench_`` prefix: not run on its own).

* ``setup --dir DIR --size full --seed 0 --result R.json`` draws seeded random bf16 weights once and saves
  the whole ``FluxPipeline`` with ``save_pretrained``; the same size and seed again reuses what is there.
* ``arm --spec JSON --result R.json`` runs one arm in this fresh process and writes its raw figures.

``full``: a ``FluxTransformer2DModel`` of 1.31 B parameters (9 double + 15 single blocks, 12 heads x 128),
a T5 v1.1-style encoder of 0.62 B (d_model 1536, 22 layers), a CLIP-L-shaped text encoder (0.12 B) and
the Flux VAE (84 M), with word-level tokenizers built in memory. ``flux-dev``: FLUX.1-dev's own shapes (19
double and 38 single blocks, 24 heads x 128, joint attention 4096, guidance embeds; a T5-XXL encoder of d_model
4096, d_ff 10240, 24 layers, 64 heads; CLIP-L; the Flux VAE), about 31 GiB of random bf16 weights, saved as
sharded safetensors (on the GPU machine: 128 GiB of RAM, 64 GiB of disk). ``tiny``: the same classes at toy sizes.
Every model is built on the meta device and given its bf16 weights in place: no float32 copy is ever made.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import math
import os
import platform
import threading
import time
from pathlib import Path
from typing import Any

import torch

MANIFEST, MANIFEST_FORMAT = "bench_manifest.json", 1
PROMPT = "a photo of a red car near a river under a bright sky"
_WORDS = ("a", "photo", "of", "red", "car", "near", "river", "under", "bright", "sky", "the", "in", "on", "with")
VOCAB = {token: i for i, token in enumerate(("<pad>", "</s>", "<unk>", "<s>", *_WORDS))}

CLIP_L_AND_FLUX_VAE: dict[str, dict[str, Any]] = {
    "clip": {"vocab_size": 49408, "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12},
    "clip_heads": {"num_attention_heads": 12, "projection_dim": 768},
    "vae": {"block_out_channels": (128, 256, 512, 512), "layers_per_block": 2, "norm_num_groups": 32},
}
"""CLIP-L's text model and the Flux VAE at their real sizes: the ``full`` and ``flux-dev`` sizes share them."""

SIZES: dict[str, dict[str, Any]] = {
    "full": {
        "transformer": {"num_layers": 9, "num_single_layers": 15, "attention_head_dim": 128, "num_attention_heads": 12},
        "joint": {"joint_attention_dim": 1536, "pooled_projection_dim": 768, "axes_dims_rope": (16, 56, 56)},
        "t5": {"vocab_size": 32128, "d_model": 1536, "d_kv": 64, "d_ff": 3584, "num_layers": 22, "num_heads": 24},
        **CLIP_L_AND_FLUX_VAE,
        "call": {"height": 256, "width": 256, "max_sequence_length": 512, "guidance_scale": 3.5},
    },
    "flux-dev": {  # FLUX.1-dev's own configs (transformer, T5-XXL encoder, CLIP-L, VAE): about 31 GiB in bf16
        "transformer": {
            "num_layers": 19,
            "num_single_layers": 38,
            "attention_head_dim": 128,
            "num_attention_heads": 24,
        },
        "joint": {"joint_attention_dim": 4096, "pooled_projection_dim": 768, "axes_dims_rope": (16, 56, 56)},
        "t5": {"vocab_size": 32128, "d_model": 4096, "d_kv": 64, "d_ff": 10240, "num_layers": 24, "num_heads": 64},
        **CLIP_L_AND_FLUX_VAE,
        "call": {"height": 1024, "width": 1024, "max_sequence_length": 512, "guidance_scale": 3.5},
    },
    "tiny": {
        "transformer": {"num_layers": 1, "num_single_layers": 1, "attention_head_dim": 16, "num_attention_heads": 2},
        "joint": {"joint_attention_dim": 32, "pooled_projection_dim": 32, "axes_dims_rope": (4, 4, 8)},
        "t5": {"vocab_size": len(VOCAB), "d_model": 32, "d_kv": 8, "d_ff": 37, "num_layers": 2, "num_heads": 4},
        "clip": {"vocab_size": len(VOCAB), "hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 2},
        "clip_heads": {"num_attention_heads": 4, "projection_dim": 32},
        "vae": {"block_out_channels": (8, 8, 8, 8), "layers_per_block": 1, "norm_num_groups": 4},
        "call": {"height": 64, "width": 64, "max_sequence_length": 16, "guidance_scale": 3.5},
    },
}
"""Model configs per ``--size``; ``call`` holds the pipeline call's settings."""

TEXT_ENCODERS = ("text_encoder", "text_encoder_2")
"""The transformers encoders. At block level (what ``pipe.enable_group_offload`` gives them) diffusers 0.42.1
finds no ModuleList at their top and makes each one group that never streams or pins, so by default they are
offloaded at leaf level, which streams and pins every layer (``--encoder-offload block`` for the former)."""


# -- setup: draw and save the weights once -------------------------------------------------------------


def _quiet() -> None:
    """No progress bars from diffusers and transformers: the benchmark prints its own progress."""
    import diffusers
    import transformers

    diffusers.utils.logging.disable_progress_bar()
    transformers.utils.logging.disable_progress_bar()


def _tokenizer(*, bos: bool, model_max_length: int) -> Any:
    """A lower-casing word-level tokenizer over ``VOCAB`` (as ``ddo_hooks.testing.tiny_pipelines`` builds them)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(vocab=VOCAB, unk_token="<unk>"))
    tok.normalizer, tok.pre_tokenizer = normalizers.Lowercase(), pre_tokenizers.Whitespace()
    specials = [("<s>", VOCAB["<s>"]), ("</s>", VOCAB["</s>"])]
    template = "<s> $A </s>" if bos else "$A </s>"
    tok.post_processor = processors.TemplateProcessing(single=template, special_tokens=specials)
    names = {"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>", **({"bos_token": "<s>"} if bos else {})}
    return PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=model_max_length, **names)


def _materialize(model: torch.nn.Module, dtype: torch.dtype, generator: torch.Generator) -> None:
    """Give a meta-built model seeded random ``dtype`` weights: uniform +-1/sqrt(fan_in), unit norms, zero biases."""
    for tensor in (*model.parameters(), *model.buffers()):
        if tensor.is_floating_point():
            tensor.data = tensor.data.to(dtype)  # free on meta
    model.to_empty(device="cpu")
    with torch.no_grad():
        for name, tensor in (*model.named_parameters(), *model.named_buffers()):
            if tensor.is_floating_point() and tensor.dim() >= 2:
                bound = 1.0 / math.sqrt(max(1, tensor[0].numel()))
                tensor.uniform_(-bound, bound, generator=generator)
            elif tensor.is_floating_point():
                tensor.fill_(0.0 if name.endswith("bias") else 1.0)
    if hasattr(model, "tie_weights"):  # transformers: re-tie T5's shared embedding after to_empty
        model.tie_weights()
    model.eval()


def meta_models(size: str) -> dict[str, torch.nn.Module]:
    """The four models of ``size`` on the meta device: their shapes, without a byte of weights."""
    from diffusers import AutoencoderKL, FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    cfg = SIZES[size]
    ids = {"pad_token_id": VOCAB["<pad>"], "eos_token_id": VOCAB["</s>"]}
    clip = CLIPTextConfig(**cfg["clip"], **cfg["clip_heads"], max_position_embeddings=77, bos_token_id=3, **ids)
    t5 = T5Config(**cfg["t5"], feed_forward_proj="gated-gelu", dropout_rate=0.0, is_encoder_decoder=False, **ids)
    blocks = {"down_block_types": ("DownEncoderBlock2D",) * 4, "up_block_types": ("UpDecoderBlock2D",) * 4}
    vae = {"latent_channels": 16, "use_quant_conv": False, "use_post_quant_conv": False, **blocks, **cfg["vae"]}
    with torch.device("meta"):  # no slow default init: every tensor is drawn where it lies
        return {
            "transformer": FluxTransformer2DModel(
                patch_size=1, in_channels=64, guidance_embeds=True, **cfg["transformer"], **cfg["joint"]
            ),
            "text_encoder": CLIPTextModel(clip),
            "text_encoder_2": T5EncoderModel(t5),
            "vae": AutoencoderKL(**vae, scaling_factor=0.3611, shift_factor=0.1159),
        }


def _components(size: str, seed: int) -> dict[str, Any]:
    from diffusers import FlowMatchEulerDiscreteScheduler

    models = meta_models(size)
    generator = torch.Generator().manual_seed(seed)
    for model in models.values():
        _materialize(model, torch.bfloat16, generator)
    return {
        **models,
        "tokenizer": _tokenizer(bos=True, model_max_length=77),
        "tokenizer_2": _tokenizer(bos=False, model_max_length=512),
        "scheduler": FlowMatchEulerDiscreteScheduler(shift=3.0, use_dynamic_shifting=True, base_image_seq_len=256),
    }


def setup(directory: Path, size: str, seed: int) -> dict[str, Any]:
    """Draw and save the pipeline once; reuse it when the manifest matches size and seed."""
    from diffusers import FluxPipeline

    _quiet()
    path = directory / MANIFEST
    if path.is_file():
        manifest = json.loads(path.read_text())
        if (manifest.get("format"), manifest.get("size"), manifest.get("seed")) == (MANIFEST_FORMAT, size, seed):
            return {**manifest, "reused": True}
    directory.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    components = _components(size, seed)
    drawn = time.perf_counter()
    FluxPipeline(**components).save_pretrained(directory, safe_serialization=True, max_shard_size="5GB")
    models = {
        name: {"parameters": sum(p.numel() for p in m.parameters()), "bytes": sum(p.nbytes for p in m.parameters())}
        for name, m in components.items()
        if isinstance(m, torch.nn.Module)
    }
    manifest = {"format": MANIFEST_FORMAT, "size": size, "seed": seed, "dtype": "bfloat16", "models": models}
    manifest.update(configs=SIZES[size], draw_seconds=drawn - start, save_seconds=time.perf_counter() - drawn)
    path.write_text(json.dumps(manifest, indent=1))
    return {**manifest, "reused": False}


def versions() -> dict[str, Any]:
    """Python, torch and library versions, CPUs, RAM and GPU names (initializes CUDA where there is one)."""
    import importlib.metadata as md

    import psutil

    import ddo_hooks

    found: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform()}
    for name in ("torch", "diffusers", "transformers", "accelerate", "psutil", "safetensors"):
        try:
            found[name] = md.version(name)
        except md.PackageNotFoundError:
            found[name] = None
    found.update(torch=torch.__version__, ddo_hooks=ddo_hooks.__version__, torch_cuda=torch.version.cuda)
    found.update(cpu_count=psutil.cpu_count(), ram_bytes=psutil.virtual_memory().total, gpus=[])
    if torch.cuda.is_available():
        found["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return found


# -- instruments ---------------------------------------------------------------------------------------


def rss_bytes() -> int:
    """This process's resident set size, from ``/proc/self/statm`` (microseconds), else psutil."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        import psutil

        return psutil.Process().memory_info().rss


def reset_peak_rss() -> bool:
    """Restart the kernel's peak-RSS mark (VmHWM) of this process (Linux); False where it cannot."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def kernel_peak_rss() -> int | None:
    """The kernel's peak RSS of this process since the last reset (VmHWM, Linux); None where unreadable."""
    try:
        lines = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return None
    return next((int(line.split()[1]) * 1024 for line in lines if line.startswith("VmHWM:")), None)


def owned_pinned() -> int | None:
    """The pinned host allocator's owned bytes, raw ``allocated_bytes.current`` (torch >= 2.10); None without."""
    read = getattr(torch._C, "_cuda_hostMemoryStats", None)
    if read is None:
        return None
    raw = read()
    value = raw.get("allocated_bytes")
    return value.get("current") if isinstance(value, dict) else raw.get("allocated_bytes.current")


def _count_pinned(tensors: Any) -> dict[str, int]:
    """Distinct pinned storages among ``tensors``: bytes, and bytes rounded up to powers of two as owned."""
    blocks: dict[int, int] = {}
    for t in tensors:
        try:
            if isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.is_pinned():
                storage = t.untyped_storage()
                blocks[storage.data_ptr()] = storage.nbytes()
        except (RuntimeError, TypeError, NotImplementedError):  # exotic tensors in a gc scan
            continue
    rounded = sum(1 << (n - 1).bit_length() for n in blocks.values() if n > 0)
    return {"bytes": sum(blocks.values()), "rounded_bytes": rounded, "blocks": len(blocks)}


def _module_tensors(modules: list[torch.nn.Module]) -> Any:
    """Parameters, buffers and group offloading's CPU copies (``cpu_param_dict``) of ``modules``."""
    for module in itertools.chain.from_iterable(root.modules() for root in modules):
        yield from module.parameters(recurse=False)
        yield from module.buffers(recurse=False)
        registry = getattr(module, "_diffusers_hook", None)
        hook = registry.get_hook("group_offloading") if registry is not None else None
        yield from getattr(getattr(hook, "group", None), "cpu_param_dict", {}).values()


def live_pinned(modules: list[torch.nn.Module]) -> dict[str, int]:
    """Pinned bytes that ``modules`` hold."""
    return _count_pinned(_module_tensors(modules))


def live_pinned_gc_scan() -> dict[str, int]:
    """Pinned bytes that any tensor the garbage collector tracks holds (slow: a cross-check at the end)."""
    return _count_pinned(o for o in gc.get_objects() if isinstance(o, torch.Tensor))


def pipeline_modules(pipe: Any) -> list[torch.nn.Module]:
    return [m for m in pipe.components.values() if isinstance(m, torch.nn.Module)]


class RssSampler(threading.Thread):
    """Samples this process's RSS every ``interval`` seconds, paced by deadlines, from ``t0`` on."""

    def __init__(self, interval: float) -> None:
        super().__init__(daemon=True, name="rss-sampler")
        self.interval, self.t0 = interval, time.perf_counter()
        self.t: list[float] = []
        self.rss: list[int] = []
        self._halt = threading.Event()

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def run(self) -> None:
        deadline = time.perf_counter()
        while not self._halt.is_set():
            self.t.append(time.perf_counter() - self.t0)
            self.rss.append(rss_bytes())
            deadline += self.interval
            delay = deadline - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            else:
                deadline = time.perf_counter()

    def stop(self) -> dict[str, Any]:
        """Stop; return the series, compact: milliseconds (0.1) and KiB."""
        self._halt.set()
        self.join()
        t_ms = [round(t * 1e3, 1) for t in self.t]
        return {"interval_ms": self.interval * 1e3, "t_ms": t_ms, "rss_kib": [r // 1024 for r in self.rss]}


# -- one arm --------------------------------------------------------------------------------------------


def _offload(pipe: Any, mode: str, device: torch.device, encoders: str) -> dict[str, Any]:
    from diffusers.hooks import apply_group_offloading

    cuda = device.type == "cuda"
    if mode == "model_offload":
        if not cuda:
            return {"applied": None, "note": "model CPU offload needs CUDA: the components stay on the CPU"}
        pipe.enable_model_cpu_offload(device=device)
        return {"applied": "enable_model_cpu_offload"}
    lcmu = mode == "group_lcmu_true"
    kwargs = {"onload_device": device, "offload_device": torch.device("cpu"), "use_stream": cuda}
    kwargs.update(low_cpu_mem_usage=lcmu)
    for name, component in pipe.components.items():
        if name in TEXT_ENCODERS and encoders == "leaf":
            apply_group_offloading(component, offload_type="leaf_level", **kwargs)
        elif name in TEXT_ENCODERS:
            apply_group_offloading(component, offload_type="block_level", num_blocks_per_group=1, **kwargs)
        elif isinstance(component, torch.nn.Module):  # diffusers models: block level over their own blocks
            component.enable_group_offload(offload_type="block_level", num_blocks_per_group=1, **kwargs)
    offload = {"applied": "group offloading", "use_stream": cuda, "low_cpu_mem_usage": lcmu}
    offload.update(transformer_and_vae="block_level", text_encoders=f"{encoders}_level")
    if not cuda:
        offload["note"] = "no CUDA: onloads to the CPU without a stream, so nothing is pinned"
    return offload


def _after_call(arm: str, device: torch.device, skipped: set[str]) -> dict[str, float]:
    """Arms 2 and 3: what users do after a call, each step timed; CUDA calls are skipped without CUDA."""
    if arm not in ("gc_empty_cache", "flush"):
        return {}
    steps: list[tuple[str, Any]] = [("gc", gc.collect), ("empty_cache", torch.cuda.empty_cache)]
    if arm == "flush":
        release = getattr(torch._C, "_host_emptyCache", None)
        steps[1:] = [("synchronize", lambda: torch.cuda.synchronize(device)), ("host_empty_cache", release)]
    spent = {}
    for name, call in steps:
        if name != "gc" and (device.type != "cuda" or call is None):
            why = "no CUDA" if device.type != "cuda" else "this torch has no torch._C._host_emptyCache"
            skipped.add(f"{arm}: {name} skipped ({why})")
            continue
        t = time.perf_counter()
        call()
        spent[f"{name}_seconds"] = time.perf_counter() - t
    return spent


class _StepClock:
    """Step times: the transformer's first forward in a call (a torch pre-hook), then each step's end."""

    def __init__(self, device: torch.device, t0: float) -> None:
        self.device, self.t0, self.first, self.ends, self.owned = device, t0, None, [], []

    def pre_forward(self, module: Any, args: Any) -> None:
        if self.first is None:
            self.first = time.perf_counter()

    def on_step_end(self, pipe: Any, step: int, timestep: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # in every arm: each stamp is the step's real end
        self.ends.append(time.perf_counter())
        self.owned.append(owned_pinned())
        return kwargs

    def take(self) -> dict[str, Any]:
        marks = [self.first, *self.ends] if self.first is not None else self.ends
        taken = {"step_seconds": [b - a for a, b in itertools.pairwise(marks)], "owned_pinned_at_steps": self.owned}
        taken["first_forward_t"] = self.first - self.t0 if self.first is not None else None
        self.first, self.ends, self.owned = None, [], []
        return taken


def _attach(pipe: Any, now: Any, observed: list[dict[str, Any]]) -> Any:
    """Arm 4: the default policy (all three boundaries, ``collect: auto``) plus an observer after each release."""
    from ddo_hooks import HookPolicy, attach, register_action
    from ddo_hooks.boundaries import BOUNDARIES

    @register_action("bench.observe", replace=True)
    def observe(ctx: Any) -> None:
        t = time.perf_counter()
        seen = {"t": now(), "call": ctx.call_index, "live_pinned": live_pinned(pipeline_modules(ctx.pipeline))}
        observed.append({**seen, "owned_pinned": owned_pinned(), "observe_seconds": time.perf_counter() - t})

    actions = {"actions": ["host_cache_release", "bench.observe"]}
    boundaries = dict.fromkeys(BOUNDARIES, actions)
    return attach(
        pipe, HookPolicy.from_mapping({"version": 1, "release": {"collect": "auto"}, "boundaries": boundaries})
    )


def _reports(attachment: Any, observed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each release report (or refusal) of the built-in action, with what the observer saw right after it."""
    rows, seen = [], iter(observed)
    for report in attachment.reports:
        dump = report.model_dump(mode="json")
        if report.route == "pytorch_host_cache_release":
            rows.append({**next(seen, {}), "report": dump})
        elif (
            report.route == "phase_boundary_refusal" and dump["setup"]["boundary_refusal"]["action"] != "bench.observe"
        ):
            rows.append({"call": dump["setup"]["boundary_refusal"]["call_index"], "report": dump})
    return rows


def _load(spec: dict[str, Any], device: torch.device) -> tuple[Any, dict[str, Any], dict[str, float]]:
    import psutil
    from diffusers import FluxPipeline

    timings = {"startup_seconds": time.time() - psutil.Process().create_time()}
    t = time.perf_counter()
    pipe = FluxPipeline.from_pretrained(spec["weights_dir"], dtype=torch.bfloat16)
    pipe.set_progress_bar_config(disable=True)
    timings["load_seconds"], t = time.perf_counter() - t, time.perf_counter()
    offload = _offload(pipe, spec["mode"], device, spec.get("encoder_offload", "leaf"))
    timings["offload_setup_seconds"] = time.perf_counter() - t
    rss, pinned = rss_bytes() / 2**30, (owned_pinned() or 0) / 2**30
    line = f"loaded in {timings['load_seconds']:.1f} s, offloading set up in {timings['offload_setup_seconds']:.1f} s"
    print(f"{device}: {line}; RSS {rss:.2f} GiB, pinned {pinned:.2f} GiB", flush=True)
    return pipe, offload, timings


def _encode_and_drop(pipe: Any, device: torch.device, cfg: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Workflow (b): encode once, then drop the text encoders and tokenizers (no gc: as users do it)."""
    t = time.perf_counter()
    with torch.no_grad():
        embeds, pooled, _ = pipe.encode_prompt(PROMPT, None, device, max_sequence_length=cfg["max_sequence_length"])
    encoders = live_pinned([pipe.text_encoder, pipe.text_encoder_2])
    encode = {"seconds": time.perf_counter() - t, "encoders_live_pinned": encoders, "owned_pinned": owned_pinned()}
    pipe.text_encoder = pipe.text_encoder_2 = pipe.tokenizer = pipe.tokenizer_2 = None
    return encode, {"prompt": None, "prompt_embeds": embeds, "pooled_prompt_embeds": pooled}


def run_arm(spec: dict[str, Any]) -> dict[str, Any]:
    """Load, offload, (encode and drop the encoders), then the calls, each followed by the arm's release."""
    _quiet()
    arm, cfg = spec["arm"], SIZES[spec["size"]]["call"]
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    sampler, events = RssSampler(spec["sample_ms"] / 1e3), []
    sampler.start()

    def mark(name: str) -> None:
        events.append([round(sampler.now() * 1e3, 1), name])

    pipe, offload, timings = _load(spec, device)
    mark("loaded")
    clock, skipped, observed = _StepClock(device, sampler.t0), set(), []
    pipe.transformer.register_forward_pre_hook(clock.pre_forward)
    attachment = _attach(pipe, sampler.now, observed) if arm == "ddo_hooks" else None
    peak_reset = reset_peak_rss()
    mark("work_start")
    kwargs = {**cfg, "num_inference_steps": spec["steps"], "output_type": "pil", "prompt": PROMPT}
    kwargs["callback_on_step_end"] = clock.on_step_end
    encode = None
    if spec["workflow"] == "b":
        encode, prompt = _encode_and_drop(pipe, device, cfg)
        kwargs.update(prompt)
        mark("encoders_dropped")
    calls = []
    for index in range(1, spec["calls"] + 1):
        mark(f"call{index}_start")
        t = time.perf_counter()
        pipe(**kwargs, generator=torch.Generator("cpu").manual_seed(spec["seed"] + index))
        row = {"index": index, "call_seconds": time.perf_counter() - t, **clock.take()}
        mark(f"call{index}_end")
        row.update(rss_after_call=rss_bytes(), owned_pinned_after_call=owned_pinned())
        t = time.perf_counter()
        row["post"] = _after_call(arm, device, skipped)
        row["post_seconds"] = time.perf_counter() - t
        mark(f"call{index}_rest")
        row.update(owned_pinned_after_post=owned_pinned(), live_pinned_after_post=live_pinned(pipeline_modules(pipe)))
        time.sleep(spec["rest_s"])
        mark(f"call{index}_rested")
        calls.append(row)
        steps = ", ".join(f"{s * 1e3:.0f}" for s in row["step_seconds"])
        pinned = (row["owned_pinned_after_post"] or 0) / 2**30, row["live_pinned_after_post"]["rounded_bytes"] / 2**30
        line = f"{row['call_seconds']:.2f} s (steps {steps} ms), after it {row['post_seconds']:.2f} s"
        line += f"; RSS {rss_bytes() / 2**30:.2f} GiB; pinned {pinned[0]:.2f} GiB owned, {pinned[1]:.2f} GiB live"
        print(f"call {index}: {line}", flush=True)
    mark("work_end")
    from ddo_hooks import unregister_action

    result = {"spec": spec, "device": str(device), "offload": offload, "timings": timings, "encode": encode}
    result.update(calls=calls, peak_rss_kernel=kernel_peak_rss() if peak_reset else None, events=events)
    result.update(series=sampler.stop(), skipped=sorted(skipped), boundaries=[])
    if attachment is not None:
        result["boundaries"] = _reports(attachment, observed)
        attachment.detach()
        unregister_action("bench.observe")
    if device.type == "cuda":  # after the window: the module walk against every pinned tensor the gc tracks
        walk, scan = live_pinned(pipeline_modules(pipe)), live_pinned_gc_scan()
        result["final_pinned"] = {"module_walk": walk, "gc_scan": scan, "owned": owned_pinned()}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("setup", "arm"))
    parser.add_argument("--result", type=Path, required=True, help="where the JSON goes")
    parser.add_argument("--spec", help="arm: its settings, as JSON")
    parser.add_argument("--dir", type=Path, help="setup: the weights' directory")
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.command == "arm":
        args.result.write_text(json.dumps(run_arm(json.loads(args.spec))))
        return
    start = time.perf_counter()
    manifest = setup(args.dir, args.size, args.seed)
    manifest.update(setup_seconds=time.perf_counter() - start, versions=versions())
    for name, counts in manifest["models"].items():
        print(f"  {name:15} {counts['parameters']:>14,} parameters {counts['bytes'] / 2**30:8.3f} GiB")
    how = "reused" if manifest["reused"] else "drawn and saved"
    print(f"  weights {how} in {manifest['setup_seconds']:.1f} s under {args.dir}", flush=True)
    args.result.write_text(json.dumps(manifest))


if __name__ == "__main__":
    main()
