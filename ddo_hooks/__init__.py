"""ddo_hooks: release PyTorch's pinned host cache at quiet boundaries of diffusers pipeline calls.

Example:
    >>> import ddo_hooks
    >>> ddo_hooks.release_pytorch_host_cache(phase="after_call").release.status
    'noop'
"""

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
from ddo_hooks.reports import (
    ActionReport,
    BoundaryRefusalReport,
    DDOReport,
    HostCacheReleaseReport,
    parse_report,
)

__version__ = "0.1.0"

__all__ = [
    # the release core
    "release_pytorch_host_cache",
    # reports and their tracker
    "ActionReport",
    "BoundaryRefusalReport",
    "DDOReport",
    "HostCacheReleaseReport",
    "MetricsTracker",
    "parse_report",
    # errors
    "BoundaryRefusedError",
    "DDOError",
    "HostCacheReleaseError",
    "InvalidArgumentError",
    "PolicyError",
    "ReportError",
]
