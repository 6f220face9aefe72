r"""The built-in action ``host_cache_release``: release PyTorch's pinned host cache at a boundary.

It runs the release core with its options, :class:`HostCacheReleaseOptions`: the policy's ``release``
section holds them for every boundary, and the action's own ``options`` at one boundary override them
there. It remembers its last allocator snapshot, so that each report says what was pinned since the
previous boundary. With ``core: ddo`` it calls DDO's core instead; its attach check
(:func:`check_release_core`) refuses that where DDO's core cannot run, before any hook is installed,
at the line that asked for it. Its reports are recorded under ``host_cache_<boundary>``.

Examples:
    >>> from ddo_hooks import HookPolicy
    >>> policy = HookPolicy.from_yaml_text("version: 1\nboundaries:\n  after_call:\n"
    ...     "    actions: [{name: host_cache_release, options: {core: ddo}}]\n")
    >>> ddo_core_setting(policy, policy.actions("after_call")[0])
    ('boundaries', 'after_call', 'actions', 0, 'options', 'core')
    >>> ddo_core_setting(policy, policy.actions("before_vae")[0]) is None
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic_core import PydanticCustomError

from ddo_hooks._diagnostics import KeyPath, format_key_path, located_error, show_value
from ddo_hooks.actions.contract import ActionOptions, BoundaryContext, PolicyView, RegisteredAction, ResolvedAction
from ddo_hooks.errors import PolicyError
from ddo_hooks.sizes import ByteSize, format_size

if TYPE_CHECKING:
    from ddo_hooks.reports.ddo.host import DDOHostCacheReleaseReport
    from ddo_hooks.reports.host_cache import HostCacheReleaseReport

__all__ = [
    "ACTION",
    "COMPONENT_PREFIX",
    "NAME",
    "HostCacheReleaseOptions",
    "check_release_core",
    "core_conflict",
    "core_problem",
    "ddo_core_setting",
    "host_cache_release",
    "release_section",
    "shown_setting",
]

NAME = "host_cache_release"
"""The action's name, as policies write it."""

COMPONENT_PREFIX = "host_cache"
"""Its reports are recorded under ``host_cache_<boundary>``."""


class HostCacheReleaseOptions(ActionOptions):
    """The options of ``host_cache_release``.

    The policy's ``release`` section holds them for every boundary; a boundary may override
    them with the action's ``options`` (``{name: host_cache_release, options: {collect: full}}``).
    """

    collect: Literal["full", "young", "auto"] = "auto"
    """Garbage collection before the release: ``full`` (every generation), ``young`` (0 and 1)
    or ``auto`` (young, then full only if a dropped component is still alive)."""
    min_releasable_bytes: ByteSize = 0
    """Skip the release when fewer cached bytes are releasable (``0``: always release)."""
    trigger: Literal["always", "dropped"] = "always"
    """``always``; or ``dropped``: release only when a component left the pipeline since the
    previous boundary (its pinned copies are then in the cache), else a ``not_triggered`` no-op."""
    core: Literal["ddo_hooks", "ddo"] = "ddo_hooks"
    """The release core the action calls: ``ddo_hooks`` (its own) or ``ddo``: DDO's
    ``release_pytorch_host_cache``, recorded as DDO's own report (needs diffusers-dynamic-offloader
    0.1.0rc2 and torch >= 2.12, checked at attach; DDO always collects fully and has no threshold)."""

    @classmethod
    def takes(cls) -> str:
        """Its options: the keys of the policy's ``release`` section."""
        return f"{', '.join(cls.model_fields)} (the keys of 'release')"


def core_problem(
    settings: HostCacheReleaseOptions, own: Mapping[str, Any] | None = None
) -> tuple[tuple[str, ...], PydanticCustomError] | None:
    """Where ``settings`` choose ``core: ddo`` with a setting it cannot honour: the key path of the problem, and it.

    The policy's rule of the release core (:mod:`ddo_hooks.policy.rules`) asks it of the ``release`` section
    (``own`` is ``None``: its path is the setting's) and of each ``host_cache_release`` entry, resolved over that
    section, with the options the entry writes (``own``): the problem is said where it is written, at the entry's
    setting, or at its ``core`` where the setting comes from ``release``; where both come from ``release``, the
    section's own check says it (``None`` here).

    Examples:
        >>> settings = HostCacheReleaseOptions(core="ddo", collect="young")
        >>> at, error = core_problem(settings)
        >>> at, error.message()  # doctest: +ELLIPSIS
        (('collect',), "'young' does not fit core: ddo: DDO's release core always collects ...")
        >>> core_problem(settings, {"min_releasable_bytes": 0}) is None  # both from release: said there
        True
    """
    conflict = core_conflict({key: getattr(settings, key) for key in ("core", "collect", "min_releasable_bytes")})
    if conflict is None:
        return None
    key, problem = conflict
    value = getattr(settings, key)
    if own is None or (key in own and "core" in own):
        message = f"{shown_setting(key, value)} does not fit core: ddo: {problem}"
        return ((key,) if own is None else ("options", key)), located_error("release_core", message, value=value)
    if key in own:
        message = f"{shown_setting(key, value)} does not fit core: ddo (from release): {problem}"
        return ("options", key), located_error("release_core", message, value=own[key])
    if "core" in own:
        setting = shown_setting(key, value).replace("{value}", show_value(value))
        message = f"{{value}} does not fit release.{key}: {setting}: {problem}"
        return ("options", "core"), located_error("release_core", message, value=own["core"])
    return None


def shown_setting(key: str, value: object) -> str:
    """How a release setting's value is shown in a message: a size for people, else as written (``{value}``).

    Examples:
        >>> shown_setting("min_releasable_bytes", 64 << 20), shown_setting("collect", "young")
        ('64.0 MiB', '{value}')
    """
    return format_size(value) if key == "min_releasable_bytes" and type(value) is int else "{value}"


def core_conflict(settings: Mapping[str, Any]) -> tuple[str, str] | None:
    """The setting that DDO's release core cannot honour, and why, when ``settings`` choose ``core: ddo``.

    DDO's ``release_pytorch_host_cache`` always runs ``gc.collect()`` (every generation) and has
    no threshold: ``collect: young`` and a ``min_releasable_bytes`` above 0 would be ignored.

    Args:
        settings: The options, as :class:`HostCacheReleaseOptions` dumps them.

    Returns:
        ``(key, problem)``: the setting and a sentence with its fix; ``None`` when the settings
        fit the chosen core.

    Examples:
        >>> core_conflict({"core": "ddo", "collect": "young", "min_releasable_bytes": 0})[0]
        'collect'
        >>> core_conflict({"core": "ddo_hooks", "collect": "young", "min_releasable_bytes": 1}) is None
        True
    """
    if settings.get("core") != "ddo":
        return None
    fix = "or core: ddo_hooks (the default)"
    if settings.get("collect") == "young":
        return "collect", f"DDO's release core always collects every generation (gc.collect()); use full or auto, {fix}"
    if settings.get("min_releasable_bytes"):
        return "min_releasable_bytes", f"DDO's release core has no threshold; leave min_releasable_bytes at 0, {fix}"
    return None


def host_cache_release(
    ctx: BoundaryContext[HostCacheReleaseOptions],
) -> HostCacheReleaseReport | DDOHostCacheReleaseReport:
    """Release the pinned host cache: :func:`~ddo_hooks.release_pytorch_host_cache` with its options.

    Options (the policy's ``release`` settings, overridden by the boundary's own): ``collect``,
    ``min_releasable_bytes``, ``trigger`` (``dropped``: only when a component left the pipeline
    since the previous boundary) and ``core``. Dropped components it could not free are noted as
    survivors. With ``core: ddo`` it calls DDO's ``release_pytorch_host_cache`` instead
    (:func:`~ddo_hooks.release.ddo_core.release_with_ddo`) and returns DDO's report, validated; a
    ``trigger: dropped`` that finds nothing left still answers ``not_triggered`` without calling it.
    """
    from ddo_hooks.release.host_cache import not_triggered, release_pytorch_host_cache  # imports torch

    options = ctx.options
    if options.trigger == "dropped" and not ctx.dropped_names:
        return not_triggered(ctx.boundary, "no component left the pipeline since the previous boundary", ctx.device)
    if options.core == "ddo":
        from ddo_hooks.release.ddo_core import release_with_ddo

        return release_with_ddo(phase=ctx.boundary, device=ctx.device)
    report = release_pytorch_host_cache(
        enabled=True,
        phase=ctx.boundary,
        device=ctx.device,
        collect=options.collect,
        expect_freed=ctx.dropped,
        min_releasable_bytes=options.min_releasable_bytes,
        pinned_since=ctx.state.get("last"),
    )
    release = report.release
    last = release.after or release.before
    if last is not None:
        ctx.state["last"] = (ctx.boundary, last)
    if release.collection is not None and release.collection.survivors:
        ctx.note_survivors(release.collection.survivors)
    return report


def ddo_core_setting(policy: PolicyView, action: ResolvedAction[HostCacheReleaseOptions]) -> KeyPath | None:
    """The key path of the ``core`` setting that makes ``action`` run on DDO's core.

    ``None`` when it runs on ddo_hooks' own core, or not at all (its boundary or the policy is disabled).
    An action whose options leave ``core`` out takes it from ``release`` (``("release", "core")``).

    Examples:
        >>> from ddo_hooks import HookPolicy
        >>> policy = HookPolicy.from_mapping({"version": 1, "release": {"core": "ddo"}})
        >>> ddo_core_setting(policy, policy.actions("before_vae")[0])
        ('release', 'core')
    """
    if action.boundary not in policy.enabled_boundaries() or action.options.core != "ddo":
        return None
    return (*action.at, "options", "core") if "core" in action.written else ("release", "core")


def check_release_core(pipeline: Any, policy: PolicyView, action: ResolvedAction[HostCacheReleaseOptions]) -> None:
    """Refuse, at attach, a ``host_cache_release`` that would run on DDO's core where that core cannot run.

    Args:
        pipeline: The pipeline being attached (not needed here).
        policy: The policy being attached.
        action: The action, as :meth:`~ddo_hooks.policy.model.HookPolicy.actions` resolves it.

    Raises:
        PolicyError: DDO is not importable, not at the version ddo_hooks was tested with, or
            torch has no ``torch._C._accelerator_emptyHostCache``; the message names the setting
            (``file:line:col: release.core``), what is wrong and the fix.

    Examples:
        >>> from ddo_hooks import HookPolicy
        >>> policy = HookPolicy.default()  # ddo_hooks' own core, which runs wherever ddo_hooks does
        >>> check_release_core(None, policy, policy.actions("after_call")[0])
    """
    path = ddo_core_setting(policy, action)
    if path is None:
        return
    from ddo_hooks.release.ddo_core import core_problem

    problem = core_problem()
    if problem is None:
        return
    raise PolicyError(
        f"{policy.locate(path)}: {format_key_path(path)}: ddo (DDO's release core) cannot run here: {problem}; "
        "or set core: ddo_hooks (the default), which runs wherever ddo_hooks does"
    )


def release_section(policy: Any) -> HostCacheReleaseOptions:
    """The policy's ``release`` section.

    The defaults of this action's options at every boundary: each entry's own options are merged over the
    settings it writes.
    """
    section: HostCacheReleaseOptions = policy.release
    return section


ACTION = RegisteredAction(
    NAME,
    host_cache_release,
    COMPONENT_PREFIX,
    check_release_core,
    options=HostCacheReleaseOptions,
    defaults=release_section,
    routes=("pytorch_host_cache_release",),
)
"""The declaration of ``host_cache_release``."""
