"""Tools for tests, docs and the demo: tiny real diffusers pipelines with random weights.

:mod:`~ddo_hooks.testing.tiny_pipelines` builds them locally (nothing downloads); it imports
diffusers when imported and transformers only when a text encoder is built.
:mod:`~ddo_hooks.testing.structural` builds, the same way, pipelines whose calls are shaped
unusually (sub-pipelines, several denoising loops, odd call ends), and ``pipeline_census.json``
(written by ``scripts/pipeline_census.py``) classifies every pipeline class of diffusers. Imports
nothing else of ddo_hooks but the foundation modules.
"""

from typing import Literal

__all__ = ["FAMILIES", "Family"]

Family = Literal["flux", "sd", "wan"]
"""A pipeline family: ``flux`` (FluxPipeline), ``sd`` (StableDiffusionPipeline, SD 1.5 style)
or ``wan`` (WanPipeline, text to video)."""

FAMILIES: tuple[Family, ...] = ("flux", "sd", "wan")
"""Every family, in a stable order (handy for ``pytest.mark.parametrize``)."""
