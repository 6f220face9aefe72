"""Which components were dropped from an attached pipeline, and dropping them so that they are freed at once.

A boundary offers its actions the components dropped from the pipeline since the previous boundary
(:meth:`Components.take_left`) and those of them still alive (:meth:`Components.note`, weak
references: ``host_cache_release`` collects garbage fully only while one of them lives).
:meth:`Components.drop` takes components off the pipeline and removes the offloading hooks that
would keep them alive in a reference cycle until a full collection, and clears those diffusers
removed on its own since the component was first noted (weakly recorded then: under streams, the
lazy-prefetch hook and the execution trackers, removed by the first forward, still in cycles
that reach the component's layers).

Examples:
    >>> from ddo_hooks.testing.tiny_pipelines import build_pipeline
    >>> pipe = build_pipeline("sd")
    >>> components = Components(pipe)
    >>> components.drop(pipe, ("text_encoder",))
    >>> components.note(pipe), components.take_left()
    ({}, ('text_encoder',))
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import torch

from ddo_hooks.errors import InvalidArgumentError

__all__ = ["Components", "check_drop"]


def check_drop(pipeline: Any, names: tuple[object, ...], holder: Callable[[Any], str | None]) -> None:
    """Refuse what ``drop(*names)`` cannot drop from ``pipeline``: no name, a name that is no string or no component.

    Args:
        pipeline: The attached pipeline.
        names: What ``drop()`` was given.
        holder: The class name of another attached pipeline that holds a module, or ``None``.

    Raises:
        InvalidArgumentError: Saying what to pass instead, or that another attached pipeline holds the component.
    """
    owner = type(pipeline).__name__
    if not names:
        raise InvalidArgumentError("drop() needs at least one component name, e.g. drop('text_encoder')")
    wrong = next((name for name in names if not isinstance(name, str)), None)
    if wrong is not None:
        raise InvalidArgumentError(
            f"drop() takes component names as separate strings, e.g. drop('text_encoder', 'text_encoder_2'); "
            f"got {type(wrong).__name__} {wrong!r}"
            + (f" (unpack it: drop(*{wrong!r}))" if isinstance(wrong, (list, tuple)) else "")
        )
    components = pipeline.components
    unknown = [name for name in names if name not in components]
    if unknown:
        raise InvalidArgumentError(f"{owner} has no component {unknown[0]!r}; its components: {', '.join(components)}")
    for name in names:
        other = holder(components[name])
        if other is not None:
            raise InvalidArgumentError(
                f"{owner}.{name} is also a component of an attached {other} (from_pipe shares components): "
                "dropping it would strip the hooks that pipeline runs on; drop it there too, or detach that "
                "pipeline first"
            )


class Components:
    """The component bookkeeping of one attachment (thread-safe; holds components weakly).

    Args:
        pipeline: The pipeline, to note its components as they are now.
    """

    def __init__(self, pipeline: Any) -> None:
        self._lock = threading.Lock()
        self._known: dict[str, weakref.ref] = {}
        self._dropped: dict[str, weakref.ref] = {}
        self._left: set[str] = set()
        self._hooks: dict[str, list[weakref.ref]] = {}  # per component: its hooks when first noted
        self.note(pipeline)
        self._left.clear()

    def note(self, pipeline: Any | None) -> dict[str, weakref.ref]:
        """Note which components left ``pipeline`` since last noted; return those still alive."""
        with self._lock:
            if pipeline is not None:
                current = {name: m for name, m in pipeline.components.items() if isinstance(m, torch.nn.Module)}
                current_ids = {id(m) for m in current.values()}
                for name, ref in list(self._known.items()):
                    module = ref()
                    if module is not None and id(module) in current_ids:
                        continue
                    self._left.add(name)
                    del self._known[name]
                    if module is not None:
                        key, n = name, 2
                        while key in self._dropped and self._dropped[key]() is not None:
                            key, n = f"{name}#{n}", n + 1
                        self._dropped[key] = ref
                for name, module in current.items():
                    if name not in self._known or self._known[name]() is not module:
                        self._known[name] = weakref.ref(module)
                        self._hooks[name] = _hook_refs(module)
                for name in self._hooks.keys() - current.keys():
                    del self._hooks[name]
            self._dropped = {k: r for k, r in self._dropped.items() if r() is not None}
            return dict(self._dropped)

    def take_left(self) -> tuple[str, ...]:
        """The components that left since the previous call of this method, sorted."""
        with self._lock:
            left, self._left = tuple(sorted(self._left)), set()
            return left

    def forget(self, names: Iterable[str]) -> None:
        """Dropped components referenced elsewhere: do not collect fully for them again."""
        with self._lock:
            for name in names:
                self._dropped.pop(name, None)

    def drop(self, pipeline: Any, names: tuple[str, ...]) -> None:
        """Set each named component of ``pipeline`` to ``None`` and remove every hook it carries."""
        from ddo_hooks.hooks.mechanics import remove_every_hook  # imports diffusers' hook registry

        components = pipeline.components
        for name in names:
            module = components.pop(name)
            setattr(pipeline, name, None)
            with self._lock:
                noted = self._known.get(name)
                earlier = self._hooks.pop(name, []) if noted is not None and noted() is module else []
            if isinstance(module, torch.nn.Module):
                remove_every_hook(module, earlier=[hook for ref in earlier if (hook := ref()) is not None])
            del module
        with self._lock:
            self._left.update(names)


def _hook_refs(module: torch.nn.Module) -> list[weakref.ref]:
    """Weak references to the diffusers hooks ``module`` and its submodules carry now."""
    from ddo_hooks._compat import diffusers as diffusers_compat

    refs: list[weakref.ref] = []
    for sub in module.modules():
        registry = diffusers_compat.registry_of(sub)
        if registry is not None:
            refs.extend(weakref.ref(hook) for hook in registry.hooks.values())
    return refs
