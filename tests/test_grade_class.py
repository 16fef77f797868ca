"""The grader against a class of adversarial submissions (issue #12): every one gets the grade an
honest instructor would give, the grader survives all of them, and both CSVs are complete.

The class is generated from solutions/ and exercises/ by tests/adversarial_class.py."""
from __future__ import annotations

import csv
import time

import pytest

from labsupport.workbook import grade
from tests.adversarial_class import MARKER, QUESTIONS, build_class, student_names

STUDENTS = student_names()


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("class")
    expected = build_class(folder / "submissions")
    out = folder / "book" / "grades.csv"
    started = time.monotonic()
    status = grade.main([str(folder / "submissions"), "--out", str(out), "--seed", "class-test", "--jobs", "2",
                         "--cell-timeout", "4", "--timeout", "6", "--memory-mb", "1536"])
    print(f"\ngraded a class of {len(expected)} chapter-3 submissions in {time.monotonic() - started:.1f} s")
    assert status == 0
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    summary = list(csv.DictReader(out.with_name("summary.csv").open(encoding="utf-8")))
    return expected, rows, summary, out


def test_every_student_and_question_has_a_row(graded):
    expected, rows, summary, _ = graded
    assert list(rows[0]) == grade.FIELDS
    got = {(r["student"], r["question"]) for r in rows}
    assert got == {(s, q) for s in expected for q in QUESTIONS}
    assert {r["student"] for r in summary} == set(expected)
    assert all(r["max_points"] == "5" and r["chapter"] == "ch03" for r in summary)


@pytest.mark.parametrize("student", STUDENTS)
def test_the_honest_grade(graded, student):
    expected, rows, summary, _ = graded
    want = expected[student]
    mine = {r["question"]: r for r in rows if r["student"] == student}
    got = tuple(float(mine[q]["points"]) for q in QUESTIONS)
    assert got == tuple(float(p) for p in want.points), {q: (mine[q]["status"], mine[q]["reason"][:160]) for q in QUESTIONS}
    for q, status in want.status.items():
        assert mine[q]["status"] == status, (q, mine[q]["reason"])
    for q, text in want.flags.items():
        assert text in mine[q]["flags"], (q, mine[q]["flags"])
    for q, text in want.reason.items():
        assert text in mine[q]["reason"], (q, mine[q]["reason"])
    total = next(r for r in summary if r["student"] == student)
    assert float(total["points"]) == sum(want.points)


def test_unflagged_honest_answers_carry_no_flags(graded):
    _, rows, _, _ = graded
    for student in ("a01_correct", "a02_untouched", "a03_partial", "a29_markers_rewritten"):
        assert not any(r["flags"] for r in rows if r["student"] == student), student


def test_the_repository_is_left_as_it_was(graded):
    assert not MARKER.exists()


def test_similar_answers_are_listed(graded):
    *_, out = graded
    pairs = list(csv.DictReader(out.with_name("similarity.csv").open(encoding="utf-8")))
    assert any({p["student_a"], p["student_b"]} == {"a01_correct", "a31_near_copy"} and p["question"] == "q1"
               for p in pairs)


def test_feedback_and_executed_notebooks_are_kept(graded):
    *_, out = graded
    feedback = (out.parent / "feedback" / "a26_hard_coded__ch03.txt").read_text(encoding="utf-8")
    assert "❌ q1 failed" in feedback and "hint:" in feedback and "✅ q2 passed" in feedback
    assert (out.parent / "executed" / "a01_correct__ch03.ipynb").is_file()
    huge = (out.parent / "executed" / "a27_huge_output__ch03.ipynb").stat().st_size
    assert huge < 200_000
