"""DDO's own reports: strict models of what ``diffusers-dynamic-offloader`` 0.1.0rc2 emits about host memory.

DDO (the ``diffusers_dynamic_offloader`` package) returns a ``DynamicOffloadMetrics`` whose
``as_dict()`` has ``schema_version`` 1 and a ``route``, like a ddo_hooks report, but a shape of its
own: top-level ``configuration``, ``setup`` and ``runtime``, its own statuses and its own field
names. These modules model that shape, route by route, as strictly as ddo_hooks models its own
(extra fields refused, frozen, no coercion), from DDO 0.1.0rc2's source:

* :mod:`~ddo_hooks.reports.ddo.base`: the shared base, DDO's host and allocator snapshots, and the
  rule that tells the two shapes apart (:func:`~ddo_hooks.reports.ddo.base.ddo_shape_keys`);
* :mod:`~ddo_hooks.reports.ddo.host`: ``pytorch_host_cache_release`` and ``host_memory_observation``;
* :mod:`~ddo_hooks.reports.ddo.vmm_auxiliary`: ``vmm_auxiliary_source_detachment``;
* :mod:`~ddo_hooks.reports.ddo.native`: ``native_vmm_idle_cache_release``;
* :mod:`~ddo_hooks.reports.ddo.group` and :mod:`~ddo_hooks.reports.ddo.group_config`:
  ``diffusers_group_offload``;
* :mod:`~ddo_hooks.reports.ddo.routes`: the union of those routes and its adapter;
* :mod:`~ddo_hooks.reports.ddo.mapping`: DDO's release report in ddo_hooks' terms.

:func:`ddo_hooks.parse_report` reads both shapes. Nothing here imports DDO, torch or diffusers.
"""
