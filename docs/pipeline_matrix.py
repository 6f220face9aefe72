"""The support matrix of docs/pipeline-classes.md: every pipeline class of the installed diffusers, with a verdict.

The rows come from ``ddo_hooks/testing/pipeline_census.json`` (``scripts/pipeline_census.py`` reads
each class's ``__call__``; ``tests/test_pipeline_matrix.py`` fails when the installed diffusers
exports a class the census lacks), the verified cells from the tests named here
(``tests/test_pipeline_matrix.py`` checks that each exists), and the known limits from the census
by the phase machine's rules (docs/concepts.md). Each verdict says where it comes from: *run*, a
tiny real pipeline of the class is built and called attached in the CPU tests named here, or
*inferred*, from the census alone: expected to work because the class gives the same signals as
run classes, or listed with what it cannot give.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ddo_hooks.testing.structural import CLASS_NAMES, STAGED

__all__ = ["CENSUS", "CPU_VERIFIED", "EXPECTED", "GPU_VERIFIED", "INFERRED", "RUN", "limits", "matrix_markdown", "rows"]

ROOT = Path(__file__).resolve().parent.parent
CENSUS = ROOT / "ddo_hooks" / "testing" / "pipeline_census.json"

_BOUNDARIES = "tests/test_attach_boundaries.py::test_each_boundary_fires_once_per_call_in_order"
_STRUCTURAL = (
    "tests/test_structural_pipelines.py::test_each_call_gives_each_boundary_once_in_order_with_the_same_output"
)
_TIMELINES = "tests/test_boundary_timelines.py"

CPU_VERIFIED: dict[str, list[str]] = {
    "FluxPipeline": [f"{_BOUNDARIES}[flux]"],
    "StableDiffusionPipeline": [f"{_BOUNDARIES}[sd]"],
    "WanPipeline": [f"{_BOUNDARIES}[wan]"],
    "DDPMPipeline": ["tests/test_actions.py::test_an_iterated_progress_bar_loop_fires_the_boundaries"],
    "PNDMPipeline": [
        "tests/test_actions.py::test_a_pipeline_without_maybe_free_model_hooks_still_ends_its_calls_with_after_call"
    ],
}
"""Pipeline class: the CPU tests that call it attached and check each boundary of each call."""
for _name, _cls in CLASS_NAMES.items():
    CPU_VERIFIED.setdefault(_cls, []).append(f"{_STRUCTURAL}[{_name}]")
for _name in STAGED:  # again under group offloading
    CPU_VERIFIED[CLASS_NAMES[_name]].append(
        f"{_TIMELINES}::test_under_group_offloading_the_boundaries_run_where_they_do_without_it[{_name}]"
    )
CPU_VERIFIED["Cosmos2_5_TransferPipeline"].append(
    f"{_TIMELINES}::test_a_video_of_two_chunks_under_one_progress_bar_gets_before_vae_at_the_last_chunks_decode"
)
CPU_VERIFIED["HeliosPipeline"].append(
    f"{_TIMELINES}::test_a_video_of_two_chunks_with_a_bar_each_gets_before_vae_at_the_first_chunks_decode"
)
CPU_VERIFIED["VisualClozePipeline"].append(
    f"{_TIMELINES}::test_a_call_that_runs_only_its_first_stage_reports_both_boundaries_as_not_reached"
)

_HOOKS_GPU = "tests/gpu/test_hooks_gpu.py::test_boundaries_release_every_free_block_under_each_cuda_offload_mode"
_STRUCTURAL_GPU = "tests/gpu/test_structural_gpu.py::test_structural_pipelines_under_group_offloading_with_streams"
_FLUX_MODES = (
    "group-block-stream",
    "group-block-stream-lowmem",
    "group-leaf-stream",
    "group-leaf-stream-lowmem",
    "model-cpu-offload",
    "sequential-cpu-offload",
)
GPU_VERIFIED: dict[str, dict[str, str]] = {
    "FluxPipeline": {mode: f"{_HOOKS_GPU}[flux-{mode}]" for mode in _FLUX_MODES},
    "StableDiffusionPipeline": {"group-block-stream-lowmem": f"{_HOOKS_GPU}[sd-group-block-stream-lowmem]"},
    "WanPipeline": {"group-block-stream-lowmem": f"{_HOOKS_GPU}[wan-group-block-stream-lowmem]"},
}
"""Pipeline class: offload mode -> the GPU test (H200) that runs it attached in that mode."""
GPU_STRUCTURAL_RUN = (
    "kandinsky21_combined",
    "kandinsky22_combined",
    "visualcloze",
    "stable_unclip",
    "skyreels_v2_df_v2v",
    "animatediff_freeinit",
    "sd_image_variation",
    "audioldm2",
    "musicldm",
    "paint_by_example",
    "ldm_text2img",
    "kandinsky3",
    "anyflow_far",
    "wan22",
)
"""The structural pipelines the GPU machine ran (``scripts/gpu_session.sh structural``, 2026-11-30): the
ones added since have not run there yet, and the page's GPU list does not claim them."""
for _name in GPU_STRUCTURAL_RUN:
    GPU_VERIFIED.setdefault(CLASS_NAMES[_name], {})[f"group-leaf-stream-lowmem ({_name})"] = (
        f"{_STRUCTURAL_GPU}[{_name}]"
    )

OFFLOAD_LIMITS = {
    "PaintByExamplePipeline": "group offloading: keep `image_encoder` on the GPU (`exclude_modules`); "
    "the pipeline uses its `uncond_vector` after the hook offloaded it (a device mismatch on the H200)",
}
"""Limits found on the GPU machine that are diffusers' own, not the boundaries'."""
CALL_LIMITS = {
    "VisualClozePipeline": "with `upsampling_strength` at 0 it skips the upsampling pipeline it holds last: "
    "`before_transformer` and `before_vae` are then `not_reached` (the boundaries wait for the last stage)",
}
"""Limits of a run class that its census cannot show (tests/test_boundary_timelines.py runs each)."""

_VAE_SHAPED = re.compile(r"^(vae|movq|vqvae|audio_vae|.*_vae)$")  # AutoencoderKL/VQModel-style: decoder submodule


def limits(entry: dict[str, Any]) -> list[str]:
    """What a class's calls cannot give, by the phase machine's rules, from its census entry."""
    from ddo_hooks.hooks.signals import DENOISER_PATTERN

    call = entry["call"]
    if call is None:
        return ["no `__call__`: nothing to follow (call its sub-pipelines instead)"]
    found: list[str] = []
    holds = entry["sub_pipelines"] or entry["component_pipelines"] or entry["sub_pipelines_built_in_init"]
    loop = call["progress_bar_calls"] > 0 or call["raw_tqdm"] or holds
    if not loop and not any(DENOISER_PATTERN.match(name) for name in entry["denoisers"]):
        found.append("`before_transformer` not reached: no denoising loop (no progress bar, no known denoiser)")
    if call["decode_inside_steps"]:
        found.append("`before_vae` not reached: it decodes inside its loop's steps")
    elif call["decode_inside_loop"] and call["progress_bar_inside_outer_loop"]:
        found.append(
            "a call of several chunks (a progress bar each, each chunk decoded inside it) gets `before_vae` at the "
            "first chunk's decode, after that chunk's last step: the later chunks denoise after it"
        )
    elif not call["decode_calls"] and not holds:
        found.append("`before_vae` not reached: its `__call__` decodes nothing (pixel space, a prior, or latents out)")
    odd = [name for name in entry["decoders"] if not _VAE_SHAPED.match(name) and name != "vocoder"]
    if odd and not call["decode_inside_loop"]:
        names = ", ".join(f"`{name}`" for name in odd)
        found.append(f"decoder {names} is not VAE-shaped: `before_vae` may not be seen (not built here)")
    return found


def rows() -> list[dict[str, str]]:
    """One row per pipeline class of the census: class, verdict, where it comes from, offload modes (GPU), limits."""
    census = json.loads(CENSUS.read_text(encoding="utf-8"))
    table = []
    for entry in census["pipelines"]:
        name = entry["class"]
        found = limits(entry) + [known[name] for known in (CALL_LIMITS, OFFLOAD_LIMITS) if name in known]
        run = name in CPU_VERIFIED
        table.append(
            {
                "class": name,
                "boundaries": "verified" if run else EXPECTED if not found else "see limits",
                "source": RUN if run else INFERRED,
                "gpu": ", ".join(GPU_VERIFIED.get(name, {})) or "-",
                "limits": "; ".join(found) or "-",
            }
        )
    for skipped in census["skipped"]:
        table.append(
            {
                "class": skipped["class"],
                "boundaries": "not checked",
                "source": "-",
                "gpu": "-",
                "limits": skipped["reason"],
            }
        )
    return sorted(table, key=lambda row: row["class"])


RUN = "run"
"""Where a verdict comes from: a tiny real pipeline of the class is called attached (:data:`CPU_VERIFIED`)."""
INFERRED = "inferred"
"""Where a verdict comes from: the census of the class's ``__call__``, by the phase machine's rules; not built here."""
EXPECTED = "expected"
"""The inferred verdict of a class that gives the same signals as run classes and has no known limit."""


def matrix_markdown() -> str:
    """The matrix as Markdown: the counts, a row per class with something to say, the GPU runs, the expected classes.

    A class whose verdict is only :data:`EXPECTED` (inferred, no GPU run, no known limit) is listed
    by name below the table, instead of in a row of its own that repeats the verdict. The offload
    modes run on the GPU are a list below the table, by class: as a column they made the table
    wider than the page.
    """
    census = json.loads(CENSUS.read_text(encoding="utf-8"))
    table = rows()
    plain = [r for r in table if r["boundaries"] == EXPECTED and r["gpu"] == "-" and r["limits"] == "-"]
    shown = [r for r in table if r not in plain]
    run = [r for r in table if r["source"] == RUN]
    inferred = [r for r in table if r["source"] == INFERRED]
    skipped = [r for r in table if r["source"] == "-"]
    expected = sum(r["boundaries"] == EXPECTED for r in inferred)
    head = (
        f"{len(table)} pipeline classes of diffusers {census['diffusers_version']}, by where their verdict comes "
        f"from:\n\n"
        f"- **{len(run)} run**: a tiny real pipeline of the class is built and called attached in the CPU tests, "
        f"and where each boundary ran is checked ({sum(r['limits'] != '-' for r in run)} of them with a known "
        "limit);\n"
        f"- **{len(inferred)} inferred** from the census of the class's `__call__`, not built here: {expected} "
        f"expected to work (the same signals as run classes), {len(inferred) - expected} with a known limit;\n"
        f"- **{len(skipped)} not checked**: an optional dependency is missing.\n\n"
        "| Pipeline class | Verdict | From | Known limits |\n|---|---|---|---|\n"
    )
    body = "\n".join(f"| `{r['class']}` | {r['boundaries']} | {r['source']} | {r['limits']} |" for r in shown)
    gpu = "\n".join(f"- `{r['class']}`: {r['gpu']}" for r in table if r["gpu"] != "-")
    gpu = f"\n\n**Offload modes verified on the GPU** (the H200, `tests/gpu/`), by class:\n\n{gpu}"
    names = ", ".join(r["class"] for r in plain)
    listed = (
        f"\n\n**Inferred, expected from the same signals as run classes ({len(plain)}; not built here):** {names}.\n"
    )
    return head + body + gpu + listed
