"""DDO's real report payloads, made by calling ``diffusers-dynamic-offloader``'s own functions on the CPU.

``scripts/ddo_corpus.py`` writes them into ``tests/data/ddo/`` (the checked-in corpus);
``tests/test_ddo_reports.py`` calls them again where DDO is importable and checks that DDO still
writes the shapes the corpus holds. Each payload is what ``metrics.as_dict()`` returns, through
JSON (a tuple becomes a list). Nothing here needs a GPU: every CUDA-side status is DDO's answer
on a machine where CUDA is not initialized.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).resolve().parents[1] / "data" / "ddo"
"""The checked-in corpus of DDO payloads."""

DISTRIBUTION = "diffusers-dynamic-offloader"
"""DDO's distribution name (what ``importlib.metadata.version`` takes)."""

HANDWRITTEN = ".handwritten-from-source"
"""What the name of a payload written by hand from DDO's source (not produced by DDO here) holds."""


def ddo_version() -> str | None:
    """The installed DDO's version, or ``None`` when it is not importable."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        __import__("diffusers_dynamic_offloader")
        return version(DISTRIBUTION)
    except (ImportError, PackageNotFoundError):
        return None


class _FailingRegistry:
    """A loader registry whose lookup fails: DDO's census counts the tensor as an inspection error."""

    def lookup(self, tensor: Any) -> None:
        raise RuntimeError("provenance lookup failed")


def _sdnq_linear() -> Any:
    import torch

    class SDNQLinear(torch.nn.Linear):
        """Looks like an SDNQ-quantized layer to DDO's duck-typed check (``forward_func``, ``sdnq_dequantizer``)."""

        sdnq_dequantizer = None

        def forward_func(self, x: Any) -> Any:
            return self.forward(x)

    return SDNQLinear(4, 4)


def _makers() -> dict[str, Callable[[], Any]]:
    import diffusers_dynamic_offloader as ddo
    import torch
    from diffusers_dynamic_offloader.auxiliary_sources import detach_auxiliary_cpu_sources

    torch.manual_seed(0)

    def partial_census() -> Any:
        module = torch.nn.Linear(4, 4)
        module._ddo_safetensor_slices = _FailingRegistry()  # type: ignore[assignment]
        return ddo.inspect_host_memory(module, phase="after_text_encoder", max_storage_samples=1)

    def group(**options: Any) -> Any:
        module = options.pop("module", None) or torch.nn.Linear(4, 4)
        timer = options.pop("timer", False)
        result = ddo.enable_offload(
            module, route="diffusers_group_offload", apply_hook=False, execution_device="cpu", use_environment=False,
            **options,
        )  # fmt: skip
        return result.metrics_snapshot(execution_timing=result.execution_timer(enabled=False) if timer else None)

    return {
        "pytorch_host_cache_release.disabled": lambda: ddo.release_pytorch_host_cache(
            enabled=False, phase="before_transformer"
        ),
        "pytorch_host_cache_release.cuda_not_initialized": lambda: ddo.release_pytorch_host_cache(
            enabled=True, phase="before_transformer", device="cuda:0"
        ),
        "host_memory_observation.observed": lambda: ddo.inspect_host_memory(phase="before_transformer"),
        "host_memory_observation.observed-module": lambda: ddo.inspect_host_memory(
            torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4)), phase="after_call", max_storage_samples=2
        ),
        "host_memory_observation.partial": partial_census,
        "vmm_auxiliary_source_detachment.disabled": lambda: detach_auxiliary_cpu_sources(None),
        "native_vmm_idle_cache_release.disabled": lambda: ddo.release_native_vmm_idle_cache(phase="before_vae"),
        "native_vmm_idle_cache_release.cuda_not_initialized": lambda: ddo.release_native_vmm_idle_cache(
            enabled=True, phase="before_vae", clear_cublas_workspaces=True
        ),
        "diffusers_group_offload.leaf_level": lambda: group(),
        "diffusers_group_offload.block_level-sdnq-timer": lambda: group(
            module=torch.nn.Sequential(_sdnq_linear()),
            offload_type="block_level",
            num_blocks_per_group=2,
            use_stream=False,
            timer=True,
        ),
    }


def real_payloads() -> dict[str, dict[str, Any]]:
    """Every payload DDO produces on this CPU machine, by corpus name (``<route>.<case>``), through JSON."""
    return {name: json.loads(json.dumps(make().as_dict())) for name, make in _makers().items()}


def corpus_files() -> list[Path]:
    """The checked-in payload files, sorted."""
    return sorted(CORPUS.glob("*.json"))


def corpus_name(path: Path) -> str:
    """``<route>.<case>`` of a corpus file: its name without the version, the hand-written mark and ``.json``."""
    return path.name.removesuffix(".json").removesuffix(HANDWRITTEN).split("-", 2)[2]


def key_shape(document: Any) -> Any:
    """A document's keys and value types, values left out (DDO's timings and RSS differ run to run)."""
    if isinstance(document, dict):
        return {key: key_shape(value) for key, value in document.items()}
    if isinstance(document, list):
        return [key_shape(value) for value in document]
    number = isinstance(document, (int, float)) and not isinstance(document, bool)
    return "number" if number else type(document).__name__
