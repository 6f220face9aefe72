"""The exceptions ddo_hooks raises.

One small hierarchy: every error is a :class:`DdoHooksError`; errors about a value the caller
passed are also :class:`ValueError`, errors about the state of the process are also
:class:`RuntimeError`. Messages name the offending argument, field, module or file and say
how to fix it.

Examples:
    >>> from ddo_hooks import release_pytorch_host_cache
    >>> from ddo_hooks.errors import DdoHooksError
    >>> try:
    ...     release_pytorch_host_cache(enabled=True, phase="after_call", device="cpu")
    ... except DdoHooksError as e:
    ...     print(type(e).__name__)
    InvalidArgumentError
"""

from __future__ import annotations

from typing import Any

__all__ = [
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


class DdoHooksError(Exception):
    """Base class of every error raised by ddo_hooks (``DDOError`` until 0.1: DDO is another package)."""


def __getattr__(name: str) -> type[DdoHooksError]:
    from ddo_hooks._moved import old_attribute  # the old names of this module (DDOError)

    found: type[DdoHooksError] = old_attribute(__name__, name)
    return found


class InvalidArgumentError(DdoHooksError, ValueError):
    """An argument passed to a public function is malformed (wrong type, range or label)."""


class PolicyError(DdoHooksError, ValueError):
    """A hook policy (a YAML file or a mapping) is invalid; the message names file, line and key.

    Attributes:
        problems: When the policy was checked whole, each problem's ``(line, column)`` and its line of
            the message (or a function that writes it), so that a caller can add its own in file order
            (``ddo-hooks validate-policy`` adds the action names no action has); else empty.
    """

    problems: tuple[tuple[tuple[int, int], Any], ...] = ()


class ReportError(DdoHooksError, ValueError):
    """A report is invalid (of either shape), or a file of reports could not be read."""


class ReportSinkError(DdoHooksError, RuntimeError):
    """Writing a report to the policy's ``report_sink`` failed; the message names the file and the fix.

    The original ``OSError`` is chained as ``__cause__``. The file is left as it is (never truncated:
    other processes may share it); after a write cut short, the next line, of whichever process shares
    the file, starts on a line of its own, and readers leave the cut line out with a warning.
    """


class BoundaryRefusedError(DdoHooksError, RuntimeError):
    """A release was requested where it is not allowed (while loading, denoising, beside a call or a release).

    Attributes:
        reason: A stable machine-readable code: ``"loading"``, ``"denoising"``,
            ``"release_in_progress"`` or ``"inference_in_progress"`` (see
            :data:`ddo_hooks.boundaries.REFUSAL_REASONS`); an action may raise it with a code of
            its own, which its refusal report keeps in the detail.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class HostCacheReleaseError(DdoHooksError, RuntimeError):
    """Synchronizing the device or releasing the host cache failed.

    The original exception is chained as ``__cause__``. A failed release is never reported
    as a successful one.
    """


class WeightsFileChangedError(DdoHooksError, RuntimeError):
    """A weights file that a pipeline's weights read, declared stable, was rewritten in place since.

    Raised where ddo_hooks would otherwise use the changed bytes (at the start of each pipeline call,
    before any component runs; before giving back pages, staging copies again, or copying them back at
    detach); the message names the component, the file and the fix.
    """


class DetachTimeoutError(DdoHooksError, TimeoutError):
    """:meth:`~ddo_hooks.Attachment.detach` waited its bound for a deferred boundary still running, which did not end.

    The attachment runs no boundary any more, but it is not detached yet: its hooks and the weights'
    state stay as the running boundary leaves them. Call ``detach()`` again once it ended.
    """
