"""Pipelines saved to disk and loaded back: their weights are views of their safetensors files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from diffusers import DiffusionPipeline


def loaded(folder: str | Path) -> Any:
    """The pipeline saved in ``folder``, loaded with its files' dtype, its progress bar off."""
    pipe = DiffusionPipeline.from_pretrained(folder)
    pipe.set_progress_bar_config(disable=True)
    return pipe
