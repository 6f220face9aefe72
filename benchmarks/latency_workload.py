"""The per-process worker of ``bench_latency.py`` (no ``bench_`` prefix: not run on its own).

* ``arm --spec JSON --result R.json``: one repetition of one arm in this fresh process: the Flux-shaped
  pipeline of ``pinned_workload.py`` under group offloading (streams, ``low_cpu_mem_usage=True``), the
  text encoders dropped after the first encoding (workflow b), ``calls`` timed calls, then an idle wait.
* ``repin --result R.json``: what pinning 1 GiB costs fresh, from the cache and after a release, and the
  host-to-device bandwidth from it, under this process's ``PYTORCH_CUDA_ALLOC_CONF``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path
from typing import Any

import pinned_workload as pw
import torch

ENCODERS = ("text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2")


def _policy(arm: str) -> Any:
    from ddo_hooks import HookPolicy

    arm = arm.partition("-register")[0]  # the same preset; the mode is the process's PYTORCH_CUDA_ALLOC_CONF
    if arm in ("lowest-peak", "lowest-latency", "default"):
        return HookPolicy.preset(arm)
    if arm in ("peak-trim", "lowest-peak-trim", "model-offload-trim"):  # every boundary: release, then malloc_trim
        actions = {"actions": ["host_cache_release", "malloc_trim"]}
        return HookPolicy.from_mapping({"version": 1, "boundaries": dict.fromkeys(pw_boundaries(), actions)})
    return None


def pw_boundaries() -> tuple[str, ...]:
    from ddo_hooks.boundaries import BOUNDARIES

    return BOUNDARIES


def _boundary_rows(attachment: Any) -> list[dict[str, Any]]:
    rows = []
    for entry in attachment.tracker.entries():
        report, envelope = entry.report, entry.envelope
        row: dict[str, Any] = {"component": entry.component, "call": envelope.call_index, "route": report.route}
        if report.route == "pytorch_host_cache_release":
            r = report.release
            row.update(phase=r.phase, status=r.status, noop_reason=r.noop_reason, delta=r.allocator_bytes_delta)
            row.update(elapsed=r.elapsed_seconds, release=r.timings.release_seconds, collect=r.timings.collect_seconds)
            row.update(full=r.collection.full_collection if r.collection else None)
            row.update(survivors=list(r.collection.survivors) if r.collection else None)
            row.update(rss_before=r.host_before.rss_bytes if r.host_before else None)
            row.update(rss_after=r.host_after.rss_bytes if r.host_after else None)
            since = r.pinned_since_previous
            row["repinned"] = since.model_dump() if since else None
        elif report.route == "boundary_action":
            row.update(phase=report.body.boundary, action=report.body.action, data=report.body.data)
        else:
            row.update(phase=report.body.boundary, refused=report.body.reason)
        rows.append(row)
    return rows


def run_arm(spec: dict[str, Any], result_dir: Path) -> dict[str, Any]:
    from ddo_hooks import attach

    pw._quiet()
    arm = spec["arm"]
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    sampler = pw.RssSampler(spec["sample_ms"] / 1e3)
    sampler.start()
    pipe, offload, timings = pw._load({**spec, "mode": spec["mode"]}, device)
    policy = _policy(arm)
    attachment = attach(pipe, policy) if policy is not None else None
    pw.reset_peak_rss()
    cfg = {**pw.SIZES[spec["size"]]["call"], "height": spec["height"], "width": spec["width"]}
    kwargs = {**cfg, "num_inference_steps": spec["steps"], "output_type": "pil", "prompt": pw.PROMPT}
    encoders_pinned = None
    start = sampler.now()
    marks = [(start, "encode")]
    if spec["workflow"] == "b":
        with torch.no_grad():
            embeds, pooled, _ = pipe.encode_prompt(
                pw.PROMPT, None, device, max_sequence_length=cfg["max_sequence_length"]
            )
        encoders_pinned = pw.live_pinned([pipe.text_encoder, pipe.text_encoder_2])
        if attachment is not None:
            attachment.drop(*ENCODERS)
        else:
            pipe.text_encoder = pipe.text_encoder_2 = pipe.tokenizer = pipe.tokenizer_2 = None
        kwargs.update(prompt=None, prompt_embeds=embeds, pooled_prompt_embeds=pooled)
        marks.append((sampler.now(), "encoders dropped"))
    calls = []
    for index in range(1, spec["calls"] + 1):
        marks.append((sampler.now(), f"call {index}"))
        t = time.perf_counter()
        pipe(**kwargs, generator=torch.Generator("cpu").manual_seed(index))
        calls.append(
            {"seconds": time.perf_counter() - t, "rss_after": pw.rss_bytes(), "owned_after": pw.owned_pinned()}
        )
        print(f"  call {index}: {calls[-1]['seconds']:.2f} s, RSS {calls[-1]['rss_after'] / 2**30:.2f} GiB", flush=True)
    marks.append((sampler.now(), "idle"))
    time.sleep(spec["idle_s"])  # an idle service: the deferred after_call (lowest-latency) runs in here
    idle = {"rss": pw.rss_bytes(), "owned": pw.owned_pinned()}
    series = sampler.stop()
    t_ms, rss_kib = series["t_ms"], series["rss_kib"]
    window = [(t / 1e3, kib * 1024) for t, kib in zip(t_ms, rss_kib, strict=True) if t / 1e3 >= start]
    rss_seconds = sum((b[0] - a[0]) * a[1] for a, b in itertools.pairwise(window)) / 2**30
    top = max(window, key=lambda sample: sample[1])  # where the sampled peak fell: after which mark, how far in
    mark = max((m for m in marks if m[0] <= top[0]), key=lambda m: m[0])
    sampled_peak = {"rss": top[1], "during": mark[1], "seconds_in": round(top[0] - mark[0], 3)}
    result: dict[str, Any] = {"spec": spec, "device": str(device), "offload": offload, "timings": timings}
    result.update(calls=calls, idle=idle, peak_rss=pw.kernel_peak_rss(), gib_seconds=rss_seconds)
    result.update(encoders_pinned=encoders_pinned, sampled_peak=sampled_peak, boundaries=[])
    if attachment is not None:
        result["boundaries"] = _boundary_rows(attachment)
        if spec.get("save_reports"):
            path = result_dir / f"reports-{spec['label']}.jsonl"
            attachment.tracker.write_jsonl(path)
            result["reports_file"] = str(path)
        attachment.detach()
    return result


def repin() -> dict[str, Any]:
    """1 GiB in 16 blocks of 64 MiB: fresh pin, cached re-pin, release, fresh pin again, H2D bandwidth."""
    import os

    from ddo_hooks.release.allocator import pinned_allocation

    block, count = 64 * 2**20, 16
    torch.zeros(1, device="cuda")  # lazy init, so that the release entry point works
    release = torch._C._host_emptyCache

    def pin() -> tuple[list[torch.Tensor], float]:
        t = time.perf_counter()
        tensors = [torch.empty(block, dtype=torch.uint8, pin_memory=True) for _ in range(count)]
        return tensors, time.perf_counter() - t

    figures: dict[str, Any] = {"conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "mode": pinned_allocation()}
    tensors, figures["fresh_s_per_gib"] = pin()
    del tensors
    tensors, figures["cached_s_per_gib"] = pin()
    target = torch.empty(block * count, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    t = time.perf_counter()
    for i, tensor in enumerate(tensors):
        target[i * block : (i + 1) * block].copy_(tensor, non_blocking=True)
    torch.cuda.synchronize()
    figures["h2d_gb_per_s"] = block * count / (time.perf_counter() - t) / 1e9
    del tensors
    t = time.perf_counter()
    release()
    figures["release_s_per_gib"] = time.perf_counter() - t
    _, figures["repin_s_per_gib"] = pin()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("arm", "repin"))
    parser.add_argument("--result", type=Path, required=True)
    parser.add_argument("--spec")
    args = parser.parse_args()
    result = run_arm(json.loads(args.spec), args.result.parent) if args.command == "arm" else repin()
    args.result.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
