"""The streaming layer: an offload runtime that copies the weights under the compute, through a ring.

Modules: :mod:`~ddo_hooks.streaming.transport` (the one seam to the device: streams, events, copies;
CUDA's, and a logged one for the CPU), :mod:`~ddo_hooks.streaming.ordering` (the proof over a log that
the order holds), :mod:`~ddo_hooks.streaming.ring` (the ring and its schedule),
:mod:`~ddo_hooks.streaming.plan` (what of a component streams) and :mod:`~ddo_hooks.streaming.runtime`
(the module hooks, the residency budget and the report). Imports the foundation
modules, the report models and the release layer.
"""
