"""The YAML hook policy: its shape, its defaults, and errors that say where and how to fix them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import ddo_hooks
from ddo_hooks.actions.host_cache_release import NAME as HOST_CACHE_RELEASE
from ddo_hooks.actions.host_cache_release import HostCacheReleaseOptions
from ddo_hooks.boundaries import BOUNDARIES
from ddo_hooks.cli.main import main
from ddo_hooks.cli.schema import SCHEMA_DIR, render
from ddo_hooks.errors import InvalidArgumentError, PolicyError
from ddo_hooks.policy.model import HookPolicy, policy_json_schema
from ddo_hooks.policy.parts import ActionSpec
from ddo_hooks.policy.yaml_loader import PolicyLoader, load_yaml
from ddo_hooks.reports.tracker import MAX_RECORDS
from ddo_hooks.testing.tiny_pipelines import build_pipeline

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
DEFAULT_YAML = Path(ddo_hooks.__file__).parent / "policy" / "presets" / "default.yaml"
SCHEMA_COMMENT = "# yaml-language-server: $schema=../ddo_hooks/schemas/hook-policy.schema.json"


MiB = 1 << 20
V = "version: 1\n"


def load(text: str) -> HookPolicy:
    return HookPolicy.from_yaml_text(text, source="policy.yaml")


def write(tmp_path: Path, text: str | bytes, name: str = "policy.yaml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


# -- the shape and the defaults -------------------------------------------------------------


def test_only_version_is_required_and_everything_else_has_the_documented_default():
    policy = load("version: 1\n")
    assert policy.enabled is True
    assert policy.device == "cuda"
    assert policy.report_sink is None
    assert (policy.release.collect, policy.release.min_releasable_bytes) == ("auto", 0)
    for name in BOUNDARIES:
        assert policy.boundary(name).enabled is True
        assert policy.boundary(name).actions == (ActionSpec(name=HOST_CACHE_RELEASE),)
    assert policy.auxiliary_sources.enabled is False
    assert policy.auxiliary_sources.max_copy_bytes == 16 * 1024**2


def test_the_packaged_default_policy_equals_the_model_defaults_and_spells_out_every_key():
    assert HookPolicy.default() == HookPolicy(version=1) == load("version: 1\n")
    spelled = yaml.safe_load(DEFAULT_YAML.read_text(encoding="utf-8"))
    defaults = HookPolicy(version=1).model_dump(mode="json")
    assert leaf_keys(spelled) == leaf_keys(defaults)
    assert HookPolicy.default().source.endswith("default.yaml")


def leaf_keys(data: object, prefix: str = "") -> set[str]:
    if isinstance(data, dict):
        return set().union(*(leaf_keys(v, f"{prefix}{k}.") for k, v in data.items()))
    return {prefix.rstrip(".")}


def test_boundaries_are_in_firing_order():
    assert BOUNDARIES == ("before_transformer", "before_vae", "after_call")


def test_every_setting_is_read():
    policy = load(
        "version: 1\n"
        "enabled: true\n"
        "device: cuda:1\n"
        "report_sink: reports.jsonl\n"
        "release: {collect: young, min_releasable_bytes: 1.5GiB}\n"
        "boundaries:\n"
        "  before_transformer: {enabled: false}\n"
        "  after_call:\n"
        "    actions:\n"
        "      - host_cache_release\n"
        "      - {name: my_pkg.log-memory, options: {label: x, limits: [1, 2.5], nested: {ok: null}}}\n"
        "auxiliary_sources: {enabled: true, max_copy_bytes: 512}\n"
    )
    assert policy.device == "cuda:1"
    assert policy.report_sink == "reports.jsonl"
    assert policy.release.collect == "young"
    assert policy.release.min_releasable_bytes == 1_610_612_736
    assert policy.enabled_boundaries() == ("before_vae", "after_call")
    assert policy.boundary("after_call").action_names() == ("host_cache_release", "my_pkg.log-memory")
    custom = policy.boundary("after_call").actions[1]
    assert custom.options == {"label": "x", "limits": [1, 2.5], "nested": {"ok": None}}
    assert policy.boundary("before_transformer").actions == (ActionSpec(name=HOST_CACHE_RELEASE),)
    assert (policy.auxiliary_sources.enabled, policy.auxiliary_sources.max_copy_bytes) == (True, 512)


def test_an_action_name_and_an_action_mapping_are_the_same_action():
    by_name = load("version: 1\nboundaries: {after_call: {actions: [host_cache_release]}}\n")
    by_mapping = load("version: 1\nboundaries: {after_call: {actions: [{name: host_cache_release}]}}\n")
    assert by_name == by_mapping
    assert by_name.boundary("after_call").actions[0] == ActionSpec(name="host_cache_release", options={})


@pytest.mark.parametrize(("written", "stored"), [("cuda", "cuda"), ("cuda:0", "cuda:0"), ("cuda:07", "cuda:7")])
def test_the_device_is_stored_as_a_canonical_string(written, stored):
    assert HookPolicy.from_mapping({"version": 1, "device": written}).device == stored


def test_the_built_in_action_receives_the_release_settings_overridden_per_boundary():
    policy = load(
        V + "release: {collect: young, min_releasable_bytes: 1MiB}\n"
        "boundaries:\n"
        "  before_vae: {actions: [{name: host_cache_release, options: {min_releasable_bytes: 2MiB}}, other]}\n"
        "  after_call: {actions: [{name: host_cache_release, options: {collect: full}}]}\n"
    )
    assert policy.actions("before_transformer")[0].options == HostCacheReleaseOptions(
        collect="young", min_releasable_bytes=MiB
    )
    release, other = policy.actions("before_vae")
    assert release.options == HostCacheReleaseOptions(collect="young", min_releasable_bytes=2 * MiB)
    assert (other.name, other.options) == ("other", {})  # other actions get their options as written
    assert policy.actions("after_call")[0].options == HostCacheReleaseOptions(collect="full", min_releasable_bytes=MiB)
    assert policy.actions("after_call")[0].written == {"collect": "full"}
    assert policy.boundary("after_call").actions[0].options == {"collect": "full"}  # as written


def test_a_disabled_policy_has_no_enabled_boundaries():
    policy = load("version: 1\nenabled: false\n")
    assert policy.enabled_boundaries() == ()
    assert policy.boundary("after_call").enabled is True  # kept, but the master switch wins


def test_boundary_rejects_an_unknown_name_with_a_suggestion():
    with pytest.raises(InvalidArgumentError, match=r"unknown boundary 'after_cal'; did you mean 'after_call'\?"):
        HookPolicy.default().boundary("after_cal")


def test_policies_are_frozen_and_equal_by_settings_not_by_origin(tmp_path):
    from_file = HookPolicy.from_yaml(write(tmp_path, "version: 1\n"))
    assert from_file == HookPolicy.from_mapping({"version": 1}) == HookPolicy(version=1)
    assert hash(from_file) == hash(HookPolicy(version=1))
    assert from_file != load("version: 1\nenabled: false\n")
    with pytest.raises(ValidationError, match="frozen"):
        from_file.enabled = False  # type: ignore[misc]


# -- positions and paths --------------------------------------------------------------------


def test_locate_points_at_each_key_and_list_item(tmp_path):
    path = write(
        tmp_path,
        "version: 1\nboundaries:\n  after_call:\n    actions:\n      - host_cache_release\n      - name: my.flush\n",
    )
    policy = HookPolicy.from_yaml(path)
    assert policy.source == str(path)
    assert policy.locate(("boundaries", "after_call")) == f"{path}:3:3"
    assert policy.locate(("boundaries", "after_call", "actions", 0)) == f"{path}:5:9"
    assert policy.locate(("boundaries", "after_call", "actions", 0, "name")) == f"{path}:5:9"
    assert policy.locate(("boundaries", "after_call", "actions", 1)) == f"{path}:6:9"
    assert policy.locate(("boundaries", "after_call", "actions", 1, "name")) == f"{path}:6:9"
    assert policy.locate(("boundaries", "before_vae")) == str(path)  # a default: no position
    assert policy.locate(()) == f"{path}:1:1"


def test_a_policy_not_loaded_from_yaml_locates_to_its_source():
    assert HookPolicy.from_mapping({"version": 1}).locate(("version",)) == "<mapping>"
    assert HookPolicy.from_mapping({"version": 1}, source="cli").source == "cli"
    assert HookPolicy.from_yaml_text("version: 1\n").locate(("version",)) == "<string>:1:1"
    assert HookPolicy(version=1).source == "<policy>"


def test_a_relative_report_sink_resolves_against_the_policy_folder(tmp_path, monkeypatch):
    folder = tmp_path / "conf"
    folder.mkdir()
    policy = HookPolicy.from_yaml(write(folder, "version: 1\nreport_sink: logs/r.jsonl\n"))
    monkeypatch.chdir(tmp_path)
    assert policy.resolve_path(policy.report_sink) == folder.absolute() / "logs" / "r.jsonl"
    assert policy.resolve_path(tmp_path / "abs.jsonl") == tmp_path / "abs.jsonl"


def test_a_relative_path_of_a_policy_not_from_a_file_resolves_against_the_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    policy = HookPolicy.from_yaml_text("version: 1\nreport_sink: r.jsonl\n", source="conf/policy.yaml")
    assert policy.resolve_path("r.jsonl") == tmp_path / "r.jsonl"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert policy.resolve_path("~/r.jsonl") == tmp_path / "home" / "r.jsonl"


# -- errors that teach ----------------------------------------------------------------------

AFTER = V + "boundaries: {after_call: {actions: [%s]}}\n"  # one action list, for action cases

# fmt: off
WRONG_VALUES = [
    (V + "boundaries:\n  before_transformer: {}\n  before_vea:\n    enabled: false\n",
     r"^policy\.yaml:4:3: boundaries\.before_vea: unknown key; did you mean 'before_vae'\? "
     r"\(allowed: before_transformer, before_vae, after_call\)$"),
    (V + "enable: false\n", r"^policy\.yaml:2:1: enable: unknown key; did you mean 'enabled'\?"),
    (V + "release: {colect: full}\n", r"release\.colect: unknown key; did you mean 'collect'\?"),
    (V + "zzz: 1\n", r"^policy\.yaml:2:1: zzz: unknown key \(allowed: version, enabled, device,"),
    (AFTER % "{name: x, opts: {}}", r":2:47: boundaries\.after_call\.actions\[0\]\.opts: unknown key; did you mean"),
    (V + "enabled: 'yes'\n", r"^policy\.yaml:2:1: enabled: expected true or false, got 'yes'$"),
    (V + "enabled: 1\n", r"enabled: expected true or false, got 1$"),
    (V + "report_sink: 5\n", r"report_sink: expected a string, got 5$"),
    (V + "report_sink: ''\n", r"report_sink: expected a non-empty string, got ''$"),
    (V + "release: fast\n", r"release: expected a mapping, got 'fast' \(keys: collect, min_releasable_bytes"),
    (V + "boundaries: null\n", r"boundaries: expected a mapping, got null"),
    (V + "boundaries: {after_call: false}\n", r"after_call: expected a mapping, got false \(keys: enabled, act"),
    (V + "boundaries: {after_call: {actions: flush}}\n", r"actions: expected a list, got 'flush'$"),
    (V + "release: {collect: ful}\n",
     r"release\.collect: 'ful' is not one of full, young, auto; did you mean 'full'\?$"),
    (V + "device: cpu\n", r"^policy\.yaml:2:1: device: 'cpu' is not a CUDA device; use 'cuda' or 'cuda:N'$"),
    (V + "device: 0\n", r"device: 0 is not a CUDA device"),
    (V + "device: ' cuda'\n", r"device: ' cuda' is not a CUDA device"),
    (V + "keep_reports: 9223372036854775808\n",
     r"^policy\.yaml:2:1: keep_reports: 9223372036854775808 is more than 100,000, the most reports an attachment "
     r"keeps in memory; keep fewer, and read every report from report_sink$"),
    (V + "keep_reports: 100001\n", r"keep_reports: 100001 is more than 100,000, the most reports"),
    (V + "keep_reports: -1\n",
     r"^policy\.yaml:2:1: keep_reports: -1 is negative; use 0 \(none in memory: read report_sink\) to 100,000$"),
    (V + "release: {min_releasable_bytes: -5}\n",
     r"^policy\.yaml:2:11: release\.min_releasable_bytes: -5 is negative; use a non-negative int of bytes"),
    (V + "release: {min_releasable_bytes: -5MiB}\n", r"min_releasable_bytes: '-5MiB' is negative"),
    (V + "auxiliary_sources: {max_copy_bytes: 16 MBytes}\n",
     r"auxiliary_sources\.max_copy_bytes: '16 MBytes' has an unknown unit 'MBytes'; use B, KB"),
    (V + "auxiliary_sources: {max_copy_bytes: true}\n", r"max_copy_bytes: true is a boolean, not a size"),
    (V + "auxiliary_sources: {max_copy_bytes: .nan}\n", r"max_copy_bytes: \.nan is not a finite number"),
    (AFTER % "Flush", r"actions\[0\]\.name: 'Flush' is not an action name; use a lowercase letter"),
    (AFTER % "''", r"actions\[0\]\.name: '' is not an action name"),
    (AFTER % "5", r"actions\[0\]: expected an action name \(e\.g\. host_cache_release\) or a mapping"),
    (AFTER % "{options: {}}", r"actions\[0\]\.name: required key is missing; add it$"),
    (V + "boundaries:\n  after_call:\n    actions: [a, b, a]\n",
     r"^policy\.yaml:4:21: boundaries\.after_call\.actions\[2\]: action 'a' is listed twice "
     r"\(entries 0 and 2\); list each action once$"),
    (AFTER % "", r"after_call\.actions: an enabled boundary needs at least one action; .* enabled: false$"),
    (AFTER % "{name: x, options: {when: 2024-01-01}}",
     r"actions\[0\]\.options\.when: a date is not a JSON value; use strings, numbers"),
    (AFTER % "{name: x, options: {a: [1, .inf]}}", r"options\.a\[1\]: \.inf is not a JSON number"),
    (AFTER % "{name: host_cache_release, options: {colect: full}}",
     r"^policy\.yaml:2:74: boundaries\.after_call\.actions\[0\]\.options\.colect: unknown option of "
     r"host_cache_release; it takes collect, min_releasable_bytes, trigger, core \(the keys of 'release'\)$"),
    (AFTER % "{name: host_cache_release, options: {collect: ful}}",
     r"actions\[0\]\.options\.collect: 'ful' is not one of full, young, auto; did you mean 'full'\?$"),
    (AFTER % "{name: host_cache_release, options: {min_releasable_bytes: 5 parsecs}}",
     r"actions\[0\]\.options\.min_releasable_bytes: '5 parsecs' has an unknown unit 'parsecs'"),
    (V + "boundaries:\n  before_transformer: {enabled: false}\n  before_vae: {enabled: false}\n"
     "  after_call: {enabled: false}\n",
     r"^policy\.yaml:2:1: boundaries: every boundary is disabled, so the policy would do nothing; "
     r"enable a boundary or set enabled: false at the top$"),
    # the release core: a value of its own, and settings DDO's core cannot honour, where they are written
    (V + "release: {core: DDO}\n", r"^policy\.yaml:2:11: release\.core: 'DDO' is not one of ddo_hooks, ddo; did you "
     r"mean 'ddo'\?$"),
    (V + "release: {core: true}\n", r"^policy\.yaml:2:11: release\.core: true is not one of ddo_hooks, ddo$"),
    (AFTER % "{name: host_cache_release, options: {core: dd0}}",
     r"actions\[0\]\.options\.core: 'dd0' is not one of ddo_hooks, ddo; did you mean 'ddo'\?$"),
    (V + "release: {core: ddo, collect: young}\n",
     r"^policy\.yaml:2:22: release\.collect: 'young' does not fit core: ddo: DDO's release core always collects "
     r"every generation \(gc\.collect\(\)\); use full or auto, or core: ddo_hooks \(the default\)$"),
    (V + "release: {min_releasable_bytes: 64MiB, core: ddo}\n",
     r"^policy\.yaml:2:11: release\.min_releasable_bytes: 64\.0 MiB does not fit core: ddo: DDO's release core has "
     r"no threshold; leave min_releasable_bytes at 0, or core: ddo_hooks \(the default\)$"),
    (AFTER % "{name: host_cache_release, options: {core: ddo, collect: young}}",
     r"^policy\.yaml:2:85: boundaries\.after_call\.actions\[0\]\.options\.collect: 'young' does not fit core: ddo"),
    (V + "release: {collect: young}\n" + (AFTER % "{name: host_cache_release, options: {core: ddo}}")[len(V):],
     r"^policy\.yaml:3:74: boundaries\.after_call\.actions\[0\]\.options\.core: 'ddo' does not fit "
     r"release\.collect: 'young': DDO's release core always collects every generation"),
    (V + "release: {core: ddo}\n"
     + (AFTER % "{name: host_cache_release, options: {min_releasable_bytes: 1KiB}}")[len(V):],
     r"options\.min_releasable_bytes: 1\.0 KiB does not fit core: ddo \(from release\): DDO's release core has no "
     r"threshold"),
]
MISSHAPEN = [
    ("", r"^policy\.yaml: the policy is empty; write at least 'version: 1'"),
    ("# only a comment\n\n", r"the policy is empty"),
    ("---\n", r"the policy is empty"),
    ("- version: 1\n", r"^policy\.yaml:1:1: the top level must be a mapping of settings .*got a list$"),
    ("just text\n", r"the top level must be a mapping .*got 'just text'$"),
    ("42\n", r"the top level must be a mapping .*got 42$"),
    ("enabled: true\n", r"^policy\.yaml:1:1: version: missing; add 'version: 1' .*\(supported versions: 1"),
    ("enabled: true\nversion: 2\n", r"^policy\.yaml:2:1: version: unsupported version 2; supported versi"),
    ("version: '1'\n", r"unsupported version '1' \(a str\); supported versions: 1 \(write 'version: 1'\)$"),
    ("version: true\n", r"version: unsupported version true \(a bool\)"),
    ("version: 1.0\n", r"version: unsupported version 1\.0 \(a float\)"),
    ("version: null\n", r"version: unsupported version null"),
]
UNSAFE_YAML = [
    (V + "boundaries:\n  after_call: {enabled: true}\n  after_call: {enabled: false}\n",
     r"^policy\.yaml:4:3: boundaries\.after_call: duplicate key \(first at line 3, again at line 4\); "
     r"keep only one of them$"),
    (V + "on: true\n", r"^policy\.yaml:2:1: key 'on' is not a string \(YAML read it as true\); quote it$"),
    (V + "1: x\n", r"key '1' is not a string \(YAML read it as 1\)"),
    (V + "[a]: x\n", r"key 'a mapping or list' is not a string"),
    (V + "release: !!python/object:os.system {}\n", r"release: unsupported YAML tag '!!python/object:os"),
    (V + "device: !!python/name:os.system ''\n", r"device: unsupported YAML tag '!!python/name:os\.system'"),
    (V + "release: !custom {}\n", r"release: unsupported YAML tag '!custom'; use a plain mapping or list$"),
    (V + "x: !!set {a, b}\n", r"unsupported YAML tag '!!set'"),
    ("a: &a {enabled: true}\nversion: 1\nb: {<<: *a}\n", r":3:5: b: YAML merge keys \('<<'\) are not sup"),
    (V + "x: &a [*a]\n", r"^policy\.yaml:2:4: x\[0\]: a recursive alias; write the value out instead$"),
]
BAD_SYNTAX = [
    (V + "release:\n  collect: auto\n   extra: 1\n", r"^policy\.yaml:4:9: not valid YAML: mapping values"),
    (V + "release:\n\tcollect: auto\n", r":3:1: not valid YAML: .*'\\t'.*; YAML does not allow tabs"),
    (V + "---\nversion: 1\n", r":2:1: not valid YAML: .*a policy is one YAML document"),
    ("version: [1\n", r"^policy\.yaml:2:1: not valid YAML: .*check the indentation"),
    (V + "x: '\x07'\n", r"^policy\.yaml:2:5: control character U\+0007 is not allowed in YAML"),
    (V + "x: *nowhere\n", r":2:4: not valid YAML: found undefined alias 'nowhere'"),
]
# fmt: on


def test_the_release_core_is_a_release_setting_and_an_action_option():
    assert HookPolicy.default().release.core == "ddo_hooks"
    policy = load(
        V + "release: {core: ddo, collect: full}\n"
        "boundaries:\n"
        "  after_call:\n"
        "    actions: [{name: host_cache_release, options: {core: ddo_hooks, min_releasable_bytes: 1MiB}}]\n"
    )
    assert policy.release.core == "ddo"
    assert policy.actions("before_vae")[0].options == HostCacheReleaseOptions(collect="full", core="ddo")
    assert policy.actions("after_call")[0].options.core == "ddo_hooks"  # this boundary's own core
    assert policy.locate(("release", "core")) == "policy.yaml:2:11"
    assert_round_trips(policy)
    schema = policy_json_schema()["$defs"]["HostCacheReleaseOptions"]["properties"]["core"]
    assert (schema["enum"], schema["default"]) == (["ddo_hooks", "ddo"], "ddo_hooks")


@pytest.mark.parametrize(("text", "message"), WRONG_VALUES)
def test_a_wrong_value_is_reported_at_its_line_with_the_fix(text, message):
    with pytest.raises(PolicyError, match=message) as info:
        load(text)
    assert isinstance(info.value.__cause__, ValidationError)


@pytest.mark.parametrize(("text", "message"), MISSHAPEN)
def test_an_empty_or_misshapen_document_or_a_wrong_version_says_what_a_policy_looks_like(text, message):
    with pytest.raises(PolicyError, match=message):
        load(text)


def test_a_wrong_version_does_not_hide_the_other_problems():
    with pytest.raises(PolicyError) as info:
        load("zzz: 1\nversion: 2\nrelease: {collect: ful}\n")
    assert str(info.value).splitlines() == [
        "policy.yaml:1:1: zzz: unknown key (allowed: version, enabled, device, report_sink, report_sink_failure, "
        "keep_reports, release, boundaries, pinned_copies, auxiliary_sources, offload)",
        "policy.yaml:2:1: version: unsupported version 2; supported versions: 1 (write 'version: 1')",
        "policy.yaml:3:11: release.collect: 'ful' is not one of full, young, auto; did you mean 'full'?",
    ]


def test_every_problem_is_reported_one_per_line_in_file_order():
    with pytest.raises(PolicyError) as info:
        load(V + "enabled: maybe\nrelease: {collect: ful}\ndevice: cpu\nbogus: 1\n")
    lines = str(info.value).splitlines()
    assert [line.split(": ")[0:2] for line in lines] == [
        ["policy.yaml:2:1", "enabled"],
        ["policy.yaml:3:11", "release.collect"],
        ["policy.yaml:4:1", "device"],
        ["policy.yaml:5:1", "bogus"],
    ]


FIVE_PROBLEMS = (
    V + "boundaries:\n  after_call:\n    actions:\n"
    "      - {name: host_cache_release, options: {collect: sometimes, min_releasable_bytes: lots, trigger: never}}\n"
    "pinned_copies:\n  repack: maybe\n  keep_encoders_pinned: true\n"
)


def test_problems_of_several_sections_and_a_rule_are_all_said_in_one_run():
    # Issue 50: a value in one section (repack: maybe), three options of one action, and a rule across two
    # settings of that same section (keep_encoders_pinned without from_files): the rule's appeared only once
    # repack was fixed, and the options' one at a time.
    with pytest.raises(PolicyError) as info:
        load(FIVE_PROBLEMS)
    assert [line.split(": ")[1] for line in str(info.value).splitlines()] == [
        "boundaries.after_call.actions[0].options.collect",
        "boundaries.after_call.actions[0].options.min_releasable_bytes",
        "boundaries.after_call.actions[0].options.trigger",
        "pinned_copies.repack",
        "pinned_copies.keep_encoders_pinned",
    ]
    assert "keep_encoders_pinned pins the encoders from their files: set from_files" in str(info.value)


def test_a_rule_that_reads_a_setting_that_did_not_parse_says_nothing_of_it():
    # from_files: bogus is its own problem; that keep_encoders_pinned lacks a from_files would follow from it
    with pytest.raises(PolicyError) as info:
        load(V + "pinned_copies: {from_files: bogus, keep_encoders_pinned: true}\n")
    assert [line.split(": ")[1] for line in str(info.value).splitlines()] == ["pinned_copies.from_files"]


@pytest.mark.parametrize(("text", "message"), UNSAFE_YAML)
def test_yaml_that_is_ambiguous_or_unsafe_is_refused_at_its_position(text, message):
    with pytest.raises(PolicyError, match=message):
        load(text)


def test_every_duplicate_key_is_reported():
    with pytest.raises(PolicyError) as info:
        load(V + "enabled: true\nenabled: false\nrelease: {}\nrelease: {}\n")
    assert len(str(info.value).splitlines()) == 2


@pytest.mark.parametrize(("text", "message"), BAD_SYNTAX)
def test_a_yaml_syntax_error_is_reported_at_the_yaml_mark(text, message):
    with pytest.raises(PolicyError, match=message) as info:
        load(text)
    assert isinstance(info.value.__cause__, yaml.YAMLError)


def test_a_document_that_expands_too_far_is_refused():
    bomb = V + "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for i in range(1, 7):
        bomb += f"{chr(97 + i)}: &{chr(97 + i)} [{', '.join(['*' + chr(96 + i)] * 10)}]\n"
    with pytest.raises(PolicyError, match=r"expands to more than 100000 YAML nodes; use fewer aliases"):
        load(bomb)


def test_a_document_nested_too_deeply_is_refused():
    with pytest.raises(PolicyError, match=r"nested too deeply|not valid YAML"):
        load(V + "x: " + "[" * 5000 + "]" * 5000 + "\n")


# -- files ----------------------------------------------------------------------------------


def test_a_missing_file_names_the_path(tmp_path):
    with pytest.raises(PolicyError, match=r"nope\.yaml: no such policy file \(looked for .*\); check the") as info:
        HookPolicy.from_yaml(tmp_path / "nope.yaml")
    assert isinstance(info.value.__cause__, FileNotFoundError)


def test_a_directory_is_not_a_policy_file(tmp_path):
    with pytest.raises(PolicyError, match=r"is a directory, not a policy file; pass a \.yaml file's path") as info:
        HookPolicy.from_yaml(tmp_path)
    assert isinstance(info.value.__cause__, OSError)


def test_a_binary_file_is_refused(tmp_path):
    path = write(tmp_path, b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    with pytest.raises(PolicyError, match=r"policy\.yaml: looks like a binary file \(NUL byte at offset 8\)"):
        HookPolicy.from_yaml(path)


def test_a_file_that_is_not_utf8_is_refused(tmp_path):
    path = write(tmp_path, "version: 1\nreport_sink: r\xe9sum\xe9.jsonl\n".encode("latin-1"))
    with pytest.raises(PolicyError, match=r"is not UTF-8 text \(byte 0xe9 at offset 25\); save .* as UTF-8") as info:
        HookPolicy.from_yaml(path)
    assert isinstance(info.value.__cause__, UnicodeDecodeError)


def test_a_utf8_file_with_a_byte_order_mark_loads(tmp_path):
    path = write(tmp_path, "\ufeffversion: 1\nreport_sink: résumé.jsonl\n".encode())
    assert HookPolicy.from_yaml(path).report_sink == "résumé.jsonl"


def test_errors_from_a_file_name_the_file(tmp_path):
    path = write(tmp_path, "version: 1\nboundaries:\n    before_vea: {}\n")
    with pytest.raises(PolicyError, match=rf"^{re.escape(str(path))}:3:5: boundaries\.before_vea: unknown key"):
        HookPolicy.from_yaml(path)


def test_from_yaml_needs_a_path():
    with pytest.raises(PolicyError, match=r"from_yaml expects a path \(str or os\.PathLike\), got int"):
        HookPolicy.from_yaml(3)  # type: ignore[arg-type]


def test_from_yaml_text_needs_text():
    with pytest.raises(PolicyError, match=r"<string>: expected the policy as text \(str\), got bytes"):
        HookPolicy.from_yaml_text(b"version: 1\n")  # type: ignore[arg-type]


SELF_CONTAINING: dict = {}
SELF_CONTAINING["me"] = SELF_CONTAINING


def with_options(options: object) -> dict:
    return {"version": 1, "boundaries": {"after_call": {"actions": [{"name": "x", "options": options}]}}}


# fmt: off
BAD_MAPPINGS = [
    (None, r"^<mapping>: the policy is empty"),
    ([1], r"^<mapping>: the top level must be a mapping .*got a list"),
    ({"version": 1, "boundaries": {"before_vea": {}}}, r"^<mapping>: boundaries\.before_vea: unknown key"),
    ({"version": 1, 5: "x"}, r"^<mapping>: key 5 is not a string; write it as a string$"),
    ({"version": 1, "release": {"min_releasable_bytes": -1}}, r"release\.min_releasable_bytes: -1 is negative"),
    ({"version": 1, "release": {"min_releasable_bytes": 2**63}}, r"min_releasable_bytes: .* larger than 8 EiB"),
    (with_options({1: 2}), r"actions\[0\]\.options: option key 1 is not a string"),
    (with_options({"o": object()}), r"options\.o: a object is not a JSON value"),
    (with_options(SELF_CONTAINING), r"options\.me: options nest more than 64 levels deep \(or contain themselves\)"),
]
# fmt: on


@pytest.mark.parametrize(("data", "message"), BAD_MAPPINGS)
def test_from_mapping_reports_like_from_yaml_without_positions(data, message):
    with pytest.raises(PolicyError, match=message):
        HookPolicy.from_mapping(data)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("data", "message"), [(d, m) for d, m in BAD_MAPPINGS if isinstance(d, dict) and all(isinstance(k, str) for k in d)]
)
def test_constructing_the_model_directly_reports_like_from_mapping(data, message):
    with pytest.raises(PolicyError, match=message.replace("<mapping>", r"HookPolicy\(\.\.\.\)")) as info:
        HookPolicy(**data)
    assert not isinstance(info.value, ValidationError)
    with pytest.raises(PolicyError) as mapped:
        HookPolicy.from_mapping(data)
    assert str(info.value) == str(mapped.value).replace("<mapping>", "HookPolicy(...)")


def test_constructing_the_model_directly_says_every_problem_in_words():
    with pytest.raises(PolicyError) as info:
        HookPolicy(version=1, device="tpu", keep_reports=-1, release={"collect": "sometimes"})
    lines = str(info.value).splitlines()
    assert sorted(line.split(": ")[1] for line in lines) == ["device", "keep_reports", "release.collect"]
    assert all(line.startswith("HookPolicy(...): ") for line in lines)
    assert "validation error" not in str(info.value)
    assert "Input should" not in str(info.value)
    assert HookPolicy(version=1, device="cuda:1").device == "cuda:1"


def test_the_loader_is_a_safe_loader_and_builds_no_python_objects():
    assert issubclass(PolicyLoader, yaml.SafeLoader)
    with pytest.raises(PolicyError, match="unsupported YAML tag"):
        load_yaml("x: !!python/object/apply:os.getcwd []\n")


# -- the schema and the examples ------------------------------------------------------------


def test_the_checked_in_policy_schema_equals_the_generated_one():
    checked_in = (SCHEMA_DIR / "hook-policy.schema.json").read_text(encoding="utf-8")
    assert checked_in == render(policy_json_schema()), "run `python -m ddo_hooks.cli.schema` and commit the result"


def test_the_schema_is_strict_and_offers_both_forms_of_sizes_and_actions():
    schema = policy_json_schema()
    assert schema["required"] == ["version"]
    assert schema["properties"]["version"]["const"] == 1
    assert all(d["additionalProperties"] is False for d in schema["$defs"].values() if "properties" in d)
    assert schema["additionalProperties"] is False
    items = schema["$defs"]["BoundaryPolicy"]["properties"]["actions"]["items"]["anyOf"]
    assert [i.get("type") or i["$ref"] for i in items] == ["string", "#/$defs/ActionSpec"]
    size = schema["$defs"]["HostCacheReleaseOptions"]["properties"]["min_releasable_bytes"]["anyOf"]
    assert [s["type"] for s in size] == ["integer", "string"]


def test_there_are_two_to_five_examples_and_each_loads_with_the_schema_comment():
    examples = sorted(EXAMPLES.glob("*.yaml"))
    assert 2 <= len(examples) <= 5
    for path in examples:
        text = path.read_text(encoding="utf-8")
        assert text.splitlines()[0] == SCHEMA_COMMENT, path.name
        schema = (path.parent / SCHEMA_COMMENT.split("$schema=")[1]).resolve()
        assert schema == (SCHEMA_DIR / "hook-policy.schema.json").resolve()
        HookPolicy.from_yaml(path)


def test_the_packaged_default_names_the_schema_relative_to_itself():
    first = DEFAULT_YAML.read_text(encoding="utf-8").splitlines()[0]
    relative = first.split("$schema=")[1]
    assert (DEFAULT_YAML.parent / relative).resolve() == (SCHEMA_DIR / "hook-policy.schema.json").resolve()


# -- fuzzing: only PolicyError escapes, and valid policies round-trip ------------------------

# fmt: off
KEYS = [
    "version", "enabled", "device", "report_sink", "release", "collect", "min_releasable_bytes", "core",
    "boundaries", *BOUNDARIES, "actions", "name", "options", "auxiliary_sources", "max_copy_bytes",
]
scalars = (
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats()
    | st.text(max_size=12) | st.sampled_from(["cuda", "cuda:1", "16MiB", "-1KiB", "host_cache_release", "auto"])
)
junk = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), inner),
    max_leaves=25,
)
documents = st.dictionaries(st.sampled_from(KEYS), junk, max_size=6).map(lambda d: {"version": 1, **d}) | junk

action_names = st.from_regex(r"[a-z][a-z0-9_.\-]{0,10}", fullmatch=True)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
options = st.dictionaries(st.text(max_size=6), json_values, max_size=3)
action = action_names | st.fixed_dictionaries({"name": action_names}, optional={"options": options})
unique_actions = st.lists(action, min_size=1, max_size=3, unique_by=lambda a: a if isinstance(a, str) else a["name"])
boundary = st.fixed_dictionaries({}, optional={"enabled": st.booleans(), "actions": unique_actions})
units = st.sampled_from(["", "B", "KB", "MiB", "gib"])
sizes = st.integers(0, 2**63 - 1) | st.builds("{}{}{}".format, st.integers(0, 4096), st.sampled_from(["", " "]), units)
# A sink attach() could open: no NUL character, and no '~user' that may name nobody here.
sinks = st.none() | st.text(
    st.characters(exclude_characters="\x00", exclude_categories=["Cs"]),  # a lone surrogate is no file name
    min_size=1,
    max_size=20,
).filter(
    lambda sink: not sink.startswith("~")
)
valid_documents = st.fixed_dictionaries({"version": st.just(1)}, optional={
    "enabled": st.booleans(),
    "device": st.sampled_from(["cuda", "cuda:0", "cuda:3"]),
    "report_sink": sinks,
    "release": st.fixed_dictionaries({}, optional={
        "collect": st.sampled_from(["full", "young", "auto"]), "min_releasable_bytes": sizes,
    }),
    "boundaries": st.fixed_dictionaries({}, optional={name: boundary for name in BOUNDARIES}),
    "auxiliary_sources": st.fixed_dictionaries({}, optional={"enabled": st.booleans(), "max_copy_bytes": sizes}),
})
# fmt: on


def inert(data: dict) -> bool:
    boundaries = data.get("boundaries", {})
    return data.get("enabled", True) and not any(boundaries.get(b, {}).get("enabled", True) for b in BOUNDARIES)


def outcome(loader, source) -> HookPolicy | PolicyError:
    """The policy, or the PolicyError; any other exception fails the test."""
    try:
        return loader(source)
    except PolicyError as e:
        return e


def assert_round_trips(policy: HookPolicy) -> None:
    dumped = policy.model_dump(mode="json")
    assert HookPolicy.from_mapping(dumped) == policy
    assert HookPolicy.from_yaml_text(yaml.safe_dump(dumped)) == policy


@settings(max_examples=300, deadline=None)
@given(documents)
def test_fuzz_any_yaml_document_gives_a_policy_or_a_policy_error(data):
    try:
        text = yaml.safe_dump(data, allow_unicode=True)
    except yaml.YAMLError:
        return
    for result in (outcome(load, text), outcome(HookPolicy.from_mapping, data)):
        if isinstance(result, PolicyError):
            assert str(result).strip()
        else:
            assert_round_trips(result)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_fuzz_any_file_gives_a_policy_or_a_policy_error(tmp_path, raw):
    path = write(tmp_path, raw)
    result = outcome(HookPolicy.from_yaml, path)
    assert isinstance(result, HookPolicy) or str(result).startswith(str(path))


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("version: 1\n-[]{},&*!|>'\"%@`#?~abc\t ")), max_size=60))
def test_fuzz_yaml_punctuation_gives_a_policy_or_a_policy_error(text):
    assert isinstance(outcome(load, text), (HookPolicy, PolicyError))


@settings(max_examples=300, deadline=None)
@given(valid_documents)
def test_fuzz_valid_policies_load_and_round_trip(data):
    if inert(data):
        with pytest.raises(PolicyError, match="every boundary is disabled"):
            HookPolicy.from_mapping(data)
        return
    policy = HookPolicy.from_mapping(data)
    assert_round_trips(policy)
    assert load(yaml.safe_dump(data)) == policy  # (allow_unicode=True mangles U+0085 in PyYAML)


def test_a_number_too_long_to_convert_is_a_policy_error_at_its_position():
    text = "version: 1\nrelease:\n  min_releasable_bytes: " + "9" * 5000 + "\n"
    with pytest.raises(PolicyError, match=r"^p\.yaml:3:25: release\.min_releasable_bytes: cannot be read as a value"):
        HookPolicy.from_yaml_text(text, source="p.yaml")


# -- keep_reports is bounded where attach can keep them ----------------------------------------


def test_keep_reports_is_bounded_in_the_model_and_the_schema_by_the_trackers_bound():
    assert MAX_RECORDS == 100_000
    assert HookPolicy.from_mapping({"version": 1, "keep_reports": MAX_RECORDS}).keep_reports == MAX_RECORDS
    for too_many in (MAX_RECORDS + 1, 2**63, 10**5000):
        with pytest.raises(PolicyError, match=r"^<mapping>: keep_reports: .* is more than 100,000, the most reports"):
            HookPolicy.from_mapping({"version": 1, "keep_reports": too_many})
    bound = policy_json_schema()["properties"]["keep_reports"]
    assert (bound["minimum"], bound["maximum"]) == (0, MAX_RECORDS)
    checked_in = json.loads((SCHEMA_DIR / "hook-policy.schema.json").read_text(encoding="utf-8"))
    assert checked_in["properties"]["keep_reports"]["maximum"] == MAX_RECORDS


def test_a_policy_keeping_the_most_reports_attaches_and_one_keeping_more_fails_validate_policy(tmp_path):
    most = HookPolicy.from_mapping({"version": 1, "keep_reports": MAX_RECORDS})
    with ddo_hooks.attach(build_pipeline("sd"), most) as attachment:
        assert attachment.tracker.max_records == MAX_RECORDS
    assert main(["validate-policy", str(write(tmp_path, V + f"keep_reports: {2**63}\n"))]) == 1


def test_attach_takes_a_presets_name_where_no_file_of_that_name_exists(tmp_path, monkeypatch):
    from ddo_hooks import attach
    from ddo_hooks.testing.tiny_pipelines import build_pipeline

    monkeypatch.chdir(tmp_path)
    pipe = build_pipeline("sd")
    with attach(pipe, "lowest-peak") as attachment:
        assert attachment.policy == HookPolicy.preset("lowest-peak")
    (tmp_path / "lowest-peak").write_text("version: 1\nenabled: false\n")  # a file of that name is the file
    with attach(pipe, "lowest-peak") as attachment:
        assert not attachment.policy.enabled
    with pytest.raises(PolicyError, match="lowest-peek: no such policy file, and no preset of that name; did you "
                       "mean 'lowest-peak'\\? check the path, or give a preset: default, lowest-peak, "):  # fmt: skip
        attach(pipe, "lowest-peek")
