"""Byte sizes for people: ``parse_size("16MiB")`` and ``format_size(16777216)``.

A size is a non-negative whole number of bytes, written either as an int or as a string: a
number (``512``, ``1.5``) optionally followed by a unit, with or without a space between.
Units: ``B``; ``KB``, ``MB``, ``GB``, ``TB`` (powers of 1000); ``KiB``, ``MiB``, ``GiB``,
``TiB`` (powers of 1024). Unit letters are case-insensitive (``mb`` is ``MB``: there are no
bits here); the ``i`` is what makes a unit binary (``MiB`` is 1024², ``MB`` is 1000²).
Fractions are floored to whole bytes.

Examples:
    >>> parse_size("16MiB"), parse_size("16 MiB"), parse_size("2GB"), parse_size(512)
    (16777216, 16777216, 2000000000, 512)
    >>> parse_size("1.5GiB")
    1610612736
    >>> format_size(16 * 1024**2), format_size(512)
    ('16.0 MiB', '512 B')
    >>> parse_size("16 MBytes")
    Traceback (most recent call last):
    ...
    ddo_hooks.errors.InvalidArgumentError: size='16 MBytes' has an unknown unit 'MBytes'; ...
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Annotated

from pydantic import BeforeValidator, Field
from pydantic_core import PydanticCustomError

from ddo_hooks._diagnostics import show_repr
from ddo_hooks.errors import InvalidArgumentError

__all__ = [
    "ACCEPTED_SIZE_FORMS",
    "MAX_SIZE",
    "SIZE_PATTERN",
    "SIZE_UNITS",
    "ByteSize",
    "format_size",
    "parse_size",
]

SIZE_UNITS: dict[str, int] = {
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
"""Each unit, lowercased, mapped to its number of bytes."""

MAX_SIZE = 2**63 - 1
"""The largest size accepted (8 EiB): what a signed 64-bit byte counter holds."""

SIZE_PATTERN = r"^\s*([0-9]+(\.[0-9]*)?|\.[0-9]+)\s*([bB]|[kKmMgGtT][iI]?[bB])?\s*$"
"""The strings :func:`parse_size` accepts (for JSON Schema ``pattern``)."""

ACCEPTED_SIZE_FORMS = (
    "a non-negative int of bytes, or a string such as '512', '16MiB', '16 MiB', '2GB' or '1.5GiB' "
    "(units B, KB/MB/GB/TB = powers of 1000, KiB/MiB/GiB/TiB = powers of 1024)"
)
"""The accepted forms, as error messages say them."""

_SIZE_RE = re.compile(r"^(?P<number>-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))\s*(?P<unit>[A-Za-z]*)$", re.ASCII)
_BINARY_UNITS = ("KiB", "MiB", "GiB", "TiB")
_MAX_DIGITS = 100


def parse_size(value: object, *, name: str = "size") -> int:
    """Parse a byte size given as an int or a string with an optional unit.

    Args:
        value: A non-negative ``int`` (``bool`` is refused), a finite non-negative ``float``
            (floored), or a string such as ``"512"``, ``"16MiB"``, ``"16 MiB"``, ``"2GB"``
            or ``"1.5GiB"``.
        name: What the value is, used in the error message (e.g. ``"max_copy_bytes"``);
            ``""`` leaves it out (the caller names the field itself).

    Returns:
        The size in whole bytes (fractions floored).

    Raises:
        InvalidArgumentError: A negative, boolean, NaN or infinite value, an empty string,
            an unknown unit or anything that is not a size; the message lists the accepted forms.

    Examples:
        >>> parse_size("1 KiB"), parse_size("1kb"), parse_size("0.5 B"), parse_size("0")
        (1024, 1000, 0, 0)
        >>> parse_size(-1, name="min_releasable_bytes")
        Traceback (most recent call last):
        ...
        ddo_hooks.errors.InvalidArgumentError: min_releasable_bytes=-1 is negative; ...
    """
    if isinstance(value, bool):
        raise _invalid(name, value, f"is a boolean, not a size; use {ACCEPTED_SIZE_FORMS}")
    if isinstance(value, int):
        if value < 0:
            raise _invalid(name, value, f"is negative; use {ACCEPTED_SIZE_FORMS}")
        return _bounded(name, value, int(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _invalid(name, value, f"is not a finite number; use {ACCEPTED_SIZE_FORMS}")
        if value < 0:
            raise _invalid(name, value, f"is negative; use {ACCEPTED_SIZE_FORMS}")
        return _bounded(name, value, math.floor(value))
    if not isinstance(value, str):
        raise _invalid(name, value, f"is a {type(value).__name__}, not a size; use {ACCEPTED_SIZE_FORMS}")
    text = value.strip()
    if not text:
        raise _invalid(name, value, f"is an empty string; use {ACCEPTED_SIZE_FORMS}")
    match = _SIZE_RE.match(text)
    if match is None:
        raise _invalid(name, value, f"is not a size; use {ACCEPTED_SIZE_FORMS}")
    number, unit = match.group("number"), match.group("unit")
    if number.startswith("-"):
        raise _invalid(name, value, f"is negative; use {ACCEPTED_SIZE_FORMS}")
    if len(number) > _MAX_DIGITS:
        raise _invalid(name, value, f"has more than {_MAX_DIGITS} digits; give a realistic size such as '16MiB'")
    multiplier = SIZE_UNITS.get(unit.lower() or "b")
    if multiplier is None:
        raise _invalid(
            name,
            value,
            f"has an unknown unit {show_repr(unit)}; use B, KB, MB, GB, TB (powers of 1000) "
            "or KiB, MiB, GiB, TiB (powers of 1024), e.g. '16MiB'",
        )
    return _bounded(name, value, math.floor(Fraction(number) * multiplier))


def _bounded(name: str, value: object, size: int) -> int:
    if size > MAX_SIZE:
        raise _invalid(name, value, "is larger than 8 EiB (2**63 - 1 bytes); give a realistic size")
    return size


def _invalid(name: str, value: object, problem: str) -> InvalidArgumentError:
    shown = show_repr(value)
    error = InvalidArgumentError(f"{name}={shown} {problem}" if name else f"{shown} {problem}")
    error.problem = problem  # type: ignore[attr-defined]  # the message's problem rides on the error for the callers that show it alone
    return error


def format_size(n: int) -> str:
    """Format a byte count for people, in binary units with one decimal.

    Args:
        n: A number of bytes; negative counts (e.g. a signed delta) keep their sign.

    Returns:
        ``"512 B"`` below 1 KiB, otherwise e.g. ``"16.0 MiB"`` or ``"1.5 GiB"``.

    Raises:
        InvalidArgumentError: ``n`` is not an int (``bool`` included).

    Examples:
        >>> format_size(1536), format_size(3 * 1024**3 // 2), format_size(-2048)
        ('1.5 KiB', '1.5 GiB', '-2.0 KiB')
    """
    if type(n) is not int:  # the usual int goes straight on: tables write hundreds of thousands of sizes
        if isinstance(n, bool) or not isinstance(n, int):
            raise InvalidArgumentError(f"format_size expects an int number of bytes, got {n!r}")
        n = int(n)  # a subclass of int is written as the number it is
    magnitude = -n if n < 0 else n
    if magnitude < 1024:
        return f"{n} B"
    if magnitude < 1024**2:  # the largest unit <= magnitude; int / float is float(magnitude) / float
        unit, value = 0, magnitude / 1024.0
    elif magnitude < 1024**3:
        unit, value = 1, magnitude / 1024.0**2
    elif magnitude < 1024**4:
        unit, value = 2, magnitude / 1024.0**3
    else:
        unit, value = 3, magnitude / 1024.0**4
    if unit < 3 and value >= 1023.9 and round(value, 1) >= 1024:  # 1023.96 KiB shows as 1.0 MiB
        unit, value = unit + 1, value / 1024
    text = f"{value:.1f} {_BINARY_UNITS[unit]}"
    return "-" + text if n < 0 else text


def _validate_size(value: object) -> int:
    try:
        return parse_size(value, name="")
    except InvalidArgumentError as e:
        problem = getattr(e, "problem", str(e))
        raise PydanticCustomError("size", "{message}", {"message": str(e), "problem": problem}) from e


ByteSize = Annotated[
    int,
    BeforeValidator(
        _validate_size,
        json_schema_input_type=Annotated[int, Field(ge=0)] | Annotated[str, Field(pattern=SIZE_PATTERN)],
    ),
]
"""A pydantic field type: a size given as an int or a size string (``16MiB``), stored as an int."""
