"""The contract every action is written on, built-in or your own: its options, its context, its declaration.

An action is declared once, as a :class:`RegisteredAction`: its name, the function that runs it, the
model of its options (an :class:`ActionOptions`; ``None``: the options as the policy writes them, a
mapping), the prefix of its tracker component, the report routes it answers with, and what it does
around an attachment: a check at attach, a step at attach and a step at detach. Each built-in action
declares itself so in its own module of :mod:`ddo_hooks.actions`; an action of your own is declared
by :func:`~ddo_hooks.register_action` (or an entry point giving a :class:`RegisteredAction`).

The types follow the options from the policy to the action. The policy validates an action's options
against its model once, where it loads, and resolves them once (:class:`ResolvedAction`); the
action receives them in its :class:`BoundaryContext`, ``ctx.options``, an instance of its model. A
declaration's model and function share one type parameter, so mypy checks ``ctx.options.stable_files``
in an action declared with ``options=ReleaseDoneComponentsOptions``, and refuses a function that takes
the context of another model.

Examples:
    >>> class FlushOptions(ActionOptions):
    ...     depth: int = 1
    >>> FlushOptions.from_options("my_pkg.flush", {"depth": 2})
    FlushOptions(depth=2)
    >>> FlushOptions.from_options("my_pkg.flush", {"deep": 2})
    Traceback (most recent call last):
    ...
    pydantic_core._pydantic_core.PydanticCustomError: unknown option of my_pkg.flush; it takes depth
"""

from __future__ import annotations

import copy
import dataclasses
import typing
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, Self, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import InitErrorDetails

from ddo_hooks._diagnostics import KeyPath
from ddo_hooks.actions.option_messages import located_option_errors, read_keys, spelling
from ddo_hooks.boundaries import component_name
from ddo_hooks.errors import InvalidArgumentError, ReportError
from ddo_hooks.reports.base import RouteReport, describe_errors
from ddo_hooks.reports.boundary import ActionReport, ActionResult, ActionResultSetup
from ddo_hooks.reports.parse import ANY_REPORT_TYPES

if TYPE_CHECKING:
    from ddo_hooks.reports.tracker import MetricsTracker

__all__ = [
    "ActionFunction",
    "ActionOptions",
    "BoundaryContext",
    "NoOptions",
    "OptionsT",
    "PolicyView",
    "RegisteredAction",
    "ResolvedAction",
]

OptionsT = TypeVar("OptionsT")
"""The type of an action's options: its :class:`ActionOptions` model, or ``dict[str, Any]`` for one without."""


class ActionOptions(BaseModel):
    """The base of an action's options model: strict (unknown keys refused), frozen, read by attribute.

    Its fields are documented by their docstrings, which the policy reference shows.

    Examples:
        >>> NoOptions.from_options("stage_done_components", {})
        NoOptions()
        >>> NoOptions.from_options("stage_done_components", {"now": True})
        Traceback (most recent call last):
        ...
        pydantic_core._pydantic_core.PydanticCustomError: unknown option of stage_done_components; ...
        >>> NoOptions.takes()  # what the message says it takes
        'none'
    """

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    @classmethod
    def takes(cls) -> str:
        """The options the model takes, as the message that refuses an unknown one lists them (aliases as written)."""
        return ", ".join(spelling(cls, name) for name in cls.model_fields) or "none"

    @classmethod
    def from_options(cls, action: str, options: Mapping[str, Any], defaults: Mapping[str, Any] | None = None) -> Self:
        """``action``'s ``options`` as a policy writes them, over ``defaults``, validated into this model once.

        Args:
            action: The action's name, for the messages.
            options: Its options (JSON data).
            defaults: Settings of the policy's section that holds defaults of them (``release`` for
                ``host_cache_release``: the keys it writes), valid already; an option written here wins.

        A field with an alias is set under either spelling, once (:mod:`~ddo_hooks.actions.option_messages`).

        Raises:
            PydanticCustomError: An unknown option, one given under both spellings, or a value the
                model refuses, located at ``options.<key>`` below the action's entry (inside a
                policy's validation: one located line of its :class:`~ddo_hooks.errors.PolicyError`),
                its choices and types said as a policy writes them.
            ValidationError: Several such problems, each one of its errors (every unknown key and every
                refused value, found in one pass).
        """
        given, problems = read_keys(cls, action, options, takes=cls.takes())
        merged = {name: value for name, value in (defaults or {}).items() if name not in given}
        merged.update((key, options[key]) for key in given.values())
        try:
            settings = cls.model_validate(merged, by_alias=True, by_name=True)
        except ValidationError as e:
            for problem in located_option_errors(cls, e, options):  # a union's members refuse it once each
                if all(problem.context != said.context for said in problems):
                    problems.append(problem)
        if not problems:
            return settings
        if len(problems) == 1:
            raise problems[0]
        details = [InitErrorDetails(type=problem, loc=(), input=dict(options)) for problem in problems]
        raise ValidationError.from_exception_data(cls.__name__, details)


class NoOptions(ActionOptions):
    """The options of an action that takes none (``stage_done_components``, ``malloc_trim``): an option is refused."""


class PolicyView(Protocol):
    """What an action reads of the attached policy (a :class:`~ddo_hooks.HookPolicy`, a layer above this one).

    Its attach check uses it to point a message at the policy's line (:meth:`locate`).
    """

    @property
    def source(self) -> str:
        """Where the policy came from: the file path, ``<string>``, ``<mapping>`` or ``<policy>``."""
        ...

    @property
    def enabled(self) -> bool:
        """The policy's master switch."""
        ...

    @property
    def device(self) -> str:
        """The policy's CUDA device (``"cuda"`` or ``"cuda:N"``)."""
        ...

    def locate(self, path: KeyPath) -> str:
        """``"file:line:col"`` of a key path of the policy (just the source where it is unknown)."""
        ...

    def enabled_boundaries(self) -> tuple[str, ...]:
        """The boundaries that act, in firing order; empty when the policy is disabled."""
        ...


@dataclass(frozen=True)
class ResolvedAction(Generic[OptionsT]):
    """One action of a boundary as it runs: what :meth:`~ddo_hooks.policy.model.HookPolicy.actions` gives.

    Attributes:
        name: The action's name.
        options: What the action receives as ``ctx.options``: for an action with an options model, an
            instance of it (``host_cache_release``'s: the ``release`` settings overridden by this
            boundary's own); for any other action, its options as written.
        boundary: The boundary it runs at.
        index: Its position in that boundary's ``actions``.
        written: Its options as the policy wrote them.

    Examples:
        >>> action = ResolvedAction("my_pkg.flush", {"label": "x"}, "after_call", 1)
        >>> action.at
        ('boundaries', 'after_call', 'actions', 1)
    """

    name: str
    options: OptionsT
    boundary: str
    index: int
    written: Mapping[str, Any] = field(default_factory=dict)

    @property
    def at(self) -> KeyPath:
        """Its key path in the policy (:meth:`~ddo_hooks.policy.model.HookPolicy.locate` finds its line)."""
        return ("boundaries", self.boundary, "actions", self.index)


def _none_written() -> Any:
    """The options of a context made without any: an empty mapping, as for an action the policy gives none."""
    return {}


@dataclass(frozen=True)
class BoundaryContext(Generic[OptionsT]):
    """What an action gets when its boundary fires: ``BoundaryContext[Options]`` for an action of model ``Options``.

    Attributes:
        pipeline: The diffusers pipeline the attachment is on.
        boundary: ``before_transformer``, ``before_vae`` or ``after_call``.
        action: The name of the action being run.
        call_index: 1 for the first pipeline call seen by the attachment, then 2, ...
        device: The policy's CUDA device (``"cuda"`` or ``"cuda:N"``).
        tracker: The attachment's metrics tracker.
        policy: The attached policy (a :class:`~ddo_hooks.HookPolicy`; typed as what an action reads of
            it, :class:`PolicyView`).
        options: This action's options from the policy, resolved once when it loaded: an instance of the
            action's options model, read by attribute (``host_cache_release`` gets the ``release``
            settings with this boundary's overrides: ``ctx.options.collect``); for an action without a
            model, the mapping the policy writes (a copy; empty when it writes none).
        dropped: Components dropped from the pipeline that should be dead by now, by name
            (weak references; ``host_cache_release`` collects garbage fully only if one lives).
        dropped_names: The components dropped from the pipeline since the previous boundary of
            this attachment, alive or not (``left`` until 0.1; the old name warns, and goes in 0.2).
        done: The components whose work in this call is done, in the order they ran: those that
            ran a forward before its ``before_transformer`` was due (encoders, image encoders,
            priors); empty before then, for a host request, and in a call without a final loop.
        state: A dictionary this action keeps across the boundaries of this attachment
            (``host_cache_release`` keeps its last allocator snapshot there).
    """

    pipeline: Any
    boundary: str
    action: str
    call_index: int
    device: str
    tracker: MetricsTracker
    policy: PolicyView
    options: OptionsT = field(default_factory=_none_written)
    dropped: Mapping[str, weakref.ref[Any]] = field(default_factory=dict)
    dropped_names: tuple[str, ...] = ()
    done: tuple[str, ...] = ()
    state: dict[str, Any] = field(default_factory=dict, repr=False)
    on_survivors: Callable[[Iterable[str]], None] | None = field(default=None, repr=False)
    holder: Callable[[Any], str | None] | None = field(default=None, repr=False)

    @property
    def left(self) -> tuple[str, ...]:
        """The old name of :attr:`dropped_names` ("dropped" is the one word for a component that left)."""
        from ddo_hooks._moved import warn_old

        warn_old("BoundaryContext.left")
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


ActionFunction = Callable[[BoundaryContext[Any]], object]
"""What runs an action: it receives the context and returns a report (of either shape) or ``None``."""


@dataclass(frozen=True)
class RegisteredAction(Generic[OptionsT]):
    """An action, declared once: what a policy names, what runs it, what it takes, what it does around an attachment.

    Attributes:
        name: The name policies use.
        run: The function called with a :class:`BoundaryContext` of its options type.
        component_prefix: Reports are recorded under ``f"{component_prefix}_{boundary}"``.
        check: What :func:`~ddo_hooks.attach` checks of the action before installing anything,
            given the pipeline, the policy and the action as the policy resolves it
            (:class:`ResolvedAction`); it raises to refuse the attach. ``None`` (the default): nothing.
        options: The model of its options (an :class:`ActionOptions`), validated where the policy
            loads with located messages; ``None`` (the default): the options as the policy writes them.
        defaults: Gives the policy's section that holds defaults of its options for every boundary, given the
            policy (``host_cache_release``'s gives its ``release``); the settings that section writes are merged
            under each entry's own. ``None`` (the default): none.
        on_attach: A step :func:`~ddo_hooks.attach` takes once, after installing its signal hooks, when the
            policy is enabled and lists the action: given the pipeline and each of the action's resolved
            entries, in boundary order. If it raises (Ctrl-C too), it must leave nothing of its own: the
            steps taken before it are undone in reverse, and its ``on_detach`` is not called.
        on_detach: Its inverse, which ``detach()`` takes once, in the reverse order of attach (after the
            steps taken after it are undone, before the signal hooks are removed): given the pipeline, it
            returns ``(component, report)`` to record, or ``None``.
        routes: The routes of the reports it answers with (the docs' table of actions).
        before_call: A check at the start of each top-level call, before any component runs, of what the
            action made (for an action the policy lists): given the attached pipeline and then each
            pipeline it holds; what it raises ends the call. ``None`` (the default): none.

    Examples:
        >>> from ddo_hooks.actions import by_name
        >>> action = by_name()["malloc_trim"]
        >>> action.component("after_call"), action.options.__name__, action.check
        ('malloc_trim_after_call', 'NoOptions', None)
    """

    name: str
    run: Callable[[BoundaryContext[OptionsT]], object]
    component_prefix: str
    check: Callable[[Any, PolicyView, ResolvedAction[OptionsT]], None] | None = None
    options: type[OptionsT] | None = None
    defaults: Callable[[Any], ActionOptions] | None = None
    on_attach: Callable[[Any, tuple[ResolvedAction[OptionsT], ...]], None] | None = None
    on_detach: Callable[[Any], tuple[str, RouteReport] | None] | None = None
    routes: tuple[str, ...] = ("boundary_action",)
    before_call: Callable[[Any], None] | None = None

    def __post_init__(self) -> None:
        if self.options is not None and not (
            isinstance(self.options, type) and issubclass(self.options, ActionOptions)
        ):
            raise InvalidArgumentError(
                f"the options of action {self.name!r} must be a subclass of ddo_hooks.actions.contract.ActionOptions "
                f"(or None for its options as written), got {self.options!r}"
            )

    def component(self, boundary: str) -> str:
        """The tracker component for this action at ``boundary``."""
        return component_name(self.component_prefix, boundary)

    def __call__(self, ctx: BoundaryContext[OptionsT]) -> RouteReport | None:
        """Run the action and check that it returned a report (of either shape) or ``None``."""
        report = self.run(ctx)
        if report is None:
            return None
        if isinstance(report, RouteReport) and isinstance(report, ANY_REPORT_TYPES):
            return report
        raise InvalidArgumentError(
            f"action {self.name!r} returned {type(report).__name__}; an action returns a report "
            "(e.g. ctx.action_report('executed', data={...})) or None"
        )

    def resolve(self, written: Mapping[str, Any], defaults: Mapping[str, Any] | None = None) -> OptionsT:
        """The options this action receives where a policy writes ``written``, over the settings ``defaults``.

        The one way an entry is resolved, for an action known when the policy loads and for one bound later
        (:meth:`fit`): for an action with an options model, ``defaults`` (the settings the policy's section named
        that :attr:`defaults` gives writes) merged under ``written``, validated once; for one without, a deep copy of
        ``written`` (nothing the action changes reaches the policy).

        Raises:
            PydanticCustomError: The options do not fit the model; located below the action's entry.
            ValidationError: Several problems, each such an error (:meth:`ActionOptions.from_options`).
        """
        if self.options is None:
            return typing.cast(OptionsT, copy.deepcopy(dict(written)))
        model = typing.cast("type[ActionOptions]", self.options)
        return typing.cast(OptionsT, model.from_options(self.name, written, defaults))

    def fit(self, resolved: ResolvedAction[Any], defaults: Mapping[str, Any] | None = None) -> ResolvedAction[OptionsT]:
        """``resolved`` with the options this action takes: as the policy resolved them where they fit.

        They are resolved again (:meth:`resolve`) from what the policy writes where the action was registered
        (or replaced) after the policy was loaded, so that they are an instance of its model (or, for an action
        without one, a mapping).

        Raises:
            PydanticCustomError: As :meth:`resolve`.
            ValidationError: As :meth:`resolve`.
        """
        model = self.options
        fits = isinstance(resolved.options, Mapping) if model is None else isinstance(resolved.options, model)
        if fits:
            return typing.cast("ResolvedAction[OptionsT]", resolved)
        return dataclasses.replace(resolved, options=self.resolve(resolved.written, defaults))
