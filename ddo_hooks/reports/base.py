"""What every DDO report model shares: the strict base model and the reusable field types.

Examples:
    >>> from ddo_hooks.reports.base import HostObservation
    >>> HostObservation(platform="linux", rss_bytes=-1)
    Traceback (most recent call last):
    ...
    pydantic_core._pydantic_core.ValidationError: 1 validation error for HostObservation
    ...
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

from ddo_hooks.boundaries import PHASE_PATTERN

__all__ = [
    "PHASE_PATTERN",
    "SCHEMA_VERSION",
    "Bytes",
    "HostObservation",
    "PhaseLabel",
    "ReportModel",
    "RouteReport",
    "Seconds",
]

SCHEMA_VERSION = 1
"""The main DDO report schema version."""

Bytes = Annotated[StrictInt, Field(ge=0)]
"""A byte count: a non-negative integer."""

Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
"""A duration in seconds: a finite, non-negative number."""

PhaseLabel = Annotated[str, Field(pattern=PHASE_PATTERN)]
"""A phase label such as ``before_transformer`` (see :data:`PHASE_PATTERN`)."""


class ReportModel(BaseModel):
    """The base of every report model: strict (unknown fields refused), frozen, fields documented."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class RouteReport(ReportModel):
    """The shape of every DDO report: ``schema_version``, a ``route`` and one section under ``setup``.

    Each route's report subclasses it with its ``route`` literal and its ``setup`` model, whose
    one field is the route's section (e.g. ``setup.host_cache_release``).
    """

    schema_version: Literal[1] = SCHEMA_VERSION
    """The main DDO report schema version."""

    @property
    def body(self) -> ReportModel:
        """The one section under ``setup``, whatever the route."""
        setup = self.setup  # type: ignore[attr-defined]
        return getattr(setup, next(iter(type(setup).model_fields)))


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
