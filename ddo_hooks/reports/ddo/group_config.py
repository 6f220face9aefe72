"""The ``configuration`` of DDO's ``diffusers_group_offload`` report: ``DynamicOffloadSettings.as_metrics()``.

DDO 0.1.0rc2 writes every resolved setting, each under ``dynamic_offload_<name>``, whichever
route the component took; on the group-offload route none of them is checked against its
allowed values (that happens when a DDO hook is built, which this route does not build), so
their types are checked here and their values are not. Numbers may be integers or floats
(finite); a tuple of patterns is a JSON array.

Examples:
    >>> fields = DDOGroupOffloadConfiguration.model_fields
    >>> len(fields), all(name.startswith("dynamic_offload_") for name in fields)
    (54, True)
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, JsonValue, StrictBool, StrictInt

from ddo_hooks.reports.base import Names
from ddo_hooks.reports.ddo.base import DDOModel

__all__ = ["DDOGroupOffloadConfiguration"]

Number = Annotated[float, Field(allow_inf_nan=False)]
"""A finite number (an integer is one)."""

NonEmpty = Annotated[str, Field(min_length=1)]
"""A non-empty string: DDO writes null instead of an empty one."""

PresetName = NonEmpty
"""A preset's name."""


class DDOGroupOffloadConfiguration(DDOModel):
    """DDO's resolved settings (``DynamicOffloadSettings.as_metrics()``), all 54 always written."""

    dynamic_offload_requested_preset: PresetName | None
    """The preset asked for (``DDO_PRESET`` or the caller's), null when none."""
    dynamic_offload_effective_preset: PresetName | None
    """The preset it resolved to (e.g. ``auto`` to ``one_shot_fast``), null when none."""
    dynamic_offload_execution_mode: str
    """``execution_mode`` (``plan``, ``linear_runtime``, ``vmm_fast_runtime``...; not checked on this route)."""
    dynamic_offload_linear_runtime_strategy: str
    """``linear_runtime_strategy``."""
    dynamic_offload_vmm_resident_weight_budget_gb: Number
    """``vmm_resident_weight_budget_gb``."""
    dynamic_offload_vmm_staging_buffer_gb: Number
    """``vmm_staging_buffer_gb``."""
    dynamic_offload_vmm_windows_file_read_chunk_mb: StrictInt
    """``vmm_windows_file_read_chunk_mb``."""
    dynamic_offload_vmm_virtual_host_transport: StrictBool
    """``vmm_virtual_host_transport``."""
    dynamic_offload_vmm_native_transport: StrictBool
    """``vmm_native_transport``."""
    dynamic_offload_vmm_source_cache_gb: Number
    """``vmm_source_cache_gb``."""
    dynamic_offload_vmm_source_registered_gb: Number
    """``vmm_source_registered_gb``."""
    dynamic_offload_vmm_module_pattern: str
    """``vmm_module_pattern`` (a regular expression)."""
    dynamic_offload_vmm_component_tensor_ownership: StrictBool
    """``vmm_component_tensor_ownership``."""
    dynamic_offload_vmm_float8_weight_only: StrictBool
    """``vmm_float8_weight_only``."""
    dynamic_offload_vmm_execution_auxiliary_ownership: StrictBool
    """``vmm_execution_auxiliary_ownership``."""
    dynamic_offload_vmm_component_buffer_limit_mb: StrictInt
    """``vmm_component_buffer_limit_mb``."""
    dynamic_offload_vmm_page_mb: StrictInt
    """``vmm_page_mb``."""
    dynamic_offload_vmm_dxgi_local_headroom_gb: Number
    """``vmm_dxgi_local_headroom_gb``."""
    dynamic_offload_vmm_dxgi_shared_headroom_gb: Number
    """``vmm_dxgi_shared_headroom_gb``."""
    dynamic_offload_vmm_dxgi_system_headroom_gb: Number
    """``vmm_dxgi_system_headroom_gb``."""
    dynamic_offload_vmm_host_cache_gb: Number
    """``vmm_host_cache_gb``."""
    dynamic_offload_vmm_native_source_cache_slot_mb: StrictInt
    """``vmm_native_source_cache_slot_mb``."""
    dynamic_offload_vmm_native_source_cache_slots: StrictInt
    """``vmm_native_source_cache_slots``."""
    dynamic_offload_vmm_pin_source_weights: StrictBool
    """``vmm_pin_source_weights``."""
    dynamic_offload_vmm_fault_fallback: StrictBool
    """``vmm_fault_fallback``."""
    dynamic_offload_pin_cpu_memory: StrictBool
    """Whether pinning was requested (``DDO_PIN_CPU_MEMORY``)."""
    dynamic_offload_effective_pin_cpu_memory: StrictBool
    """Whether CPU weights are pinned after the WSL rule."""
    dynamic_offload_allow_pin_memory_fallback: StrictBool
    """``allow_pin_memory_fallback``."""
    dynamic_offload_disable_pin_on_wsl: StrictBool
    """``disable_pin_on_wsl``."""
    dynamic_offload_pin_cpu_workers: StrictInt
    """``pin_cpu_workers``."""
    dynamic_offload_cache_plan: StrictBool
    """``cache_plan``."""
    dynamic_offload_cache_pinned_weights: StrictBool
    """``cache_pinned_weights``."""
    dynamic_offload_pinned_weight_cache_namespace: NonEmpty | None
    """``pinned_weight_cache_namespace``, null when empty."""
    dynamic_offload_auto_budget_policy: str
    """``auto_budget_policy`` (``off`` or ``balanced``; not checked on this route)."""
    dynamic_offload_max_resident_module_budget_gb: Number
    """``max_resident_module_budget_gb``."""
    dynamic_offload_auto_vram_headroom_gb: Number
    """``auto_vram_headroom_gb``."""
    dynamic_offload_profile_vram_headroom_gb: Number
    """``profile_vram_headroom_gb``."""
    dynamic_offload_profile_name: NonEmpty | None
    """``profile_name``, null when empty."""
    dynamic_offload_build_profile: StrictBool
    """``build_profile``."""
    dynamic_offload_auto_full_pin_min_model_to_vram_ratio: Number
    """``auto_full_pin_min_model_to_vram_ratio``."""
    dynamic_offload_profile_resident_module_budget_gb: Number
    """``profile_resident_module_budget_gb``."""
    dynamic_offload_max_pin_weight_budget_gb: Number
    """``max_pin_weight_budget_gb``."""
    dynamic_offload_available_system_ram_gb: Number
    """System RAM DDO saw available when the settings were made (or ``DDO_AVAILABLE_SYSTEM_RAM_GB``)."""
    dynamic_offload_system_ram_headroom_gb: Number
    """``system_ram_headroom_gb``."""
    dynamic_offload_pin_weight_budget_gb: Number
    """``pin_weight_budget_gb``."""
    dynamic_offload_pin_weight_budget_ratio: Number
    """``pin_weight_budget_ratio``."""
    dynamic_offload_pin_weight_selection: str
    """``pin_weight_selection`` (``first``, ``spread`` or ``largest``; not checked on this route)."""
    dynamic_offload_small_tensor_threshold_kb: StrictInt
    """``small_tensor_threshold_bytes`` in KiB."""
    dynamic_offload_resident_module_budget_gb: Number
    """``resident_module_budget_gb``."""
    dynamic_offload_resident_module_patterns: Names
    """``resident_module_patterns``."""
    dynamic_offload_resident_module_selection: str
    """``resident_module_selection``."""
    dynamic_offload_load_safetensors_backend: NonEmpty | None
    """``load_safetensors_backend``, null when empty."""
    dynamic_offload_show_profile: StrictBool
    """``show_profile``."""
    dynamic_offload_component_policies: dict[str, dict[str, JsonValue]]
    """Per-component policy overrides (``DynamicOffloadSettings.component_policies``)."""
