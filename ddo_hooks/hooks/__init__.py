"""The hook layer: what attaches a policy to a pipeline and turns its calls into boundaries.

Modules: :mod:`~ddo_hooks.hooks.attachment` (``attach`` and the ``Attachment`` handle),
:mod:`~ddo_hooks.hooks.actions` (what runs at a boundary), :mod:`~ddo_hooks.hooks.builtin_actions`
(the built-in actions, one entry each), :mod:`~ddo_hooks.hooks.cores` (the
release core each boundary calls, checked at attach), :mod:`~ddo_hooks.hooks.phases` (the
phase machine), :mod:`~ddo_hooks.hooks.signals` (the signals a pipeline gives it) and
:mod:`~ddo_hooks.hooks.mechanics` (installing hooks and wrappers, and removing them exactly).
Imports the foundation, report, release and policy layers.
"""
