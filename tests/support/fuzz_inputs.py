"""Inputs for fuzzing, shared by tests/test_fuzz.py (hypothesis) and scripts/fuzz_campaign.py (a seeded loop)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
SEED_POLICIES = [path.read_text(encoding="utf-8") for path in sorted((ROOT / "examples").glob("*.yaml"))] + [
    (ROOT / "ddo_hooks" / "policy" / "presets" / "default.yaml").read_text(encoding="utf-8")
]
PYTHON_TAGS = [
    "!!python/object/apply:fuzz_sentinel.fire []",
    "!!python/object/new:fuzz_sentinel.Thing []",
    "!!python/object:fuzz_sentinel.Thing {a: 1}",
    "!!python/name:fuzz_sentinel.fire ''",
    "!!python/module:fuzz_sentinel ''",
    "!!python/tuple [1, 2]",
    "!!python/str x",
]
TAGS = [
    "!!timestamp foo", "!!bool maybe", "!!int ''", "!!float ''", "!!int '-'", "!!binary a", "!!binary aGk=",
    "!!set {a, b}", "!!omap [a: 1]", "!!pairs [a: 1]", "!!str 5", "!!null x", "!custom {}", "!!merge x", "2020-13-45",
    "&a [*a]", "*nowhere", "<<: {}", ".nan", ".inf", "~", "yes", "0x1f", "0o17", "1_000", "1:20", "9" * 5000,
]  # fmt: skip
PUNCTUATION = [*list("version: 1\n-[]{},&*!|>'\"%@`#?~abc\t \\"), ": ", "\n  ", "- ", "---\n", "...\n"]
KEYS = [
    "version", "enabled", "device", "report_sink", "release", "collect", "min_releasable_bytes", "boundaries",
    "before_transformer", "before_vae", "after_call", "actions", "name", "options", "auxiliary_sources",
    "max_copy_bytes", "bogus", "",
]  # fmt: skip
SCALARS: list[Any] = [
    None, True, False, 0, 1, -1, 2**70, 1.5, float("inf"), "cuda", "cuda:1", "16MiB", "-1KiB", "full", "ful",
    "host_cache_release", "~nobody/r.jsonl", "r\0.jsonl", "x" * 200, "", "yes",
]  # fmt: skip


def random_data(rng: random.Random, depth: int = 0) -> Any:
    """A random tree of policy keys and scalars (as a YAML document would give)."""
    roll = rng.random()
    if depth > 5 or roll < 0.45:
        return rng.choice(SCALARS)
    if roll < 0.6:
        return [random_data(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(KEYS): random_data(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def random_policy_data(rng: random.Random) -> Any:
    data = random_data(rng)
    return {"version": 1, **data} if isinstance(data, dict) and rng.random() < 0.8 else data


def mutate_text(rng: random.Random, text: str, edits: int = 4) -> str:
    """``text`` with a few random edits: deletions, insertions of YAML punctuation, tags and duplicated slices."""
    for _ in range(rng.randint(1, edits)):
        at = rng.randint(0, len(text))
        roll = rng.random()
        if roll < 0.3 and text:
            text = text[:at] + text[at + rng.randint(1, 8) :]
        elif roll < 0.6:
            text = text[:at] + rng.choice(PUNCTUATION) + text[at:]
        elif roll < 0.8:
            text = text[:at] + " " + rng.choice(TAGS + PYTHON_TAGS) + text[at:]
        else:
            start = rng.randint(0, len(text))
            text = text[:at] + text[start : start + rng.randint(1, 40)] + text[at:]
    return text


def random_policy_text(rng: random.Random) -> str:
    """One policy document to try: mutated examples, dumped random data, punctuation soup or tagged values."""
    roll = rng.random()
    if roll < 0.5:
        return mutate_text(rng, rng.choice(SEED_POLICIES))
    if roll < 0.75:
        try:
            return yaml.safe_dump(random_policy_data(rng), allow_unicode=True)
        except yaml.YAMLError:
            return "version: 1\n"
    if roll < 0.9:
        return "".join(rng.choice(PUNCTUATION) for _ in range(rng.randint(0, 60)))
    key = rng.choice(["release", "device", "report_sink", "enabled", "boundaries", "x"])
    return f"version: 1\n{key}: {rng.choice(TAGS + PYTHON_TAGS)}\n"


def mutate_json_text(rng: random.Random, document: Any) -> str:
    """A report document as JSON text with a few character-level edits."""
    text = json.dumps(document)
    for _ in range(rng.randint(1, 3)):
        at = rng.randint(0, len(text))
        roll = rng.random()
        if roll < 0.4:
            text = text[:at] + text[at + rng.randint(1, 6) :]
        else:
            text = (
                text[:at]
                + rng.choice([*list('{}[],:"0-.eE\\ntruefalsenull '), "NaN", "Infinity", "\\ud800"])
                + text[at:]
            )
    return text
