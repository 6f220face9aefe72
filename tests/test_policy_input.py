"""Bad policy input always ends in a located PolicyError with a short message that shows what was written.

Hostile input is bounded by the work it may cause (which parser runs, how many messages are written),
never by the clock: a loaded machine cannot make these tests fail.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import pytest

from ddo_hooks import attach
from ddo_hooks.cli import main
from ddo_hooks.errors import PolicyError
from ddo_hooks.policy import messages, yaml_loader, yaml_text
from ddo_hooks.policy.messages import MAX_PROBLEMS
from ddo_hooks.policy.model import HookPolicy
from ddo_hooks.policy.yaml_loader import MAX_DEPTH, MAX_POLICY_BYTES
from ddo_hooks.testing.tiny_pipelines import build_pipeline

V = "version: 1\n"
LOCATED = re.compile(r"^policy\.yaml:\d+:\d+: ")


def load(text: str) -> HookPolicy:
    return HookPolicy.from_yaml_text(text, source="policy.yaml")


def problem(text: str) -> str:
    with pytest.raises(PolicyError) as info:
        load(text)
    return str(info.value)


# -- A.1: tags whose constructors raise inside PyYAML ------------------------------------------


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("!!timestamp foo", "!!timestamp foo is not a valid timestamp; write a date such as 2024-01-31"),
        ("!!timestamp ''", "!!timestamp '' is not a valid timestamp"),
        ("!!bool maybe", "!!bool maybe is not a valid bool; write true or false"),
        ("!!bool ''", "!!bool '' is not a valid bool; write true or false"),
        ("!!int ''", "!!int '' is not a valid int; write a whole number such as 42"),
        ("!!int '-'", "!!int - is not a valid int; write a whole number"),
        ("!!int 0x", "(!!int 0x); write a whole number such as 42"),
        ("!!float ''", "!!float '' is not a valid float; write a number such as 1.5"),
        ("!!float x", "(!!float x); write a number such as 1.5"),
        ("!!binary a", "!!binary a (failed to decode base64 data"),
        ("2020-13-45", "month must be in 1..12 (!!timestamp 2020-13-45); write a date such as 2024-01-31"),
    ],
)
def test_a_value_a_yaml_tag_cannot_read_is_a_located_policy_error(written: str, expected: str):
    message = problem(V + f"release:\n  collect: {written}\n")
    assert message.startswith("policy.yaml:3:12: release.collect: cannot be read as a value: ")
    assert expected in message
    assert message.count("\n") == 0  # the value left out is not reported again as missing or wrong


def test_an_unreadable_value_and_the_other_problems_are_reported_together_in_file_order():
    lines = problem("enabled: !!bool maybe\nversion: 1\nbogus: 1\n").splitlines()
    assert [line.split(": ")[0:2] for line in lines] == [["policy.yaml:1:10", "enabled"], ["policy.yaml:3:1", "bogus"]]


# -- A.2: report sinks that validate but could not be opened by attach ----------------------------


@pytest.mark.parametrize(
    ("sink", "expected"),
    [
        ("~nosuchuser_ddo/r.jsonl", "starts with '~' but there is no user 'nosuchuser_ddo' on this machine"),
        ('"logs/r\\0.jsonl"', "holds a NUL character, which no file name may hold; remove it"),
    ],
)
def test_a_report_sink_attach_could_not_open_is_refused_at_its_line(tmp_path: Path, sink: str, expected: str):
    message = problem(V + f"report_sink: {sink}\n")
    assert message.startswith("policy.yaml:2:1: report_sink: ")
    assert expected in message
    path = tmp_path / "policy.yaml"
    path.write_text(V + f"report_sink: {sink}\n", encoding="utf-8")
    assert main(["validate-policy", str(path)]) == 1


def test_what_attach_would_have_met_with_those_sinks():
    with pytest.raises(RuntimeError):
        Path("~nosuchuser_ddo/r.jsonl").expanduser()
    with pytest.raises(ValueError, match="null"), Path("r\0.jsonl").open("a"):
        pass


# -- A.3: every problem at once ---------------------------------------------------------------


def test_a_missing_version_does_not_hide_the_other_problems():
    lines = problem("enabled: maybe\nrelease: {collect: ful}\n").splitlines()
    assert [line.split(": ")[0:2] for line in lines] == [
        ["policy.yaml:1:1", "version"],
        ["policy.yaml:1:1", "enabled"],
        ["policy.yaml:2:11", "release.collect"],
    ]


def test_problems_of_the_yaml_and_of_the_settings_come_in_one_message_in_file_order():
    text = "version: 3\nrelease: {collect: ful}\nrelease: {}\ndevice: !!python/name:os.system ''\n"
    lines = problem(text).splitlines()
    assert [line.split(": ")[0:2] for line in lines] == [
        ["policy.yaml:1:1", "version"],
        ["policy.yaml:2:11", "release.collect"],
        ["policy.yaml:3:1", "release"],  # duplicate key
        ["policy.yaml:4:9", "device"],  # unsupported tag
    ]


OFF = "  before_transformer: {enabled: false}\n  before_vae: {enabled: false}\n  after_call: {enabled: false}\n"
RELEASE_ACTION = "boundaries:\n  after_call:\n    actions:\n      - name: host_cache_release\n"


# Two mistakes that pydantic's first pass reported one at a time: a check of several settings (every
# boundary disabled; an action's options against release; a duplicate action) runs only once every
# setting it reads passed, and an action's options stopped at their first problem.
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            V + "release: {collect: sometimes}\nboundaries:\n" + OFF,
            [["policy.yaml:2:11", "release.collect"], ["policy.yaml:3:1", "boundaries"]],
        ),
        (
            V + "keep_reports: -1\nrelease: {collect: young}\n" + RELEASE_ACTION + "        options: {core: ddo}\n",
            [
                ["policy.yaml:2:1", "keep_reports"],
                ["policy.yaml:8:19", "boundaries.after_call.actions[0].options.core"],
            ],
        ),
        (
            V + RELEASE_ACTION + "        options: {collect: sometimes, trigger: never}\n",
            [
                ["policy.yaml:6:19", "boundaries.after_call.actions[0].options.collect"],
                ["policy.yaml:6:39", "boundaries.after_call.actions[0].options.trigger"],
            ],
        ),
        (
            V + RELEASE_ACTION + "        options: {colour: red, shade: blue}\n",
            [
                ["policy.yaml:6:19", "boundaries.after_call.actions[0].options.colour"],
                ["policy.yaml:6:32", "boundaries.after_call.actions[0].options.shade"],
            ],
        ),
        (
            V + "boundaries:\n  before_vae:\n    actions: [{name: malloc_trim, options: {}}, {name: malloc_trim, "
            "options: {}}, {name: host_cache_release, options: {collect: x}}]\n",
            [
                ["policy.yaml:4:49", "boundaries.before_vae.actions[1]"],
                ["policy.yaml:4:120", "boundaries.before_vae.actions[2].options.collect"],
            ],
        ),
    ],
    ids=["inert and a bad value", "a conflict and a bad value", "two bad options", "two unknown options", "twice"],
)
def test_a_check_of_several_settings_and_a_bad_value_are_reported_together(text: str, expected: list[list[str]]):
    assert [line.split(": ")[0:2] for line in problem(text).splitlines()] == expected


@pytest.mark.parametrize(
    ("text", "only"),
    [
        (V + "pinned_copies: {from_files: always, keep_encoders_pinned: true}\n", "pinned_copies.from_files"),
        (V + "boundaries:\n  before_vae: {enabled: maybe, actions: []}\n", "boundaries.before_vae.enabled"),
        (V + "boundaries:\n  after_call: {actions: [{name: 5}]}\n", "boundaries.after_call.actions[0].name"),
    ],
)
def test_a_problem_that_follows_from_another_one_is_not_reported_with_it(text: str, only: str):
    # keep_encoders_pinned needs from_files, which was wrong; a boundary that acts needs an action,
    # and whether it acts was wrong; a name that was wrong is not also missing.
    assert [line.split(": ")[1] for line in problem(text).splitlines()] == [only]


def test_validate_policy_says_each_nearly_right_action_name_with_the_other_problems(tmp_path: Path, capsys):
    path = tmp_path / "policy.yaml"
    text = V + "boundaries:\n  before_vae:\n    actions: [host_cache_relase, malloc_trimm]\n"
    path.write_text(text + RELEASE_ACTION[len("boundaries:\n") :] + "        options: {collect: x}\n", encoding="utf-8")
    assert main(["validate-policy", str(path)]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert [line.removeprefix(str(tmp_path) + "/").split(": ")[0:2] for line in lines] == [
        ["policy.yaml:4:15", "unknown action 'host_cache_relase'; did you mean 'host_cache_release'? known actions"],
        ["policy.yaml:4:34", "unknown action 'malloc_trimm'; did you mean 'malloc_trim'? known actions"],
        ["policy.yaml:8:19", "boundaries.after_call.actions[0].options.collect"],
    ]
    path.write_text(text, encoding="utf-8")  # a valid policy but for the names: both said too
    assert main(["validate-policy", str(path)]) == 1
    assert len(capsys.readouterr().err.splitlines()) == 2


# -- A.4: values are shown as written ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (V + "release: {collect: yes}\n", "release.collect: yes is not one of full, young, auto"),
        (V + "release: {collect: Off}\n", "release.collect: Off is not one of full, young, auto"),
        (V + "release: {collect: 'ful'}\n", "release.collect: 'ful' is not one of full, young, auto; did you mean"),
        (V + "device: yes\n", "device: yes is not a CUDA device; use 'cuda' or 'cuda:N'"),
        (V + "report_sink: 0x10\n", "report_sink: expected a string, got 0x10"),
        (V + "enabled: ~\n", "enabled: expected true or false, got ~"),
        ("version: yes\n", "version: unsupported version yes (a bool)"),
        (V + "release: {min_releasable_bytes: 1_000}\n", None),  # YAML 1.1 reads 1_000 as 1000: valid
        (V + "auxiliary_sources: {max_copy_bytes: NO}\n", "max_copy_bytes: NO is a boolean, not a size"),
        (
            V + "boundaries: {after_call: {actions: [{name: host_cache_release, options: {collect: on}}]}}\n",
            "options.collect: on is not one of full, young, auto",
        ),
        (V + "boundaries: {after_call: {actions: [1.50]}}\n", "got 1.50"),
    ],
)
def test_a_value_in_a_message_is_what_the_user_wrote(text: str, expected: str | None):
    if expected is None:
        assert load(text).release.min_releasable_bytes == 1000
        return
    assert expected in problem(text)


# -- A.5: long values are cut ------------------------------------------------------------------

HUGE = "x" * 30_000_000


@pytest.mark.parametrize(
    "data",
    [
        {"version": 1, "release": {"collect": HUGE}},
        {"version": 1, HUGE: 1},
        {"version": 1, "device": HUGE},
        {"version": 1, "release": {"min_releasable_bytes": "1" + HUGE}},
        {"version": 1, "release": {"min_releasable_bytes": 10**5000}},
        {"version": HUGE},
        {"version": 1, "boundaries": {"after_call": {"actions": [HUGE.upper()]}}},
        {"version": 1, "boundaries": {"after_call": {"actions": [{"name": "x", "options": {HUGE: float("nan")}}]}}},
        {"version": 1, "report_sink": HUGE + "\0"},
    ],
    ids=["enum", "key", "device", "size", "size-int", "version", "action", "option-key", "sink"],
)
def test_a_huge_value_gives_a_short_message(data: dict):
    with pytest.raises(PolicyError) as info:
        HookPolicy.from_mapping(data)
    assert len(str(info.value)) < 600
    assert "..." in str(info.value) or "an int of about 5,001 digits" in str(info.value)


@pytest.mark.parametrize(
    "text",
    [
        V + "k" * 500_000 + ": 1\n",
        V + "release: !" + "t" * 500_000 + " x\n",
        V + "x: *" + "a" * 500_000 + "\n",
        V + "release: {collect: !!bool " + "m" * 500_000 + "}\n",
    ],
    ids=["key", "tag", "alias", "tagged-value"],
)
def test_a_huge_token_in_yaml_gives_a_short_message(text: str):
    assert len(problem(text)) < 600


# -- A.6: size and time limits before parsing ---------------------------------------------------


@pytest.fixture
def parsers(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The parsers that run, in order: the linear bracket scan, libyaml, PyYAML's pure-Python loader."""
    ran: list[str] = []

    def counted(name: str, function):
        def wrapper(*args, **kwargs):
            ran.append(name)
            return function(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(yaml_text, "too_deep", counted("scan", yaml_text.too_deep))
    monkeypatch.setattr(yaml_loader, "_compose", counted("compose", yaml_loader._compose))
    monkeypatch.setattr(yaml_loader, "PolicyLoader", counted("pure-python", yaml_loader.PolicyLoader))
    return ran


def test_a_policy_larger_than_the_limit_is_refused_before_parsing(parsers: list[str]):
    message = problem(V + "# " + "x" * MAX_POLICY_BYTES + "\n")
    assert parsers == []
    assert message.startswith("policy.yaml: the policy is 1,048,590 characters long, more than a policy may be")


def test_a_policy_file_larger_than_the_limit_is_refused_before_reading(tmp_path: Path):
    path = tmp_path / "big.yaml"
    with path.open("wb") as f:
        f.truncate(MAX_POLICY_BYTES + 1)  # sparse: nothing to read if it were read
    with pytest.raises(PolicyError, match=r"big\.yaml: is 1,048,577 bytes, more than a policy file may hold"):
        HookPolicy.from_yaml(path)


@pytest.mark.parametrize(
    ("text", "ran"),
    [
        ("[" * 2000 + "]" * 2000, ["scan"]),
        (V + "x: " + "{a: " * 1000 + "1" + "}" * 1000, ["scan"]),
        (V + "x:\n" + "- " * 2000 + "1\n", ["scan", "compose"]),
        (V + "x:\n" + "".join(" " * (i + 1) + "- \n" for i in range(1400)), ["scan", "compose"]),
    ],
    ids=["brackets", "braces", "dashes", "indentation"],
)
def test_deep_nesting_is_refused_without_the_quadratic_parser(text: str, ran: list[str], parsers: list[str]):
    # PyYAML's pure-Python scanner is quadratic in the nesting depth: deep brackets are refused by
    # the linear scan before any parser runs, deep blocks by libyaml's own depth limit.
    message = problem(text)
    assert parsers == ran
    assert "nested too deeply to be a policy" in message
    assert len(text.encode()) < 4_100_000


def test_nesting_within_the_limits_is_read():
    assert MAX_DEPTH > 64 + 6  # options may nest 64 levels, below 6 levels of the policy itself
    options = "[" * 60 + "]" * 60
    policy = load(V + f"boundaries: {{after_call: {{actions: [{{name: x, options: {{a: {options}}}}}]}}}}\n")
    assert policy.boundary("after_call").actions[0].name == "x"


def test_brackets_inside_quotes_and_comments_do_not_count_as_nesting():
    text = V + "report_sink: '" + "[" * 500 + "'\n# " + "{" * 500 + "\nenabled: true\n"
    assert load(text).report_sink == "[" * 500


def test_49000_unknown_keys_give_a_short_message_with_at_most_50_suggestions(monkeypatch: pytest.MonkeyPatch):
    # A "did you mean" costs a fuzzy match against every allowed key: only shown lines pay for one.
    suggested: list[object] = []
    did_you_mean = messages.did_you_mean

    def counted(key: object, allowed: list[str]) -> str | None:
        suggested.append(key)
        return did_you_mean(key, allowed)

    monkeypatch.setattr(messages, "did_you_mean", counted)
    text = V + "".join(f"k{i}: 1\n" for i in range(49_000))
    lines = problem(text).splitlines()
    assert len(suggested) == MAX_PROBLEMS
    assert len(lines) == MAX_PROBLEMS + 1
    assert lines[0].startswith("policy.yaml:2:1: k0: unknown key")
    assert lines[-1] == f"... and {49_000 - MAX_PROBLEMS} more problems (fix these first, then check the policy again)"


def test_many_duplicate_keys_are_capped_too():
    lines = problem(V + "enabled: true\n" * 5000).splitlines()
    assert len(lines) == MAX_PROBLEMS + 1
    assert lines[-1].startswith("... and 4949 more problems")


def test_every_message_line_is_located():
    for text in (V + "release: {collect: !!bool maybe}\nzzz: 1\n", "version: 2\nenabled: 3\n"):
        assert all(LOCATED.match(line) for line in problem(text).splitlines())


# -- F: what a policy is given, taken as it is written --------------------------------------------------


@pytest.mark.parametrize("unordered", [set, frozenset])
def test_a_set_of_actions_is_refused_since_actions_run_in_their_order(unordered: type):
    """A set's order follows the hash seed: release_done_components before host_cache_release releases other memory."""
    actions = unordered(["release_done_components", "malloc_trim"])
    data = {"version": 1, "boundaries": {"after_call": {"actions": actions}}}
    with pytest.raises(PolicyError, match=r"boundaries\.after_call\.actions: actions is a list, in the order they run"):
        HookPolicy.from_mapping(data)


@pytest.mark.parametrize("target", ["no-such-file.yaml", "lowest-peak"], ids=["dangling", "looping"])
def test_a_broken_link_named_like_a_preset_is_refused_not_taken_for_the_preset(tmp_path: Path, monkeypatch, target):
    monkeypatch.chdir(tmp_path)
    os.symlink(target, "lowest-peak")  # "lowest-peak" to itself: a loop
    for load in (HookPolicy.from_name_or_yaml, lambda name: attach(build_pipeline("sd"), name)):
        with pytest.raises(PolicyError, match=r"^lowest-peak: a symbolic link that (names nothing|loops)") as raised:
            load("lowest-peak")
        assert "the preset" in str(raised.value)
    assert main(["validate-policy", "lowest-peak"]) == 1


def test_a_policy_in_a_folder_this_user_cannot_search_is_not_called_missing(tmp_path: Path, monkeypatch, capsys):
    """As root every folder can be searched: the refusal a non-root user meets is made by hand."""
    path = tmp_path / "locked" / "policy.yaml"
    path.parent.mkdir()
    path.write_text("version: 1\n", encoding="utf-8")
    for name in ("stat", "lstat"):
        real = getattr(os, name)

        def refused(file, *args, real=real, **kwargs):
            if str(file).startswith(str(path.parent) + os.sep):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(file))
            return real(file, *args, **kwargs)

        monkeypatch.setattr(os, name, refused)
    for load in (HookPolicy.from_name_or_yaml, HookPolicy.from_yaml):
        with pytest.raises(PolicyError, match=r"cannot look for the policy file: a folder on its path") as raised:
            load(str(path))
        assert "no such" not in str(raised.value)
    assert main(["validate-policy", str(path)]) == 1
    assert "no such" not in capsys.readouterr().err


def test_a_policy_of_too_many_nodes_without_an_alias_is_not_told_to_use_fewer_aliases():
    text = "version: 1\nnotes: [" + "0, " * 100_001 + "]\n"  # 300 KB, no alias
    with pytest.raises(PolicyError, match=r"has more than 100000 YAML nodes; a policy is a few dozen") as raised:
        HookPolicy.from_yaml_text(text)
    assert "alias" not in str(raised.value)
