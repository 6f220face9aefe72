"""Sizes: ``parse_size`` reads ints and unit strings into whole bytes; ``format_size`` writes them."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from ddo_hooks.errors import InvalidArgumentError
from ddo_hooks.sizes import MAX_SIZE, SIZE_PATTERN, SIZE_UNITS, ByteSize, format_size, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (0, 0),
        (512, 512),
        ("0", 0),
        ("512", 512),
        ("512B", 512),
        ("512 b", 512),
        ("16MiB", 16 * 1024**2),
        ("16 MiB", 16 * 1024**2),
        ("  16 MiB  ", 16 * 1024**2),
        ("16mib", 16 * 1024**2),
        ("16MIB", 16 * 1024**2),
        ("2GB", 2_000_000_000),
        ("2gb", 2_000_000_000),
        ("1.5GiB", 1_610_612_736),
        ("1.5 KB", 1500),
        ("1KiB", 1024),
        ("1kb", 1000),
        ("1TB", 10**12),
        ("1TiB", 1024**4),
        (".5KiB", 512),
        ("5.", 5),
        ("0.5B", 0),
        ("1.9999", 1),
        ("0.1KiB", 102),
        (1.5, 1),
    ],
)
def test_parse_size_accepts_ints_and_unit_strings(text, expected):
    assert parse_size(text) == expected


def test_decimal_units_are_powers_of_1000_and_binary_units_powers_of_1024():
    assert [SIZE_UNITS[u] for u in ("kb", "mb", "gb", "tb")] == [1000**k for k in range(1, 5)]
    assert [SIZE_UNITS[u] for u in ("kib", "mib", "gib", "tib")] == [1024**k for k in range(1, 5)]


def test_fractions_are_exact_before_flooring():
    # 0.1 is not exact as a float; 0.1 GiB must still be floor(1073741824 / 10).
    assert parse_size("0.1GiB") == 1024**3 // 10
    assert parse_size("1.1TB") == 1_100_000_000_000


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, r"size=-1 is negative; use a non-negative int of bytes"),
        ("-5MiB", r"size='-5MiB' is negative"),
        (True, r"size=True is a boolean, not a size"),
        (False, r"is a boolean"),
        (math.nan, r"size=nan is not a finite number"),
        (math.inf, r"size=inf is not a finite number"),
        (-0.5, r"is negative"),
        ("", r"size='' is an empty string; use"),
        ("   ", r"is an empty string"),
        ("16 MBytes", r"unknown unit 'MBytes'; use B, KB, MB, GB, TB \(powers of 1000\) or KiB"),
        ("16Mi", r"unknown unit 'Mi'"),
        ("16 kbit", r"unknown unit 'kbit'"),
        ("nan", r"'nan' is not a size; use"),
        ("inf", r"is not a size"),
        ("1e6", r"'1e6' is not a size"),
        ("16 M iB", r"is not a size"),
        ("MiB", r"is not a size"),
        ("1,000", r"is not a size"),
        ("\u0663MiB", r"is not a size"),  # an Arabic-Indic digit
        (None, r"size=None is a NoneType, not a size"),
        ([1], r"is a list, not a size"),
    ],
)
def test_parse_size_rejects_with_a_message_that_lists_the_accepted_forms(value, message):
    with pytest.raises(InvalidArgumentError, match=message):
        parse_size(value)


@pytest.mark.parametrize("value", [MAX_SIZE + 1, "8EiB", "9223372036854775808", "8388608TiB", 1e19])
def test_a_size_above_8_eib_is_refused(value):
    assert parse_size(MAX_SIZE) == MAX_SIZE
    with pytest.raises(InvalidArgumentError, match=r"is larger than 8 EiB|unknown unit 'EiB'"):
        parse_size(value)


def test_the_error_names_the_field_or_leaves_it_to_the_caller():
    with pytest.raises(InvalidArgumentError, match=r"^max_copy_bytes='x' is not a size"):
        parse_size("x", name="max_copy_bytes")
    with pytest.raises(InvalidArgumentError, match=r"^'x' is not a size"):
        parse_size("x", name="")


def test_an_invalid_size_is_also_a_value_error():
    with pytest.raises(ValueError, match="negative"):
        parse_size(-3)


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (512, "512 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (16 * 1024**2, "16.0 MiB"),
        (1024**2 - 1, "1.0 MiB"),
        (3 * 1024**3 // 2, "1.5 GiB"),
        (5 * 1024**4, "5.0 TiB"),
        (2048 * 1024**4, "2048.0 TiB"),
        (-2048, "-2.0 KiB"),
    ],
)
def test_format_size_is_for_people(n, text):
    assert format_size(n) == text


@pytest.mark.parametrize("value", [True, 1.5, "16MiB", None])
def test_format_size_needs_an_int(value):
    with pytest.raises(InvalidArgumentError, match="format_size expects an int"):
        format_size(value)


@given(st.integers(min_value=0, max_value=MAX_SIZE))
def test_every_non_negative_int_parses_to_itself(n):
    assert parse_size(n) == n
    assert parse_size(str(n)) == n
    assert parse_size(f"{n} B") == n


@given(
    st.integers(min_value=0, max_value=10**6),
    st.sampled_from(["B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB"]),
    st.sampled_from(["", " "]),
)
def test_whole_numbers_times_their_unit(n, unit, space):
    assert parse_size(f"{n}{space}{unit}") == n * SIZE_UNITS[unit.lower()]
    assert parse_size(f"{n}{space}{unit.upper()}") == n * SIZE_UNITS[unit.lower()]


@given(st.text(max_size=20))
def test_any_text_is_a_size_or_an_invalid_argument(text):
    try:
        result = parse_size(text)
    except InvalidArgumentError:
        return
    assert isinstance(result, int)
    assert result >= 0


@given(st.text(alphabet="0123456789.kKmMgGtTiIbB -", max_size=12))
def test_the_schema_pattern_accepts_exactly_what_parses(text):
    import re

    matches = re.fullmatch(SIZE_PATTERN, text) is not None
    try:
        parse_size(text)
        parses = True
    except InvalidArgumentError:
        parses = False
    assert matches == parses


class _Sized(BaseModel):
    size: ByteSize = 0


def test_byte_size_fields_accept_both_forms_and_store_ints():
    assert _Sized(size="16MiB").size == 16 * 1024**2
    assert _Sized(size=7).size == 7
    assert _Sized(size="16MiB").model_dump(mode="json") == {"size": 16777216}
    with pytest.raises(ValidationError, match=r"'-1KiB' is negative; use a non-negative int"):
        _Sized(size="-1KiB")


def test_byte_size_json_schema_offers_both_forms():
    schema = _Sized.model_json_schema()["properties"]["size"]
    assert schema["anyOf"] == [{"minimum": 0, "type": "integer"}, {"pattern": SIZE_PATTERN, "type": "string"}]
