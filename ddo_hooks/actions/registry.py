"""Actions by name: the built-in ones (:data:`~ddo_hooks.actions.BUILT_IN`) and the ones users plug in.

Register your own with :func:`register_action` (a decorator, or called with the function), or from
another package through the ``ddo_hooks.actions`` entry-point group (``my_action = "my_pkg.module:function"``,
or a :class:`~ddo_hooks.actions.contract.RegisteredAction`). The YAML policy names the actions per
boundary. An action receives a :class:`~ddo_hooks.actions.contract.BoundaryContext` and returns a report
or ``None``; the same refusal rules apply to every action (it never runs while loading or denoising).
An action registered with an options model (``options=``) has its options validated where a policy
loads, with the located messages a built-in's get (or at attach, when it was registered after the
policy loaded).

The functions here act on :data:`REGISTRY`, the process's registry; an :class:`ActionRegistry` of your own
(``attach(pipe, policy, registry=...)``) keeps a plugin's actions to the attachments given it, and a test's
to the test.

Examples:
    >>> from ddo_hooks import register_action, unregister_action
    >>> @register_action("count_calls")
    ... def count_calls(ctx):
    ...     return ctx.action_report("executed", data={"call": ctx.call_index})
    >>> "count_calls" in available_actions()
    True
    >>> unregister_action("count_calls")
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import Any, TypedDict, TypeVar, Unpack, overload

from ddo_hooks import actions
from ddo_hooks.actions.contract import ActionFunction, ActionOptions, RegisteredAction
from ddo_hooks.boundaries import ACTION_NAME_PATTERN, ACTION_NAME_RULE
from ddo_hooks.errors import InvalidArgumentError, PolicyError
from ddo_hooks.reports.base import RouteReport

__all__ = [
    "ENTRY_POINT_GROUP",
    "REGISTRY",
    "ActionRegistry",
    "Declaration",
    "available_actions",
    "options_model",
    "register_action",
    "registered",
    "resolve_action",
    "unregister_action",
    "validated_options",
]

ENTRY_POINT_GROUP = "ddo_hooks.actions"
"""The entry-point group of the actions other packages provide."""

_NAME_RE = re.compile(ACTION_NAME_PATTERN)
F = TypeVar("F", bound=ActionFunction)


def registered(name: str) -> RegisteredAction[Any] | None:
    """The action registered under ``name`` in :data:`REGISTRY` (a user's first, then a built-in), or ``None``."""
    return REGISTRY.registered(name)


def options_model(name: str) -> type[ActionOptions] | None:
    """The options model of the action registered under ``name`` now; ``None`` for none, or no such action yet.

    Examples:
        >>> options_model("host_cache_release").__name__, options_model("my_pkg.flush")
        ('HostCacheReleaseOptions', None)
    """
    action = registered(name)
    return None if action is None else action.options


def validated_options(name: str, options: Mapping[str, Any]) -> ActionOptions | None:
    """The options of the action ``name`` as its model holds them; ``None`` for an action without a model (yet).

    Raises:
        PydanticCustomError: As :meth:`~ddo_hooks.actions.contract.ActionOptions.from_options`.

    Examples:
        >>> validated_options("host_cache_release", {"collect": "full"}).collect
        'full'
        >>> validated_options("my_pkg.flush", {"label": "x"}) is None  # not registered: as written
        True
    """
    model = options_model(name)
    return None if model is None else model.from_options(name, options)


class Declaration(TypedDict, total=False):
    """The rest of an action's declaration, as :class:`~ddo_hooks.actions.contract.RegisteredAction` takes it."""

    component_prefix: str
    """Prefix of the tracker component (default: the action's name)."""
    options: type[ActionOptions] | None
    """The model of its options, a subclass of :class:`~ddo_hooks.actions.contract.ActionOptions`: a policy
    that names the action then has its options validated where it loads (or at attach, for a policy loaded
    before), with located messages, and the action receives an instance of it as ``ctx.options``. ``None``
    (the default): the mapping the policy writes."""
    defaults: Callable[[Any], ActionOptions] | None
    """Gives the policy's section whose settings are the defaults of its options at every boundary (with
    ``options``; ``host_cache_release``'s gives ``release``)."""
    check: Callable[..., None] | None
    """What :func:`~ddo_hooks.attach` checks of it before installing anything."""
    on_attach: Callable[..., None] | None
    """Its step at attach; undone, with the steps before it, where a later one raises."""
    on_detach: Callable[[Any], tuple[str, RouteReport] | None] | None
    """Its step at detach, the inverse of ``on_attach``."""
    before_call: Callable[[Any], None] | None
    """Its check at the start of each call, of what it made."""
    routes: tuple[str, ...]
    """The routes of its reports (default: ``boundary_action``)."""


@overload
def register_action(
    name: str, function: None = None, *, replace: bool = False, **declaration: Unpack[Declaration]
) -> Callable[[F], F]: ...


@overload
def register_action(name: str, function: F, *, replace: bool = False, **declaration: Unpack[Declaration]) -> F: ...


def register_action(
    name: str, function: F | None = None, *, replace: bool = False, **declaration: Unpack[Declaration]
) -> Callable[[F], F] | F:
    """Register a boundary action under ``name``: ``@register_action(name)``, or ``register_action(name, function)``.

    Args:
        name: Lowercase letters, digits, ``_ . -``, starting with a letter.
        function: The action; without it, a decorator that registers the function it decorates.
        replace: Allow replacing an action already registered under ``name``; a built-in replaced so
            comes back whole with :func:`unregister_action` (registering its function again would
            lose its declaration: its options model and defaults).
        declaration: The rest of its declaration, each keyword a field of :class:`Declaration`:
            ``component_prefix``, ``options`` (its options model: a policy that names the action then has
            its options validated where it loads, and the action receives an instance of it), ``defaults``,
            ``check``, ``on_attach``, ``on_detach``, ``before_call`` and ``routes``.

    Raises:
        InvalidArgumentError: A malformed name, the name is taken and ``replace`` is False, the action is
            not callable, or ``options`` is not an options model (when the action is registered).

    Examples:
        >>> from ddo_hooks.actions.contract import ActionOptions, BoundaryContext
        >>> class Depth(ActionOptions):
        ...     depth: int = 1
        >>> def flush(ctx: BoundaryContext[Depth]) -> None:
        ...     print(ctx.options.depth)
        >>> register_action("my_pkg.flush", flush, options=Depth) is flush
        True
        >>> from ddo_hooks import HookPolicy
        >>> HookPolicy.from_mapping({"version": 1, "boundaries": {"after_call": {"actions": [
        ...     {"name": "my_pkg.flush", "options": {"depth": "deep"}}]}}})
        Traceback (most recent call last):
        ...
        ddo_hooks.errors.PolicyError: <mapping>: ...options.depth: expected an integer, got 'deep'
        >>> unregister_action("my_pkg.flush")
    """
    return REGISTRY.register(name, function, replace=replace, **declaration)


def unregister_action(name: str) -> None:
    """Remove a registered action; for a replaced built-in, the replacement, so the built-in is back whole.

    A built-in that ``register_action(name, ..., replace=True)`` replaced comes back with its whole
    declaration: its options model, its ``release`` defaults, its steps at attach and detach.

    Raises:
        InvalidArgumentError: No action is registered under ``name``, or it is a built-in that nothing replaced.
    """
    REGISTRY.unregister(name)


def _entry_point_names() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def available_actions() -> tuple[str, ...]:
    """Every action name a policy can use: the built-in ones, registered ones and installed entry points."""
    return REGISTRY.available()


def resolve_action(name: str, *, where: str = "") -> RegisteredAction[Any]:
    """Find the action a policy names in :data:`REGISTRY`: as :meth:`ActionRegistry.resolve`.

    Raises:
        PolicyError: No such action; the message suggests the closest names.
    """
    return REGISTRY.resolve(name, where=where)


class ActionRegistry:
    """Actions by name: the built-in ones, those registered here (over them), then the installed entry points.

    Examples:
        >>> mine = ActionRegistry()
        >>> _ = mine.register("my_pkg.count", lambda ctx: None)
        >>> mine.registered("my_pkg.count").name, registered("my_pkg.count")  # not in the process's
        ('my_pkg.count', None)
        >>> mine.resolve("malloc_trim").name  # the built-in ones are in every registry
        'malloc_trim'
    """

    def __init__(self) -> None:
        self._actions: dict[str, RegisteredAction[Any]] = {}  # registered here (or built-ins replaced here)

    def __copy__(self) -> ActionRegistry:
        """The registry itself: it is shared, so a copy of a policy, deep or not, finds its actions where it did."""
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> ActionRegistry:
        """The registry itself, as :meth:`__copy__`."""
        return self

    def registered(self, name: str) -> RegisteredAction[Any] | None:
        """The action registered under ``name`` (here first, then a built-in), or ``None``; entry points aside."""
        return self._actions.get(name) or actions.by_name().get(name)

    def register(
        self, name: str, function: F | None = None, *, replace: bool = False, **declaration: Unpack[Declaration]
    ) -> Callable[[F], F] | F:
        """:func:`register_action`, in this registry.

        Raises:
            InvalidArgumentError: As :func:`register_action`.
        """
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise InvalidArgumentError(f"{name!r} is not an action name; use {ACTION_NAME_RULE}")
        if self.registered(name) is not None and not replace:
            raise InvalidArgumentError(
                f"an action named {name!r} is already registered; pass replace=True to replace it"
            )
        unknown = sorted(set(declaration) - set(Declaration.__annotations__))
        if unknown:
            takes = ", ".join(Declaration.__annotations__)
            raise InvalidArgumentError(f"register_action() takes no {unknown[0]!r}; it takes replace, {takes}")

        def decorator(run: F) -> F:
            if not callable(run):
                raise InvalidArgumentError(f"action {name!r} must be callable, got {type(run).__name__}")
            fields: Declaration = {**declaration, "component_prefix": declaration.get("component_prefix") or name}
            self._actions[name] = RegisteredAction(name, run, **fields)
            return run

        return decorator if function is None else decorator(function)

    def unregister(self, name: str) -> None:
        """:func:`unregister_action`, in this registry.

        Raises:
            InvalidArgumentError: As :func:`unregister_action`.
        """
        if name in self._actions:
            del self._actions[name]
            return
        if name in actions.names():
            raise InvalidArgumentError(
                f"the built-in action {name!r} cannot be unregistered (nothing replaces it now; unregister_action "
                "restores a built-in that register_action replaced); leave it out of the policy instead"
            )
        known = sorted({*self._actions, *actions.names()})
        raise InvalidArgumentError(f"no action named {name!r} is registered (registered: {known})")

    def available(self) -> tuple[str, ...]:
        """Every action name a policy can use here: the built-in ones, registered ones and installed entry points."""
        return tuple(sorted({*actions.names(), *self._actions, *_entry_point_names()}))

    def resolve(self, name: str, *, where: str = "") -> RegisteredAction[Any]:
        """Find the action a policy names: this registry first (the built-in ones included), then the entry points.

        An action found through the ``ddo_hooks.actions`` entry-point group is registered here once loaded.

        Args:
            name: The action name.
            where: The policy position (``file:line:col``) for the error message.

        Raises:
            PolicyError: No such action; the message suggests the closest names.
        """
        found = self.registered(name)
        if found is not None:
            return found
        eps = _entry_point_names()
        if name in eps:
            try:
                loaded = eps[name].load()
            except Exception as e:
                message = f"{where}: action {name!r}: loading entry point {eps[name].value!r} failed: {e}"
                raise PolicyError(message) from e
            if isinstance(loaded, RegisteredAction):
                action = loaded
            elif callable(loaded):
                action = RegisteredAction(name, loaded, name)
            else:
                raise PolicyError(f"{where}: entry point {eps[name].value!r} for action {name!r} is not callable")
            return self._actions.setdefault(name, action)
        known = self.available()
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        how = "@ddo_hooks.register_action" if self is REGISTRY else "this registry's register"
        raise PolicyError(
            f"{where}: unknown action {name!r}; {hint}known actions: {', '.join(known)}. Register it with "
            f"{how}({name!r}) or the {ENTRY_POINT_GROUP!r} entry-point group before attaching"
        )


REGISTRY = ActionRegistry()
"""The process's registry: what :func:`register_action` writes, and what policies and :func:`~ddo_hooks.attach` read."""


def chosen_registry(registry: ActionRegistry | None) -> ActionRegistry:
    """``registry``, or the process's :data:`REGISTRY` for ``None``: what a policy and :func:`~ddo_hooks.attach` take.

    Raises:
        InvalidArgumentError: Not an :class:`ActionRegistry` or ``None``.

    Examples:
        >>> chosen_registry(None) is REGISTRY
        True
    """
    if registry is None:
        return REGISTRY
    if not isinstance(registry, ActionRegistry):
        raise InvalidArgumentError(
            f"registry must be a ddo_hooks.actions.registry.ActionRegistry or None, got {type(registry).__name__}"
        )
    return registry
