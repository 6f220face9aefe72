"""Where a recorded report came from: the envelope of a record (run, call, boundary, time, process, rank).

A DDO report stays exactly as the specification defines it. The *record* that carries it (in
the tracker, the JSON Lines sink, ``attachment.reports``' tracker and saved runs) adds an
envelope: one run id per attachment, the call index within the run, the boundary, a UTC
timestamp, the process id, the host name, and the rank and world size when the process is one
of several (``torch.distributed`` initialized, or ``RANK``/``LOCAL_RANK``/``WORLD_SIZE`` set).
Files written before the envelope existed still load: their records have none.

Examples:
    >>> envelope = RecordEnvelope.now(run_id=new_run_id(), call_index=2, boundary="after_call")
    >>> envelope.call_index, envelope.boundary, envelope.timestamp.tzinfo is not None
    (2, 'after_call', True)
    >>> ReportRecord(component="host_cache_after_call", report=None, envelope=envelope)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pydantic_core._pydantic_core.ValidationError: ...
"""

from __future__ import annotations

import os
import socket
import sys
import uuid
from datetime import datetime, timezone
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, Field, StrictInt

from ddo_hooks.reports.base import Bytes, PhaseLabel, ReportModel
from ddo_hooks.reports.parse import DDOReport

__all__ = [
    "COMPONENT_PATTERN",
    "ENVELOPE_VERSION",
    "RecordEnvelope",
    "ReportRecord",
    "new_run_id",
    "process_rank",
    "record_json_schema",
]

ENVELOPE_VERSION = 1
"""The record envelope's schema version."""

COMPONENT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$"
"""Component names: a letter or digit, then up to 127 of letters, digits, ``_ . -``."""

_HOST = socket.gethostname()


def new_run_id() -> str:
    """A fresh run id: 32 hexadecimal digits (a random UUID)."""
    return uuid.uuid4().hex


def _int_env(name: str) -> int | None:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else None


def process_rank() -> tuple[int | None, int | None]:
    """``(rank, world_size)`` of this process when it is one of several, else ``(None, None)``.

    From ``torch.distributed`` when it is initialized (never imported here), else from the
    ``RANK`` (or ``LOCAL_RANK``) and ``WORLD_SIZE`` variables that torchrun and accelerate set.
    """
    distributed = sys.modules.get("torch.distributed")
    if distributed is not None and distributed.is_available() and distributed.is_initialized():
        return int(distributed.get_rank()), int(distributed.get_world_size())
    rank = _int_env("RANK")
    rank = _int_env("LOCAL_RANK") if rank is None else rank
    world = _int_env("WORLD_SIZE")
    if rank is None and world is None:
        return None, None
    return rank, world


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
        """The envelope of a record made now, in this process."""
        rank, world = process_rank()
        return cls(
            run_id=run_id,
            call_index=call_index,
            boundary=boundary,
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
    report: DDOReport
    """The DDO report, exactly as the specification defines it."""
    envelope: RecordEnvelope | None = None
    """Where and when it was recorded; ``None`` in files written before envelopes existed."""


def record_json_schema() -> dict[str, Any]:
    """The JSON Schema of one record (a line of a JSON Lines report file), as checked into ``ddo_hooks/schemas``."""
    schema = ReportRecord.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema
