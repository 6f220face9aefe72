"""Every private diffusers attribute ddo_hooks touches, and nothing else.

diffusers' public hook surface is :class:`~diffusers.hooks.HookRegistry` (``check_if_exists_or_initialize``,
``register_hook``, ``get_hook``, ``remove_hook``, ``hooks``) and :class:`~diffusers.hooks.ModelHook`;
ddo_hooks uses those directly. What it needs beyond them is here: the attribute the registry
lives in, the registry's child cache, group offloading's hook names and CPU copies, two
attributes of models and pipelines.

Examples:
    >>> import torch
    >>> module = torch.nn.Linear(2, 2)
    >>> registry_of(module) is None
    True
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from diffusers.hooks import HookRegistry

from ddo_hooks._compat import Touch

__all__ = [
    "GROUP_OFFLOADING_HOOK",
    "LAZY_PREFETCH_HOOK",
    "REGISTRY_ATTRIBUTE",
    "TOUCHES",
    "drop_registry",
    "execution_device",
    "keep_in_fp32_modules",
    "offload_groups",
    "set_group_cpu_source",
    "group_cpu_sources",
    "group_disk_path",
    "group_offload_group",
    "has_hook",
    "invalidate_parents",
    "registry_of",
    "supports_group_offloading",
]

REGISTRY_ATTRIBUTE = "_diffusers_hook"
"""Where ``HookRegistry.check_if_exists_or_initialize`` keeps a module's registry."""
GROUP_OFFLOADING_HOOK = "group_offloading"
"""``diffusers.hooks.group_offloading._GROUP_OFFLOADING``: the registry name of group offloading's hook."""
LAZY_PREFETCH_HOOK = "lazy_prefetch_group_offloading"
"""``diffusers.hooks.group_offloading._LAZY_PREFETCH_GROUP_OFFLOADING``: removed after the first forward."""


def registry_of(module: torch.nn.Module) -> HookRegistry | None:
    """The module's hook registry, or ``None`` when it has none (never creates one)."""
    return getattr(module, REGISTRY_ATTRIBUTE, None)


def drop_registry(module: torch.nn.Module) -> None:
    """Delete the registry attribute (when ddo_hooks created it and it is empty again)."""
    delattr(module, REGISTRY_ATTRIBUTE)


def has_hook(module: torch.nn.Module, name: str) -> bool:
    """Whether the module's registry holds a hook called ``name``."""
    registry = registry_of(module)
    return registry is not None and registry.get_hook(name) is not None


def invalidate_parents(module: torch.nn.Module) -> None:
    """Tell the registries above ``module`` that its hooks changed (``invalidate_child_registries_cache``)."""
    registry = registry_of(module)
    invalidate = getattr(registry, "invalidate_child_registries_cache", None)
    if invalidate is not None:
        invalidate()


def group_offload_group(module: torch.nn.Module) -> Any:
    """The ``ModuleGroup`` that group offloading attached to ``module`` (its hook's ``group``), or ``None``."""
    registry = registry_of(module)
    hook: Any = None if registry is None else registry.get_hook(GROUP_OFFLOADING_HOOK)  # a GroupOffloadingHook
    return None if hook is None else hook.group


def group_cpu_sources(group: Any) -> dict[Any, Any]:
    """``group.cpu_param_dict``: the CPU copies a group keeps (pinned ones with ``use_stream=True``)."""
    return getattr(group, "cpu_param_dict", None) or {}


def set_group_cpu_source(group: Any, key: Any, tensor: torch.Tensor) -> None:
    """Make ``tensor`` the CPU copy the group onloads ``key`` (a parameter or buffer) from, and offloads it to."""
    group.cpu_param_dict[key] = tensor


def group_disk_path(group: Any) -> str | None:
    """``group.offload_to_disk_path``: where the group keeps its tensors on disk, or ``None`` in memory."""
    return getattr(group, "offload_to_disk_path", None)


def offload_groups(module: torch.nn.Module) -> list[Any]:
    """The distinct ``ModuleGroup`` objects group offloading attached to ``module`` and its submodules, in order."""
    found: dict[int, Any] = {}
    for submodule in module.modules():
        group = group_offload_group(submodule)
        if group is not None:
            found.setdefault(id(group), group)
    return list(found.values())


def supports_group_offloading(module: torch.nn.Module) -> bool:
    """``ModelMixin._supports_group_offloading`` (``True`` for modules that do not say)."""
    return bool(getattr(module, "_supports_group_offloading", True))


def execution_device(pipeline: Any) -> torch.device:
    """``DiffusionPipeline._execution_device``: where the pipeline runs its models."""
    return pipeline._execution_device


def keep_in_fp32_modules(model: Any) -> tuple[str, ...]:
    """``ModelMixin._keep_in_fp32_modules``: submodule names a model keeps in float32."""
    return tuple(getattr(model, "_keep_in_fp32_modules", None) or ())


# -- probes ---------------------------------------------------------------------------------------


def _registry_probe() -> bool:
    module = torch.nn.Linear(2, 2)
    registry = HookRegistry.check_if_exists_or_initialize(module)
    return registry_of(module) is registry


def _invalidate_probe() -> bool:
    return callable(getattr(HookRegistry, "invalidate_child_registries_cache", None))


def _hook_names_probe() -> bool:
    from diffusers.hooks import group_offloading

    names = (group_offloading._GROUP_OFFLOADING, group_offloading._LAZY_PREFETCH_GROUP_OFFLOADING)
    return names == (GROUP_OFFLOADING_HOOK, LAZY_PREFETCH_HOOK)


def _group_probe() -> bool:
    from diffusers.hooks import apply_group_offloading

    module = torch.nn.Sequential(torch.nn.Linear(2, 2))
    apply_group_offloading(module, onload_device=torch.device("cpu"), offload_type="leaf_level")
    group = group_offload_group(module[0])
    if group is None or not isinstance(getattr(group, "cpu_param_dict", None), dict):
        return False
    in_memory = "offload_to_disk_path" in vars(group) and group_disk_path(group) is None
    return in_memory and offload_groups(module) == [group]


def _model_probe() -> bool:
    from diffusers.models import ModelMixin

    return all(hasattr(ModelMixin, name) for name in ("_supports_group_offloading", "_keep_in_fp32_modules"))


def _pipeline_probe() -> bool:
    from diffusers import DiffusionPipeline

    return isinstance(inspect.getattr_static(DiffusionPipeline, "_execution_device", None), property)


TOUCHES: tuple[Touch, ...] = (
    Touch(
        "diffusers",
        "module._diffusers_hook (HookRegistry.check_if_exists_or_initialize)",
        "finding and removing the registries ddo_hooks created",
        _registry_probe,
    ),
    Touch(
        "diffusers",
        "HookRegistry.invalidate_child_registries_cache",
        "telling parent registries that ddo_hooks added or removed a hook",
        _invalidate_probe,
        since=(0, 41),
    ),
    Touch(
        "diffusers",
        "diffusers.hooks.group_offloading._GROUP_OFFLOADING and _LAZY_PREFETCH_GROUP_OFFLOADING",
        "recognizing group offloading's hooks",
        _hook_names_probe,
    ),
    Touch(
        "diffusers",
        "ModuleGroup.cpu_param_dict and ModuleGroup.offload_to_disk_path (group offloading hook's .group)",
        "observing and repacking the CPU copies group offloading keeps",
        _group_probe,
    ),
    Touch(
        "diffusers",
        "ModelMixin._supports_group_offloading and ModelMixin._keep_in_fp32_modules",
        "refusing models that cannot be group-offloaded, and casting the tiny test models",
        _model_probe,
    ),
    Touch(
        "diffusers",
        "DiffusionPipeline._execution_device",
        "encoding prompts for the tiny test pipelines",
        _pipeline_probe,
    ),
)
"""Every private diffusers attribute touched, with its probe (``tests/test_compat.py`` runs them)."""
