"""The device argument: CUDA devices only, parsed without touching CUDA."""

from __future__ import annotations

import re

import pytest
import torch

from ddo_hooks.errors import InvalidArgumentError
from ddo_hooks.release.devices import ACCEPTED_DEVICE_FORMS, parse_cuda_device

FORMS = re.escape(ACCEPTED_DEVICE_FORMS)


@pytest.mark.parametrize(
    ("device", "index"),
    [
        ("cuda", None),
        ("cuda:0", 0),
        ("cuda:3", 3),
        (torch.device("cuda"), None),
        (torch.device("cuda", 1), 1),
        (torch.device("cuda:4"), 4),
        (0, 0),
        (7, 7),
    ],
)
def test_accepted_forms_give_the_index_or_none_for_the_current_device(device: object, index: int | None):
    assert parse_cuda_device(device) == index


@pytest.mark.parametrize("device", ["cpu", "cpu:0", "mps", "meta", torch.device("cpu"), torch.device("meta")])
def test_other_device_types_are_refused_as_not_cuda(device: object):
    with pytest.raises(InvalidArgumentError, match=rf"^device=.* is not a CUDA device: .*; use {FORMS}$"):
        parse_cuda_device(device)


@pytest.mark.parametrize(
    "device", ["cuda:-1", "cuda:x", "cuda:", "CUDA:0", "gpu", "", "cuda:0:1", " cuda:2 ", "cuda:\u0663", 1.0, None, [0]]
)
def test_garbage_is_refused_naming_the_argument_and_the_accepted_forms(device: object):
    with pytest.raises(InvalidArgumentError, match=rf"^device=.* is not a valid device; use {FORMS}$"):
        parse_cuda_device(device)


@pytest.mark.parametrize("device", [True, False])
def test_a_bool_is_not_a_device_index(device: bool):
    with pytest.raises(InvalidArgumentError, match=rf"^device={device} is not a device; use {FORMS}$"):
        parse_cuda_device(device)


def test_a_negative_index_is_refused():
    with pytest.raises(InvalidArgumentError, match=r"^device=-1: a device index must be >= 0$"):
        parse_cuda_device(-1)


@pytest.mark.parametrize(
    ("device", "shown"),
    [
        ("cuda:" + "9" * 5000, "'cuda:" + "9" * 51 + "..."),  # int() refuses more than 4,300 digits
        ("cuda:" + "9" * 11, "'cuda:99999999999'"),
        (10**5000, "an int of about 5,001 digits"),
        (2**31, "2147483648"),
    ],
    ids=["5000-digits", "11-digits", "int-5000-digits", "int-2**31"],
)
def test_an_index_too_long_for_any_machine_is_refused_with_the_value_cut(device: object, shown: str):
    expected = (
        rf"^device={re.escape(shown)} is not a valid device; use {FORMS}$"
        if isinstance(device, str)
        else rf"^device={re.escape(shown)}: a device index must be below 2147483648$"
    )
    with pytest.raises(InvalidArgumentError, match=expected):
        parse_cuda_device(device)
    assert parse_cuda_device("cuda:2147483647") == parse_cuda_device(2**31 - 1) == 2**31 - 1


def test_the_message_names_the_argument_it_was_given():
    with pytest.raises(InvalidArgumentError, match=r"^target='cpu' is not a CUDA device"):
        parse_cuda_device("cpu", argument="target")


def test_an_invalid_device_is_a_value_error():
    with pytest.raises(ValueError, match="device='cpu'"):
        parse_cuda_device("cpu")


def test_parsing_never_initializes_cuda():
    for device in ("cuda", "cuda:1", torch.device("cuda", 2), 3):
        parse_cuda_device(device)
    assert torch.cuda.is_initialized() is False
