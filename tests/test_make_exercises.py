"""Unit tests of the solution → exercise generator."""
from __future__ import annotations

import nbformat
import pytest

from labsupport.workbook.make_exercises import STUB, SolutionMarkupError, make_exercise, strip_solutions


def test_region_becomes_stub_at_marker_indentation():
    src = "def f(x):\n    '''doc'''\n    ### BEGIN SOLUTION\n    y = x + 1\n    return y\n    ### END SOLUTION\n\nprint(1)"
    out, n = strip_solutions(src)
    assert n == 1
    assert out == f"def f(x):\n    '''doc'''\n    {STUB}\n\nprint(1)"


def test_two_regions_and_code_outside_kept():
    src = "a = 1\n### BEGIN SOLUTION\nb = 2\n### END SOLUTION\nc = 3\n  ### BEGIN SOLUTION\n  d\n  ### END SOLUTION"
    out, n = strip_solutions(src)
    assert n == 2
    assert out.splitlines() == ["a = 1", STUB, "c = 3", "  " + STUB]


@pytest.mark.parametrize("src, fragment", [
    ("### BEGIN SOLUTION\nx\n### BEGIN SOLUTION\n### END SOLUTION", "line 3: BEGIN SOLUTION inside"),
    ("x\n### END SOLUTION", "line 2: END SOLUTION without"),
    ("### BEGIN SOLUTION\nx", "never closed"),
])
def test_bad_markup_is_named(src, fragment):
    with pytest.raises(SolutionMarkupError, match=fragment):
        strip_solutions(src, where="demo.ipynb, cell 3")


def test_outputs_cleared_and_banner_added():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Chapter 1 — Demo: exercises with solutions"),
        nbformat.v4.new_code_cell("def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION",
                                  execution_count=3, outputs=[nbformat.v4.new_output("stream", text="hi")]),
    ])
    ex = make_exercise(nb, "01_demo.ipynb")
    code = [c for c in ex.cells if c.cell_type == "code"]
    assert code[0].outputs == [] and code[0].execution_count is None
    assert "solutions/01_demo.ipynb" in ex.cells[1].source
    assert ex.cells[0].source == "# Chapter 1 — Demo: exercises"
    assert nb.cells[1].execution_count == 3, "the solution notebook itself is not modified"


def test_notebook_without_regions_is_refused():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    with pytest.raises(SolutionMarkupError, match="no '### BEGIN SOLUTION'"):
        make_exercise(nb, "02_x.ipynb")
