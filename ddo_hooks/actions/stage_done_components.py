"""The built-in action ``stage_done_components``: pin again the copies ``release_done_components`` gave back.

It takes no options (:class:`~ddo_hooks.actions.contract.NoOptions`). Its reports are a repack's (route
``pinned_copy_repack``), or a no-op (route ``boundary_action``) when no component is to be staged, recorded
under ``stage_done_<boundary>``.

Examples:
    >>> ACTION.component("before_transformer"), ACTION.routes
    ('stage_done_before_transformer', ('pinned_copy_repack', 'boundary_action'))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddo_hooks.actions.contract import BoundaryContext, NoOptions, RegisteredAction

if TYPE_CHECKING:
    from ddo_hooks.reports.boundary import ActionReport
    from ddo_hooks.reports.repack import PinnedCopyRepackReport

__all__ = ["ACTION", "NAME", "stage_done_components"]

NAME = "stage_done_components"
"""The action's name, as policies write it."""


def stage_done_components(ctx: BoundaryContext[NoOptions]) -> PinnedCopyRepackReport | ActionReport:
    """Pin again the copies that ``release_done_components`` (``stable_files: true``) replaced by file views.

    A component whose pinned copies were pointed back at its files is onloaded from pinned blocks
    made at each onload; staging it gives it exact-size pinned copies (slabs) again, so that its
    next calls run as fast as before. ``lowest-latency`` stages before the transformer of the first
    call after an idle time that gave the copies back: memory back while idle, speed while busy.
    Its report is a repack's (route ``pinned_copy_repack``, each ``pinned_bytes_before`` 0), or a
    no-op when no component is to be staged.
    """
    from ddo_hooks.release.file_views import stage_again

    report = None if ctx.pipeline is None else stage_again(ctx.pipeline, phase=ctx.boundary)
    if report is None:
        return ctx.action_report("noop", detail="no component's pinned copies were given back to stage again")
    return report


ACTION = RegisteredAction(
    NAME, stage_done_components, "stage_done", options=NoOptions, routes=("pinned_copy_repack", "boundary_action")
)
"""The declaration of ``stage_done_components``."""
