"""Parsing the CUDA device argument, without touching CUDA (and without importing torch).

Examples:
    >>> parse_cuda_device("cuda:1"), parse_cuda_device("cuda"), parse_cuda_device(0)
    (1, None, 0)
    >>> parse_cuda_device("cpu")
    Traceback (most recent call last):
    ...
    ddo_hooks.errors.InvalidArgumentError: device='cpu' is not a CUDA device: ...
"""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING, Union

from ddo_hooks._diagnostics import show_repr
from ddo_hooks.errors import InvalidArgumentError

if TYPE_CHECKING:
    import torch

__all__ = ["ACCEPTED_DEVICE_FORMS", "DeviceLike", "parse_cuda_device"]

DeviceLike = Union[str, int, "torch.device"]
"""What a ``device`` argument accepts."""

ACCEPTED_DEVICE_FORMS = "'cuda', 'cuda:N', torch.device('cuda[:N]') or an int N >= 0"

_CUDA_RE = re.compile(r"cuda(?::([0-9]{1,10}))?")  # ten digits hold any index below the bound
_INDEX_BOUND = 2**31
"""Device indices are below this (torch keeps them in small ints; the device count decides the rest)."""


def parse_cuda_device(device: object, *, argument: str = "device") -> int | None:
    """Parse a CUDA device argument into an index (``None`` means the current device).

    Args:
        device: ``"cuda"``, ``"cuda:N"``, a ``torch.device`` of type cuda, or an int ``N >= 0``.
        argument: The argument's name, used in the error message.

    Returns:
        The device index, or ``None`` for the current CUDA device.

    Raises:
        InvalidArgumentError: Anything else (``"cpu"``, ``"cuda:-1"``, ``True``, garbage),
            with the argument's name and the accepted forms.
    """
    if isinstance(device, bool):
        raise InvalidArgumentError(f"{argument}={device!r} is not a device; use {ACCEPTED_DEVICE_FORMS}")
    if isinstance(device, int):
        if device < 0:
            raise InvalidArgumentError(f"{argument}={device!r}: a device index must be >= 0")
        if device >= _INDEX_BOUND:
            raise InvalidArgumentError(f"{argument}={show_repr(device)}: a device index must be below {_INDEX_BOUND}")
        return device
    torch = sys.modules.get("torch")  # a torch.device can only exist once torch is imported
    if torch is not None and isinstance(device, torch.device):
        if device.type != "cuda":
            raise InvalidArgumentError(
                f"{argument}={device!r} is not a CUDA device: the pinned host cache belongs to CUDA; "
                f"use {ACCEPTED_DEVICE_FORMS}"
            )
        return device.index
    if isinstance(device, str):
        text = device
        match = _CUDA_RE.fullmatch(text)
        if match and (match.group(1) is None or int(match.group(1)) < _INDEX_BOUND):
            return None if match.group(1) is None else int(match.group(1))
        kind = text.split(":", 1)[0]
        if kind in {"cpu", "mps", "xpu", "meta", "hip", "npu", "xla"}:
            raise InvalidArgumentError(
                f"{argument}={device!r} is not a CUDA device: the pinned host cache belongs to CUDA; "
                f"use {ACCEPTED_DEVICE_FORMS}"
            )
    shown = show_repr(device) if isinstance(device, str) else repr(device)  # a long string is cut
    raise InvalidArgumentError(f"{argument}={shown} is not a valid device; use {ACCEPTED_DEVICE_FORMS}")
