"""The release layer: the release core and what it stands on.

Modules: :mod:`~ddo_hooks.release.host_cache` (``release_pytorch_host_cache``),
:mod:`~ddo_hooks.release.allocator` (the torch allocator seam the CPU tests replace),
:mod:`~ddo_hooks.release.counters` (the allocator's raw counters as a snapshot),
:mod:`~ddo_hooks.release.guard` (the process-wide phase guard),
:mod:`~ddo_hooks.release.host_memory` (process RSS and Windows commit),
:mod:`~ddo_hooks.release.devices` (the ``device`` argument),
:mod:`~ddo_hooks.release.repack` (``repack_pinned_copies``),
:mod:`~ddo_hooks.release.pinned_copies` (what a repack may move),
:mod:`~ddo_hooks.release.slabs` (the power-of-two slabs it moves them into),
:mod:`~ddo_hooks.release.file_pages` (giving back the clean pages of weights files),
:mod:`~ddo_hooks.release.file_views` (pointing a done component's weights back at its files),
:mod:`~ddo_hooks.release.file_copies` (its copies, and the views of its files equal to them),
:mod:`~ddo_hooks.release.weights_files` (opening its weights files safely),
:mod:`~ddo_hooks.release.file_watch` (the kernel's account of what was done to a file held open),
:mod:`~ddo_hooks.release.from_files` (each weight pinned once from its file, ``pinned_copies.from_files``),
:mod:`~ddo_hooks.release.file_sources` (where each weight lies in its file, or why it would not be pinned),
:mod:`~ddo_hooks.release.file_pins` (its two ways: registered in place, or staged into slabs),
:mod:`~ddo_hooks.release.file_census` (what it would pin where torch has no CUDA host allocator) and
:mod:`~ddo_hooks.release.ddo_core` (DDO's release core, behind ``core: ddo``). Imports the foundation modules
(what it did to a module is written in :mod:`~ddo_hooks.ledger`) and the report models.
"""
