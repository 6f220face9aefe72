"""The ``ddo-hooks demo`` run: a real tiny pipeline, the policy attached, two calls, the reports.

It builds a tiny real diffusers pipeline with random weights (:mod:`ddo_hooks.testing.tiny_pipelines`;
nothing is downloaded), turns its progress bar on, and runs it on the default device: CUDA
when present, else the CPU, with the policy :data:`DEMO_POLICY` unless told another. A policy that pins the
weights from their files (``pinned_copies.from_files``) gets the pipeline saved through safetensors and loaded
back (:mod:`ddo_hooks.cli.demo_files`), so that its weights are views of files as a real pipeline's are. On CUDA
every model component gets diffusers group offloading (block level, with a transfer stream; with
``low_cpu_mem_usage=True`` where the weights are pinned from their files) so that pinned host memory exists; on
the CPU nothing is offloaded, the reports say honestly why each boundary was a no-op, and attach says what it would
pin from the files on a CUDA machine (a census).
Call 1 uses the prompt. Then, as memory-constrained users do, the prompt is encoded once, the
text encoders and tokenizers are dropped from the pipeline, and the remaining calls use the
embeddings. The validated reports are written as JSON Lines (``MetricsTracker.to_jsonl()``).

On a CPU, where a release observes nothing, the demo measures what a CPU run can: its own
action :data:`RSS_ACTION` runs last at every enabled boundary and records the process RSS there
(a ``boundary_action`` report with ``data.rss_bytes`` and, on Linux, which memory it is), and
:func:`~ddo_hooks.cli.demo_view.format_result` shows it per boundary, with what each component
holds (its parameters and buffers).

Examples:
    >>> import io, pathlib, tempfile, torch
    >>> from ddo_hooks import MetricsTracker
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     report = pathlib.Path(folder) / "run.jsonl"
    ...     result = run_demo(family="sd", device=torch.device("cpu"), steps=1, calls=2,
    ...                       report=report, progress=False, log=io.StringIO())
    ...     saved = MetricsTracker.from_jsonl(result.report_path.read_text(encoding="utf-8"))
    >>> result.calls == [0] + [1] * 6 + [2] * 6, len(saved.reports())
    (True, 13)
    >>> saved.components()[:3]
    ('pinned_from_files', 'host_cache_before_transformer', 'ddo_demo.rss_before_transformer')
    >>> sorted(result.component_bytes)
    ['text_encoder', 'unet', 'vae']
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ddo_hooks.cli.layout import wrap_text
from ddo_hooks.errors import InvalidArgumentError
from ddo_hooks.hooks.sink import missing_folder
from ddo_hooks.release.devices import parse_cuda_device
from ddo_hooks.testing import FAMILIES, Family

if TYPE_CHECKING:  # imported when the demo runs, so that the command line starts fast
    import torch

    from ddo_hooks.policy.model import HookPolicy
    from ddo_hooks.reports.tracker import MetricsTracker

__all__ = [
    "DEFAULT_REPORT",
    "DEMO_POLICY",
    "FROM_FILES_RUN",
    "FAMILIES",
    "CPU_RUN",
    "H200_FIGURES",
    "RSS_ACTION",
    "DemoResult",
    "component_bytes",
    "default_device",
    "parse_demo_device",
    "run_demo",
]

DEFAULT_REPORT = "ddo-demo-reports.jsonl"
"""Where the demo writes its reports, relative to the working directory."""

ACCEPTED_DEMO_DEVICES = "'cpu', 'cuda' or 'cuda:N'"
"""The ``--device`` forms, as messages say them."""

DEMO_POLICY = "smallest-box"
"""The preset the demo attaches unless ``--policy`` names another."""

RSS_ACTION = "ddo_demo.rss"
"""The demo's own action on a CPU: it records the process RSS at each enabled boundary."""

H200_FIGURES = (
    "on an H200, smallest-box under DDO ran a Flux-shaped pipeline of 3.99 GiB in a box of at most 5.25 GiB, where "
    "diffusers' group offloading with low_cpu_mem_usage=False needed 11.75, at 1.01x DDO's own time (the docs' "
    "Benchmarks page)"
)
"""What the GPU machine measured for :data:`DEMO_POLICY`, said once where a CPU run cannot show it (installed
packages hold no README); ``tests/test_runtimes_page.py`` holds it to ``bench_box-runtimes.json``."""

CPU_RUN = (
    "A CPU run pins nothing (torch has no CUDA host allocator here): every boundary is a no-op that says why, and "
    "the tables show the RSS at each boundary and which memory it is."
)
"""The demo's first words on a CPU: what this run shows."""

FROM_FILES_RUN = (
    "The policy pins the weights from their files (pinned_copies.from_files), so the tiny pipeline is saved through "
    "safetensors and loaded back, and attach says what it would pin from those files on a CUDA machine (after the "
    "table)."
)
"""What the demo adds on a CPU where the policy pins the weights from their files."""

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
        calls: The pipeline call (from 1) of each report, in the same order; ``0``
            (:data:`~ddo_hooks.cli.cells.ATTACH_CALL`) for what attach did before the first call.
        report_path: The JSON Lines file the reports were written to.
        component_bytes: The bytes of parameters and buffers of each model component, as built.
        observer: :data:`RSS_ACTION` when the demo observed the RSS at each boundary (a CPU run).
    """

    pipeline: str
    device: torch.device
    offloaded: bool
    policy: HookPolicy
    tracker: MetricsTracker
    calls: list[int]
    report_path: Path
    component_bytes: dict[str, int] = field(default_factory=dict)
    observer: str | None = None


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
    from ddo_hooks.reports.atomic_file import NotRegularFile, check_target

    if path.is_dir() and not path.is_symlink():
        raise InvalidArgumentError(f"--report {path}: is a directory; give a file path such as {path / DEFAULT_REPORT}")
    problem = missing_folder(path)  # the same rule, and words, as the policy's report_sink
    if problem is not None:
        raise InvalidArgumentError(f"--report {path}: {problem}")
    try:  # before the demo runs, not after: the rule every file the project writes follows
        check_target(path)
    except NotRegularFile as e:
        raise InvalidArgumentError(f"--report {e}") from None


def _policy_for(policy: HookPolicy | None, device: torch.device, log: TextIO) -> HookPolicy:
    import torch

    from ddo_hooks.policy.model import HookPolicy

    if policy is None:
        policy = HookPolicy.preset(DEMO_POLICY)
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
    from ddo_hooks.actions.registry import ENTRY_POINT_GROUP, available_actions
    from ddo_hooks.boundaries import BOUNDARIES
    from ddo_hooks.errors import PolicyError

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
                "(e.g. --policy lowest-peak, a packaged preset)"
            )


def component_bytes(pipe: Any) -> dict[str, int]:
    """The bytes each model component of a pipeline holds: its parameters and buffers.

    Examples:
        >>> import torch
        >>> class Pipe:
        ...     components = {"vae": torch.nn.Linear(4, 4), "tokenizer": object(), "unet": None}
        >>> component_bytes(Pipe())  # 16 weights and 4 biases in float32
        {'vae': 80}
    """
    import itertools

    import torch

    sizes = {}
    for name, component in pipe.components.items():
        if isinstance(component, torch.nn.Module):
            tensors = itertools.chain(component.parameters(), component.buffers())
            sizes[name] = sum(t.numel() * t.element_size() for t in tensors)
    return sizes


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
        policy: The policy to attach; ``None`` for the preset :data:`DEMO_POLICY`.
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
        DdoHooksError: The policy could not be attached, or transformers is missing.
        OSError: The report file could not be written.
    """
    import torch

    from ddo_hooks.actions.registry import register_action, unregister_action
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
    origin = "" if policy is not None else f"the preset {DEMO_POLICY}, "
    policy = _policy_for(policy, device, log)
    _check_actions(policy)
    from ddo_hooks.cli.demo_files import through_files, weights_folder
    from ddo_hooks.cli.demo_rss import observe_rss, with_observer
    from ddo_hooks.testing import tiny_pipelines as tiny

    from_files = policy.enabled and policy.pinned_copies.from_files is not None
    offloaded = device.type == "cuda"
    tracker = MetricsTracker()
    numbers: list[int] = []
    observer = None if offloaded else RSS_ACTION
    with weights_folder(from_files) as folder:  # the files stay while the pipeline reads them
        pipe = tiny.build_pipeline(family)
        sizes = component_bytes(pipe)
        if folder is not None:
            pipe = through_files(pipe, folder)
        if offloaded:
            pipe.enable_group_offload(  # type: ignore[attr-defined]  # diffusers ships no types: mypy sees no enable_group_offload
                onload_device=device,
                offload_device=torch.device("cpu"),
                offload_type="block_level",
                num_blocks_per_group=1,
                use_stream=True,
                low_cpu_mem_usage=from_files,  # the weights stay views of their files, to be pinned in place
            )
        _banner(pipe, device, offloaded, folder, f"{origin}{policy.source}", log)
        if observer is not None:
            register_action(observer, replace=True)(observe_rss)
        try:
            attached = with_observer(policy, observer) if observer else policy
            _calls(pipe, attached, tracker, numbers, family, steps, calls, progress, log)
        finally:
            if observer is not None:
                unregister_action(observer)

    MetricsTracker.from_jsonl(tracker.to_jsonl())  # what is written validates as it will be read back
    tracker.write_jsonl(report_path)  # replaced atomically: an earlier valid file is never left truncated
    return DemoResult(type(pipe).__name__, device, offloaded, policy, tracker, numbers, report_path, sizes, observer)


def _banner(pipe: Any, device: torch.device, offloaded: bool, folder: Path | None, policy: str, log: TextIO) -> None:
    """The demo's first lines: what a CPU run shows, what was built and where, and the policy."""
    if not offloaded:
        print(wrap_text(CPU_RUN if folder is None else f"{CPU_RUN} {FROM_FILES_RUN}", indent=""), file=log)
    placement = "no offloading (a CPU run pins nothing)"
    if offloaded:
        placement = "group offloading to the CPU with streams" + (", low_cpu_mem_usage=True" if folder else "")
    loaded = "" if folder is None else f", saved to {folder} and loaded back"
    print(f"built a tiny {type(pipe).__name__} (random weights, nothing downloaded{loaded}) on {device}: {placement}",
          file=log)  # fmt: skip
    print(f"policy: {policy}", file=log)


def _calls(
    pipe: Any,
    policy: HookPolicy,
    tracker: MetricsTracker,
    numbers: list[int],
    family: Family,
    steps: int,
    calls: int,
    progress: bool,
    log: TextIO,
) -> None:
    """Run the calls with the policy attached; ``numbers`` gets the call of each report recorded."""
    from ddo_hooks.cli.cells import ATTACH_CALL
    from ddo_hooks.hooks.attachment import attach
    from ddo_hooks.testing import tiny_pipelines as tiny

    embeds: dict[str, torch.Tensor] = {}
    with attach(pipe, policy, tracker=tracker):
        numbers.extend([ATTACH_CALL] * len(tracker.records()))  # what attach did (a repack): before any call
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
            print(f"call {call}/{calls}: {steps} step{'' if steps == 1 else 's'}, {what}", file=log, flush=True)
            pipe.set_progress_bar_config(disable=not progress, desc=f"call {call}/{calls}")
            pipe(**kwargs)
            numbers.extend([call] * (len(tracker.records()) - len(numbers)))
