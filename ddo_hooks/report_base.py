"""What every DDO report model shares: the strict base model and the reusable field types.

Examples:
    >>> from ddo_hooks.report_base import HostObservation
    >>> HostObservation(platform="linux", rss_bytes=-1)
    Traceback (most recent call last):
    ...
    pydantic_core._pydantic_core.ValidationError: 1 validation error for HostObservation
    ...
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

__all__ = ["PHASE_PATTERN", "SCHEMA_VERSION", "Bytes", "HostObservation", "PhaseLabel", "ReportModel", "Seconds"]

SCHEMA_VERSION = 1

PHASE_PATTERN = r"^[a-z][a-z0-9_.\-]{0,63}$"
"""Phase and boundary labels: a lowercase letter, then up to 63 of ``a-z 0-9 _ . -``."""

Bytes = Annotated[StrictInt, Field(ge=0)]
"""A byte count: a non-negative integer."""

Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
"""A duration in seconds: a finite, non-negative number."""

PhaseLabel = Annotated[str, Field(pattern=PHASE_PATTERN)]
"""A phase label such as ``before_transformer`` (see :data:`PHASE_PATTERN`)."""


class ReportModel(BaseModel):
    """The base of every report model: strict (unknown fields refused), frozen, fields documented."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class HostObservation(ReportModel):
    """A snapshot of the process's host memory (not a continuous peak)."""

    platform: Literal["linux", "windows", "darwin", "other"]
    """The operating system the observation was made on."""
    rss_bytes: Bytes | None
    """Process resident set size (psutil)."""
    private_bytes: Bytes | None = None
    """Windows: process private bytes (``PrivateUsage``, committed private memory)."""
    physical_available_bytes: Bytes | None = None
    """Windows: physical memory available (``GlobalMemoryStatusEx.ullAvailPhys``)."""
    commit_available_bytes: Bytes | None = None
    """Windows: commit the process can still use (``ullAvailPageFile``), not pagefile free disk space."""
    unavailable: dict[str, str] = Field(default_factory=dict)
    """Fields that could not be observed, each with the reason; those fields are null."""

    @model_validator(mode="after")
    def _unavailable_are_null(self) -> HostObservation:
        for name in self.unavailable:
            if name not in type(self).model_fields or name in ("platform", "unavailable"):
                raise ValueError(f"unavailable names unknown field {name!r}")
            if getattr(self, name) is not None:
                raise ValueError(f"{name} is listed as unavailable but has a value")
        return self
