"""The per-arm worker of ``bench_done_components.py`` (no ``bench_`` prefix: not run on its own).

* ``arm --spec JSON --result R.json``: load the saved pipeline (``floor_workload.py``'s loader: leaf-level group
  offloading with streams, ``record_stream=False``), apply the arm, make ``calls`` plain ``pipe(prompt=...)`` calls
  back to back, read which memory the process holds at rest after each, then once more after ``idle_s`` of idle
  time. Arms: ``nothing``; ``delete`` (after the first call the user encodes the prompt, deletes the text
  encoders and empties the caches; the later calls pass those embeddings: one prompt only); ``preset:<name>``
  (ddo_hooks attached; ``<name>+stable`` with ``stable_files: true``); ``diffusers-mm`` (``managed(pipe,
  strategy="group_offload", unload_text_encoders=True)`` instead of the loader's offloading; a call that raises
  is recorded with its error and ends the arm).
* ``pair --spec JSON --result R.json``: two copies of the pipeline in one process, one with nothing attached and
  one with the preset, their calls interleaved (ABBA) in bursts of ``block`` calls back to back: call times and
  digests, for the steady-state call time. While one copy runs its burst the other is idle, long enough for
  ``lowest-latency`` to give back: the first call of a burst follows an idle time, the others are steady.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import floor_workload as floor
import pinned_workload as workload
import torch


def _mm(spec: dict[str, Any]) -> Any:
    from diffusers import FluxPipeline, StableDiffusionPipeline
    from diffusers_mm import managed

    cls = FluxPipeline if spec["family"] == "flux" else StableDiffusionPipeline
    pipe = cls.from_pretrained(spec["weights_dir"], dtype=torch.bfloat16)
    pipe.set_progress_bar_config(disable=True)
    return managed(pipe, strategy="group_offload", device="cuda", group_offload_use_stream=True,
                   group_offload_low_cpu_mem=spec["lcmu"], unload_text_encoders=True)  # fmt: skip


def _done_reports(attachment: Any) -> list[dict[str, Any]]:
    """Each ``done_components_release`` report, with what it gave back and what faults cost since the previous one."""
    kept = []
    for report in attachment.reports:
        if report.route == "done_components_release":
            body = report.release
            since = body.faults_since_previous
            kept.append({
                "boundary": body.boundary, "status": body.status, "released_bytes": body.released_bytes,
                "cgroup_released_bytes": body.cgroup_released_bytes,
                "seconds": body.elapsed_seconds, "left": {c.component: c.reason for c in body.components if c.reason},
                "faults": None if since is None else since.model_dump(mode="json"),
            })  # fmt: skip
    return kept


def _delete_encoders(spec: dict[str, Any], pipe: Any) -> dict[str, Any]:
    """What a user does by hand: encode the prompt once, delete the text encoders, empty the caches."""
    embeds = floor.delete_encoders(spec, pipe)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch._C._host_emptyCache()
    return embeds


def run_arm(spec: dict[str, Any]) -> dict[str, Any]:
    """One arm: its plain calls back to back, which memory each left at rest, and the memory once idle."""
    workload._quiet()
    arm = spec["arm"]
    pipe = _mm(spec) if arm == "diffusers-mm" else floor.load(spec)
    attachment = floor.attach_preset(pipe, arm.split(":", 1)[1], True) if arm.startswith("preset:") else None
    result: dict[str, Any] = {"spec": spec, "attached": floor.memory(), "calls": []}
    embeds: dict[str, Any] = {}
    for index in range(spec["calls"]):
        kwargs = floor.call_kwargs(spec, index)
        if embeds:  # "delete": the encoders are gone, so the calls pass the first call's prompt embeddings
            kwargs.update(prompt=None, **embeds)
        try:
            seconds, output = floor.timed_call(pipe, kwargs)
        except Exception as e:  # diffusers-mm cannot make a second call of a FluxPipeline
            result["error"] = {"call": index + 1, "error": f"{type(e).__name__}: {e}"[:400]}
            break
        if arm == "delete" and index == 0:
            embeds = _delete_encoders(spec, pipe)
        result["calls"].append({"seconds": seconds, "digest": output, "rest": floor.memory()})
    time.sleep(spec["idle_s"])  # lowest-latency gives back once the pipeline has been idle for 2 s
    result["idle"] = floor.memory()
    if attachment is not None:
        result["done_reports"] = _done_reports(attachment)
        attachment.detach()
    return result


def run_pair(spec: dict[str, Any]) -> dict[str, Any]:
    """``nothing`` against the preset in one process, calls interleaved (ABBA): seconds and digests of each."""
    workload._quiet()
    pipes = {"nothing": floor.load(spec), "preset": floor.load(spec)}
    attachment = floor.attach_preset(pipes["preset"], spec["preset"], True)
    calls: dict[str, list[dict[str, Any]]] = {name: [] for name in pipes}
    for rep in range(spec["reps"]):
        for name in ("nothing", "preset") if rep % 2 == 0 else ("preset", "nothing"):
            for at in range(spec.get("block", 1)):  # a burst: the first call follows the other copy's burst
                seconds, output = floor.timed_call(pipes[name], floor.call_kwargs(spec, rep))
                calls[name].append({"rep": rep, "at": at, "seconds": seconds, "digest": output})
    result = {"spec": spec, "calls": calls, "done_reports": _done_reports(attachment)}
    attachment.detach()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("arm", "pair"))
    parser.add_argument("--result", type=Path, required=True)
    parser.add_argument("--spec", required=True, help="the settings, as JSON")
    args = parser.parse_args()
    found = (run_arm if args.command == "arm" else run_pair)(json.loads(args.spec))
    args.result.write_text(json.dumps(found))


if __name__ == "__main__":
    main()
