"""The policy layer: the hook policy model and its YAML loader with located errors.

Modules: :mod:`~ddo_hooks.policy.model` (:class:`~ddo_hooks.policy.model.HookPolicy`, loading and
reading a policy), :mod:`~ddo_hooks.policy.parts` (its sections) and
:mod:`~ddo_hooks.policy.yaml_loader` (a safe, position-tracking YAML loader). The packaged policies
are in ``presets/``. Imports the foundation modules and :mod:`ddo_hooks.release.devices`.
"""
