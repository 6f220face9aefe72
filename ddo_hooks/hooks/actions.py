"""Boundary actions: what runs at a phase boundary, and how users plug in their own.

The built-in action ``host_cache_release`` calls the release core. Register your own with
the decorator, or from another package through the ``ddo_hooks.actions`` entry-point group
(``my_action = "my_pkg.module:function"``). The YAML policy names the actions per boundary.
An action receives a :class:`BoundaryContext` and returns a DDO report or ``None``; the
same refusal rules apply to every action (it never runs while loading or denoising).

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
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from pydantic import ValidationError

from ddo_hooks.boundaries import ACTION_NAME_PATTERN, BOUNDARIES, component_name
from ddo_hooks.errors import InvalidArgumentError, PolicyError, ReportError
from ddo_hooks.hooks.builtin_actions import BUILT_IN
from ddo_hooks.policy.builtins import BUILT_IN_ACTIONS
from ddo_hooks.reports.base import describe_errors
from ddo_hooks.reports.boundary import ActionReport, ActionResult, ActionResultSetup
from ddo_hooks.reports.parse import ANY_REPORT_TYPES

if TYPE_CHECKING:
    from ddo_hooks.policy.model import HookPolicy
    from ddo_hooks.policy.parts import ResolvedAction
    from ddo_hooks.reports.tracker import MetricsTracker

__all__ = [
    "ENTRY_POINT_GROUP",
    "BoundaryContext",
    "RegisteredAction",
    "available_actions",
    "bind_actions",
    "register_action",
    "resolve_action",
    "unregister_action",
]

ENTRY_POINT_GROUP = "ddo_hooks.actions"
_NAME_RE = re.compile(ACTION_NAME_PATTERN)


@dataclass(frozen=True)
class BoundaryContext:
    """What an action gets when its boundary fires.

    Attributes:
        pipeline: The diffusers pipeline the attachment is on.
        boundary: ``before_transformer``, ``before_vae`` or ``after_call``.
        action: The name of the action being run.
        call_index: 1 for the first pipeline call seen by the attachment, then 2, ...
        device: The policy's CUDA device (``"cuda"`` or ``"cuda:N"``).
        tracker: The attachment's metrics tracker.
        policy: The attached policy.
        options: This action's ``options`` from the policy: for an action of your own, the
            mapping the policy writes (a copy; empty when it writes none). A built-in action
            receives the model of its options instead
            (:data:`~ddo_hooks.policy.builtins.BUILT_IN_OPTIONS`), read by attribute: the
            built-in ``host_cache_release`` gets the ``release`` settings with this boundary's
            overrides (``ctx.options.collect``).
        dropped: Components dropped from the pipeline that should be dead by now, by name
            (weak references; the built-in action collects garbage fully only if one lives).
        dropped_names: The components dropped from the pipeline since the previous boundary of
            this attachment, alive or not (``left`` until 0.1; the old name warns, and goes in 0.2).
        done: The components whose work in this call is done, in the order they ran: those that
            ran a forward before its ``before_transformer`` was due (encoders, image encoders,
            priors); empty before then, for a host request, and in a call without a final loop.
        state: A dictionary this action keeps across the boundaries of this attachment (the
            built-in release keeps its last allocator snapshot there).
    """

    pipeline: Any
    boundary: str
    action: str
    call_index: int
    device: str
    tracker: MetricsTracker
    policy: HookPolicy
    options: Any = field(default_factory=dict)
    dropped: Mapping[str, weakref.ref] = field(default_factory=dict)
    dropped_names: tuple[str, ...] = ()
    done: tuple[str, ...] = ()
    state: dict[str, Any] = field(default_factory=dict, repr=False)
    on_survivors: Callable[[Iterable[str]], None] | None = field(default=None, repr=False)
    holder: Callable[[Any], str | None] | None = field(default=None, repr=False)

    @property
    def left(self) -> tuple[str, ...]:
        """The old name of :attr:`dropped_names` ("dropped" is the one word for a component that left)."""
        from ddo_hooks._moved import warn_renamed

        warn_renamed("BoundaryContext.left", "BoundaryContext.dropped_names")
        return self.dropped_names

    def held_elsewhere(self, module: Any) -> str | None:
        """The class of another attached pipeline that holds ``module`` as a component, or ``None``."""
        return None if self.holder is None else self.holder(module)

    def note_survivors(self, names: Iterable[str]) -> None:
        """Say which ``dropped`` components outlived a full collection: something else holds them.

        The attachment then stops expecting them to be freed, so later boundaries do not
        collect fully for them again.
        """
        if self.on_survivors is not None:
            self.on_survivors(names)

    def action_report(self, status: Literal["executed", "noop"], *, detail: str = "", data: Any = None) -> ActionReport:
        """Build a validated ``boundary_action`` report for this action at this boundary.

        Args:
            status: ``"executed"`` or ``"noop"``.
            detail: A sentence for people.
            data: A dict of JSON data (str keys; numbers finite), or ``None`` for none.

        Raises:
            InvalidArgumentError: ``status``, ``detail`` or ``data`` is not valid (e.g. data that
                is not JSON: a set, NaN); the message names the action and the field.
        """
        fields = {"status": status, "detail": detail, "data": {} if data is None else data}
        try:
            result = ActionResult(action=self.action, boundary=self.boundary, **fields)
            return ActionReport(setup=ActionResultSetup(boundary_action=result))
        except (ReportError, ValidationError) as e:
            cause = e.__cause__ if isinstance(e, ReportError) else e
            problems = describe_errors(cause) if isinstance(cause, ValidationError) else str(e)
            raise InvalidArgumentError(
                f"action {self.action!r} at {self.boundary}: its report is not valid ({problems}); "
                "pass status 'executed' or 'noop', a str detail and JSON data (a dict of str keys to dicts, lists, "
                "str, finite numbers, bools and None)"
            ) from e


ActionFunction = Callable[[BoundaryContext], Any]


@dataclass(frozen=True)
class RegisteredAction:
    """An action known by name.

    Attributes:
        name: The name policies use.
        run: The function called with a :class:`BoundaryContext`.
        component_prefix: Reports are recorded under ``f"{component_prefix}_{boundary}"``.
        check: What :func:`~ddo_hooks.attach` checks of the action before installing anything,
            given the pipeline, the policy and the action as the policy resolves it
            (:class:`~ddo_hooks.policy.parts.ResolvedAction`); it raises to refuse the attach.
            ``None`` (the default): nothing.
    """

    name: str
    run: ActionFunction
    component_prefix: str
    check: Callable[[Any, HookPolicy, ResolvedAction], None] | None = None

    def component(self, boundary: str) -> str:
        """The tracker component for this action at ``boundary``."""
        return component_name(self.component_prefix, boundary)

    def __call__(self, ctx: BoundaryContext) -> Any:
        """Run the action and check that it returned a DDO report (of either shape) or ``None``."""
        report = self.run(ctx)
        if report is not None and not isinstance(report, ANY_REPORT_TYPES):
            raise InvalidArgumentError(
                f"action {self.name!r} returned {type(report).__name__}; an action returns a DDO report "
                "(e.g. ctx.action_report('executed', data={...})) or None"
            )
        return report


_REGISTRY: dict[str, RegisteredAction] = {
    name: RegisteredAction(name, entry.run, entry.component_prefix, entry.check) for name, entry in BUILT_IN.items()
}


def register_action(
    name: str, *, component_prefix: str | None = None, replace: bool = False
) -> Callable[[ActionFunction], ActionFunction]:
    """Register a boundary action under ``name`` (a decorator).

    Args:
        name: Lowercase letters, digits, ``_ . -``, starting with a letter.
        component_prefix: Prefix of the tracker component (default: ``name``).
        replace: Allow replacing an action already registered under ``name``.

    Raises:
        InvalidArgumentError: A malformed name, or the name is taken and ``replace`` is False.
    """
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise InvalidArgumentError(f"action name {name!r} must match {_NAME_RE.pattern}")
    if name in _REGISTRY and not replace:
        raise InvalidArgumentError(f"an action named {name!r} is already registered; pass replace=True to replace it")

    def decorator(function: ActionFunction) -> ActionFunction:
        if not callable(function):
            raise InvalidArgumentError(f"action {name!r} must be callable, got {type(function).__name__}")
        _REGISTRY[name] = RegisteredAction(name, function, component_prefix or name)
        return function

    return decorator


def unregister_action(name: str) -> None:
    """Remove a registered action.

    Raises:
        InvalidArgumentError: No action is registered under ``name`` (or it is built in).
    """
    if name in BUILT_IN_ACTIONS:
        raise InvalidArgumentError(f"the built-in action {name!r} cannot be unregistered")
    if name not in _REGISTRY:
        raise InvalidArgumentError(f"no action named {name!r} is registered (registered: {sorted(_REGISTRY)})")
    del _REGISTRY[name]


def _entry_point_names() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def available_actions() -> tuple[str, ...]:
    """Every action name a policy can use: registered ones and installed entry points."""
    return tuple(sorted(set(_REGISTRY) | set(_entry_point_names())))


def resolve_action(name: str, *, where: str = "") -> RegisteredAction:
    """Find the action a policy names: the registry first, then the entry-point group.

    Args:
        name: The action name.
        where: The policy position (``file:line:col``) for the error message.

    Raises:
        PolicyError: No such action; the message suggests the closest names.
    """
    if name in _REGISTRY:
        return _REGISTRY[name]
    eps = _entry_point_names()
    if name in eps:
        try:
            loaded = eps[name].load()
        except Exception as e:
            raise PolicyError(f"{where}: action {name!r}: loading entry point {eps[name].value!r} failed: {e}") from e
        if isinstance(loaded, RegisteredAction):
            action = loaded
        elif callable(loaded):
            action = RegisteredAction(name, loaded, name)
        else:
            raise PolicyError(f"{where}: entry point {eps[name].value!r} for action {name!r} is not callable")
        _REGISTRY.setdefault(name, action)
        return _REGISTRY[name]
    known = available_actions()
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise PolicyError(
        f"{where}: unknown action {name!r}; {hint}known actions: {', '.join(known)}. Register it with "
        f"@ddo_hooks.register_action({name!r}) or the {ENTRY_POINT_GROUP!r} entry-point group before attaching"
    )


BoundActions: TypeAlias = dict[str, tuple[tuple["ResolvedAction", RegisteredAction], ...]]
"""Each boundary's actions as :func:`bind_actions` gives them: the policy's resolved action and what runs it."""


def bind_actions(pipeline: Any, policy: HookPolicy) -> BoundActions:
    """Resolve each boundary's actions by name and run each one's check: the one pass :func:`~ddo_hooks.attach` makes.

    Args:
        pipeline: The pipeline being attached.
        policy: The policy being attached.

    Returns:
        For each boundary, in firing order, its actions in order: each as the policy resolves it
        (:meth:`~ddo_hooks.policy.model.HookPolicy.actions`) with the registered action that runs it.

    Raises:
        PolicyError: An action is not registered (as :func:`resolve_action`), or its check refused.
        InvalidArgumentError: An action's check refused the pipeline.

    Examples:
        >>> from ddo_hooks import HookPolicy
        >>> bound = bind_actions(None, HookPolicy.default())
        >>> [(spec.options.collect, action.component("after_call")) for spec, action in bound["after_call"]]
        [('auto', 'host_cache_after_call')]
    """
    bound: BoundActions = {}
    for boundary in BOUNDARIES:
        pairs = []
        for spec in policy.actions(boundary):
            action = resolve_action(spec.name, where=policy.locate(spec.at))
            if action.check is not None:
                action.check(pipeline, policy, spec)
            pairs.append((spec, action))
        bound[boundary] = tuple(pairs)
    return bound
