"""The demo's tiny pipeline saved through safetensors and loaded back, so that pinning from the files has files.

A policy that pins the weights from their files (``pinned_copies.from_files``, as ``smallest-box`` does) needs
weights that are views of their files: a pipeline built in memory has none. :func:`weights_folder` gives the demo a
temporary folder for the run, and :func:`through_files` saves the pipeline there and loads it back with its files'
dtype, as ``from_pretrained`` loads a real one, the libraries' progress bars off while it does.

Examples:
    >>> from ddo_hooks.testing.tiny_pipelines import build_pipeline
    >>> with weights_folder(True) as folder:
    ...     pipe = through_files(build_pipeline("sd"), folder)
    ...     sorted(p.name for p in folder.iterdir() if p.is_dir())
    ['scheduler', 'text_encoder', 'tokenizer', 'unet', 'vae']
    >>> with weights_folder(False) as folder:
    ...     folder is None
    True
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["through_files", "weights_folder"]


@contextlib.contextmanager
def weights_folder(needed: bool) -> Iterator[Path | None]:
    """A temporary folder for the run's weights files, removed afterwards; ``None`` when not ``needed``."""
    if not needed:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="ddo-hooks-demo-") as folder:
        yield Path(folder)


@contextlib.contextmanager
def _quiet_progress() -> Iterator[None]:
    """Diffusers' and transformers' progress bars off inside the block, as they were after it."""
    from diffusers.utils import logging as diffusers_logging
    from transformers.utils import logging as transformers_logging

    shown = [(lib, lib.is_progress_bar_enabled()) for lib in (diffusers_logging, transformers_logging)]
    for lib, _ in shown:
        lib.disable_progress_bar()
    try:
        yield
    finally:
        for lib, was in shown:
            if was:
                lib.enable_progress_bar()


def through_files(pipe: Any, folder: Path) -> Any:
    """Save ``pipe`` into ``folder`` (safetensors) and return it loaded back: its weights views of those files."""
    with _quiet_progress():
        pipe.save_pretrained(folder)
        return type(pipe).from_pretrained(folder)
