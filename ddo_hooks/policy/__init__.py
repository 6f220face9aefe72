"""The policy layer: the hook policy model and its YAML loader with located errors.

Modules: :mod:`~ddo_hooks.policy.model` (:class:`~ddo_hooks.policy.model.HookPolicy`, loading and reading a
policy), :mod:`~ddo_hooks.policy.parts` (its sections; the options of each action are its own model,
:mod:`ddo_hooks.actions`), :mod:`~ddo_hooks.policy.base` (the base model), :mod:`~ddo_hooks.policy.values`
(the values its settings take), :mod:`~ddo_hooks.policy.sources` (a preset's name or a file's path),
:mod:`~ddo_hooks.policy.yaml_loader` (a safe, bounded, position-tracking YAML loader),
:mod:`~ddo_hooks.policy.yaml_text` (the bracket depth of its text, checked before parsing),
:mod:`~ddo_hooks.policy.messages` (one located line per problem), :mod:`~ddo_hooks.policy.passes` (every
problem in one run: the shape, each action resolved once, then the rules), :mod:`~ddo_hooks.policy.rules` (the
rules across settings), :mod:`~ddo_hooks.policy.offload` (the ``offload`` section: the runtime attach
applies). The packaged policies are in ``presets/``, named in :data:`PRESETS` (here, so that the command line
names them without building the models). Imports the foundation modules and :mod:`ddo_hooks.release.devices`.
"""

__all__ = ["PRESETS"]

PRESETS: tuple[str, ...] = ("default", "lowest-peak", "lowest-latency", "smallest-box", "streamed-box")
"""The packaged policies (``ddo_hooks/policy/presets/``), each documented with its measured trade-off."""
