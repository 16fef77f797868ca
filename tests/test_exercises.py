"""Exercises are generated from solutions, and the checks are proven on both.

Every solution notebook passes every check it calls; every untouched exercise notebook runs to the
end with each of those checks failing or "not attempted".
"""
from __future__ import annotations

import nbformat
import pytest

from labsupport.workbook import make_exercises
from labsupport.workbook.grade import grade_notebook
from labsupport.paths import REPO_ROOT

SOLUTIONS = sorted((REPO_ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))


def test_every_chapter_has_a_solutions_notebook():
    chapters = sorted(p.name for p in (REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert chapters, "no chapter notebooks found"
    assert [p.name for p in SOLUTIONS] == chapters


def test_exercises_are_up_to_date(capsys):
    status = make_exercises.main(["--check"])
    assert status == 0, capsys.readouterr().out


def test_exercises_hold_no_solution_code():
    for sol in SOLUTIONS:
        ex = nbformat.read(REPO_ROOT / "exercises" / sol.name, as_version=4)
        text = "\n".join(c.source for c in ex.cells if c.cell_type == "code")
        assert "### BEGIN SOLUTION" not in text and "### END SOLUTION" not in text
        assert "NotImplementedError" in text
        assert all(not c.get("outputs") for c in ex.cells if c.cell_type == "code")


@pytest.mark.slow
@pytest.mark.parametrize("solution", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_solutions_pass_and_stubs_fail(solution):
    sol_results, sol_error = grade_notebook(solution)
    assert not sol_error, f"solutions/{solution.name} stopped: {sol_error}"
    assert sol_results, f"solutions/{solution.name} calls no check"
    failed = [(r["question"], r["status"], r["message"]) for r in sol_results if r["status"] != "passed"]
    assert not failed, f"solutions/{solution.name}: {failed}"

    exercise = REPO_ROOT / "exercises" / solution.name
    ex_results, ex_error = grade_notebook(exercise)
    assert not ex_error, f"exercises/{solution.name} does not run to the end: {ex_error}"
    asked = {r["question"] for r in sol_results}
    assert {r["question"] for r in ex_results} == asked
    passed = [r["question"] for r in ex_results if r["status"] == "passed"]
    assert not passed, f"untouched stubs pass {passed} in exercises/{solution.name}"
