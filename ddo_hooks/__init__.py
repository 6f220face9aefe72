"""ddo_hooks: release PyTorch's pinned host cache at quiet boundaries of diffusers pipeline calls.

Examples:
    >>> import ddo_hooks
    >>> ddo_hooks.release_pytorch_host_cache(phase="after_call").release.status
    'noop'
"""

from ddo_hooks import guard
from ddo_hooks.actions import BoundaryContext, register_action, unregister_action
from ddo_hooks.attachment import Attachment, attach
from ddo_hooks.auxiliary_reports import AuxiliarySourceDetachReport
from ddo_hooks.errors import (
    BoundaryRefusedError,
    DDOError,
    HostCacheReleaseError,
    InvalidArgumentError,
    PolicyError,
    ReportError,
)
from ddo_hooks.host_cache import release_pytorch_host_cache
from ddo_hooks.metrics import MetricsTracker
from ddo_hooks.offload import DynamicOffloadApplyResult, OffloadedComponent, apply_dynamic_offload
from ddo_hooks.policy import HookPolicy
from ddo_hooks.reports import (
    ActionReport,
    BoundaryRefusalReport,
    DDOReport,
    HostCacheReleaseReport,
    parse_report,
)
from ddo_hooks.source_adapters import (
    IntervalObservingAdapter,
    OffloadRuntime,
    PayloadInterval,
    SourceObservationAdapter,
    available_runtimes,
    register_offload_runtime,
    unregister_offload_runtime,
)

__version__ = "0.1.0"

__all__ = [
    # attach a policy to a pipeline
    "Attachment",
    "HookPolicy",
    "attach",
    # the release core and the process-wide guard
    "guard",
    "release_pytorch_host_cache",
    # pluggable boundary actions
    "BoundaryContext",
    "register_action",
    "unregister_action",
    # reports and their tracker
    "ActionReport",
    "BoundaryRefusalReport",
    "DDOReport",
    "HostCacheReleaseReport",
    "MetricsTracker",
    "parse_report",
    # offload runtimes and bounded auxiliary CPU source detachment
    "AuxiliarySourceDetachReport",
    "DynamicOffloadApplyResult",
    "IntervalObservingAdapter",
    "OffloadRuntime",
    "OffloadedComponent",
    "PayloadInterval",
    "SourceObservationAdapter",
    "apply_dynamic_offload",
    "available_runtimes",
    "register_offload_runtime",
    "unregister_offload_runtime",
    # errors
    "BoundaryRefusedError",
    "DDOError",
    "HostCacheReleaseError",
    "InvalidArgumentError",
    "PolicyError",
    "ReportError",
]
