"""The one boundary vocabulary: the names every layer, table and docs page takes from here.

A pipeline call passes three *phase boundaries*, quiet points where a release is safe, in this
order: :data:`BEFORE_TRANSFORMER` (prompts are encoded, the final stage's denoising loop has not
started), :data:`BEFORE_VAE` (that loop is over, the VAE has not decoded) and :data:`AFTER_CALL`
(the call returned its components to rest). A boundary runs *actions* (the built-in ones are
:mod:`ddo_hooks.actions`, each named in its own module); an action's reports are recorded under
:func:`component_name`. A boundary that is requested where it is not allowed is *refused* for one of
the :data:`REFUSAL_REASONS`.

Examples:
    >>> BOUNDARIES
    ('before_transformer', 'before_vae', 'after_call')
    >>> component_name("host_cache", AFTER_CALL)
    'host_cache_after_call'
"""

from __future__ import annotations

from typing import Any, Literal

from ddo_hooks import _moved

__all__ = [
    "ACTION_NAME_PATTERN",
    "ACTION_NAME_RULE",
    "AFTER_CALL",
    "BEFORE_TRANSFORMER",
    "BEFORE_VAE",
    "BOUNDARIES",
    "BOUNDARY_NOTES",
    "BOUNDARY_SYNONYMS",
    "PHASE_PATTERN",
    "REFUSAL_REASONS",
    "BoundaryName",
    "RefusalReason",
    "boundary_hint",
    "component_name",
]

BEFORE_TRANSFORMER = "before_transformer"
"""After the text encoders (and any prior) ran, before the final stage's denoising loop starts."""
BEFORE_VAE = "before_vae"
"""After the final stage's denoising loop, before the VAE decodes."""
AFTER_CALL = "after_call"
"""After the pipeline call returned its components to rest."""

BOUNDARIES: tuple[str, ...] = (BEFORE_TRANSFORMER, BEFORE_VAE, AFTER_CALL)
"""The phase boundaries of a pipeline call, in the order they fire."""

BoundaryName = Literal["before_transformer", "before_vae", "after_call"]
"""One of :data:`BOUNDARIES` (a test keeps the two equal)."""

BOUNDARY_NOTES: dict[str, tuple[str, str]] = {
    BEFORE_TRANSFORMER: (
        "After the prompts are encoded and the latents prepared, when the denoising loop starts; where a "
        "prior or a first pipeline runs a loop before, when the final stage's loop starts, after its encoders",
        "Pinned copies of text encoders that were dropped or offloaded after encoding",
    ),
    BEFORE_VAE: (
        "When the final stage's denoising loop ends, before the VAE decodes (also inside the loop's progress bar, "
        'once it counted all its steps); `not_reached` when nothing decodes (`output_type="latent"`)',
        "Blocks the denoiser's onloads returned to the cache (group offloading with "
        "`low_cpu_mem_usage=True` pins at every onload)",
    ),
    AFTER_CALL: (
        "When the call has put its components back to rest (`maybe_free_model_hooks()` returned)",
        "Whatever the call left cached, before the process sits idle or the next call starts",
    ),
}
"""Each boundary: when it fires, and what a release there can give back (the docs' table)."""

ACTION_NAME_PATTERN = r"^[a-z][a-z0-9_.\-]*$"
"""Action names: a lowercase letter, then ``a-z 0-9 _ . -``."""

ACTION_NAME_RULE = "a lowercase letter, then a-z, 0-9, '_', '.' or '-' (such as my_pkg.log_memory)"
""":data:`ACTION_NAME_PATTERN` in words, as every message about a name says it."""

BOUNDARY_SYNONYMS = {
    "before_unet": BEFORE_TRANSFORMER,
    "before_denoiser": BEFORE_TRANSFORMER,
    "before_denoising": BEFORE_TRANSFORMER,
    "before_dit": BEFORE_TRANSFORMER,
    "before_decode": BEFORE_VAE,
    "before_decoder": BEFORE_VAE,
}
"""Names people give a boundary, and the boundary they mean: whatever denoises (a transformer, a UNet) comes after
``before_transformer``."""


def boundary_hint(name: object) -> str:
    """``"did you mean 'x'? "`` for a boundary name that is none, or ``""``; a UNet's is ``before_transformer``.

    Examples:
        >>> print(boundary_hint("before_unet").strip())
        did you mean 'before_transformer' (the boundary before the denoiser, a UNet too)?
        >>> boundary_hint("before_vea"), boundary_hint("nowhere")
        ("did you mean 'before_vae'? ", '')
    """
    from ddo_hooks._diagnostics import did_you_mean_hint  # at use: the foundation modules import this one

    meant = BOUNDARY_SYNONYMS.get(name) if isinstance(name, str) else None
    if meant == BEFORE_TRANSFORMER:
        return f"did you mean {meant!r} (the boundary before the denoiser, a UNet too)? "
    if meant is not None:
        return f"did you mean {meant!r}? "
    return did_you_mean_hint(name, BOUNDARIES)


PHASE_PATTERN = r"^[a-z][a-z0-9_.\-]{0,63}$"
"""Phase and boundary labels in reports: a lowercase letter, then up to 63 of ``a-z 0-9 _ . -``."""

RefusalReason = Literal[
    "loading",
    "denoising",
    "release_in_progress",
    "inference_in_progress",
    "concurrent_call",
    "not_reached",
    "action_refused",
    "action_failed",
]
"""Why a boundary was refused or not run (see :data:`REFUSAL_REASONS`)."""

REFUSAL_REASONS: dict[str, str] = {
    "denoising": "Inside a denoising loop: this pipeline's, or any other attached pipeline's in the process.",
    "loading": (
        "While components load, move or are re-hooked: the pipeline's own methods (`to`, "
        "`enable_model_cpu_offload`, `enable_group_offload`, `maybe_free_model_hooks`, the LoRA, IP-Adapter "
        "and textual-inversion loaders, ...) while they run, and any section a host marks with "
        '`attachment.loading()` or `ddo_hooks.release.guard.section("loading", ...)`.'
    ),
    "release_in_progress": "Beside another release.",
    "inference_in_progress": (
        "Beside a call: a call of another attached pipeline is in progress anywhere in the process, or a "
        "host request (or a direct release) comes while a call runs, also from a hook or callback inside it."
    ),
    "concurrent_call": (
        "Two calls of the same pipeline overlap (in two threads): neither call's boundaries run while the "
        "other is in progress; each is recorded with this reason."
    ),
    "not_reached": (
        "The call ended without reaching the boundary: it raised before it, did not decode "
        '(`output_type="latent"`), decoded only where no boundary may run, or ran no loop of its final stage; '
        "the detail says which."
    ),
    "action_refused": "An action refused to run (it raised `BoundaryRefusedError` with a reason of its own).",
    "action_failed": (
        "An action raised in a deferred `after_call` (`idle:`), where no call could raise it: the detail holds "
        "the error, which is also logged; the boundary's later actions still run."
    ),
}
"""Each refusal reason code with when it applies (the docs' table; a test keeps it equal to
:data:`RefusalReason`)."""


def component_name(prefix: str, boundary: str) -> str:
    """The tracker component an action's report at ``boundary`` is recorded under."""
    return f"{prefix}_{boundary}"


def __getattr__(name: str) -> Any:
    return _moved.old_attribute(__name__, name)
