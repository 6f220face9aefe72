"""ddo_hooks: each weight of an offloaded diffusers pipeline once in host memory, pinned in place, with reports.

The names below are what users use; each is imported when first used, so ``import ddo_hooks``
costs almost nothing and imports neither diffusers nor transformers. The layers behind them are
sub-packages (``release``, ``reports``, ``streaming``, ``actions``, ``policy``, ``hooks``, ``offload``, ``cli``,
``testing``)
on the foundation modules that every layer may import: ``errors`` (the exceptions), ``boundaries``
(the boundary names), ``sizes`` (byte sizes for people) and ``ledger`` (what was done to each object, in one
weak table); see the architecture page of the docs.

Examples:
    >>> import ddo_hooks
    >>> ddo_hooks.release_pytorch_host_cache(phase="after_call").release.status
    'noop'
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_moved = importlib.import_module("ddo_hooks._moved")

_moved.install()  # the old module names, for one release

__version__ = "0.1.0"

# Where each public name lives (a test keeps this, __all__ and the imports below equal).
_EXPORTS: dict[str, str] = {
    # attach a policy to a pipeline
    "Attachment": "ddo_hooks.hooks.attachment",
    "HookPolicy": "ddo_hooks.policy.model",
    "attach": "ddo_hooks.hooks.attachment",
    # the release core, and pinned copies at their exact size
    "release_pytorch_host_cache": "ddo_hooks.release.host_cache",
    "repack_pinned_copies": "ddo_hooks.release.repack",
    # pluggable boundary actions
    "BoundaryContext": "ddo_hooks.actions.contract",
    "register_action": "ddo_hooks.actions.registry",
    "unregister_action": "ddo_hooks.actions.registry",
    # reports and their tracker
    "ActionReport": "ddo_hooks.reports.boundary",
    "AuxiliarySourceDetachReport": "ddo_hooks.reports.auxiliary_sources",
    "BoundaryRefusalReport": "ddo_hooks.reports.boundary",
    "DdoHooksReport": "ddo_hooks.reports.parse",
    "HostCacheReleaseReport": "ddo_hooks.reports.host_cache",
    "MetricsTracker": "ddo_hooks.reports.tracker",
    "PinnedCopyRepackReport": "ddo_hooks.reports.repack",
    "parse_report": "ddo_hooks.reports.parse",
    # errors
    "BoundaryRefusedError": "ddo_hooks.errors",
    "DdoHooksError": "ddo_hooks.errors",
    "DetachTimeoutError": "ddo_hooks.errors",
    "HostCacheReleaseError": "ddo_hooks.errors",
    "InvalidArgumentError": "ddo_hooks.errors",
    "PolicyError": "ddo_hooks.errors",
    "ReportError": "ddo_hooks.errors",
    "ReportSinkError": "ddo_hooks.errors",
    "WeightsFileChangedError": "ddo_hooks.errors",
}

__all__ = [
    # attach a policy to a pipeline
    "Attachment",
    "HookPolicy",
    "attach",
    # the release core, and pinned copies at their exact size
    "release_pytorch_host_cache",
    "repack_pinned_copies",
    # pluggable boundary actions
    "BoundaryContext",
    "register_action",
    "unregister_action",
    # reports and their tracker
    "ActionReport",
    "AuxiliarySourceDetachReport",
    "BoundaryRefusalReport",
    "DdoHooksReport",
    "HostCacheReleaseReport",
    "MetricsTracker",
    "PinnedCopyRepackReport",
    "parse_report",
    # errors
    "BoundaryRefusedError",
    "DdoHooksError",
    "DetachTimeoutError",
    "HostCacheReleaseError",
    "InvalidArgumentError",
    "PolicyError",
    "ReportError",
    "ReportSinkError",
    "WeightsFileChangedError",
]

if TYPE_CHECKING:  # what the lazy names are, for type checkers and IDEs
    from ddo_hooks.actions.contract import BoundaryContext
    from ddo_hooks.actions.registry import register_action, unregister_action
    from ddo_hooks.errors import (
        BoundaryRefusedError,
        DdoHooksError,
        DetachTimeoutError,
        HostCacheReleaseError,
        InvalidArgumentError,
        PolicyError,
        ReportError,
        ReportSinkError,
        WeightsFileChangedError,
    )
    from ddo_hooks.hooks.attachment import Attachment, attach
    from ddo_hooks.policy.model import HookPolicy
    from ddo_hooks.release.host_cache import release_pytorch_host_cache
    from ddo_hooks.release.repack import repack_pinned_copies
    from ddo_hooks.reports.auxiliary_sources import AuxiliarySourceDetachReport
    from ddo_hooks.reports.boundary import ActionReport, BoundaryRefusalReport
    from ddo_hooks.reports.host_cache import HostCacheReleaseReport
    from ddo_hooks.reports.parse import DdoHooksReport, parse_report
    from ddo_hooks.reports.repack import PinnedCopyRepackReport
    from ddo_hooks.reports.tracker import MetricsTracker


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        return _moved.old_attribute("ddo_hooks", name)  # an old name warns (the table: ddo_hooks._moved.RENAMED)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*__all__, "__version__"])
