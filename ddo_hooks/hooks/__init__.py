"""The hook layer: what attaches a policy to a pipeline and turns its calls into boundaries.

Modules: :mod:`~ddo_hooks.hooks.attachment` (``attach`` and the ``Attachment`` handle; it names no
action: each action's check and steps are its own, :mod:`ddo_hooks.actions`),
:mod:`~ddo_hooks.hooks.attach_inputs` (the policy and the registry ``attach`` is given),
:mod:`~ddo_hooks.hooks.steps` (the one
rule of attach and detach: a list of steps, undone in reverse), :mod:`~ddo_hooks.hooks.attach_steps` (an
attachment's steps, built from its policy), :mod:`~ddo_hooks.hooks.phases` (the
phase machine), :mod:`~ddo_hooks.hooks.runner` (binding each action at attach, and running a boundary's
actions in the release slot),
:mod:`~ddo_hooks.hooks.idle` (boundaries deferred until the pipeline is idle),
:mod:`~ddo_hooks.hooks.signals` (the signals a pipeline gives it),
:mod:`~ddo_hooks.hooks.loop_bar` (the progress bar that signals a denoising loop),
:mod:`~ddo_hooks.hooks.signal_hooks` (the module hooks that signal them, shared between pipelines),
:mod:`~ddo_hooks.hooks.mechanics` (installing hooks and wrappers, and removing them exactly),
:mod:`~ddo_hooks.hooks.components` (the components that left a pipeline, and dropping them),
:mod:`~ddo_hooks.hooks.recorder` (where an attachment's reports go) and
:mod:`~ddo_hooks.hooks.sink` (the policy's JSON Lines report sink).
Imports the foundation, report, release, action and policy layers.
"""
