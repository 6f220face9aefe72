"""The support matrix of docs/pipeline-classes.md: it covers every pipeline class, and its tests exist."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.file_modules import load_file
from test_docs import _collected
from test_structural_pipelines import EXPECTED

from ddo_hooks.testing.structural import CLASS_NAMES

ROOT = Path(__file__).resolve().parent.parent


matrix = load_file(ROOT / "docs" / "pipeline_matrix.py", "ddo_pipeline_matrix")


@pytest.mark.filterwarnings("ignore")  # importing every pipeline module warns about deprecations and torchvision
def test_every_pipeline_class_of_the_installed_diffusers_has_a_verdict():
    census = load_file(ROOT / "scripts" / "pipeline_census.py", "ddo_pipeline_census")
    exported, skipped = census.exported_pipeline_classes()
    known = {row["class"] for row in matrix.rows()}
    missing = sorted({*exported, *(s["class"] for s in skipped)} - known)
    assert not missing, (
        "pipeline classes of this diffusers without a verdict in the matrix: "
        f"{', '.join(missing)}; run scripts/pipeline_census.py and check what they need"
    )
    recorded = json.loads(matrix.CENSUS.read_text(encoding="utf-8"))["diffusers_version"]
    import diffusers

    assert recorded == diffusers.__version__, (
        f"the census is of diffusers {recorded}; re-run scripts/pipeline_census.py"
    )


def test_every_test_the_matrix_names_exists():
    nodes = [node for nodes in matrix.CPU_VERIFIED.values() for node in nodes]
    nodes += [node for modes in matrix.GPU_VERIFIED.values() for node in modes.values()]
    collected = _collected({node.split("::")[0] for node in nodes})
    absent = sorted(node for node in nodes if node not in collected)
    assert not absent, "the matrix names tests that do not exist:\n" + "\n".join(absent)


def test_only_classes_a_test_calls_are_verified():
    verified = {row["class"] for row in matrix.rows() if row["boundaries"] == "verified"}
    assert verified == set(matrix.CPU_VERIFIED)


def test_the_limits_the_census_predicts_are_what_the_structural_tests_observe():
    by_class = {row["class"]: row["limits"] for row in matrix.rows()}
    for name, boundaries in EXPECTED.items():
        if CLASS_NAMES[name] == "WanPipeline":
            continue  # also the plain family
        missed = {b.split(":")[0] for b in boundaries if b.endswith(":not_reached")}
        predicted = {
            b for b in ("before_transformer", "before_vae") if f"`{b}` not reached" in by_class[CLASS_NAMES[name]]
        }
        assert missed == predicted, f"{name}: the tests miss {missed}, the census predicts {predicted}"


def test_the_page_holds_the_generated_matrix():
    page = (ROOT / "docs" / "pipeline-classes.md").read_text(encoding="utf-8")
    assert "<!-- generated: pipeline-matrix -->" in page
    assert "| `FluxPipeline` | verified | run |" in matrix.matrix_markdown()


def test_the_page_counts_run_and_inferred_verdicts_apart_and_lists_the_plain_inferred_once():
    text = matrix.matrix_markdown()
    rows = matrix.rows()
    run = [r for r in rows if r["source"] == matrix.RUN]
    inferred = [r for r in rows if r["source"] == matrix.INFERRED]
    assert {r["class"] for r in run} == set(matrix.CPU_VERIFIED)
    assert len(run) + len(inferred) + text.count("| not checked | - |") == len(rows)
    expected = [r for r in inferred if r["boundaries"] == matrix.EXPECTED]
    assert f"**{len(run)} run**" in text
    assert f"**{len(inferred)} inferred** from the census" in text
    assert (
        f"{len(expected)} expected to work (the same signals as run classes), {len(inferred) - len(expected)}" in text
    )
    plain = [r for r in expected if r["gpu"] == "-" and r["limits"] == "-"]
    table, listed = text.split("\n\n**Inferred, expected", 1)
    assert all(f"| `{r['class']}` |" not in table for r in plain)  # listed once, below the table
    shown = [r for r in rows if r not in plain]
    assert all(f"| `{r['class']}` | {r['boundaries']} | {r['source']} |" in table for r in shown)
    assert listed.rsplit(":** ", 1)[1].rstrip(".\n").split(", ") == [r["class"] for r in plain]
    # the matrix comes after the example with a real model: on the page the nav puts after that example's
    page = (ROOT / "docs" / "pipelines.md").read_text(encoding="utf-8")
    assert "## With a real model" in page
    assert "<!-- generated: pipeline-matrix -->" not in page
    assert "<!-- generated: pipeline-matrix -->" in (ROOT / "docs" / "pipeline-classes.md").read_text(encoding="utf-8")
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert nav.index(" pipelines.md\n") < nav.index(" pipeline-classes.md\n")


ISSUE_20 = {
    "KandinskyCombinedPipeline",
    "KandinskyImg2ImgCombinedPipeline",
    "KandinskyInpaintCombinedPipeline",
    "KandinskyV22CombinedPipeline",
    "KandinskyV22Img2ImgCombinedPipeline",
    "KandinskyV22InpaintCombinedPipeline",
    "StableUnCLIPPipeline",
    "VisualClozePipeline",
    "Kandinsky3Pipeline",
    "Kandinsky3Img2ImgPipeline",
    "HeliosPipeline",
    "Cosmos2_5_TransferPipeline",
}


def test_the_classes_issue_20_names_are_run():
    source = {row["class"]: row["source"] for row in matrix.rows()}
    assert {name: source[name] for name in ISSUE_20} == dict.fromkeys(ISSUE_20, matrix.RUN)
