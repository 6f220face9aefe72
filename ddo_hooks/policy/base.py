"""The base of every policy model; the validation error that says where in the policy it points is re-exported.

:mod:`~ddo_hooks.policy.parts` (the policy's sections) builds on :class:`Model` and
:func:`~ddo_hooks._diagnostics.located_error`, which the options models of the actions
(:mod:`ddo_hooks.actions`, a layer below) raise too; :mod:`~ddo_hooks.policy.parts` re-exports both.

Examples:
    >>> located_error("device", "{value} is not a CUDA device", value=True).message()
    'true is not a CUDA device'
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ddo_hooks._diagnostics import located_error

__all__ = ["Model", "located_error"]


class Model(BaseModel):
    """The base of every policy model: strict (unknown keys refused), frozen, fields documented."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
