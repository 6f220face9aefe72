"""DDO's release core: ``release_pytorch_host_cache`` of ``diffusers-dynamic-offloader``, behind ``core: ddo``.

The built-in ``host_cache_release`` calls ddo_hooks' own core unless the policy says ``core: ddo``;
then it calls DDO's (:func:`release_with_ddo`) and records DDO's report as DDO wrote it, validated
against ddo_hooks' model of DDO 0.1.0rc2's release
(:class:`~ddo_hooks.reports.ddo.host.DDOHostCacheReleaseReport`). DDO's core can run only where
DDO is importable at that version and torch has ``torch._C._accelerator_emptyHostCache`` (torch >=
2.12; without it DDO calls every release ``unsupported``): :func:`core_problem` says why not,
and ``attach`` refuses such a policy with that reason.

DDO is imported when attach checks it (:func:`load_ddo`, the seam tests replace) and when a
release runs, never when this module is imported; ddo_hooks does not depend on it.

Examples:
    >>> problem = core_problem()
    >>> problem is None or "core: ddo" not in problem  # a sentence about this process, or None
    True
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType

from pydantic import ValidationError

from ddo_hooks.errors import HostCacheReleaseError, ReportError
from ddo_hooks.reports.ddo.base import DDO_VERSION, describe_ddo_errors
from ddo_hooks.reports.ddo.host import DDOHostCacheReleaseReport

__all__ = [
    "DISTRIBUTION",
    "IMPORT_NAME",
    "INSTALL",
    "TESTED_VERSION",
    "LoadedDDO",
    "core_problem",
    "load_ddo",
    "release_with_ddo",
]

DISTRIBUTION = "diffusers-dynamic-offloader"
"""DDO's distribution name (what pip installs and ``importlib.metadata.version`` takes)."""

IMPORT_NAME = "diffusers_dynamic_offloader"
"""DDO's package, as imported."""

TESTED_VERSION = DDO_VERSION
"""The DDO release whose core ddo_hooks calls, and whose report shape its models follow: 0.1.0rc2."""

INSTALL = f"pip install '{DISTRIBUTION}=={TESTED_VERSION}' (the ddo extra: pip install 'ddo-hooks[ddo]')"
"""The command that installs the DDO ddo_hooks was tested with."""


@dataclass(frozen=True)
class LoadedDDO:
    """DDO as this process has it.

    Attributes:
        module: The imported ``diffusers_dynamic_offloader`` package.
        version: Its installed version (``importlib.metadata``), or ``"unknown"`` when no
            distribution metadata is found.
    """

    module: ModuleType
    version: str


def load_ddo() -> LoadedDDO:
    """Import DDO and read its version (what :func:`core_problem` checks).

    Raises:
        ImportError: DDO is not installed (or one of its own imports failed).
        Exception: Whatever importing DDO raised otherwise (a broken install).
    """
    module = importlib.import_module(IMPORT_NAME)
    try:
        found = version(DISTRIBUTION)
    except PackageNotFoundError:
        found = str(getattr(module, "__version__", "unknown"))
    return LoadedDDO(module, found)


def core_problem() -> str | None:
    """Why DDO's release core cannot run in this process, as a sentence with the fix; ``None`` when it can.

    Checked in order: DDO importable, at :data:`TESTED_VERSION`, with ``release_pytorch_host_cache``;
    then torch with ``torch._C._accelerator_emptyHostCache``, the only entry point DDO calls.
    """
    try:
        ddo = load_ddo()
    except ImportError as e:
        return f"{DISTRIBUTION} is not importable here ({e}); install it: {INSTALL}"
    except Exception as e:
        return f"importing {DISTRIBUTION} failed ({type(e).__name__}: {e}); reinstall it: {INSTALL}"
    if ddo.version != TESTED_VERSION:
        return (
            f"{DISTRIBUTION} {ddo.version} is installed, and ddo_hooks calls and validates the release of "
            f"{TESTED_VERSION} only (the version it was tested with); install that one: {INSTALL}"
        )
    if not callable(getattr(ddo.module, "release_pytorch_host_cache", None)):
        return f"{DISTRIBUTION} {ddo.version} has no release_pytorch_host_cache; reinstall it: {INSTALL}"
    import torch

    from ddo_hooks._compat.torch import accelerator_empty_host_cache

    if not callable(accelerator_empty_host_cache()):
        return (
            f"torch {torch.__version__} has no torch._C._accelerator_emptyHostCache (torch >= 2.12), the only "
            "entry point DDO's release calls, so every release would be 'unsupported'; upgrade torch to 2.12 "
            "or later (ddo_hooks' own core also uses torch._C._host_emptyCache, from torch 2.5)"
        )
    return None


def release_with_ddo(*, phase: str, device: str) -> DDOHostCacheReleaseReport:
    """Release the pinned host cache with DDO's core, and return its report validated.

    Calls ``release_pytorch_host_cache(enabled=True, phase=phase, device=device)`` and validates
    ``metrics.as_dict()`` against the model of DDO 0.1.0rc2's release. DDO's statuses other than
    ``released`` are its no-ops (``cuda_not_initialized``: no CUDA tensor yet in this process;
    ``unsupported``: no ``_accelerator_emptyHostCache``), reported as DDO wrote them.

    Args:
        phase: The boundary, DDO's ``phase`` label.
        device: The CUDA device whose transfers DDO's release waits for (``cuda`` or ``cuda:N``).

    Returns:
        DDO's report.

    Raises:
        HostCacheReleaseError: DDO's release raised (synchronizing the device or releasing the
            cache failed): a failed release is never reported as one that ran. The original
            exception is chained.
        ReportError: DDO returned a report that is not of DDO 0.1.0rc2's shape.
    """
    release = importlib.import_module(IMPORT_NAME).release_pytorch_host_cache  # attach checked it: no version read
    try:
        metrics = release(enabled=True, phase=phase, device=device)
    except Exception as e:
        raise HostCacheReleaseError(
            f"DDO's release_pytorch_host_cache at {phase} on {device} raised {type(e).__name__}: {e}; the release "
            "failed (core: ddo)"
        ) from e
    try:
        return DDOHostCacheReleaseReport.model_validate(metrics.as_dict())
    except (AttributeError, ValidationError) as e:
        problem = describe_ddo_errors(e) if isinstance(e, ValidationError) else str(e)
        raise ReportError(
            f"DDO's release_pytorch_host_cache at {phase} returned a report that is not DDO {TESTED_VERSION}'s "
            f"release report: {problem}"
        ) from e
