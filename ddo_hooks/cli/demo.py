"""The ``ddo-hooks demo`` run: a real tiny pipeline, the policy attached, two calls, the reports.

It builds a tiny real diffusers pipeline with random weights (:mod:`ddo_hooks.testing.tiny_pipelines`;
nothing is downloaded), turns its progress bar on, and runs it on the default device: CUDA
when present, else the CPU. On CUDA every model component gets diffusers group offloading
(block level, with a transfer stream) so that pinned host memory exists to be released; on
the CPU nothing is offloaded, and the reports say honestly why each boundary was a no-op.
Call 1 uses the prompt. Then, as memory-constrained users do, the prompt is encoded once, the
text encoders and tokenizers are dropped from the pipeline, and the remaining calls use the
embeddings. The validated reports are written as JSON Lines (``MetricsTracker.to_jsonl()``).

Examples:
    >>> import io, pathlib, tempfile, torch
    >>> from ddo_hooks import MetricsTracker
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     result = run_demo(family="sd", device=torch.device("cpu"), steps=1, calls=2,
    ...                       report=pathlib.Path(folder) / "run.jsonl", progress=False, log=io.StringIO())
    ...     saved = MetricsTracker.from_jsonl(result.report_path.read_text(encoding="utf-8"))
    >>> result.calls, len(saved.reports())
    ([1, 1, 1, 2, 2, 2], 6)
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ddo_hooks.errors import InvalidArgumentError
from ddo_hooks.hooks.sink import missing_folder
from ddo_hooks.release.devices import parse_cuda_device
from ddo_hooks.testing import FAMILIES

if TYPE_CHECKING:  # imported when the demo runs, so that the command line starts fast
    import torch

    from ddo_hooks.policy.model import HookPolicy
    from ddo_hooks.reports.tracker import MetricsTracker

__all__ = ["DEFAULT_REPORT", "FAMILIES", "DemoResult", "default_device", "parse_demo_device", "run_demo"]

DEFAULT_REPORT = "ddo-demo-reports.jsonl"
"""Where the demo writes its reports, relative to the working directory."""

ACCEPTED_DEMO_DEVICES = "'cpu', 'cuda' or 'cuda:N'"
"""The ``--device`` forms, as messages say them."""

_ENCODER_PREFIXES = ("text_encoder", "tokenizer")


@dataclass(frozen=True)
class DemoResult:
    """What a demo run produced.

    Attributes:
        pipeline: The name of the pipeline class that ran.
        device: The device it ran on.
        offloaded: Whether group offloading was enabled (CUDA runs).
        policy: The policy that was attached.
        tracker: Every report, in order.
        calls: The pipeline call (from 1) of each report, in the same order.
        report_path: The JSON Lines file the reports were written to.
    """

    pipeline: str
    device: torch.device
    offloaded: bool
    policy: HookPolicy
    tracker: MetricsTracker
    calls: list[int]
    report_path: Path


def default_device() -> torch.device:
    """CUDA when ``torch.cuda.is_available()``, else the CPU."""
    import torch

    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def parse_demo_device(text: str) -> torch.device:
    """Parse ``--device``: ``cpu``, ``cuda`` or ``cuda:N``.

    Raises:
        InvalidArgumentError: Any other text; the message lists the accepted forms.

    Examples:
        >>> parse_demo_device("cuda:1"), parse_demo_device("cpu")
        (device(type='cuda', index=1), device(type='cpu'))
    """
    import torch

    if text == "cpu":
        return torch.device("cpu")
    try:
        index = parse_cuda_device(text, argument="--device")
    except InvalidArgumentError as e:
        raise InvalidArgumentError(f"{text!r} is not a demo device; use {ACCEPTED_DEMO_DEVICES}") from e
    return torch.device("cuda") if index is None else torch.device("cuda", index)


def _check_device(device: torch.device) -> None:
    import torch

    if device.type == "cpu":
        return
    if device.type != "cuda":
        raise InvalidArgumentError(f"--device {device}: the demo runs on {ACCEPTED_DEMO_DEVICES}")
    if not torch.cuda.is_available():
        raise InvalidArgumentError(
            f"--device {device}: CUDA is not available to torch {torch.__version__}; "
            "leave --device out (or pass --device cpu) to run on the CPU"
        )
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        visible = "cuda:0" if count == 1 else f"cuda:0 to cuda:{count - 1}"
        raise InvalidArgumentError(f"--device {device}: this machine has {count} CUDA device(s) ({visible}); use one")


def _check_report_path(path: Path) -> None:
    if path.is_dir():
        raise InvalidArgumentError(f"--report {path}: is a directory; give a file path such as {path / DEFAULT_REPORT}")
    problem = missing_folder(path)  # the same rule, and words, as the policy's report_sink
    if problem is not None:
        raise InvalidArgumentError(f"--report {path}: {problem}")


def _policy_for(policy: HookPolicy | None, device: torch.device, log: TextIO) -> HookPolicy:
    import torch

    from ddo_hooks.policy.model import HookPolicy

    if policy is None:
        policy = HookPolicy.default()
        if device.type == "cuda" and device.index is not None:
            data = {**policy.model_dump(mode="json"), "device": f"cuda:{device.index}"}
            policy = HookPolicy.from_mapping(data, source=f"{policy.source} (device cuda:{device.index})")
    elif device.type == "cuda":
        current = torch.cuda.current_device()
        policy_index = parse_cuda_device(policy.device)
        if (current if policy_index is None else policy_index) != (current if device.index is None else device.index):
            print(f"note: the policy's device is {policy.device} but the demo runs on {device}", file=log)
    if policy.report_sink is not None:
        sink = policy.resolve_path(policy.report_sink)
        print(f"note: the policy's report_sink also receives every report: {sink}", file=log)
    return policy


def _check_actions(policy: HookPolicy) -> None:
    """Refuse, before building anything, a policy whose actions are not registered in this environment."""
    from ddo_hooks.boundaries import BOUNDARIES
    from ddo_hooks.errors import PolicyError
    from ddo_hooks.hooks.actions import ENTRY_POINT_GROUP, available_actions

    known = set(available_actions())
    for boundary in BOUNDARIES:
        for index, action in enumerate(policy.boundary(boundary).actions):
            if action.name in known:
                continue
            where = policy.locate(("boundaries", boundary, "actions", index))
            raise PolicyError(
                f"{where}: the policy names the action {action.name!r}, which is not registered in this Python "
                "environment: such an action comes from the package or code that registers it (with "
                f"@ddo_hooks.register_action({action.name!r}) or a {ENTRY_POINT_GROUP!r} entry point), and that "
                "is not installed or imported here. Install the package that provides it (then check with "
                "'ddo-hooks validate-policy'), or remove the action from the policy to run the demo "
                "(e.g. --policy examples/release-all-boundaries.yaml)"
            )


def run_demo(
    *,
    family: str = "flux",
    policy: HookPolicy | None = None,
    device: torch.device | None = None,
    steps: int = 2,
    calls: int = 2,
    report: str | os.PathLike[str] = DEFAULT_REPORT,
    progress: bool = True,
    log: TextIO | None = None,
) -> DemoResult:
    """Run the demo and write its reports.

    Args:
        family: ``flux``, ``sd`` or ``wan`` (see :data:`FAMILIES`).
        policy: The policy to attach; ``None`` for the packaged default.
        device: Where to run; ``None`` for :func:`default_device`.
        steps: Denoising steps per call (at least 1).
        calls: Pipeline calls in total (at least 1); calls after the first use prompt embeddings.
        report: The JSON Lines file to write (replaced if it exists).
        progress: Show the pipeline's progress bar (on stderr).
        log: Where notes and the per-call lines go (default: ``sys.stderr``).

    Returns:
        The :class:`DemoResult`.

    Raises:
        InvalidArgumentError: A bad family, device, count or report path.
        PolicyError: The policy names an action that is not registered here (checked first).
        DDOError: The policy could not be attached, or transformers is missing.
        OSError: The report file could not be written.
    """
    import torch

    from ddo_hooks.hooks.attachment import attach
    from ddo_hooks.reports.tracker import MetricsTracker

    log = sys.stderr if log is None else log
    if family not in FAMILIES:
        raise InvalidArgumentError(f"family={family!r} is not a demo family; use one of {', '.join(FAMILIES)}")
    for name, value in (("steps", steps), ("calls", calls)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidArgumentError(f"{name}={value!r} must be a whole number >= 1")
    device = default_device() if device is None else device
    _check_device(device)
    report_path = Path(report)
    _check_report_path(report_path)
    origin = "" if policy is not None else "the packaged default, "
    policy = _policy_for(policy, device, log)
    _check_actions(policy)
    from ddo_hooks.testing import tiny_pipelines as tiny

    pipe = tiny.build_pipeline(family)
    offloaded = device.type == "cuda"
    if offloaded:
        pipe.enable_group_offload(
            onload_device=device,
            offload_device=torch.device("cpu"),
            offload_type="block_level",
            num_blocks_per_group=1,
            use_stream=True,
        )
    placement = "group offloading to the CPU (pinned)" if offloaded else "no offloading (a CPU run pins nothing)"
    print(f"built a tiny {type(pipe).__name__} (random weights, nothing downloaded) on {device}: {placement}", file=log)
    print(f"policy: {origin}{policy.source}", file=log)
    tracker = MetricsTracker()
    numbers: list[int] = []
    embeds: dict[str, torch.Tensor] = {}
    with attach(pipe, policy, tracker=tracker):
        for call in range(1, calls + 1):
            kwargs = tiny.call_kwargs(family, steps=steps, seed=call - 1)
            if call == 2:
                embeds = tiny.embed_prompt(pipe, family)
                dropped = [name for name in pipe.components if name.startswith(_ENCODER_PREFIXES)]
                for name in dropped:
                    setattr(pipe, name, None)
                print(f"dropped {', '.join(dropped)}; the next calls use prompt embeddings", file=log)
            if call >= 2:
                kwargs = {**kwargs, "prompt": None, **embeds}
            what = "prompt embeddings" if call >= 2 else f"prompt {kwargs['prompt']!r}"
            print(f"call {call}/{calls}: {steps} steps, {what}", file=log, flush=True)
            pipe.set_progress_bar_config(disable=not progress, desc=f"call {call}/{calls}")
            pipe(**kwargs)
            numbers.extend([call] * (len(tracker.records()) - len(numbers)))

    MetricsTracker.from_jsonl(tracker.to_jsonl())  # what is written validates as it will be read back
    tracker.write_jsonl(report_path)  # replaced atomically: an earlier valid file is never left truncated
    return DemoResult(type(pipe).__name__, device, offloaded, policy, tracker, numbers, report_path)
