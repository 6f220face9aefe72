"""The offload layer: applying an offload runtime to pipeline components, and auxiliary detachment.

Modules: :mod:`~ddo_hooks.offload.apply` (``apply_dynamic_offload`` and its result handle),
:mod:`~ddo_hooks.offload.runtimes` (offload runtimes and their source-observation adapters) and
:mod:`~ddo_hooks.offload.auxiliary` (bounded auxiliary CPU source detachment). Imports every
layer below it.
"""
