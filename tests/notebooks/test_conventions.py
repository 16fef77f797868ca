"""Every chapter notebook follows CONTRIBUTING.md: title, parameters, setup, checkpoint, tags."""
from __future__ import annotations

import ast
import re

import nbformat
import pytest

from labsupport.paths import REPO_ROOT

CHAPTERS = sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
# "# Chapter N — Topic (한국어 용어) · book §6.2.x" (chapter 5 cites seed 001 beside the book)
TITLE = re.compile(r"^# Chapter (\d+) — .+\(.*[\uac00-\ud7a3].*\) · (book §|seed )")


def _nb(path):
    return nbformat.read(path, as_version=4)


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_title_cell(path):
    first = _nb(path).cells[0]
    assert first.cell_type == "markdown"
    head = first.source.splitlines()[0]
    m = TITLE.match(head)
    assert m, f"{path.name}: title must read '# Chapter N — Topic (한국어) · book §6.2.x', got {head!r}"
    assert int(m.group(1)) == int(path.name[:2])
    for part in ("Learning goals", "Prerequisites", "Time to complete"):
        assert part in first.source, f"{path.name}: title cell lacks '{part}'"


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_parameters_cell(path):
    cells = _nb(path).cells
    tagged = [i for i, c in enumerate(cells) if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{path.name}: exactly one cell tagged 'parameters'"
    cell = cells[tagged[0]]
    names = {t.id for node in ast.walk(ast.parse(cell.source)) if isinstance(node, ast.Assign) for t in node.targets
             if isinstance(t, ast.Name)}
    assert {"device", "seed"} <= names, f"{path.name}: parameters cell must define device and seed"
    following = "".join(c.source for c in cells[tagged[0] + 1:] if c.cell_type == "code")
    assert "labsupport.setup(" in following, \
        f"{path.name}: call labsupport.setup(seed=seed, device=device) after the parameters"


def lesson_cells(cells):
    """The lesson: every cell before the optional "## Under the hood" appendix that may follow the Checkpoint."""
    starts = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and c.source.startswith("## Under the hood")]
    return cells[:starts[0]] if starts else cells


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_checkpoint_is_last(path):
    md = [c for c in lesson_cells(_nb(path).cells) if c.cell_type == "markdown"]
    assert "Checkpoint" in md[-1].source.splitlines()[0], f"{path.name}: the last markdown cell is the Checkpoint"
    assert "- [ ]" in md[-1].source


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_under_the_hood_is_one_collapsed_appendix_after_the_checkpoint(path):
    cells = _nb(path).cells
    lesson = lesson_cells(cells)
    if len(lesson) == len(cells):
        return                                     # a chapter without an appendix
    head = cells[len(lesson)]
    assert lesson[-1].cell_type == "markdown" and lesson[-1].source.startswith("## Checkpoint"), \
        f"{path.name}: '## Under the hood' must come right after the Checkpoint"
    assert head.metadata.get("jp-MarkdownHeadingCollapsed") is True, \
        f"{path.name}: the Under the hood heading opens collapsed (cell metadata jp-MarkdownHeadingCollapsed: true)"
    later = [c.source.splitlines()[0] for c in cells[len(lesson) + 1:]
             if c.cell_type == "markdown" and re.match(r"#{1,2} ", c.source)]
    assert not later, f"{path.name}: the appendix is the last section; found {later} after it"


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_no_path_hacks_and_gpu_cells_are_guarded(path):
    for cell in _nb(path).cells:
        if cell.cell_type != "code":
            continue
        assert "sys.path" not in cell.source, f"{path.name}: import labsupport as a package, no sys.path edits"
        if "requires-gpu" in cell.metadata.get("tags", []):
            assert "cuda_available()" in cell.source and "NO_GPU_NOTE" in cell.source, \
                f"{path.name}: a requires-gpu cell must run on CPU too (see CONTRIBUTING.md)"


def test_same_names_in_all_three_folders():
    names = {folder: sorted(p.name for p in (REPO_ROOT / folder).glob("[0-9][0-9]_*.ipynb"))
             for folder in ("notebooks", "solutions", "exercises")}
    assert names["notebooks"] == names["solutions"] == names["exercises"]


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_time_to_complete_is_the_reading_model_of_this_text(path):
    """The title's "Time to complete" is labsupport.workbook.reading_time's value for the chapter as it reads
    now (words, code lines, cells of the lesson); after editing a chapter:
    .venv/bin/python -m labsupport.workbook.reading_time --write."""
    from labsupport.workbook import reading_time

    assert reading_time.stated(path) == reading_time.sentence(reading_time.estimate(path)), \
        f"{path.name}: run .venv/bin/python -m labsupport.workbook.reading_time --write"


def test_the_reading_model_counts_the_lesson_only(tmp_path):
    from labsupport.workbook import reading_time

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# T\n\n**Time to complete** about 5 minutes.\n\none two three"),
                nbformat.v4.new_code_cell("x = 1\n\n# a comment\nprint(x)"),
                nbformat.v4.new_markdown_cell("## Under the hood\n\nmany words here not counted"),
                nbformat.v4.new_code_cell("y = 2")]
    path = tmp_path / "n.ipynb"
    nbformat.write(nb, path)
    est = reading_time.estimate(path)
    assert (est.words, est.code_lines, est.code_cells) == (5, 2, 1)     # "# T" counts 2 words; the sentence none
    assert reading_time.write(path) and reading_time.stated(path) == reading_time.sentence(est)
    assert not reading_time.write(path)                                 # a second write changes nothing
