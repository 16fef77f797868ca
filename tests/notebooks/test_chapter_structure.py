"""Chapters 3–5 as a learner and papermill read them (issue #13): every parameter of the
parameters cell is found by ``papermill.inspect_notebook`` with its full value; each chapter
ends with a recap and a "Next:" line before the Checkpoint, which ends the lesson; the speed comparisons
with Megatron sit in an "Under the hood" appendix after the Checkpoint, collapsed in JupyterLab (chapters 3–4,
issue #24)."""
from __future__ import annotations

import ast
import json
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = ["03_blending", "04_packing_and_masks", "05_nccl_collectives"]


def _cells(name):
    return json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text(encoding="utf-8"))["cells"]


def _appendix_start(cells):
    """Index of the "## Under the hood" heading after the Checkpoint, or len(cells) when there is none."""
    starts = [i for i, c in enumerate(cells)
              if c["cell_type"] == "markdown" and "".join(c["source"]).startswith("## Under the hood")]
    return starts[0] if starts else len(cells)


def _parameters_source(name):
    cells = [c for c in _cells(name) if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(cells) == 1, f"{name}: expected exactly one cell tagged 'parameters', found {len(cells)}"
    return "".join(cells[0]["source"])


@pytest.mark.parametrize("name", CHAPTERS)
def test_papermill_finds_every_parameter_with_its_value(name):
    papermill = pytest.importorskip("papermill")
    source = _parameters_source(name)
    assigned = {}
    for node in ast.parse(source).body:
        assert isinstance(node, ast.Assign) and len(node.targets) == 1, \
            f"{name}: the parameters cell may only hold 'name = value' lines, found {ast.dump(node)[:60]}"
        assigned[node.targets[0].id] = ast.get_source_segment(source, node.value)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = papermill.inspect_notebook(str(ROOT / "notebooks" / f"{name}.ipynb"))
    unparsed = [str(w.message) for w in caught if "Unable to parse" in str(w.message)]
    assert not unparsed, f"{name}: papermill cannot parse {unparsed}"
    assert set(found) == set(assigned), f"{name}: papermill found {sorted(found)}, the cell assigns {sorted(assigned)}"
    for key, value in assigned.items():
        assert found[key]["default"].strip() == value.strip(), \
            f"{name}: papermill reads {key} = {found[key]['default']!r}, the cell says {value!r}"


@pytest.mark.parametrize("name", CHAPTERS)
def test_recap_and_next_come_just_before_the_checkpoint(name):
    cells = _cells(name)
    lesson = cells[:_appendix_start(cells)]
    last = "".join(lesson[-1]["source"])
    assert lesson[-1]["cell_type"] == "markdown" and last.startswith("## Checkpoint"), \
        f"{name}: Checkpoint does not end the lesson"
    assert "Next" not in last, f"{name}: the Next line belongs before the Checkpoint"
    before = "".join(lesson[-2]["source"])
    assert "## Recap" in before and "**Next:**" in before, f"{name}: no recap with a Next line before the Checkpoint"
    assert "Try this" in "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


@pytest.mark.parametrize("name", ["03_blending", "04_packing_and_masks"])
def test_speed_comparisons_are_in_the_under_the_hood_appendix(name):
    cells = _cells(name)
    headings = [i for i, c in enumerate(cells)
                if c["cell_type"] == "markdown" and "".join(c["source"]).startswith("## ")]
    under = [i for i in headings if "".join(cells[i]["source"]).startswith("## Under the hood")]
    assert len(under) == 1, f"{name}: expected one '## Under the hood' section"
    before = [("".join(cells[i]["source"]).splitlines()[0]) for i in headings if i < under[0]][-2:]
    assert before == ["## Recap", "## Checkpoint (중간 점검) — §6.2.7"], \
        f"{name}: the appendix follows the Recap and the Checkpoint"
    assert [i for i in headings if i > under[0]] == [], f"{name}: nothing follows the appendix"
    assert cells[under[0]]["metadata"].get("jp-MarkdownHeadingCollapsed") is True, \
        f"{name}: the appendix opens collapsed"
    for i, c in enumerate(cells):
        if c["cell_type"] == "code" and "benchmarks" in "".join(c["source"]):
            assert i > under[0], f"{name}: cell {i} quotes a benchmark before the Under the hood section"
