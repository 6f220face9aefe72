"""Census of every pipeline class the installed diffusers exports, read from their ``__call__`` source.

For each exported class that subclasses ``DiffusionPipeline`` (names from ``dir(diffusers)`` and
``dir(diffusers.pipelines)``), the script parses the source of the ``__call__`` it resolves to
(not following ``super().__call__``) and of its ``__init__``, and records what ddo_hooks' signals
rely on: the progress bar, raw tqdm, ``maybe_free_model_hooks()`` and where it sits relative to
the first decode, the denoising loops, sub-pipelines, denoiser and decoder components and their
names, and ``check_inputs``. Classes that exist only as diffusers' dummy objects (an optional
dependency is missing) or fail to import are listed with the reason.

Usage::

    HF_HUB_OFFLINE=1 python scripts/pipeline_census.py            # writes the JSON, prints a summary
    python scripts/pipeline_census.py --json /tmp/census.json     # elsewhere

The JSON goes to ``ddo_hooks/testing/pipeline_census.json``: ``{"diffusers_version", "pipelines":
[...], "skipped": [...]}``, each pipeline object also carrying ``diffusers_version``.
"""

from __future__ import annotations

import argparse
import ast
import collections
import inspect
import json
import os
import re
import sys
import textwrap
import typing
import warnings
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_JSON = ROOT / "ddo_hooks" / "testing" / "pipeline_census.json"

# ddo_hooks' lists today (ddo_hooks/hooks/signals.py).
OUR_DENOISERS = ("transformer", "transformer_2", "unet", "prior")
OUR_DECODERS = ("vae", "movq", "vqvae")

DENOISER_NAME = re.compile(r"^(transformer|unet|prior|denoiser|model)(_\w+)?$", re.IGNORECASE)
NOT_A_DENOISER_NAME = re.compile(r"encoder|tokenizer|processor|projection", re.IGNORECASE)
DECODER_NAME = re.compile(r"^(vae|movq|vqvae|vqgan|vocoder|audio_vae|.*_vae$|.*vae_.*|.*vocoder.*)", re.IGNORECASE)
DENOISER_CLASS = re.compile(r"UNet|Transformer|Prior|DiffNeXt|DiT\b|DiTModel|Denoiser", re.IGNORECASE)
DECODER_CLASS = re.compile(r"VQ|Autoencoder|VAE|Vocoder|HifiGan|HiFiGAN|Oobleck|Decoder|Codec|Renderer", re.IGNORECASE)
NOT_A_MODEL_CLASS = re.compile(r"Scheduler|Tokenizer$|Processor|FeatureExtractor")
AUXILIARY_CLASS = re.compile(r"ControlNet|Adapter|Controlnet", re.IGNORECASE)
DECODE_ATTR = re.compile(r"(^|_)decode($|_)")  # decode, decode_latents, vae_decode_tiled; not decoder
NOT_A_DECODER_RECEIVER = re.compile(r"tokenizer|processor|text", re.IGNORECASE)


def _dotted(node: ast.AST) -> str:
    """``self.vae.decode`` for an attribute chain, ``?`` where it is not one."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return f"{_dotted(node.func)}(...)"
    if isinstance(node, ast.Subscript):
        return f"{_dotted(node.value)}[...]"
    return "?"


def _is_self_call(node: ast.AST, attr: str) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == attr
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "self"
    )


def _is_tqdm_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return (isinstance(func, ast.Name) and func.id in ("tqdm", "trange")) or (
        isinstance(func, ast.Attribute) and func.attr in ("tqdm", "trange")
    )


def _is_decode_call(node: ast.AST) -> bool:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return False
    if not DECODE_ATTR.search(node.func.attr):
        return False
    return not NOT_A_DECODER_RECEIVER.search(_dotted(node.func.value))


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}


def _ancestors(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> list[ast.AST]:
    found = []
    while node in parents:
        node = parents[node]
        found.append(node)
    return found


def _is_loop_iter(loop: ast.For, source: str) -> bool:
    """Whether a ``for`` loop walks timesteps (its iterable names them, a progress bar or tqdm)."""
    text = ast.get_source_segment(source, loop.iter) or ""
    return bool(re.search(r"timesteps|progress_bar\(|tqdm\(|step_matrix|sigmas", text))


def _progress_bar_use(call: ast.Call, parents: dict[ast.AST, ast.AST]) -> str:
    """``with``, ``for`` or ``other``: how a ``self.progress_bar(...)`` call is used."""
    node: ast.AST = call
    while node in parents:
        parent = parents[node]
        if isinstance(parent, ast.withitem) and parent.context_expr is node:
            return "with"
        if isinstance(parent, ast.For) and parent.iter is node:
            return "for"
        if (
            isinstance(parent, ast.Call)
            and isinstance(parent.func, ast.Name)
            and parent.func.id in ("enumerate", "zip")
        ):
            node = parent
            continue
        return "other"
    return "other"


def parse_function(func: Any) -> tuple[ast.AST, str]:
    """The AST node of ``func`` inside its parsed module file, and that file's text.

    Parsing the whole file (rather than ``inspect.getsource`` dedented) also copes with bodies
    whose continuation lines are indented less than the ``def``.
    """
    func = inspect.unwrap(func)
    path = inspect.getsourcefile(func)
    if path is None:
        raise OSError(f"no source file for {func!r}")
    source = Path(path).read_text(encoding="utf-8")
    _, start = inspect.getsourcelines(func)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == func.__name__:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            if first == start:
                return node, source
    raise OSError(f"{func.__qualname__} not found at line {start} of {path}")


def analyse_call(tree: ast.AST, source: str) -> dict[str, Any]:
    """Classify a ``__call__`` (its AST node inside the module source) as the census records it."""
    parents = _parents(tree)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    bars = [c for c in calls if _is_self_call(c, "progress_bar")]
    tqdms = [c for c in calls if _is_tqdm_call(c)]
    frees = sorted(c.lineno for c in calls if _is_self_call(c, "maybe_free_model_hooks"))
    decodes = sorted((c for c in calls if _is_decode_call(c)), key=lambda c: (c.lineno, c.col_offset))
    timestep_loops = [n for n in ast.walk(tree) if isinstance(n, ast.For) and _is_loop_iter(n, source)]
    loop_nodes = set(timestep_loops) | {a for b in bars for a in _ancestors(b, parents) if isinstance(a, ast.With)}

    def in_denoising_block(node: ast.AST) -> bool:
        return any(a in loop_nodes for a in _ancestors(node, parents))

    def in_outer_loop(node: ast.AST) -> bool:
        """Inside the body of a loop (not merely the iterable of the loop it starts)."""
        child = node
        while child in parents:
            parent = parents[child]
            if isinstance(parent, (ast.For, ast.While)) and child in (*parent.body, *parent.orelse):
                return True
            child = parent
        return False

    loop_starts = [*bars, *tqdms, *timestep_loops]
    first_decode = decodes[0].lineno if decodes else None
    if not frees:
        position = "absent"
    elif first_decode is None:
        position = "no_decode"
    elif frees[0] < first_decode:
        position = "before_decode" if frees[-1] < first_decode else "before_and_after_decode"
    else:
        position = "after_decode"
    uses = collections.Counter(_progress_bar_use(b, parents) for b in bars)
    return {
        "progress_bar_calls": len(bars),
        "progress_bar_uses": dict(sorted(uses.items())),
        "raw_tqdm": bool(tqdms),
        "timestep_loops": len(timestep_loops),
        "loop_inside_outer_loop": any(in_outer_loop(n) for n in loop_starts),
        "while_loops": sum(isinstance(n, ast.While) for n in ast.walk(tree)),
        "maybe_free_model_hooks_calls": len(frees),
        "maybe_free_model_hooks_position": position,
        "first_decode": _dotted(decodes[0].func) if decodes else None,
        "decode_calls": sorted({_dotted(c.func) for c in decodes}),
        "decode_inside_loop": any(in_denoising_block(c) for c in decodes),
        "decode_inside_steps": any(a in timestep_loops for c in decodes for a in _ancestors(c, parents)),
        "progress_bar_inside_outer_loop": any(in_outer_loop(b) for b in bars),
        "free_inside_loop": any(in_denoising_block(c) for c in calls if _is_self_call(c, "maybe_free_model_hooks")),
        "self_attribute_calls": sorted(
            {
                c.func.attr
                for c in calls
                if isinstance(c.func, ast.Attribute)
                and isinstance(c.func.value, ast.Name)
                and c.func.value.id == "self"
                and c.func.attr.endswith(("_pipe", "_pipeline"))
            }
        ),
    }


def _annotation_classes(annotation: Any, module_globals: dict[str, Any]) -> list[Any]:
    """The classes a parameter annotation names (``X | None``, ``Optional[X]``, strings resolved)."""
    if annotation is inspect.Parameter.empty:
        return []
    if isinstance(annotation, str):
        try:
            annotation = eval(annotation, module_globals)  # the library's own annotation text
        except Exception:
            return [annotation]
    args = typing.get_args(annotation)
    if args:
        return [cls for arg in args for cls in _annotation_classes(arg, module_globals)]
    return [annotation]


def _class_name(cls: Any) -> str:
    return cls if isinstance(cls, str) else getattr(cls, "__name__", repr(cls))


def _kind(name: str, classes: list[Any]) -> str | None:
    """``denoiser``, ``decoder``, ``auxiliary`` (in-loop helpers: controlnets, adapters), ``pipeline`` or None.

    By the annotated classes first (where diffusers keeps them, then their names), by the
    parameter name only when the annotation says nothing (``Any``).
    """
    from diffusers import DiffusionPipeline

    classes = [c for c in classes if not (isinstance(c, str) and NOT_A_MODEL_CLASS.search(c))]
    names = [_class_name(c) for c in classes]
    if any(NOT_A_MODEL_CLASS.search(n) for n in names):
        return None
    if any(isinstance(c, type) and issubclass(c, DiffusionPipeline) for c in classes):
        return "pipeline"
    module_paths = [getattr(c, "__module__", None) or "" for c in classes if not isinstance(c, str)]
    from_diffusers = [
        n
        for n, c in zip(names, classes, strict=True)
        if isinstance(c, str) or getattr(c, "__module__", "").startswith("diffusers")
    ]
    if any(p.startswith("diffusers.models.autoencoders") for p in module_paths):
        return "decoder"
    denoiser_modules = ("diffusers.models.transformers", "diffusers.models.unets")
    denoiser_typed = any(p.startswith(denoiser_modules) for p in module_paths)
    denoiser_named = bool(DENOISER_NAME.match(name)) and not NOT_A_DENOISER_NAME.search(name)
    if denoiser_named and (denoiser_typed or from_diffusers):
        return "denoiser"  # e.g. unet: UNet2DConditionModel | UNetControlNetXSModel, unet: UniDiffuserModel
    if any(p.startswith("diffusers.models.controlnet") for p in module_paths) or any(
        AUXILIARY_CLASS.search(n) for n in names
    ):
        return "auxiliary"
    if denoiser_typed:
        return "denoiser"
    if any(DENOISER_CLASS.search(n) for n in from_diffusers) and not any(DECODER_CLASS.search(n) for n in names):
        return "denoiser"
    if any(DECODER_CLASS.search(n) for n in names) and not any("Text" in n for n in names):
        return "decoder"
    if not classes or all(c in (Any, object) for c in classes):
        if denoiser_named:
            return "denoiser"
        if DECODER_NAME.match(name):
            return "decoder"
    return None


def analyse_components(cls: type) -> dict[str, Any]:
    """Components of ``cls`` from its ``__init__`` signature, by kind; sub-pipelines built in ``__init__``."""
    module_globals = vars(sys.modules[cls.__module__])
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:
        hints = {}
    kinds: dict[str, list[str]] = {"denoiser": [], "decoder": [], "auxiliary": [], "pipeline": []}
    types_of: dict[str, list[str]] = {}
    for pname, param in inspect.signature(cls.__init__).parameters.items():
        if pname == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        classes = _annotation_classes(hints.get(pname, param.annotation), module_globals)
        classes = [c for c in classes if c is not type(None)]
        kind = _kind(pname, classes)
        if kind is not None:
            kinds[kind].append(pname)
            types_of[pname] = [_class_name(c) for c in classes]
    built: list[str] = []
    try:
        init_tree, _ = parse_function(cls.__init__)
    except (OSError, TypeError):
        init_tree = None
    if init_tree is not None:
        for node in ast.walk(init_tree):
            if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
                continue
            callee = _dotted(node.value.func).split(".")[-1]
            for target in node.targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "self"
                    and (callee.endswith("Pipeline") or target.attr.endswith(("_pipe", "_pipeline")))
                ):
                    built.append(target.attr)
    return {
        "denoisers": kinds["denoiser"],
        "decoders": kinds["decoder"],
        "in_loop_auxiliary": kinds["auxiliary"],
        "component_pipelines": kinds["pipeline"],
        "sub_pipelines_built_in_init": sorted(set(built)),
        "component_types": {k: v for k, v in types_of.items()},
    }


def exported_pipeline_classes() -> tuple[dict[str, type], list[dict[str, str]]]:
    """``{name: class}`` of every exported DiffusionPipeline subclass, and the names skipped, with why."""
    import diffusers
    import diffusers.pipelines
    from diffusers import DiffusionPipeline

    names = sorted({*dir(diffusers), *dir(diffusers.pipelines)})
    found: dict[str, type] = {}
    skipped: list[dict[str, str]] = []
    for name in names:
        if name.startswith("_") or not name[0].isupper():
            continue
        for namespace in (diffusers, diffusers.pipelines):
            try:
                obj = getattr(namespace, name)
            except AttributeError:
                continue
            except Exception as e:  # an optional dependency breaks the import
                skipped.append({"class": name, "reason": f"import failed: {type(e).__name__}: {e}"[:300]})
                break
            if not isinstance(obj, type):
                break
            if type(obj).__name__ == "DummyObject":
                if "Pipeline" in name:
                    backends = getattr(obj, "_backends", [])
                    missing = [b for b in backends if not _backend_available(b)]
                    skipped.append({"class": name, "reason": f"dummy object: needs {', '.join(missing or backends)}"})
                break
            if issubclass(obj, DiffusionPipeline) and obj is not DiffusionPipeline:
                found[name] = obj
            break
    return found, sorted({s["class"]: s for s in skipped}.values(), key=lambda s: s["class"])


def _backend_available(backend: str) -> bool:
    from diffusers.utils import import_utils

    check = getattr(import_utils, f"is_{backend}_available", None)
    return bool(check()) if check is not None else True


def classify(name: str, cls: type, version: str) -> dict[str, Any]:
    """One census entry."""
    owner = next((k for k in cls.__mro__ if "__call__" in vars(k)), None)
    entry: dict[str, Any] = {
        "class": name,
        "module": cls.__module__,
        "diffusers_version": version,
        "call_defined_in": None if owner is None else f"{owner.__module__}.{owner.__qualname__}",
        "has_check_inputs": callable(getattr(cls, "check_inputs", None)),
        "overrides_progress_bar": cls.progress_bar is not _base_progress_bar(),
    }
    if owner is None or owner.__module__ == "builtins":
        entry["call"] = None
        entry["call_error"] = "no __call__"
    else:
        try:
            entry["call"] = analyse_call(*parse_function(vars(owner)["__call__"]))
        except (OSError, TypeError, SyntaxError) as e:
            entry["call"] = None
            entry["call_error"] = f"{type(e).__name__}: {e}"
    entry.update(analyse_components(cls))
    call = entry.get("call") or {}
    entry["sub_pipelines"] = sorted(
        {*entry["component_pipelines"], *entry["sub_pipelines_built_in_init"], *call.get("self_attribute_calls", [])}
    )
    entry["unusual_denoiser_names"] = [n for n in entry["denoisers"] if n not in OUR_DENOISERS]
    entry["unusual_decoder_names"] = [n for n in entry["decoders"] if n not in OUR_DECODERS]
    return entry


def _base_progress_bar() -> Any:
    from diffusers import DiffusionPipeline

    return DiffusionPipeline.progress_bar


def summarize(entries: list[dict[str, Any]], skipped: list[dict[str, str]]) -> str:
    """The counts per category, and the lists worth reading."""
    lines = []
    n = len(entries)

    def count(label: str, pred: Any) -> list[str]:
        hits = [e["class"] for e in entries if pred(e)]
        lines.append(f"  {label:<58} {len(hits):>4}")
        return hits

    call = lambda e: e.get("call") or {}  # noqa: E731
    lines.append(f"pipeline classes analysed: {n}   skipped: {len(skipped)}")
    lines.append("loop signal:")
    count("self.progress_bar used as `with`", lambda e: call(e).get("progress_bar_uses", {}).get("with"))
    count("self.progress_bar used as `for` iterable", lambda e: call(e).get("progress_bar_uses", {}).get("for"))
    other_bar = count("self.progress_bar used otherwise", lambda e: call(e).get("progress_bar_uses", {}).get("other"))
    tqdm = count("raw tqdm in __call__", lambda e: call(e).get("raw_tqdm"))
    no_bar = count(
        "no progress bar and no tqdm in __call__",
        lambda e: e.get("call") and not call(e)["progress_bar_calls"] and not call(e)["raw_tqdm"],
    )
    own_bar = count("class overrides progress_bar", lambda e: e["overrides_progress_bar"])
    multi = count("more than one progress_bar call in __call__", lambda e: call(e).get("progress_bar_calls", 0) > 1)
    nested = count("denoising loop inside an outer loop", lambda e: call(e).get("loop_inside_outer_loop"))
    dec_in = count("decode call inside the loop/progress bar block", lambda e: call(e).get("decode_inside_loop"))
    dec_steps = count("decode call inside the steps (the timestep loop)", lambda e: call(e).get("decode_inside_steps"))
    bar_chunks = count(
        "progress bar inside an outer loop (a bar per chunk)", lambda e: call(e).get("progress_bar_inside_outer_loop")
    )
    free_in = count(
        "maybe_free_model_hooks inside the loop/progress bar block", lambda e: call(e).get("free_inside_loop")
    )
    lines.append("call end signal (maybe_free_model_hooks):")
    positions = collections.Counter(call(e).get("maybe_free_model_hooks_position", "no __call__") for e in entries)
    for key, value in sorted(positions.items()):
        lines.append(f"  {key:<58} {value:>4}")
    lines.append("other:")
    no_check = count("no check_inputs", lambda e: not e["has_check_inputs"])
    subs = count("calls or holds sub-pipelines", lambda e: e["sub_pipelines"])
    no_den = count("no denoiser-like component found", lambda e: not e["denoisers"])
    no_dec = count("no decoder-like component found", lambda e: not e["decoders"])
    unusual = [e for e in entries if e["unusual_denoiser_names"] or e["unusual_decoder_names"]]
    lines.append(f"  {'denoiser or decoder names outside our lists':<58} {len(unusual):>4}")

    def listing(title: str, names: list[str]) -> None:
        lines.append(f"\n{title} ({len(names)}):")
        lines.extend(textwrap.wrap(", ".join(names), 110, initial_indent="  ", subsequent_indent="  ") or ["  -"])

    listing("raw tqdm", tqdm)
    listing("progress bar used neither as `with` nor `for`", other_bar)
    listing("no progress bar, no tqdm", no_bar)
    listing("override progress_bar", own_bar)
    listing("more than one progress_bar call", multi)
    listing("loop inside an outer loop", nested)
    listing("decode inside the loop block", dec_in)
    listing("decode inside the steps", dec_steps)
    listing("a progress bar per chunk", bar_chunks)
    listing("maybe_free_model_hooks inside the loop block", free_in)
    listing(
        "maybe_free_model_hooks before the first decode",
        [
            e["class"]
            for e in entries
            if call(e).get("maybe_free_model_hooks_position") in ("before_decode", "before_and_after_decode")
        ],
    )
    listing(
        "never call maybe_free_model_hooks",
        [e["class"] for e in entries if call(e).get("maybe_free_model_hooks_position") == "absent"],
    )
    listing("no check_inputs (no call-start signal today)", no_check)
    listing("sub-pipelines", [f"{e['class']}[{','.join(e['sub_pipelines'])}]" for e in entries if e["class"] in subs])
    listing("no denoiser-like component", no_den)
    listing("no decoder-like component", no_dec)
    lines.append(f"\ndenoiser/decoder component names outside {OUR_DENOISERS} / {OUR_DECODERS}:")
    by_name: dict[str, list[str]] = collections.defaultdict(list)
    for e in unusual:
        for comp in e["unusual_denoiser_names"]:
            by_name[f"denoiser {comp} ({'/'.join(e['component_types'].get(comp, []))})"].append(e["class"])
        for comp in e["unusual_decoder_names"]:
            by_name[f"decoder  {comp} ({'/'.join(e['component_types'].get(comp, []))})"].append(e["class"])
    for key in sorted(by_name):
        lines.append(f"  {key}:")
        lines.extend(textwrap.wrap(", ".join(by_name[key]), 106, initial_indent="      ", subsequent_indent="      "))
    if skipped:
        lines.append("\nskipped:")
        lines.extend(f"  {s['class']}: {s['reason']}" for s in skipped)
    return "\n".join(lines)


def _dumps(document: dict[str, Any]) -> str:
    """The document as JSON with one line per pipeline (and per skipped class): compact, diffable."""
    rows = lambda items: ",\n".join(f"  {json.dumps(item)}" for item in items)  # noqa: E731
    return (
        f'{{\n "diffusers_version": {json.dumps(document["diffusers_version"])},\n'
        f' "pipelines": [\n{rows(document["pipelines"])}\n ],\n'
        f' "skipped": [\n{rows(document["skipped"])}\n ]\n}}\n'
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"where to write (default {DEFAULT_JSON})")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    import diffusers

    classes, skipped = exported_pipeline_classes()
    entries = [classify(name, cls, diffusers.__version__) for name, cls in sorted(classes.items())]
    document = {"diffusers_version": diffusers.__version__, "pipelines": entries, "skipped": skipped}
    args.json.write_text(_dumps(document), encoding="utf-8")
    print(summarize(entries, skipped))
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
