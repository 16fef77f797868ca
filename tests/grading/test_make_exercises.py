"""Unit tests of the solution → exercise generator."""
from __future__ import annotations

import nbformat
import pytest

from labsupport.workbook.make_exercises import STUB, SolutionMarkupError, make_exercise, strip_solutions


def test_region_becomes_stub_at_marker_indentation():
    src = ("def f(x):\n    '''doc'''\n    ### BEGIN SOLUTION\n    y = x + 1\n    return y\n    ### END SOLUTION\n"
           "\nprint(1)")
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
    assert "Exercise notebook" in ex.cells[1].source
    assert "solutions" not in ex.cells[1].source.lower(), "the banner must not point at the answers"
    assert ex.cells[0].source == "# Chapter 1 — Demo: exercises"
    assert nb.cells[1].execution_count == 3, "the solution notebook itself is not modified"


def test_notebook_without_regions_is_refused():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    with pytest.raises(SolutionMarkupError, match="no '### BEGIN SOLUTION'"):
        make_exercise(nb, "02_x.ipynb")


# ----------------------------------------------------------------------------- the commands (issue #13 item 14)

def test_make_exercises_bad_markup_is_one_line_exit_1(tmp_path, capsys):
    from labsupport.workbook import make_exercises as mx

    sol, ex = tmp_path / "solutions", tmp_path / "exercises"
    sol.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("def f():\n    ### BEGIN SOLUTION\n    return 1\n")])
    nbformat.write(nb, sol / "01_demo.ipynb")
    status = mx.main(["--solutions", str(sol), "--exercises", str(ex)])
    err = capsys.readouterr().err
    assert status == 1 and len(err.strip().splitlines()) == 1 and "01_demo.ipynb" in err and "END SOLUTION" in err, err
    status = mx.main(["--solutions", str(tmp_path / "none"), "--exercises", str(ex)])
    err = capsys.readouterr().err
    assert status == 1 and "no solutions notebooks" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit) as exc:
        mx.main(["--bogus"])
    assert exc.value.code == 2


def test_runall_dry_run_checks_and_runs_nothing(tmp_path, capsys):
    """--dry-run (what tests/notebooks/test_try_this.py appends to a page's runall command): the same refusals,
    exit 0 when a run would start, and nothing written."""
    from labsupport.workbook import runall

    status = runall.main(["--out", str(tmp_path / "out"), "--dry-run", "-p", "vocab_size", "16000", "01"])
    out = capsys.readouterr().out
    assert status == 0 and out == "would run notebooks/01_tokenization.ipynb with {'vocab_size': 16000}\n", out
    assert not list(tmp_path.iterdir()), "nothing ran, no output folder"
    assert runall.main(["--dry-run", "-p", "vocab_size", "big", "01"]) == 2    # a value of another type
    assert runall.main(["--dry-run", "99"]) == 2


def test_runall_refuses_an_unknown_parameter_and_a_missing_chapter(tmp_path, capsys):
    from labsupport.workbook import runall

    status = runall.main(["--out", str(tmp_path), "-p", "no_such_knob", "3", "00"])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert "00_orientation.ipynb has no parameter 'no_such_knob'" in err and "overrides" in err
    assert not list(tmp_path.iterdir()), "nothing ran"
    status = runall.main(["--out", str(tmp_path), "99"])
    err = capsys.readouterr().err
    assert status == 2 and "no chapter '99'" in err and len(err.strip().splitlines()) == 1
    (tmp_path / "file").write_text("x")
    status = runall.main(["--out", str(tmp_path / "file" / "out"), "00"])
    err = capsys.readouterr().err
    assert status == 1 and len(err.strip().splitlines()) == 1 and "file" in err and "Traceback" not in err, err
