"""Exercises are generated from solutions, and the checks are proven on both.

Every solution notebook passes every check it calls; every untouched exercise notebook runs to the
end with each of those checks failing or "not attempted".
"""
from __future__ import annotations

import nbformat
import pytest

from labsupport.workbook import make_exercises
from labsupport.workbook.grading.exercise import discover
from labsupport.workbook.grading.grader import Options, grade_file
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
def test_solutions_pass_and_stubs_fail(solution, tmp_path):
    """Graded as a student's submission would be: the solutions' answers pass every question of the
    chapter, the untouched exercise passes none."""
    chapters = discover()
    chapter = chapters[solution.name[:2]]
    assert chapter.questions, f"exercises/{solution.name} calls no check"
    for folder, want in (("solutions", "passed"), ("exercises", None)):
        graded = grade_file(REPO_ROOT / folder / solution.name, chapters, Options(seed="tests", rounds=1))
        assert [r.question for r in graded.rows] == [q.name for q in chapter.questions]
        statuses = {r.question: (r.status, r.reason) for r in graded.rows}
        if want:
            assert all(s == want for s, _ in statuses.values()), f"{folder}/{solution.name}: {statuses}"
            assert not any(r.flags for r in graded.rows), [r.flags for r in graded.rows]
        else:
            passed = [q for q, (s, _) in statuses.items() if s == "passed"]
            assert not passed, f"untouched stubs pass {passed} in exercises/{solution.name}"
