"""Where a recorded report came from: the envelope of a record (run, call, boundary, time, process, rank).

A report stays exactly as its schema defines it. The *record* that carries it (in
the tracker, the JSON Lines sink, ``attachment.reports``' tracker and saved runs) adds an
envelope: one run id per attachment, the call index within the run, the boundary, a UTC
timestamp, the process id, the host name, and the rank and world size when the process is one
of several (``torch.distributed`` initialized, or ``RANK``/``LOCAL_RANK``/``WORLD_SIZE`` set; a
launcher variable that is not usable leaves both out and is warned about once, see :func:`process_rank`).
Files written before the envelope existed still load: their records have none.

Examples:
    >>> envelope = RecordEnvelope.now(run_id=new_run_id(), call_index=2, boundary="after_call")
    >>> envelope.call_index, envelope.boundary, envelope.timestamp.tzinfo is not None
    (2, 'after_call', True)
    >>> ReportRecord(component="host_cache_after_call", report=None,
    ...              envelope=envelope)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pydantic_core._pydantic_core.ValidationError: ...
"""

from __future__ import annotations

import functools
import logging
import os
import re
import socket
import sys
import uuid
from datetime import datetime, timezone
from typing import Annotated, Any, Final, Literal

from pydantic import AwareDatetime, Field, StrictInt

from ddo_hooks._diagnostics import show_repr
from ddo_hooks.boundaries import BOUNDARIES
from ddo_hooks.errors import InvalidArgumentError
from ddo_hooks.reports.base import Bytes, PhaseLabel, ReportModel
from ddo_hooks.reports.parse import EitherShapeReport

__all__ = [
    "COMPONENT_PATTERN",
    "ENVELOPE_VERSION",
    "MAX_WORLD_SIZE",
    "RecordEnvelope",
    "ReportRecord",
    "check_boundary",
    "new_run_id",
    "process_rank",
    "record_json_schema",
]

ENVELOPE_VERSION: Final = 1
"""The record envelope's schema version."""

COMPONENT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$"
"""Component names: a letter or digit, then up to 127 of letters, digits, ``_ . -``."""

_HOST = socket.gethostname()


def new_run_id() -> str:
    """A fresh run id: 32 hexadecimal digits (a random UUID)."""
    return uuid.uuid4().hex


MAX_WORLD_SIZE = 2**31 - 1
"""The largest world size a launcher variable may give (torch keeps ranks in 32-bit ints)."""

_LEAST = {"RANK": 0, "LOCAL_RANK": 0, "WORLD_SIZE": 1}  # each launcher variable and its least valid value
_DIGITS = re.compile(r"[0-9]{1,10}")  # ASCII digits only: str.isdigit() also takes '²', which int() refuses
_log = logging.getLogger("ddo_hooks")


def _bounds(name: str) -> tuple[int, int]:
    """The least and the largest valid value of launcher variable ``name`` (a rank stays below any world size)."""
    least = _LEAST[name]
    return least, MAX_WORLD_SIZE - 1 if least == 0 else MAX_WORLD_SIZE


@functools.lru_cache(maxsize=64)  # the last 64 problems: a launcher variable is read at every record
def _warn_once(key: tuple[str, ...], message: str) -> None:
    """Log ``message`` once per ``key`` (of the last 64) in this process."""
    _log.warning("%s", message)


def _launcher_variable(name: str) -> tuple[int | None, bool]:
    """The value of launcher variable ``name`` (``None`` when unset or empty), and whether it is usable."""
    value = os.environ.get(name, "")
    if not value:
        return None, True
    number = int(value) if _DIGITS.fullmatch(value) else -1
    least, most = _bounds(name)
    if least <= number <= most:
        return number, True
    _warn_once(
        (name, value),
        f"the launcher variable {name}={show_repr(value)} is not usable: {name} must be a whole number from "
        f"{least} to {most}, in ASCII digits; records carry no rank or world size until it is fixed or unset",
    )
    return None, False


def process_rank() -> tuple[int | None, int | None]:
    """``(rank, world_size)`` of this process when it is one of several, else ``(None, None)``.

    From ``torch.distributed`` when it is initialized (never imported here), else from the
    ``RANK`` (or ``LOCAL_RANK``) and ``WORLD_SIZE`` variables that torchrun and accelerate set.
    A variable that is set but unusable (not a whole number in range, in ASCII digits), or a rank
    not below the world size, gives ``(None, None)`` and a warning once per value and process on
    the ``ddo_hooks`` logger: a record is never refused for what the launcher set.
    """
    distributed = sys.modules.get("torch.distributed")
    if distributed is not None and distributed.is_available() and distributed.is_initialized():
        return int(distributed.get_rank()), int(distributed.get_world_size())
    found = {name: _launcher_variable(name) for name in _LEAST}
    if not all(usable for _, usable in found.values()):
        return None, None
    rank_name = "RANK" if found["RANK"][0] is not None else "LOCAL_RANK"
    rank, world = found[rank_name][0], found["WORLD_SIZE"][0]
    if rank is not None and world is not None and rank >= world:
        _warn_once(
            (rank_name, str(rank), str(world)),
            f"the launcher variables {rank_name}={rank} and WORLD_SIZE={world} disagree: a rank counts from 0 and "
            "stays below the world size; records carry no rank or world size until they agree",
        )
        return None, None
    return rank, world


def check_boundary(boundary: object) -> str | None:
    """``boundary`` when it is one of :data:`~ddo_hooks.boundaries.BOUNDARIES` or ``None``, for a record's envelope.

    Raises:
        InvalidArgumentError: Any other value; the message names the argument and the boundaries.

    Examples:
        >>> check_boundary("after_call"), check_boundary(None)
        ('after_call', None)
        >>> check_boundary("Bad!")
        Traceback (most recent call last):
        ...
        ddo_hooks.errors.InvalidArgumentError: boundary='Bad!' is not a boundary; pass one of ...
    """
    if boundary is None or (isinstance(boundary, str) and boundary in BOUNDARIES):
        return boundary
    raise InvalidArgumentError(
        f"boundary={show_repr(boundary)} is not a boundary; pass one of {', '.join(BOUNDARIES)}, "
        "or None for a report made outside a boundary"
    )


class RecordEnvelope(ReportModel):
    """Where and when a report was recorded."""

    envelope_version: Literal[1] = ENVELOPE_VERSION
    """The envelope's schema version."""
    run_id: str = Field(pattern=r"^[0-9a-f]{32}$")
    """One per attachment: the records of one attached pipeline share it."""
    call_index: Bytes
    """The pipeline call within the run, from 1 (0: before the first call)."""
    boundary: PhaseLabel | None
    """The boundary the report belongs to; ``None`` for a report made outside a boundary."""
    timestamp: Annotated[AwareDatetime, Field(strict=False)]
    """When the report was recorded, in UTC (ISO 8601 in JSON, e.g. ``2026-11-30T19:20:00.123456Z``)."""
    pid: StrictInt = Field(ge=0)
    """The process id."""
    host: str
    """The host name."""
    rank: StrictInt | None = Field(default=None, ge=0)
    """The rank of this process among several (torch.distributed, or ``RANK``/``LOCAL_RANK``); else ``None``."""
    world_size: StrictInt | None = Field(default=None, ge=1)
    """How many processes the rank is among; ``None`` when not known."""

    @classmethod
    def now(cls, *, run_id: str, call_index: int, boundary: str | None) -> RecordEnvelope:
        """The envelope of a record made now, in this process.

        Raises:
            InvalidArgumentError: ``boundary`` is neither a boundary nor ``None`` (see :func:`check_boundary`).
        """
        checked = check_boundary(boundary)
        rank, world = process_rank()
        return cls(
            run_id=run_id,
            call_index=call_index,
            boundary=checked,
            timestamp=datetime.now(timezone.utc),
            pid=os.getpid(),
            host=_HOST,
            rank=rank,
            world_size=world,
        )


class ReportRecord(ReportModel):
    """One record of a report file or a tracker: the component, the report and its envelope."""

    component: str = Field(pattern=COMPONENT_PATTERN)
    """Where the report belongs, e.g. ``host_cache_before_transformer``."""
    report: EitherShapeReport
    """The report, exactly as its shape defines it: ddo_hooks' own or DDO's (told apart by
    :func:`~ddo_hooks.reports.parse.report_shape`)."""
    envelope: RecordEnvelope | None = None
    """Where and when it was recorded; ``None`` in files written before envelopes existed."""


def record_json_schema() -> dict[str, Any]:
    """The JSON Schema of one record (a line of a JSON Lines report file), as checked into ``ddo_hooks/schemas``."""
    schema = ReportRecord.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema
