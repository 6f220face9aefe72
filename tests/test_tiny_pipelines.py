"""Tiny real diffusers pipelines (random weights, local tokenizers): build, call, determinism."""

from __future__ import annotations

import logging
import socket
from typing import Any

import pytest
import torch
from diffusers import DiffusionPipeline

from ddo_hooks.testing.tiny_pipelines import FAMILIES, build_pipeline, call_kwargs, embed_prompt

OUTPUT_SHAPES = {"flux": (1, 3, 32, 32), "sd": (1, 3, 32, 32), "wan": (1, 5, 3, 16, 16)}
LATENT_SHAPES = {"flux": (1, 4, 64), "sd": (1, 4, 4, 4), "wan": (1, 16, 2, 2, 2)}
TEXT_COMPONENTS = {
    "flux": ("text_encoder", "tokenizer", "text_encoder_2", "tokenizer_2"),
    "sd": ("text_encoder", "tokenizer"),
    "wan": ("text_encoder", "tokenizer"),
}

per_family = pytest.mark.parametrize("family", FAMILIES)


def _output(pipe: DiffusionPipeline, **kwargs: Any) -> torch.Tensor:
    out = pipe(**kwargs)
    return out.frames if hasattr(out, "frames") else out.images


def _modules(pipe: DiffusionPipeline) -> dict[str, torch.nn.Module]:
    return {name: c for name, c in pipe.components.items() if isinstance(c, torch.nn.Module)}


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def library_warnings():
    """WARNING records of diffusers and transformers (their loggers do not propagate to caplog)."""
    handler = _Records()
    loggers = [logging.getLogger("diffusers"), logging.getLogger("transformers")]
    for logger in loggers:
        logger.addHandler(handler)
    yield handler.records
    for logger in loggers:
        logger.removeHandler(handler)


@per_family
def test_build_and_call(family, library_warnings):
    pipe = build_pipeline(family)
    assert type(pipe).__name__ == {"flux": "FluxPipeline", "sd": "StableDiffusionPipeline"}.get(family, "WanPipeline")
    assert all(not m.training for m in _modules(pipe).values())
    first = _output(pipe, **call_kwargs(family))
    assert first.shape == OUTPUT_SHAPES[family]
    assert first.dtype == torch.float32
    assert torch.isfinite(first).all()
    assert 0.0 <= first.min() <= first.max() <= 1.0
    # A second call on the same pipeline with the same kwargs gives the same output.
    assert torch.equal(_output(pipe, **call_kwargs(family)), first)
    assert [r.getMessage() for r in library_warnings] == []


@per_family
def test_same_seed_is_bitwise_identical(family):
    rng_before = torch.get_rng_state()
    a, b, other = (
        build_pipeline(family, seed=3),
        build_pipeline(family, seed=3),
        build_pipeline(family, seed=4),
    )
    assert torch.equal(torch.get_rng_state(), rng_before)  # the global RNG is left alone
    for name, module in _modules(a).items():
        sd_a, sd_b, sd_other = (
            module.state_dict(),
            _modules(b)[name].state_dict(),
            _modules(other)[name].state_dict(),
        )
        assert sd_a.keys() == sd_b.keys()
        assert all(torch.equal(sd_a[k], sd_b[k]) for k in sd_a), name
        assert not all(torch.equal(sd_a[k], sd_other[k]) for k in sd_a), name
    assert torch.equal(_output(a, **call_kwargs(family, seed=5)), _output(b, **call_kwargs(family, seed=5)))
    assert not torch.equal(_output(a, **call_kwargs(family, seed=5)), _output(a, **call_kwargs(family, seed=6)))


@per_family
def test_latent_output(family):
    pipe = build_pipeline(family)
    latents = _output(pipe, **call_kwargs(family, output_type="latent"))
    assert latents.shape == LATENT_SHAPES[family]
    assert torch.isfinite(latents).all()


@per_family
def test_callback_on_step_end_sees_every_step(family):
    pipe = build_pipeline(family)
    seen: list[tuple[int, tuple[int, ...]]] = []

    def callback(p, step, timestep, callback_kwargs):
        assert p is pipe
        seen.append((step, tuple(callback_kwargs["latents"].shape)))
        return {}

    out = _output(pipe, **call_kwargs(family, steps=3), callback_on_step_end=callback)
    assert seen == [(i, LATENT_SHAPES[family]) for i in range(3)]
    assert out.shape == OUTPUT_SHAPES[family]


@per_family
def test_embeddings_after_dropping_text_encoders(family, library_warnings):
    pipe = build_pipeline(family)
    reference = _output(pipe, **call_kwargs(family))
    embeds = embed_prompt(pipe, family)
    expected = {"prompt_embeds", "pooled_prompt_embeds" if family == "flux" else "negative_prompt_embeds"}
    assert set(embeds) == expected
    for name in TEXT_COMPONENTS[family]:
        setattr(pipe, name, None)
    assert all(pipe.components[name] is None for name in TEXT_COMPONENTS[family])
    kwargs = {**call_kwargs(family), "prompt": None, **embeds}
    first = _output(pipe, **kwargs)
    assert torch.equal(first, reference)  # the same embeddings the prompt call computed internally
    assert torch.equal(_output(pipe, **{**call_kwargs(family), "prompt": None, **embeds}), first)
    assert [r.getMessage() for r in library_warnings] == []


@per_family
def test_nothing_downloads(family, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    pipe = build_pipeline(family)
    _output(pipe, **call_kwargs(family))
    assert pipe.name_or_path is None
    for name, component in pipe.components.items():
        if component is None:
            continue
        # Nothing was loaded from a path or hub id: no component remembers one.
        assert not getattr(component, "name_or_path", ""), name
        assert not getattr(getattr(component, "config", None), "_name_or_path", ""), name


@per_family
def test_other_dtype(family):
    pipe = build_pipeline(family, dtype=torch.bfloat16)
    assert all(m.dtype == torch.bfloat16 for m in _modules(pipe).values())
    latents = _output(pipe, **call_kwargs(family, output_type="latent"))
    assert latents.shape == LATENT_SHAPES[family]
    assert torch.isfinite(latents.float()).all()


def test_unknown_family():
    for fn in (build_pipeline, call_kwargs):
        with pytest.raises(ValueError, match="family must be one of"):
            fn("SD")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="family must be one of"):
        embed_prompt(build_pipeline("sd"), "sdxl")  # type: ignore[arg-type]
