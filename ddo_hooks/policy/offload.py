"""The policy's ``offload`` section: the offload runtime :func:`~ddo_hooks.attach` applies, and its options.

``runtime: null`` (the default) leaves offloading to the pipeline as it was set up before attach
(diffusers' group offloading, DDO's ``enable_pipeline_offload``). ``runtime: ring`` runs the
pipeline's components through the ring runtime (:mod:`ddo_hooks.streaming`), which copies each block's
weights under the compute of the blocks before it: load the pipeline with its files' dtype and do
not offload it; pin its weights from their files in the same policy (``pinned_copies.from_files:
register`` with ``keep_encoders_pinned: true``), since the ring streams only from memory the device
can copy from without the host waiting. The ``streamed-box`` preset is that policy.

Examples:
    >>> OffloadPolicy.model_validate({"runtime": "ring", "resident_bytes": "1GiB"}).resident_bytes
    1073741824
    >>> OffloadPolicy().runtime is None
    True
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, StrictBool, StrictInt

from ddo_hooks.policy.base import Model
from ddo_hooks.sizes import ByteSize

if TYPE_CHECKING:
    from ddo_hooks.streaming.runtime import StreamOptions

__all__ = ["RUNTIMES", "OffloadPolicy"]

RUNTIMES = ("ring",)
"""The offload runtimes a policy can name."""


class OffloadPolicy(Model):
    """The offload runtime attach applies (``null``: none; the pipeline's own offloading, as set up)."""

    runtime: Literal["ring"] | None = None
    """``ring``: copy each block's weights under the compute of the blocks before it, through one ring of buffers
    on the device; ``null``: leave offloading to the pipeline."""
    resident_bytes: ByteSize = 768 * 1024**2
    """The residency budget: the most bytes of the blocks' weights kept on the device, those with the least compute
    per byte first (the modulation linears, which multiply one row each), chosen in the first call. ``0``: every
    block weight of at least 1 MiB streams."""
    ring_bytes: ByteSize | Literal["auto"] = "auto"
    """The ring's size on the device; ``auto``: ``lookahead + 1`` times the largest block's streamed bytes."""
    lookahead: Annotated[StrictInt, Field(ge=1, le=16)] = 2
    """How many blocks ahead of the running one are copied in."""
    stream_above: ByteSize = 128 * 1024**2
    """A component whose blocks would stream fewer bytes than this stays on the device whole (a VAE)."""
    poison: StrictBool = False
    """A check, not for production: fill each ring slot with NaN before it is copied into, so that any copy a
    block read before it finished changes the outputs."""

    def stream_options(self) -> StreamOptions:
        """The ring runtime's options as this section sets them."""
        from ddo_hooks.streaming.runtime import StreamOptions  # torch: only where a runtime is applied

        ring = None if self.ring_bytes == "auto" else self.ring_bytes
        return StreamOptions(resident_bytes=self.resident_bytes, ring_bytes=ring, lookahead=self.lookahead,
                             stream_above=self.stream_above, poison=self.poison)  # fmt: skip
