"""The base of every policy model, and the validation error that says where in the policy it points.

:mod:`~ddo_hooks.policy.builtins` (the built-in actions' options) and :mod:`~ddo_hooks.policy.parts`
(the policy's sections) build on these two; :mod:`~ddo_hooks.policy.parts` re-exports them.

Examples:
    >>> located_error("device", "{value} is not a CUDA device", value=True).message()
    'true is not a CUDA device'
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic_core import PydanticCustomError

from ddo_hooks._diagnostics import KeyPath, show_value

__all__ = ["Model", "located_error"]


class Model(BaseModel):
    """The base of every policy model: strict (unknown keys refused), frozen, fields documented."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


def located_error(kind: str, message: str, at: KeyPath = (), *, value: object = None) -> PydanticCustomError:
    """A validation error; ``at`` is a key path below the field, where the message points.

    Where ``message`` holds ``{value}``, the value is shown there: as the YAML wrote it when the
    policy came from YAML (``yes``), else as :func:`~ddo_hooks._diagnostics.show_value` writes it.

    Examples:
        >>> located_error("device", "{value} is not a CUDA device", value=True).message()
        'true is not a CUDA device'
    """
    context: dict[str, Any] = {"message": message.replace("{value}", show_value(value)), "at": at}
    if "{value}" in message:
        context["template"] = message
    return PydanticCustomError(kind, "{message}", context)
